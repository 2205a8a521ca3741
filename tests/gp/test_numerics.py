"""Shared GP numerics: jittered Cholesky (torch and SciPy), Matérn-5/2, random Fourier features."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ev_nav.errors import ModelStateError
from ev_nav.gp.numerics import (
    cholesky_jitter,
    cholesky_jitter_np,
    fourier_features,
    matern52,
    student_t_frequencies,
)

D = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_cholesky_adds_no_jitter_when_not_needed_and_the_smallest_rung_otherwise():
    X = torch.rand(30, 2, dtype=D, generator=_gen(0))
    K = matern52(X, X, torch.tensor(0.3, dtype=D)) + 1e-3 * torch.eye(30, dtype=D)
    L, jitter = cholesky_jitter(K, 1.0)
    assert jitter == 0.0
    torch.testing.assert_close(L @ L.T, K)
    # rank one: singular, needs a jitter; the factor is that of A + jitter I
    v = torch.rand(30, 1, dtype=D, generator=_gen(1))
    A = v @ v.T
    L, jitter = cholesky_jitter(A)
    assert jitter > 0
    torch.testing.assert_close(L @ L.T, A + jitter * torch.eye(30, dtype=D))
    Ln, jn = cholesky_jitter_np(A.numpy())
    assert jn == pytest.approx(jitter, rel=1e-12)
    np.testing.assert_allclose(Ln, L.numpy(), atol=1e-10)


def test_cholesky_symmetrizes_and_raises_the_named_error():
    A = torch.tensor([[2.0, 1.0], [0.999999, 2.0]], dtype=D)
    L, _ = cholesky_jitter(A, symmetrize=True)
    torch.testing.assert_close(L @ L.T, 0.5 * (A + A.T))
    bad = -torch.eye(3, dtype=D)
    with pytest.raises(ModelStateError, match="diverged"):
        cholesky_jitter(bad, error=ModelStateError, message="diverged")
    with pytest.raises(ModelStateError):
        cholesky_jitter_np(bad.numpy(), error=ModelStateError)


def test_matern52_formula_unit_diagonal_and_finite_gradients():
    X = torch.rand(40, 3, dtype=D, generator=_gen(2))
    Y = torch.rand(7, 3, dtype=D, generator=_gen(3))
    ls = torch.tensor([0.2, 0.5, 1.0], dtype=D)
    r = torch.sqrt((((X[:, None, :] - Y[None]) / ls) ** 2).sum(-1))
    a = math.sqrt(5.0) * r
    torch.testing.assert_close(matern52(X, Y, ls), (1 + a + a * a / 3) * torch.exp(-a))
    torch.testing.assert_close(torch.diagonal(matern52(X, X, ls)), torch.ones(40, dtype=D))
    # the in-place (no-grad) path and the autograd path agree
    x = X[:3].clone().requires_grad_(True)
    k = matern52(x, X, ls)
    with torch.no_grad():
        torch.testing.assert_close(k.detach(), matern52(X[:3], X, ls))
    k.sum().backward()  # x coincides with rows of X: the gradient must stay finite
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("numpy_backend", [False, True])
def test_random_fourier_features_approximate_matern52(numpy_backend):
    n_freq, ls, s = 20_000, 0.7, 1.8
    X = torch.rand(25, 2, dtype=D, generator=_gen(4))
    exact = s * matern52(X, X, torch.tensor(ls, dtype=D))
    if numpy_backend:
        rng = np.random.default_rng(0)
        omega = student_t_frequencies(
            rng.standard_normal((2, n_freq)), rng.chisquare(5.0, n_freq), 5.0, ls
        )
        b = rng.uniform(0.0, 2.0 * np.pi, n_freq)
        phi = fourier_features(X.numpy() @ omega, s, phases=b)
        approx = phi @ phi.T
    else:
        g = _gen(5)
        z = torch.randn(2, n_freq, dtype=D, generator=g)
        chi2 = (torch.randn(5, n_freq, dtype=D, generator=g) ** 2).sum(0)
        phi = fourier_features(X @ student_t_frequencies(z, chi2, 5, ls), s)
        approx = (phi @ phi.T).numpy()
    assert np.abs(approx - exact.numpy()).max() < 0.06 * s
