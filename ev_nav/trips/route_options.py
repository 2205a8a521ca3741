"""A driver's route options: via points, road kinds to avoid, and a price on time.

:class:`RouteOptions` validates them; :class:`ConstrainedRouter` routes any per-segment weights
origin → via 1 → … → goal as concatenated legs that use no avoided segment. Planning
(:func:`ev_nav.trips.planning.plan_trip`) routes every route it shows through one
:class:`ConstrainedRouter`, so the plan and its alternatives obey the same constraints.

Road kinds (:data:`ROAD_KINDS`): ``motorway`` comes from the highway class every network has;
``toll``, ``unpaved`` and ``ferry`` from OSM way tags a network built from OSM records
(:data:`ev_nav.roads.network.ROAD_FLAGS`). Avoiding toll or unpaved on a network that records no
tags for them is an error (the constraint could not be honoured; a rebuild from OSM adds them); a
tagged kind no segment has is a notice (:func:`nothing_to_avoid`), and the kind is not reported
as avoided. No network holds ferries: ferry ways are not drivable roads, so ``network build``
leaves them out, and ``ferry`` is that notice on every network, tagged or not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import RouteOptionError, UnreachableError

if TYPE_CHECKING:
    from ev_nav.bandits.routing import PartialPath, Router
    from ev_nav.roads.network import RoadNetwork

__all__ = [
    "MAX_TIME_WEIGHT",
    "MAX_VIA",
    "ROAD_KINDS",
    "ConstrainedRouter",
    "RouteOptions",
    "avoided_segments",
    "nothing_to_avoid",
]

#: Road kinds that can be avoided, with what marks them.
ROAD_KINDS: dict[str, str] = {
    "motorway": "highway=motorway or motorway_link",
    "toll": "toll=yes",
    "unpaved": "an unsealed surface (unpaved, gravel, dirt, …)",
    "ferry": "route=ferry",
}

#: Most via points one trip may have (each is one more routing query).
MAX_VIA = 25

#: Highest price of time [Wh per minute]. Far above any car's consumption (a few hundred Wh per
#: minute), so time already outweighs energy and the plan is the fastest route; a larger price
#: changes nothing but would overflow λ · minutes to inf in the route search's weights.
MAX_TIME_WEIGHT = 1e9

_MOTORWAY_CLASSES = ("motorway", "motorway_link")


def parse_kinds(values: Iterable[str]) -> tuple[str, ...]:
    """Road kind names, comma-separated or one per item, as a de-duplicated tuple in
    :data:`ROAD_KINDS` order.

    Raises
    ------
    RouteOptionError
        For a name that is not a road kind (the message lists the valid ones).
    """
    if isinstance(values, str):  # one name (or a comma list), not its characters
        values = [values]
    names = {n.strip().lower() for v in values for n in str(v).split(",") if n.strip()}
    unknown = sorted(names - ROAD_KINDS.keys())
    if unknown:
        raise RouteOptionError(
            f"unknown road kind(s) to avoid: {', '.join(unknown)}; choose from "
            f"{', '.join(ROAD_KINDS)}"
        )
    return tuple(k for k in ROAD_KINDS if k in names)


@dataclass(frozen=True)
class RouteOptions:
    """Validated route options.

    Attributes
    ----------
    via : tuple of (lat, lon)
        Points [deg] the route passes, in order (at most :data:`MAX_VIA`).
    avoid : tuple of str
        Road kinds (:data:`ROAD_KINDS`) the route must not use; names may be given in any case
        and order, comma-separated; stored de-duplicated in :data:`ROAD_KINDS` order.
    time_weight : float
        λ [Wh per minute], 0 ≤ λ ≤ :data:`MAX_TIME_WEIGHT`: the plan minimises predicted
        energy + λ · travel time (0: energy only). It prices time in energy: λ = 10 takes a
        route 1 min faster if it costs less than 10 Wh more.
    """

    via: tuple[tuple[float, float], ...] = ()
    avoid: tuple[str, ...] = ()
    time_weight: float = 0.0

    def __post_init__(self) -> None:
        via = tuple(self.via)
        if len(via) > MAX_VIA:
            raise RouteOptionError(f"{len(via)} via points; at most {MAX_VIA} are allowed")
        points = []
        for k, point in enumerate(via, 1):
            try:
                lat, lon = (float(x) for x in point)
            except (TypeError, ValueError):
                raise RouteOptionError(
                    f"via point {k} must be (lat, lon) in degrees, got {point!r}"
                ) from None
            if not (math.isfinite(lat) and math.isfinite(lon)) or abs(lat) > 90 or abs(lon) > 180:
                raise RouteOptionError(f"via point {k} has invalid coordinates ({lat}, {lon})")
            points.append((lat, lon))
        object.__setattr__(self, "via", tuple(points))
        object.__setattr__(self, "avoid", parse_kinds(self.avoid))
        try:
            weight = float(self.time_weight)
        except (TypeError, ValueError):
            raise RouteOptionError(
                f"time weight must be a number of Wh per minute, got {self.time_weight!r}"
            ) from None
        if not (math.isfinite(weight) and weight >= 0):
            raise RouteOptionError(
                f"time weight must be a finite number of Wh per minute >= 0, got {weight}"
            )
        if weight > MAX_TIME_WEIGHT:
            raise RouteOptionError(
                f"time weight {weight:g} Wh/min is too large: at most {MAX_TIME_WEIGHT:g} "
                "Wh/min (time then outweighs any energy: the plan is the fastest route)"
            )
        object.__setattr__(self, "time_weight", weight)

    @property
    def is_default(self) -> bool:
        """No via point, nothing avoided, no price on time."""
        return not self.via and not self.avoid and self.time_weight == 0.0

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: ``via`` [[lat, lon], …], ``avoid``, ``time_weight_wh_per_min``."""
        return {
            "via": [list(p) for p in self.via],
            "avoid": list(self.avoid),
            "time_weight_wh_per_min": self.time_weight,
        }


