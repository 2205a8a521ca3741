"""The server's web page in a real browser (headless Debian Chromium through Playwright) with the
network blocked except the server on loopback: click a start and a destination, a route is drawn
and its figures shown; record the trip total; the OpenAPI page renders offline too.
Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
TOKEN = "fleet-secret-42"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run",
        # no name resolves: only the loopback address itself can be reached
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    res = subprocess.run(["bash", str(ROOT / "scripts" / "setup_browser_test.sh")],
                         capture_output=True, text=True, timeout=900, check=False)
    if res.returncode != 0:
        pytest.fail(f"browser set-up failed: {(res.stdout + res.stderr)[-2000:]}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield b
        finally:
            b.close()


class LoopbackPage:
    """A page that may reach the server and nothing else (every other request is aborted)."""

    def __init__(self, browser, base_url: str) -> None:
        self.base = base_url.rstrip("/") + "/"
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 800})
        self.context.route("**/*", self._handle)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _handle(self, route) -> None:
        if route.request.url.startswith(self.base):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort("internetdisconnected")

    def close(self) -> None:
        self.context.close()


def _screen_point(page, lat: float, lon: float) -> tuple[float, float]:
    """Where the page's map shows (lat, lon), in page pixels."""
    x, y = page.evaluate(
        "([lat, lon]) => { const p = ui.map.latLngToContainerPoint([lat, lon]); "
        "const r = ui.map.getContainer().getBoundingClientRect(); "
        "return [p.x + r.left, p.y + r.top]; }",
        [lat, lon],
    )
    return float(x), float(y)


def test_click_two_points_route_drawn_and_recorded(browser, server, served_town) -> None:
    lp = LoopbackPage(browser, server.url)
    try:
        page = lp.page
        page.goto(server.url + "/")
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        assert page.locator("#token-row").is_visible()  # the server asks for a token
        page.fill("#token", TOKEN)
        page.fill("#soc", "80%")
        page.fill("#vehicle", "browser-car")
        # the page plans the best guess by default (a fleet's policy); exploring adds the
        # best-guess route beside the planned one, which this test checks too
        assert page.locator("#policy").input_value() == "mean"
        page.select_option("#policy", "ts")
        # the network is drawn from the server's layers: one path per segment
        assert page.locator(".leaflet-overlay-pane path").count() == served_town.n_segments

        mid = served_town.segment_midpoints()
        order = np.argsort(mid[:, 0] + mid[:, 1])
        a, b = order[12], order[-12]
        with page.expect_response("**/api/routes") as planned:
            page.mouse.click(*_screen_point(page, mid[a, 1], mid[a, 0]))
            page.mouse.click(*_screen_point(page, mid[b, 1], mid[b, 0]))
        resp = planned.value
        assert resp.status == 200, resp.text()
        trip = resp.json()
        page.wait_for_selector("#routes tbody tr")

        # the three routes are drawn, each over its own coordinates
        for name in ("planned", "best-guess", "shortest"):
            line = page.locator(f"path.ev-route-{name}")
            assert line.count() == 1
            box = line.bounding_box()
            assert box is not None and max(box["width"], box["height"]) > 40, name
        start, end = page.locator(".ev-marker-A"), page.locator(".ev-marker-B")
        assert start.is_visible() and end.is_visible()

        # their figures are shown, as the API gave them
        rows = {
            tr.get_attribute("data-route"): tr.locator("td").all_inner_texts()
            for tr in page.locator("#routes tbody tr").all()
        }
        assert {"planned", "best guess", "shortest"} <= set(rows)
        for name in ("planned", "best guess", "shortest"):
            r = trip["routes"][name]
            cells = rows[name]
            assert cells[2] == f"{r['km']:.2f}" and cells[3] == f"{r['minutes']:.1f}"
            assert float(cells[4].replace(",", "")) == pytest.approx(r["predicted_wh"], rel=2e-3)
            assert cells[6] == f"{r['arrival']['soc_pct']:.1f}%"
        assert f"trip {trip['trip']}" in page.inner_text("#trip-head")
        assert "browser-car" in page.inner_text("#trip-head")

        # record the trip total through the page: acknowledged, the model learns it
        page.fill("#total-wh", f"{trip['routes']['planned']['predicted_wh'] + 10:.1f}")
        with page.expect_response("**/observations") as posted:
            page.click("#record-btn")
        assert posted.value.status == 201
        page.wait_for_function(
            "document.getElementById('status').textContent.includes('learned')", timeout=120_000
        )
        # switch the learned layer: the legend follows
        page.select_option("#layer-select", "visits")
        assert "times driven" in page.inner_text("#legend")
        page.select_option("#layer-select", "sd_wh")
        assert "posterior sd" in page.inner_text("#legend")

        assert lp.errors == [], lp.errors
        assert lp.blocked == [], f"the page asked for the internet: {lp.blocked}"
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "server_page.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 20_000
        with httpx.Client(base_url=server.url) as http:
            row = [t for t in http.get("/api/trips").json() if t["trip"] == trip["trip"]][0]
        assert row["vehicle"] == "browser-car" and row["observed_wh"] is not None
    finally:
        lp.close()


