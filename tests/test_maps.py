"""HTML maps and PNG plots: the page carries the exact route, per-segment styles, tooltips and a
legend; PNGs show the colours they should. (The real-browser check is test_maps_browser.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ev_nav.errors import InvalidNetworkData, UnknownSegmentError
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.viz import NO_DATA_COLOR, ColorScale, format_value
from ev_nav.viz.maps import (
    FALLBACK_ID,
    LEGEND_ID,
    ROUTE_CLASS,
    network_map,
    route_latlon,
    route_map,
    route_stats,
    visits_map,
)
from ev_nav.viz.plots import network_png, visits_png


@pytest.fixture(scope="module")
def net() -> RoadNetwork:
    return synthetic_town(2000, seed=0)


def _walk(net: RoadNetwork, n: int, start: int, seed: int) -> list[int]:
    rng = np.random.default_rng(seed)
    route, seen = [start], {start}
    while len(route) < n:
        succ = [
            int(s)
            for s in net.lg_indices[net.lg_indptr[route[-1]] : net.lg_indptr[route[-1] + 1]]
            if int(s) not in seen
        ]
        if not succ:
            break
        route.append(succ[int(rng.integers(len(succ)))])
        seen.add(route[-1])
    return route


def _polylines(page: str) -> list[tuple[list[list[float]], dict]]:
    """(locations, options) of every L.polyline in a folium page."""
    out = []
    for locs, opts in re.findall(r"L\.polyline\(\s*(\[\[.*?\]\]),\s*(\{.*?\})\s*\)", page, re.S):
        out.append((json.loads(locs), json.loads(opts)))
    return out


def _network_features(path: Path) -> list[dict]:
    """The network layer's features as the page's script builds them: the network file (inline
    in a standalone page, else ``lib/network-KEY.js`` beside it) joined with the page's own
    columns. The browser test checks that Chromium builds the same."""
    page = path.read_text()
    m = re.search(r'evNavNetworkFeatures\("(\w+)",\s*(\{.*?\})\)\);\n', page, re.S)
    assert m, "no network layer"
    key, cols = m.group(1), json.loads(m.group(2))
    source = page if f'<script src="lib/network-{key}.js">' not in page else (
        path.parent / "lib" / f"network-{key}.js"
    ).read_text()
    d = re.search(rf'EV_NAV_NETWORKS \|\| {{}}\)\["{key}"\] = (\{{.*?\}});\n', source, re.S)
    assert d, "no network data"
    net = json.loads(d.group(1))
    n = len(net["offsets"]) - 1
    ll = np.array(net["lonlat"]).reshape(-1, 2)

    def pick(v, e):
        return v[e] if isinstance(v, list) else v

    feats = []
    for e in cols["order"] if cols["order"] is not None else range(n):
        props = {k: net[k][e] for k in ("length_m", "grade_pct", "speed_kmh")}
        props |= {k: v[e] for k, v in cols["extra"].items()}
        props["segment"] = e
        props["style"] = {"color": pick(cols["color"], e), "weight": pick(cols["weight"], e),
                          "opacity": cols["opacity"]}
        coords = ll[net["offsets"][e] : net["offsets"][e + 1]].tolist()
        feats.append({"geometry": {"coordinates": coords}, "properties": props})
    return feats


# ---------------------------------------------------------------------- geometry
def test_route_latlon_joins_segments(net: RoadNetwork) -> None:
    route = _walk(net, 20, 0, 1)
    got = route_latlon(net, route)
    # Independent construction: concatenate each segment's polyline, drop the repeated joints.
    pts: list[tuple[float, float]] = []
    for e in route:
        for lon, lat in np.round(net.segment_coords(e), 6):
            if not pts or pts[-1] != (lat, lon):
                pts.append((lat, lon))
    np.testing.assert_array_equal(got, np.array(pts))
    # consecutive segments share their joint, so the route is one connected line
    assert got.shape[0] < sum(len(net.segment_coords(e)) for e in route)


def test_route_stats_match_network(net: RoadNetwork) -> None:
    route = _walk(net, 15, 3, 2)
    mean = net.e_det()
    s = route_stats(net, route, mean)
    assert s["length_km"] == pytest.approx(sum(net.length_m[e] for e in route) / 1000)
    assert s["time_min"] == pytest.approx(
        sum(net.length_m[e] / net.speed_mps[e] for e in route) / 60
    )
    assert s["energy_wh"] == pytest.approx(sum(mean[e] for e in route))
    # no sd: segments' sds do not add up to a route's (its joint posterior's, on a Route)
    assert "energy_sd_wh" not in s


def test_route_tooltips_show_the_route_tables_figures(net: RoadNetwork, tmp_path: Path) -> None:
    """A route's tooltip showed an unlabelled ± summed as if its segments were independent,
    while the route table shows its joint-posterior sd: hovering now shows the table's figures,
    labelled model sd; a route without its figures shows its predicted mean only."""
    from ev_nav.bandits.agent import describe_route
    from ev_nav.sim.fleet import AgentSpec, make_model

    model = make_model(AgentSpec(), net, 0)
    planned, other, bare = _walk(net, 30, 0, 3), _walk(net, 12, 0, 4), _walk(net, 8, 5, 5)
    seen = np.asarray(planned[:10])
    model.update(seen, net.e_det()[seen] * 1.1)  # readings correlate the route's segments
    post = model.posterior()
    figures = {"planned route": describe_route(net, planned, model),
               "other": describe_route(net, other, model)}
    path = tmp_path / "route.html"
    route_map(net, planned, {"other": other, "bare": bare}, mean_wh=post.mean, sd_wh=post.std,
              route_figures=figures, path=path)
    tips = dict(t.split(": ", 1) for t in re.findall(
        r"\.bindTooltip\(\s*`<div>\s*(.*?)\s*</div>`", path.read_text(encoding="utf-8"), re.S)
        if ": " in t)
    for name, segs in (("planned route", planned), ("other", other)):
        seg = np.asarray(segs)
        # the table's figures, computed here from the model's parts: the joint covariance
        sd = float(np.sqrt(model.route_covariance(seg).sum()))
        table = (f"{net.length_m[seg].sum() / 1000:.2f} km, "
                 f"{net.travel_time_s[seg].sum() / 60:.1f} min, predicted "
                 f"{post.mean[seg].sum():.1f} ± {sd:.1f} Wh (model sd)")
        assert tips[name] == table
        independent = float(np.sqrt(np.sum(post.std[seg] ** 2)))
        assert f"{independent:.1f}" != f"{sd:.1f}" and f"{independent:.3g}" not in tips[name]
    seg = np.asarray(bare)
    assert tips["bare"].endswith(f"predicted {format_value(post.mean[seg].sum())} Wh")
    assert "±" not in tips["bare"]


# ---------------------------------------------------------------------- route map
def test_route_map_html_has_route_and_legend(net: RoadNetwork, tmp_path: Path) -> None:
    planned, fastest = _walk(net, 30, 0, 3), _walk(net, 12, 0, 4)
    mean = net.e_det()
    path = tmp_path / "maps" / "route.html"
    route_map(
        net,
        planned,
        {"fastest": fastest},
        mean_wh=mean,
        route_labels={"fastest": "the quick one"},
        path=path,
    )
    page = path.read_text()
    # the page and its shared files, no temp files left
    assert sorted(p.name for p in path.parent.iterdir()) == ["lib", "route.html"]
    assert not [p for p in (path.parent / "lib").rglob(".*")]
    lines = {opts["className"]: locs for locs, opts in _polylines(page)}
    np.testing.assert_allclose(lines[f"{ROUTE_CLASS} {ROUTE_CLASS}-0"], route_latlon(net, planned))
    np.testing.assert_allclose(lines[f"{ROUTE_CLASS} {ROUTE_CLASS}-1"], route_latlon(net, fastest))
    # Legend: plain HTML with both routes; the default label carries the real figures.
    legend = page[page.index(f'id="{LEGEND_ID}"') :]
    legend = legend[: legend.index("</div></div>")]
    stats = route_stats(net, planned, mean)
    assert "planned route" in legend and "fastest" in legend and "the quick one" in legend
    assert f"{stats['length_km']:.2f} km" in legend
    assert f"{format_value(stats['energy_wh'])} Wh" in legend
    # The offline drawing holds the same route.
    assert f'id="{FALLBACK_ID}"' in page and f'class="{ROUTE_CLASS} {ROUTE_CLASS}-0"' in page


def test_route_map_rejects_foreign_route(net: RoadNetwork) -> None:
    with pytest.raises(UnknownSegmentError, match="another network"):
        route_map(net, [0, net.n_segments + 3])
    with pytest.raises(InvalidNetworkData, match="empty"):
        route_map(net, [])


# ---------------------------------------------------------------------- network map
def test_network_map_one_layer_with_styles_and_tooltips(net: RoadNetwork, tmp_path: Path) -> None:
    mean = net.e_det()
    sd = np.abs(mean) * 0.1 + 1.0
    values = mean / net.length_m * 1000.0
    values[5] = np.nan  # a segment without data
    path = tmp_path / "net.html"
    network_map(net, values, legend_title="energy [Wh/km]", mean_wh=mean, sd_wh=sd, path=path)
    page = path.read_text()
    assert page.count("L.geoJson(") == 1  # the whole network is a single layer
    assert "L.polyline(" not in page
    feats = _network_features(path)
    assert len(feats) == net.n_segments
    scale = ColorScale.fit(values)
    colors = scale.hex(values)
    by_seg = {f["properties"]["segment"]: f for f in feats}
    assert sorted(by_seg) == list(range(net.n_segments))
    for e in (0, 5, 17, net.n_segments - 1):
        f = by_seg[e]
        np.testing.assert_allclose(f["geometry"]["coordinates"], net.segment_coords(e), atol=1e-6)
        p = f["properties"]
        assert p["style"]["color"] == colors[e]
        assert p["length_m"] == pytest.approx(net.length_m[e], abs=0.05)
        assert p["grade_pct"] == pytest.approx(net.grade[e] * 100, abs=0.05)
        assert p["predicted_wh"] == f"{format_value(mean[e])} ± {format_value(sd[e])}"
    assert by_seg[5]["properties"]["style"]["color"] == NO_DATA_COLOR
    # drawn last = on top: the highest value
    assert feats[-1]["properties"]["segment"] == int(np.nanargmax(values))
    for alias in ("length [m]", "grade [%]", "speed limit [km/h]", "predicted [Wh]"):
        assert alias in page
    assert "energy [Wh/km]" in page and "linear-gradient" in page and "no data" in page


def test_network_map_wrong_length(net: RoadNetwork) -> None:
    with pytest.raises(InvalidNetworkData, match="segments"):
        network_map(net, np.ones(net.n_segments - 1))


def test_visits_map(net: RoadNetwork, tmp_path: Path) -> None:
    visits = np.zeros(net.n_segments)
    visits[[1, 2, 3]] = [1, 10, 100]
    path = tmp_path / "visits.html"
    visits_map(net, visits, highlight={"optimal": [1]}, path=path)
    by_seg = {f["properties"]["segment"]: f for f in _network_features(path)}
    assert by_seg[0]["properties"]["style"]["color"] == NO_DATA_COLOR
    w = [by_seg[e]["properties"]["style"]["weight"] for e in (0, 1, 2, 3)]
    assert w[0] < w[1] < w[2] < w[3]
    scale = ColorScale.fit(
        np.array([np.nan, 1, 10, 100]), cmap="plasma", vmin=1, vmax=100, log=True
    )
    assert by_seg[3]["properties"]["style"]["color"] == scale.hex([100.0])[0]
    with pytest.raises(InvalidNetworkData):
        visits_map(net, -visits)


# ---------------------------------------------------------------------- colour scale
def test_color_scale() -> None:
    s = ColorScale.fit(np.arange(101.0))
    assert (s.vmin, s.vmax) == (2.0, 98.0)
    np.testing.assert_allclose(s.normalise([2.0, 50.0, 98.0, 500.0, -5.0]), [0, 0.5, 1, 1, 0])
    log = ColorScale(cmap="viridis", vmin=1.0, vmax=100.0, log=True)
    np.testing.assert_allclose(log.normalise([1.0, 10.0, 100.0]), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(log.ticks(3), [1.0, 10.0, 100.0])
    assert s.hex([np.nan]) == [NO_DATA_COLOR]
    flat = ColorScale.fit(np.full(5, 3.0))
    assert flat.vmin < 3.0 < flat.vmax
    with pytest.raises(InvalidNetworkData):
        ColorScale.fit([1.0, 2.0], vmin=0.0, log=True)


# ---------------------------------------------------------------------- PNG
def _pixels_near(img: np.ndarray, hex_color: str, tol: float = 0.04) -> int:
    rgb = np.array([int(hex_color[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    return int(np.count_nonzero(np.all(np.abs(img[..., :3] - rgb) < tol, axis=-1)))


def test_network_png_colours_and_route(net: RoadNetwork, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    values = np.where(np.arange(net.n_segments) % 2 == 0, 0.0, 1.0)
    route = _walk(net, 25, 0, 5)
    path = network_png(
        net, values, tmp_path / "figs" / "net.png", cmap="viridis", routes={"planned": route}
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)
    assert img.shape[0] > 500 and img.shape[1] > 500
    lo, hi = ColorScale.fit(values).hex([0.0, 1.0])
    assert _pixels_near(img, lo) > 1000 and _pixels_near(img, hi) > 1000
    assert _pixels_near(img, "#d62728") > 200  # the route, drawn in the planned-route red
    # No route → no red; no values → grey only.
    bare = mpimg.imread(network_png(net, None, tmp_path / "bare.png"))
    assert _pixels_near(bare, "#d62728") == 0 and _pixels_near(bare, NO_DATA_COLOR) > 1000
    assert _pixels_near(bare, hi) == 0


def test_visits_png(net: RoadNetwork, tmp_path: Path) -> None:
    visits = np.random.default_rng(0).poisson(0.7, net.n_segments)
    path = visits_png(net, visits, tmp_path / "v.png", highlight={"optimal": [0, 1]})
    assert path.stat().st_size > 10_000
    with pytest.raises(InvalidNetworkData):
        visits_png(net, visits[:-1], tmp_path / "w.png")
    assert not (tmp_path / "w.png").exists()


# ---------------------------------------------------------------------- offline pages
STATIC = Path(__file__).resolve().parents[1] / "ev_nav" / "static"


def test_vendored_leaflet_matches_its_notice() -> None:
    """The shipped files are the ones the NOTICE names (version, hashes), with their licence."""
    import hashlib

    from ev_nav.viz.maps import LEAFLET_VERSION

    folder = STATIC / "leaflet"
    notice = (folder / "NOTICE.md").read_text()
    assert f"Leaflet {LEAFLET_VERSION}" in notice and "BSD 2-Clause" in notice
    rows = re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", notice, re.M)
    listed = {name for name, _ in rows}
    shipped = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert shipped - {"NOTICE.md"} == listed
    for name, digest in rows:
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    assert f'version="{LEAFLET_VERSION}"' in (folder / "leaflet.js").read_text()
    assert "BSD 2-Clause" in (folder / "LICENSE").read_text()


def test_static_files_are_package_data() -> None:
    """Every file under ev_nav/static is matched by pyproject's package-data globs (so a wheel
    carries the map library and the server page)."""
    import fnmatch
    import tomllib

    conf = tomllib.loads((STATIC.parents[1] / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["ev_nav"]
    files = [p.relative_to(STATIC.parent).as_posix() for p in STATIC.rglob("*") if p.is_file()]
    assert files
    missing = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert missing == []


def _maps(net: RoadNetwork, folder: Path, standalone: bool) -> list[Path]:
    route = _walk(net, 20, 0, 1)
    kw = {"standalone": standalone}
    route_map(net, route, {"shortest": _walk(net, 10, 0, 2)}, path=folder / "r.html", **kw)
    network_map(net, net.e_det(), mean_wh=net.e_det(), path=folder / "n.html", **kw)
    visits_map(net, np.arange(net.n_segments) % 3, path=folder / "v.html", **kw)
    return [folder / name for name in ("r.html", "n.html", "v.html")]


def _no_cdn(page: str) -> None:
    for host in ("cdn.jsdelivr.net", "cdnjs.cloudflare.com", "code.jquery.com",
                 "bootstrapcdn.com", "unpkg.com"):
        assert host not in page


def test_standalone_pages_link_nothing(net: RoadNetwork, tmp_path: Path) -> None:
    """``standalone``: one file, nothing loaded from elsewhere: Leaflet and the network are
    inline, images are data URIs, folium's CDN links (jQuery, Bootstrap, fonts) are gone."""
    from ev_nav.viz.maps import LEAFLET_VERSION

    for path in _maps(net, tmp_path, standalone=True):
        page = path.read_text()
        assert re.findall(r"<script[^>]*\bsrc=", page) == []
        assert re.findall(r"<link[^>]*stylesheet", page) == []
        assert re.findall(r"<img[^>]*\bsrc=", page) == []
        assert re.findall(r"url\((?!data:|#)", page) == []  # CSS images inline
        _no_cdn(page)
        assert f"Leaflet {LEAFLET_VERSION}" in page and "sourceMappingURL" not in page
        head = page[: page.index("</head>")]
        assert head.index("<script>/* Leaflet") < len(head)  # the library is in the head
        assert "EV_NAV_NETWORKS" in head  # and the network
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n.html", "r.html", "v.html"]


