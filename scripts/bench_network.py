#!/usr/bin/env python
"""Network build and cached-load benchmark (issue 2).

Each case runs in a fresh subprocess so that its peak memory (ru_maxrss) is its own.
Targets: cached load of MoST Monaco < 0.2 s; 1M-segment synthetic build < 120 s and < 8 GB.

Usage: python scripts/bench_network.py [--quick] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _case(kind: str, arg: str, cache_dir: str) -> dict:
    """Run inside the child: build (and for OSM, reload from cache) and report."""
    if kind == "osm":
        from ev_nav.roads.load import load_osm

        t0 = time.perf_counter()
        net = load_osm(arg, cache_dir=cache_dir)
        build = time.perf_counter() - t0
        loads = []
        for _ in range(5):
            t0 = time.perf_counter()
            load_osm(arg, cache_dir=cache_dir)
            loads.append(time.perf_counter() - t0)
        load = statistics.median(loads)
    else:
        from ev_nav.roads.network import RoadNetwork
        from ev_nav.roads.synthetic import synthetic_town

        t0 = time.perf_counter()
        net = synthetic_town(int(arg), seed=0)
        build = time.perf_counter() - t0
        path = Path(cache_dir) / f"town-{arg}.npz"
        net.save(path)
        loads = []
        for _ in range(3):
            t0 = time.perf_counter()
            RoadNetwork.load(path)
            loads.append(time.perf_counter() - t0)
        load = statistics.median(loads)
    return {
        "segments": net.n_segments,
        "connections": net.n_connections,
        "build_s": build,
        "cached_load_s": load,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small cases only (for tests)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_case(*args.child)))
        return 0

    from ev_nav.errors import require_file

    # checked here: a child that fails would end the parent in a CalledProcessError traceback
    monaco = require_file(args.data / "most_monaco.osm.gz", "OSM file")
    cases = [("osm", str(monaco), "MoST Monaco")]
    sizes = [2_000] if args.quick else [10_000, 100_000, 1_000_000]
    cases += [("synthetic", str(n), f"synthetic {n:,}") for n in sizes]
    print(
        f"{'network':<18}{'segments':>11}{'connections':>13}{'build s':>10}"
        f"{'cached load s':>15}{'peak GB':>9}"
    )
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        for kind, arg, label in cases:
            out = subprocess.run(
                [sys.executable, __file__, "--child", kind, arg, cache],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results[label] = r
            print(
                f"{label:<18}{r['segments']:>11,}{r['connections']:>13,}{r['build_s']:>10.2f}"
                f"{r['cached_load_s']:>15.4f}{r['peak_rss_gb']:>9.2f}"
            )
    mon = results["MoST Monaco"]
    print(
        f"target cached load Monaco < 0.2 s: {mon['cached_load_s']:.4f} s "
        f"-> {'met' if mon['cached_load_s'] < 0.2 else 'MISSED'}"
    )
    if "synthetic 1,000,000" in results:
        big = results["synthetic 1,000,000"]
        ok = big["build_s"] < 120 and big["peak_rss_gb"] < 8
        print(
            f"target 1M build < 120 s and < 8 GB: {big['build_s']:.1f} s, "
            f"{big['peak_rss_gb']:.2f} GB -> {'met' if ok else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
