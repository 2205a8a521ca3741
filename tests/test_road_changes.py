"""Changes of roads in a driver's state (issue 31, acceptance 4): a flag survives a restart and a
rebuild of the model, can be dismissed (the model takes the set-aside readings back), and change
handling never deletes an observation while the user's own forget still removes what was asked.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from ev_nav.errors import InvalidObservation, UnknownSegmentError
from ev_nav.store import SCHEMA_VERSION, Store
from ev_nav.trips.changes import dismiss_changes, parse_segments
from ev_nav.trips.observations import forget_trip, record_segments
from ev_nav.trips.session import apply_batches, build_model, create_state, open_session
from tests.cli_helpers import run_cli

TOWN = 300
BEFORE, AFTER = 4, 2  # trips before and after the change (no hyperparameter refit: < 10)
CHANGED = 2  # position of the changed segment on the route


def _route(net, length: int = 6) -> np.ndarray:
    """A chain of consecutive segments from segment 0 (line-graph successors)."""
    route = [0]
    while len(route) < length:
        e = route[-1]
        nxt = [int(x) for x in net.lg_indices[net.lg_indptr[e]: net.lg_indptr[e + 1]]
               if int(x) not in route]
        route.append(nxt[0])
    return np.asarray(route, dtype=np.int64)


def _drive(session, route: np.ndarray, wh: np.ndarray) -> int:
    mu = float(session.model.posterior().mean[route].sum())
    trip = session.store.add_trip(
        origin_segment=int(route[0]), goal_segment=int(route[-1]), policy="mean", route=route,
        predicted_wh=mu, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0,
    )
    record_segments(session, trip, route, wh, force=True)
    return trip


def _readings(session, route: np.ndarray) -> list[np.ndarray]:
    """Readings of BEFORE trips as the prior predicts (5 % noise), then AFTER trips on which the
    road at CHANGED costs 40 Wh more (about 10 predictive sd)."""
    rng = np.random.default_rng(7)
    mu = session.model.posterior().mean[route]
    out = []
    for k in range(BEFORE + AFTER):
        wh = mu + rng.normal(0.0, 0.05 * np.abs(mu) + 0.1)
        if k >= BEFORE:
            wh[CHANGED] += 40.0
        out.append(wh)
    return out


@pytest.fixture()
def changed(tmp_path) -> tuple[Path, np.ndarray, list[np.ndarray], list[int]]:
    """A state whose route's segment CHANGED changed after BEFORE trips, driven AFTER more."""
    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)
        trips = [_drive(session, route, wh) for wh in readings]
    return state, route, readings, trips


def _posterior(state: Path) -> tuple[np.ndarray, np.ndarray]:
    with open_session(state) as s:
        post = s.model.posterior()
        return post.mean.copy(), post.std.copy()


def test_a_change_is_flagged_with_its_evidence_and_nothing_is_deleted(changed) -> None:
    state, route, readings, trips = changed
    e = int(route[CHANGED])
    with Store.open(state) as store:
        (c,) = store.segment_changes()
        assert c.segment == e and c.direction == 1 and c.reset
        # flagged at the first trip after the change, by its own reading
        first_after = store.observations(trips[BEFORE])[0].id
        assert c.at_batch == c.alarm_batch == c.kept_from_batch == first_after
        assert c.statistic > c.threshold and c.shift_sd > 5
        assert c.shift_wh == pytest.approx(40.0, abs=8.0)
        assert c.set_aside == BEFORE and c.traversals_since == AFTER - 1
        # every reading is still there, the set-aside ones included
        assert store.n_observations() == route.size * (BEFORE + AFTER)
        kept = [b for b in store.observations() if b.id < c.kept_from_batch]
        assert len(kept) == BEFORE and all(e in b.segment_ids for b in kept)


