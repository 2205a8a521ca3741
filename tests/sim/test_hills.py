"""The quality-in-hills experiment (issue 27 item 3): its criteria computed from a trip table
(against hand-made numbers) and the script's ``--quick`` form end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ev_nav.sim.hills import (
    HILLS_AGENTS,
    ROUTE_RULES,
    criteria,
    hills_agents,
    power_law_exponent,
    power_law_ratio,
    ts_ratio_interval,
)

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_hills.py"


def _table(per_trip: dict[str, tuple[float, float]], horizon: int = 10) -> pd.DataFrame:
    """One route, two seeds; each agent's regret is ``first`` for trips 1–5, ``last`` after."""
    rows = []
    for agent, (first, last) in per_trip.items():
        for seed in (0, 1):
            for t in range(1, horizon + 1):
                rows.append({"run_id": f"{agent}-{seed}", "network": "town", "route": "A",
                             "agent": agent, "seed": seed, "t": t,
                             "regret_wh": first if t <= horizon // 2 else last})
    return pd.DataFrame(rows)


def test_criteria_from_a_trip_table():
    res = _table({"GP-TS": (4.0, 0.5), "BI-TS": (10.0, 1.0), "GP-UCB-ROUTE": (6.0, 2.0),
                  "BI-UCB-ROUTE": (5.0, 1.0), "GP-greedy": (1.0, 1.0)})
    crit = criteria(res, window=5)
    assert crit.ts_ratio == pytest.approx((5 * 4.0 + 5 * 0.5) / (5 * 10.0 + 5 * 1.0))
    held = crit.gp_below_bi.set_index("rule")["held"]
    assert held["TS"] and not held["UCB-ROUTE"]
    decay = crit.decay.set_index("agent")["ratio"]
    assert decay["GP-TS"] == pytest.approx(0.125)
    assert decay["GP-UCB-ROUTE"] == pytest.approx(1 / 3)
    holds = crit.holds()
    assert holds["sum GP-TS / sum BI-TS <= 0.6"]
    assert not holds["GP below BI for every rule on every route"]
    # the greedy reference column is reported but not held to the no-linear-regret target
    assert not holds["last-window regret <= 0.2 x first-window, every learner and route"]
    assert "GP-greedy" in crit.markdown()


def test_ts_ratio_interval_resamples_seeds_paired():
    """Two seeds on one route: a resample is one of four seed pairs, so the 95 % interval runs
    from the smallest to the largest of their four ratios (each pair drawn with probability
    ¼ > 2.5 %); GP and BI of a seed stay together (one world). Equal ratios give a point."""
    runs = pd.DataFrame({"network": "town", "route": "A", "seed": [0, 1, 0, 1],
                         "agent": ["GP-TS", "GP-TS", "BI-TS", "BI-TS"],
                         "total": [10.0, 40.0, 50.0, 100.0]})
    gp, bi = np.array([10.0, 40.0]), np.array([50.0, 100.0])
    pairs = [(a, b) for a in (0, 1) for b in (0, 1)]
    ratios = [gp[[a, b]].mean() / bi[[a, b]].mean() for a, b in pairs]
    lo, hi = ts_ratio_interval(runs)
    assert (lo, hi) == pytest.approx((min(ratios), max(ratios)))  # 0.2 and 0.4
    assert ts_ratio_interval(runs) == (lo, hi)  # seeded: the same interval every time
    same = runs.assign(total=[1.0, 2.0, 2.0, 4.0])
    assert ts_ratio_interval(same) == pytest.approx((0.5, 0.5))
    assert all(np.isnan(ts_ratio_interval(runs[runs["seed"] == 0])))  # one seed: no interval
    crit = criteria(_table({"GP-TS": (4.0, 0.5), "BI-TS": (10.0, 1.0)}), window=5)
    assert "95 % bootstrap interval over seeds: 0.41–0.41" in crit.markdown()


def test_decay_exponent_of_a_power_law():
    """Per-trip regret exactly ``c t^-α`` gives back α; its last/first ratio is the sum's."""
    rows = []
    for agent, alpha in (("GP-UCB", 0.5), ("GP-TS", 1.0)):
        for t in range(1, 501):
            rows.append({"run_id": agent, "network": "town", "route": "A", "agent": agent,
                         "seed": 0, "t": t, "regret_wh": 30.0 * t**-alpha})
    crit = criteria(pd.DataFrame(rows), window=100)
    decay = crit.decay.set_index("agent")
    assert decay.loc["GP-UCB", "exponent"] == pytest.approx(0.5, abs=0.01)
    assert decay.loc["GP-TS", "exponent"] == pytest.approx(1.0, abs=0.02)
    t = np.arange(1, 501, dtype=float)
    assert decay.loc["GP-UCB", "ratio"] == pytest.approx(
        np.sum(t[400:] ** -0.5) / np.sum(t[:100] ** -0.5))
    text = crit.markdown()
    assert "exponent" in text
    # the header's reference rates are those of this horizon and window
    assert power_law_ratio(0.5, 500, 100) == pytest.approx(decay.loc["GP-UCB", "ratio"])
    assert power_law_exponent(power_law_ratio(0.7, 500, 100), 500, 100) == pytest.approx(0.7)
    assert "the last 100 of 500 trips 0.25 × the first 100; 0.2 needs α ≈ 0.58" in text


def test_criteria_without_thompson_sampling_have_no_ts_target():
    """A grid of UCB rules alone (``--agents``) printed a NaN ratio marked NOT held."""
    crit = criteria(_table({"GP-UCB": (6.0, 1.0), "BI-UCB": (8.0, 1.0)}, horizon=20), window=5)
    assert not np.isfinite(crit.ts_ratio)
    assert "sum GP-TS / sum BI-TS <= 0.6" not in crit.holds()
    text = crit.markdown()
    assert "n/a (no GP-TS and BI-TS runs)" in text and "nan" not in text
    assert "the last 5 of 20 trips" in text
    # a one-trip run has the same first and last window: no reference rate, no crash
    one = criteria(_table({"GP-UCB": (6.0, 1.0), "BI-UCB": (8.0, 1.0)}, horizon=1), window=1)
    assert "order √T, the rate of the paper's bounds):" in one.markdown()


def test_beta_scale_gives_every_learner_its_scale_under_its_plain_label():
    """``--beta-scale S``: each learner explores with S (UCB's β, TS's draw variance), labelled as
    in the grid so the criteria read it; the greedy planner and the default grid unchanged."""
    from ev_nav.sim.hills import hills_specs

    plain = hills_specs(horizon=1, seeds=[0], networks=("town",))
    scaled = hills_specs(horizon=1, seeds=[0], networks=("town",), beta_scale=0.25)
    assert [s.agent.label for s in plain] == [s.agent.label for s in scaled]
    for a, b in zip(plain, scaled, strict=True):
        assert a.agent.beta_scale == 1.0
        assert b.agent.beta_scale == (1.0 if b.agent.policy == "mean" else 0.25)
        assert (a.run_id == b.run_id) == (b.agent.policy == "mean")


def test_agents_cover_every_rule_for_gp_and_bi():
    labels = {a.label for a in HILLS_AGENTS}
    assert {"GP-TS", "BI-TS", "GP-BUCB", "BI-BUCB", "GP-UCB", "BI-UCB", "GP-greedy"} == labels
    route = {a.label for a in hills_agents(ROUTE_RULES)}
    assert {"GP-TS", "BI-TS", "GP-BUCB-ROUTE", "BI-BUCB-ROUTE", "GP-UCB-ROUTE", "BI-UCB-ROUTE",
            "GP-greedy"} == route


@pytest.mark.parametrize("flags", [[], ["--route-rules", "--graph-share", "0.25"]])
def test_reproduce_hills_quick(tmp_path, flags):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--quiet", "--out", str(tmp_path), *flags],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = (tmp_path / "criteria.md").read_text(encoding="utf-8")
    assert "Σ GP-TS / Σ BI-TS over the routes" in text and "GP-greedy" in text
    assert ("UCB-ROUTE" in text) == bool(flags)
    metadata = [json.loads(p.read_text(encoding="utf-8"))
                for p in (tmp_path / "runs").glob("*/metadata.json")]
    assert metadata and all(
        m["config"]["truth"]["graph_share"] == (0.25 if flags else 0.5) for m in metadata
    )