def test_saved_pages_share_one_library(net: RoadNetwork, tmp_path: Path) -> None:
    """Maps saved in a folder link one copy of Leaflet and of the network in ``lib/`` by
    relative paths: copied once, verified against the NOTICE's hashes, rewritten if damaged."""
    import hashlib

    from ev_nav.viz.maps import LEAFLET_VERSION, install_map_library, leaflet_hashes

    pages = _maps(net, tmp_path, standalone=False)
    lib = tmp_path / "lib"
    linked = set()
    for path in pages:
        page = path.read_text()
        refs = re.findall(r'<(?:script|link|img)[^>]*\b(?:src|href)="([^"]+)"', page)
        assert refs and all(r.startswith("lib/") and (tmp_path / r).is_file() for r in refs)
        linked |= set(refs)
        assert "<script>/* Leaflet" not in page and "EV_NAV_NETWORKS[" not in page
        assert re.findall(r"url\((?!data:|#)", page) == []
        _no_cdn(page)
    # one library, one network file, one network drawing, for all three pages
    leaflet = f"lib/leaflet-{LEAFLET_VERSION}"
    nets = {r for r in linked if r.startswith("lib/network-")}
    assert linked - nets == {f"{leaflet}/leaflet.js", f"{leaflet}/leaflet.css"}
    assert {Path(r).suffix for r in nets} == {".js", ".svg"} and len(nets) == 2
    hashes = leaflet_hashes()
    folder = lib / f"leaflet-{LEAFLET_VERSION}"
    files = {q.relative_to(folder).as_posix() for q in folder.rglob("*") if q.is_file()}
    assert files == set(hashes) | {"NOTICE.md"}  # the licence travels with the files
    for name, digest in hashes.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    # the CSS's images resolve beside it
    css = (folder / "leaflet.css").read_text()
    assert all((folder / u).is_file() for u in re.findall(r"url\((images/[^)]+)\)", css))

    # copied once: saving again rewrites nothing; a damaged file is put right
    stamp = {q: q.stat().st_mtime_ns for q in lib.rglob("*") if q.is_file()}
    route_map(net, _walk(net, 9, 5, 3), path=tmp_path / "again.html")
    assert {q: q.stat().st_mtime_ns for q in lib.rglob("*") if q.is_file()} == stamp
    (folder / "leaflet.js").write_text("truncated")
    (folder / "images" / "layers.png").unlink()
    install_map_library(lib)
    for name, digest in hashes.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    # another network has its own file beside the first
    other = synthetic_town(300, seed=1)
    route_map(other, _walk(other, 5, 0, 1), path=tmp_path / "other.html")
    assert len(list(lib.glob("network-*.js"))) == 2


