"""PTR posterior quantities vs Monte Carlo, limiting cases and the w-selection rule (§6.1–2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from ev_nav.bo.ptr.grid import GridKernel, GridPosterior, ProductGrid
from ev_nav.bo.ptr.measure import (
    BPTLSE,
    BPTUCB,
    argmax_random,
    classify_level_set,
    credible_interval,
    half_width,
    modified_threshold,
    ptr_of_values,
    ptr_posterior,
    select_w,
    straddle,
)
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import ExactGP


@pytest.fixture(scope="module")
def small_posterior():
    """10 × 10 grid, RBF(0.5, 1), 8 noisy observations of a fixed function."""
    g = np.linspace(-1, 1, 10)
    grid = ProductGrid(g, g)
    kernel = GridKernel("se", 0.5, 1.0)
    rng = np.random.default_rng(3)
    gp = GridPosterior(grid, kernel, noise_var=0.01)
    idx = rng.choice(100, size=8, replace=False)
    truth = np.sin(3 * grid.Z[:, 0].numpy()) * np.cos(2 * grid.Z[:, 1].numpy())
    for j in idx:
        gp.add(j // 10, j % 10, truth[j] + 0.1 * rng.standard_normal())
    p_w = norm.pdf(g)
    return grid, kernel, gp, p_w / p_w.sum()


def test_ptr_moments_match_monte_carlo(small_posterior):
    grid, kernel, gp, p_w = small_posterior
    # Independent joint sampler: dense Cholesky of the shared exact GP's posterior covariance.
    Zn = grid.Z[torch.as_tensor(gp.obs_index)]
    ref = ExactGP("se", 0.5, 1.0, noise_var=0.01).fit(Zn, torch.tensor(gp.y))
    f = ref.sample(grid.Z, 20_000, torch.Generator().manual_seed(0)).numpy().reshape(-1, 10, 10)
    p = ptr_of_values(f, p_w, 0.0)  # (20000, 10)
    post = ptr_posterior(gp.mean, gp.var, p_w, 0.0)
    se = p.std(0, ddof=1) / np.sqrt(p.shape[0])
    assert np.all(np.abs(p.mean(0) - post.mean) <= 4 * se + 1e-9)
    assert np.all(p.var(0) <= post.gamma2 + 2e-3)
    lo, up = credible_interval(post, beta=4.0, m=2)
    outside = (p < lo) | (p > up)
    assert outside.mean() <= 0.25
    # The bound is not vacuous: some designs have real uncertainty.
    assert post.gamma2.max() > 0.01


def test_no_data_limit():
    g = np.linspace(-1, 1, 7)
    gp = GridPosterior(ProductGrid(g, g), GridKernel("se", 0.5, 4.0), noise_var=1e-4)
    p_w = np.arange(1, 8, dtype=float)
    p_w /= p_w.sum()
    h = 0.7
    post = ptr_posterior(gp.mean, gp.var, p_w, h)
    np.testing.assert_allclose(post.mean, norm.cdf(-h / 2.0), rtol=1e-12)


def test_noise_free_full_data_limit():
    g = np.linspace(-1, 1, 8)
    grid = ProductGrid(g, g)
    gp = GridPosterior(grid, GridKernel("se", 0.3, 1.0), noise_var=1e-10)
    f = np.cos(2 * grid.Z[:, 0].numpy()) + grid.Z[:, 1].numpy()
    for j in range(64):
        gp.add(j // 8, j % 8, f[j])
    p_w = np.full(8, 1 / 8)
    post = ptr_posterior(gp.mean, gp.var, p_w, 0.3)
    np.testing.assert_allclose(post.mean, ptr_of_values(f.reshape(8, 8), p_w, 0.3), atol=1e-6)
    assert post.gamma2.max() < 1e-6


def test_eq4_argmax_bernoulli_variance_equals_argmin_abs_z():
    rng = np.random.default_rng(1)
    for _ in range(200):
        mean = rng.normal(size=30) * 3
        var = rng.uniform(0.01, 4, size=30)
        h = rng.normal()
        z = (mean - h) / np.sqrt(var)
        bern = norm.cdf(z) * norm.cdf(-z)
        assert select_w(mean, var, h, rng) == int(np.argmax(bern))


def test_eq4_no_underflow_ties():
    # All z are far in the tail: π(1-π) underflows to 0 but |z| still orders the points.
    mean = np.array([60.0, 50.0, 55.0])
    var = np.ones(3)
    assert select_w(mean, var, 0.0, np.random.default_rng(0)) == 1


def test_modified_threshold():
    mean = np.array([0.0, 0.05, 0.2, -0.09])
    np.testing.assert_allclose(modified_threshold(mean, 0.0, 0.1), [0.2, 0.2, 0.0, 0.2])
    np.testing.assert_allclose(modified_threshold(mean, 0.0, 0.0), 0.0)
    with pytest.raises(ConfigError):
        modified_threshold(mean, 0.0, -1.0)
    # The modified PTR mean is never above the plain one (a pessimistic target).
    var = np.full((1, 4), 0.01)
    p_w = np.full(4, 0.25)
    plain = ptr_posterior(mean[None], var, p_w, 0.0).mean
    mod = ptr_posterior(mean[None], var, p_w, 0.0, eta=0.1).mean
    assert mod[0] <= plain[0]


def test_interval_width_and_m():
    g2 = np.array([0.0, 0.01, 0.25])
    np.testing.assert_allclose(half_width(g2, 2.0, 2), np.sqrt(2.0) * np.sqrt(g2))
    np.testing.assert_allclose(half_width(g2, 1.5, 5), 1.5**0.2 * g2**0.2)
    # Larger m widens small intervals (γ² < 1): the "too conservative" effect of §2.5.
    assert np.all(half_width(g2[1:], 1.5, 5) > half_width(g2[1:], 1.5, 2))
    with pytest.raises(ConfigError):
        half_width(g2, 1.0, 1.5)


def test_classification_and_straddle():
    lo = np.array([0.85, 0.5, 0.1])
    up = np.array([0.95, 0.9, 0.7])
    high, low = classify_level_set(lo, up, 0.8)
    assert high.tolist() == [True, False, False]
    assert low.tolist() == [False, False, True]
    np.testing.assert_allclose(straddle(lo, up, 0.8), [-0.05, 0.1, -0.1])
    with pytest.raises(ConfigError):
        BPTLSE(alpha=1.0)


def test_argmax_random_breaks_ties_uniformly():
    rng = np.random.default_rng(0)
    v = np.array([1.0, 3.0, 3.0, 0.0, 3.0])
    picks = [argmax_random(v, rng) for _ in range(600)]
    counts = np.bincount(picks, minlength=5)
    assert counts[0] == counts[3] == 0
    assert counts[[1, 2, 4]].min() > 150


def test_bpt_ucb_prefers_uncertain_near_threshold_design():
    # Design 0: surely below h; design 1: mean at h with large variance -> chosen.
    mean = np.array([[-5.0, -5.0], [0.0, 0.1]])
    var = np.array([[1e-4, 1e-4], [1.0, 1.0]])
    ix, iw = BPTUCB().select(mean, var, np.array([0.5, 0.5]), 0.0, np.random.default_rng(0))
    assert (ix, iw) == (1, 0)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 8),
    st.floats(-3, 3),
    st.integers(0, 2**31 - 1),
)
def test_ptr_posterior_properties(n_x, n_w, h, seed):
    rng = np.random.default_rng(seed)
    mean = rng.normal(size=(n_x, n_w)) * 2
    var = rng.uniform(0, 2, size=(n_x, n_w))
    p_w = rng.dirichlet(np.ones(n_w))
    post = ptr_posterior(mean, var, p_w, h)
    assert np.all((post.mean >= 0) & (post.mean <= 1 + 1e-12))
    # Jensen: the Bernoulli-variance average never exceeds the variance of a Bernoulli(μ^(p)).
    assert np.all(post.gamma2 <= post.mean * (1 - post.mean) + 1e-12)
    lo, up = credible_interval(post, 2.0, 2)
    assert np.all((lo <= post.mean) & (post.mean <= up))
