"""A per-segment reading of a trip's half-driven first or last segment is the energy of the part
driven: it is judged against that share of the segment's prediction and learned as that share
(schema 8 keeps the share with the reading). It used to be learned as the whole segment's energy,
so the segment a driver starts every trip from was learned at about half its cost."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from ev_nav.roads.partial import driven_shares, reading_shares
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.store import SCHEMA_VERSION, Store
from ev_nav.trips import open_session
from tests.cli_helpers import latlon as _latlon
from tests.cli_helpers import run_cli as _run

SEGMENTS = 600


@pytest.fixture(scope="module")
def net():
    return synthetic_town(SEGMENTS, seed=0)


def _planned(tmp_path, capsys, net, model: str):
    state = tmp_path / model
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS, "--model",
                model)[0] == 0
    code, _, err = _run(capsys, "route", state, "--from", _latlon(net, 3), "--to",
                        _latlon(net, 400), "--policy", "mean", "--no-map")
    assert code == 0, err
    with Store.open(state) as s:
        trip = s.get_trip(1)
    assert 0.2 < trip.start_fraction < 0.8 and 0.2 < trip.end_fraction < 0.8  # part-way
    return state, trip


def _csv(tmp_path, route, wh):
    p = tmp_path / "obs.csv"
    rows = zip(route.tolist(), np.asarray(wh).tolist(), strict=True)
    p.write_text("segment,energy_wh\n" + "".join(f"{a},{b!r}\n" for a, b in rows))
    return p


def test_reading_shares_follow_the_passes_in_driving_order():
    route = np.array([7, 3, 7], dtype=np.int64)  # back over segment 7: two passes
    shares = driven_shares(3, 0.4, 0.7)  # 0.6 of the first pass, 0.7 of the last
    got = reading_shares(route, shares, np.array([7, 3, 7], dtype=np.int64))
    np.testing.assert_array_equal(got, [0.6, 1.0, 0.7])
    # listed in another order: the first reading of 7 is still its first pass
    got = reading_shares(route, shares, np.array([3, 7, 7], dtype=np.int64))
    np.testing.assert_array_equal(got, [1.0, 0.6, 0.7])
    # one reading of 7 (a partial record): the first pass's; a segment off the route: whole
    got = reading_shares(route, shares, np.array([7, 9], dtype=np.int64))
    np.testing.assert_array_equal(got, [0.6, 1.0])
    # a one-segment trip drives end - start of it
    one = reading_shares(np.array([5]), driven_shares(1, 0.25, 0.75), np.array([5]))
    np.testing.assert_array_equal(one, [0.5])


@pytest.mark.parametrize("model", ["bi", "gp"])
def test_a_half_driven_end_is_learned_as_its_share(tmp_path, capsys, net, model):
    """The posterior after ``observe --segments`` equals Gaussian conditioning computed here by
    hand on the prior: each middle reading ``y = f(e) + ε`` with ``ε ~ N(0, ς²)``, each end
    reading ``y = h f(e) + ε`` with ``ε ~ N(0, h ς²)`` (one drive's noise per whole segment
    driven, as for a trip total)."""
    state, trip = _planned(tmp_path, capsys, net, model)
    route, h = trip.route, np.asarray(trip.shares)
    with open_session(state) as session:
        m = session.model
        prior = m.posterior()
        ids = np.unique(route)
        mean0 = prior.mean[ids]
        cov0 = m.route_covariance(ids)
        noise = np.asarray(m.noise_variances(route), dtype=np.float64)
    # readings: the true cost 1.3x the prior mean, of the part driven
    wh = h * 1.3 * prior.mean[route]
    code, out, err = _run(capsys, "observe", state, 1, "--segments", _csv(tmp_path, route, wh))
    assert code == 0, err
    with Store.open(state) as s:
        (batch,) = s.observations()
        np.testing.assert_allclose(batch.weights, h)
        assert s.observed_total(1) == pytest.approx(wh.sum())  # the trip's energy
        # the change detector counts whole-segment readings only
        assert s.count_segment_readings(int(route[0]), 0, batch.id) == 0
        assert s.count_segment_readings(int(route[1]), 0, batch.id) == 1
    pos = {int(e): k for k, e in enumerate(ids)}
    a = np.zeros((route.size, ids.size))
    a[np.arange(route.size), [pos[int(e)] for e in route]] = h
    if model == "bi":
        cov0 = np.diag(np.diag(cov0))  # BI: independent segments
    gain = cov0 @ a.T @ np.linalg.inv(a @ cov0 @ a.T + np.diag(h * noise))
    expected = mean0 + gain @ (wh - a @ mean0)
    with open_session(state) as session:
        got = session.model.posterior().mean[ids]
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # the end segments move towards reading / share, not towards the reading
    first = pos[int(route[0])]
    assert got[first] > mean0[first] and abs(got[first] - mean0[first]) > 1e-3


def test_a_reading_of_the_part_driven_is_judged_against_that_part(tmp_path, capsys, net):
    """A partial record of the first segment alone is compared with the prediction for the part
    of it driven (it was the whole segment's: about twice as much for a trip from its middle)."""
    import json

    state, trip = _planned(tmp_path, capsys, net, "bi")
    first, h0 = trip.route[:1], float(trip.shares[0])
    with open_session(state) as session:
        post = session.model.posterior()
        mean, var = float(post.mean[first[0]]), float(post.std[first[0]]) ** 2
        noise = float(session.model.noise_variances(first)[0])
    code, out, err = _run(capsys, "observe", state, 1, "--segments",
                          _csv(tmp_path, first, [h0 * mean]), "--partial", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["predicted_wh"] == pytest.approx(h0 * mean, abs=0.06)
    assert doc["predicted_sd_wh"] == pytest.approx(h0 * var**0.5, abs=0.06)
    # one drive's noise over the part driven: h of a whole segment's (at least the plausible)
    assert doc["sd_with_noise_wh"] ** 2 >= h0**2 * var + h0 * noise - 0.1


def test_a_state_of_schema_7_keeps_its_readings_whole(tmp_path, capsys, net):
    """A state an earlier ev-nav wrote: its readings have no share and stay whole-segment
    readings, so the upgraded state's model is the one it learned, rebuilt or not."""
    state, trip = _planned(tmp_path, capsys, net, "gp")
    route = trip.route
    with open_session(state) as session:
        wh = session.model.posterior().mean[route] * 1.2
    # written as schema 7 wrote it: no share column, each reading a whole segment's
    code, _, err = _run(capsys, "observe", state, 1, "--segments", _csv(tmp_path, route, wh))
    assert code == 0, err
    db = Store.db_path(state)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM checkpoints")
        conn.execute("ALTER TABLE observations DROP COLUMN share")
        conn.execute("PRAGMA user_version = 7")
    with Store.open(state) as s:  # migrates
        assert s.schema_version == SCHEMA_VERSION == 8
        (batch,) = s.observations()
        assert batch.weights is None and batch.energy_wh.tolist() == pytest.approx(wh.tolist())
    from ev_nav.trips.session import build_model

    with open_session(state) as session:
        got = session.model.posterior().mean  # rebuilt from the store: no checkpoint left
        whole = build_model("gp", session.net, session.vehicle)
    whole.update(route, wh)  # every reading a whole segment's, as schema 7 learned them
    np.testing.assert_allclose(got, whole.posterior().mean, rtol=1e-9, atol=1e-9)
