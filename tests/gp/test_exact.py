"""Tests of the exact-GP building blocks against independent dense computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ev_nav.errors import ConfigError, InvalidObservation
from ev_nav.gp.exact import (
    ExactGP,
    RandomFourierFeatures,
    rff_posterior_sample,
    stationary_kernel,
)

D = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _np_kernel(kind, A, B, ls, s):
    r = np.sqrt((((A[:, None, :] - B[None, :, :]) / ls) ** 2).sum(-1))
    if kind == "se":
        return s * np.exp(-0.5 * r**2)
    if kind == "matern52":
        a = math.sqrt(5) * r
        return s * (1 + a + a**2 / 3) * np.exp(-a)
    a = math.sqrt(3) * r
    return s * (1 + a) * np.exp(-a)


@pytest.mark.parametrize("kind", ["se", "matern52", "matern32"])
def test_kernel_matches_numpy(kind):
    g = _gen(0)
    A = torch.rand(7, 3, dtype=D, generator=g)
    B = torch.rand(5, 3, dtype=D, generator=g)
    ls = np.array([0.2, 0.5, 1.3])
    K = stationary_kernel(kind, A, B, torch.tensor(ls), 1.7).numpy()
    np.testing.assert_allclose(K, _np_kernel(kind, A.numpy(), B.numpy(), ls, 1.7), atol=1e-12)


def test_unknown_kernel_raises():
    with pytest.raises(ConfigError):
        stationary_kernel("rbf", torch.zeros(1, 1), torch.zeros(1, 1), 1.0, 1.0)


@pytest.mark.parametrize("kind", ["se", "matern52"])
def test_posterior_matches_dense_solve(kind):
    g = _gen(1)
    X = torch.rand(30, 2, dtype=D, generator=g)
    y = torch.sin(6 * X[:, 0]) + X[:, 1] ** 2
    Xs = torch.rand(11, 2, dtype=D, generator=g)
    gp = ExactGP(
        kind, lengthscale=torch.tensor([0.3, 0.4]), outputscale=1.3, noise_var=1e-3, mean=0.2
    ).fit(X, y)
    mu, var = gp.posterior(Xs)
    Xn, yn, Xsn = X.numpy(), y.numpy(), Xs.numpy()
    ls = np.array([0.3, 0.4])
    K = _np_kernel(kind, Xn, Xn, ls, 1.3) + 1e-3 * np.eye(30)
    Ks = _np_kernel(kind, Xsn, Xn, ls, 1.3)
    mu_ref = 0.2 + Ks @ np.linalg.solve(K, yn - 0.2)
    cov_ref = _np_kernel(kind, Xsn, Xsn, ls, 1.3) - Ks @ np.linalg.solve(K, Ks.T)
    np.testing.assert_allclose(mu.numpy(), mu_ref, atol=1e-8)
    np.testing.assert_allclose(var.numpy(), np.diag(cov_ref), atol=1e-8)
    mu2, cov = gp.posterior_cov(Xs)
    np.testing.assert_allclose(mu2.numpy(), mu_ref, atol=1e-8)
    np.testing.assert_allclose(cov.numpy(), cov_ref, atol=1e-8)


def test_update_equals_refit():
    g = _gen(2)
    X = torch.rand(25, 3, dtype=D, generator=g)
    y = torch.randn(25, dtype=D, generator=g)
    Xs = torch.rand(9, 3, dtype=D, generator=g)
    inc = ExactGP("se", 0.3, 1.0, 1e-4).fit(X[:10], y[:10])
    inc.update(X[10:11], y[10:11])
    inc.update(X[11:], y[11:])
    ref = ExactGP("se", 0.3, 1.0, 1e-4).fit(X, y)
    assert inc.n_train == 25
    for a, b in zip(inc.posterior(Xs), ref.posterior(Xs), strict=True):
        torch.testing.assert_close(a, b, atol=1e-8, rtol=1e-6)


def test_posterior_is_differentiable_in_inputs():
    g = _gen(3)
    X = torch.rand(20, 2, dtype=D, generator=g)
    gp = ExactGP("matern52", 0.3).fit(X, torch.cos(5 * X[:, 0]))
    x0 = torch.rand(4, 2, dtype=D, generator=g)

    def ucb(x):
        m, v = gp.posterior(x)
        return (m + 2 * v.sqrt()).sum()

    x = x0.clone().requires_grad_(True)
    ucb(x).backward()
    eps = 1e-6
    fd = torch.zeros_like(x0)
    for i in range(4):
        for j in range(2):
            e = torch.zeros_like(x0)
            e[i, j] = eps
            fd[i, j] = (ucb(x0 + e) - ucb(x0 - e)) / (2 * eps)
    torch.testing.assert_close(x.grad, fd, atol=1e-5, rtol=1e-4)


def test_joint_samples_empirical_covariance():
    g = _gen(4)
    X = torch.rand(8, 1, dtype=D, generator=g)
    gp = ExactGP("se", 0.2, 1.0, 1e-2).fit(X, torch.sin(4 * X[:, 0]))
    Xs = torch.linspace(0, 1, 6, dtype=D).unsqueeze(-1)
    mu, cov = gp.posterior_cov(Xs)
    S = gp.sample(Xs, 40_000, _gen(5))
    assert S.shape == (40_000, 6)
    torch.testing.assert_close(S.mean(0), mu, atol=0.02, rtol=0)
    emp = torch.cov(S.T)
    assert float((emp - cov).abs().max()) < 0.03 * float(cov.diagonal().max()) + 1e-3


@pytest.mark.parametrize("kind,tol", [("se", 0.05), ("matern52", 0.06), ("matern32", 0.07)])
def test_rff_approximates_kernel(kind, tol):
    g = _gen(6)
    X = torch.rand(40, 3, dtype=D, generator=g)
    ls = torch.tensor([0.3, 0.5, 0.8], dtype=D)
    rff = RandomFourierFeatures(kind, ls, 1.5, 3, 8192, _gen(7))
    phi = rff(X)
    assert phi.shape == (40, 8192)
    approx = phi @ phi.T
    exact = stationary_kernel(kind, X, X, ls, 1.5)
    # Monte Carlo error of 4096 frequencies: about sqrt(2 / 4096) * outputscale per entry
    assert float((approx - exact).abs().max()) < tol * 1.5 + 0.02
    assert float((approx - exact).abs().mean()) < 0.02


def test_rff_posterior_sample_tracks_exact_posterior():
    g = _gen(8)
    X = torch.rand(15, 1, dtype=D, generator=g)
    y = torch.sin(6 * X[:, 0])
    gp = ExactGP("se", 0.2, 1.0, 1e-4).fit(X, y)
    Xs = torch.linspace(0, 1, 25, dtype=D).unsqueeze(-1)
    mu, var = gp.posterior(Xs)
    draws = []
    for s in range(300):
        rff = RandomFourierFeatures("se", 0.2, 1.0, 1, 1024, _gen(100 + s))
        draws.append(rff_posterior_sample(rff, X, y, 1e-4, _gen(1000 + s))(Xs))
    D_ = torch.stack(draws)
    assert float((D_.mean(0) - mu).abs().max()) < 0.15
    assert float((D_.std(0) - var.sqrt()).abs().max()) < 0.15
    # near training points the draws interpolate the data
    f = rff_posterior_sample(
        RandomFourierFeatures("se", 0.2, 1.0, 1, 2048, _gen(9)), X, y, 1e-4, _gen(10)
    )
    assert float((f(X) - y).abs().max()) < 0.05


def test_rff_sample_differentiable():
    rff = RandomFourierFeatures("se", 0.3, 1.0, 2, 64, _gen(11))
    f = rff_posterior_sample(
        rff, torch.rand(5, 2, dtype=D, generator=_gen(12)), torch.zeros(5, dtype=D), 1e-4, _gen(13)
    )
    x = torch.rand(3, 2, dtype=D, generator=_gen(14)).requires_grad_(True)
    f(x).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_fit_hyperparameters_recovers_lengthscale():
    g = _gen(15)
    X = torch.rand(120, 1, dtype=D, generator=g)
    true = ExactGP("se", 0.15, 1.0, 1e-4)
    f = true.sample(X, 1, _gen(16))[0]
    y = f + 0.01 * torch.randn(120, dtype=D, generator=g)
    gp = ExactGP("se", 1.0, 1.0, 1e-2).fit_hyperparameters(X, y, n_restarts=3, generator=_gen(17))
    assert 0.09 < float(gp.lengthscale.reshape(-1)[0]) < 0.25
    assert gp.n_train == 120
    assert gp.log_marginal_likelihood(X, y) > ExactGP("se", 1.0, 1.0, 1e-2).log_marginal_likelihood(
        X, y
    )


def test_fit_hyperparameters_stays_inside_the_given_bounds():
    """A few points of a quadratic: unbounded, the likelihood drives lengthscale and outputscale
    far out; with ``bounds`` every parameter stays in its interval and the fit still improves
    on its start, and the same bounds in the wrong order are refused."""
    X = torch.rand(5, 2, dtype=D, generator=_gen(30))
    y = -((X - 0.4) ** 2).sum(-1)
    y = (y - y.mean()) / y.std()
    free = ExactGP("se", 0.2, 1.0, 1e-4).fit_hyperparameters(X, y, generator=_gen(31))
    assert float(free.lengthscale.max()) > 1.0 or free.outputscale > 2.0
    box = ((0.1, 1.0), (0.1, 2.0), (1e-6, 0.1))
    start = ExactGP("se", 0.2, 1.0, 1e-4)
    gp = ExactGP("se", 0.2, 1.0, 1e-4).fit_hyperparameters(X, y, generator=_gen(31), bounds=box)
    ls = gp.lengthscale
    assert bool(((ls >= 0.1 - 1e-9) & (ls <= 1.0 + 1e-9)).all())
    assert 0.1 - 1e-9 <= gp.outputscale <= 2.0 + 1e-9 and 1e-6 - 1e-12 <= gp.noise_var <= 0.1
    assert gp.log_marginal_likelihood(X, y) > start.log_marginal_likelihood(X, y)
    with pytest.raises(ConfigError):
        ExactGP().fit_hyperparameters(X, y, bounds=((1.0, 0.1), (0.1, 2.0), (1e-6, 0.1)))


def test_bad_observations_raise():
    with pytest.raises(InvalidObservation):
        ExactGP().fit(torch.zeros(3, 1, dtype=D), torch.tensor([0.0, float("nan"), 1.0]))
    with pytest.raises(InvalidObservation):
        ExactGP().fit(torch.zeros(3, 1, dtype=D), torch.zeros(4, dtype=D))


def test_prior_when_unconditioned():
    gp = ExactGP("se", 0.5, 2.0, mean=1.0)
    mu, var = gp.posterior(torch.rand(4, 2, dtype=D, generator=_gen(18)))
    torch.testing.assert_close(mu, torch.full((4,), 1.0, dtype=D))
    torch.testing.assert_close(var, torch.full((4,), 2.0, dtype=D))
