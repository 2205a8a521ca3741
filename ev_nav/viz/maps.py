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
* **Offline, one file.** The map library (Leaflet, BSD-2, shipped in ``ev_nav/static/leaflet``
  with its NOTICE) is *inlined* into every page: its script, its stylesheet and the stylesheet's
  images as data URIs. Nothing is loaded from a CDN, and folium's other CDN links (jQuery,
  Bootstrap, icon fonts: unused by these maps) are dropped. See :func:`leaflet_inline_html` for
  why inlining beats linking packaged files beside the map. Tiles are optional decoration: if
  they fail to load, the network, routes, markers and legend draw over a blank background, and
  panning and zooming work. If scripts are disabled altogether, a static SVG drawing of the
  routes (and the network, when small enough), built here in Python, is shown instead.
* **Readable routes.** The view is fitted to the routes (the network when there are none); the
  planned route gets start and end markers; routes are stacked widest first, each narrower one on
  top, so routes that share roads all stay visible (as nested bands) where they overlap.
* Maps are written atomically (:func:`save_map`): a reader never sees half a file.
"""

from __future__ import annotations

import base64
import functools
import html
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import folium
import numpy as np
from branca.element import Element, MacroElement
from jinja2 import Template
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import EvNavError, InvalidNetworkData, UnknownSegmentError
from ev_nav.provenance import atomic_write_text
from ev_nav.roads.network import RoadNetwork
from ev_nav.viz import NO_DATA_COLOR, ColorScale, format_value

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

#: Above this many polyline vertices the offline SVG omits the network background (file size).
FALLBACK_MAX_NETWORK_VERTICES = 60_000

#: Version of the Leaflet files shipped in ``ev_nav/static/leaflet`` (see the NOTICE there).
LEAFLET_VERSION = "1.9.4"

_COORD_DECIMALS = 6  # ~0.1 m: finer than any map needs, keeps the HTML small


# ====================================================================== the map library
class MapLibraryMissing(EvNavError, FileNotFoundError):
    """The Leaflet files shipped with the package are missing (a broken installation)."""


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
def leaflet_inline_html() -> str:
    """Leaflet's stylesheet and script as inline ``<style>``/``<script>`` blocks for a page head.

    Why inline rather than link ``leaflet.js`` installed beside the map: a driver copies *one*
    file (to a phone, a USB stick, an e-mail); a page that links ``leaflet/leaflet.js`` breaks as
    soon as it leaves its folder, and one that links the installed package breaks on any other
    machine. Inlining costs about 165 kB per page (small next to a network layer) and makes each
    map a self-contained file that pans and zooms with no network and no ev-nav installed.
    The stylesheet's images (the layer-control icon and the default marker) become data URIs for
    the same reason; the source-map comment is dropped (it would point at a file that is not
    there). The server (:mod:`ev_nav.server`) instead serves the packaged files, which browsers
    then cache across pages.
    """
    js = leaflet_file("leaflet.js").decode("utf-8")
    js = re.sub(r"//# sourceMappingURL=\S+\s*$", "", js)
    css = leaflet_file("leaflet.css").decode("utf-8")

    def data_uri(match: re.Match[str]) -> str:
        png = base64.b64encode(leaflet_file(f"images/{match.group(1)}")).decode("ascii")
        return f"url(data:image/png;base64,{png})"

    css = re.sub(r"url\(images/([\w.-]+\.png)\)", data_uri, css)
    # An inline block ends at the first closing tag of its kind: make sure none hides inside.
    if "</script" in js.lower() or "</style" in css.lower():
        raise MapLibraryMissing("the packaged Leaflet files cannot be inlined (closing tag inside)")
    return (
        f"<style>/* Leaflet {LEAFLET_VERSION} (BSD-2-Clause) */\n{css}</style>\n"
        f"<script>/* Leaflet {LEAFLET_VERSION} (BSD-2-Clause, (c) Volodymyr Agafonkin, "
        f"CloudMade) */\n{js}</script>"
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


def route_latlon(net: RoadNetwork, segments: ArrayLike) -> NDArray[np.float64]:
    """The route's polyline as (lat, lon) rows, consecutive duplicate vertices removed.

    Segment ``e``'s polyline ends where the next one starts; the shared vertex is kept once.
    """
    seg = _check_segments(net, segments, "the route")
    off = net.geom_offsets
    starts, stops = off[seg], off[seg + 1]
    lengths = stops - starts
    idx = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    idx = idx + np.arange(int(lengths.sum()))
    lonlat = np.round(net.geom_lonlat[idx], _COORD_DECIMALS)
    keep = np.ones(lonlat.shape[0], dtype=bool)
    keep[1:] = np.any(lonlat[1:] != lonlat[:-1], axis=1)
    return lonlat[keep][:, ::-1].copy()


def _segment_lines(net: RoadNetwork) -> list[list[list[float]]]:
    """Every segment's polyline as nested [lon, lat] lists (GeoJSON order), one slice each."""
    flat = np.round(net.geom_lonlat, _COORD_DECIMALS).tolist()
    off = net.geom_offsets.tolist()
    return [flat[a:b] for a, b in zip(off[:-1], off[1:], strict=True)]


