"""Interactive HTML maps (folium): the network coloured by a per-segment value, planned routes with
their alternatives, and exploration (visit-count) maps.

Design points
-------------
* **One layer for the whole network.** All segments go into a single GeoJSON layer whose features
  carry their own style and tooltip fields, so a 100k-segment network is one Leaflet layer, not
  100k folium objects.
* **Legends are plain HTML/CSS**, not JavaScript widgets: they show even if no script runs. Every
  energy figure a legend derives from the model is written as "predicted", so a route named for
  what it truly is (e.g. the demo's true energy optimum) never shows a prediction as its truth.
  A route's legend row and tooltip show its own figures where the caller has them (a
  :class:`~ev_nav.bandits.agent.Route`: the route table's predicted Wh ± model sd, from the joint
  posterior); per-segment sds alone cannot give a route's sd, so without them only the mean shows.
* **Offline, shared files.** A saved map needs two things that are the same for every map of a
  network: the map library (Leaflet, BSD-2, shipped in ``ev_nav/static/leaflet`` with its
  NOTICE) and the network's geometry. :func:`save_map` puts them once in a ``lib/`` folder beside
  the page (``lib/leaflet-1.9.4/``, copied unmodified and checked against the NOTICE's hashes;
  ``lib/network-<hash>.js``/``.svg``, named by their content) and the page links them by
  relative paths, so a state's trip maps each carry only their own routes and figures (a Monaco
  trip map: 177 KB instead of 2.26 MB). Moving a map means moving its folder (the page and
  ``lib/``); ``standalone=True`` instead inlines everything into one file to send around (see
  :func:`leaflet_inline_html`). Nothing is loaded from a CDN, and folium's other CDN links
  (jQuery, Bootstrap, icon fonts: unused by these maps) are dropped. Tiles are optional
  decoration: if they fail to load, the network, routes, markers and legend draw over a blank
  background, and panning and zooming work. If scripts are disabled altogether (or ``lib/`` did
  not travel with the page), a static SVG drawing of the routes (and the network, when small
  enough), built here in Python, is shown instead.
* **Readable routes.** The view is fitted to the routes (the network when there are none); the
  planned route gets start and end markers; routes are stacked widest first, each narrower one on
  top, so routes that share roads all stay visible (as nested bands) where they overlap.
* Maps are written atomically (:func:`save_map`): a reader never sees half a file.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import folium
import numpy as np
from branca.element import Element, MacroElement
from folium.template import Template as FoliumTemplate
from jinja2 import Template
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import EvNavError, InvalidNetworkData, UnknownSegmentError
from ev_nav.provenance import atomic_path, atomic_write_text
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.partial import route_coordinates
from ev_nav.viz import NO_DATA_COLOR, ColorScale, format_value

if TYPE_CHECKING:
    from ev_nav.bandits.agent import Route

#: Colours of the planned route and its alternatives, in legend order.
ROUTE_COLORS: tuple[str, ...] = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")

#: CSS class of route polylines (``<path class="... ev-nav-route ...">`` in the page).
ROUTE_CLASS = "ev-nav-route"
#: CSS class of the network layer's polylines.
NETWORK_CLASS = "ev-nav-network"
#: Element id of the legend box.
LEGEND_ID = "ev-nav-legend"
#: Element id of the static SVG shown when Leaflet cannot be loaded.
FALLBACK_ID = "ev-nav-fallback"

#: CSS classes of the start and end markers of the planned route.
START_CLASS = "ev-nav-start"
END_CLASS = "ev-nav-end"
#: CSS class of the charging-site markers (:attr:`RoadNetwork.chargers`).
CHARGER_CLASS = "ev-nav-charger"
#: CSS class and colour of the roads flagged as changed (:mod:`ev_nav.trips.changes`).
CHANGE_CLASS = "ev-nav-change"
CHANGE_COLOR = "#e6007e"

#: Above this many polyline vertices the offline SVG omits the network background (file size).
FALLBACK_MAX_NETWORK_VERTICES = 60_000

#: Version of the Leaflet files shipped in ``ev_nav/static/leaflet`` (see the NOTICE there).
LEAFLET_VERSION = "1.9.4"

#: Folder beside a saved map that holds the files it links (the library, the network drawing).
LIB_DIR = "lib"

_COORD_DECIMALS = 6  # ~0.1 m: finer than any map needs, keeps the HTML small


# ====================================================================== the map library
class MapLibraryMissing(EvNavError, FileNotFoundError):
    """The Leaflet files shipped with the package are missing (a broken installation)."""


class MapWriteError(EvNavError, OSError):
    """A map, or the shared files it links, could not be written."""


class MapPathError(EvNavError, ValueError):
    """A map file named without an extension the map is written in (it is HTML only)."""


#: The file extensions a map may be saved under: a map is one HTML page, in no other format.
MAP_EXTENSIONS: tuple[str, ...] = (".html", ".htm")


def check_map_path(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path` if it ends in one of :data:`MAP_EXTENSIONS`
    (any case), else :class:`MapPathError` naming them.

    A name without one (``--out mymap``, ``--out map.png``) would get an HTML page that neither
    a browser nor the user takes for one.
    """
    p = Path(path)
    if p.name.lower() in MAP_EXTENSIONS:  # '.html' alone is a hidden file's name, not a page's
        raise MapPathError(f"a map needs a file name: {p} has only the extension; give one "
                           f"such as {p.with_name('map.html')}")
    if p.suffix.lower() not in MAP_EXTENSIONS:
        hint = f" (e.g. {p.name}.html)" if not p.suffix else ""
        raise MapPathError(
            f"a map is an HTML page: {p} must end in {' or '.join(MAP_EXTENSIONS)}{hint}"
        )
    return p


def leaflet_file(name: str) -> bytes:
    """A file of the packaged Leaflet distribution (``leaflet.js``, ``images/layers.png``, ...).

    Raises
    ------
    MapLibraryMissing
        If the package was installed without its data files.
    """
    ref = resources.files("ev_nav").joinpath("static", "leaflet", *name.split("/"))
    try:
        return ref.read_bytes()
    except OSError as exc:
        raise MapLibraryMissing(
            f"ev-nav's packaged map library file leaflet/{name} is missing ({exc}); "
            "reinstall ev-nav (its package data was not installed)"
        ) from None


