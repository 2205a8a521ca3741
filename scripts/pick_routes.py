#!/usr/bin/env python
"""Pick the paper-style routes A and B for MoST Monaco and LuST Luxembourg → data/routes.toml.

A route must span the network (start and goal far apart) and be one where the energy-optimal path
under E_det differs clearly from the shortest path (so learning energy matters). Candidates are
scored by straight-line distance × (1 − overlap of the two paths); A and B are the best two whose
endpoints are far from each other. Endpoints are stored as coordinates beside the segment (see
``RoadNetwork.segment_anchor``), which snap back to exactly these segments.

Usage: python scripts/pick_routes.py [--data ../shared/data] [--out data/routes.toml]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from scipy.sparse.csgraph import dijkstra

from ev_nav.bandits.routing import Oracle, Router
from ev_nav.roads.load import load_osm
from ev_nav.roads.network import haversine_m

REPO = Path(__file__).resolve().parents[1]
NETWORKS = {"monaco": "most_monaco.osm.gz", "luxembourg": "lust_luxembourg.osm.gz"}


def pick(net, n_starts: int = 60, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    mid = net.segment_midpoints()
    e_det = net.e_det()
    oracle = Oracle(net, e_det)
    router = Router(net)
    cands = []
    for s in rng.choice(net.n_segments, n_starts, replace=False):
        d = haversine_m(mid[s, 0], mid[s, 1], mid[:, 0], mid[:, 1])
        far = np.argsort(d)[-max(5, net.n_segments // 50) :]
        for g in rng.choice(far, 5, replace=False):
            short = router.route(net.length_m, int(s), int(g))
            best, _ = oracle.optimal(int(s), int(g))
            overlap = len(np.intersect1d(short, best)) / len(np.union1d(short, best))
            cands.append((d[g] * (1 - overlap), int(s), int(g), overlap, d[g]))
    cands.sort(reverse=True)
    chosen = [cands[0]]
    for c in cands[1:]:
        a = chosen[0]
        sep = min(
            haversine_m(mid[c[1], 0], mid[c[1], 1], mid[a[1], 0], mid[a[1], 1]),
            haversine_m(mid[c[2], 0], mid[c[2], 1], mid[a[2], 0], mid[a[2], 1]),
        )
        if sep > 1000:
            chosen.append(c)
            break
    out = []
    for name, (_, s, g, overlap, dist) in zip("AB", chosen, strict=False):
        n_alt = int((dijkstra(net.line_graph, indices=s, unweighted=True) < np.inf).sum())
        out.append(
            {
                "name": name,
                "start": net.segment_anchor(s),
                "goal": net.segment_anchor(g),
                "start_segment": s,
                "goal_segment": g,
                "straight_line_m": round(float(dist)),
                "overlap_shortest_vs_energy_optimal": round(float(overlap), 3),
                "reachable": n_alt,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=REPO / "data" / "routes.toml")
    args = parser.parse_args()
    lines = [
        "# Routes A and B per network (written by scripts/pick_routes.py; coordinates are",
        "# [lon, lat] beside the start/goal segment and snap back to it).",
        "",
    ]
    for key, fname in NETWORKS.items():
        net = load_osm(args.data / fname)
        for r in pick(net):
            print(key, r)
            lines += [
                f"[{key}.{r['name']}]",
                f'osm = "{fname}"',
                f"start = [{r['start'][0]:.7f}, {r['start'][1]:.7f}]",
                f"goal = [{r['goal'][0]:.7f}, {r['goal'][1]:.7f}]",
                f"# segments {r['start_segment']} -> {r['goal_segment']}, "
                f"{r['straight_line_m']} m apart, overlap shortest/energy-optimal "
                f"{r['overlap_shortest_vs_energy_optimal']}",
                "",
            ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