def route_stats(
    net: RoadNetwork,
    segments: ArrayLike,
    mean_wh: ArrayLike | None = None,
    sd_wh: ArrayLike | None = None,
) -> dict[str, float]:
    """Length [km], free-flow time [min] and (if given) predicted energy [Wh] of a route.

    The energy sd assumes independent segments (``sqrt(sum sd^2)``); callers with the joint
    posterior should pass their own figure through ``route_labels``.
    """
    seg = _check_segments(net, segments, "the route")
    out = {
        "length_km": float(net.length_m[seg].sum() / 1000.0),
        "time_min": float(net.travel_time_s[seg].sum() / 60.0),
    }
    if mean_wh is not None:
        out["energy_wh"] = float(np.asarray(mean_wh, dtype=np.float64)[seg].sum())
    if sd_wh is not None:
        out["energy_sd_wh"] = float(np.sqrt(np.sum(np.asarray(sd_wh, dtype=np.float64)[seg] ** 2)))
    return out


def _stats_label(stats: Mapping[str, float]) -> str:
    text = f"{stats['length_km']:.2f} km, {stats['time_min']:.1f} min"
    if "energy_wh" in stats:
        # "predicted": the figure is the model's belief, whatever the route is named after
        text += f", predicted {format_value(stats['energy_wh'])}"
        if "energy_sd_wh" in stats:
            text += f" ± {format_value(stats['energy_sd_wh'])}"
        text += " Wh"
    return text


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


class _RawHead(Element):
    """Raw text for the page head (a MacroElement there would render into the body)."""

    _template = Template("{{ this.content }}")

    def __init__(self, content: str) -> None:
        super().__init__()
        self._name = "EvNavHead"
        self.content = content


_LEGEND_CSS = (
    "position:fixed;bottom:24px;right:12px;z-index:1000;background:rgba(255,255,255,0.92);"
    "padding:8px 10px;border:1px solid #888;border-radius:4px;font:12px/1.35 sans-serif;"
    "color:#222;max-width:320px;box-shadow:0 1px 4px rgba(0,0,0,0.3)"
)


