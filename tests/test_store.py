"""Unit tests of the SQLite store: round trips, validation, checkpoints, schema migrations."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import ev_nav.store as store_mod
from ev_nav.errors import (
    InvalidObservation,
    ModelStateError,
    StateError,
    UnknownSegmentError,
    UnknownTripError,
)
from ev_nav.store import KEEP_CHECKPOINTS, SCHEMA_VERSION, Store

VEHICLE = {"name": "test-car", "mass_kg": 1600.0}
N_SEG = 50


def _trip_kwargs(route: list[int], **over: object) -> dict[str, object]:
    kw: dict[str, object] = {
        "origin_segment": route[0],
        "goal_segment": route[-1],
        "policy": "ts",
        "route": route,
        "predicted_wh": 123.5,
        "predicted_sd_wh": 7.25,
        "length_m": 1500.0,
        "time_s": 120.0,
        "seed": 11,
    }
    kw.update(over)
    return kw


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.create(
        tmp_path / "state", "hash-A", "synthetic:test", "gp", VEHICLE, n_segments=N_SEG
    )
    yield s
    s.close()


def _dump(path: Path) -> dict[str, list[tuple]]:
    """Every row of every table, read with a separate connection (to prove 'state unchanged')."""
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall() for t in tables}
    finally:
        conn.close()


# ---------------------------------------------------------------------- create / open
def test_create_open_roundtrip(tmp_path: Path) -> None:
    state = tmp_path / "s"
    with Store.create(state, "hash-A", "net.npz", "bi", VEHICLE, n_segments=N_SEG) as s:
        assert s.schema_version == SCHEMA_VERSION
        assert s.network_hash == "hash-A"
    with Store.open(state) as s:
        assert (s.network_hash, s.network_ref, s.model_kind, s.n_segments) == (
            "hash-A",
            "net.npz",
            "bi",
            N_SEG,
        )
        assert s.vehicle().spec == VEHICLE
        assert s.integrity_check() == ["ok"]
    conn = sqlite3.connect(Store.db_path(state))
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent WAL
    conn.close()


def test_create_refuses_existing_state(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StateError, match="already holds"):
        Store.create(tmp_path / "state", "hash-A", "x", "gp", VEHICLE)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model_kind": "svm"}, "unknown model kind"),
        ({"network_hash": ""}, "content hash"),
        ({"vehicle": {"x": float("nan")}}, "JSON"),
    ],
)
def test_create_bad_arguments(tmp_path: Path, kwargs: dict, match: str) -> None:
    args = {"network_hash": "h", "network_ref": "r", "model_kind": "gp", "vehicle": VEHICLE}
    args.update(kwargs)
    with pytest.raises(StateError, match=match):
        Store.create(tmp_path / "s", **args)
    assert not Store.db_path(tmp_path / "s").exists()


def test_open_missing_or_garbage(tmp_path: Path) -> None:
    with pytest.raises(StateError, match="ev-nav init"):
        Store.open(tmp_path / "nothing")
    bad = tmp_path / "bad"
    bad.mkdir()
    Store.db_path(bad).write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StateError, match="not an SQLite database"):
        Store.open(bad)


def test_open_newer_schema_refused(store: Store, tmp_path: Path) -> None:
    store._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StateError, match="newer than this ev-nav"):
        Store.open(tmp_path / "state")


def test_check_network(store: Store) -> None:
    store.check_network("hash-A")
    with pytest.raises(StateError, match="hash-B"):
        store.check_network("hash-B")


# ---------------------------------------------------------------------- trips
def test_trip_roundtrip_and_listing(store: Store) -> None:
    a = store.add_trip(**_trip_kwargs([3, 4, 5], extra={"from": [47.0, 8.0]}))
    b = store.add_trip(**_trip_kwargs([7, 9], policy="mean", seed=None))
    assert b > a
    t = store.get_trip(a)
    np.testing.assert_array_equal(t.route, [3, 4, 5])
    assert t.route.dtype == np.int64
    assert (t.policy, t.seed, t.status, t.vehicle_id) == ("ts", 11, "planned", 1)
    assert (t.predicted_wh, t.predicted_sd_wh, t.length_m, t.time_s) == (123.5, 7.25, 1500, 120)
    assert t.extra == {"from": [47.0, 8.0]}
    assert [x.id for x in store.list_trips()] == [a, b]
    assert store.get_trip(b).seed is None
    assert store.n_trips() == 2


@pytest.mark.parametrize("bad_id", [999, "abc", 1.5, None])
def test_unknown_trip(store: Store, bad_id: object) -> None:
    store.add_trip(**_trip_kwargs([1, 2]))
    with pytest.raises(UnknownTripError) as info:
        store.get_trip(bad_id)  # type: ignore[arg-type]
    assert "history" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("over", "exc", "match"),
    [
        ({"route": []}, StateError, "non-empty"),
        ({"route": [1, 2], "goal_segment": 3}, StateError, "runs from"),
        ({"route": [1, N_SEG], "goal_segment": N_SEG}, UnknownSegmentError, "outside"),
        ({"route": [-1, 2], "origin_segment": -1}, UnknownSegmentError, "outside"),
        ({"predicted_wh": float("nan")}, StateError, "finite"),
        ({"length_m": -1.0}, StateError, ">= 0"),
        ({"vehicle_id": 42}, StateError, "unknown vehicle"),
    ],
)
def test_add_trip_rejects_bad_input(store: Store, over: dict, exc: type, match: str) -> None:
    before = _dump(store.path)
    kw = _trip_kwargs([1, 2])
    kw.update(over)
    with pytest.raises(exc, match=match):
        store.add_trip(**kw)
    assert _dump(store.path) == before


# ---------------------------------------------------------------------- observations
def test_segment_observations_roundtrip(store: Store) -> None:
    trip = store.add_trip(**_trip_kwargs([3, 4, 5]))
    energies = [10.5, -3.25, 0.0]  # regeneration downhill is a valid negative energy
    bid = store.add_observations(trip, np.array([3, 4, 5]), energies)
    (batch,) = store.observations(trip)
    assert batch.id == bid and batch.kind == "segment" and batch.trip_id == trip
    np.testing.assert_array_equal(batch.segment_ids, [3, 4, 5])
    np.testing.assert_array_equal(batch.energy_wh, energies)
    assert store.get_trip(trip).status == "observed"
    assert store.observed_total(trip) == pytest.approx(sum(energies))
    assert store.n_observations() == 3


def test_partial_segment_observation_has_no_total(store: Store) -> None:
    trip = store.add_trip(**_trip_kwargs([3, 4, 5]))
    store.add_observations(trip, [3, 5], [1.0, 2.0])
    assert store.observed_total(trip) is None
    assert store.observed_total(store.add_trip(**_trip_kwargs([6]))) is None


def test_total_observation_is_a_sum_over_the_route(store: Store) -> None:
    trip = store.add_trip(**_trip_kwargs([8, 9, 10, 11]))
    bid = store.add_total_observation(trip, 250.0)
    (batch,) = store.observations(kind="total")
    assert batch.id == bid
    np.testing.assert_array_equal(batch.segment_ids, [8, 9, 10, 11])
    np.testing.assert_array_equal(batch.energy_wh, [250.0])
    assert store.observed_total(trip) == 250.0
    assert store.observations(kind="segment") == []


def test_observations_after_batch(store: Store) -> None:
    ids = []
    for k in range(4):
        t = store.add_trip(**_trip_kwargs([k, k + 1]))
        ids.append(store.add_observations(t, [k, k + 1], [float(k), float(k) + 0.5]))
    assert [b.id for b in store.observations(after_batch=ids[1])] == ids[2:]
    assert store.last_batch_id() == ids[-1]


@pytest.mark.parametrize(
    ("segs", "wh", "match"),
    [
        ([3, 4], [1.0, float("nan")], "finite"),
        ([3, 4], [1.0, float("inf")], "finite"),
        ([3, 4], [1.0], "2 segment ids but 1 energies"),
        ([], [], "at least one"),
        ([3, 3], [1.0, 2.0], "segment 3 has 2 readings but the route drives it 1 time"),
        ([3, 6], [1.0, 2.0], "not on the planned route"),
        ([3.5], [1.0], "whole numbers"),
        ([3, 4], ["a", "b"], "numbers"),
    ],
)
def test_bad_segment_observations_leave_state_unchanged(
    store: Store, segs: list, wh: list, match: str
) -> None:
    trip = store.add_trip(**_trip_kwargs([3, 4, 5]))
    before = _dump(store.path)
    with pytest.raises(InvalidObservation, match=match):
        store.add_observations(trip, segs, wh)
    assert _dump(store.path) == before


def test_out_of_network_segment_observation(store: Store) -> None:
    trip = store.add_trip(**_trip_kwargs([3, 4]))
    with pytest.raises(UnknownSegmentError):
        store.add_observations(trip, [3, N_SEG + 5], [1.0, 1.0], allow_off_route=True)
    store.add_observations(trip, [3, 7], [1.0, 1.0], allow_off_route=True)  # a detour


@pytest.mark.parametrize(
    ("value", "match"),
    [(float("nan"), "finite"), (float("-inf"), "finite"), ("x", "number")],
)
def test_bad_total_observation(store: Store, value: object, match: str) -> None:
    trip = store.add_trip(**_trip_kwargs([3, 4]))
    before = _dump(store.path)
    with pytest.raises(InvalidObservation, match=match):
        store.add_total_observation(trip, value)  # type: ignore[arg-type]
    assert _dump(store.path) == before
    store.add_total_observation(trip, -5.0)  # regeneration: the store keeps any finite total


def test_unknown_trip_observation_leaves_state_unchanged(store: Store) -> None:
    store.add_trip(**_trip_kwargs([3, 4]))
    before = _dump(store.path)
    with pytest.raises(UnknownTripError, match="unknown trip id 77"):
        store.add_observations(77, [3], [1.0])
    with pytest.raises(UnknownTripError):
        store.add_total_observation(77, 1.0)
    with pytest.raises(UnknownTripError):
        store.observations(77)
    assert _dump(store.path) == before


def test_repeat_observation_rejected_unless_allowed(store: Store) -> None:
    trip = store.add_trip(**_trip_kwargs([3, 4]))
    store.add_total_observation(trip, 10.0)
    with pytest.raises(InvalidObservation, match="already has observations"):
        store.add_observations(trip, [3, 4], [1.0, 2.0])
    with pytest.raises(InvalidObservation, match="already has observations"):
        store.add_total_observation(trip, 10.0)
    store.add_observations(trip, [3, 4], [1.0, 2.0], allow_repeat=True)
    assert len(store.observations(trip)) == 2


# ---------------------------------------------------------------------- checkpoints
def test_checkpoints_current_and_pruned(store: Store) -> None:
    assert store.latest_checkpoint() is None
    t = store.add_trip(**_trip_kwargs([1, 2]))
    b = store.add_observations(t, [1, 2], [1.0, 2.0])
    blobs = [bytes([k]) * (1000 + k) for k in range(KEEP_CHECKPOINTS + 2)]
    ids = [store.save_checkpoint(blob, n_obs=k) for k, blob in enumerate(blobs)]
    ck = store.latest_checkpoint()
    assert ck is not None
    assert (ck.id, ck.blob, ck.n_observations, ck.last_batch_id, ck.model_kind) == (
        ids[-1],
        blobs[-1],
        len(blobs) - 1,
        b,
        "gp",
    )
    assert store.checkpoint_ids() == ids[-KEEP_CHECKPOINTS:]
    n_current = store._conn.execute("SELECT SUM(is_current) FROM checkpoints").fetchone()[0]
    assert n_current == 1


def test_failed_checkpoint_write_keeps_previous(store: Store) -> None:
    """Disk full in the middle of a checkpoint write: the previous checkpoint stays current."""
    good = b"previous-model" * 100
    cid = store.save_checkpoint(good, n_obs=5)
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages + 3}")  # room for ~3 more pages only
    with pytest.raises(StateError, match="previous checkpoint is still in use"):
        store.save_checkpoint(b"\x01" * 200_000, n_obs=6)
    store._conn.execute("PRAGMA max_page_count = 1073741823")
    ck = store.latest_checkpoint()
    assert ck is not None and (ck.id, ck.blob, ck.n_observations) == (cid, good, 5)
    with Store.open(store.path.parent) as other:  # and so it is for another process
        assert other.latest_checkpoint().blob == good
        assert other.integrity_check() == ["ok"]


def test_damaged_checkpoint_detected(store: Store) -> None:
    cid = store.save_checkpoint(b"model-bytes", n_obs=1)
    store._conn.execute("UPDATE checkpoints SET blob = ? WHERE id = ?", (b"model-bytez", cid))
    with pytest.raises(ModelStateError, match="damaged"):
        store.latest_checkpoint()


def test_bad_checkpoint_arguments(store: Store) -> None:
    with pytest.raises(ModelStateError):
        store.save_checkpoint(b"", n_obs=0)
    with pytest.raises(ModelStateError):
        store.save_checkpoint(b"x", n_obs=-1)


# ---------------------------------------------------------------------- vehicles
def test_vehicles(store: Store) -> None:
    vid = store.add_vehicle({"name": "van", "mass_kg": 2500.0})
    assert store.vehicle().id == vid and store.vehicle(1).spec == VEHICLE
    trip = store.add_trip(**_trip_kwargs([1, 2]))
    assert store.get_trip(trip).vehicle_id == vid
    assert [v.name for v in store.vehicles()] == ["test-car", "van"]


def test_registered_vehicle_is_not_the_physics_vehicle(store: Store) -> None:
    """The store's vehicle record has its own name (issue 18): one ``Vehicle`` in ev-nav."""
    import ev_nav.store as store_module
    from ev_nav.energy import Vehicle
    from ev_nav.store import RegisteredVehicle

    assert not hasattr(store_module, "Vehicle")
    rec = store.vehicle()
    assert isinstance(rec, RegisteredVehicle) and not isinstance(rec, Vehicle)
    assert Vehicle(**rec.spec).to_dict() == Vehicle(**VEHICLE).to_dict()


