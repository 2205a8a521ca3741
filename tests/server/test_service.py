"""The fleet service's concurrency promises, in process and without timing: route requests keep
being answered on the previous snapshot while the writer is learning; snapshots are independent
copies of the model; acknowledged observations are in the store before the model sees them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ev_nav.server.service import FleetService, _clone_model
from tests.server.helpers import far_points


def _plausible(trip: dict) -> float:
    """A positive reading one predicted sd above the prediction."""
    r = trip["routes"]["planned"]
    return max(r["predicted_wh"], 0.0) + r["predicted_sd_wh"] + 1.0


def test_routes_are_answered_while_the_writer_learns(state, monkeypatch) -> None:
    """The writer is held inside a model update (an event it waits on): a route request still
    completes, on the previous snapshot; once released, the next snapshot includes the data."""
    import ev_nav.trips.changes as changes_module
    import ev_nav.trips.session as session_module

    inside, release = threading.Event(), threading.Event()
    real_apply = session_module.apply_batches

    def held_apply(model, batches, *resets):
        if batches:  # (opening the state replays none)
            inside.set()
            assert release.wait(120), "test never released the writer"
        real_apply(model, batches, *resets)

    monkeypatch.setattr(session_module, "apply_batches", held_apply)
    monkeypatch.setattr(changes_module, "apply_batches", held_apply)  # the writer learns there
    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        first = svc.plan(origin, goal, policy="mean")
        v1 = svc.snapshot.version
        ack = svc.record(first["trip"], total_wh=_plausible(first))
        assert inside.wait(120), "the writer never started learning"
        # the writer is busy learning: planning goes on, on the snapshot it had
        during = svc.plan(origin, goal, policy="mean")
        assert during["model_version"] == v1 and during["trip"] == first["trip"] + 1
        assert svc.health()["pending"] is True
        release.set()
        deadline = threading.Event()
        for _ in range(1200):
            if svc.snapshot.applied_upto >= ack["batch"]:
                break
            deadline.wait(0.1)
        assert svc.snapshot.applied_upto >= ack["batch"] and svc.snapshot.version > v1
        after = svc.plan(origin, goal, policy="mean")
        assert after["model_version"] == svc.snapshot.version


def test_acknowledged_means_stored_before_learned(state, monkeypatch) -> None:
    """The acknowledgement comes after the store commit and before any model update."""
    import ev_nav.trips.changes as changes_module
    import ev_nav.trips.session as session_module
    from ev_nav.store import Store

    release = threading.Event()
    real_apply = session_module.apply_batches

    def held_apply(m, b, *r):
        return not b or release.wait(120), real_apply(m, b, *r)

    monkeypatch.setattr(session_module, "apply_batches", held_apply)
    monkeypatch.setattr(changes_module, "apply_batches", held_apply)  # the writer learns there
    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        trip = svc.plan(origin, goal, policy="mean")
        ack = svc.record(trip["trip"], total_wh=_plausible(trip))
        with Store.open(state) as store:
            assert [b.id for b in store.observations()] == [ack["batch"]]
        assert svc.snapshot.applied_upto < ack["batch"]  # not learned yet: the writer is held
        release.set()


def test_snapshot_copies_are_independent(state) -> None:
    from ev_nav.trips.session import open_session

    with open_session(state) as session:
        model, net = session.model, session.net
        route = np.arange(12)
        model.update(route, net.e_det()[route] + 3.0)
        copy, how = _clone_model(model, net, session.vehicle, "gp")
        assert how == "deep copy"
        np.testing.assert_array_equal(copy.posterior().mean, model.posterior().mean)
        np.testing.assert_array_equal(copy.route_covariance(route), model.route_covariance(route))
        before = model.posterior().mean.copy()
        copy.update(route[:4], np.full(4, 500.0))
        np.testing.assert_array_equal(model.posterior().mean, before)  # the original: untouched
        assert not np.array_equal(copy.posterior().mean, before)


def test_snapshot_of_a_model_that_cannot_be_copied(state) -> None:
    """A model that refuses deep copies is snapshotted through its state_dict, equal."""
    from ev_nav.gp.independent import BIModel
    from ev_nav.trips.session import load_network_ref

    net = load_network_ref("synthetic:300:0")
    model = BIModel(net)
    model.update(np.arange(5), np.full(5, 7.0))
    model.lock = threading.Lock()  # deep copies of a lock fail
    copy, how = _clone_model(model, net, None, "bi")
    assert how == "state_dict" and not hasattr(copy, "lock")
    np.testing.assert_array_equal(copy.posterior().mean, model.posterior().mean)
    np.testing.assert_array_equal(copy.posterior().std, model.posterior().std)


def test_one_service_per_state(tmp_path) -> None:
    """A second service on the state is refused with one line naming the first, even in the
    same process; once the first has closed, the state can be served again."""
    from ev_nav.errors import StateInUseError
    from ev_nav.trips.session import create_state

    path = tmp_path / "bi-state"
    create_state(path, synthetic=300, model="bi").close()
    first = FleetService(path, poll_s=0.05, address="http://first/")
    try:
        with pytest.raises(StateInUseError, match=r"already served .*pid \d+ on http://first/"):
            FleetService(path, poll_s=0.05)
        assert first.health()["status"] == "ok"  # the refusal did not disturb it
    finally:
        assert first.close()
    with FleetService(path, poll_s=0.05) as again:
        assert again.health()["status"] == "ok"


def test_close_stops_a_running_refit(state, monkeypatch) -> None:
    """A refit runs in its own (non-daemon) thread; closing the service cancels it and waits, so
    no thread is left inside torch when the interpreter exits (a daemon thread there aborted
    the server with SIGABRT on shutdown)."""
    import time

    import ev_nav.server.service as service_module
    from ev_nav.gp.incremental import IncrementalGP

    inside = threading.Event()
    seen: list[threading.Event | None] = []

    def long_refit(self, cancel=None):  # a fit that checks its event between evaluations
        seen.append(cancel)
        inside.set()
        assert cancel is not None and cancel.wait(120), "close never cancelled the refit"
        return False

    monkeypatch.setattr(IncrementalGP, "refit", long_refit)
    monkeypatch.setattr(service_module, "REFIT_FIRST_ROWS", 1)
    svc = FleetService(state, poll_s=0.05)
    origin, goal = far_points(svc.net)
    first = svc.plan(origin, goal, policy="mean")
    svc.record(first["trip"], total_wh=_plausible(first))
    assert inside.wait(120), "no refit started"
    assert svc.refitting
    t0 = time.monotonic()
    assert svc.close(timeout_s=60)
    assert time.monotonic() - t0 < 60
    assert not svc._refit_thread.is_alive() and not svc._refit_thread.daemon
    assert not svc.refitting
    assert svc._refitted is None  # a cancelled refit is not adopted


def test_a_cancelled_fit_leaves_the_model_unchanged() -> None:
    from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
    from ev_nav.gp.testing import load_real, random_route, subnetwork

    net = subnetwork(load_real(), 80, seed=1)
    model = IncrementalGP(net, config=IncrementalConfig(first_fit=10_000), seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        path = random_route(net, 8, rng)
        model.update(path, model.prior_mean[path] + rng.normal(0.0, 3.0, path.size))
    before = model.posterior()
    hyper, fits = model.hyperparameters(), len(model.fits)
    cancel = threading.Event()
    cancel.set()
    assert model.refit(cancel=cancel) is False
    assert model.hyperparameters() == hyper and len(model.fits) == fits
    assert model.posterior() is before
    assert model.refit() is True and len(model.fits) == fits + 1


def test_the_service_refits_the_regional_learner_in_the_background(state, monkeypatch) -> None:
    """Past the exact learner's size the service's schedule refits the regional learner too: a
    copy fits and rebuilds its prior in the background, the served model is swapped for it
    (fitted hyperparameters, one fit, the trip still learned), and the live model's prior was
    never touched meanwhile."""
    import ev_nav.gp.regional.model as regional_model
    import ev_nav.server.service as service_module
    from ev_nav.gp import incremental_state
    from ev_nav.gp.regional import RegionalGP

    monkeypatch.setattr(incremental_state, "MAX_EXACT_SEGMENTS", 100)
    monkeypatch.setattr(service_module, "REFIT_FIRST_ROWS", 1)
    # three trip totals rarely pass the fit's likelihood-ratio test: take the fitted values,
    # so that the copy rebuilds its prior (the path under test)
    monkeypatch.setattr(regional_model, "accept_fit", lambda *args: True)
    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        initial = svc.snapshot.model.hyperparameters()
        live_prior = svc.snapshot.model.prior
        prior_d = live_prior.d.copy()
        for _ in range(3):
            plan = svc.plan(origin, goal, policy="mean")
            ack = svc.record(plan["trip"], total_wh=_plausible(plan))
        waiter = threading.Event()
        for _ in range(1200):
            snap = svc.snapshot
            if snap.model.fits and not svc.refitting and snap.applied_upto >= ack["batch"]:
                break
            waiter.wait(0.1)
        model = svc.snapshot.model
        assert isinstance(model, RegionalGP) and model.defer_refits
        assert model.fits and model.hyperparameters() != initial
        assert len(model.totals) == 3  # the trips absorbed while it fitted are in it
        np.testing.assert_array_equal(live_prior.d, prior_d)
        # health reports the served values (it reported none for this learner)
        assert svc.health()["hyperparameters"] == model.hyperparameters()


def test_answers_are_the_json_fastapi_would_send(state) -> None:
    """The API serialises the service's documents once, in the request's thread
    (``app.json_body``): the bytes FastAPI's own path sends for a returned dict (validated
    against ``dict[str, object]``, then dumped), and the document's JSON values."""
    import json

    from pydantic import TypeAdapter

    from ev_nav.server.app import json_body

    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        planned = svc.plan(origin, goal, policy="ts", soc="80%", vehicle_model="nissan-leaf-eplus")
        ack = svc.record(planned["trip"], total_wh=_plausible(planned))
        health = svc.health()
    fastapi_way = TypeAdapter(dict[str, object])
    for doc in (planned, ack, health):
        body = json_body(doc).body
        assert body == fastapi_way.dump_json(fastapi_way.validate_python(doc))
        assert json.loads(body) == json.loads(json.dumps(doc))
    assert len(planned["routes"]["planned"]["coordinates"]) > 2