def test_page_shows_the_servers_error(browser, server) -> None:
    """A wrong token: the one-line message appears on the page, nothing is drawn."""
    lp = LoopbackPage(browser, server.url)
    try:
        page = lp.page
        page.goto(server.url + "/")
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        page.fill("#token", "not-the-token")
        box = page.locator("#map").bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.6)
        with page.expect_response("**/api/routes") as planned:
            page.mouse.click(box["x"] + box["width"] * 0.7, box["y"] + box["height"] * 0.3)
        assert planned.value.status == 403
        page.wait_for_function("document.getElementById('status').className === 'error'")
        assert "wrong token" in page.inner_text("#status")
        assert page.locator("path.ev-route-planned").count() == 0
        assert lp.blocked == [] and lp.errors == []
    finally:
        lp.close()


def test_openapi_page_renders_offline(browser, server) -> None:
    lp = LoopbackPage(browser, server.url)
    try:
        page = lp.page
        page.goto(server.url + "/docs")
        page.wait_for_selector(".opblock", timeout=60_000)
        assert page.locator(".opblock").count() >= 6  # every endpoint of the API
        assert "ev-nav routing server" in page.inner_text(".info")
        assert lp.blocked == [], f"the OpenAPI page asked for the internet: {lp.blocked}"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "server_openapi.png"))
    finally:
        lp.close()


