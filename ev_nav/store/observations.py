"""Observed energies: batches of per-segment readings or trip totals, each one acknowledged
write; reading them back in commit order, per-trip totals, visit counts."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidObservation, StateError, UnknownSegmentError
from ev_nav.roads.partial import driven_shares, reading_shares
from ev_nav.store.connection import StoreConnection, _utcnow, sha256_hex
from ev_nav.store.trips import Trip, _as_int_array, _trip_key, check_fractions


@dataclass(frozen=True)
class ObservationBatch:
    """Observations recorded by one acknowledged call.

    For ``kind == 'segment'`` the energies are per segment (``energy_wh[i]`` on
    ``segment_ids[i]``), each of the share ``weights[i]`` of its segment the drive covered
    (None: every reading a whole segment's; a share below 1 is the first or last segment of a
    trip that started or ended part-way along it). For ``kind == 'total'`` ``energy_wh`` has one
    entry, the total over the route driven (``segment_ids``: the trip's planned route, or the
    route recorded with the total), each segment counted with ``weights`` (the share of it
    driven: 1 but where the trip started or ended part-way along a segment): a linear
    observation.
    """

    id: int
    trip_id: int
    kind: str
    created: str
    segment_ids: NDArray[np.int64]
    energy_wh: NDArray[np.float64]
    weights: NDArray[np.float64] | None = None
    #: ambient temperature of the drive [°C] (None: not recorded)
    temperature_c: float | None = None



class ObservationsMixin(StoreConnection):
    """Recording, reading and forgetting observations (uses the trips part for the trip)."""

    def add_observations(
        self,
        trip_id: int,
        segment_ids: ArrayLike,
        energies: ArrayLike,
        *,
        allow_off_route: bool = False,
        allow_repeat: bool = False,
        route: ArrayLike | None = None,
        start_fraction: float = 0.0,
        end_fraction: float = 1.0,
        temperature_c: float | None = None,
    ) -> int:
        """Record per-segment energies of a driven trip in one transaction; return the batch id.

        ``route``, when given, is the route actually driven (e.g. matched from a GPS track),
        starting ``start_fraction`` of the way along its first segment and ending
        ``end_fraction`` along its last, kept with the batch; the observed segments must lie on
        it. ``temperature_c``: the drive's ambient temperature [°C], kept with the batch (None:
        not recorded).

        A reading of a segment the route drives only part of (its first or last, when the trip
        starts or ends part-way along it) is the energy of that part: the share it covers
        (:func:`ev_nav.roads.partial.reading_shares`) is kept with it, and the model learns it
        as that share of the segment (:attr:`ObservationBatch.weights`).

        When this returns, the data is committed (acknowledged): no later crash can lose it.
        Negative energies are valid (regeneration downhill); NaN/inf are not.

        Parameters
        ----------
        trip_id : int
            The trip that was driven.
        segment_ids : array_like of int
            Segments observed, one reading per pass: a segment at most as many times as the
            route drives it (once if it is off the route).
        energies : array_like of float
            Energy used on each segment [Wh].
        allow_off_route : bool
            Accept segments that are not on the trip's planned route (the driver deviated).
        allow_repeat : bool
            Accept a second batch for a trip that already has observations (otherwise a re-run
            of the same command would count the trip twice).

        Raises
        ------
        UnknownTripError, InvalidObservation, UnknownSegmentError
        """
        seg = _as_int_array(segment_ids, "segment ids", error=InvalidObservation)
        driven = None
        if route is not None:
            driven = _as_int_array(route, "driven route", error=InvalidObservation)
            if driven.size == 0:
                raise InvalidObservation("the driven route is empty; give at least one segment")
            self._check_segments(driven, "the driven route")
            try:
                fractions = check_fractions(driven.size, start_fraction, end_fraction)
            except StateError as exc:
                raise InvalidObservation(str(exc)) from None
            off = np.setdiff1d(seg, driven)
            if off.size:
                raise InvalidObservation(
                    f"segments {off[:5].tolist()} are not on the driven route given with them"
                )
            allow_off_route = True
        wh = _as_float_array(energies, "energies")
        if seg.shape != wh.shape:
            raise InvalidObservation(
                f"{seg.size} segment ids but {wh.size} energies; give one energy per segment"
            )
        if seg.size == 0:
            raise InvalidObservation("no observations given; give at least one segment energy")
        _require_finite(wh, "segment energies")
        self._check_segments(seg, "the observations")
        temp = _temperature(temperature_c)
        now = _utcnow()
        with self._write("observation", group=True) as conn:
            trip = self._trip_in_txn(conn, trip_id)
            if not allow_off_route:
                off = np.setdiff1d(seg, trip.route)
                if off.size:
                    raise InvalidObservation(
                        f"segments {off[:5].tolist()} are not on the planned route of trip "
                        f"{trip.id}; check the file belongs to this trip"
                    )
            _check_passes(seg, trip.route if driven is None else driven)
            self._check_repeat(conn, trip.id, allow_repeat)
            if driven is None:
                shares = reading_shares(trip.route, trip.shares, seg)
            else:
                shares = reading_shares(driven, driven_shares(driven.size, *fractions), seg)
            batch = self._new_batch(conn, trip.id, "segment", seg.size, now, temp)
            if driven is not None:
                conn.execute(
                    "UPDATE observation_batches SET route_json = ?, start_fraction = ?, "
                    "end_fraction = ? WHERE id = ?",
                    (json.dumps(driven.tolist()), *fractions, batch),
                )
            conn.executemany(
                """INSERT INTO observations(batch_id, trip_id, kind, segment_id, energy_wh,
                       created, share) VALUES (?, ?, 'segment', ?, ?, ?, ?)""",
                ((batch, trip.id, int(s), float(e), now, None if h == 1.0 else float(h))
                 for s, e, h in zip(seg, wh, shares, strict=True)),
            )
            conn.execute("UPDATE trips SET status = 'observed' WHERE id = ?", (trip.id,))
        return batch

    def add_total_observation(
        self,
        trip_id: int,
        total_wh: float,
        *,
        allow_repeat: bool = False,
        route: ArrayLike | None = None,
        start_fraction: float = 0.0,
        end_fraction: float = 1.0,
        temperature_c: float | None = None,
    ) -> int:
        """Record only the trip's total energy (the trip computer's reading); return the batch id.

        The total covers the trip's planned route, or ``route`` (the segments actually driven,
        e.g. map-matched from a GPS track, starting ``start_fraction`` of the way along its first
        segment and ending ``end_fraction`` along its last). Any finite value is stored: a
        descent can regenerate more than a drive uses, so a total may be negative; whether a
        reading is plausible is the recorder's judgement against the prediction
        (:func:`ev_nav.trips.plausibility.check_plausible`). ``temperature_c``: the drive's
        ambient temperature [°C] (None: not recorded).

        Raises
        ------
        UnknownTripError, InvalidObservation
        """
        try:
            value = float(total_wh)
        except (TypeError, ValueError):
            raise InvalidObservation(f"trip total must be a number, got {total_wh!r}") from None
        if not math.isfinite(value):
            raise InvalidObservation(f"trip total must be a finite number of Wh, got {value}")
        driven: tuple[str, float, float] | None = None
        if route is not None:
            seg = _as_int_array(route, "driven route", error=InvalidObservation)
            if seg.size == 0:
                raise InvalidObservation("the driven route of a trip total has no segments")
            self._check_segments(seg, "the driven route")
            try:
                fs, fg = check_fractions(seg.size, start_fraction, end_fraction)
            except StateError as exc:
                raise InvalidObservation(str(exc)) from None
            driven = (json.dumps(seg.tolist()), fs, fg)
        temp = _temperature(temperature_c)
        now = _utcnow()
        with self._write("observation", group=True) as conn:
            trip = self._trip_in_txn(conn, trip_id)
            self._check_repeat(conn, trip.id, allow_repeat)
            batch = self._new_batch(conn, trip.id, "total", 1, now, temp)
            if driven is not None:
                conn.execute(
                    "UPDATE observation_batches SET route_json = ?, start_fraction = ?, "
                    "end_fraction = ? WHERE id = ?",
                    (*driven, batch),
                )
            conn.execute(
                """INSERT INTO observations(batch_id, trip_id, kind, segment_id, energy_wh,
                       created) VALUES (?, ?, 'total', NULL, ?, ?)""",
                (batch, trip.id, value, now),
            )
            conn.execute("UPDATE trips SET status = 'observed' WHERE id = ?", (trip.id,))
        return batch

    def forget_observations(
        self, trip_id: int, detector: Callable[[bytes, np.ndarray], bytes] | None = None
    ) -> int:
        """Remove every observation of a trip (it becomes ``planned`` again); returns how many
        batches went.

        Checkpoints that had absorbed any of them are deleted in the same transaction, so the
        next model load starts from an older checkpoint (or the prior) and replays only the
        observations that remain: the model forgets the trip exactly. ``detector`` maps the
        stored change detector's state and the forgotten per-segment readings' segment ids to
        its state without them, written in the same transaction (a taken-back reading left its
        evidence in the detector, which later flagged a road that had not changed).
        """
        with self._write("forget") as conn:
            trip = self._trip_in_txn(conn, trip_id)
            ids = [int(r[0]) for r in conn.execute(
                "SELECT id FROM observation_batches WHERE trip_id = ?", (trip.id,)
            )]
            if not ids:
                raise InvalidObservation(f"trip {trip.id} has no observations to forget")
            first = min(ids)
            if detector is not None:
                self._forget_in_detector(conn, trip.id, detector)
            # a change flagged by a reading of this trip goes with its evidence (the readings
            # it set aside are counted again); the changes module explains the rows
            conn.execute(
                "DELETE FROM segment_changes WHERE alarm_batch IN "
                "(SELECT id FROM observation_batches WHERE trip_id = ?)",
                (trip.id,),
            )
            conn.execute("DELETE FROM observations WHERE trip_id = ?", (trip.id,))
            conn.execute("DELETE FROM observation_batches WHERE trip_id = ?", (trip.id,))
            conn.execute("DELETE FROM checkpoints WHERE last_batch_id >= ?", (first,))
            conn.execute("UPDATE trips SET status = 'planned' WHERE id = ?", (trip.id,))
            return len(ids)

    @staticmethod
    def _forget_in_detector(
        conn: sqlite3.Connection, trip_id: int, detector: Callable[[bytes, np.ndarray], bytes]
    ) -> None:
        """Rewrite the stored detector state without the trip's per-segment readings that it
        has scored (none: nothing to do)."""
        row = conn.execute("SELECT scored_upto, blob FROM change_detector WHERE id = 1").fetchone()
        if row is None:
            return
        scored = [int(r[0]) for r in conn.execute(
            "SELECT segment_id FROM observations WHERE trip_id = ? AND kind = 'segment' "
            "AND share IS NULL AND batch_id <= ? ORDER BY id", (trip_id, int(row[0])))]
        if not scored:
            return
        blob = detector(bytes(row[1]), np.asarray(scored, dtype=np.int64))
        conn.execute(
            "UPDATE change_detector SET sha256 = ?, blob = ?, updated = ? WHERE id = 1",
            (sha256_hex(blob), sqlite3.Binary(blob), _utcnow()),
        )

    @staticmethod
    def _check_repeat(conn: sqlite3.Connection, trip_id: int, allow_repeat: bool) -> None:
        if allow_repeat:
            return
        row = conn.execute(
            "SELECT id, kind FROM observation_batches WHERE trip_id = ? ORDER BY id LIMIT 1",
            (trip_id,),
        ).fetchone()
        if row is not None:
            raise InvalidObservation(
                f"trip {trip_id} already has observations (batch {row[0]}, {row[1]}); each "
                "trip is observed once - plan a new trip for a new drive"
            )

    @staticmethod
    def _new_batch(
        conn: sqlite3.Connection, trip_id: int, kind: str, n: int, now: str,
        temperature_c: float | None = None,
    ) -> int:
        cur = conn.execute(
            "INSERT INTO observation_batches(trip_id, kind, created, n_rows) VALUES (?, ?, ?, ?)",
            (trip_id, kind, now, int(n)),
        )
        batch = int(cur.lastrowid)
        if temperature_c is not None:  # an UPDATE, as the driven route: the INSERT stays as it was
            conn.execute("UPDATE observation_batches SET temperature_c = ? WHERE id = ?",
                         (temperature_c, batch))
        return batch

    def observations(
        self,
        trip_id: int | None = None,
        *,
        kind: str | None = None,
        after_batch: int = 0,
    ) -> list[ObservationBatch]:
        """Recorded observation batches in commit order.

        Parameters
        ----------
        trip_id : int, optional
            Only this trip's batches (:class:`UnknownTripError` if the trip does not exist).
        kind : {'segment', 'total'}, optional
            Only batches of this kind.
        after_batch : int
            Only batches with a larger id (e.g. ``Checkpoint.last_batch_id``: the data a
            checkpointed model has not seen yet).
        """
        if kind not in (None, "segment", "total"):
            raise InvalidObservation(f"unknown observation kind {kind!r}; use segment or total")
        if trip_id is not None:
            self.get_trip(trip_id)
        where = "WHERE b.id > ?"
        params: list[Any] = [int(after_batch)]
        if trip_id is not None:
            where += " AND b.trip_id = ?"
            params.append(_trip_key(trip_id))
        if kind is not None:
            where += " AND b.kind = ?"
            params.append(kind)
        with self._read() as conn:  # one snapshot for both queries
            heads = conn.execute(
                "SELECT b.id, b.trip_id, b.kind, b.created, "
                "CASE b.kind WHEN 'total' THEN COALESCE(b.route_json, t.route_json) END, "
                "COALESCE(b.start_fraction, t.start_fraction), "
                "COALESCE(b.end_fraction, t.end_fraction), b.temperature_c "
                f"FROM observation_batches b JOIN trips t ON t.id = b.trip_id {where} "
                "ORDER BY b.id",
                params,
            ).fetchall()
            rows = conn.execute(
                "SELECT o.batch_id, COALESCE(o.segment_id, -1), o.energy_wh, o.share "
                f"FROM observations o JOIN observation_batches b ON b.id = o.batch_id {where} "
                "ORDER BY o.batch_id, o.id",
                params,
            ).fetchall()
        try:
            table = np.array(rows, dtype=np.float64).reshape(-1, 4)  # a NULL share: NaN
            if not np.isfinite(table[:, 2]).all():
                raise ValueError("an energy that is not a finite number")
            if ((table[:, 3] < 0) | (table[:, 3] >= 1)).any():
                raise ValueError("a share outside [0, 1)")
        except (TypeError, ValueError) as exc:
            bad = next((r[0] for r in rows if not (is_finite_number(r[1])
                                                    and is_finite_number(r[2]))), "?")
            raise self._damaged_record(f"an observation of batch {bad}", exc) from None
        batch_col = table[:, 0].astype(np.int64)
        seg_col = table[:, 1].astype(np.int64)  # ids < 2**53 are exact in float64
        bids = np.array([h[0] for h in heads], dtype=np.int64)
        lo = np.searchsorted(batch_col, bids, side="left")
        hi = np.searchsorted(batch_col, bids, side="right")
        out: list[ObservationBatch] = []
        for (bid, tid, bkind, created, route_json, fs, fg, temp), i, j in zip(
            heads, lo, hi, strict=True
        ):
            weights = None
            if bkind == "segment":
                seg = seg_col[i:j].copy()
                part = table[i:j, 3]
                if not np.isnan(part).all():  # NULL: a whole segment, as every earlier reading
                    weights = np.where(np.isnan(part), 1.0, part)
            else:
                try:
                    seg = np.asarray(json.loads(route_json), dtype=np.int64)
                    weights = driven_shares(seg.size, float(fs), float(fg))
                except (TypeError, ValueError, OverflowError) as exc:
                    raise self._damaged_record(f"the route of batch {bid}", exc) from None
            wh = table[i:j, 2].copy()
            out.append(
                ObservationBatch(int(bid), int(tid), str(bkind), str(created), seg, wh, weights,
                                 None if temp is None else float(temp))
            )
        return out

    def n_observations(self) -> int:
        """Number of observation rows (segment energies plus trip totals)."""
        return int(self._conn.execute("SELECT COUNT(*) FROM observations").fetchone()[0])

    def n_batches_after(self, batch_id: int) -> int:
        """How many observation batches were committed after batch ``batch_id``."""
        return int(
            self._conn.execute(
                "SELECT COUNT(*) FROM observation_batches WHERE id > ?", (int(batch_id),)
            ).fetchone()[0]
        )

    def last_batch_id(self) -> int:
        """Id of the newest observation batch (0 if none)."""
        row = self._conn.execute("SELECT MAX(id) FROM observation_batches").fetchone()
        return int(row[0] or 0)

    def observed_total(self, trip_id: int) -> float | None:
        """Observed energy of a trip [Wh]: its total reading, else the sum of its segment
        energies if they cover the whole planned route, else ``None``."""
        trip = self.get_trip(trip_id)
        return _observed_total(trip, self.observations(trip.id))

    def history(self) -> list[tuple[Trip, float | None, float | None]]:
        """Every trip with its observed energy [Wh] (see :meth:`observed_total`) and the ambient
        temperature [°C] its observations were recorded at (:func:`_observed_temperature`; None:
        not recorded), oldest first.

        Reads the state once (one snapshot), not once per trip.
        """
        with self._read():
            trips = self.list_trips()
            batches = self.observations()
        per_trip: dict[int, list[ObservationBatch]] = {}
        for b in batches:
            per_trip.setdefault(b.trip_id, []).append(b)
        return [
            (t, _observed_total(t, per_trip.get(t.id, [])),
             _observed_temperature(per_trip.get(t.id, [])))
            for t in trips
        ]

    def visit_counts(self, n_segments: int | None = None, *, observed_only: bool = True) -> NDArray:
        """How many (observed) trips' planned routes passed each segment, shape (n_segments,).

        Parameters
        ----------
        n_segments : int, optional
            Length of the result (default: the network size recorded at creation).
        observed_only : bool
            Count only trips with at least one observation (i.e. trips actually driven).
        """
        n = n_segments if n_segments is not None else self.n_segments
        if n is None:
            raise StateError("the state does not record the network size; pass n_segments")
        # the route driven where an observation recorded one (a GPS track), else the planned one
        sql = (
            "SELECT COALESCE((SELECT b.route_json FROM observation_batches b WHERE "
            "b.trip_id = t.id AND b.route_json IS NOT NULL ORDER BY b.id DESC LIMIT 1), "
            "t.route_json) FROM trips t"
        )
        if observed_only:
            sql += " WHERE t.status = 'observed'"
        routes = [json.loads(r[0]) for r in self._conn.execute(sql)]
        if not routes:
            return np.zeros(int(n), dtype=np.int64)
        flat = np.concatenate([np.asarray(r, dtype=np.int64) for r in routes])
        if flat.size and flat.max() >= n:
            raise UnknownSegmentError(
                f"recorded routes use segment {int(flat.max())} but n_segments is {n}"
            )
        return np.bincount(flat, minlength=int(n)).astype(np.int64)

    def settle_batch_rows(self, batch_ids: Sequence[int]) -> int:
        """Take each given batch as the rows it still has (``doctor --repair`` of a salvaged
        database: its lost readings cannot be restored, and the model is rebuilt from what is
        left). A batch with no row left goes, with a change it flagged, and its trip is
        planned again if it has no other batch. Returns how many batches changed."""
        with self._write() as conn:
            for b in map(int, batch_ids):
                (n,) = conn.execute(
                    "SELECT COUNT(*) FROM observations WHERE batch_id = ?", (b,)).fetchone()
                if n:
                    conn.execute("UPDATE observation_batches SET n_rows = ? WHERE id = ?",
                                 (int(n), b))
                    continue
                row = conn.execute("SELECT trip_id FROM observation_batches WHERE id = ?",
                                   (b,)).fetchone()
                conn.execute("DELETE FROM segment_changes WHERE alarm_batch = ?", (b,))
                conn.execute("DELETE FROM observation_batches WHERE id = ?", (b,))
                if row is not None and conn.execute(
                        "SELECT COUNT(*) FROM observation_batches WHERE trip_id = ?",
                        (row[0],)).fetchone()[0] == 0:
                    conn.execute("UPDATE trips SET status = 'planned' WHERE id = ?", (row[0],))
            return len(batch_ids)


def segment_passes(
    route: ArrayLike, readings: ArrayLike
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Per segment of ``route`` or ``readings`` (sorted ids): how often the route drives it and
    how many readings list it. A route may pass a segment twice (via points can take it back
    over a road): its per-segment observation then has one reading per pass."""
    route_ids = np.asarray(route, dtype=np.int64).reshape(-1)
    read_ids = np.asarray(readings, dtype=np.int64).reshape(-1)
    ids, inv = np.unique(np.concatenate([route_ids, read_ids]), return_inverse=True)
    driven = np.bincount(inv[: route_ids.size], minlength=ids.size)
    listed = np.bincount(inv[route_ids.size:], minlength=ids.size)
    return ids, driven, listed


