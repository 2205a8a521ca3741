"""All models implement the one posterior protocol; sum observations are exact Gaussian updates."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.gp.incremental import IncrementalGP
from ev_nav.gp.independent import BIModel
from ev_nav.gp.posterior import SegmentModel, SegmentPosterior
from ev_nav.gp.svgp import SVGPConfig, SVGPModel
from ev_nav.gp.testing import load_real, random_route, subnetwork

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small():
    return subnetwork(load_real(), 200, seed=3)


def _models(net):
    return [
        BIModel(net),
        SVGPModel(net, config=SVGPConfig(num_inducing=60, batch_size=100), seed=0),
        IncrementalGP(net, seed=0),
    ]


def test_protocol_shape_caching_and_noise(small):
    rng = np.random.default_rng(0)
    for model in _models(small):
        assert isinstance(model, SegmentModel)
        post = model.posterior()
        assert isinstance(post, SegmentPosterior)
        assert post.mean.shape == post.std.shape == (small.n_segments,)
        assert post.mean.dtype == np.float64 and np.all(post.std > 0)
        assert post.noise_std == model.noise_std > 0
        assert model.posterior() is post  # cached while nothing changes
        with pytest.raises(ValueError):
            post.mean[0] = 1.0  # read-only
        route = random_route(small, 10, rng)
        model.update(route, small.e_det()[route] + 1.0)
        assert model.posterior() is not post
        assert post.path_mean(route) == pytest.approx(post.mean[route].sum())


def test_gp_update_total_is_exact_conditioning_on_the_sum(small):
    """With M = n and fixed hyperparameters, q(v) after a sum observation is the exact posterior."""
    cfg = SVGPConfig(num_inducing=small.n_segments, exact_refresh=True, learn_hyperparameters=False)
    model = SVGPModel(small, config=cfg, seed=0)
    route = random_route(small, 15, np.random.default_rng(1))
    total = float(small.e_det()[route].sum() + 25.0)
    model.update_total(route, total)
    post = model.posterior()
    with torch.no_grad():
        k = model.kernel.cross_all(np.arange(small.n_segments)).numpy()
    a = np.bincount(route, minlength=small.n_segments).astype(float)
    m0 = small.e_det()
    s = a @ k @ a + route.size * model.noise_std**2
    mean = m0 + k @ a * (total - a @ m0) / s
    var = np.diag(k) - (k @ a) ** 2 / s
    np.testing.assert_allclose(post.mean, mean, rtol=1e-7, atol=1e-7 * np.abs(mean).max())
    np.testing.assert_allclose(post.std**2, var, rtol=1e-6)
    # the sum is remembered: a later exact refresh with new data keeps it
    model.update(route[:3], m0[route[:3]])
    assert abs(model.posterior().mean[route].sum() - total) < abs(m0[route].sum() - total)


def test_every_model_takes_the_protocols_temperature_argument(small):
    """``route_covariance(ids, temperature=None)`` as the protocol says, on every model; the
    inducing-point learner refuses a temperature with a ConfigError naming the learners that
    take one, on every read, instead of a TypeError on some."""
    from ev_nav.errors import ConfigError

    route = random_route(small, 8, np.random.default_rng(2))
    for model in _models(small):
        cov = model.route_covariance(route, temperature=None)
        np.testing.assert_array_equal(cov, model.route_covariance(route))
        if isinstance(model, SVGPModel):
            with pytest.raises(ConfigError, match="exact learner or BI"):
                model.route_covariance(route, temperature=5.0)
            with pytest.raises(ConfigError, match="exact learner or BI"):
                model.posterior(temperature=5.0)
            with pytest.raises(ConfigError, match="exact learner or BI"):
                model.predict_sum(route, temperature=5.0)
