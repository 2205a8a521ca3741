"""Synthetic GPS tracks: a drive along a known route, sampled and blurred like a phone's fixes.

Used to test and benchmark the map matcher (:mod:`ev_nav.roads.matching`) against a route that is
known exactly, and to write example GPX files. Positions move along the segments' polylines at a
city speed; fixes come every ``interval_s`` seconds (uniformly drawn) with independent Gaussian
noise of ``noise_m`` per coordinate. With per-segment energies the track also carries a
cumulative energy counter, spread along each segment in proportion to distance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import ConfigError
from ev_nav.roads.network import EARTH_RADIUS_M, RoadNetwork

__all__ = ["SimulatedTrack", "common_segments", "simulate_track"]


@dataclass(frozen=True)
class SimulatedTrack:
    """A simulated drive.

    Attributes
    ----------
    lon, lat : ndarray of float64
        Noisy fixes [degrees].
    time_s : ndarray of float64
        Time of each fix since the start [s].
    route_m : ndarray of float64
        True position of each fix along the route [m] from the start of its first segment.
    segment : ndarray of int64
        True segment of each fix.
    energy_wh : ndarray of float64 or None
        Cumulative energy used at each fix since the route's start [Wh] (with energies given).
    """

    lon: NDArray[np.float64]
    lat: NDArray[np.float64]
    time_s: NDArray[np.float64]
    route_m: NDArray[np.float64]
    segment: NDArray[np.int64]
    energy_wh: NDArray[np.float64] | None = None


def simulate_track(
    net: RoadNetwork,
    route: ArrayLike,
    rng: np.random.Generator,
    *,
    noise_m: float = 10.0,
    interval_s: tuple[float, float] = (1.0, 2.0),
    max_speed_mps: float = 50.0 / 3.6,
    start_fraction: float = 0.5,
    end_fraction: float = 0.5,
    segment_energy_wh: ArrayLike | None = None,
) -> SimulatedTrack:
    """Drive ``route`` (consecutive segments of the line graph) and record noisy GPS fixes.

    Parameters
    ----------
    net : RoadNetwork
        The network.
    route : array_like of int
        Segments driven, in order.
    rng : numpy.random.Generator
        Source of every random draw (intervals, noise).
    noise_m : float
        Standard deviation of the GPS error per coordinate [m].
    interval_s : (float, float)
        Fixes come every ``uniform(*interval_s)`` seconds.
    max_speed_mps : float
        The car drives at the speed limit, but no faster than this [m/s] (city traffic).
    start_fraction, end_fraction : float
        The drive starts this far into the first segment and ends this far into the last one
        (shares of their lengths).
    segment_energy_wh : array_like of float, optional
        Energy of each segment of the network [Wh]; adds the cumulative ``energy_wh`` counter.
    """
    seg = np.asarray(route, dtype=np.int64)
    if seg.size == 0:
        raise ConfigError("simulate_track needs a route of at least one segment")
    lo_dt, hi_dt = interval_s
    if not 0 < lo_dt <= hi_dt or noise_m < 0 or max_speed_mps <= 0:
        raise ConfigError("simulate_track: intervals and speed must be positive, noise >= 0")
    length = net.length_m[seg]
    offsets = np.concatenate([[0.0], np.cumsum(length)])
    s0 = start_fraction * length[0]
    s1 = offsets[-2] + end_fraction * length[-1]
    if s1 <= s0:
        raise ConfigError("simulate_track: the drive ends before it starts")
    # time along the route: each segment at its speed (capped), piecewise linear in distance
    speed = np.minimum(net.speed_mps[seg], max_speed_mps)
    t_off = np.concatenate([[0.0], np.cumsum(length / speed)])
    t0, t1 = np.interp([s0, s1], offsets, t_off)
    n_max = int(math.ceil((t1 - t0) / lo_dt)) + 2
    times = t0 + np.concatenate([[0.0], np.cumsum(rng.uniform(lo_dt, hi_dt, n_max))])
    times = times[times <= t1]
    if times[-1] < t1:
        times = np.append(times, t1)  # the fix at the destination
    s = np.interp(times, t_off, offsets)
    k = np.clip(np.searchsorted(offsets, s, side="right") - 1, 0, seg.size - 1)

    # route polyline in local metres, vertex distances scaled to length_m per segment
    lon0, lat0 = (float(v) for v in net.geom_lonlat.mean(axis=0))
    sy = EARTH_RADIUS_M * math.pi / 180.0
    sx = sy * math.cos(math.radians(lat0))
    starts, ends = net.geom_offsets[seg], net.geom_offsets[seg + 1]
    counts = ends - starts
    gather = np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
    vx = (net.geom_lonlat[gather, 0] - lon0) * sx
    vy = (net.geom_lonlat[gather, 1] - lat0) * sy
    owner = np.repeat(np.arange(seg.size), counts)
    step = np.hypot(np.diff(vx), np.diff(vy))
    step[owner[1:] != owner[:-1]] = 0.0  # the join between two segments is one point
    cum = np.concatenate([[0.0], np.cumsum(step)])
    within = cum - cum[np.searchsorted(owner, owner)]  # distance from the segment's start
    poly_len = np.maximum.reduceat(within, np.searchsorted(owner, np.arange(seg.size)))
    scale = np.where(poly_len > 0, length / np.where(poly_len > 0, poly_len, 1.0), 0.0)
    vs = offsets[owner] + within * scale[owner]
    x = np.interp(s, vs, vx) + rng.normal(0.0, noise_m, s.size)
    y = np.interp(s, vs, vy) + rng.normal(0.0, noise_m, s.size)
    energy = None
    if segment_energy_wh is not None:
        e = np.asarray(segment_energy_wh, dtype=np.float64)[seg]
        energy = np.interp(s, offsets, np.concatenate([[0.0], np.cumsum(e)]))
    return SimulatedTrack(
        lon=lon0 + x / sx,
        lat=lat0 + y / sy,
        time_s=times - t0,
        route_m=s,
        segment=seg[k],
        energy_wh=energy,
    )


def common_segments(matched: Sequence[int], driven: Sequence[int]) -> int:
    """How many segments a matched route gets right: the length of the longest common
    subsequence of the matched and the driven segment sequences (order kept, repeats counted).
    The scoring of the matcher's tests and benchmark."""
    prev = [0] * (len(driven) + 1)
    for x in matched:
        cur = [0]
        for j, y in enumerate(driven):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]
