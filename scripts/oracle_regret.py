#!/usr/bin/env python
"""Regret of a planner that knows every segment's true expected energy, through the production
weight function.

The posterior is the truth (mean = true expected energy, standard deviation 0) and each index
rule (greedy, TS, Bayes-UCB, UCB) turns it into Dijkstra weights with
:func:`ev_nav.bandits.indices.rectified_weights`, as an agent does every trip. Its route should be
the energy-optimal one (``optimum = "exact"``), so the regret is zero. For contrast the script also
prints the regret of the weights used before (``E[max(0, f − ΔΦ + ε)]``, ``ε ~ N(0, ς²)``), which
add the noise term to every segment and so prefer routes of few segments.

Worlds: the physical ground truth (``[truth] kind = "physical"``) on SRTM Monaco (``gh_monaco`` +
``N43E007``), the embedded synthetic (hilly) town, and LuST Luxembourg (flat: a control).

Usage: python scripts/oracle_regret.py [--trips 200] [--seed 0] [--quick] [--cache DIR]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from ev_nav.bandits.indices import make_index, rectified_weights, rectify
from ev_nav.bandits.routing import Router
from ev_nav.cli import count_arg, seed_arg
from ev_nav.gp.posterior import SegmentPosterior
from ev_nav.potential import potential_change
from ev_nav.roads.network import RoadNetwork
from ev_nav.settings import data_dir
from ev_nav.sim.environment import Environment, TruthSpec
from ev_nav.sim.fleet import TripGenerator, TripSpec

RULES = ("mean", "ts", "bucb", "ucb")


def networks(quick: bool, cache: Path | None) -> dict[str, RoadNetwork]:
    """The worlds' road networks (the synthetic town only with ``quick``)."""
    from ev_nav.roads.synthetic import synthetic_town

    nets = {"synthetic town (hilly)": synthetic_town(2000, seed=0)}
    if quick:
        return nets
    from ev_nav.roads.load import load_osm

    data = data_dir()
    nets["SRTM Monaco"] = load_osm(
        data / "gh_monaco.osm.gz", dems=[data / "N43E007.hgt.zip"], cache_dir=cache
    )
    nets["Luxembourg (flat)"] = load_osm(data / "lust_luxembourg.osm.gz", cache_dir=cache)
    return nets


def oracle_regrets(
    net: RoadNetwork, env: Environment, pairs: list[tuple[int, int]], seed: int
) -> dict[str, np.ndarray]:
    """Per-trip regret [Wh] of each rule's weights on the true posterior, and of the old ones."""
    router = Router(net)
    dphi = potential_change(net)
    truth = SegmentPosterior(
        mean=env.true_energy.copy(), std=np.zeros(net.n_segments),
        noise_std=float(np.mean(env.noise_std)),
    )
    weights = {}
    for name in RULES:
        w = rectified_weights(make_index(name), truth, 1, np.random.default_rng(seed), dphi)
        weights[name] = w
    weights["before (noise term)"] = rectify(env.true_energy - dphi, env.noise_std)
    out = {}
    for name, w in weights.items():
        out[name] = np.array(
            [env.regret(router.route(w, s, g), s, g)[0] for s, g in pairs], dtype=np.float64
        )
    return out


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--trips", type=count_arg, help="random trips per world (default 200; quick 20)"
    )
    p.add_argument("--seed", type=seed_arg, default=0, help="world and trip seed")
    p.add_argument(
        "--quick", action="store_true", help="20 trips (unless --trips), synthetic town only"
    )
    p.add_argument("--cache", type=Path, default=None, help="network cache folder")
    args = p.parse_args()
    n_trips = args.trips or (20 if args.quick else 200)
    t0 = time.perf_counter()
    worst = 0.0
    for label, net in networks(args.quick, args.cache).items():
        env = Environment.create(net, seed=args.seed, truth=TruthSpec(kind="physical"))
        gen = TripGenerator(TripSpec(kind="random", min_distance_m=500.0), net, args.seed)
        pairs = []
        while len(pairs) < n_trips:
            s, g = gen.next()
            if np.isfinite(env.oracle.optimal(s, g)[1]):
                pairs.append((s, g))
        res = oracle_regrets(net, env, pairs, args.seed)
        relief = float(np.ptp(net.node_elevation))
        print(f"{label}: {net.n_segments} segments, relief {relief:.0f} m, {n_trips} trips")
        for name, r in res.items():
            print(f"  {name:>20}: regret mean {r.mean():.4f} Wh, max {r.max():.4f} Wh, "
                  f"trips with regret > 1e-6 Wh: {int((r > 1e-6).sum())}")
            if name in RULES:
                worst = max(worst, float(np.abs(r).max()))
    print(f"max oracle regret: {worst:.4f} Wh")
    print(f"whole command: {time.perf_counter() - t0:.1f} s")
    return 0 if worst <= 1e-6 else 1


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