# ---------------------------------------------------------------------- migrations
def _make_v1_state(state: Path) -> None:
    """A state exactly as schema version 1 wrote it (one vehicle as JSON in meta)."""
    state.mkdir()
    conn = sqlite3.connect(Store.db_path(state), isolation_level=None)
    store_mod.MIGRATIONS[0](conn)
    conn.execute("PRAGMA user_version = 1")
    conn.executemany(
        "INSERT INTO meta(key, value) VALUES (?, ?)",
        [
            ("network_hash", "hash-old"),
            ("network_ref", "old.npz"),
            ("model_kind", "gp"),
            ("created", "2026-01-01T00:00:00+00:00"),
            ("vehicle", json.dumps(VEHICLE)),
        ],
    )
    conn.execute(
        """INSERT INTO trips(created, origin_segment, goal_segment, policy, seed, route_json,
               predicted_wh, predicted_sd_wh, length_m, time_s)
           VALUES ('2026-01-01', 1, 3, 'bucb', NULL, '[1, 2, 3]', 50.0, 2.0, 300.0, 30.0)"""
    )
    conn.execute(
        "INSERT INTO observation_batches(trip_id, kind, created, n_rows) VALUES (1, 'total', "
        "'2026-01-01', 1)"
    )
    conn.execute(
        "INSERT INTO observations(batch_id, trip_id, kind, segment_id, energy_wh, created) "
        "VALUES (1, 1, 'total', NULL, 48.5, '2026-01-01')"
    )
    conn.close()


