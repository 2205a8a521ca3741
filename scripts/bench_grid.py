#!/usr/bin/env python
"""Grid executor benchmark (issue 8): local pool speed-up and Dask overhead.

The same grid (independent runs of BI-TS fleets on the synthetic town) is executed in-process, on
the local process pool and on a Dask LocalCluster, each into a fresh folder; the aggregated
results must be identical. Targets: local pool ≥ 1.7× faster than in-process on 2 cores; the Dask
executor's per-run overhead relative to the local pool is reported.
Usage: python scripts/bench_grid.py [--quick] [--runs N] [--horizon T]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from ev_nav.cli import count_arg
from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec
from ev_nav.sim.grid import make_executor, run_grid


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="4 runs of 10 rounds (unless given)")
    p.add_argument("--runs", type=count_arg, help="independent runs (default 8; quick 4)")
    p.add_argument(
        "--horizon", type=count_arg, help="fleet rounds a run (default 150; quick 10)"
    )
    p.add_argument(
        "--segments", type=count_arg, default=3000, help="synthetic town size (default 3000)"
    )
    args = p.parse_args()
    n_runs = args.runs or (4 if args.quick else 8)
    horizon = args.horizon or (10 if args.quick else 150)
    cores = os.cpu_count() or 1
    specs = [
        RunSpec(
            network=NetworkSpec(kind="synthetic", n_segments=args.segments, seed=0),
            agent=AgentSpec(model="bi", policy="ts"),
            trips=TripSpec(kind="random", vehicles=4, min_distance_m=1000.0, name="rnd"),
            horizon=horizon,
            seed=s,
        )
        for s in range(n_runs)
    ]
    timings = {}
    frames = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("inprocess", "local", "dask"):
            ex = make_executor(kind, workers=cores, dask_local=cores)
            t0 = time.perf_counter()
            res = run_grid(specs, Path(tmp) / kind, executor=ex, progress=False)
            timings[kind] = time.perf_counter() - t0
            assert not res.failed, res.failed
            frames[kind] = pd.read_csv(Path(tmp) / kind / "results.csv")
    same = all(frames["inprocess"].equals(frames[k]) for k in ("local", "dask"))
    speedup = timings["inprocess"] / timings["local"]
    overhead = (timings["dask"] - timings["local"]) / n_runs
    print(f"{n_runs} runs x {horizon} rounds x 4 vehicles, {cores} cores")
    for kind, t in timings.items():
        print(f"  {kind:<10} {t:8.2f} s")
    print(f"identical aggregated results across executors: {same}")
    print(
        f"local pool speed-up over in-process: {speedup:.2f}x "
        f"(target >= 1.7x on 2 cores) -> {'met' if speedup >= 1.7 else 'MISSED'}"
    )
    print(
        f"Dask LocalCluster overhead vs local pool: {overhead * 1000:+.0f} ms per run "
        f"({timings['dask'] / timings['local']:.2f}x the pool's wall time)"
    )
    return 0 if same else 1


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
