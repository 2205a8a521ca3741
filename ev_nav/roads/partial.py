"""Routes between points part-way along a segment: how much of each segment a route drives.

A trip starts where its origin lies on a road and ends where its goal does, usually part-way
along the first and last segment. Every quantity summed over a route (length, time, energy, the
learner's trip-total observation) counts those two segments with the share driven. This module
is the one place that says which share that is; it imports nothing heavy, so the store can use
it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from ev_nav.roads.network import RoadNetwork


def driven_shares(n: int, start_fraction: float, end_fraction: float) -> NDArray[np.float64]:
    """Share of each of ``n`` route segments driven.

    Parameters
    ----------
    n : int
        Number of segments listed in the route.
    start_fraction : float
        Where along its first segment the route starts (0 = the segment's start node, 1 = its
        end node).
    end_fraction : float
        Where along its last segment the route ends.

    Returns
    -------
    ndarray of float64, shape (n,)
        1 for every segment but the first (``1 − start_fraction``) and the last
        (``end_fraction``); a one-segment route drives ``end_fraction − start_fraction``.
    """
    shares = np.ones(n)
    if n == 1:
        shares[0] = end_fraction - start_fraction
    elif n > 1:
        shares[0] = 1.0 - start_fraction
        shares[-1] = end_fraction
    return shares


def reading_shares(
    route: NDArray[np.int64], shares: NDArray[np.float64], readings: NDArray[np.int64]
) -> NDArray[np.float64]:
    """Share of its segment each per-segment reading of a drive covers.

    A car's reading of the first or last segment of a trip between two points is the energy of
    the part it drove, not of the whole segment. The readings of a segment the route drives
    more than once are taken in the order the route drives it: the first listed reading of a
    segment belongs to its first pass, and so on.

    Parameters
    ----------
    route : ndarray of int64, shape (n,)
        The segments driven, in order.
    shares : ndarray of float64, shape (n,)
        The share of each route segment driven (:func:`driven_shares`).
    readings : ndarray of int64, shape (m,)
        The segment of each reading, in the order given.

    Returns
    -------
    ndarray of float64, shape (m,)
        The share each reading covers: 1 but for a reading of a partly driven pass (a reading
        of a segment off the route, or of a pass beyond those driven, counts whole).
    """
    out = np.ones(readings.size)
    for pos in np.flatnonzero(shares != 1.0):  # only the two ends: at most two positions
        seg = route[pos]
        k = int(np.count_nonzero(route[:pos] == seg))  # which pass of its segment this is
        listed = np.flatnonzero(readings == seg)
        if listed.size > k:
            out[listed[k]] = shares[pos]
    return out


def route_coordinates(
    net: RoadNetwork,
    segments: np.ndarray,
    start_fraction: float = 0.0,
    end_fraction: float = 1.0,
    decimals: int = 7,
) -> np.ndarray:
    """The route's polyline: rows (lon [deg], lat [deg], elevation [m]).

    The route starts ``start_fraction`` of the way along its first segment and ends
    ``end_fraction`` along its last (a trip between two points drives only that part of them).
    Longitude and latitude are rounded to ``decimals`` places (7: ~1 cm), elevation to 0.1 m;
    the repeated junction point where one segment ends and the next begins is kept once.
    Elevation varies linearly with distance along each segment between its end nodes' heights,
    the constant grade the network's energy model uses. A network built without any elevation source
    (:attr:`RoadNetwork.has_elevation` false) has no heights to give: the rows are then
    (lon, lat) only, two columns, so no made-up 0 m reaches a GPX or GeoJSON file.
    """
    seg = np.asarray(segments, dtype=np.int64).reshape(-1)
    off = net.geom_offsets
    counts = off[seg + 1] - off[seg]
    block = np.cumsum(counts) - counts  # where each segment's vertices start in the output
    which = np.repeat(np.arange(seg.size), counts)  # route position of each output vertex
    idx = off[seg][which] + np.arange(int(counts.sum())) - block[which]
    lonlat = net.geom_lonlat[idx]
    # distance along the polyline (equirectangular, in degrees of latitude: only ratios within
    # one segment matter), restarted at every segment's first vertex
    kx = np.cos(np.radians(lonlat[:, 1]))
    step = np.hypot(np.diff(lonlat[:, 0]) * kx[1:], np.diff(lonlat[:, 1]))
    step[block[1:] - 1] = 0.0
    along = np.concatenate([[0.0], np.cumsum(step)])
    done = along - along[block][which]
    total = (along[block + counts - 1] - along[block])[which]
    frac = np.divide(done, total, out=np.zeros_like(done), where=total > 0)
    cols = [lonlat]
    if net.has_elevation:
        ele_u = net.node_elevation[net.seg_u[seg]][which]
        ele_v = net.node_elevation[net.seg_v[seg]][which]
        cols.append((ele_u + frac * (ele_v - ele_u))[:, None])
    coords = np.hstack(cols)
    if start_fraction > 0.0 or end_fraction < 1.0:
        coords = _cut_ends(coords, which, frac, seg.size, start_fraction, end_fraction)
    coords[:, :2] = coords[:, :2].round(decimals)
    if coords.shape[1] > 2:
        coords[:, 2] = coords[:, 2].round(1)
    keep = np.ones(len(coords), dtype=bool)
    keep[1:] = np.any(coords[1:, :2] != coords[:-1, :2], axis=1)
    return coords[keep]


def _cut_ends(
    coords: np.ndarray,
    which: np.ndarray,
    frac: np.ndarray,
    n: int,
    start: float,
    end: float,
) -> np.ndarray:
    """Keep only the driven part of the first and last segment: vertices strictly inside it,
    with the exact start and end points interpolated along their segments."""
    first, last = which == 0, which == n - 1
    keep = np.ones(len(coords), dtype=bool)
    keep[first] &= frac[first] > start
    keep[last] &= frac[last] < end

    def at(rows: np.ndarray, f: float) -> np.ndarray:
        return np.array([np.interp(f, frac[rows], coords[rows, k]) for k in range(coords.shape[1])])

    return np.vstack([at(first, start), coords[keep], at(last, end)])
