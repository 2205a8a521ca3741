"""Real-browser test: headless Chromium opens generated maps with no internet.

The set-up (``scripts/setup_browser_test.sh``) installs Debian's ``chromium`` and the npm packages
``leaflet``, ``jquery`` and ``bootstrap`` into ``tests/.browser``. The browser resolves every host
name to nothing (``--host-resolver-rules``), so nothing can reach the internet; requests for the
CDN URLs in folium's pages are intercepted and answered from the npm packages, other CDN assets
(font and marker CSS/JS the maps do not use) with empty bodies, and tile requests are aborted as
they would fail offline. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.viz.maps import (
    FALLBACK_ID,
    LEGEND_ID,
    NETWORK_CLASS,
    ROUTE_CLASS,
    network_map,
    route_latlon,
    route_map,
)

pytestmark = pytest.mark.browser

LEAFLET = ".leaflet-overlay-pane"  # Leaflet's vector layers (the offline SVG is elsewhere)

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / ".browser"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # No DNS at all: a request that escaped interception could not reach anything.
    "--host-resolver-rules=MAP * ~NOTFOUND",
]
CONTENT_TYPES = {".js": "application/javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture(scope="module")
def assets() -> Path:
    """Run the idempotent set-up script; fail (never skip) if it cannot install things."""
    script = ROOT / "scripts" / "setup_browser_test.sh"
    try:
        res = subprocess.run(
            ["bash", str(script), str(ASSETS)],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"browser test set-up could not run: {exc}")
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        pytest.fail(f"browser test set-up failed (exit {res.returncode}):\n{tail}")
    leaflet = ASSETS / "node_modules" / "leaflet" / "dist" / "leaflet.js"
    if not leaflet.is_file() or not Path(CHROMIUM).exists():
        pytest.fail(f"set-up reported success but {leaflet} or {CHROMIUM} is missing")
    return ASSETS / "node_modules"


@pytest.fixture(scope="module")
def net() -> RoadNetwork:
    return synthetic_town(2000, seed=0)


def _local_asset(modules: Path, url: str) -> Path | None:
    """The npm file that stands in for a CDN URL, or None."""
    u = urlparse(url)
    m = re.match(r"^/npm/((?:@[^/]+/)?[^@/]+)@[^/]+/(.+)$", u.path)  # jsdelivr /npm/pkg@v/file
    if m:
        candidate = modules / m.group(1) / m.group(2)
        return candidate if candidate.is_file() else None
    if u.hostname == "code.jquery.com" and re.match(r"^/jquery-[\d.]+\.min\.js$", u.path):
        return modules / "jquery" / "dist" / "jquery.min.js"
    return None


class OfflinePage:
    """A Chromium page whose every non-file request is served locally, stubbed or aborted."""

    def __init__(self, browser, modules: Path | None) -> None:
        self.modules = modules
        self.served: list[str] = []
        self.stubbed: list[str] = []
        self.aborted: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1200, "height": 800})
        self.context.route("**/*", self._handle)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _handle(self, route) -> None:
        url = route.request.url
        if url.startswith("file://"):
            route.continue_()
            return
        path = _local_asset(self.modules, url) if self.modules is not None else None
        suffix = Path(urlparse(url).path).suffix
        if path is not None:
            self.served.append(url)
            route.fulfill(
                status=200,
                body=path.read_bytes(),
                headers={"Content-Type": CONTENT_TYPES.get(path.suffix, "text/plain")},
            )
        elif self.modules is not None and suffix in (".js", ".css"):
            # Folium links marker-icon and font CSS/JS the maps never use; an empty body keeps
            # the page loading the same way as with the real files.
            self.stubbed.append(url)
            route.fulfill(status=200, body="", headers={"Content-Type": CONTENT_TYPES[suffix]})
        else:
            self.aborted.append(url)  # map tiles, fonts: unavailable offline
            route.abort("internetdisconnected")

    def close(self) -> None:
        self.context.close()


@pytest.fixture(scope="module")
def browser(assets: Path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _demo_route(net: RoadNetwork, n: int, start: int, rng: np.random.Generator) -> list[int]:
    """A random walk on the line graph without repeated segments (a plausible route shape)."""
    route = [start]
    seen = {start}
    while len(route) < n:
        succ = [
            int(s)
            for s in net.lg_indices[net.lg_indptr[route[-1]] : net.lg_indptr[route[-1] + 1]]
            if int(s) not in seen
        ]
        if not succ:
            break
        nxt = succ[int(rng.integers(len(succ)))]
        route.append(nxt)
        seen.add(nxt)
    return route


def _path_points(d: str) -> np.ndarray:
    nums = np.array([float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", d)])
    return nums.reshape(-1, 2)


def test_route_map_offline_with_local_leaflet(browser, assets: Path, net, tmp_path) -> None:
    rng = np.random.default_rng(3)
    planned = _demo_route(net, 40, 0, rng)
    shortest = _demo_route(net, 25, 0, rng)
    mean = net.e_det()
    html_path = tmp_path / "route.html"
    m = route_map(
        net,
        planned,
        {"shortest": shortest},
        mean_wh=mean,
        sd_wh=0.1 * np.abs(mean) + 0.5,
        path=html_path,
    )
    op = OfflinePage(browser, assets)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")  # all requests handled
        page.wait_for_selector(f"{LEAFLET} path.{ROUTE_CLASS}-0", state="attached", timeout=15_000)
        assert page.evaluate("typeof L !== 'undefined' && L.version") == "1.9.3"
        assert op.errors == [], f"JavaScript errors: {op.errors}"
        assert any("leaflet.js" in u for u in op.served) and any(
            "leaflet.css" in u for u in op.served
        )
        assert any("tile.openstreetmap.org" in u for u in op.aborted), "tiles were not attempted"

        # Both routes are SVG paths; the planned one follows the route's coordinates: its first
        # and last rendered points are where Leaflet projects the route's end points.
        assert page.locator(f"{LEAFLET} path.{ROUTE_CLASS}").count() == 2
        d = page.get_attribute(f"{LEAFLET} path.{ROUTE_CLASS}-0", "d")
        pts = _path_points(d)
        latlon = route_latlon(net, planned)
        assert pts.shape[0] == latlon.shape[0]  # smoothing is off: every vertex is drawn
        ends = page.evaluate(
            "([name, a, b]) => [window[name].latLngToLayerPoint(a), "
            "window[name].latLngToLayerPoint(b)].map(p => [p.x, p.y])",
            [m.get_name(), latlon[0].tolist(), latlon[-1].tolist()],
        )
        np.testing.assert_allclose(pts[0], ends[0], atol=1.0)
        np.testing.assert_allclose(pts[-1], ends[-1], atol=1.0)
        assert np.ptp(pts[:, 0]) > 20 or np.ptp(pts[:, 1]) > 20  # visibly long on screen

        # The network layer: one SVG path per segment.
        assert page.locator(f"path.{NETWORK_CLASS}").count() == net.n_segments

        legend = page.locator(f"#{LEGEND_ID}")
        assert legend.is_visible()
        text = legend.inner_text()
        assert "planned route" in text and "shortest" in text and "Wh" in text
        box = legend.bounding_box()
        assert box is not None and box["width"] > 50 and box["x"] + box["width"] <= 1200
        assert not page.locator(f"#{FALLBACK_ID}").is_visible()

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "route_map_offline.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        op.close()


def test_network_map_tooltip_in_browser(browser, assets: Path, net, tmp_path) -> None:
    mean = net.e_det()
    wh_per_km = mean / net.length_m * 1000.0
    html_path = tmp_path / "network.html"
    network_map(
        net,
        wh_per_km,
        legend_title="energy [Wh/km]",
        mean_wh=mean,
        sd_wh=np.full(net.n_segments, 2.5),
        path=html_path,
    )
    op = OfflinePage(browser, assets)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")  # all requests handled
        page.wait_for_selector(f"path.{NETWORK_CLASS}", state="attached", timeout=15_000)
        assert op.errors == [], f"JavaScript errors: {op.errors}"
        paths = page.locator(f"path.{NETWORK_CLASS}")
        assert paths.count() == net.n_segments
        # Colours: the stroke of segment 0 is the colour the scale gives its value.
        from ev_nav.viz import ColorScale

        scale = ColorScale.fit(wh_per_km)
        colors = page.evaluate(
            f"Array.from(document.querySelectorAll('path.{NETWORK_CLASS}'))"
            ".map(p => p.getAttribute('stroke'))"
        )
        assert sorted(colors) == sorted(scale.hex(wh_per_km))
        # Tooltip of one segment: hover it, read the numbers.
        e = int(np.argmax(net.length_m))
        page.evaluate(
            f"(e) => {{ for (const l of Object.values(window['{_geojson_name(html_path)}']"
            "._layers)) { if (l.feature.properties.segment === e) { l.fire('mouseover', "
            "{latlng: l.getCenter()}, true); } } }",
            e,
        )
        tip = page.locator(".leaflet-tooltip").first
        tip.wait_for(state="visible", timeout=5_000)
        text = tip.inner_text()
        assert f"{net.length_m[e]:.1f}" in text
        assert "± 2.5" in text and "grade [%]" in text and "speed limit [km/h]" in text
        legend_text = page.locator(f"#{LEGEND_ID}").inner_text()
        assert "energy [Wh/km]" in legend_text
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "network_map_offline.png"))
    finally:
        op.close()


def _geojson_name(html_path: Path) -> str:
    """JS variable name of the (only) GeoJSON layer in a folium page."""
    m = re.search(r"var (geo_json_[0-9a-f]+) = L\.geoJson", html_path.read_text())
    assert m, "no GeoJSON layer in the page"
    return m.group(1)


def test_route_visible_without_any_map_library(browser, assets: Path, net, tmp_path) -> None:
    """Nothing external at all (no CDN, no local copy): the static SVG shows route and legend."""
    rng = np.random.default_rng(5)
    planned = _demo_route(net, 30, 10, rng)
    html_path = tmp_path / "bare.html"
    route_map(net, planned, mean_wh=net.e_det(), path=html_path)
    op = OfflinePage(browser, None)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")  # all requests handled
        assert page.evaluate("typeof L") == "undefined"
        fallback = page.locator(f"#{FALLBACK_ID}")
        fallback.wait_for(state="visible", timeout=5_000)
        route_path = fallback.locator(f"path.{ROUTE_CLASS}-0")
        assert route_path.count() == 1
        assert route_path.is_visible()
        bbox = route_path.bounding_box()
        assert bbox is not None and max(bbox["width"], bbox["height"]) > 30
        assert (
            _path_points(route_path.get_attribute("d")).shape[0]
            == route_latlon(net, planned).shape[0]
        )
        legend = page.locator(f"#{LEGEND_ID}")
        assert legend.is_visible() and "planned route" in legend.inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "route_map_no_library.png"))
    finally:
        op.close()
