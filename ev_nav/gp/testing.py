"""Small real networks and random routes for GP tests, benchmarks and learning checks.

Not used by the library itself; kept in the package so tests and ``scripts/bench_gp.py`` share one
definition of "a small real network" and "a random route".
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ev_nav.gp.posterior import SegmentModel
from ev_nav.roads.network import RoadNetwork, build_network
from ev_nav.settings import data_dir

#: The shared data folder (:func:`ev_nav.settings.data_dir`).
DATA_DIR = data_dir()
MONACO_OSM = DATA_DIR / "most_monaco.osm.gz"
LUXEMBOURG_OSM = DATA_DIR / "lust_luxembourg.osm.gz"
CACHE_DIR = Path(tempfile.gettempdir()) / "evnav-gp-cache"


def load_real(path: Path = MONACO_OSM) -> RoadNetwork:
    """Load a real network through the on-disk cache (milliseconds after the first load)."""
    from ev_nav.roads.load import load_osm

    return load_osm(path, cache_dir=CACHE_DIR)


def subnetwork(net: RoadNetwork, n_target: int, seed: int = 0) -> RoadNetwork:
    """The strongly connected part of the segments nearest a random centre (a real sub-town).

    Segments are kept by distance of their midpoint to the centre until ``n_target`` are in; the
    result is then restricted to its largest strongly connected line graph, so it is usually a
    bit smaller than ``n_target``.
    """
    rng = np.random.default_rng(seed)
    mid = net.segment_midpoints()
    centre = mid[rng.integers(net.n_segments)]
    d = np.hypot(mid[:, 0] - centre[0], mid[:, 1] - centre[1])
    keep = np.sort(np.argsort(d)[:n_target])
    nodes, inv = np.unique(np.concatenate([net.seg_u[keep], net.seg_v[keep]]), return_inverse=True)
    su, sv = inv[: keep.size], inv[keep.size :]
    return build_network(
        name=f"{net.name}-sub{n_target}",
        node_lon=net.node_lon[nodes],
        node_lat=net.node_lat[nodes],
        node_elevation=net.node_elevation[nodes],
        node_osmid=net.node_osmid[nodes],
        seg_u=su.astype(np.int64),
        seg_v=sv.astype(np.int64),
        length_m=net.length_m[keep],
        speed_mps=net.speed_mps[keep],
        highway=net.highway[keep],
        highway_classes=net.highway_classes,
        speed_imputed=net.speed_imputed[keep],
        meta={"source_hash": f"{net.content_hash}-sub{n_target}-{seed}"},
    )


def random_route(net: RoadNetwork, length: int, rng: np.random.Generator) -> NDArray[np.int64]:
    """A random walk of ``length`` segments along legal turns (avoiding immediate U-turns)."""
    path = [int(rng.integers(net.n_segments))]
    for _ in range(length - 1):
        e = path[-1]
        succ = net.lg_indices[net.lg_indptr[e] : net.lg_indptr[e + 1]]
        no_uturn = succ[net.seg_v[succ] != net.seg_u[e]]
        path.append(int(rng.choice(no_uturn if no_uturn.size else succ)))
    return np.asarray(path, dtype=np.int64)


def fleet_log(
    net: RoadNetwork, trips: int, seed: int, noise_std: float
) -> list[tuple[NDArray[np.int64], NDArray[np.float64]]]:
    """``trips`` random walks of 20–60 segments with per-segment readings [Wh] of a truth drawn
    from the paper's prior (:func:`~ev_nav.gp.groundtruth.sample_ground_truth`, ``seed``) plus
    noise of sd ``noise_std``; every tenth trip keeps only its total (an array of one value)."""
    from ev_nav.gp.groundtruth import sample_ground_truth

    rng = np.random.default_rng(seed)
    truth = sample_ground_truth(net, seed=seed)
    log = []
    for t in range(trips):
        path = random_route(net, int(rng.integers(20, 61)), rng)
        y = truth[path] + noise_std * rng.standard_normal(path.size)
        log.append((path, y[None].sum(1) if t % 10 == 9 else y))
    return log


def replay(model: SegmentModel, log: list[tuple[NDArray[np.int64], NDArray[np.float64]]]) -> None:
    """Feed a :func:`fleet_log` to a model, one ``update`` or ``update_total`` per trip."""
    for path, y in log:
        if y.size == 1 and path.size > 1:
            model.update_total(path, float(y[0]))
        else:
            model.update(path, y)
