"""OSM turn restrictions (``type=restriction`` relations) as forbidden segment-to-segment turns.

A restriction names a *from* way, a *via* node and a *to* way. ``restriction=no_*`` forbids
turning from the from-way onto the to-way at the via node; ``only_*`` forbids every other
continuation of the from-way there. Both XML and PBF inputs are read with the same streaming
relation parser (osmnx's XML reader drops relations), and both map restrictions onto segments
with :func:`forbidden_turn_pairs`, so the two paths agree.

Restrictions whose via is a way (a maneuver over a whole road piece) are skipped and counted, as
are those not addressed to cars (``except=motorcar``…) and ones whose from/to way passes through
the via node instead of ending there (OSM requires them to end there; the turn is ambiguous).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ev_nav.errors import NotOSMError
from ev_nav.roads.network import line_graph_csr

#: ``except`` values that exempt ordinary cars from a restriction.
_CAR_EXEMPT = frozenset({"motorcar", "motor_vehicle", "vehicle"})


@dataclass(frozen=True)
class TurnRestriction:
    """One restriction relation, as OSM ids.

    Attributes
    ----------
    relation : int
        The relation's OSM id.
    value : str
        The restriction (``no_left_turn``, ``only_straight_on``, …).
    from_ways, to_ways : tuple of int
        The from and to ways (usually one each; ``no_entry`` / ``no_exit`` may list several).
    via_node : int
        The junction's OSM node id.
    """

    relation: int
    value: str
    from_ways: tuple[int, ...]
    to_ways: tuple[int, ...]
    via_node: int

    @property
    def only(self) -> bool:
        """True for ``only_*`` (every other turn is forbidden), False for ``no_*``."""
        return self.value.startswith("only_")


@dataclass
class RestrictionsRead:
    """What a file's restriction relations gave: the usable ones and counts of the rest."""

    restrictions: list[TurnRestriction] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)

    def add(self, relation: Any) -> None:
        """Parse one osmium relation and keep it or count why it was skipped."""
        parsed = parse_restriction(relation)
        if isinstance(parsed, TurnRestriction):
            self.restrictions.append(parsed)
        else:
            self.skipped[parsed] += 1


def parse_restriction(relation: Any) -> TurnRestriction | str:
    """A :class:`TurnRestriction` from an osmium relation, or the reason it is not usable.

    Reasons: ``"not_restriction"``, ``"not_for_cars"``, ``"unknown_value"``, ``"via_way"``,
    ``"malformed"``.
    """
    tags = relation.tags
    if tags.get("type") != "restriction":
        return "not_restriction"
    # a car-specific value overrides the general one; a restriction for other vehicles only
    # (restriction:hgv=…) has neither and is not ours
    value = tags.get("restriction:motorcar") or tags.get("restriction")
    if value is None:
        return "not_for_cars"
    exempt = {v.strip() for v in (tags.get("except") or "").split(";")}
    if exempt & _CAR_EXEMPT:
        return "not_for_cars"
    value = value.strip()
    if not value.startswith(("no_", "only_")):
        return "unknown_value"
    from_ways, to_ways, via_nodes, via_ways = [], [], [], 0
    for m in relation.members:
        if m.role == "from" and m.type == "w":
            from_ways.append(int(m.ref))
        elif m.role == "to" and m.type == "w":
            to_ways.append(int(m.ref))
        elif m.role == "via" and m.type == "n":
            via_nodes.append(int(m.ref))
        elif m.role == "via" and m.type == "w":
            via_ways += 1
    if via_ways:
        return "via_way"
    if len(via_nodes) != 1 or not from_ways or not to_ways:
        return "malformed"
    return TurnRestriction(
        relation=int(relation.id),
        value=value,
        from_ways=tuple(from_ways),
        to_ways=tuple(to_ways),
        via_node=via_nodes[0],
    )


def read_restrictions(path: Path) -> RestrictionsRead:
    """Stream the restriction relations of an OSM file (XML, possibly gz/bz2, or PBF).

    Only relations are decoded into Python objects; memory grows with the number of
    restrictions, not with the file.

    Raises
    ------
    NotOSMError
        When the file cannot be read as OSM data.
    """
    import osmium
    import osmium.filter

    out = RestrictionsRead()
    try:
        relations = osmium.FileProcessor(str(path), osmium.osm.RELATION).with_filter(
            osmium.filter.TagFilter(("type", "restriction"))
        )
        for rel in relations:
            out.add(rel)
    except RuntimeError as exc:  # libosmium reports unreadable input this way
        raise NotOSMError(f"{path} is not a readable OSM file ({exc})") from None
    return out


