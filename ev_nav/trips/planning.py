"""Planning a trip on an open state: snap, choose, record, and write the trip's map files.

The planned route is regeneration-aware: the index is rectified in reduced-cost space
(:mod:`ev_nav.potential`), so a descent counts with the regeneration physics guarantees. It is
shown next to the shortest and the fastest route, each with the model's predicted energy.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ev_nav.errors import (
    ConfigError,
    OutsideNetworkError,
    StateError,
    StateIOError,
    require_seed,
)
from ev_nav.roads.partial import route_coordinates
from ev_nav.trips.route_options import ConstrainedRouter, RouteOptions, parse_kinds

if TYPE_CHECKING:
    from ev_nav.bandits.agent import Route
    from ev_nav.bandits.routing import Router
    from ev_nav.energy import Vehicle
    from ev_nav.gp.posterior import SegmentPosterior
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.trips.charging import ChargingPlan
    from ev_nav.trips.session import Session

__all__ = ["PlannedTrip", "maps_dir", "plan_trip", "write_charging_map", "write_trip_files"]


class _PlanningCache(threading.local):
    """Per thread: the Router of the network last planned on, and the deterministic weights
    (best guess, safe) of the posterior last planned on.

    A server's request threads plan many trips on one snapshot: the Router's reversed graph
    and scratch arrays, and the rules' weights over every segment (milliseconds each on a
    town), are made once per thread and snapshot instead of once per request. The entries
    hold what they were made from and are used only for those very objects.
    """

    def __init__(self) -> None:
        self.router: tuple[RoadNetwork, Router] | None = None
        self.weights: dict[str, tuple[SegmentPosterior, np.ndarray, np.ndarray]] = {}
        self.dphi: tuple[RoadNetwork, Vehicle, np.ndarray] | None = None


_CACHE = _PlanningCache()


def _router(net: RoadNetwork) -> Router:
    from ev_nav.bandits.routing import Router

    held = _CACHE.router
    if held is None or held[0] is not net:
        held = _CACHE.router = (net, Router(net))
    return held[1]


def _potential_change(net: RoadNetwork, vehicle: Vehicle) -> np.ndarray:
    """``ΔΦ`` per segment [Wh] (:func:`ev_nav.potential.potential_change`), made once per
    thread for the network and vehicle last planned for (a fraction of a millisecond per
    request for a server, whose network and vehicle never change)."""
    from ev_nav.potential import potential_change

    held = _CACHE.dphi
    if held is None or held[0] is not net or held[1] != vehicle:
        dphi = potential_change(net, vehicle)
        dphi.setflags(write=False)
        held = _CACHE.dphi = (net, vehicle, dphi)
    return held[2]


def _fixed_weights(rule: str, post: SegmentPosterior, dphi: np.ndarray) -> np.ndarray:
    """The weights of a deterministic rule (``mean``, ``safe``) on ``post``, made once per
    posterior and thread (they do not depend on the trip)."""
    from ev_nav.bandits.indices import make_index, rectified_weights

    held = _CACHE.weights.get(rule)
    if held is not None and held[0] is post and np.array_equal(held[1], dphi):
        return held[2]
    weights = rectified_weights(make_index(rule), post, 1, np.random.default_rng(0), dphi)
    weights.setflags(write=False)
    _CACHE.weights[rule] = (post, dphi, weights)
    return weights


@dataclass(frozen=True)
class PlannedTrip:
    """A recorded trip and the routes it was chosen among.

    Attributes
    ----------
    trip_id : int
        The trip's id in the state (give it to ``observe``); for a dry run the id the trip would
        get, nothing being recorded.
    start_segment, goal_segment : int
        The road segments origin and destination snapped to.
    policy : str
        Index rule of the planned route.
    seed : int
        Seed of the Thompson draw (the trip id unless given).
    routes : dict of str to Route
        ``planned``, ``best guess`` (the greedy ``mean`` route, so a driver sees what exploring
        costs; absent when the policy is ``mean``), ``shortest`` and ``fastest``, each with km,
        minutes and predicted Wh ± sd; all through the via points, avoiding the avoided kinds.
    options : RouteOptions
        The via points, avoided road kinds and time weight the routes were planned with.
    via_segments : tuple of int
        The segment of each via point that the planned route drives (on a two-way street, the
        direction it drives).
    notices : tuple of str
        One line per avoided kind no segment of the network has (nothing to avoid).
    absent_kinds : tuple of str
        Those kinds (``options.avoid`` echoes the request; these were not avoided, there being
        none of them).
    """

    trip_id: int
    start_segment: int
    goal_segment: int
    policy: str
    seed: int
    routes: dict[str, Route]
    recorded: bool = True
    options: RouteOptions = RouteOptions()
    via_segments: tuple[int, ...] = ()
    notices: tuple[str, ...] = ()
    absent_kinds: tuple[str, ...] = ()
    #: per route, what the car's predicted energy exceeds the state vehicle's by [Wh], for a
    #: trip planned for another car (``plan_trip(car=...)``); empty otherwise
    car_shift_wh: dict[str, float] = field(default_factory=dict)
    #: that car (None: the state's vehicle)
    car: Vehicle | None = None

    @property
    def exploring_cost(self) -> tuple[float, float] | None:
        """Predicted extra energy [Wh] and time [s] of the planned route over the best guess
        (``None`` when the planned route is the best guess), as the state vehicle's
        predictions give it (another car's: :meth:`car_routes`)."""
        guess = self.routes.get("best guess")
        if guess is None:
            return None
        p = self.routes["planned"]
        return p.predicted_wh - guess.predicted_wh, p.time_s - guess.time_s

    def car_routes(self) -> dict[str, Route]:
        """The routes with the predicted energies of the car that drives the trip (the state
        vehicle's, moved by :attr:`car_shift_wh`): what its driver is shown."""
        return {n: replace(r, predicted_wh=r.predicted_wh + self.car_shift_wh.get(n, 0.0))
                for n, r in self.routes.items()}

    def to_dict(self, net: RoadNetwork | None = None) -> dict[str, object]:
        """JSON-ready summary (what ``ev-nav route --json`` prints).

        Given the network the trip was planned on, each route also carries ``coordinates``:
        its polyline as [lon, lat, elevation m] rows (:func:`route_coordinates`; [lon, lat]
        when the network has no elevation).
        """
        extra = self.exploring_cost
        doc: dict[str, object] = {
            "trip": self.trip_id,
            "recorded": self.recorded,
            "start_segment": self.start_segment,
            "goal_segment": self.goal_segment,
            "policy": self.policy,
            "seed": self.seed,
            "routes": {
                name: {
                    "km": round(r.length_m / 1000, 3),
                    "minutes": round(r.time_s / 60, 2),
                    "predicted_wh": round(r.predicted_wh, 1),
                    "predicted_sd_wh": round(r.predicted_sd_wh, 1),
                    "segments": r.segments.tolist(),
                    "start_fraction": round(r.start_fraction, 6),
                    "end_fraction": round(r.end_fraction, 6),
                }
                for name, r in self.routes.items()
            },
            "exploring_extra_wh": None if extra is None else round(extra[0], 1),
            "exploring_extra_minutes": None if extra is None else round(extra[1] / 60, 2),
            **self.options.to_dict(),
            "via_segments": list(self.via_segments),
            "notices": list(self.notices),
        }
        if net is not None:
            routes = doc["routes"]
            assert isinstance(routes, dict)
            # the rows shown often coincide (an exploring plan that is the best guess, the
            # shortest that is the fastest): each distinct route's polyline is made once
            made: dict[tuple[bytes, float, float], list[list[float]]] = {}
            for name, r in self.routes.items():
                key = (np.asarray(r.segments, dtype=np.int64).tobytes(), r.start_fraction,
                       r.end_fraction)
                if key not in made:
                    made[key] = route_coordinates(
                        net, r.segments, r.start_fraction, r.end_fraction
                    ).tolist()
                routes[name]["coordinates"] = list(made[key])
        return doc


def maps_dir(state: Path) -> Path:
    """``STATE/maps``, created if missing; a clear error if it cannot hold maps."""
    maps = Path(state) / "maps"
    if maps.exists() and not maps.is_dir():
        raise StateError(
            f"{maps} exists but is not a folder, so trip maps cannot be written there; move that "
            "file elsewhere (it is not part of the state's data) and retry"
        )
    try:
        maps.mkdir(exist_ok=True)
    except OSError as exc:
        raise StateIOError(f"cannot create {maps} ({exc}); nothing was recorded") from None
    return maps


def _lat_lon(name: str, point: object) -> tuple[float, float]:
    """``point`` as (lat, lon) floats; anything else is the caller's :class:`OutsideNetworkError`
    (as a coordinate off the Earth is), not Python's unpacking error."""
    try:
        if isinstance(point, str | bytes):  # "47,8" is not a pair (and "47" would read as 4, 7)
            raise TypeError
        lat, lon = (float(x) for x in point)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise OutsideNetworkError(f"{name} must be (lat, lon) in degrees, got {point!r}") from None
    return lat, lon


def _check_arguments(seed: object, max_snap_m: object) -> None:
    """A Thompson seed and a snap distance the planner can use (the CLI and the server check
    theirs at parsing; from Python a bad one would fail deep in NumPy or mean no limit)."""
    if seed is not None:
        require_seed(seed)
    try:
        snap = float(max_snap_m)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        snap = math.nan
    if not (math.isfinite(snap) and snap > 0):
        raise ConfigError(f"max_snap_m must be a finite distance > 0 [m], got {max_snap_m!r}")


def plan_trip(
    session: Session,
    origin: tuple[float, float],
    goal: tuple[float, float],
    *,
    policy: str = "ts",
    seed: int | None = None,
    max_snap_m: float = 500.0,
    with_safe: bool = False,
    extra: dict[str, object] | None = None,
    record: bool = True,
    via: Sequence[tuple[float, float]] = (),
    avoid: Sequence[str] = (),
    time_weight: float = 0.0,
    alternatives: bool = True,
    car: Vehicle | None = None,
) -> PlannedTrip:
    """Snap ``origin``, ``via`` and ``goal`` (lat, lon [deg]) to roads, plan, and record the trip.

    The trip id is reserved inside the store's write transaction and the Thompson seed derived
    from it (unless ``seed`` is given), so concurrent planners never share a seed. Only what
    depends on the id (the planned route and its prediction) is computed inside that
    transaction; the alternatives are routed and predicted before it, so concurrent planners
    and observers (the server's vehicles) wait as little as possible for the store's write lock.

    The ``best guess`` shown beside an exploring plan is the route of least predicted energy
    among those planned (greedy on the posterior mean, and every other route shown), so no row
    shows less predicted energy than it. With ``record=False`` (a dry run) nothing is written:
    the trip is planned with the id it would get and the seed derived from it.

    With ``with_safe`` the ``safe`` route (least upper-quantile energy,
    :class:`~ev_nav.bandits.indices.SafeIndex`) is shown too. ``extra`` (JSON-ready) is stored
    with the trip (the server records the requesting vehicle's name there). With
    ``alternatives=False`` only the planned route is routed and described (no best guess, safe,
    shortest or fastest row): what a vehicle that drives the plan needs, for one route search
    and prediction instead of three or four. The planned route and the recorded trip are the same.

    Route options (:class:`~ev_nav.trips.route_options.RouteOptions`), obeyed by the plan and
    every alternative: ``via`` points the route passes in order (legs concatenated), ``avoid``
    road kinds (``motorway``, ``toll``, ``unpaved``, ``ferry``; one kind may be a string), and
    ``time_weight`` λ [Wh per minute]: the plan (and best guess, safe) minimise energy + λ ·
    time.

    ``car``: another car than the state's vehicle drives the trip (``--vehicle-model``). Its
    energies are the learned ones moved by the cars' E_det difference
    (:func:`~ev_nav.trips.battery.e_det_shift`) and its losses are counted against its own
    potential, so the plan, best guess and safe route are chosen for that car and the best guess
    is the least of the car's predicted energies shown (:attr:`PlannedTrip.car_shift_wh`). The
    routes' predictions stay the state vehicle's, as the trip is recorded.

    Raises
    ------
    OutsideNetworkError
        A point is further than ``max_snap_m`` from every road, or is not a (lat, lon) pair.
    RouteOptionError
        Origin and goal are the same place on the road (two places on one segment are a
        one-segment route); invalid options, an avoided kind the network has no tags for, a
        point on an avoided road.
    UnreachableError
        The points cannot be connected without an avoided kind.
    ConfigError
        A ``seed`` outside 0..2^63-1, a ``max_snap_m`` that is not a finite distance > 0 [m],
        an unknown ``policy``.
    """
    from ev_nav.trips.session import require_session

    require_session(session, "plan_trip")
    from ev_nav.bandits.agent import describe_route
    from ev_nav.bandits.indices import make_index, rectified_weights
    from ev_nav.store import TripPlan

    _check_arguments(seed, max_snap_m)
    origin, goal = _lat_lon("origin", origin), _lat_lon("goal", goal)
    # parse_kinds takes one kind as a string too (tuple() would split it into letters)
    options = RouteOptions(tuple(via), parse_kinds(avoid), time_weight)
    net, model, store = session.net, session.model, session.store
    # the exact points on the road: a route starts and ends there, driving only the part of
    # its first and last segment between them, in either direction of a two-way street (via
    # points likewise)
    stops = [
        net.snap(lon, lat, max_snap_m).candidates for lat, lon in (origin, *options.via, goal)
    ]
    maps_dir(session.state_dir)  # checked before anything is recorded
    rule = make_index(policy)
    router = ConstrainedRouter(net, _router(net), stops, options)
    if not options.is_default:  # stored with the trip: what it was planned under
        extra = {**(extra or {}), "route_options": options.to_dict()}
    post = model.posterior()
    dphi = _potential_change(net, session.vehicle)
    shift = None
    if car is not None and car != session.vehicle:
        from ev_nav.trips.battery import e_det_shift, route_shift_wh

        shift = e_det_shift(net, car, session.vehicle)
        # the car's expected energies (the correlations and draws are the learned ones: the
        # shift is known, the roads are not) and its own potential
        post = replace(post, mean=post.mean + shift)
        dphi = _potential_change(net, car)

    def moved(r: Route) -> float:
        """What the car's prediction of ``r`` exceeds the state vehicle's by [Wh]."""
        return 0.0 if shift is None else route_shift_wh(shift, r.segments, r.shares)
    # the routes that do not depend on the trip id, described before the write transaction:
    # the best current guess (greedy on the posterior mean, regeneration-aware like the plan),
    # shown beside an exploring plan so the driver sees what exploring costs; the safe route;
    # the shortest and the fastest
    fixed: dict[str, Route] = {}
    if alternatives and policy != "mean":
        # greedy: each segment's expected loss (energy less its potential change) under the
        # posterior of physically possible losses (the "mean" rule); the best guess row is
        # then the least predicted cost of all routes shown (see plan() below)
        greedy = _fixed_weights("mean", post, dphi)
        fixed["best guess"] = describe_route(net, router.route_energy(greedy), model, "mean")
    if alternatives and with_safe and policy != "safe":
        careful = _fixed_weights("safe", post, dphi)
        fixed["safe"] = describe_route(net, router.route_energy(careful), model, "safe")
    if alternatives:
        fixed["shortest"] = describe_route(net, router.route(net.length_m), model, "shortest")
        fixed["fastest"] = describe_route(net, router.route(net.travel_time_s), model, "fastest")
    routes: dict[str, Route] = {}
    used_seed: list[int] = []
    via_driven: list[int] = []

    def plan(trip_id: int) -> TripPlan:
        # Runs inside the store's write transaction: trip_id is this trip's own.
        s = trip_id if seed is None else seed
        weights = (
            _fixed_weights(policy, post, dphi)
            if policy in ("mean", "safe")  # the same for every trip
            else rectified_weights(rule, post, trip_id, np.random.default_rng(s), dphi)
        )
        path = router.route_energy(weights)
        same = next(
            (
                r
                for r in fixed.values()
                if np.array_equal(r.segments, path.segments)
                and (r.start_fraction, r.end_fraction) == (path.start_fraction, path.end_fraction)
            ),
            None,
        )
        routes.clear()
        # a planned route equal to an alternative has that alternative's prediction: reuse it
        routes["planned"] = (
            describe_route(net, path, model, policy)
            if same is None
            else replace(same, policy=policy)
        )
        routes.update(fixed)
        if "best guess" in routes:
            # least predicted energy, plus the price of time when the driver set one
            def cost(r: Route) -> float:
                return r.predicted_wh + moved(r) + options.time_weight * r.time_s / 60.0

            least = min(routes.values(), key=cost)
            if cost(least) < cost(routes["best guess"]):
                routes["best guess"] = replace(least, policy="mean")
        used_seed.append(s)
        p = routes["planned"]
        via_driven[:] = router.via_segments(p.segments)
        return TripPlan(
            origin_segment=int(p.segments[0]),
            goal_segment=int(p.segments[-1]),
            policy=policy,
            route=p.segments,
            predicted_wh=p.predicted_wh,
            predicted_sd_wh=p.predicted_sd_wh,
            length_m=p.length_m,
            time_s=p.time_s,
            seed=s,
            # with the via points the planned route drives (a two-way street's direction)
            extra=extra if options.is_default else {**extra, "via_segments": list(via_driven)},
            start_fraction=p.start_fraction,
            end_fraction=p.end_fraction,
            # planned on the posterior at a temperature (AtTemperature): observe defaults to it
            temperature_c=getattr(session.model, "temperature_c", None),
        )

    if record:
        trip_id = store.plan_trip(plan)
    else:
        trip_id = store.next_trip_id()
        plan(trip_id)
    p = routes["planned"]
    return PlannedTrip(
        trip_id, int(p.segments[0]), int(p.segments[-1]), policy, used_seed[-1], routes,
        recorded=record, options=options, via_segments=tuple(via_driven),
        notices=tuple(router.notices), absent_kinds=router.absent_kinds,
        car_shift_wh={} if shift is None else {n: moved(r) for n, r in routes.items()},
        car=None if shift is None else car,
    )


def write_trip_files(session: Session, trip: PlannedTrip, *, html: bool = True) -> list[Path]:
    """Write ``maps/trip-N.geojson``, ``maps/trip-N.gpx`` and the HTML map (which links the map
    library in ``maps/lib/``, put there once); returns the paths written.

    Raises
    ------
    StateIOError
        If writing fails; the message says the trip itself was recorded.
    """
    from ev_nav.trips.session import require_session

    require_session(session, "write_trip_files")
    if not isinstance(trip, PlannedTrip):
        raise TypeError(f"write_trip_files takes the PlannedTrip plan_trip returned, got "
                        f"{type(trip).__name__}")
    folder = maps_dir(session.state_dir)
    written = []
    try:
        geo = folder / f"trip-{trip.trip_id}.geojson"
        _write_route_geojson(session.net, trip.car_routes(), geo)
        gpx = folder / f"trip-{trip.trip_id}.gpx"
        _write_route_gpx(session.net, trip, gpx)
        written += [geo, gpx]
        if html:
            from ev_nav.viz.maps import route_map

            post = session.model.posterior()
            mean_wh = post.mean
            if trip.car is not None:  # the car's energies, as the route table shows them
                from ev_nav.trips.battery import e_det_shift

                mean_wh = mean_wh + e_det_shift(session.net, trip.car, session.vehicle)
            page = folder / f"trip-{trip.trip_id}.html"
            planned_name = f"planned ({trip.policy})"
            others = {n: r for n, r in trip.routes.items() if n != "planned"}
            # the legend and tooltips show each route's own figures, as the route table does:
            # its joint-posterior sd, labelled model sd (not one drive's noise), for the car
            figures = {(planned_name if n == "planned" else n): r
                       for n, r in trip.car_routes().items()}
            route_map(
                session.net,
                _drawn(trip.routes["planned"]),
                {n: _drawn(r) for n, r in others.items()},
                route_name=planned_name,
                mean_wh=mean_wh,
                sd_wh=post.std,
                route_figures=figures,
                title=f"ev-nav trip {trip.trip_id}" + (
                    "" if trip.car is None else f" ({trip.car.name})"),
                path=page,
            )
            written.append(page)
    except OSError as exc:
        raise StateIOError(
            f"trip {trip.trip_id} was recorded, but its route files (GeoJSON, GPX, map) could "
            f"not be written to {folder} ({exc}); record the drive as usual"
        ) from None
    return written


def _drawn(r: Route) -> tuple[np.ndarray, float, float]:
    """A route as the map draws it: its segments and where it starts and ends along them."""
    return r.segments, r.start_fraction, r.end_fraction


def _write_route_gpx(net: RoadNetwork, trip: PlannedTrip, path: Path) -> None:
    """The planned route as GPX 1.1 (for navigation devices and apps): a track with elevation
    (``<ele>``, where the network has it) and waypoints A (start) and B (end).

    Elements follow the order the GPX 1.1 schema requires: waypoints before the track, and in a
    point ``<ele>`` before ``<name>``.
    """
    from xml.sax.saxutils import escape

    from ev_nav.provenance import atomic_write_text

    p = trip.routes["planned"]
    coords = route_coordinates(net, p.segments, p.start_fraction, p.end_fraction)

    def ele(row: np.ndarray) -> str:
        return f"<ele>{row[2]:.1f}</ele>" if row.shape[0] > 2 else ""

    def waypoint(row: np.ndarray, name: str, kind: str, desc: str) -> str:
        return (
            f'  <wpt lat="{row[1]:.7f}" lon="{row[0]:.7f}">{ele(row)}<name>{escape(name)}</name>'
            f"<desc>{escape(desc)}</desc><type>{kind}</type></wpt>\n"
        )

    trip_name = f"ev-nav trip {trip.trip_id} ({trip.policy})"
    points = "\n".join(
        f'      <trkpt lat="{row[1]:.7f}" lon="{row[0]:.7f}">{ele(row)}</trkpt>' for row in coords
    )
    atomic_write_text(
        path,
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<gpx version="1.1" creator="ev-nav" xmlns="http://www.topografix.com/GPX/1/1">\n'
        f"  <metadata><name>{escape(trip_name)}</name></metadata>\n"
        + waypoint(coords[0], "A", "start", f"start of {trip_name}, segment {trip.start_segment}")
        + waypoint(coords[-1], "B", "end", f"end of {trip_name}, segment {trip.goal_segment}")
        + f"  <trk><name>{escape(trip_name)}</name>\n    <trkseg>\n{points}\n    </trkseg>\n"
        "  </trk>\n</gpx>\n",
    )


def _write_route_geojson(net: RoadNetwork, routes: dict[str, Route], path: Path) -> None:
    """Every route as a GeoJSON LineString; positions are [lon, lat, elevation m] (RFC 7946's
    optional third coordinate) where the network has elevation, else [lon, lat]."""
    from ev_nav.provenance import atomic_write_text

    features = []
    for name, r in routes.items():
        coords = route_coordinates(net, r.segments, r.start_fraction, r.end_fraction)
        features.append(
            {
                "type": "Feature",
                "geometry": {"type": "LineString", "coordinates": coords.tolist()},
                "properties": {
                    "name": name,
                    "segments": r.segments.tolist(),
                    "length_m": r.length_m,
                    "time_s": r.time_s,
                    "predicted_wh": r.predicted_wh,
                    "predicted_sd_wh": r.predicted_sd_wh,
                },
            }
        )
    atomic_write_text(path, json.dumps({"type": "FeatureCollection", "features": features}))


def write_charging_map(session: Session, plan: ChargingPlan) -> Path:
    """Write ``maps/charging-plan.html``: the legs of a plan with charging stops, each labelled
    with its arrival charge and what to do at the stop (replaced by the next such plan)."""
    from ev_nav.viz.maps import route_map

    folder = maps_dir(session.state_dir)
    page = folder / "charging-plan.html"
    routes: dict[str, tuple[np.ndarray, float, float]] = {}
    labels: dict[str, str] = {}
    for j, leg in enumerate(plan.legs):
        start, end = leg.start_fraction, leg.end_fraction
        if j < len(plan.stops):
            s = plan.stops[j]
            name = f"leg {j + 1}: to {s.site.name}"
            labels[name] = (
                f"{leg.drive_min:.0f} min, arrive {plan.pct(s.arrival_mean_wh):.0f}% "
                f"(5th pct {plan.pct(s.arrival_p5_wh):.0f}%), charge to "
                f"{plan.pct(s.charge_to_wh):.0f}% ({s.charge_min:.0f} min at "
                f"{s.site.power_kw:.0f} kW)"
            )
        else:
            name = f"leg {j + 1}: to the destination"
            labels[name] = (
                f"{leg.drive_min:.0f} min, arrive {plan.pct(plan.goal_arrival_mean_wh):.0f}% "
                f"(5th pct {plan.pct(plan.goal_arrival_p5_wh):.0f}%)"
            )
        routes[name] = (leg.segments, start, end)
    first, *rest = routes
    post = session.model.posterior()
    try:
        route_map(
            session.net,
            routes[first],
            {n: routes[n] for n in rest},
            route_name=first,
            mean_wh=post.mean,
            sd_wh=post.std,
            route_labels=labels,
            title=f"ev-nav charging plan: {plan.total_min:.0f} min, {len(plan.stops)} stop(s), "
            f"P >= {100 * plan.probability:.1f}%",
            path=page,
        )
    except OSError as exc:
        raise StateIOError(f"the charging plan's map could not be written to {folder} ({exc})"
                           ) from None
    return page
