"""Recording a trip from its GPS track: what was actually driven, which may differ from the plan.

``ev-nav observe STATE TRIP --gpx track.gpx`` reads the track (:mod:`ev_nav.trips.gpx`), matches
it onto the network's directed segments (:mod:`ev_nav.roads.matching`) and records

* with ``--total-wh X``: the trip total as an observation of the *matched* route (whole
  segments, as a planned trip's total covers its whole start and goal segments);
* without it, from a track that carries the cumulative energy counter: per-segment energies.
  The counter is interpolated linearly in distance along the matched route at every segment
  boundary, and each segment gets the difference between its two ends. The first and last
  segments the counter covers get the energy of the part between its first (last) reading and
  the boundary, learned as that share of them (the store keeps each reading's share), so the
  readings sum to the counter's whole drive. A segment driven more than once has a reading per
  pass, as any per-segment observation.

The store's checks apply as for any observation: the plausibility rule against the model's
prediction for the driven route (``force`` to override), one observation batch per trip, and
``observe --undo`` forgets it again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from ev_nav.errors import InvalidObservation
from ev_nav.roads.matching import MatchConfig, MatchResult, match_track
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.partial import driven_shares
from ev_nav.trips.gpx import Track, read_gpx
from ev_nav.trips.observations import record_segments, record_total

if TYPE_CHECKING:
    from ev_nav.trips.session import Session

__all__ = [
    "TrackReadings", "TrackRecord", "apportion_energy", "driven_length_m", "driven_part",
    "record_track",
]


@dataclass(frozen=True)
class TrackRecord:
    """What :func:`record_track` recorded.

    Attributes
    ----------
    batch : int
        The observation batch id.
    kind : {'total', 'segment'}
        A trip total over the driven route, or per-segment energies.
    match : MatchResult
        The matched track (``match.segments`` is the driven route).
    observed_wh : float
        The recorded total, or the sum of the recorded segment energies [Wh].
    segment_ids : ndarray of int64
        The segments with a recorded energy (``kind == 'segment'``), else the driven route.
    planned_share : float
        Share of the planned route's segments that were driven [0..1].
    driven_m : float
        Length of the driven route [m], the part of its first and last segment driven
        counted (:func:`driven_length_m`).
    """

    batch: int
    kind: str
    match: MatchResult
    observed_wh: float
    segment_ids: NDArray[np.int64]
    planned_share: float
    driven_m: float


@dataclass(frozen=True)
class TrackReadings:
    """Per-segment energies apportioned from a track's energy counter (:func:`apportion_energy`).

    Attributes
    ----------
    route : ndarray of int64
        The segments the counter covers, in driving order (the matched route, less any segment
        before its first reading or after its last): one reading per pass.
    start_fraction, end_fraction : float
        Where along the first and last of them the counter's first and last readings lie.
    energy_wh : ndarray of float64
        The energy of each pass of ``route`` [Wh]: of the part driven, on the first and last.
    """

    route: NDArray[np.int64]
    start_fraction: float
    end_fraction: float
    energy_wh: NDArray[np.float64]


def apportion_energy(
    net: RoadNetwork, match: MatchResult, energy_wh: NDArray[np.float64]
) -> TrackReadings:
    """Per-segment energies [Wh] from a cumulative per-point energy counter (module docstring).

    Parameters
    ----------
    net : RoadNetwork
        The network the track was matched on.
    match : MatchResult
        The matched track.
    energy_wh : ndarray of float64
        Per input point of the track, the cumulative energy [Wh]; NaN where there is none.

    Returns
    -------
    TrackReadings
        Each pass of a segment the counter covers, in driving order, with its energy [Wh]: a
        segment driven twice has two readings (each pass is an observation of it), and the
        first and last are of the part of their segment between the counter's first and last
        readings (learned as that share of them).

    Raises
    ------
    InvalidObservation
        Fewer than two matched points carry energy, or they lie at one place.
    """
    e_all = np.asarray(energy_wh, dtype=np.float64)
    ok = (match.point_segment >= 0) & np.isfinite(e_all)
    if ok.sum() < 2:
        raise InvalidObservation(
            "the track has fewer than two matched points with an energy reading; record the "
            "trip total with --total-wh instead"
        )
    r, e = match.point_route_m[ok], e_all[ok]
    step = np.concatenate([[True], np.diff(r) > 0])  # np.interp needs increasing positions
    r, e = r[step], e[step]
    if r.size < 2:
        raise InvalidObservation(
            "the track's energy readings all lie at one place on the roads; record the trip "
            "total with --total-wh instead"
        )
    length = net.length_m[match.segments]
    offsets = np.concatenate([[0.0], np.cumsum(length)])
    # the segments the counter covers: from the one its first reading lies on (a reading on a
    # boundary starts the next) to the one its last lies on (on a boundary: ends the last)
    n = match.segments.size
    k0 = int(np.clip(np.searchsorted(offsets, r[0] + 1e-6, side="right") - 1, 0, n - 1))
    k1 = int(np.clip(np.searchsorted(offsets, r[-1] - 1e-6, side="left") - 1, k0, n - 1))
    bounds = np.clip(offsets[k0 : k1 + 2], r[0], r[-1])
    counter = np.interp(bounds, r, e)  # at each boundary, and at the two ends
    part = length[k0 : k1 + 1]
    fs = float(np.clip((r[0] - offsets[k0]) / part[0], 0.0, 1.0))
    fg = float(np.clip((r[-1] - offsets[k1]) / part[-1], 0.0, 1.0))
    if k0 == k1 and fg <= fs:  # within one segment, at one place: nothing driven
        raise InvalidObservation(
            "the track's energy readings cover no distance on the roads; record the trip "
            "total with --total-wh instead"
        )
    return TrackReadings(match.segments[k0 : k1 + 1].copy(), fs, fg, np.diff(counter))


def driven_part(match: MatchResult) -> tuple[NDArray[np.int64], float, float]:
    """The route a matched track drove, as a total over it counts it: its segments and the
    fractions [0, 1] along the first where it starts and along the last where it ends.

    The track starts and ends inside its first and last segment, so only the part driven
    counts; a segment the track only touches (a share of about 0) is not part of the drive. A
    drive within one segment counts that segment whole (0, 1), as the planned trip does.
    """
    driven = match.segments
    first, last = match.first_fraction, match.last_fraction
    if driven.size > 1 and first < 1e-6:
        driven, first = driven[1:], 1.0
    if driven.size > 1 and last < 1e-6:
        driven, last = driven[:-1], 1.0
    if driven.size == 1:
        return driven, 0.0, 1.0
    return driven, 1.0 - first, last


def driven_length_m(net: RoadNetwork, match: MatchResult) -> float:
    """How far a matched track drove [m]: its :func:`driven_part`, the part of the first and
    last segment driven counted, as a route's length counts it."""
    route, start, end = driven_part(match)
    return float(net.length_m[route] @ driven_shares(route.size, start, end))