def test_route_options_on_the_page(browser, server, served_town) -> None:
    """Via points (typed, and by shift-click), avoided kinds and the price of time go into the
    route request; the routes shown obey them; a bad option is refused on the page."""
    net = served_town
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    a, b = int(order[12]), int(order[-12])
    motorway = net.highway == net.highway_classes.index("motorway")
    east = np.argsort(mid[:, 0])[::-1]
    v = int(east[~motorway[east]][20])
    lp = LoopbackPage(browser, server.url)
    try:
        page = lp.page
        page.goto(server.url + "/")
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        page.fill("#token", TOKEN)

        # a typed via point and "avoid motorway"
        lon, lat = net.segment_anchor(v)
        page.fill("#via", f"{lat:.7f},{lon:.7f}")
        page.check(".avoid-kind[value='motorway']")
        with page.expect_response("**/api/routes") as planned:
            page.mouse.click(*_screen_point(page, mid[a, 1], mid[a, 0]))
            page.mouse.click(*_screen_point(page, mid[b, 1], mid[b, 0]))
        resp = planned.value
        assert resp.status == 200, resp.text()
        sent = resp.request.post_data_json
        assert sent["avoid"] == ["motorway"] and len(sent["via"]) == 1
        assert "time_weight" not in sent
        trip = resp.json()
        v_dirs = {e for e, _ in net.snap(*net.segment_anchor(v)).candidates}  # either direction
        (driven,) = trip["via_segments"]  # the one the planned route drives
        assert driven in v_dirs and driven in trip["routes"]["planned"]["segments"]
        for name, r in trip["routes"].items():
            assert v_dirs & set(r["segments"]) and not motorway[r["segments"]].any(), name
        page.wait_for_selector("#routes tbody tr")
        assert page.locator(".ev-marker-V").count() == 1
        head = page.inner_text("#trip-head")
        assert "via 1 point(s)" in head and "avoiding motorway" in head

        # a via point by shift-click, and time priced so high that the plan is the fastest
        page.fill("#via", "")
        page.uncheck(".avoid-kind[value='motorway']")
        page.fill("#time-weight", "1e7")
        x, y = _screen_point(page, lat, lon)
        page.mouse.click(*_screen_point(page, mid[a, 1], mid[a, 0]))  # a new start
        page.keyboard.down("Shift")
        page.mouse.click(x, y)
        page.keyboard.up("Shift")
        # the field holds the clicked point (the map's own pixel -> lat, lon; 6 decimals)
        clicked = page.evaluate(
            "([x, y]) => { const r = ui.map.getContainer().getBoundingClientRect(); "
            "const ll = ui.map.containerPointToLatLng([x - r.left, y - r.top]); "
            "return [ll.lat, ll.lng]; }",
            [x, y],
        )
        typed = [float(t) for t in page.input_value("#via").split(",")]
        assert np.allclose(typed, clicked, atol=1e-6), (typed, clicked)
        assert page.locator(".ev-marker-V").count() == 1
        with page.expect_response("**/api/routes") as planned:
            page.mouse.click(*_screen_point(page, mid[b, 1], mid[b, 0]))
        trip = planned.value.json()
        assert planned.value.status == 200, trip
        assert planned.value.request.post_data_json["time_weight"] == 1e7
        routes = trip["routes"]
        # time priced this high: the plan is as fast as the fastest route (the synthetic grid
        # has equally fast alternatives, among which the plan takes the least energy)
        assert routes["planned"]["minutes"] == pytest.approx(routes["fastest"]["minutes"],
                                                             abs=0.011)
        via_dirs = {
            e for e, _ in net.snap(*net.segment_anchor(trip["via_segments"][0])).candidates
        }
        assert via_dirs & set(routes["planned"]["segments"])
        assert "time priced at" in page.inner_text("#trip-head")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "server_page_route_options.png"))

        # a negative price of time is refused on the page: no request, a one-line message
        page.fill("#time-weight", "-3")
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url) if "/api/routes" in r.url else None)
        page.mouse.click(*_screen_point(page, mid[a, 1], mid[a, 0]))
        page.mouse.click(*_screen_point(page, mid[b, 1], mid[b, 0]))
        page.wait_for_function("document.getElementById('status').className === 'error'")
        assert "price of time" in page.inner_text("#status") and requests == []
        assert lp.errors == [], lp.errors
        assert lp.blocked == [], f"the page asked for the internet: {lp.blocked}"
    finally:
        lp.close()


