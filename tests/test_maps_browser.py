"""Real-browser test: headless Chromium opens generated maps with no internet at all.

The set-up (``scripts/setup_browser_test.sh``) installs Debian's ``chromium`` only: the map
library comes from the package (``ev_nav/static/leaflet``), copied into ``lib/`` beside the saved
pages or inlined into a standalone page. The browser resolves no host name
(``--host-resolver-rules``) and every request that is not a local ``file://`` URL is aborted and
recorded, so the tests also prove that a map asks for nothing but (optional) tiles; the local
files a page loads are recorded too, so they prove that a page opened from disk really loads the
library from ``lib/`` by its relative path. They check what a driver sees: the route, start and
end markers, a view fitted to the route, overlapping routes all visible, panning and zooming with
the network off, and a map folder (or a standalone page) that still works once copied elsewhere.
Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import io
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
    END_CLASS,
    FALLBACK_ID,
    LEAFLET_VERSION,
    LEGEND_ID,
    NETWORK_CLASS,
    ROUTE_CLASS,
    ROUTE_COLORS,
    START_CLASS,
    network_map,
    route_latlon,
    route_map,
)

pytestmark = pytest.mark.browser

LEAFLET = ".leaflet-overlay-pane"  # Leaflet's vector layers (the offline SVG is elsewhere)

ROOT = Path(__file__).resolve().parents[1]
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
    # No DNS at all: a request that escaped the route handler could not reach anything.
    "--host-resolver-rules=MAP * ~NOTFOUND",
]
VIEWPORT = {"width": 1200, "height": 800}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Run the idempotent set-up script (fail, never skip, if it cannot install chromium)."""
    script = ROOT / "scripts" / "setup_browser_test.sh"
    try:
        res = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=900, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"browser test set-up could not run: {exc}")
    if res.returncode != 0 or not Path(CHROMIUM).exists():
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-15:])
        pytest.fail(f"browser test set-up failed (exit {res.returncode}):\n{tail}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def net() -> RoadNetwork:
    return synthetic_town(2000, seed=0)


class OfflinePage:
    """A Chromium page for which every request but the page's own file is aborted (recorded)."""

    def __init__(self, browser, **context_options: object) -> None:
        self.requested: list[str] = []
        self.files: list[str] = []  # local files loaded (the page and what it links)
        self.errors: list[str] = []
        self.context = browser.new_context(viewport=VIEWPORT, **context_options)
        self.context.route("**/*", self._handle)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    def _handle(self, route) -> None:
        url = route.request.url
        if url.startswith("file://"):
            self.files.append(url)
            route.continue_()
            return
        self.requested.append(url)
        route.abort("internetdisconnected")

    def non_tile_requests(self) -> list[str]:
        """Requests other than map tiles (``.../z/x/y.png``): a working map makes none."""
        tile = re.compile(r"/\d+/\d+/\d+\.png$")
        return [u for u in self.requested if not tile.search(urlparse(u).path)]

    def close(self) -> None:
        self.context.close()


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


def _map_name(html_path: Path) -> str:
    m = re.search(r"var (map_[0-9a-f]+) = L\.map\(", html_path.read_text())
    assert m, "no map in the page"
    return m.group(1)


def _geojson_name(html_path: Path) -> str:
    """JS variable name of the (only) GeoJSON layer in a folium page."""
    m = re.search(r"var (geo_json_[0-9a-f]+) = L\.geoJson", html_path.read_text())
    assert m, "no GeoJSON layer in the page"
    return m.group(1)


def _container_points(page, name: str, latlons: list[list[float]]) -> np.ndarray:
    """Where the map draws each (lat, lon), in page pixels."""
    return np.array(
        page.evaluate(
            "([name, pts]) => { const m = window[name]; const r = m.getContainer()"
            ".getBoundingClientRect(); return pts.map(p => { const q = m.latLngToContainerPoint(p);"
            " return [q.x + r.left, q.y + r.top]; }); }",
            [name, latlons],
        )
    )


def _wait_for_move(page, name: str, action) -> None:
    """Run ``action`` and wait until the map has finished the pan or zoom it starts."""
    page.evaluate(
        "(name) => { window.__moved = false; window[name].once('moveend', "
        "() => { window.__moved = true; }); }",
        name,
    )
    action()
    page.wait_for_function("() => window.__moved === true", timeout=10_000)


def test_route_map_offline_markers_fit_pan_zoom(browser, net, tmp_path) -> None:
    rng = np.random.default_rng(3)
    planned = _demo_route(net, 40, 0, rng)
    shortest = _demo_route(net, 25, 0, rng)
    mean = net.e_det()
    html_path = tmp_path / "route.html"
    route_map(
        net,
        planned,
        {"shortest": shortest},
        mean_wh=mean,
        sd_wh=0.1 * np.abs(mean) + 0.5,
        path=html_path,
    )
    op = OfflinePage(browser)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")  # every request answered
        page.wait_for_selector(f"{LEAFLET} path.{ROUTE_CLASS}-0", state="attached", timeout=15_000)
        assert page.evaluate("typeof L !== 'undefined' && L.version") == LEAFLET_VERSION
        assert op.errors == [], f"JavaScript errors: {op.errors}"
        # Nothing but tiles was even asked for: no CDN script, stylesheet, font or image.
        assert op.non_tile_requests() == []
        # The library and the network came from lib/ beside the page, by relative paths.
        lib = (tmp_path / "lib").as_uri()
        loaded = {u.removeprefix(lib + "/") for u in op.files if u.startswith(lib)}
        assert {f"leaflet-{LEAFLET_VERSION}/leaflet.js",
                f"leaflet-{LEAFLET_VERSION}/leaflet.css"} <= loaded
        assert any(re.fullmatch(r"network-[0-9a-f]{16}\.js", u) for u in loaded), loaded
        assert "<script>/* Leaflet" not in html_path.read_text()
        # the network layer the page built from the shared file: every segment, on its polyline
        assert page.locator(f"{LEAFLET} path.{NETWORK_CLASS}").count() == net.n_segments
        layer = _geojson_name(html_path)
        for e in (0, 17, net.n_segments - 1):
            coords = page.evaluate(
                f"(e) => Object.values(window['{layer}']._layers).find("
                "l => l.feature.properties.segment === e).feature.geometry.coordinates",
                e,
            )
            np.testing.assert_allclose(coords, net.segment_coords(e), atol=1e-6)
        assert any("tile.openstreetmap.org" in u for u in op.requested), "tiles not attempted"
        name = _map_name(html_path)

        # Both routes are SVG paths; the planned one follows the route's coordinates: its first
        # and last rendered points are where Leaflet projects the route's end points.
        assert page.locator(f"{LEAFLET} path.{ROUTE_CLASS}").count() == 2
        latlon = route_latlon(net, planned)
        pts = _path_points(page.get_attribute(f"{LEAFLET} path.{ROUTE_CLASS}-0", "d"))
        assert pts.shape[0] == latlon.shape[0]  # smoothing is off: every vertex is drawn
        ends = page.evaluate(
            "([name, a, b]) => [window[name].latLngToLayerPoint(a), "
            "window[name].latLngToLayerPoint(b)].map(p => [p.x, p.y])",
            [name, latlon[0].tolist(), latlon[-1].tolist()],
        )
        np.testing.assert_allclose(pts[0], ends[0], atol=1.0)
        np.testing.assert_allclose(pts[-1], ends[-1], atol=1.0)

        # Start and end markers sit on the planned route's first and last point.
        for cls, point in ((START_CLASS, latlon[0]), (END_CLASS, latlon[-1])):
            marker = page.locator(f".leaflet-marker-pane .{cls}")
            assert marker.count() == 1 and marker.is_visible()
            box = marker.bounding_box()
            centre = np.array([box["x"] + box["width"] / 2, box["y"] + box["height"] / 2])
            np.testing.assert_allclose(
                centre, _container_points(page, name, [point.tolist()])[0], atol=2.0
            )

        # The view is fitted to the routes: every route point is inside it, the routes fill
        # much of it, and it is zoomed in closer than the whole network would be.
        both = np.concatenate([latlon, route_latlon(net, shortest)])
        xy = _container_points(page, name, both.tolist())
        assert xy[:, 0].min() >= 0 and xy[:, 0].max() <= VIEWPORT["width"]
        assert xy[:, 1].min() >= 0 and xy[:, 1].max() <= VIEWPORT["height"]
        span = np.ptp(xy, axis=0) / np.array([VIEWPORT["width"], VIEWPORT["height"]])
        assert span.max() > 0.5, f"routes fill only {span} of the view"
        lon0, lat0, lon1, lat1 = net.bounds()
        zoom, net_zoom = page.evaluate(
            "([name, b]) => [window[name].getZoom(), window[name].getBoundsZoom(b)]",
            [name, [[lat0, lon0], [lat1, lon1]]],
        )
        assert zoom > net_zoom

        # Pan and zoom with the network off: the zoom button, the mouse wheel and a drag.
        d_before = page.get_attribute(f"{LEAFLET} path.{ROUTE_CLASS}-0", "d")
        _wait_for_move(page, name, lambda: page.click(".leaflet-control-zoom-in"))
        assert page.evaluate(f"{name}.getZoom()") == zoom + 1
        assert page.get_attribute(f"{LEAFLET} path.{ROUTE_CLASS}-0", "d") != d_before
        page.mouse.move(600, 400)
        _wait_for_move(page, name, lambda: page.mouse.wheel(0, 300))
        assert page.evaluate(f"{name}.getZoom()") < zoom + 1
        anchor = _container_points(page, name, [latlon[len(latlon) // 2].tolist()])[0]

        def drag() -> None:
            page.mouse.move(600, 400)
            page.mouse.down()
            for k in range(1, 11):
                page.mouse.move(600 - 12 * k, 400 + 6 * k)
            page.mouse.up()

        _wait_for_move(page, name, drag)
        moved = _container_points(page, name, [latlon[len(latlon) // 2].tolist()])[0]
        # the map followed the mouse: at least the drag's length (Leaflet's inertia may carry it
        # further, by an amount that depends on timing), in the drag's direction
        shift, want = moved - anchor, np.array([-120.0, 60.0])
        along = float(shift @ want) / np.linalg.norm(want)
        across = abs(float(want[0] * shift[1] - want[1] * shift[0])) / np.linalg.norm(want)
        assert along >= np.linalg.norm(want) - 3 and across <= 3 + 0.05 * along, shift
        assert op.non_tile_requests() == [] and op.errors == []

        legend = page.locator(f"#{LEGEND_ID}")
        assert legend.is_visible()
        text = legend.inner_text()
        assert "planned route" in text and "shortest" in text and "start" in text
        box = legend.bounding_box()
        assert box is not None and box["width"] > 50 and box["x"] + box["width"] <= 1200
        assert not page.locator(f"#{FALLBACK_ID}").is_visible()

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "route_map_offline.png"
        page.screenshot(path=str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        op.close()


def _pixels_near(img: np.ndarray, hex_color: str, tol: float = 6 / 255) -> int:
    rgb = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int(np.count_nonzero(np.all(np.abs(img[..., :3] - rgb) <= tol, axis=-1)))


def test_overlapping_routes_all_visible(browser, net, tmp_path) -> None:
    """Three routes over the very same roads: each still shows its own colour on screen."""
    import matplotlib.image as mpimg

    route = _demo_route(net, 30, 40, np.random.default_rng(7))
    html_path = tmp_path / "overlap.html"
    route_map(net, route, {"best guess": route, "shortest": route}, tiles=None, path=html_path)
    op = OfflinePage(browser, device_scale_factor=2)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")
        page.wait_for_selector(f"{LEAFLET} path.{ROUTE_CLASS}-2", state="attached")
        assert op.requested == [] and op.errors == []  # no tiles: no request at all
        img = mpimg.imread(io.BytesIO(page.screenshot()), format="png")
        counts = [_pixels_near(img, c) for c in ROUTE_COLORS[:3]]
        # each route shows at least a 2-px band (4 device px) along a route hundreds of px long
        assert min(counts) > 1000, f"pixels per route colour: {counts}"
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "route_map_overlap.png"))
    finally:
        op.close()


def test_network_map_tooltip_in_browser(browser, net, tmp_path) -> None:
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
    op = OfflinePage(browser)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")
        page.wait_for_selector(f"path.{NETWORK_CLASS}", state="attached", timeout=15_000)
        assert op.errors == [], f"JavaScript errors: {op.errors}"
        assert op.non_tile_requests() == []
        paths = page.locator(f"path.{NETWORK_CLASS}")
        assert paths.count() == net.n_segments
        # Colours: the strokes are the colours the scale gives the values.
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


def test_route_visible_with_scripts_disabled(browser, net, tmp_path) -> None:
    """No script runs at all: the static SVG drawing shows the route and the legend."""
    planned = _demo_route(net, 30, 10, np.random.default_rng(5))
    html_path = tmp_path / "bare.html"
    route_map(net, planned, mean_wh=net.e_det(), path=html_path)
    op = OfflinePage(browser, java_script_enabled=False)
    try:
        page = op.page
        page.goto(html_path.as_uri(), wait_until="networkidle")
        fallback = page.locator(f"#{FALLBACK_ID}")
        fallback.wait_for(state="visible", timeout=5_000)
        route_path = fallback.locator(f"path.{ROUTE_CLASS}-0")
        assert route_path.count() == 1 and route_path.is_visible()
        bbox = route_path.bounding_box()
        assert bbox is not None and max(bbox["width"], bbox["height"]) > 30
        assert (
            _path_points(route_path.get_attribute("d")).shape[0]
            == route_latlon(net, planned).shape[0]
        )
        # the grey network behind it is the shared drawing in lib/, loaded and laid exactly
        # under the routes (same box, same viewBox: the same projection)
        image = fallback.locator("img")
        assert image.count() == 1 and image.is_visible()
        assert any(re.search(r"/lib/network-[0-9a-f]{16}\.svg$", u) for u in op.files)
        box_img, box_svg = image.bounding_box(), fallback.locator("svg").bounding_box()
        assert box_img == box_svg and box_img["width"] > 300
        import matplotlib.image as mpimg

        shot = mpimg.imread(io.BytesIO(page.screenshot()), format="png")
        assert _pixels_near(shot, "#c8c8c8") > 2000  # the network's grey roads are drawn
        legend = page.locator(f"#{LEGEND_ID}")
        assert legend.is_visible() and "planned route" in legend.inner_text()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "route_map_no_scripts.png"))
    finally:
        op.close()


def test_copied_map_folder_and_standalone_page(browser, net, tmp_path) -> None:
    """A map folder copied elsewhere works (page and lib/ together); a standalone page works
    alone; a linked page copied without lib/ still shows its route (the static drawing)."""
    import shutil

    planned = _demo_route(net, 30, 10, np.random.default_rng(5))
    saved, alone = tmp_path / "state" / "maps", tmp_path / "send"
    route_map(net, planned, tiles=None, path=saved / "trip.html")
    route_map(net, planned, tiles=None, path=alone / "trip.html", standalone=True)
    copy = tmp_path / "usb" / "maps"
    shutil.copytree(saved, copy)
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(saved / "trip.html", bare / "trip.html")
    shutil.rmtree(saved)  # nothing may still point at the original folder
    assert [p.name for p in alone.iterdir()] == ["trip.html"]
    for html_path, own_files in ((copy / "trip.html", None), (alone / "trip.html", 1)):
        op = OfflinePage(browser)
        try:
            page = op.page
            page.goto(html_path.as_uri(), wait_until="networkidle")
            page.wait_for_selector(f"{LEAFLET} path.{ROUTE_CLASS}-0", state="attached")
            assert page.evaluate("L.version") == LEAFLET_VERSION
            assert page.locator(f"{LEAFLET} path.{NETWORK_CLASS}").count() == net.n_segments
            assert op.requested == [] and op.errors == []
            assert all(u.startswith(html_path.parent.as_uri()) for u in op.files)
            if own_files is not None:
                assert len(op.files) == own_files  # the standalone page loads only itself
        finally:
            op.close()
    op = OfflinePage(browser)
    try:
        page = op.page
        page.goto((bare / "trip.html").as_uri(), wait_until="load")
        fallback = page.locator(f"#{FALLBACK_ID}")
        fallback.wait_for(state="visible", timeout=5_000)
        assert fallback.locator(f"path.{ROUTE_CLASS}-0").is_visible()
        assert op.requested == []
    finally:
        op.close()
