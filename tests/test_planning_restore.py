"""Planning on the exact GP's posterior restored without the learner (issue 29).

A session opened for planning restores the posterior as plain arrays (checkpoint + cached
posterior + rank-k updates for batches committed since); every check compares it with the
learner restored the usual way, bit for bit, and checks the fallbacks to the learner.
"""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.checkpoints import decode
from ev_nav.gp.incremental import IncrementalGP
from ev_nav.gp.incremental_state import ExactPosterior
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.trips.observations import record_total
from ev_nav.trips.planning import plan_trip
from ev_nav.trips.session import create_state, open_session

SEGMENTS = 300


@pytest.fixture(scope="module")
def net():
    return synthetic_town(SEGMENTS, seed=0)


def _ends(net, k):
    """Origin and destination (lat, lon) of the k-th test trip: corner-ish segments."""
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    s, g = int(order[k % 7]), int(order[-1 - (k % 5)])
    (lon_s, lat_s), (lon_g, lat_g) = net.segment_anchor(s), net.segment_anchor(g)
    return (lat_s, lon_s), (lat_g, lon_g)


def _trip(state, net, k, *, absorb=True):
    """Plan trip k (full learner) and record its total; ``absorb=False`` leaves the model
    behind the store (as when another process recorded it)."""
    with open_session(state) as session:
        trip = plan_trip(session, *_ends(net, k), policy="ts")
        predicted = trip.routes["planned"].predicted_wh
        record_total(session, trip.trip_id, predicted * 1.3 + 5.0, force=True, absorb=absorb)


def _same(a, b, net):
    pa, pb = a.posterior(), b.posterior()
    assert np.array_equal(pa.mean, pb.mean) and np.array_equal(pa.std, pb.std)
    assert pa.noise_std == pb.noise_std
    ids = np.arange(0, net.n_segments, 3)
    assert np.array_equal(a.route_covariance(ids), b.route_covariance(ids))
    route = np.concatenate([ids[:20], ids[:5]])  # with repeats
    assert a.predict_sum(route) == b.predict_sum(route)


def test_planning_session_restores_the_learners_posterior_bit_for_bit(tmp_path, net):
    state = tmp_path / "s"
    create_state(state, synthetic=SEGMENTS).close()
    for k in range(3):
        _trip(state, net, k)
    with open_session(state, planning=True) as plan, open_session(state) as full:
        assert isinstance(plan.model, ExactPosterior)
        assert isinstance(full.model, IncrementalGP)
        assert plan.applied_upto == full.applied_upto == 3
        _same(plan.model, full.model, net)


def test_pending_batches_are_applied_with_the_learners_updates(tmp_path, net):
    """Observations recorded without a model update (another process): the planning posterior
    applies them by the same rank-k steps; at the update where the learner refits (the 10th,
    IncrementalConfig.first_fit) it falls back to the learner; either way it equals the
    learner's."""
    state = tmp_path / "s"
    create_state(state, synthetic=SEGMENTS).close()
    for k in range(3):
        _trip(state, net, k)
    for k in range(3, 6):
        _trip(state, net, k, absorb=False)
    with open_session(state, planning=True) as plan, open_session(state) as full:
        assert isinstance(plan.model, ExactPosterior)
        assert plan.applied_upto == full.applied_upto == 6
        assert plan.store.latest_checkpoint().last_batch_id == 3  # still behind the store
        _same(plan.model, full.model, net)
    for k in range(6, 10):
        _trip(state, net, k, absorb=False)  # update 10 refreshes (and refits) the learner
    with open_session(state, planning=True) as plan, open_session(state) as full:
        assert isinstance(plan.model, IncrementalGP)
        assert plan.applied_upto == full.applied_upto == 10
        _same(plan.model, full.model, net)


def test_without_the_cached_posterior_planning_restores_the_learner(tmp_path, net):
    state = tmp_path / "s"
    create_state(state, synthetic=SEGMENTS).close()
    _trip(state, net, 0)
    with open_session(state, planning=True) as plan:
        expected = plan.model.posterior()
        assert isinstance(plan.model, ExactPosterior)
    for f in (state / "cache").glob("posterior-*.npy"):
        f.unlink()
    with open_session(state, planning=True) as plan:
        assert isinstance(plan.model, IncrementalGP)
        assert np.array_equal(plan.model.posterior().mean, expected.mean)


def test_the_posterior_refuses_an_update_that_refreshes_the_learner(tmp_path, net):
    state = tmp_path / "s"
    create_state(state, synthetic=SEGMENTS).close()
    with open_session(state, planning=True) as plan:
        post = plan.model
        assert isinstance(post, ExactPosterior)
        assert post.updates_before_refresh == 9  # the 10th update refits
        route = np.arange(5)
        for _ in range(9):
            post.update_total(route, 100.0)
        with pytest.raises(Exception, match="refreshes the learner"):
            post.update_total(route, 100.0)


def test_decode_without_tensors_gives_the_stored_arrays(tmp_path, net):
    state = tmp_path / "s"
    with create_state(state, synthetic=SEGMENTS) as session:
        blob = session.store.latest_checkpoint().blob
        torch_state, plain = decode(blob), decode(blob, tensors=False)
    for key, value in torch_state["hyper"].items():
        if hasattr(value, "numpy"):
            assert isinstance(plain["hyper"][key], np.ndarray)
            assert np.array_equal(plain["hyper"][key], value.numpy())
            assert plain["hyper"][key].dtype == value.numpy().dtype