@functools.cache
def leaflet_hashes() -> dict[str, str]:
    """The packaged Leaflet files and their sha256, as listed in ``NOTICE.md`` beside them.

    Raises
    ------
    MapLibraryMissing
        If the NOTICE is missing or lists no file.
    """
    notice = leaflet_file("NOTICE.md").decode("utf-8")
    rows = dict(re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", notice, re.M))
    if not rows:
        raise MapLibraryMissing("ev-nav's leaflet/NOTICE.md lists no file hashes; reinstall ev-nav")
    return rows


def install_map_library(folder: str | Path) -> Path:
    """Copy the packaged Leaflet files into ``folder/leaflet-<version>/`` (once); return it.

    Each file already there is kept if its sha256 is the one ``NOTICE.md`` lists, and (re)written
    atomically otherwise (missing, partial or edited), so concurrent writers and readers only
    ever see complete files. The licence and the NOTICE go with the files.

    Raises
    ------
    MapLibraryMissing
        If a packaged file is missing or does not match its listed hash (a broken install).
    OSError
        If the folder cannot be written.
    """
    target = Path(folder) / f"leaflet-{LEAFLET_VERSION}"
    for name, digest in leaflet_hashes().items():
        dest = target / name
        if dest.is_file() and hashlib.sha256(dest.read_bytes()).hexdigest() == digest:
            continue
        data = leaflet_file(name)
        if hashlib.sha256(data).hexdigest() != digest:
            raise MapLibraryMissing(
                f"ev-nav's packaged map library file leaflet/{name} does not match the hash in "
                "its NOTICE.md (edited or damaged); reinstall ev-nav"
            )
        _write_bytes_if_changed(dest, data)
    _write_bytes_if_changed(target / "NOTICE.md", leaflet_file("NOTICE.md"))
    return target


def _write_bytes_if_changed(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically unless the file already holds exactly that."""
    if path.is_file() and path.read_bytes() == data:
        return
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


@functools.cache
def leaflet_inline_html() -> str:
    """Leaflet's stylesheet and script as inline ``<style>``/``<script>`` blocks for a page head.

    This is the standalone form (``save_map(..., standalone=True)``, ``ev-nav map
    --standalone``): one file a driver can send anywhere (a phone, an e-mail) that pans and zooms
    with no network and no ev-nav installed, at the cost of about 165 kB per page. Maps saved in
    a folder link one shared copy in ``lib/`` instead (:func:`install_map_library`): a state
    holds many trip maps, and a copy per page would be most of each. The stylesheet's images
    (the layer-control icon and the default marker) become data URIs; the source-map comment is
    dropped (it would point at a file that is not there). The server (:mod:`ev_nav.server`)
    serves the packaged files, which browsers then cache across pages.
    """
    js = leaflet_file("leaflet.js").decode("utf-8")
    js = re.sub(r"//# sourceMappingURL=\S+\s*$", "", js)
    css = leaflet_file("leaflet.css").decode("utf-8")

    def png_uri(name: str) -> str:
        return "data:image/png;base64," + base64.b64encode(leaflet_file(f"images/{name}")).decode()

    css = re.sub(r"url\(images/([\w.-]+\.png)\)", lambda m: f"url({png_uri(m[1])})", css)
    # An inline block ends at the first closing tag of its kind: make sure none hides inside.
    if "</script" in js.lower() or "</style" in css.lower():
        raise MapLibraryMissing("the packaged Leaflet files cannot be inlined (closing tag inside)")
    # Leaflet finds its default marker images beside its stylesheet; inline there is no such
    # place (a folium marker asks for them before its own icon replaces them), so name them
    icons = json.dumps(
        {
            "iconUrl": png_uri("marker-icon.png"),
            "iconRetinaUrl": png_uri("marker-icon-2x.png"),
            "shadowUrl": png_uri("marker-shadow.png"),
        }
    )
    return (
        f"<style>/* Leaflet {LEAFLET_VERSION} (BSD-2-Clause) */\n{css}</style>\n"
        f"<script>/* Leaflet {LEAFLET_VERSION} (BSD-2-Clause, (c) Volodymyr Agafonkin, "
        f"CloudMade) */\n{js}</script>\n"
        f"<script>L.Icon.Default.mergeOptions({icons});</script>"
    )


# ====================================================================== geometry helpers
def _check_segments(net: RoadNetwork, segments: ArrayLike, what: str) -> NDArray[np.int64]:
    seg = np.asarray(segments, dtype=np.int64).reshape(-1)
    if seg.size == 0:
        raise InvalidNetworkData(f"{what} is empty; a route needs at least one segment")
    bad = seg[(seg < 0) | (seg >= net.n_segments)]
    if bad.size:
        raise UnknownSegmentError(
            f"{what} has segment ids outside 0..{net.n_segments - 1}: {bad[:5].tolist()}; "
            "was it planned on another network?"
        )
    return seg


def route_latlon(
    net: RoadNetwork, segments: ArrayLike | tuple[ArrayLike, float, float]
) -> NDArray[np.float64]:
    """The route's polyline as (lat, lon) rows, consecutive duplicate vertices removed.

    ``segments`` is the route's segment ids, or ``(ids, start_fraction, end_fraction)`` for a
    route that starts and ends part-way along its end segments (only the driven part is drawn;
    :func:`ev_nav.roads.partial.route_coordinates`).
    """
    fs, fg = 0.0, 1.0
    if isinstance(segments, tuple):
        segments, fs, fg = segments
    seg = _check_segments(net, segments, "the route")
    lonlat = route_coordinates(net, seg, fs, fg, decimals=_COORD_DECIMALS)[:, :2]
    return lonlat[:, ::-1].copy()


def _segment_lines(net: RoadNetwork) -> list[list[list[float]]]:
    """Every segment's polyline as nested [lon, lat] lists (GeoJSON order), one slice each."""
    flat = np.round(net.geom_lonlat, _COORD_DECIMALS).tolist()
    off = net.geom_offsets.tolist()
    return [flat[a:b] for a, b in zip(off[:-1], off[1:], strict=True)]


def route_stats(
    net: RoadNetwork, segments: ArrayLike, mean_wh: ArrayLike | None = None
) -> dict[str, float]:
    """Length [km], free-flow time [min] and (if given) predicted energy [Wh] of a route of whole
    segments.

    No sd: the route's sd needs the model's joint posterior (segments' sds do not add up to it);
    a :class:`~ev_nav.bandits.agent.Route` carries it (:func:`route_label`).
    """
    seg = _check_segments(net, segments, "the route")
    out = {
        "length_km": float(net.length_m[seg].sum() / 1000.0),
        "time_min": float(net.travel_time_s[seg].sum() / 60.0),
    }
    if mean_wh is not None:
        out["energy_wh"] = float(np.asarray(mean_wh, dtype=np.float64)[seg].sum())
    return out


def _stats_label(stats: Mapping[str, float]) -> str:
    text = f"{stats['length_km']:.2f} km, {stats['time_min']:.1f} min"
    if "energy_wh" in stats:
        # "predicted": the figure is the model's belief, whatever the route is named after
        text += f", predicted {format_value(stats['energy_wh'])} Wh"
    return text


def route_label(route: Route) -> str:
    """A route's legend row and tooltip: its own figures as the route table prints them.

    Length [km] and time [min] of the part driven, predicted energy [Wh] ± the route's model
    sd [Wh] (:attr:`~ev_nav.bandits.agent.Route.predicted_sd_wh`, the joint posterior's: the
    model's uncertainty about the mean, not one drive's noise).
    """
    return (
        f"{route.length_m / 1000:.2f} km, {route.time_s / 60:.1f} min, predicted "
        f"{route.predicted_wh:.1f} ± {route.predicted_sd_wh:.1f} Wh (model sd)"
    )


def route_widths(n_routes: int) -> list[float]:
    """Stroke widths [px] of ``n_routes`` routes in legend order (the planned one first).

    Routes are drawn in this order, each narrower than the one below it, so where routes share
    roads each stays visible as a band of :data:`ROUTE_BAND_PX` on either side of the ones above.
    """
    return [ROUTE_MIN_WIDTH_PX + 2 * ROUTE_BAND_PX * (n_routes - 1 - k) for k in range(n_routes)]


#: Width of the narrowest (last) route [px] and of each route's visible band on either side of
#: the routes drawn over it [px].
ROUTE_MIN_WIDTH_PX = 3.0
ROUTE_BAND_PX = 2.0


# ====================================================================== HTML pieces
class _HtmlBlock(MacroElement):
    """Raw HTML placed in the page body, outside the map's scripts (renders without JS)."""

    _template = Template("{% macro html(this, kwargs) %}{{ this.content }}{% endmacro %}")

    def __init__(self, content: str) -> None:
        super().__init__()
        self._name = "EvNavHtml"
        self.content = content


_LEGEND_CSS = (
    "position:fixed;bottom:24px;right:12px;z-index:1000;background:rgba(255,255,255,0.92);"
    "padding:8px 10px;border:1px solid #888;border-radius:4px;font:12px/1.35 sans-serif;"
    "color:#222;max-width:320px;box-shadow:0 1px 4px rgba(0,0,0,0.3)"
)


def _colorbar_html(
    scale: ColorScale,
    title: str,
    has_no_data: bool,
    beyond: tuple[bool, bool] = (False, False),
    whole: bool = False,
    no_data: str = "no data",
) -> str:
    """A colour bar with ticks; ``beyond`` = (values below vmin, values above vmax) exist, shown
    as "≤"/"≥" on the end ticks so a clipped scale never passes for the data's true range.
    ``whole``: the values are counts, ticked at whole numbers only (a count scale from 1 to 2
    read "1, 1.19, 1.41, 1.68, 2" times driven). ``no_data``: the grey swatch's text."""
    stops = np.linspace(0.0, 1.0, 11)
    values = (
        np.exp(np.log(scale.vmin) + stops * (np.log(scale.vmax) - np.log(scale.vmin)))
        if scale.log
        else scale.vmin + stops * (scale.vmax - scale.vmin)
    )
    colors = scale.hex(values)
    gradient = ", ".join(f"{c} {100 * s:.0f}%" for c, s in zip(colors, stops, strict=True))
    ticks = scale.ticks(5)
    if whole:
        ticks = np.unique(np.round(ticks))
        ticks = ticks[(ticks >= scale.vmin) & (ticks <= scale.vmax)]
    # each tick where its value lies on the bar (even spacing, unless rounded to whole numbers)
    positions = scale.normalise(ticks)
    texts = [format_value(t) for t in ticks]
    if beyond[0]:
        texts[0] = "≤ " + texts[0]
    if beyond[1]:
        texts[-1] = "≥ " + texts[-1]
    tick_html = "".join(
        f'<span class="ev-nav-tick" style="position:absolute;'
        f"left:{100 * x:.0f}%;transform:translateX(-50%);"
        f'white-space:nowrap">{html.escape(t)}</span>'
        for x, t in zip(positions, texts, strict=True)
    )
    no_data = (
        f'<div style="margin-top:18px"><span style="display:inline-block;width:22px;height:4px;'
        f'background:{NO_DATA_COLOR};vertical-align:middle"></span> {html.escape(no_data)}</div>'
        if has_no_data
        else '<div style="height:14px"></div>'
    )
    return (
        f'<div class="ev-nav-colorbar"><b>{html.escape(title)}</b>'
        f"{' (log scale)' if scale.log else ''}"
        f'<div style="height:12px;width:240px;margin:4px 20px 0 20px;'
        f'background:linear-gradient(to right, {gradient})"></div>'
        f'<div style="position:relative;width:240px;margin:0 20px;height:14px">{tick_html}</div>'
        f"{no_data}</div>"
    )


def _routes_legend_html(entries: Sequence[tuple[str, str, str]], markers: bool) -> str:
    rows = "".join(
        f'<div class="ev-nav-legend-route"><span style="display:inline-block;width:26px;'
        f'height:5px;background:{color};vertical-align:middle;margin-right:6px"></span>'
        f"<b>{html.escape(name)}</b> {html.escape(label)}</div>"
        for name, color, label in entries
    )
    if markers:
        rows += (
            '<div class="ev-nav-legend-markers" style="margin-top:3px">'
            f"{_marker_badge('A', START_COLOR, 16)} start "
            f"{_marker_badge('B', END_COLOR, 16)} end</div>"
        )
    return f'<div style="margin-top:6px">{rows}</div>'


#: Fill colours of the start and end markers, and of the charging-site markers.
START_COLOR = "#1a9850"
END_COLOR = "#222222"
CHARGER_COLOR = "#2166ac"


def _marker_badge(letter: str, color: str, size: int) -> str:
    """A round lettered badge (marker icon and legend sample): plain HTML, no image."""
    return (
        f'<span style="display:inline-block;width:{size}px;height:{size}px;border-radius:50%;'
        f"background:{color};color:#fff;border:2px solid #fff;box-shadow:0 0 2px 1px #0008;"
        f"font:bold {int(size * 0.6)}px/{size}px sans-serif;text-align:center;"
        f'vertical-align:middle;box-sizing:content-box">{letter}</span>'
    )


def _legend(parts: Sequence[str], title: str | None = None) -> _HtmlBlock:
    head = (
        f'<div style="font-weight:bold;margin-bottom:4px">{html.escape(title)}</div>'
        if title
        else ""
    )
    return _HtmlBlock(
        f'<div id="{LEGEND_ID}" class="ev-nav-legend" style="{_LEGEND_CSS}">'
        f"{head}{''.join(parts)}</div>"
    )


# ====================================================================== shared page files
class _SvgFrame:
    """The offline drawing's projection (equirectangular, aspect-correct, fitted to the network):
    the same for every map of a network, so a shared network drawing lines up with a page's
    routes drawn over it."""

    def __init__(self, net: RoadNetwork, width: int = 900) -> None:
        lon0, lat0, lon1, lat1 = net.bounds()
        kx_deg = np.cos(np.radians(0.5 * (lat0 + lat1)))  # metres per degree lon vs lat
        span_x = max((lon1 - lon0) * kx_deg, 1e-9)
        span_y = max(lat1 - lat0, 1e-9)
        self.width = width
        self.height = int(np.clip(width * span_y / span_x, 200, 1400))
        scale = min((width - 20) / span_x, (self.height - 20) / span_y)
        self.kx, self.ky = scale * kx_deg, scale
        self.x0, self.y0 = lon0 - 10 / self.kx, lat1 + 10 / self.ky

    def points(self, lonlat: NDArray[np.float64]) -> list[str]:
        """``x,y`` [px] of (lon, lat) rows."""
        x = ((lonlat[:, 0] - self.x0) * self.kx).tolist()
        y = ((self.y0 - lonlat[:, 1]) * self.ky).tolist()
        return [f"{a:.1f},{b:.1f}" for a, b in zip(x, y, strict=True)]

    def d(self, latlon: NDArray[np.float64]) -> str:
        pts = self.points(latlon[:, ::-1])
        return "M" + pts[0] + ("L" + " ".join(pts[1:]) if len(pts) > 1 else "")

    def network_paths(self, net: RoadNetwork, colors: Sequence[str] | None) -> str:
        """Every segment as an SVG path (grey unless ``colors`` gives one per segment)."""
        pts = self.points(net.geom_lonlat)
        off = net.geom_offsets.tolist()
        cols = colors or ["#c8c8c8"] * net.n_segments
        return "".join(
            f'<path d="M{pts[a]}{"L" + " ".join(pts[a + 1 : b]) if b - a > 1 else ""}" '
            f'stroke="{c}" stroke-width="1.2"/>'
            for a, b, c in zip(off[:-1], off[1:], cols, strict=True)
        )

    def svg(self, body: str, style: str) -> str:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
            f'style="{style}" fill="none">{body}</svg>'
        )


#: Builds the network layer's GeoJSON in the browser from the network file (geometry and fixed
#: attributes, shared) and the page's own columns (colours, widths, tooltip values); an empty
#: layer if the network file did not load (the page was copied without its ``lib/`` folder).
_FEATURES_JS = """<script>
function evNavNetworkFeatures(key, page) {
  var net = (window.EV_NAV_NETWORKS || {})[key], feats = [];
  var pick = function (v, e) { return Array.isArray(v) ? v[e] : v; };
  if (!net) { return {type: "FeatureCollection", features: feats}; }
  for (var k = 0; k < net.offsets.length - 1; k++) {
    var e = page.order ? page.order[k] : k, line = [];
    for (var i = net.offsets[e]; i < net.offsets[e + 1]; i++) {
      line.push([net.lonlat[2 * i], net.lonlat[2 * i + 1]]);
    }
    var props = {segment: e, length_m: net.length_m[e], grade_pct: net.grade_pct[e],
      speed_kmh: net.speed_kmh[e], style: {color: pick(page.color, e),
      weight: pick(page.weight, e), opacity: page.opacity}};
    for (var name in page.extra) { props[name] = page.extra[name][e]; }
    feats.push({type: "Feature", geometry: {type: "LineString", coordinates: line},
      properties: props});
  }
  return {type: "FeatureCollection", features: feats};
}
</script>"""


class _PageAssets:
    """What a page needs besides its own data: Leaflet and the network's geometry.

    Both are the same for every map of a network. :func:`save_map` sets :attr:`linked` while it
    renders a page into a folder whose ``lib/`` holds them (written by :meth:`write_shared`);
    otherwise (``standalone``, a notebook's inline display) they are inlined.
    """

    def __init__(self, net: RoadNetwork) -> None:
        self.net = net
        self.frame = _SvgFrame(net)
        self.linked = False

    @functools.cached_property
    def _network_file(self) -> tuple[str, str]:
        """(key, text) of the network file: each segment's polyline and fixed tooltip fields,
        keyed by the hash of that data."""
        net = self.net
        data = {
            "offsets": net.geom_offsets.tolist(),
            "lonlat": np.round(net.geom_lonlat, _COORD_DECIMALS).reshape(-1).tolist(),
            "length_m": np.round(net.length_m, 1).tolist(),
            "grade_pct": np.round(net.grade * 100.0, 1).tolist(),
            "speed_kmh": np.round(net.speed_mps * 3.6, 0).astype(np.int64).tolist(),
        }
        body = json.dumps(data, separators=(",", ":"))
        key = hashlib.sha256(body.encode()).hexdigest()[:16]
        return key, (
            f"/* ev-nav road network {key}: {net.n_segments} segments, shared by the maps "
            f'in this folder */\n(window.EV_NAV_NETWORKS = window.EV_NAV_NETWORKS || {{}})["{key}"]'
            f" = {body};\n"
        )

    @property
    def network_key(self) -> str:
        return self._network_file[0]

    @property
    def network_js(self) -> str:
        return self._network_file[1]

    @functools.cached_property
    def network_svg(self) -> str | None:
        """The grey network drawing behind the offline view (``None`` above the size limit)."""
        if self.net.geom_lonlat.shape[0] > FALLBACK_MAX_NETWORK_VERTICES:
            return None
        return self.frame.svg(self.frame.network_paths(self.net, None), "")

    @property
    def network_js_name(self) -> str:
        return f"network-{self.network_key}.js"

    @functools.cached_property
    def network_svg_name(self) -> str | None:
        """Named by the drawing's own hash, as the network file is by its data's."""
        svg = self.network_svg
        if svg is None:
            return None
        return f"network-{hashlib.sha256(svg.encode()).hexdigest()[:16]}.svg"

    def write_shared(self, lib: Path) -> None:
        """Put Leaflet and this network's files into ``lib`` (each only if absent or changed)."""
        install_map_library(lib)
        _write_bytes_if_changed(lib / self.network_js_name, self.network_js.encode())
        if self.network_svg is not None and self.network_svg_name is not None:
            _write_bytes_if_changed(lib / self.network_svg_name, self.network_svg.encode())

    def head(self) -> str:
        if not self.linked:
            return f"{leaflet_inline_html()}\n<script>{self.network_js}</script>\n{_FEATURES_JS}"
        lib = f"{LIB_DIR}/leaflet-{LEAFLET_VERSION}"
        return (
            f'<link rel="stylesheet" href="{lib}/leaflet.css"/>\n'
            f'<script src="{lib}/leaflet.js"></script>\n'
            f'<script src="{LIB_DIR}/{self.network_js_name}"></script>\n{_FEATURES_JS}'
        )


class _Deferred(Element):
    """Text decided when the page is rendered (inline or linked assets): ``content()``."""

    _template = Template("{{ this.content() }}")

    def __init__(self, content: Any, name: str) -> None:
        super().__init__()
        self._name = name
        self.content = content


class _DeferredBody(MacroElement):
    """Like :class:`_Deferred`, placed in the page body (outside the map's scripts)."""

    _template = Template("{% macro html(this, kwargs) %}{{ this.content() }}{% endmacro %}")

    def __init__(self, content: Any) -> None:
        super().__init__()
        self._name = "EvNavHtml"
        self.content = content


# ====================================================================== offline SVG fallback
def _fallback_svg(
    assets: _PageAssets,
    lines: Sequence[tuple[NDArray[np.float64], str, float, str]],
    network_colors: Sequence[str] | None,
) -> _DeferredBody:
    """Static SVG shown only if Leaflet did not run (scripts disabled, or ``lib/`` missing).

    ``lines`` are (latlon polyline, colour, stroke width, css class) drawn over the network. A
    grey network comes from the shared drawing in ``lib/`` when the page links its files (an
    image under the routes, same projection); a coloured one (a layer map) is drawn inline.
    """
    frame = assets.frame
    routes = "".join(
        f'<path class="{cls}" d="{frame.d(latlon)}" stroke="{color}" stroke-width="{w:.1f}" '
        'stroke-linejoin="round" stroke-linecap="round"/>'
        for latlon, color, w, cls in lines
    )
    small = assets.net.geom_lonlat.shape[0] <= FALLBACK_MAX_NETWORK_VERTICES
    inline_net = (
        frame.network_paths(assets.net, network_colors) if small and network_colors else None
    )
    box = "position:absolute;inset:0;width:100%;height:100%"

    def content() -> str:
        back, body = "", routes
        if inline_net is not None:
            body = inline_net + routes
        elif assets.linked and assets.network_svg_name is not None:
            # alt="": a missing file (lib/ not copied) shows nothing rather than a broken icon
            back = f'<img src="{LIB_DIR}/{assets.network_svg_name}" alt="" style="{box}">'
        elif small:
            body = frame.network_paths(assets.net, None) + routes
        return (
            f'<div id="{FALLBACK_ID}" style="display:none;position:absolute;inset:0;'
            f'background:#f4f4f0;z-index:500">'
            '<div style="font:13px sans-serif;padding:6px 10px;color:#444">Static view: scripts '
            "are disabled or the map library did not load (a map saved with its lib/ folder "
            "needs that folder beside it), showing a drawing of the routes.</div>"
            f'<div style="position:relative;width:100%;height:calc(100vh - 40px)">{back}'
            f"{frame.svg(body, box)}</div></div>"
            f"<noscript><style>#{FALLBACK_ID}{{display:block !important}}</style></noscript>"
            "<script>window.addEventListener('load', function () {"
            f"if (typeof L === 'undefined') {{document.getElementById('{FALLBACK_ID}')"
            ".style.display = 'block';}});</script>"
        )

    # Shown when the Leaflet script did not define ``L``; <noscript> covers browsers with
    # scripts disabled.
    return _DeferredBody(content)


# ====================================================================== maps
#: Above this many segments the maps draw on a canvas: tens of thousands of SVG elements make
#: panning sluggish, while a canvas stays fast (paths are then not separate DOM elements).
CANVAS_ABOVE_SEGMENTS = 30_000


#: Padding between the fitted routes and the map's edge [px]; the bottom right leaves room for
#: the legend box so the route is not drawn underneath it.
FIT_PADDING_TOP_LEFT = (30, 30)
FIT_PADDING_BOTTOM_RIGHT = (60, 60)


def _base_map(
    assets: _PageAssets, tiles: str | None, fit: NDArray[np.float64] | None = None
) -> folium.Map:
    """A folium map with its Leaflet and network files (inline or linked, never a CDN), fitted
    to ``fit`` (lat, lon rows) or the whole network."""
    net = assets.net
    lon0, lat0, lon1, lat1 = net.bounds()
    m = folium.Map(
        location=[0.5 * (lat0 + lat1), 0.5 * (lon0 + lon1)],
        tiles=tiles,
        control_scale=True,
        # SVG paths for usual sizes: one DOM element per path, crisp at any zoom.
        prefer_canvas=net.n_segments > CANVAS_ABOVE_SEGMENTS,
    )
    # folium links Leaflet, jQuery, Bootstrap and icon fonts from CDNs; these maps use none but
    # Leaflet, which comes from the page or lib/ (instance attributes: other folium maps are
    # left as they are).
    m.default_js = []
    m.default_css = []
    m.get_root().header.add_child(_Deferred(assets.head, "EvNavHead"), name="leaflet", index=0)
    m._ev_nav_assets = assets  # type: ignore[attr-defined]  # read by save_map
    if fit is None:
        m.fit_bounds([[lat0, lon0], [lat1, lon1]])
    else:
        (la0, lo0), (la1, lo1) = fit.min(axis=0), fit.max(axis=0)
        m.fit_bounds(
            [[float(la0), float(lo0)], [float(la1), float(lo1)]],
            padding_top_left=FIT_PADDING_TOP_LEFT,
            padding_bottom_right=FIT_PADDING_BOTTOM_RIGHT,
        )
    return m


class _NetworkLayer(folium.GeoJson):
    """All segments as one GeoJSON layer, its features built in the browser from the network
    file and this page's columns (so the geometry is not repeated in every page)."""

    # folium's Template: it has the ``tojavascript`` filter
    _template = FoliumTemplate(
        """{% macro script(this, kwargs) %}
        var {{ this.get_name() }} = L.geoJson(null, {...{{ this.options | tojavascript }}});
        function {{ this.get_name() }}_add(data) { {{ this.get_name() }}.addData(data); }
        {{ this.get_name() }}_add(evNavNetworkFeatures({{ this.key | tojson }},
            {{ this.columns_json }}));
        {{ this.get_name() }}.setStyle(function (feature) { return feature.properties.style; });
        {% endmacro %}"""
    )

    def __init__(
        self, key: str, columns: dict[str, Any], fields: Sequence[str], **kwargs: Any
    ) -> None:
        # folium checks tooltip fields against the data it is given: one feature with the
        # properties the browser will build (never rendered into the page)
        prototype = {
            "type": "Feature",
            "geometry": {"type": "LineString", "coordinates": [[0.0, 0.0], [0.0, 0.0]]},
            "properties": dict.fromkeys(fields),
        }
        super().__init__({"type": "FeatureCollection", "features": [prototype]}, **kwargs)
        self.key = key
        # compact (the page is UTF-8: "±" as itself, not a 6-character escape), and with "<"
        # escaped so no value can close the <script> it sits in
        self.columns_json = json.dumps(
            columns, separators=(",", ":"), ensure_ascii=False
        ).replace("<", "\\u003c")


def _network_layer(
    assets: _PageAssets,
    colors: Sequence[str] | None,
    *,
    name: str,
    mean_wh: NDArray[np.float64] | None,
    sd_wh: NDArray[np.float64] | None,
    value: NDArray[np.float64] | None,
    value_label: str,
    nan_text: str | None = None,
    weight: float | NDArray[np.float64],
    opacity: float,
) -> folium.GeoJson:
    """All segments as one GeoJSON layer with per-feature style and tooltip fields
    (``colors`` per segment, or ``None`` for one grey); ``nan_text`` stands for a NaN value in the
    tooltips (default "n/a")."""
    net = assets.net
    n = net.n_segments
    fields = ["segment", "length_m", "grade_pct", "speed_kmh"]
    aliases = ["segment", "length [m]", "grade [%]", "speed limit [km/h]"]
    extra: dict[str, list[str]] = {}
    if mean_wh is not None:
        sd_txt = (
            [f" ± {format_value(s)}" for s in sd_wh.tolist()] if sd_wh is not None else [""] * n
        )
        extra["predicted_wh"] = [
            f"{format_value(m)}{s}" for m, s in zip(mean_wh.tolist(), sd_txt, strict=True)
        ]
        fields.append("predicted_wh")
        aliases.append("predicted [Wh]")
    if value is not None:
        extra["value"] = [
            nan_text if nan_text is not None and not np.isfinite(v) else format_value(v)
            for v in value.tolist()
        ]
        fields.append("value")
        aliases.append(value_label)
    w = np.asarray(weight, dtype=np.float64)
    columns: dict[str, Any] = {
        # Later features are drawn on top: no-data first, high values last, so that of the two
        # overlapping directions of a street the driven / extreme one shows.
        "order": (
            np.argsort(np.nan_to_num(value, nan=-np.inf), kind="stable").tolist()
            if value is not None
            else None
        ),
        "color": list(colors) if colors is not None else "#7a7a7a",
        "weight": float(w.round(2)) if w.ndim == 0 else np.broadcast_to(w, (n,)).round(2).tolist(),
        "opacity": opacity,
        "extra": extra,
    }
    return _NetworkLayer(
        assets.network_key,
        columns,
        fields,
        name=name,
        tooltip=folium.GeoJsonTooltip(fields=fields, aliases=aliases, sticky=True),
        className=NETWORK_CLASS,
    )


def _as_values(net: RoadNetwork, values: ArrayLike | None, what: str) -> NDArray[np.float64] | None:
    if values is None:
        return None
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.shape[0] != net.n_segments:
        raise InvalidNetworkData(
            f"{what} has {v.shape[0]} values but the network has {net.n_segments} segments"
        )
    return v


def _add_routes(
    m: folium.Map,
    net: RoadNetwork,
    routes: Mapping[str, NDArray[np.float64]],
    labels: Mapping[str, str],
    figures: Mapping[str, Route],
    mean_wh: NDArray[np.float64] | None,
    segments: Mapping[str, ArrayLike],
) -> tuple[list[tuple[str, str, str]], list[tuple[NDArray[np.float64], str, float, str]]]:
    """Draw routes (``routes``: name -> lat/lon rows; the first is the planned one) widest first,
    then the planned route's start and end markers; return legend rows and SVG lines. A route's
    text (legend row and tooltip, the same) is its ``labels`` entry, else its own ``figures``,
    else what the network's per-segment means give."""
    legend: list[tuple[str, str, str]] = []
    svg: list[tuple[NDArray[np.float64], str, float, str]] = []
    widths = route_widths(len(routes))
    for k, (name, latlon) in enumerate(routes.items()):
        color = ROUTE_COLORS[k % len(ROUTE_COLORS)]
        if name in labels:
            label = labels[name]
        elif name in figures:
            label = route_label(figures[name])
        else:
            label = _stats_label(route_stats(net, segments[name], mean_wh))
        cls = f"{ROUTE_CLASS} {ROUTE_CLASS}-{k}"
        folium.PolyLine(
            latlon.tolist(),
            color=color,
            weight=widths[k],
            # opaque and solid: a band of an overlapped route must show its own colour
            opacity=1.0,
            line_cap="butt",
            class_name=cls,
            smooth_factor=0.0,  # draw every vertex: the route must be exact, not simplified
            tooltip=f"{html.escape(name)}: {html.escape(label)}",
        ).add_to(folium.FeatureGroup(name=f"route: {name}").add_to(m))
        legend.append((name, color, label))
        svg.append((latlon, color, widths[k], cls))
    main = next(iter(routes.values()))
    for latlon, letter, color, cls, what in (
        (main[0], "A", START_COLOR, START_CLASS, "start"),
        (main[-1], "B", END_COLOR, END_CLASS, "end"),
    ):
        folium.Marker(
            latlon.tolist(),
            icon=folium.DivIcon(
                html=_marker_badge(letter, color, 18),
                icon_size=(22, 22),
                icon_anchor=(11, 11),  # the badge's centre sits on the point
                class_name=f"ev-nav-marker {cls}",
            ),
            tooltip=f"{what} of the {html.escape(next(iter(routes)))}",
        ).add_to(m)
    return legend, svg  # svg in drawing order: widest (planned) first


def _charger_label(net: RoadNetwork, i: int) -> str:
    """Tooltip text of charging site ``i``: its name and operator, and each plug's power."""
    c = net.chargers
    plugs = ", ".join(f"{p} {format_value(kw)} kW" for p, kw in c.plugs(i).items())
    who = " · ".join(x for x in (c.name[i], c.operator[i]) if x) or "charging site"
    return f"{who}: {plugs or 'plugs not known'}"


def _add_chargers(m: folium.Map, net: RoadNetwork) -> str | None:
    """Draw the network's charging sites as small badges with their name and power (one layer);
    return the legend row, or ``None`` when the network has none."""
    if not len(net.chargers):
        return None
    group = folium.FeatureGroup(name="charging sites").add_to(m)
    for i in range(len(net.chargers)):
        folium.Marker(
            [float(net.chargers.lat[i]), float(net.chargers.lon[i])],
            icon=folium.DivIcon(
                html=_marker_badge("C", CHARGER_COLOR, 12),
                icon_size=(16, 16),
                icon_anchor=(8, 8),
                class_name=f"ev-nav-marker {CHARGER_CLASS}",
            ),
            tooltip=html.escape(_charger_label(net, i)),
        ).add_to(group)
    return (
        f'<div class="ev-nav-legend-chargers" style="margin-top:3px">'
        f"{_marker_badge('C', CHARGER_COLOR, 12)} charging site ({len(net.chargers):,})</div>"
    )


def _add_changes(
    m: folium.Map, net: RoadNetwork, changes: Mapping[int, str]
) -> tuple[str, list[tuple[NDArray[np.float64], str, float, str]]]:
    """Draw the roads flagged as changed (``changes``: segment -> tooltip text) as one layer of
    wide magenta lines over the network; return the legend row and their SVG lines."""
    group = folium.FeatureGroup(name="changed roads").add_to(m)
    svg = []
    for e, text in changes.items():
        latlon = route_latlon(net, [int(e)])
        folium.PolyLine(
            latlon.tolist(), color=CHANGE_COLOR, weight=7.0, opacity=0.85, line_cap="round",
            class_name=CHANGE_CLASS, tooltip=html.escape(f"segment {int(e)}: {text}"),
        ).add_to(group)
        svg.append((latlon, CHANGE_COLOR, 7.0, CHANGE_CLASS))
    row = (
        '<div class="ev-nav-legend-changes" style="margin-top:3px">'
        f'<span style="display:inline-block;width:18px;height:5px;background:{CHANGE_COLOR};'
        f'vertical-align:middle"></span> road flagged as changed ({len(changes):,})</div>'
    )
    return row, svg


def network_map(
    net: RoadNetwork,
    values: ArrayLike | None = None,
    *,
    layer_name: str = "segments",
    legend_title: str = "value",
    mean_wh: ArrayLike | None = None,
    sd_wh: ArrayLike | None = None,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    log_scale: bool = False,
    counts: bool = False,
    routes: Mapping[str, ArrayLike] | None = None,
    route_labels: Mapping[str, str] | None = None,
    route_figures: Mapping[str, Route] | None = None,
    weight: float | ArrayLike = 3.0,
    title: str | None = None,
    tiles: str | None = "OpenStreetMap",
    path: str | Path | None = None,
    fit_to_routes: bool = True,
    standalone: bool = False,
    chargers: bool = True,
    changes: Mapping[int, str] | None = None,
) -> folium.Map:
    """The whole network coloured by a per-segment value, with a colour legend and tooltips.

    Parameters
    ----------
    net : RoadNetwork
        The network.
    values : array_like, shape (n_segments,), optional
        Value that colours each segment (posterior mean, sd, visits, Wh/km, …); NaN = no data
        (grey). Without values every segment is drawn grey.
    layer_name, legend_title : str
        Layer name in the layer control; title of the colour bar (include units).
    mean_wh, sd_wh : array_like, shape (n_segments,), optional
        Predicted energy [Wh] and its sd per segment, shown in the tooltips.
    cmap, vmin, vmax, log_scale
        Colour scale (see :class:`ev_nav.viz.ColorScale`; default range 2nd–98th percentile).
    counts : bool
        The values are counts, NaN where none (drawn grey): the colour bar is ticked at whole
        numbers, and a grey segment reads 0 in its tooltip and the legend (not "n/a", "no data").
    routes : mapping name -> segment ids, optional
        Routes drawn over the network (first one emphasised), listed in the legend.
    route_labels : mapping name -> str, optional
        Legend and tooltip text per route (default: its ``route_figures``, else its length,
        time and predicted energy from ``mean_wh``, without an sd).
    route_figures : mapping name -> Route, optional
        Each route's own figures (:class:`~ev_nav.bandits.agent.Route`, e.g. from
        :func:`~ev_nav.bandits.agent.describe_route`), shown as the route table shows them:
        predicted Wh ± model sd (:func:`route_label`).
    weight : float or array_like
        Line width [px], scalar or per segment.
    title : str, optional
        Legend heading.
    tiles : str or None
        Folium tile layer name; ``None`` for a blank background (fully offline).
    path : path, optional
        If given, the HTML is written there atomically (:func:`save_map`).
    fit_to_routes : bool
        Open the map fitted to the routes (default) rather than to the whole network.
    standalone : bool
        With ``path``: one self-contained file instead of a page linking ``lib/`` beside it.
    chargers : bool
        Draw the network's charging sites (:attr:`RoadNetwork.chargers`), each with its name
        and plug powers in a tooltip.
    changes : mapping segment id -> str, optional
        Roads flagged as changed (``ev-nav changes``), drawn over the network with the text as
        their tooltip and counted in the legend.
    """
    v = _as_values(net, values, "values")
    mean = _as_values(net, mean_wh, "mean_wh")
    sd = _as_values(net, sd_wh, "sd_wh")
    lines = {name: route_latlon(net, segs) for name, segs in (routes or {}).items()}
    fit = np.concatenate(list(lines.values())) if lines and fit_to_routes else None
    assets = _PageAssets(net)
    m = _base_map(assets, tiles, fit)
    parts: list[str] = []
    if v is not None:
        scale = ColorScale.fit(v, cmap=cmap, vmin=vmin, vmax=vmax, log=log_scale)
        colors = scale.hex(v)
        finite = v[np.isfinite(v)]
        beyond = (
            bool(finite.size and finite.min() < scale.vmin),
            bool(finite.size and finite.max() > scale.vmax),
        )
        parts.append(
            _colorbar_html(
                scale, legend_title, bool(np.isnan(v).any()), beyond, whole=counts,
                no_data="0" if counts else "no data",
            )
        )
    else:
        colors = None
    layer = _network_layer(
        assets,
        colors,
        name=layer_name,
        mean_wh=mean,
        sd_wh=sd,
        value=v,
        value_label=legend_title,
        nan_text="0" if counts else None,
        weight=weight,
        opacity=0.9,
    )
    layer.add_to(m)
    svg_lines: list[tuple[NDArray[np.float64], str, float, str]] = []
    if routes:
        legend_rows, svg_lines = _add_routes(
            m, net, lines, route_labels or {}, route_figures or {}, mean, routes
        )
        parts.append(_routes_legend_html(legend_rows, markers=True))
    charger_row = _add_chargers(m, net) if chargers else None
    if charger_row is not None:
        parts.append(charger_row)
    if changes:
        _check_segments(net, list(changes), "the changed roads")
        change_row, change_lines = _add_changes(m, net, changes)
        parts.append(change_row)
        svg_lines = [*svg_lines, *change_lines]
    folium.LayerControl(collapsed=True).add_to(m)
    m.add_child(_legend(parts, title))
    m.add_child(_fallback_svg(assets, svg_lines, colors))
    if path is not None:
        save_map(m, path, standalone=standalone)
    return m


def route_map(
    net: RoadNetwork,
    route_segments: ArrayLike,
    alternatives: Mapping[str, ArrayLike] | None = None,
    *,
    route_name: str = "planned route",
    mean_wh: ArrayLike | None = None,
    sd_wh: ArrayLike | None = None,
    route_labels: Mapping[str, str] | None = None,
    route_figures: Mapping[str, Route] | None = None,
    color_by: ArrayLike | None = None,
    legend_title: str = "predicted energy [Wh/km]",
    title: str | None = None,
    tiles: str | None = "OpenStreetMap",
    path: str | Path | None = None,
    standalone: bool = False,
) -> folium.Map:
    """A planned route and its alternatives (e.g. shortest, fastest) over the network.

    The network is drawn faint (or coloured by ``color_by``, e.g. predicted Wh/km); the routes are
    drawn on top, the planned one solid and the alternatives dashed, each listed in the legend (and
    its tooltip) with length, time and predicted energy: ± model sd where ``route_figures`` gives
    the route's own figures, the mean from ``mean_wh`` otherwise, unless ``route_labels`` gives
    the text. ``mean_wh``/``sd_wh`` are also the network's per-segment tooltips. Parameters as in
    :func:`network_map`.
    """
    routes: dict[str, ArrayLike] = {route_name: route_segments}
    for name, segs in (alternatives or {}).items():
        if name == route_name:
            raise InvalidNetworkData(f"alternative named like the planned route: {name!r}")
        routes[name] = segs
    weight = 2.0 if color_by is None else 3.0
    return network_map(
        net,
        color_by,
        layer_name="network",
        legend_title=legend_title,
        mean_wh=mean_wh,
        sd_wh=sd_wh,
        routes=routes,
        route_labels=route_labels,
        route_figures=route_figures,
        weight=weight,
        title=title,
        tiles=tiles,
        path=path,
        standalone=standalone,
    )


def visits_map(
    net: RoadNetwork,
    visits: ArrayLike,
    *,
    highlight: Mapping[str, ArrayLike] | None = None,
    legend_title: str = "times driven",
    title: str | None = None,
    cmap: str = "plasma",
    tiles: str | None = "OpenStreetMap",
    path: str | Path | None = None,
    standalone: bool = False,
    changes: Mapping[int, str] | None = None,
) -> folium.Map:
    """Exploration map: segments coloured by how often they were driven (log scale).

    Never-driven segments are thin and grey; line width grows with the visit count, so the
    explored corridors stand out as in the exploration figures of the paper. ``highlight`` routes
    (e.g. the optimal path) are drawn on top; the view shows the whole network. The colour bar
    runs from 1 to the true maximum count (never a percentile that would clip the most driven
    segments). ``changes`` marks the roads flagged as changed, as in :func:`network_map`.
    """
    counts = _as_values(net, visits, "visits")
    if np.any(counts < 0) or not np.all(np.isfinite(counts)):
        raise InvalidNetworkData("visit counts must be finite and >= 0")
    shown = np.where(counts > 0, counts, np.nan)
    vmax = max(float(counts.max()), 2.0)
    weight = np.where(counts > 0, 2.0 + 3.0 * np.log1p(counts) / np.log1p(vmax), 1.0)
    return network_map(
        net,
        shown,
        layer_name="visits",
        legend_title=legend_title,
        cmap=cmap,
        vmin=1.0,
        vmax=vmax,
        log_scale=True,
        counts=True,
        routes=highlight,
        weight=weight,
        title=title,
        tiles=tiles,
        path=path,
        fit_to_routes=False,
        standalone=standalone,
        chargers=False,  # an exploration map: where the car drove, not where it can charge
        changes=changes,
    )


def save_map(m: folium.Map, path: str | Path, *, standalone: bool = False) -> Path:
    """Render ``m`` to an HTML file (``path`` ends in ``.html`` or ``.htm``), atomically; return
    the path.

    By default the page links the map library and the network drawing from ``lib/`` beside it
    (written there first, once per folder: see :func:`install_map_library`), so the maps of a
    state share one copy; the folder (page and ``lib/``) can be moved or copied as a whole. With
    ``standalone`` everything is inlined into one file that works anywhere on its own (~0.2 MB
    more per page, plus the network). A folium map not made here is rendered as it is.
    """
    target = check_map_path(path)
    assets: _PageAssets | None = getattr(m, "_ev_nav_assets", None)
    try:
        if assets is None or standalone:
            atomic_write_text(target, m.get_root().render())
            return target
        try:
            assets.write_shared(target.parent / LIB_DIR)
        except MapLibraryMissing:
            raise
        except OSError as exc:
            raise MapWriteError(
                f"cannot write the map library to {target.parent / LIB_DIR} ({exc}); a map "
                "saved in a folder links its files there: choose another folder, or save a "
                "standalone map (ev-nav map --standalone)"
            ) from None
        assets.linked = True
        try:
            page = m.get_root().render()
        finally:
            assets.linked = False
        atomic_write_text(target, page)
    except EvNavError:
        raise
    except OSError as exc:
        raise MapWriteError(f"cannot write the map {target} ({exc})") from None
    return target


__all__ = [
    "CHARGER_CLASS",
    "FALLBACK_ID",
    "LEGEND_ID",
    "NETWORK_CLASS",
    "LIB_DIR",
    "MAP_EXTENSIONS",
    "MapLibraryMissing",
    "MapPathError",
    "MapWriteError",
    "ROUTE_CLASS",
    "install_map_library",
    "network_map",
    "route_latlon",
    "route_label",
    "route_map",
    "route_stats",
    "check_map_path",
    "save_map",
    "visits_map",
]