def _fit_bounds(page: str) -> np.ndarray:
    m = re.search(r"map_[0-9a-f]+\.fitBounds\(\s*(\[\[.*?\]\])", page, re.S)
    assert m, "no fitBounds"
    return np.array(json.loads(m.group(1)))


def test_route_map_fits_routes_and_marks_ends(net: RoadNetwork, tmp_path: Path) -> None:
    planned, shortest = _walk(net, 12, 100, 3), _walk(net, 8, 100, 4)
    path = tmp_path / "r.html"
    route_map(net, planned, {"shortest": shortest}, path=path)
    page = path.read_text()
    both = np.concatenate([route_latlon(net, planned), route_latlon(net, shortest)])
    np.testing.assert_allclose(_fit_bounds(page), [both.min(axis=0), both.max(axis=0)])
    # start and end markers: divIcons on the planned route's first and last point
    from ev_nav.viz.maps import END_CLASS, START_CLASS

    markers = re.findall(r"L\.marker\(\s*(\[.*?\])", page, re.S)
    latlon = route_latlon(net, planned)
    np.testing.assert_allclose(json.loads(markers[0]), latlon[0])
    np.testing.assert_allclose(json.loads(markers[1]), latlon[-1])
    assert START_CLASS in page and END_CLASS in page
    # a network map without routes opens on the whole network; so does the exploration map
    network_map(net, None, path=tmp_path / "n.html")
    lon0, lat0, lon1, lat1 = net.bounds()
    np.testing.assert_allclose(_fit_bounds((tmp_path / "n.html").read_text()),
                               [[lat0, lon0], [lat1, lon1]])
    visits_map(net, np.ones(net.n_segments), highlight={"optimal": planned},
               path=tmp_path / "v.html")
    np.testing.assert_allclose(_fit_bounds((tmp_path / "v.html").read_text()),
                               [[lat0, lon0], [lat1, lon1]])


