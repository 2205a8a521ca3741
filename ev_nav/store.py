"""Persistent per-driver state in SQLite: network reference, vehicles, trips, observations, models.

A *state directory* holds one SQLite database (``ev-nav.sqlite``) in WAL mode. Every write is one
``BEGIN IMMEDIATE`` transaction committed with ``synchronous=FULL``, so

* killing the process at any instant leaves either the old or the new state, never a mixture, and
  a method that has returned (an *acknowledged* write) survives the kill;
* a model checkpoint that fails to write (disk full, kill, exception) rolls back and leaves the
  previous checkpoint current;
* two processes writing to the same state take turns: the second waits on SQLite's busy timeout
  instead of failing or corrupting the file.

The schema is versioned with ``PRAGMA user_version`` and upgraded by the ordered list
:data:`MIGRATIONS` when an older state is opened. The store knows nothing about models: a
checkpoint is an opaque byte string that the caller serialises (pickle-free, with
:mod:`ev_nav.checkpoints`); :meth:`Store.checkpoints` lists the kept ones newest first so a caller
can fall back from a damaged one.

Typical use::

    store = Store.create(state_dir, net.content_hash, "synthetic:2000:0", "gp",
                         vehicle_dict, n_segments=net.n_segments)
    store = Store.open(state_dir); store.check_network(net.content_hash)
    trip_id = store.add_trip(origin_segment=route[0], goal_segment=route[-1], policy="ts",
                             route=route, predicted_wh=mu, predicted_sd_wh=sd,
                             length_m=L, time_s=T, seed=seed)
    store.add_observations(trip_id, segment_ids, energies_wh)   # or add_total_observation
    ck = store.latest_checkpoint()                  # restore the model from ck.blob, then
    for batch in store.observations(after_batch=ck.last_batch_id if ck else 0):
        ...                                         # apply the batches the model has not seen
    store.save_checkpoint(blob, n_obs=store.n_observations())
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import (
    InvalidObservation,
    ModelStateError,
    StateDamagedError,
    StateError,
    StateIOError,
    UnknownSegmentError,
    UnknownTripError,
)
from ev_nav.faults import crash_point

#: File name of the database inside a state directory.
DB_NAME = "ev-nav.sqlite"

#: How long a writer waits for another process's transaction before giving up [ms].
BUSY_TIMEOUT_MS = 60_000

#: Checkpoints kept per state (older ones are pruned when a new one is saved).
KEEP_CHECKPOINTS = 3

MODEL_KINDS: tuple[str, ...] = ("gp", "bi")
TRIP_STATUSES: tuple[str, ...] = ("planned", "observed")


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"

# Messages of sqlite3.OperationalError that mean the medium, not the data, is the problem.
_IO_MARKERS = (
    "disk i/o error",
    "database or disk is full",
    "readonly database",
    "read-only",
    "unable to open database file",
    "permission denied",
)


def io_problem(exc: BaseException) -> bool:
    """Whether an SQLite error is an I/O problem (full disk, read-only, permissions), which says
    nothing about the state's data being damaged."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _IO_MARKERS)


def _db_error(path: Path, exc: sqlite3.Error) -> StateError:
    """The named error for an SQLite failure on ``path``: I/O problem or damaged database."""
    if io_problem(exc):
        return StateIOError(
            f"cannot use the state {path} ({exc}): an I/O problem (full disk, read-only file "
            "system or permissions); the state itself was not changed - fix that and retry"
        )
    return StateDamagedError(
        f"the state database {path} is damaged ({exc}); run 'ev-nav doctor {path.parent}' "
        "to check it and salvage every readable trip and observation"
    )


def _utcnow() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")