def _check_passes(seg: NDArray[np.int64], route: NDArray[np.int64]) -> None:
    """Each segment listed at most as often as ``route`` drives it (one reading per pass; a
    segment off the route, where that is allowed, once)."""
    ids, driven, listed = segment_passes(route, seg)
    allowed = np.maximum(driven, 1)
    over = np.flatnonzero(listed > allowed)
    if over.size:
        k = over[0]
        raise InvalidObservation(
            f"segment {int(ids[k])} has {int(listed[k])} readings but the route drives it "
            f"{int(allowed[k])} time(s); give one reading per pass"
        )


def _observed_total(trip: Trip, batches: Sequence[ObservationBatch]) -> float | None:
    """A trip's observed energy from its batches: the latest total reading if any, else the sum
    of per-segment energies when they cover every pass of the planned route (a segment driven
    twice needs two readings; the latest ones count), else ``None``."""
    # a total whose row was lost on a damaged page (doctor reports it) tells nothing
    totals = [b for b in batches if b.kind == "total" and b.energy_wh.size]
    if totals:
        return float(totals[-1].energy_wh[0])
    per_seg: dict[int, list[float]] = {}
    for b in batches:
        if b.kind == "segment":
            for e, wh in zip(b.segment_ids.tolist(), b.energy_wh.tolist(), strict=True):
                per_seg.setdefault(int(e), []).append(wh)
    on, passes = np.unique(trip.route, return_counts=True)
    if not per_seg or any(len(per_seg.get(int(e), ())) < k for e, k in zip(on, passes,
                                                                          strict=True)):
        return None  # part of the route was not observed: the trip total is unknown
    return float(sum(sum(per_seg[int(e)][-int(k):]) for e, k in zip(on, passes, strict=True)))