def test_overlapping_routes_are_stacked_widest_first(net: RoadNetwork, tmp_path: Path) -> None:
    route = _walk(net, 10, 0, 5)
    path = tmp_path / "o.html"
    route_map(net, route, {"best guess": route, "shortest": route, "fastest": route}, path=path)
    lines = _polylines(path.read_text())
    # drawing order = page order; each later route narrower, all opaque and solid
    weights = [opts["weight"] for _, opts in lines]
    classes = [opts["className"] for _, opts in lines]
    assert classes == [f"{ROUTE_CLASS} {ROUTE_CLASS}-{k}" for k in range(4)]
    assert all(a - b >= 4 for a, b in zip(weights, weights[1:], strict=False))
    assert all(opts["opacity"] == 1.0 and not opts.get("dashArray") for _, opts in lines)


def _ticks(page: str) -> list[str]:
    return re.findall(r'class="ev-nav-tick"[^>]*>([^<]*)<', page)


def test_visits_colour_bar_reaches_the_true_maximum(net: RoadNetwork, tmp_path: Path) -> None:
    """One segment driven far more than the rest: the bar ends at its count, not a percentile."""
    visits = np.zeros(net.n_segments)
    visits[: net.n_segments // 2] = 3.0
    visits[7] = 250.0
    path = tmp_path / "v.html"
    visits_map(net, visits, path=path)
    ticks = _ticks(path.read_text())
    assert ticks[0] == "1" and ticks[-1] == "250"
    # a percentile-clipped scale (the network map's default) says so on its end ticks
    values = np.linspace(0.0, 100.0, net.n_segments)
    network_map(net, values, path=tmp_path / "n.html")
    clipped = _ticks((tmp_path / "n.html").read_text())
    assert clipped[0].startswith("≤ ") and clipped[-1].startswith("≥ ")
    network_map(net, values, vmin=0.0, vmax=100.0, path=tmp_path / "full.html")
    assert not any("≤" in t or "≥" in t for t in _ticks((tmp_path / "full.html").read_text()))


def test_visits_colour_bar_ticks_whole_counts(net: RoadNetwork, tmp_path: Path) -> None:
    """A count is whole: the bar of roads driven once or twice read "1, 1.19, 1.41, 1.68, 2"."""
    visits = np.zeros(net.n_segments)
    visits[:5], visits[5] = 1.0, 2.0
    path = tmp_path / "v.html"
    visits_map(net, visits, path=path)
    page = path.read_text()
    assert _ticks(page) == ["1", "2"]
    assert re.findall(r'class="ev-nav-tick" style="position:absolute;left:(\d+)%', page) == [
        "0", "100"
    ]
    # a wider range keeps whole ticks, each placed where its count lies on the log bar
    visits[7] = 250.0
    visits_map(net, visits, path=path)
    page = path.read_text()
    assert _ticks(page) == ["1", "4", "16", "63", "250"]
    left = [int(x) for x in re.findall(r'class="ev-nav-tick"[^>]*left:(\d+)%', page)]
    assert left == [round(100 * np.log(t) / np.log(250)) for t in (1, 4, 16, 63, 250)]
    # a never-driven road was driven 0 times: its tooltip and the grey swatch say so
    values = {f["segment"]: f["value"] for f in (g["properties"] for g in _network_features(path))}
    assert values[0] == "1" and values[5] == "2" and values[7] == "250" and values[6] == "0"
    legend = page[page.index(f'id="{LEGEND_ID}"') :]
    assert "</span> 0</div>" in legend and "no data" not in legend


def test_cli_visits_map_is_not_clipped(tmp_path: Path, capsys) -> None:
    """'ev-nav map --layer visits' draws the exploration map (scale up to the true maximum)."""
    from ev_nav.cli import main
    from ev_nav.store import Store

    state = tmp_path / "st"
    assert main(["init", str(state), "--synthetic", "--segments", "300", "--model", "bi"]) == 0
    with Store.open(state) as store:
        for k in range(3):
            trip = store.add_trip(origin_segment=0, goal_segment=0, policy="mean", route=[0],
                                  predicted_wh=1.0, predicted_sd_wh=1.0, length_m=1.0,
                                  time_s=1.0)
            store.add_total_observation(trip, 1.0 + k)
        n = store.visit_counts(300)
    assert main(["map", str(state), "--layer", "visits"]) == 0
    ticks = _ticks((state / "maps" / "visits.html").read_text())
    assert ticks[-1] == format_value(max(float(n.max()), 2.0))
    capsys.readouterr()


def test_legend_never_labels_a_prediction_as_truth(net: RoadNetwork, tmp_path: Path) -> None:
    """The demo names a route after the truth ("energy-optimal (true)"); every energy figure
    in the legend that comes from the model is written as predicted."""
    mean = net.e_det()
    path = tmp_path / "demo.html"
    route_map(
        net,
        _walk(net, 20, 0, 6),
        {"energy-optimal (true)": _walk(net, 15, 0, 7), "shortest": _walk(net, 12, 0, 8)},
        route_name="planned by GP (mean)",
        mean_wh=mean,
        sd_wh=np.full(net.n_segments, 1.0),
        path=path,
    )
    page = path.read_text()
    legend = page[page.index(f'id="{LEGEND_ID}"') :]
    legend = re.sub(r"<[^>]+>", " ", legend[: legend.index("</div></div>")])
    figures = re.findall(r"(\S+)\s+[-\d.,]+(?: ± [\d.,]+)? Wh", legend)
    assert len(figures) == 3 and set(figures) == {"predicted"}


# ---------------------------------------------------------------------- trip files
def _haversine_m(lon0, lat0, lon1, lat1):
    p0, p1 = np.radians(lat0), np.radians(lat1)
    a = np.sin((p1 - p0) / 2) ** 2 + np.cos(p0) * np.cos(p1) * np.sin(
        np.radians(lon1 - lon0) / 2
    ) ** 2
    return 2 * 6_371_008.8 * np.arcsin(np.sqrt(a))


def _expected_coordinates(net: RoadNetwork, segments: list[int]) -> np.ndarray:
    """[lon, lat, ele] of a route, computed segment by segment: elevation from the end nodes'
    heights, linear in (great-circle) distance along the polyline."""
    rows: list[list[float]] = []
    for e in segments:
        pts = net.segment_coords(e)
        step = _haversine_m(pts[:-1, 0], pts[:-1, 1], pts[1:, 0], pts[1:, 1])
        along = np.concatenate([[0.0], np.cumsum(step)])
        frac = along / along[-1]
        z0, z1 = net.node_elevation[net.seg_u[e]], net.node_elevation[net.seg_v[e]]
        for (lon, lat), f in zip(pts, frac, strict=True):
            row = [round(lon, 7), round(lat, 7), z0 + f * (z1 - z0)]
            if not rows or rows[-1][:2] != row[:2]:
                rows.append(row)
    return np.array(rows)


@pytest.fixture(scope="module")
def trip_state(tmp_path_factory):
    """A state with one planned trip: Monaco (MoST roads, SRTM heights) from ../shared/data,
    or the synthetic town where that data is absent. Returns (net, state, route --json doc)."""
    import contextlib
    import io

    from ev_nav.cli import main
    from ev_nav.settings import data_dir

    folder = tmp_path_factory.mktemp("trip")
    osm, dem = data_dir() / "most_monaco.osm.gz", data_dir() / "N43E007.hgt.zip"
    if osm.is_file() and dem.is_file():
        netfile = folder / "monaco.npz"
        build = ["network", "build", "--osm", str(osm), "--dem", str(dem), "--out", str(netfile)]
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(build) == 0
        source = ["--network", str(netfile)]
        net = RoadNetwork.load(netfile)
    else:
        source = ["--synthetic", "--segments", "2000"]
        net = synthetic_town(2000, seed=0)
    state = folder / "state"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["init", str(state), *source, "--model", "bi"]) == 0
    mid = net.segment_midpoints()
    ends = [int(np.argmin(mid[:, 0] + mid[:, 1])), int(np.argmax(mid[:, 0] + mid[:, 1]))]
    where = [f"{lat:.7f},{lon:.7f}" for lon, lat in (net.segment_anchor(e) for e in ends)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["route", str(state), "--from", where[0], "--to", where[1], "--json"])
    assert code == 0
    return net, state, json.loads(out.getvalue())


