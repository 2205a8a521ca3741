"""Readings of a trip planned for another car (``route --vehicle-model NAME``, the API's
``"vehicle_model"``) are that car's: judged against its prediction and learned converted to the
state's vehicle, so that a mixed fleet teaches the state its own vehicle's energies.

Each check compares two states on one network: one observes a trip planned for the catalogue
car with readings ``y``, the other the same route planned for its own vehicle with ``y`` less
the two cars' deterministic energies (computed here from the energy model, independently of
the code under test). Their models must be the same, after the record, after a restart and
after a replay without checkpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ev_nav.energy import get_vehicle, segment_energy_wh
from ev_nav.roads.synthetic import synthetic_town
from tests.cli_helpers import driven_part, latlon, run_cli

MODEL = "volkswagen-id3-pro"
TOKEN = {"Authorization": "Bearer tok"}


@pytest.fixture(scope="module")
def town(tmp_path_factory) -> dict[str, object]:
    """A synthetic town on file and two far-apart points on it."""
    root = tmp_path_factory.mktemp("vehicle-model-observe")
    net = synthetic_town(600, seed=3)
    netfile = root / "town.npz"
    net.save(netfile)
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    return {"net": net, "file": netfile, "from": latlon(net, int(order[5])),
            "to": latlon(net, int(order[-5]))}


def _shift(net, state_vehicle: str = "sumo-default") -> np.ndarray:
    """E_det(catalogue car) − E_det(state's vehicle) per segment [Wh], each at its speed limit:
    the network's deterministic energies (what moved the plan's predictions), checked against
    the energy model evaluated here."""
    shift = net.e_det(get_vehicle(MODEL)) - net.e_det(get_vehicle(state_vehicle))
    physics = (segment_energy_wh(net.length_m, net.speed_mps, net.grade, get_vehicle(MODEL))
               - segment_energy_wh(net.length_m, net.speed_mps, net.grade,
                                   get_vehicle(state_vehicle)))
    np.testing.assert_allclose(shift, physics, rtol=0, atol=1e-6)
    return shift


def _trip_shares(state: Path, trip_id: int) -> np.ndarray:
    """The share of each segment of a recorded trip driven, as stored (the documents round the
    end fractions)."""
    from ev_nav.store import Store

    with Store.open(state) as store:
        return np.asarray(store.get_trip(trip_id).shares)


def _init(capsys, town, state: Path, *extra: object) -> None:
    code, _, err = run_cli(capsys, "init", state, "--network", town["file"], *extra)
    assert code == 0, err


def _route(capsys, town, state: Path, *extra: object, back: bool = False) -> dict:
    ends = ("--from", town["to"], "--to", town["from"]) if back else (
        "--from", town["from"], "--to", town["to"])
    code, out, err = run_cli(capsys, "route", state, *ends, "--policy", "mean", "--no-map",
                             "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def _same_trip(car: Path, own: Path, trip_id: int) -> None:
    """Record in ``own`` the trip ``car`` planned for the catalogue car, as a trip of the state's
    own vehicle over the same route (the same id, the same part of its end segments)."""
    from ev_nav.store import Store

    with Store.open(car) as store:
        t = store.get_trip(trip_id)
    with Store.open(own) as store:
        got = store.add_trip(
            origin_segment=int(t.route[0]), goal_segment=int(t.route[-1]), policy=t.policy,
            route=t.route, predicted_wh=t.predicted_wh, predicted_sd_wh=t.predicted_sd_wh,
            length_m=t.length_m, time_s=t.time_s, seed=t.seed,
            start_fraction=t.start_fraction, end_fraction=t.end_fraction,
        )
    assert got == trip_id


def _posterior(state: Path) -> np.ndarray:
    """The state's posterior mean [Wh] per segment as a new session rebuilds it."""
    from ev_nav.trips.session import open_session

    session = open_session(state)
    try:
        return np.asarray(session.model.posterior().mean, dtype=np.float64).copy()
    finally:
        session.close()


def _same_models_after_restart_and_replay(car: Path, own: Path, segments: np.ndarray) -> None:
    """(a) the two states' models agree; (b) so they do after a replay without checkpoints."""
    from ev_nav.store import Store

    a, b = _posterior(car), _posterior(own)
    np.testing.assert_allclose(a[segments], b[segments], rtol=0, atol=1e-9)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
    for state in (car, own):
        with Store.open(state) as store:
            store._conn.execute("DELETE FROM checkpoints")  # rebuilt from the stored readings
    ra, rb = _posterior(car), _posterior(own)
    np.testing.assert_allclose(ra, rb, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ra, a, rtol=0, atol=1e-9)


