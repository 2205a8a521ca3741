"""Untrusted files never run code; damaged states recover; errors name the real problem (issue 17).

One test per row of the issue's table, each re-running the attack or accident as written and
asserting the safe result: no code executed (a marker file a malicious pickle would create stays
absent), one-line errors, and an unchanged (or losslessly repaired) state.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ev_nav import checkpoints
from ev_nav.cli import main
from ev_nav.errors import NetworkCacheError, StateError, UnknownTripError, UnsafeCheckpointError
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.store import Store
from tests.cli_helpers import latlon as _latlon
from tests.cli_helpers import run_cli as _run

SEGMENTS = 400


class _Evil:
    """Unpickling this creates ``marker`` (a stand-in for any command an attacker would run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _evil_blob(marker: Path) -> bytes:
    return pickle.dumps({"model": _Evil(marker)})


@pytest.fixture(scope="module")
def net():
    return synthetic_town(SEGMENTS, seed=0)


def _state(tmp_path, capsys, model="bi", trips=2, net=None):
    """A state with ``trips`` routed and observed trips."""
    state = tmp_path / "state"
    code, _, err = _run(
        capsys, "init", state, "--synthetic", "--segments", SEGMENTS, "--model", model
    )
    assert code == 0, err
    for t in range(1, trips + 1):
        code, _, err = _run(
            capsys, "route", state, "--from", _latlon(net, 3 * t), "--to", _latlon(net, 300 + t),
            "--policy", "mean", "--no-map",
        )
        assert code == 0, err
        # synthetic readings, far from the prior's prediction: recorded with --force
        code, _, err = _run(capsys, "observe", state, t, "--total-wh", 100 + t, "--force")
        assert code == 0, err
    return state


def _snapshot(state):
    """Trips and observations of a state (what must never change or get lost)."""
    with Store.open(state) as s:
        trips = [(t.id, t.route.tolist(), t.seed, t.status) for t in s.list_trips()]
        obs = [(b.id, b.trip_id, b.kind, b.energy_wh.tolist()) for b in s.observations()]
    return trips, obs


def _one_line_error(code, err):
    assert code != 0
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("ev-nav: error:"), err
    assert "Traceback" not in err
    return lines[0]


def _small_runs(horizon, seeds):
    """BI runs on a 300-segment town (seconds each), one per seed."""
    from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec

    return [
        RunSpec(
            network=NetworkSpec(kind="synthetic", n_segments=300, seed=1),
            agent=AgentSpec(model="bi", policy="ts"),
            trips=TripSpec(kind="random", name="r", min_distance_m=300.0),
            horizon=horizon,
            seed=s,
        )
        for s in seeds
    ]


# ----------------------------------------------------------------------------- pickle
def test_decode_refuses_pickle_without_side_effect(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(UnsafeCheckpointError, match="refused unread"):
        checkpoints.decode(_evil_blob(marker))
    import torch

    buf = __import__("io").BytesIO()
    torch.save({"x": _Evil(marker)}, buf)  # the format of checkpoints before this fix
    with pytest.raises(UnsafeCheckpointError):
        checkpoints.decode(buf.getvalue())
    # a planted blob that starts with the right magic but smuggles an object array
    fake = checkpoints.MAGIC + b"PK\x03\x04" + _evil_blob(marker)
    with pytest.raises(checkpoints.ModelStateError):
        checkpoints.decode(fake)
    assert not marker.exists()


def test_checkpoint_roundtrip_is_exact(net):
    from ev_nav.energy import get_vehicle
    from ev_nav.trips import build_model

    model = build_model("gp", net, get_vehicle("sumo-default"))
    rng = np.random.default_rng(0)
    for _ in range(3):
        seg = rng.choice(net.n_segments, 30, replace=False)
        model.update(seg, rng.normal(20, 5, seg.size))
    blob = checkpoints.encode(model.state_dict())
    again = build_model("gp", net, get_vehicle("sumo-default"))
    again.load_state_dict(checkpoints.decode(blob))
    assert checkpoints.encode(again.state_dict()) == blob  # bit-identical
    a, b = model.posterior(), again.posterior()
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.std, b.std)


def test_state_with_planted_pickle_checkpoint_runs_no_code(tmp_path, capsys, net):
    state = _state(tmp_path, capsys, model="bi", net=net)
    before = _snapshot(state)
    marker = tmp_path / "pwned"
    with sqlite3.connect(Store.db_path(state)) as conn:  # the attack: blob AND its hash replaced
        blob = _evil_blob(marker)
        conn.execute(
            "UPDATE checkpoints SET blob = ?, sha256 = ? WHERE is_current = 1",
            (blob, __import__("hashlib").sha256(blob).hexdigest()),
        )
    code, out, err = _run(
        capsys, "route", state, "--from", _latlon(net, 5), "--to", _latlon(net, 200),
        "--policy", "mean", "--no-map",
    )
    assert code == 0, err
    assert not marker.exists()
    assert "notice:" in err and "old pickle format" in err and len(err.strip().splitlines()) == 1
    trips, obs = _snapshot(state)
    assert obs == before[1] and trips[:-1] == before[0]
    # the fallback wrote a good checkpoint: the next command needs no notice
    code, _, err = _run(capsys, "history", state)
    assert code == 0 and "notice" not in err


def test_grid_with_planted_pickle_checkpoint_runs_no_code(tmp_path):
    from ev_nav.sim.fleet import (
        CHECKPOINT_NAME,
        LEGACY_CHECKPOINT_NAME,
    )
    from ev_nav.sim.grid import make_executor, run_grid

    specs = _small_runs(horizon=4, seeds=(0, 1))
    marker = tmp_path / "pwned"
    planted, legacy = specs
    for spec, name in ((planted, CHECKPOINT_NAME), (legacy, LEGACY_CHECKPOINT_NAME)):
        d = tmp_path / "runs" / spec.run_id
        d.mkdir(parents=True)
        (d / name).write_bytes(_evil_blob(marker))
    res = run_grid(specs, tmp_path, executor=make_executor("inprocess"), progress=False)
    assert not marker.exists()
    # the planted file in the current format is refused by name, the run recorded as failed
    assert [o.run_id for o in res.failed] == [planted.run_id]
    assert "UnsafeCheckpointError" in res.failed[0].error
    assert "UnsafeCheckpointError" in (tmp_path / "runs" / planted.run_id / "error.txt").read_text()
    # an old-format checkpoint.pt is never read: that run simply starts over and finishes
    assert (tmp_path / "runs" / legacy.run_id / "trips.csv").is_file()
    assert not (tmp_path / "runs" / legacy.run_id / LEGACY_CHECKPOINT_NAME).exists()


# ----------------------------------------------------------------------------- paths
def test_config_names_cannot_leave_the_output_folder(tmp_path):
    cfg = tmp_path / "cfg" / "fleet.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        """
horizon = 2
seeds = [0]
[network]
kind = "synthetic"
n_segments = 300
name = "../../../x"
[[routes]]
name = "../../y/../../z"
kind = "random"
[[agents]]
model = "bi"
policy = "ts"
"""
    )
    out = tmp_path / "deep" / "out"
    assert main(["fleet", "grid", str(cfg), "--executor", "inprocess", "--out", str(out),
                 "--quiet"]) == 0
    runs = list((out / "runs").iterdir())
    # one folder, directly in runs/, whose name is one component (no separator, not "..")
    assert len(runs) == 1 and runs[0].resolve().parent == (out / "runs").resolve()
    assert not runs[0].name.startswith(".")
    outside = [p for p in tmp_path.rglob("*") if out not in p.parents and p != out
               and cfg.parent not in (p, *p.parents) and p not in out.parents]
    assert outside == []

    from ev_nav.errors import ConfigError
    from ev_nav.sim.fleet import run_dir_for

    with pytest.raises(ConfigError):
        run_dir_for(out, "../escape")


# ----------------------------------------------------------------------------- recovery
def test_damaged_current_checkpoint_falls_back(tmp_path, capsys, net):
    state = _state(tmp_path, capsys, model="gp", net=net)
    before = _snapshot(state)
    with Store.open(state) as s:
        ids = s.checkpoint_ids()
    assert len(ids) >= 2
    with sqlite3.connect(Store.db_path(state)) as conn:  # zero the current blob
        n = conn.execute("SELECT length(blob) FROM checkpoints WHERE is_current = 1").fetchone()[0]
        conn.execute("UPDATE checkpoints SET blob = zeroblob(?) WHERE is_current = 1", (n,))
    code, out, err = _run(capsys, "doctor", state)
    assert code == 1 and "damaged (hash mismatch)" in out and "--repair" in out
    code, out, err = _run(capsys, "history", state)  # reads only: no model needed
    assert code == 0
    code, out, err = _run(capsys, "map", state, "--layer", "mean", "--out", tmp_path / "m.html")
    assert code == 0, err
    assert "notice:" in err and "damaged" in err and "no observation was lost" in err
    assert "rebuilt from an older checkpoint" in err
    with sqlite3.connect(Store.db_path(state)) as conn:  # every checkpoint damaged
        conn.execute("UPDATE checkpoints SET blob = zeroblob(length(blob))")
    code, out, err = _run(capsys, "map", state, "--layer", "mean", "--out", tmp_path / "m.html")
    assert code == 0, err  # (it said "an older checkpoint" whenever there were observations)
    assert "model rebuilt from the prior and the recorded observations" in err, err
    # the repair: the damaged checkpoints are gone, a good one written from all observations
    code, out, err = _run(capsys, "doctor", state, "--repair")
    assert code == 0, out
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 0 and "healthy" in out
    assert _snapshot(state) == before


def test_io_errors_never_advise_deleting(tmp_path, capsys, net, monkeypatch):
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    before = _snapshot(state)
    import ev_nav.store.connection as store_mod

    real_connect = sqlite3.connect

    class _FullDisk:
        def __init__(self, conn):
            self._c = conn

        def execute(self, sql, *a):
            if sql.startswith("PRAGMA journal_mode"):
                raise sqlite3.OperationalError("database or disk is full")
            return self._c.execute(sql, *a)

        def close(self):
            self._c.close()

    def _unopenable(*a, **k):
        raise sqlite3.OperationalError("unable to open database file")

    for fake in (_unopenable, lambda *a, **k: _FullDisk(real_connect(*a, **k))):
        monkeypatch.setattr(store_mod.sqlite3, "connect", fake)
        code, out, err = _run(capsys, "history", state)
        line = _one_line_error(code, err)
        assert "remove" not in line and "delete" not in line
        assert "permissions" in line or "I/O problem" in line
    monkeypatch.setattr(store_mod.sqlite3, "connect", real_connect)
    assert _snapshot(state) == before


def test_network_checked_by_array_content(tmp_path, capsys):
    net = synthetic_town(SEGMENTS, seed=0)
    path = tmp_path / "net.npz"
    net.save(path)
    state = tmp_path / "state"
    code, _, err = _run(capsys, "init", state, "--network", path, "--model", "bi")
    assert code == 0, err
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["length_m"] = arrays["length_m"] * 10  # same header
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    with pytest.raises(NetworkCacheError, match="modified"):
        RoadNetwork.load(path)
    code, _, err = _run(capsys, "history", state)
    assert code == 0  # history needs no network
    code, _, err = _run(capsys, "route", state, "--from", _latlon(net, 1), "--to",
                        _latlon(net, 200), "--no-map")
    assert "modified" in _one_line_error(code, err)
    # an attacker who also rewrites the header's hash is caught by the state's own record
    header = json.loads(bytes(arrays["header_json"]).decode())
    header["arrays_sha256"] = None
    arrays["header_json"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    code, _, err = _run(capsys, "route", state, "--from", _latlon(net, 1), "--to",
                        _latlon(net, 200), "--no-map")
    assert "different contents" in _one_line_error(code, err)
    with Store.open(state) as s:
        assert s.n_trips() == 0


def test_damaged_pages_give_one_line_and_doctor_salvages(tmp_path, capsys, net):
    state = _state(tmp_path, capsys, model="bi", trips=2, net=net)
    rng = np.random.default_rng(1)
    with Store.open(state) as s:  # enough per-segment rows to fill several pages
        for _ in range(40):
            route = rng.choice(net.n_segments, 40, replace=False)
            tid = s.add_trip(origin_segment=int(route[0]), goal_segment=int(route[-1]),
                             policy="mean", route=route, predicted_wh=1.0, predicted_sd_wh=0.0,
                             length_m=1.0, time_s=1.0)
            s.add_observations(tid, route, rng.normal(20, 5, route.size))
    trips_before, obs_before = _snapshot(state)
    db = Store.db_path(state)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute(
            "SELECT pageno FROM dbstat WHERE name = 'observations' AND pagetype = 'leaf' "
            "ORDER BY pageno"
        ).fetchall()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    assert len(pages) >= 2
    victim = pages[len(pages) // 2][0]
    with open(db, "r+b") as fh:  # 4 KiB of garbage inside the observations' pages
        fh.seek((victim - 1) * page_size)
        fh.write(np.random.default_rng(0).bytes(page_size))
    for argv in (("history", state), ("route", state, "--from", _latlon(net, 5), "--to",
                                       _latlon(net, 200), "--no-map")):
        code, _, err = _run(capsys, *argv)
        line = _one_line_error(code, err)
        assert "doctor" in line and "remove" not in line
    damaged = db.read_bytes()
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "database damaged" in out
    # "nothing was written": not the database, and no log files beside it either (a read-only
    # connection made an empty -wal and a -shm that it could not remove)
    assert db.read_bytes() == damaged
    assert not [p.name for p in state.iterdir() if p.name.endswith(("-wal", "-shm"))]
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    assert "rows recovered" in out and "damaged file kept" in out
    assert list(state.glob("ev-nav.sqlite.damaged-*"))
    with Store.open(state) as s:
        assert s.integrity_check() == ["ok"]
    trips, obs = _snapshot(state)
    # the trips' pages were intact: all recovered, each still observed unless every row of its
    # readings lived on the damaged page (its batch went: the trip is planned again)
    observed = {b[1] for b in obs}
    assert [t[:3] for t in trips] == [t[:3] for t in trips_before]
    assert [t[3] for t in trips] == [
        "observed" if t[0] in observed else "planned" for t in trips_before]
    # nothing invented: every recovered batch is an original one, whole or missing the rows that
    # lived on the damaged page
    original = {b[0]: b for b in obs_before}
    for b in obs:
        o = original[b[0]]
        assert b == o or (b[:3] == o[:3] and len(b[3]) < len(o[3]))
    assert len(obs) >= len(obs_before) // 2
    code, _, err = _run(capsys, "history", state)
    assert code == 0, err


def test_salvage_keeps_trip_ids_of_lost_trips_taken(tmp_path, capsys, net):
    """Newest trips lost on a damaged page: their readings are kept (unused: a reading needs its
    trip's route), and a new trip is numbered
    after them (it took the newest lost trip's id and inherited its readings: observe refused
    it as already observed, history showed the old reading against the new route)."""
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    rng = np.random.default_rng(2)
    with Store.open(state) as s:
        for _ in range(30):
            route = rng.choice(net.n_segments, 60, replace=False)
            tid = s.add_trip(origin_segment=int(route[0]), goal_segment=int(route[-1]),
                             policy="mean", route=route, predicted_wh=1.0, predicted_sd_wh=0.0,
                             length_m=1.0, time_s=1.0)
            s.add_total_observation(tid, 500.0)
        newest = tid
    from ev_nav.trips.session import open_session, save_checkpoint

    with open_session(state) as session:  # a checkpoint that learned every batch
        save_checkpoint(session)
    db = Store.db_path(state)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("SELECT pageno FROM dbstat WHERE name = 'trips' AND "
                             "pagetype = 'leaf' ORDER BY pageno").fetchall()
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    assert len(pages) >= 3
    with open(db, "r+b") as fh:  # the page of the newest trips
        fh.seek((pages[-1][0] - 1) * page_size)
        fh.write(np.random.default_rng(0).bytes(page_size))
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    assert "belong to lost trips" in out and "numbered after them" in out, out
    # the checkpoints that learned the lost trips' readings went: the model is the one a
    # rebuild from the state's trips gives (it kept them, and jumped at the next rebuild)
    assert "had learned them: deleted" in out, out
    with open_session(state) as session:
        served = session.model.posterior().mean.copy()
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM checkpoints")
    with open_session(state) as session:
        np.testing.assert_allclose(session.model.posterior().mean, served, rtol=0, atol=1e-9)
    with Store.open(state) as s:
        with pytest.raises(UnknownTripError):
            s.get_trip(newest)
    with sqlite3.connect(db) as conn:  # its reading is kept
        assert conn.execute("SELECT COUNT(*) FROM observation_batches WHERE trip_id = ?",
                            (newest,)).fetchone()[0] == 1
    code, out, err = _run(capsys, "route", state, "--from", _latlon(net, 5), "--to",
                          _latlon(net, 200), "--no-map", "--json")
    assert code == 0, err
    assert json.loads(out)["trip"] == newest + 1
    code, out, err = _run(capsys, "observe", state, newest + 1, "--total-wh", "300", "--force")
    assert code == 0, err


def test_a_reading_lost_on_a_damaged_page_is_reported_with_what_helps(tmp_path, capsys, net):
    """A total whose row a salvage could not recover: history shows the trip unobserved (it was
    an IndexError traceback), doctor names the trip and the command that helps (it advised
    --repair, which changes nothing), and forgetting the trip's readings makes it healthy."""
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)  # trip 1 observed
    with sqlite3.connect(Store.db_path(state)) as conn:  # as a salvage leaves it
        conn.execute("DELETE FROM observations WHERE trip_id = 1")
    code, out, err = _run(capsys, "history", state, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["observed_wh"] is None
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "rows missing (batch 1 of trip 1)" in out, out
    assert f"'ev-nav observe {state} TRIP --undo'" in out and "--repair' to fix" not in out
    code, _, err = _run(capsys, "observe", state, 1, "--undo")
    assert code == 0, err
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 0 and "healthy" in out, out


def test_repair_after_lost_readings_rebuilds_the_model_from_what_is_left(tmp_path, capsys, net):
    """The checkpoints had learned readings a salvage lost: doctor called them usable, and the
    model kept the lost readings until some later rebuild dropped them (a jump). --repair now
    takes the batches as what is left of them and rebuilds the model from the prior."""
    from ev_nav.trips import apply_batches, build_model, open_session

    state = _state(tmp_path, capsys, model="bi", trips=3, net=net)  # trips 1-3 observed
    with sqlite3.connect(Store.db_path(state)) as conn:  # as a salvage leaves it
        conn.execute("DELETE FROM observations WHERE trip_id = 2")
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "whose lost readings the state no longer holds" in out, out
    code, out, err = _run(capsys, "doctor", state, "--repair")
    assert "took 1 observation batch as the rows left of them" in out, (code, out, err)
    assert "rebuilt the model from the prior" in out, out
    session = open_session(state)
    try:
        fresh = build_model("bi", session.net, session.vehicle)
        apply_batches(fresh, session.store.observations())
        np.testing.assert_allclose(session.model.posterior().mean, fresh.posterior().mean,
                                   rtol=1e-12)
    finally:
        session.close()
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 0 and "healthy" in out, out


def test_maps_is_a_file(tmp_path, capsys, net):
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    before = _snapshot(state)
    shutil.rmtree(state / "maps", ignore_errors=True)
    (state / "maps").touch()
    code, _, err = _run(capsys, "route", state, "--from", _latlon(net, 5), "--to",
                        _latlon(net, 200))
    assert "not a folder" in _one_line_error(code, err)
    assert _snapshot(state) == before  # nothing recorded


def test_zero_byte_state_is_left_alone(tmp_path, capsys, net):
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    db = Store.db_path(state)
    for side in ("-wal", "-shm"):
        Path(str(db) + side).unlink(missing_ok=True)
    db.write_bytes(b"")
    for argv in (("history", state), ("route", state, "--from", "1,1", "--to", "2,2"),
                 ("observe", state, "1", "--total-wh", "5")):
        code, _, err = _run(capsys, *argv)
        line = _one_line_error(code, err)
        assert "0 bytes" in line and "nothing was written" in line
    assert db.stat().st_size == 0
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "0 bytes" in out
    assert "--repair cannot help" in out and "'ev-nav doctor" not in out


def test_doctor_on_a_truncated_database_does_not_send_the_user_to_doctor(tmp_path, capsys, net):
    # its problem line ended "run 'ev-nav doctor STATE' to check it", in doctor's own report
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    db = Store.db_path(state)
    for side in ("-wal", "-shm"):
        Path(str(db) + side).unlink(missing_ok=True)
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    code, _, err = _run(capsys, "history", state)
    assert f"run 'ev-nav doctor {state}'" in _one_line_error(code, err)  # elsewhere: advised
    code, out, _ = _run(capsys, "doctor", state)
    # doctor's own report names what is wrong (a file cut short: test_a_state_cut_short_...)
    assert code == 1 and f"problem: {db.name} is cut short:" in out, out
    assert "'ev-nav doctor" not in out


@pytest.mark.parametrize("content", [b"hello\n", bytes(range(256)) * 20])
def test_doctor_on_a_file_sqlite_cannot_read_advises_no_useless_repair(
    tmp_path, capsys, net, content
):
    """doctor recommended --repair, which then failed with the same problem; now it says that
    --repair cannot help and what can, never to delete the file, and leaves it as it was."""
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    db = Store.db_path(state)
    for side in ("-wal", "-shm"):
        Path(str(db) + side).unlink(missing_ok=True)
    db.write_bytes(content)
    for argv in (("doctor", state), ("doctor", state, "--repair")):
        code, out, _ = _run(capsys, *argv)
        assert code == 1 and "not an SQLite database" in out
        assert "--repair cannot help" in out and "restore it from a backup" in out
        assert "--repair' to fix" not in out
        assert "delete" not in out and "remove" not in out
    assert db.read_bytes() == content
    assert sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name)) == [db.name]