def test_migration_from_v1_preserves_data(tmp_path: Path) -> None:
    state = tmp_path / "old"
    _make_v1_state(state)
    with Store.open(state) as s:
        assert s.schema_version == SCHEMA_VERSION == 8
        (batch,) = s.observations()  # an old total batch covers the planned route
        assert batch.segment_ids.tolist() == [1, 2, 3]
        v = s.vehicle()
        assert (v.id, v.name, v.spec) == (1, "test-car", VEHICLE)
        assert "vehicle" not in s.meta()
        (trip,) = s.list_trips()
        assert (trip.policy, trip.vehicle_id, trip.predicted_wh) == ("bucb", 1, 50.0)
        assert s.observed_total(trip.id) == 48.5
        # schema 3: earlier trips ran from segment start to segment end, every segment whole
        assert (trip.start_fraction, trip.end_fraction) == (0.0, 1.0)
        (batch,) = s.observations()
        np.testing.assert_array_equal(batch.weights, [1.0, 1.0, 1.0])
        assert s.integrity_check() == ["ok"]
        # the migrated state is fully usable
        t2 = s.add_trip(**_trip_kwargs([2, 3]))
        s.add_observations(t2, [2, 3], [1.0, 2.0])


def test_migration_to_v4_records_cache_checksums(tmp_path: Path) -> None:
    """Schema 4 adds the checksums of the cache files. A schema-3 state's existing cache files
    have none: they are refused once (with a notice) and rebuilt; what is written from then on
    is recorded and read back."""
    from ev_nav.errors import StateNotice
    from ev_nav.store import StateCache

    state = tmp_path / "old"
    _make_v1_state(state)
    conn = sqlite3.connect(Store.db_path(state), isolation_level=None)
    for k in (1, 2):
        store_mod.MIGRATIONS[k](conn)
    conn.execute("PRAGMA user_version = 3")
    conn.close()
    cache = StateCache(state)
    cache.folder.mkdir()
    old = np.arange(12.0).reshape(3, 4)
    np.save(cache.folder / "prior-old.npy", old)  # written by an ev-nav before schema 4
    with Store.open(state) as s:
        assert s.schema_version == SCHEMA_VERSION  # 4 and later
        assert s.cache_checksums() == {}
        assert s.integrity_check() == ["ok"]
    with pytest.warns(StateNotice, match="no checksum recorded"):
        assert cache.read_array("prior-old.npy", (3, 4)) is None
    assert not (cache.folder / "prior-old.npy").exists()
    cache.write_array("prior-new.npy", old)
    np.testing.assert_array_equal(cache.read_array("prior-new.npy", (3, 4)), old)
    with Store.open(state) as s:
        (name,) = s.cache_checksums()
        assert name == "prior-new.npy"


