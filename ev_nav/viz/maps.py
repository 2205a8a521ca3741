"""Interactive HTML maps (folium): the network coloured by a per-segment value, planned routes with
their alternatives, and exploration (visit-count) maps.

Design points
-------------
* **One layer for the whole network.** All segments go into a single GeoJSON layer whose features
  carry their own style and tooltip fields, so a 100k-segment network is one Leaflet layer, not
  100k folium objects.
* **Legends are plain HTML/CSS**, not JavaScript widgets: they show even if no script runs.
* **Offline.** Tiles are optional decoration: if they fail to load, the route and network layers
  still draw over the blank background. If Leaflet itself cannot be loaded (no internet and no
  cached copy), a static SVG drawing of the routes (and the network, when small enough), built here
  in Python, is shown in place of the map, so the route can still be read.
* Maps are written atomically (:func:`save_map`): a reader never sees half a file.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import folium
import numpy as np
from branca.element import MacroElement
from jinja2 import Template
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidNetworkData, UnknownSegmentError
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

#: Above this many polyline vertices the offline SVG omits the network background (file size).
FALLBACK_MAX_NETWORK_VERTICES = 60_000

_COORD_DECIMALS = 6  # ~0.1 m: finer than any map needs, keeps the HTML small


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
        text += f", {format_value(stats['energy_wh'])}"
        if "energy_sd_wh" in stats:
            text += f" ± {format_value(stats['energy_sd_wh'])}"
        text += " Wh"
    return text


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


def _colorbar_html(scale: ColorScale, title: str, has_no_data: bool) -> str:
    stops = np.linspace(0.0, 1.0, 11)
    values = (
        np.exp(np.log(scale.vmin) + stops * (np.log(scale.vmax) - np.log(scale.vmin)))
        if scale.log
        else scale.vmin + stops * (scale.vmax - scale.vmin)
    )
    colors = scale.hex(values)
    gradient = ", ".join(f"{c} {100 * s:.0f}%" for c, s in zip(colors, stops, strict=True))
    ticks = scale.ticks(5)
    tick_html = "".join(
        f'<span style="position:absolute;left:{100 * i / (len(ticks) - 1):.0f}%;'
        f'transform:translateX(-50%)">{html.escape(format_value(t))}</span>'
        for i, t in enumerate(ticks)
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


def _routes_legend_html(entries: Sequence[tuple[str, str, str]]) -> str:
    rows = "".join(
        f'<div class="ev-nav-legend-route"><span style="display:inline-block;width:26px;'
        f'height:5px;background:{color};vertical-align:middle;margin-right:6px"></span>'
        f"<b>{html.escape(name)}</b> {html.escape(label)}</div>"
        for name, color, label in entries
    )
    return f'<div style="margin-top:6px">{rows}</div>'


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
    """Static SVG (equirectangular, aspect-correct) shown only if Leaflet failed to load.

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
        '<div style="font:13px sans-serif;padding:6px 10px;color:#444">Offline view: the map '
        "library could not be loaded, showing a static drawing.</div>"
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


def _base_map(net: RoadNetwork, tiles: str | None) -> folium.Map:
    lon0, lat0, lon1, lat1 = net.bounds()
    m = folium.Map(
        location=[0.5 * (lat0 + lat1), 0.5 * (lon0 + lon1)],
        tiles=tiles,
        control_scale=True,
        # SVG paths for usual sizes: one DOM element per path, crisp at any zoom.
        prefer_canvas=net.n_segments > CANVAS_ABOVE_SEGMENTS,
    )
    m.fit_bounds([[lat0, lon0], [lat1, lon1]])
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
    routes: Mapping[str, ArrayLike],
    labels: Mapping[str, str],
    mean_wh: NDArray[np.float64] | None,
    sd_wh: NDArray[np.float64] | None,
) -> tuple[list[tuple[str, str, str]], list[tuple[NDArray[np.float64], str, float, str]]]:
    """Draw routes (first = main, drawn last so it is on top); return legend rows and SVG lines."""
    legend: list[tuple[str, str, str]] = []
    svg: list[tuple[NDArray[np.float64], str, float, str]] = []
    items = list(routes.items())
    for k, (name, segs) in reversed(list(enumerate(items))):
        color = ROUTE_COLORS[k % len(ROUTE_COLORS)]
        latlon = route_latlon(net, segs)
        label = labels.get(name) or _stats_label(route_stats(net, segs, mean_wh, sd_wh))
        main = k == 0
        cls = f"{ROUTE_CLASS} {ROUTE_CLASS}-{k}"
        folium.PolyLine(
            latlon.tolist(),
            color=color,
            weight=7 if main else 5,
            opacity=0.95 if main else 0.8,
            dash_array=None if main else "8 6",
            class_name=cls,
            smooth_factor=0.0,  # draw every vertex: the route must be exact, not simplified
            tooltip=f"{html.escape(name)}: {html.escape(label)}",
        ).add_to(folium.FeatureGroup(name=f"route: {name}").add_to(m))
        legend.append((name, color, label))
        svg.append((latlon, color, 5.0 if main else 3.0, cls))
    legend.reverse()
    return legend, svg  # svg in drawing order: alternatives first, main route on top


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
    """
    v = _as_values(net, values, "values")
    mean = _as_values(net, mean_wh, "mean_wh")
    sd = _as_values(net, sd_wh, "sd_wh")
    m = _base_map(net, tiles)
    parts: list[str] = []
    if v is not None:
        scale = ColorScale.fit(v, cmap=cmap, vmin=vmin, vmax=vmax, log=log_scale)
        colors = scale.hex(v)
        parts.append(_colorbar_html(scale, legend_title, bool(np.isnan(v).any())))
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
        legend_rows, svg_lines = _add_routes(m, net, routes, route_labels or {}, mean, sd)
        parts.append(_routes_legend_html(legend_rows))
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
    (e.g. the optimal path) are drawn on top.
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
