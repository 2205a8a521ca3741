"""The routing server over real HTTP: every endpoint, figures against independent computations,
every error a one-line JSON 4xx that leaves the state (history and model) as it was.

The server runs in a child process (``tests/server/conftest.py``); these tests talk to it with
httpx, and check what it says against the state's own library: the trip's route figures
recomputed from the network, the served posterior against a model replayed from the store.
"""

from __future__ import annotations

import hashlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

TOKEN = "fleet-secret-42"  # the one tests/server/conftest.py starts the server with
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        yield client


def _far_pair(net, k: int = 0) -> tuple[list[float], list[float]]:
    """(lat, lon) of two segment midpoints far apart (SW and NE corners, shifted by k)."""
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    a, b = order[5 + 7 * k], order[-6 - 7 * k]
    return [float(mid[a, 1]), float(mid[a, 0])], [float(mid[b, 1]), float(mid[b, 0])]


def settle(http: httpx.Client, timeout_s: float = 300.0) -> dict:
    """Wait until the served model includes every committed observation; the health doc."""
    t0 = time.monotonic()
    while True:
        h = http.get("/api/health").json()
        if not h["pending"] and not h["refitting"]:  # a background refit changes the model
            return h
        assert time.monotonic() - t0 < timeout_s, f"model never caught up: {h}"
        time.sleep(0.2)


def fingerprint(http: httpx.Client, state: Path) -> dict:
    """What must not change when a request is refused: history, the served model (its layers
    and version), and the store's observations."""
    from ev_nav.store import Store

    h = settle(http)
    with Store.open(state) as store:
        batches = [(b.id, b.trip_id, b.energy_wh.tolist()) for b in store.observations()]
        trips = store.n_trips()
    return {
        "history": http.get("/api/trips").json(),
        "model_version": h["model_version"],
        "layers": hashlib.sha256(http.get("/api/layers").content).hexdigest(),
        "batches": batches,
        "trips": trips,
    }


def replayed_model(state: Path):
    """The state's model rebuilt by the library (checkpoint + replay), as the CLI would."""
    from ev_nav.trips.session import open_session

    session = open_session(state)
    session.close()
    return session.model


def _plan(http: httpx.Client, net, k: int = 0, **extra) -> dict:
    origin, goal = _far_pair(net, k)
    r = http.post("/api/routes", json={"origin": origin, "goal": goal, **extra}, headers=AUTH)
    assert r.status_code == 200, r.text
    return r.json()


def _assert_error(r: httpx.Response, status: int, *needles: str) -> str:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "type"}
    msg = body["error"]
    assert "\n" not in msg and "Traceback" not in msg and msg
    # the API speaks in request fields and endpoints, never in the command line's options, nor
    # names a command where an endpoint does the same (an operator's 'ev-nav network build'
    # has none)
    assert not re.search(r"(^|[\s(])--[a-z]", msg), msg
    assert "ev-nav history" not in msg, msg
    for n in needles:
        assert n in msg, msg
    return msg


# ---------------------------------------------------------------------- reading endpoints
def test_health_openapi_and_pages(http, served_town) -> None:
    h = http.get("/api/health").json()
    assert h["status"] == "ok" and h["segments"] == served_town.n_segments
    assert h["network_hash"] == served_town.content_hash
    assert h["model"] == "gp" and h["token_required"] is True
    assert h["battery_wh"] == pytest.approx(35000.0)
    spec = http.get("/openapi.json").json()
    paths = spec["paths"]
    for path, method in [("/api/health", "get"), ("/api/routes", "post"),
                         ("/api/trips/{trip_id}/observations", "post"),
                         ("/api/trips/{trip_id}/observations", "delete"),
                         ("/api/trips", "get"), ("/api/layers", "get"),
                         ("/api/changes", "get")]:
        assert method in paths[path], (path, method)
    docs = http.get("/docs")
    assert docs.status_code == 200
    # the OpenAPI page's scripts and styles come from this server, never a CDN
    assert re.findall(r'(?:src|href)="(https?:[^"]*)"', docs.text) == []
    assert "/static/swagger-ui/swagger-ui-bundle.js" in docs.text
    for asset in ("/static/swagger-ui/swagger-ui-bundle.js", "/static/swagger-ui/swagger-ui.css",
                  "/static/leaflet/leaflet.js", "/static/leaflet/leaflet.css",
                  "/static/server/app.js", "/static/server/app.css"):
        assert http.get(asset).status_code == 200, asset
    # the page draws what the API serves: the layers, and the roads flagged as changed on the
    # layers' lines (feature i is segment i: test_layers_are_geojson_of_the_served_posterior)
    script = http.get("/static/server/app.js").text
    assert '"/api/layers"' in script and '"/api/changes"' in script
    # a route's tooltip and an observation's acknowledgement name the sd as the CLI does
    assert '" Wh (model sd)"' in script and '" Wh, model sd "' in script
    page = http.get("/")
    assert page.status_code == 200 and "/static/leaflet/leaflet.js" in page.text
    assert re.findall(r'(?:src|href)="(https?:[^"]*)"', page.text) == []


