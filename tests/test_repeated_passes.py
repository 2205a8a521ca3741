"""A route that drives a road twice (via points can take it back over one): one reading per
pass. Such a trip could not be recorded per segment: each pass listed was refused, the passes
summed were judged against one pass, and one pass given was accepted as the whole trip while
the history counted it twice."""

import numpy as np
import pytest

from ev_nav.bandits.routing import Router
from ev_nav.cli import main
from ev_nav.errors import InvalidObservation
from ev_nav.store import Store
from ev_nav.trips import open_session, trip_history
from ev_nav.trips.observations import record_segments


@pytest.fixture()
def looped(tmp_path):
    """A BI state with one planned trip whose route drives two segments twice (there and back
    over a road of the town, then on)."""
    state = tmp_path / "state"
    assert main(["init", str(state), "--synthetic", "--segments", "300", "--model", "bi"]) == 0
    session = open_session(state, with_model=False)
    try:
        net, store = session.net, session.store
        router = Router(net)
        there = router.route(np.maximum(net.e_det(), 0.0), 3, 120)
        back = router.route(np.maximum(net.e_det(), 0.0), 120, 3)
        route = np.concatenate([there, back[1:], there[1:]])  # 3 .. 120 .. 3 .. 120
        tid = store.add_trip(origin_segment=3, goal_segment=120, policy="mean", route=route,
                             predicted_wh=1.0, predicted_sd_wh=0.0, length_m=1.0, time_s=1.0)
    finally:
        session.close()
    return state, tid, route


def test_one_reading_per_pass_is_recorded_and_totalled(looped):
    state, tid, route = looped
    rng = np.random.default_rng(0)
    wh = rng.uniform(5, 30, route.size)
    with open_session(state) as session:
        record_segments(session, tid, route, wh, force=True)
    (row,) = trip_history(state)
    assert row["observed_wh"] == pytest.approx(wh.sum(), abs=0.05)  # every pass once
    with Store.open(state) as store:
        (batch,) = store.observations()
        assert np.array_equal(batch.segment_ids, route)


def test_fewer_readings_than_passes_are_refused_or_partial(looped):
    state, tid, route = looped
    once = np.unique(route)
    assert once.size < route.size
    with open_session(state) as session:
        with pytest.raises(InvalidObservation, match="driven more than once: give a reading "
                                                     "per pass"):
            record_segments(session, tid, once, np.full(once.size, 10.0), force=True)
        record_segments(session, tid, once, np.full(once.size, 10.0), force=True, partial=True)
    (row,) = trip_history(state)
    assert row["recorded"] and row["observed_wh"] is None  # the trip's total is not known


def test_more_readings_than_passes_are_refused(looped):
    state, tid, route = looped
    on_once = [e for e in np.unique(route) if (route == e).sum() == 1][0]
    with Store.open(state) as store:
        with pytest.raises(InvalidObservation, match=f"segment {on_once} has 2 readings but the "
                                                     "route drives it 1 time"):
            store.add_observations(tid, [on_once, on_once], [5.0, 5.0])
        assert not store.observations()


def test_a_partial_records_prediction_has_a_term_per_reading(looped):
    """What a partial record is compared with counted a segment read on two passes once, and a
    record of every segment but one pass short was compared with the whole trip."""
    from ev_nav.trips.observations import recorded_prediction

    state, tid, route = looped
    once = np.unique(route)
    twice = [e for e in once if (route == e).sum() == 2][:1] * 2  # one segment, both passes
    with open_session(state) as session:
        trip = session.store.get_trip(tid)
        mean = session.model.posterior().mean
        short = recorded_prediction(session, trip, once, partial=True)
        assert short.n_segments == once.size  # a partial record, not the whole trip (None)
        assert short.mean_wh == pytest.approx(mean[once].sum(), rel=1e-9)
        both = recorded_prediction(session, trip, np.array(twice), partial=True)
        assert both.n_segments == 2 and both.mean_wh == pytest.approx(2 * mean[twice[0]])
