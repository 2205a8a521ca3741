"""Battery-aware planning (issue 16, item 3): arrival charge from the route's joint posterior."""

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
                                     ("24500Wh", 24_500.0), ("12", 12_000.0)])
def test_parse_charge(text, wh):
    assert parse_charge(text, 35_000.0) == pytest.approx(wh)


@pytest.mark.parametrize("text", ["120%", "40kWh", "-5%", "lots", "5 miles"])
def test_parse_charge_refuses_nonsense(text):
    with pytest.raises(ConfigError):
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
    # a reserve without a departure charge was silently ignored
    assert main([*argv, "--reserve", "50%", "--dry-run"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert "--reserve is checked against the departure charge: add --soc" in out.err
