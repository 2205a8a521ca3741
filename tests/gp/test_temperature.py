"""Ambient temperature in the learners (issue 31): the shared coefficients are exact Bayes.

The reference is a dense Gaussian computation written out with ``numpy.linalg`` on the augmented
latent vector ``[g(1..N), δ(1..3)]`` with prior covariance ``blockdiag(K, diag τ²)``: every
reading is the row ``[e_i, φ(T_i, e_i)]``, every trip total ``[h, Σ h φ(T, ·)]``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.checkpoints import decode, encode
from ev_nav.energy import ClimateModel, climate_basis, segment_energy_wh
from ev_nav.errors import InvalidObservation
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.independent import BIModel
from ev_nav.gp.testing import (
    augmented_rows,
    check_against_dense,
    load_real,
    random_route,
    subnetwork,
)
from ev_nav.gp.testing import temperature_features as _features
from ev_nav.gp.testing import temperature_trips as _simulate

FIXED = IncrementalConfig(learn_hyperparameters=False, first_fit=10**9)
M = ClimateModel().coefficients.size  # coefficients: three physics ones and the shape ones


@pytest.fixture(scope="module")
def small():
    return subnetwork(load_real(), 200, seed=7)




def test_exact_learner_with_temperatures_is_the_dense_posterior(small):
    """Readings and trip totals at many temperatures (and one trip without): marginals at any
    temperature and a route's sum equal the dense posterior of ``[g, β]``; so do they after a
    refresh from the statistics and after a checkpoint round trip."""
    model = IncrementalGP(small, config=FIXED, seed=0)
    rng = np.random.default_rng(3)
    rows, ys, noise = _simulate(model, small, rng)
    with torch.no_grad():
        k = model.kernel.cross_all(np.arange(model.n)).numpy()
    prior_cov = 0.5 * (k + k.T)
    mean, _ = check_against_dense(model, small, prior_cov, rows, ys, noise)
    # the learned coefficients are the dense ones
    coef = model.temp.posterior_coefficients()
    np.testing.assert_allclose(coef["mean"], mean[-M:], rtol=1e-7, atol=1e-9)
    # a checkpoint restores the very bits; a refresh from the statistics the same numbers
    restored = IncrementalGP(small, config=FIXED, seed=0).load_state_dict(
        decode(encode(model.state_dict()))
    )
    assert np.array_equal(restored.posterior(temperature=-3.0).mean,
                          model.posterior(temperature=-3.0).mean)
    model._refresh()
    check_against_dense(model, small, prior_cov, rows, ys, noise)
    # and a checkpoint saved after the refresh (its statistics hold the temperatures)
    again = IncrementalGP(small, config=FIXED, seed=0).load_state_dict(
        decode(encode(model.state_dict()))
    )
    assert np.array_equal(again.posterior(temperature=5.0).std,
                          model.posterior(temperature=5.0).std)


def test_bi_with_temperatures_matches_the_dense_posterior(small):
    """BI with per-segment readings: independent segments given β, and β's exact posterior."""
    model = BIModel(small)
    rng = np.random.default_rng(4)
    n = small.n_segments
    e_det = model.prior_mean
    rows, ys, noise = [], [], []
    for _trip in range(8):
        path = random_route(small, 10, rng)
        t = float(rng.uniform(-10.0, 35.0))
        phi = _features(small, e_det, path, t)
        y = e_det[path] + phi[:, :3] @ np.array([150.0, 30.0, 0.01]) + rng.normal(0, 2.0, path.size)
        model.update(path, y, temperature=t)
        rows += augmented_rows(n, path, phi)
        ys += list(y)
        noise += list(model.noise_variances(path))
    prior = np.diag(np.full(n, model.prior_var))
    check_against_dense(model, small, prior, rows, ys, noise)


