"""The fit's objective (:func:`ev_nav.gp.fitting.fit_objective`): its value and its closed-form
gradient against autograd through an independent dense formulation, with every term the
learners use (trip-total rows, segment amplitudes, road-change variance, a free κ)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ev_nav.gp.fitting import FitData, fit_objective, map_fit

D = torch.float64


def _reference_nll(theta: torch.Tensor, data: FitData, block, centre, free, sd: float,
                   n: int) -> torch.Tensor:
    """The negative log posterior written out densely, differentiated by autograd."""
    dim = data.x.shape[1]
    t = theta.exp()
    ls1, ls2 = t[1 : 1 + dim], t[1 + dim : 1 + 2 * dim]
    s1, s2, noise = t[1 + 2 * dim], t[2 + 2 * dim], t[3 + 2 * dim]

    def matern(ls: torch.Tensor) -> torch.Tensor:
        diff = (data.x[:, None, :] - data.x[None, :, :]) / ls
        r = torch.sqrt((diff**2).sum(-1) + 1e-300)
        a = math.sqrt(5.0) * r
        return (1 + a + a * a / 3) * torch.exp(-a)

    k = s1 * block(t[0]) * matern(ls1) + s2 * matern(ls2)
    k = data.amp[:, None] * k * data.amp[None, :] + torch.diag(data.extra)
    h = torch.zeros(len(data.pos), n, dtype=D)
    for i, (p, w) in enumerate(zip(data.pos, data.wts, strict=True)):
        h[i, torch.as_tensor(p)] = torch.as_tensor(w, dtype=D)
    g = h @ k @ h.T + torch.diag(noise * data.noise_factor)
    dev = (theta - centre)[free]
    return (0.5 * data.resid @ torch.linalg.solve(g, data.resid) + 0.5 * torch.logdet(g)
            + 0.5 * data.dof * torch.log(noise) + 0.5 * data.ssw / noise
            + 0.5 * (dev @ dev) / sd**2)


@pytest.fixture
def problem():
    rng = np.random.default_rng(3)
    n, dim = 40, 3
    x = torch.as_tensor(rng.standard_normal((n, dim)))
    pts = torch.as_tensor(rng.uniform(0.0, 3.0, size=(n, 2)))
    dist = torch.cdist(pts, pts)

    def block(kappa: torch.Tensor) -> torch.Tensor:  # positive definite, differentiable in κ
        return torch.exp(-(dist**2) / (2.0 * kappa**2)) + 1e-6 * torch.eye(n, dtype=D)

    # one row per segment for the first 30, then 6 trip totals over overlapping segments
    pos = [np.array([i]) for i in range(30)]
    wts = [np.ones(1) for _ in range(30)]
    for _ in range(6):
        p = rng.choice(n, size=8, replace=False)
        pos.append(p)
        wts.append(rng.uniform(0.5, 1.5, size=8))
    r = len(pos)
    data = FitData(x=x, pos=pos, wts=wts, resid=torch.as_tensor(3.0 * rng.standard_normal(r)),
                   noise_factor=torch.as_tensor(rng.uniform(0.2, 2.0, size=r)), ssw=17.0,
                   dof=11.0, amp=torch.as_tensor(rng.uniform(0.5, 2.0, size=n)),
                   extra=torch.as_tensor(np.where(np.arange(n) % 7 == 0, 0.8, 0.0)))
    theta = torch.as_tensor(np.log([1.3, 0.7, 1.1, 2.0, 0.5, 1.5, 0.9, 4.0, 1.5, 0.6]))
    centre = theta + 0.2
    return data, block, theta, centre, n


@pytest.mark.parametrize("kappa_free", [True, False])
def test_the_objective_and_its_gradient_are_autograds_on_the_dense_formula(problem, kappa_free):
    data, block, theta, centre, n = problem
    free = torch.ones_like(theta, dtype=torch.bool)
    free[0] = kappa_free
    free[4] = False  # one lengthscale held: its gradient is 0
    nll, grad = fit_objective(theta, data, block, centre, free, 0.8)
    th = theta.clone().requires_grad_(True)
    ref = _reference_nll(th, data, block, centre, free, 0.8, n)
    ref.backward()
    want = th.grad.clone()
    want[~free] = 0.0
    assert nll == pytest.approx(float(ref.detach()), rel=1e-10)
    np.testing.assert_allclose(grad.numpy(), want.numpy(), rtol=1e-7, atol=1e-9)
    assert grad[4] == 0.0 and (grad[0] != 0.0) == kappa_free


def test_a_covariance_that_is_not_positive_definite_gives_none_and_the_fit_keeps_its_start(
        problem):
    data, block, theta, centre, n = problem
    neg = FitData(x=data.x, pos=data.pos, wts=data.wts, resid=data.resid,
                  noise_factor=-torch.ones_like(data.noise_factor) * 1e6, ssw=data.ssw,
                  dof=data.dof, amp=data.amp, extra=data.extra)
    free = torch.ones_like(theta, dtype=torch.bool)
    assert fit_objective(theta, neg, block, centre, free, 0.8) is None
    fit = map_fit(neg, block, theta, centre, free, 5, 0.8)
    assert torch.equal(fit.theta, theta) and fit.start_nll == math.inf


def test_the_fit_lowers_the_objective_to_a_stationary_point(problem):
    data, block, theta, centre, n = problem
    free = torch.ones_like(theta, dtype=torch.bool)
    fit = map_fit(data, block, theta, centre, free, 60, 0.8)
    nll, grad = fit_objective(fit.theta, data, block, centre, free, 0.8)
    assert fit.gain() > 0.0 and nll == pytest.approx(fit.nll, rel=1e-12)
    assert float(grad.abs().max()) < 1e-3
