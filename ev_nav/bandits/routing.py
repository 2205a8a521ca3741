"""Shortest paths on the line graph: Dijkstra for the agent, Johnson/Bellman–Ford for the oracle.

Weights live on line-graph *nodes* (segments): the cost of a path of segments is the sum of the
weights of all its segments, the start segment included. As a graph problem, connection
``e1 → e2`` carries weight ``w[e2]`` and the start's own weight is added at the end. The CSR
structure is built once per network; per trip only the weight vector changes. The agent's
point-to-point query runs a bidirectional Dijkstra that stops at the goal (:mod:`._dijkstra`),
interpreted until a process has routed long enough for numba's compiled form to pay off; the
oracle's single-source queries use the compiled routines of ``scipy.sparse.csgraph``.

Given per-segment lower bounds of the weights (fixed per network and model, e.g.
:func:`ev_nav.potential.loss_lower_bound`), the same search is goal-directed (ALT: landmark
distances under the lower bounds, computed once, give every query a consistent potential); it
returns a path of the same cost and settles a fraction of the segments plain search settles.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray
from scipy.sparse.csgraph import NegativeCycleError as _ScipyNegativeCycle
from scipy.sparse.csgraph import bellman_ford, dijkstra
from scipy.special import log1p, ndtri

from ev_nav.bandits import _dijkstra
from ev_nav.bandits.indices import truncated_quantile, truncated_quantile_from_tail
from ev_nav.errors import (
    InvalidObservation,
    NegativeCycleError,
    RouteOptionError,
    UnknownSegmentError,
    UnreachableError,
)
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.partial import driven_shares

#: Added to every Dijkstra weight: SciPy (the oracle) treats explicit zeros in sparse input as
#: edges, and a strictly positive floor makes ties between equal-cost paths prefer fewer segments.
_WEIGHT_FLOOR = 1e-12

#: A share of a segment below this is not driven (1e-6 of a 100 m segment is 0.1 mm).
_MIN_SHARE = 1e-6

#: Why a trip whose origin and destination snap to one point is refused.
SAME_PLACE = ("origin and destination are the same place on the road; a trip needs two "
              "different places")


def same_place(a: tuple[int, float], b: tuple[int, float]) -> bool:
    """Whether two road positions are one point (nothing to drive between them).

    Parameters
    ----------
    a, b : (int, float)
        Positions as ``(segment, fraction along it)``, the fraction in 0..1.

    Returns
    -------
    bool
        The same segment, fractions closer than a millionth of it.
    """
    return int(a[0]) == int(b[0]) and abs(float(a[1]) - float(b[1])) < _MIN_SHARE


def _path_from_predecessors(pred: NDArray[np.int32], start: int, goal: int) -> NDArray[np.int64]:
    # walks the path only (typically tens to hundreds of segments), never all segments
    path = [goal]
    node = goal
    while node != start:
        node = int(pred[node])
        if node < 0:
            raise UnreachableError(f"no route from segment {start} to segment {goal}")
        path.append(node)
    return np.asarray(path[::-1], dtype=np.int64)


#: Node numbers in the search structures (successor lists, predecessors, heap entries): 32 bits
#: halve the memory a query walks through (networks are far below 2³¹ segments).
_NODE = np.int32
#: Query stamps in the scratch arrays (:meth:`Router._next_stamp` keeps them below the limit:
#: the point-to-point search marks a settled node ``2 stamp + 1``, the one-to-many search marks
#: targets with ``-stamp - 1``).
_STAMP = np.int32
_STAMP_LIMIT = 2**30 - 1

#: Interpreted routing [s] after which a process switches to the compiled kernel: about what
#: importing numba and loading the kernel's cached machine code costs. A one-shot command
#: (``ev-nav route``: a few queries, milliseconds each) never pays it; a server or a simulation
#: pays it once, early. Both forms return the same paths (:mod:`._dijkstra`).
COMPILE_AFTER_S = 0.25
#: Networks above this size use the compiled kernel from the first query: one interpreted query
#: there costs about as much as loading it.
INTERPRET_MAX_SEGMENTS = 100_000


class _Kernel:
    """The process's compiled kernel once loaded, and the time spent interpreting until then."""

    compiled: Callable[..., NDArray[np.int64]] | None = None
    tree: Callable[..., tuple[NDArray, NDArray, NDArray]] | None = None
    pareto: Callable[..., tuple] | None = None
    interpreted_s = 0.0
    lock = threading.Lock()
    excess: Any = None

    @classmethod
    def lazy_excess(cls) -> Any:
        """The compiled truncated quantiles (from a score, from its tail) and counter-based
        tail that lazy weights use (built on first use;
        :func:`ev_nav.bandits._dijkstra.truncated_excess`)."""
        with cls.lock:
            if cls.excess is None:
                cls.excess = _dijkstra.truncated_excess()
        return cls.excess


def compiled_kernel() -> Callable[..., NDArray[np.int64]]:
    """Load (or, the first time, build) the compiled Dijkstra now; every Router uses it from
    then on. For callers that route a lot and want no interpreted start (benchmarks)."""
    with _Kernel.lock:
        if _Kernel.compiled is None:
            kernel = _dijkstra.compiled()
            # one query on a two-node graph, with the argument types Router.route passes, loads
            # the machine code now rather than inside a trip
            ptr, idx = np.array([0, 1, 2], dtype=np.int64), np.array([1, 0], dtype=_NODE)
            kernel(ptr, idx, ptr, idx, np.ones(2), _WEIGHT_FLOOR, 0, 1, np.empty(4),
                   np.empty(4, dtype=_NODE), np.zeros(4, dtype=_STAMP), 1, np.empty(6),
                   np.empty(6, dtype=_NODE),
                   *_NO_LANDMARKS, 0.0, 0.0, *_NO_LAZY, True)
            _Kernel.compiled = kernel
    return _Kernel.compiled


