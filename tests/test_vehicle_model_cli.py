"""``ev-nav route --vehicle-model NAME``: a state learned for one vehicle plans for a catalogue
car (its physics, battery, charging curve and plugs) as the fleet service does for the same
request; the trip records the model; the dead ends name the way out in the caller's terms."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from ev_nav.energy import get_vehicle, segment_energy_wh
from ev_nav.roads.synthetic import generated_chargers, synthetic_town
from tests.cli_helpers import driven_part, latlon, run_cli

MODEL = "volkswagen-id3-pro"


@pytest.fixture(scope="module")
def learned(tmp_path_factory) -> dict[str, object]:
    """A town with chargers, a state for ``sumo-default`` (no known plugs) that has learned
    from one observed drive, and two far-apart points."""
    from ev_nav.cli import main
    from ev_nav.trips.session import trip_history

    root = tmp_path_factory.mktemp("vehicle-model")
    net = synthetic_town(1500, seed=1)
    net = net.with_chargers(generated_chargers(net, 1.0, seed=2, power_kw=100.0))
    netfile = root / "town.npz"
    net.save(netfile)
    state = root / "state"
    assert main(["init", str(state), "--network", str(netfile)]) == 0
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    t = {"net": net, "state": state, "from": latlon(net, int(order[5])),
         "to": latlon(net, int(order[-5]))}
    # something learned: a drive that took 8% more than predicted
    assert main(["route", str(state), "--from", t["to"], "--to", t["from"], "--policy", "mean",
                 "--no-map"]) == 0
    predicted = trip_history(state)[0]["predicted_wh"]
    assert main(["observe", str(state), "1", "--total-wh", f"{1.08 * predicted:.1f}"]) == 0
    return t


def _points(t: dict[str, object]) -> tuple[tuple[float, float], tuple[float, float]]:
    return tuple(tuple(map(float, t[k].split(","))) for k in ("from", "to"))  # type: ignore


def _trip_count(state) -> int:
    from ev_nav.trips.session import trip_history

    return len(trip_history(state))


def test_route_json_is_the_services_document(learned, capsys) -> None:
    from ev_nav.server.service import FleetService

    t = learned
    code, out, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                             "--seed", "7", "--soc", "80%", "--vehicle-model", MODEL,
                             "--dry-run", "--json")
    assert code == 0, err
    cli = json.loads(out)
    origin, goal = _points(t)
    with FleetService(t["state"], poll_s=0.05) as svc:
        api = svc.plan(origin, goal, policy="ts", seed=7, soc="80%", vehicle_model=MODEL)
    assert cli["trip"] == api["trip"]  # the dry run planned with the id the service recorded
    assert cli["vehicle_model"] == api["vehicle_model"]
    assert {k: cli["vehicle_model"][k] for k in ("name", "battery_wh")} == {
        "name": MODEL, "battery_wh": 58_000.0}
    # the car's exploring cost, as the route table prints it (the document's own is the state's
    # vehicle's: it differed from the printed figure without a word); seed 7 explores
    assert cli["exploring_extra_wh"] is not None
    car = {n: r["vehicle_model_wh"] for n, r in cli["routes"].items()}
    assert cli["vehicle_model"]["exploring_extra_wh"] == pytest.approx(
        car["planned"] - car["best guess"], abs=0.11)
    code, table, _ = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                             "--seed", "7", "--soc", "80%", "--vehicle-model", MODEL,
                             "--dry-run")
    assert f"exploring: {cli['vehicle_model']['exploring_extra_wh']:+.1f} Wh" in table
    assert cli["routes"].keys() == api["routes"].keys() >= {"planned", "safe", "fastest"}
    keys = ("segments", "predicted_wh", "predicted_sd_wh", "vehicle_model_wh",
            "vehicle_model_sd_wh", "arrival")
    for name, r in cli["routes"].items():
        assert {k: r[k] for k in keys} == {k: api["routes"][name][k] for k in keys}, name
    # against an independent computation: the learned prediction plus the two cars' physics
    # (each segment at its speed limit) on what is driven, from 80 % of 58 kWh
    net = t["net"]
    shift = (segment_energy_wh(net.length_m, net.speed_mps, net.grade, get_vehicle(MODEL))
             - segment_energy_wh(net.length_m, net.speed_mps, net.grade,
                                 get_vehicle("sumo-default")))
    for name, r in cli["routes"].items():
        moved = r["predicted_wh"] + driven_part(r) @ shift[np.asarray(r["segments"])]
        assert r["vehicle_model_wh"] == pytest.approx(moved, abs=0.11), name
        assert r["arrival"]["soc_pct"] == pytest.approx(
            80 - r["vehicle_model_wh"] / 580, abs=0.01), name


def test_recorded_trip_names_its_model_and_shows_that_cars_figures(learned, capsys) -> None:
    from ev_nav.store import Store

    t = learned
    args = ["route", t["state"], "--from", t["from"], "--to", t["to"], "--seed", "3",
            "--vehicle-model", MODEL, "--no-map"]
    code, out, err = run_cli(capsys, *args, "--dry-run", "--json")
    assert code == 0, err
    dry = json.loads(out)
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    # a reading of this trip is converted when recorded (tests/test_vehicle_model_observe.py):
    # nothing to warn about
    assert err == ""
    head = out.splitlines()[0]
    assert head == (f"trip {dry['trip']}: segment {dry['start_segment']} -> "
                    f"{dry['goal_segment']}, policy ts, for {MODEL} (58 kWh; energies learned "
                    "for sumo-default)")
    # the table's prediction is the catalogue car's, its sd the model's (the shift is known)
    row = next(ln for ln in out.splitlines() if ln.startswith("planned "))
    planned = dry["routes"]["planned"]
    assert row.split()[-2:] == [f"{planned['vehicle_model_wh']:.1f}",
                                f"{planned['predicted_sd_wh']:.1f}"]
    store = Store.open(t["state"])
    try:
        assert store.get_trip(dry["trip"]).extra == {"vehicle_model": MODEL}
    finally:
        store.close()


def test_charging_plan_is_the_services_and_the_apis(learned, capsys) -> None:
    from fastapi.testclient import TestClient

    from ev_nav.server.app import create_app
    from ev_nav.server.service import FleetService

    t = learned
    args = ["route", t["state"], "--from", t["from"], "--to", t["to"], "--soc", "10.5%",
            "--confidence", "0.95"]
    # the state's vehicle has no known plugs: the error names the option that plans anyway
    code, out, err = run_cli(capsys, *args, "--no-map")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "plan for a catalogue model with --vehicle-model NAME, or on a state made with " \
           "'ev-nav init --vehicle NAME'" in err
    code, out, err = run_cli(capsys, *args, "--vehicle-model", MODEL, "--json")
    assert code == 0, err
    cli = json.loads(out)
    assert cli["vehicle"] == "sumo-default" and cli["vehicle_model"] == MODEL
    assert cli["feasible"] and cli["stops"] and cli["chargers_usable"] > 0
    origin, goal = _points(t)
    keys = ("vehicle_model", "chargers_usable", "feasible", "probability_at_least", "total_min",
            "stops", "legs")
    with FleetService(t["state"], poll_s=0.05) as svc:
        doc = svc.plan_charging(origin, goal, soc="10.5%", confidence=0.95, vehicle_model=MODEL)
        assert {k: doc[k] for k in keys} == {k: cli[k] for k in keys}
        with TestClient(create_app(svc, token="tok")) as client:
            body = {"origin": list(origin), "goal": list(goal), "soc": "10.5%"}
            auth = {"Authorization": "Bearer tok"}
            r = client.post("/api/charging-plans", json={**body, "vehicle_model": MODEL},
                            headers=auth)
            assert r.status_code == 200, r.text
            assert {k: r.json()[k] for k in keys} == {k: cli[k] for k in keys}
            # the API names its request field, never the command line's option
            r = client.post("/api/charging-plans", json=body, headers=auth)
            assert r.status_code == 422, r.text
            msg = r.json()["error"]
            assert 'plan for a catalogue model with the request field "vehicle_model"' in msg
            assert not re.search(r"(^|[\s(])--[a-z]", msg), msg


@pytest.mark.parametrize("extra", [[], ["--soc", "50%", "--confidence", "0.95"]])
def test_unknown_model_is_a_one_line_error_listing_the_names(learned, capsys, extra) -> None:
    from ev_nav.vehicles import catalogue

    t = learned
    before = _trip_count(t["state"])
    code, out, err = run_cli(capsys, "route", t["state"], "--from", t["from"], "--to", t["to"],
                             "--vehicle-model", "delorean", *extra)
    assert code == 2 and out == ""
    assert err == (f"ev-nav: error: unknown catalogue vehicle 'delorean'; choose one of: "
                   f"{', '.join(catalogue())}\n")
    assert _trip_count(t["state"]) == before  # refused before anything was recorded


def test_route_help_names_the_option(capsys) -> None:
    code, out, _ = run_cli(capsys, "route", "--help")
    assert code == 0
    assert "--vehicle-model NAME plan for this catalogue car ('ev-nav vehicles' lists them)" \
        in " ".join(out.split())