def test_route_json_coordinates_carry_elevation(trip_state) -> None:
    net, _, doc = trip_state
    assert net.has_elevation
    for name, r in doc["routes"].items():
        coords = np.array(r["coordinates"])
        assert coords.shape[1] == 3, name
        seg = np.array(r["segments"])
        fs, fg = r["start_fraction"], r["end_fraction"]
        # the route starts and ends at the exact points along its end segments ...
        np.testing.assert_allclose(coords[0, :2], net.segment_point(seg[0], fs), atol=2e-7)
        np.testing.assert_allclose(coords[-1, :2], net.segment_point(seg[-1], fg), atol=2e-7)
        # ... and in between follows the whole segments' polylines, vertex for vertex
        want = _expected_coordinates(net, r["segments"])
        inner = coords[1:-1]
        k = int(np.argmin(np.abs(want[:, :2] - inner[0, :2]).sum(1)))
        np.testing.assert_allclose(inner[:, :2], want[k : k + len(inner), :2], atol=1e-9)
        np.testing.assert_allclose(inner[:, 2], want[k : k + len(inner), 2], atol=0.06)
        # the polyline is the route the figures are for: its length is the route's km
        km = _haversine_m(*coords[:-1, :2].T, *coords[1:, :2].T).sum() / 1000
        assert km == pytest.approx(r["km"], rel=5e-3), name
        # and its heights rise as the grades of the parts driven say
        shares = np.ones(seg.size)
        shares[0], shares[-1] = (fg - fs, fg - fs) if seg.size == 1 else (1 - fs, fg)
        assert coords[-1, 2] - coords[0, 2] == pytest.approx(
            float(np.sum(net.grade[seg] * net.length_m[seg] * shares)), abs=0.1
        )


