"""Map matching of noisy GPS tracks onto directed segments (issue 29, item 10).

Tracks are simulated along known routes (:func:`ev_nav.sim.gps.simulate_track`: 10 m Gaussian
noise per coordinate, a fix every 1–2 s at city speed), so every matched segment can be checked
against the route that was really driven.
"""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.bandits.routing import Router
from ev_nav.errors import ConfigError, TrackOffNetworkError
from ev_nav.roads.matching import MatchConfig, match_track
from ev_nav.roads.network import EARTH_RADIUS_M
from ev_nav.sim.gps import common_segments, simulate_track

NOISE_M = 10.0


def random_route(net, rng, min_m=2000.0, max_m=5000.0):
    """A shortest path of a few km between random segments (how a driver crosses a town)."""
    router = Router(net)
    while True:
        a, b = (int(x) for x in rng.integers(net.n_segments, size=2))
        path = router.route(net.length_m, a, b)
        if min_m <= net.length_m[path].sum() <= max_m:
            return path


def accuracy(net, seeds):
    """Share of segments right over several drives: matched segments in the true order over
    the longer of the two sequences (a missed segment and an extra one both count as wrong).

    Returns (all segments, fully driven segments): the first and last segment of a drive are
    only half driven (the track starts and ends in their middle), and on short ones the
    direction of travel there is ambiguous under 10 m noise.
    """
    right = total = right_inner = total_inner = 0
    for seed in seeds:
        rng = np.random.default_rng(seed)
        route = random_route(net, rng)
        track = simulate_track(net, route, rng, noise_m=NOISE_M)
        m = match_track(net, track.lon, track.lat, MatchConfig(gps_sigma_m=NOISE_M))
        _check_consistent(net, m, track.lon.size)
        right += common_segments(m.segments, route)
        total += max(m.segments.size, route.size)
        right_inner += common_segments(m.segments, route[1:-1])
        total_inner += max(m.segments.size, route.size) - 2
    return right / total, right_inner / total_inner


def _check_consistent(net, m, n_points):
    seg = m.segments
    # a drivable path: every step is a connection of the line graph (one-ways, turn rules)
    for a, b in zip(seg[:-1], seg[1:], strict=True):
        assert b in net.lg_indices[net.lg_indptr[a] : net.lg_indptr[a + 1]]
    assert m.point_segment.shape == (n_points,)
    used = m.point_segment >= 0
    assert np.isin(m.point_segment[used], seg).all()
    r = m.point_route_m[used]
    assert np.all(np.diff(r) >= 0) and r[0] >= 0
    assert r[-1] <= net.length_m[seg].sum() + 1e-6
    assert 0 <= m.first_fraction <= 1 and 0 <= m.last_fraction <= 1


def test_town_tracks_matched_at_least_98_percent(town):
    every, inner = accuracy(town, range(8))
    assert every >= 0.98 and inner >= 0.98, (every, inner)


@pytest.mark.slow
def test_monaco_tracks_matched_at_least_98_percent(monaco):
    # MoST Monaco: winding roads, tunnels, roundabouts of 10-20 m segments
    every, inner = accuracy(monaco, range(12))
    assert inner >= 0.98, (every, inner)
    assert every >= 0.95, (every, inner)


def test_exact_track_matches_exactly_and_positions_agree(town):
    rng = np.random.default_rng(3)
    route = random_route(town, rng)
    track = simulate_track(town, route, rng, noise_m=0.0)
    m = match_track(town, track.lon, track.lat, MatchConfig(gps_sigma_m=3.0))
    assert m.segments.tolist() == route.tolist()
    used = m.point_segment >= 0
    np.testing.assert_array_equal(m.point_segment[used], track.segment[used])
    # positions along the route agree with the simulated ones (same route, same origin)
    np.testing.assert_allclose(m.point_route_m[used], track.route_m[used], atol=1.0)
    assert m.first_fraction == pytest.approx(0.5, abs=0.01)
    assert m.last_fraction == pytest.approx(0.5, abs=0.01)
    assert m.n_breaks == 0 and m.n_off_network == 0


def test_outliers_are_skipped(town):
    rng = np.random.default_rng(5)
    route = random_route(town, rng)
    track = simulate_track(town, route, rng, noise_m=NOISE_M)
    lon, lat = track.lon.copy(), track.lat.copy()
    bad = np.array([20, 21, 60])
    lat[bad] += 2000.0 / EARTH_RADIUS_M * 180 / np.pi  # 2 km north: far from every road
    m = match_track(town, lon, lat)
    assert m.n_off_network >= 1
    assert (m.point_segment[bad] == -1).all()
    assert common_segments(m.segments, route) >= 0.9 * route.size


def test_track_off_the_network_is_refused(town):
    rng = np.random.default_rng(1)
    track = simulate_track(town, random_route(town, rng), rng)
    with pytest.raises(TrackOffNetworkError, match="farther than"):
        match_track(town, track.lon + 1.0, track.lat)  # ~76 km east
    with pytest.raises(TrackOffNetworkError):
        match_track(town, [], [])


def test_bad_config_is_refused():
    with pytest.raises(ConfigError):
        MatchConfig(gps_sigma_m=0)
    with pytest.raises(ConfigError):
        MatchConfig(max_candidates=0)


def test_common_segments_scores_order_and_repeats():
    assert common_segments([1, 2, 3, 4], [1, 2, 3, 4]) == 4
    assert common_segments([1, 3, 2, 4], [1, 2, 3, 4]) == 3  # order kept
    assert common_segments([5, 5, 6], [5, 6]) == 2  # a repeat counts once where driven once
    assert common_segments([], [1, 2]) == 0