def test_vendored_swagger_ui_matches_its_notice() -> None:
    folder = ROOT / "ev_nav" / "static" / "swagger-ui"
    notice = (folder / "NOTICE.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", notice, re.M)
    shipped = {p.name for p in folder.iterdir() if p.is_file()} - {"NOTICE.md"}
    assert {n for n, _ in rows} == shipped
    for name, digest in rows:
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_layers_are_geojson_of_the_served_posterior(http, served_town, served_state) -> None:
    settle(http)
    doc = http.get("/api/layers").json()
    assert doc["type"] == "FeatureCollection"
    assert set(doc["layers"]) == {"wh_per_km", "mean_wh", "sd_wh", "visits"}
    feats = doc["features"]
    assert [f["properties"]["segment"] for f in feats] == list(range(served_town.n_segments))
    post = replayed_model(served_state).posterior()
    mean = np.array([f["properties"]["mean_wh"] for f in feats])
    sd = np.array([f["properties"]["sd_wh"] for f in feats])
    per_km = np.array([f["properties"]["wh_per_km"] for f in feats])
    np.testing.assert_allclose(mean, post.mean, atol=0.006)
    np.testing.assert_allclose(sd, post.std, atol=0.006)
    np.testing.assert_allclose(per_km, post.mean / served_town.length_m * 1000, atol=0.006)
    e = 17
    np.testing.assert_allclose(
        feats[e]["geometry"]["coordinates"], served_town.segment_coords(e), atol=1e-6
    )


# ---------------------------------------------------------------------- planning
def test_plan_route_figures(http, served_town, served_state) -> None:
    settle(http)
    trip = _plan(http, served_town, 0, soc="80%", vehicle="van-7", policy="ts")
    routes = trip["routes"]
    assert list(routes) == ["planned", "best guess", "safe", "shortest", "fastest"]
    model = replayed_model(served_state)
    from ev_nav.bandits.agent import describe_route
    from ev_nav.bandits.routing import PartialPath

    net = served_town
    for name, r in routes.items():
        seg = np.array(r["segments"])
        fs, fg = r["start_fraction"], r["end_fraction"]
        # the trip runs between two points part-way along its end segments: those count with
        # the share driven
        share = np.ones(seg.size)
        share[0], share[-1] = (fg - fs, fg - fs) if seg.size == 1 else (1 - fs, fg)
        # independent figures: lengths and times from the network, energy from the replayed model
        assert r["km"] == pytest.approx(share @ net.length_m[seg] / 1000, abs=6e-4), name
        assert r["minutes"] == pytest.approx(share @ net.travel_time_s[seg] / 60, abs=6e-3), name
        ref = describe_route(net, PartialPath(seg, fs, fg, 0.0), model)
        assert r["predicted_wh"] == pytest.approx(ref.predicted_wh, abs=0.06), name
        assert r["predicted_sd_wh"] == pytest.approx(ref.predicted_sd_wh, abs=0.06), name
        # arrival charge: departure 80% minus the route's predicted energy, of 35 kWh
        assert r["arrival"]["soc_pct"] == pytest.approx(80 - ref.predicted_wh / 350, abs=0.006)
        lo, hi = r["arrival"]["interval_pct"]
        assert lo < r["arrival"]["soc_pct"] < hi
        # the drawn line starts and ends at the exact points, at the heights there
        # ([lon, lat, elevation m]; heights vary linearly along a segment)
        first, last = r["coordinates"][0], r["coordinates"][-1]
        np.testing.assert_allclose(first[:2], net.segment_point(seg[0], fs), atol=1e-6)
        np.testing.assert_allclose(last[:2], net.segment_point(seg[-1], fg), atol=1e-6)
        z = net.node_elevation
        z0 = z[net.seg_u[seg[0]]] + fs * (z[net.seg_v[seg[0]]] - z[net.seg_u[seg[0]]])
        z1 = z[net.seg_u[seg[-1]]] + fg * (z[net.seg_v[seg[-1]]] - z[net.seg_u[seg[-1]]])
        assert first[2] == pytest.approx(z0, abs=0.06)
        assert last[2] == pytest.approx(z1, abs=0.06)
    # the trip's segments are its planned route's ends (another route may begin on the other
    # direction of the same road: every route's ends were checked as points above)
    planned = routes["planned"]["segments"]
    assert planned[0] == trip["start_segment"] and planned[-1] == trip["goal_segment"]
    assert trip["departure_soc_pct"] == 80.0 and trip["reserve_pct"] == 10.0
    assert trip["vehicle"] == "van-7" and trip["seed"] == trip["trip"]
    # the trip is recorded, with the vehicle that asked
    rows = http.get("/api/trips", params={"limit": 1}).json()
    assert isinstance(rows, list), rows
    assert rows[-1]["trip"] == trip["trip"] and rows[-1]["vehicle"] == "van-7"
    assert rows[-1]["km"] == routes["planned"]["km"] and rows[-1]["observed_wh"] is None


