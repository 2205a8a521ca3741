"""Long trips through the product: ``ev-nav route --confidence`` (table, ``--json``, map), the
fleet service's ``plan_charging`` and ``POST /api/charging-plans`` give the same plan, and bad
requests get one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ev_nav.roads.synthetic import generated_chargers, synthetic_town
from tests.cli_helpers import latlon, run_cli

CAP_WH = 800.0


@pytest.fixture(scope="module")
def long_trip(tmp_path_factory) -> dict[str, object]:
    """A state on a town with chargers, a small-battery car, and a trip that needs a stop."""
    from ev_nav.energy import get_vehicle

    root = tmp_path_factory.mktemp("charging")
    net = synthetic_town(1500, seed=1)
    net = net.with_chargers(generated_chargers(net, 1.0, seed=2, power_kw=100.0))
    netfile = root / "town.npz"
    net.save(netfile)
    id3 = get_vehicle("volkswagen-id3-pro")
    k = CAP_WH / id3.battery_wh
    curve = ", ".join(f"[{s:g}, {p * k:.6g}]" for s, p in id3.charge_curve)
    car = root / "car.toml"
    car.write_text(
        f'preset = "volkswagen-id3-pro"\nbattery_wh = {CAP_WH}\ndc_max_kw = {120 * k:.6g}\n'
        f"charge_curve = [{curve}]\n",
        encoding="utf-8",
    )
    state = root / "state"
    from ev_nav.cli import main

    assert main(["init", str(state), "--network", str(netfile), "--vehicle-file", str(car)]) == 0
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    return {"net": net, "state": state, "from": latlon(net, int(order[5])),
            "to": latlon(net, int(order[-5]))}


def test_route_with_stops_prints_the_plan_and_its_json(long_trip, capsys) -> None:
    t = long_trip
    args = ["route", t["state"], "--from", t["from"], "--to", t["to"], "--soc", "30%",
            "--confidence", "0.95"]
    code, out, err = run_cli(capsys, *args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["feasible"] and doc["stops"] and doc["probability_at_least"] >= 0.95
    assert len(doc["legs"]) == len(doc["stops"]) + 1
    for stop in doc["stops"]:
        assert stop["charge_to_pct"] >= stop["arrival_pct"] - 1e-6
        assert stop["arrival_p5_pct"] < stop["arrival_pct"]
    total = sum(leg["drive_min"] for leg in doc["legs"]) + sum(
        s["charge_min"] + s["overhead_min"] for s in doc["stops"])
    assert doc["total_min"] == pytest.approx(total, abs=0.05)
    # charge_min means charging alone at the plan's level as at each stop's (the plan's was
    # charging plus the stops' fixed minutes); stop_min is the time at the stops
    rounding = 0.01 * len(doc["stops"])
    assert doc["charge_min"] == pytest.approx(sum(s["charge_min"] for s in doc["stops"]),
                                              abs=rounding)
    assert doc["stop_min"] == pytest.approx(
        sum(s["charge_min"] + s["overhead_min"] for s in doc["stops"]), abs=rounding)
    assert doc["total_min"] == pytest.approx(doc["drive_min"] + doc["stop_min"], abs=0.02)
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert "to the destination" in out and "charge to" in out
    assert "every arrival keeps the 10% reserve with probability >=" in out
    page = Path(out.split("map: ")[1].split()[0])
    assert page.is_file() and "leg 1" in page.read_text(encoding="utf-8")
    t["json"] = doc


def test_the_stop_column_is_the_time_at_the_stop(long_trip, capsys) -> None:
    """The table's last column was headed 'charging', but it holds the charging time plus the
    stop's fixed minutes (5.9 'charging' minutes for 0.9 min of charging at 120 kW)."""
    t = long_trip
    args = ["route", t["state"], "--from", t["from"], "--to", t["to"], "--soc", "30%",
            "--confidence", "0.95", "--no-map"]
    doc = json.loads(run_cli(capsys, *args, "--json")[1])
    code, out, _ = run_cli(capsys, *args)
    assert code == 0 and doc["stops"]
    header, *rows = out.splitlines()[1:]
    assert header.split()[-2:] == ["at", "stop"] and "charging" not in header
    for stop, row in zip(doc["stops"], rows, strict=False):
        assert row.endswith(" min")
        shown = float(row.split()[-2])  # one decimal, of the unrounded minutes
        assert shown == pytest.approx(stop["charge_min"] + stop["overhead_min"], abs=0.06)


def test_no_plan_reaching_the_confidence_is_said_with_the_best_one(long_trip, capsys) -> None:
    t = long_trip
    code, out, _ = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                           "--soc", "12%", "--confidence", "0.95", "--max-stops", "0",
                           "--no-map")
    assert code == 3
    assert ("no plan reaches 95%: this is the one found least likely to run empty, then to "
            "miss the reserve") in out
    # no stops allowed: the advice says to allow them; no "0 stops, 5 min each", and a charge
    # below empty is not printed as a negative percentage
    assert "charge more before leaving, allow charging stops (--max-stops N), lower" in out
    assert "0 stops" not in out and "no charging stop" in out
    assert "-" not in out.split("to the destination")[1].splitlines()[0]
    assert "the battery is predicted to run empty on the way" in out


