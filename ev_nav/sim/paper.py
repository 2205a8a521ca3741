"""Shared driver of the ``scripts/reproduce_fig*.py`` scripts: run a grid, write figures + notes."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ev_nav.cli import count_arg
from ev_nav.provenance import atomic_write_text
from ev_nav.settings import RESULTS_DIR
from ev_nav.sim.fleet import RunSpec
from ev_nav.sim.grid import make_executor, run_grid


def parser(description: str) -> argparse.ArgumentParser:
    """Common options of the reproduction scripts; ``description`` is the script's docstring."""
    p = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="tiny settings (CI smoke test)")
    p.add_argument("--horizon", type=count_arg, help="trips per run (paper: 500)")
    p.add_argument("--seeds", type=count_arg,
                   help="repetitions (default the figure's: the paper's 5; reproduce_hills 10)")
    p.add_argument(
        "--out", type=Path,
        help="output folder (default docs/results/<figure>; with --quick <figure>-quick); finished "
        "runs there are reused unless --fresh",
    )
    p.add_argument("--executor", choices=("local", "inprocess", "dask"), default="local")
    p.add_argument("--workers", type=count_arg, help="local pool size")
    p.add_argument("--dask-scheduler", help="tcp://HOST:PORT of a Dask scheduler")
    p.add_argument("--fresh", action="store_true", help="ignore finished runs in --out")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--agents", help="only these agents (comma-separated labels, e.g. BI-TS,GP-TS)")
    p.add_argument("--networks", help="only these networks (comma-separated: monaco,luxembourg)")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: write the report of the runs finished in --out")
    return p


def select(specs: list[RunSpec], args: argparse.Namespace) -> list[RunSpec]:
    """Apply ``--agents`` / ``--networks`` filters (runs already finished are kept on disk).

    A name that matches none of this run's agents or networks is a one-line error (exit 2): it
    would otherwise run nothing and still write an empty report.
    """
    for option, names, attr in (
        ("--agents", args.agents, "agent"),
        ("--networks", args.networks, "network"),
    ):
        if not names:
            continue
        keep = {n.strip() for n in names.split(",")}
        known = sorted({getattr(s, attr).label for s in specs})
        unknown = sorted(keep - set(known))
        if unknown:
            print(
                f"error: {option} names no {attr} of this run: {', '.join(unknown)} "
                f"(its {attr}s: {', '.join(known)})",
                file=sys.stderr,
            )
            raise SystemExit(2)
        specs = [s for s in specs if getattr(s, attr).label in keep]
    return specs


def settings(args: argparse.Namespace, horizon: int = 500, seeds: int = 5) -> tuple[int, list[int]]:
    """(horizon, seeds) from the command line, the paper's values, or the --quick ones."""
    if args.quick:
        return args.horizon or 3, list(range(args.seeds or 1))
    return args.horizon or horizon, list(range(args.seeds or seeds))


def run(
    name: str,
    args: argparse.Namespace,
    specs: list[RunSpec],
    figures: Callable[[Path], list[Path]],
    report_specs: list[RunSpec] | None = None,
) -> Path:
    """Execute the grid for figure ``name``, then call ``figures(out_dir)``; print a summary.

    The report (``summary.*``, ``regret.png``, ``results.csv``) covers the finished runs of
    ``report_specs`` (default ``specs``): pass the whole figure there when ``specs`` is a subset
    (``--agents``/``--networks``) so runs finished by earlier invocations are included. Run
    folders of other specs — e.g. left by an older version whose spec, hence run id, differed —
    are named and left out instead of being averaged in as extra seeds.
    """
    from ev_nav.sim.report import write_report

    out = args.out or RESULTS_DIR / (name + ("-quick" if args.quick else ""))
    report_only = args.report_only
    if report_only and not any((Path(out) / "runs").glob("*/trips.csv")):
        # (an empty runs/ folder, as an early Ctrl-C leaves, "wrote" figures that were not)
        print(f"error: --report-only: {out} has no finished runs to report", file=sys.stderr)
        raise SystemExit(2)
    failed = []
    t0 = time.perf_counter()
    if not report_only:  # (the grid's own grid.json is left as its last run wrote it)
        kind = "dask" if args.dask_scheduler else args.executor
        executor = make_executor(kind, workers=args.workers, dask_scheduler=args.dask_scheduler)
        failed = run_grid(
            specs,
            out,
            executor=executor,
            resume=not args.fresh,
            checkpoint_every=50,
            progress=not args.quiet,
            config={"figure": name, "quick": args.quick, "n_runs": len(specs)},
        ).failed
    wall = time.perf_counter() - t0
    wanted = [s.run_id for s in (report_specs if report_specs is not None else specs)]
    runs_dir = Path(out) / "runs"
    folders = {p.name for p in runs_dir.iterdir() if p.is_dir()} if runs_dir.is_dir() else set()
    other = sorted(folders - set(wanted))
    if other:
        print(
            f"{len(other)} run folder(s) in {runs_dir} are not runs of this figure's current "
            f"specs and are left out of the report: {', '.join(other[:6])}"
            + (" …" if len(other) > 6 else "")
        )
    table = write_report(out, run_ids=wanted)
    written = figures(out)
    print(table)
    comparison = _comparison(out)
    if comparison:
        atomic_write_text(out / "comparison.md", comparison + "\n")
        print("\n" + comparison)
    ran = "report only" if report_only else f"{len(specs)} runs, {len(failed)} failed"
    print(f"\n{name}: {ran}, wall time {wall:.0f} s")
    for o in failed:
        print(f"  FAILED {o.run_id}: {o.error}")
    for p in written:
        print(f"  wrote {p}")
    return out


def _comparison(out: Path) -> str:
    """GP vs BI per route and index rule, when the report has both (Fig. 2)."""
    import pandas as pd

    from ev_nav.sim.report import model_comparison

    path = out / "summary.csv"
    if not path.is_file():
        return ""
    summary = pd.read_csv(path)
    agents = set(summary["agent"])
    if not (any(a.startswith("GP-") for a in agents) and any(a.startswith("BI-") for a in agents)):
        return ""
    return model_comparison(summary)


def quick_subset(specs: list[RunSpec]) -> list[RunSpec]:
    """For ``--quick``: the first route only and small GP inducing sets/batches."""
    from dataclasses import replace

    first = (specs[0].network, specs[0].trips)
    return [
        replace(s, agent=replace(s.agent, num_inducing=200, batch_size=300))
        for s in specs
        if (s.network, s.trips) == first
    ]