def test_trips_between_points_and_totals_of_a_driven_route(store: Store) -> None:
    """A trip that starts and ends part-way along its end segments keeps where; its total
    weighs those segments by the share driven; a total may name the route actually driven."""
    t = store.add_trip(**_trip_kwargs([1, 2, 3]), start_fraction=0.25, end_fraction=0.5)
    trip = store.get_trip(t)
    np.testing.assert_array_equal(trip.shares, [0.75, 1.0, 0.5])
    store.add_total_observation(t, 40.0)
    t2 = store.add_trip(**_trip_kwargs([4, 5]))
    store.add_total_observation(t2, 30.0, route=[4, 6, 5], start_fraction=0.1, end_fraction=0.9)
    a, b = store.observations()
    np.testing.assert_array_equal(a.segment_ids, [1, 2, 3])
    np.testing.assert_array_equal(a.weights, [0.75, 1.0, 0.5])
    np.testing.assert_array_equal(b.segment_ids, [4, 6, 5])
    np.testing.assert_allclose(b.weights, [0.9, 1.0, 0.9])
    before = _dump(store.path)
    for bad in (dict(start_fraction=1.5), dict(route=[7], start_fraction=0.6, end_fraction=0.2)):
        with pytest.raises(InvalidObservation):
            store.add_total_observation(t2, 30.0, allow_repeat=True, **{"route": [4, 5], **bad})
    with pytest.raises(StateError, match="in \\[0, 1\\]"):
        store.add_trip(**_trip_kwargs([1, 2]), end_fraction=-0.1)
    assert _dump(store.path) == before


