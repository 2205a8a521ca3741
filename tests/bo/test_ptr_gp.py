"""Grid posterior cache and joint samplers against the shared exact GP."""

from __future__ import annotations

import numpy as np
import torch

from ev_nav.bo.ptr.grid import GridKernel, GridPosterior, ProductGrid
from ev_nav.bo.ptr.sampling import (
    KroneckerPriorSampler,
    RFFPriorSampler,
    posterior_samples,
)
from ev_nav.gp.exact import ExactGP


def _fill(gp: GridPosterior, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(n):
        ix, iw = rng.integers(gp.grid.n_x), rng.integers(gp.grid.n_w)
        gp.add(int(ix), int(iw), float(rng.normal()))


def test_incremental_posterior_matches_exact_gp():
    g = np.linspace(-1, 1, 12)
    w = np.linspace(-1, 1, 9)
    grid = ProductGrid(g, w)
    kernel = GridKernel("matern52", (0.4, 0.7), 2.5)
    gp = GridPosterior(grid, kernel, noise_var=1e-3, prior_mean=0.3, capacity=4)
    _fill(gp, 30, 0)  # includes repeated points and capacity growth
    ref = ExactGP("matern52", torch.tensor([0.4, 0.7]), 2.5, 1e-3, mean=0.3)
    ref.fit(grid.Z[torch.as_tensor(gp.obs_index)], torch.tensor(gp.y))
    mu, var = ref.posterior(grid.Z)
    np.testing.assert_allclose(gp.mean.ravel(), mu.numpy(), atol=1e-6)
    np.testing.assert_allclose(gp.var.ravel(), var.numpy(), atol=1e-6)


def test_expectation_moments_match_dense_covariance():
    g = np.linspace(-1, 1, 6)
    grid = ProductGrid(g, g)
    gp = GridPosterior(grid, GridKernel("se", 0.6, 1.5), noise_var=1e-2)
    _fill(gp, 10, 1)
    p = np.arange(1.0, 7.0)
    p /= p.sum()
    mg, vg = gp.expectation_moments(p)
    for ix in range(6):
        cov = gp.covariance_rows(ix)
        np.testing.assert_allclose(vg[ix], p @ cov @ p, atol=1e-10)
        np.testing.assert_allclose(mg[ix], gp.mean[ix] @ p, atol=1e-12)


def test_refit_equals_fresh_conditioning():
    g = np.linspace(-1, 1, 5)
    grid = ProductGrid(g, g)
    gp = GridPosterior(grid, GridKernel("se", 0.5, 1.0), noise_var=1e-2)
    _fill(gp, 8, 2)
    k2 = GridKernel("se", (0.3, 0.8), 2.0)
    fresh = GridPosterior(grid, k2, noise_var=5e-3)
    for j, y in zip(gp.obs_index, gp.y, strict=True):
        fresh.add(j // 5, j % 5, y)
    gp.refit(k2, 5e-3)
    np.testing.assert_allclose(gp.mean, fresh.mean, atol=1e-12)
    np.testing.assert_allclose(gp.var, fresh.var, atol=1e-12)


def test_kronecker_matheron_samples_have_posterior_moments():
    g = np.linspace(-1, 1, 8)
    grid = ProductGrid(g, g)
    kernel = GridKernel("se", 0.5, 2.0)
    gp = GridPosterior(grid, kernel, noise_var=0.05)
    _fill(gp, 12, 3)
    f = posterior_samples(gp, KroneckerPriorSampler(grid, kernel), 8000, torch.Generator())
    f = f.reshape(8000, -1)
    ref = ExactGP("se", 0.5, 2.0, 0.05).fit(
        grid.Z[torch.as_tensor(gp.obs_index)], torch.tensor(gp.y)
    )
    mu, cov = ref.posterior_cov(grid.Z)
    se = np.sqrt(np.diag(cov.numpy()) / 8000)
    assert np.all(np.abs(f.mean(0) - mu.numpy()) < 5 * se + 1e-6)
    emp = np.cov(f.T)
    np.testing.assert_allclose(emp, cov.numpy(), atol=0.12)


def test_kronecker_prior_covariance():
    g = np.linspace(-1, 1, 5)
    w = np.linspace(-1, 1, 4)
    grid = ProductGrid(g, w)
    kernel = GridKernel("se", (0.4, 0.9), 1.0)
    s = KroneckerPriorSampler(grid, kernel)(40_000, torch.Generator().manual_seed(1)).numpy()
    K = kernel(grid.Z, grid.Z).numpy()
    np.testing.assert_allclose(np.cov(s.T), K, atol=0.04)


def test_rff_prior_sampler_approximates_matern_covariance():
    g = np.linspace(-1, 1, 4)
    grid = ProductGrid(g, g)
    kernel = GridKernel("matern52", 0.7, 1.0)
    gen = torch.Generator().manual_seed(2)
    sampler = RFFPriorSampler(grid, kernel, n_features=1000)
    s = torch.cat([sampler(50, gen) for _ in range(80)]).numpy()
    K = kernel(grid.Z, grid.Z).numpy()
    np.testing.assert_allclose(np.cov(s.T), K, atol=0.1)
