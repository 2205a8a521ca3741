"""Per-segment scales (issue 27 item 2): a learner with ``segment_scale="loss"`` is the exact GP
with covariance ``a a' k`` and noise ``ς² a²`` (checked against a dense computation), fits the
world's relative scales, keeps older checkpoints opening, and BI follows the same model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.checkpoints import decode, encode
from ev_nav.errors import ConfigError, ModelStateError
from ev_nav.gp.groundtruth import sample_ground_truth
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.independent import BIModel
from ev_nav.gp.prior import PriorSettings
from ev_nav.gp.testing import load_real, random_route, subnetwork
from ev_nav.potential import loss_scale


@pytest.fixture(scope="module")
def small():
    return subnetwork(load_real(), 250, seed=5)


def test_loss_scaled_learner_is_the_dense_heteroscedastic_gp(small):
    n = small.n_segments
    cfg = IncrementalConfig(learn_hyperparameters=False, first_fit=5, segment_scale="loss")
    model = IncrementalGP(small, config=cfg, seed=0)
    a = loss_scale(small)
    with torch.no_grad():
        k = model.kernel.cross_all(np.arange(n)).numpy()
    k = 0.5 * (k + k.T) * np.outer(a, a)
    rng = np.random.default_rng(1)
    truth = model.prior_mean + a * rng.normal(0.0, 0.25, n)
    rows, ys, noise = [], [], []
    for trip in range(8):
        path = random_route(small, 10, rng)
        if trip % 3 == 2:
            share = np.ones(path.size)
            share[0], share[-1] = 0.4, 0.7  # partly driven end segments
            total = float(share @ truth[path] + rng.normal(0.0, 1.0))
            model.update_total(path, total, share)
            row = np.zeros(n)
            np.add.at(row, path, share)
            rows.append(row)
            ys.append(total)
            noise.append(share @ a[path] ** 2)
        else:
            y = truth[path] + rng.normal(0.0, 0.1, path.size) * a[path]
            model.update(path, y)
            for e, v in zip(path, y, strict=True):
                rows.append(np.eye(1, n, e)[0])
                ys.append(v)
                noise.append(a[e] ** 2)
    h = np.asarray(rows)
    g = h @ k @ h.T + np.diag(np.asarray(noise) * model.noise_var)
    gain = np.linalg.solve(g, h @ k)
    mean = model.prior_mean + gain.T @ (np.asarray(ys) - h @ model.prior_mean)
    cov = k - (h @ k).T @ gain
    post = model.posterior()
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-9 * np.abs(mean).max())
    np.testing.assert_allclose(post.std**2, np.diag(cov), rtol=1e-8, atol=1e-12)
    ids = random_route(small, 9, rng)
    assert model.noise_variance(ids) == pytest.approx(
        model.noise_var * np.sum(a[ids] ** 2), rel=1e-12
    )
    # the frozen view (a server's snapshot) absorbs with the same noise model
    view = model.frozen_posterior()
    path = random_route(small, 6, rng)
    y = truth[path]
    model.update(path, y)
    view.update(path, y)
    np.testing.assert_allclose(view.posterior().mean, model.posterior().mean, rtol=1e-12)


def test_fit_finds_the_relative_scales_of_a_loss_scaled_world(town):
    """Data from the scaled prior (relative σ0² = 0.05, ς = 0.2): a learner started off
    (0.25², 0.1²) fits both within a factor 1.5."""
    a = loss_scale(town)
    settings = PriorSettings.relative()
    z = sample_ground_truth(town, settings=settings, seed=2) - town.e_det()
    true_s0, true_noise = 0.05, 0.2
    truth = town.e_det() + a * z * np.sqrt(true_s0 / settings.outputscale)
    cfg = IncrementalConfig(
        first_fit=40, fit_max_rows=800, segment_scale="loss", outputscale=0.25**2,
        noise_var=0.1**2,
    )
    model = IncrementalGP(town, config=cfg, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        path = random_route(town, 40, rng)
        model.update(path, truth[path] + rng.normal(0.0, true_noise, path.size) * a[path])
    fit = model.fits[-1]
    assert 1 / 1.5 < np.sqrt(fit["noise_var"]) / true_noise < 1.5
    s0 = fit["outputscale_product"] + fit["outputscale_feature"]
    assert 1 / 1.5 < s0 / true_s0 < 1.5


def test_checkpoints_keep_their_scale_and_old_ones_open(small):
    cfg = IncrementalConfig(learn_hyperparameters=False, segment_scale="loss")
    model = IncrementalGP(small, config=cfg, seed=0)
    rng = np.random.default_rng(3)
    for _ in range(4):
        path = random_route(small, 8, rng)
        model.update(path, model.prior_mean[path] * 1.1)
    state = decode(encode(model.state_dict()))
    again = IncrementalGP(small, config=cfg, seed=0).load_state_dict(state)
    np.testing.assert_array_equal(again.posterior().mean, model.posterior().mean)
    with pytest.raises(ModelStateError):  # a scaled state does not open as a uniform one
        IncrementalGP(small, seed=0).load_state_dict(state)
    # a checkpoint written before segment scales (no such config field) opens as uniform
    plain = IncrementalGP(small, seed=0)
    plain.update(path, plain.prior_mean[path])
    old = plain.state_dict()
    del old["config"]["segment_scale"]
    restored = IncrementalGP(small, seed=0).load_state_dict(decode(encode(old)))
    np.testing.assert_array_equal(restored.posterior().mean, plain.posterior().mean)


def test_bi_with_loss_scales(small):
    a = loss_scale(small)
    bi = BIModel(small, segment_scale="loss")
    np.testing.assert_allclose(bi.posterior().std, 0.25 * a, rtol=1e-12)
    e = 7
    bi.update([e, e], [bi.prior_mean[e] + 1.0, bi.prior_mean[e] + 3.0])
    prior_var, noise = (0.25 * a[e]) ** 2, (0.2 * a[e]) ** 2
    post_var = 1.0 / (1.0 / prior_var + 2.0 / noise)
    expect = post_var * (bi.prior_mean[e] / prior_var + (2 * bi.prior_mean[e] + 4.0) / noise)
    assert bi.posterior().mean[e] == pytest.approx(expect, rel=1e-12)
    assert bi.noise_variance([e, 3], [1.0, 0.5]) == pytest.approx(
        0.04 * (a[e] ** 2 + 0.5 * a[3] ** 2), rel=1e-12
    )
    state = bi.state_dict()
    with pytest.raises(ModelStateError):
        BIModel(small).load_state_dict(state)
    old = BIModel(small).state_dict()
    del old["segment_scale"]  # written before scales
    BIModel(small).load_state_dict(old)
    with pytest.raises(ConfigError):
        BIModel(small, segment_scale="per-km")
    with pytest.raises(ConfigError):
        IncrementalConfig(segment_scale="per-km")


@pytest.mark.parametrize("scale", ["uniform", "loss"])
def test_per_segment_noise_is_each_segment_alone(small, scale):
    # what the plausibility checks read for every posted segment in one call: the very
    # number noise_variance gives for that segment alone, for the learner and its snapshot
    cfg = IncrementalConfig(learn_hyperparameters=False, first_fit=5, segment_scale=scale)
    model = IncrementalGP(small, config=cfg, seed=0)
    model.update(np.arange(12), model.prior_mean[:12] + 1.0)
    ids = np.array([7, 3, 3, 0, small.n_segments - 1])
    for m in (model, model.frozen_posterior()):
        alone = np.array([m.noise_variance(ids[i : i + 1]) for i in range(ids.size)])
        assert np.array_equal(m.noise_variances(ids), alone)
    a2 = loss_scale(small)[ids] ** 2 if scale == "loss" else np.ones(ids.size)
    np.testing.assert_allclose(model.noise_variances(ids), a2 * model.noise_var,
                               rtol=1e-12)
