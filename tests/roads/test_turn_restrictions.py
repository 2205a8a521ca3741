"""OSM turn restrictions become forbidden turns that routes obey (issue 26).

A 3 × 3 grid of two-way streets, every block side its own way (as OSM wants a restriction's
from- and to-way to end at the via node). Nodes are numbered ``1 + i + 3 j`` for column ``i``
and row ``j``; the junction under test is the centre, node 5, entered from the south (node 2).
"""

import dataclasses
import json

import numpy as np
import pytest

from ev_nav.bandits.routing import Oracle, Router
from ev_nav.errors import NetworkCacheError
from ev_nav.roads.load import load_osm
from ev_nav.roads.network import RoadNetwork
from tests.osm_helpers import write_pbf

pytestmark = pytest.mark.filterwarnings("ignore:.*no elevation source:UserWarning")

# block sides: (way id, node a, node b)
PIECES = [
    (101, 1, 2), (102, 2, 3), (103, 4, 5), (104, 5, 6), (105, 7, 8), (106, 8, 9),
    (111, 1, 4), (112, 4, 7), (113, 2, 5), (114, 5, 8), (115, 3, 6), (116, 6, 9),
]
WAY = {frozenset((a, b)): w for w, a, b in PIECES}


def grid_osm(relations: str) -> str:
    """The grid as OSM XML, with ``relations`` (XML text) appended."""
    nodes = "".join(
        f"<node id='{1 + i + 3 * j}' lat='{49.600 + 0.001 * j:.7f}' "
        f"lon='{6.100 + 0.0014 * i:.7f}'/>\n"
        for j in range(3)
        for i in range(3)
    )
    ways = "".join(
        f"<way id='{w}'><nd ref='{a}'/><nd ref='{b}'/>"
        "<tag k='highway' v='residential'/><tag k='maxspeed' v='30'/></way>\n"
        for w, a, b in PIECES
    )
    head = "<?xml version='1.0' encoding='UTF-8'?>\n<osm version='0.6'>\n"
    return f"{head}{nodes}{ways}{relations}</osm>\n"


def restriction(rel_id: int, value: str, frm: int, via: int, to: int, extra: str = "") -> str:
    return (
        f"<relation id='{rel_id}'><member type='way' ref='{frm}' role='from'/>"
        f"<member type='node' ref='{via}' role='via'/>"
        f"<member type='way' ref='{to}' role='to'/>"
        f"<tag k='type' v='restriction'/><tag k='restriction' v='{value}'/>{extra}</relation>\n"
    )


def build(tmp_path, relations: str, name: str = "grid") -> RoadNetwork:
    path = tmp_path / f"{name}.osm"
    path.write_text(grid_osm(relations))
    return load_osm(path)


def seg(net: RoadNetwork, *osm_nodes: int) -> int:
    """The segment from the first to the last of ``osm_nodes`` (through the others)."""
    u = int(np.flatnonzero(net.node_osmid == osm_nodes[0])[0])
    v = int(np.flatnonzero(net.node_osmid == osm_nodes[-1])[0])
    hits = np.flatnonzero((net.seg_u == u) & (net.seg_v == v))
    assert hits.shape[0] == 1, osm_nodes
    return int(hits[0])


def unrestricted(net: RoadNetwork) -> RoadNetwork:
    return dataclasses.replace(net, forbidden_turns=np.empty((0, 2), dtype=np.int64))


def cost(net: RoadNetwork, path) -> float:
    return float(net.length_m[np.asarray(path)].sum())


def uses(path, a: int, b: int) -> bool:
    return any(x == a and y == b for x, y in zip(path[:-1], path[1:], strict=True))


#: A restriction whose 'except' exempts cars (must be ignored) and one over a via way (skipped).
IGNORED = (
    restriction(9, "no_right_turn", WAY[frozenset((2, 5))], 5, WAY[frozenset((5, 6))],
                "<tag k='except' v='bicycle;motorcar'/>")
    + "<relation id='10'><member type='way' ref='113' role='from'/>"
    "<member type='way' ref='114' role='via'/><member type='way' ref='105' role='to'/>"
    "<tag k='type' v='restriction'/><tag k='restriction' v='no_left_turn'/></relation>\n"
)