def test_failed_migration_leaves_old_version(tmp_path: Path, monkeypatch) -> None:
    state = tmp_path / "old"
    _make_v1_state(state)
    before = _dump(Store.db_path(state))

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done(x)")
        raise RuntimeError("simulated crash inside a migration")

    monkeypatch.setattr(store_mod.schema, "MIGRATIONS", (store_mod.MIGRATIONS[0], broken))
    with pytest.raises(RuntimeError, match="simulated crash"):
        Store.open(state)
    conn = sqlite3.connect(Store.db_path(state))
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()
    assert _dump(Store.db_path(state)) == before
    monkeypatch.undo()
    with Store.open(state) as s:  # the real migration still works afterwards
        assert s.schema_version == SCHEMA_VERSION


# ---------------------------------------------------------------------- history / visits
def test_history_and_visit_counts(store: Store) -> None:
    a = store.add_trip(**_trip_kwargs([1, 2, 3]))
    b = store.add_trip(**_trip_kwargs([3, 4]))
    c = store.add_trip(**_trip_kwargs([2, 3, 9]))  # planned, never driven
    store.add_observations(a, [1, 2, 3], [1.0, 2.0, 4.0], temperature_c=-2.5)
    store.add_total_observation(b, 33.0)
    hist = store.history()
    # each trip's observed energy and the temperature its observations were recorded at
    assert [(t.id, total, temp) for t, total, temp in hist] == [
        (a, 7.0, -2.5), (b, 33.0, None), (c, None, None)]
    assert [store.observed_total(t.id) for t, _, _ in hist] == [7.0, 33.0, None]
    counts = store.visit_counts()
    expected = np.zeros(N_SEG, dtype=np.int64)
    np.add.at(expected, [1, 2, 3, 3, 4], 1)
    np.testing.assert_array_equal(counts, expected)
    everything = store.visit_counts(observed_only=False)
    assert everything[9] == 1 and everything[3] == 3
    with pytest.raises(UnknownSegmentError):
        store.visit_counts(4)