# ====================================================================== schema & migrations
# Each migration upgrades the schema by exactly one version and runs inside one transaction
# together with the ``user_version`` bump, so a kill during an upgrade leaves the old version.
_V1_STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE trips (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        created         TEXT NOT NULL,
        origin_segment  INTEGER NOT NULL,
        goal_segment    INTEGER NOT NULL,
        policy          TEXT NOT NULL,
        seed            INTEGER,
        route_json      TEXT NOT NULL,
        predicted_wh    REAL NOT NULL,
        predicted_sd_wh REAL NOT NULL CHECK (predicted_sd_wh >= 0),
        length_m        REAL NOT NULL CHECK (length_m >= 0),
        time_s          REAL NOT NULL CHECK (time_s >= 0),
        status          TEXT NOT NULL DEFAULT 'planned'
                        CHECK (status IN ('planned', 'observed')),
        extra_json      TEXT NOT NULL DEFAULT '{}'
    )""",
    # One row per call of add_observations / add_total_observation: the unit of acknowledgement.
    """CREATE TABLE observation_batches (
        id      INTEGER PRIMARY KEY AUTOINCREMENT,
        trip_id INTEGER NOT NULL REFERENCES trips(id),
        kind    TEXT NOT NULL CHECK (kind IN ('segment', 'total')),
        created TEXT NOT NULL,
        n_rows  INTEGER NOT NULL CHECK (n_rows >= 1)
    )""",
    # energy_wh NOT NULL also rejects NaN: SQLite stores a NaN REAL as NULL.
    """CREATE TABLE observations (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        batch_id   INTEGER NOT NULL REFERENCES observation_batches(id),
        trip_id    INTEGER NOT NULL REFERENCES trips(id),
        kind       TEXT NOT NULL CHECK (kind IN ('segment', 'total')),
        segment_id INTEGER,
        energy_wh  REAL NOT NULL,
        created    TEXT NOT NULL,
        CHECK ((kind = 'segment') = (segment_id IS NOT NULL))
    )""",
    "CREATE INDEX observations_trip ON observations(trip_id)",
    "CREATE INDEX observations_batch ON observations(batch_id)",
    """CREATE TABLE checkpoints (
        id              INTEGER PRIMARY KEY AUTOINCREMENT,
        created         TEXT NOT NULL,
        n_observations  INTEGER NOT NULL CHECK (n_observations >= 0),
        last_batch_id   INTEGER NOT NULL DEFAULT 0,
        model_kind      TEXT NOT NULL,
        sha256          TEXT NOT NULL,
        blob            BLOB NOT NULL,
        is_current      INTEGER NOT NULL DEFAULT 0 CHECK (is_current IN (0, 1))
    )""",
    # At most one current checkpoint, enforced by the database itself.
    "CREATE UNIQUE INDEX checkpoints_one_current ON checkpoints(is_current) WHERE is_current = 1",
)


def _migrate_v1(conn: sqlite3.Connection) -> None:
    """Schema 1: meta (incl. one vehicle as JSON), trips, observations, checkpoints."""
    for stmt in _V1_STATEMENTS:
        conn.execute(stmt)


def _migrate_v2(conn: sqlite3.Connection) -> None:
    """Schema 2: several vehicles per state; each trip records the vehicle that drove it.

    The single vehicle of a schema-1 state (``meta.vehicle``) becomes vehicle 1, the current one,
    and every existing trip is attributed to it.
    """
    conn.execute(
        """CREATE TABLE vehicles (
            id      INTEGER PRIMARY KEY AUTOINCREMENT,
            name    TEXT NOT NULL,
            spec    TEXT NOT NULL,
            created TEXT NOT NULL
        )"""
    )
    row = conn.execute("SELECT value FROM meta WHERE key = 'vehicle'").fetchone()
    if row is not None:  # an existing schema-1 state (a fresh database has no meta rows yet)
        spec = json.loads(row[0])
        conn.execute(
            "INSERT INTO vehicles(id, name, spec, created) VALUES (1, ?, ?, ?)",
            (str(spec.get("name", "default")), json.dumps(spec, sort_keys=True), _utcnow()),
        )
        conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('current_vehicle', '1')")
        conn.execute("DELETE FROM meta WHERE key = 'vehicle'")
    # SQLite cannot add a REFERENCES column with a non-NULL default; the store checks vehicle
    # ids itself when it records a trip.
    conn.execute("ALTER TABLE trips ADD COLUMN vehicle_id INTEGER NOT NULL DEFAULT 1")


def _migrate_v3(conn: sqlite3.Connection) -> None:
    """Schema 3: an observation batch may name the route actually driven (from a GPS track),
    which can differ from the trip's planned one; NULL means the planned route."""
    conn.execute("ALTER TABLE observation_batches ADD COLUMN route_json TEXT")


#: Ordered schema upgrades; ``MIGRATIONS[k]`` takes a database from version ``k`` to ``k + 1``.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _migrate_v1,
    _migrate_v2,
    _migrate_v3,
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)


# ====================================================================== records
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


@dataclass(frozen=True)
class ObservationBatch:
    """Observations recorded by one acknowledged call.

    For ``kind == 'segment'`` the energies are per segment (``energy_wh[i]`` on
    ``segment_ids[i]``). For ``kind == 'total'`` ``energy_wh`` has one entry, the total over *all*
    of ``segment_ids`` (the route driven: the trip's planned route unless the batch recorded
    another, e.g. one matched from a GPS track): a linear (sum) observation.
    """

    id: int
    trip_id: int
    kind: str
    created: str
    segment_ids: NDArray[np.int64]
    energy_wh: NDArray[np.float64]


@dataclass(frozen=True)
class Checkpoint:
    """A stored model state (opaque bytes) and how much data it has absorbed."""

    id: int
    created: str
    n_observations: int
    last_batch_id: int
    model_kind: str
    blob: bytes


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


@dataclass(frozen=True)
class CheckpointRecord(Checkpoint):
    """A stored checkpoint with the verdict of its stored hash (``verified``)."""

    verified: bool = True


