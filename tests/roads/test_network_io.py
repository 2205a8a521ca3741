"""Persistence, interchange views and the synthetic town."""

import json

import numpy as np
import pytest

from ev_nav.errors import NetworkCacheError, NetworkFileNotFound
from ev_nav.roads.network import RoadNetwork
from ev_nav.roads.synthetic import synthetic_town


def test_save_load_roundtrip(town, tmp_path):
    path = town.save(tmp_path / "town.npz")
    back = RoadNetwork.load(path)
    for name in ("seg_u", "seg_v", "length_m", "grade", "lg_indptr", "lg_indices", "geom_lonlat"):
        np.testing.assert_array_equal(getattr(back, name), getattr(town, name))
    assert back.highway_classes == town.highway_classes
    assert back.content_hash == town.content_hash
    with pytest.raises(ValueError):
        back.length_m[0] = 1.0  # arrays are read-only


def test_load_errors(tmp_path):
    with pytest.raises(NetworkFileNotFound):
        RoadNetwork.load(tmp_path / "nope.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(NetworkCacheError):
        RoadNetwork.load(bad)


def test_interchange_views(town):
    g = town.to_networkx()
    assert g.number_of_nodes() == town.n_segments
    assert g.number_of_edges() == town.n_connections
    e = 5
    assert g.nodes[e]["length_m"] == pytest.approx(town.length_m[e])
    succ = set(town.lg_indices[town.lg_indptr[e] : town.lg_indptr[e + 1]].tolist())
    assert set(g.successors(e)) == succ
    gdf = town.to_geodataframe()
    assert len(gdf) == town.n_segments
    assert gdf.crs.to_epsg() == 4326
    geo = json.loads(gdf.iloc[:3].to_json())
    assert geo["features"][0]["geometry"]["type"] == "LineString"


def test_synthetic_town_is_deterministic_and_sized():
    a = synthetic_town(3000, seed=7)
    b = synthetic_town(3000, seed=7)
    c = synthetic_town(3000, seed=8)
    np.testing.assert_array_equal(a.node_elevation, b.node_elevation)
    assert not np.array_equal(a.node_elevation, c.node_elevation)
    assert 0.8 * 3000 < a.n_segments < 1.2 * 3000
    small = synthetic_town(100, seed=0)
    assert 80 <= small.n_segments <= 200
    # realistic terrain: most grades gentle, some steeper, none beyond the clip
    g = np.abs(a.grade)
    assert 0.005 < np.median(g) < 0.06 and g.max() <= 0.3
    # all classes present with their speed limits
    assert set(a.highway_classes[i] for i in np.unique(a.highway)) == {
        "motorway",
        "primary",
        "secondary",
        "residential",
    }
    assert (a.speed_mps > 0).all() and not a.speed_imputed.any()


def test_e_det_matches_energy_model(town):
    from ev_nav.energy import segment_energy_wh

    np.testing.assert_allclose(
        town.e_det(), segment_energy_wh(town.length_m, town.speed_mps, town.grade)
    )
    f = town.features
    assert f.shape == (town.n_segments, 3)
    np.testing.assert_allclose(f.mean(axis=0), 0, atol=1e-9)
    np.testing.assert_allclose(f.std(axis=0), 1, atol=1e-9)