def test_cli_readings_of_another_car_are_learned_as_the_states_vehicles(
    town, tmp_path, capsys
) -> None:
    car, own = tmp_path / "car", tmp_path / "own"
    for state in (car, own):
        _init(capsys, town, state)
    shift = _shift(town["net"])
    # trip 1: a trip total. The route is chosen for the car (another route may suit the
    # state's vehicle better): the other state gets the same trip, planned for its vehicle
    planned = _route(capsys, town, car, "--vehicle-model", MODEL)["routes"]["planned"]
    _same_trip(car, own, 1)
    seg = np.asarray(planned["segments"])
    h = _trip_shares(car, 1)
    np.testing.assert_allclose(h, driven_part(planned), rtol=0, atol=1e-5)
    moved = float(h @ shift[seg])
    y = planned["vehicle_model_wh"] + 6.25
    code, out, err = run_cli(capsys, "observe", car, "1", "--total-wh", repr(y), "--json")
    assert code == 0, err
    ack = json.loads(out)
    # what the car measured and was predicted, and what the state's vehicle learned
    assert ack["observed_wh"] == pytest.approx(y, abs=1e-3)
    assert ack["predicted_wh"] == pytest.approx(planned["vehicle_model_wh"], abs=0.051)
    assert ack["vehicle_model"] == MODEL and ack["learned_for"] == "sumo-default"
    assert ack["learned_wh"] == pytest.approx(y - moved, abs=1e-3)
    code, out, err = run_cli(capsys, "observe", own, "1", "--total-wh", repr(y - moved))
    assert code == 0, err
    # trip 2, back: per-segment readings (each of the part of its segment driven: the first
    # and last are part-driven, and the car's shift of them that part of the segment's)
    planned = _route(capsys, town, car, "--vehicle-model", MODEL, back=True)["routes"]["planned"]
    _same_trip(car, own, 2)
    back = np.asarray(planned["segments"])
    h2 = _trip_shares(car, 2)
    assert h2[0] < 1 and h2[-1] < 1
    moved_e = h2 * shift[back]
    y_e = h2 * _posterior(car)[back] + moved_e + np.linspace(-0.5, 0.5, back.size)
    for state, values in ((car, y_e), (own, y_e - moved_e)):
        csv = tmp_path / f"{state.name}.csv"
        csv.write_text("segment,energy_wh\n" + "".join(
            f"{int(e)},{v!r}\n" for e, v in zip(back, values.tolist(), strict=True)))
        code, out, err = run_cli(capsys, "observe", state, "2", "--segments", csv)
        assert code == 0, err
        if state == car:
            lines = out.splitlines()
            assert lines[0].startswith(f"trip 2: recorded {back.size} segment energies by {MODEL} "
                                       f"({y_e.sum():.1f} Wh; predicted ")
            assert lines[1] == (f"learned as {(y_e - moved_e).sum():.1f} Wh for sumo-default, "
                                "the state's vehicle (the two cars' E_det difference taken off)")
    # the store holds what the state's vehicle learned: the same numbers in both states
    from ev_nav.store import Store

    with Store.open(car) as a, Store.open(own) as b:
        for x, z in zip(a.observations(), b.observations(), strict=True):
            np.testing.assert_allclose(x.energy_wh, z.energy_wh, rtol=0, atol=1e-9)
    _same_models_after_restart_and_replay(car, own, np.union1d(seg, back))
    # history labels the trips planned for the other car (its figures are the state's vehicle's)
    code, out, err = run_cli(capsys, "history", car)
    assert code == 0, err
    rows = [ln for ln in out.splitlines() if ln.lstrip().startswith(("1 ", "2 "))]
    assert len(rows) == 2 and all(ln.endswith(f"* driven by {MODEL}") for ln in rows)
    assert "as learned for the state's vehicle" in out
    code, out, err = run_cli(capsys, "history", car, "--json")
    assert [r["vehicle_model"] for r in json.loads(out)] == [MODEL, MODEL]
    code, out, err = run_cli(capsys, "history", own, "--json")
    assert [r["vehicle_model"] for r in json.loads(out)] == [None, None]