def test_the_model_forgot_exactly_the_old_readings(changed) -> None:
    """Independent check: a fresh model given the same readings in the same order, and at the
    flag a reset of the changed segment to the readings since the change (statistics computed
    here from the test's own readings), has the state's posterior."""
    state, route, readings, _ = changed
    e = int(route[CHANGED])
    mean, std = _posterior(state)
    with open_session(state, with_model=False) as s:
        net, vehicle = s.net, s.vehicle
        batches = s.store.observations()
    fresh = build_model("gp", net, vehicle)
    apply_batches(fresh, batches[: BEFORE + 1])
    kept = np.array([readings[BEFORE][CHANGED]])
    fresh.reset_segments([e], [kept.size], [kept.sum()], [(kept**2).sum()])
    apply_batches(fresh, batches[BEFORE + 1:])
    post = fresh.posterior()
    np.testing.assert_allclose(post.mean, mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(post.std, std, rtol=0, atol=1e-9)
    # without the reset the changed road would still be believed near its old energy
    plain = build_model("gp", net, vehicle)
    apply_batches(plain, batches)
    assert post.std[e] > 1.5 * plain.posterior().std[e]
    assert abs(mean[e] - readings[-1][CHANGED]) < abs(plain.posterior().mean[e]
                                                      - readings[-1][CHANGED])


def test_a_flag_survives_a_restart_and_a_rebuild(changed) -> None:
    state, route, _, _ = changed
    mean, std = _posterior(state)
    with Store.open(state) as store:
        listed = store.segment_changes()
    # restart: the checkpoint has the reset in its replay log (bit for bit)
    again = _posterior(state)
    assert np.array_equal(again[0], mean) and np.array_equal(again[1], std)
    with Store.open(state) as store:
        assert store.segment_changes() == listed
        store._conn.execute("DELETE FROM checkpoints")  # lost: rebuilt from the observations
    rebuilt = _posterior(state)
    np.testing.assert_allclose(rebuilt[0], mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rebuilt[1], std, rtol=0, atol=1e-9)
    # the detector goes on where it stopped: it has scored every batch
    with Store.open(state) as store:
        assert store.detector_state()[0] == store.last_batch_id()


def test_dismissing_takes_the_readings_back_durably(changed, capsys) -> None:
    state, route, _, _ = changed
    e = int(route[CHANGED])
    code, out, err = run_cli(capsys, "changes", state, "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["segment"], row["set_aside"], row["direction"]) == (e, BEFORE, "up")
    code, out, err = run_cli(capsys, "changes", state)
    assert code == 0 and out.split()[2:4] == ["flagged", "(UTC)"], out  # the store's times
    code, out, err = run_cli(capsys, "changes", state, "--dismiss", e)
    assert code == 0, err
    assert f"dismissed 1 change on segment {e}; the model uses its readings again" in out
    # the model uses every reading again: as a model that never flagged anything
    with open_session(state, with_model=False) as s:
        plain = build_model("gp", s.net, s.vehicle)
        apply_batches(plain, s.store.observations())
        n_rows = s.store.n_observations()
    mean, std = _posterior(state)
    np.testing.assert_allclose(mean, plain.posterior().mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(std, plain.posterior().std, rtol=0, atol=1e-9)
    assert n_rows == route.size * (BEFORE + AFTER)
    # durable: not listed after a restart, listed as dismissed with --all; same posterior
    code, out, _ = run_cli(capsys, "changes", state, "--json")
    assert json.loads(out) == []
    code, out, _ = run_cli(capsys, "changes", state, "--all", "--json")
    (row,) = json.loads(out)
    assert row["dismissed"] and row["set_aside"] == 0
    with Store.open(state) as store:
        store._conn.execute("DELETE FROM checkpoints")
    np.testing.assert_allclose(_posterior(state)[0], mean, rtol=0, atol=1e-9)
    # a second dismissal, an unknown segment, or a bad id: one line, nothing changed
    # the advice names the state itself (it said 'ev-nav changes STATE')
    for arg, words in ((e, f"no flagged change to dismiss ('ev-nav changes {state}' lists"),
                       (10**6, "not in the network"),
                       ("x", "expected segment ids")):
        code, out, err = run_cli(capsys, "changes", state, "--dismiss", arg)
        assert code != 0 and words in err and len(err.strip().splitlines()) == 1


def test_a_bi_state_flags_rebuilds_and_dismisses(tmp_path) -> None:
    """BI (independent segments) forgets, replays and takes readings back the same way."""
    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="bi") as session:
        route = _route(session.net)
        for wh in _readings(session, route):
            _drive(session, route, wh)
        (c,) = session.store.segment_changes()
        assert c.segment == int(route[CHANGED]) and c.set_aside == BEFORE
    mean, std = _posterior(state)
    with Store.open(state) as store:
        store._conn.execute("DELETE FROM checkpoints")
    rebuilt = _posterior(state)
    assert np.array_equal(rebuilt[0], mean) and np.array_equal(rebuilt[1], std)
    with open_session(state, with_model=False) as s:
        dismiss_changes(s, np.array([c.segment]))
        plain = build_model("bi", s.net, s.vehicle)
        apply_batches(plain, s.store.observations())
    np.testing.assert_allclose(_posterior(state)[0], plain.posterior().mean, rtol=0, atol=1e-9)


def test_two_writers_never_both_record(changed, monkeypatch) -> None:
    """A writer whose detector state is stale (another process scored the batches since it
    read it) records nothing and rebuilds its model from the store."""
    import ev_nav.trips.changes as changes_mod
    from ev_nav.gp.changes import ChangeDetector
    from ev_nav.trips.changes import absorb_new

    state, route, readings, _ = changed
    with Store.open(state) as store:
        upto, blob = store.detector_state()
        assert not store.record_detection(upto - 1, upto + 5, blob, [])  # moved on: refused
        assert store.detector_state() == (upto, blob)
    with open_session(state) as s:
        trip = s.store.add_trip(
            origin_segment=int(route[0]), goal_segment=int(route[-1]), policy="mean",
            route=route, predicted_wh=1.0, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0,
        )
        # a trip the stale detector scores again (60 Wh below the prediction on one road)
        wh = s.model.posterior().mean[route].copy()
        wh[0] -= 60.0
        record_segments(s, trip, route, wh, force=True, absorb=False)
        monkeypatch.setattr(changes_mod, "load_detector",
                            lambda store, n: (ChangeDetector(n), 0))
        done = absorb_new(s, s.store.observations(after_batch=s.applied_upto))
        assert done.rebuilt and done.flagged == []
        assert len(s.store.segment_changes()) == 1
        mean = s.model.posterior().mean.copy()
    monkeypatch.undo()
    with open_session(state) as s:
        np.testing.assert_allclose(s.model.posterior().mean, mean, rtol=0, atol=1e-9)


def test_dismiss_errors_from_the_library(changed) -> None:
    state, route, _, _ = changed
    with open_session(state, with_model=False) as s:
        with pytest.raises(InvalidObservation, match="no flagged change"):
            dismiss_changes(s, np.array([int(route[0]), int(route[CHANGED])]))
        assert len(s.store.segment_changes()) == 1  # nothing was dismissed
        with pytest.raises(UnknownSegmentError):
            parse_segments(["1,-3"], s.net.n_segments)
        assert parse_segments(["4,5", "9"], s.net.n_segments).tolist() == [4, 5, 9]


def test_forget_removes_what_the_user_asks(changed) -> None:
    state, route, readings, trips = changed
    with open_session(state) as s:
        # forgetting an old trip removes its readings: one fewer set aside, the flag stays
        forget_trip(s, trips[0])
        (c,) = s.store.segment_changes()
        assert c.set_aside == BEFORE - 1
        assert s.store.n_observations() == route.size * (BEFORE + AFTER - 1)
        # forgetting the trip that raised the alarm drops the flag with its evidence
        forget_trip(s, trips[BEFORE])
        assert s.store.segment_changes() == []
        assert s.store.n_observations() == route.size * (BEFORE + AFTER - 2)
        mean = s.model.posterior().mean.copy()
        plain = build_model("gp", s.net, s.vehicle)
        apply_batches(plain, s.store.observations())
    np.testing.assert_allclose(mean, plain.posterior().mean, rtol=0, atol=1e-9)


def test_a_backlog_is_scored_only_in_its_newest_batches(tmp_path, monkeypatch) -> None:
    """Batches committed but not learned (another process recorded them) are learned by the
    next observe; only the newest MAX_SCORED_BATCHES of them are scored, against the model
    that learned the older ones. The detector's stored state round-trips."""
    import ev_nav.trips.changes as changes_mod
    from ev_nav.trips.changes import learn_new, load_detector

    monkeypatch.setattr(changes_mod, "MAX_SCORED_BATCHES", 2)
    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)[:BEFORE]
        for wh in readings:
            trip = session.store.add_trip(
                origin_segment=int(route[0]), goal_segment=int(route[-1]), policy="mean",
                route=route, predicted_wh=1.0, predicted_sd_wh=1.0, length_m=100.0,
                time_s=10.0,
            )
            record_segments(session, trip, route, wh, force=True, absorb=False)
        assert learn_new(session) == []
        last = session.store.last_batch_id()
        assert session.applied_upto == last
        detector, scored = load_detector(session.store, session.net.n_segments)
        assert scored == last
        assert detector.readings[route].tolist() == [2] * route.size
        assert detector.readings.sum() == 2 * route.size
        # every reading was learned
        plain = build_model("gp", session.net, session.vehicle)
        apply_batches(plain, session.store.observations())
        np.testing.assert_allclose(session.model.posterior().mean, plain.posterior().mean,
                                   rtol=0, atol=1e-9)


@pytest.mark.parametrize("as_json", [False, True])
def test_observe_prints_the_flag_and_the_map_marks_it(tmp_path, capsys, as_json) -> None:
    """The flag is a line after the acknowledgement; with --json (whose one document is printed
    before the model learns the reading) a notice on stderr, so stdout stays one document."""
    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)
        for wh in readings[:BEFORE]:
            _drive(session, route, wh)
        trip = session.store.add_trip(
            origin_segment=int(route[0]), goal_segment=int(route[-1]), policy="mean",
            route=route, predicted_wh=1.0, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0,
        )
    csv = tmp_path / "obs.csv"
    csv.write_text("segment,energy_wh\n" + "".join(
        f"{a},{b}\n" for a, b in zip(route, readings[BEFORE], strict=True)))
    code, out, err = run_cli(capsys, "observe", state, trip, "--segments", csv, "--force",
                             *(["--json"] if as_json else []))
    assert code == 0, err
    flag = f"road change flagged on segment {int(route[CHANGED])}"
    if as_json:
        assert json.loads(out)["trip"] == trip and flag not in out
        assert f"ev-nav: notice: {flag}" in err
    else:
        assert flag in out
    code, out, err = run_cli(capsys, "map", state, "--layer", "mean")
    assert code == 0, err
    page = (state / "maps" / "mean.html").read_text()
    assert "ev-nav-change" in page and "road flagged as changed (1)" in page
    code, out, err = run_cli(capsys, "map", state, "--layer", "visits")
    assert code == 0, err
    assert "road flagged as changed (1)" in (state / "maps" / "visits.html").read_text()