def load_compiled() -> None:
    """Load the compiled Dijkstra (:func:`compiled_kernel`) and the compiled lazy weights of
    Thompson draws now (about 0.8 s with numba's import), for a long-running process that would
    otherwise load them inside its first requests."""
    compiled_kernel()
    _Kernel.lazy_excess()


def _tree_kernel() -> Callable[..., tuple[NDArray, NDArray, NDArray]]:
    """The compiled one-to-many search (loaded once per process, like :func:`compiled_kernel`)."""
    with _Kernel.lock:
        if _Kernel.tree is None:
            _Kernel.tree = _dijkstra.compiled_tree()
    return _Kernel.tree


def _pareto_kernel() -> Callable[..., tuple]:
    """The compiled bicriteria search (loaded once per process)."""
    with _Kernel.lock:
        if _Kernel.pareto is None:
            _Kernel.pareto = _dijkstra.compiled_pareto()
    return _Kernel.pareto


#: Landmarks a goal-directed Router precomputes, and how many of them (the best for the pair)
#: each query uses: more landmarks give tighter bounds, more active ones cost more per node.
LANDMARKS = 8
ACTIVE_LANDMARKS = 2

# the kernel's landmark arguments for a plain (not goal-directed) query
_NO_LANDMARKS = (np.empty(0), np.empty(0), 1, np.empty(0, dtype=np.int64), np.empty(0),
                 np.empty(1))
# the kernel's lazy-weight arguments when the weights are given
_NO_LAZY = (None, np.empty(0), np.empty(0, dtype=np.int64), np.empty(0), np.empty(0),
            np.empty(0), None, np.uint64(0), np.empty(0, dtype=_STAMP),
            np.empty(0, dtype=np.int64))


@dataclass(frozen=True)
class SeededScores:
    """Independent standard normal scores, one per segment, from a counter-based generator:
    segment ``e``'s score is ``Φ⁻¹(u)`` with ``u`` from the ``e + 1``-th output of splitmix64
    started at state ``seed`` (:func:`ev_nav.bandits._dijkstra.counter_uniform`), a pure
    function of ``(seed, e)``; splitmix64's output function decorrelates nearby seeds. A lazy
    :class:`LossDraw` therefore draws only the segments its search reaches, and :meth:`values`
    gives the same numbers for any set of segments at once.

    Attributes
    ----------
    seed : int
        The draw's seed, 0..2⁶⁴−1 (e.g. from the trip's ``numpy.random.Generator``).
    """

    seed: int

    def __post_init__(self) -> None:
        if not 0 <= int(self.seed) < 2**64:
            raise InvalidObservation(f"a score seed is in 0..2^64-1, got {self.seed}")

    def values(self, segments: ArrayLike) -> NDArray[np.float64]:
        """The scores of ``segments`` (ids ≥ 0), vectorised."""
        return ndtri(self._uniforms(segments))

    def log_tails(self, segments: ArrayLike) -> NDArray[np.float64]:
        """``log Φ(−z)`` of the scores of ``segments``, vectorised: ``log(1 − u)`` for the score
        ``z = Φ⁻¹(u)``, the form a :class:`LossDraw` evaluates (it equals
        ``log_ndtr(−values(segments))`` to rounding, without ``Φ⁻¹`` and ``log Φ``)."""
        return log1p(-self._uniforms(segments))

    def _uniforms(self, segments: ArrayLike) -> NDArray[np.float64]:
        ids = np.asarray(segments, dtype=np.int64)
        if ids.size and ids.min() < 0:
            raise InvalidObservation("segment ids for scores must be >= 0")
        return _dijkstra.counter_uniform(np.uint64(self.seed), ids.astype(np.uint64))


@dataclass(frozen=True)
class LossDraw:
    """A trip's weights as a draw from each segment's loss posterior truncated to losses at or
    above the router's lower bound: ``w = lower + truncated_quantile(mean − lower, std, score)``
    [Wh] (:func:`ev_nav.bandits.indices.truncated_quantile`; the bound plays the part 0 plays in
    :func:`~ev_nav.bandits.indices.rectified_weights`). Every such weight respects the bound, and
    a goal-directed :meth:`Router.route` computes it only for the segments its search reaches.
    With :class:`SeededScores` the quantile is taken from each score's ``log Φ(−z)``
    (:meth:`SeededScores.log_tails`, :func:`~ev_nav.bandits.indices.truncated_quantile_from_tail`):
    the same draw to rounding (within 1e-12 of the weight), with one ``log1p`` in place of
    ``Φ⁻¹`` and one ``log Φ`` per segment.

    Attributes
    ----------
    mean, std : ndarray of float64
        Each segment's loss posterior mean and sd [Wh], before truncation.
    score : ndarray of float64 or SeededScores
        The standard score of each segment's draw (Thompson sampling: independent N(0, 1)),
        given, or drawn by a counter-based generator only for the segments the search reaches.
    """

    mean: NDArray[np.float64]
    std: NDArray[np.float64]
    score: NDArray[np.float64] | SeededScores

    def scores(self) -> NDArray[np.float64]:
        """Every segment's standard score."""
        if isinstance(self.score, SeededScores):
            return self.score.values(np.arange(self.mean.shape[0]))
        return self.score

    def weights(self, lower: ArrayLike) -> NDArray[np.float64]:
        """All segments' weights at once (the vectorised form of the same numbers) [Wh]."""
        lo = np.asarray(lower, dtype=np.float64)
        if isinstance(self.score, SeededScores):
            tails = self.score.log_tails(np.arange(self.mean.shape[0]))
            return lo + truncated_quantile_from_tail(self.mean - lo, self.std, tails)
        return lo + truncated_quantile(self.mean - lo, self.std, self.score)