@dataclass(frozen=True)
class RegisteredVehicle:
    """A vehicle registered in the state (``spec`` is the caller's JSON description, e.g.
    :meth:`ev_nav.energy.Vehicle.to_dict`; this record is the store's row, not the physics)."""

    id: int
    name: str
    spec: dict[str, Any]
    created: str


# ====================================================================== the store
class Store:
    """The SQLite-backed state of one driver/network (see module docstring for guarantees).

    Use :meth:`create` for a new state directory and :meth:`open` for an existing one; close with
    :meth:`close` or use the store as a context manager. A ``Store`` object belongs to one thread.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._n_segments_cache: int | None | bool = False  # False = not looked up yet

    # ------------------------------------------------------------------ opening
    @staticmethod
    def db_path(state_dir: str | Path) -> Path:
        """Path of the database file inside ``state_dir``."""
        return Path(state_dir) / DB_NAME

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every write opens BEGIN IMMEDIATE itself
        # so that a writer takes the write lock up front (a deferred transaction that upgrades
        # from read to write can fail with SQLITE_BUSY without waiting).
        try:
            conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000.0, isolation_level=None)
        except sqlite3.Error as exc:  # unreadable directory, permissions, …
            raise StateIOError(
                f"cannot open {path} ({exc}); check the path and permissions"
            ) from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StateError(
                    f"cannot switch {path} to WAL mode (got {mode!r}); put the state directory "
                    "on a local file system"
                )
            # FULL: the WAL is fsynced at every commit, so acknowledged writes survive power loss
            # too (NORMAL would already survive a process kill).
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise _db_error(path, exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _check_file(path: Path) -> None:
        """Refuse, without writing a byte, a file that cannot be an ev-nav state.

        SQLite would happily turn an empty or foreign file into a fresh database (and the next
        migration would write a schema into it), so look at it read-only first.

        The file is never opened outside SQLite: closing any descriptor of a file releases
        every POSIX lock the *process* holds on it, including those of this process's other
        open connections (a server answering requests while its model writer keeps the state
        open). Another process closing its connection would then see no other user, checkpoint
        and delete the WAL under the running connections ("disk I/O error"). SQLite's own
        descriptors are kept open while the process holds locks, so a read-only SQLite
        connection looks at the file safely.
        """
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise StateIOError(
                f"cannot read {path} ({exc}); check the path and permissions"
            ) from None
        if size == 0:
            raise StateDamagedError(
                f"{path} is empty (0 bytes): it holds no ev-nav state (truncated or never "
                "written); nothing was written to it - restore it from a backup, or create a new "
                "state in another directory"
            )
        # Read-only look at the schema version before _connect switches the file to WAL (a
        # write): an SQLite file ev-nav never initialised must stay byte-for-byte as it is.
        try:
            ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                version = int(ro.execute("PRAGMA user_version").fetchone()[0])
            finally:
                ro.close()
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):  # SQLITE_NOTADB: no SQLite header
                raise StateDamagedError(
                    f"{path} is not an SQLite database, so not an ev-nav state; nothing was "
                    "written to it - check the path"
                ) from None
            raise _db_error(path, exc) from None
        if version == 0:
            raise StateError(
                f"{path} is an SQLite database but not an ev-nav state (no schema); nothing was "
                "written to it - check the path"
            )

    @classmethod
    def create(
        cls,
        state_dir: str | Path,
        network_hash: str,
        network_ref: str,
        model_kind: str,
        vehicle: dict[str, Any],
        *,
        n_segments: int | None = None,
        network_arrays_hash: str | None = None,
    ) -> Store:
        """Create a new state in ``state_dir`` (made if missing) and return it open.

        Parameters
        ----------
        state_dir : path
            Directory of the state; must not already hold a state.
        network_hash : str
            Content hash of the road network (``RoadNetwork.content_hash``).
        network_ref : str
            How to get the network back: a file path or ``synthetic:...`` description.
        model_kind : str
            ``gp`` or ``bi``.
        vehicle : dict
            JSON-serialisable vehicle description (becomes vehicle 1).
        n_segments : int, optional
            Number of segments of the network; when given, segment ids are range-checked.
        network_arrays_hash : str, optional
            ``RoadNetwork.arrays_hash``: lets :meth:`check_network` verify the arrays themselves.

        Raises
        ------
        StateError
            If a state already exists there, or the arguments are invalid.
        """
        if model_kind not in MODEL_KINDS:
            raise StateError(f"unknown model kind {model_kind!r}; use one of {MODEL_KINDS}")
        if not network_hash:
            raise StateError("the network has no content hash; rebuild it with ev-nav")
        if n_segments is not None and n_segments <= 0:
            raise StateError(f"n_segments must be positive, got {n_segments}")
        try:
            vehicle_json = json.dumps(vehicle, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StateError(f"vehicle description is not JSON-serialisable: {exc}") from None
        directory = Path(state_dir)
        if directory.exists() and not directory.is_dir():
            raise StateError(f"{directory} exists and is not a directory; choose another path")
        directory.mkdir(parents=True, exist_ok=True)
        path = cls.db_path(directory)
        if path.exists():
            raise StateError(
                f"{directory} already holds an ev-nav state (possibly from an interrupted "
                "'ev-nav init'); use it ('ev-nav history' shows what it holds) or choose a new "
                "directory"
            )
        conn = cls._connect(path)
        store = cls(path, conn)
        try:
            store._migrate()
            with store._write():
                if conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0] > 0:
                    # Another process created the same state between our check and our write.
                    raise StateError(f"{directory} already holds an ev-nav state")
                now = _utcnow()
                rows = {
                    "network_hash": network_hash,
                    "network_ref": str(network_ref),
                    "model_kind": model_kind,
                    "created": now,
                    "current_vehicle": "1",
                }
                if n_segments is not None:
                    rows["n_segments"] = str(int(n_segments))
                if network_arrays_hash:
                    rows["network_arrays_hash"] = str(network_arrays_hash)
                conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", rows.items())
                conn.execute(
                    "INSERT INTO vehicles(id, name, spec, created) VALUES (1, ?, ?, ?)",
                    (str(vehicle.get("name", "default")), vehicle_json, now),
                )
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open(cls, state_dir: str | Path) -> Store:
        """Open an existing state, upgrading its schema if it is older than this code.

        Raises
        ------
        StateError
            If there is no state, it is not an ev-nav database, or it is newer than this code.
        """
        path = cls.db_path(state_dir)
        if not path.is_file():
            raise StateError(
                f"no ev-nav state in {state_dir}; create one with 'ev-nav init {state_dir} ...'"
            )
        cls._check_file(path)
        conn = cls._connect(path)
        store = cls(path, conn)
        try:
            store._migrate()
            if store._meta_get("network_hash") is None:
                raise StateError(
                    f"{path} has no network reference (an interrupted 'ev-nav init'?); "
                    "'ev-nav doctor' shows what it holds; to start over, run 'ev-nav init' with "
                    "a new directory"
                )
        except sqlite3.DatabaseError as exc:
            store.close()
            raise _db_error(path, exc) from None
        except BaseException:
            store.close()
            raise
        return store

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions & schema
    @contextlib.contextmanager
    def _write(self, what: str = "write") -> Iterator[sqlite3.Connection]:
        """One write transaction: taken with the write lock up front, committed or rolled back.

        ``what`` names the write for the crash tests' deterministic kill points
        (:func:`ev_nav.faults.crash_point` ``commit-WHAT`` just before the commit and
        ``committed-WHAT`` just after it).
        """
        conn = self._conn
        if conn is None:
            raise StateError("the store is closed")
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise _db_error(self.path, exc) from None
            raise StateError(
                f"the state {self.path.parent} is locked by another process ({exc}); "
                "try again when it has finished"
            ) from None
        try:
            yield conn
            crash_point(f"commit-{what}")
            conn.execute("COMMIT")
            crash_point(f"committed-{what}")
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise _db_error(self.path, exc) from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: all queries inside see the same committed snapshot."""
        conn = self._conn
        if conn is None:
            raise StateError("the store is closed")
        if conn.in_transaction:  # nested inside another read or write: same snapshot already
            yield conn
            return
        try:
            conn.execute("BEGIN")
            yield conn
        except sqlite3.DatabaseError as exc:
            raise _db_error(self.path, exc) from None
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self, target: int = SCHEMA_VERSION) -> None:
        """Apply the pending migrations up to ``target``, each in its own transaction."""
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise StateError(
                f"{self.path} has schema version {current}, newer than this ev-nav "
                f"(knows up to {SCHEMA_VERSION}); upgrade ev-nav"
            )
        while current < target:
            with self._write() as conn:
                # Re-read under the write lock: another process may have migrated meanwhile.
                current = int(conn.execute("PRAGMA user_version").fetchone()[0])
                if current >= target:
                    break
                MIGRATIONS[current](conn)
                conn.execute(f"PRAGMA user_version = {current + 1}")
            current += 1

    def integrity_check(self) -> list[str]:
        """Result rows of ``PRAGMA integrity_check`` (``['ok']`` for a healthy database)."""
        return [str(r[0]) for r in self._conn.execute("PRAGMA integrity_check").fetchall()]

    # ------------------------------------------------------------------ meta
    def _meta_get(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta(self) -> dict[str, str]:
        """All meta entries (network hash and reference, model kind, creation time, …)."""
        return {str(k): str(v) for k, v in self._conn.execute("SELECT key, value FROM meta")}

    @property
    def network_hash(self) -> str:
        """Content hash of the network this state was created for."""
        return self._meta_get("network_hash") or ""

    @property
    def network_ref(self) -> str:
        """Reference (path or synthetic spec) of the network this state was created for."""
        return self._meta_get("network_ref") or ""

    @property
    def model_kind(self) -> str:
        """``gp`` or ``bi``."""
        return self._meta_get("model_kind") or ""

    @property
    def n_segments(self) -> int | None:
        """Number of network segments if recorded at creation, else ``None``."""
        if self._n_segments_cache is False:
            value = self._meta_get("n_segments")
            self._n_segments_cache = None if value is None else int(value)
        return self._n_segments_cache  # type: ignore[return-value]

    def check_network(self, network_hash: str, arrays_hash: str | None = None) -> None:
        """Raise :class:`StateError` unless the network is the state's network.

        ``network_hash`` is the network's :attr:`~ev_nav.roads.network.RoadNetwork.content_hash`
        (its build inputs); ``arrays_hash`` the hash of its arrays. A state created before arrays
        hashes were recorded learns it on first use (and is checked against it afterwards).
        """
        if network_hash != self.network_hash:
            raise StateError(
                f"the state {self.path.parent} was created for network {self.network_hash!r} "
                f"({self.network_ref}), not {network_hash!r}; use that network or a new state"
            )
        if arrays_hash is None:
            return
        recorded = self._meta_get("network_arrays_hash")
        if recorded is None:
            with contextlib.suppress(StateError):  # a read-only state is still usable
                with self._write() as conn:
                    conn.execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES ('network_arrays_hash', ?)",
                        (arrays_hash,),
                    )
        elif recorded != arrays_hash:
            raise StateError(
                f"the network file {self.network_ref} has the state's header but different "
                "contents (its arrays were modified or damaged); routes on it would be wrong - "
                "restore or rebuild that network file"
            )

    # ------------------------------------------------------------------ vehicles
    def vehicles(self) -> list[RegisteredVehicle]:
        """All registered vehicles, by id."""
        rows = self._conn.execute("SELECT id, name, spec, created FROM vehicles ORDER BY id")
        return [
            RegisteredVehicle(int(i), str(n), json.loads(s), str(c)) for i, n, s, c in rows
        ]

    def vehicle(self, vehicle_id: int | None = None) -> RegisteredVehicle:
        """The vehicle ``vehicle_id`` (default: the current one)."""
        vid = int(self._meta_get("current_vehicle") or 1) if vehicle_id is None else vehicle_id
        row = self._conn.execute(
            "SELECT id, name, spec, created FROM vehicles WHERE id = ?", (int(vid),)
        ).fetchone()
        if row is None:
            known = [v.id for v in self.vehicles()]
            raise StateError(f"unknown vehicle id {vid}; known vehicles: {known}")
        return RegisteredVehicle(int(row[0]), str(row[1]), json.loads(row[2]), str(row[3]))

    def add_vehicle(self, spec: dict[str, Any], *, make_current: bool = True) -> int:
        """Register a vehicle (JSON description); optionally make it the current one."""
        try:
            spec_json = json.dumps(spec, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StateError(f"vehicle description is not JSON-serialisable: {exc}") from None
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO vehicles(name, spec, created) VALUES (?, ?, ?)",
                (str(spec.get("name", "vehicle")), spec_json, _utcnow()),
            )
            vid = int(cur.lastrowid)
            if make_current:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'current_vehicle'", (str(vid),))
        return vid

    # ------------------------------------------------------------------ trips
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
        with self._write() as conn:
            trip_id = int(
                conn.execute(
                    "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'trips'), "
                    "0), COALESCE((SELECT MAX(id) FROM trips), 0)) + 1"
                ).fetchone()[0]
            )
            row = self._trip_row(plan(trip_id))
            return self._insert_trip(conn, trip_id, row)

    def _insert_trip(self, conn: sqlite3.Connection, trip_id: int | None, row: tuple) -> int:
        cur = conn.execute(
            """INSERT INTO trips(id, created, origin_segment, goal_segment, policy, seed,
                   route_json, predicted_wh, predicted_sd_wh, length_m, time_s, status,
                   extra_json, vehicle_id)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'planned', ?, ?)""",
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
        )

    _TRIP_COLUMNS = (
        "id, created, origin_segment, goal_segment, policy, seed, route_json, predicted_wh, "
        "predicted_sd_wh, length_m, time_s, status, vehicle_id, extra_json"
    )

    @staticmethod
    def _trip_from_row(row: Sequence[Any]) -> Trip:
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

    # ------------------------------------------------------------------ observations
    def add_observations(
        self,
        trip_id: int,
        segment_ids: ArrayLike,
        energies: ArrayLike,
        *,
        allow_off_route: bool = False,
        allow_repeat: bool = False,
        route: ArrayLike | None = None,
    ) -> int:
        """Record per-segment energies of a driven trip in one transaction; return the batch id.

        When this returns, the data is committed (acknowledged): no later crash can lose it.
        Negative energies are valid (regeneration downhill); NaN/inf are not.

        Parameters
        ----------
        trip_id : int
            The trip that was driven.
        segment_ids : array_like of int
            Segments observed, each at most once.
        energies : array_like of float
            Energy used on each segment [Wh].
        allow_off_route : bool
            Accept segments that are not on the trip's planned route (the driver deviated).
        allow_repeat : bool
            Accept a second batch for a trip that already has observations (otherwise a re-run
            of the same command would count the trip twice).
        route : array_like of int, optional
            The route actually driven, when it differs from the planned one (see
            :meth:`add_total_observation`); the observed segments must lie on it.

        Raises
        ------
        UnknownTripError, InvalidObservation, UnknownSegmentError
        """
        seg = _as_int_array(segment_ids, "segment ids", error=InvalidObservation)
        driven = self._driven_route(route)
        if driven is not None:
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
        uniq, counts = np.unique(seg, return_counts=True)
        if np.any(counts > 1):
            raise InvalidObservation(
                f"segments observed more than once in one batch: {uniq[counts > 1][:5].tolist()}; "
                "give each segment once (sum repeated passes beforehand)"
            )
        self._check_segments(seg, "the observations")
        now = _utcnow()
        with self._write("observation") as conn:
            trip = self._trip_in_txn(conn, trip_id)
            if not allow_off_route:
                off = np.setdiff1d(seg, trip.route)
                if off.size:
                    raise InvalidObservation(
                        f"segments {off[:5].tolist()} are not on the planned route of trip "
                        f"{trip.id}; check the file belongs to this trip"
                    )
            self._check_repeat(conn, trip.id, allow_repeat)
            batch = self._new_batch(conn, trip.id, "segment", seg.size, now, driven)
            conn.executemany(
                """INSERT INTO observations(batch_id, trip_id, kind, segment_id, energy_wh,
                       created) VALUES (?, ?, 'segment', ?, ?, ?)""",
                ((batch, trip.id, int(s), float(e), now) for s, e in zip(seg, wh, strict=True)),
            )
            conn.execute("UPDATE trips SET status = 'observed' WHERE id = ?", (trip.id,))
        return batch

    def add_total_observation(
        self,
        trip_id: int,
        total_wh: float,
        *,
        allow_negative: bool = False,
        allow_repeat: bool = False,
        route: ArrayLike | None = None,
    ) -> int:
        """Record only the trip's total energy (the trip computer's reading); return the batch id.

        The total is taken to cover the trip's whole planned route, or ``route`` when given: the
        segments actually driven, in order (e.g. matched from a GPS track; a segment driven twice
        appears twice). A negative total needs a net descent large enough to regenerate more than
        the drive used, which is rare enough to be a typo far more often than a fact, so it is
        rejected unless ``allow_negative``.

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
        if value < 0 and not allow_negative:
            raise InvalidObservation(
                f"trip total {value} Wh is negative; a trip that regenerates more than it uses "
                "is implausible - check the reading (it is in Wh, not kWh)"
            )
        driven = self._driven_route(route)
        now = _utcnow()
        with self._write("observation") as conn:
            trip = self._trip_in_txn(conn, trip_id)
            self._check_repeat(conn, trip.id, allow_repeat)
            batch = self._new_batch(conn, trip.id, "total", 1, now, driven)
            conn.execute(
                """INSERT INTO observations(batch_id, trip_id, kind, segment_id, energy_wh,
                       created) VALUES (?, ?, 'total', NULL, ?, ?)""",
                (batch, trip.id, value, now),
            )
            conn.execute("UPDATE trips SET status = 'observed' WHERE id = ?", (trip.id,))
        return batch

    def forget_observations(self, trip_id: int) -> int:
        """Remove every observation of a trip (it becomes ``planned`` again); returns how many
        batches went.

        Checkpoints that had absorbed any of them are deleted in the same transaction, so the
        next model load starts from an older checkpoint (or the prior) and replays only the
        observations that remain: the model forgets the trip exactly.
        """
        with self._write("forget") as conn:
            trip = self._trip_in_txn(conn, trip_id)
            ids = [int(r[0]) for r in conn.execute(
                "SELECT id FROM observation_batches WHERE trip_id = ?", (trip.id,)
            )]
            if not ids:
                raise InvalidObservation(f"trip {trip.id} has no observations to forget")
            first = min(ids)
            conn.execute("DELETE FROM observations WHERE trip_id = ?", (trip.id,))
            conn.execute("DELETE FROM observation_batches WHERE trip_id = ?", (trip.id,))
            conn.execute("DELETE FROM checkpoints WHERE last_batch_id >= ?", (first,))
            conn.execute("UPDATE trips SET status = 'planned' WHERE id = ?", (trip.id,))
            return len(ids)

    def _trip_in_txn(self, conn: sqlite3.Connection, trip_id: int) -> Trip:
        row = conn.execute(
            f"SELECT {self._TRIP_COLUMNS} FROM trips WHERE id = ?", (_trip_key(trip_id),)
        ).fetchone()
        if row is None:
            raise UnknownTripError(self._unknown_trip_message(trip_id))
        return self._trip_from_row(row)

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
        conn: sqlite3.Connection,
        trip_id: int,
        kind: str,
        n: int,
        now: str,
        route: NDArray[np.int64] | None = None,
    ) -> int:
        cur = conn.execute(
            "INSERT INTO observation_batches(trip_id, kind, created, n_rows, route_json) "
            "VALUES (?, ?, ?, ?, ?)",
            (trip_id, kind, now, int(n), None if route is None else json.dumps(route.tolist())),
        )
        return int(cur.lastrowid)

    def _driven_route(self, route: ArrayLike | None) -> NDArray[np.int64] | None:
        """A driven route given with an observation, checked (``None`` stays ``None``)."""
        if route is None:
            return None
        seg = _as_int_array(route, "driven route", error=InvalidObservation)
        if seg.size == 0:
            raise InvalidObservation("the driven route is empty; give at least one segment")
        self._check_segments(seg, "the driven route")
        return seg

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
                "CASE b.kind WHEN 'total' THEN COALESCE(b.route_json, t.route_json) END "
                f"FROM observation_batches b JOIN trips t ON t.id = b.trip_id {where} "
                "ORDER BY b.id",
                params,
            ).fetchall()
            rows = conn.execute(
                "SELECT o.batch_id, COALESCE(o.segment_id, -1), o.energy_wh "
                f"FROM observations o JOIN observation_batches b ON b.id = o.batch_id {where} "
                "ORDER BY o.batch_id, o.id",
                params,
            ).fetchall()
        table = np.array(rows, dtype=np.float64).reshape(-1, 3)
        batch_col = table[:, 0].astype(np.int64)
        seg_col = table[:, 1].astype(np.int64)  # ids < 2**53 are exact in float64
        bids = np.array([h[0] for h in heads], dtype=np.int64)
        lo = np.searchsorted(batch_col, bids, side="left")
        hi = np.searchsorted(batch_col, bids, side="right")
        out: list[ObservationBatch] = []
        for (bid, tid, bkind, created, route_json), i, j in zip(heads, lo, hi, strict=True):
            if bkind == "segment":
                seg = seg_col[i:j].copy()
            else:
                seg = np.asarray(json.loads(route_json), dtype=np.int64)
            wh = table[i:j, 2].copy()
            out.append(ObservationBatch(int(bid), int(tid), str(bkind), str(created), seg, wh))
        return out

    def n_observations(self) -> int:
        """Number of observation rows (segment energies plus trip totals)."""
        return int(self._conn.execute("SELECT COUNT(*) FROM observations").fetchone()[0])

    def last_batch_id(self) -> int:
        """Id of the newest observation batch (0 if none)."""
        row = self._conn.execute("SELECT MAX(id) FROM observation_batches").fetchone()
        return int(row[0] or 0)

    def observed_total(self, trip_id: int) -> float | None:
        """Observed energy of a trip [Wh]: its total reading, else the sum of its segment
        energies if they cover the whole planned route, else ``None``."""
        trip = self.get_trip(trip_id)
        return _observed_total(trip, self.observations(trip.id))

    def history(self) -> list[tuple[Trip, float | None]]:
        """Every trip with its observed energy [Wh] (see :meth:`observed_total`), oldest first.

        Reads the state once (one snapshot), not once per trip.
        """
        with self._read():
            trips = self.list_trips()
            batches = self.observations()
        per_trip: dict[int, list[ObservationBatch]] = {}
        for b in batches:
            per_trip.setdefault(b.trip_id, []).append(b)
        return [(t, _observed_total(t, per_trip.get(t.id, []))) for t in trips]

    def visit_counts(self, n_segments: int | None = None, *, observed_only: bool = True) -> NDArray:
        """How many (observed) trips passed each segment, shape (n_segments,): the route driven
        where an observation recorded one (from a GPS track), else the planned route.

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

    # ------------------------------------------------------------------ checkpoints
    def save_checkpoint(self, blob: bytes, n_obs: int, *, last_batch_id: int | None = None) -> int:
        """Store a model state and make it current, in one transaction; return its id.

        If anything fails before the commit (disk full, exception, kill) the previous checkpoint
        stays current and intact. Only the newest :data:`KEEP_CHECKPOINTS` are kept.

        Parameters
        ----------
        blob : bytes
            Serialised model state.
        n_obs : int
            Number of observations the model has absorbed.
        last_batch_id : int, optional
            Newest observation batch included in the model (default: the newest in the store).
        """
        data = bytes(blob)
        if not data:
            raise ModelStateError("refusing to store an empty model checkpoint")
        if int(n_obs) < 0:
            raise ModelStateError(f"n_obs must be >= 0, got {n_obs}")
        digest = hashlib.sha256(data).hexdigest()
        try:
            with self._write("checkpoint") as conn:
                last = (
                    int(
                        conn.execute(
                            "SELECT COALESCE(MAX(id), 0) FROM observation_batches"
                        ).fetchone()[0]
                    )
                    if last_batch_id is None
                    else int(last_batch_id)
                )
                # Demote first so that the unique "one current" index holds at every statement;
                # if the insert below fails the rollback restores the old flag.
                conn.execute("UPDATE checkpoints SET is_current = 0 WHERE is_current = 1")
                cur = conn.execute(
                    """INSERT INTO checkpoints(created, n_observations, last_batch_id, model_kind,
                           sha256, blob, is_current) VALUES (?, ?, ?, ?, ?, ?, 1)""",
                    (_utcnow(), int(n_obs), last, self.model_kind, digest, sqlite3.Binary(data)),
                )
                cid = int(cur.lastrowid)
                conn.execute(
                    "DELETE FROM checkpoints WHERE id NOT IN "
                    "(SELECT id FROM checkpoints ORDER BY id DESC LIMIT ?)",
                    (KEEP_CHECKPOINTS,),
                )
        except StateError as exc:  # e.g. database or disk is full (translated by _write)
            raise type(exc)(
                f"could not write the model checkpoint: {exc}; the previous checkpoint is still "
                "in use"
            ) from None
        return cid

    def latest_checkpoint(self) -> Checkpoint | None:
        """The current checkpoint (``None`` before the first one), verified against its hash.

        Raises
        ------
        ModelStateError
            If the stored bytes do not match their hash.
        """
        row = self._conn.execute(
            """SELECT id, created, n_observations, last_batch_id, model_kind, sha256, blob
               FROM checkpoints WHERE is_current = 1"""
        ).fetchone()
        if row is None:
            return None
        blob = bytes(row[6])
        if hashlib.sha256(blob).hexdigest() != row[5]:
            raise ModelStateError(
                f"model checkpoint {row[0]} is damaged (hash mismatch); the observations are "
                f"intact: 'ev-nav doctor {self.path.parent} --repair' rebuilds the model from them"
            )
        return Checkpoint(int(row[0]), str(row[1]), int(row[2]), int(row[3]), str(row[4]), blob)

    def checkpoints(self) -> list[CheckpointRecord]:
        """Every kept checkpoint, newest first, each with the verdict of its stored hash.

        Unlike :meth:`latest_checkpoint` this never raises on a damaged blob, so a caller can fall
        back to the next older one (and finally to replaying all observations from the prior).
        """
        with self._read() as conn:
            rows = conn.execute(
                """SELECT id, created, n_observations, last_batch_id, model_kind, sha256, blob
                   FROM checkpoints ORDER BY is_current DESC, id DESC"""
            ).fetchall()
        out = []
        for row in rows:
            blob = bytes(row[6] or b"")
            ok = hashlib.sha256(blob).hexdigest() == row[5]
            out.append(
                CheckpointRecord(
                    int(row[0]), str(row[1]), int(row[2]), int(row[3]), str(row[4]), blob, ok
                )
            )
        return out

    def delete_checkpoints(self, ids: Sequence[int]) -> int:
        """Delete the given checkpoints (never observations); returns how many went."""
        with self._write() as conn:
            cur = conn.executemany("DELETE FROM checkpoints WHERE id = ?", [(int(i),) for i in ids])
            return int(cur.rowcount)

    def checkpoint_ids(self) -> list[int]:
        """Ids of the stored checkpoints, oldest first."""
        return [int(r[0]) for r in self._conn.execute("SELECT id FROM checkpoints ORDER BY id")]


# ====================================================================== helpers
def _observed_total(trip: Trip, batches: Sequence[ObservationBatch]) -> float | None:
    """A trip's observed energy from its batches: the latest total reading if any, else the sum
    of per-segment energies when they cover the planned route, else ``None``."""
    totals = [b for b in batches if b.kind == "total"]
    if totals:
        return float(totals[-1].energy_wh[0])
    per_seg: dict[int, float] = {}
    for b in batches:
        if b.kind == "segment":
            per_seg.update(zip(b.segment_ids.tolist(), b.energy_wh.tolist(), strict=True))
    if not per_seg or not all(int(s) in per_seg for s in trip.route):
        return None  # part of the route was not observed: the trip total is unknown
    return float(sum(per_seg[int(s)] for s in trip.route))


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
