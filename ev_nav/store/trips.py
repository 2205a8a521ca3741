"""Planned trips: validating and recording a plan, reading trips back."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import StateError, UnknownSegmentError, UnknownTripError
from ev_nav.roads.partial import driven_shares
from ev_nav.store.connection import StoreConnection, _utcnow

TRIP_STATUSES: tuple[str, ...] = ("planned", "observed")


@dataclass(frozen=True)
class Trip:
    """One planned (and possibly driven) trip.

    Attributes
    ----------
    id : int
        Trip id, unique within the state, increasing.
    created : str
        UTC time of planning (ISO 8601).
    origin_segment, goal_segment : int
        First and last segment of the route.
    policy : str
        Routing policy used (``ts``, ``bucb``, ``ucb``, ``mean``, …).
    seed : int or None
        Seed of the policy's random draw, if any.
    route : ndarray of int64
        Planned segment ids in driving order.
    predicted_wh, predicted_sd_wh : float
        Predicted route energy and its standard deviation at planning time [Wh].
    length_m, time_s : float
        Route length [m] and free-flow travel time [s].
    status : str
        ``planned`` or ``observed`` (at least one observation recorded).
    vehicle_id : int
        Vehicle that the trip was planned for.
    extra : dict
        Free-form JSON data (alternatives, coordinates, …).
    start_fraction, end_fraction : float
        Where along the route's first segment the trip starts and along its last it ends (0 =
        the segment's start node, 1 = its end node).
    temperature_c : float or None
        Ambient temperature the trip was planned at [°C] (None: the model's reference
        conditions).
    """

    id: int
    created: str
    origin_segment: int
    goal_segment: int
    policy: str
    seed: int | None
    route: NDArray[np.int64]
    predicted_wh: float
    predicted_sd_wh: float
    length_m: float
    time_s: float
    status: str
    vehicle_id: int
    extra: dict[str, Any] = field(default_factory=dict)
    start_fraction: float = 0.0
    end_fraction: float = 1.0
    temperature_c: float | None = None

    @property
    def shares(self) -> NDArray[np.float64]:
        """The share of each route segment the trip drives (1 but at the two ends)."""
        return driven_shares(self.route.size, self.start_fraction, self.end_fraction)



@dataclass(frozen=True)
class TripPlan:
    """A planned trip as :meth:`Store.add_trip` records it.

    Attributes
    ----------
    origin_segment, goal_segment : int
        First and last segment of the route.
    policy : str
        Index rule that planned it (``ts``, ``mean``, …).
    route : array_like of int
        Segment ids from origin to goal.
    predicted_wh, predicted_sd_wh : float
        Predicted energy of the route and its sd [Wh].
    length_m, time_s : float
        Route length [m] and free-flow time [s].
    seed : int, optional
        Seed of the Thompson draw that planned it.
    vehicle_id : int, optional
        Vehicle that drives it (default: the current vehicle).
    extra : dict, optional
        JSON-serialisable extra data.
    start_fraction, end_fraction : float
        Where along the first segment the trip starts and along the last it ends (0..1).
    temperature_c : float, optional
        Ambient temperature the trip was predicted at [°C].
    """

    origin_segment: int
    goal_segment: int
    policy: str
    route: ArrayLike
    predicted_wh: float
    predicted_sd_wh: float
    length_m: float
    time_s: float
    seed: int | None = None
    vehicle_id: int | None = None
    extra: dict[str, Any] | None = None
    start_fraction: float = 0.0
    end_fraction: float = 1.0
    temperature_c: float | None = None



class TripsMixin(StoreConnection):
    """Recording planned trips and reading them back."""

    def _check_segments(self, ids: NDArray[np.int64], what: str) -> None:
        n = self.n_segments
        if ids.size and (ids.min() < 0 or (n is not None and ids.max() >= n)):
            limit = n if n is not None else np.iinfo(np.int64).max
            bad = ids[(ids < 0) | (ids >= limit)]
            valid = f"0..{n - 1}" if n is not None else "non-negative ids"
            raise UnknownSegmentError(
                f"{what} contains segment ids outside {valid}: {bad[:5].tolist()}; "
                "check that the data belongs to this state's network"
            )

    def add_trip(self, **fields: Any) -> int:
        """Record a planned trip and return its id (after the commit).

        ``fields`` are those of :class:`TripPlan` (origin and goal segment, policy, route,
        predicted energy and sd, length, time, optional seed, vehicle id and extra data).

        Raises
        ------
        StateError
            For an empty route, a route that does not run from origin to goal, non-finite or
            negative figures, or an unknown vehicle.
        UnknownSegmentError
            For segment ids outside the network.
        """
        row = self._trip_row(TripPlan(**fields))
        with self._write() as conn:
            return self._insert_trip(conn, None, row)

    def plan_trip(self, plan: Callable[[int], TripPlan]) -> int:
        """Reserve the next trip id, call ``plan(trip_id)`` and record the :class:`TripPlan` it
        returns.

        ``plan`` runs inside the write transaction, so the id it is given is the one the trip
        gets even while other processes plan on the same state (they wait their turn). Use it to
        derive per-trip seeds from the id: two concurrent trips can then never share a seed.
        If ``plan`` raises, nothing is recorded.
        """
        with self._write(group=True) as conn:
            trip_id = self._next_trip_id(conn)
            row = self._trip_row(plan(trip_id))
            return self._insert_trip(conn, trip_id, row)

    def next_trip_id(self) -> int:
        """The id the next planned trip gets, unless another process plans one first (what a
        dry run shows; it reserves nothing)."""
        with self._read() as conn:
            return self._next_trip_id(conn)

    @staticmethod
    def _next_trip_id(conn: sqlite3.Connection) -> int:
        return int(
            conn.execute(
                "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'trips'), "
                "0), COALESCE((SELECT MAX(id) FROM trips), 0)) + 1"
            ).fetchone()[0]
        )

    def _insert_trip(self, conn: sqlite3.Connection, trip_id: int | None, row: tuple) -> int:
        cur = conn.execute(
            """INSERT INTO trips(id, created, origin_segment, goal_segment, policy, seed,
                   route_json, predicted_wh, predicted_sd_wh, length_m, time_s, status,
                   extra_json, vehicle_id, start_fraction, end_fraction, temperature_c)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'planned', ?, ?, ?, ?, ?)""",
            (trip_id, *row),
        )
        return int(cur.lastrowid)

    def _trip_row(self, plan: TripPlan) -> tuple:
        """Validate a trip's fields and return its row (without the id)."""
        origin_segment, goal_segment = plan.origin_segment, plan.goal_segment
        seg = _as_int_array(plan.route, "route")
        if seg.size == 0:
            raise StateError("a trip needs a non-empty route")
        if int(seg[0]) != int(origin_segment) or int(seg[-1]) != int(goal_segment):
            raise StateError(
                f"route runs from segment {int(seg[0])} to {int(seg[-1])}, but the trip is "
                f"from {origin_segment} to {goal_segment}"
            )
        self._check_segments(seg, "the route")
        fs, fg = check_fractions(seg.size, plan.start_fraction, plan.end_fraction)
        figures = {
            "predicted_wh": plan.predicted_wh,
            "predicted_sd_wh": plan.predicted_sd_wh,
            "length_m": plan.length_m,
            "time_s": plan.time_s,
        }
        for name, value in figures.items():
            if not math.isfinite(float(value)):
                raise StateError(f"trip {name} must be finite, got {value}")
        for name in ("predicted_sd_wh", "length_m", "time_s"):
            if float(figures[name]) < 0:
                raise StateError(f"trip {name} must be >= 0, got {figures[name]}")
        temperature = plan.temperature_c
        if temperature is not None and not math.isfinite(float(temperature)):
            raise StateError(f"trip temperature_c must be finite, got {temperature}")
        try:
            extra_json = json.dumps(plan.extra or {}, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StateError(f"trip extra data is not JSON-serialisable: {exc}") from None
        vid = self.vehicle(plan.vehicle_id).id
        return (
            _utcnow(),
            int(origin_segment),
            int(goal_segment),
            str(plan.policy),
            None if plan.seed is None else int(plan.seed),
            json.dumps(seg.tolist()),
            *(float(v) for v in figures.values()),
            extra_json,
            vid,
            fs,
            fg,
            None if temperature is None else float(temperature),
        )

    _TRIP_COLUMNS = (
        "id, created, origin_segment, goal_segment, policy, seed, route_json, predicted_wh, "
        "predicted_sd_wh, length_m, time_s, status, vehicle_id, extra_json, start_fraction, "
        "end_fraction, temperature_c"
    )

    def _trip_from_row(self, row: Sequence[Any]) -> Trip:
        try:
            return self._decode_trip(row)
        except (TypeError, ValueError, OverflowError) as exc:  # JSONDecodeError is a ValueError
            raise self._damaged_record(f"trip {row[0]}", exc) from None

    @staticmethod
    def _decode_trip(row: Sequence[Any]) -> Trip:
        return Trip(
            id=int(row[0]),
            created=str(row[1]),
            origin_segment=int(row[2]),
            goal_segment=int(row[3]),
            policy=str(row[4]),
            seed=None if row[5] is None else int(row[5]),
            route=np.asarray(json.loads(row[6]), dtype=np.int64),
            predicted_wh=float(row[7]),
            predicted_sd_wh=float(row[8]),
            length_m=float(row[9]),
            time_s=float(row[10]),
            status=str(row[11]),
            vehicle_id=int(row[12]),
            extra=json.loads(row[13]),
            start_fraction=float(row[14]),
            end_fraction=float(row[15]),
            temperature_c=None if row[16] is None else float(row[16]),
        )

    def get_trip(self, trip_id: int) -> Trip:
        """The trip ``trip_id``; :class:`UnknownTripError` if there is none."""
        row = self._conn.execute(
            f"SELECT {self._TRIP_COLUMNS} FROM trips WHERE id = ?", (_trip_key(trip_id),)
        ).fetchone()
        if row is None:
            raise UnknownTripError(self._unknown_trip_message(trip_id))
        return self._trip_from_row(row)

    def _unknown_trip_message(self, trip_id: object) -> str:
        lo, hi, n = self._conn.execute("SELECT MIN(id), MAX(id), COUNT(*) FROM trips").fetchone()
        known = "the state has no trips yet" if n == 0 else f"known trip ids: {lo}..{hi}"
        return f"unknown trip id {trip_id!r} ({known}); see 'ev-nav history'"

    def list_trips(self) -> list[Trip]:
        """All trips, oldest first."""
        rows = self._conn.execute(f"SELECT {self._TRIP_COLUMNS} FROM trips ORDER BY id")
        return [self._trip_from_row(r) for r in rows]

    def n_trips(self) -> int:
        """Number of recorded trips."""
        return int(self._conn.execute("SELECT COUNT(*) FROM trips").fetchone()[0])

    def _trip_in_txn(self, conn: sqlite3.Connection, trip_id: int) -> Trip:
        row = conn.execute(
            f"SELECT {self._TRIP_COLUMNS} FROM trips WHERE id = ?", (_trip_key(trip_id),)
        ).fetchone()
        if row is None:
            raise UnknownTripError(self._unknown_trip_message(trip_id))
        return self._trip_from_row(row)


def _trip_key(trip_id: object) -> int:
    try:
        if isinstance(trip_id, bool):
            raise TypeError
        key = int(trip_id)  # type: ignore[call-overload]
        if isinstance(trip_id, float) and not float(trip_id).is_integer():
            raise ValueError
        if not -(2**63) <= key < 2**63:  # beyond SQLite's INTEGER: cannot be a trip id
            raise UnknownTripError(f"no trip {key} in this state; see 'ev-nav history'")
    except (TypeError, ValueError):
        raise UnknownTripError(
            f"trip id must be a whole number, got {trip_id!r}; see 'ev-nav history'"
        ) from None
    return key


def _as_int_array(
    values: ArrayLike, what: str, *, error: type[Exception] = StateError
) -> NDArray[np.int64]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise error(f"{what} must be a 1-D list of integers, got shape {arr.shape}")
    if arr.size == 0:
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.round(arr)):
            raise error(f"{what} must be whole numbers")
    elif arr.dtype.kind not in "iu":
        raise error(f"{what} must be integers, got {arr.dtype}")
    return arr.astype(np.int64)


def check_fractions(n_segments: int, start: float, end: float) -> tuple[float, float]:
    """Check where a route of ``n_segments`` starts and ends along its end segments (each in
    [0, 1]; on a one-segment route the end after the start) and return them as floats."""
    try:
        fs, fg = float(start), float(end)
    except (TypeError, ValueError):
        raise StateError(f"route fractions must be numbers, got {start!r}, {end!r}") from None
    if not (0.0 <= fs <= 1.0 and 0.0 <= fg <= 1.0):
        raise StateError(f"route fractions must lie in [0, 1], got {fs}, {fg}")
    if n_segments == 1 and fg <= fs:
        raise StateError(
            f"a one-segment route must end after it starts along the segment ({fs} -> {fg})"
        )
    return fs, fg
