"""HTTP details of the fleet server, in process: HEAD, 405's Allow, the error body on the
OpenAPI page, a state locked by another process (503 with Retry-After), and reading the trips
while a write waits for that lock."""

from __future__ import annotations

import sqlite3
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from ev_nav.server.app import BUSY_RETRY_AFTER_S, create_app
from ev_nav.server.service import FleetService
from ev_nav.store import connection


@pytest.fixture()
def served(state: Path) -> Iterator[tuple[FleetService, TestClient]]:
    with FleetService(state, poll_s=0.05) as svc, TestClient(create_app(svc)) as client:
        yield svc, client


def _trip_request(svc: FleetService) -> dict[str, list[float]]:
    mid = svc.net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    a, b = order[3], order[-3]
    return {"origin": [float(mid[a, 1]), float(mid[a, 0])],
            "goal": [float(mid[b, 1]), float(mid[b, 0])]}


def test_head_is_get_without_the_body(served) -> None:
    _, client = served
    health = client.head("/api/health")  # what monitoring probes ask (its figures change)
    assert health.status_code == 200 and health.content == b""
    assert int(health.headers["content-length"]) > 0
    for path in ("/api/trips", "/api/layers", "/"):
        get, head = client.get(path), client.head(path)
        assert get.status_code == head.status_code == 200, path
        assert head.content == b"" and get.content, path
        assert head.headers["content-length"] == str(len(get.content)), path
        assert head.headers["content-type"] == get.headers["content-type"], path


def test_method_not_allowed_says_which_are(served) -> None:
    _, client = served
    r = client.put("/api/routes")
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert r.json() == {"error": "Method Not Allowed", "type": "HTTPError"}
    r = client.post("/api/trips")  # a GET route: HEAD is answered there too
    assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


def test_openapi_page_describes_the_error_body_it_sends(served) -> None:
    _, client = served
    doc = client.get("/openapi.json").json()
    assert set(doc["components"]["schemas"]["ErrorBody"]["properties"]) == {"error", "type"}
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # {"detail": [...]}
    error_body = {"$ref": "#/components/schemas/ErrorBody"}
    answers = doc["paths"]["/api/trips/{trip_id}/observations"]["post"]["responses"]
    for status in ("400", "401", "403", "404", "413", "422", "503"):
        assert answers[status]["content"]["application/json"]["schema"] == error_body, status
    # an open reading endpoint lists no token or body-size errors
    health = doc["paths"]["/api/health"]["get"]["responses"]
    assert {"400", "422", "503"} <= set(health) and not {"401", "403", "413"} & set(health)


def test_a_state_locked_by_another_process_is_a_503_to_retry(served, state, monkeypatch):
    svc, client = served
    monkeypatch.setattr(connection, "LOCK_NOTICE_MS", 50)
    monkeypatch.setattr(connection, "BUSY_TIMEOUT_MS", 300)
    before = client.get("/api/trips").json()
    other = sqlite3.connect(state / connection.DB_NAME, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process writing, longer than a write waits
    try:
        with pytest.warns(UserWarning, match="being written by another process"):
            r = client.post("/api/routes", json=_trip_request(svc))
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert r.status_code == 503, r.text
    assert r.headers["retry-after"] == str(BUSY_RETRY_AFTER_S)
    assert r.json()["type"] == "StateBusyError" and "try again" in r.json()["error"]
    assert client.get("/api/trips").json() == before  # nothing recorded
    assert client.post("/api/routes", json=_trip_request(svc)).status_code == 200  # retried


def test_trips_are_read_while_a_write_waits_for_the_lock(served, state, monkeypatch) -> None:
    """A pending write holds the process's write lock while it waits for another process's;
    reading the trips must not queue behind it (it did, for up to a minute: each read opened
    and closed a store, and closing took that lock)."""
    svc, client = served
    monkeypatch.setattr(connection, "LOCK_NOTICE_MS", 50)  # the sign that the write waits
    client.post("/api/routes", json=_trip_request(svc))
    other = sqlite3.connect(state / connection.DB_NAME, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    answer: dict[str, int] = {}

    def write() -> None:
        answer["status"] = client.post("/api/routes", json=_trip_request(svc)).status_code

    writer = threading.Thread(target=write)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            writer.start()
            while writer.is_alive() and not any(
                    "being written by another process" in str(w.message) for w in said):
                writer.join(0.01)  # until the write waits for the other process's lock
        rows = client.get("/api/trips")
        assert writer.is_alive(), "the write did not wait for the other process"
        assert rows.status_code == 200 and len(rows.json()) == 1
    finally:
        other.execute("ROLLBACK")
        other.close()
        writer.join()
    assert answer["status"] == 200
    assert len(client.get("/api/trips").json()) == 2


def test_the_client_says_when_another_program_answers() -> None:
    """A URL where some other web server listens: the client said its HTML page as a bytes
    literal; it says the answer is not JSON and what to check."""
    import http.server

    from ev_nav.server.client import RoutingClient, ServerError

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            body = b"<html><body>router admin</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with RoutingClient(f"http://127.0.0.1:{server.server_port}") as client:
            with pytest.raises(ServerError) as err:
                client.health()
    finally:
        server.shutdown()
        server.server_close()
    message = str(err.value)
    assert "is not JSON (text/html, 38 bytes)" in message and "ev-nav serve" in message
    assert "<html>" not in message and "b'" not in message
