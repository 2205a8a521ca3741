#!/usr/bin/env python
"""Change detection under fleet traffic: detection delay and false alarms (issue 31, item 1).

A fleet drives random trips (``--vehicles`` a round, origin and destination ≥ 1 km apart) in the
physical world (losses and noise scale with each segment: ``docs/objective.md``); the shared
model is the exact learner with per-segment scales. Each trip follows the least-energy route
under the physics model, so which roads are driven does not depend on what the model learns:
the detector is measured, not a routing policy. After a warm-up, ``--changes`` step changes are
injected at random rounds, each raising the true expected energy of one segment, or of a
stretch of 2–4 consecutive segments of a driven route, by 15, 25, 35 or 50 %; every change is at
least one noise sd of a traversal (candidate segments are drawn until it is) and is driven at
least ``--min-after`` times after it. The detector (:mod:`ev_nav.gp.changes`) scores every
reading against the model's prediction before the model learns from it; flagged segments are
reset (their readings before the estimated change point forgotten).

Printed: per change size the median detection delay (traversals of the changed segment or
stretch from the change to the alarm, the alarm's reading included; an undetected change counts
as infinite), the same against the change in noise sds beside Lorden's bound for the false-alarm
rate, and false alarms per 1,000 traversals of unchanged roads (after the warm-up). The lines
``detection delay median: N traversals`` (+15 % changes) and ``false alarms per 1000
traversals: X`` carry the targets (≤ 5 and ≤ 1).

Usage: python scripts/bench_drift.py [--quick | --smoke] [--rounds R] [--changes C] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ev_nav.cli import count_arg, seed_arg  # noqa: E402 (after the path)

SIZES = (0.15, 0.25, 0.35, 0.50)


@dataclass
class Change:
    """One injected change."""

    round: int
    segments: np.ndarray
    size: float
    sd_units: float  # the smallest change on the stretch, in noise sds of one traversal
    traversals: int = 0  # of the stretch since the change (up to the alarm)
    delay: float = math.inf


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer rounds and changes (≤ 3 min)")
    mode.add_argument("--smoke", action="store_true", help="a small town, seconds (the suite)")
    p.add_argument(
        "--rounds", type=count_arg, help="fleet rounds (default 700; quick 320; smoke 100)"
    )
    p.add_argument(
        "--changes", type=count_arg, help="injected changes (default 240; quick 80; smoke 16)"
    )
    p.add_argument("--vehicles", type=count_arg, default=8, help="trips a round (default 8)")
    p.add_argument(
        "--warmup", type=count_arg,
        help="rounds before the first change (default 100; smoke 30)",
    )
    p.add_argument("--min-after", type=int, default=12,
                   help="traversals a changed stretch gets after its change, at least")
    p.add_argument("--false-alarm-rate", type=float, default=5e-4,
                   help="the detector's design rate per reading")
    p.add_argument("--fixed-hyper", action="store_true",
                   help="keep the learner's initial hyperparameters, the world's scales (no "
                   "fits; --quick and --smoke do)")
    p.add_argument("--driver", action="store_true",
                   help="a driver's state: one noise variance for every road (segment_scale "
                        "'uniform') and the detector's settings there (per-segment scales)")
    p.add_argument("--seed", type=seed_arg, default=0)
    args = p.parse_args()

    from ev_nav import settings
    from ev_nav.bandits.routing import Router
    from ev_nav.gp.changes import ChangeConfig, ChangeDetector
    from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
    from ev_nav.potential import loss_scale
    from ev_nav.sim.environment import Environment, TruthSpec
    from ev_nav.sim.fleet import NetworkSpec, TripGenerator, TripSpec, load_network
    from ev_nav.trips.changes import DETECTOR_CONFIG

    t_start = time.perf_counter()
    if args.smoke:
        spec = NetworkSpec(kind="synthetic", n_segments=400, seed=2)
        rounds, n_changes, warmup = args.rounds or 100, args.changes or 16, args.warmup or 30
    else:
        osm = settings.data_dir() / "most_monaco.osm.gz"
        if not osm.is_file():
            sys.exit(f"bench_drift: {osm} is missing (set EV_NAV_DATA)")
        spec = NetworkSpec(kind="osm", path=str(osm))
        rounds = args.rounds or (320 if args.quick else 700)
        n_changes = args.changes or (80 if args.quick else 240)
        warmup = args.warmup or 100
    net = load_network(spec)
    env = Environment.create(net, seed=args.seed, truth=TruthSpec(kind="physical"))
    rng = np.random.default_rng(args.seed)

    # the whole trip sequence first: routes follow the physics model, so they are fixed
    trips = TripGenerator(TripSpec(kind="random", min_distance_m=1000.0), net, args.seed)
    router = Router(net)
    weights = loss_scale(net)  # E_det − ΔΦ ≥ 0: the least-energy route under the physics model
    paths: list[list[np.ndarray]] = []
    for _ in range(rounds):
        paths.append([router.route(weights, *trips.next()) for _ in range(args.vehicles)])
    # traversals of every segment after each round (to place changes where they get driven)
    counts = np.zeros((rounds + 1, net.n_segments), dtype=np.int32)
    for r, rp in enumerate(paths):
        counts[r + 1] = counts[r]
        np.add.at(counts[r + 1], np.concatenate(rp), 1)
    sd = env.noise_sd(np.arange(net.n_segments))
    truth0 = env.true_energy.copy()

    changes: list[Change] = []
    used = np.zeros(net.n_segments, dtype=bool)
    attempts = 0
    while len(changes) < n_changes and attempts < 200 * n_changes:
        attempts += 1
        at = int(rng.integers(warmup, max(warmup + 1, rounds - rounds // 5)))
        size = float(SIZES[len(changes) % len(SIZES)])
        path = paths[at][int(rng.integers(len(paths[at])))]
        length = 1 if len(changes) % 2 == 0 else int(rng.integers(2, 5))
        if path.size < length:
            continue
        i = int(rng.integers(path.size - length + 1))
        segs = np.unique(path[i : i + length])
        if segs.size != length or used[segs].any():
            continue
        delta = size * truth0[segs] / sd[segs]  # the change in noise sds of one traversal
        if delta.min() < 1.0:
            continue
        after = counts[rounds, segs].sum() - counts[at, segs].sum()
        if after < args.min_after:
            continue
        used[segs] = True
        changes.append(Change(round=at, segments=segs, size=size, sd_units=float(delta.min())))
    if len(changes) < n_changes:
        print(f"placed {len(changes)} of {n_changes} changes (too few driven candidates)")
    by_round: dict[int, list[Change]] = {}
    for c in changes:
        by_round.setdefault(c.round, []).append(c)

    learn = not (args.fixed_hyper or args.smoke or args.quick)
    scale = "uniform" if args.driver else "loss"
    model = IncrementalGP(
        net, config=IncrementalConfig(segment_scale=scale, learn_hyperparameters=learn),
        seed=args.seed,
    )
    config = DETECTOR_CONFIG if args.driver else ChangeConfig()
    detector = ChangeDetector(
        net.n_segments, replace(config, false_alarm_rate=args.false_alarm_rate)
    )
    changed_from = np.full(net.n_segments, np.iinfo(np.int64).max)  # round of its change
    owner: dict[int, Change] = {}
    for c in changes:
        changed_from[c.segments] = c.round
        for e in c.segments:
            owner[int(e)] = c
    noise_rng = np.random.default_rng(args.seed + 1)
    false_alarms = clean_traversals = resets = near_alarms = 0
    fa_dirs = {1: 0, -1: 0}
    # segments touching a changed one (sharing a junction): where a change leaks through the
    # kernel into the neighbours' predictions
    touched = np.zeros(net.n_nodes if hasattr(net, "n_nodes") else
                       int(max(net.seg_u.max(), net.seg_v.max())) + 1, dtype=bool)
    from tqdm.auto import tqdm

    for r in tqdm(range(rounds), desc="rounds", disable=args.smoke, leave=False):
        for c in by_round.get(r, []):
            env.true_energy[c.segments] = truth0[c.segments] * (1.0 + c.size)
            touched[net.seg_u[c.segments]] = touched[net.seg_v[c.segments]] = True
        ids = np.concatenate(paths[r])
        y = np.concatenate([env.drive(pth, noise_rng) for pth in paths[r]])
        post = model.posterior()
        var = post.std[ids] ** 2 + model.noise_variances(ids)
        events = detector.observe(ids, y, post.mean[ids], var)
        model.update(ids, y)
        changed_now = changed_from[ids] <= r
        for pth in paths[r]:  # a traversal of a stretch is a trip that drives any of it
            hit = pth[changed_from[pth] <= r]
            for c in {id(owner[int(e)]): owner[int(e)] for e in hit}.values():
                if math.isinf(c.delay):
                    c.traversals += 1
        if r >= warmup:
            clean_traversals += int((~changed_now).sum())
        for ev in events:
            c = owner.get(ev.segment)
            if c is not None and changed_from[ev.segment] <= r:
                if math.isinf(c.delay):
                    # traversals up to the alarm: this round's readings of the stretch count
                    c.delay = float(c.traversals)
            elif r >= warmup:
                false_alarms += 1
                fa_dirs[ev.direction] += 1
                e = ev.segment
                near_alarms += bool(touched[net.seg_u[e]] or touched[net.seg_v[e]])
        if events:
            detector.respond(model, events)
            resets += len(events)

    wall = time.perf_counter() - t_start
    fa_rate = 1000.0 * false_alarms / max(clean_traversals, 1)
    lorden = math.log(1.0 / args.false_alarm_rate)
    print(f"bench_drift: {net.name} ({net.n_segments:,} segments), {rounds} rounds × "
          f"{args.vehicles} trips, {len(changes)} changes (single segments and stretches of "
          f"2–4), physical world, exact learner with per-segment scales; detector: two-sided "
          f"CUSUM, k = {detector.drift:g}, h = {detector.threshold:.2f} (design false-alarm "
          f"rate {args.false_alarm_rate:g} a reading); seed {args.seed}")
    print("  change   n   median delay   mean delta [sd]   detected")
    for size in SIZES:
        sel = [c for c in changes if c.size == size]
        if not sel:
            continue
        med = statistics.median(c.delay for c in sel)
        det = sum(not math.isinf(c.delay) for c in sel)
        print(f"  +{100 * size:>3.0f} % {len(sel):>4}   {med:>12}   "
              f"{statistics.mean(c.sd_units for c in sel):>15.2f}   {det}/{len(sel)}")
    print("  delta [sd]   n   median delay   Lorden: ln(ARL0)/(delta²/2) readings "
          "(a stretch gives 2–4 readings a traversal)")
    for lo, hi in ((1, 1.5), (1.5, 2), (2, 3), (3, 5), (5, math.inf)):
        sel = [c for c in changes if lo <= c.sd_units < hi]
        if sel:
            mid = lo if math.isinf(hi) else 0.5 * (lo + hi)
            print(f"  {lo:g}–{hi:g} {len(sel):>6}   {statistics.median(c.delay for c in sel):>12}"
                  f"   {lorden / (0.5 * mid * mid):.1f} (at {mid:g} sd)")
    small = [c.delay for c in changes if c.size == SIZES[0]]
    med15 = statistics.median(small) if small else math.nan
    shown = "inf" if math.isinf(med15) else f"{med15:g}"
    print(f"detection delay median: {shown} traversals (+15 % changes; goal <= 5)")
    print(f"false alarms per 1000 traversals: {fa_rate:.2f} ({false_alarms} on "
          f"{clean_traversals:,} traversals of unchanged roads after the warm-up; goal <= 1)")
    print(f"  of the false alarms: {near_alarms} on roads touching a changed one; "
          f"{fa_dirs[1]} up, {fa_dirs[-1]} down")
    print(f"segments reset: {resets}; whole command: {wall:.0f} s wall")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
