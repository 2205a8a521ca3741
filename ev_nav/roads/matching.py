"""Map matching: which directed segments a recorded GPS track drove.

A hidden Markov model in the manner of Newson & Krumm (2009), "Hidden Markov map matching through
noise and sparseness":

* **states** of a GPS point are its *candidates*, the closest position on each segment within
  ``search_radius_m`` (at most ``max_candidates`` per point). Both directions of a two-way street
  are separate candidates; the transitions tell them apart.
* **emission**: a Gaussian in the distance from the point to the candidate, sd ``gps_sigma_m``.
* **transition**: exponential in ``|route distance − great-circle distance|`` between the
  candidates of consecutive points, scale ``beta_m``; route distances follow the directed line
  graph (one-way streets and turn rules respected), by a bounded Dijkstra per candidate.
* **Viterbi** in log space picks the most likely candidate sequence; the gaps between
  consecutive matched segments are filled with the shortest paths the transitions measured.

As Newson & Krumm recommend, points within ``2 σ`` of the previous kept point are skipped: at
1 Hz and city speed the noise exceeds the motion, and such points add ambiguity, not information
(the distance is measured on a lightly smoothed track, see :func:`_thin`).
A point with no road within the search radius is skipped as an outlier; when no route connects
two consecutive points the chain breaks and restarts (the gap is bridged by a shortest path).

Everything per point is vectorised (candidate search with a k-d tree over sampled road
geometry, projections, Viterbi steps); the route-distance searches are compiled (numba), and
cost what they explore, not the network's size.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numba as nb
import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.spatial import cKDTree

from ev_nav.bandits.routing import Router
from ev_nav.errors import ConfigError, InvalidObservation, TrackOffNetworkError
from ev_nav.roads.network import EARTH_RADIUS_M, RoadNetwork, require_network

__all__ = ["MatchConfig", "MatchResult", "match_track"]


#: Largest GPS error a track may be matched with [m]: beyond it the matcher thins the track to
#: a few points and searches kilometres around each, and matches a route the car did not drive.
MAX_GPS_SIGMA_M = 500.0


@dataclass(frozen=True)
class MatchConfig:
    """Parameters of the map matcher.

    Attributes
    ----------
    gps_sigma_m : float
        Standard deviation of the GPS position error [m] (per coordinate).
    search_radius_m : float, optional
        Roads farther than this from a point are not candidates [m] (default ``max(50, 5 σ)``).
    max_candidates : int
        At most this many candidate segments per point (the closest).
    beta_m : float, optional
        Scale of the exponential transition model [m] (default ``σ``): how much a route may
        differ from the straight line between two points before it becomes unlikely.
    min_spacing_m : float, optional
        Skip points closer than this to the previous kept point [m] (default ``2 σ``).
    max_detour : float
        Route distances longer than ``max_detour × great-circle + 2 × search radius`` are not
        searched (their transition probability is negligible).
    max_off_network_share : float
        Refuse a track whose share of points without any road in reach exceeds this.
    """

    gps_sigma_m: float = 10.0
    search_radius_m: float | None = None
    max_candidates: int = 16
    beta_m: float | None = None
    min_spacing_m: float | None = None
    max_detour: float = 2.0
    max_off_network_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("gps_sigma_m", "search_radius_m", "beta_m", "max_detour"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ConfigError(f"map matching: {name} must be a positive number, got {v!r}")
        if not self.gps_sigma_m <= MAX_GPS_SIGMA_M:  # 1e9 m thinned a track to a few points
            raise ConfigError(f"map matching: gps_sigma_m is a GPS receiver's error, at most "
                              f"{MAX_GPS_SIGMA_M:g} m; got {self.gps_sigma_m!r}")
        if self.min_spacing_m is not None and not (
            math.isfinite(self.min_spacing_m) and self.min_spacing_m >= 0
        ):
            raise ConfigError(f"map matching: min_spacing_m must be >= 0, got {self.min_spacing_m}")
        if int(self.max_candidates) < 1:
            raise ConfigError("map matching: max_candidates must be at least 1")
        if not 0.0 <= self.max_off_network_share <= 1.0:
            raise ConfigError("map matching: max_off_network_share must be in 0..1")

    @property
    def radius(self) -> float:
        """Effective search radius [m]."""
        return self.search_radius_m or max(50.0, 5.0 * self.gps_sigma_m)

    @property
    def beta(self) -> float:
        """Effective transition scale [m]."""
        return self.beta_m or self.gps_sigma_m

    @property
    def spacing(self) -> float:
        """Effective minimum spacing of kept points [m]."""
        return 2.0 * self.gps_sigma_m if self.min_spacing_m is None else self.min_spacing_m


@dataclass(frozen=True)
class MatchResult:
    """The driven route of a track.

    Attributes
    ----------
    segments : ndarray of int64
        The driven segments in order, a connected path of the line graph (a segment driven twice
        appears twice).
    first_fraction, last_fraction : float
        Share of the first and of the last segment that the track covers [0..1] (the track
        starts and ends inside them).
    point_segment : ndarray of int64
        Per input point, the segment it was matched to; ``-1`` for skipped points (too close to
        the previous one, or off the network).
    point_route_m : ndarray of float64
        Per input point, its position along the driven route [m] from the start of
        ``segments[0]`` (non-decreasing over the matched points); NaN for skipped points.
    point_error_m : ndarray of float64
        Per input point, its distance to the matched position [m]; NaN for skipped points.
    n_breaks : int
        Places where no route joined two consecutive points and the match restarted.
    n_off_network : int
        Points skipped because no road was within the search radius.
    """

    segments: NDArray[np.int64]
    first_fraction: float
    last_fraction: float
    point_segment: NDArray[np.int64]
    point_route_m: NDArray[np.float64]
    point_error_m: NDArray[np.float64]
    n_breaks: int
    n_off_network: int


# ====================================================================== road geometry index
@dataclass(frozen=True)
class _Geometry:
    """Road polylines in local metres and a k-d tree over points sampled along them."""

    lon0: float
    lat0: float
    sx: float  # metres per degree of longitude at lat0
    sy: float  # metres per degree of latitude
    ax: NDArray[np.float64]  # piece start/end [m]
    ay: NDArray[np.float64]
    dx: NDArray[np.float64]  # piece vector [m]
    dy: NDArray[np.float64]
    piece_seg: NDArray[np.int64]
    piece_start: NDArray[np.float64]  # distance along its segment's polyline to the piece [m]
    poly_len: NDArray[np.float64]  # polyline length per segment [m]
    sample_piece: NDArray[np.int64]
    step: float  # largest gap between samples along a piece [m]
    tree: cKDTree

    def xy(self, lon: NDArray[np.float64], lat: NDArray[np.float64]) -> NDArray[np.float64]:
        return np.column_stack([(lon - self.lon0) * self.sx, (lat - self.lat0) * self.sy])


#: Sampling step of the candidate index [m]: a point's roads within r lie among the samples
#: within r + step/2.
_SAMPLE_STEP_M = 20.0

_GEOMETRY: weakref.WeakKeyDictionary[RoadNetwork, _Geometry] = weakref.WeakKeyDictionary()


def _geometry(net: RoadNetwork) -> _Geometry:
    """The network's geometry index, built once per network object (vectorised)."""
    cached = _GEOMETRY.get(net)
    if cached is not None:
        return cached
    west, south, east, north = net.bounds()
    lon0, lat0 = 0.5 * (west + east), 0.5 * (south + north)
    # equirectangular about the network's centre: at city/region scale the scale error is a
    # fraction of a percent of the (short) point-to-road distances measured with it
    sy = EARTH_RADIUS_M * math.pi / 180.0
    sx = sy * math.cos(math.radians(lat0))
    px = (net.geom_lonlat[:, 0] - lon0) * sx
    py = (net.geom_lonlat[:, 1] - lat0) * sy
    counts = np.diff(net.geom_offsets)
    vert_seg = np.repeat(np.arange(net.n_segments, dtype=np.int64), counts)
    # pieces join consecutive vertices of the same segment
    real = vert_seg[:-1] == vert_seg[1:]
    first = np.flatnonzero(real)
    ax, ay = px[first], py[first]
    dx, dy = px[first + 1] - ax, py[first + 1] - ay
    plen = np.hypot(dx, dy)
    piece_seg = vert_seg[first]
    # distance from the segment's start to each piece: cumulative length within its segment
    cum = np.cumsum(plen)
    seg_first_piece = np.searchsorted(piece_seg, np.arange(net.n_segments))
    base = np.concatenate([[0.0], cum])[seg_first_piece]
    piece_start = cum - plen - base[piece_seg]
    poly_len = np.bincount(piece_seg, weights=plen, minlength=net.n_segments)
    n_samp = np.maximum(1, np.ceil(plen / _SAMPLE_STEP_M).astype(np.int64))
    sample_piece = np.repeat(np.arange(first.size, dtype=np.int64), n_samp)
    k = np.arange(sample_piece.size) - np.repeat(np.cumsum(n_samp) - n_samp, n_samp)
    frac = (k + 0.5) / n_samp[sample_piece]
    sample_xy = np.column_stack(
        [ax[sample_piece] + frac * dx[sample_piece], ay[sample_piece] + frac * dy[sample_piece]]
    )
    geo = _Geometry(
        lon0=lon0, lat0=lat0, sx=sx, sy=sy, ax=ax, ay=ay, dx=dx, dy=dy,
        piece_seg=piece_seg, piece_start=piece_start, poly_len=poly_len,
        sample_piece=sample_piece, step=_SAMPLE_STEP_M, tree=cKDTree(sample_xy),
    )
    _GEOMETRY[net] = geo
    return geo


