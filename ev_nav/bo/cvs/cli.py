"""``ev-nav bo cvs`` (known costs) and ``ev-nav bo ucvs`` (unknown random costs):
``run | list | report``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from ev_nav.bo.core.cli import Family, add_family, execution_config, index_sets, json_list
from ev_nav.bo.core.objective import check_bounds
from ev_nav.bo.core.runs import read_results
from ev_nav.bo.cvs.benchmarks import BENCHMARKS
from ev_nav.bo.cvs.figures import save_figures, save_panel_figure
from ev_nav.bo.cvs.problems import COST_PRESETS
from ev_nav.bo.cvs.registry import METHODS
from ev_nav.bo.cvs.runner import (
    SURROGATES,
    CVSExperiment,
    CVSRunConfig,
    run_experiment,
    summarise,
)
from ev_nav.bo.cvs.surrogate import USER_REFIT_EVERY
from ev_nav.cli import seed_arg
from ev_nav.errors import ConfigError, require_number

DEFAULT_METHODS = {
    "cvs": ("ucb-psq", "ts-psq", "etc50", "etc100", "etcada"),
    "ucvs": ("ucvs", "ucb-psq", "ts-psq", "etc50"),
}
#: The unknown-cost paper's budget for its 12-D benchmarks (Hoang et al. 2025, Sec. 6).
UCVS_BUDGET = 100.0


def _costs(text: str) -> str | tuple[float, ...]:
    """A cost preset name or comma-separated mean costs."""
    if text in COST_PRESETS:
        return text
    try:
        values = tuple(float(c) for c in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"use a preset ({', '.join(COST_PRESETS)}) or numbers like 0.1,0.2,1"
        ) from None
    if not values or any(c <= 0 for c in values):
        raise argparse.ArgumentTypeError("costs must be positive")
    return values


def _options(setting: str):
    def add(p: argparse.ArgumentParser, legacy: bool) -> None:
        p.add_argument("--benchmark", choices=BENCHMARKS.names, default="hartmann3")
        p.add_argument(
            "--method",
            "--methods",
            dest="method",
            nargs="+",
            metavar="METHOD",
            default=list(DEFAULT_METHODS[setting]),
            help="one or more methods, space- or comma-separated as in the other families "
            f"({', '.join(METHODS[setting].names)}; default: %(default)s)",
        )
        p.add_argument(
            "--costs",
            type=_costs,
            default="moderate",
            help=f"preset ({', '.join(COST_PRESETS)}) or one mean cost per control set",
        )
        p.add_argument(
            "--variance", type=float, default=0.04, help="truncated variance (0.02-0.08)"
        )
        p.add_argument(
            "--budget", type=float, default=None, help="cost budget C (default per paper)"
        )
        p.add_argument("--seeds", type=int, default=3, help="number of seeds (0..N-1)")
        p.add_argument("--seed-offset", type=seed_arg, default=0, help="first seed")
        p.add_argument("--n-mc", type=int, default=1024, help="Monte Carlo samples per expectation")
        p.add_argument("--n-warmup", type=int, default=100, help="random warm-up points per set")
        p.add_argument("--n-warmup-full", type=int, default=10_000, help="warm-up for the full set")
        p.add_argument("--n-starts", type=int, default=5, help="L-BFGS-B starts")
        p.add_argument("--beta", type=float, default=2.0, help="UCB multiplier of sigma")
        p.add_argument(
            "--control-sets",
            type=json_list,
            default=None,
            metavar="JSON",
            help="with --objective: 0-based inputs per control set, e.g. '[[0], [1], [0, 1]]'",
        )
        p.add_argument(
            "--lengthscale", type=float, default=None, help="initial SE lengthscale (unit cube)"
        )
        p.add_argument(
            "--surrogate",
            choices=SURROGATES,
            default="auto",
            help="GP treatment: fixed (papers' prior on raw y), fitted (standardised y, "
            "marginal-likelihood refits), auto (fixed for benchmarks, fitted for --objective)",
        )
        p.add_argument(
            "--refit-every",
            type=int,
            default=USER_REFIT_EVERY,
            help="observations between refits of the fitted surrogate",
        )
        p.add_argument(
            "--refit-at-spend",
            type=float,
            default=None,
            metavar="FRACTION",
            help="one marginal-likelihood refit, for every method, when the spend first exceeds "
            "this fraction of the budget",
        )
        p.add_argument("--out", type=Path, default=None, help="output folder")
        if setting == "cvs":
            p.add_argument(
                "--ada-scale", type=float, default=4.0, help="ETC-Ada plays = int(scale / c)"
            )
            return
        p.set_defaults(benchmark="hartmann6", costs="cheap", variance=0.02)
        p.add_argument("--cost-noise", type=float, default=0.02, help="cost noise std (c >= 0.1)")
        p.add_argument("--alpha", type=float, default=0.1, help="initial tolerance alpha")
        p.add_argument(
            "--explore-frac", type=float, default=0.6, help="budget share of exploration"
        )
        p.add_argument("--tau", type=int, default=10, help="plays per set (paper mode)")
        p.add_argument("--etc-quota", type=int, default=50, help="ETC plays per group")
        p.add_argument(
            "--no-ucvs-refit",
            action="store_true",
            help="no marginal-likelihood refit at the start of the proposed method's "
            "exploitation (its default; see --refit-at-spend for every method)",
        )
        p.add_argument(
            "--no-clip-cost-lcb",
            action="store_true",
            help="do not clip the cost LCB at 0 (official code's rule; the paper clips)",
        )

    return add


def _method_names(setting: str, given: list[str]) -> tuple[str, ...]:
    """``--method a b`` or ``--method a,b`` (the other families' form), checked by name."""
    names = tuple(m.strip() for token in given for m in token.split(",") if m.strip())
    known = METHODS[setting].names
    unknown = [m for m in names if m not in known]
    if unknown or not names:
        raise ConfigError(
            f"--method: unknown {', '.join(map(repr, unknown)) or 'empty list'}; choose from "
            f"{', '.join(known)}"
        )
    return names


def _config(setting: str, args: argparse.Namespace) -> CVSRunConfig:
    budget = args.budget
    if budget is None:
        if args.objective is not None:
            raise ConfigError("with --objective, give the cost budget: --budget C")
        budget = UCVS_BUDGET if setting == "ucvs" else BENCHMARKS.get(args.benchmark).budget
    if args.seeds < 1:
        raise ConfigError("--seeds must be >= 1")
    for option, value in (("--n-mc", args.n_mc), ("--n-warmup", args.n_warmup),
                          ("--n-warmup-full", args.n_warmup_full), ("--n-starts", args.n_starts)):
        if value < 1:  # --n-mc 0 ran, with a NaN posterior value
            raise ConfigError(f"{option} must be >= 1, got {value}")
    require_number(budget, "--budget", low=0, low_open=True)  # inf ran without end
    extra: dict[str, object]
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
            "ucvs_refit": not args.no_ucvs_refit,
        }
    return CVSRunConfig(
        setting=setting,
        benchmark=args.benchmark,
        methods=_method_names(setting, args.method),
        costs=args.costs,
        variance=args.variance,
        budget=float(budget),
        seeds=tuple(range(args.seed_offset, args.seed_offset + args.seeds)),
        n_mc=args.n_mc,
        n_warmup=args.n_warmup,
        n_warmup_full=args.n_warmup_full,
        n_starts=args.n_starts,
        beta=args.beta,
        objective=args.objective,
        bounds=None if args.bounds is None else check_bounds(args.bounds, "--bounds"),
        control_sets=None
        if args.control_sets is None
        else index_sets(args.control_sets, "--control-sets"),
        lengthscale=args.lengthscale,
        surrogate=args.surrogate,
        refit_every=args.refit_every,
        refit_at_spend=args.refit_at_spend,
        **extra,  # type: ignore[arg-type]
    )


