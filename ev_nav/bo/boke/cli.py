"""``ev-nav bo boke run | list | report``: the BOKE study from the command line.

::

    ev-nav bo boke list                       # benchmarks and methods
    ev-nav bo boke run --benchmarks sphere6 --methods boke,gp-ucb --seeds 3 --out runs/x
    ev-nav bo boke run --objective my_problem:f --budget 40 --out runs/mine
    ev-nav bo boke report runs/x              # table (+ figure) from a saved run

``run`` writes ``results.csv``, ``manifest.json`` and (unless ``--no-figures``) ``regret.png``
into ``--out`` and prints the summary table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from ev_nav.bo.boke.figures import plot_benchmarks
from ev_nav.bo.boke.methods import BOKEMaximizerConfig
from ev_nav.bo.boke.problems import BENCHMARK_NAMES, BENCHMARKS, get_benchmark
from ev_nav.bo.boke.registry import EXTRA_METHODS, METHODS
from ev_nav.bo.boke.runner import (
    BOKERunConfig,
    format_table,
    load_results,
    run_experiment,
    summarise,
)
from ev_nav.bo.boke.surrogate import DEFAULT_C_H
from ev_nav.bo.core.cli import Family, add_family, csv_list, execution_config
from ev_nav.bo.core.objective import check_bounds, load_objective
from ev_nav.cli import seed_arg
from ev_nav.errors import ConfigError


def _add_options(p: argparse.ArgumentParser, legacy: bool) -> None:
    p.add_argument(
        "--benchmarks",
        "--benchmark",
        dest="benchmarks",
        type=csv_list,
        default=("sphere6",),
        help="comma-separated benchmark names (see `list`)",
    )
    p.add_argument(
        "--methods",
        "--method",
        dest="methods",
        type=csv_list,
        default=("boke", "boke+", "gp-ucb", "random"),
        help="comma-separated method names (see `list`)",
    )
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (SEED..SEED+n-1)")
    p.add_argument(
        "--seed",
        "--seed-offset",
        dest="seed_offset",
        type=seed_arg,
        default=0,
        help="first seed (default 0): every random draw of a run derives from its seed",
    )
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help="total evaluations T incl. the initial design (default: per benchmark)",
    )
    p.add_argument("--noisy", action="store_true", help="add noise of std 0.1 std(f)")
    p.add_argument(
        "--varsigma",
        type=float,
        default=0.3,
        help="BOKE sub-Gaussian parameter in beta_t (standardised units)",
    )
    p.add_argument("--p-ucb", type=float, default=0.5, help="BOKE+ IKR-UCB probability")
    p.add_argument(
        "--c-h",
        type=float,
        default=DEFAULT_C_H,
        help="bandwidth constant of Scott's rule (unit cube)",
    )
    p.add_argument("--bandwidth", choices=["scott", "silverman", "fixed"], default="scott")
    p.add_argument(
        "--lengthscale",
        type=float,
        default=0.2,
        help="GP-UCB / GP-EI fixed SE lengthscale (unit cube)",
    )
    p.add_argument("--sqrt-beta", type=float, default=2.0, help="GP-UCB sqrt(beta)")
    p.add_argument(
        "--gp-refit-every",
        type=int,
        default=None,
        help="GP-UCB / GP-EI: fit hyperparameters by marginal likelihood every k points "
        "(0: fixed --lengthscale; default 0 on benchmarks, 5 on --objective)",
    )
    p.add_argument(
        "--maxiter",
        type=int,
        default=50,
        help="L-BFGS-B iterations per start (0: random candidates only)",
    )
    p.add_argument("--candidates-per-dim", type=int, default=1000)
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--out", type=Path, required=True, help="output folder")


def _list(_args: argparse.Namespace) -> int:
    print("benchmarks:")
    for name in BENCHMARK_NAMES:
        b = get_benchmark(name)
        fmax = "unknown (regret vs best found)" if b.f_max is None else f"{b.f_max:.6g}"
        print(f"  {name:20s} d={b.dim}  T={b.budget}  f*={fmax}  {BENCHMARKS.entry(name).summary}")
    print("methods:")
    for e in METHODS:
        extra = "  (extra, not in paper v1)" if e.name in EXTRA_METHODS else ""
        print(f"  {e.name:12s} {e.summary}{extra}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        raise ConfigError("--seeds must be >= 1")
    if args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    cfg = BOKERunConfig(
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
        gp_refit_every=args.gp_refit_every,
        opt=BOKEMaximizerConfig(n_per_dim=args.candidates_per_dim, maxiter=args.maxiter),
        threads=args.threads,
        objective=args.objective,
        bounds=None if args.bounds is None else check_bounds(args.bounds, "--bounds"),
    )
    results = run_experiment(cfg, args.out, execution_config(args), progress=not args.quiet)
    if not args.no_figures:
        plot_benchmarks(results, args.out / "regret.png")
    print(format_table(summarise(results)), end="")
    if cfg.objective is not None:
        user = load_objective(cfg.objective, bounds=cfg.bounds)
        for r in results:
            j = max(range(len(r.y_values)), key=r.y_values.__getitem__)
            x = ", ".join(_value(v) for v in user.space.decode(np.asarray(r.X[j]))[0])
            print(f"{r.method} seed {r.seed}: best observed y = {r.y_values[j]:.6g} at x = [{x}]")
    print(f"results written to {args.out}")
    return 0


def _value(v: object) -> str:
    """One input value as printed (JSON-readable: numbers as numbers, choices quoted)."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return json.dumps(v) if isinstance(v, (int, str, bool)) or v is None else json.dumps(str(v))


def _report(args: argparse.Namespace) -> int:
    results = load_results(args.path)
    print(format_table(summarise(results)), end="")
    if args.figure is not None:
        print(f"figure written to {plot_benchmarks(results, args.figure)}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``boke`` (``run``, ``list``, ``report``) to the ``bo`` command group."""
    add_family(
        sub,
        Family(
            "boke",
            "BOKE: BO by kernel regression and density-based exploration (+ baselines)",
            _add_options,
            _run,
            _list,
            _report,
            legacy=False,
        ),
    )
