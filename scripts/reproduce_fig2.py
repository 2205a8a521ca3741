#!/usr/bin/env python
"""Reproduce Fig. 2: cumulative regret of GP/BI × UCB/BUCB/TS on Monaco and Luxembourg routes.

Paper setting: T = 500 trips, 5 seeds, routes A and B per network, mean ± 1 SE.
The GP agents use the product's exact learner (docs/results/fig2); ``--learner svgp`` runs the
paper's Algorithm 3 instead (labelled SVGP-…, docs/results/fig2-svgp). ``--world physical`` runs
the grid in the physical world (positive losses on top of the node potential, exact optimum) with
regeneration-aware agents, into docs/results/fig2-physical. The wall time of the whole command is
printed at the end.
Usage: python scripts/reproduce_fig2.py [--quick] [--horizon T] [--seeds N] [--workers W]
       [--world paper|physical] [--learner exact|regional|svgp]
"""

from __future__ import annotations

import time

from ev_nav.sim import paper
from ev_nav.sim.experiments import fig2_specs


def main() -> int:
    t0 = time.perf_counter()
    p = paper.parser(__doc__)
    p.add_argument("--world", choices=("paper", "physical"), default="paper")
    p.add_argument("--learner", choices=("exact", "regional", "svgp"), default="exact")
    args = p.parse_args()
    horizon, seeds = paper.settings(args)
    specs = fig2_specs(horizon=horizon, seeds=seeds, world=args.world, learner=args.learner)
    if args.quick:
        specs = paper.quick_subset(specs)
    figure_specs = specs
    specs = paper.select(specs, args)
    figure = "fig2" if args.world == "paper" else "fig2-physical"
    if args.learner != "exact":
        figure += f"-{args.learner}"
    paper.run(figure, args, specs, lambda out: [out / "regret.png"], report_specs=figure_specs)
    print(f"whole command: {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
