#!/usr/bin/env python
"""Reproduce Fig. 3: β parametrisations of GP-BUCB and GP-UCB, and √β_t over trips.

Agents: GP-BUCB (ω=1, ξ=1), GP-BUCB (ω=1, ξ=0.5), GP-UCB (Thm 3.1), GP-UCB with β × 0.5, in the
paper's world (the ground truth and rectification of Fig. 2's paper grid). The GP agents use the
product's exact learner (docs/results/fig3); ``--learner svgp`` runs the paper's Algorithm 3
instead (labelled SVGP-…, docs/results/fig3-svgp). The wall time of the whole command is printed
at the end.
Usage: python scripts/reproduce_fig3.py [--quick] [--horizon T] [--seeds N] [--workers W]
       [--learner exact|svgp]
"""

from __future__ import annotations

import time

import numpy as np

from ev_nav.bandits.indices import BetaSchedule
from ev_nav.sim import paper
from ev_nav.sim.experiments import fig3_specs
from ev_nav.sim.fleet import load_network
from ev_nav.viz.regret import beta_figure


def main() -> int:
    t0 = time.perf_counter()
    p = paper.parser(__doc__)
    p.add_argument("--learner", choices=("exact", "svgp"), default="exact")
    args = p.parse_args()
    horizon, seeds = paper.settings(args)
    specs = fig3_specs(horizon=horizon, seeds=seeds, learner=args.learner)
    if args.quick:
        specs = paper.quick_subset(specs)
    figure_specs = specs
    specs = paper.select(specs, args)

    def figures(out):
        written = [out / "regret.png"]
        t = np.arange(1, max(horizon, 2) + 1)
        for net_spec in sorted({s.network for s in specs}, key=lambda n: n.label):
            n_arms = load_network(net_spec).n_segments
            schedules = {
                "GP-BUCB (w=1, xi=1)": BetaSchedule("bucb", omega=1, xi=1)(t, n_arms),
                "GP-BUCB (w=1, xi=0.5)": BetaSchedule("bucb", omega=1, xi=0.5)(t, n_arms),
                "GP-UCB": BetaSchedule("ucb")(t, n_arms),
                "GP-UCB (beta x0.5)": BetaSchedule("ucb", scale=0.5)(t, n_arms),
            }
            path = out / f"sqrt_beta_{net_spec.label}.png"
            beta_figure(schedules, t, path, title=f"{net_spec.label}: |A| = {n_arms}")
            written.append(path)
        return written

    figure = "fig3" + ("-svgp" if args.learner == "svgp" else "")
    paper.run(figure, args, specs, figures, report_specs=figure_specs)
    print(f"whole command: {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
