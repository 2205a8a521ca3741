"""Recording what a trip cost, so that a driver can trust the learned model.

Readings are checked before they are stored, by the rule of :mod:`ev_nav.trips.plausibility`:
more than any vehicle can use or recover over the distance driven is always refused; a reading
far from the model's prediction (more than ``PLAUSIBLE_SIGMAS`` predictive standard deviations, a
drive's noise taken as at least ``PLAUSIBLE_NOISE_SPREAD`` of each segment's
loss whatever the learner assumes) or a likely kWh/Wh mix-up is refused with the reason unless
forced; a per-segment file that covers only part of the route is refused unless explicitly
partial. A trip's observations can be forgotten again (:func:`forget_trip`): the model forgets
them too.

A trip planned for another car than the state's vehicle (``--vehicle-model`` / the API's
``"vehicle_model"``, kept in the trip's extra) is driven by that car: its readings are judged
against that car's prediction and converted to the state's vehicle before they are stored
(:func:`reading_shift`), so the store, its replay and every learner see only the state's
vehicle's energies.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from ev_nav.errors import ConfigError, InvalidObservation, UnknownSegmentError, require_file
from ev_nav.faults import crash_point
from ev_nav.gp.posterior import combine_weights, validate_segment_ids
from ev_nav.roads.partial import driven_shares, reading_shares
from ev_nav.trips.battery import e_det_shift, route_energy, route_shift_wh
from ev_nav.trips.changes import forget_in_detector, learn_new
from ev_nav.trips.plausibility import PLAUSIBLE_NOISE_SPREAD, check_plausible
from ev_nav.trips.session import require_session, save_checkpoint
from ev_nav.wording import plural

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

    from ev_nav.energy import Vehicle
    from ev_nav.gp.posterior import SegmentModel
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.store.trips import Trip
    from ev_nav.trips.session import Session

__all__ = [
    "ReadingShift",
    "RecordedPrediction",
    "plausible_noise_variance",
    "forget_trip",
    "learned_wh",
    "read_segment_csv",
    "reading_shift",
    "recorded_prediction",
    "record_segments",
    "record_total",
]


#: More rows than any trip's route can have on a network ev-nav handles: a file this long is not an
#: observation of one trip (and reading it whole would only exhaust memory).
MAX_CSV_ROWS = 2_000_000


def read_segment_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read ``segment,energy_wh`` rows (header required)."""
    require_file(path, "observation file", InvalidObservation)
    try:
        # utf-8-sig: a spreadsheet's "CSV UTF-8" starts with a byte-order mark, which would
        # otherwise become part of the first column's name
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or not {"segment", "energy_wh"} <= set(
                f.strip() for f in reader.fieldnames
            ):
                raise InvalidObservation(
                    f"{path}: expected a header 'segment,energy_wh', got {reader.fieldnames}"
                )
            seg, wh = [], []
            for i, row in enumerate(reader, start=2):
                if i > MAX_CSV_ROWS:
                    raise InvalidObservation(
                        f"{path} has more than {MAX_CSV_ROWS:,} rows: not one trip's observations"
                    )
                extra = row.get(None)  # type: ignore[call-overload]
                if extra:
                    # more fields than the header names: a decimal comma ("1582,12,8")
                    # split an energy, whose fraction was dropped without a word
                    raise InvalidObservation(
                        f"{path}, line {i}: {len(extra)} more field(s) than the header "
                        f"names ({','.join(extra)!r} left over); a decimal comma? write "
                        "energies with a decimal point (12.8)"
                    )
                row = {k.strip(): (v or "").strip() for k, v in row.items() if isinstance(k, str)}
                try:
                    seg.append(int(row["segment"]))
                    wh.append(float(row["energy_wh"]))
                    if not -(2**63) <= seg[-1] < 2**63:
                        raise ValueError
                except ValueError:
                    raise InvalidObservation(
                        f"{path}, line {i}: cannot read segment {row['segment']!r} / "
                        f"energy {row['energy_wh']!r}"
                    ) from None
    except UnicodeDecodeError:
        raise InvalidObservation(f"{path} is not a UTF-8 text CSV file") from None
    except csv.Error as exc:  # e.g. a field longer than the csv module's limit, NUL bytes
        raise InvalidObservation(f"{path} is not a readable CSV file ({exc})") from None
    if not seg:
        raise InvalidObservation(f"{path} has no observation rows")
    return np.asarray(seg, dtype=np.int64), np.asarray(wh, dtype=np.float64)


