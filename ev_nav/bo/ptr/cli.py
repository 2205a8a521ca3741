"""``ev-nav bo ptr`` (benchmarks) and ``ev-nav bo ptr-ev`` (EV battery-reserve application)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ev_nav.errors import ConfigError


def _methods(spec: list[str]) -> list[str]:
    from ev_nav.bo.ptr_policies import LSE_METHODS, OPT_METHODS, method_task

    out: list[str] = []
    for item in spec:
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


def _run_ptr(args: argparse.Namespace) -> int:
    import torch

    from ev_nav.bo.ptr_runner import (
        RunConfig,
        plot_results,
        results_table,
        run_experiment,
        save_results,
    )

    torch.set_num_threads(args.threads)
    methods = _methods(args.method)
    progress = not args.quiet and sys.stderr.isatty()
    t0 = time.perf_counter()
    results = []
    for name in methods:
        cfg = RunConfig(
            benchmark=args.benchmark,
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
        )
        results.append(run_experiment(cfg, progress=progress))
    wall = time.perf_counter() - t0
    out = Path(args.out or f"runs/ptr/{args.benchmark}-{results[0].task}")
    save_results(results, out, wall_seconds=wall)
    fig = plot_results(
        results, out / "curves.png", title=f"{args.benchmark} ({args.trials} trials)"
    )
    if not args.quiet:
        print(results_table(results))
        print(f"wall time {wall:.1f} s; results in {out}/ (results.json, table.md, metadata.json)")
        print(f"figure: {fig}")
    return 0


def _run_ptr_ev(args: argparse.Namespace) -> int:
    import torch

    from ev_nav.bo.ptr_ev import EVReserveConfig, run_ev_reserve

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
    from ev_nav.bo.ptr_benchmarks import BENCHMARKS

    p = sub.add_parser(
        "ptr",
        help="probability-threshold robustness BO (BPT-UCB/TS/LSE and baselines)",
        description="Run PTR methods on a benchmark; prints mean ± 2 SE of the inference regret "
        "(optimization) or F1 (level sets) and writes results, metadata and a figure.",
    )
    p.add_argument("--benchmark", required=True, choices=BENCHMARKS)
    p.add_argument(
        "--method",
        action="append",
        required=True,
        help="method name(s), comma-separated or repeated; 'all-opt' / 'all-lse' for every one",
    )
    p.add_argument("--iterations", "-T", type=int, default=60)
    p.add_argument("--trials", "-n", type=int, default=5)
    p.add_argument("--seed", type=int, default=0, help="seed of the first trial")
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
    p.add_argument("--out", default=None, help="output folder (default runs/ptr/NAME-TASK)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_run_ptr)

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
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--out", default=None)
    e.add_argument("--threads", type=int, default=1)
    e.add_argument("--quiet", action="store_true")
    e.set_defaults(func=_run_ptr_ev)