def test_a_state_from_before_changes_opens_and_keeps_what_it_learned(tmp_path) -> None:
    """A state as the schema before the changes migration wrote it opens at the current schema
    with the same model, no flagged change, and detection from its next observation on."""
    from ev_nav.store import MIGRATIONS

    # undoing the changes migration and those after it gives the state an older ev-nav wrote
    older = next(k for k, m in enumerate(MIGRATIONS) if "segment_changes" in (m.__doc__ or ""))
    assert older == SCHEMA_VERSION - 3  # the planning temperature and reading shares came after
    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)
        for wh in readings[:BEFORE]:
            _drive(session, route, wh)
    with Store.open(state) as store:
        n_rows = store.n_observations()
    conn = sqlite3.connect(Store.db_path(state), isolation_level=None)
    for stmt in ("DROP TABLE segment_changes", "DROP TABLE change_detector",
                 "DROP INDEX observations_segment", "ALTER TABLE trips DROP COLUMN temperature_c",
                 "ALTER TABLE observations DROP COLUMN share", f"PRAGMA user_version = {older}"):
        conn.execute(stmt)
    conn.close()
    with sqlite3.connect(Store.db_path(state)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == older
    mean, std = _posterior(state)  # opening migrates it
    with Store.open(state) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.n_observations() == n_rows
        assert store.segment_changes() == [] and store.detector_state() is None
    with Store.open(state) as store:
        store._conn.execute("DELETE FROM checkpoints")
    rebuilt = _posterior(state)
    np.testing.assert_allclose(rebuilt[0], mean, rtol=0, atol=1e-9)
    with open_session(state) as session:
        for wh in readings[BEFORE:]:
            _drive(session, route, wh)
        assert [c.segment for c in session.store.segment_changes()] == [int(route[CHANGED])]
        # the readings from before the upgrade were never scored, but they are set aside
        assert session.store.segment_changes()[0].set_aside == BEFORE


def test_the_server_flags_lists_and_follows_a_dismissal(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from ev_nav.server.app import create_app
    from ev_nav.server.service import FleetService, _Job

    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)
    with FleetService(state, poll_s=0.05) as svc:
        def wait_for(batch: int) -> None:
            done = threading.Event()
            for _ in range(1200):
                if svc.snapshot.applied_upto >= batch:
                    return
                done.wait(0.05)
            raise AssertionError("the writer never learned the batch")

        for wh in readings:
            with Store.open(state) as store:
                trip = store.add_trip(
                    origin_segment=int(route[0]), goal_segment=int(route[-1]), policy="mean",
                    route=route, predicted_wh=1.0, predicted_sd_wh=1.0, length_m=100.0,
                    time_s=10.0,
                )
            ack = svc.record(trip, segments=(route, wh), force=True)
            wait_for(ack["batch"])  # one trip at a time, as the CLI scores them
        client = TestClient(create_app(svc))
        (row,) = client.get("/api/changes").json()
        assert row["segment"] == int(route[CHANGED]) and row["set_aside"] == BEFORE
        assert "/api/changes" in client.get("/openapi.json").json()["paths"]
        served = svc.snapshot.posterior.mean.copy()
        # dismissed from the command line while serving: the writer rebuilds its model
        with open_session(state, with_model=False) as other:
            dismiss_changes(other, np.array([int(route[CHANGED])]))
        svc._jobs.put(_Job("wake"))  # (the writer also polls the store)
        for _ in range(1200):
            if not np.array_equal(svc.snapshot.posterior.mean, served):
                break
            threading.Event().wait(0.05)
        assert client.get("/api/changes").json() == []
        assert len(client.get("/api/changes", params={"all": "true"}).json()) == 1
        after = svc.snapshot.posterior.mean.copy()
    with Store.open(state) as store:
        plain = build_model("gp", svc.net, svc.vehicle)
        apply_batches(plain, store.observations())
    np.testing.assert_allclose(after, plain.posterior().mean, rtol=0, atol=1e-9)


def test_a_cold_trip_is_scored_at_its_own_temperature(tmp_path) -> None:
    """Readings at a winter temperature are judged against the prediction at that temperature:
    a fleet of trips at 20 °C, then trips at −10 °C costing what the model predicts at −10 °C
    (far above its prediction at 20 °C, by the heating and cold-battery terms) flag nothing."""
    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        rng = np.random.default_rng(3)
        for k in range(BEFORE + AFTER):
            cold = k >= BEFORE
            temp = -10.0 if cold else 20.0
            mu = session.model.posterior(temperature=temp).mean[route]
            warm = session.model.posterior(temperature=20.0).mean[route]
            if cold:  # the heating terms make the cold readings unmistakably dearer
                assert np.all(mu - warm > 0.0) and float(np.sum(mu - warm)) > 5.0
            wh = mu + rng.normal(0.0, 0.02 * np.abs(mu) + 0.05)
            trip = session.store.add_trip(
                origin_segment=int(route[0]), goal_segment=int(route[-1]), policy="mean",
                route=route, predicted_wh=float(mu.sum()), predicted_sd_wh=1.0, length_m=100.0,
                time_s=10.0,
            )
            record_segments(session, trip, route, wh, force=True, temperature_c=temp)
        assert session.store.segment_changes() == []


def test_a_session_keeps_its_detector_between_passes_and_drops_a_stale_one(changed) -> None:
    """The detector a session holds between passes is the stored one, and a detector stored by
    another process since replaces it."""
    from ev_nav.trips.changes import load_detector

    state, route, readings, _ = changed
    with open_session(state) as s, open_session(state) as other:
        for wh in readings[:2]:
            _drive(s, route, wh)
        at, held = s.detector_cache
        stored, upto = load_detector(s.store, s.net.n_segments)
        assert upto == at
        for key, value in stored.state_dict().items():
            np.testing.assert_array_equal(np.asarray(held.state_dict()[key]), np.asarray(value))
        _drive(other, route, readings[2])  # another writer scores the next trip first
        assert s.store.detector_scored_upto() != at
        _drive(s, route, readings[3])  # learned with what the other stored, not re-scored
        assert s.detector_cache is None or s.detector_cache[0] == s.store.detector_scored_upto()


def test_an_undone_reading_leaves_no_evidence_in_the_detector(tmp_path) -> None:
    """'observe --undo' removed a trip's readings but not their evidence in the change
    detector: a road read high once, taken back, and read high once more was flagged as
    changed, while a state that never saw the taken-back reading flagged nothing."""
    from ev_nav.trips.changes import load_detector

    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)[:BEFORE]
        for wh in readings:
            _drive(session, route, wh)
        high = readings[-1].copy()
        high[CHANGED] += 8.0  # about 6 sd: not flagged once, flagged twice
        seg = int(route[CHANGED])
        detector, _ = load_detector(session.store, session.net.n_segments)
        evidence_before = float(detector.stat[:, seg].max())
        trip = _drive(session, route, high)
        detector, _ = load_detector(session.store, session.net.n_segments)
        assert detector.stat[0, seg] > evidence_before  # the high reading counted
        forget_trip(session, trip)
        detector, _ = load_detector(session.store, session.net.n_segments)
        assert detector.stat[:, seg].tolist() == [0.0, 0.0]  # and is gone with its trip
        assert detector.readings[seg] == BEFORE  # its count too (the segment's evidence
        # from the other readings goes with it: a CUSUM cannot take one reading out)
        _drive(session, route, high)  # the same drive again: judged as if never seen
        assert session.store.segment_changes() == []


