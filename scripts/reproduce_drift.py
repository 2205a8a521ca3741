#!/usr/bin/env python
"""Regret in a world whose roads change (issue 31, item 2): GP-TS with and without change
detection, and BI-TS, on the paper's route A of MoST Monaco and LuST Luxembourg.

Setting: the physical world (``docs/objective.md``); at trips 150 and 300 of T = 500 a stretch
of 5 segments in the middle of the then energy-optimal route gets its losses doubled
(``[truth] drift_rounds``, ``drift_size = 1``: roadworks on the best road), so the optimum moves;
learners with per-segment scales; 10 seeds. Writes the usual report (``summary.md``,
``regret.png``, ``grid.json``) to ``docs/results/drift`` and ``criteria.md``: final cumulative
regret per agent, and per change the mean per-trip regret in the 50 trips before it against
trips 50–100 after it (the slope regret returns to).
Usage: python scripts/reproduce_drift.py [--quick] [--horizon T] [--seeds N] [--workers W]
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd
from scipy import stats

from ev_nav.provenance import atomic_write_text
from ev_nav.sim import paper
from ev_nav.sim.environment import TruthSpec
from ev_nav.sim.experiments import paper_routes
from ev_nav.sim.fleet import AgentSpec, RunSpec

AGENTS = (
    AgentSpec(model="gp", policy="ts"),
    AgentSpec(model="gp", policy="ts", detect_changes=True),
    AgentSpec(model="bi", policy="ts"),
)


def drift_specs(horizon: int, seeds, networks=("monaco", "luxembourg")) -> list[RunSpec]:
    """Every network × agent × seed (route A), changes at 30 % and 60 % of the horizon."""
    rounds = (max(1, round(0.3 * horizon)), max(2, round(0.6 * horizon)))
    truth = TruthSpec(kind="physical", drift_rounds=rounds, drift_size=1.0, drift_segments=5)
    return [
        RunSpec(network=net, agent=replace(a, segment_scale="loss"), trips=trips, truth=truth,
                horizon=horizon, seed=seed)
        for net, trips in paper_routes(networks=networks) if trips.name == "A"
        for a in AGENTS
        for seed in seeds
    ]


def criteria(res: pd.DataFrame, rounds: tuple[int, ...], window: int) -> str:
    """The tables of ``criteria.md``."""
    per_run = res.groupby(["network", "agent", "seed"], as_index=False)["regret_wh"].sum()
    final = per_run.groupby(["network", "agent"])["regret_wh"].agg(["mean", "sem", "count"])
    lines = ["Final cumulative regret [Wh], mean ± SE over seeds:", "",
             "| network | agent | regret | seeds |", "|---|---|---|---|"]
    for (net, agent), r in final.iterrows():
        lines.append(f"| {net} | {agent} | {r['mean']:,.1f} ± {r['sem']:,.1f} | "
                     f"{int(r['count'])} |")
    lines += ["", f"Mean per-trip regret [Wh] in the {window} trips before each change and in "
              f"trips {window}–{2 * window} after it. Returned: the paired per-seed difference "
              "(after − before) is not significantly above zero (one-sided t-test, 5 %); the "
              "upper bound is a one-sided 95 % bound on the difference:", "",
              "| network | agent | change at | before | after | after / before | "
              "after − before (± SE) | 95 % upper bound | returned |",
              "|---|---|---|---|---|---|---|---|---|"]
    for (net, agent), g in res.groupby(["network", "agent"]):
        for c in rounds:
            in_before = (g["t"] > c - window) & (g["t"] <= c)
            in_after = (g["t"] > c + window) & (g["t"] <= c + 2 * window)
            before_s = g[in_before].groupby("seed")["regret_wh"].mean()
            after_s = g[in_after].groupby("seed")["regret_wh"].mean()
            diff = (after_s - before_s).dropna()
            before, after = float(before_s.mean()), float(after_s.mean())
            ratio = after / before if before > 0 else float("nan")
            n = len(diff)
            se = float(diff.std(ddof=1) / np.sqrt(n)) if n > 1 else float("nan")
            upper = float(diff.mean() + stats.t.ppf(0.95, n - 1) * se) if n > 1 else float("nan")
            # not significantly above zero: the one-sided 95 % lower bound reaches 0
            lower = float(diff.mean() - stats.t.ppf(0.95, n - 1) * se) if n > 1 else float("nan")
            verdict = "yes" if lower <= 0 else "**no**"
            lines.append(f"| {net} | {agent} | {c} | {before:.3f} | {after:.3f} | "
                         f"{ratio:.2f} | {diff.mean():+.2f} ± {se:.2f} | {upper:+.2f} | "
                         f"{verdict} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    t0 = time.perf_counter()
    p = paper.parser(__doc__)
    args = p.parse_args()
    horizon, seeds = paper.settings(args, horizon=500, seeds=10)
    if args.quick and not args.horizon:
        horizon = 40  # long enough for both changes and the windows around them
    specs = drift_specs(horizon, seeds, networks=("monaco",) if args.quick else
                        ("monaco", "luxembourg"))
    figure_specs = specs
    specs = paper.select(specs, args)
    rounds = figure_specs[0].truth.drift_rounds
    window = max(1, min(50, horizon // 10))

    def figures(out):
        res = pd.read_csv(out / "results.csv")
        text = (f"# Regret when roads change (T = {horizon}, changes at trips "
                f"{', '.join(map(str, rounds))})\n\n" + criteria(res, rounds, window))
        atomic_write_text(out / "criteria.md", text)
        print(text)
        return [out / "regret.png", out / "criteria.md"]

    paper.run("drift", args, specs, figures, report_specs=figure_specs)
    print(f"whole command: {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
