#!/usr/bin/env python
"""How much of a planned route lies outside A→B (issue 29, item 2).

For random origin–destination pairs, each point is snapped to the nearest point on a road
(A*, B*). A route "drives outside A→B" for the length it covers before it last passes A* and
after it first reaches B* (a route that overshoots B and turns back counts the whole loop). The
share of the route outside is printed for

* the product's planner (``plan_trip`` as ``ev-nav route --dry-run`` runs it: exact endpoints,
  either direction of a two-way street), and
* the earlier planner, for reference: whole segments from the segment nearest A to the segment
  nearest B, on the same weights.

Goal: ``outside A->B median`` ≤ 1 % over 100 random MoST Monaco pairs.

Usage: python scripts/bench_endpoints.py [--pairs 100] [--quick] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ev_nav.cli import count_arg, seed_arg  # noqa: E402 (after the path)

#: A route passes a point when it comes within this distance of it [m].
PASS_TOL_M = 1.0


def _xy(lonlat: np.ndarray, lat0: float) -> np.ndarray:
    from ev_nav.roads.network import EARTH_RADIUS_M

    sx = EARTH_RADIUS_M * np.cos(np.radians(lat0)) * np.pi / 180.0
    sy = EARTH_RADIUS_M * np.pi / 180.0
    return np.column_stack([lonlat[:, 0] * sx, lonlat[:, 1] * sy])


def outside_share(line: np.ndarray, a: tuple[float, float], b: tuple[float, float]) -> float:
    """Share of the polyline ``line`` (lon, lat rows) driven before it last passes ``a`` or after
    it first reaches ``b`` (both (lon, lat)) after that."""
    lat0 = float(line[:, 1].mean())
    xy = _xy(line, lat0)
    pa, pb = _xy(np.array([a]), lat0)[0], _xy(np.array([b]), lat0)[0]
    p0, p1 = xy[:-1], xy[1:]
    d = p1 - p0
    seg_len = np.hypot(d[:, 0], d[:, 1])
    cum = np.concatenate([[0.0], np.cumsum(seg_len)])
    total = cum[-1]

    def passes(p: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.clip(((p - p0) * d).sum(1) / seg_len**2, 0.0, 1.0)
        t = np.where(seg_len > 0, t, 0.0)
        dist = np.hypot(*(p0 + t[:, None] * d - p).T)
        near = dist <= PASS_TOL_M
        return cum[:-1][near] + t[near] * seg_len[near]

    at_a, at_b = passes(pa), passes(pb)
    s_a = float(at_a.max()) if at_a.size else 0.0
    after = at_b[at_b >= s_a]
    s_b = float(after.min()) if after.size else total
    return float((s_a + (total - s_b)) / total) if total > 0 else 0.0


def route_line(net, segments: np.ndarray, start: float = 0.0, end: float = 1.0) -> np.ndarray:
    parts = []
    for i, e in enumerate(segments):
        lo = start if i == 0 else 0.0
        hi = end if i == len(segments) - 1 else 1.0
        parts.append(net.partial_coords(int(e), lo, hi))
    return np.concatenate(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--pairs", type=count_arg, help="origin-destination pairs (default 100; quick 20)"
    )
    ap.add_argument(
        "--quick", action="store_true", help="20 pairs (unless --pairs), synthetic town"
    )
    ap.add_argument("--data", type=Path, default=None, help="folder of the shared data")
    ap.add_argument("--seed", type=seed_arg, default=0)
    args = ap.parse_args(argv)

    # the state and the network file live in a folder removed when the command ends
    # (each run of --quick in the tests left one behind before)
    with tempfile.TemporaryDirectory(prefix="bench-endpoints-") as d:
        return _bench(args, Path(d))


def _bench(args: argparse.Namespace, tmp: Path) -> int:
    """The measurement, with its files in ``tmp``."""
    import ev_nav
    from ev_nav.bandits.routing import Router
    from ev_nav.potential import potential_change

    if args.pairs is None:
        args.pairs = 20 if args.quick else 100
    if args.quick:
        state = ev_nav.create_state(tmp / "s", synthetic=2000, model="bi")
        label = "synthetic town (2,000 segments)"
    else:
        from ev_nav.roads.load import load_osm
        from ev_nav.settings import data_dir, network_cache_dir

        folder = args.data or data_dir()
        net = load_osm(folder / "most_monaco.osm.gz", cache_dir=network_cache_dir())
        net.save(tmp / "monaco.npz")
        state = ev_nav.create_state(tmp / "s", network=tmp / "monaco.npz", model="bi")
        label = "MoST Monaco"
    rng = np.random.default_rng(args.seed)
    new, old = [], []
    with state as session:
        net = session.net
        router = Router(net)
        greedy = np.maximum(
            session.model.posterior().mean - potential_change(net, session.vehicle), 0.0
        )
        lo, hi = net.bounds()[:2], net.bounds()[2:]
        while len(new) < args.pairs:
            a = rng.uniform(lo, hi)
            b = rng.uniform(lo, hi)
            try:
                sa = net.snap(a[0], a[1], 100.0)
                sb = net.snap(b[0], b[1], 100.0)
                trip = ev_nav.plan_trip(
                    session, (a[1], a[0]), (b[1], b[0]), policy="mean", record=False,
                    max_snap_m=100.0,
                )
                whole = router.route(greedy, sa.segment, sb.segment)
            except ev_nav.EvNavError:
                continue
            r = trip.routes["planned"]
            pa, pb = (sa.lon, sa.lat), (sb.lon, sb.lat)
            new.append(outside_share(route_line(net, r.segments, r.start_fraction,
                                                r.end_fraction), pa, pb))
            old.append(outside_share(route_line(net, whole), pa, pb))
    new_a, old_a = 100 * np.array(new), 100 * np.array(old)
    print(f"{label}: {args.pairs} random pairs (seed {args.seed}), points snapped within 100 m")
    print(f"whole segments (before): outside A->B median {np.median(old_a):.1f}%, "
          f"mean {old_a.mean():.1f}%, p90 {np.percentile(old_a, 90):.1f}%, "
          f"max {old_a.max():.1f}%")
    print(f"exact endpoints: outside A->B mean {new_a.mean():.2f}%, "
          f"p90 {np.percentile(new_a, 90):.2f}%, max {new_a.max():.2f}%")
    print(f"outside A->B median: {np.median(new_a):.1f}% (goal <= 1%)")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