def _before_the_change(state: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """A state whose route was driven BEFORE times, the road unchanged; (route, readings)."""
    with create_state(state, synthetic=TOWN, model="gp") as session:
        route = _route(session.net)
        readings = _readings(session, route)
        for wh in readings[:BEFORE]:
            _drive(session, route, wh)
    return route, readings


def _damage_detector(state: Path) -> None:
    with sqlite3.connect(Store.db_path(state)) as conn:
        blob = bytearray(conn.execute("SELECT blob FROM change_detector").fetchone()[0])
        blob[len(blob) // 2] ^= 0xFF
        conn.execute("UPDATE change_detector SET blob = ?", (bytes(blob),))


def test_a_damaged_detector_is_replaced_and_detection_goes_on(tmp_path, capsys) -> None:
    """A damaged stored detector switched detection off for good, without a word: the next
    batch was taken as already scored, so the damaged state was never replaced (and doctor
    called the state healthy). Now the next observation scores with a fresh detector, which
    replaces the damaged one, with a notice; doctor reports it and --repair replaces it."""
    import warnings

    from ev_nav.errors import StateNotice

    state = tmp_path / "state"
    route, readings = _before_the_change(state)
    _damage_detector(state)
    code, out, _ = run_cli(capsys, "doctor", state)
    assert code == 1 and "change detector" in out and "healthy" not in out
    with open_session(state) as session:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", StateNotice)
            for wh in readings[BEFORE:]:  # the road changed: the fresh detector sees it
                _drive(session, route, wh)
        assert any("starts afresh after batch" in str(w.message) for w in caught)
    with Store.open(state) as store:
        assert store.detector_scored_upto() == store.last_batch_id()
        assert [c.segment for c in store.segment_changes()] == [int(route[CHANGED])]
    assert run_cli(capsys, "doctor", state)[0] == 0
    # doctor --repair replaces it too, going on after the same batch
    _damage_detector(state)
    code, out, _ = run_cli(capsys, "doctor", state, "--repair")
    assert code == 0 and "replaced the change detector" in out, out
    code, out, _ = run_cli(capsys, "doctor", state)
    assert code == 0 and "healthy" in out
    with Store.open(state) as store:
        assert store.detector_scored_upto() == store.last_batch_id()
        assert len(store.segment_changes()) == 1  # the flag raised is kept
