"""BI baseline: conjugate updates against closed forms, sum observations, checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.errors import InvalidObservation, ModelStateError, UnknownSegmentError
from ev_nav.gp.independent import BIModel
from ev_nav.gp.prior import PriorSettings
from ev_nav.roads.synthetic import synthetic_town


@pytest.fixture(scope="module")
def town():
    return synthetic_town(400, seed=3)


def test_defaults_follow_the_spec(town):
    bi = BIModel(town)
    var_det = np.var(town.e_det())
    assert bi.prior_var == pytest.approx(0.25**2 * var_det)
    assert bi.noise_std == pytest.approx(0.1 * np.sqrt(var_det))
    post = bi.posterior()
    np.testing.assert_allclose(post.mean, town.e_det(), rtol=1e-14, atol=1e-12)
    np.testing.assert_allclose(post.std, np.sqrt(bi.prior_var))


def test_conjugate_update_with_repeats_matches_closed_form(town):
    bi = BIModel(town, prior_var=4.0, noise_var=1.0)
    ids = np.array([5, 5, 5, 9])
    y = np.array([1.0, 2.0, 6.0, -3.0])
    bi.update(ids, y)
    bi.update(np.array([9]), np.array([1.0]))
    m0 = town.e_det()
    post = bi.posterior()
    # segment 5: three observations; posterior precision 1/4 + 3, mean weighted
    prec5 = 0.25 + 3.0
    assert post.mean[5] == pytest.approx((m0[5] / 4 + 9.0) / prec5)
    assert post.std[5] == pytest.approx(1 / np.sqrt(prec5))
    prec9 = 0.25 + 2.0
    assert post.mean[9] == pytest.approx((m0[9] / 4 - 2.0) / prec9)
    assert post.mean[0] == m0[0]


def test_update_total_matches_joint_gaussian_conditioning(town):
    bi = BIModel(town, prior_var=2.0, noise_var=0.5)
    bi.update(np.array([1, 2]), np.array([3.0, 4.0]))
    before = bi.posterior()
    ids = np.array([1, 2, 2, 7])  # segment 2 driven twice
    total = 20.0
    bi.update_total(ids, total)
    after = bi.posterior()
    # independent computation: joint Gaussian over (f1, f2, f7), observation a·f + N(0, 4ς²)
    seg = np.array([1, 2, 7])
    a = np.array([1.0, 2.0, 1.0])
    mu, cov = before.mean[seg], np.diag(before.std[seg] ** 2)
    s = a @ cov @ a + 4 * 0.5
    gain = cov @ a / s
    np.testing.assert_allclose(after.mean[seg], mu + gain * (total - a @ mu), rtol=1e-12)
    np.testing.assert_allclose(after.std[seg] ** 2, np.diag(cov - np.outer(gain, a @ cov)))


def test_round_trip_and_bad_input(town):
    bi = BIModel(town)
    bi.update(np.array([3, 4]), np.array([1.0, 2.0]))
    clone = BIModel(town).load_state_dict(bi.state_dict())
    assert np.array_equal(clone.posterior().mean, bi.posterior().mean)
    assert np.array_equal(clone.posterior().std, bi.posterior().std)
    state = bi.state_dict()
    for ids, y, err in [
        ([0, town.n_segments], [1.0, 1.0], UnknownSegmentError),
        ([0, 1], [np.nan, 1.0], InvalidObservation),
        ([0, 1], [1.0], InvalidObservation),
    ]:
        with pytest.raises(err):
            bi.update(np.array(ids), np.array(y))
    with pytest.raises(InvalidObservation):
        bi.update_total(np.array([0, 1]), float("inf"))
    with pytest.raises(InvalidObservation):
        bi.update_total(np.array([], dtype=np.int64), 1.0)
    for key in ("precision", "eta", "n_obs"):
        assert np.array_equal(bi.state_dict()[key], state[key])
    other = synthetic_town(300, seed=4)
    with pytest.raises(ModelStateError):
        BIModel(other).load_state_dict(state)
    assert PriorSettings.from_network(town).noise_std == pytest.approx(bi.noise_std)
