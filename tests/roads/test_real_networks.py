"""Real OSM extracts from ../shared/data: sizes, elevation, speeds (issue 2 acceptance)."""

import warnings

import numpy as np
import pytest

from ev_nav.roads.load import load_osm


def test_most_monaco_sizes_and_elevation(monaco):
    # NOTICE.md measured ~1,187 nodes / 2,586 segments when the file was chosen.
    assert monaco.n_nodes == pytest.approx(1190, abs=30)
    assert monaco.n_segments == pytest.approx(2590, abs=60)
    assert monaco.meta["elevation_source"] == "osm-ele"
    assert monaco.node_elevation.min() == pytest.approx(0, abs=5)
    assert monaco.node_elevation.max() == pytest.approx(615, abs=10)
    for arr in (monaco.node_elevation, monaco.length_m, monaco.grade, monaco.speed_mps):
        assert np.isfinite(arr).all()
    assert np.abs(monaco.grade).max() <= 0.3 + 1e-12
    # MoST's IGN-style classes such as primary_tunnel are folded into their base class.
    assert all("_tunnel" not in c and "_bridge" not in c for c in monaco.highway_classes)
    assert monaco.speed_imputed.all()  # MoST has no maxspeed tags on the kept roads


def test_gh_monaco_elevation_from_srtm(network_cache, shared_file):
    net = load_osm(
        shared_file("gh_monaco.osm.gz"),
        dems=[shared_file("N43E007.hgt.zip")],
        cache_dir=network_cache,
    )
    assert net.meta["elevation_source"].startswith("dem:")
    assert np.isfinite(net.node_elevation).all()
    # Monaco rises from the sea to the hills above; a real raster gives a real spread.
    assert net.node_elevation.max() - net.node_elevation.min() > 50
    assert np.abs(net.grade).max() <= 0.3 + 1e-12
    assert net.meta["grade_clipped_share"] > 0  # raster noise on short edges needed clipping


def test_a_given_dem_takes_precedence_over_the_files_ele_tags(monaco, network_cache, shared_file):
    """The README said 'ele' tags are used when present and --dem only otherwise; a --dem given
    for a file with tags (MoST Monaco) is what the build uses, so the README now says so."""
    net = load_osm(shared_file("most_monaco.osm.gz"), dems=[shared_file("N43E007.hgt.zip")],
                   cache_dir=network_cache)
    assert net.meta["elevation_source"] == "dem:N43E007.hgt.zip"
    assert not np.array_equal(net.node_elevation, monaco.node_elevation)
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "*Elevation*: the `--dem` rasters when given (GeoTIFF, SRTM `.hgt` or `.hgt.zip`;" \
        " they take precedence over the file's tags), else OSM `ele` node tags" in " ".join(
            readme.split())


def test_lust_speeds_parsed_and_flat(shared_file, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = load_osm(shared_file("lust_luxembourg.osm.gz"))
    assert 1 - net.speed_imputed.mean() >= 0.95
    assert (net.grade == 0).all()
    assert any("no elevation source" in str(w.message) for w in caught)
    assert set(np.round(net.speed_mps[~net.speed_imputed] * 3.6)) <= {30, 50, 70, 90, 110, 130}


def test_cache_is_keyed_and_fast(monaco, network_cache, shared_file):
    import time

    t0 = time.perf_counter()
    again = load_osm(shared_file("most_monaco.osm.gz"), cache_dir=network_cache)
    assert time.perf_counter() - t0 < 1.0  # generous here; the bench script measures < 0.2 s
    np.testing.assert_array_equal(again.lg_indices, monaco.lg_indices)
    np.testing.assert_array_equal(again.length_m, monaco.length_m)
    # a different option is a different cache entry
    from ev_nav.roads.load import LoadOptions

    other = load_osm(
        shared_file("most_monaco.osm.gz"),
        options=LoadOptions(max_grade=0.1),
        cache_dir=network_cache,
    )
    assert np.abs(other.grade).max() <= 0.1 + 1e-12
    assert other.content_hash != monaco.content_hash


def test_grade_limit_keeps_energy_a_potential(monaco):
    """Limiting grades must not create cycles of negative E_det (naive clipping did on MoST)."""
    from ev_nav.bandits.routing import Oracle

    raw = (monaco.node_elevation[monaco.seg_v] - monaco.node_elevation[monaco.seg_u]) / (
        monaco.length_m
    )
    np.testing.assert_allclose(raw, monaco.grade, atol=1e-12)  # grades are Δh / ℓ
    assert monaco.meta["grade_clipped_share"] > 0  # the raw data did need limiting
    assert monaco.meta["grade_limit_max_move_m"] < 10  # by small elevation moves
    Oracle(monaco, monaco.e_det())  # raises NegativeCycleError if the limit broke it