def test_no_left_turn_makes_the_route_detour(tmp_path):
    rel = restriction(1, "no_left_turn", WAY[frozenset((2, 5))], 5, WAY[frozenset((4, 5))])
    net = build(tmp_path, rel + IGNORED)
    south_in, west_out = seg(net, 2, 5), seg(net, 5, 4)
    np.testing.assert_array_equal(net.forbidden_turns, [[south_in, west_out]])
    assert net.meta["turn_restrictions"] == {
        "read": 1, "located": 1, "applied": 1, "skipped": {"not_for_cars": 1, "via_way": 1}
    }
    # the transition is a physical connection, gone only from the routing graph
    assert west_out in net.lg_indices[net.lg_indptr[south_in] : net.lg_indptr[south_in + 1]]
    ptr, idx = net.routing_graph()
    assert west_out not in idx[ptr[south_in] : ptr[south_in + 1]]
    assert net.n_connections - idx.shape[0] == 1

    goal = seg(net, 4, 1, 2)  # down the west side: the left turn is the short way there
    free = Router(unrestricted(net)).route(net.length_m, south_in, goal)
    assert uses(free, south_in, west_out)
    path = Router(net).route(net.length_m, south_in, goal)
    assert path[0] == south_in and path[-1] == goal
    assert not uses(path, south_in, west_out)
    assert all(b in idx[ptr[a] : ptr[a + 1]] for a, b in zip(path[:-1], path[1:], strict=True))
    # the detour round the north-west block: two block sides longer
    assert cost(net, path) > cost(net, free) + 150
    np.testing.assert_array_equal(path, [south_in, seg(net, 5, 8), seg(net, 8, 7, 4), goal])
    # the regret oracle's optimum is a route the agent may drive, at the Router's cost
    best, best_cost = Oracle(net, net.length_m).optimal(south_in, goal)
    assert not uses(best, south_in, west_out)
    assert best_cost == pytest.approx(cost(net, path), rel=1e-9)


def test_only_straight_on_forbids_the_other_turns(tmp_path):
    rel = restriction(2, "only_straight_on", WAY[frozenset((2, 5))], 5, WAY[frozenset((5, 8))])
    net = build(tmp_path, rel)
    south_in = seg(net, 2, 5)
    pairs = {tuple(p) for p in net.forbidden_turns.tolist()}
    assert pairs == {(south_in, seg(net, 5, 4)), (south_in, seg(net, 5, 6))}
    ptr, idx = net.routing_graph()
    assert idx[ptr[south_in] : ptr[south_in + 1]].tolist() == [seg(net, 5, 8)]
    goal = seg(net, 6, 3, 2)  # down the east side
    free = Router(unrestricted(net)).route(net.length_m, south_in, goal)
    path = Router(net).route(net.length_m, south_in, goal)
    assert uses(free, south_in, seg(net, 5, 6)) and path[1] == seg(net, 5, 8)
    assert cost(net, path) > cost(net, free)


def test_restrictions_survive_pbf_and_the_network_file(tmp_path):
    rel = restriction(1, "no_left_turn", WAY[frozenset((2, 5))], 5, WAY[frozenset((4, 5))])
    xml_net = build(tmp_path, rel)
    pbf_net = load_osm(write_pbf(tmp_path / "grid.osm", tmp_path / "grid.osm.pbf"))
    np.testing.assert_array_equal(pbf_net.forbidden_turns, xml_net.forbidden_turns)
    np.testing.assert_array_equal(pbf_net.seg_u, xml_net.seg_u)
    np.testing.assert_array_equal(pbf_net.length_m, xml_net.length_m)

    back = RoadNetwork.load(xml_net.save(tmp_path / "grid.npz"))
    np.testing.assert_array_equal(back.forbidden_turns, xml_net.forbidden_turns)
    assert back.forbidden_turns.dtype == np.int64
    assert back.arrays_hash == xml_net.arrays_hash != unrestricted(xml_net).arrays_hash
    for a, b in zip(back.routing_graph(), xml_net.routing_graph(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_tampered_forbidden_turns_are_caught(tmp_path):
    rel = restriction(1, "no_left_turn", WAY[frozenset((2, 5))], 5, WAY[frozenset((4, 5))])
    path = build(tmp_path, rel).save(tmp_path / "grid.npz")
    with np.load(path) as data:
        arrays = dict(data)
    arrays["forbidden_turns"] = np.empty((0, 2), dtype=np.int64)  # the restriction removed
    np.savez(path, **arrays)
    with pytest.raises(NetworkCacheError, match="damaged or was modified"):
        RoadNetwork.load(path)


def test_network_files_from_before_restrictions_still_open(town, tmp_path):
    # a file as earlier versions wrote it: the same arrays and header, no forbidden_turns
    path = town.save(tmp_path / "town.npz")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "forbidden_turns"}
    np.savez(path, **arrays)
    header = json.loads(bytes(arrays["header_json"]).decode())
    back = RoadNetwork.load(path)
    assert back.forbidden_turns.shape == (0, 2) and back.forbidden_turns.dtype == np.int64
    assert back.arrays_hash == header["arrays_sha256"] == town.arrays_hash
    ptr, idx = back.routing_graph()
    np.testing.assert_array_equal(ptr, back.lg_indptr)
    np.testing.assert_array_equal(idx, back.lg_indices)
    assert back.summary()["forbidden_turns"] == 0
