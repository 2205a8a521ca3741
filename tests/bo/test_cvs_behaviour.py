"""Smallest behavioural runs that still assert the papers' orderings (full runs: reproduce script).

Hartmann-3, var 0.04, fixed SE GP, β = 2, reduced MC and optimiser budgets, fixed seeds.
"""

from __future__ import annotations

import numpy as np

from ev_nav.bo.core.runs import ExecutionConfig
from ev_nav.bo.cvs.runner import CVSRunConfig, lock_on_spend, regret_at, run_experiment

SMALL = dict(
    setting="cvs",
    benchmark="hartmann3",
    variance=0.04,
    n_mc=32,
    n_warmup=50,
    n_warmup_full=1000,
    n_starts=1,
    maxiter=50,
    seeds=(0, 1),
)


def test_b1_b4_etc_ada_beats_ucb_psq_at_moderate_costs():
    cfg = CVSRunConfig(costs="moderate", budget=10.0, methods=("ucb-psq", "etcada"), **SMALL)
    df = run_experiment(cfg, execution=ExecutionConfig(executor="inprocess")).table
    r = regret_at(df, 10.0).groupby("method")["simple_regret"].mean()
    assert r["etcada"] < 0.5 * r["ucb-psq"], r.to_dict()
    # B4: UCB-PSQ only plays the full set; ETC-Ada plays 40 x G1, 20 x G2, then set 7
    assert (df[df["method"] == "ucb-psq"]["set"] == 7).all()
    for _, g in df[df["method"] == "etcada"].groupby("seed"):
        s = g.sort_values("t")["set"].to_numpy()
        assert np.isin(s[:40], [1, 2, 3]).all() and np.isin(s[40:60], [4, 5, 6]).all()
        assert (s[60:] == 7).all() and len(s) > 60
        assert abs(lock_on_spend(g, 7) - 8.0) < 1e-9  # B1 diamond: 40 x 0.1 + 20 x 0.2
    assert df.groupby(["method", "seed"])["spent"].max().max() <= 10.0 + 1e-9
