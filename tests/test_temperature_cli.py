"""Ambient temperature through the CLI and the store (issue 31): ``observe --temperature``
records it with the readings, the model learns with it on every replay, ``route --temperature``
predicts at it, and a state from before schema 5 opens with no temperatures."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from ev_nav.errors import InvalidObservation
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.store import SCHEMA_VERSION, Store
from ev_nav.store import schema as schema_mod
from ev_nav.trips.session import open_session
from tests.cli_helpers import latlon as _latlon
from tests.cli_helpers import run_cli as _run

SEGMENTS = 400


@pytest.fixture(scope="module")
def net():
    return synthetic_town(SEGMENTS, seed=0)


def _plan(capsys, state, net, *extra):
    mid = net.segment_midpoints()
    s, g = int(np.argmin(mid[:, 0] + mid[:, 1])), int(np.argmax(mid[:, 0] + mid[:, 1]))
    code, out, err = _run(capsys, "route", state, "--from", _latlon(net, s), "--to",
                          _latlon(net, g), "--policy", "mean", "--no-map", "--json", *extra)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("model", ["gp", "bi"])
def test_observe_with_a_temperature_is_stored_learned_and_replayed(tmp_path, capsys, net,
                                                                    model):
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS,
                "--model", model)[0] == 0
    summer = _plan(capsys, state, net, "--dry-run")["routes"]["planned"]["predicted_wh"]
    winter = _plan(capsys, state, net, "--dry-run", "--temperature", "-5")
    # before any data: the physics prior's heating and cold-battery energy on top
    assert winter["routes"]["planned"]["predicted_wh"] > summer
    trip = _plan(capsys, state, net, "--temperature", "-5")
    total = 1.3 * trip["routes"]["planned"]["predicted_wh"]
    code, out, err = _run(capsys, "observe", state, trip["trip"], "--total-wh", total,
                          "--temperature", "-5")
    assert code == 0, err
    with Store.open(state) as store:
        (batch,) = store.observations()
        assert batch.temperature_c == -5.0
    # planning after it goes through the learner (the torch-free posterior has no coefficients)
    from ev_nav.trips.session import restore_posterior

    with open_session(state, with_model=False) as session:
        assert restore_posterior(session.store, session.net) is None
    assert _plan(capsys, state, net, "--dry-run")["routes"]["planned"]["predicted_wh"] > 0
    assert _plan(capsys, state, net, "--dry-run", "--temperature", "20")["routes"]
    # replayed from the recorded observations (no checkpoint): the same model
    with open_session(state) as session:
        kept = session.model.predict_sum([1, 2, 3], temperature=-5.0)
        assert session.model.temp.active
        store = session.store
        for ck in store.checkpoints():
            store._conn.execute("DELETE FROM checkpoints WHERE id = ?", (ck.id,))
    with open_session(state) as session:
        assert session.model.predict_sum([1, 2, 3], temperature=-5.0) == pytest.approx(
            kept, rel=1e-9)


def test_history_shows_the_temperature_of_each_trips_observations(tmp_path, capsys, net):
    """``ev-nav history``: the temperature the trip was observed at (a column, and
    ``temperature_c`` in --json), blank or None for a trip observed without one or not yet."""
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS,
                "--model", "bi")[0] == 0
    cold = _plan(capsys, state, net, "--temperature", "-5.5")
    code, _, err = _run(capsys, "observe", state, cold["trip"], "--total-wh",
                        f"{cold['routes']['planned']['predicted_wh']:.1f}", "--temperature", "-5.5")
    assert code == 0, err
    plain = _plan(capsys, state, net)
    code, _, err = _run(capsys, "observe", state, plain["trip"], "--total-wh",
                        f"{plain['routes']['planned']['predicted_wh']:.1f}")
    assert code == 0, err
    planned = _plan(capsys, state, net)  # never driven

    code, out, err = _run(capsys, "history", state, "--json")
    assert code == 0, err
    rows = {r["trip"]: r for r in json.loads(out)}
    assert rows[cold["trip"]]["temperature_c"] == -5.5
    assert rows[plain["trip"]]["temperature_c"] is None
    assert rows[planned["trip"]]["temperature_c"] is None

    code, out, err = _run(capsys, "history", state)
    assert code == 0, err
    head, *lines = out.splitlines()
    assert head.split()[-3:] == ["observed", "Wh", "°C"]
    table = {int(line.split()[0]): line.split() for line in lines}
    assert table[cold["trip"]][-1] == "-5.5"
    assert table[cold["trip"]][-2] == f"{rows[cold['trip']]['observed_wh']:.1f}"
    # no temperature: the line ends with the observed energy (or "-" when not observed)
    assert table[plain["trip"]][-1] == f"{rows[plain['trip']]['observed_wh']:.1f}"
    assert table[planned["trip"]][-1] == "-"


def test_route_at_a_temperature_says_so(tmp_path, capsys, net):
    """The table says what temperature the trip is predicted at; the trip keeps it (schema 7),
    so the printed hint needs no --temperature."""
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    mid = net.segment_midpoints()
    s, g = int(np.argmin(mid[:, 0] + mid[:, 1])), int(np.argmax(mid[:, 0] + mid[:, 1]))
    ends = ("--from", _latlon(net, s), "--to", _latlon(net, g), "--no-map")
    code, out, err = _run(capsys, "route", state, *ends, "--temperature", "-7.5")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "predicted at -7.5 °C"
    assert lines[-1] == f"record the drive with: ev-nav observe {state} 1 --total-wh X"
    with Store.open(state) as store:
        assert store.get_trip(1).temperature_c == -7.5
    code, out, err = _run(capsys, "route", state, *ends, "--avoid", "motorway", "--dry-run",
                          "--temperature", "3")
    assert code == 0, err
    assert out.splitlines()[1] == "avoiding motorway; predicted at 3 °C"
    code, out, err = _run(capsys, "route", state, *ends)
    assert code == 0, err
    assert "°C" not in out and out.splitlines()[-1].endswith("--total-wh X")


def test_observe_defaults_to_the_temperature_the_trip_was_planned_at(tmp_path, capsys, net):
    """'route --temperature -20' then 'observe STATE 1 --total-wh X' learned the reading as
    reference conditions (the plan's temperature was not stored); now it is recorded at -20 °C
    with a notice, an explicit --temperature wins, and history shows it."""
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    cold = _plan(capsys, state, net, "--temperature", "-20")
    warm = _plan(capsys, state, net, "--temperature", "-20")
    plain = _plan(capsys, state, net)
    total = cold["routes"]["planned"]["predicted_wh"]
    code, out, err = _run(capsys, "observe", state, cold["trip"], "--total-wh", total)
    assert code == 0, err
    assert err == (f"ev-nav: notice: recorded at -20 °C, the temperature trip {cold['trip']} "
                   "was planned at (--temperature C for another)\n")
    code, _, err = _run(capsys, "observe", state, warm["trip"], "--total-wh", total,
                        "--temperature", "-15", "--force")
    assert code == 0 and err == "", err
    code, _, err = _run(capsys, "observe", state, plain["trip"], "--total-wh",
                        plain["routes"]["planned"]["predicted_wh"])
    assert code == 0 and err == "", err
    with Store.open(state) as store:
        temps = {b.trip_id: b.temperature_c for b in store.observations()}
        assert temps == {cold["trip"]: -20.0, warm["trip"]: -15.0, plain["trip"]: None}
        assert [t.temperature_c for t in store.list_trips()] == [-20.0, -20.0, None]
    code, out, _ = _run(capsys, "history", state, "--json")
    rows = {r["trip"]: r for r in json.loads(out)}
    assert rows[warm["trip"]]["planned_temperature_c"] == -20.0
    assert rows[warm["trip"]]["temperature_c"] == -15.0
    assert rows[plain["trip"]]["planned_temperature_c"] is None


def test_observe_at_a_temperature_shows_the_prediction_it_was_judged_by(tmp_path, capsys,
                                                                         net):
    """A total at -20 °C of a trip planned at no temperature was judged against the route
    predicted at -20 °C, but the acknowledgement showed the plan's figures (by which the
    reading looked 10 sd off, unremarked)."""
    from ev_nav.gp.temperature import AtTemperature
    from ev_nav.trips.battery import route_energy

    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    plan = _plan(capsys, state, net)
    cold = _plan(capsys, state, net, "--temperature", "-20")["routes"]["planned"]
    with open_session(state) as session:
        trip = session.store.get_trip(plan["trip"])
        at = route_energy(AtTemperature(session.model, -20.0), trip.route, trip.shares)
    code, out, err = _run(capsys, "observe", state, plan["trip"], "--total-wh",
                          cold["predicted_wh"], "--temperature", "-20", "--json")
    assert code == 0, err
    doc = json.loads(out.strip().splitlines()[0])
    assert doc["predicted_wh"] == pytest.approx(at.mean_wh, abs=0.06)
    assert abs(doc["predicted_wh"] - plan["routes"]["planned"]["predicted_wh"]) > 10


def _state_at_schema(state, version: int) -> sqlite3.Connection:
    """A state's database as ev-nav wrote it at schema ``version`` (its first ``version``
    migrations and its meta rows), open for the test to add rows to."""
    state.mkdir()
    conn = sqlite3.connect(Store.db_path(state), isolation_level=None)
    for k in range(version):
        schema_mod.MIGRATIONS[k](conn)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", [
        ("network_hash", "h"), ("network_ref", "n.npz"), ("model_kind", "gp"),
        ("created", "2026-01-01T00:00:00+00:00")])
    return conn


def test_a_schema_6_state_opens_with_trips_planned_at_no_temperature(tmp_path):
    """Schema 7 adds the trips' planning temperature; earlier trips read back without one and
    the migrated state records new trips with theirs."""
    state = tmp_path / "old"
    conn = _state_at_schema(state, 6)
    conn.execute("INSERT INTO vehicles(name, spec, created) VALUES "
                 "('car', '{}', '2026-01-01')")
    conn.execute(
        """INSERT INTO trips(created, origin_segment, goal_segment, policy, seed, route_json,
               predicted_wh, predicted_sd_wh, length_m, time_s, vehicle_id)
           VALUES ('2026-01-01', 1, 3, 'ts', NULL, '[1, 2, 3]', 50.0, 2.0, 300.0, 30.0, 1)""")
    conn.close()
    with Store.open(state) as s:
        assert s.schema_version == SCHEMA_VERSION == 8
        (old,) = s.list_trips()
        assert old.temperature_c is None and old.route.tolist() == [1, 2, 3]
        new = s.add_trip(origin_segment=1, goal_segment=2, policy="mean", route=[1, 2],
                         predicted_wh=10.0, predicted_sd_wh=1.0, length_m=100.0, time_s=10.0,
                         temperature_c=-4.5)
        assert s.get_trip(new).temperature_c == -4.5
        assert s.integrity_check() == ["ok"]


def test_a_bad_temperature_is_refused_without_recording(tmp_path, capsys, net):
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    trip = _plan(capsys, state, net)
    code, out, err = _run(capsys, "observe", state, trip["trip"], "--total-wh", 100,
                          "--temperature", "95")
    assert code != 0 and "temperature" in err and "Traceback" not in err
    with Store.open(state) as store:
        assert store.observations() == []
        with pytest.raises(InvalidObservation):
            store.add_total_observation(trip["trip"], 100.0, temperature_c=float("nan"))


def test_a_schema_4_state_opens_with_no_temperatures(tmp_path):
    """The migration adds the column; earlier batches read back without a temperature."""
    state = tmp_path / "old"
    conn = _state_at_schema(state, 4)
    conn.execute(
        """INSERT INTO trips(created, origin_segment, goal_segment, policy, seed, route_json,
               predicted_wh, predicted_sd_wh, length_m, time_s)
           VALUES ('2026-01-01', 1, 3, 'ts', NULL, '[1, 2, 3]', 50.0, 2.0, 300.0, 30.0)""")
    conn.execute("INSERT INTO observation_batches(trip_id, kind, created, n_rows) "
                 "VALUES (1, 'total', '2026-01-01', 1)")
    conn.execute("INSERT INTO observations(batch_id, trip_id, kind, segment_id, energy_wh, "
                 "created) VALUES (1, 1, 'total', NULL, 48.5, '2026-01-01')")
    conn.close()
    with Store.open(state) as s:
        assert s.schema_version == SCHEMA_VERSION
        (batch,) = s.observations()
        assert batch.temperature_c is None and batch.energy_wh.tolist() == [48.5]
        assert s.integrity_check() == ["ok"]