def test_trip_gpx_is_gpx_1_1_with_heights_and_waypoints(trip_state) -> None:
    import xml.etree.ElementTree as ET

    net, state, doc = trip_state
    ns = "{http://www.topografix.com/GPX/1/1}"
    root = ET.parse(state / "maps" / f"trip-{doc['trip']}.gpx").getroot()
    assert root.tag == f"{ns}gpx" and root.get("version") == "1.1" and root.get("creator")
    # every element is in the GPX 1.1 namespace
    assert all(el.tag.startswith(ns) for el in root.iter())
    # the schema's order: metadata, wpt*, rte*, trk*; in a point ele before name, desc, type
    kids = [el.tag[len(ns):] for el in root]
    assert kids == ["metadata", "wpt", "wpt", "trk"]
    points = np.array(doc["routes"]["planned"]["coordinates"])
    for wpt, letter, row in zip(root.findall(f"{ns}wpt"), "AB", (points[0], points[-1]),
                                strict=True):
        assert [el.tag[len(ns):] for el in wpt] == ["ele", "name", "desc", "type"]
        assert wpt.findtext(f"{ns}name") == letter
        assert wpt.findtext(f"{ns}type") == ("start" if letter == "A" else "end")
        got = [float(wpt.get("lon")), float(wpt.get("lat")), float(wpt.findtext(f"{ns}ele"))]
        np.testing.assert_allclose(got, row, atol=1e-7)
    trk = root.find(f"{ns}trk")
    assert [el.tag[len(ns):] for el in trk] == ["name", "trkseg"]
    pts = trk.findall(f"{ns}trkseg/{ns}trkpt")
    got = np.array([[float(p.get("lon")), float(p.get("lat")), float(p.findtext(f"{ns}ele"))]
                    for p in pts])
    np.testing.assert_allclose(got, points, atol=1e-7)
    # the GeoJSON carries the same 3-D positions for every route
    geo = json.loads((state / "maps" / f"trip-{doc['trip']}.geojson").read_text())
    for feat in geo["features"]:
        assert feat["geometry"]["coordinates"] == doc["routes"][feat["properties"]["name"]][
            "coordinates"
        ]