def _candidates(
    net: RoadNetwork, geo: _Geometry, xy: NDArray[np.float64], cfg: MatchConfig
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64], NDArray[np.float64]]:
    """Candidates of every point: (point, segment, position along it [m], distance [m]).

    Sorted by point, then by distance; at most ``cfg.max_candidates`` per point, the closest.
    """
    r = cfg.radius
    hits = geo.tree.query_ball_point(xy, r + 0.5 * geo.step, return_sorted=False)
    counts = np.fromiter((len(h) for h in hits), dtype=np.int64, count=len(hits))
    if counts.sum() == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty(0), np.empty(0)
    pt = np.repeat(np.arange(xy.shape[0], dtype=np.int64), counts)
    piece = geo.sample_piece[np.concatenate([np.asarray(h, dtype=np.int64) for h in hits])]
    key = np.unique(pt * geo.ax.size + piece)  # each (point, piece) once
    pt, piece = key // geo.ax.size, key % geo.ax.size
    # projection of each point onto each piece
    rx, ry = xy[pt, 0] - geo.ax[piece], xy[pt, 1] - geo.ay[piece]
    dx, dy = geo.dx[piece], geo.dy[piece]
    denom = dx * dx + dy * dy
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(denom > 0, np.clip((rx * dx + ry * dy) / denom, 0.0, 1.0), 0.0)
    dist = np.hypot(rx - t * dx, ry - t * dy)
    seg = geo.piece_seg[piece]
    along = geo.piece_start[piece] + t * np.sqrt(denom)
    # One candidate per local minimum of the distance along a segment's polyline, not one per
    # segment: a long winding road (a hairpin) passes a point more than once, and only the
    # right pass gives positions along the segment that advance with the drive. Rows are sorted
    # by (point, piece), and a segment's pieces are consecutive, so the polyline neighbours of a
    # piece are the adjacent rows of the same point and segment.
    d_prev = np.full(pt.size, np.inf)
    d_next = np.full(pt.size, np.inf)
    adj = (pt[1:] == pt[:-1]) & (piece[1:] == piece[:-1] + 1) & (seg[1:] == seg[:-1])
    d_prev[1:][adj] = dist[:-1][adj]
    d_next[:-1][adj] = dist[1:][adj]
    local_min = (dist <= d_prev) & (dist < d_next) & (dist <= r)
    pt, seg, along, dist = pt[local_min], seg[local_min], along[local_min], dist[local_min]
    order = np.lexsort((seg, dist, pt))
    pt, seg, along, dist = pt[order], seg[order], along[order], dist[order]
    start = np.searchsorted(pt, pt, side="left")
    rank = np.arange(pt.size) - start
    keep = rank < int(cfg.max_candidates)
    pt, seg, along, dist = pt[keep], seg[keep], along[keep], dist[keep]
    # positions in the units of length_m (the polyline in local metres may differ by a hair)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(geo.poly_len[seg] > 0, along / geo.poly_len[seg], 0.0)
    pos = np.clip(frac, 0.0, 1.0) * net.length_m[seg]
    return pt, seg, pos, dist


