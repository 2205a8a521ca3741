#!/usr/bin/env python
"""Whole-trip speed of the exact learner against the paper's Algorithm 3, in the same run.

One *trip* = posterior over all segments → Thompson index → Dijkstra on the paper route A →
``update`` with the trip's per-segment observations: what a fleet simulation or the ``route`` +
``observe`` commands do per trip. Per network and learner, in a fresh subprocess with one BLAS
thread (so peak memory, ru_maxrss, is its own):

1. 200 trips are recorded first — driven by the exact learner's own Thompson agent (so its
   support D is what a run reaches), fed to the Algorithm-3 SVGP with ``record`` (history without
   learning steps: the same batch and inducing-set sizes as after 200 learning trips);
2. then ``--trips`` steady-state trips are timed; the medians are compared.

The exact learner's hyperparameter refreshes run on their schedule during step 1; a refresh
that falls in the timed window shows in the mean, not the median (``mean`` is printed too).

``--floor`` measures instead what an exact learner that stores only the D driven columns
(``C = K[:, S]``, N × D, no N × N covariance) would have to pay per trip on each network: the
support D and the distinct segments per trip k are taken from a Bayes-independent Thompson agent
driving the same route (cheap at any size; the exact learner explores a similar set, compare
``D`` in the normal output), and the two products every such trip needs are timed with one
thread on matrices of those shapes — the variance update ``C W`` (N × D times D × k) and the mean
``C α``. Their sum is a lower bound for that design on this machine (sparse solves of new
kernel columns, the router and the k × k algebra come on top).

The regional learner (past the exact learner's 12,000 segments: the 100k town and the 1M
region, against the former SVGP fallback) has its own: ``scripts/bench_regional.py``.

Usage: python scripts/bench_learner.py [--networks monaco,luxembourg,town100k]
       [--recorded 200] [--trips 15] [--quick] [--floor]
Prints lines such as ``monaco trip speed-up: 12.3x``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NETWORKS = ("monaco", "luxembourg", "town100k")
LEARNERS = ("exact", "svgp")
TARGET_MS = {"monaco": 40.0, "luxembourg": 100.0, "town100k": 1000.0}


def _network(name: str):
    from ev_nav.sim.experiments import paper_routes
    from ev_nav.sim.fleet import NetworkSpec, TripGenerator, TripSpec, load_network

    if name in ("monaco", "luxembourg"):
        net_spec, trips = next(r for r in paper_routes(networks=(name,)) if r[1].name == "A")
    else:
        size = {"town100k": 100_000, "town600": 600}[name]
        net_spec = NetworkSpec(kind="synthetic", n_segments=size, seed=0)
        net = load_network(net_spec)
        far = TripGenerator(TripSpec(kind="random", min_distance_m=2000.0), net, 0).next()
        trips = TripSpec(kind="fixed", start=far[0], goal=far[1], name="A")
    net = load_network(net_spec)
    start, goal = TripGenerator(trips, net, 0).fixed
    return net, start, goal


def _case(name: str, learner: str, recorded: int, trips: int, queue) -> None:
    import scipy.linalg  # noqa: F401  (its OpenBLAS must be loaded before the limit below)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
    from ev_nav.bandits.agent import Agent
    from ev_nav.gp.incremental import IncrementalGP
    from ev_nav.gp.prior import PriorSettings
    from ev_nav.gp.svgp import SVGPModel

    net, start, goal = _network(name)
    rng = np.random.default_rng(0)
    truth = net.e_det() * np.exp(0.1 * rng.standard_normal(net.n_segments))
    noise = PriorSettings.from_network(net).noise_std
    t0 = time.perf_counter()
    # the recorded history always comes from the exact learner's own agent, so both learners
    # see the same 200 trips
    driver = IncrementalGP(net, seed=0)
    agent = Agent(net, driver, "ts", seed=0)
    history = []
    for t in range(1, recorded + 1):
        path = agent.plan(start, goal, t)
        y = truth[path] + noise * rng.standard_normal(path.size)
        driver.update(path, y)
        history.append((path, y))
    setup_s = time.perf_counter() - t0
    if learner == "exact":
        model = driver
    else:
        model = SVGPModel(net, seed=0)
        for path, y in history:
            model.record(path, y)
        model.update(*history[-1])  # selects the inducing set once, outside the timed window
        agent = Agent(net, model, "ts", seed=0)
    times = []
    for t in range(recorded + 1, recorded + trips + 1):
        t1 = time.perf_counter()
        path = agent.plan(start, goal, t)
        model.update(path, truth[path] + noise * rng.standard_normal(path.size))
        model.posterior()  # the next trip's posterior is part of this trip's cost
        times.append(time.perf_counter() - t1)
    queue.put(
        {
            "network": name,
            "learner": learner,
            "segments": net.n_segments,
            "support": getattr(driver, "n_support", None),
            "median_ms": 1000 * statistics.median(times),
            "mean_ms": 1000 * statistics.fmean(times),
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "setup_s": setup_s,
        }
    )


def _floor_case(name: str, recorded: int, repeats: int, queue: mp.Queue) -> None:
    import scipy.linalg  # noqa: F401  (its OpenBLAS must be loaded before the limit below)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)
    from ev_nav.bandits.agent import Agent
    from ev_nav.gp.independent import BIModel
    from ev_nav.gp.prior import PriorSettings

    net, start, goal = _network(name)
    rng = np.random.default_rng(0)
    truth = net.e_det() * np.exp(0.1 * rng.standard_normal(net.n_segments))
    noise = PriorSettings.from_network(net).noise_std
    model = BIModel(net)
    agent = Agent(net, model, "ts", seed=0)
    driven = np.zeros(net.n_segments, dtype=bool)
    per_trip = []
    for t in range(1, recorded + 1):
        path = agent.plan(start, goal, t)
        model.update(path, truth[path] + noise * rng.standard_normal(path.size))
        driven[path] = True
        per_trip.append(np.unique(path).size)
    n, d = net.n_segments, int(driven.sum())
    k = int(statistics.median(per_trip[-20:]))
    gen = np.random.default_rng(1)
    c = np.asfortranarray(gen.standard_normal((n, d)))
    w = gen.standard_normal((d, k))
    alpha = gen.standard_normal(d)

    def timed(op: Callable[[], object]) -> float:
        op()  # warm-up
        return 1000 * statistics.median(timeit.repeat(op, number=1, repeat=repeats))

    queue.put(
        {
            "network": name,
            "segments": n,
            "support": d,
            "per_trip": k,
            "variance_ms": timed(lambda: c @ w),
            "mean_ms": timed(lambda: c @ alpha),
            "columns_gb": c.nbytes / 1e9,
        }
    )


def _in_subprocess(target: Callable[..., None], *args: object) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    out = queue.get()
    proc.join()
    return out


def run_case(name: str, learner: str, recorded: int, trips: int) -> dict:
    return _in_subprocess(_case, name, learner, recorded, trips)


def run_floor(name: str, recorded: int, repeats: int = 3) -> dict:
    return _in_subprocess(_floor_case, name, recorded, repeats)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--networks", help=f"of {', '.join(NETWORKS)} (default monaco,luxembourg; quick town600)"
    )
    ap.add_argument(
        "--recorded", type=int, help="trips recorded before the timed ones (default 200; quick 11)"
    )
    ap.add_argument("--trips", type=int, help="timed trips (default 15; quick 2)")
    ap.add_argument("--learners", default="exact,svgp", help="of exact, svgp (default both)")
    ap.add_argument(
        "--quick", action="store_true",
        help="a 600-segment town, 11 recorded and 2 timed trips, unless given (CI smoke test)",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--floor", action="store_true",
        help="the per-trip floor of a driven-columns exact learner instead (see above)",
    )
    args = ap.parse_args(argv)
    # quick: 11 recorded trips, so no hyperparameter refresh falls in the timed window
    quick = {"networks": "town600", "recorded": 11, "trips": 2}
    full = {"networks": "monaco,luxembourg", "recorded": 200, "trips": 15}
    for name, value in (quick if args.quick else full).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.recorded < 0 or args.trips < 1:
        ap.error(f"--recorded must be >= 0 and --trips >= 1, got {args.recorded} and {args.trips}")
    nets = [n.strip() for n in args.networks.split(",")]
    learners = [x.strip() for x in args.learners.split(",")]
    for n in nets:
        if n not in (*NETWORKS, "town600"):
            ap.error(f"unknown network {n!r}; use {', '.join(NETWORKS)}")
    for x in learners:
        if x not in LEARNERS:
            ap.error(f"unknown learner {x!r}; use {', '.join(LEARNERS)}")
    results = []
    if args.floor:
        for name in nets:
            r = run_floor(name, args.recorded)
            results.append(r)
            goal = TARGET_MS.get(name)
            total = r["variance_ms"] + r["mean_ms"]
            print(
                f"{name} driven-columns floor: N = {r['segments']:,}, D = {r['support']:,}, "
                f"k = {r['per_trip']}: C W {r['variance_ms']:.0f} ms + C alpha "
                f"{r['mean_ms']:.0f} ms = {total:.0f} ms per trip"
                + (f" (goal <= {goal:.0f} ms)" if goal is not None else "")
                + f", C takes {r['columns_gb']:.2f} GB",
                flush=True,
            )
        if args.json:
            from ev_nav.provenance import atomic_write_text

            atomic_write_text(args.json, json.dumps(results, indent=1))
        return 0
    for name in nets:
        row = {}
        for learner in learners:
            r = run_case(name, learner, args.recorded, args.trips)
            results.append(r)
            row[learner] = r
            print(
                f"{name:>10} {learner:>5}: median {r['median_ms']:8.1f} ms/trip, mean "
                f"{r['mean_ms']:8.1f} ms, peak {r['peak_mb']:6.0f} MB (N = {r['segments']}, "
                f"D = {r['support']}, {args.recorded} recorded trips in {r['setup_s']:.0f} s)",
                flush=True,
            )
        if "exact" in row:
            goal = TARGET_MS.get(name)
            verdict = ""
            if goal is not None:
                met = "met" if row["exact"]["median_ms"] <= goal else "MISSED"
                verdict = f" (goal <= {goal:.0f} ms: {met})"
            print(f"{name} exact learner: {row['exact']['median_ms']:.1f} ms/trip{verdict}")
        if len(row) == 2:
            ratio = row["svgp"]["median_ms"] / row["exact"]["median_ms"]
            print(f"{name} trip speed-up: {ratio:.1f}x")
    if args.json:
        from ev_nav.provenance import atomic_write_text

        atomic_write_text(args.json, json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
