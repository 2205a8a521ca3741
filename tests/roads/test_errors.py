"""Bad input: named exceptions from the library, one-line messages from the CLI."""

import bz2
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from ev_nav.cli import main
from ev_nav.errors import (
    ElevationCoverageError,
    InvalidNetworkData,
    NetworkFileNotFound,
    NoDrivableRoadsError,
    NotOSMError,
)
from ev_nav.roads.load import load_osm
from ev_nav.roads.network import build_network

FOOTWAYS_ONLY = """<?xml version='1.0' encoding='UTF-8'?>
<osm version='0.6'>
  <node id='1' lat='43.73' lon='7.42'/>
  <node id='2' lat='43.731' lon='7.421'/>
  <node id='3' lat='43.732' lon='7.422'/>
  <way id='10'><nd ref='1'/><nd ref='2'/><nd ref='3'/><tag k='highway' v='footway'/></way>
</osm>
"""


@pytest.fixture()
def footway_osm(tmp_path):
    p = tmp_path / "footways.osm.gz"
    with gzip.open(p, "wt") as fh:
        fh.write(FOOTWAYS_ONLY)
    return p


@pytest.fixture()
def not_osm(tmp_path):
    p = tmp_path / "notes.osm"
    p.write_text("this is not XML at all\n")
    return p


def _cli_fails(capsys, argv, fragment):
    code = main(argv)
    err = capsys.readouterr().err
    assert code != 0
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("ev-nav: error:")]
    assert len(lines) == 1, err
    assert fragment in lines[0]


def test_missing_file(tmp_path, capsys):
    with pytest.raises(NetworkFileNotFound):
        load_osm(tmp_path / "missing.osm")
    _cli_fails(
        capsys,
        ["network", "build", "--osm", str(tmp_path / "missing.osm"),
         "--out", str(tmp_path / "x.npz")],
        "not found",
    )


def test_not_osm(not_osm, tmp_path, capsys):
    with pytest.raises(NotOSMError):
        load_osm(not_osm)
    _cli_fails(
        capsys, ["network", "build", "--osm", str(not_osm), "--out", str(tmp_path / "x.npz")], "OSM"
    )


def test_no_drivable_roads(footway_osm, tmp_path, capsys):
    with pytest.raises(NoDrivableRoadsError):
        load_osm(footway_osm)
    _cli_fails(
        capsys,
        ["network", "build", "--osm", str(footway_osm), "--out", str(tmp_path / "x.npz")],
        "drivable",
    )


def test_dem_does_not_cover(shared_file, tmp_path, capsys):
    # West Oakland vs a San Francisco DEM: no overlap (see NOTICE.md)
    osm, dem = shared_file("West-Oakland.osm.bz2"), shared_file("elevation1.tif")
    with pytest.raises(ElevationCoverageError):
        load_osm(osm, dems=[dem])
    _cli_fails(
        capsys,
        ["network", "build", "--osm", str(osm), "--dem", str(dem),
         "--out", str(tmp_path / "x.npz")],
        "do not cover",
    )
    assert not (tmp_path / "x.npz").exists()