@dataclass(frozen=True)
class ReadingShift:
    """How the readings of a trip driven by another car are learned for the state's vehicle.

    A reading ``y_e`` of segment ``e`` (a whole segment's energy [Wh]) is learned as
    ``y_e − shift[e]``; a total ``T`` over segments driven with shares ``w_e`` as
    ``T − Σ_e w_e · shift[e]`` (:meth:`wh`). ``shift`` is
    :func:`ev_nav.trips.battery.e_det_shift` (the car that drove less the state's vehicle),
    the same per-segment difference that moved the trip's predictions for that car, so a
    reading that matches the car's prediction is learned as one that matches the state's.

    Attributes
    ----------
    vehicle_model : str
        The catalogue car the trip was planned for (and driven by).
    learned_for : str
        The state's vehicle, whose energies the model learns.
    shift : ndarray of float, shape (n_segments,)
        ``E_det(vehicle_model) − E_det(learned_for)`` per segment [Wh] (read-only).
    """

    vehicle_model: str
    learned_for: str
    shift: np.ndarray

    def wh(self, segments: np.ndarray, shares: np.ndarray | None = None) -> float:
        """What the car's readings of ``segments`` (each driven ``shares``, default whole) exceed
        the state's vehicle's by [Wh]: subtract it from their sum to get what is learned."""
        return route_shift_wh(self.shift, segments, shares)


def reading_shift(session: Session, trip: Trip) -> ReadingShift | None:
    """How ``trip``'s readings are converted to the state's vehicle (:class:`ReadingShift`), or
    None for a trip planned for the state's own vehicle (no ``vehicle_model`` in its extra).

    Raises
    ------
    ConfigError
        If the trip names a car the catalogue no longer has (nothing is recorded).
    """
    name = trip.extra.get("vehicle_model") if isinstance(trip.extra, dict) else None
    if not name:
        return None
    name = str(name)
    from ev_nav.vehicles import catalogue

    models = catalogue()
    if name not in models:
        raise ConfigError(
            f"trip {trip.id} was planned for {name!r}, which the vehicle catalogue does not "
            f"have: its readings cannot be converted to {session.vehicle.name}'s"
        )
    shift = e_det_shift(session.net, models[name].vehicle, session.vehicle)
    return ReadingShift(name, session.vehicle.name, shift)


def learned_wh(session: Session, trip_id: int, batch: int) -> float:
    """What the model learns from batch ``batch`` of trip ``trip_id`` [Wh]: its stored total, or
    the sum of its stored segment energies. For a trip driven by another car
    (:func:`reading_shift`) this is the reading converted to the state's vehicle, as stored;
    an acknowledgement shows it beside what the car measured."""
    stored = [b for b in session.store.observations(trip_id) if b.id == batch]
    if not stored:
        raise InvalidObservation(f"trip {trip_id} has no observation batch {batch}")
    return float(stored[0].energy_wh.sum())


class _SegmentNames(Sequence[str]):
    """``segment E`` for each of a batch's segment ids, made only for a reading a message names
    (a server checks every posted observation: naming all its segments up front was a Python
    loop over the route at every post). ``suffix`` follows each name (the car that drove)."""

    def __init__(self, ids: np.ndarray, suffix: str = "") -> None:
        self._ids = ids
        self._suffix = suffix

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, k: int) -> str: ...
    @overload
    def __getitem__(self, k: slice) -> list[str]: ...
    def __getitem__(self, k: int | slice) -> str | list[str]:
        if isinstance(k, slice):
            return [f"segment {int(e)}{self._suffix}" for e in self._ids[k]]
        return f"segment {int(self._ids[k])}{self._suffix}"