def test_without_temperature_nothing_changes(small):
    """A learner that is never given a temperature saves what it saved before (no temperature
    keys) and predicts the same bits whether or not the argument is passed as None."""
    model = IncrementalGP(small, config=FIXED, seed=0)
    rng = np.random.default_rng(5)
    for _ in range(4):
        path = random_route(small, 8, rng)
        model.update(path, model.prior_mean[path] + rng.normal(0, 1, path.size))
    state = model.state_dict()
    assert "climate" not in state and "temperature" not in state["base"]
    assert all(kind in ("seg", "tot") for kind, _, _ in state["log"])
    assert model.predict_sum([1, 2]) == model.predict_sum([1, 2], temperature=None)
    bi = BIModel(small)
    bi.update([1, 2], [3.0, 4.0])
    assert "temperature" not in bi.state_dict()


def test_prediction_at_a_temperature_before_any_data_is_the_physics_prior(small):
    """No temperature seen yet: a winter prediction adds the physics model's climate energy
    (the same number as :func:`segment_energy_wh` at that temperature) and the coefficients'
    prior variance."""
    model = IncrementalGP(small, config=FIXED, seed=0)
    route = np.arange(6)
    m0, v0 = model.predict_sum(route)
    m, v = model.predict_sum(route, temperature=-5.0)
    physics = segment_energy_wh(small.length_m[route], small.speed_mps[route],
                                small.grade[route], temperature_c=-5.0)
    assert m - m0 == pytest.approx(float(physics.sum() - model.prior_mean[route].sum()),
                                   rel=1e-9)
    assert v > v0


def test_bad_temperatures_are_refused_and_change_nothing(small):
    model = IncrementalGP(small, config=FIXED, seed=0)
    before = model.state_dict()
    for bad in (float("nan"), 80.0, "warm", [1.0, 2.0]):
        with pytest.raises(InvalidObservation):
            model.update([0, 1, 2], [1.0, 2.0, 3.0], temperature=bad)
    assert model.state_dict()["log"] == before["log"]
    assert not model.temp.active


def test_climate_basis_matches_its_definition():
    c = ClimateModel()
    phi = climate_basis([-2.0, 20.0, 30.0], 0.5, 100.0, c)
    # per knot (24 °C, 8 °C): degrees below it × hours, × traction energy
    np.testing.assert_allclose(phi, [
        [10.0, 0.0, 2000.0, 13.0, 2600.0, 5.0, 1000.0],
        [0.0, 0.0, 0.0, 2.0, 400.0, 0.0, 0.0],
        [0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ])


def test_a_reset_road_forgets_its_temperatures_too_and_restores_exactly(small):
    """Change detection on a learner with temperatures: the reset segment's readings (and their
    temperature statistics) go, the kept readings count at the reference conditions, and a
    checkpoint replays the reset to the same bits."""
    model = IncrementalGP(small, config=FIXED, seed=0)
    rng = np.random.default_rng(9)
    _simulate(model, small, rng, n_trips=6)
    e = int(np.flatnonzero(model.n_obs > 0)[0])
    before = model.posterior(temperature=-5.0).std[e]
    model.reset_segments([e], [0], [0.0], [0.0])
    assert model._t_phi[e].tolist() == [0.0] * model.temp.m
    assert model.posterior(temperature=-5.0).std[e] > before
    restored = IncrementalGP(small, config=FIXED, seed=0).load_state_dict(
        decode(encode(model.state_dict()))
    )
    assert np.array_equal(restored.posterior(temperature=-5.0).mean,
                          model.posterior(temperature=-5.0).mean)


def test_bi_trip_totals_with_a_temperature_move_the_trip_towards_the_reading(small):
    """BI learns a total at a temperature as it learns totals (marginals at the coefficients'
    posterior mean): the trip's prediction at that temperature moves towards the reading."""
    model = BIModel(small)
    route = random_route(small, 8, np.random.default_rng(2))
    m0, _ = model.predict_sum(route, temperature=-5.0)
    model.update_total(route, m0 + 50.0, temperature=-5.0)
    m1, _ = model.predict_sum(route, temperature=-5.0)
    assert m0 < m1 < m0 + 50.0
    state = decode(encode(model.state_dict()))
    again = BIModel(small).load_state_dict(state)
    assert again.predict_sum(route, temperature=-5.0) == model.predict_sum(route,
                                                                            temperature=-5.0)
