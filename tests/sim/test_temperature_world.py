"""The seasonal temperature world (issue 31): the cited effect, the cycle, the fleet runner and
the benchmark's smoke form."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ev_nav.errors import ConfigError
from ev_nav.sim import climate
from ev_nav.sim.environment import Environment, TruthSpec
from ev_nav.sim.fleet import (
    AgentSpec,
    NetworkSpec,
    RunSpec,
    TripSpec,
    load_network,
    run_one,
    specs_from_toml,
)

NET = NetworkSpec(kind="synthetic", n_segments=300, seed=4)
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_temperature.py"


def test_the_world_reproduces_the_aaa_figures_on_the_reference_drive():
    """On the reference drive (a flat road at 34.1 km/h, all of its energy traction) the
    world's consumption factors are AAA's measured ones: range −41 % at −6.7 °C and −17 % at
    35 °C with climate control, and no effect at 23.9 °C; for the default car and another."""
    from ev_nav.energy import get_vehicle, segment_energy_wh

    for car in (None, get_vehicle("van")):
        wh_per_hour = float(segment_energy_wh(34_100.0, 34.1 / 3.6, 0.0, car))
        assert climate.reference_power_w(car) == pytest.approx(wh_per_hour, rel=1e-12)
        for t, range_loss in ((-6.7, 0.41), (35.0, 0.17)):
            factor = (1.0 + climate.battery_factor(t)
                      + climate.cabin_power_w(t, car) / wh_per_hour)
            assert factor == pytest.approx(1.0 / (1.0 - range_loss), rel=1e-12)
        assert climate.cabin_power_w(23.9, car) == 0.0 and climate.battery_factor(23.9) == 0.0


def test_the_cycle_is_seasonal_seeded_and_the_same_on_every_call():
    kw = {"mean_c": 10.0, "amplitude_c": 10.0, "period": 365, "noise_c": 0.0, "seed": 1}
    assert climate.seasonal_temperature(0, **kw) == pytest.approx(0.0)
    assert climate.seasonal_temperature(182, **kw) == pytest.approx(20.0, abs=0.01)
    noisy = {**kw, "noise_c": 3.0}
    assert climate.seasonal_temperature(5, **noisy) == climate.seasonal_temperature(5, **noisy)
    assert climate.seasonal_temperature(5, **noisy) != climate.seasonal_temperature(
        5, **{**noisy, "seed": 2})


def test_a_cold_day_costs_more_and_keeps_the_optimum_defined():
    net = load_network(NET)
    env = Environment.create(net, seed=0, truth=TruthSpec(kind="physical"))
    cold = env.at_temperature(-5.0)
    assert np.all(cold.true_energy >= env.true_energy)
    path, best = cold.oracle.optimal(0, net.n_segments // 2)
    assert best == pytest.approx(cold.oracle.path_energy(path))


def test_temperature_options_are_checked(tmp_path):
    with pytest.raises(ConfigError):
        TruthSpec(kind="gp", temperature_mean_c=10.0)
    with pytest.raises(ConfigError):
        TruthSpec(temperature_mean_c=10.0, temperature_period_rounds=0)
    with pytest.raises(ConfigError):
        TruthSpec(temperature_mean_c="ten")
    cfg = tmp_path / "fleet.toml"
    cfg.write_text('horizon = 5\n[network]\nkind = "synthetic"\nn_segments = 300\n'
                   '[[agents]]\nmodel = "gp"\ntemperature = true\n'
                   '[truth]\ntemperature_mean_c = 4.0\ntemperature_amplitude_c = 6.0\n')
    (spec,), _ = specs_from_toml(cfg)
    assert spec.agent.temperature and spec.truth.temperature_mean_c == 4.0
    assert spec.agent.label.endswith("+temp")


def test_a_fleet_run_in_the_seasons_resumes_exactly(tmp_path):
    """A run whose agent is given the temperature: interrupted and resumed, the same rows; the
    run id of a world without a cycle is what it was."""
    truth = TruthSpec(kind="physical", temperature_mean_c=8.0, temperature_period_rounds=12)
    spec = RunSpec(network=NET, agent=AgentSpec(model="gp", policy="ts", temperature=True,
                                                learn_hyperparameters=False),
                   trips=TripSpec(kind="random", vehicles=2), truth=truth, horizon=10, seed=2)
    whole = run_one(spec)
    part = run_one(spec, tmp_path, stop_after=5, checkpoint_every=5)
    assert not part.finished
    resumed = run_one(spec, tmp_path)
    assert [r["regret_wh"] for r in resumed.rows] == [r["regret_wh"] for r in whole.rows]
    assert whole.model.temp.active
    plain = RunSpec(network=NET, agent=AgentSpec(), trips=TripSpec(), horizon=3)
    assert "temperature" not in repr(plain.run_id)
    assert plain.run_id == RunSpec(network=NET, agent=AgentSpec(temperature=False),
                                   trips=TripSpec(), truth=TruthSpec(), horizon=3).run_id


def test_bench_temperature_smoke_prints_the_goal_lines():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, check=True,
        timeout=600,
    ).stdout
    m = re.search(r"^MAPE ratio \(with/without temperature\): ([\d.]+)", out, re.M)
    assert m and float(m.group(1)) > 0.0
    m = re.search(r"^90% interval coverage: ([\d.]+)", out, re.M)
    assert m and 0.0 <= float(m.group(1)) <= 1.0