def test_plan_without_alternatives_is_the_same_trip(http, served_town) -> None:
    """A vehicle's request (``alternatives: false``) gets the planned route alone: the same
    route, figures and arrival as the full document planned with the same draw, and a
    recorded trip like any other."""
    settle(http)
    ask = {"policy": "ts", "seed": 4321, "soc": "80%"}
    full = _plan(http, served_town, 2, **ask)
    alone = _plan(http, served_town, 2, **ask, alternatives=False)
    assert {"planned", "best guess", "shortest", "fastest"} <= set(full["routes"])
    assert list(alone["routes"]) == ["planned"]
    assert alone["model_version"] == full["model_version"]  # nothing learned in between
    for key in ("segments", "start_fraction", "end_fraction", "km", "minutes", "predicted_wh",
                "predicted_sd_wh", "arrival", "coordinates"):
        assert alone["routes"]["planned"][key] == full["routes"]["planned"][key], key
    assert alone["trip"] == full["trip"] + 1
    rows = http.get("/api/trips", params={"limit": 2}).json()
    assert [r["trip"] for r in rows] == [full["trip"], alone["trip"]]
    assert rows[0]["km"] == rows[1]["km"] == full["routes"]["planned"]["km"]
    # a charge that cannot keep the reserve (departing at it: any energy used misses it): the
    # warning names only what the answer holds
    low = {"policy": "mean", "soc": "2%", "reserve": "2%"}
    with_rows, alone = _plan(http, served_town, 2, **low), _plan(
        http, served_town, 2, **low, alternatives=False)
    assert "'safe' route" in with_rows["warning"] and "safe" in with_rows["routes"]
    assert alone["warning"].startswith("the planned route misses the reserve")
    assert "safe" not in alone["warning"] and "POST /api/charging-plans" in alone["warning"]


# ---------------------------------------------------------------------- observations
def test_record_total_the_model_learns_it(http, served_town, served_state) -> None:
    before = settle(http)
    trip = _plan(http, served_town, 1, policy="mean")
    predicted = trip["routes"]["planned"]["predicted_wh"]
    r = http.post(f"/api/trips/{trip['trip']}/observations",
                  json={"total_wh": predicted + 25.0}, headers=AUTH)
    assert r.status_code == 201, r.text
    ack = r.json()
    assert ack["trip"] == trip["trip"] and ack["recorded"] == "total"
    assert ack["observed_wh"] == pytest.approx(predicted + 25.0)
    # durable when acknowledged: it is in the store already, whatever the model is doing
    from ev_nav.store import Store

    with Store.open(served_state) as store:
        assert store.observed_total(trip["trip"]) == pytest.approx(predicted + 25.0)
    after = settle(http)
    assert after["model_applied_upto"] >= ack["batch"]
    assert after["model_version"] > before["model_version"]
    # the served model is the library's model of the state (checkpoint + replay)
    layers = http.get("/api/layers").json()["features"]
    mean = np.array([f["properties"]["mean_wh"] for f in layers])
    np.testing.assert_allclose(mean, replayed_model(served_state).posterior().mean, atol=0.006)
    row = [t for t in http.get("/api/trips").json() if t["trip"] == trip["trip"]][0]
    assert row["observed_wh"] == pytest.approx(predicted + 25.0, abs=0.05)