def test_trip_map_is_small_and_links_the_shared_library(trip_state) -> None:
    """The library and the network live once in maps/lib/; a Monaco trip map is its routes and
    figures only (≤ 200 KB; 2.2 MB when each page carried both)."""
    from ev_nav.settings import data_dir

    _, state, doc = trip_state
    page = state / "maps" / f"trip-{doc['trip']}.html"
    size = page.stat().st_size
    if (data_dir() / "most_monaco.osm.gz").is_file():
        assert size <= 200_000, size
    text = page.read_text()
    refs = re.findall(r'<(?:script|link|img)[^>]*\b(?:src|href)="([^"]+)"', text)
    assert refs and all((page.parent / r).is_file() for r in refs)
    assert "<script>/* Leaflet" not in text


def test_no_elevation_means_two_dimensional_positions(net: RoadNetwork, tmp_path: Path) -> None:
    """A network built without heights gives [lon, lat] and a GPX without <ele>, never 0 m."""
    import dataclasses

    from ev_nav.bandits.agent import Route
    from ev_nav.roads.partial import route_coordinates
    from ev_nav.trips.planning import PlannedTrip, _write_route_gpx

    flat = dataclasses.replace(
        net, node_elevation=np.zeros(net.n_nodes), meta={**net.meta, "elevation_source": "none"}
    )
    assert net.has_elevation and not flat.has_elevation
    seg = np.array(_walk(net, 12, 0, 1))
    coords = route_coordinates(flat, seg)
    assert coords.shape[1] == 2
    np.testing.assert_array_equal(coords, route_coordinates(net, seg)[:, :2])
    r = Route(seg, 1.0, 0.5, 100.0, 10.0, "mean")
    trip = PlannedTrip(7, int(seg[0]), int(seg[-1]), "mean", 7, {"planned": r})
    assert trip.to_dict(flat)["routes"]["planned"]["coordinates"] == coords.tolist()
    assert "coordinates" not in trip.to_dict()["routes"]["planned"]
    _write_route_gpx(flat, trip, tmp_path / "t.gpx")
    gpx = (tmp_path / "t.gpx").read_text()
    assert "<ele>" not in gpx and gpx.count("<wpt ") == 2 and gpx.count("<trkpt ") == len(coords)


