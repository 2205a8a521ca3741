"""The spatial index behind RoadNetwork.snap returns exactly what a scan of every piece does."""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.roads.network import _SnapIndex
from ev_nav.roads.synthetic import synthetic_town


@pytest.fixture(scope="module")
def town():
    return synthetic_town(6000, seed=3)


def _snaps(net, points):
    out = []
    for lon, lat in points:
        p = net.snap(lon, lat, None)
        out.append((p.lon, p.lat, p.distance_m, p.candidates))
    return out


def test_indexed_snap_equals_full_scan(town):
    index = town._snap_index()
    assert index.tree is not None and index.valid.size > _SnapIndex.MIN_PIECES
    rng = np.random.default_rng(0)
    lo_lon, lo_lat, hi_lon, hi_lat = town.bounds()
    # random points inside and around the town, points on roads (both directions of a street
    # coincide there: the tie-breaking must agree too) and points far outside
    pts = [(rng.uniform(lo_lon - 0.01, hi_lon + 0.01), rng.uniform(lo_lat - 0.01, hi_lat + 0.01))
           for _ in range(300)]
    mid = town.segment_midpoints()
    pts += [(float(mid[e, 0]), float(mid[e, 1])) for e in rng.integers(0, town.n_segments, 200)]
    pts += [(hi_lon + 1.0, hi_lat + 1.0), (lo_lon - 2.0, lo_lat)]
    indexed = _snaps(town, pts)
    # the same network answering by scanning every piece
    index.tree = None
    try:
        scanned = _snaps(town, pts)
    finally:
        object.__delattr__(town, "_snap_index_cache")
    assert indexed == scanned
    # and the index really narrowed the search (not a full scan in disguise)
    narrowed = town._snap_index().candidates(*pts[0])
    assert 0 < narrowed.size < town._snap_index().valid.size // 10