def test_unopenable_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StateError, match="not a directory"):
        Store.create(blocker, "h", "r", "gp", VEHICLE)
    sub = tmp_path / "s"
    sub.mkdir()
    Store.db_path(sub).mkdir()  # a directory where the database file should be
    with pytest.raises(StateError):
        Store.open(sub)


def test_a_write_held_up_by_another_process_says_that_it_waits(store, monkeypatch):
    """A write that finds the state locked by another process's transaction waited up to a
    minute without a word; it now says so after a short wait, and goes on when the lock is
    free. The other process's lock is released only once the notice has come, so the test does
    not depend on how fast the machine is."""
    import warnings

    import ev_nav.store.connection as connection
    from ev_nav.errors import StateNotice

    monkeypatch.setattr(connection, "LOCK_NOTICE_MS", 100)
    other = sqlite3.connect(store.path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # another process's write, holding the lock
    notices = []

    def show(message, category, *_a, **_k):
        notices.append((category, str(message)))
        other.execute("COMMIT")  # that write ends

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = show
        vid = store.add_vehicle({"name": "second"}, make_current=False)
    other.close()
    assert notices == [(StateNotice, f"the state {store.path.parent} is being written by "
                                     "another process; waiting up to 60 s for it")]
    assert store.vehicle(vid).name == "second"
    # an unhindered write says nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.add_vehicle({"name": "third"}, make_current=False)


def test_a_closed_store_says_so_on_every_use(store):
    # a read of a closed session's trip was an AttributeError on None; writes said it already
    from ev_nav.errors import StateError

    store.close()
    for use in (lambda: store.get_trip(1), store.list_trips, store.observations,
                lambda: store.vehicle(), lambda: store.add_vehicle({"name": "x"})):
        with pytest.raises(StateError, match="the store is closed"):
            use()
    store.close()  # still idempotent


def test_dismissing_a_segment_that_is_no_number_is_a_named_error(store):
    # was int()'s "invalid literal for int() with base 10: 'a'"
    with pytest.raises(InvalidObservation, match="segment ids are whole numbers, got \\['a'\\]"):
        store.dismiss_changes(["a"])