@pytest.mark.parametrize(
    ("sql", "record"),
    [
        ("UPDATE trips SET route_json = '[1,2,' WHERE id = 2", "trip 2 ("),
        ("UPDATE trips SET extra_json = '{' WHERE id = 1", "trip 1 ("),
        ("UPDATE vehicles SET spec = '{bad'", "vehicle 1 ("),
        ("UPDATE vehicles SET spec = '[1]'", "vehicle 1 (a vehicle description is a JSON object"),
        ("UPDATE observations SET energy_wh = 'abc' WHERE batch_id = 2",
         "an observation of batch 2"),
        # JSON, but not a list of ids: doctor's own scan passed it and then sent the user to
        # doctor; the batches' reader is the one rule
        ("UPDATE observation_batches SET route_json = '\"abc\"' WHERE id = 1",
         "the route of batch 1"),
        ("UPDATE observation_batches SET route_json = '{' WHERE id = 2", "the route of batch 2"),
        ("UPDATE observation_batches SET start_fraction = 'x' WHERE id = 1",
         "the route of batch 1"),
    ],
)
def test_a_damaged_record_is_one_line_and_doctor_names_it(tmp_path, capsys, net, sql, record):
    """A stored value ev-nav cannot have written (edited by hand, or by another program): history,
    undo and doctor ended in a JSONDecodeError or ValueError traceback, or doctor said healthy;
    now one line naming the record, and doctor lists it and changes nothing."""
    state = _state(tmp_path, capsys, model="bi", trips=2, net=net)
    db = Store.db_path(state)
    with sqlite3.connect(db) as conn:
        conn.execute(sql)
    conn.close()
    before = db.read_bytes()
    if record.startswith("vehicle"):  # read by what plans, not by history
        argv = ("route", state, "--from", _latlon(net, 3), "--to", _latlon(net, 300), "--no-map")
    else:
        argv = ("history", state)
    code, _, err = _run(capsys, *argv)
    assert code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and f"holds a damaged record: {record}" in err
    assert f"'ev-nav doctor {state}' checks every record" in err
    for argv in (("doctor", state), ("doctor", state, "--repair")):
        code, out, err = _run(capsys, *argv)
        assert code == 1 and "Traceback" not in err and "healthy" not in out
        assert f"problem: {record}" in out and "restore the state from a backup" in out
        assert "delete" not in out and "remove" not in out
    assert db.read_bytes() == before