def test_requests_see_what_other_connections_commit(state) -> None:
    """Request threads keep their store connection between requests; each request still sees
    what was committed meanwhile through another connection ('ev-nav route' in a shell)."""
    from ev_nav.trips.planning import plan_trip
    from ev_nav.trips.session import open_session

    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        first = svc.plan(origin, goal, policy="mean")  # this thread's connection is opened
        assert svc.health()["trips"] == 1
        with open_session(state, planning=True) as other:
            elsewhere = plan_trip(other, goal, origin, policy="mean")
        assert svc.health()["trips"] == 2
        assert [t["trip"] for t in svc.history()] == [first["trip"], elsewhere.trip_id]
        assert svc.plan(origin, goal, policy="mean")["trip"] == elsewhere.trip_id + 1


@pytest.mark.parametrize("partial", [False, True])
def test_acknowledgement_is_what_observe_shows(state, tmp_path, capsys, partial) -> None:
    """The server's acknowledgement compares the readings with what ``ev-nav observe --json``
    does, field for field: the trip's prediction for a total, the recorded segments' for a
    partial record (it showed the whole trip's), and the sd the readings were judged by."""
    import json
    import shutil

    from ev_nav.trips.planning import plan_trip
    from ev_nav.trips.session import open_session
    from tests.cli_helpers import run_cli

    with open_session(state, planning=True) as session:
        origin, goal = far_points(session.net)
        plan = plan_trip(session, origin, goal, policy="mean")
        trip = session.store.get_trip(plan.trip_id)
        mean = session.model.posterior().mean
    seg = trip.route[: max(trip.route.size // 2, 1)] if partial else trip.route
    wh = mean[seg] + 0.5
    twin = tmp_path / "twin"
    shutil.copytree(state, twin)
    if partial:
        csv = tmp_path / "part.csv"
        rows = "".join(f"{s},{w}\n" for s, w in zip(seg, wh, strict=True))
        csv.write_text("segment,energy_wh\n" + rows)
        code, out, err = run_cli(capsys, "observe", twin, trip.id, "--segments", csv,
                                 "--partial", "--json")
    else:
        code, out, err = run_cli(capsys, "observe", twin, trip.id, "--total-wh",
                                 f"{trip.predicted_wh + 1.0}", "--json")
    assert code == 0, err
    shown = json.loads(out)
    with FleetService(state, poll_s=0.05) as svc:
        if partial:
            ack = svc.record(trip.id, segments=(seg, wh), partial=True)
        else:
            ack = svc.record(trip.id, total_wh=trip.predicted_wh + 1.0)
    for key in ("predicted_wh", "predicted_sd_wh", "sd_with_noise_wh", "predicted_segments"):
        assert ack[key] == shown[key], key
    if partial:
        assert ack["predicted_segments"] == np.unique(seg).size
        # the first reading is of the part of its segment the trip drove
        h = np.asarray(trip.shares)[: seg.size]
        assert ack["predicted_wh"] == pytest.approx(h @ mean[seg], abs=0.06)
    else:
        assert ack["predicted_segments"] is None
        assert ack["predicted_wh"] == pytest.approx(trip.predicted_wh, abs=0.06)
    assert ack["sd_with_noise_wh"] > ack["predicted_sd_wh"]


def test_past_the_exact_size_the_service_learns_with_the_regional_learner(
    state, monkeypatch
) -> None:
    """Above the exact learner's size the service serves the regional learner: snapshots are
    independent copies that share its prior, what it absorbs changes them, and its checkpoint
    reopens to the same posterior."""
    from ev_nav.gp import incremental_state
    from ev_nav.gp.regional import RegionalGP
    from ev_nav.trips.session import open_session

    monkeypatch.setattr(incremental_state, "MAX_EXACT_SEGMENTS", 100)
    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        first = svc.plan(origin, goal, policy="ts")
        before = svc.snapshot.model.posterior().mean.copy()
        ack = svc.record(first["trip"], total_wh=_plausible(first))
        waiter = threading.Event()
        for _ in range(1200):
            if svc.snapshot.applied_upto >= ack["batch"]:
                break
            waiter.wait(0.1)
        snap = svc.snapshot.model
        assert isinstance(snap, RegionalGP) and svc.snapshot.applied_upto >= ack["batch"]
        assert not np.array_equal(snap.posterior().mean, before)
        copied, how = _clone_model(snap, svc.net, None, "gp")
        assert how == "deep copy" and copied.prior is snap.prior
        assert copied.factor is not snap.factor and copied.factor.rowidx is snap.factor.rowidx
        assert copied.factor.values is not snap.factor.values
        copied.update(np.arange(4), np.full(4, 500.0))
        assert not np.array_equal(copied.posterior().mean, snap.posterior().mean)
        svc.plan(origin, goal, policy="bucb")
        served = snap.posterior()
    with open_session(state) as session:
        assert isinstance(session.model, RegionalGP) and not session.skipped
        np.testing.assert_array_equal(session.model.posterior().mean, served.mean)
        np.testing.assert_array_equal(session.model.posterior().std, served.std)
