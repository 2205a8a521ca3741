"""Settings: one data folder (old name still read), cache folders, osmnx settings restored."""

from __future__ import annotations

from pathlib import Path

import osmnx as ox
import pytest

from ev_nav import settings
from ev_nav.roads.load import load_osm

#: A drivable square of two-way streets whose nodes carry OSM 'ele' tags [m].
SQUARE = """<?xml version='1.0' encoding='UTF-8'?>
<osm version='0.6'>
  <node id='1' lat='43.730' lon='7.420'><tag k='ele' v='10'/></node>
  <node id='2' lat='43.730' lon='7.424'><tag k='ele' v='20'/></node>
  <node id='3' lat='43.733' lon='7.424'><tag k='ele' v='30'/></node>
  <node id='4' lat='43.733' lon='7.420'><tag k='ele' v='20'/></node>
  <way id='10'><nd ref='1'/><nd ref='2'/><nd ref='3'/><nd ref='4'/><nd ref='1'/>
    <tag k='highway' v='residential'/></way>
  <way id='11'><nd ref='1'/><nd ref='3'/><tag k='highway' v='residential'/></way>
</osm>
"""


def test_data_dir_reads_the_new_name_first_then_the_old(monkeypatch, tmp_path):
    monkeypatch.delenv("EV_NAV_DATA", raising=False)
    monkeypatch.delenv("EV_NAV_SHARED_DATA", raising=False)
    assert settings.data_dir() == settings.REPO_ROOT.parent / "shared" / "data"
    monkeypatch.setenv("EV_NAV_SHARED_DATA", str(tmp_path / "old"))
    assert settings.data_dir() == tmp_path / "old"
    monkeypatch.setenv("EV_NAV_DATA", str(tmp_path / "new"))
    assert settings.data_dir() == tmp_path / "new"


def test_cache_folders_follow_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("EV_NAV_CACHE", raising=False)
    monkeypatch.delenv("EV_NAV_TRUTH_CACHE", raising=False)
    assert settings.network_cache_dir() == Path.home() / ".cache" / "ev-nav"
    assert settings.truth_cache_dir(tmp_path) == tmp_path / "truth"
    monkeypatch.setenv("EV_NAV_CACHE", str(tmp_path / "c"))
    monkeypatch.setenv("EV_NAV_TRUTH_CACHE", str(tmp_path / "t"))
    assert settings.network_cache_dir() == tmp_path / "c"
    assert settings.truth_cache_dir("elsewhere") == tmp_path / "t"
    assert settings.ROUTES_FILE.is_file()


def test_reading_an_osm_file_leaves_osmnx_settings_as_they_were(tmp_path):
    before_tags = list(ox.settings.useful_tags_node)
    before_log = ox.settings.log_console
    assert "ele" not in before_tags  # osmnx's default; the loader adds it only while reading
    osm = tmp_path / "square.osm"
    osm.write_text(SQUARE)
    net = load_osm(osm, cache_dir=tmp_path)
    assert net.n_segments == 6  # 1→3 via 2, 3→1 via 4, the diagonal; each both ways
    assert sorted(set(net.node_elevation.round(6))) == [10.0, 30.0]  # 'ele' tags were read
    assert list(ox.settings.useful_tags_node) == before_tags
    assert ox.settings.log_console == before_log


def test_osmnx_settings_are_restored_after_an_error():
    before = ox.settings.log_console
    try:
        with settings.osmnx_settings(log_console=not before):
            assert ox.settings.log_console is (not before)
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert ox.settings.log_console == before


def test_a_lone_ring_of_road_is_a_named_error_not_a_networkx_one(tmp_path):
    from ev_nav.errors import NoDrivableRoadsError

    osm = tmp_path / "ring.osm"
    osm.write_text(SQUARE.replace("<way id='11'><nd ref='1'/><nd ref='3'/>", "<way id='11'>"))
    with pytest.raises(NoDrivableRoadsError, match="no road junctions"):
        load_osm(osm, cache_dir=tmp_path)
