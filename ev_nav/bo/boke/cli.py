"""``ev-nav bo boke ...``: run the BOKE study from the command line.

Sub-commands::

    ev-nav bo boke list                       # benchmarks and methods
    ev-nav bo boke run --benchmarks sphere6 --methods boke,gp-ucb --seeds 3 --out runs/x
    ev-nav bo boke report runs/x              # table (+ figure) from a saved run

``run`` writes ``results.json``, ``metadata.json``, ``summary.md`` and (unless ``--no-figure``)
``regret.png`` into ``--out`` and prints the summary table.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from ev_nav.bo.boke_benchmarks import BENCHMARK_NAMES, get_benchmark
from ev_nav.bo.boke_optim import AcqOptConfig
from ev_nav.bo.boke_runner import (
    EXTRA_METHODS,
    METHOD_NAMES,
    ExperimentConfig,
    format_table,
    load_results,
    run_experiment,
    save_results,
    summarise,
)
from ev_nav.errors import ConfigError


def _csv(text: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated, non-empty list")
    return items


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``boke`` (with ``list``, ``run``, ``report``) to the ``bo`` command group."""
    parser = sub.add_parser(
        "boke",
        help="BOKE: BO by kernel regression and density-based exploration (+ baselines)",
        description="Bayesian optimisation by kernel regression and density-based exploration.",
    )
    bsub = parser.add_subparsers(dest="boke_command", metavar="ACTION")
    parser.set_defaults(func=lambda _a: parser.print_help() or 1)

    p_list = bsub.add_parser("list", help="list benchmarks and methods")
    p_list.set_defaults(func=_cmd_list)

    p_run = bsub.add_parser("run", help="run methods x benchmarks x seeds, save results")
    p_run.add_argument("--benchmarks", type=_csv, default=("sphere6",),
                       help="comma-separated benchmark names (see `list`)")
    p_run.add_argument("--methods", type=_csv, default=("boke", "boke+", "gp-ucb", "random"),
                       help="comma-separated method names (see `list`)")
    p_run.add_argument("--seeds", type=int, default=3, help="number of seeds (0..n-1)")
    p_run.add_argument("--seed-offset", type=int, default=0, help="first seed")
    p_run.add_argument("--budget", type=int, default=None,
                       help="total evaluations T incl. the initial design (default: per benchmark)")
    p_run.add_argument("--noisy", action="store_true", help="add noise of std 0.1 std(f)")
    p_run.add_argument("--varsigma", type=float, default=0.3,
                       help="BOKE sub-Gaussian parameter in beta_t (standardised units)")
    p_run.add_argument("--p-ucb", type=float, default=0.5, help="BOKE+ IKR-UCB probability")
    p_run.add_argument("--c-h", type=float, default=ExperimentConfig().c_h,
                       help="bandwidth constant of Scott's rule (unit cube)")
    p_run.add_argument("--bandwidth", choices=["scott", "silverman", "fixed"], default="scott")
    p_run.add_argument("--lengthscale", type=float, default=0.2,
                       help="GP-UCB / GP-EI fixed SE lengthscale (unit cube)")
    p_run.add_argument("--sqrt-beta", type=float, default=2.0, help="GP-UCB sqrt(beta)")
    p_run.add_argument("--maxiter", type=int, default=50,
                       help="L-BFGS-B iterations per start (0: random candidates only)")
    p_run.add_argument("--candidates-per-dim", type=int, default=1000)
    p_run.add_argument("--threads", type=int, default=1, help="torch threads")
    p_run.add_argument("--out", type=Path, required=True, help="output folder")
    p_run.add_argument("--no-figure", action="store_true", help="skip regret.png")
    p_run.add_argument("--quiet", action="store_true", help="no progress bar")
    p_run.set_defaults(func=_cmd_run)

    p_rep = bsub.add_parser("report", help="print the summary table of a saved run")
    p_rep.add_argument("path", type=Path, help="folder (or results.json) written by `run`")
    p_rep.add_argument("--figure", type=Path, default=None, help="also write this PNG")
    p_rep.set_defaults(func=_cmd_report)


def _cmd_list(_args: argparse.Namespace) -> int:
    print("benchmarks:")
    for name in BENCHMARK_NAMES:
        b = get_benchmark(name)
        fmax = "unknown (regret vs best found)" if b.f_max is None else f"{b.f_max:.6g}"
        print(f"  {name:20s} d={b.dim}  T={b.budget}  f*={fmax}")
    print("methods:")
    for m in METHOD_NAMES:
        print(f"  {m}{'  (extra, not in paper v1)' if m in EXTRA_METHODS else ''}")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ConfigError("--seeds must be >= 1")
    if args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    cfg = ExperimentConfig(
        benchmarks=args.benchmarks,
        methods=args.methods,
        seeds=tuple(range(args.seed_offset, args.seed_offset + args.seeds)),
        noisy=args.noisy,
        budget=args.budget,
        varsigma=args.varsigma,
        c_h=args.c_h,
        bandwidth_rule=args.bandwidth,
        p_ucb=args.p_ucb,
        gp_lengthscale=args.lengthscale,
        gp_sqrt_beta=args.sqrt_beta,
        opt=AcqOptConfig(n_per_dim=args.candidates_per_dim, maxiter=args.maxiter),
    )
    results = run_experiment(cfg, progress=None if not args.quiet else False)
    out = save_results(results, cfg, args.out)
    if not args.no_figure:
        from ev_nav.bo.boke_plots import plot_benchmarks

        plot_benchmarks(results, out / "regret.png")
    print(format_table(summarise(results)), end="")
    print(f"results written to {out}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    results = load_results(args.path)
    print(format_table(summarise(results)), end="")
    if args.figure is not None:
        from ev_nav.bo.boke_plots import plot_benchmarks

        print(f"figure written to {plot_benchmarks(results, args.figure)}")
    return 0