def record_segments(
    session: Session,
    trip_id: int,
    segment_ids: ArrayLike,
    energies_wh: ArrayLike,
    *,
    force: bool = False,
    partial: bool = False,
    source: str = "the observations",
    on_recorded: Callable[[int], None] | None = None,
    absorb: bool = True,
    route: np.ndarray | None = None,
    start_fraction: float = 0.0,
    end_fraction: float = 1.0,
    temperature_c: float | None = None,
) -> int:
    """Check and record per-segment energies [Wh] of a driven trip, then update the model.

    Returns the observation batch id. The model (``session.model``, loaded) is updated and a
    checkpoint saved; a crash after the record loses nothing (the next session replays it).
    ``on_recorded(batch_id)`` is called as soon as the record is committed, before the model
    update (an acknowledgement the user can rely on). With ``absorb=False`` the record is only
    checked (against ``session.model``'s posterior and noise, which are only read) and
    committed: whoever owns the model applies the batch later (the server's model writer).
    ``route`` is the route actually driven when it differs from the planned one (a matched GPS
    track, :mod:`ev_nav.trips.tracks`), starting ``start_fraction`` along its first segment and
    ending ``end_fraction`` along its last: the segments must lie on it, and need not cover the
    planned route. ``temperature_c``: the drive's ambient temperature [°C], recorded with the
    readings (the model learns with it, and judges them against its prediction at it).

    A reading of the first or last segment of a trip that starts or ends part-way along it is
    the energy of the part driven: it is judged against that share of the segment's prediction
    and learned as that share (:func:`ev_nav.roads.partial.reading_shares`).
    """

    require_session(session, "record_segments")
    store, model = session.store, _judging_model(session, temperature_c)
    trip = store.get_trip(trip_id)
    seg, wh = _ids_and_energies(segment_ids, energies_wh, source)
    bad = np.flatnonzero(~np.isfinite(wh))
    if bad.size:
        raise InvalidObservation(
            f"{source}: energies must be finite; segment {int(seg[bad[0]])} has {wh[bad[0]]}"
        )
    n = session.net.n_segments
    unknown = np.unique(seg[(seg < 0) | (seg >= n)])
    if unknown.size:
        raise UnknownSegmentError(
            f"{source}: {_named(unknown)} not in the network (its segments are 0..{n - 1})"
        )
    missing = _missing_passes(trip.route, seg) if route is None else np.empty(0, np.int64)
    if missing.size and not partial:
        off = np.setdiff1d(seg, trip.route)
        off_route = f"; {_named(off)} not on its route" if off.size else ""
        twice = np.intersect1d(missing, seg)  # listed, but for fewer passes than driven
        passes = (f"; {_named(twice)} driven more than once: give a reading per pass"
                  if twice.size else "")
        raise InvalidObservation(
            f"{source} covers {trip.route.size - missing.size} of the {trip.route.size} "
            f"segment passes of trip {trip.id}{off_route}{passes}; give every segment, or the "
            "trip total with --total-wh, or --partial to record only these"
        )
    post = model.posterior()
    idx = np.where((seg >= 0) & (seg < post.mean.size), seg, 0)
    h = _reading_shares(trip, seg, route, start_fraction, end_fraction)
    # a reading of part of a segment: h of its mean, h² of its model variance and, as a trip
    # total counts each segment's noise, h of a drive's noise (plausible_noise_variance)
    noise = h * np.maximum(_segment_noise(model, idx), plausible_noise_variance(session, idx))
    # another car's readings: judged against its prediction (the figure its driver sees),
    # stored as the state's vehicle's (each moved by its share of that segment's shift), so
    # replay, checkpoints and every learner see the state's vehicle only
    moved = reading_shift(session, trip)
    shift = h * (np.zeros(seg.size) if moved is None else moved.shift[idx])
    check_plausible(
        wh,
        h * post.mean[idx] + shift,
        np.sqrt((h * post.std[idx]) ** 2 + noise),
        _SegmentNames(seg, "" if moved is None else f" ({moved.vehicle_model})"),
        force=force,
        length_m=h * session.net.length_m[idx],  # the distance each reading covers
    )
    batch = store.add_observations(
        trip.id, seg, wh - shift, route=route, start_fraction=start_fraction,
        end_fraction=end_fraction, temperature_c=temperature_c,
    )
    if absorb:
        _absorb(session, batch, on_recorded)
    elif on_recorded is not None:
        on_recorded(batch)
    return batch