# ----------------------------------------------------------------------------- processes
def _suicidal_task(spec, out_dir, checkpoint_every, resume):
    """A grid task whose worker dies by SIGKILL for one run (the fault the test injects)."""
    from ev_nav.sim.grid import execute_run

    if spec.seed == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return execute_run(spec, out_dir, checkpoint_every, resume)


def test_dying_worker_fails_only_its_own_run(tmp_path):
    from ev_nav.sim.grid import LocalPoolExecutor, run_grid

    specs = _small_runs(horizon=3, seeds=range(4))
    res = run_grid(specs, tmp_path, executor=LocalPoolExecutor(2, task=_suicidal_task),
                   progress=False)
    assert [o.run_id for o in res.failed] == [specs[1].run_id]
    err = (tmp_path / "runs" / specs[1].run_id / "error.txt").read_text()
    assert "killed by signal 9 (SIGKILL)" in err
    done = {o.run_id for o in res.outcomes if o.status == "done"}
    assert done == {s.run_id for s in specs} - {specs[1].run_id}


def _sleeping_task(spec, out_dir, checkpoint_every, resume):
    """A grid task that says it started and then works for a long time (until stopped)."""
    import time

    (Path(out_dir) / f"started-{spec.seed}").write_text("")
    time.sleep(600)


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_ctrl_c_stops_a_local_pool_at_once(tmp_path, how):
    """Ctrl-C reaches the whole process group: workers interrupted inside the pool's queues
    deadlocked it, and 'fleet grid' hung for good after saying 'interrupted' (4 of 7 tries).
    The parent alone handles it now, and stops its workers. SIGTERM, sent to the parent alone
    (``timeout``, a job scheduler), ended it at once and left its workers running as orphans
    that went on writing runs into the folder; it now stops them as Ctrl-C does."""
    script = (  # (a hang prints where the parent waits; SIGINT as a terminal starts it)
        "import faulthandler, signal, sys\n"
        "faulthandler.dump_traceback_later(100, exit=True)\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from ev_nav.sim.grid import LocalPoolExecutor, run_grid\n"
        "from tests.test_untrusted_files import _small_runs, _sleeping_task\n"
        "try:\n"
        f"    run_grid(_small_runs(horizon=3, seeds=range(4)), {str(tmp_path)!r},\n"
        "             executor=LocalPoolExecutor(2, task=_sleeping_task), progress=False)\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(130)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=Path(__file__).parent.parent,
                            start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2400):  # both workers are inside a run (at most 2 minutes)
            if len(list(tmp_path.glob("started-*"))) == 2 or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert len(list(tmp_path.glob("started-*"))) == 2, proc.stderr.read()
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        else:
            os.kill(proc.pid, signal.SIGTERM)  # to the parent only
        _, err = proc.communicate(timeout=150)  # the runs would sleep for 10 minutes
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert not list(tmp_path.glob("runs/*/error.txt"))  # no run wrote a false failure
    for _ in range(600):  # no worker left running (multiprocessing's resource tracker, also
        try:  # of the group, ends once its parent has gone)
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("processes of the pool are still running after 30 s")


