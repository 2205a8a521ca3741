"""SIGKILL and concurrency through the real CLI (issue 5): nothing acknowledged is ever lost.

A planned set of trips is observed by ``ev-nav observe`` processes that kill themselves at named
crash points (inside and after the observation's commit, after the acknowledgement, after the model
update, inside and after the checkpoint's commit: ``ev_nav.faults``), so every run of the test kills
at the same instants whatever the machine's speed. Afterwards the
store passes ``PRAGMA integrity_check``, every observation whose command had printed "recorded"
is present exactly once and whole, and the learned model still loads: for the BI model it equals a
model rebuilt from all stored observations.
"""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from ev_nav.bandits.routing import Router
from ev_nav.cli import main
from ev_nav.faults import ENV_VAR
from ev_nav.store import Store
from ev_nav.trips import apply_batches, build_model, open_session

SEGMENTS = 600


def _plan_trips(state, n, rng):
    """Record ``n`` planned trips through the library (planning is not what is tested here)."""
    session = open_session(state, with_model=False)
    try:
        net, store = session.net, session.store
        router = Router(net)
        trips = []
        for _ in range(n):
            s, g = (int(x) for x in rng.choice(net.n_segments, 2, replace=False))
            route = router.route(np.maximum(net.e_det(), 0.0), s, g)
            tid = store.add_trip(
                origin_segment=s,
                goal_segment=g,
                policy="mean",
                route=route,
                predicted_wh=1.0,
                predicted_sd_wh=0.0,
                length_m=1.0,
                time_s=1.0,
            )
            trips.append((tid, route))
        return trips
    finally:
        session.close()


def _observe_cmd(state, tid, route, rng, tmp_path):
    if rng.random() < 0.5:
        return ["observe", str(state), str(tid), "--total-wh", f"{rng.uniform(50, 500):.3f}",
                "--force"]  # synthetic readings: durability is tested here, not plausibility
    csv = tmp_path / f"obs-{tid}.csv"
    wh = rng.normal(20, 5, route.size)
    csv.write_text(
        "segment,energy_wh\n" + "".join(f"{a},{b:.6f}\n" for a, b in zip(route, wh, strict=True))
    )
    return ["observe", str(state), str(tid), "--segments", str(csv), "--force"]


# Where ``ev-nav observe`` is killed (ev_nav.faults crash points), and whether the observation
# must survive: before its commit it is not recorded; from its commit on it must be there, whether
# or not the command lived to print "recorded" (acknowledged); a kill in the checkpoint's
# transaction must leave the previous checkpoint current and the model rebuildable by replay.
CRASH_POINTS = (
    ("commit-observation", False),
    ("committed-observation", True),
    ("observe-acknowledged", True),
    ("observe-model-updated", True),
    ("commit-checkpoint", True),
    ("committed-checkpoint", True),
)


@pytest.mark.parametrize("model,rounds", [("bi", 2), ("gp", 1)])
def test_sigkill_during_observe_loses_nothing(tmp_path, model, rounds):
    """Every crash point is hit deterministically (no timing): nothing committed is lost."""
    rng = np.random.default_rng(7)
    state = tmp_path / "state"
    assert (
        main(["init", str(state), "--synthetic", "--segments", str(SEGMENTS), "--model", model])
        == 0
    )
    plan = [p for _ in range(rounds) for p in CRASH_POINTS] + [(None, True)] * 2
    trips = _plan_trips(state, len(plan), rng)
    acknowledged, must_exist, must_not_exist = {}, set(), set()
    for (tid, route), (point, survives) in zip(trips, plan, strict=True):
        cmd = [sys.executable, "-m", "ev_nav.cli", *_observe_cmd(state, tid, route, rng, tmp_path)]
        env = dict(os.environ)
        env.pop(ENV_VAR, None)
        if point is not None:
            env[ENV_VAR] = point
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        if point is None:
            assert proc.returncode == 0, proc.stderr
        else:
            assert proc.returncode == -signal.SIGKILL, f"{point}: {proc.stderr}"
        if "recorded" in proc.stdout:
            acknowledged[tid] = proc.stdout
        (must_exist if survives else must_not_exist).add(tid)
    assert set(acknowledged) <= must_exist

    with Store.open(state) as store:
        assert store.integrity_check() == ["ok"]
        batches = store.observations()
        by_trip = {}
        for b in batches:
            assert b.trip_id not in by_trip, "a trip observed twice"
            by_trip[b.trip_id] = b
        for tid in must_exist:
            assert tid in by_trip, f"committed observation of trip {tid} lost"
        for tid in must_not_exist:
            assert tid not in by_trip, f"trip {tid} recorded although killed before its commit"
        for tid, route in trips:  # whole batches only
            if tid in by_trip and by_trip[tid].kind == "segment":
                assert np.array_equal(np.sort(by_trip[tid].segment_ids), np.sort(route))

    # the model loads (checkpoint + replay) and, for BI, equals a rebuild from all observations
    session = open_session(state)
    try:
        post = session.model.posterior()
        assert np.isfinite(post.mean).all() and np.isfinite(post.std).all()
        if model == "bi":
            fresh = build_model("bi", session.net, session.vehicle)
            apply_batches(fresh, session.store.observations())
            np.testing.assert_allclose(post.mean, fresh.posterior().mean, rtol=1e-10)
            np.testing.assert_allclose(post.std, fresh.posterior().std, rtol=1e-10)
    finally:
        session.close()


def test_two_cli_processes_observe_concurrently(tmp_path):
    rng = np.random.default_rng(3)
    state = tmp_path / "state"
    assert (
        main(["init", str(state), "--synthetic", "--segments", str(SEGMENTS), "--model", "bi"]) == 0
    )
    trips = _plan_trips(state, 8, rng)
    procs = []
    for pair in range(0, 8, 2):  # start two observers at once, four times
        for tid, route in trips[pair : pair + 2]:
            cmd = [
                sys.executable,
                "-m",
                "ev_nav.cli",
                *_observe_cmd(state, tid, route, rng, tmp_path),
            ]
            procs.append(
                subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            )
        for p in procs[-2:]:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
    session = open_session(state)
    try:
        batches = session.store.observations()
        assert sorted(b.trip_id for b in batches) == [t for t, _ in trips]
        fresh = build_model("bi", session.net, session.vehicle)
        apply_batches(fresh, batches)
        np.testing.assert_allclose(
            session.model.posterior().mean, fresh.posterior().mean, rtol=1e-10
        )
    finally:
        session.close()
