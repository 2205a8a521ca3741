"""Ground-truth sampler: exact draws have the kernel covariance; approximate sampler error."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.errors import ConfigError
from ev_nav.gp.groundtruth import approx_covariance_error, prior_kernel, sample_ground_truth
from ev_nav.gp.prior import PriorSettings
from ev_nav.gp.testing import load_real, subnetwork

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small():
    return subnetwork(load_real(), 200, seed=2)


def test_prior_settings_from_network(small):
    s = PriorSettings.from_network(small, lengthscale=0.5)
    var = np.var(small.e_det())
    assert s.outputscale == pytest.approx(0.0625 * var)
    assert s.noise_var == pytest.approx(0.01 * var)
    assert s.product_scale + s.feature_scale == pytest.approx(s.outputscale)
    assert s.lengthscale == 0.5 and s.with_lengthscale(2.0).lengthscale == 2.0
    with pytest.raises(ConfigError):
        PriorSettings(outputscale=-1.0, noise_var=1.0)


def test_exact_sampler_is_seeded_and_has_the_kernel_covariance(small):
    s = PriorSettings.from_network(small)
    a = sample_ground_truth(small, settings=s, seed=5)
    b = sample_ground_truth(small, settings=s, seed=5)
    c = sample_ground_truth(small, settings=s, seed=6)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    draws = sample_ground_truth(small, settings=s, seed=7, size=1500)
    with torch.no_grad():
        cov = prior_kernel(small, s).cross_all(np.arange(small.n_segments)).numpy()
    emp = np.cov(draws - small.e_det(), rowvar=False, bias=True)
    # Monte-Carlo standard error of a covariance entry ≈ sqrt((K_ii K_jj + K_ij²) / n)
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / 1500)
    assert np.mean(np.abs(emp - cov) / se) < 1.0
    assert np.abs(np.mean(draws - small.e_det())) < 4 * np.sqrt(cov.mean() / 1500)
    assert np.allclose(draws[0], sample_ground_truth(small, settings=s, seed=7, size=2)[0])


def test_approximate_sampler_error_is_small_and_shrinks_with_features(small):
    s = PriorSettings.from_network(small)
    e64 = approx_covariance_error(small, s, n_features=64, seed=0)
    e1024 = approx_covariance_error(small, s, n_features=1024, seed=0)
    assert e1024["rms_err"] < e64["rms_err"]
    assert e1024["rms_err"] < 0.05
    draw = sample_ground_truth(small, settings=s, seed=1, method="approx", n_features=256)
    assert draw.shape == (small.n_segments,) and np.all(np.isfinite(draw))
    with pytest.raises(ConfigError):
        sample_ground_truth(small, settings=PriorSettings(1.0, 1.0, graph_nu=3.0), method="approx")