def test_cli_map_out_elsewhere_and_standalone(tmp_path: Path, capsys) -> None:
    """``map --out DIR/x.html`` puts lib/ beside the page; ``--standalone`` writes one file."""
    from ev_nav.cli import main

    state = tmp_path / "st"
    assert main(["init", str(state), "--synthetic", "--segments", "300", "--model", "bi"]) == 0
    linked, alone = tmp_path / "elsewhere" / "sd.html", tmp_path / "send" / "sd.html"
    assert main(["map", str(state), "--layer", "sd", "--out", str(linked)]) == 0
    assert main(["map", str(state), "--layer", "sd", "--out", str(alone), "--standalone"]) == 0
    assert (linked.parent / "lib" / "leaflet-1.9.4" / "leaflet.js").is_file()
    assert 'src="lib/leaflet-1.9.4/leaflet.js"' in linked.read_text()
    assert [p.name for p in alone.parent.iterdir()] == ["sd.html"]
    assert "<script>/* Leaflet" in alone.read_text()
    # a folder that cannot take lib/ is a one-line error naming the way out
    (tmp_path / "blocked").mkdir()
    (tmp_path / "blocked" / "lib").write_text("not a folder")
    capsys.readouterr()
    code = main(["map", str(state), "--layer", "sd", "--out", str(tmp_path / "blocked" / "x.html")])
    err = capsys.readouterr().err
    assert code == 2 and "--standalone" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["mymap", "map.png", "map.svg"])
def test_cli_map_out_without_an_html_extension_is_refused(tmp_path: Path, capsys, name) -> None:
    """``map --out NAME`` used to write an HTML page under any name (``mymap``, ``map.png``);
    a map is HTML only: one line naming .html/.htm, exit 2, nothing written."""
    from ev_nav.cli import main

    state = tmp_path / "st"
    assert main(["init", str(state), "--synthetic", "--segments", "300", "--model", "bi"]) == 0
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(p.relative_to(state) for p in state.rglob("*"))
    capsys.readouterr()
    code = main(["map", str(state), "--layer", "visits", "--out", str(out / name)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert ".html or .htm" in err and name in err
    assert list(out.iterdir()) == []  # neither the page nor lib/
    assert sorted(p.relative_to(state) for p in state.rglob("*")) == before
    # the known extensions, any case, are written
    for ok in ("m.html", "m.HTM"):
        assert main(["map", str(state), "--layer", "visits", "--out", str(out / ok)]) == 0
        assert (out / ok).read_text().lstrip().lower().startswith("<!doctype html")