def test_record_segments_and_forget(http, served_town, served_state) -> None:
    settle(http)
    layers_before = http.get("/api/layers").json()["features"]
    trip = _plan(http, served_town, 2, policy="mean")
    seg = trip["routes"]["planned"]["segments"]
    model = replayed_model(served_state)
    post = model.posterior()
    energies = [float(post.mean[e]) + 1.0 for e in seg]
    r = http.post(f"/api/trips/{trip['trip']}/observations", headers=AUTH,
                  json={"segments": [{"segment": e, "energy_wh": w}
                                     for e, w in zip(seg, energies, strict=True)]})
    assert r.status_code == 201, r.text
    assert r.json()["observed_wh"] == pytest.approx(sum(energies), abs=1e-3)
    settle(http)
    learned = http.get("/api/layers").json()["features"]
    assert learned[seg[0]]["properties"]["visits"] == layers_before[seg[0]]["properties"][
        "visits"] + 1
    # forget: the observations go, and the model forgets them (back to what it was)
    r = http.delete(f"/api/trips/{trip['trip']}/observations", headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.json()["forgotten_batches"] == 1
    settle(http)
    forgotten = http.get("/api/layers").json()["features"]
    for key in ("mean_wh", "sd_wh", "visits"):
        np.testing.assert_allclose(
            [f["properties"][key] for f in forgotten],
            [f["properties"][key] for f in layers_before],
            atol=0.011,
        )
    _assert_error(http.delete(f"/api/trips/{trip['trip']}/observations", headers=AUTH), 422,
                  "no observations")


# ---------------------------------------------------------------------- errors
def _bad_requests(net, trip_id: int, predicted: float) -> list[tuple[str, dict, int, tuple]]:
    """(description, request kwargs, status, message fragments) of requests that must fail."""
    origin, goal = _far_pair(net, 3)
    obs = f"/api/trips/{trip_id}/observations"
    big = {"origin": origin, "goal": goal, "vehicle": "x" * 10_000_000}
    return [
        ("latitude beyond 90", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": [95.0, 8.0], "goal": goal}), 422, ("origin.0", "90")),
        ("longitude not a number", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": [47.0, "east"], "goal": goal}), 422, ("origin.1",)),
        ("far from every road", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": [-45.0, -170.0], "goal": goal}), 422, ()),
        ("origin equals goal", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": origin}), 422, ("same place on the road",)),
        ("unknown policy", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "policy": "fastest"}), 422, ("policy",)),
        ("alternatives as a string", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "alternatives": "no"}), 422, ("alternatives",)),
        ("unknown field", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "speed": 3}), 422, ("speed",)),
        ("charge beyond the battery", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "soc": "150%"}), 422, ("outside",)),
        ("unknown catalogue model", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "vehicle_model": "delorean"}), 422,
         ("unknown catalogue vehicle 'delorean'", "volkswagen-id3-pro")),
        # "" was taken for no model: the trip was planned for the state's vehicle, unnoticed
        ("empty catalogue model", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "vehicle_model": ""}), 422, ("vehicle_model",)),
        ("empty catalogue model, charging", dict(method="POST", url="/api/charging-plans",
         headers=AUTH, json={"origin": origin, "goal": goal, "soc": "50%",
                             "vehicle_model": ""}), 422, ("vehicle_model",)),
        ("malformed JSON", dict(method="POST", url="/api/routes", headers={
            **AUTH, "Content-Type": "application/json"}, content=b'{"origin": [47.0, 8.0'),
         400, ("malformed JSON",)),
        # a body that is not a JSON object names what to send (it said "body: Field required"
        # or "body: Input should be a valid dictionary or object to extract fields from")
        ("no body", dict(method="POST", url="/api/routes", headers=AUTH), 422,
         ("the body must be a JSON object", "Content-Type: application/json")),
        ("a JSON list", dict(method="POST", url="/api/routes", headers=AUTH, json=[origin, goal]),
         422, ("the body must be a JSON object",)),
        ("JSON sent as text", dict(method="POST", url=obs, headers={
            **AUTH, "Content-Type": "text/plain"}, content=b'{"total_wh": 100}'), 422,
         ("the body must be a JSON object", "Content-Type: application/json")),
        ("body too large", dict(method="POST", url="/api/routes", headers=AUTH, json=big),
         413, ("larger than",)),
        ("no token", dict(method="POST", url="/api/routes",
         json={"origin": origin, "goal": goal}), 401, ("token",)),
        ("wrong token", dict(method="POST", url="/api/routes",
         headers={"Authorization": "Bearer guess"}, json={"origin": origin, "goal": goal}),
         403, ("wrong token",)),
        ("unknown trip", dict(method="POST", url="/api/trips/987654/observations",
         headers=AUTH, json={"total_wh": 100.0}), 404, ("unknown trip id 987654",
                                                          "GET /api/trips")),
        ("trip id not a number", dict(method="POST", url="/api/trips/abc/observations",
         headers=AUTH, json={"total_wh": 100.0}), 422, ("trip_id",)),
        ("beyond any vehicle", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": 1e12}), 422, ("more than any vehicle",)),
        ("kWh for Wh", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": round(predicted / 1000, 3)}), 422, ("looks like kWh",
                                                               '"force": true')),
        ("far outside the prediction", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": predicted * 40 + 5000}), 422, ("standard deviations",)),
        ("zero total", dict(method="POST", url=obs, headers=AUTH, json={"total_wh": 0}),
         422, ("0 Wh",)),
        ("NaN total (not JSON)", dict(method="POST", url=obs, headers={
            **AUTH, "Content-Type": "application/json"}, content=b'{"total_wh": NaN}'),
         422, ("total_wh",)),
        # forced or not: a total typed with three zeros too many would drag every correlated
        # road's learned energy with it (it made the next route's forecast -720 kWh)
        ("forced beyond any vehicle over the trip", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": 999_999, "force": True}), 422,
         ("more than any vehicle can use or recover over", " km")),
        ("a partial total", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": predicted, "partial": True}), 422, ('"partial": true goes with',)),
        ("a body not in UTF-8", dict(method="POST", url=obs, headers={
            **AUTH, "Content-Type": "application/json"}, content=b'{"total_wh": 5, "\xe9": 1}'),
         400, ("UTF-8",)),
        ("a repeated query parameter", dict(method="GET", url="/api/trips?limit=1&limit=2"),
         422, ("'limit' is given more than once",)),
        ("a charging plan to where it starts", dict(method="POST", url="/api/charging-plans",
         headers=AUTH, json={"origin": origin, "goal": origin, "soc": "80%",
                             "vehicle_model": "volkswagen-id3-pro"}),
         422, ("same place on the road",)),
        ("total and segments", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": 1.0, "segments": [{"segment": 1, "energy_wh": 1.0}]}),
         422, ("exactly one",)),
        ("segment not on the route", dict(method="POST", url=obs, headers=AUTH,
         json={"segments": [{"segment": 0, "energy_wh": 1.0}, {"segment": 1,
                                                                "energy_wh": 1.0}]}),
         422, ('"partial": true', '"total_wh"')),
        ("unknown segment id", dict(method="POST", url=obs, headers=AUTH,
         json={"segments": [{"segment": 10**9, "energy_wh": 1.0}]}),
         422, ("segment 1000000000 is not in the network",)),
        # numbers are strict: a string or a boolean is a client's bug, never converted
        ("total as a string", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": str(round(predicted))}), 422, ("total_wh", "number")),
        ("total as a boolean", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": True}), 422, ("total_wh", "number")),
        ("force as a string", dict(method="POST", url=obs, headers=AUTH,
         json={"total_wh": predicted * 40 + 5000, "force": "yes"}), 422, ("force",)),
        ("segment id as a boolean", dict(method="POST", url=obs, headers=AUTH,
         json={"segments": [{"segment": True, "energy_wh": 1.0}]}), 422, ("segment",)),
        ("energy as a string", dict(method="POST", url=obs, headers=AUTH,
         json={"segments": [{"segment": 1, "energy_wh": "1.0"}]}), 422, ("energy_wh",)),
        ("latitude as a string", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": [str(origin[0]), origin[1]], "goal": goal}), 422, ("origin.0",)),
        ("seed as a fraction", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "seed": 3.5}), 422, ("seed",)),
        ("snap distance as a boolean", dict(method="POST", url="/api/routes", headers=AUTH,
         json={"origin": origin, "goal": goal, "max_snap_m": True}), 422, ("max_snap_m",)),
        ("observation without token", dict(method="POST", url=obs,
         json={"total_wh": predicted}), 401, ("token",)),
        ("forget without token", dict(method="DELETE", url=obs), 401, ("token",)),
    ]


def test_errors_are_one_line_and_leave_the_state_unchanged(
    http, served_town, served_state
) -> None:
    trip = _plan(http, served_town, 3, policy="mean")
    predicted = trip["routes"]["planned"]["predicted_wh"]
    assert predicted > 50  # the kWh and sd cases below rely on a clearly positive prediction
    before = fingerprint(http, served_state)
    for what, request, status, needles in _bad_requests(served_town, trip["trip"], predicted):
        r = http.request(**request)
        _assert_error(r, status, *needles)
        assert fingerprint(http, served_state) == before, f"{what} changed the state"
    # a trip request's error is typed as one (it was InvalidObservation, an observation's)
    origin = _far_pair(served_town, 3)[0]
    same = http.post("/api/routes", json={"origin": origin, "goal": origin}, headers=AUTH)
    assert same.json()["type"] == "RouteOptionError"
    # a repeated observation is refused too, and leaves the first one as it was
    ok = http.post(f"/api/trips/{trip['trip']}/observations", json={"total_wh": predicted},
                   headers=AUTH)
    assert ok.status_code == 201
    once = fingerprint(http, served_state)
    again = http.post(f"/api/trips/{trip['trip']}/observations",
                      json={"total_wh": predicted + 1}, headers=AUTH)
    _assert_error(again, 422, "already has observations")
    assert fingerprint(http, served_state) == once


# ---------------------------------------------------------------------- many vehicles
def test_concurrent_fleet_loses_nothing(server, served_town, served_state) -> None:
    """Vehicles plan and post at the same time (the real client, one thread each): every
    acknowledged observation is stored and learned, trips never share an id or a seed, and
    the served model equals the library's replay of the state."""
    from ev_nav.server.client import RoutingClient, drive_fleet
    from ev_nav.sim.environment import Environment
    from ev_nav.store import Store

    world = Environment.create(served_town, seed=3)
    rng = np.random.default_rng(11)
    pairs = [[tuple(int(x) for x in rng.choice(served_town.n_segments, 2, replace=False))
              for _ in range(4)] for _ in range(4)]
    report = drive_fleet(lambda: RoutingClient(server.url, TOKEN), served_town, world, pairs,
                         observe="segments", seed=5)
    assert report.errors == []
    assert len(report.trips) == 16
    trips = [t.trip for t in report.trips]
    assert len(set(trips)) == 16
    acked = report.acknowledged
    assert acked, "no observation was acknowledged"
    with RoutingClient(server.url, TOKEN) as client:
        client.wait_for_model(acked[-1])
    with Store.open(served_state) as store:
        stored = {b.id for b in store.observations()}
        seeds = [store.get_trip(t).seed for t in trips]
    assert set(acked) <= stored  # lost observations: 0
    assert len(set(seeds)) == len(seeds)
    with httpx.Client(base_url=server.url) as http:
        settle(http)
        mean = np.array([f["properties"]["mean_wh"]
                         for f in http.get("/api/layers").json()["features"]])
        served = http.get("/api/health").json()["hyperparameters"]
    # the served posterior is the exact one at the served hyperparameters given every stored
    # observation: the library's replay of the state, conditioned at those hyperparameters (the
    # server refits on its own schedule, in the background, so they may differ from a replay's)
    from ev_nav.gp.incremental import IncrementalGP

    replayed = replayed_model(served_state)
    state = replayed.state_dict()
    state["hyper"] = {k: np.asarray(v, dtype=np.float64) for k, v in served.items()}
    exact = IncrementalGP(served_town, config=replayed.config).load_state_dict(state)
    np.testing.assert_allclose(mean, exact.posterior().mean, atol=0.006)


# ---------------------------------------------------------------------- ev-nav fleet drive
def test_fleet_drive_command(server, tmp_path) -> None:
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        'horizon = 3\nseeds = [4]\n[network]\nkind = "synthetic"\nn_segments = 400\nseed = 0\n'
        '[trips]\nkind = "random"\nvehicles = 2\nmin_distance_m = 400.0\n'
        '[[agents]]\nmodel = "gp"\npolicy = "ts"\n'
    )
    res = subprocess.run(
        [sys.executable, "-m", "ev_nav.cli", "fleet", "drive", str(cfg), "--server", server.url,
         "--token", TOKEN, "--observe", "total"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "6 trips by 2 vehicles" in res.stdout
    assert re.search(r"observations acknowledged \d+, refused \d+", res.stdout)
    # a config of another network is refused with one line
    other = tmp_path / "other.toml"
    other.write_text(cfg.read_text().replace("n_segments = 400", "n_segments = 300"))
    res = subprocess.run(
        [sys.executable, "-m", "ev_nav.cli", "fleet", "drive", str(other), "--server",
         server.url], capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode != 0 and "serves network" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    # a config of several runs (seeds, agents): it drove the first and said nothing of the
    # others; one vehicle was "1 vehicles"
    several = tmp_path / "several.toml"
    several.write_text(cfg.read_text().replace("seeds = [4]", "seeds = [4, 5, 6]")
                       + '[[agents]]\nmodel = "bi"\npolicy = "mean"\n')
    res = subprocess.run(
        [sys.executable, "-m", "ev_nav.cli", "fleet", "drive", str(several), "--server",
         server.url, "--token", TOKEN, "--observe", "total", "--vehicles", "1", "--rounds", "1"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert (f"ev-nav: notice: {several} makes 6 runs (2 agents x 3 seeds); 'fleet drive' drives "
            "the first: synthetic-400, route 'route', policy ts, seed 4") in res.stderr
    assert "1 trip by 1 vehicle through" in res.stdout


@pytest.mark.parametrize(
    ("truth", "keys"),
    [("drift_rounds = [2]", "drift_rounds"),
     ("temperature_mean_c = 5.0", "temperature_mean_c"),
     ("drift_rounds = [2]\ntemperature_mean_c = 5.0", "drift_rounds and temperature_mean_c")],
)
def test_fleet_drive_refuses_a_world_that_changes_between_rounds(tmp_path, capsys, truth, keys):
    """'fleet drive' drove such a config in an unchanging world, silently (no road change, no
    temperature), where 'fleet run' applies both; now one line before the server is asked (the
    URL here answers nothing), exit 2."""
    from ev_nav.cli import main

    cfg = tmp_path / "fleet.toml"
    cfg.write_text(f'horizon = 3\n[network]\nn_segments = 400\n[truth]\n{truth}\n')
    code = main(["fleet", "drive", str(cfg), "--server", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert f"[truth] {keys}: 'fleet drive' drives one world that does not change" in err
    assert "simulate the config with 'fleet run'" in err


# ---------------------------------------------------------------------- the serve command
def test_serve_command_errors_are_one_line(served_state, tmp_path) -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        for argv, needle in (
            (["serve", str(served_state), "--port", str(port)], "cannot listen"),
            (["serve", str(tmp_path / "nothing"), "--port", "0"], "no ev-nav state"),
            (["serve", str(served_state), "--port", "70000"], "0..65535"),
        ):
            res = subprocess.run([sys.executable, "-m", "ev_nav.cli", *argv], capture_output=True,
                                 text=True, timeout=300, check=False)
            assert res.returncode != 0, argv
            assert needle in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    finally:
        busy.close()


def test_token_from_the_environment() -> None:
    from ev_nav.errors import ConfigError
    from ev_nav.server.cli import resolve_token

    assert resolve_token(None, {"EV_NAV_TOKEN": "abc"}) == "abc"
    assert resolve_token("given", {"EV_NAV_TOKEN": "abc"}) == "given"
    assert resolve_token(None, {}) is None and resolve_token("", {"EV_NAV_TOKEN": ""}) is None
    with pytest.raises(ConfigError):
        resolve_token("two words", {})


# ---------------------------------------------------------------------- limits before the body
def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _post_chunked(url: str, mb: int, headers: dict[str, str]) -> tuple[int, str, int]:
    """POST ``mb`` MiB as a chunked body (no Content-Length) streamed from a generator; the
    answer's status and body, and how many MiB were sent before the server answered."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=120)
    sent = 0

    def body() -> Iterator[bytes]:
        nonlocal sent
        block = b" " * (1 << 20)  # JSON whitespace: a valid start of a body
        for _ in range(mb):
            sent += 1
            yield block

    try:
        conn.request("POST", parts.path, body=body(), encode_chunked=True,
                     headers={"Content-Type": "application/json", **headers})
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed the connection: the rest was never read
    try:
        r = conn.getresponse()
        return r.status, r.read().decode(), sent
    finally:
        conn.close()


@pytest.mark.parametrize(("headers", "status"), [({}, 401), (AUTH, 413)])
def test_chunked_body_over_the_limit_is_refused_unread(server, headers, status) -> None:
    """A 400 MiB chunked body (no length announced): without a token 401 before any of it is
    read, with one 413 once it passes the limit; either way the server's memory grows by less
    than 50 MB and the client could not send most of it."""
    from ev_nav.server.app import MAX_BODY_BYTES

    pid = server.proc.pid
    before = _rss_mb(pid)
    code, text, sent_mib = _post_chunked(f"{server.url}/api/trips/1/observations", 400, headers)
    grown = _rss_mb(pid) - before
    assert code == status, text
    assert ("token" if status == 401 else f"{MAX_BODY_BYTES:,} bytes") in text
    assert grown < 50, f"server memory grew by {grown:.0f} MB"
    assert sent_mib < 200, f"the server read {sent_mib} MiB before answering"
    with httpx.Client(base_url=server.url) as http:  # and it still serves
        assert http.get("/api/health").status_code == 200


# ---------------------------------------------------------------------- one server per state
def test_a_second_server_on_the_state_is_refused(server, served_state) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "ev_nav.cli", "serve", str(served_state), "--port", "0"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1, res.stderr
    assert "already served by another ev-nav server" in lines[0]
    assert f"pid {server.proc.pid} on {server.url}/" in lines[0]  # names the first one
    with httpx.Client(base_url=server.url) as http:  # which goes on serving
        assert http.get("/api/health").json()["status"] == "ok"


def test_the_lock_of_a_killed_server_is_not_stale(tmp_path) -> None:
    """The claim is the kernel's flock, not a pid in the file: a holder killed with SIGKILL
    leaves the file behind, and the next server takes the state at once."""
    import signal

    from ev_nav.errors import StateInUseError
    from ev_nav.server.service import LOCK_NAME, ServeLock

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "from ev_nav.server.service import ServeLock\n"
         f"lock = ServeLock({str(tmp_path)!r}, 'pid of the holder')\n"
         "print('held', flush=True)\n"
         "time.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StateInUseError, match="pid of the holder"):
            ServeLock(tmp_path, "second")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(60)
    assert (tmp_path / LOCK_NAME).exists()  # the file stays; the lock went with the process
    lock = ServeLock(tmp_path, "after the kill")
    try:
        assert (tmp_path / LOCK_NAME).read_text() == "after the kill"
    finally:
        lock.release()


def test_open_host_without_token_is_a_one_line_notice(tmp_path) -> None:
    import signal

    from ev_nav.trips.session import create_state

    state = tmp_path / "state"
    create_state(state, synthetic=300, model="bi").close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "ev_nav.cli", "serve", str(state), "--host", "0.0.0.0",
         "--port", "0"], stderr=subprocess.PIPE, text=True,
    )
    log = []
    try:
        for line in proc.stderr:
            log.append(line.rstrip("\n"))
            if "serving" in line:
                break
    finally:
        proc.send_signal(signal.SIGINT)
        log += [ln.rstrip("\n") for ln in proc.stderr]
        proc.wait(120)
    notices = [ln for ln in log if "without a token" in ln]
    assert notices == [
        "ev-nav: notice: serving on 0.0.0.0 without a token: anyone who can reach it can plan "
        "and record trips (set $EV_NAV_TOKEN or --token)"
    ], log
    assert not any("Warning" in ln for ln in log), log


def test_plan_with_a_catalogue_model_forecasts_with_its_physics(http, served_town) -> None:
    # the asking car (vehicle) and its model (vehicle_model) are separate fields; the model's
    # physics move each route's energy by the two cars' E_det difference on what is driven,
    # and its battery sets the arrival charge
    from ev_nav.energy import get_vehicle

    settle(http)
    trip = _plan(http, served_town, 1, soc="80%", vehicle="car-9",
                 vehicle_model="volkswagen-id3-pro")
    id3 = get_vehicle("volkswagen-id3-pro")
    shift = served_town.e_det(id3) - served_town.e_det(get_vehicle("sumo-default"))
    assert trip["vehicle"] == "car-9"
    assert trip["vehicle_model"] == {"name": "volkswagen-id3-pro", "battery_wh": 58_000.0}
    for name, r in trip["routes"].items():
        seg = np.array(r["segments"])
        fs, fg = r["start_fraction"], r["end_fraction"]
        share = np.ones(seg.size)
        share[0], share[-1] = (fg - fs, fg - fs) if seg.size == 1 else (1 - fs, fg)
        expected = r["predicted_wh"] + share @ shift[seg]
        assert r["vehicle_model_wh"] == pytest.approx(expected, abs=0.11), name
        assert r["vehicle_model_wh"] > r["predicted_wh"], name  # aux + stops cost more
        # the spread the arrival charge uses: the posterior's plus one drive's noise
        assert r["vehicle_model_sd_wh"] >= r["predicted_sd_wh"] - 0.06, name
        # 80 % of 58 kWh less the catalogue car's energy
        assert r["arrival"]["soc_pct"] == pytest.approx(
            80 - r["vehicle_model_wh"] / 580, abs=0.01
        ), name


def test_reserve_the_departure_charge_cannot_keep(http, served_town, served_state) -> None:
    """A reserve above the departure charge: no route or charging stop can keep it, and the
    answer says so, as 'ev-nav route' does (it advised the 'safe' route or charging stops). A
    reserve without a departure charge is refused, as on the command line (it was ignored)."""
    doc = _plan(http, served_town, 2, policy="mean", soc="40%", reserve="50%")
    assert doc["warning"] == (
        "the reserve (50%) is more than the departure charge (40%), so no other route or "
        'charging stop can keep it; charge before leaving, or lower "reserve"'
    )
    assert doc["reserve_pct"] == 50.0 and doc["departure_soc_pct"] == 40.0
    before = fingerprint(http, served_state)
    origin, goal = _far_pair(served_town, 2)
    r = http.post("/api/routes", json={"origin": origin, "goal": goal, "reserve": "50%"},
                  headers=AUTH)
    _assert_error(r, 422, '"reserve" is checked against the departure charge: add "soc"')
    assert fingerprint(http, served_state) == before
