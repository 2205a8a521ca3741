#!/usr/bin/env python
"""Map-matching benchmark (issue 29, item 10): accuracy and time for 10-minute GPS tracks.

Drives random shortest paths, records them as GPS tracks (10 m Gaussian noise per coordinate, a
fix every 1–2 s, city speed: :func:`ev_nav.sim.gps.simulate_track`), cuts each track at 10
minutes and matches it with :func:`ev_nav.roads.matching.match_track`. Accuracy is the share of
segments right (longest common subsequence of matched and driven segments over the longer of
the two), over all segments and over the fully driven ones (without the half-driven first and
last). Time is per track, after the network's geometry index is built (reported apart, once per
network).

Target: a 10-minute track matched at least 1000x faster than real time (under 0.6 s).
Usage: python scripts/bench_matching.py [--quick] [--drives 20] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

import numpy as np

from ev_nav import settings
from ev_nav.cli import count_arg

REPO = Path(__file__).resolve().parents[1]
TRACK_S = 600.0
TARGET_RATIO = 1000.0


def bench(label: str, net, drives: int) -> float:
    """Match ``drives`` 10-minute tracks on ``net``; print one row; return the real-time ratio."""
    from ev_nav.bandits.routing import Router
    from ev_nav.roads.matching import MatchConfig, _geometry, match_track
    from ev_nav.sim.gps import common_segments, simulate_track

    t0 = time.perf_counter()
    _geometry(net)
    index_s = time.perf_counter() - t0
    router = Router(net)
    rng = np.random.default_rng(0)
    times, points = [], []
    right = total = right_in = total_in = 0
    while len(times) < drives:
        a, b = (int(x) for x in rng.integers(net.n_segments, size=2))
        route = router.route(net.length_m, a, b)
        track = simulate_track(net, route, rng, noise_m=10.0)
        if track.time_s[-1] < TRACK_S:
            continue  # shorter than 10 minutes: draw another
        keep = track.time_s <= TRACK_S
        offsets = np.cumsum(net.length_m[route])
        driven = route[: int(np.searchsorted(offsets, track.route_m[keep][-1])) + 1]
        t0 = time.perf_counter()
        m = match_track(net, track.lon[keep], track.lat[keep], MatchConfig(gps_sigma_m=10.0))
        times.append(time.perf_counter() - t0)
        points.append(int(keep.sum()))
        right += common_segments(m.segments, driven)
        total += max(m.segments.size, driven.size)
        right_in += common_segments(m.segments, driven[1:-1])
        total_in += max(m.segments.size, driven.size) - 2
    med = statistics.median(times)
    ratio = TRACK_S / med
    print(
        f"{label:<22}{net.n_segments:>10,}{index_s:>10.2f}{statistics.median(points):>9.0f}"
        f"{1000 * med:>12.1f}{1000 * max(times):>10.1f}{ratio:>10.0f}"
        f"{100 * right / total:>9.2f}{100 * right_in / total_in:>9.2f}"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="few drives, no Luxembourg (tests)")
    parser.add_argument(
        "--drives", type=count_arg, help="10-minute drives per network (default 20; quick 2)"
    )
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()
    from ev_nav.roads.load import load_osm
    from ev_nav.roads.synthetic import synthetic_town

    drives = args.drives or (2 if args.quick else 20)
    nets = [("synthetic town 20k", lambda: synthetic_town(20_000, seed=0))]
    cache = settings.network_cache_dir()
    nets.append(("MoST Monaco", lambda: load_osm(args.data / "most_monaco.osm.gz",
                                                 cache_dir=cache)))
    if not args.quick:
        nets.append(("LuST Luxembourg", lambda: load_osm(args.data / "lust_luxembourg.osm.gz",
                                                         cache_dir=cache)))
    print(f"10-minute tracks, 10 m GPS noise, a fix every 1-2 s; {drives} drives per network")
    print(f"{'network':<22}{'segments':>10}{'index s':>10}{'points':>9}{'median ms':>12}"
          f"{'max ms':>10}{'x real':>10}{'all %':>9}{'full %':>9}")
    worst = np.inf
    for label, make in nets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            net = make()
        worst = min(worst, bench(label, net, drives))
    verdict = "met" if worst >= TARGET_RATIO else "MISSED"
    print(f"target 10-minute track >= {TARGET_RATIO:.0f}x real time: {worst:.0f}x -> {verdict}")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