def test_api_readings_of_another_car_are_learned_as_the_states_vehicles(
    town, tmp_path, capsys
) -> None:
    import time

    from fastapi.testclient import TestClient

    from ev_nav.server.app import create_app
    from ev_nav.server.service import FleetService

    car, own = tmp_path / "car", tmp_path / "own"
    for state in (car, own):
        _init(capsys, town, state)
    shift = _shift(town["net"])
    origin, goal = (list(map(float, town[k].split(","))) for k in ("from", "to"))
    acks, routes = {}, {}
    for state, extra in ((car, {"vehicle_model": MODEL}), (own, {})):
        if state == own:  # the car's route, planned for the state's own vehicle
            _same_trip(car, own, acks[car]["trip"])
        with FleetService(state, poll_s=0.05) as svc, \
                TestClient(create_app(svc, token="tok")) as client:
            if state == car:
                r = client.post("/api/routes", headers=TOKEN,
                                json={"origin": origin, "goal": goal, "policy": "mean", **extra})
                assert r.status_code == 200, r.text
                trip = r.json()["trip"]
                planned = routes[state] = r.json()["routes"]["planned"]
            else:
                trip, planned = acks[car]["trip"], routes[car]
            seg = np.asarray(planned["segments"])
            moved = float(_trip_shares(state, trip) @ shift[seg])
            y = routes[car]["vehicle_model_wh"] + 6.25
            r = client.post(f"/api/trips/{trip}/observations", headers=TOKEN,
                            json={"total_wh": y if state == car else y - moved})
            assert r.status_code == 201, r.text
            acks[state] = ack = r.json()
            deadline = time.monotonic() + 120
            while svc.health()["model_applied_upto"] < ack["batch"]:
                assert time.monotonic() < deadline, "the writer did not learn the reading"
                time.sleep(0.05)
            rows = client.get("/api/trips").json()
            assert rows[-1]["vehicle_model"] == extra.get("vehicle_model")
    seg = np.asarray(routes[car]["segments"])
    moved = float(_trip_shares(car, acks[car]["trip"]) @ shift[seg])
    ack = acks[car]
    assert ack["observed_wh"] == pytest.approx(y, abs=1e-3)
    assert ack["predicted_wh"] == pytest.approx(routes[car]["vehicle_model_wh"], abs=0.051)
    assert ack["vehicle_model"] == MODEL and ack["learned_for"] == "sumo-default"
    assert ack["learned_wh"] == pytest.approx(y - moved, abs=1e-3)
    assert "vehicle_model" not in acks[own] and "learned_wh" not in acks[own]
    _same_models_after_restart_and_replay(car, own, seg)


def test_a_reading_is_judged_against_the_car_that_drove(town, tmp_path, capsys) -> None:
    from fastapi.testclient import TestClient

    from ev_nav.energy import load_vehicle
    from ev_nav.server.app import create_app
    from ev_nav.server.service import FleetService
    from ev_nav.trips.battery import route_energy
    from ev_nav.trips.observations import plausible_noise_variance, record_total
    from ev_nav.trips.planning import plan_trip
    from ev_nav.trips.plausibility import PLAUSIBLE_SIGMAS
    from ev_nav.trips.session import open_session

    # a light car's state, well learned on one route: its readings there are tightly known,
    # and the catalogue car uses tens of its standard deviations more
    light = tmp_path / "light.toml"
    light.write_text('preset = "volkswagen-id3-pro"\nname = "light-ev"\nmass_kg = 900.0\n'
                     'aux_power_w = 0.0\nstops_per_km = 0.0\nrolling_coeff = 0.006\n'
                     'drag_coeff = 0.2\n')
    state = tmp_path / "state"
    _init(capsys, town, state, "--vehicle-file", light)
    origin, goal = (tuple(map(float, town[k].split(","))) for k in ("from", "to"))
    session = open_session(state)
    try:
        for _ in range(14):  # on the route chosen for the catalogue car (it asks below)
            trip = plan_trip(session, origin, goal, policy="mean", car=get_vehicle(MODEL))
            record_total(session, trip.trip_id, trip.routes["planned"].predicted_wh)
    finally:
        session.close()
    doc = _route(capsys, town, state, "--vehicle-model", MODEL)
    trip_id, planned = doc["trip"], doc["routes"]["planned"]
    seg = np.asarray(planned["segments"])
    h = driven_part(planned)
    net = town["net"]
    moved = float(h @ (segment_energy_wh(net.length_m, net.speed_mps, net.grade,
                                         get_vehicle(MODEL))
                       - segment_energy_wh(net.length_m, net.speed_mps, net.grade,
                                           load_vehicle(light)))[seg])
    # the sd a total is judged by (model sd and at least the plausible noise), recomputed here
    session = open_session(state)
    try:
        model = session.model
        noise = max(float(model.noise_variance(seg, h)),
                    float(plausible_noise_variance(session, seg, h)))
        sd = float(np.sqrt(route_energy(model, seg, h).sd_wh ** 2
                           - model.noise_variance(seg, h) + noise))
    finally:
        session.close()
    y = planned["vehicle_model_wh"] + 0.5
    # for the state's own vehicle this reading would be far beyond any plausible drive
    assert abs(y - planned["predicted_wh"]) / sd > 30
    assert abs(y - planned["vehicle_model_wh"]) / sd < 1
    # a truly implausible one is refused, quoting the prediction for the car that drove
    bad = 10 * planned["vehicle_model_wh"]
    assert abs(bad - planned["vehicle_model_wh"]) / sd > PLAUSIBLE_SIGMAS
    code, out, err = run_cli(capsys, "observe", state, trip_id, "--total-wh", bad)
    assert code == 2 and out == ""
    assert f"trip {trip_id} total ({MODEL}): {bad:g} Wh is " in err
    assert f"from the predicted {planned['vehicle_model_wh']:.1f} Wh" in err
    with FleetService(state, poll_s=0.05) as svc, \
            TestClient(create_app(svc, token="tok")) as client:
        r = client.post(f"/api/trips/{trip_id}/observations", headers=TOKEN,
                        json={"total_wh": bad})
        assert r.status_code == 422, r.text
        assert f"from the predicted {planned['vehicle_model_wh']:.1f} Wh" in r.json()["error"]
    # the car's plausible reading is accepted, and learned as the state's vehicle's
    code, out, err = run_cli(capsys, "observe", state, trip_id, "--total-wh", repr(y), "--json")
    assert code == 0, err
    ack = json.loads(out)
    assert ack["learned_for"] == "light-ev"
    assert ack["learned_wh"] == pytest.approx(y - moved, abs=1e-3)
    assert abs(ack["learned_wh"] - planned["predicted_wh"]) / sd < 1


