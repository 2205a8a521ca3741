#!/usr/bin/env python
"""Reproduce Figs. 4–5: final cumulative regret against the kernel lengthscale ℓ.

The ground truth is drawn with lengthscale ℓ and the agents start from the same ℓ; agents GP-BUCB,
BI-BUCB, GP-TS, BI-TS. Paper: ℓ ∈ [0.1, 2.0], T = 500, 5 runs, 4 routes. The paper's world at
each ℓ (the ground truth and rectification of Fig. 2's paper grid). The GP agents use the
product's exact learner (docs/results/fig45); ``--learner svgp`` runs the paper's Algorithm 3
instead (labelled SVGP-…, docs/results/fig45-svgp). The wall time of the whole command is printed
at the end.
Usage: python scripts/reproduce_fig45.py [--quick] [--lengthscales 0.1,0.5,1,1.5,2] [--workers W]
       [--learner exact|svgp]
"""

from __future__ import annotations

import argparse
import time

import pandas as pd

from ev_nav.sim import paper
from ev_nav.sim.experiments import fig45_specs
from ev_nav.viz.regret import cumulative_regret_figure, final_regret_vs_parameter


def _lengthscales(text: str) -> tuple[float, ...]:
    """Comma-separated numbers (each range-checked by the sweep's specs)."""
    try:
        return tuple(float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers like 0.1,0.5,1, got {text!r}") from None


def main() -> int:
    t0 = time.perf_counter()
    p = paper.parser(__doc__)
    p.add_argument("--lengthscales", type=_lengthscales, default="0.1,0.5,1.0,1.5,2.0",
                   help="comma-separated ℓ")
    p.add_argument("--learner", choices=("exact", "svgp"), default="exact")
    args = p.parse_args()
    horizon, seeds = paper.settings(args)
    ells = list(args.lengthscales)
    if args.quick:
        ells = ells[:2]
    specs = fig45_specs(lengthscales=ells, horizon=horizon, seeds=seeds, learner=args.learner)
    if args.quick:
        specs = paper.quick_subset(specs)
    figure_specs = specs
    specs = paper.select(specs, args)
    ell_of = {s.run_id: s.truth.lengthscale for s in figure_specs}

    def figures(out):
        res = pd.read_csv(out / "results.csv")
        res["lengthscale"] = res["run_id"].map(ell_of)
        final = res.groupby(["network", "route", "agent", "lengthscale", "run_id"], as_index=False)[
            "cum_regret_wh"
        ].last()
        table = (
            final.groupby(["network", "route", "agent", "lengthscale"])["cum_regret_wh"]
            .agg(["mean", "std", "count"])
            .reset_index()
        )
        # one seed: no standard error (NaN, no error bar), as the fleet tables' '± n/a'
        table["se"] = table["std"] / table["count"] ** 0.5
        table = table.rename(columns={"mean": "final_cum_regret_mean"})
        table.to_csv(out / "final_vs_lengthscale.csv", index=False)
        path = final_regret_vs_parameter(table, "lengthscale", out / "final_vs_lengthscale.png")
        # Fig. 4: regret over trips, one panel per route and agent, one curve per ℓ (the
        # report's regret.png and summary.md pool the ℓ values of each agent)
        by_ell = res.assign(
            route=res["route"].astype(str) + ", " + res["agent"].astype(str),
            agent="ℓ = " + res["lengthscale"].map("{:g}".format),
        )
        fig4 = cumulative_regret_figure(by_ell, out / "regret_by_lengthscale.png")
        return [fig4, path, out / "final_vs_lengthscale.csv"]

    figure = "fig45" + ("-svgp" if args.learner == "svgp" else "")
    paper.run(figure, args, specs, figures, report_specs=figure_specs)
    print(f"whole command: {time.perf_counter() - t0:.0f} s wall")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
