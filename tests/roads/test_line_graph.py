"""Line-graph construction: consecutive segments, U-turn rule, strong connectivity, networkx."""

import networkx as nx
import numpy as np
import pytest
from scipy.sparse.csgraph import connected_components

from ev_nav.roads.network import build_network, line_graph_csr


def _pairs(net):
    src = np.repeat(np.arange(net.n_segments), np.diff(net.lg_indptr))
    return src, net.lg_indices


@pytest.mark.parametrize("name", ["monaco", "town"])
def test_connections_are_consecutive_and_uturns_only_at_dead_ends(name, request):
    net = request.getfixturevalue(name)
    e1, e2 = _pairs(net)
    assert (net.seg_v[e1] == net.seg_u[e2]).all()
    uturn = net.seg_v[e2] == net.seg_u[e1]
    # a U-turn is present only where the segment has no other continuation
    out_deg = np.diff(net.lg_indptr)
    assert (out_deg[e1[uturn]] == 1).all()
    # and every continuation that exists is present: all non-U-turn ones, or the U-turn(s) alone
    node_out = np.bincount(net.seg_u, minlength=net.n_nodes)
    key = net.seg_u * net.n_nodes + net.seg_v
    uniq, counts = np.unique(key, return_counts=True)
    rev_key = net.seg_v * net.n_nodes + net.seg_u
    pos = np.searchsorted(uniq, rev_key)
    pos = np.minimum(pos, len(uniq) - 1)
    n_reverse = np.where(uniq[pos] == rev_key, counts[pos], 0)
    proper = node_out[net.seg_v] - n_reverse
    expected = np.where(proper > 0, proper, node_out[net.seg_v])
    np.testing.assert_array_equal(out_deg, expected)


@pytest.mark.parametrize("name", ["monaco", "luxembourg", "town"])
def test_strongly_connected(name, request):
    net = request.getfixturevalue(name)
    n_comp, _ = connected_components(net.line_graph, directed=True, connection="strong")
    assert n_comp == 1


def test_agrees_with_networkx_line_graph(monaco):
    """CSR arrays == networkx.line_graph minus illegal U-turns, on a real network."""
    g = nx.MultiDiGraph()
    g.add_nodes_from(range(monaco.n_nodes))
    for e, (u, v) in enumerate(zip(monaco.seg_u.tolist(), monaco.seg_v.tolist(), strict=True)):
        g.add_edge(u, v, key=e)
    lg = nx.line_graph(g)
    nx_pairs = {(a[2], b[2]) for a, b in lg.edges()}
    # networkx keeps every U-turn; the spec allows them only at dead ends.
    u, v = monaco.seg_u, monaco.seg_v
    proper = {}
    for a, b in nx_pairs:
        proper.setdefault(a, []).append(v[b] != u[a])
    legal = {(a, b) for a, b in nx_pairs if v[b] != u[a] or not any(proper[a])}
    ours = set(zip(*(x.tolist() for x in _pairs(monaco)), strict=True))
    assert ours == legal


def test_dead_end_keeps_its_uturn():
    # a - b - c with c a dead end (two-way streets): c must be able to turn around
    indptr, indices = line_graph_csr(np.array([0, 1, 1, 2]), np.array([1, 0, 2, 1]), 3)
    succ = {e: set(indices[indptr[e] : indptr[e + 1]].tolist()) for e in range(4)}
    assert succ[2] == {3}  # b→c continues only by turning around at c
    assert succ[0] == {2}  # a→b must not U-turn back to a: it can go on to c
    assert succ[3] == {1}


def test_pruning_removes_one_way_traps():
    # square 0-1-2-3 two-way with a two-way diagonal 0-2 (without it, no U-turns would split
    # the ring into a clockwise and an anticlockwise cycle), plus a one-way spur 3→4 with no
    # way back: 4 is a trap and the spur must go
    u = np.array([0, 1, 1, 2, 2, 3, 3, 0, 0, 2, 3])
    v = np.array([1, 0, 2, 1, 3, 2, 0, 3, 2, 0, 4])
    lon = np.array([0.0, 1, 1, 0, 2]) * 1e-3
    lat = np.array([0.0, 0, 1, 1, 2]) * 1e-3
    net = build_network(
        name="t",
        node_lon=lon,
        node_lat=lat,
        node_elevation=np.zeros(5),
        node_osmid=np.arange(5),
        seg_u=u,
        seg_v=v,
        length_m=np.full(11, 100.0),
        speed_mps=np.full(11, 10.0),
        highway=np.zeros(11, dtype=np.int16),
        highway_classes=("residential",),
        speed_imputed=np.zeros(11, dtype=bool),
    )
    assert net.n_segments == 10 and net.n_nodes == 4
    assert net.meta["segments_removed_for_connectivity"] == 1
