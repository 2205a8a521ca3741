"""The state's schema and its migrations (``PRAGMA user_version``).

An older state is upgraded when it is opened by the ordered list :data:`MIGRATIONS`, one
transaction per version, so a kill during an upgrade leaves the previous version intact.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable

from ev_nav.errors import StateError
from ev_nav.store.connection import StoreConnection, _utcnow

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
    """Schema 3: trips between points part-way along a segment, and totals of other routes.

    ``trips.start_fraction`` / ``end_fraction`` say where along the first and last segment of
    the planned route the trip starts and ends (0 = the segment's start node, 1 = its end);
    earlier trips ran from segment start to segment end, the defaults. An observation batch of
    kind ``total`` may carry the route actually driven (``route_json`` and its fractions, e.g.
    map-matched from a GPS track); NULL means the trip's planned route, as before.
    """
    conn.execute(
        "ALTER TABLE trips ADD COLUMN start_fraction REAL NOT NULL DEFAULT 0.0 "
        "CHECK (start_fraction >= 0 AND start_fraction <= 1)"
    )
    conn.execute(
        "ALTER TABLE trips ADD COLUMN end_fraction REAL NOT NULL DEFAULT 1.0 "
        "CHECK (end_fraction >= 0 AND end_fraction <= 1)"
    )
    conn.execute("ALTER TABLE observation_batches ADD COLUMN route_json TEXT")
    conn.execute("ALTER TABLE observation_batches ADD COLUMN start_fraction REAL")
    conn.execute("ALTER TABLE observation_batches ADD COLUMN end_fraction REAL")


def _migrate_v4(conn: sqlite3.Connection) -> None:
    """Schema 4: the checksum of every file in the state's ``cache/`` folder.

    A cache file (prior kernel, posterior) is read only if its bytes hash to the SHA-256
    recorded here when it was written (:mod:`ev_nav.store.caches`). Files of an older state have
    no record: they are refused once, with a notice, and rebuilt.
    """
    conn.execute(
        """CREATE TABLE cache_files (
            name    TEXT PRIMARY KEY,
            sha256  TEXT NOT NULL CHECK (length(sha256) = 64),
            size    INTEGER NOT NULL CHECK (size >= 0),
            created TEXT NOT NULL
        )"""
    )


def _migrate_v5(conn: sqlite3.Connection) -> None:
    """Schema 5: the ambient temperature of a drive (``docs/temperature.md``).

    ``observation_batches.temperature_c`` [°C] is the temperature the batch's readings were made
    at, which the model learns with on every replay; NULL (every earlier batch) means not
    recorded, the model's reference conditions.
    """
    conn.execute("ALTER TABLE observation_batches ADD COLUMN temperature_c REAL")


def _migrate_v6(conn: sqlite3.Connection) -> None:
    """Schema 6: changes of roads detected on the observations (:mod:`ev_nav.store.changes`).

    ``segment_changes`` holds one row per flagged change: where in the commit order the model
    set the segment's old readings aside (``at_batch``), from which batch on its readings are
    kept (``kept_from_batch``; the segment's readings of earlier batches are the ones set aside,
    still in ``observations``), the evidence, and whether the user dismissed it.
    ``change_detector`` holds the detector's running state and the newest batch it scored.
    Earlier states have no changes and a detector that has scored nothing yet.
    """
    conn.execute(
        """CREATE TABLE segment_changes (
            id              INTEGER PRIMARY KEY AUTOINCREMENT,
            segment_id      INTEGER NOT NULL CHECK (segment_id >= 0),
            at_batch        INTEGER NOT NULL,
            alarm_batch     INTEGER NOT NULL,
            kept_from_batch INTEGER NOT NULL CHECK (kept_from_batch <= at_batch),
            direction       INTEGER NOT NULL CHECK (direction IN (-1, 1)),
            statistic       REAL NOT NULL,
            threshold       REAL NOT NULL,
            shift_wh        REAL NOT NULL,
            shift_sd        REAL NOT NULL,
            readings_since  INTEGER NOT NULL CHECK (readings_since >= 1),
            reset           INTEGER NOT NULL CHECK (reset IN (0, 1)),
            created         TEXT NOT NULL,
            dismissed       TEXT
        )"""
    )
    conn.execute("CREATE INDEX segment_changes_segment ON segment_changes(segment_id)")
    conn.execute(
        """CREATE TABLE change_detector (
            id          INTEGER PRIMARY KEY CHECK (id = 1),
            scored_upto INTEGER NOT NULL,
            sha256      TEXT NOT NULL CHECK (length(sha256) = 64),
            blob        BLOB NOT NULL,
            updated     TEXT NOT NULL
        )"""
    )
    # the readings of one segment in commit order: what a change sets aside and keeps
    conn.execute("CREATE INDEX observations_segment ON observations(segment_id, batch_id)")


def _migrate_v7(conn: sqlite3.Connection) -> None:
    """Schema 7: the ambient temperature a trip was planned at.

    ``trips.temperature_c`` [°C] is the temperature ``route --temperature`` predicted the trip
    at; ``observe`` records the drive's readings at it unless told another. NULL (every earlier
    trip) means planned at the model's reference conditions.
    """
    conn.execute("ALTER TABLE trips ADD COLUMN temperature_c REAL")


def _migrate_v8(conn: sqlite3.Connection) -> None:
    """Schema 8: the share of its segment a per-segment reading covers.

    A trip between two points drives only part of its first and last segment, and the car's
    reading of such a segment is the energy of that part. ``observations.share`` is the part
    (in [0, 1)); NULL is a whole segment: every reading of an earlier state, learned whole as
    before, so an upgraded state keeps what it learned.
    """
    conn.execute(
        "ALTER TABLE observations ADD COLUMN share REAL "
        "CHECK (share IS NULL OR (share >= 0 AND share < 1))"
    )


#: Ordered schema upgrades; ``MIGRATIONS[k]`` takes a database from version ``k`` to ``k + 1``.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _migrate_v1,
    _migrate_v2,
    _migrate_v3,
    _migrate_v4,
    _migrate_v5,
    _migrate_v6,
    _migrate_v7,
    _migrate_v8,
)

#: The schema version this code writes.
SCHEMA_VERSION = len(MIGRATIONS)


def schema_tables() -> dict[str, tuple[str, ...]]:
    """Each table a state of :data:`SCHEMA_VERSION` has, with the statements that create it (the
    table's, then its indexes'): the migrations applied to an empty database in memory (one
    source of truth, the migrations themselves). ``ev-nav doctor`` finds a state's missing
    tables with it."""
    conn = sqlite3.connect(":memory:")
    try:
        for migrate in MIGRATIONS:
            migrate(conn)
        rows = conn.execute(
            "SELECT tbl_name, sql FROM sqlite_master WHERE type IN ('table', 'index') AND "
            "sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index'"
        ).fetchall()
    finally:
        conn.close()
    out: dict[str, tuple[str, ...]] = {}
    for table, sql in rows:
        out[str(table)] = (*out.get(str(table), ()), str(sql))
    return out


class SchemaMixin(StoreConnection):
    """Schema version, migrations and the integrity check of an open state."""

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
