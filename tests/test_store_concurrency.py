"""Two processes observing into the same state at the same time lose nothing.

Two workers (this file run as a script) start together on a barrier file and, in a tight loop,
observe the pre-planned trips assigned to them (like two ``ev-nav observe`` invocations), plan and
observe new trips of their own, and save checkpoints. Every write must succeed (the busy timeout
makes the loser of a lock race wait, not fail), every acknowledged batch must be in the database
afterwards, and the two workers' write periods must actually overlap.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

N_SEGMENTS = 3000
N_PREPLANNED = 80  # trips planned by the parent, observed half by each worker
N_OWN = 40  # trips each worker plans and observes itself


def _digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f8").tobytes()).hexdigest()


# ====================================================================== worker
def _worker(state_dir: str, worker: int, barrier: str) -> None:
    from ev_nav.store import Store

    rng = np.random.default_rng(1000 + worker)
    store = Store.open(state_dir)
    preplanned = [t for t in store.list_trips() if t.extra.get("worker") == worker]
    Path(f"{barrier}.ready{worker}").touch()  # imported and open: the parent may start us
    while not os.path.exists(barrier):  # start both workers at the same instant
        time.sleep(0.001)
    acks: list[dict[str, object]] = []
    t_start = time.time()
    for k in range(max(len(preplanned), N_OWN)):
        if k < len(preplanned):
            trip = preplanned[k]
            wh = rng.normal(15.0, 10.0, size=trip.route.size)
            bid = store.add_observations(trip.id, trip.route, wh)
            acks.append({"batch": bid, "trip": trip.id, "digest": _digest(wh)})
        if k < N_OWN:
            route = rng.choice(N_SEGMENTS, size=int(rng.integers(50, 400)), replace=False)
            tid = store.add_trip(
                origin_segment=int(route[0]),
                goal_segment=int(route[-1]),
                policy="bucb",
                route=route,
                predicted_wh=100.0,
                predicted_sd_wh=1.0,
                length_m=1.0,
                time_s=1.0,
                extra={"worker": worker, "own": True},
            )
            if k % 2:
                total = float(rng.normal(300.0, 20.0))
                bid = store.add_total_observation(tid, total)
                acks.append({"batch": bid, "trip": tid, "total": total})
            else:
                wh = rng.normal(15.0, 10.0, size=route.size)
                bid = store.add_observations(tid, route, wh)
                acks.append({"batch": bid, "trip": tid, "digest": _digest(wh)})
        # A real CLI process computes between writes (model update, routing); without such gaps
        # the writer that holds the lock re-takes it before the other's busy handler retries.
        time.sleep(float(rng.uniform(0.0, 0.01)))
        if k % 10 == 9:
            store.save_checkpoint(rng.bytes(200_000), n_obs=k)
    t_end = time.time()
    store.close()
    print(json.dumps({"worker": worker, "acks": acks, "start": t_start, "end": t_end}))


# ====================================================================== parent
def test_two_writers_lose_nothing(tmp_path: Path) -> None:
    from ev_nav.store import Store

    state = tmp_path / "state"
    rng = np.random.default_rng(7)
    with Store.create(
        state, "net", "synthetic:c", "bi", {"name": "car"}, n_segments=N_SEGMENTS
    ) as s:
        for k in range(N_PREPLANNED):
            route = rng.choice(N_SEGMENTS, size=int(rng.integers(50, 400)), replace=False)
            s.add_trip(
                origin_segment=int(route[0]),
                goal_segment=int(route[-1]),
                policy="ts",
                route=route,
                predicted_wh=1.0,
                predicted_sd_wh=1.0,
                length_m=1.0,
                time_s=1.0,
                extra={"worker": k % 2},
            )
    barrier = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "worker", str(state), str(w), str(barrier)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for w in (0, 1)
    ]
    # Start both at the same instant once both are ready (a handshake, not a guessed delay: on a
    # loaded machine the imports alone can take seconds).
    deadline = time.monotonic() + 300
    while not all(Path(f"{barrier}.ready{w}").exists() for w in (0, 1)):
        assert time.monotonic() < deadline, "workers did not start"
        assert all(p.poll() is None for p in procs), "a worker died before the start"
        time.sleep(0.01)
    barrier.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"worker failed:\n{err}"
        results.append(json.loads(out.strip().splitlines()[-1]))

    # The workers really wrote at the same time: in commit order (batch ids), the writer changes
    # many times. (Scheduling, not speed: a loaded machine slows both alike.)
    owner = {a["batch"]: w for w, r in enumerate(results) for a in r["acks"]}
    order = [owner[b] for b in sorted(owner)]
    switches = sum(a != b for a, b in zip(order, order[1:], strict=False))
    print(f"\nthe writer changed {switches} times in {len(order)} commits")
    assert switches >= 4

    with Store.open(state) as s:
        assert s.integrity_check() == ["ok"]
        batches = {b.id: b for b in s.observations()}
        acks = [a for r in results for a in r["acks"]]
        assert len(acks) == N_PREPLANNED + 2 * N_OWN
        assert len(batches) == len(acks), "batches were lost or duplicated"
        assert len({a["batch"] for a in acks}) == len(acks)
        for a in acks:
            b = batches[a["batch"]]
            assert b.trip_id == a["trip"]
            if "total" in a:
                assert b.kind == "total" and float(b.energy_wh[0]) == a["total"]
            else:
                assert b.kind == "segment" and _digest(b.energy_wh) == a["digest"]
        assert s.n_trips() == N_PREPLANNED + 2 * N_OWN
        assert all(t.status == "observed" for t in s.list_trips())
        # Both workers' batches interleave in commit order (true concurrency, not one after
        # the other).
        owner = [
            next(r["worker"] for r in results if bid in {a["batch"] for a in r["acks"]})
            for bid in sorted(batches)
        ]
        switches = int(np.count_nonzero(np.diff(owner)))
        print(f"commit order switched between workers {switches} times")
        assert switches >= 5
        assert s.latest_checkpoint() is not None


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "worker":
        _worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        sys.exit(f"usage: {sys.argv[0]} worker STATE_DIR WORKER BARRIER")


def test_second_store_in_a_process_keeps_the_first_ones_locks(tmp_path):
    """A process with one Store open opens and closes another (the server: its model writer
    keeps the state open while each request opens its own). Another process then opens and
    closes a connection: it must not see the state as unused and delete the WAL under the
    first process (closing a raw descriptor of the file would drop all of this process's
    POSIX locks on it; then the first connection fails with 'disk I/O error')."""
    from ev_nav.store import Store

    def trip() -> dict:
        return dict(origin_segment=1, goal_segment=3, policy="mean", route=[1, 2, 3],
                    predicted_wh=10.0, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0)

    state = tmp_path / "s"
    Store.create(state, "h", "ref", "gp", {"name": "car"}, n_segments=10).close()
    first = Store.open(state)
    try:
        first.add_trip(**trip())
        Store.open(state).close()  # a request's own connection, opened and closed
        wal = state / "ev-nav.sqlite-wal"
        assert wal.exists()
        code = (
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1])\n"
            "c.execute('SELECT COUNT(*) FROM trips').fetchone()\n"
            "c.close()\n"
        )
        subprocess.run([sys.executable, "-c", code, str(state / "ev-nav.sqlite")], check=True,
                       timeout=120)
        assert wal.exists(), "another process deleted the WAL of an open state"
        trip_id = first.add_trip(**trip())  # the first connection still reads and writes
        assert first.get_trip(trip_id).id == trip_id and first.n_trips() == 2
    finally:
        first.close()


def test_threads_of_one_process_queue_for_writes_before_sqlite(tmp_path):
    """Writers in one process (a server's request threads, each with its own connection) take
    one process-wide lock before SQLite's: a second thread's write waits on it, not in SQLite's
    sleeping busy handler, and starts when the first commits; both trips are stored."""
    import threading

    from ev_nav.store import Store

    def trip() -> dict:
        return dict(origin_segment=1, goal_segment=3, policy="mean", route=[1, 2, 3],
                    predicted_wh=10.0, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0)

    state = tmp_path / "s"
    Store.create(state, "h", "ref", "gp", {"name": "car"}, n_segments=10).close()
    entered, release = threading.Event(), threading.Event()
    order: list[str] = []
    locks = []

    def hold() -> None:  # SQLite connections belong to their thread: each opens its own
        with Store.open(state) as store, store._write("test"):
            locks.append(store._write_lock)
            entered.set()
            release.wait(30)
            order.append("first commits")

    def write() -> None:
        with Store.open(tmp_path / "." / "s") as store:  # the same database, named otherwise
            locks.append(store._write_lock)
            store.add_trip(**trip())
            order.append("second wrote")

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(30)
    writer = threading.Thread(target=write)
    writer.start()
    writer.join(0.2)
    assert writer.is_alive() and order == []  # queued behind the first writer
    assert locks[0].locked()
    release.set()
    holder.join(30)
    writer.join(30)
    assert order == ["first commits", "second wrote"]
    assert locks[0] is locks[1] and not locks[0].locked()
    with Store.open(state) as store:
        assert store.n_trips() == 1


def _plan(trip_id: int, *, fail: bool = False):
    from ev_nav.store import TripPlan

    if fail:
        raise ValueError("no route")
    return TripPlan(origin_segment=1, goal_segment=3, policy="ts", route=[1, 2, 3],
                    predicted_wh=10.0, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0,
                    seed=trip_id)


def _wait_queued(writers, n: int) -> None:
    deadline = time.monotonic() + 30
    while writers.queued < n:
        assert time.monotonic() < deadline, "the second writer never queued"
        time.sleep(0.001)


def test_grouped_writes_share_one_commit_and_return_committed(tmp_path):
    """Two threads' trip writes queued on each other share one transaction (one commit, one
    fsync): the first leaves the commit to the second and returns only once it is made; both
    trips are then on disk, seen by a fresh connection, with distinct ids in commit order and
    the Thompson seed each was planned with."""
    import threading

    from ev_nav.store import Store

    state = tmp_path / "s"
    Store.create(state, "h", "ref", "gp", {"name": "car"}, n_segments=10).close()
    keep = Store.open(state)  # (SQLite connections belong to their thread: each opens its own)
    writers = keep._writers
    groups_before = writers.group
    ids: dict[str, int] = {}
    seen_after_return: dict[str, int] = {}

    def plan_first(trip_id: int):
        _wait_queued(writers, 1)  # the second thread now waits for the write lock
        return _plan(trip_id)

    def run(name: str, plan) -> None:
        with Store.open(state) as store:
            ids[name] = store.plan_trip(plan)
        with Store.open(state) as fresh:  # another connection: only committed rows
            seen_after_return[name] = fresh.n_trips()

    a = threading.Thread(target=run, args=("a", plan_first))
    a.start()
    b = threading.Thread(target=run, args=("b", _plan))
    _wait_for(lambda: writers.lock.locked())
    b.start()
    a.join(30)
    b.join(30)
    assert not a.is_alive() and not b.is_alive()
    assert writers.group == groups_before + 1  # one transaction for both
    assert seen_after_return == {"a": 2, "b": 2}  # neither returned before the commit
    assert sorted(ids.values()) == [1, 2] and ids["a"] == 1
    with Store.open(state) as fresh:
        assert [(t.id, t.seed) for t in fresh.list_trips()] == [(1, 1), (2, 2)]
    keep.close()


def test_a_failed_write_leaves_its_group_committed(tmp_path):
    """A grouped write that fails is rolled back alone (its savepoint) and raises its own
    error; the write that waited in the same group is committed."""
    import threading

    import pytest

    from ev_nav.store import Store

    state = tmp_path / "s"
    Store.create(state, "h", "ref", "gp", {"name": "car"}, n_segments=10).close()
    second = Store.open(state)
    writers = second._writers
    ids: list[int] = []

    def plan_first(trip_id: int):
        _wait_queued(writers, 1)
        return _plan(trip_id)

    def run() -> None:
        with Store.open(state) as first:
            ids.append(first.plan_trip(plan_first))

    a = threading.Thread(target=run)
    a.start()
    _wait_for(lambda: writers.lock.locked())
    with pytest.raises(ValueError, match="no route"):
        second.plan_trip(lambda trip_id: _plan(trip_id, fail=True))
    a.join(30)
    assert ids == [1] and not writers.open
    with Store.open(state) as fresh:
        assert [t.id for t in fresh.list_trips()] == [1]
    # the next write starts a new group and gets the next id
    assert second.plan_trip(_plan) == 2
    second.close()


def test_many_threads_grouped_writes_lose_nothing(tmp_path):
    """Eight threads plan and observe trips as fast as they can (a server's request threads),
    some plans failing: every trip and batch a call returned is stored, ids are unique, and
    each trip's seed is its own id."""
    import threading

    from ev_nav.store import Store

    state = tmp_path / "s"
    Store.create(state, "h", "ref", "gp", {"name": "car"}, n_segments=10).close()
    trips: list[int] = []
    batches: list[int] = []
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            with Store.open(state) as store:
                for i in range(25):
                    if (k + i) % 7 == 0:
                        try:
                            store.plan_trip(lambda t: _plan(t, fail=True))
                        except ValueError:
                            pass
                        continue
                    trip = store.plan_trip(_plan)
                    trips.append(trip)
                    batches.append(store.add_observations(trip, [1, 2, 3], [1.0, 2.0, 3.0]))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in threads)
    with Store.open(state) as store:
        stored = store.list_trips()
        assert sorted(t.id for t in stored) == sorted(trips) == list(range(1, len(trips) + 1))
        assert all(t.seed == t.id for t in stored)
        assert sorted(b.id for b in store.observations()) == sorted(batches)
        assert len(set(batches)) == len(batches)


def _wait_for(condition) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)


def test_grouped_writes_follow_a_replaced_database_file(tmp_path):
    """The shared write connection of grouped writes is reopened when the database file was
    replaced (as ``ev-nav doctor`` replaces a salvaged one) while a store stayed open: the next
    trip lands in the file the state now uses, not in the replaced one."""
    import os
    import sqlite3

    from ev_nav.store import Store

    state = tmp_path / "s"
    Store.create(state, "h", "ref", "gp", {"name": "car"}, n_segments=10).close()
    kept = Store.open(state)  # keeps the process's shared write connection open
    assert kept.plan_trip(_plan) == 1
    db = Store.db_path(state)
    copy = db.with_name("copy.sqlite")
    src, dst = sqlite3.connect(db), sqlite3.connect(copy)
    src.backup(dst)
    src.close()
    dst.close()
    for side in ("-wal", "-shm"):  # moved aside with the replaced file, as the doctor does
        if db.with_name(db.name + side).exists():
            os.replace(db.with_name(db.name + side), tmp_path / f"old{side}")
    os.replace(copy, db)
    assert kept.plan_trip(_plan) == 2
    kept.close()
    with Store.open(state) as fresh:
        assert [t.id for t in fresh.list_trips()] == [1, 2]
