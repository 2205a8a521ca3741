#!/usr/bin/env python
"""Quality in hills: GP and BI learners (TS, Bayes-UCB, UCB) and the greedy planner in the
physical world on SRTM Monaco and the synthetic town, two routes each.

Setting (issue 27): T = 500 trips, 10 seeds, routes where the energy-optimal route under the
physics model differs from the shortest (:func:`ev_nav.sim.hills.hills_routes`); learners with
``segment_scale="loss"``. Writes the usual report (``summary.md``, ``regret.png``, ``grid.json``)
and ``criteria.md``: GP below BI per rule and route, Σ GP-TS / Σ BI-TS, and each learner's mean
per-trip regret over the last 100 trips against its first 100. The runs are resumable.
``--route-rules`` runs Bayes-UCB and UCB on each route's total (``bucb-route``, ``ucb-route``)
instead of the paper's per-segment forms. ``--graph-share S`` draws worlds whose losses keep the
share S of their variance in the local (graph) term instead of the paper's 0.5 (output folder
``hills-share-S``): how much a GP can pool decides how far below BI it gets. ``--beta-scale S``
gives every learner that exploration scale (output folder ``hills-beta-S``).
Usage: python scripts/reproduce_hills.py [--quick] [--route-rules] [--graph-share S]
       [--beta-scale S] [--horizon T] [--seeds N] [--workers W] [--agents GP-TS,BI-TS]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from ev_nav.cli import finite_arg, fraction_arg
from ev_nav.provenance import atomic_write_text
from ev_nav.sim import paper
from ev_nav.sim.environment import PAPER_GRAPH_SHARE
from ev_nav.sim.hills import PAPER_RULES, ROUTE_RULES, criteria, hills_specs


def _scale_arg(text: str) -> float:
    """``--beta-scale``: a finite number >= 0."""
    value = finite_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def main() -> int:
    t0 = time.perf_counter()
    p = paper.parser(__doc__)
    p.add_argument("--route-rules", action="store_true",
                   help="Bayes-UCB and UCB on each route's total instead of per segment")
    p.add_argument("--graph-share", type=fraction_arg, default=PAPER_GRAPH_SHARE,
                   help=f"the worlds' local share of the losses' variance (paper: "
                   f"{PAPER_GRAPH_SHARE})")
    p.add_argument("--beta-scale", type=_scale_arg, default=1.0,
                   help="every learner's beta_scale: x the beta_t of (Bayes-)UCB, x the variance "
                   "of Thompson sampling's draws (default 1; output folder hills-beta-S)")
    args = p.parse_args()
    horizon, seeds = paper.settings(args, horizon=500, seeds=10)
    rules = ROUTE_RULES if args.route_rules else PAPER_RULES
    specs = hills_specs(horizon=horizon, seeds=seeds, rules=rules, graph_share=args.graph_share,
                        beta_scale=args.beta_scale)
    if args.quick:
        specs = [s for s in specs if s.network.name == "town"]
    figure_specs = specs
    specs = paper.select(specs, args)

    def figures(out):
        res = pd.read_csv(out / "results.csv")
        window = max(1, min(100, horizon // 5))
        crit = criteria(res, window=window)
        scaled = ("" if args.beta_scale == 1.0 else
                  f", every learner's beta_scale {args.beta_scale:g}")
        text = (f"# Quality in hills: targets (T = {horizon}, window {window} trips{scaled})\n\n"
                + crit.markdown())
        atomic_write_text(out / "criteria.md", text)
        print(text)
        return [out / "regret.png", out / "criteria.md"]

    name = "hills-route" if args.route_rules else "hills"
    if args.graph_share != PAPER_GRAPH_SHARE:
        name += f"-share-{args.graph_share:g}"
    if args.beta_scale != 1.0:
        name += f"-beta-{args.beta_scale:g}"
    paper.run(name, args, specs, figures, report_specs=figure_specs)
    print(f"whole command: {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
