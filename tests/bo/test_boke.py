"""Formula tests of the BOKE surrogate (spec §9 check 1): NW limits, KDE, log-domain stability,
acquisition transform, analytic gradients, schedules, incremental cache."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ev_nav.bo.boke.methods import (
    BOKEConfig,
    BOKEMaximizerConfig,
    BOKEMethod,
    DensityExploration,
    FiniteBOKE,
    KRUCBConfig,
    KRUCBMethod,
    n_distinct,
)
from ev_nav.bo.boke.surrogate import (
    CandidateCache,
    KernelRegressionModel,
    beta_schedule,
    ikr_ucb,
    kr_posterior,
    log_density_at_data,
    log_ikr_ucb,
    scott_bandwidth,
    silverman_bandwidth,
)
from ev_nav.errors import ConfigError, InvalidObservation

F64 = torch.float64


def naive(Xc: torch.Tensor, X: torch.Tensor, y: torch.Tensor, h: float):
    """Textbook NW / KDE with explicit differences (independent of the log-domain code)."""
    diff = Xc[:, None, :] - X[None, :, :]
    k = torch.exp(-(diff**2).sum(-1) / (2 * h * h))
    W = k.sum(1)
    return (k @ y) / W, W


def _data(seed: int = 0, t: int = 20, d: int = 3):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(t, d, generator=g, dtype=F64), torch.randn(t, generator=g, dtype=F64), g)


# ----------------------------------------------------------------------------- NW limits
def test_nw_small_bandwidth_is_nearest_neighbour_average_with_ties():
    X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=F64)
    y = torch.tensor([1.0, 2.0, 4.0, 8.0], dtype=F64)
    Xc = torch.tensor([[0.9, 0.05], [0.5, 0.0], [0.1, 0.8], [5.0, -1.0]], dtype=F64)
    m = kr_posterior(Xc, X, y, 1e-4).mean
    # nearest: the duplicated (1,0) -> mean(2,4); equidistant (0,0),(1,0),(1,0) -> mean(1,2,4);
    # (0,1) -> 8; far away, nearest is (1,0) twice -> 3 (the paper's NN fallback)
    expected = torch.tensor([3.0, 7.0 / 3.0, 8.0, 3.0], dtype=F64)
    torch.testing.assert_close(m, expected, rtol=1e-9, atol=1e-9)


def test_nw_large_bandwidth_is_global_mean():
    X, y, g = _data()
    Xc = torch.rand(7, 3, generator=g, dtype=F64)
    m = kr_posterior(Xc, X, y, 1e4).mean
    torch.testing.assert_close(m, torch.full((7,), float(y.mean()), dtype=F64), rtol=0, atol=1e-7)


def test_nw_is_convex_combination():
    X, y, g = _data(seed=3)
    Xc = torch.rand(500, 3, generator=g, dtype=F64) * 3 - 1
    for h in (1e-3, 0.05, 0.3, 10.0):
        m = kr_posterior(Xc, X, y, h).mean
        assert float(m.min()) >= float(y.min()) - 1e-12
        assert float(m.max()) <= float(y.max()) + 1e-12


# ------------------------------------------------------------------------------- density
def test_density_at_data_points_and_multiplicity_limit():
    X = torch.tensor([[0.2, 0.2], [0.2, 0.2], [0.2, 0.2], [0.7, 0.1], [0.9, 0.9]], dtype=F64)
    y = torch.zeros(5, dtype=F64)
    for h in (1e-3, 0.1, 1.0):
        W = torch.exp(kr_posterior(X, X, y, h).log_density)
        assert bool((W >= 1.0 - 1e-12).all())
    W0 = torch.exp(kr_posterior(X, X, y, 1e-5).log_density)
    torch.testing.assert_close(W0, torch.tensor([3.0, 3.0, 3.0, 1.0, 1.0], dtype=F64))
    torch.testing.assert_close(log_density_at_data(X, 0.1), kr_posterior(X, X, y, 0.1).log_density)


def test_log_domain_matches_naive_and_stays_finite_far_away():
    X, y, g = _data(seed=1, t=30, d=3)
    Xc = torch.rand(60, 3, generator=g, dtype=F64)
    for h in (0.05, 0.2, 1.0):
        post = kr_posterior(Xc, X, y, h)
        m_ref, W_ref = naive(Xc, X, y, h)
        assert float(((post.mean - m_ref).abs() / m_ref.abs().clamp_min(1e-300)).max()) < 1e-10
        W = torch.exp(post.log_density)
        assert float(((W - W_ref).abs() / W_ref).max()) < 1e-10
        sig = post.sigma_hat
        assert float(((sig - W_ref**-0.5).abs() / W_ref**-0.5).max()) < 1e-10
        post_t = kr_posterior(Xc, X, y, h, numpy_exp=False)
        torch.testing.assert_close(post_t.mean, post.mean, rtol=1e-13, atol=1e-13)
    # 50 bandwidths away from every point: the naive formulas give 0/0, the log domain does not
    h = 0.02
    i_max = int(X[:, 0].argmax())
    far = X[i_max : i_max + 1] + torch.tensor([[50 * h, 0.0, 0.0]], dtype=F64)
    assert float(torch.cdist(far, X).min()) == pytest.approx(50 * h)
    m_naive, W_naive = naive(far, X, y, h)
    assert float(W_naive[0]) == 0.0 and math.isnan(float(m_naive[0]))
    post = kr_posterior(far, X, y, h, with_grad=True)
    g_val, g_grad = log_ikr_ucb(post, 2.0, float(y.min()))
    for v in (post.mean, post.log_density, post.sigma_hat, g_val, g_grad, post.grad_mean):
        assert bool(torch.isfinite(v).all())
    assert float(post.mean[0]) == pytest.approx(float(y[i_max]))
    # even 100x further out (sigma_hat overflows to inf there) the optimised objective is finite
    very_far = far + 5.0
    post = kr_posterior(very_far, X, y, h, with_grad=True)
    g_val, g_grad = log_ikr_ucb(post, 2.0, float(y.min()))
    assert bool(torch.isfinite(g_val).all() and torch.isfinite(g_grad).all())


# ------------------------------------------------------------------ acquisition transform
@pytest.mark.parametrize("d", [1, 2])
def test_log_transform_has_same_argmax_as_raw_ikr_ucb(d: int):
    g = torch.Generator().manual_seed(7 + d)
    X = torch.rand(8, d, generator=g, dtype=F64)
    y = torch.randn(8, generator=g, dtype=F64)
    if d == 1:
        grid = torch.linspace(0, 1, 10_000, dtype=F64)[:, None]
    else:
        a = torch.linspace(0, 1, 100, dtype=F64)
        grid = torch.cartesian_prod(a, a)
    h = scott_bandwidth(8, d)
    for beta in (0.05, 1.0, 17.58):
        post = kr_posterior(grid, X, y, h)
        raw = ikr_ucb(post, beta)
        assert bool(torch.isfinite(raw).all())
        g_val, _ = log_ikr_ucb(post, beta, float(y.min()))
        i_raw, i_log = int(torch.argmax(raw)), int(torch.argmax(g_val))
        assert float(raw[i_log]) == pytest.approx(float(raw[i_raw]), rel=1e-12)
        # and the transform is exactly log(a - y_min + eps)
        torch.testing.assert_close(
            g_val, torch.log(raw - float(y.min()) + 1e-12), rtol=1e-9, atol=1e-9
        )


def _fd_grad(fn, Z: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    G = torch.zeros_like(Z)
    for j in range(Z.shape[1]):
        e = torch.zeros_like(Z)
        e[:, j] = eps
        G[:, j] = (fn(Z + e) - fn(Z - e)) / (2 * eps)
    return G


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def test_analytic_gradients_match_finite_differences():
    X, y, g = _data(seed=5, t=25, d=3)
    Z = torch.rand(6, 3, generator=g, dtype=F64)
    h, beta, ymin = 0.15, 3.0, float(y.min())
    post = kr_posterior(Z, X, y, h, with_grad=True)
    assert _rel(post.grad_mean, _fd_grad(lambda z: kr_posterior(z, X, y, h).mean, Z)) < 1e-5
    assert (
        _rel(post.grad_log_density, _fd_grad(lambda z: kr_posterior(z, X, y, h).log_density, Z))
        < 1e-5
    )
    _, gg = log_ikr_ucb(post, beta, ymin)
    fd = _fd_grad(lambda z: log_ikr_ucb(kr_posterior(z, X, y, h), beta, ymin)[0], Z)
    assert _rel(gg, fd) < 1e-5
    # sigma_hat = W^-1/2: grad = -1/2 sigma_hat grad log W
    fd_sig = _fd_grad(lambda z: kr_posterior(z, X, y, h).sigma_hat, Z)
    assert _rel(-0.5 * post.sigma_hat[:, None] * post.grad_log_density, fd_sig) < 1e-5


# ------------------------------------------------------------------------------ schedules
def test_beta_and_bandwidth_reference_values():
    assert beta_schedule(10, varsigma=1.0, delta=0.1) == pytest.approx(17.5835, abs=5e-5)
    assert beta_schedule(100, varsigma=1.0, delta=0.1) == pytest.approx(26.7938, abs=5e-5)
    assert beta_schedule(100, varsigma=1.0, rule="finite") == pytest.approx(4 * math.log(100))
    assert beta_schedule(10, varsigma=0.0) == 0.0
    assert scott_bandwidth(10, 2) == pytest.approx(0.19667, abs=5e-6)
    assert scott_bandwidth(100, 2) == pytest.approx(0.13399, abs=5e-6)
    assert scott_bandwidth(100, 8) == pytest.approx(0.19667, abs=5e-6)
    assert silverman_bandwidth(37, 2) == pytest.approx(scott_bandwidth(37, 2))
    with pytest.raises(ConfigError):
        beta_schedule(0)
    with pytest.raises(ConfigError):
        beta_schedule(5, delta=1.5)
    with pytest.raises(ConfigError):
        scott_bandwidth(5, 2, c_h=-1.0)


# --------------------------------------------------------------------- incremental updates
def test_candidate_cache_matches_batch_evaluation():
    X, y, g = _data(seed=11, t=40, d=2)
    X[5] = X[3]  # a duplicate
    X[7] = X[7] + 3.0  # far from every candidate: tiny kernel weights
    cand = torch.rand(300, 2, generator=g, dtype=F64)
    cache = CandidateCache(cand, 0.07)
    for i in range(X.shape[0]):
        cache.add(X[i], float(y[i]))
        if i in (0, 9, 39):
            ref = kr_posterior(cand, X[: i + 1], y[: i + 1], 0.07)
            post = cache.posterior()
            torch.testing.assert_close(post.mean, ref.mean, rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(post.log_density, ref.log_density, rtol=1e-12, atol=1e-12)
    with pytest.raises(InvalidObservation):
        cache.add(torch.tensor([float("nan"), 0.0]), 1.0)


def test_kernel_regression_model_grows_without_refit():
    X, y, g = _data(seed=2, t=100, d=4)
    model = KernelRegressionModel(4, capacity=3)
    for i in range(0, 100, 7):
        model.add(X[i : i + 7], y[i : i + 7])
    assert model.n_train == 100
    Xs = torch.rand(20, 4, generator=g, dtype=F64)
    mean, var = model.posterior(Xs, 0.2)
    ref = kr_posterior(Xs, X, y, 0.2)
    torch.testing.assert_close(mean, ref.mean)
    torch.testing.assert_close(var, torch.exp(-ref.log_density))
    with pytest.raises(InvalidObservation):
        model.add(torch.zeros(2, 4), torch.zeros(3))


def test_finite_boke_finds_the_best_arm():
    # 200 arms on a line, f peaks at 0.73; noise-free, fixed bandwidth
    arms = torch.linspace(0, 1, 200, dtype=F64)[:, None]
    f = -((arms[:, 0] - 0.73) ** 2)
    algo = FiniteBOKE(arms, h=0.02, varsigma=0.3)
    for i in (0, 66, 133, 199):
        algo.observe(i, float(f[i]))
    for _ in range(60):
        i = algo.suggest()
        algo.observe(i, float(f[i]))
    best = int(torch.argmax(algo.cache.mean))
    assert abs(float(arms[best, 0]) - 0.73) < 0.02


# ---------------------------------------------------------------------------- the methods
def test_boke_plus_coin_flip_frequency_and_boke_proposals_in_box():
    X, y, _ = _data(seed=4, t=15, d=2)
    opt = BOKEMaximizerConfig(n_per_dim=200, maxiter=10)
    gen = torch.Generator().manual_seed(0)
    plus = BOKEMethod(
        BOKEConfig(p_ucb=0.3), BOKEMaximizerConfig(n_per_dim=50, maxiter=0), plus=True
    )
    steps = [plus.propose(X, y, gen).step for _ in range(300)]
    frac_exploit = steps.count("exploit") / len(steps)
    assert 0.6 < frac_exploit < 0.8  # 1 - p = 0.7
    boke = BOKEMethod(BOKEConfig(), opt)
    for _ in range(5):
        p = boke.propose(X, y, gen)
        assert p.step == "ucb" and bool(((p.x >= 0) & (p.x <= 1)).all())


def test_boke_acquisition_beats_random_candidates():
    X, y, g = _data(seed=8, t=12, d=2)
    boke = BOKEMethod(BOKEConfig(), BOKEMaximizerConfig(n_per_dim=300, maxiter=30))
    p = boke.propose(X, y, torch.Generator().manual_seed(1))
    ys = (y - y.mean()) / y.std()
    h, beta = scott_bandwidth(12, 2), boke.beta(12, float(y.std()))
    cand = torch.rand(5000, 2, generator=g, dtype=F64)
    a_c = log_ikr_ucb(kr_posterior(cand, X, ys, h), beta, float(ys.min()))[0]
    a_p = log_ikr_ucb(kr_posterior(p.x[None], X, ys, h), beta, float(ys.min()))[0]
    assert float(a_p[0]) >= float(a_c.max()) - 1e-9


def test_density_exploration_goes_to_low_density():
    X = torch.tensor([[0.1, 0.1], [0.15, 0.2], [0.2, 0.1]], dtype=F64)
    p = DensityExploration(opt=BOKEMaximizerConfig(n_per_dim=300, maxiter=20)).propose(
        X, torch.zeros(3, dtype=F64), torch.Generator().manual_seed(0)
    )
    assert float(torch.cdist(p.x[None], X).min()) > 0.9  # the far corner region


def test_kr_ucb_resamples_then_widens_inside_the_ball():
    X, y, _ = _data(seed=9, t=10, d=2)
    opt = BOKEMaximizerConfig(n_per_dim=200, maxiter=15)
    meth = KRUCBMethod(KRUCBConfig(), opt)
    gen = torch.Generator().manual_seed(0)
    p = meth.propose(X, y, gen)  # sqrt(10) < 10 distinct points: re-sample an arm
    assert p.step == "resample" and any(bool((p.x == X[i]).all()) for i in range(10))
    Xd = torch.cat([X[:3], X[:1].repeat(7, 1)])  # 3 distinct of 10 -> sqrt(10) >= 3: widen
    yd = torch.cat([y[:3], y[:1].repeat(7)])
    assert n_distinct(Xd) == 3
    p = meth.propose(Xd, yd, gen)
    assert p.step == "widen"
    h = scott_bandwidth(10, 2)
    rho = h * math.sqrt(2 * math.log(2.0))
    assert min(float((p.x - Xd[i]).norm()) for i in range(3)) <= rho + 1e-9
    assert bool(((p.x >= 0) & (p.x <= 1)).all())


def test_bad_configs_raise_named_errors():
    with pytest.raises(ConfigError):
        BOKEConfig(p_ucb=0.0)
    with pytest.raises(ConfigError):
        KRUCBConfig(alpha=1.5)
    with pytest.raises(ConfigError):
        BOKEMaximizerConfig(n_starts=0)
    with pytest.raises(InvalidObservation):
        kr_posterior(
            torch.zeros(2, 2, dtype=F64),
            torch.zeros(0, 2, dtype=F64),
            torch.zeros(0, dtype=F64),
            0.1,
        )


def test_numpy_exp_path_equals_torch_path_with_grads():
    X, y, g = _data(seed=12, t=50, d=4)
    Z = torch.rand(40, 4, generator=g, dtype=F64)
    a = kr_posterior(Z, X, y, 0.1, with_grad=True)
    b = kr_posterior(Z, X, y, 0.1, with_grad=True, numpy_exp=False)
    for u, v in (
        (a.mean, b.mean),
        (a.grad_mean, b.grad_mean),
        (a.grad_log_density, b.grad_log_density),
    ):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-12, atol=1e-14)