def avoided_segments(
    net: RoadNetwork, kinds: Sequence[str]
) -> tuple[NDArray[np.bool_], list[str]]:
    """Segments of any of ``kinds``, and a notice per kind that no segment has.

    Raises
    ------
    RouteOptionError
        Toll or unpaved on a network that records no tags for them (the synthetic town, or a
        network file written before ev-nav recorded toll, surface and ferry tags).
    """
    mask, absent = _avoided(net, kinds)
    return mask, [nothing_to_avoid(net, kind) for kind in absent]


def _avoided(net: RoadNetwork, kinds: Sequence[str]) -> tuple[NDArray[np.bool_], tuple[str, ...]]:
    """Segments of any of ``kinds``, and the kinds no segment has."""
    mask = np.zeros(net.n_segments, dtype=bool)
    absent: list[str] = []
    for kind in parse_kinds(kinds):
        of_kind = _of_kind(net, kind)
        if not of_kind.any():
            absent.append(kind)
        mask |= of_kind
    return mask, tuple(absent)


def nothing_to_avoid(net: RoadNetwork, kind: str) -> str:
    """The one-line notice for an avoided ``kind`` no segment of ``net`` has."""
    if kind == "ferry":
        # ferry ways carry no drivable highway class, so `network build` leaves them out: the
        # driver must not think a crossing was steered round
        return (
            f"{net.name} has no ferries to avoid (ev-nav loads drivable roads only, not ferry "
            "crossings), so avoiding ferry changes no route"
        )
    return f"no segment of {net.name} is tagged {kind} ({ROAD_KINDS[kind]}); nothing to avoid"


def _of_kind(net: RoadNetwork, kind: str) -> NDArray[np.bool_]:
    if kind == "motorway":
        classes = [i for i, c in enumerate(net.highway_classes) if c in _MOTORWAY_CLASSES]
        return np.isin(net.highway, classes)
    flagged = net.flagged(kind)
    if flagged is None and kind == "ferry":
        # no network has ferries, tags or not (ferry ways are never loaded): the notice, not
        # an error advising a rebuild that would add none
        return np.zeros(net.n_segments, dtype=bool)
    if flagged is None:
        raise RouteOptionError(
            f"network {net.name} records no {kind} tags ({ROAD_KINDS[kind]}): it is the "
            "synthetic town or was built before ev-nav kept them, so avoiding "
            f"{kind} cannot be honoured; rebuild it from OSM ('ev-nav network build') "
            f"or do not avoid {kind}"
        )
    return flagged