# ---------------------------------------------------------------------------- onto segments
@dataclass(frozen=True)
class _Resolved:
    """A restriction located on the unsimplified graph: the via node, the node before it on
    the from-way and the node after it on each to-way (as (lon, lat), which the simplified
    segments' polylines carry)."""

    only: bool
    via: int
    from_way: int
    from_xy: tuple[float, float]
    to: tuple[tuple[int, tuple[float, float]], ...]  # (to_way, xy after the via node)


def resolve_restrictions(
    graph: Any, restrictions: Sequence[TurnRestriction]
) -> tuple[list[_Resolved], Counter[str]]:
    """Locate restrictions on the filtered, *unsimplified* osmnx graph (one edge per OSM node
    pair, ``osmid`` a single way id), where the way pieces next to the via node are known.

    Returns the located restrictions and counts of those that could not be
    (``"not_in_network"``: the via node or a way is not drivable road here; ``"ambiguous"``:
    a from/to way passes through the via node rather than ending at it).
    """
    skipped: Counter[str] = Counter()
    out: list[_Resolved] = []

    def xy(n: int) -> tuple[float, float]:
        return (float(graph.nodes[n]["x"]), float(graph.nodes[n]["y"]))

    for r in restrictions:
        via = r.via_node
        if via not in graph:
            skipped["not_in_network"] += 1
            continue
        ins = {w: [x for x in graph.predecessors(via) if _on_way(graph, x, via, w)]
               for w in r.from_ways}
        outs = {w: [y for y in graph.successors(via) if _on_way(graph, via, y, w)]
                for w in r.to_ways}
        if any(len(v) > 1 for v in (*ins.values(), *outs.values())):
            skipped["ambiguous"] += 1
            continue
        to = tuple((w, xy(ys[0])) for w, ys in outs.items() if ys)
        froms = [(w, xs[0]) for w, xs in ins.items() if xs]
        if not froms or not to:
            skipped["not_in_network"] += 1
            continue
        out.extend(
            _Resolved(only=r.only, via=via, from_way=w, from_xy=xy(x), to=to) for w, x in froms
        )
    return out, skipped


def _on_way(graph: Any, u: int, v: int, way: int) -> bool:
    return any(d.get("osmid") == way for d in graph[u][v].values())


def forbidden_turn_pairs(
    resolved: Iterable[_Resolved],
    seg_osmid_u: NDArray[np.int64],
    seg_osmid_v: NDArray[np.int64],
    seg_ways: Sequence[set[int]],
    geom_offsets: NDArray[np.int64],
    geom_lonlat: NDArray[np.float64],
    seg_u: NDArray[np.int64],
    seg_v: NDArray[np.int64],
    n_nodes: int,
) -> tuple[NDArray[np.int64], int]:
    """``(from_segment, to_segment)`` pairs the located restrictions forbid, shape (k, 2), and
    how many restrictions gave at least one pair (a via node that simplification merged into a
    segment, being no junction, gives none).

    A simplified segment ends at the via node coming from the from-way's last piece when its
    polyline's second-to-last vertex is that piece's first node and its ways include the
    from-way; likewise a to-segment starts with the to-way's first piece. ``only_*`` forbids
    every line-graph successor of the from-segment except the to-segments.
    """
    resolved = list(resolved)
    if not resolved:
        return np.empty((0, 2), dtype=np.int64), 0
    ends: dict[tuple[int, float, float], list[int]] = {}
    starts: dict[tuple[int, float, float], list[int]] = {}
    for e in range(seg_u.shape[0]):  # once per build, to index segments by their end pieces
        a, b = int(geom_offsets[e]), int(geom_offsets[e + 1])
        lon0, lat0 = geom_lonlat[a + 1]
        lon1, lat1 = geom_lonlat[b - 2]
        starts.setdefault((int(seg_osmid_u[e]), float(lon0), float(lat0)), []).append(e)
        ends.setdefault((int(seg_osmid_v[e]), float(lon1), float(lat1)), []).append(e)
    indptr, indices = line_graph_csr(seg_u, seg_v, n_nodes)
    pairs: list[tuple[int, int]] = []
    applied = 0
    for r in resolved:
        froms = [e for e in ends.get((r.via, *r.from_xy), []) if r.from_way in seg_ways[e]]
        tos = {
            e
            for way, to_xy in r.to
            for e in starts.get((r.via, *to_xy), [])
            if way in seg_ways[e]
        }
        if r.only and not tos:  # never forbid every way out because the to-way went missing
            continue
        before = len(pairs)
        for f in froms:
            if r.only:
                succ = indices[indptr[f] : indptr[f + 1]]
                pairs.extend((f, int(s)) for s in succ if int(s) not in tos)
            else:
                pairs.extend((f, t) for t in tos)
        applied += len(pairs) > before
    if not pairs:
        return np.empty((0, 2), dtype=np.int64), applied
    return np.unique(np.asarray(pairs, dtype=np.int64), axis=0), applied