def _run(setting: str):
    def handler(args: argparse.Namespace) -> int:
        torch.set_num_threads(1)
        cfg = _config(setting, args)
        name = cfg.problem_label.replace(":", "_").replace("/", "_")
        default_out = (
            Path("runs") / "bo" / setting / f"{name}_{cfg.cost_label.replace('/', '-')}"
            f"_var{args.variance:g}"
        )
        out = args.out or default_out
        exp = run_experiment(
            cfg, out, execution_config(args), progress=not args.quiet and sys.stderr.isatty()
        )
        if not args.no_figures and len(exp.table):
            save_figures(exp.table, cfg, out)
        if not args.quiet:
            print(exp.summary().to_string(index=False, float_format="%.4g"))
            if cfg.objective is not None:
                _print_recommendations(exp)
            print(f"wrote {out / 'results.csv'} and {out / 'manifest.json'}", file=sys.stderr)
        return 0

    return handler


def _print_recommendations(exp: CVSExperiment) -> None:
    """Per run: the learner's recommendation (the play with the best posterior E f)."""
    for run_id, info in exp.runs.items():
        rec = info.get("recommendation")
        if rec is None:
            continue
        x = ", ".join(
            "random" if v is None else f"{v:.4g}" if isinstance(v, float) else repr(v)
            for v in rec["x_best"]
        )
        print(
            f"{run_id}: recommended x = [{x}] with control set {rec['control_set']}, "
            f"posterior E f = {rec['posterior_value']:.4g}"
        )


def _list(setting: str):
    def handler(_args: argparse.Namespace) -> int:
        print(f"methods ({'known' if setting == 'cvs' else 'unknown'} costs):")
        for e in METHODS[setting]:
            print(f"  {e.name:14s} {e.summary}")
        print("benchmarks:")
        for e in BENCHMARKS:
            b = e.value
            print(f"  {e.name:10s} d={b.dim:<3d} budget={b.budget:g}  {e.summary}")
        print(f"cost presets: {', '.join(f'{k} {v}' for k, v in COST_PRESETS.items())}")
        return 0

    return handler


def _report(args: argparse.Namespace) -> int:
    table, meta = read_results(args.path, "cvs/ucvs", ("budget", "costs", "benchmark", "setting"),
                               ("method", "seed"))
    budget = float(meta["config"]["budget"])
    print(summarise(table, budget).to_string(index=False, float_format="%.4g"))
    if args.figure is not None:
        save_panel_figure(
            {str(meta["config"]["costs"]): table},
            budget,
            args.figure,
            str(meta["config"]["benchmark"]),
        )
        print(f"figure written to {args.figure}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bo cvs`` and ``bo ucvs``."""
    add_family(
        sub,
        Family(
            "cvs",
            "BO with cost-varying variable subsets, known costs (UCB-CVS, ETC, PSQ baselines)",
            _options("cvs"),
            _run("cvs"),
            _list("cvs"),
            _report,
        ),
    )
    add_family(
        sub,
        Family(
            "ucvs",
            "BO with cost-varying variable subsets, unknown random costs (proposed + baselines)",
            _options("ucvs"),
            _run("ucvs"),
            _list("ucvs"),
            _report,
        ),
    )