def test_roads_flagged_as_changed_on_the_page(browser, tmp_path) -> None:
    """A state with a road flagged as changed: the page draws it over the network in the magenta
    of ``ev-nav map``, on the segment's own line, with the evidence of ``GET /api/changes`` in a
    tooltip and the count in the legend; a click on it still picks a point on the map; after a
    recorded trip the page asks again (here: the flag was dismissed meanwhile, so it is gone)."""
    from ev_nav.server.client import ServerProcess
    from ev_nav.store import Store
    from ev_nav.trips.changes import dismiss_changes
    from ev_nav.trips.session import create_state, open_session
    from ev_nav.viz.maps import CHANGE_COLOR
    from tests.test_road_changes import CHANGED, TOWN, _drive, _readings, _route

    state = tmp_path / "state"
    with create_state(state, synthetic=TOWN, model="gp") as session:
        net = session.net
        route = _route(net)
        for wh in _readings(session, route):
            _drive(session, route, wh)
    e = int(route[CHANGED])
    with Store.open(state) as store:
        (flag,) = store.segment_changes()
    assert flag.segment == e

    with ServerProcess(state, token=TOKEN) as server:
        lp = LoopbackPage(browser, server.url)
        asked: list[str] = []
        lp.page.on("request", lambda r: asked.append(r.url) if "/api/changes" in r.url else None)
        try:
            page = lp.page
            page.goto(server.url + "/")
            page.wait_for_selector("body[data-ready='1']", timeout=60_000)
            page.fill("#token", TOKEN)
            assert len(asked) == 1
            line = page.locator("path.ev-nav-change")
            assert line.count() == 1
            assert line.get_attribute("stroke") == CHANGE_COLOR
            # the network is still one path per segment; the flagged road is drawn above it
            assert page.locator(".leaflet-overlay-pane path").count() == net.n_segments
            # on the segment's own line: its drawn box holds the segment's ends on screen
            box = line.bounding_box()
            assert box is not None
            a, b = net.geom_offsets[e], net.geom_offsets[e + 1] - 1
            for lon, lat in (net.geom_lonlat[a], net.geom_lonlat[b]):
                x, y = _screen_point(page, lat, lon)
                assert box["x"] - 1 <= x <= box["x"] + box["width"] + 1
                assert box["y"] - 1 <= y <= box["y"] + box["height"] + 1
            assert "road flagged as changed (1)" in page.inner_text("#changes-legend")

            # the evidence, hovering the road (halfway along its first piece), as the store has it
            lon, lat = net.segment_coords(e)[:2].mean(axis=0)
            x, y = _screen_point(page, lat, lon)
            page.mouse.move(x, y)
            tip = page.locator(".leaflet-tooltip")
            tip.wait_for(timeout=10_000)
            text = tip.inner_text()
            assert f"segment {e} (" in text and "flagged as changed" in text
            assert f"{flag.shift_wh:+.1f} Wh ({flag.shift_sd:+.1f} sd)" in text
            assert f"{flag.set_aside} older reading(s) set aside" in text
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "server_page_changes.png"))

            # the road did not change after all (dismissed from the command line)
            with open_session(state, with_model=False) as other:
                dismiss_changes(other, np.array([e]))
            # a click on the magenta road picks the start: the page plans from there
            mid = net.segment_midpoints()
            order = np.argsort(mid[:, 0] + mid[:, 1])
            far = int(order[-12]) if int(order[-12]) != e else int(order[12])
            with page.expect_response("**/api/routes") as planned:
                page.mouse.click(x, y)
                page.mouse.click(*_screen_point(page, mid[far, 1], mid[far, 0]))
            assert planned.value.status == 200, planned.value.text()
            sent = planned.value.request.post_data_json
            assert np.allclose(sent["origin"], [lat, lon], atol=1e-4)
            trip = planned.value.json()
            page.wait_for_selector("#routes tbody tr")
            page.fill("#total-wh", f"{trip['routes']['planned']['predicted_wh'] + 5:.1f}")
            page.click("#record-btn")
            page.wait_for_function(
                "document.getElementById('status').textContent.includes('learned')",
                timeout=120_000,
            )
            # refreshed with the other layers after the model learned the trip
            assert len(asked) == 2
            assert page.locator("path.ev-nav-change").count() == 0
            assert "road flagged as changed (0)" in page.inner_text("#changes-legend")
            assert lp.errors == [], lp.errors
            assert lp.blocked == [], f"the page asked for the internet: {lp.blocked}"
        finally:
            lp.close()
