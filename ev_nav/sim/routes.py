"""Picking experiment routes on any network: far-apart endpoints where energy matters.

A good learning route spans the network and is one where the energy-optimal path under ``E_det``
differs clearly from the shortest path (otherwise there is nothing to learn). Candidates from
random starts to far goals are scored by straight-line distance × (1 − overlap of the two paths);
routes are taken best first, each far from the ones already taken and never the reverse of one
(a reversed pair drives the same roads the other way: not a second route). Endpoints are returned
as coordinates beside the segments (:meth:`RoadNetwork.segment_anchor`), which snap back to them.
The paper reproductions' ``data/routes.toml`` was written by this picker's predecessor (a script,
seed 0, which also did not yet reject reversed pairs); it is kept as written so the reproductions
stay comparable. Ties between equally cheap optimal paths may now break differently.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ev_nav.bandits.routing import Oracle, Router
from ev_nav.errors import ConfigError
from ev_nav.potential import node_potential
from ev_nav.roads.network import RoadNetwork, haversine_m
from ev_nav.wording import plural

__all__ = ["PickedRoute", "pick_routes", "routes_toml"]


@dataclass(frozen=True)
class PickedRoute:
    """One picked route: endpoints, their segments and why it was chosen."""

    name: str
    start: tuple[float, float]  # lon, lat [deg]
    goal: tuple[float, float]
    start_segment: int
    goal_segment: int
    straight_line_m: float
    overlap: float  # shared segments of the shortest and the energy-optimal path (Jaccard)


def pick_routes(
    net: RoadNetwork,
    count: int = 2,
    *,
    n_starts: int = 60,
    seed: int = 0,
    min_separation_m: float = 1000.0,
) -> list[PickedRoute]:
    """Pick ``count`` routes on ``net`` (see the module doc); names A, B, C, …

    Raises
    ------
    ConfigError
        If ``count`` is not in 1..26, ``n_starts`` is below 1, ``min_separation_m`` is not a
        finite number >= 0, or the network is too small to give that many routes.
    """
    if not 1 <= count <= 26:
        raise ConfigError(f"count must be in 1..26, got {count}")
    if n_starts < 1:
        raise ConfigError(f"the number of start segments tried must be >= 1, got {n_starts}")
    if not 0 <= min_separation_m < float("inf"):
        raise ConfigError(
            f"the separation of routes' endpoints must be a finite number of metres >= 0, "
            f"got {min_separation_m}"
        )
    rng = np.random.default_rng(seed)
    mid = net.segment_midpoints()
    oracle = Oracle(net, net.e_det(), node_potential=node_potential(net))
    router = Router(net)
    cands = []
    for s in rng.choice(net.n_segments, min(n_starts, net.n_segments), replace=False):
        d = haversine_m(mid[s, 0], mid[s, 1], mid[:, 0], mid[:, 1])
        far = np.argsort(d)[-max(5, net.n_segments // 50) :]
        for g in rng.choice(far, min(5, far.size), replace=False):
            if int(g) == int(s):
                continue
            short = router.route(net.length_m, int(s), int(g))
            best, _ = oracle.optimal(int(s), int(g))
            overlap = len(np.intersect1d(short, best)) / len(np.union1d(short, best))
            cands.append((d[g] * (1 - overlap), int(s), int(g), overlap, d[g]))
    cands.sort(reverse=True)

    def dist(a: int, b: int) -> float:
        return float(haversine_m(mid[a, 0], mid[a, 1], mid[b, 0], mid[b, 1]))

    chosen: list[tuple] = []
    for c in cands:
        ok = True
        for a in chosen:
            same_way = min(dist(c[1], a[1]), dist(c[2], a[2])) <= min_separation_m
            reversed_ = dist(c[1], a[2]) <= min_separation_m and dist(c[2], a[1]) <= (
                min_separation_m
            )
            if same_way or reversed_:
                ok = False
                break
        if ok:
            chosen.append(c)
            if len(chosen) == count:
                break
    if len(chosen) < count:
        raise ConfigError(
            f"found only {plural(len(chosen), 'route')} {min_separation_m:.0f} m apart on "
            f"{net.name}; "
            "ask for fewer or lower --min-separation"
        )
    return [
        PickedRoute(
            name=chr(ord("A") + i),
            start=net.segment_anchor(s),
            goal=net.segment_anchor(g),
            start_segment=s,
            goal_segment=g,
            straight_line_m=round(float(dist_m)),
            overlap=round(float(overlap), 3),
        )
        for i, (_, s, g, overlap, dist_m) in enumerate(chosen)
    ]


def routes_toml(routes: list[PickedRoute]) -> str:
    """The ``[[routes]]`` tables of a fleet config for ``routes`` (fixed start and goal)."""
    lines = []
    for r in routes:
        lines += [
            "[[routes]]",
            f'name = "{r.name}"',
            'kind = "fixed"',
            f"start = [{r.start[0]:.7f}, {r.start[1]:.7f}]   # lon, lat; segment {r.start_segment}",
            f"goal = [{r.goal[0]:.7f}, {r.goal[1]:.7f}]    # lon, lat; segment {r.goal_segment}",
            f"# {r.straight_line_m:.0f} m apart; shortest and energy-optimal paths share "
            f"{r.overlap:.0%} of their segments",
            "",
        ]
    return "\n".join(lines)