class ConstrainedRouter:
    """Routes per-segment weights through the stops of one trip, avoiding segments.

    Parameters
    ----------
    net : RoadNetwork
        The network.
    router : Router
        Its Dijkstra router (:class:`ev_nav.bandits.routing.Router`).
    stops : sequence of candidate lists
        The points the route visits in order (the origin, the via points, the goal), each as
        the ``(segment, fraction)`` candidates of :meth:`RoadNetwork.snap`.
    options : RouteOptions
        What to avoid and the price of time.

    Raises
    ------
    RouteOptionError
        Toll or unpaved on a network with no tags for them; a stop on an avoided road.

    Attributes
    ----------
    absent_kinds : tuple of str
        The avoided kinds no segment has (nothing was avoided for them).
    notices : list of str
        One line per kind of ``absent_kinds`` (:func:`nothing_to_avoid`).
    """

    def __init__(
        self,
        net: RoadNetwork,
        router: Router,
        stops: Sequence[Sequence[tuple[int, float]]],
        options: RouteOptions,
    ) -> None:
        self._net = net
        self._router = router
        self.options = options
        self._avoided, self.absent_kinds = _avoided(net, options.avoid)
        self.notices = [nothing_to_avoid(net, kind) for kind in self.absent_kinds]
        names = ["the origin", *(f"via point {k}" for k in range(1, len(stops) - 1)), "the goal"]
        self.stops: list[list[tuple[int, float]]] = []
        for name, cands in zip(names, stops, strict=True):
            kept = [(int(e), float(f)) for e, f in cands if not self._avoided[int(e)]]
            if not kept:
                seg = int(cands[0][0])
                kinds = [k for k in options.avoid if _of_kind(net, k)[seg]]
                raise RouteOptionError(
                    f"{name} snaps to segment {seg}, a {'/'.join(kinds)} road, which is "
                    "avoided; move the point beside another road"
                )
            self.stops.append(kept)
        # λ [Wh/min] · t [min] per segment. The energy weights it is added to are rectified
        # reduced costs (ev_nav.bandits.indices.rectified_weights): ≥ 0, and a route's energy is
        # Φ(goal) − Φ(origin) plus their sum. The time term is ≥ 0 too, so the sum stays a valid
        # Dijkstra weight, and as the Φ term is fixed by the endpoints (over legs it telescopes
        # through the via points), minimising it minimises predicted energy + λ · time.
        self._time_term = (
            options.time_weight * net.travel_time_s / 60.0 if options.time_weight > 0 else None
        )

    def via_segments(self, route: ArrayLike) -> tuple[int, ...]:
        """The segment of each via point that ``route`` (segment ids, in driving order) drives.

        A via point on a two-way street has a candidate segment per direction; naming the
        snap's preferred one named a segment the route may never drive. Each via point is
        looked for after the previous one, as the route visits them in order.
        """
        seg = np.asarray(route, dtype=np.int64)
        found, start = [], 0
        for cands in self.stops[1:-1]:
            ids = np.array([e for e, _ in cands], dtype=np.int64)
            hits = start + np.flatnonzero(np.isin(seg[start:], ids))
            if hits.size == 0:  # not a route through the stops (the caller's slip)
                raise ValueError("the route does not pass the via points it was planned through")
            start = int(hits[0])
            found.append(int(seg[start]))
        return tuple(found)

    def route(self, weights: ArrayLike) -> PartialPath:
        """The least-``weights`` route through the stops using no avoided segment (its legs
        joined, from the origin point to the goal point).

        Raises
        ------
        UnreachableError
            When the stops cannot be connected without an avoided kind (the message names them).
        """
        w = np.asarray(weights, dtype=np.float64)
        if self._avoided.any():
            # An avoided segment costs more than any route without one (the sum of all weights
            # bounds every simple path), so Dijkstra uses one only where nothing else connects:
            # the search is the same as with the segments removed, and such a route is refused.
            penalty = 2.0 * (float(w.sum()) + w.shape[0]) + 1.0
            w = np.where(self._avoided, w + penalty, w)
        path = self._router.route_through(w, self.stops)
        if self._avoided[path.segments].any():
            # the kinds the least-avoiding route still needs: the ones worth naming
            needed = ", ".join(
                k for k in self.options.avoid if _of_kind(self._net, k)[path.segments].any()
            )
            via = " through the via points" if len(self.stops) > 2 else ""
            raise UnreachableError(
                f"no route from the origin to the goal{via} avoids {needed}; stop avoiding "
                f"{needed} or move the points"
            )
        if self._avoided.any():  # its cost with the true weights, not the penalised ones
            path = replace(path, cost=float(path.shares @ np.asarray(weights)[path.segments]))
        return path

    def route_energy(self, weights: ArrayLike) -> PartialPath:
        """:meth:`route` on energy weights plus the time term λ · t (the plan's objective)."""
        if self._time_term is None:
            return self.route(weights)
        return self.route(np.asarray(weights, dtype=np.float64) + self._time_term)