def record_track(
    session: Session,
    trip_id: int,
    track: Track | str | Path,
    *,
    total_wh: float | None = None,
    config: MatchConfig | None = None,
    force: bool = False,
    on_matched: Callable[[MatchResult], None] | None = None,
    on_recorded: Callable[[int], None] | None = None,
    absorb: bool = True,
    temperature_c: float | None = None,
) -> TrackRecord:
    """Match a GPS track and record the trip it drove (see the module docstring).

    Parameters
    ----------
    session : Session
        The open state (with its model loaded).
    trip_id : int
        The planned trip this drive belongs to.
    track : Track or path
        The track, or a GPX file to read it from.
    total_wh : float, optional
        The trip computer's total [Wh]; without it the track's energy counter is used.
    config : MatchConfig, optional
        Map-matching parameters (GPS noise etc.).
    on_matched : callable, optional
        Called with the match before anything is recorded (to report it).
    force, on_recorded, absorb, temperature_c
        As for :func:`ev_nav.trips.observations.record_total` (``temperature_c``: the drive's
        ambient temperature [°C]).

    Raises
    ------
    TrackFileError, EmptyTrackError
        An unreadable GPX file.
    TrackOffNetworkError
        A track away from the network's roads.
    InvalidObservation
        No total and no energy counter in the track; implausible readings (unless ``force``);
        a trip that already has observations.
    """
    from ev_nav.trips.session import require_session

    require_session(session, "record_track")
    trk = track if isinstance(track, Track) else read_gpx(track)
    trip = session.store.get_trip(trip_id)  # an unknown trip fails before the matching work
    if total_wh is None and not trk.has_energy:
        raise InvalidObservation(
            f"{trk.source} has no energy readings (<extensions><energy_wh>); give the trip "
            "total with --total-wh"
        )
    net = session.net
    match = match_track(net, trk.lon, trk.lat, config)
    if on_matched is not None:
        on_matched(match)
    driven = match.segments
    planned_share = float(np.isin(trip.route, driven).mean())
    driven_m = driven_length_m(net, match)
    if total_wh is not None:
        driven, start, end = driven_part(match)
        ends = {"start_fraction": start, "end_fraction": end} if driven.size > 1 else {}
        batch = record_total(
            session, trip.id, float(total_wh), force=force, on_recorded=on_recorded,
            absorb=absorb, route=driven, temperature_c=temperature_c, **ends,
        )
        return TrackRecord(batch, "total", match, float(total_wh), driven, planned_share,
                           driven_m)
    got = apportion_energy(net, match, trk.energy_wh)
    batch = record_segments(
        session, trip.id, got.route, got.energy_wh, force=force, source=trk.source,
        on_recorded=on_recorded, absorb=absorb, route=got.route,
        start_fraction=got.start_fraction, end_fraction=got.end_fraction,
        temperature_c=temperature_c,
    )
    return TrackRecord(batch, "segment", match, float(got.energy_wh.sum()), got.route,
                       planned_share, driven_m)
