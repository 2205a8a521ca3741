"""Load an OpenStreetMap file (offline) or an online place into a :class:`RoadNetwork`.

Steps (spec §2): read the XML with osmnx (or stream a PBF extract into the same raw graph,
:mod:`ev_nav.roads.pbf`) without simplification, keep drivable highway classes,
simplify, attach elevations (OSM ``ele`` tags or DEM rasters), compute grades, parse or impute speed
limits, then hand plain arrays to :func:`ev_nav.roads.network.build_network`, which keeps the
largest strongly connected part of the line graph.
"""

from __future__ import annotations

import hashlib
import socket
import time
import warnings
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from xml.etree.ElementTree import ParseError

import numpy as np

from ev_nav.errors import (
    ElevationCoverageError,
    NoDrivableRoadsError,
    NotOSMError,
    OfflineError,
    require_file,
)
from ev_nav.roads.chargers import read_osm_chargers
from ev_nav.roads.network import FORMAT_VERSION, ROAD_FLAGS, RoadNetwork, build_network
from ev_nav.roads.restrictions import (
    RestrictionsRead,
    forbidden_turn_pairs,
    read_restrictions,
    resolve_restrictions,
)
from ev_nav.roads.speeds import DEFAULT_CLASS_SPEEDS_KMH, class_speed_kmh, parse_maxspeed
from ev_nav.settings import osmnx_settings

#: Highway classes a car may drive on (links included), most important first. Everything else
#: (footways, steps, pedestrian zones, tracks, construction, …) is dropped before simplification.
DRIVABLE_ORDER: tuple[str, ...] = (
    "motorway",
    "motorway_link",
    "trunk",
    "trunk_link",
    "primary",
    "primary_link",
    "secondary",
    "secondary_link",
    "tertiary",
    "tertiary_link",
    "unclassified",
    "residential",
    "living_street",
    "service",
    "road",
)
DRIVABLE_CLASSES: frozenset[str] = frozenset(DRIVABLE_ORDER)
_CLASS_RANK = {c: i for i, c in enumerate(DRIVABLE_ORDER)}
#: Service roads that are not through roads for navigation.
EXCLUDED_SERVICE: frozenset[str] = frozenset(
    {"parking_aisle", "driveway", "private", "emergency_access", "drive-through", "parking"}
)
EXCLUDED_ACCESS: frozenset[str] = frozenset({"no", "private"})
#: OSM way tags read for the road kinds of ``RoadNetwork.road_flags`` (osmnx drops them unless
#: asked to keep them).
KIND_TAGS: tuple[str, ...] = ("toll", "surface", "route")
#: OSM ``surface`` values without a sealed top (what ``--avoid unpaved`` avoids).
UNPAVED_SURFACES: frozenset[str] = frozenset(
    {
        "unpaved",
        "compacted",
        "fine_gravel",
        "gravel",
        "pebblestone",
        "rock",
        "ground",
        "dirt",
        "earth",
        "grass",
        "grass_paver",
        "mud",
        "sand",
        "woodchips",
        "snow",
        "ice",
        "salt",
    }
)


@dataclass(frozen=True)
class LoadOptions:
    """Options that change the resulting network (they are part of the cache key)."""

    max_grade: float = 0.3
    class_speeds_kmh: dict[str, float] = field(
        default_factory=lambda: dict(DEFAULT_CLASS_SPEEDS_KMH)
    )
    include_service: bool = True


