"""Crash test: SIGKILL a process that writes observations and checkpoints, many times.

A child process (this file run as a script) writes trips, per-segment observations, trip totals
and ~1 MB model checkpoints in a loop and prints one ``ACK`` line after each call returns (i.e.
after the commit). It is killed with SIGKILL, restarted, and killed again: two rounds in three it
kills itself at a named crash point inside or just after a commit (``ev_nav.faults``: the same
instants on any machine, however loaded), every third round the parent kills it after a random
delay (anywhere, with no claim about where it lands).
Afterwards the database must pass ``PRAGMA integrity_check`` and hold every acknowledged
observation bit for bit, every batch must be complete (no half-written batch), and the current
checkpoint must be the last acknowledged one or a newer one that verifies against its hash.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ev_nav.faults import ENV_VAR

N_SEGMENTS = 5000
N_KILLS = 24
# Deterministic kill points, cycled (None: the parent kills after a random delay).
CRASH_AT = (
    "commit-write:2",  # inside a trip's transaction
    "commit-observation:1",  # inside an observation batch's transaction
    None,
    "commit-checkpoint:1",  # inside a ~1 MB checkpoint's transaction
    "committed-observation:2",  # just after a commit, before the ACK line
    None,
)


def _energy_digest(values: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f8").tobytes()).hexdigest()


# ====================================================================== child
def _child(state_dir: str, seed: int) -> None:
    """Write forever; print ``BEGIN`` before and ``ACK`` after each committed write."""
    from ev_nav.store import Store

    rng = np.random.default_rng(seed)
    store = Store.open(state_dir)
    out = sys.stdout
    out.write("READY\n")
    out.flush()
    k = 0
    while True:
        k += 1
        n = int(rng.integers(200, 2000))
        route = rng.choice(N_SEGMENTS, size=n, replace=False)
        out.write("BEGIN trip\n")
        out.flush()
        trip = store.add_trip(
            origin_segment=int(route[0]),
            goal_segment=int(route[-1]),
            policy="ts",
            route=route,
            predicted_wh=float(rng.normal(500, 50)),
            predicted_sd_wh=5.0,
            length_m=float(n * 100),
            time_s=float(n * 8),
            seed=seed,
        )
        out.write(f"ACK trip {trip}\n")
        if k % 4 == 0:
            total = float(rng.normal(400.0, 30.0))
            out.write("BEGIN total\n")
            out.flush()
            batch = store.add_total_observation(trip, total)
            out.write(f"ACK total {batch} {trip} {total!r}\n")
        else:
            wh = rng.normal(20.0, 15.0, size=n)  # includes negative (regenerating) segments
            out.write("BEGIN obs\n")
            out.flush()
            batch = store.add_observations(trip, route, wh)
            out.write(f"ACK obs {batch} {trip} {n} {_energy_digest(wh)}\n")
        out.flush()
        if k % 3 == 0:
            blob = rng.bytes(int(rng.integers(500_000, 1_500_000)))
            out.write("BEGIN ckpt\n")
            out.flush()
            cid = store.save_checkpoint(blob, n_obs=k)
            out.write(f"ACK ckpt {cid} {hashlib.sha256(blob).hexdigest()}\n")
            out.flush()


# ====================================================================== parent
def _run_and_kill(
    state: Path, seed: int, rng: np.random.Generator, crash_at: str | None
) -> list[str]:
    """Start a child and have it killed (at ``crash_at``, or by us at a random moment after it is
    ready); return its output lines."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    env.pop(ENV_VAR, None)
    if crash_at is not None:
        env[ENV_VAR] = crash_at
    proc = subprocess.Popen(
        [sys.executable, __file__, "child", str(state), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        first = proc.stdout.readline()
        assert first == "READY\n", f"child failed to start: {first!r} {proc.stderr.read()}"
        if crash_at is None:
            time.sleep(float(rng.uniform(0.02, 0.6)))
            os.kill(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"child died on its own: {err}"
    lines = out.splitlines()
    if out and not out.endswith("\n"):
        lines = lines[:-1]  # a line cut by the kill was never fully reported
    return lines


def test_sigkill_during_writes_loses_nothing(tmp_path: Path) -> None:
    from ev_nav.store import Store

    state = tmp_path / "state"
    Store.create(
        state, "crash-net", "synthetic:crash", "gp", {"name": "car"}, n_segments=N_SEGMENTS
    ).close()
    rng = np.random.default_rng(20261122)
    acked_obs: dict[int, tuple[int, int, str]] = {}
    acked_total: dict[int, tuple[int, float]] = {}
    acked_ckpt: list[tuple[int, str]] = []
    inside: dict[str, int] = {}
    t0 = time.monotonic()
    kills = 0
    planned_inside = 0
    while kills < N_KILLS:
        crash_at = CRASH_AT[kills % len(CRASH_AT)]
        planned_inside += crash_at is not None
        lines = _run_and_kill(state, seed=kills, rng=rng, crash_at=crash_at)
        kills += 1
        for line in lines:
            parts = line.split()
            if parts[:2] == ["ACK", "obs"]:
                acked_obs[int(parts[2])] = (int(parts[3]), int(parts[4]), parts[5])
            elif parts[:2] == ["ACK", "total"]:
                acked_total[int(parts[2])] = (int(parts[3]), float(parts[4]))
            elif parts[:2] == ["ACK", "ckpt"]:
                acked_ckpt.append((int(parts[2]), parts[3]))
        if lines and lines[-1].startswith("BEGIN"):
            kind = lines[-1].split()[1]
            inside[kind] = inside.get(kind, 0) + 1
        # Every restart must find a healthy store (recovering the WAL of the killed writer).
        with Store.open(state) as s:
            assert s.integrity_check() == ["ok"]

    print(
        f"\n{kills} kills in {time.monotonic() - t0:.1f} s; killed inside a write: {inside}; "
        f"acknowledged: {len(acked_obs)} segment batches, {len(acked_total)} totals, "
        f"{len(acked_ckpt)} checkpoints"
    )
    # Every crash-point round died between a BEGIN and its ACK (inside or right after a write).
    assert sum(inside.values()) >= planned_inside, f"crash points not reached: {inside}"
    assert acked_obs and acked_ckpt

    with Store.open(state) as s:
        assert s.integrity_check() == ["ok"]
        assert s._conn.execute("PRAGMA foreign_key_check").fetchall() == []
        batches = {b.id: b for b in s.observations()}
        for bid, (trip, n, digest) in acked_obs.items():
            b = batches.get(bid)
            assert b is not None, f"acknowledged batch {bid} lost"
            assert (b.trip_id, b.kind, b.segment_ids.size) == (trip, "segment", n)
            assert _energy_digest(b.energy_wh) == digest, f"batch {bid} energies changed"
            np.testing.assert_array_equal(b.segment_ids, s.get_trip(trip).route)
        for bid, (trip, total) in acked_total.items():
            b = batches.get(bid)
            assert b is not None, f"acknowledged total {bid} lost"
            assert (b.trip_id, b.kind, float(b.energy_wh[0])) == (trip, "total", total)
        # Atomicity: no batch is partially written, whether acknowledged or not.
        incomplete = s._conn.execute(
            """SELECT b.id FROM observation_batches b LEFT JOIN observations o
               ON o.batch_id = b.id GROUP BY b.id HAVING COUNT(o.id) != b.n_rows"""
        ).fetchall()
        assert incomplete == []
        observed_without_data = s._conn.execute(
            """SELECT COUNT(*) FROM trips t WHERE (t.status = 'observed') !=
               EXISTS (SELECT 1 FROM observation_batches b WHERE b.trip_id = t.id)"""
        ).fetchone()[0]
        assert observed_without_data == 0
        # The current checkpoint: the last acknowledged one, or a newer one whose commit landed
        # just before the kill; either way it verifies against its stored hash.
        ck = s.latest_checkpoint()
        last_id, last_sha = max(acked_ckpt)
        assert ck is not None and ck.id >= last_id
        if ck.id == last_id:
            assert hashlib.sha256(ck.blob).hexdigest() == last_sha
        rows = s._conn.execute("SELECT sha256, blob FROM checkpoints").fetchall()
        assert all(hashlib.sha256(blob).hexdigest() == sha for sha, blob in rows)
        assert s._conn.execute("SELECT SUM(is_current) FROM checkpoints").fetchone()[0] == 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"usage: {sys.argv[0]} child STATE_DIR SEED")
