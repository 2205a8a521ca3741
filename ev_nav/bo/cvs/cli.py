"""``ev-nav bo cvs`` (known costs) and ``ev-nav bo ucvs`` (unknown random costs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ev_nav.bo.cvs import POLICY_NAMES
from ev_nav.bo.problems import BENCHMARKS, COST_PRESETS
from ev_nav.bo.ucvs import UCVS_METHODS


def _common(p: argparse.ArgumentParser, methods: tuple[str, ...], default_methods: list[str]):
    p.add_argument("--benchmark", choices=sorted(BENCHMARKS), default="hartmann3")
    p.add_argument(
        "--method",
        nargs="+",
        choices=methods,
        default=default_methods,
        help="one or more methods (default: %(default)s)",
    )
    p.add_argument("--costs", choices=sorted(COST_PRESETS), default="moderate")
    p.add_argument("--variance", type=float, default=0.04, help="truncated variance (0.02-0.08)")
    p.add_argument("--budget", type=float, default=None, help="cost budget C (default per paper)")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
    p.add_argument("--seed-offset", type=int, default=0, help="first seed")
    p.add_argument("--n-mc", type=int, default=1024, help="Monte Carlo samples per expectation")
    p.add_argument("--n-warmup", type=int, default=100, help="random warm-up points per set")
    p.add_argument("--n-warmup-full", type=int, default=10_000, help="warm-up for the full set")
    p.add_argument("--n-starts", type=int, default=5, help="L-BFGS-B starts")
    p.add_argument("--beta", type=float, default=2.0, help="UCB multiplier of sigma")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--no-figures", action="store_true", help="skip the PNG figures")
    p.add_argument("--quiet", action="store_true", help="no progress bars or summary")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bo cvs`` and ``bo ucvs``."""
    p = sub.add_parser(
        "cvs",
        help="BO with cost-varying variable subsets, known costs (UCB-CVS, ETC, PSQ baselines)",
    )
    _common(p, POLICY_NAMES, ["ucb-psq", "ts-psq", "etc50", "etc100", "etcada"])
    p.add_argument("--ada-scale", type=float, default=4.0, help="ETC-Ada plays = int(scale / c)")
    p.set_defaults(func=_handler("cvs"))

    q = sub.add_parser(
        "ucvs",
        help="BO with cost-varying variable subsets, unknown random costs (proposed + baselines)",
    )
    _common(q, UCVS_METHODS, ["ucvs", "ucb-psq", "ts-psq", "etc50"])
    q.set_defaults(benchmark="hartmann6", costs="cheap", variance=0.02)
    q.add_argument("--cost-noise", type=float, default=0.02, help="cost noise std (c >= 0.1)")
    q.add_argument("--alpha", type=float, default=0.1, help="initial tolerance alpha")
    q.add_argument("--explore-frac", type=float, default=0.6, help="budget share of exploration")
    q.add_argument("--tau", type=int, default=10, help="plays per set (paper mode)")
    q.add_argument("--etc-quota", type=int, default=50, help="ETC plays per group")
    q.add_argument(
        "--no-clip-cost-lcb",
        action="store_true",
        help="do not clip the cost LCB at 0 (official code's rule; the paper clips)",
    )
    q.set_defaults(func=_handler("ucvs"))


def _handler(setting: str):
    def handler(args: argparse.Namespace) -> int:
        import torch

        from ev_nav.bo.runner import (
            ExperimentConfig,
            run_experiment,
            save_figures,
            summarise,
            write_results,
        )

        torch.set_num_threads(1)
        budget = args.budget
        if budget is None:
            budget = 100.0 if setting == "ucvs" else BENCHMARKS[args.benchmark][3]
        extra = {}
        if setting == "cvs":
            extra = {"ada_scale": args.ada_scale}
        else:
            extra = {
                "cost_noise_std": args.cost_noise,
                "alpha": args.alpha,
                "explore_frac": args.explore_frac,
                "tau": args.tau,
                "etc_quota": args.etc_quota,
                "clip_cost_lcb": not args.no_clip_cost_lcb,
            }
        cfg = ExperimentConfig(
            setting=setting,
            benchmark=args.benchmark,
            methods=tuple(args.method),
            costs=args.costs,
            variance=args.variance,
            budget=float(budget),
            seeds=tuple(range(args.seed_offset, args.seed_offset + args.seeds)),
            n_mc=args.n_mc,
            n_warmup=args.n_warmup,
            n_warmup_full=args.n_warmup_full,
            n_starts=args.n_starts,
            beta=args.beta,
            **extra,
        )
        out = args.out or Path("runs") / "bo" / setting / (
            f"{args.benchmark}_{args.costs}_var{args.variance:g}"
        )
        show = None if not args.quiet else False
        df, refs = run_experiment(cfg, progress=show)
        paths = write_results(df, cfg, out, refs)
        if not args.no_figures:
            save_figures(df, cfg, out)
        if not args.quiet:
            print(summarise(df, cfg.budget).to_string(index=False, float_format="%.4g"))
            print(f"wrote {paths['results']} and {paths['metadata']}", file=sys.stderr)
        return 0

    return handler