# ====================================================================== route distances
# A binary min-heap on two parallel arrays (keys, nodes), for the compiled route-distance
# searches below (lazy deletion: a node may be pushed again with a smaller key).
@nb.njit(cache=True, nogil=True)
def _push(keys, nodes, size, key, node):  # pragma: no cover - compiled
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if keys[parent] <= key:
            break
        keys[i] = keys[parent]
        nodes[i] = nodes[parent]
        i = parent
    keys[i] = key
    nodes[i] = node
    return size + 1


@nb.njit(cache=True, nogil=True)
def _pop(keys, nodes, size):  # pragma: no cover - compiled
    key = keys[0]
    node = nodes[0]
    size -= 1
    if size > 0:
        last_key = keys[size]
        last_node = nodes[size]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size and keys[child + 1] < keys[child]:
                child += 1
            if keys[child] >= last_key:
                break
            keys[i] = keys[child]
            nodes[i] = nodes[child]
            i = child
        keys[i] = last_key
        nodes[i] = last_node
    return key, node, size


@nb.njit(cache=True, nogil=True)
def _step_distances(
    indptr, indices, length, cand_seg, ptr, limits, dist, reached, settled, target, heap_keys,
    heap_nodes,
):  # pragma: no cover - compiled
    """Line-graph distances between the candidates of consecutive points.

    For step ``t`` (points ``t`` and ``t + 1``) and each pair of candidate segments ``a`` of
    point ``t``, ``b`` of point ``t + 1``: the length of the cheapest path from the end of ``a``
    to the end of ``b`` (entering a segment costs its length), searched no farther than
    ``limits[t]``; ``inf`` beyond that, and for ``b == a``. Returned flattened, step by step,
    row-major per step. Scratch arrays are stamped per search, never reset.
    """
    n_steps = ptr.size - 2
    total = 0
    for t in range(n_steps):
        total += (ptr[t + 1] - ptr[t]) * (ptr[t + 2] - ptr[t + 1])
    out = np.full(total, np.inf)
    stamp = 0
    o = 0
    for t in range(n_steps):
        b0, b1 = ptr[t + 1], ptr[t + 2]
        for i in range(ptr[t], ptr[t + 1]):
            src = cand_seg[i]
            stamp += 1
            remaining = 0
            for j in range(b0, b1):
                s = cand_seg[j]
                if s != src and target[s] != stamp:
                    target[s] = stamp
                    remaining += 1
            size = _push(heap_keys, heap_nodes, 0, 0.0, src)
            dist[src] = 0.0
            reached[src] = stamp
            while size > 0 and remaining > 0:
                key, node, size = _pop(heap_keys, heap_nodes, size)
                if settled[node] == stamp or key > dist[node]:
                    continue
                if key > limits[t]:
                    break
                settled[node] = stamp
                if target[node] == stamp and node != src:
                    remaining -= 1
                for k in range(indptr[node], indptr[node + 1]):
                    nxt = indices[k]
                    if settled[nxt] == stamp:
                        continue
                    cand = key + length[nxt]
                    if reached[nxt] != stamp or cand < dist[nxt]:
                        dist[nxt] = cand
                        reached[nxt] = stamp
                        size = _push(heap_keys, heap_nodes, size, cand, nxt)
            for j in range(b0, b1):
                s = cand_seg[j]
                if s != src and settled[s] == stamp:
                    out[o] = dist[s]
                o += 1
    return out


