"""Ambient temperature through the fleet service (issue 31): a route is predicted at the
temperature it asks for, an observation's temperature is stored and learned by the writer, and
the served model then carries the temperature coefficients (a copy, not the shared view)."""

from __future__ import annotations

import threading

import pytest

from ev_nav.errors import InvalidObservation
from ev_nav.server.service import FleetService
from ev_nav.store import Store
from tests.server.helpers import far_points


def test_routes_and_observations_take_a_temperature(state) -> None:
    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        mild = svc.plan(origin, goal, policy="mean")
        cold = svc.plan(origin, goal, policy="mean", temperature=-8.0)
        r_mild, r_cold = mild["routes"]["shortest"], cold["routes"]["shortest"]
        assert r_mild["segments"] == r_cold["segments"]
        assert r_cold["predicted_wh"] > r_mild["predicted_wh"]
        with pytest.raises(InvalidObservation):
            svc.record(cold["trip"], total_wh=100.0, temperature=float("nan"))
        total = r_cold["predicted_wh"] if cold["routes"]["planned"]["segments"] == \
            r_cold["segments"] else cold["routes"]["planned"]["predicted_wh"]
        ack = svc.record(cold["trip"], total_wh=1.1 * total, temperature=-8.0)
        wait = threading.Event()
        for _ in range(1200):
            if svc.snapshot.applied_upto >= ack["batch"]:
                break
            wait.wait(0.1)
        assert svc.snapshot.applied_upto >= ack["batch"]
        assert svc.snapshot.model.temp.active
        again = svc.plan(origin, goal, policy="mean", temperature=-8.0)
        assert again["model_version"] > cold["model_version"]
        # the history (GET /api/trips) says at which temperature each trip was observed
        history = {r["trip"]: r for r in svc.history()}
        assert history[cold["trip"]]["temperature_c"] == -8.0
        assert history[mild["trip"]]["temperature_c"] is None
    with Store.open(state) as store:
        batch = store.observations()[-1]
        assert batch.temperature_c == -8.0


def test_an_observation_without_a_temperature_is_taken_at_the_trips(state) -> None:
    """As 'ev-nav observe': a trip planned at a temperature and observed without one is recorded
    at the planning temperature (a trip planned without one stays without); one given wins."""
    with FleetService(state, poll_s=0.05) as svc:
        origin, goal = far_points(svc.net)
        cold = svc.plan(origin, goal, policy="mean", temperature=-5.0)
        mild = svc.plan(origin, goal, policy="mean")
        other = svc.plan(origin, goal, policy="mean", temperature=-5.0)
        acks = [svc.record(t["trip"], total_wh=t["routes"]["planned"]["predicted_wh"], **kw)
                for t, kw in ((cold, {}), (mild, {}), (other, {"temperature": 2.0}))]
    assert [a["temperature_c"] for a in acks] == [-5.0, None, 2.0]
    with Store.open(state) as store:
        stored = {b.id: b.temperature_c for b in store.observations()}
    assert [stored[a["batch"]] for a in acks] == [-5.0, None, 2.0]


def test_the_http_api_takes_and_checks_a_temperature(server, served_town) -> None:
    """Over HTTP: a route at a temperature is predicted at it; a temperature outside −60..60 °C
    or not a number is a one-line 422, nothing recorded."""
    import httpx

    from ev_nav.server.client import RoutingClient, ServerError

    origin, goal = far_points(served_town)
    with RoutingClient(server.url, token="fleet-secret-42") as client:
        mild = client.plan(origin, goal, policy="mean")
        cold = client.plan(origin, goal, policy="mean", temperature=-10.0)
        assert (cold["routes"]["shortest"]["predicted_wh"]
                > mild["routes"]["shortest"]["predicted_wh"])
        with pytest.raises(ServerError) as bad:
            client.record_total(cold["trip"], 100.0, temperature=95.0)
        assert bad.value.status == 422
        (row,) = [r for r in client.history() if r["trip"] == cold["trip"]]
        assert row["observed_wh"] is None
    body = {"origin": list(origin), "goal": list(goal), "temperature": "cold"}
    r = httpx.post(f"{server.url}/api/routes", json=body, timeout=60.0,
                   headers={"Authorization": "Bearer fleet-secret-42"})
    assert r.status_code == 422 and "error" in r.json()