def test_a_truncated_dem_is_one_line_before_the_osm_is_read(shared_file, tmp_path, capsys,
                                                           monkeypatch):
    """A half-downloaded .hgt.zip was a BadZipFile traceback, after the whole OSM read."""
    import ev_nav.roads.load as load

    tile = shared_file("N43E007.hgt.zip").read_bytes()
    cut = tmp_path / "N43E007.hgt.zip"
    cut.write_bytes(tile[: len(tile) // 2])
    monkeypatch.setattr(load, "_read_osm_graph", lambda *a, **k: pytest.fail("OSM read first"))
    with pytest.raises(ElevationCoverageError, match="a truncated download"):
        load_osm(shared_file("gh_monaco.osm.gz"), dems=[cut])
    _cli_fails(
        capsys,
        ["network", "build", "--osm", str(shared_file("gh_monaco.osm.gz")), "--dem", str(cut),
         "--out", str(tmp_path / "x.npz")],
        "cannot read DEM",
    )
    assert not (tmp_path / "x.npz").exists()


def test_bz2_is_read(shared_file, tmp_path):
    net = load_osm(shared_file("West-Oakland.osm.bz2"))
    assert net.n_segments > 10
    # and a bz2 that is not OSM is a clear error
    p = tmp_path / "junk.osm.bz2"
    p.write_bytes(bz2.compress(b"junk"))
    with pytest.raises(NotOSMError):
        load_osm(p)


@pytest.mark.parametrize("bad", [np.nan, -5.0, 0.0, np.inf])
def test_bad_lengths(bad):
    length = np.array([100.0, bad, 100.0, 100.0])
    with pytest.raises(InvalidNetworkData, match="length"):
        build_network(
            name="bad",
            node_lon=np.array([0.0, 0.001]),
            node_lat=np.array([0.0, 0.0]),
            node_elevation=np.zeros(2),
            node_osmid=np.arange(2),
            seg_u=np.array([0, 1, 0, 1]),
            seg_v=np.array([1, 0, 1, 0]),
            length_m=length,
            speed_mps=np.full(4, 10.0),
            highway=np.zeros(4, dtype=np.int16),
            highway_classes=("residential",),
            speed_imputed=np.zeros(4, dtype=bool),
        )


@pytest.mark.parametrize("content", ["text", "csv", "npy"])
def test_cli_info_on_bad_cache_file(tmp_path, capsys, content):
    """Not an .npz archive: one line, without numpy's advice to load pickled data (a CSV) and
    without a TypeError (a lone .npy array has no archive to open)."""
    p = tmp_path / "x.npz"
    if content == "npy":
        with p.open("wb") as fh:
            np.save(fh, np.arange(3))
    else:
        p.write_text("nope" if content == "text" else "lat,lon,power_kw,name\n49.6,6.1,50,G\n")
    _cli_fails(capsys, ["network", "info", str(p)], "not an ev-nav network file")
    assert "pickle" not in capsys.readouterr().err


def test_cli_info_on_an_npz_that_is_no_network(tmp_path, capsys):
    p = tmp_path / "x.npz"
    np.savez(p, a=np.arange(3))
    _cli_fails(capsys, ["network", "info", str(p)], "not a readable")


def test_cli_build_and_info_roundtrip(shared_file, tmp_path, capsys):
    out = tmp_path / "oak.npz"
    assert (
        main(
            [
                "network",
                "build",
                "--osm",
                str(shared_file("West-Oakland.osm.bz2")),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert out.is_file()
    assert main(["network", "info", str(out), "--json"]) == 0
    text = capsys.readouterr().out
    assert '"segments"' in text and "speed_imputed_share" in text


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["build", "--max-grade", "-1"], "expected a positive, finite number, got '-1'"),
        (["build", "--max-grade", "0"], "expected a positive, finite number, got '0'"),
        (["build", "--max-grade", "30"], "a grade limit is a slope in (0, 1]"),
        (["fetch", "43.7,7.4", "--dist", "-5"], "expected a positive, finite number, got '-5'"),
    ],
)
def test_cli_refuses_a_grade_limit_or_radius_out_of_range(tmp_path, capsys, argv, fragment):
    """--max-grade -1 built a network with every road flat (max_grade 0 in 'network info'),
    30 (a percentage) limited nothing; a negative --dist went to the internet."""
    osm = tmp_path / "absent.osm"  # refused before the file is read
    extra = ["--osm", str(osm)] if argv[0] == "build" else []
    assert main(["network", *argv, *extra, "--out", str(tmp_path / "n.npz")]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err
    assert not (tmp_path / "n.npz").exists()


@pytest.mark.parametrize("place", ["-33.9,18.4", "-33.9, -18.4", "-0.5,-78"])
def test_fetch_takes_a_southern_point(tmp_path, capsys, monkeypatch, place):
    """'network fetch -33.9,18.4' failed with 'the following arguments are required: place'
    (argparse took the point for an option; it worked only after '--')."""
    import ev_nav.roads.load as load
    from ev_nav.errors import OfflineError

    asked = []

    def offline(place, **_kw):
        asked.append(place)
        raise OfflineError("no internet in the tests")

    monkeypatch.setattr(load, "fetch_place", offline)
    assert main(["network", "fetch", place, "--out", str(tmp_path / "n.npz")]) == 2
    assert asked == [place]
    assert "no internet in the tests" in capsys.readouterr().err
    # an unknown option is still one
    assert main(["network", "fetch", "-x", "--out", str(tmp_path / "n.npz")]) == 2
    assert "required: place" in capsys.readouterr().err


def test_info_shows_the_bounds_and_no_bare_none(capsys):
    """'network info' gave no extent (a user provoked an out-of-network error to learn it) and
    printed 'road_kind_segments None' for the synthetic town."""
    from ev_nav.roads.synthetic import synthetic_town

    net = synthetic_town(300)
    lon0, lat0, lon1, lat1 = (float(net.node_lon.min()), float(net.node_lat.min()),
                              float(net.node_lon.max()), float(net.node_lat.max()))
    assert main(["network", "info", "--synthetic", "--segments", "300"]) == 0
    out = capsys.readouterr().out
    assert f"lat {lat0:.4f} .. {lat1:.4f}, lon {lon0:.4f} .. {lon1:.4f}" in out
    assert "None" not in out
    assert "road_kind_segments" in out and "not recorded (--avoid motorway works" in out
    assert main(["network", "info", "--synthetic", "--segments", "300", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["bounds"] == {"lat": [round(lat0, 6), round(lat1, 6)],
                             "lon": [round(lon0, 6), round(lon1, 6)]}
    assert doc["road_kind_segments"] is None


def test_cli_info_on_a_network_file_damaged_inside(tmp_path, capsys):
    """A network file with a flipped byte inside one array (a bad disk, a broken copy): the zip
    directory still reads, but the member's CRC fails. 'network info' printed zipfile's
    BadZipFile traceback; it is the damaged-file line with the rebuild advice."""
    from ev_nav.roads.synthetic import synthetic_town

    p = synthetic_town(300).save(tmp_path / "town.npz")
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside an array member, far from the zip directory
    p.write_bytes(bytes(data))
    _cli_fails(capsys, ["network", "info", str(p)], "not a readable ev-nav network file")


def test_cli_build_from_an_osm_file_without_elements(tmp_path, capsys):
    """An OSM XML file with no element at all (an export of an empty area): the error passed on
    osmnx's Overpass advice ('No data elements in server response. Check query location/filters
    and log.'), though no server was asked and no log was written."""
    p = tmp_path / "empty-area.osm"
    p.write_text("<?xml version='1.0' encoding='UTF-8'?>\n<osm version='0.6'></osm>\n")
    with pytest.raises(NoDrivableRoadsError):
        load_osm(p)
    assert main(["network", "build", "--osm", str(p), "--out", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert err == f"ev-nav: error: {p} holds no OSM nodes or ways\n"
    assert not (tmp_path / "x.npz").exists()


@pytest.mark.parametrize("command", ["build", "fetch"])
def test_cli_out_must_be_a_network_file_name(tmp_path, capsys, monkeypatch, command):
    """'network build --osm town.osm --out town.osm' overwrote the user's OSM file with the
    network archive; '--out town' wrote a network that 'routes pick' then read as OSM (it goes
    by the .npz suffix); '--out DIR' built for minutes and then failed naming a hidden temporary
    file. Each is refused before anything is read or fetched."""
    import ev_nav.roads.load as load

    monkeypatch.setattr(load, "fetch_place", lambda *a, **k: pytest.fail("fetched"))
    osm = tmp_path / "town.osm"
    osm.write_text(FOOTWAYS_ONLY)
    folder = tmp_path / "nets"
    folder.mkdir()
    source = ["--osm", str(osm)] if command == "build" else ["43.7,7.4"]
    for out, fragment in (
        (osm, f"argument --out: a network file name ends in .npz (e.g. {tmp_path}/town.npz)"),
        (tmp_path / "town", f"argument --out: a network file name ends in .npz (e.g. "
                            f"{tmp_path}/town.npz)"),
        (folder, f"argument --out: {folder} is a folder; give a file name in it, e.g. "
                 f"{folder}/network.npz"),
        # a folder nothing can be written in: the build ran for minutes, then failed
        (Path("/proc/x.npz"), "argument --out: cannot write in /proc ("),
    ):
        assert main(["network", command, *source, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err
    assert osm.read_text() == FOOTWAYS_ONLY
    assert list(folder.iterdir()) == [] and not (tmp_path / "town").exists()


@pytest.mark.parametrize("option", [["--segments", "300"], ["--seed", "3"]])
def test_cli_info_refuses_town_options_with_a_file(tmp_path, capsys, option):
    """'network info town.npz --segments 300' printed the file's summary, the option unused."""
    from ev_nav.roads.synthetic import synthetic_town

    p = synthetic_town(300).save(tmp_path / "town.npz")
    assert main(["network", "info", str(p), *option]) == 2
    err = capsys.readouterr().err
    assert err == (f"ev-nav: error: {option[0]} sizes or seeds the synthetic town; it goes with "
                   "--synthetic, not a network file\n")
    # with --synthetic they still work, and the defaults are the documented ones
    assert main(["network", "info", "--synthetic", *option, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == ("synthetic-300-s0" if option[0] == "--segments"
                           else "synthetic-2000-s3")


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["95,7"], "argument place: a LAT,LON point has latitude in -90..90 and longitude in "
                   "-180..180, got '95,7'"),
        (["43.7,200"], "got '43.7,200'"),
        (["nan,7"], "got 'nan,7'"),
        (["  "], "argument place: expected a place name ('Monaco') or a LAT,LON point"),
        (["Monaco", "--dem", "absent.hgt"], "DEM file not found: absent.hgt"),
        (["Monaco", "--dem", "cut.hgt.zip"], "cannot read DEM cut.hgt.zip: File is not a zip "
                                             "file (a truncated download? fetch the tile again)"),
    ],
)
def test_fetch_refuses_what_it_cannot_use_before_going_online(tmp_path, capsys, monkeypatch,
                                                              argv, fragment):
    """A point out of range or an empty place went to the Overpass server (an error from there,
    or a download of nothing); a --dem that does not exist was found missing only after the
    download. Each is refused first, nothing fetched."""
    import ev_nav.roads.load as load

    monkeypatch.setattr(load, "fetch_place", lambda *a, **k: pytest.fail("fetched"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cut.hgt.zip").write_bytes(b"PK\x03\x04 half a tile")
    assert main(["network", "fetch", *argv, "--out", "n.npz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err, err
    assert not (tmp_path / "n.npz").exists()


@pytest.mark.parametrize(
    ("text", "value"),
    [("-1e1", True), ("-2.5E-1", True), ("-10%", True), ("-.5", True), ("-33.9,18.4", True),
     ("-33.9, -18.4", True), ("--soc", False), ("-v", False), ("-1e", False), ("-x1", False)],
)
def test_a_negative_number_in_any_notation_is_a_value(text, value):
    # '--temperature -1e1' and '--soc -10%' failed with 'expected one argument', not with what
    # was wrong (or, for the temperature, nothing at all)
    from ev_nav.cli import _NEGATIVE_VALUE

    assert bool(_NEGATIVE_VALUE.match(text)) is value


def test_a_commands_warning_is_one_line_without_pythons_source_line(tmp_path, capsys):
    # 'routes pick' (and 'fleet run') on a network without elevation printed Python's form:
    # ".../ev_nav/roads/load.py:536: UserWarning: ..." and the source line below it
    from tests.test_route_options import write_grid_osm

    osm = write_grid_osm(tmp_path / "grid.osm")
    main(["routes", "pick", str(osm), "--count", "1", "--min-separation", "10"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if "elevation" in ln]
    assert len(lines) == 1 and lines[0].startswith("ev-nav: warning: grid: no elevation source")
    assert "UserWarning" not in err and "load.py" not in err and "Traceback" not in err


def test_api_inputs_of_the_wrong_shape_are_named_errors():
    # each was a library's own error: scipy's "'x' must be finite", a misleading "no points to
    # match", an IndexError (or, for a potential of another network's size, a wrong ΔΦ), and
    # numpy's "negative dimensions are not allowed"
    import numpy as np

    import ev_nav
    from ev_nav.errors import ConfigError, InvalidObservation

    net = ev_nav.synthetic_town(300)
    with pytest.raises(InvalidObservation, match="track point 0 has no position"):
        ev_nav.match_track(net, [np.nan, 8.01], [47.0, 47.01])
    with pytest.raises(InvalidObservation, match="one latitude per longitude; got 2 and 1"):
        ev_nav.match_track(net, [8.0, 8.01], [47.0])
    with pytest.raises(ConfigError, match=f"one value per node of {net.name} \\(100\\)"):
        ev_nav.potential_change(net, None, [1.0, 2.0])
    phi = np.arange(net.n_nodes, dtype=float)
    np.testing.assert_array_equal(ev_nav.potential_change(net, None, phi),
                                  phi[net.seg_v] - phi[net.seg_u])
    with pytest.raises(ConfigError, match="n_segments must be a whole number >= 0, got -1"):
        ev_nav.ChangeDetector(-1)


SQUARE = """<?xml version="1.0" encoding="UTF-8"?>
<osm version="0.6">
<node id="1" lat="43.7300" lon="7.4200"/><node id="2" lat="43.7300" lon="7.4300"/>
<node id="3" lat="43.7400" lon="7.4300"/><node id="4" lat="43.7400" lon="7.4200"/>
<way id="10"><nd ref="1"/><nd ref="2"/><tag k="highway" v="residential"/></way>
<way id="11"><nd ref="2"/><nd ref="3"/><tag k="highway" v="residential"/></way>
<way id="12"><nd ref="3"/><nd ref="4"/><tag k="highway" v="primary"/></way>
<way id="13"><nd ref="4"/><nd ref="1"/><tag k="highway" v="residential"/>
<tag k="oneway" v="yes"/></way>
</osm>"""


def test_bounds_hold_the_roads_not_only_the_intersections(tmp_path):
    """A loop simplified to two nodes on one meridian: the bounds (network info, the offline
    map's frame) were a line, lon 7.42 .. 7.42, and the east side of the loop was drawn off
    the map."""
    path = tmp_path / "square.osm"
    path.write_text(SQUARE)
    net = load_osm(path)
    assert np.ptp(net.node_lon) < 1e-9  # the case: the kept nodes lie on one meridian
    lon0, lat0, lon1, lat1 = net.bounds()
    assert (lon0, lat0, lon1, lat1) == pytest.approx((7.42, 43.73, 7.43, 43.74), abs=1e-9)
    assert (net.geom_lonlat[:, 0] >= lon0).all() and (net.geom_lonlat[:, 0] <= lon1).all()
