"""Battery-aware planning (issue 16, item 3): arrival charge from the route's joint posterior."""

import json
import re

import numpy as np
import pytest

from ev_nav.bandits.routing import Router
from ev_nav.energy import Vehicle
from ev_nav.errors import ConfigError
from ev_nav.trips.battery import arrival_forecast, parse_charge, route_energy
from ev_nav.trips.session import build_model


@pytest.fixture(scope="module")
def learned(town):
    model = build_model("gp", town, Vehicle())
    rng = np.random.default_rng(0)
    for _ in range(6):
        s = rng.choice(town.n_segments, 40, replace=False)
        model.update(s, town.e_det()[s] + rng.normal(0, 3, s.size))
    route = Router(town).route(town.length_m, 10, 1500)
    return model, route


def test_interval_matches_monte_carlo_of_the_joint_posterior(learned):
    model, route = learned
    capacity = 35_000.0
    energy = route_energy(model, route)
    post = model.posterior()
    cov = model.route_covariance(route)
    rng = np.random.default_rng(1)
    latent = rng.multivariate_normal(post.mean[route], cov, size=40_000, method="cholesky")
    noise = model.noise_std * rng.standard_normal((40_000, route.size))
    totals = (latent + noise).sum(axis=1)
    departure, reserve = 0.03 * capacity, 0.02 * capacity
    f = arrival_forecast(departure, reserve, capacity, energy, level=0.9)
    arrive = departure - totals
    lo, hi = np.quantile(arrive, [0.05, 0.95]) * 100 / capacity
    assert abs(f.low_pct - lo) < 2.0 and abs(f.high_pct - hi) < 2.0
    # much tighter in fact; and the probability agrees with the samples
    assert abs(f.low_pct - lo) < 0.05 and abs(f.high_pct - hi) < 0.05
    assert f.p_reserve == pytest.approx(np.mean(arrive >= reserve), abs=0.01)
    # correlations along the route matter: the joint sd differs from the independent one
    assert energy.sd_wh > 1.1 * energy.independent_sd_wh


def test_probability_is_monotone_in_departure_charge(learned):
    model, route = learned
    energy = route_energy(model, route)
    ps = [arrival_forecast(soc, 300.0, 35_000.0, energy).p_reserve
          for soc in np.linspace(0, 3000, 61)]
    assert all(b >= a for a, b in zip(ps, ps[1:], strict=False))
    assert ps[0] < 0.01 and ps[-1] > 0.99


@pytest.mark.parametrize("text,wh", [("80%", 28_000.0), ("24.5kWh", 24_500.0),
                                     ("24500Wh", 24_500.0), ("12 KWH", 12_000.0)])
def test_parse_charge(text, wh):
    assert parse_charge(text, 35_000.0) == pytest.approx(wh)


@pytest.mark.parametrize("text", ["120%", "40kWh", "-5%", "lots", "5 miles"])
def test_parse_charge_refuses_nonsense(text):
    with pytest.raises(ConfigError):
        parse_charge(text, 35_000.0)


@pytest.mark.parametrize("text", ["0.8", "12", "80"])
def test_a_charge_without_its_unit_is_refused(text):
    """Read as kWh, 0.8 departed at 2 % and 80 at 100 % of this battery, silently."""
    with pytest.raises(ConfigError, match=f"a charge needs its unit: {text}% or {text}kWh"):
        parse_charge(text, 35_000.0)