def normalise_highway(value: Any) -> str | None:
    """The highway class of an OSM way, or ``None`` when it is not drivable.

    Handles list values (from merged ways: the most important drivable class of
    :data:`DRIVABLE_ORDER` wins; osmnx builds such lists from a set, so their order changes
    from one process to the next and must not decide) and the MoST scenario's
    ``<class>_tunnel`` / ``<class>_bridge`` values.
    """
    values = value if isinstance(value, (list, tuple)) else [value]
    found = [
        cls
        for v in values
        if isinstance(v, str)
        and (cls := v.removesuffix("_tunnel").removesuffix("_bridge")) in DRIVABLE_CLASSES
    ]
    return min(found, key=_CLASS_RANK.__getitem__) if found else None


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def cache_key(osm: Path, dems: Sequence[Path], options: LoadOptions) -> str:
    """Content hash of the inputs and options: the cache file name.

    The recorded road kinds are part of it, so a network cached before they were recorded is
    rebuilt (with them) rather than reused; the old file itself still opens.
    """
    h = hashlib.sha256()
    h.update(f"format={FORMAT_VERSION};road_flags={','.join(ROAD_FLAGS)}".encode())
    h.update(b";turn_restrictions")  # networks cached before restrictions were read rebuild
    h.update(file_digest(osm).encode())
    for dem in dems:
        h.update(file_digest(dem).encode())
    h.update(repr(sorted(asdict(options).items())).encode())
    return h.hexdigest()[:24]


# ---------------------------------------------------------------------------- OSM reading
def is_pbf(path: Path) -> bool:
    """Whether ``path`` names an OSM PBF file (``.pbf``, as in ``.osm.pbf``)."""
    return path.suffix.lower() == ".pbf"


def _node_tags() -> list[str]:
    """osmnx's kept node tags plus ``ele``: node elevations ride on the OSM 'ele' tag, which
    osmnx drops unless asked to keep it."""
    import osmnx as ox

    tags = list(ox.settings.useful_tags_node)
    return tags if "ele" in tags else [*tags, "ele"]


def _read_osm_graph(path: Path, options: LoadOptions):
    """The raw osmnx graph of an OSM file and its turn restrictions (XML or PBF)."""
    import osmnx as ox

    require_file(path, "OSM file")
    # the settings change is undone after the read so other osmnx users are unaffected
    settings = {
        "useful_tags_node": _node_tags(),
        "useful_tags_way": _way_tags(),
        "log_console": False,
    }
    if is_pbf(path):
        from ev_nav.roads.pbf import read_pbf_graph

        with osmnx_settings(**settings), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return read_pbf_graph(
                path,
                lambda tags: drivable_class(tags, options) is not None,
                settings["useful_tags_way"],
                settings["useful_tags_node"],
            )
    try:
        with osmnx_settings(**settings), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph = ox.graph_from_xml(path, simplify=False, retain_all=True)
    except (ParseError, UnicodeDecodeError, EOFError, OSError) as exc:
        raise NotOSMError(f"{path} is not a readable OSM XML file ({exc})") from None
    except Exception as exc:  # osmnx raises plain errors on empty or foreign XML
        if type(exc).__name__ == "InsufficientResponseError":
            # osmnx's text for it is Overpass advice ("server response ... log"); no server
            # was asked
            raise NoDrivableRoadsError(f"{path} holds no OSM nodes or ways") from None
        if "graph contains no nodes" in str(exc).lower() or isinstance(exc, (KeyError, ValueError)):
            raise NoDrivableRoadsError(f"{path} contains no usable OSM ways ({exc})") from None
        raise
    # osmnx's XML reader parses relations but builds its graph from nodes and ways only: the
    # restrictions come from a second, streaming pass over the file's relations
    return graph, read_restrictions(path)


def drivable_class(tags: dict[str, Any], options: LoadOptions) -> str | None:
    """The highway class of an OSM way (its tags, or an unsimplified osmnx edge's attributes)
    when a car may use it under ``options``, else ``None``.

    The one drivability rule: the XML path applies it to osmnx's edges, the PBF reader to ways
    as it streams them, so both keep the same roads.
    """
    cls = normalise_highway(tags.get("highway"))
    if cls is None or (cls == "service" and not options.include_service):
        return None
    if any(s in EXCLUDED_SERVICE for s in _as_list(tags.get("service"))):
        return None
    if any(a in EXCLUDED_ACCESS for a in _as_list(tags.get("access"))):
        return None
    if any(a == "yes" for a in _as_list(tags.get("area"))):
        return None
    return cls


def _filter_drivable(graph, options: LoadOptions):
    drop = []
    for u, v, k, data in graph.edges(keys=True, data=True):
        cls = drivable_class(data, options)
        if cls is None:
            drop.append((u, v, k))
            continue
        data["highway"] = cls
    graph.remove_edges_from(drop)
    graph.remove_nodes_from([n for n, d in graph.degree() if d == 0])
    return graph