def test_a_pools_ctrl_c_is_raised_where_the_pool_checks_for_it():
    """The pool's parent takes Ctrl-C as a flag raised between its waits (an interrupt raised
    inside concurrent.futures could leave a lock held and the exit waiting for good); a second
    Ctrl-C raises at once; an ignored SIGINT (a background job) stays ignored."""
    # as a terminal starts a command (a test process started in the background inherits an
    # ignored SIGINT)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _deferred_interrupt_checks()
    finally:
        signal.signal(signal.SIGINT, inherited)


def _deferred_interrupt_checks() -> None:
    from ev_nav.sim.grid import _DeferredInterrupt

    with _DeferredInterrupt() as interrupt:
        interrupt.check()  # nothing yet
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.01)  # the handler runs here, and only sets the flag
        assert interrupt.pending
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        with pytest.raises(KeyboardInterrupt):  # the second
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with _DeferredInterrupt():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_concurrent_routes_never_share_a_seed(tmp_path, capsys, net):
    state = _state(tmp_path, capsys, model="bi", trips=0, net=net)
    cmd = [sys.executable, "-m", "ev_nav.cli", "route", str(state), "--from", _latlon(net, 7),
           "--to", _latlon(net, 250), "--policy", "ts", "--no-map"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    with Store.open(state) as s:
        trips = s.list_trips()
    assert sorted(t.id for t in trips) == [1, 2, 3]
    assert all(t.seed == t.id for t in trips)  # the seed is the trip's own id


def test_opening_foreign_files_writes_nothing(tmp_path):
    state = tmp_path / "s"
    state.mkdir()
    from ev_nav.cli import main

    db = Store.db_path(state)
    # an SQLite database someone else made; then one with a schema version of its own (migrating
    # it wrote ev-nav's tables into it: doctor did, before calling it damaged)
    for version, said in ((0, "no schema"), (3, "it has no ev-nav tables")):
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS other(x)")
            conn.execute(f"PRAGMA user_version = {version}")
        conn.close()
        before = db.read_bytes()
        with pytest.raises(StateError, match=f"not an ev-nav state .{said}"):
            Store.open(state)
        assert main(["doctor", str(state)]) == 2
        assert db.read_bytes() == before
        assert not Path(str(db) + "-wal").exists()


def test_a_checkpoint_stored_as_text_is_an_unusable_checkpoint(tmp_path, capsys, net):
    """A checkpoint's bytes stored as text that is not UTF-8 (another tool's UPDATE): doctor
    and every command reading checkpoints failed with a two-line "Could not decode to UTF-8"
    error that sent the user to doctor; it is now a damaged checkpoint, which --repair
    replaces."""
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    with sqlite3.connect(Store.db_path(state)) as conn:
        conn.execute("UPDATE checkpoints SET blob = CAST(X'FF0A41' AS TEXT)")
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "damaged (hash mismatch)" in out, out
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    assert code == 0 and "rebuilt the model" in out, out
    code, out, err = _run(capsys, "route", state, "--from", _latlon(net, 5), "--to",
                          _latlon(net, 200), "--no-map")
    assert code == 0, err


def test_doctor_finds_a_missing_table_and_recreates_it(tmp_path, capsys, net):
    """A table dropped by hand (another tool): commands called the state damaged and sent the
    user to doctor, which called it healthy."""
    from ev_nav.store.schema import schema_tables

    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    with sqlite3.connect(Store.db_path(state)) as conn:
        conn.execute("DROP TABLE segment_changes")
    code, _, err = _run(capsys, "changes", state)
    assert "doctor" in _one_line_error(code, err)
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "table(s) missing: segment_changes" in out, out
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    assert code == 0 and "created the missing table(s) segment_changes, empty" in out, out
    fresh = _state(tmp_path / "fresh", capsys, model="bi", trips=0, net=net)
    names = []
    for st in (state, fresh):
        with sqlite3.connect(Store.db_path(st)) as conn:
            names.append({r[0] for r in conn.execute("SELECT name FROM sqlite_master")})
    assert names[0] == names[1] and set(schema_tables()) <= names[0]  # its indexes too
    code, out, err = _run(capsys, "changes", state)
    assert code == 0 and "no road flagged as changed" in out, err


@pytest.mark.parametrize("table", ["vehicles", "trips", "observations"])
def test_doctor_will_not_recreate_a_table_of_the_states_record(tmp_path, capsys, net, table):
    """Dropped trips, readings or vehicles: recreated empty, the state was unusable ('unknown
    vehicle id 1'), and plain doctor read the missing table ('no such table', advising doctor);
    it says what is gone and that a backup is the way back, and writes nothing."""
    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    with sqlite3.connect(Store.db_path(state)) as conn:
        conn.execute(f"DROP TABLE {table}")
    before = _snapshot_tables(state)
    for argv in (("doctor", state), ("doctor", state, "--repair")):
        code, out, err = _run(capsys, *argv)
        assert code == 1 and f"table(s) missing: {table}" in out, out + err
        assert f"--repair cannot recreate {table}" in out
        assert "restore the state from a backup" in out
        assert "Traceback" not in err and err == ""
    assert _snapshot_tables(state) == before


def _snapshot_tables(state) -> list:
    with sqlite3.connect(Store.db_path(state)) as conn:
        return conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()


def test_salvage_skips_a_damaged_id_counter(tmp_path, capsys, net):
    """A counter that is no number in a damaged file: the salvage was a TypeError traceback that
    left its half-made copy behind."""
    from ev_nav.store.doctor import salvage_database

    state = _state(tmp_path, capsys, model="bi", trips=1, net=net)
    db = Store.db_path(state)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sqlite_sequence SET seq = NULL WHERE name = 'checkpoints'")
    lines = salvage_database(db)
    assert any("salvaged copy" in line for line in lines)
    assert not list(state.glob("*.salvage-*"))
    with sqlite3.connect(db) as conn:
        seq = dict(conn.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
    assert seq["trips"] == 1  # the readable counters carried


def _algorithm3_checkpoints_only(state, net) -> list:
    """Make the state's only checkpoint an Algorithm 3 (SVGP) one of all its observations, as
    states written before the exact and regional learners have; returns the batches."""
    from ev_nav.energy import get_vehicle
    from ev_nav.gp.svgp import SVGPConfig, SVGPModel
    from ev_nav.trips.session import apply_batches

    with Store.open(state) as s:
        batches = s.observations()
        old = SVGPModel(net, vehicle=get_vehicle("sumo-default"),
                        config=SVGPConfig(exact_refresh=True))
        apply_batches(old, batches)
        blob = checkpoints.encode(old.state_dict())
        with sqlite3.connect(Store.db_path(state)) as conn:  # every kept checkpoint: Algorithm 3
            conn.execute("DELETE FROM checkpoints")
        s.save_checkpoint(blob, s.n_observations(), last_batch_id=max(b.id for b in batches))
    return batches


def test_algorithm3_checkpoints_migrate_to_the_exact_learner(tmp_path, capsys, net):
    """A state written when the driver's GP was Algorithm 3: every checkpoint is an SVGP state.
    Opening it rebuilds the exact learner from the recorded observations (one notice, nothing
    lost), saves a checkpoint of it at once, and the next command opens without a notice."""
    from ev_nav.gp.incremental import IncrementalGP
    from ev_nav.trips.session import apply_batches, open_session

    state = _state(tmp_path, capsys, model="gp", net=net)
    before = _snapshot(state)
    batches = _algorithm3_checkpoints_only(state, net)
    code, out, err = _run(capsys, "map", state, "--layer", "mean", "--out", tmp_path / "m.html")
    assert code == 0, err
    assert "previous GP learner" in err and "no observation was lost" in err
    assert _snapshot(state) == before
    with open_session(state) as session:  # migrated: the current checkpoint is the exact one
        assert isinstance(session.model, IncrementalGP) and not session.skipped
        fresh = IncrementalGP(net, vehicle=session.vehicle)
        apply_batches(fresh, batches)
        assert np.array_equal(session.model.posterior().mean, fresh.posterior().mean)


def test_past_the_exact_size_states_open_with_the_regional_learner(
    tmp_path, capsys, net, monkeypatch
):
    """Past the exact learner's size a driver's GP is the regional learner: an Algorithm 3
    checkpoint of such a state is rebuilt with it from the recorded observations (one notice,
    nothing lost); its prior is built once and read from the state's cache after that."""
    from ev_nav.gp import incremental_state
    from ev_nav.gp.regional import RegionalGP
    from ev_nav.gp.regional import model as regional_model
    from ev_nav.trips.session import apply_batches, open_session

    monkeypatch.setattr(incremental_state, "MAX_EXACT_SEGMENTS", net.n_segments - 1)
    state = _state(tmp_path, capsys, model="gp", net=net)
    batches = _algorithm3_checkpoints_only(state, net)
    code, out, err = _run(capsys, "map", state, "--layer", "mean", "--out", tmp_path / "m.html")
    assert code == 0, err
    assert "previous GP learner" in err and "no observation was lost" in err
    assert len(list((state / "cache").glob("regionalmeta-*.npy"))) == 1
    built = []
    real = regional_model.RegionalGP._build_prior
    monkeypatch.setattr(regional_model.RegionalGP, "_build_prior",
                        lambda self, amp: built.append(1) or real(self, amp))
    with open_session(state) as session:
        assert isinstance(session.model, RegionalGP) and not session.skipped
        served = session.model.posterior()
        assert built == []  # the prior came from the state's cache
        fresh = RegionalGP(net, vehicle=session.vehicle)
        apply_batches(fresh, batches)
        assert np.array_equal(served.mean, fresh.posterior().mean)
        assert np.array_equal(served.std, fresh.posterior().std)


# ----------------------------------------------------------------------------- cache files
def _gp_prediction(state) -> tuple[np.ndarray, np.ndarray]:
    from ev_nav.trips.session import open_session

    with open_session(state) as session:
        post = session.model.posterior()
        return post.mean.copy(), post.std.copy()


def _cache_files(state, kind):
    return sorted((state / "cache").glob(f"{kind}-*.npy"))


def test_planted_or_damaged_caches_are_refused_and_rebuilt(tmp_path, capsys, net):
    """Issue 32: a shaped array planted in place of the cached posterior moved a prediction,
    4 KiB of garbage gave an sd of 8e149 Wh, and doctor said healthy. Now each cache file is
    used only if it matches the checksum the store recorded: a planted, tampered or damaged
    one is refused with a one-line notice, deleted, rebuilt, and doctor reports it."""
    state = _state(tmp_path, capsys, model="gp", trips=2, net=net)
    mean, sd = _gp_prediction(state)
    with Store.open(state) as s:
        recorded = s.cache_checksums()
    posterior = _cache_files(state, "posterior")[-1]
    prior = _cache_files(state, "prior")[-1]
    assert {posterior.name, prior.name} <= set(recorded)  # every file written is recorded
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 0 and "healthy" in out and "verified" in out

    # 1. a well-formed array of the right shape, planted over the posterior (an attack)
    good = np.load(posterior)
    planted = good.copy()
    planted[:, -1] += 64.0  # every mean 64 Wh higher
    np.save(posterior, planted)
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and f"cache file {posterior.name} does not match the checksum" in out
    code, _, err = _run(capsys, "map", state, "--layer", "mean", "--out", tmp_path / "m.html")
    assert code == 0, err
    notes = [ln for ln in err.splitlines() if ln.strip()]
    assert len(notes) == 1 and notes[0].startswith("ev-nav: notice: cache file"), err
    assert "does not match the checksum" in notes[0] and "recomputed" in notes[0]
    m2, sd2 = _gp_prediction(state)  # the prediction is the replayed one, to the bit
    np.testing.assert_array_equal(m2, mean)
    np.testing.assert_array_equal(sd2, sd)

    # 2. garbage in place of the prior kernel (damage); and a file nobody recorded
    for path in _cache_files(state, "posterior"):
        path.unlink()  # (so that loading needs the prior)
    prior.write_bytes(os.urandom(4096))
    stranger = state / "cache" / "prior-000000000000000000000000.npy"
    np.save(stranger, np.eye(3))
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and f"cache file {prior.name} does not match" in out
    assert f"cache file {stranger.name} was not written by this state" in out
    code, _, err = _run(capsys, "map", state, "--layer", "sd", "--out", tmp_path / "s.html")
    assert code == 0 and "notice: cache file" in err and prior.name in err, err
    m3, sd3 = _gp_prediction(state)
    np.testing.assert_allclose(m3, mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(sd3, sd, rtol=0, atol=1e-9)
    assert np.all(sd3 < 1e4)
    # the rebuilt prior is recorded and verifies; doctor --repair removes the stranger
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    # one file is one file (it said "deleted 1 cache files")
    assert code == 0 and "deleted 1 cache file that failed verification" in out, out
    assert "  2 trips, 2 observation batches, 2 observations" in out, out
    assert not stranger.exists()
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 0 and "healthy" in out, out


def test_cache_verification_reads_what_was_written(tmp_path):
    """The verified reader returns the written array bit for bit, column-major or not; a
    changed byte, a shorter or a longer file is refused."""
    from ev_nav.errors import StateNotice
    from ev_nav.store import StateCache

    Store.create(tmp_path, "h", "test", "bi", {}).close()
    cache = StateCache(tmp_path)
    rng = np.random.default_rng(0)
    for order in ("F", "C"):
        arr = np.asarray(rng.normal(size=(300, 301)), order=order)
        cache.write_array(f"x{order}-1.npy", arr)
        back = cache.read_array(f"x{order}-1.npy", arr.shape)
        assert back is not None and np.array_equal(back, arr)
        assert back.flags.f_contiguous == (order == "F")
    path = cache.folder / "xF-1.npy"
    good = path.read_bytes()
    for bad in (good[:-1], good + b"\0", good[:-8] + np.float64(1.0).tobytes()):
        path.write_bytes(bad)
        with pytest.warns(StateNotice):
            assert cache.read_array("xF-1.npy", (300, 301)) is None
        assert not path.exists()  # deleted: the rebuild replaces it


def test_doctor_on_a_network_it_cannot_use_advises_the_option_that_helps(tmp_path, capsys):
    """A state whose network file moved (or given the wrong one with --network): doctor said
    "run 'ev-nav doctor STATE --repair' to fix what can be fixed", and --repair then printed the
    same problem with no advice at all: it cannot fetch a network. It says what helps instead."""
    netfile = synthetic_town(SEGMENTS, seed=0).save(tmp_path / "town.npz")
    other = synthetic_town(SEGMENTS, seed=1).save(tmp_path / "other.npz")
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--network", netfile)[0] == 0
    moved = netfile.rename(tmp_path / "moved.npz")
    for extra in ((), ("--repair",)):
        code, out, _ = _run(capsys, "doctor", state, *extra)
        assert code == 1 and "network file not found" in out
        assert "--repair' to fix" not in out
        assert "--repair cannot fix the network: if the file moved, give it with --network" in out
        # a path given that does not load: check it (not "give it with --network" again)
        code, out, _ = _run(capsys, "doctor", state, "--network", tmp_path / "no.npz", *extra)
        assert code == 1 and "check the path given with --network" in out, out
        assert "give it with --network" not in out
        code, out, _ = _run(capsys, "doctor", state, "--network", other, *extra)
        assert code == 1 and "was created for network" in out
        assert "--repair' to fix" not in out
        assert "give the file the state was made with, with --network" in out
    code, out, _ = _run(capsys, "doctor", state, "--network", moved)
    assert code == 0 and out.strip().endswith(f"{state}: healthy")


def test_a_read_only_cache_neither_deletes_nor_writes(tmp_path):
    """``ev-nav doctor`` without ``--repair`` reads the state's cache read-only: a verified file
    is read, a refused one is left where it is (the cache check reports it), nothing is
    written."""
    import warnings

    from ev_nav.store import StateCache

    Store.create(tmp_path, "h", "test", "bi", {}).close()
    arr = np.arange(12.0).reshape(3, 4)
    StateCache(tmp_path).write_array("x-1.npy", arr)
    ro = StateCache(tmp_path, readonly=True)
    assert np.array_equal(ro.read_array("x-1.npy", (3, 4)), arr)
    path = ro.folder / "x-1.npy"
    damaged = path.read_bytes()[:-8] + np.float64(-1.0).tobytes()
    path.write_bytes(damaged)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ro.read_array("x-1.npy", (3, 4)) is None
    assert path.read_bytes() == damaged
    ro.write_array("y-1.npy", arr)
    assert not (ro.folder / "y-1.npy").exists()
    with Store.open(tmp_path) as s:
        assert "y-1.npy" not in s.cache_checksums()


def test_a_state_cut_short_is_salvaged_not_given_up(tmp_path, capsys, net):
    """A state file cut short (an interrupted copy, a full disk): SQLite refuses it whole, and
    doctor said nothing could be salvaged, advising a backup or a new state, although every
    page that remains holds its rows. It now salvages them."""
    state = _state(tmp_path, capsys, model="bi", trips=2, net=net)
    db = Store.db_path(state)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    trips_before, obs_before = _snapshot(state)
    size = db.stat().st_size
    os.truncate(db, size - 3 * 4096 - 100)  # the newest pages lost, not on a page boundary
    cut = db.read_bytes()
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 1 and "is cut short" in out and "--repair salvages" in out, out
    assert "nothing to salvage" not in out and db.read_bytes() == cut  # a check writes nothing
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    assert "rows recovered" in out and "damaged file kept" in out, out
    kept = list(state.glob("ev-nav.sqlite.damaged-*"))
    assert len(kept) == 1 and kept[0].read_bytes() == cut  # the file itself, as it was
    assert not list(state.glob("ev-nav.sqlite.pages-*"))  # the working copy is gone
    trips, obs = _snapshot(state)
    assert trips and {t[0] for t in trips} <= {t[0] for t in trips_before}
    original = {b[0]: b for b in obs_before}
    assert all(b == original[b[0]] or len(b[3]) < len(original[b[0]][3]) for b in obs)
    code, out, _ = _run(capsys, "doctor", state)
    assert code == 0 and "healthy" in out, out
    code, _, err = _run(capsys, "history", state)
    assert code == 0, err

    # cut where the file's table of tables lies: nothing can be found; said, and left as it is
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for side in state.glob("ev-nav.sqlite.damaged-*"):
        side.unlink()
    os.truncate(db, 4096 + 10)
    cut = db.read_bytes()
    code, out, _ = _run(capsys, "doctor", state, "--repair")
    assert code == 1 and "is cut short" in out and "cannot help" in out, out
    assert db.read_bytes() == cut
    assert sorted(p.name for p in state.glob("ev-nav.sqlite*")) == ["ev-nav.sqlite"]
