#!/usr/bin/env python
"""A SIGKILL storm against one state: ``ev-nav observe`` processes killed at random instants and at
every named crash point, two at a time, then the state is checked.

Each round starts two ``ev-nav observe`` commands on the same state (different trips), and kills
them: odd rounds by the crash points of :mod:`ev_nav.faults` (inside/after the observation's
commit, after the acknowledgement, after the model update, inside/after the checkpoint's commit),
even rounds by a SIGKILL from here after a random delay. Afterwards it checks what
``docs/reliability.md`` promises and prints the figures:

* ``PRAGMA integrity_check`` is ``ok``;
* every acknowledged observation (its command printed "recorded") is stored exactly once, whole;
  nothing is stored for a command killed before its commit;
* every checkpoint verifies against its hash, one is current;
* the model rebuilt by the next command equals a model built from all stored observations.

Bounded: ``--rounds`` rounds (default 60; ``--quick`` 6), loopback-free, in a temporary folder.
Usage: python scripts/sigkill_storm.py [--rounds N] [--quick] [--seed S]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ev_nav.bandits.routing import Router
from ev_nav.cli import count_arg
from ev_nav.cli import main as cli
from ev_nav.faults import ENV_VAR
from ev_nav.store import Store
from ev_nav.trips import apply_batches, build_model, open_session

SEGMENTS = 600
CRASH_POINTS = (
    "commit-observation",
    "committed-observation",
    "observe-acknowledged",
    "observe-model-updated",
    "commit-checkpoint",
    "committed-checkpoint",
)


def _plan(state: Path, n: int, rng: np.random.Generator) -> list[tuple[int, np.ndarray]]:
    session = open_session(state, with_model=False)
    try:
        router = Router(session.net)
        out = []
        for _ in range(n):
            s, g = (int(x) for x in rng.choice(session.net.n_segments, 2, replace=False))
            route = router.route(np.maximum(session.net.e_det(), 0.0), s, g)
            tid = session.store.add_trip(origin_segment=s, goal_segment=g, policy="mean",
                                         route=route, predicted_wh=1.0, predicted_sd_wh=0.0,
                                         length_m=1.0, time_s=1.0)
            out.append((tid, route))
        return out
    finally:
        session.close()


def _command(state, tid, route, rng, folder) -> tuple[list[str], np.ndarray | float]:
    if rng.random() < 0.5:
        total = round(float(rng.uniform(50, 500)), 3)
        return ["observe", str(state), str(tid), "--total-wh", repr(total), "--force"], total
    wh = np.round(rng.normal(20, 5, route.size), 6).tolist()
    csv = folder / f"obs-{tid}.csv"
    rows = "".join(f"{a},{b!r}\n" for a, b in zip(route.tolist(), wh, strict=True))
    csv.write_text("segment,energy_wh\n" + rows)
    return ["observe", str(state), str(tid), "--segments", str(csv), "--force"], np.asarray(wh)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=count_arg, help="SIGKILL rounds (default 60; quick 6)"
    )
    parser.add_argument("--quick", action="store_true", help="6 rounds (unless --rounds)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rounds = args.rounds or (6 if args.quick else 60)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ev-nav-storm-") as tmp:
        folder = Path(tmp)
        state = folder / "state"
        if cli(["init", str(state), "--synthetic", "--segments", str(SEGMENTS), "--model",
                "bi"]) != 0:
            return 1
        trips = _plan(state, 2 * rounds, rng)
        sent: dict[int, np.ndarray | float] = {}
        acked: set[int] = set()
        before_commit: set[int] = set()
        kills = by_point = by_timer = 0
        env_base = {k: v for k, v in os.environ.items() if k != ENV_VAR}
        for r in range(rounds):
            procs = []
            for tid, route in trips[2 * r : 2 * r + 2]:
                argv, value = _command(state, tid, route, rng, folder)
                sent[tid] = value
                env = dict(env_base)
                point = None
                if r % 2 == 1:
                    point = CRASH_POINTS[(r // 2 + len(procs)) % len(CRASH_POINTS)]
                    env[ENV_VAR] = point
                    if point == "commit-observation":
                        before_commit.add(tid)
                p = subprocess.Popen([sys.executable, "-m", "ev_nav.cli", *argv], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                procs.append((tid, p, point))
            if r % 2 == 0:
                time.sleep(float(rng.uniform(0.2, 4.0)))  # start-up, commit, update, checkpoint
                for _, p, _ in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGKILL)
            for tid, p, point in procs:
                out, err = p.communicate(timeout=600)
                if p.returncode == -signal.SIGKILL:
                    kills += 1
                    by_point += point is not None
                    by_timer += point is None
                elif p.returncode != 0:
                    print(f"unexpected failure of trip {tid}: {err.strip()}")
                    return 1
                if "recorded" in out:
                    acked.add(tid)

        lost = wrong = 0
        with Store.open(state) as s:
            integrity = s.integrity_check()
            batches = s.observations()
            by_trip: dict[int, list] = {}
            for b in batches:
                by_trip.setdefault(b.trip_id, []).append(b)
            duplicated = sum(len(v) > 1 for v in by_trip.values())
            for tid in acked:
                if tid not in by_trip:
                    lost += 1
            for tid, bs in by_trip.items():
                value = sent[tid]
                got = bs[0].energy_wh
                same = (float(got[0]) == value) if isinstance(value, float) else (
                    np.array_equal(got, value))
                wrong += not same
            recorded_before_commit = len(before_commit & set(by_trip))
            ckpts = s._conn.execute("SELECT sha256, blob, is_current FROM checkpoints").fetchall()
            bad_ckpt = sum(hashlib.sha256(b).hexdigest() != h for h, b, _ in ckpts)
            current = sum(c for _, _, c in ckpts)
        session = open_session(state)
        try:
            fresh = build_model("bi", session.net, session.vehicle)
            apply_batches(fresh, session.store.observations())
            same_model = np.array_equal(session.model.posterior().mean, fresh.posterior().mean)
        finally:
            session.close()
    seconds = time.perf_counter() - t0
    print(f"rounds: {rounds} (2 concurrent observe commands each), {seconds:.0f} s")
    print(f"processes killed: {kills} ({by_point} at crash points, {by_timer} by timer)")
    print(f"acknowledged observations: {len(acked)}; stored batches: {len(batches)}")
    print(f"lost acknowledged observations: {lost}")
    print(f"observations stored twice: {duplicated}; stored with wrong values: {wrong}")
    print(f"recorded although killed before the commit: {recorded_before_commit}")
    print(f"integrity_check: {' '.join(integrity)}; checkpoints failing their hash: {bad_ckpt}; "
          f"current checkpoints: {current}")
    print(f"model after the storm equals a rebuild from all observations: {same_model}")
    ok = (integrity == ["ok"] and lost == duplicated == wrong == recorded_before_commit == 0
          and bad_ckpt == 0 and current == 1 and same_model)
    print("storm verdict:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
