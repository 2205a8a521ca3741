#!/usr/bin/env python
"""Routing benchmark (issue 4): our Dijkstra vs networkx, and whole-trip latency.

* Dijkstra per trip: ``Router.route`` (CSR built once, weights swapped per trip, the compiled
  bidirectional kernel of ``ev_nav.bandits._dijkstra``) against ``networkx.dijkstra_path`` on
  the same node-weighted line graph (graph built once, weights set per trip), same start/goal
  pairs, same answers checked.
* Whole trip on MoST Monaco: posterior → rectified TS indices → route → model update, for the GP
  (M = 1000, B = 2500, G = 1) and BI models, on one fixed route (Fig. 2's setting) after
  ``--warm-trips`` trips' observations were recorded.

* ``--region``: a route query on the 1M-segment synthetic town with per-trip weights, weight
  preparation included: each query's weights are a Thompson draw of the loss posterior truncated
  to losses above the physical bound :func:`ev_nav.potential.loss_lower_bound` (through
  ``truncated_quantile`` as ``rectified_weights`` makes it, scores from a seeded counter-based
  generator), routed goal-directed (``Router(net, lower)``) with the scores and weights drawn
  where the search reaches, and by plain bidirectional Dijkstra on all weights, checking equal
  costs; median over ``--queries`` random pairs, and the share of segments each settles.
  The town is cached in the network cache (``$EV_NAV_CACHE``) keyed by its size, seed and the
network file format.

Targets: Dijkstra ≥ 20× faster than networkx on Monaco; whole GP trip on Monaco ≤ 250 ms; region
route with weights ≤ 50 ms median.
Usage: python scripts/bench_routing.py [--quick] [--no-trip] [--threads 1] [--warm-trips 200]
       [--data ../shared/data]
       python scripts/bench_routing.py --region [--quick] [--segments 1000000] [--queries 100]
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


def _nx_graph(net):
    import networkx as nx

    g = nx.DiGraph()
    src = np.repeat(np.arange(net.n_segments), np.diff(net.lg_indptr))
    g.add_edges_from(zip(src.tolist(), net.lg_indices.tolist(), strict=True))
    return g


def bench_dijkstra(label, net, trips: int, nx_trips: int) -> dict:
    import networkx as nx

    from ev_nav.bandits.routing import Router, compiled_kernel

    compiled_kernel()  # time the compiled form, not a process's interpreted first queries
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, net.n_segments, (trips, 2))
    weights = rng.exponential(10.0, (trips, net.n_segments))
    t0 = time.perf_counter()
    router = Router(net)
    setup = time.perf_counter() - t0
    ours = []
    paths = []
    for (s, g), w in zip(pairs, weights, strict=True):
        t0 = time.perf_counter()
        paths.append(router.route(w, s, g))
        ours.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    graph = _nx_graph(net)
    nx_setup = time.perf_counter() - t0
    ref = []
    for i in range(nx_trips):
        (s, g), w = pairs[i], weights[i]
        t0 = time.perf_counter()
        attrs = dict(zip(range(net.n_segments), w.tolist(), strict=True))
        path = nx.dijkstra_path(graph, int(s), int(g), weight=lambda _u, v, _d, a=attrs: a[v])
        ref.append(time.perf_counter() - t0)
        cost_ref = w[path[1:]].sum()
        cost_ours = w[paths[i][1:]].sum()
        assert abs(cost_ref - cost_ours) <= 1e-6 * max(1.0, abs(cost_ref)), (cost_ref, cost_ours)
    r = {
        "network": label,
        "segments": net.n_segments,
        "ours_ms": 1000 * statistics.median(ours),
        "networkx_ms": 1000 * statistics.median(ref),
        "setup_ours_s": setup,
        "setup_nx_s": nx_setup,
    }
    r["ratio"] = r["networkx_ms"] / r["ours_ms"]
    return r


def bench_trip(net, kind: str, trips: int, warm: int) -> dict:
    """Median whole-trip latency of a TS agent driving one fixed route (Fig. 2's setting).

    The measured model first receives the observations of ``warm`` trips along the same route
    (driven by a BI-TS agent, recorded without learning steps), so batches are subsampled from a
    history of the size a Fig. 2 run reaches by trip ``warm``, not from a nearly empty one.
    """
    from ev_nav.bandits.agent import Agent
    from ev_nav.sim.environment import Environment, TruthSpec
    from ev_nav.sim.fleet import AgentSpec, make_model

    # MoST Monaco: nearly every prior draw has a negative cycle, so no exact optimum (the
    # latency does not depend on it)
    env = Environment.create(net, seed=0, truth=TruthSpec(optimum="rectified"))
    rng = np.random.default_rng(1)
    mid = net.segment_midpoints()
    start = int(np.argmin(mid[:, 0]))
    goal = int(np.argmax(mid[:, 0]))
    model = make_model(AgentSpec(model=kind, policy="ts"), net, seed=0)
    if warm:
        bi = make_model(AgentSpec(model="bi", policy="ts"), net, seed=1)
        driver = Agent(net, bi, "ts", seed=1)
        for _ in range(warm):
            path = driver.plan(start, goal)
            obs = env.drive(path, rng)
            driver.observe(path, obs)
            (model.record if hasattr(model, "record") else model.update)(path, obs)
    agent = Agent(net, model, "ts", seed=0)
    agent.t = warm
    times: dict[str, list[float]] = {"posterior+index+route": [], "update": [], "trip": []}
    for _ in range(trips):
        t0 = time.perf_counter()
        path = agent.plan(start, goal)
        t1 = time.perf_counter()
        agent.observe(path, env.drive(path, rng))
        t2 = time.perf_counter()
        times["posterior+index+route"].append(t1 - t0)
        times["update"].append(t2 - t1)
        times["trip"].append(t2 - t0)
    # the first trip includes the one-off kernel set-up and the first learning step on the
    # recorded history; report the steady state
    steady = {k: 1000 * statistics.median(v[1:]) for k, v in times.items()}
    return {"model": kind, **steady, "first_trip_ms": 1000 * times["trip"][0]}


def region_network(n_segments: int, seed: int = 0):
    """The synthetic town of ``n_segments``, built once and then loaded from the network cache."""
    from ev_nav.roads.network import FORMAT_VERSION, RoadNetwork
    from ev_nav.roads.synthetic import synthetic_town

    path = settings.network_cache_dir() / f"synthetic-{n_segments}-s{seed}-f{FORMAT_VERSION}.npz"
    if path.is_file():
        return RoadNetwork.load(path)
    net = synthetic_town(n_segments, seed=seed)
    path.parent.mkdir(exist_ok=True)
    net.save(path)
    return net


def bench_region(net, queries: int) -> dict:
    """Per-trip weights and one route query, three ways, on the same weights.

    The weights' model: each segment's loss has posterior mean ``a`` (the deterministic loss,
    :func:`ev_nav.potential.loss_scale`) and sd ``0.25 a`` (the simulator's loss spread), and
    the trip's weight is a Thompson draw from it truncated to losses above the physical bound
    ``lower`` (:class:`ev_nav.bandits.routing.LossDraw`), so every weight respects the bound the
    goal-directed search relies on. Each query's scores ``z ~ N(0, 1)`` come from a seeded
    counter-based generator (:class:`ev_nav.bandits.routing.SeededScores`, the seed drawn from
    the benchmark's generator), and the query routes (a) lazily: goal-directed, scores and
    weights computed for the segments the search reaches; (b) goal-directed on all weights
    computed vectorised (the same numbers); (c) plain bidirectional Dijkstra on those weights.
    The costs of (a) and (b) must equal (c)'s. Each step is timed by wall time and by the
    process's CPU time (on a shared machine, what the query needs of one core, without the
    waits for it).
    """
    from ev_nav.bandits.routing import LossDraw, Router, SeededScores, compiled_kernel
    from ev_nav.errors import UnreachableError
    from ev_nav.potential import loss_lower_bound, loss_scale

    compiled_kernel()
    n = net.n_segments
    lower, mean = loss_lower_bound(net), loss_scale(net)
    sd = 0.25 * mean
    t0 = time.perf_counter()
    fast = Router(net, lower)
    setup = time.perf_counter() - t0
    plain = Router(net)
    rng = np.random.default_rng(0)
    fast.route(LossDraw(mean, sd, SeededScores(0)), 0, 1)  # builds the lazy weights' functions
    steps = ("lazy", "weights", "fast", "plain")
    times: dict[str, list[float]] = {k: [] for k in steps}
    cpu: dict[str, list[float]] = {k: [] for k in steps}

    def clock() -> tuple[float, float]:
        return time.perf_counter(), time.process_time()

    settled: dict[str, list[int]] = {"fast": [], "plain": []}
    shares = []
    while len(times["plain"]) < queries:
        s, g = (int(x) for x in rng.integers(0, n, 2))
        draw = LossDraw(mean, sd, SeededScores(int(rng.integers(2**63))))
        t0 = clock()
        try:
            lazy = fast.route(draw, s, g)
        except UnreachableError:  # a one-way corner: draw another pair
            continue
        t1 = clock()
        w = draw.weights(lower)
        t2 = clock()
        path = fast.route(w, s, g)
        t3 = clock()
        ref = plain.route(w, s, g)
        t4 = clock()
        cost_ref = w[ref[1:]].sum()
        for p in (lazy, path):
            assert abs(w[p[1:]].sum() - cost_ref) <= 1e-9 * max(1.0, cost_ref), (s, g)
        for key, a, b in zip(steps, (t0, t1, t2, t3), (t1, t2, t3, t4), strict=True):
            times[key].append(b[0] - a[0])
            cpu[key].append(b[1] - a[1])
        settled["plain"].append(plain.settled_count())
        settled["fast"].append(fast.settled_count())
        shares.append(float(lower.sum() / w.sum()))
    assert fast.fallbacks == 0
    def medians(t: dict[str, list[float]]) -> tuple[dict[str, float], dict[str, float]]:
        per_query = {  # weight preparation included
            "lazy": np.asarray(t["lazy"]),
            "fast": np.add(t["weights"], t["fast"]),
            "plain": np.add(t["weights"], t["plain"]),
        }
        return ({k: 1000 * statistics.median(v) for k, v in t.items()},
                {k: 1000 * statistics.median(v) for k, v in per_query.items()})

    (ms, with_weights), (cpu_ms, cpu_with_weights) = medians(times), medians(cpu)
    return {
        "segments": n,
        "queries": queries,
        "setup_s": setup,
        "landmarks": fast._lm_from.shape[0],
        "ms": ms,
        "with_weights_ms": with_weights,
        "cpu_ms": cpu_ms,
        "cpu_with_weights_ms": cpu_with_weights,
        "settled": {k: statistics.median(v) / n for k, v in settled.items()},
        "bound_share": statistics.median(shares),
    }


def main_region(args) -> int:
    n = args.segments or (20_000 if args.quick else 1_000_000)
    queries = args.queries or (10 if args.quick else 100)
    t0 = time.perf_counter()
    net = region_network(n)
    load = time.perf_counter() - t0
    r = bench_region(net, queries)
    label = f"region{n // 1_000_000}m" if n >= 1_000_000 else f"region{n // 1000}k"
    print(f"{label}: {r['segments']:,} segments (town ready in {load:.1f} s); goal-directed "
          f"router set up in {r['setup_s']:.1f} s ({r['landmarks']} landmarks); physical bound "
          f"= {100 * r['bound_share']:.0f} % of the weights")
    ww, ms, cw, cm = r["with_weights_ms"], r["ms"], r["cpu_with_weights_ms"], r["cpu_ms"]
    print(f"{label} route (weights included): {ww['lazy']:.1f} ms median; plain Dijkstra: "
          f"{ww['plain']:.1f} ms  [wall time; CPU time {cw['lazy']:.1f} ms and "
          f"{cw['plain']:.1f} ms; {r['queries']} random pairs, 1 thread]")
    print("  median per query, weights included        wall ms    CPU ms")
    print(f"  goal-directed, lazy weights: {ww['lazy']:>20.1f}{cw['lazy']:>10.1f}  (scores and "
          f"weights drawn where the search reaches)")
    print(f"  goal-directed, all weights:  {ww['fast']:>20.1f}{cw['fast']:>10.1f}  (scores and "
          f"weights {ms['weights']:.1f} / {cm['weights']:.1f} ms + search {ms['fast']:.1f} / "
          f"{cm['fast']:.1f} ms)")
    print(f"  plain, all weights:          {ww['plain']:>20.1f}{cw['plain']:>10.1f}  (search "
          f"{ms['plain']:.1f} / {cm['plain']:.1f} ms)")
    print(f"  segments settled: goal-directed {100 * r['settled']['fast']:.1f} %, plain "
          f"{100 * r['settled']['plain']:.1f} %")
    best = ww["lazy"]
    print(f"target region route with weights <= 50 ms: {best:.1f} ms -> "
          f"{'met' if best <= 50 else 'MISSED'} (wall; CPU {cw['lazy']:.1f} ms -> "
          f"{'met' if cw['lazy'] <= 50 else 'MISSED'})")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small cases (for tests)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--no-trip", action="store_true", help="skip whole-trip latency")
    parser.add_argument(
        "--warm-trips", type=int, default=200, help="recorded history before the measured trips"
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads for the whole-trip latency"
    )
    parser.add_argument(
        "--region", action="store_true", help="route queries on the 1M-segment synthetic town"
    )
    parser.add_argument(
        "--segments", type=count_arg, help="--region town size (default 1,000,000; quick 20,000)"
    )
    parser.add_argument(
        "--queries", type=count_arg, help="--region route queries (default 100; quick 10)"
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if args.region:
        return main_region(args)
    import torch

    torch.set_num_threads(max(1, args.threads))
    from ev_nav.roads.load import load_osm
    from ev_nav.roads.synthetic import synthetic_town

    monaco = load_osm(args.data / "most_monaco.osm.gz", cache_dir=settings.network_cache_dir())
    cases = [("MoST Monaco", monaco, 50, 20)]
    if args.quick:
        cases = [("MoST Monaco", monaco, 10, 3)]
    else:
        cases += [
            ("synthetic 100k", synthetic_town(100_000, seed=0), 20, 5),
            ("synthetic 1M", synthetic_town(1_000_000, seed=0), 5, 2),
        ]
    print(f"{'network':<16}{'segments':>11}{'ours ms':>10}{'networkx ms':>13}{'ratio':>8}")
    results = [bench_dijkstra(*c) for c in cases]
    for r in results:
        print(
            f"{r['network']:<16}{r['segments']:>11,}{r['ours_ms']:>10.2f}"
            f"{r['networkx_ms']:>13.1f}{r['ratio']:>8.1f}"
        )
    mon = results[0]
    print(
        f"target Dijkstra >= 20x networkx on Monaco: {mon['ratio']:.1f}x -> "
        f"{'met' if mon['ratio'] >= 20 else 'MISSED'}"
    )
    if not args.no_trip:
        warm = min(args.warm_trips, 10) if args.quick else args.warm_trips
        print(
            f"\nwhole trip on MoST Monaco, fixed route after {warm} recorded trips "
            f"(median of steady-state trips, {torch.get_num_threads()} torch thread(s)):"
        )
        for kind in ("bi", "gp"):
            r = bench_trip(monaco, kind, 4 if args.quick else 21, warm)
            print(
                f"  {kind}: trip {r['trip']:.1f} ms (plan {r['posterior+index+route']:.1f} ms, "
                f"update {r['update']:.1f} ms; first trip {r['first_trip_ms']:.0f} ms)"
            )
            if kind == "gp":
                ok = r["trip"] <= 250
                print(
                    f"target whole GP trip <= 250 ms: {r['trip']:.1f} ms -> "
                    f"{'met' if ok else 'MISSED'}"
                )
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