def test_route_command_warns_when_the_reserve_is_at_risk(tmp_path, capsys):
    from ev_nav.cli import main

    state = tmp_path / "s"
    assert main(["init", str(state), "--synthetic", "--model", "gp"]) == 0
    capsys.readouterr()
    argv = ["route", str(state), "--from", "47.0010,8.0020", "--to", "47.0240,8.0350",
            "--no-map", "--policy", "mean"]
    assert main([*argv, "--soc", "80%"]) == 0
    out = capsys.readouterr().out
    assert "arrival charge (departing at 80%" in out and "safe" in out
    assert "warning" not in out
    assert main([*argv, "--soc", "2.5%", "--reserve", "1.5%"]) == 0
    out = capsys.readouterr().out
    assert "warning: the planned route misses the reserve" in out
    assert main([*argv, "--soc", "150%"]) == 2
    capsys.readouterr()
    # a reserve above the departure charge: no route or stop can help, and it says so (it
    # suggested --policy safe or charging stops)
    assert main([*argv, "--soc", "40%", "--reserve", "50%", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("warning: the reserve (50%) is more than the departure charge (40%), so no other "
            "route or charging stop can keep it; charge before leaving, or lower --reserve") in out
    assert "--policy safe" not in out and "--confidence" not in out
    # --json carries the same warning and charges as the text and as POST /api/routes (same
    # field names); it had the arrival per route only
    for soc, reserve, warning in (
        ("40%", "50%", "the reserve (50%) is more than the departure charge (40%)"),
        ("2.5%", "1.5%", "the planned route misses the reserve with probability"),
        ("80%", "10%", None),
    ):
        assert main([*argv, "--soc", soc, "--reserve", reserve, "--dry-run", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["departure_soc_pct"] == float(soc[:-1])
        assert doc["reserve_pct"] == float(reserve[:-1])
        if warning is None:
            assert doc["warning"] is None
        else:
            assert doc["warning"].startswith(warning) and "\n" not in doc["warning"]
    assert main([*argv, "--dry-run", "--json"]) == 0
    assert "warning" not in json.loads(capsys.readouterr().out)  # no charge given: no forecast
    # a reserve without a departure charge was silently ignored
    assert main([*argv, "--reserve", "50%", "--dry-run"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert "--reserve is checked against the departure charge: add --soc" in out.err


def test_route_output_labels_its_two_spreads(tmp_path, capsys):
    """The route table's sd (the model's uncertainty about the mean energy) and the arrival
    interval (that plus one drive's noise) were both unlabelled spreads; each is now named, and
    each figure is the spread its label says (computed here from the model's parts)."""
    from ev_nav.cli import main
    from ev_nav.trips.cli import ARRIVAL_SPREAD_MEANING, MODEL_SD_MEANING
    from ev_nav.trips.session import open_session

    state = tmp_path / "s"
    assert main(["init", str(state), "--synthetic", "--model", "gp"]) == 0
    capsys.readouterr()
    ends = ["--from", "47.0010,8.0020", "--to", "47.0240,8.0350", "--policy", "mean"]
    # a few drives of the route, so the model is surer of its mean than one drive's noise
    for trip in range(1, 5):
        no_map = ["--no-map"] if trip > 1 else []  # the first trip's map is read below
        assert main(["route", str(state), *ends, "--json", *no_map]) == 0
        predicted = json.loads(capsys.readouterr().out)["routes"]["planned"]["predicted_wh"]
        assert main(["observe", str(state), str(trip), "--total-wh", str(predicted)]) == 0
        capsys.readouterr()
    argv = ["route", str(state), *ends, "--soc", "10%", "--dry-run", "--no-map"]
    capsys.readouterr()
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(ln for ln in lines if ln.startswith("route") and "km" in ln)
    assert header.split()[-3:] == ["±", "model", "sd"]
    assert f"model sd: {MODEL_SD_MEANING}" in lines
    assert "drive-to-drive noise" in MODEL_SD_MEANING and "uncertainty" in MODEL_SD_MEANING
    assert f"90% interval, P[>= reserve]: {ARRIVAL_SPREAD_MEANING}" in lines
    table_sd = float(next(ln for ln in lines if ln.startswith("planned ")).split()[-1])
    arrival = next(ln for ln in lines if ln.startswith("planned ") and "%" in ln).split()
    low, high = (float(x) for x in arrival[2].rstrip("%").split("-"))

    assert main([*argv, "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["routes"]["planned"]
    low_json, high_json = planned["arrival"]["interval_pct"]
    seg = np.asarray(planned["segments"])
    h = np.ones(seg.size)
    h[0] -= planned["start_fraction"]
    h[-1] = planned["end_fraction"] - (planned["start_fraction"] if seg.size == 1 else 0.0)
    session = open_session(state)
    try:
        model, capacity = session.model, session.vehicle.battery_wh
        model_var = float(h @ model.route_covariance(seg) @ h)
        noise_var = float(model.noise_variance(seg, h))
    finally:
        session.close()
    # the table's figure: the model's uncertainty alone
    assert table_sd == pytest.approx(np.sqrt(model_var), abs=0.06)
    # the arrival interval: model uncertainty plus the drive's noise, not the model's alone
    z = 1.6448536  # the 95th percentile of the standard normal
    half_pct = z * np.sqrt(model_var + noise_var) * 100.0 / capacity
    assert (high - low) / 2 == pytest.approx(half_pct, abs=0.06)
    assert (high_json - low_json) / 2 == pytest.approx(half_pct, abs=0.006)
    model_only_pct = z * np.sqrt(model_var) * 100.0 / capacity
    assert (high_json - low_json) / 2 > 1.5 * model_only_pct
    # the other places the route's sd is shown say the same: its map legend and the history
    legend = (state / "maps" / "trip-1.html").read_text(encoding="utf-8")
    assert "Wh (model sd)" in legend
    # ... with the route table's figures (its tooltip too: both are the route's label)
    session = open_session(state)
    try:
        first = session.store.get_trip(1)
    finally:
        session.close()
    shown = f"predicted {first.predicted_wh:.1f} ± {first.predicted_sd_wh:.1f} Wh (model sd)"
    assert legend.count(shown) >= 2
    assert not re.findall(r"predicted -?[\d.]+ ± [\d.]+ Wh(?! \(model sd\))", legend)
    assert main(["history", str(state)]) == 0
    assert "predicted Wh ± model sd" in capsys.readouterr().out.splitlines()[0]
