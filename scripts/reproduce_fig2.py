#!/usr/bin/env python
"""Reproduce Fig. 2: cumulative regret of GP/BI × UCB/BUCB/TS on Monaco and Luxembourg routes.

Paper setting: T = 500 trips, 5 seeds, routes A and B per network, mean ± 1 SE.
``--world physical`` runs the same grid in the physical world (positive losses on top of the node
potential, exact optimum) with regeneration-aware agents, into docs/results/fig2-physical.
Usage: python scripts/reproduce_fig2.py [--quick] [--horizon T] [--seeds N] [--workers W]
       [--world paper|physical]
"""

from __future__ import annotations

from ev_nav.sim import paper
from ev_nav.sim.experiments import fig2_specs


def main() -> int:
    p = paper.parser(__doc__.splitlines()[0])
    p.add_argument("--world", choices=("paper", "physical"), default="paper")
    args = p.parse_args()
    horizon, seeds = paper.settings(args)
    specs = fig2_specs(horizon=horizon, seeds=seeds, world=args.world)
    if args.quick:
        specs = paper.quick_subset(specs)
    figure_specs = specs
    specs = paper.select(specs, args)
    figure = "fig2" if args.world == "paper" else "fig2-physical"
    paper.run(figure, args, specs, lambda out: [out / "regret.png"], report_specs=figure_specs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