def _reading_shares(
    trip: Trip, seg: np.ndarray, route: np.ndarray | None, start_fraction: float,
    end_fraction: float,
) -> np.ndarray:
    """The share of its segment each reading covers, as the store records it: on the planned
    route, or on ``route`` driven between the given fractions (a one-segment route whose
    fractions are out of order counts whole: the store refuses it with its own message)."""
    if route is None:
        return reading_shares(trip.route, np.asarray(trip.shares), seg)
    ends = (start_fraction, end_fraction)
    ok = route.size != 1 or end_fraction > start_fraction
    driven = driven_shares(route.size, *ends) if ok else np.ones(route.size)
    return reading_shares(np.asarray(route, dtype=np.int64), np.clip(driven, 0.0, 1.0), seg)


def _missing_passes(route: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """The passes of ``route`` that ``seg`` has no reading for, one id per missing pass (a
    segment the route drives twice needs two readings)."""
    from ev_nav.store.observations import segment_passes

    ids, driven, listed = segment_passes(route, seg)
    return np.repeat(ids, np.maximum(driven - listed, 0))


def _ids_and_energies(
    segment_ids: ArrayLike, energies_wh: ArrayLike, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """One whole segment id per energy, as two 1-D arrays (int64 ids, float64 Wh).

    Checked before anything uses them: ``wh - shift`` below would broadcast one energy onto
    every id (the store's own shape check then sees two equal arrays), and a cast to int64
    would read 9.5 as segment 9.
    """
    raw = np.asarray(segment_ids)
    try:
        wh = np.asarray(energies_wh, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidObservation(f"{source}: energies must be numbers of Wh") from None
    if raw.ndim != 1 or wh.ndim != 1:
        raise InvalidObservation(
            f"{source}: segment ids and energies must be 1-D arrays, got shapes {raw.shape} "
            f"and {wh.shape}"
        )
    if raw.shape != wh.shape:
        raise InvalidObservation(
            f"{source}: {raw.size} segment ids but {wh.size} energies; give one energy per "
            "segment"
        )
    if not np.issubdtype(raw.dtype, np.integer):
        try:
            as_float = raw.astype(np.float64)
        except (TypeError, ValueError):
            as_float = np.full(raw.shape, np.nan)
        whole = np.isfinite(as_float) & (np.mod(as_float, 1.0) == 0.0)
        if not whole.all():
            raise UnknownSegmentError(
                f"{source}: segment ids must be whole numbers (segment indices); got "
                f"{raw[~whole][0]!r}"
            )
        raw = as_float
    return raw.astype(np.int64), wh


def _segment_noise(model: SegmentModel, ids: np.ndarray) -> np.ndarray:
    """Each listed segment's observation-noise variance [Wh²], one protocol call for all of
    them (``SegmentModel.noise_variances``: a server checks every posted observation)."""
    uniq, inv = np.unique(ids, return_inverse=True)
    var = np.asarray(model.noise_variances(uniq), dtype=np.float64)
    return var[inv.reshape(-1)]


#: The per-segment loss scale of the network and vehicle last judged: (network, vehicle, scale).
#: A network and a vehicle never change once made (frozen), and a server judges every posted
#: observation against one pair: computed once instead of for every segment at every post.
_LOSS_SCALE: tuple[RoadNetwork, Vehicle, np.ndarray] | None = None


def _loss_scale(net: RoadNetwork, vehicle: Vehicle) -> np.ndarray:
    """:func:`ev_nav.potential.loss_scale` [Wh] per segment, kept for the last pair asked."""
    global _LOSS_SCALE
    held = _LOSS_SCALE  # one read: another thread may replace it meanwhile
    if held is None or held[0] is not net or held[1] != vehicle:
        # imported here: the potential needs SciPy, which 'history' and friends never load
        from ev_nav.potential import loss_scale

        scale = loss_scale(net, vehicle)
        scale.setflags(write=False)
        held = _LOSS_SCALE = (net, vehicle, scale)
    return held[2]


def plausible_noise_variance(
    session: Session, segment_ids: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray | float:
    """The least observation-noise variance [Wh²] the plausibility rule allows a reading.

    Per listed segment (``weights`` None): ``(ρ a_e)²`` with ``ρ`` =
    :data:`PLAUSIBLE_NOISE_SPREAD` and ``a_e`` the segment's deterministic loss [Wh] for the
    session's vehicle. For a trip total ``Σ_i weights_i · y(segment_ids_i)`` (``weights`` the
    share of each segment driven): ``ρ² Σ_e h_e a_e²``, independent noise per segment, as
    :meth:`~ev_nav.gp.posterior.SegmentModel.noise_variance` of a loss-scaled learner.
    """
    a = _loss_scale(session.net, session.vehicle)
    if weights is None:
        return (PLAUSIBLE_NOISE_SPREAD * a[np.asarray(segment_ids, dtype=np.int64)]) ** 2
    u, h = combine_weights(segment_ids, weights)
    return PLAUSIBLE_NOISE_SPREAD**2 * float(h @ (a[u] ** 2))


def _named(ids: np.ndarray, most: int = 5) -> str:
    """``segment 7 is`` / ``segments 7, 9 and 12 are`` (the first ``most`` ids, then a count)."""
    shown = [str(int(e)) for e in ids[:most]]
    if ids.size == 1:
        return f"segment {shown[0]} is"
    more = f" and {ids.size - most} more" if ids.size > most else ""
    listed = ", ".join(shown) + more if more else ", ".join(shown[:-1]) + f" and {shown[-1]}"
    return f"segments {listed} are"


def record_total(
    session: Session,
    trip_id: int,
    total_wh: float,
    *,
    force: bool = False,
    on_recorded: Callable[[int], None] | None = None,
    absorb: bool = True,
    route: np.ndarray | None = None,
    start_fraction: float = 0.0,
    end_fraction: float = 1.0,
    temperature_c: float | None = None,
) -> int:
    """Check and record a trip's total energy [Wh] (trip computer), then update the model.

    Returns the observation batch id (see :func:`record_segments`, also for ``absorb``). The
    total covers the planned route, or ``route``, the segments actually driven (a matched GPS
    track, starting ``start_fraction`` along its first segment and ending ``end_fraction``
    along its last); it is then checked against the model's prediction for that route, at
    ``temperature_c`` [°C] where given (recorded with the total, as in :func:`record_segments`).
    """
    require_session(session, "record_total")
    try:  # the store checks it too, but the plausibility check below reads it first
        total_wh = float(total_wh)
    except (TypeError, ValueError):
        raise InvalidObservation(f"trip total must be a number of Wh, got {total_wh!r}") from None
    store, model = session.store, _judging_model(session, temperature_c)
    trip = store.get_trip(trip_id)
    moved = reading_shift(session, trip)
    if route is None and temperature_c is not None:
        # the plan's prediction may be for another temperature: predict the route at this one
        mean, _, sd = _judged_route(session, model, trip.route, np.asarray(trip.shares))
    elif route is None:
        mean = trip.predicted_wh
        # the route's joint sd plus its observation noise (at least the plausible noise)
        noise = model.noise_variance(trip.route, trip.shares)
        floor = plausible_noise_variance(session, trip.route, np.asarray(trip.shares))
        sd = np.sqrt(trip.predicted_sd_wh**2 + max(noise, floor))
    else:
        route = validate_segment_ids(route, session.net.n_segments)
        if route.size == 0:
            raise InvalidObservation(f"trip {trip.id}: the driven route is empty")
        net = session.net
        gaps = np.flatnonzero(net.seg_v[route[:-1]] != net.seg_u[route[1:]])
        if gaps.size:  # its fractions along the first and last segment would mean nothing
            k = int(gaps[0])
            raise InvalidObservation(
                f"trip {trip.id}: the driven route is not a path: segment {int(route[k + 1])} "
                f"does not start where segment {int(route[k])} ends (position {k + 1}; "
                f"{plural(gaps.size, 'gap')})")
        shares = driven_shares(route.size, start_fraction, end_fraction)
        mean, _, sd = _judged_route(session, model, route, shares)
    # what was driven, with the share of each segment: the total's distance, and for another
    # car's total (judged against its prediction, stored as the state's vehicle's) the shift
    # summed with those shares, as the learner weighs the total
    driven, driven_at = (trip.route, np.asarray(trip.shares)) if route is None else (route, shares)
    shift, car = 0.0, ""
    if moved is not None:
        shift = moved.wh(driven, driven_at)
        car = f" ({moved.vehicle_model})"
    check_plausible(
        np.array([float(total_wh)]),
        np.array([mean + shift]),
        np.array([sd]),
        [f"trip {trip.id} total{car}"],
        force=force,
        length_m=[float(session.net.length_m[driven] @ driven_at)],
    )
    batch = store.add_total_observation(
        trip.id, float(total_wh) - shift, route=route, start_fraction=start_fraction,
        end_fraction=end_fraction, temperature_c=temperature_c,
    )
    if absorb:
        _absorb(session, batch, on_recorded)
    elif on_recorded is not None:
        on_recorded(batch)
    return batch


@dataclass(frozen=True)
class RecordedPrediction:
    """What a record's readings are compared with: the prediction an acknowledgement shows.

    Attributes
    ----------
    mean_wh : float
        The predicted energy [Wh] of what was recorded, for the car that drove.
    model_sd_wh : float
        The model's uncertainty about it [Wh] (the route table's "model sd").
    sd_with_noise_wh : float
        ``model_sd_wh`` with one drive's noise added [Wh]: the sd the readings were judged by
        (the noise at least the plausible noise, :func:`plausible_noise_variance`), named
        :data:`~ev_nav.trips.plausibility.SD_WITH_NOISE` wherever it is shown.
    n_segments : int or None
        None when the prediction is the trip's own (a total, or readings of every segment of
        its route); else the number of segments a partial record covers, whose prediction
        this is.
    """

    mean_wh: float
    model_sd_wh: float
    sd_with_noise_wh: float
    n_segments: int | None = None


def recorded_prediction(
    session: Session,
    trip: Trip,
    segment_ids: np.ndarray | None = None,
    *,
    partial: bool = False,
    temperature_c: float | None = None,
    driven: tuple[np.ndarray, float, float] | None = None,
) -> RecordedPrediction:
    """The prediction a record of ``trip`` is compared with (:class:`RecordedPrediction`), one
    rule for ``ev-nav observe`` and the server's acknowledgement.

    A total, or per-segment readings of the whole route (``segment_ids``), are compared with the
    trip's own prediction, or at ``temperature_c`` [°C] with its route predicted at that
    temperature (as :func:`record_total` judges it); readings of part of the route (``partial``
    and some pass of the route unread) with the prediction of the sum of the valid listed
    readings, one term per reading, at ``temperature_c``. ``driven`` (the segments of a
    matched GPS track and the fractions of its first and last driven): a total over the route
    actually driven, judged as :func:`record_total` judges it. A trip planned for another car
    is predicted for that car (:func:`reading_shift`).
    """
    moved = reading_shift(session, trip)
    model = session.model
    if driven is not None:
        route = validate_segment_ids(driven[0], session.net.n_segments)
        shares = driven_shares(route.size, driven[1], driven[2])
        mean, model_sd, sd = _judged_route(
            session, _judging_model(session, temperature_c), route, shares
        )
        shift = 0.0 if moved is None else moved.wh(route, shares)
        return RecordedPrediction(mean + shift, model_sd, sd, int(route.size))
    if segment_ids is not None and partial and _missing_passes(trip.route, segment_ids).size:
        # one term per reading: a segment read on two passes is predicted twice (np.unique
        # counted it once, and a record one pass short was taken for the whole trip)
        valid = (segment_ids >= 0) & (segment_ids < session.net.n_segments)
        on = segment_ids[valid]
        h = _reading_shares(trip, segment_ids, None, 0.0, 1.0)[valid]  # the ends: part-driven
        judging = _judging_model(session, temperature_c)
        predicted = route_energy(judging, on, h)  # the model's noise included: taken off here
        model_sd = math.sqrt(max(predicted.sd_wh**2 - judging.noise_variance(on, h), 0.0))
        # each reading is judged with at least the plausible noise (record_segments)
        floor = plausible_noise_variance(session, on)
        noise = float(h @ np.maximum(_segment_noise(judging, on), floor))
        shift = 0.0 if moved is None else moved.wh(on, h)
        return RecordedPrediction(predicted.mean_wh + shift, model_sd,
                                  math.sqrt(model_sd**2 + noise), int(on.size))
    shares = np.asarray(trip.shares)
    if temperature_c is not None:
        # as record_total judges a total at a temperature: the route predicted at it (the
        # plan's figures, for another temperature, were shown beside a reading judged by these)
        mean, model_sd, sd = _judged_route(
            session, _judging_model(session, temperature_c), trip.route, shares
        )
        shift = 0.0 if moved is None else moved.wh(trip.route, shares)
        return RecordedPrediction(mean + shift, model_sd, sd)
    # as record_total judges the trip's total: its joint sd and the larger of the model's
    # noise and the plausible noise
    noise = max(model.noise_variance(trip.route, shares),
                plausible_noise_variance(session, trip.route, shares))
    shift = 0.0 if moved is None else moved.wh(trip.route, shares)
    return RecordedPrediction(trip.predicted_wh + shift, trip.predicted_sd_wh,
                              math.sqrt(trip.predicted_sd_wh**2 + noise))


def _judged_route(
    session: Session, model: SegmentModel, route: np.ndarray, shares: np.ndarray
) -> tuple[float, float, float]:
    """A driven route's predicted energy [Wh], its model sd and the sd a total over it is
    judged by (the model's, with one drive's noise, at least the plausible noise) [Wh]."""
    predicted = route_energy(model, route, shares)  # joint posterior sd, noise included
    noise = float(model.noise_variance(route, shares))
    model_sd = math.sqrt(max(predicted.sd_wh**2 - noise, 0.0))
    floor = float(plausible_noise_variance(session, route, shares))
    return predicted.mean_wh, model_sd, math.sqrt(model_sd**2 + max(noise, floor))


def _judging_model(session: Session, temperature_c: float | None) -> Any:
    """The model that judges readings: the session's, read at the drive's temperature."""
    if temperature_c is None:
        return session.model
    from ev_nav.gp.temperature import AtTemperature

    return AtTemperature(session.model, temperature_c)


def _absorb(session: Session, batch: int, on_recorded: Callable[[int], None] | None) -> None:
    # The observation is committed (acknowledged) now; a kill from here on loses nothing.
    if on_recorded is not None:
        on_recorded(batch)
    crash_point("observe-acknowledged")
    learn_new(session)  # scored for changes of roads, then learned
    crash_point("observe-model-updated")
    save_checkpoint(session)


def forget_trip(session: Session, trip_id: int) -> int:
    """Remove a trip's observations and rebuild the model without them; returns the number of
    batches removed (see :meth:`ev_nav.store.Store.forget_observations`)."""
    require_session(session, "forget_trip")
    n = session.store.forget_observations(trip_id, detector=forget_in_detector(session))
    session.detector_cache = None  # the stored detector changed
    session.load_model()  # from a checkpoint that never saw them, or the prior
    save_checkpoint(session)
    return n
