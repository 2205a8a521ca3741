"""Worlds whose roads change (issue 31): the change raises exactly the chosen stretch's losses,
a run that detects changes resumes exactly across a change, and the detector makes the learner
forget the changed road."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ev_nav.errors import ConfigError
from ev_nav.potential import node_potential
from ev_nav.sim.environment import Environment, TruthSpec
from ev_nav.sim.fleet import (
    AgentSpec,
    NetworkSpec,
    RunSpec,
    TripSpec,
    drift_stretch,
    load_network,
    run_one,
    specs_from_toml,
)

NET = NetworkSpec(kind="synthetic", n_segments=400, seed=3)


def _fixed_spec(agent: AgentSpec, horizon: int = 24, drift=(10,)) -> RunSpec:
    net = load_network(NET)
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    trips = TripSpec(kind="fixed", start=int(order[5]), goal=int(order[-5]), name="diag")
    truth = TruthSpec(kind="physical", drift_rounds=drift, drift_size=1.0, drift_segments=4)
    return RunSpec(network=NET, agent=agent, trips=trips, truth=truth, horizon=horizon, seed=1)


def test_a_change_raises_the_losses_of_a_stretch_of_the_best_route():
    spec = _fixed_spec(AgentSpec(model="bi", policy="ts"))
    net = load_network(NET)
    env = Environment.create(net, seed=spec.seed, truth=spec.truth)
    before = env.true_energy.copy()
    start, goal = spec.trips.start, spec.trips.goal
    best, _ = env.oracle.optimal(start, goal)
    seg = drift_stretch(spec, env, 10)
    assert seg.size == 4 and np.isin(seg, best).all()
    env.raise_losses(seg, 1.0)
    phi = node_potential(net)
    dphi = phi[net.seg_v] - phi[net.seg_u]
    np.testing.assert_allclose(env.true_energy[seg] - dphi[seg],
                               2.0 * (before[seg] - dphi[seg]), rtol=1e-12)
    others = np.setdiff1d(np.arange(net.n_segments), seg)
    np.testing.assert_array_equal(env.true_energy[others], before[others])
    # the optimum follows the world: its energy is the new truth's
    path, energy = env.oracle.optimal(start, goal)
    assert energy == pytest.approx(env.true_energy[path].sum())


def test_drift_needs_the_physical_world():
    with pytest.raises(ConfigError, match="physical"):
        TruthSpec(kind="gp", drift_rounds=(5,))
    with pytest.raises(ConfigError):
        TruthSpec(drift_rounds=(0,))


def test_a_run_with_detection_resumes_exactly_across_a_change(tmp_path):
    agent = AgentSpec(model="gp", policy="ts", segment_scale="loss", detect_changes=True)
    spec = _fixed_spec(agent)
    assert spec.agent.label == "GP-TS+detect"
    full = run_one(spec, tmp_path / "full", checkpoint_every=4)
    part = run_one(spec, tmp_path / "part", checkpoint_every=4, stop_after=14)
    assert not part.finished
    resumed = run_one(spec, tmp_path / "part", checkpoint_every=4)
    pd.testing.assert_frame_equal(pd.DataFrame(full.rows), pd.DataFrame(resumed.rows))
    # the change made the optimum dearer: the trip's optimal energy rose at round 10
    opt = pd.DataFrame(full.rows).set_index("t")["optimal_wh"]
    assert opt[10] > opt[9] and opt[9] == pytest.approx(opt[1])


def test_detection_makes_the_learner_forget_the_changed_road():
    agent = AgentSpec(model="gp", policy="mean", segment_scale="loss", detect_changes=True)
    spec = _fixed_spec(agent, horizon=30, drift=(8,))
    result = run_one(spec)
    resets = [e for e in result.model.state_dict()["log"] if e[0] == "rst"]
    refreshed = result.model.extra_var.any()
    assert resets or refreshed  # a reset happened (in the log, or folded into a refresh)
    env = result.env
    changed = np.flatnonzero(result.model.extra_var)
    assert changed.size
    # what it flagged is on the changed stretch
    net = load_network(NET)
    before = Environment.create(net, seed=spec.seed, truth=TruthSpec(kind="physical"))
    moved = np.flatnonzero(env.true_energy != before.true_energy)
    assert np.isin(changed, moved).mean() >= 0.5


def test_fleet_config_takes_drift(tmp_path):
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        """
horizon = 12
seeds = [0]

[network]
kind = "synthetic"
n_segments = 400
seed = 3

[[agents]]
model = "bi"
policy = "ts"
detect_changes = true

[trips]
kind = "random"

[truth]
drift_rounds = [5, 9]
drift_size = 0.3
"""
    )
    (spec,), _ = specs_from_toml(cfg)
    assert spec.truth.drift_rounds == (5, 9) and spec.agent.detect_changes
    plain = RunSpec(network=spec.network, agent=AgentSpec(model="bi", policy="ts"),
                    trips=spec.trips, horizon=12)
    assert plain.run_id != spec.run_id  # drift and detection are part of a run's identity
    rows = pd.DataFrame(run_one(spec).rows)
    assert len(rows) == 12


def test_reproduce_drift_quick(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_drift.py"
    out = tmp_path / "drift"
    text = subprocess.run(
        [sys.executable, str(script), "--quick", "--quiet", "--executor", "inprocess",
         "--out", str(out)], capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    assert "changes at trips 12, 24" in text
    res = pd.read_csv(out / "results.csv")
    assert set(res["agent"]) == {"GP-TS", "GP-TS+detect", "BI-TS"} and res["t"].max() == 40
    crit = (out / "criteria.md").read_text()
    assert "| monaco | GP-TS+detect | 12 |" in crit and (out / "regret.png").is_file()
    # the slope-return verdict per change: a paired per-seed difference and its test
    assert "| after − before (± SE) | 95 % upper bound | returned |" in crit
