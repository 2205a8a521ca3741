"""Stream an OpenStreetMap PBF extract into the same raw graph osmnx builds from XML.

Regional downloads (Geofabrik, BBBike, …) come as ``.osm.pbf``, far larger than the drivable
network in them. The file is read twice with pyosmium, never held whole:

1. ways with a ``highway`` tag (tag filter in libosmium) and ``type=restriction`` relations;
   each way is kept only if :func:`ev_nav.roads.load.drivable_class` accepts it, and the ids of
   its nodes are collected;
2. only those nodes (id filter in libosmium), for their coordinates and ``ele`` tags.

Memory therefore grows with the drivable network, not with the file. The kept elements, in file
order and in the shape osmnx's XML reader produces, go through osmnx's own graph construction,
so the rest of the build (:func:`ev_nav.roads.load.graph_to_network`) is shared with the XML path
and gives the same segment table for the same data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ev_nav.errors import NoDrivableRoadsError, NotOSMError
from ev_nav.roads.restrictions import RestrictionsRead


def read_pbf_graph(
    path: Path, keep_way: Any, way_tags: list[str], node_tags: list[str]
) -> tuple[Any, RestrictionsRead]:
    """The raw (unsimplified) osmnx graph of ``path``'s kept ways, and its restrictions.

    Parameters
    ----------
    path : Path
        ``.osm.pbf`` file.
    keep_way : callable
        ``keep_way(tags: dict) -> bool``: whether a ``highway`` way belongs to the network.
    way_tags, node_tags : list of str
        The tags osmnx keeps on edges and nodes (only these are held in memory).

    Raises
    ------
    NotOSMError, NoDrivableRoadsError
    """
    import networkx as nx
    import osmium
    import osmium.filter
    import osmnx as ox

    wanted_way_tags = set(way_tags)
    wanted_node_tags = set(node_tags)
    elements: list[dict[str, Any]] = []
    needed: set[int] = set()
    restrictions = RestrictionsRead()
    try:
        first = (
            osmium.FileProcessor(str(path), osmium.osm.WAY | osmium.osm.RELATION)
            .with_filter(osmium.filter.KeyFilter("highway").enable_for(osmium.osm.WAY))
            .with_filter(
                osmium.filter.TagFilter(("type", "restriction")).enable_for(osmium.osm.RELATION)
            )
        )
        for obj in first:
            if obj.is_relation():
                restrictions.add(obj)
                continue
            tags = {t.k: t.v for t in obj.tags if t.k in wanted_way_tags}
            if not keep_way(tags):
                continue
            refs = [n.ref for n in obj.nodes]
            needed.update(refs)
            elements.append({"type": "way", "id": obj.id, "nodes": refs, "tags": tags})
        if not elements:
            raise NoDrivableRoadsError(f"{path} contains no drivable OSM ways")
        nodes: list[dict[str, Any]] = []
        second = osmium.FileProcessor(str(path), osmium.osm.NODE)
        if min(needed) >= 0:
            # libosmium drops the other nodes before they reach Python; its id filter takes
            # only non-negative ids, which real OSM data has (editor files may hold negative
            # ones, filtered below instead)
            second = second.with_filter(osmium.filter.IdFilter(needed))
        for obj in second:
            if obj.id not in needed:
                continue
            loc = obj.location
            nodes.append(
                {
                    "type": "node",
                    "id": obj.id,
                    "lat": loc.lat,
                    "lon": loc.lon,
                    "tags": {t.k: t.v for t in obj.tags if t.k in wanted_node_tags},
                }
            )
    except RuntimeError as exc:  # libosmium's error for unreadable or foreign input
        raise NotOSMError(f"{path} is not a readable OSM PBF file ({exc})") from None
    del needed
    present = {n["id"] for n in nodes}
    # The graph is made as osmnx's own construction (ox.graph._create_graph) makes it from XML:
    # nodes in file order, then each way's edges in file order, then great-circle lengths; the
    # same order gives the same segment order. One difference: regional extracts are often cut
    # at their boundary, so a way may name nodes the file lacks. osmnx refuses such data; here
    # each way keeps its runs of nodes that are present (the part inside the extract).
    graph = nx.MultiDiGraph(crs=ox.settings.default_crs)
    graph.add_nodes_from((n["id"], ox.graph._convert_node(n)) for n in nodes)
    paths = []
    for way in elements:
        for run in _present_runs(way["nodes"], present):
            paths.append(ox.graph._convert_path({**way, "nodes": run}))
    ox.graph._add_paths(graph, paths, bidirectional=False)
    if graph.number_of_edges() == 0:
        raise NoDrivableRoadsError(f"{path} contains no drivable OSM ways with their nodes")
    graph = ox.distance.add_edge_lengths(graph)
    return graph, restrictions


def _present_runs(refs: list[int], present: set[int]) -> list[list[int]]:
    """The maximal runs of ``refs`` whose nodes are all in ``present`` (a way cut by the
    extract's boundary falls into the pieces inside it); runs of one node make no edge."""
    runs: list[list[int]] = [[]]
    for ref in refs:
        if ref in present:
            runs[-1].append(ref)
        elif runs[-1]:
            runs.append([])
    return [r for r in runs if len(r) > 1]