def _way_tags() -> list[str]:
    """osmnx's kept way tags plus :data:`KIND_TAGS`."""
    import osmnx as ox

    tags = list(ox.settings.useful_tags_way)
    return tags + [t for t in KIND_TAGS if t not in tags]


def road_flags_of(data: dict[str, Any]) -> int:
    """The :data:`~ev_nav.roads.network.ROAD_FLAGS` bits of one (possibly merged) OSM edge.

    A simplified edge carries a list where the ways it merges differ; a kind counts when any of
    them has it (the edge is partly toll, partly unpaved, …).
    """
    kinds = {
        "toll": any(str(v).lower() == "yes" for v in _as_list(data.get("toll"))),
        "unpaved": any(
            str(v).lower() in UNPAVED_SURFACES for v in _as_list(data.get("surface"))
        ),
        "ferry": any(str(v).lower() == "ferry" for v in _as_list(data.get("route"))),
    }
    return sum(1 << i for i, kind in enumerate(ROAD_FLAGS) if kinds[kind])


def _dem_paths(dems: Sequence[Path]) -> list[str]:
    """rasterio-readable paths: ``.hgt.zip`` members are read through GDAL's /vsizip/."""
    out = []
    for dem in dems:
        require_file(dem, "DEM file")
        if dem.suffix.lower() == ".zip":
            try:
                with zipfile.ZipFile(dem) as zf:
                    members = [
                        m for m in zf.namelist() if m.lower().endswith((".hgt", ".tif", ".tiff"))
                    ]
            except zipfile.BadZipFile as exc:  # a half-downloaded tile, most often
                raise ElevationCoverageError(
                    f"cannot read DEM {dem}: {exc} (a truncated download? fetch the tile again)"
                ) from None
            if not members:
                raise ElevationCoverageError(f"{dem} contains no .hgt or GeoTIFF raster")
            out.extend(f"/vsizip/{dem.resolve()}/{m}" for m in members)
        else:
            out.append(str(dem))
    return out


def check_dems(dems: Sequence[Path]) -> None:
    """Open every raster of ``dems`` once, so that a file that cannot be read is said before
    an OSM extract is read (minutes on a large one), not after.

    Raises
    ------
    NetworkFileNotFound, ElevationCoverageError
    """
    if not dems:
        return
    import rasterio

    for src_path in _dem_paths(dems):
        try:
            with rasterio.open(src_path):
                pass
        except rasterio.errors.RasterioIOError as exc:
            raise ElevationCoverageError(f"cannot read DEM {src_path}: {exc}") from None


def _raster_elevations(lon: np.ndarray, lat: np.ndarray, dems: Sequence[Path]) -> np.ndarray:
    """Elevation [m] per point from one or more rasters (first raster covering a point wins)."""
    import rasterio

    elev = np.full(lon.shape[0], np.nan)
    covered = np.zeros(lon.shape[0], dtype=bool)
    for src_path in _dem_paths(dems):
        try:
            with rasterio.open(src_path) as src:
                b = src.bounds
                inside = (lon >= b.left) & (lon <= b.right) & (lat >= b.bottom) & (lat <= b.top)
                todo = inside & ~covered
                if todo.any():
                    vals = np.array(
                        [v[0] for v in src.sample(np.column_stack([lon[todo], lat[todo]]))],
                        dtype=np.float64,
                    )
                    if src.nodata is not None:
                        vals[vals == src.nodata] = np.nan
                    elev[todo] = vals
                covered |= inside
        except rasterio.errors.RasterioIOError as exc:
            raise ElevationCoverageError(f"cannot read DEM {src_path}: {exc}") from None
    if not covered.all():
        raise ElevationCoverageError(
            f"the DEM(s) do not cover {int((~covered).sum())} of {lon.shape[0]} network nodes; "
            "supply rasters that cover the whole area"
        )
    voids = np.isnan(elev)
    if voids.all():
        raise ElevationCoverageError("the DEM(s) hold no valid elevation for the network's nodes")
    if voids.any():
        # SRTM voids: take the nearest node with a valid value (a few nodes at most).
        from scipy.spatial import cKDTree

        tree = cKDTree(np.column_stack([lon[~voids], lat[~voids]]))
        _, nn = tree.query(np.column_stack([lon[voids], lat[voids]]))
        elev[voids] = elev[~voids][nn]
        warnings.warn(
            f"{int(voids.sum())} node(s) fell on DEM voids; used the nearest valid node",
            UserWarning,
            stacklevel=2,
        )
    return elev