# ====================================================================== matching
def match_track(
    net: RoadNetwork,
    lon: ArrayLike,
    lat: ArrayLike,
    config: MatchConfig | None = None,
) -> MatchResult:
    """Match a GPS track onto the network's directed segments (see the module docstring).

    Parameters
    ----------
    net : RoadNetwork
        The network driven on.
    lon, lat : array_like of float
        Track points in driving order [degrees, WGS84].
    config : MatchConfig, optional
        Matcher parameters (defaults: 10 m GPS noise).

    Raises
    ------
    TrackOffNetworkError
        When too many points (``config.max_off_network_share``) have no road within the search
        radius, or fewer than one point can be matched.
    """
    require_network(net, "match_track")
    cfg = config or MatchConfig()
    lon = np.asarray(lon, dtype=np.float64)
    lat = np.asarray(lat, dtype=np.float64)
    n = lon.size
    if lat.shape != lon.shape:  # was "no points to match"
        raise InvalidObservation(
            f"a track has one latitude per longitude; got {lon.size} and {lat.size}"
        )
    if lon.ndim != 1:  # (n, 2) arrays failed inside scipy
        raise InvalidObservation(f"lon and lat are one value per track point (1-D arrays), "
                                 f"got arrays of shape {lon.shape}")
    if n == 0:
        raise TrackOffNetworkError("the track has no points to match")
    bad = np.flatnonzero(~(np.isfinite(lon) & np.isfinite(lat)))
    if bad.size:  # was scipy's "'x' must be finite"
        raise InvalidObservation(
            f"track point {int(bad[0])} has no position (lon {lon.flat[bad[0]]}, lat "
            f"{lat.flat[bad[0]]}); drop the points without a fix"
        )
    geo = _geometry(net)
    xy = geo.xy(lon, lat)

    pt, seg, pos, dist = _candidates(net, geo, xy, cfg)
    has_cand = np.zeros(n, dtype=bool)
    has_cand[pt] = True
    n_off = int(n - has_cand.sum())
    if not has_cand.any() or n_off > cfg.max_off_network_share * n:
        d = _nearest_road_m(geo, xy)
        raise TrackOffNetworkError(
            f"{n_off} of {n} track points are farther than {cfg.radius:,.0f} m from every road "
            f"of {net.name} (the median point is {d:,.0f} m away); is this track from this "
            "network's area?"
        )

    # keep the first point with candidates, then points at least `spacing` from the last kept
    # one, and always the last point with candidates (the trip's end)
    kept = _thin(xy, has_cand, cfg.spacing)
    sel = np.isin(pt, kept)
    pt, seg, pos, dist = pt[sel], seg[sel], pos[sel], dist[sel]
    per_point = np.bincount(np.searchsorted(kept, pt), minlength=kept.size)
    ptr = np.concatenate([[0], np.cumsum(per_point)]).astype(np.int64)  # candidates of kept[t]

    # great-circle (here: local planar, the same at this scale) distance between kept points
    gc = np.hypot(*np.diff(xy[kept], axis=0).T)
    limits_route = cfg.max_detour * gc + 2.0 * cfg.radius
    length = np.ascontiguousarray(net.length_m, dtype=np.float64)
    # the search measures end-of-a to end-of-b, so allow b's own length on top
    max_len_next = np.maximum.reduceat(length[seg], ptr[1:-1]) if kept.size > 1 else np.empty(0)
    n_seg = net.n_segments
    raw = _step_distances(
        np.ascontiguousarray(net.lg_indptr, dtype=np.int64),
        np.ascontiguousarray(net.lg_indices, dtype=np.int64),
        length,
        seg,
        ptr,
        limits_route + max_len_next,
        np.empty(n_seg),
        np.zeros(n_seg, dtype=np.int64),
        np.zeros(n_seg, dtype=np.int64),
        np.zeros(n_seg, dtype=np.int64),
        np.empty(net.lg_indices.size + 1),
        np.empty(net.lg_indices.size + 1, dtype=np.int64),
    )

    # Viterbi in log space (constants dropped: they do not change the argmax)
    sigma, beta = cfg.gps_sigma_m, cfg.beta
    emission = -0.5 * (dist / sigma) ** 2
    # Along one segment the noise often puts a point behind the previous one (the along-track
    # error of a difference of two fixes has sd σ√2). A car does not reverse: a step back of up
    # to 4 σ counts as standing still; farther back would need a loop round the block.
    back_tol = 4.0 * sigma
    scores = [emission[ptr[0] : ptr[1]]]  # per kept point: best log-probability per candidate
    back: list[NDArray[np.int64]] = []
    breaks: list[int] = []  # step t+1 starts a new chain
    o = 0
    for t in range(kept.size - 1):
        a = slice(ptr[t], ptr[t + 1])
        b = slice(ptr[t + 1], ptr[t + 2])
        ka, kb = ptr[t + 1] - ptr[t], ptr[t + 2] - ptr[t + 1]
        d = raw[o : o + ka * kb].reshape(ka, kb)
        o += ka * kb
        sa, sb = seg[a], seg[b]
        route = (length[sa] - pos[a])[:, None] + (d - length[sb][None, :]) + pos[b][None, :]
        same = sa[:, None] == sb[None, :]
        fwd = pos[b][None, :] - pos[a][:, None]
        route = np.where(same, np.where(fwd >= -back_tol, np.maximum(fwd, 0.0), np.inf), route)
        route = np.where(route <= limits_route[t], route, np.inf)
        trans = -np.abs(route - gc[t]) / beta
        total = scores[-1][:, None] + trans
        best = np.argmax(total, axis=0)
        new = total[best, np.arange(kb)]
        if not np.isfinite(new).any():  # no route joins the two points: restart the chain
            breaks.append(t + 1)
            best = np.full(kb, -1, dtype=np.int64)
            new = np.zeros(kb)
        back.append(best.astype(np.int64))
        scores.append(new + emission[b])

    # backtrack: within a chain follow the pointers; a chain that ends at a break ends in its
    # own most likely state
    choice = np.empty(kept.size, dtype=np.int64)
    choice[-1] = int(np.argmax(scores[-1]))
    for t in range(kept.size - 2, -1, -1):
        prev = int(back[t][choice[t + 1]])
        choice[t] = prev if prev >= 0 else int(np.argmax(scores[t]))
    chosen = ptr[:-1] + choice  # flat candidate index per kept point
    c_seg, c_pos, c_dist = seg[chosen], pos[chosen], dist[chosen]

    # the driven path: fill each change of segment with the shortest path the transition used
    router = Router(net)
    path: list[int] = [int(c_seg[0])]
    path_idx = np.empty(kept.size, dtype=np.int64)
    path_idx[0] = 0
    for t in range(1, kept.size):
        s_prev, s_cur = int(c_seg[t - 1]), int(c_seg[t])
        if s_cur != s_prev:
            path.extend(router.route(length, s_prev, s_cur)[1:].tolist())
        path_idx[t] = len(path) - 1
    segments = np.asarray(path, dtype=np.int64)
    offsets = np.concatenate([[0.0], np.cumsum(length[segments])])
    route_m = np.maximum.accumulate(offsets[path_idx] + c_pos)

    point_segment = np.full(n, -1, dtype=np.int64)
    point_route = np.full(n, np.nan)
    point_err = np.full(n, np.nan)
    point_segment[kept] = c_seg
    point_route[kept] = route_m
    point_err[kept] = c_dist
    first_len, last_len = length[segments[0]], length[segments[-1]]
    return MatchResult(
        segments=segments,
        first_fraction=float(np.clip(1.0 - c_pos[0] / first_len, 0.0, 1.0)),
        last_fraction=float(np.clip((route_m[-1] - offsets[-2]) / last_len, 0.0, 1.0)),
        point_segment=point_segment,
        point_route_m=point_route,
        point_error_m=point_err,
        n_breaks=len(breaks),
        n_off_network=n_off,
    )