def test_a_tracked_drive_of_another_car_is_converted_on_the_route_driven(
    town, tmp_path, capsys
) -> None:
    from ev_nav.sim.gps import simulate_track
    from ev_nav.store import Store
    from ev_nav.trips.gpx import write_gpx

    net, state = town["net"], tmp_path / "state"
    _init(capsys, town, state)
    planned = _route(capsys, town, state, "--vehicle-model", MODEL)["routes"]["planned"]
    route = np.asarray(planned["segments"])
    track = simulate_track(net, route, np.random.default_rng(3), noise_m=5.0,
                           start_fraction=0.3, end_fraction=0.6)
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon,
                    time_s=1_714_550_400.0 + track.time_s)
    y = planned["vehicle_model_wh"] + 3.0
    code, out, err = run_cli(capsys, "observe", state, "1", "--gpx", gpx, "--total-wh", repr(y))
    assert code == 0, err
    with Store.open(state) as store:
        (batch,) = store.observations(1)
    # the total less the shift over the part of each matched segment driven (the batch's shares)
    assert batch.weights[0] < 0.99 and batch.weights[-1] < 0.99  # part-way at both ends
    moved = float(batch.weights @ _shift(net)[batch.segment_ids])
    assert batch.energy_wh[0] == pytest.approx(y - moved, rel=0, abs=1e-9)
    assert f"observed {y:.1f} Wh by {MODEL} on " in out
    assert (f"learned as {y - moved:.1f} Wh for sumo-default, the state's vehicle (the two "
            "cars' E_det difference taken off)") in out


def test_a_car_the_catalogue_lacks_is_a_one_line_error_recording_nothing(
    town, tmp_path, capsys
) -> None:
    from ev_nav.store import Store

    state = tmp_path / "state"
    _init(capsys, town, state)
    planned = _route(capsys, town, state, "--vehicle-model", MODEL)["routes"]["planned"]
    with Store.open(state) as store:  # a trip recorded when the catalogue had another car
        store._conn.execute("UPDATE trips SET extra_json = ? WHERE id = 1",
                            ('{"vehicle_model": "delorean"}',))
    code, out, err = run_cli(capsys, "observe", state, "1", "--total-wh",
                             planned["vehicle_model_wh"])
    assert code == 2 and out == ""
    assert err == ("ev-nav: error: trip 1 was planned for 'delorean', which the vehicle "
                   "catalogue does not have: its readings cannot be converted to "
                   "sumo-default's\n")
    with Store.open(state) as store:
        assert store.observations() == []