def _parse_ele(values: list[Any]) -> np.ndarray:
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        if v is None:
            continue
        try:
            out[i] = float(str(v).split(";")[0].replace("m", "").strip())
        except ValueError:
            continue
    return out


def graph_to_network(
    graph,
    *,
    name: str,
    dems: Sequence[Path] = (),
    options: LoadOptions | None = None,
    extra_meta: dict[str, Any] | None = None,
    restrictions: RestrictionsRead | None = None,
) -> RoadNetwork:
    """Convert a raw (unsimplified) osmnx graph into a :class:`RoadNetwork`.

    ``restrictions`` (from :func:`ev_nav.roads.restrictions.read_restrictions`) become the
    network's ``forbidden_turns``; their counts are recorded in ``meta["turn_restrictions"]``.
    """
    import osmnx as ox

    options = options or LoadOptions()
    graph = _filter_drivable(graph, options)
    if graph.number_of_edges() == 0:
        raise NoDrivableRoadsError(
            f"{name}: no drivable roads (motorway … residential/service) in the OSM data"
        )
    # located before simplification, where the way piece next to each via node is one edge
    restrictions = restrictions or RestrictionsRead()
    resolved, unresolved = resolve_restrictions(graph, restrictions.restrictions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        graph = ox.simplify_graph(graph)
    if graph.number_of_edges() == 0:  # e.g. one closed ring: simplification leaves no edge
        raise NoDrivableRoadsError(f"{name}: no road junctions in the OSM data (nothing to route)")
    graph = ox.truncate.largest_component(graph, strongly=True)

    nodes = list(graph.nodes)
    node_index = {n: i for i, n in enumerate(nodes)}
    lon = np.array([graph.nodes[n]["x"] for n in nodes], dtype=np.float64)
    lat = np.array([graph.nodes[n]["y"] for n in nodes], dtype=np.float64)
    osmid = np.array(nodes, dtype=np.int64)

    ele = _parse_ele([graph.nodes[n].get("ele") for n in nodes])
    warn_msgs: list[str] = []
    if dems:
        elevation = _raster_elevations(lon, lat, [Path(d) for d in dems])
        elevation_source = "dem:" + ",".join(Path(d).name for d in dems)
    elif np.isfinite(ele).mean() > 0.5:
        elevation = ele
        missing = ~np.isfinite(ele)
        if missing.any():
            from scipy.spatial import cKDTree

            tree = cKDTree(np.column_stack([lon[~missing], lat[~missing]]))
            _, nn = tree.query(np.column_stack([lon[missing], lat[missing]]))
            elevation[missing] = ele[~missing][nn]
            warn_msgs.append(
                f"{int(missing.sum())} node(s) had no 'ele' tag; used the nearest tagged node"
            )
        elevation_source = "osm-ele"
    else:
        elevation = np.zeros(len(nodes))
        elevation_source = "none"
        warn_msgs.append(
            f"{name}: no elevation source (no OSM 'ele' tags, no --dem): grades are 0 (flat)"
        )

    edges = list(graph.edges(keys=True, data=True))
    seg_u = np.array([node_index[u] for u, _, _, _ in edges], dtype=np.int64)
    seg_v = np.array([node_index[v] for _, v, _, _ in edges], dtype=np.int64)
    length = np.array([float(d.get("length", np.nan)) for *_, d in edges], dtype=np.float64)
    classes_raw = [normalise_highway(d.get("highway")) or "road" for *_, d in edges]
    classes = tuple(sorted(set(classes_raw)))
    class_idx = {c: i for i, c in enumerate(classes)}
    highway = np.array([class_idx[c] for c in classes_raw], dtype=np.int16)
    road_flags = np.array([road_flags_of(d) for *_, d in edges], dtype=np.uint8)
    parsed = [parse_maxspeed(d.get("maxspeed")) for *_, d in edges]
    imputed = np.array([p is None for p in parsed], dtype=bool)
    speed_kmh = np.array(
        [
            p if p is not None else class_speed_kmh(c, options.class_speeds_kmh)
            for p, c in zip(parsed, classes_raw, strict=True)
        ],
        dtype=np.float64,
    )
    # Grades (Δh / length, as osmnx's add_edge_grades) are computed by build_network from the
    # node elevations, after limiting them consistently (see network.limit_grades).

    offsets = [0]
    coords: list[np.ndarray] = []
    for u, v, _, d in edges:
        geom = d.get("geometry")
        if geom is not None:
            xy = np.asarray(geom.coords, dtype=np.float64)
        else:
            xy = np.array(
                [[lon[node_index[u]], lat[node_index[u]]], [lon[node_index[v]], lat[node_index[v]]]]
            )
        coords.append(xy)
        offsets.append(offsets[-1] + xy.shape[0])

    geom_offsets = np.asarray(offsets, dtype=np.int64)
    geom_lonlat = np.concatenate(coords) if coords else np.empty((0, 2))
    forbidden, applied = forbidden_turn_pairs(
        resolved,
        osmid[seg_u],
        osmid[seg_v],
        [{int(w) for w in _as_list(d.get("osmid"))} for *_, d in edges],
        geom_offsets,
        geom_lonlat,
        seg_u,
        seg_v,
        len(nodes),
    )

    for msg in warn_msgs:
        warnings.warn(msg, UserWarning, stacklevel=2)
    meta = {
        "elevation_source": elevation_source,
        "speed_imputed_share_before_pruning": float(imputed.mean()),
        "warnings": warn_msgs,
        "turn_restrictions": {
            "read": len(restrictions.restrictions),
            "located": len(resolved),
            "applied": applied,
            "skipped": dict(sorted((restrictions.skipped + unresolved).items())),
        },
        **(extra_meta or {}),
    }
    return build_network(
        name=name,
        node_lon=lon,
        node_lat=lat,
        node_elevation=elevation,
        node_osmid=osmid,
        seg_u=seg_u,
        seg_v=seg_v,
        length_m=length,
        speed_mps=speed_kmh / 3.6,
        highway=highway,
        highway_classes=classes,
        speed_imputed=imputed,
        geom_offsets=geom_offsets,
        geom_lonlat=geom_lonlat,
        meta=meta,
        max_grade=options.max_grade,
        road_flags=road_flags,
        forbidden_turns=forbidden,
    )


def load_osm(
    osm: str | Path,
    *,
    dems: Sequence[str | Path] = (),
    options: LoadOptions | None = None,
    cache_dir: str | Path | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> RoadNetwork:
    """Build a :class:`RoadNetwork` from an OSM file: XML (``.osm``, ``.osm.gz``, ``.osm.bz2``)
    or PBF (``.osm.pbf``, streamed; see :mod:`ev_nav.roads.pbf`).

    Both formats give the same network for the same data, turn restrictions and charging
    stations (``amenity=charging_station``, :mod:`ev_nav.roads.chargers`) included.

    Parameters
    ----------
    osm : path
        OpenStreetMap XML or PBF file.
    dems : sequence of paths, optional
        Elevation rasters (GeoTIFF, SRTM ``.hgt`` or ``.hgt.zip``). When omitted, OSM ``ele``
        node tags are used if present; otherwise the network is flat (with a warning).
    options : LoadOptions, optional
        Grade clipping and class speed table.
    cache_dir : path, optional
        When given, the network is cached there under a content hash of the inputs and options
        and loaded from the cache on later calls.
    on_stage : callable, optional
        Called with the name of each stage as it starts (reading the file, building the
        network, its charging stations), e.g. :meth:`ev_nav.progress.Stages.stage`: a large
        extract takes minutes.

    Raises
    ------
    NetworkFileNotFound, NotOSMError, NoDrivableRoadsError, ElevationCoverageError,
    InvalidNetworkData
    """
    osm_path = Path(osm)
    dem_paths = [Path(d) for d in dems]
    options = options or LoadOptions()
    require_file(osm_path, "OSM file")
    check_dems(dem_paths)  # before the OSM read: a bad tile is said at once
    key = cache_key(osm_path, dem_paths, options)
    cache_file = Path(cache_dir) / f"{osm_path.name.split('.')[0]}-{key}.npz" if cache_dir else None
    if cache_file is not None and cache_file.is_file():
        net = RoadNetwork.load(cache_file)
        # cached before chargers were read: attach them (the cache key stays, and with it the
        # network's content hash that states are bound to)
        return net if "chargers_osm" in net.meta else with_osm_chargers(net, osm_path)
    stage = on_stage or (lambda _name: None)
    t0 = time.perf_counter()
    stage("reading the OSM file")
    graph, restrictions = _read_osm_graph(osm_path, options)
    stage("building the network (elevation, grades, speeds)")
    net = graph_to_network(
        graph,
        name=osm_path.name.split(".")[0],
        dems=dem_paths,
        options=options,
        restrictions=restrictions,
        extra_meta={
            "source": str(osm_path.name),
            "dems": [d.name for d in dem_paths],
            "source_hash": key,
        },
    )
    stage("reading its charging stations")
    net = with_osm_chargers(net, osm_path)
    net.meta["build_s"] = time.perf_counter() - t0
    if cache_file is not None:
        net.save(cache_file)
    return net


def with_osm_chargers(net: RoadNetwork, osm: Path) -> RoadNetwork:
    """``net`` with the charging stations of its OSM file attached
    (:func:`ev_nav.roads.chargers.read_osm_chargers`); what the reading noticed is recorded in
    ``meta["chargers_osm"]``."""
    read = read_osm_chargers(osm, net)
    out = net.with_chargers(read.chargers)
    out.meta["chargers_osm"] = read.notes
    return out


# ---------------------------------------------------------------------------- online
def check_online(url: str | None = None, timeout_s: float = 3.0) -> None:
    """Raise :class:`OfflineError` quickly when the Overpass server cannot be reached."""
    import osmnx as ox

    target = urlparse(url or ox.settings.overpass_url)
    host = target.hostname or ""
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except OSError as exc:
        raise OfflineError(
            f"cannot reach the OpenStreetMap server {host} ({exc.__class__.__name__}); "
            "'network fetch' needs internet — offline, download an .osm file elsewhere and use "
            "'ev-nav network build --osm FILE'"
        ) from None


def fetch_place(
    place: str,
    *,
    dist_m: float = 3000.0,
    dems: Sequence[str | Path] = (),
    options: LoadOptions | None = None,
) -> RoadNetwork:
    """Download the drivable network of a place name or a ``LAT,LON`` point (needs internet)."""
    check_online()
    try:
        with osmnx_settings(useful_tags_way=_way_tags()):
            graph = _download(place, dist_m)
    except (ConnectionError, TimeoutError, OSError) as exc:
        raise OfflineError(f"download failed: {exc}") from None
    return graph_to_network(
        graph,
        name=place.replace(",", "_").replace(" ", "_")[:40],
        dems=[Path(d) for d in dems],
        options=options,
        extra_meta={
            "source": f"online:{place}",
            "source_hash": hashlib.sha256(place.encode()).hexdigest()[:24],
        },
    )


def _download(place: str, dist_m: float):
    import osmnx as ox

    if _looks_like_point(place):
        lat, lon = (float(x) for x in place.split(","))
        return ox.graph_from_point(
            (lat, lon), dist=dist_m, network_type="drive", simplify=False, retain_all=True
        )
    return ox.graph_from_place(place, network_type="drive", simplify=False, retain_all=True)


def _looks_like_point(text: str) -> bool:
    parts = text.split(",")
    if len(parts) != 2:
        return False
    try:
        float(parts[0])
        float(parts[1])
    except ValueError:
        return False
    return True
