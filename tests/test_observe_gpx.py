"""``ev-nav observe STATE TRIP --gpx track.gpx``: record what was actually driven (issue 29/10).

GPX files are untrusted input: malformed files, entity declarations, empty tracks and tracks away
from the network fail with one line naming the problem, and leave the state unchanged.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest

from ev_nav.bandits.routing import Router
from ev_nav.errors import EmptyTrackError, TrackFileError
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.sim.gps import simulate_track
from ev_nav.store import Store
from ev_nav.trips.gpx import read_gpx, write_gpx
from tests.cli_helpers import latlon as _latlon
from tests.cli_helpers import run_cli as _run

SEGMENTS = 600
T0 = 1_714_550_400.0  # 2024-05-01T08:00:00Z


@pytest.fixture(scope="module")
def net():
    return synthetic_town(SEGMENTS, seed=0)


def _plan(tmp_path, capsys, net):
    """A state with one planned trip across the town; returns (state, planned route)."""
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    mid = net.segment_midpoints()
    s, g = int(np.argmin(mid[:, 0] + mid[:, 1])), int(np.argmax(mid[:, 0] + mid[:, 1]))
    code, _, err = _run(capsys, "route", state, "--from", _latlon(net, s), "--to",
                        _latlon(net, g), "--policy", "mean", "--no-map")
    assert code == 0, err
    with Store.open(state) as st:
        return state, st.get_trip(1).route


def _detour(net, planned):
    """A different drive between the same ends: through a segment the plan does not use."""
    router = Router(net)
    mid = net.segment_midpoints()
    a, b = mid[planned[0]], mid[planned[-1]]
    # the segment nearest to the corner of the box spanned by the ends, off the planned route
    corner = np.array([a[0], b[1]])
    order = np.argsort(np.hypot(*(mid - corner).T))
    via = int(next(e for e in order if e not in planned))
    route = np.concatenate([router.route(net.length_m, planned[0], via),
                            router.route(net.length_m, via, planned[-1])[1:]])
    return route


def _snapshot(state):
    with Store.open(state) as st:
        return st.n_trips(), st.n_observations(), st.checkpoint_ids()


def test_gpx_with_total_records_the_driven_route(tmp_path, capsys, net):
    state, planned = _plan(tmp_path, capsys, net)
    driven = _detour(net, planned)
    rng = np.random.default_rng(7)
    track = simulate_track(net, driven, rng, noise_m=10.0, start_fraction=0.0, end_fraction=1.0)
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon, time_s=T0 + track.time_s)
    total = float(net.e_det()[driven].sum())
    # the prior's prediction of the route driven, counting the part of its first and last
    # segment driven (by hand: the matched route and ends from the matcher)
    from ev_nav.roads.matching import MatchConfig, match_track

    m = match_track(net, track.lon, track.lat, MatchConfig())
    seg, first, last = m.segments, m.first_fraction, m.last_fraction
    if first < 1e-6:
        seg, first = seg[1:], 1.0
    if last < 1e-6:
        seg, last = seg[:-1], 1.0
    share = np.ones(seg.size)
    share[0], share[-1] = first, last
    code, out, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--total-wh",
                          f"{total:.1f}")
    assert code == 0, err
    assert "matched" in out and "recorded the trip total on the driven route" in out
    predicted = re.search(r"\(predicted ([\d.]+) Wh, sd with drive-to-drive noise [\d.]+ Wh", out)
    assert predicted and float(predicted[1]) == pytest.approx(share @ net.e_det()[seg], abs=0.06)
    km = re.search(r"segments \(([\d.]+) km\)", out)
    assert float(km[1]) == pytest.approx(share @ net.length_m[seg] / 1000, abs=0.006)
    n_points = gpx.read_text().count("<trkpt")
    assert re.search(rf"matched {n_points:,} track points to \d+ segments \(", out), out
    with Store.open(state) as st:
        (batch,) = st.observations(1)
        # the total is an observation of the matched route, not of the plan
        assert batch.kind == "total" and batch.energy_wh[0] == pytest.approx(total, abs=0.05)
        assert batch.segment_ids.tolist() != planned.tolist()
        assert np.isin(driven[1:-1], batch.segment_ids).mean() >= 0.98
        visits = st.visit_counts(net.n_segments)
        assert visits[batch.segment_ids].min() >= 1
        assert visits[np.setdiff1d(planned, batch.segment_ids)].max(initial=0) == 0
        assert st.observed_total(1) == pytest.approx(total, abs=0.05)
    # the checks of any observation apply: the plausibility rule (against the prediction for
    # the driven route), one record per trip, and --undo forgets it
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--total-wh", "1")
    assert code == 2 and "standard deviations" in err
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--total-wh", f"{total:.1f}")
    assert code == 2 and "already has observations" in err
    assert _run(capsys, "observe", state, 1, "--undo")[0] == 0
    with Store.open(state) as st:
        assert st.observations(1) == []
        assert st.visit_counts(net.n_segments).sum() == 0


def test_gpx_with_energy_records_per_segment_energies(tmp_path, capsys, net):
    state, planned = _plan(tmp_path, capsys, net)
    driven = _detour(net, planned)
    truth = net.e_det() * 1.1
    rng = np.random.default_rng(11)
    track = simulate_track(net, driven, rng, noise_m=10.0, segment_energy_wh=truth)
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon, time_s=T0 + track.time_s,
                    energy_wh=track.energy_wh + 5000.0)  # a counter with an arbitrary origin
    code, out, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--json")
    assert code == 0, err
    doc = json.loads(out.strip().splitlines()[0])
    assert doc["recorded"] == "per-segment energies" and doc["planned_share"] < 1
    with Store.open(state) as st:
        (batch,) = st.observations(1)
    assert batch.kind == "segment"
    # what was observed and what it was compared with, as observe --segments gives them
    # (README: also with --gpx): the sum of the readings, the prior's sum over those segments
    # every segment the counter covers, the first and last of the part driven (their share
    # kept with the reading: they were left out, so a track gave no trip total)
    h = batch.weights
    assert h is not None and h[0] < 1 and h[-1] < 1 and (h[1:-1] == 1).all()
    assert doc["observed_wh"] == pytest.approx(batch.energy_wh.sum(), abs=1e-3)
    assert doc["predicted_segments"] == batch.segment_ids.size
    assert doc["predicted_wh"] == pytest.approx(h @ net.e_det()[batch.segment_ids], abs=0.06)
    assert 0 < doc["predicted_sd_wh"] < doc["sd_with_noise_wh"]
    # each with its energy: the counter is linear in distance within each segment, so
    # apportioning recovers it up to the matcher's position error at the two ends
    inner = driven[1:-1]
    assert np.isin(batch.segment_ids, driven).all()
    assert np.isin(inner, batch.segment_ids).mean() >= 0.95
    on = np.isin(batch.segment_ids, inner) & (h == 1)
    err_wh = np.abs(batch.energy_wh[on] - truth[batch.segment_ids[on]])
    assert np.median(err_wh) < 0.1 * np.median(truth[inner]) + 0.5
    assert batch.energy_wh.sum() == pytest.approx(h @ truth[batch.segment_ids], rel=0.05)


def test_a_tracked_drive_of_the_planned_route_gives_the_trip_total(tmp_path, capsys, net):
    """A track's per-segment energies left out its half-driven first and last segments, so
    the history never had a trip total for it ("part"). Now the readings cover the counter's
    whole drive: the trip's observed energy is the counter's rise."""
    state, planned = _plan(tmp_path, capsys, net)
    with Store.open(state) as st:
        trip = st.get_trip(1)
    truth = net.e_det() * 1.1
    track = simulate_track(net, planned, np.random.default_rng(5), noise_m=3.0,
                           segment_energy_wh=truth, start_fraction=trip.start_fraction,
                           end_fraction=trip.end_fraction)
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon, time_s=T0 + track.time_s,
                    energy_wh=track.energy_wh + 800.0)
    code, out, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--json")
    assert code == 0, err
    with Store.open(state) as st:
        (batch,) = st.observations(1)
        total = st.observed_total(1)
    assert batch.segment_ids.tolist() == trip.route.tolist()
    assert total == pytest.approx(track.energy_wh[-1] - track.energy_wh[0], rel=1e-6)
    code, out, err = _run(capsys, "history", state, "--json")
    assert json.loads(out)[0]["observed_wh"] == pytest.approx(total, abs=0.05)


def test_gpx_without_energy_or_total_is_refused(tmp_path, capsys, net):
    state, planned = _plan(tmp_path, capsys, net)
    track = simulate_track(net, planned, np.random.default_rng(0))
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon)
    before = _snapshot(state)
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", gpx)
    assert code == 2 and "no energy readings" in err and "Traceback" not in err
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--segments", gpx)
    assert code == 2 and "--gpx goes alone" in err
    assert _snapshot(state) == before


def test_gps_sigma_is_checked_and_only_taken_with_a_track(tmp_path, capsys, net):
    """--gps-sigma 1e9 thinned the planned route's own track to a few points and recorded
    '24% of the planned route was driven'; without --gpx it was silently ignored."""
    state, planned = _plan(tmp_path, capsys, net)
    track = simulate_track(net, planned, np.random.default_rng(0))
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon)
    before = _snapshot(state)
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--total-wh", "500",
                        "--gps-sigma", "1e9")
    assert code == 2 and err.count("\n") == 1
    assert "gps_sigma_m is a GPS receiver's error, at most 500 m; got 1000000000.0" in err
    for extra in (["--total-wh", "500"], ["--undo"]):
        code, _, err = _run(capsys, "observe", state, 1, *extra, "--gps-sigma", "5")
        assert code == 2 and err.count("\n") == 1 and "--gps-sigma" in err, err
    assert _snapshot(state) == before


_BAD = {
    "not-xml.gpx": ("this is not XML", "not well-formed XML"),
    "not-gpx.gpx": ('<?xml version="1.0"?><osm version="0.6"></osm>', "not a GPX file"),
    "bomb.gpx": (
        '<?xml version="1.0"?><!DOCTYPE gpx [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        '<gpx><trk><trkseg><trkpt lat="1" lon="1"><ele>&b;</ele></trkpt></trkseg></trk></gpx>',
        "document type declarations are refused",
    ),
    "external.gpx": (
        '<?xml version="1.0"?><!DOCTYPE gpx SYSTEM "file:///etc/passwd"><gpx></gpx>',
        "document type declarations are refused",
    ),
    "empty.gpx": ('<gpx version="1.1"><trk><trkseg></trkseg></trk></gpx>', "no track points"),
    "no-lon.gpx": ('<gpx><trk><trkseg><trkpt lat="43.7"/></trkseg></trk></gpx>',
                   "without its lon attribute"),
    "bad-lat.gpx": ('<gpx><trk><trkseg><trkpt lat="north" lon="7"/></trkseg></trk></gpx>',
                    "cannot read lat 'north'"),
    "off-globe.gpx": ('<gpx><trk><trkseg><trkpt lat="95" lon="7"/></trkseg></trk></gpx>',
                      "outside the globe"),
    "bad-time.gpx": ('<gpx><trk><trkseg><trkpt lat="4" lon="7"><time>yesterday</time></trkpt>'
                     '</trkseg></trk></gpx>', "cannot read the time"),
    "nan-energy.gpx": ('<gpx><trk><trkseg><trkpt lat="4" lon="7"><extensions><energy_wh>nan'
                       '</energy_wh></extensions></trkpt></trkseg></trk></gpx>',
                       "energy_wh must be a finite number"),
    "backwards.gpx": ('<gpx><trk><trkseg><trkpt lat="4" lon="7"><time>2024-05-01T08:00:05Z'
                      '</time></trkpt><trkpt lat="4" lon="7"><time>2024-05-01T08:00:01Z</time>'
                      '</trkpt></trkseg></trk></gpx>', "times run backwards"),
}


@pytest.mark.parametrize("name", sorted(_BAD))
def test_bad_gpx_is_a_one_line_error(tmp_path, name):
    text, fragment = _BAD[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TrackFileError, match=fragment):
        read_gpx(path)


def test_bad_gpx_through_the_cli_leaves_the_state_unchanged(tmp_path, capsys, net):
    state, planned = _plan(tmp_path, capsys, net)
    before = _snapshot(state)
    for name in ("bomb.gpx", "empty.gpx"):
        path = tmp_path / name
        path.write_text(_BAD[name][0])
        code, out, err = _run(capsys, "observe", state, 1, "--gpx", path, "--total-wh", "500")
        assert code == 2 and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1 and _BAD[name][1] in err
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", tmp_path / "missing.gpx",
                        "--total-wh", "500")
    assert code == 2 and "track file not found" in err
    # a real track of somewhere else: refused as off the network
    track = simulate_track(net, planned, np.random.default_rng(0))
    far = write_gpx(tmp_path / "far.gpx", track.lat + 0.5, track.lon)
    code, _, err = _run(capsys, "observe", state, 1, "--gpx", far, "--total-wh", "500")
    assert code == 2 and "farther than" in err and len(err.strip().splitlines()) == 1
    assert _snapshot(state) == before


def test_gpx_reader_reads_what_the_writer_wrote_and_namespaced_extensions(tmp_path):
    p = write_gpx(tmp_path / "t.gpx", [43.7, 43.71], [7.4, 7.41], time_s=[T0, T0 + 1.5],
                  energy_wh=[12.0, np.nan])
    t = read_gpx(p)
    np.testing.assert_allclose(t.lat, [43.7, 43.71])
    np.testing.assert_allclose(t.time_s, [T0, T0 + 1.5])
    assert t.energy_wh[0] == 12.0 and np.isnan(t.energy_wh[1]) and not t.has_energy
    # another logger's namespace and elevation, several segments and tracks in document order
    other = tmp_path / "o.gpx"
    other.write_text(
        '<?xml version="1.0"?><gpx xmlns="http://www.topografix.com/GPX/1/1" '
        'xmlns:x="urn:other"><trk><trkseg><trkpt lat="1" lon="2"><ele>30.5</ele>'
        "<extensions><x:energy_wh>1.5</x:energy_wh></extensions></trkpt></trkseg>"
        '<trkseg><trkpt lat="3" lon="4"><extensions><x:energy_wh>2.5</x:energy_wh>'
        "</extensions></trkpt></trkseg></trk></gpx>"
    )
    t = read_gpx(other)
    assert t.lat.tolist() == [1, 3] and t.ele[0] == 30.5 and t.energy_wh.tolist() == [1.5, 2.5]
    assert t.has_energy
    with pytest.raises(EmptyTrackError):
        (tmp_path / "e.gpx").write_text("<gpx/>")
        read_gpx(tmp_path / "e.gpx")


def test_gpx_shows_its_stages_on_a_terminal_only(tmp_path, capsys, monkeypatch, net):
    """observe --gpx took 12 s on a large town in silence; on a terminal it now names each stage
    on stderr (a line removed at the end), and stdout is what it was; off a terminal, nothing."""
    state, planned = _plan(tmp_path, capsys, net)
    driven = _detour(net, planned)
    track = simulate_track(net, driven, np.random.default_rng(3), noise_m=10.0,
                           start_fraction=0.0, end_fraction=1.0)
    gpx = write_gpx(tmp_path / "drive.gpx", track.lat, track.lon, time_s=T0 + track.time_s)
    total = f"{float(net.e_det()[driven].sum()):.1f}"
    code, quiet_out, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--total-wh", total)
    assert code == 0 and err == "", err
    assert _run(capsys, "observe", state, 1, "--undo")[0] == 0
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code, out, err = _run(capsys, "observe", state, 1, "--gpx", gpx, "--total-wh", total)
    assert code == 0, err
    assert out == quiet_out
    for stage in ("reading the track", "opening the state", "matching the track to the roads",
                  "recording it and updating the model"):
        assert f"observe: {stage}" in err, err


def test_a_segment_the_track_drives_twice_has_a_reading_per_pass(net):
    """Each pass of a segment is an observation of it (one reading per pass, as the store
    takes per-segment observations); the two passes were one reading, their mean. The first
    and last passes, half driven, are readings of that half (they were left out)."""
    from ev_nav.roads.matching import MatchResult
    from ev_nav.trips.tracks import apportion_energy

    a, b, c = 10, 11, 12  # (any segments: apportioning reads only their lengths)
    seg = np.array([a, b, c, b, a])
    offsets = np.concatenate([[0.0], np.cumsum(net.length_m[seg])])
    # a point at the middle of the first and last segments and at every boundary between
    pos = np.concatenate([[offsets[0] + 0.5 * net.length_m[a]], offsets[1:-1],
                          [offsets[-2] + 0.5 * net.length_m[a]]])
    rate = np.array([2.0, 3.0, 5.0, 7.0, 11.0])  # Wh per m of each pass
    counter = np.concatenate([[0.0], np.cumsum(rate * net.length_m[seg])])
    energy = np.interp(pos, offsets, counter)
    match = MatchResult(segments=seg, first_fraction=0.5, last_fraction=0.5,
                        point_segment=np.zeros(pos.size, dtype=np.int64), point_route_m=pos,
                        point_error_m=np.zeros(pos.size), n_breaks=0, n_off_network=0)
    got = apportion_energy(net, match, energy)
    assert got.route.tolist() == [a, b, c, b, a]  # every pass, in driving order
    assert (got.start_fraction, got.end_fraction) == (pytest.approx(0.5), pytest.approx(0.5))
    # the first and last of the half driven, the passes between whole
    np.testing.assert_allclose(
        got.energy_wh, rate * net.length_m[seg] * [0.5, 1, 1, 1, 0.5], rtol=1e-9)