def test_no_plan_on_a_network_without_usable_chargers_says_to_add_some(tmp_path, capsys) -> None:
    """With no charger the car can use, the advice was 'charge more before leaving, lower the
    reserve or the confidence', leaving out the one thing that makes stops possible."""
    net = synthetic_town(1500, seed=1)
    netfile = net.save(tmp_path / "bare.npz")
    state = tmp_path / "state"
    assert run_cli(capsys, "init", state, "--network", netfile, "--vehicle",
                   "volkswagen-id3-pro")[0] == 0
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    code, out, _ = run_cli(capsys, "route", state, "--from", latlon(net, int(order[5])), "--to",
                           latlon(net, int(order[-5])), "--soc", "1%", "--confidence", "0.95",
                           "--no-map")
    assert code == 3 and "0 usable chargers on this network" in out
    assert (f"— add charging sites the car can use ('ev-nav network chargers {netfile} --csv "
            "FILE'), charge more before leaving, lower the reserve or the confidence") in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "planning charging stops needs the departure charge: add --soc"),
        (["--soc", "30%", "--via", "0,0"], "do not combine with --confidence"),
    ],
)
def test_route_with_stops_refuses_what_it_cannot_do(long_trip, capsys, extra, message) -> None:
    t = long_trip
    code, out, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                             "--confidence", "0.95", *extra)
    assert code != 0 and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    "extra",
    [["--max-stops", "2"], ["--max-charge", "80%"], ["--stop-minutes", "3"],
     ["--stop-minutes", "5", "--max-stops", "4"]],
)
def test_stop_options_without_confidence_are_refused(long_trip, capsys, extra) -> None:
    """'route --soc 30% --max-stops 2' (--confidence forgotten) planned and recorded a plain
    trip, exit 0, and the stop options went unused; even at their default values."""
    t = long_trip
    before = run_cli(capsys, "history", t["state"], "--json")[1]
    code, out, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                             "--soc", "30%", *extra)
    assert code == 2 and out == ""
    assert err == (f"ev-nav: error: {extra[0]} shapes charging stops, which only "
                   "--confidence plans: add --confidence (e.g. 0.95)\n")
    assert run_cli(capsys, "history", t["state"], "--json")[1] == before  # nothing recorded


@pytest.mark.parametrize("extra", [["--policy", "ts"], ["--policy", "safe"], ["--seed", "3"]])
def test_route_choice_options_with_confidence_are_refused(long_trip, capsys, extra) -> None:
    """'route --confidence 0.95 --policy safe' printed the same plan as without it: a charging
    plan chooses its legs by the model's mean energy and its joint posterior, never by a
    policy or a Thompson draw."""
    t = long_trip
    code, out, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                             "--soc", "30%", "--confidence", "0.95", *extra)
    assert code == 2 and out == ""
    assert err == (f"ev-nav: error: {extra[0]} chooses a single route; a charging plan "
                   "(--confidence) chooses its legs by the model's mean and joint posterior\n")


@pytest.mark.parametrize("value", ["1", "0.3", "abc", "95"])
def test_confidence_outside_its_range_is_a_one_line_error(long_trip, capsys, value) -> None:
    t = long_trip
    code, _, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                           "--soc", "30%", "--confidence", value)
    assert code == 2 and "--confidence" in err and "Traceback" not in err


def test_service_and_api_plan_the_same_trip(long_trip, capsys) -> None:
    from fastapi.testclient import TestClient

    from ev_nav.server.app import create_app
    from ev_nav.server.service import FleetService

    t = long_trip
    if "json" not in t:
        test_route_with_stops_prints_the_plan_and_its_json(long_trip, capsys)
    cli = t["json"]
    (lat0, lon0), (lat1, lon1) = (tuple(map(float, t[k].split(","))) for k in ("from", "to"))
    with FleetService(t["state"], poll_s=0.05) as svc:
        doc = svc.plan_charging((lat0, lon0), (lat1, lon1), soc="30%", confidence=0.95)
        for key in ("total_min", "stops", "legs", "probability_at_least", "feasible"):
            assert doc[key] == cli[key]
        app = create_app(svc, token="tok")
        with TestClient(app) as client:
            body = {"origin": [lat0, lon0], "goal": [lat1, lon1], "soc": "30%"}
            r = client.post("/api/charging-plans", json=body,
                            headers={"Authorization": "Bearer tok"})
            assert r.status_code == 200, r.text
            assert r.json()["total_min"] == cli["total_min"]
            bad = client.post("/api/charging-plans", json={**body, "confidence": "0.9"},
                              headers={"Authorization": "Bearer tok"})
            assert bad.status_code == 422
            unauth = client.post("/api/charging-plans", json=body)
            assert unauth.status_code == 401
            # at an ambient temperature, as 'route --temperature' (the field was refused)
            code, out, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to",
                                     t["to"], "--soc", "30%", "--confidence", "0.95",
                                     "--temperature", "-10", "--json", "--no-map")
            assert code in (0, 3), err
            cold = json.loads(out)
            r = client.post("/api/charging-plans", json={**body, "temperature": -10},
                            headers={"Authorization": "Bearer tok"})
            assert r.status_code == 200, r.text
            for key in ("total_min", "legs", "probability_at_least"):
                assert r.json()[key] == cold[key], key
            assert cold["arrival_pct"] != cli["arrival_pct"]  # the cold changes the energies
