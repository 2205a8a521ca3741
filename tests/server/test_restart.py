"""Restarts with a backlog (issue 32, item 2): a server answers before it has learned what the
last checkpoint missed, and a command replays at most ``CLI_MAX_REPLAY`` batches, saying how far
behind its model is. The timed figures come from ``scripts/bench_restart.py`` (its ``--quick``
form runs here, its numbers are not asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

import ev_nav
import ev_nav.settings
from ev_nav.server.service import FleetService
from ev_nav.store import Store
from tests.cli_helpers import run_cli

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_restart.py"


def _state_with_backlog(tmp_path: Path, n: int) -> tuple[Path, int]:
    """A GP state with a checkpoint after 2 trips, then ``n`` batches it never learned."""
    state = tmp_path / "s"
    rng = np.random.default_rng(0)
    with ev_nav.create_state(state, synthetic=400, model="gp") as session:
        mid = session.net.segment_midpoints()
        for _ in range(2):
            a, b = rng.choice(mid.shape[0], 2, replace=False)
            trip = ev_nav.plan_trip(session, (mid[a, 1], mid[a, 0]), (mid[b, 1], mid[b, 0]))
            ev_nav.record_total(session, trip.trip_id, trip.routes["planned"].predicted_wh)
        net = session.net
    with Store.open(state) as store:
        for k in range(n):
            path = np.arange(3) + 3 * (k % 20)  # any segments: the store records them
            t = store.add_trip(origin_segment=int(path[0]), goal_segment=int(path[-1]),
                               policy="ts", route=path, predicted_wh=1.0, predicted_sd_wh=1.0,
                               length_m=float(net.length_m[path].sum()), time_s=1.0)
            last = store.add_observations(t, path, net.e_det()[path] + 1.0, allow_off_route=True)
    return state, last


def test_a_command_replays_at_most_the_limit_and_says_how_far_behind(
    tmp_path, capsys, monkeypatch
):
    state, _ = _state_with_backlog(tmp_path, 6)
    monkeypatch.setattr(ev_nav.settings, "CLI_MAX_REPLAY", 2)
    with ev_nav.open_state(state, with_model=False) as session:
        mid = session.net.segment_midpoints()
    code, out, err = run_cli(capsys, "route", state, "--from", f"{mid[5, 1]},{mid[5, 0]}",
                             "--to", f"{mid[300, 1]},{mid[300, 0]}", "--dry-run", "--no-map")
    assert code == 0, err
    assert "the model is 4 observation batches behind the state (a command replays at most 2)" \
        in err
    # learning happens where observations are recorded: the full session catches up
    with ev_nav.open_state(state) as session:
        assert session.behind == 0


def test_the_server_answers_on_the_checkpoint_and_learns_the_backlog_after(
    tmp_path, monkeypatch
):
    import ev_nav.trips.changes as changes_module
    import ev_nav.trips.session as session_module

    state, last = _state_with_backlog(tmp_path, 30)
    release = threading.Event()
    real_apply = session_module.apply_batches

    def held_apply(model, batches, *resets):  # the writer waits here until the test has looked
        if batches:
            assert release.wait(120), "test never released the writer"
        real_apply(model, batches, *resets)

    monkeypatch.setattr(session_module, "apply_batches", held_apply)
    monkeypatch.setattr(changes_module, "apply_batches", held_apply)  # the writer learns there
    with FleetService(state, poll_s=0.05) as svc:
        # serving already, on the checkpoint: the backlog is not learned yet, and health says so
        assert svc.snapshot.applied_upto < last
        health = svc.health()
        assert health["stale"] and health["behind_batches"] == 30
        release.set()
        deadline = time.monotonic() + 120
        while svc.snapshot.applied_upto < last:
            assert time.monotonic() < deadline, "backlog never absorbed"
            time.sleep(0.05)
        assert svc.health()["behind_batches"] == 0 and not svc.health()["stale"]
        deadline = time.monotonic() + 60
        while True:  # checkpointed once learned, without waiting for the periodic checkpoint
            with Store.open(state) as store:
                if store.checkpoints()[0].last_batch_id == last:
                    break
            assert time.monotonic() < deadline, "the learned backlog was never checkpointed"
            time.sleep(0.05)


def test_bench_restart_quick_prints_its_lines():
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                         text=True, timeout=900, check=True).stdout
    assert re.search(r"^restart to health: [\d.]+ s", out, re.M), out
    assert re.search(r"^backlog 300 absorbed in [\d.]+ s", out, re.M), out
    assert re.search(r"^backlog checkpointed after [\d.]+ s", out, re.M), out


def test_bench_restart_quick_keeps_the_batches_given():
    # --quick used to cut any --batches to at most 300; 0 batches was accepted
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--batches", "350"],
                         capture_output=True, text=True, timeout=900, check=True).stdout
    assert re.search(r"^backlog 350 absorbed in [\d.]+ s", out, re.M), out
    bad = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--batches", "0"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--batches: expected a whole number >= 1" in bad.stderr