def _colorbar_html(
    scale: ColorScale, title: str, has_no_data: bool, beyond: tuple[bool, bool] = (False, False)
) -> str:
    """A colour bar with ticks; ``beyond`` = (values below vmin, values above vmax) exist, shown
    as "≤"/"≥" on the end ticks so a clipped scale never passes for the data's true range."""
    stops = np.linspace(0.0, 1.0, 11)
    values = (
        np.exp(np.log(scale.vmin) + stops * (np.log(scale.vmax) - np.log(scale.vmin)))
        if scale.log
        else scale.vmin + stops * (scale.vmax - scale.vmin)
    )
    colors = scale.hex(values)
    gradient = ", ".join(f"{c} {100 * s:.0f}%" for c, s in zip(colors, stops, strict=True))
    ticks = scale.ticks(5)
    texts = [format_value(t) for t in ticks]
    if beyond[0]:
        texts[0] = "≤ " + texts[0]
    if beyond[1]:
        texts[-1] = "≥ " + texts[-1]
    # ticks are evenly spaced on the scale (linear or log), so evenly spaced on the bar
    tick_html = "".join(
        f'<span class="ev-nav-tick" style="position:absolute;'
        f"left:{100 * i / (len(ticks) - 1):.0f}%;transform:translateX(-50%);"
        f'white-space:nowrap">{html.escape(t)}</span>'
        for i, t in enumerate(texts)
    )
    no_data = (
        f'<div style="margin-top:18px"><span style="display:inline-block;width:22px;height:4px;'
        f'background:{NO_DATA_COLOR};vertical-align:middle"></span> no data</div>'
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


#: Fill colours of the start and end markers.
START_COLOR = "#1a9850"
END_COLOR = "#222222"


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


# ====================================================================== offline SVG fallback
def _fallback_svg(
    net: RoadNetwork,
    lines: Sequence[tuple[NDArray[np.float64], str, float, str]],
    network_colors: Sequence[str] | None,
    width: int = 900,
) -> _HtmlBlock:
    """Static SVG (equirectangular, aspect-correct) shown only if Leaflet did not run (scripts
    disabled; the library itself is inlined).

    ``lines`` are (latlon polyline, colour, stroke width, css class) drawn over the network.
    """
    lon0, lat0, lon1, lat1 = net.bounds()
    kx_deg = np.cos(np.radians(0.5 * (lat0 + lat1)))  # metres per degree lon vs lat
    span_x = max((lon1 - lon0) * kx_deg, 1e-9)
    span_y = max(lat1 - lat0, 1e-9)
    height = int(np.clip(width * span_y / span_x, 200, 1400))
    scale = min((width - 20) / span_x, (height - 20) / span_y)
    kx, ky = scale * kx_deg, scale
    x0, y0 = lon0 - 10 / kx, lat1 + 10 / ky

    def d(latlon: NDArray[np.float64]) -> str:
        x = (latlon[:, 1] - x0) * kx
        y = (y0 - latlon[:, 0]) * ky
        pts = [f"{a:.1f},{b:.1f}" for a, b in zip(x.tolist(), y.tolist(), strict=True)]
        return "M" + pts[0] + ("L" + " ".join(pts[1:]) if len(pts) > 1 else "")

    parts: list[str] = []
    if net.geom_lonlat.shape[0] <= FALLBACK_MAX_NETWORK_VERTICES:
        off = net.geom_offsets
        lonlat = net.geom_lonlat
        colors = network_colors or ["#c8c8c8"] * net.n_segments
        for e in range(net.n_segments):
            seg = lonlat[off[e] : off[e + 1]][:, ::-1]
            parts.append(f'<path d="{d(seg)}" stroke="{colors[e]}" stroke-width="1.2"/>')
    for latlon, color, w, cls in lines:
        parts.append(
            f'<path class="{cls}" d="{d(latlon)}" stroke="{color}" stroke-width="{w:.1f}" '
            'stroke-linejoin="round" stroke-linecap="round"/>'
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'style="width:100%;height:calc(100vh - 40px)" fill="none">{"".join(parts)}</svg>'
    )
    # Shown when the Leaflet script did not define ``L`` (no network, no cache); <noscript> covers
    # browsers with scripts disabled.
    return _HtmlBlock(
        f'<div id="{FALLBACK_ID}" style="display:none;position:absolute;inset:0;'
        f'background:#f4f4f0;z-index:500">'
        '<div style="font:13px sans-serif;padding:6px 10px;color:#444">Static view: scripts '
        "are disabled or the map library did not run, showing a drawing of the routes.</div>"
        f"{svg}</div>"
        f"<noscript><style>#{FALLBACK_ID}{{display:block !important}}</style></noscript>"
        "<script>window.addEventListener('load', function () {"
        f"if (typeof L === 'undefined') {{document.getElementById('{FALLBACK_ID}')"
        ".style.display = 'block';}});</script>"
    )


# ====================================================================== maps
#: Above this many segments the maps draw on a canvas: tens of thousands of SVG elements make
#: panning sluggish, while a canvas stays fast (paths are then not separate DOM elements).
CANVAS_ABOVE_SEGMENTS = 30_000


#: Padding between the fitted routes and the map's edge [px]; the bottom right leaves room for
#: the legend box so the route is not drawn underneath it.
FIT_PADDING_TOP_LEFT = (30, 30)
FIT_PADDING_BOTTOM_RIGHT = (60, 60)


def _base_map(
    net: RoadNetwork, tiles: str | None, fit: NDArray[np.float64] | None = None
) -> folium.Map:
    """A folium map with Leaflet inlined (no CDN), fitted to ``fit`` (lat, lon rows) or the
    whole network."""
    lon0, lat0, lon1, lat1 = net.bounds()
    m = folium.Map(
        location=[0.5 * (lat0 + lat1), 0.5 * (lon0 + lon1)],
        tiles=tiles,
        control_scale=True,
        # SVG paths for usual sizes: one DOM element per path, crisp at any zoom.
        prefer_canvas=net.n_segments > CANVAS_ABOVE_SEGMENTS,
    )
    # folium links Leaflet, jQuery, Bootstrap and icon fonts from CDNs; these maps use none but
    # Leaflet, which goes inline (instance attributes: other folium maps are left as they are).
    m.default_js = []
    m.default_css = []
    m.get_root().header.add_child(_RawHead(leaflet_inline_html()), name="leaflet", index=0)
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


def _network_layer(
    net: RoadNetwork,
    colors: Sequence[str],
    *,
    name: str,
    mean_wh: NDArray[np.float64] | None,
    sd_wh: NDArray[np.float64] | None,
    value: NDArray[np.float64] | None,
    value_label: str,
    weight: float | NDArray[np.float64],
    opacity: float,
) -> folium.GeoJson:
    """All segments as one GeoJSON layer with per-feature style and tooltip fields."""
    n = net.n_segments
    lines = _segment_lines(net)
    length = np.round(net.length_m, 1).tolist()
    grade = np.round(net.grade * 100.0, 1).tolist()
    speed = np.round(net.speed_mps * 3.6, 0).astype(np.int64).tolist()
    w = np.broadcast_to(np.asarray(weight, dtype=np.float64), (n,)).round(2).tolist()
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
        extra["value"] = [format_value(v) for v in value.tolist()]
        fields.append("value")
        aliases.append(value_label)
    # Later features are drawn on top: no-data first, high values last, so that of the two
    # overlapping directions of a street the driven / extreme one shows.
    order = (
        np.argsort(np.nan_to_num(value, nan=-np.inf), kind="stable")
        if value is not None
        else np.arange(n)
    )
    features = []
    for e in order.tolist():
        props: dict[str, Any] = {
            "segment": e,
            "length_m": length[e],
            "grade_pct": grade[e],
            "speed_kmh": speed[e],
            "style": {"color": colors[e], "weight": w[e], "opacity": opacity},
        }
        for key, vals in extra.items():
            props[key] = vals[e]
        features.append(
            {
                "type": "Feature",
                "geometry": {"type": "LineString", "coordinates": lines[e]},
                "properties": props,
            }
        )
    return folium.GeoJson(
        {"type": "FeatureCollection", "features": features},
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
    mean_wh: NDArray[np.float64] | None,
    sd_wh: NDArray[np.float64] | None,
    segments: Mapping[str, ArrayLike],
) -> tuple[list[tuple[str, str, str]], list[tuple[NDArray[np.float64], str, float, str]]]:
    """Draw routes (``routes``: name -> lat/lon rows; the first is the planned one) widest first,
    then the planned route's start and end markers; return legend rows and SVG lines."""
    legend: list[tuple[str, str, str]] = []
    svg: list[tuple[NDArray[np.float64], str, float, str]] = []
    widths = route_widths(len(routes))
    for k, (name, latlon) in enumerate(routes.items()):
        color = ROUTE_COLORS[k % len(ROUTE_COLORS)]
        label = labels.get(name) or _stats_label(route_stats(net, segments[name], mean_wh, sd_wh))
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
    routes: Mapping[str, ArrayLike] | None = None,
    route_labels: Mapping[str, str] | None = None,
    weight: float | ArrayLike = 3.0,
    title: str | None = None,
    tiles: str | None = "OpenStreetMap",
    path: str | Path | None = None,
    fit_to_routes: bool = True,
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
    routes : mapping name -> segment ids, optional
        Routes drawn over the network (first one emphasised), listed in the legend.
    route_labels : mapping name -> str, optional
        Legend text per route (default: length, time and predicted energy).
    weight : float or array_like
        Line width [px], scalar or per segment.
    title : str, optional
        Legend heading.
    tiles : str or None
        Folium tile layer name; ``None`` for a blank background (fully offline).
    path : path, optional
        If given, the HTML is written there atomically.
    fit_to_routes : bool
        Open the map fitted to the routes (default) rather than to the whole network.
    """
    v = _as_values(net, values, "values")
    mean = _as_values(net, mean_wh, "mean_wh")
    sd = _as_values(net, sd_wh, "sd_wh")
    lines = {name: route_latlon(net, segs) for name, segs in (routes or {}).items()}
    fit = np.concatenate(list(lines.values())) if lines and fit_to_routes else None
    m = _base_map(net, tiles, fit)
    parts: list[str] = []
    if v is not None:
        scale = ColorScale.fit(v, cmap=cmap, vmin=vmin, vmax=vmax, log=log_scale)
        colors = scale.hex(v)
        finite = v[np.isfinite(v)]
        beyond = (
            bool(finite.size and finite.min() < scale.vmin),
            bool(finite.size and finite.max() > scale.vmax),
        )
        parts.append(_colorbar_html(scale, legend_title, bool(np.isnan(v).any()), beyond))
    else:
        colors = ["#7a7a7a"] * net.n_segments
    layer = _network_layer(
        net,
        colors,
        name=layer_name,
        mean_wh=mean,
        sd_wh=sd,
        value=v,
        value_label=legend_title,
        weight=weight,
        opacity=0.9,
    )
    layer.add_to(m)
    svg_lines: list[tuple[NDArray[np.float64], str, float, str]] = []
    if routes:
        legend_rows, svg_lines = _add_routes(
            m, net, lines, route_labels or {}, mean, sd, routes
        )
        parts.append(_routes_legend_html(legend_rows, markers=True))
    folium.LayerControl(collapsed=True).add_to(m)
    m.add_child(_legend(parts, title))
    m.add_child(_fallback_svg(net, svg_lines, colors if v is not None else None))
    if path is not None:
        save_map(m, path)
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
    color_by: ArrayLike | None = None,
    legend_title: str = "predicted energy [Wh/km]",
    title: str | None = None,
    tiles: str | None = "OpenStreetMap",
    path: str | Path | None = None,
) -> folium.Map:
    """A planned route and its alternatives (e.g. shortest, fastest) over the network.

    The network is drawn faint (or coloured by ``color_by``, e.g. predicted Wh/km); the routes are
    drawn on top, the planned one solid and the alternatives dashed, each listed in the legend with
    length, time and predicted energy (from ``mean_wh``/``sd_wh``) unless ``route_labels`` gives
    the text. Parameters as in :func:`network_map`.
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
        weight=weight,
        title=title,
        tiles=tiles,
        path=path,
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
) -> folium.Map:
    """Exploration map: segments coloured by how often they were driven (log scale).

    Never-driven segments are thin and grey; line width grows with the visit count, so the
    explored corridors stand out as in the exploration figures of the paper. ``highlight`` routes
    (e.g. the optimal path) are drawn on top; the view shows the whole network. The colour bar
    runs from 1 to the true maximum count (never a percentile that would clip the most driven
    segments).
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
        routes=highlight,
        weight=weight,
        title=title,
        tiles=tiles,
        path=path,
        fit_to_routes=False,
    )


def save_map(m: folium.Map, path: str | Path) -> Path:
    """Render ``m`` to a standalone HTML file, atomically; return the path."""
    target = Path(path)
    atomic_write_text(target, m.get_root().render())
    return target


__all__ = [
    "FALLBACK_ID",
    "LEGEND_ID",
    "NETWORK_CLASS",
    "ROUTE_CLASS",
    "network_map",
    "route_latlon",
    "route_map",
    "route_stats",
    "save_map",
    "visits_map",
]