#: Half-width of the moving average that the thinning decisions look at [points].
_SMOOTH_HALF = 2


def _thin(xy: NDArray[np.float64], usable: NDArray[np.bool_], spacing: float) -> NDArray[np.int64]:
    """Indices of the points to match: usable points at least ``spacing`` from the previous
    kept one, plus the last usable point.

    Distances are measured between *smoothed* positions (a centred moving average over
    ``2 × _SMOOTH_HALF + 1`` usable points). On raw fixes the rule would keep precisely the
    points whose noise carried them far from the last one, so the kept points' straight-line
    distances would overstate the motion, and the transition model would favour detours
    (a lap too many round a roundabout).
    """
    idx = np.flatnonzero(usable)
    if spacing <= 0 or idx.size <= 2:
        return idx
    p = xy[idx]
    h = _SMOOTH_HALF
    csum = np.concatenate([np.zeros((1, 2)), np.cumsum(p, axis=0)])
    lo = np.clip(np.arange(idx.size) - h, 0, idx.size)
    hi = np.clip(np.arange(idx.size) + h + 1, 0, idx.size)
    sm = (csum[hi] - csum[lo]) / (hi - lo)[:, None]
    keep = [0]
    last = sm[0]
    # a sequential rule (each decision depends on the last kept point): one pass over the
    # track's points, never over segments
    for i in range(1, idx.size - 1):
        if (sm[i, 0] - last[0]) ** 2 + (sm[i, 1] - last[1]) ** 2 >= spacing * spacing:
            keep.append(i)
            last = sm[i]
    keep.append(idx.size - 1)
    return idx[np.asarray(keep, dtype=np.int64)]


def _nearest_road_m(geo: _Geometry, xy: NDArray[np.float64]) -> float:
    """Median distance from the points to the nearest sampled road point [m] (for messages)."""
    d, _ = geo.tree.query(xy, k=1)
    return float(np.median(d))