def _observed_temperature(batches: Sequence[ObservationBatch]) -> float | None:
    """The ambient temperature [°C] of a trip's observed energy (:func:`_observed_total`): that
    of its latest total reading if it has one, else of its newest per-segment batch that records
    one; ``None`` when none is recorded."""
    totals = [b for b in batches if b.kind == "total" and b.energy_wh.size]
    if totals:
        return totals[-1].temperature_c
    temps = [b.temperature_c for b in batches if b.kind == "segment"]
    known = [t for t in temps if t is not None]
    return known[-1] if known else None


def _as_float_array(values: ArrayLike, what: str) -> NDArray[np.float64]:
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise InvalidObservation(f"{what} must be numbers") from None
    return arr


def _require_finite(arr: NDArray[np.float64], what: str) -> None:
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise InvalidObservation(
            f"{what} must be finite; entries {bad[:5].tolist()} are {arr[bad[:5]].tolist()}"
        )


def _temperature(value: float | None) -> float | None:
    """A drive's ambient temperature [°C] checked (:func:`ev_nav.energy.check_temperature`)."""
    if value is None:
        return None
    from ev_nav.energy import check_temperature

    return float(check_temperature(value))


def is_finite_number(value: object) -> bool:
    """Whether a stored value (an energy, a segment id) reads as a finite number (SQLite keeps
    what it is given, whatever the column's type)."""
    try:
        return math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
