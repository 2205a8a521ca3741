"""Planning a trip on an open state: snap, choose, record, and write the trip's map files.

The planned route is regeneration-aware: the index is rectified in reduced-cost space
(:mod:`ev_nav.potential`), so a descent counts with the regeneration physics guarantees. It is
shown next to the shortest and the fastest route, each with the model's predicted energy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ev_nav.errors import InvalidObservation, StateError, StateIOError
from ev_nav.trips.route_options import ConstrainedRouter, RouteOptions

if TYPE_CHECKING:
    from ev_nav.bandits.agent import Route
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.trips.session import Session

__all__ = ["PlannedTrip", "maps_dir", "plan_trip", "write_trip_files"]


@dataclass(frozen=True)
class PlannedTrip:
    """A recorded trip and the routes it was chosen among.

    Attributes
    ----------
    trip_id : int
        The trip's id in the state (give it to ``observe``).
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
        The segments the via points snapped to.
    notices : tuple of str
        One line per avoided kind no segment of the network has (nothing to avoid).
    """

    trip_id: int
    start_segment: int
    goal_segment: int
    policy: str
    seed: int
    routes: dict[str, Route]
    options: RouteOptions = RouteOptions()
    via_segments: tuple[int, ...] = ()
    notices: tuple[str, ...] = ()

    @property
    def exploring_cost(self) -> tuple[float, float] | None:
        """Predicted extra energy [Wh] and time [s] of the planned route over the best guess
        (``None`` when the planned route is the best guess)."""
        guess = self.routes.get("best guess")
        if guess is None:
            return None
        p = self.routes["planned"]
        return p.predicted_wh - guess.predicted_wh, p.time_s - guess.time_s

    def to_dict(self) -> dict[str, object]:
        """JSON-ready summary (what ``ev-nav route --json`` prints)."""
        extra = self.exploring_cost
        return {
            "trip": self.trip_id,
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
                }
                for name, r in self.routes.items()
            },
            "exploring_extra_wh": None if extra is None else round(extra[0], 1),
            "exploring_extra_minutes": None if extra is None else round(extra[1] / 60, 2),
            **self.options.to_dict(),
            "via_segments": list(self.via_segments),
            "notices": list(self.notices),
        }


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
    via: Sequence[tuple[float, float]] = (),
    avoid: Sequence[str] = (),
    time_weight: float = 0.0,
) -> PlannedTrip:
    """Snap ``origin``, ``via`` and ``goal`` (lat, lon [deg]) to roads, plan, and record the trip.

    The trip id is reserved inside the store's write transaction and the Thompson seed derived
    from it (unless ``seed`` is given), so concurrent planners never share a seed. Only what
    depends on the id (the planned route and its prediction) is computed inside that
    transaction; the alternatives are routed and predicted before it, so concurrent planners
    and observers (the server's vehicles) wait as little as possible for the store's write lock.

    With ``with_safe`` the ``safe`` route (least upper-quantile energy,
    :class:`~ev_nav.bandits.indices.SafeIndex`) is shown too. ``extra`` (JSON-ready) is stored
    with the trip (the server records the requesting vehicle's name there).

    Route options (:class:`~ev_nav.trips.route_options.RouteOptions`), obeyed by the plan and
    every alternative: ``via`` points the route passes in order (legs concatenated), ``avoid``
    road kinds (``motorway``, ``toll``, ``unpaved``, ``ferry``), and ``time_weight`` λ [Wh per
    minute]: the plan (and best guess, safe) minimise energy + λ · time.

    Raises
    ------
    OutsideNetworkError
        A point is further than ``max_snap_m`` from every road.
    InvalidObservation
        Origin and destination snap to the same segment (and there is no via point).
    RouteOptionError
        Invalid options, an avoided kind the network has no tags for, a point on an avoided road.
    UnreachableError
        The points cannot be connected without an avoided kind.
    """
    from ev_nav.bandits.agent import describe_route
    from ev_nav.bandits.indices import make_index, rectified_weights
    from ev_nav.bandits.routing import Router
    from ev_nav.potential import potential_change
    from ev_nav.store import TripPlan

    options = RouteOptions(tuple(via), tuple(avoid), time_weight)
    net, model, store = session.net, session.model, session.store
    start = net.nearest_segment(origin[1], origin[0], max_snap_m)
    end = net.nearest_segment(goal[1], goal[0], max_snap_m)
    stops = tuple(net.nearest_segment(lon, lat, max_snap_m) for lat, lon in options.via)
    if start == end and not stops:
        raise InvalidObservation(
            f"origin and destination snap to the same road segment ({start}); a trip needs two "
            "different places"
        )
    maps_dir(session.state_dir)  # checked before anything is recorded
    rule = make_index(policy)
    router = ConstrainedRouter(net, Router(net), (start, *stops, end), options)
    if not options.is_default:  # stored with the trip: what it was planned under
        extra = {**(extra or {}), "route_options": options.to_dict(), "via_segments": stops}
    post = model.posterior()
    dphi = potential_change(net, session.vehicle)
    # the routes that do not depend on the trip id, described before the write transaction:
    # the best current guess (greedy on the posterior mean, regeneration-aware like the plan),
    # shown beside an exploring plan so the driver sees what exploring costs; the safe route;
    # the shortest and the fastest
    fixed: dict[str, Route] = {}
    if policy != "mean":
        greedy = rectified_weights(make_index("mean"), post, 1, np.random.default_rng(0), dphi)
        fixed["best guess"] = describe_route(net, router.route_energy(greedy), model, "mean")
    if with_safe and policy != "safe":
        careful = rectified_weights(make_index("safe"), post, 1, np.random.default_rng(0), dphi)
        fixed["safe"] = describe_route(net, router.route_energy(careful), model, "safe")
    fixed["shortest"] = describe_route(net, router.route(net.length_m), model, "shortest")
    fixed["fastest"] = describe_route(net, router.route(net.travel_time_s), model, "fastest")
    routes: dict[str, Route] = {}
    used_seed: list[int] = []

    def plan(trip_id: int) -> TripPlan:
        # Runs inside the store's write transaction: trip_id is this trip's own.
        s = trip_id if seed is None else seed
        weights = rectified_weights(rule, post, trip_id, np.random.default_rng(s), dphi)
        path = router.route_energy(weights)
        same = next((r for r in fixed.values() if np.array_equal(r.segments, path)), None)
        routes.clear()
        # a planned route equal to an alternative has that alternative's prediction: reuse it
        routes["planned"] = (
            describe_route(net, path, model, policy)
            if same is None
            else replace(same, segments=path, policy=policy)
        )
        routes.update(fixed)
        used_seed.append(s)
        p = routes["planned"]
        return TripPlan(
            origin_segment=start,
            goal_segment=end,
            policy=policy,
            route=p.segments,
            predicted_wh=p.predicted_wh,
            predicted_sd_wh=p.predicted_sd_wh,
            length_m=p.length_m,
            time_s=p.time_s,
            seed=s,
            extra=extra,
        )

    trip_id = store.plan_trip(plan)
    return PlannedTrip(
        trip_id, start, end, policy, used_seed[-1], routes, options, stops, tuple(router.notices)
    )


def write_trip_files(session: Session, trip: PlannedTrip, *, html: bool = True) -> list[Path]:
    """Write ``maps/trip-N.geojson`` (and the HTML map); returns the paths written.

    Raises
    ------
    StateIOError
        If writing fails; the message says the trip itself was recorded.
    """
    folder = maps_dir(session.state_dir)
    written = []
    try:
        geo = folder / f"trip-{trip.trip_id}.geojson"
        _write_route_geojson(session.net, trip.routes, geo)
        gpx = folder / f"trip-{trip.trip_id}.gpx"
        _write_route_gpx(session.net, trip, gpx)
        written += [geo, gpx]
        if html:
            from ev_nav.viz.maps import route_map

            post = session.model.posterior()
            page = folder / f"trip-{trip.trip_id}.html"
            planned_name = f"planned ({trip.policy})"
            others = {n: r for n, r in trip.routes.items() if n != "planned"}
            # the legend shows each route's own figures: its joint-posterior sd, as in the table
            labels = {
                (planned_name if n == "planned" else n): (
                    f"{r.length_m / 1000:.2f} km, {r.time_s / 60:.1f} min, predicted "
                    f"{r.predicted_wh:.0f} ± {r.predicted_sd_wh:.0f} Wh"
                )
                for n, r in trip.routes.items()
            }
            route_map(
                session.net,
                trip.routes["planned"].segments,
                {n: r.segments for n, r in others.items()},
                route_name=planned_name,
                mean_wh=post.mean,
                sd_wh=post.std,
                route_labels=labels,
                title=f"ev-nav trip {trip.trip_id}",
                path=page,
            )
            written.append(page)
    except OSError as exc:
        raise StateIOError(
            f"trip {trip.trip_id} was recorded, but its map could not be written to {folder} "
            f"({exc}); record the drive as usual, 'ev-nav map' can draw it later"
        ) from None
    return written


def route_coordinates(net: RoadNetwork, segments: np.ndarray) -> np.ndarray:
    """The route's polyline as (lon, lat) rows [deg], rounded to 1e-7 deg (~1 cm), without the
    repeated junction point where one segment ends and the next begins."""
    coords = np.concatenate([net.segment_coords(int(e)) for e in segments]).round(7)
    keep = np.ones(len(coords), dtype=bool)
    keep[1:] = np.any(coords[1:] != coords[:-1], axis=1)
    return coords[keep]


def _write_route_gpx(net: RoadNetwork, trip: PlannedTrip, path: Path) -> None:
    """The planned route as a GPX 1.1 track (for navigation devices and apps)."""
    from xml.sax.saxutils import escape

    from ev_nav.provenance import atomic_write_text

    points = "\n".join(
        f'      <trkpt lat="{lat:.7f}" lon="{lon:.7f}"/>'
        for lon, lat in route_coordinates(net, trip.routes["planned"].segments)
    )
    name = escape(f"ev-nav trip {trip.trip_id} ({trip.policy})")
    atomic_write_text(
        path,
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<gpx version="1.1" creator="ev-nav" xmlns="http://www.topografix.com/GPX/1/1">\n'
        f"  <trk><name>{name}</name>\n    <trkseg>\n{points}\n    </trkseg>\n  </trk>\n"
        "</gpx>\n",
    )


def _write_route_geojson(net: RoadNetwork, routes: dict[str, Route], path: Path) -> None:
    from ev_nav.provenance import atomic_write_text

    features = []
    for name, r in routes.items():
        coords = route_coordinates(net, r.segments)
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