def landmark_tables(
    indptr: NDArray[np.int64], indices: NDArray[np.int64], lower: NDArray[np.float64], count: int
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Lower-bound costs from and to ``count`` landmarks (ALT preprocessing), shape (n, K).

    Costs follow the router's convention (entering segment ``v`` costs ``lower[v]`` plus the
    weight floor). Landmarks are chosen farthest-first: each next one maximises the smallest
    round-trip cost to the landmarks chosen so far, starting from the segment farthest from
    segment 0, so they spread to the network's edges, where their bounds are tightest. Fewer than
    ``count`` are returned when no segment is left that is mutually reachable with the chosen
    ones and not one of them. ``inf`` marks no path.
    """
    n = indptr.size - 1
    data = lower[indices] + _WEIGHT_FLOOR
    fwd = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    bwd = fwd.T.tocsr()
    first = dijkstra(fwd, directed=True, indices=0)
    nxt = int(np.argmax(np.where(np.isfinite(first), first, -1.0)))
    cols_from, cols_to = [], []
    spread = np.full(n, np.inf)
    for _ in range(min(count, n)):
        d_from = dijkstra(fwd, directed=True, indices=nxt)
        d_to = dijkstra(bwd, directed=True, indices=nxt)
        cols_from.append(d_from)
        cols_to.append(d_to)
        round_trip = d_from + d_to
        np.minimum(spread, np.where(np.isfinite(round_trip), round_trip, 0.0), out=spread)
        nxt = int(np.argmax(spread))
        if not spread[nxt] > 0.0:
            break
    return np.column_stack(cols_from), np.column_stack(cols_to)


def locality_order(net: RoadNetwork) -> NDArray[np.int64]:
    """Segments sorted along a Z-order (Morton) curve through their midpoints: segments close on
    the map get close numbers, so a search that spreads over the map reads its arrays in nearby
    memory rather than at random (on the 1M-segment town a goal-directed query costs about a
    quarter less than in the network's own order; ``scripts/bench_routing.py --region``).

    Returns the segment ids in that order (``order[i]`` is the ``i``-th segment along the curve);
    a graph without coordinates (an object with only ``routing_graph``) keeps its own order.
    """
    midpoints = getattr(net, "segment_midpoints", None)
    if midpoints is None:
        return np.arange(net.n_segments, dtype=np.int64)
    mid = midpoints()
    if mid.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    span = np.ptp(mid, axis=0)
    cell = np.floor((mid - mid.min(axis=0)) / np.where(span > 0, span, 1.0) * 65535.0)
    code = np.zeros(mid.shape[0], dtype=np.uint64)
    q = cell.astype(np.uint64)
    for bit in range(16):  # interleave the 16 bits of the two cell coordinates
        b = np.uint64(bit)
        code |= ((q[:, 0] >> b) & np.uint64(1)) << np.uint64(2 * bit)
        code |= ((q[:, 1] >> b) & np.uint64(1)) << np.uint64(2 * bit + 1)
    return np.argsort(code, kind="stable").astype(np.int64)


class Router:
    """Dijkstra from a start segment to a goal segment with per-segment weights ≥ 0.

    Each query is a bidirectional search that stops as soon as no cheaper path can remain and
    costs only what it explores (scratch arrays are kept between queries, so a Router is not
    shared between threads). It runs interpreted (on Python lists, which index faster than
    arrays there) until the process has spent :data:`COMPILE_AFTER_S` doing so, then compiled
    (:func:`compiled_kernel`); the path is the same either way.

    Inside, segments are renumbered along :func:`locality_order` (the search structures, the
    scratch and the landmark tables are in that order; weights, segment ids and paths in and
    out are the network's own).

    With ``lower`` (a lower bound of every segment's weight, fixed for the network and model)
    the search is goal-directed (ALT, :mod:`._dijkstra`): landmark costs under ``lower`` are
    computed once here (a few single-source searches) and each query follows the potential
    they give. The route's cost is the one plain search finds whenever every weight is at least
    its bound; a query whose weights are not is routed by plain search instead and counted in
    :attr:`fallbacks` (checked on every query, never a wrong route).

    Parameters
    ----------
    net : RoadNetwork
        The network whose line graph is routed on.
    lower : array_like, optional
        Per-segment lower bound of the weights [the weights' unit, ≥ 0]; ``None``: plain
        bidirectional search.
    landmarks : int
        How many landmarks to precompute when ``lower`` is given.
    """

    def __init__(
        self, net: RoadNetwork, lower: ArrayLike | None = None, *, landmarks: int = LANDMARKS
    ) -> None:
        self.n_segments = n = net.n_segments
        # every search structure below is built from this one graph: the line graph less the
        # turns OSM forbids (RoadNetwork.routing_graph)
        indptr, indices = net.routing_graph()
        indptr = np.asarray(indptr, dtype=np.int64)
        indices = np.asarray(indices, dtype=np.int64)
        # internal number i is segment _order[i]; _rank maps back. Each segment keeps its
        # successors in the network's order (ties between equal-cost paths break as before)
        self._order = locality_order(net)
        self._rank = np.empty(n, dtype=np.int64)
        self._rank[self._order] = np.arange(n, dtype=np.int64)
        degree = np.diff(indptr)[self._order]
        self._indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(degree, out=self._indptr[1:])
        take = np.repeat(indptr[self._order] - self._indptr[:-1], degree)
        take += np.arange(take.size, dtype=np.int64)
        self._indices = self._rank[indices[take]]
        # the reversed line graph, for the backward half of the search
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(self._indptr))
        order = np.argsort(self._indices, kind="stable")
        self._rindices = src[order]
        self._rindptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self._indices, minlength=n), out=self._rindptr[1:])
        self._indices = self._indices.astype(_NODE)
        self._rindices = self._rindices.astype(_NODE)
        self._stamp = 0
        # scratch of each form, made on its first query: (dist, pred, reached, heap_keys,
        # heap_nodes), forward side first (see _dijkstra.shortest_path)
        self._arrays: tuple[NDArray, ...] | None = None
        self._lists: tuple[list, ...] | None = None  # the graph, then the scratch
        # the one-to-many search's own stamps (reached, settled); it shares the rest
        self._tree_marks: tuple[NDArray, NDArray] | None = None
        self._pot: NDArray[np.float64] | list | None = None  # scratch potential, goal-directed
        # scratch of lazy weights: the weights, their stamps, the faulty segment (-1: none)
        self._lazy: tuple[NDArray[np.float64], NDArray[np.int64], NDArray[np.int64]] | None = None
        # while a query of several searches runs (route_through, route_between): its weights,
        # validated once, and the same in internal order, made by its first search
        self._trusted: NDArray[np.float64] | None = None
        self._ordered: NDArray[np.float64] | None = None
        #: queries routed by plain search because a weight was below its lower bound
        self.fallbacks = 0
        self.lower: NDArray[np.float64] | None = None
        self._lower = np.empty(0)
        self._lm_from = self._lm_to = np.empty((0, 0))  # (landmarks, segments)
        if lower is not None:
            lo = np.ascontiguousarray(lower, dtype=np.float64)
            if lo.shape != (n,) or not (np.all(lo >= 0.0) and np.all(lo < np.inf)):
                raise InvalidObservation(
                    f"weight lower bounds must be {n} finite values >= 0, got shape {lo.shape}"
                )
            if int(landmarks) < 1:
                raise InvalidObservation(f"a goal-directed router needs >= 1 landmark, got "
                                         f"{landmarks}")
            self.lower = lo
            self._lower = np.ascontiguousarray(lo[self._order])  # internal order
            # landmark-major (K, n) tables, the layout the kernel reads
            self._lm_from, self._lm_to = (np.ascontiguousarray(t.T) for t in landmark_tables(
                self._indptr, self._indices, self._lower, int(landmarks)
            ))

    def _next_stamp(self) -> None:
        """A stamp no entry of the scratch holds yet (32-bit stamps: after 2³¹ − 2 queries the
        scratch is cleared once and numbering starts again)."""
        self._stamp += 1
        if self._stamp >= _STAMP_LIMIT:
            for scratch in (self._arrays, self._lazy, self._tree_marks):
                if scratch is not None:
                    for a in scratch:
                        if a.dtype == _STAMP:
                            a[:] = 0
            self._lists = None
            self._stamp = 1

    def _scratch_arrays(self) -> tuple[NDArray, ...]:
        if self._arrays is None:
            n, heap = self.n_segments, 2 * (self._indices.size + 1)
            self._arrays = (
                np.empty(2 * n, dtype=np.float64),
                np.empty(2 * n, dtype=_NODE),
                np.zeros(2 * n, dtype=_STAMP),
                np.empty(heap, dtype=np.float64),
                np.empty(heap, dtype=_NODE),
            )
        return self._arrays

    def _scratch_tree(self) -> tuple[NDArray, ...]:
        """The one-to-many search's scratch: distances and predecessors shared with the
        point-to-point search (valid where the stamps say so), its own stamps, the heap."""
        dist, pred, _, heap_keys, heap_nodes = self._scratch_arrays()
        if self._tree_marks is None:
            n = self.n_segments
            self._tree_marks = (np.zeros(n, dtype=_STAMP), np.zeros(n, dtype=_STAMP))
        return (dist, pred, *self._tree_marks, heap_keys, heap_nodes)

    def _scratch_lists(self) -> tuple[list, ...]:
        if self._lists is None:
            n, heap = self.n_segments, 2 * (self._indices.size + 1)
            graph = (self._indptr, self._indices, self._rindptr, self._rindices)
            self._lists = (
                *(a.tolist() for a in graph),
                [0.0] * (2 * n),
                [0] * (2 * n),
                [0] * (2 * n),
                [0.0] * heap,
                [0] * heap,
            )
        return self._lists

    def check_segment(self, e: int, what: str = "segment") -> int:
        """Validate a segment id and return it as ``int``."""
        if not 0 <= int(e) < self.n_segments:
            raise UnknownSegmentError(
                f"{what} id {e} is outside 0..{self.n_segments - 1} for this network"
            )
        return int(e)

    def _check_weights(self, weights: ArrayLike) -> NDArray[np.float64]:
        if weights is self._trusted:  # validated by the query in progress
            return self._trusted
        w = np.ascontiguousarray(weights, dtype=np.float64)
        if w.shape != (self.n_segments,):
            raise InvalidObservation(
                f"expected {self.n_segments} segment weights, got shape {w.shape}"
            )
        if not (np.all(w >= 0.0) and np.all(w < np.inf)):  # NaN fails both
            raise InvalidObservation("Dijkstra weights must be finite and non-negative")
        return w

    @contextmanager
    def _query(self, weights: ArrayLike) -> Iterator[NDArray[np.float64]]:
        """The validated weights of a query made of several searches (the up to 2 × 2
        candidate pairs of each leg): each search then skips the O(segments) validation and
        reordering its weights would cost it alone (a server plans four routes a request)."""
        if weights is self._trusted and self._trusted is not None:  # nested in the same query
            yield self._trusted
            return
        w = self._check_weights(weights)
        outer = self._trusted, self._ordered
        self._trusted, self._ordered = w, None
        try:
            yield w
        finally:
            self._trusted, self._ordered = outer

    def _internal_order(self, w: NDArray[np.float64]) -> NDArray[np.float64]:
        """``w`` in the search's internal segment order (made once per query)."""
        if w is not self._trusted:
            return w[self._order]
        if self._ordered is None:
            self._ordered = w[self._order]
        return self._ordered

    def route(
        self, weights: ArrayLike | LossDraw, start: int, goal: int
    ) -> NDArray[np.int64]:
        """Minimum-weight sequence of segments from ``start`` to ``goal`` (both included).

        ``weights`` is one weight per segment, or, for a goal-directed router, a
        :class:`LossDraw` whose weights are evaluated only for the segments the search reaches
        (compiled form; the interpreted form evaluates them all, to the same numbers).
        """
        start = self.check_segment(start, "start segment")
        goal = self.check_segment(goal, "goal segment")
        draw = weights if isinstance(weights, LossDraw) else None
        w = self._check_draw(draw) if draw is not None else self._check_weights(weights)
        if start == goal:
            return np.array([start], dtype=np.int64)
        self._next_stamp()
        kernel = _Kernel.compiled
        if kernel is None and self.n_segments > INTERPRET_MAX_SEGMENTS:
            kernel = compiled_kernel()
        if kernel is None and draw is not None:
            w, draw = self._check_weights(draw.weights(self.lower)), None
        goal_directed = self._goal_direction(w if draw is None else None, start, goal)
        start, goal = int(self._rank[start]), int(self._rank[goal])  # internal numbers
        lazy = _NO_LAZY
        if draw is not None:
            assert self.lower is not None  # _check_draw
            if self._lazy is None:
                n = self.n_segments
                self._lazy = (np.empty(n), np.zeros(n, dtype=_STAMP), np.full(1, -1))
            w, stamps, fault = self._lazy
            excess, excess_from_tail, counter_tail = _Kernel.lazy_excess()
            if isinstance(draw.score, SeededScores):
                # the kernel's per-segment input is the score's log Φ(−z), as in weights()
                quantile, scores = excess_from_tail, (_NO_LAZY[5], counter_tail,
                                                      np.uint64(draw.score.seed))
            else:
                quantile, scores = excess, (draw.score, None, np.uint64(0))
            lazy = (quantile, self._lower, self._order, draw.mean, draw.std, *scores, stamps,
                    fault)
        else:
            w = self._internal_order(w)
        if kernel is not None:
            self._lists = None  # the interpreted form's scratch is not needed any more
            graph = (self._indptr, self._indices, self._rindptr, self._rindices)
            dist, pred, reached, keys, nodes = self._scratch_arrays()
            landmarks = _NO_LANDMARKS + (0.0, 0.0)
            if goal_directed is not None:
                if not isinstance(self._pot, np.ndarray):
                    self._pot = np.empty(self.n_segments)
                landmarks = (self._lm_from.ravel(), self._lm_to.ravel(),
                             self._lm_from.shape[0], *goal_directed[:2], self._pot,
                             *goal_directed[2:])
            path = kernel(*graph, w, _WEIGHT_FLOOR, start, goal, dist, pred, reached,
                          self._stamp, keys, nodes, *landmarks, *lazy, True)
            if draw is not None and lazy[-1][0] >= 0:
                e, lazy[-1][0] = int(self._order[lazy[-1][0]]), -1
                score = (draw.score.values([e])[0] if isinstance(draw.score, SeededScores)
                         else draw.score[e])
                raise InvalidObservation(
                    f"segment {e}'s weight is not finite (loss mean {draw.mean[e]}, sd "
                    f"{draw.std[e]}, score {score})"
                )
        else:
            t0 = time.perf_counter()
            *graph, dist, pred, reached, keys, nodes = self._scratch_lists()
            landmarks = _NO_LANDMARKS + (0.0, 0.0)
            if goal_directed is not None:
                if not isinstance(self._pot, list):
                    self._pot = [0.0] * self.n_segments
                # landmark tables stay arrays: a query reads a few entries per node it reaches
                landmarks = (self._lm_from.ravel(), self._lm_to.ravel(),
                             self._lm_from.shape[0], goal_directed[0].tolist(),
                             goal_directed[1].tolist(), self._pot, *goal_directed[2:])
            path = _dijkstra.shortest_path(
                *graph, w.tolist(), _WEIGHT_FLOOR, start, goal, dist, pred, reached,
                self._stamp, keys, nodes, *landmarks, *_NO_LAZY, False,
            )
            _Kernel.interpreted_s += time.perf_counter() - t0
            if _Kernel.interpreted_s > COMPILE_AFTER_S:
                compiled_kernel()
        if path.size == 0:
            raise UnreachableError(f"no route from segment {self._order[start]} to segment "
                                   f"{self._order[goal]}")
        return self._order[path]

    def _check_draw(self, draw: LossDraw) -> None:
        """A lazy draw needs the router's bounds; its arrays are checked as the search reads
        them (a weight that is not finite raises), not all up front."""
        if self.lower is None:
            raise InvalidObservation(
                "a LossDraw is truncated at the router's lower bounds: route it with a "
                "goal-directed Router (Router(net, lower))"
            )
        n = self.n_segments
        score = (n,) if isinstance(draw.score, SeededScores) else np.shape(draw.score)
        if not draw.mean.shape == draw.std.shape == score == (n,):
            raise InvalidObservation(
                f"a LossDraw needs {n} means, sds and scores, got shapes {draw.mean.shape}, "
                f"{draw.std.shape}, {score}"
            )

    def _goal_direction(
        self, w: NDArray[np.float64] | None, start: int, goal: int
    ) -> tuple[NDArray[np.int64], NDArray[np.float64], float, float] | None:
        """The kernel's per-query landmark arguments (active landmarks, their costs to and from
        both ends, the potential at both ends), or ``None`` for a plain search. ``w`` ``None``:
        a lazy draw, at or above the bounds by construction."""
        if self.lower is None:
            return None
        if w is not None and not np.all(w >= self.lower):
            self.fallbacks += 1  # the potentials would not be consistent: plain search
            return None
        start, goal = self._rank[start], self._rank[goal]
        d_ls, d_sl = self._lm_from[:, start], self._lm_to[:, start]
        d_lg, d_gl = self._lm_from[:, goal], self._lm_to[:, goal]
        usable = np.isfinite(d_ls) & np.isfinite(d_sl) & np.isfinite(d_lg) & np.isfinite(d_gl)
        if not usable.any():
            return None
        with np.errstate(invalid="ignore"):  # inf − inf where not usable
            bound = np.maximum(d_lg - d_ls, d_sl - d_gl)
        bound = np.where(usable, bound, -np.inf)
        # the landmarks that bound this pair's cost best (the end potentials use the same ones,
        # so they equal what the kernel computes for any other node)
        active = np.argsort(-bound, kind="stable")[: min(ACTIVE_LANDMARKS, int(usable.sum()))]
        query = np.column_stack([d_ls[active], d_sl[active], d_lg[active], d_gl[active]])
        best = max(0.0, float(bound[active].max()))
        return active.astype(np.int64), query.ravel(), 0.5 * best, -0.5 * best

    def settled_count(self) -> int:
        """Segments the last :meth:`route` query settled, both sides together (a diagnostic:
        what a search strategy explores; O(segments) to count)."""
        settled = 2 * self._stamp + 1
        if self._arrays is not None and self._lists is None:
            return int(np.count_nonzero(self._arrays[2] == settled))
        if self._lists is not None:
            return self._lists[6].count(settled)
        return 0

    def tree(
        self, weights: ArrayLike, start: int, targets: ArrayLike, limit: float = np.inf
    ) -> tuple[list[NDArray[np.int64]], NDArray[np.float64]]:
        """Minimum-weight paths from ``start`` to each of ``targets`` in one search, which
        stops once they are all settled or its frontier costs more than ``limit`` (compiled;
        :func:`ev_nav.bandits._dijkstra.tree_paths`).

        Returns
        -------
        paths : list of ndarray of int64
            Each target's path (start and target included; empty where not reached).
        cost : ndarray of float64
            Each path's weight (the start's own weight not counted; ``inf`` where not reached).
        """
        w = self._check_weights(weights)
        start = self.check_segment(start, "start")
        tg = np.ascontiguousarray(targets, dtype=np.int64)
        if tg.size and (tg.min() < 0 or tg.max() >= self.n_segments):
            raise UnknownSegmentError(f"target ids must be in 0..{self.n_segments - 1}")
        dist, pred, reached, settled, heap_keys, heap_nodes = self._scratch_tree()
        self._next_stamp()
        flat, off, cost = _tree_kernel()(
            self._indptr, self._indices, w[self._order], _WEIGHT_FLOOR, int(self._rank[start]),
            self._rank[tg], float(limit), dist, pred, reached, settled, self._stamp, heap_keys,
            heap_nodes,
        )
        flat = self._order[flat]
        return [flat[off[i]:off[i + 1]] for i in range(tg.size)], cost

    def pareto(
        self,
        time_w: ArrayLike,
        energy_w: ArrayLike,
        start: int,
        targets: ArrayLike,
        energy_limit: float = np.inf,
        max_labels: int = 16,
    ) -> list[list[NDArray[np.int64]]]:
        """For each target, the paths from ``start`` that no other path beats in both summed
        ``time_w`` and summed ``energy_w`` (compiled bicriteria search,
        :func:`ev_nav.bandits._dijkstra.pareto_labels`; at most ``max_labels`` trade-offs a
        segment, none beyond ``energy_limit``), fastest first; empty where none is found."""
        tw = self._check_weights(time_w)
        ew = self._check_weights(energy_w)
        start = self.check_segment(start, "start")
        tg = np.asarray(targets, dtype=np.int64)
        if tg.size and (tg.min() < 0 or tg.max() >= self.n_segments):
            raise UnknownSegmentError(f"target ids must be in 0..{self.n_segments - 1}")
        n, k = self.n_segments, max(1, int(max_labels))
        node, t, _, parent, alive, n_lab = _pareto_kernel()(
            self._indptr, self._indices, tw[self._order], ew[self._order],
            int(self._rank[start]), float(energy_limit), k, np.zeros(n, dtype=np.int64),
            np.empty(n * k, dtype=np.int64),
        )
        node, t, parent, alive = self._order[node[:n_lab]], t[:n_lab], parent[:n_lab], alive[:n_lab]
        out = []
        for target in tg.tolist():
            labels = np.flatnonzero(alive & (node == target))
            paths = []
            for lab in labels[np.argsort(t[labels], kind="stable")].tolist():
                chain = []
                while lab >= 0:
                    chain.append(int(node[lab]))
                    lab = int(parent[lab])
                paths.append(np.asarray(chain[::-1], dtype=np.int64))
            out.append(paths)
        return out

    def route_between(
        self,
        weights: ArrayLike,
        origin: Sequence[tuple[int, float]],
        goal: Sequence[tuple[int, float]],
    ) -> PartialPath:
        """The least-weight route from a point on a segment to a point on a segment.

        ``origin`` and ``goal`` list candidate ``(segment, fraction)`` positions (both
        directions of a two-way street, :meth:`RoadNetwork.snap`); the route may use any of
        them. A partly driven segment costs its weight times the share driven, so only the part
        of the first and last segment between the two points counts. With fixed end segments the
        middle is an ordinary Dijkstra query; the candidates (at most 2 × 2) are compared on
        their full cost.

        Raises
        ------
        InvalidObservation
            The two points are the same place (nothing to drive).
        UnreachableError
            No candidate pair is connected.
        """
        with self._query(weights) as w:
            return self._route_between(w, origin, goal)

    def _route_between(
        self,
        w: NDArray[np.float64],
        origin: Sequence[tuple[int, float]],
        goal: Sequence[tuple[int, float]],
    ) -> PartialPath:
        if any(same_place(o, g) for o in origin for g in goal):
            # a trip request, not an observation: the API's error type says so
            raise RouteOptionError(SAME_PLACE)
        # a point at a junction lists the segments ending there (at 1) and those starting there
        # (at 0): a trip leaves it on the latter and arrives on the former (the others drive
        # none of their segment and would only repeat a search)
        origin = [o for o in origin if o[1] < 1.0 - _MIN_SHARE] or list(origin)
        goal = [g for g in goal if g[1] > _MIN_SHARE] or list(goal)
        best: PartialPath | None = None
        unreachable = None
        for s, fs in origin:
            for g, fg in goal:
                try:
                    cand = self._between(w, self.check_segment(s), float(fs),
                                         self.check_segment(g), float(fg))
                except UnreachableError as exc:
                    unreachable = exc
                    continue
                if best is None or cand.cost < best.cost - 1e-12:
                    best = cand
        if best is None:
            assert unreachable is not None  # every pair was searched: none is connected
            raise unreachable
        return best

    def route_through(
        self, weights: ArrayLike, stops: Sequence[Sequence[tuple[int, float]]]
    ) -> PartialPath:
        """The least-weight route through points in order (origin, via points, goal).

        Each stop lists its candidate ``(segment, fraction)`` positions as for
        :meth:`route_between` (either direction of a two-way street). A route passes a via
        point in one direction and leaves it the way it came (no U-turn there); which direction
        is chosen jointly for the whole route by dynamic programming over the stops' candidates
        (at most 2 × 2 searches per leg). Legs are joined into one route: the segment a via
        point lies on appears once, driven whole.
        """
        if len(stops) < 2:
            raise InvalidObservation("a route needs an origin and a goal")
        with self._query(weights) as w:
            return self._route_through(w, stops)

    def _route_through(
        self, w: NDArray[np.float64], stops: Sequence[Sequence[tuple[int, float]]]
    ) -> PartialPath:
        # best[c]: (cost, legs) of the cheapest route from the origin to candidate c of a stop
        best: dict[tuple[int, float], tuple[float, list[PartialPath]]] = {
            (int(e), float(f)): (0.0, []) for e, f in stops[0]
        }
        for k, stop in enumerate(stops[1:], start=1):
            # a stop that snaps where the previous one did is the same place on the roads: its
            # other driving direction made a leg of it (a U-turn loop) instead of this error
            # (an origin on the goal, with no stop between, is route_between's own error)
            here = {(int(e), float(f)) for e, f in stop}
            if len(stops) > 2 and here & {(int(e), float(f)) for e, f in stops[k - 1]}:
                names = ["the origin", *(f"via point {i}" for i in range(1, len(stops) - 1)),
                         "the goal"]
                raise RouteOptionError(
                    "two consecutive stops of the route are the same place on the roads "
                    f"({names[k - 1]} and {names[k]})"
                )
            nxt: dict[tuple[int, float], tuple[float, list[PartialPath]]] = {}
            unreachable = None
            for d in stop:
                d = (int(d[0]), float(d[1]))
                for c, (cost, legs) in best.items():
                    try:
                        leg = self._route_between(w, [c], [d])
                    except UnreachableError as exc:
                        unreachable = exc
                        continue
                    except RouteOptionError:
                        # the same place: an origin on the goal, or two equal stops in a row
                        if k == len(stops) - 1 and not legs:
                            raise
                        continue
                    if d not in nxt or cost + leg.cost < nxt[d][0] - 1e-12:
                        nxt[d] = (cost + leg.cost, [*legs, leg])
            if not nxt:
                if unreachable is not None:
                    raise unreachable
                raise RouteOptionError("two consecutive stops of the route are the same place")
            best = nxt
        cost, legs = min(best.values(), key=lambda v: v[0])
        segs = [legs[0].segments]
        for prev, leg in zip(legs[:-1], legs[1:], strict=True):
            # the leg leaves the via point on the segment the previous one reached it on, unless
            # the point was at that segment's very end (the leg then starts on the next one)
            joined = leg.segments[0] == prev.segments[-1] and leg.start_fraction == (
                prev.end_fraction
            )
            segs.append(leg.segments[1:] if joined else leg.segments)
        return PartialPath(
            np.concatenate(segs), legs[0].start_fraction, legs[-1].end_fraction, float(cost)
        )

    def _between(
        self, w: NDArray[np.float64], s: int, fs: float, g: int, fg: float
    ) -> PartialPath:
        """One candidate pair of :meth:`route_between` (the two points are not the same)."""
        if s == g and fg >= fs:
            path = np.array([s], dtype=np.int64)
        elif s == g:
            # the goal lies behind the start on the same segment: leave it and come back
            i = self._rank[s]
            succ = self._order[self._indices[self._indptr[i] : self._indptr[i + 1]]]
            loops = []
            for n in succ:
                try:
                    loops.append(np.concatenate([[s], self.route(w, int(n), s)]))
                except UnreachableError:
                    continue
            if not loops:
                raise UnreachableError(f"no way back to segment {s} once it is left")
            path = min(loops, key=lambda p: float(w[p].sum()))
        else:
            path = self.route(w, s, g)
        # a point at the very end of its first segment (or the start of its last) drives none
        # of it: drop that segment so every listed segment is really driven
        if path.size > 1 and 1.0 - fs < _MIN_SHARE:
            path, fs = path[1:], 0.0
        if path.size > 1 and fg < _MIN_SHARE:
            path, fg = path[:-1], 1.0
        shares = driven_shares(path.size, fs, fg)
        return PartialPath(path, fs, fg, float(shares @ w[path]))


@dataclass(frozen=True)
class PartialPath:
    """A route between two points that lie part-way along their segments.

    Attributes
    ----------
    segments : ndarray of int64
        Segments driven, in order (a segment may appear twice when the goal lies behind the
        start on the same one-way segment).
    start_fraction : float
        Where along the first segment the route starts (0 = its start node, 1 = its end).
    end_fraction : float
        Where along the last segment it ends.
    cost : float
        Its weight: each segment's weight times the share of it driven.
    """

    segments: NDArray[np.int64]
    start_fraction: float
    end_fraction: float
    cost: float

    @property
    def shares(self) -> NDArray[np.float64]:
        """The share of each listed segment driven (1 but at the two ends)."""
        return driven_shares(self.segments.size, self.start_fraction, self.end_fraction)


class Oracle:
    """Exact optimal paths for true energies that may be negative (regeneration).

    Johnson's reweighting: Bellman–Ford once from a virtual source gives potentials ``h`` with
    ``w[e2] + h[e1] − h[e2] ≥ 0`` on every connection; each query is then one Dijkstra.

    Raises
    ------
    NegativeCycleError
        When the energies admit a cycle of negative total energy (optimum undefined).
    """

    def __init__(
        self, net: RoadNetwork, energies: ArrayLike, node_potential: ArrayLike | None = None
    ) -> None:
        f = np.asarray(energies, dtype=np.float64)
        if f.shape != (net.n_segments,) or not np.isfinite(f).all():
            raise InvalidObservation("true energies must be finite, one per segment")
        self.energies = f
        n = net.n_segments
        # the legal transitions (turn restrictions obeyed), as the agent's Router routes: an
        # optimum the agent may not drive would make regret negative
        indptr, indices = net.routing_graph()
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        dst = np.asarray(indices, dtype=np.int64)
        if node_potential is not None:
            # A known feasible potential (the physical Φ for energies ΔΦ + c with c >= 0): the
            # segment potential is Φ at the segment's head, and no Bellman–Ford is needed.
            self.potential = np.asarray(node_potential, dtype=np.float64)[net.seg_v]
            if (f[dst] + self.potential[src] - self.potential[dst]).min() < -1e-6:
                raise NegativeCycleError("the given potential does not make the energies >= 0")
        else:
            # virtual node n → every segment e with weight f[e]
            rows = np.concatenate([src, np.full(n, n)])
            cols = np.concatenate([dst, np.arange(n)])
            data = np.concatenate([f[dst], f])
            aug = sp.csr_matrix((data, (rows, cols)), shape=(n + 1, n + 1))
            try:
                h = bellman_ford(aug, directed=True, indices=n)
            except _ScipyNegativeCycle:
                raise NegativeCycleError(
                    "the energies contain a cycle with negative total energy"
                ) from None
            self.potential = h[:n]
        reweighted = f[dst] + self.potential[src] - self.potential[dst]
        # tiny negative values are round-off; clip to keep Dijkstra valid
        reweighted = np.maximum(reweighted, 0.0) + _WEIGHT_FLOOR
        self._matrix = sp.csr_matrix(
            (reweighted, dst.astype(np.int32), np.asarray(indptr, dtype=np.int32)),
            shape=(n, n),
        )
        self._cache: dict[int, tuple[NDArray[np.float64], NDArray[np.int32]]] = {}

    def _sssp(self, start: int) -> tuple[NDArray[np.float64], NDArray[np.int32]]:
        if start not in self._cache:
            if len(self._cache) > 64:
                self._cache.clear()
            self._cache[start] = dijkstra(
                self._matrix, directed=True, indices=start, return_predecessors=True
            )
        return self._cache[start]

    def optimal(self, start: int, goal: int) -> tuple[NDArray[np.int64], float]:
        """The energy-optimal path and its true energy [Wh] (start and goal included)."""
        if start == goal:
            return np.array([start], dtype=np.int64), float(self.energies[start])
        dist, pred = self._sssp(start)
        if not np.isfinite(dist[goal]):
            raise UnreachableError(f"no route from segment {start} to segment {goal}")
        path = _path_from_predecessors(pred, start, goal)
        return path, float(self.energies[path].sum())

    def path_energy(self, path: ArrayLike) -> float:
        """True energy of a path [Wh]."""
        return float(self.energies[np.asarray(path, dtype=np.int64)].sum())
