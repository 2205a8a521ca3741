"""``ev-nav bo ptr run | list | report`` (benchmarks, your own objective) and ``ev-nav bo
ptr-ev`` (the EV battery-reserve application)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from ev_nav.bo.core.cli import Family, add_family, execution_config, json_list
from ev_nav.bo.core.objective import check_bounds
from ev_nav.bo.core.runs import check_output_folder
from ev_nav.bo.ptr.ev import EVReserveConfig, run_ev_reserve
from ev_nav.bo.ptr.problems import BENCHMARKS
from ev_nav.bo.ptr.registry import LSE_METHODS, METHODS, OPT_METHODS, method_task
from ev_nav.bo.ptr.runner import (
    PTRRunConfig,
    load_results,
    plot_results,
    recommendations,
    results_table,
    run_experiments,
)
from ev_nav.cli import seed_arg
from ev_nav.errors import ConfigError


def _methods(spec: list[str] | None) -> list[str]:
    out: list[str] = []
    for item in spec or []:
        for name in item.split(","):
            name = name.strip().lower()
            if name == "all-opt":
                out.extend(OPT_METHODS)
            elif name == "all-lse":
                out.extend(m for m in LSE_METHODS if m != "bpt-lse-stop")
            elif name:
                method_task(name)  # raises ConfigError for unknown names
                out.append(name)
    tasks = {method_task(m) for m in out}
    if len(tasks) > 1:
        raise ConfigError("mix of optimization and LSE methods: run them separately")
    if not out:
        raise ConfigError("no method given; use --method bpt-ucb (or all-opt / all-lse)")
    return list(dict.fromkeys(out))


def _add_options(p: argparse.ArgumentParser, legacy: bool) -> None:
    p.add_argument(
        "--benchmark",
        choices=BENCHMARKS.names,
        default=None,
        help="benchmark (see `list`); or give --objective",
    )
    p.add_argument(
        "--method",
        "--methods",
        dest="method",
        action="append",
        default=None,
        help="method name(s), comma-separated or repeated; 'all-opt' / 'all-lse' for every one",
    )
    p.add_argument("--iterations", "-T", type=int, default=60)
    p.add_argument("--trials", "--seeds", "-n", dest="trials", type=int, default=5)
    p.add_argument(
        "--seed", "--seed-offset", dest="seed", type=seed_arg, default=0,
        help="seed of the first trial",
    )
    p.add_argument("--alpha", type=float, default=None, help="LSE level (default: benchmark's)")
    p.add_argument("--beta", type=float, default=None, help="PTR interval beta")
    p.add_argument("--m", type=float, default=2.0, help="moment order m >= 2")
    p.add_argument("--eta", type=float, default=0.0, help="threshold slack eta >= 0")
    p.add_argument("--n-init", type=int, default=None, help="random initial queries")
    p.add_argument(
        "--beta-schedule",
        choices=("constant", "theory"),
        default="constant",
        help="theory: beta_t = |X| pi^2 t^2 / (3 delta) for bpt-ucb / bpt-lse",
    )
    p.add_argument("--delta", type=float, default=0.1, help="confidence of the theory schedule")
    p.add_argument(
        "--uncontrollable-w",
        action="store_true",
        help="extension: draw w_t from p(w) instead of choosing it (no guarantee)",
    )
    p.add_argument(
        "--environment",
        type=json_list,
        default=None,
        metavar="JSON",
        help="with --objective: the w grid, e.g. '[-1, 0, 1]'",
    )
    p.add_argument(
        "--weights", type=json_list, default=None, metavar="JSON", help="p(w) on the grid"
    )
    p.add_argument("--threshold", type=float, default=None, help="with --objective: h of P[f > h]")
    p.add_argument(
        "--points-per-axis", type=int, default=None, help="design grid of a user objective"
    )
    p.add_argument("--out", default=None, help="output folder (default runs/ptr/NAME-TASK)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per trial")


def _run(args: argparse.Namespace) -> int:
    if args.benchmark is None and args.objective is None:
        raise ConfigError("give --benchmark NAME (see `ev-nav bo ptr list`) or --objective")
    if args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    methods = _methods(args.method)
    progress = not args.quiet and sys.stderr.isatty()
    t0 = time.perf_counter()
    configs = [
        PTRRunConfig(
            benchmark=args.benchmark or "",
            method=name,
            iterations=args.iterations,
            trials=args.trials,
            seed=args.seed,
            alpha=args.alpha,
            beta=args.beta,
            m=args.m,
            eta=args.eta,
            n_init=args.n_init,
            uncontrollable_w=args.uncontrollable_w,
            beta_schedule=args.beta_schedule,
            delta=args.delta,
            objective=args.objective,
            bounds=None if args.bounds is None else check_bounds(args.bounds, "--bounds"),
            environment=None if args.environment is None else tuple(args.environment),
            weights=None if args.weights is None else tuple(args.weights),
            threshold=args.threshold,
            points_per_axis=args.points_per_axis,
            threads=args.threads,
        )
        for name in methods
    ]
    task = method_task(methods[0])
    label = (args.objective or args.benchmark).replace(":", "_").replace("/", "_")
    out = Path(args.out or f"runs/ptr/{label}-{task}")
    results = run_experiments(configs, out, execution_config(args), progress=progress)
    wall = time.perf_counter() - t0
    if args.objective is not None:  # a black box: no true PTR, so no regret or F1 curves
        if not args.quiet:
            print(recommendations(results))
            files = "results.csv, recommendations.csv, manifest.json"
            if (out / "level_set.csv").exists():
                files = "results.csv, recommendations.csv, level_set.csv, manifest.json"
            print(f"wall time {wall:.1f} s; results in {out}/ ({files})")
        return 0
    if not args.quiet:
        print(results_table(results))
        print(f"wall time {wall:.1f} s; results in {out}/ (results.csv, manifest.json)")
    if not args.no_figures:
        title = f"{configs[0].problem_label} ({args.trials} trials)"
        fig = plot_results(results, out / "curves.png", title=title)
        if not args.quiet:
            print(f"figure: {fig}")
    return 0


def _list(_args: argparse.Namespace) -> int:
    print("methods (optimization):")
    for e in METHODS:
        if e.value.task == "opt":
            print(f"  {e.name:16s} {e.summary}")
    print("methods (level-set estimation):")
    for e in METHODS:
        if e.value.task == "lse":
            print(f"  {e.name:16s} {e.summary}")
    print("benchmarks:")
    for e in BENCHMARKS:
        print(f"  {e.name:20s} {e.summary}")
    return 0


def _report(args: argparse.Namespace) -> int:
    results = load_results(args.path)
    print(results_table(results))
    if args.figure is not None:
        print(f"figure written to {plot_results(results, args.figure)}")
    return 0


def _run_ptr_ev(args: argparse.Namespace) -> int:
    if args.threads < 1:
        raise ConfigError("--threads must be >= 1")
    torch.set_num_threads(args.threads)
    cfg = EVReserveConfig(
        reserve_kwh=args.reserve_kwh,
        alpha=args.alpha,
        start_soc_kwh=args.start_kwh,
        wind_mean_mps=args.wind_mean,
        wind_std_mps=args.wind_std,
        ambient_c=args.ambient_c,
        iterations=args.iterations,
        seed=args.seed,
    )
    if args.out:
        check_output_folder(args.out, "ptr-ev")  # before the simulations, not after
    report = run_ev_reserve(cfg)
    if not args.quiet:
        print(report.text())
    if args.out:
        report.save(args.out)
        if not args.quiet:
            print(f"results in {args.out}/")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bo ptr`` and ``bo ptr-ev``."""
    add_family(
        sub,
        Family(
            "ptr",
            "probability-threshold robustness BO (BPT-UCB/TS/LSE and baselines)",
            _add_options,
            _run,
            _list,
            _report,
        ),
    )

    e = sub.add_parser(
        "ptr-ev",
        help="cruise speeds that keep a battery reserve with probability >= alpha (BPT-LSE)",
        description="EV application: on a fixed synthetic route, find the cruise-speed caps "
        "whose probability of arriving with at least RESERVE kWh under random head-wind is >= "
        "alpha, with BPT-LSE choosing which (speed, wind) simulations to run.",
    )
    e.add_argument("--reserve-kwh", type=float, default=5.0)
    e.add_argument("--alpha", type=float, default=0.9)
    e.add_argument("--start-kwh", type=float, default=None, help="energy at departure")
    e.add_argument("--wind-mean", type=float, default=1.0, help="mean head-wind [m/s]")
    e.add_argument("--wind-std", type=float, default=3.0, help="head-wind std [m/s]")
    e.add_argument("--ambient-c", type=float, default=0.0, help="ambient temperature [°C]")
    e.add_argument("--iterations", "-T", type=int, default=60)
    e.add_argument("--seed", type=seed_arg, default=0)
    e.add_argument("--out", default=None)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--quiet", action="store_true")
    e.set_defaults(func=_run_ptr_ev)
