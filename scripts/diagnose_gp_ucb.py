#!/usr/bin/env python
"""Diagnose GP-UCB's regret on a Fig. 2 route: rerun one agent with a modified GP learner.

Runs the Fig. 2 ``RunSpec`` of ``--agent`` on ``--network``/``--route`` for each seed through
:func:`ev_nav.sim.fleet.run_one` (no result files written; ground truths are read from, and
when missing written to, the Fig. 2 folder's truth cache, or ``$EV_NAV_TRUTH_CACHE``), with the
agent's learner (``SVGP-*``: Algorithm 3; ``GP-*``: the exact learner) in
one of three variants:

``default``  the learner as in the Fig. 2 runs;
``fixed``    hyperparameters fixed at the prior (= ground-truth) values: no Adam steps
             (Algorithm 3), no refits on the schedule (exact learner);
``exact``    Algorithm 3 only: fixed hyperparameters and the exact closed-form q refresh after
             every trip.

Prints the cumulative regret, regret per 50 trips, the final posterior's RMSE against the
truth and mean std [Wh], and how many driven segments lie outside the inducing set with their
posterior std next to what independent learning (BI) would reach with the same visits.

``--num-inducing M`` changes the inducing-set size of any variant, to test whether the regret gap
closes once the driven segments fit into Z.

Usage: python scripts/diagnose_gp_ucb.py --variant fixed --seeds 0,1,2 --horizon 500
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ev_nav import settings  # noqa: E402 (after the path)
from ev_nav.cli import count_arg  # noqa: E402

VARIANTS = {
    "default": {},
    "fixed": {"learn_hyperparameters": False},
    "exact": {"learn_hyperparameters": False, "exact_refresh": True},
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--variant", choices=sorted(VARIANTS), default="fixed")
    ap.add_argument(
        "--agent", default="SVGP-UCB", help="Fig. 2 agent label (SVGP-*: Algorithm 3, GP-*: exact)"
    )
    ap.add_argument("--network", default="monaco")
    ap.add_argument("--route", default="A")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--horizon", type=count_arg, default=200, help="trips per run (default 200)")
    ap.add_argument(
        "--num-inducing",
        type=int,
        default=None,
        help="M, inducing segments (default: the Fig. 2 value, 1000)",
    )
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from ev_nav.sim.experiments import fig2_specs
    from ev_nav.sim.fleet import make_model, run_one

    learner = "svgp" if args.agent.startswith("SVGP-") else "exact"
    extra = dict(VARIANTS[args.variant])
    if learner == "exact" and (args.variant == "exact" or args.num_inducing is not None):
        ap.error("--variant exact and --num-inducing apply to Algorithm 3 (SVGP-*) agents only")
    if args.num_inducing is not None:
        if args.num_inducing < 1:
            ap.error("--num-inducing must be >= 1")
        extra["num_inducing"] = args.num_inducing

    def factory(spec, net, seed):
        return make_model(spec, net, seed, **(extra if spec.model == "gp" else {}))

    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds takes comma-separated whole numbers, got {args.seeds!r}")
    folder = {"svgp": "fig2-svgp", "exact": "fig2"}[learner]
    specs = fig2_specs(horizon=args.horizon, seeds=seeds, learner=learner)
    wanted = (args.network, args.route, args.agent)
    chosen = [s for s in specs if (s.network.name, s.trips.name, s.agent.label) == wanted]
    if not chosen:
        # a name of no Fig. 2 run used to print nothing and exit 0
        ap.error(
            f"no Fig. 2 run is {args.agent} on {args.network} route {args.route}; agents: "
            f"{', '.join(sorted({s.agent.label for s in specs}))}; networks: "
            f"{', '.join(sorted({s.network.name for s in specs}))}; routes: "
            f"{', '.join(sorted({s.trips.name for s in specs}))}"
        )
    for spec in chosen:
        result = run_one(
            spec, None, truth_cache=settings.truth_cache_dir(REPO / "docs/results" / folder),
            model_factory=factory,
        )
        regret = np.array([r["regret_wh"] for r in result.rows])
        post, truth = result.model.posterior(), result.env.true_energy
        rmse = float(np.sqrt(np.mean((post.mean - truth) ** 2)))
        blocks = [round(float(regret[i : i + 50].sum())) for i in range(0, regret.size, 50)]
        print(
            f"{args.variant} {args.agent} {args.network} {args.route} seed {spec.seed}: "
            f"cumulative {regret.sum():,.0f} Wh; per 50 trips {blocks}; "
            f"RMSE {rmse:.2f} Wh; mean std {post.std.mean():.2f} Wh",
            flush=True,
        )
        if learner == "svgp":
            print(_capacity(result.model, post), flush=True)
    return 0


def _capacity(model, post) -> str:
    """Driven segments inside/outside the inducing set Z and their posterior std [Wh], next to
    the std independent per-segment learning (BI) would reach with the same visits."""
    visits = model.visits
    in_z = np.zeros(visits.size, dtype=bool)
    in_z[model.z] = True
    driven = visits > 0
    prior_var = model.kernel.diag_all().detach().numpy()
    noise_var = model.noise_std**2
    bi_std = np.sqrt(1.0 / (1.0 / prior_var + visits / noise_var))
    out = driven & ~in_z
    parts = [
        f"  driven segments {int(driven.sum())}, of them outside Z {int(out.sum())} "
        f"(M = {model.m}); share of driven segment-visits outside Z "
        f"{visits[out].sum() / max(visits.sum(), 1):.1%}"
    ]
    for name, mask in (("driven, in Z", driven & in_z), ("driven, outside Z", out)):
        if mask.any():
            parts.append(
                f"  {name}: posterior std {post.std[mask].mean():.2f} Wh "
                f"(BI with the same visits {bi_std[mask].mean():.2f} Wh, "
                f"mean visits {visits[mask].mean():.1f})"
            )
    return "\n".join(parts)


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
