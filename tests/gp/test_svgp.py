"""Online SVGP learner: agreement with an exact GP, learning on Monaco, checkpoints, bad input."""

from __future__ import annotations

import gpytorch
import numpy as np
import pytest
import torch

from ev_nav.errors import (
    ConfigError,
    InvalidObservation,
    ModelStateError,
    UnknownSegmentError,
)
from ev_nav.gp.groundtruth import sample_ground_truth
from ev_nav.gp.independent import BIModel
from ev_nav.gp.kernels import segment_inputs
from ev_nav.gp.prior import PriorSettings
from ev_nav.gp.svgp import SVGPConfig, SVGPModel
from ev_nav.gp.testing import load_real, random_route, subnetwork

# BLAS threads fight other processes on the 2-core CI box; one thread is much faster there
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def monaco():
    return load_real()


@pytest.fixture(scope="module")
def small(monaco):
    return subnetwork(monaco, 300, seed=1)


def _observations(net, n_trips, seed, truth=None, noise_std=None):
    rng = np.random.default_rng(seed)
    truth = net.e_det() if truth is None else truth
    noise_std = PriorSettings.from_network(net).noise_std if noise_std is None else noise_std
    trips = []
    for _ in range(n_trips):
        route = random_route(net, 25, rng)
        trips.append((route, truth[route] + noise_std * rng.standard_normal(route.size)))
    return trips


class _ExactRef(gpytorch.models.ExactGP):
    def __init__(self, x, y, likelihood, kernel, prior_mean):
        super().__init__(x, y, likelihood)
        self.kernel = kernel
        self.prior_mean = torch.as_tensor(prior_mean)

    def forward(self, x):
        ids = x[:, 0].round().long()
        return gpytorch.distributions.MultivariateNormal(self.prior_mean[ids], self.kernel(x))


def _exact_gp_posterior(model: SVGPModel, ids, y):
    """Posterior of gpytorch.models.ExactGP with the model's kernel and noise (latent f)."""
    x_all = segment_inputs(model.net)
    lik = gpytorch.likelihoods.GaussianLikelihood().to(torch.float64)
    lik.noise = model.hyper.noise_var.detach()
    ref = _ExactRef(x_all[ids], torch.as_tensor(y), lik, model.kernel, model.prior_mean)
    ref.eval()
    lik.eval()
    with (
        torch.no_grad(),
        gpytorch.settings.fast_computations(False, False, False),
        gpytorch.settings.max_cholesky_size(10**6),
    ):
        f = ref(x_all)
        return f.mean.numpy(), f.variance.numpy()


def _feed(model, trips):
    for ids, y in trips:
        model.update(ids, y)


def test_svgp_with_all_inducing_points_matches_exact_gp(small):
    trips = _observations(small, 6, seed=3)
    cfg = SVGPConfig(
        num_inducing=small.n_segments,
        batch_size=10**6,  # full batch: NGD converges to the exact optimum
        steps_per_trip=40,
        learn_hyperparameters=False,
    )
    model = SVGPModel(small, config=cfg, seed=0)
    _feed(model, trips)
    for _ in range(4):  # "enough steps": 0.9^200 ≈ 7e-10 of the initial error remains
        model.update(np.array([], dtype=np.int64), np.array([]))
        model._step()  # noqa: SLF001 - extra NGD steps without new data
    for _ in range(120):
        model._step()  # noqa: SLF001
    model._post = None  # noqa: SLF001
    ids = np.concatenate([t[0] for t in trips])
    y = np.concatenate([t[1] for t in trips])
    mean_ref, var_ref = _exact_gp_posterior(model, ids, y)
    post = model.posterior()
    dev = post.mean - model.prior_mean
    dev_ref = mean_ref - model.prior_mean
    assert np.abs(dev - dev_ref).max() / np.abs(dev_ref).max() < 1e-3
    np.testing.assert_allclose(post.std**2, var_ref, rtol=1e-3)


def test_exact_refresh_is_the_exact_gp_posterior(small):
    trips = _observations(small, 5, seed=4)
    cfg = SVGPConfig(num_inducing=small.n_segments, exact_refresh=True, learn_hyperparameters=False)
    model = SVGPModel(small, config=cfg, seed=0)
    _feed(model, trips)
    ids = np.concatenate([t[0] for t in trips])
    y = np.concatenate([t[1] for t in trips])
    mean_ref, var_ref = _exact_gp_posterior(model, ids, y)
    post = model.posterior()
    np.testing.assert_allclose(post.mean, mean_ref, rtol=1e-7, atol=1e-7 * np.abs(mean_ref).max())
    np.testing.assert_allclose(post.std**2, var_ref, rtol=1e-6)


def test_learning_on_monaco_beats_bi_on_unvisited_segments(monaco):
    """Spec acceptance: 200 trips of observations, GP RMSE on unvisited < 0.9 × BI, coverage."""
    truth = sample_ground_truth(monaco, seed=11)
    trips = _observations(monaco, 200, seed=12, truth=truth)
    cfg = SVGPConfig(exact_refresh=True, learn_hyperparameters=False, steps_per_trip=0)
    gp = SVGPModel(monaco, config=cfg, seed=0)
    bi = BIModel(monaco)
    for k in range(0, 200, 50):  # 4 updates of 50 trips each keeps the test fast
        ids = np.concatenate([t[0] for t in trips[k : k + 50]])
        y = np.concatenate([t[1] for t in trips[k : k + 50]])
        gp.update(ids, y)
        bi.update(ids, y)
    visited = np.zeros(monaco.n_segments, dtype=bool)
    visited[np.concatenate([t[0] for t in trips])] = True
    pg, pb = gp.posterior(), bi.posterior()
    un = ~visited
    rmse_gp = np.sqrt(np.mean((pg.mean[un] - truth[un]) ** 2))
    rmse_bi = np.sqrt(np.mean((pb.mean[un] - truth[un]) ** 2))
    coverage = np.mean(np.abs(pg.mean - truth) <= 2 * pg.std)
    assert rmse_gp < 0.9 * rmse_bi, (rmse_gp, rmse_bi)
    assert coverage >= 0.85, coverage


def test_default_config_steps_run_and_learn(small):
    truth = sample_ground_truth(small, seed=5)
    trips = _observations(small, 30, seed=6, truth=truth)
    model = SVGPModel(small, config=SVGPConfig(num_inducing=100, batch_size=200), seed=1)
    kappa0 = float(model.kernel.graph.kappa.detach())
    prior_err = np.abs(model.posterior().mean - truth).mean()
    _feed(model, trips)
    post = model.posterior()
    assert np.all(np.isfinite(post.mean)) and np.all(post.std > 0)
    assert np.abs(post.mean - truth).mean() < prior_err
    assert float(model.kernel.graph.kappa.detach()) != kappa0  # κ is learned by Adam
    # inducing set = the most visited segments
    counts = model.visits
    assert counts[model.z].min() >= np.sort(counts)[-model.m]


def test_inducing_change_keeps_the_posterior_at_the_new_points(small):
    cfg = SVGPConfig(num_inducing=60, learn_hyperparameters=False, steps_per_trip=3)
    model = SVGPModel(small, config=cfg, seed=2)
    _feed(model, _observations(small, 4, seed=7))
    post_before = model.posterior()
    z_new = np.sort(np.random.default_rng(0).choice(small.n_segments, 60, replace=False))
    model._set_inducing(z_new)  # noqa: SLF001
    model._post = None  # noqa: SLF001
    post_after = model.posterior()
    scale = np.abs(post_before.mean).max()
    np.testing.assert_allclose(post_after.mean[z_new], post_before.mean[z_new], atol=1e-8 * scale)
    np.testing.assert_allclose(post_after.std[z_new], post_before.std[z_new], rtol=1e-6)


def test_checkpoint_round_trip_is_bit_identical(small):
    cfg = SVGPConfig(num_inducing=80, batch_size=150)
    model = SVGPModel(small, config=cfg, seed=3)
    trips = _observations(small, 6, seed=8)
    _feed(model, trips[:4])
    model.update_total(trips[4][0], float(trips[4][1].sum()))
    before = model.posterior()
    clone = SVGPModel(small, config=cfg, seed=99).load_state_dict(model.state_dict())
    after = clone.posterior()
    assert np.array_equal(before.mean, after.mean) and np.array_equal(before.std, after.std)
    assert before.noise_std == after.noise_std
    # and the future is identical too (RNG, Adam moments, history restored)
    model.update(*trips[5])
    clone.update(*trips[5])
    assert np.array_equal(model.posterior().mean, clone.posterior().mean)
    with pytest.raises(ModelStateError):
        SVGPModel(small, config=SVGPConfig(num_inducing=81)).load_state_dict(model.state_dict())


def test_spectral_diag_option_and_checkpoints_without_it(small):
    cfg = SVGPConfig(num_inducing=60, batch_size=100)
    model = SVGPModel(small, config=cfg, seed=1)
    assert model.kernel.graph.spectral_diag  # auto: a small network
    assert not SVGPModel(small, config=SVGPConfig(spectral_diag=False)).kernel.graph.spectral_diag
    model.update(*_observations(small, 1, seed=2)[0])
    # a checkpoint written before the field existed restores with its default
    state = model.state_dict()
    del state["config"]["spectral_diag"]
    clone = SVGPModel(small, config=cfg, seed=5).load_state_dict(state)
    assert np.array_equal(clone.posterior().mean, model.posterior().mean)
    with pytest.raises(ModelStateError, match="different SVGPConfig"):
        SVGPModel(
            small, config=SVGPConfig(num_inducing=60, batch_size=100, spectral_diag=False)
        ).load_state_dict(model.state_dict())


def test_spectral_diag_refused_on_a_network_too_large_for_it(monkeypatch, small):
    import ev_nav.gp.svgp as svgp

    monkeypatch.setattr(svgp, "SPECTRAL_DIAG_LIMIT", small.n_segments - 1)
    with pytest.raises(ConfigError, match="spectral_diag=True"):
        SVGPModel(small, config=SVGPConfig(spectral_diag=True))


@pytest.mark.parametrize(
    ("ids", "y", "error"),
    [
        (np.array([0, 10**6]), np.array([1.0, 2.0]), UnknownSegmentError),
        (np.array([-1]), np.array([1.0]), UnknownSegmentError),
        (np.array([0, 1]), np.array([1.0, np.nan]), InvalidObservation),
        (np.array([0, 1]), np.array([1.0, np.inf]), InvalidObservation),
        (np.array([0, 1]), np.array([1.0]), InvalidObservation),
        (np.array([0.5]), np.array([1.0]), UnknownSegmentError),
    ],
)
def test_bad_input_raises_and_leaves_state_unchanged(small, ids, y, error):
    model = SVGPModel(small, config=SVGPConfig(num_inducing=50, batch_size=100), seed=0)
    _feed(model, _observations(small, 2, seed=9))
    before = model.posterior()
    state = model.state_dict()
    with pytest.raises(error):
        model.update(ids, y)
    with pytest.raises((error, InvalidObservation)):
        model.update_total(ids, float(np.sum(y)) if y.size == ids.size else np.nan)
    after = model.posterior()
    assert after is before  # cache untouched: nothing changed
    assert np.array_equal(model.state_dict()["history_ids"], state["history_ids"])
    assert torch.equal(model.state_dict()["lam"], state["lam"])


def _autograd_hyper_gradients(model: SVGPModel) -> list[torch.Tensor]:
    """The Adam gradient by plain autograd through Cholesky and solves (whole history batch)."""
    u, cnt, s1, s2, _ = model._batch()
    params = [p for p in model.hyper.parameters() if p.requires_grad]
    with torch.no_grad():
        m_w, c = model._q_moments()
    k = model.kernel.cross(np.concatenate([model.z, u]), model.z)
    chol = torch.linalg.cholesky(k[: model.m])
    a = torch.linalg.solve_triangular(chol, k[model.m :].T, upper=False)
    t = torch.linalg.solve_triangular(c, a, upper=False)
    var = model.kernel.diag_ids(u) - (a * a).sum(0) + (t * t).sum(0)
    mu = a.T @ m_w
    noise = model.hyper.noise_var
    sq = s2 - 2 * mu * s1 + cnt * mu * mu + cnt * var
    ell = -0.5 * cnt * torch.log(2 * np.pi * noise) - 0.5 * sq / noise
    loss = -ell.sum() / cnt.sum()
    return list(torch.autograd.grad(loss, params))


@pytest.mark.parametrize(
    ("mode", "extra", "cached"),
    [
        ("sparse", {}, False),
        ("sparse", {}, True),
        ("dense", {"learn_graph_nu": True, "graph_nu": 1.5}, True),
    ],
)
def test_closed_form_adjoint_gradient_equals_autograd(small, mode, extra, cached):
    cfg = SVGPConfig(
        num_inducing=60,
        batch_size=10**6,  # whole history: no subsampling, so both see the same batch
        kernel_mode=mode,
        diag_grad_probes=None,
        **extra,
    )
    model = SVGPModel(small, config=cfg, seed=3)
    for route, y in _observations(small, 6, seed=4):
        model.update(route, y)
    ref = _autograd_hyper_gradients(model)
    if cached:
        model.posterior()  # the all-segment pass is then the posterior's cache
    model.adam.step = lambda: None  # keep the gradient, skip the parameter update
    model._step(use_full_pass=cached)
    params = [p for p in model.hyper.parameters() if p.requires_grad]
    assert len(params) == len(ref) >= 6
    for p, g in zip(params, ref, strict=True):
        assert p.grad is not None
        np.testing.assert_allclose(p.grad.numpy(), g.numpy(), rtol=1e-7, atol=1e-12)


def test_querying_the_posterior_does_not_change_learning(small):
    """A model restored without a posterior() query learns bit-identically to its queried twin."""
    cfg = SVGPConfig(num_inducing=20, batch_size=150)
    trips = _observations(small, 14, seed=8)
    queried = SVGPModel(small, config=cfg, seed=3)
    silent = SVGPModel(small, config=cfg, seed=3)
    for route, y in trips[:10]:
        queried.update(route, y)
        queried.posterior()
        silent.update(route, y)
    restored = SVGPModel(small, config=cfg, seed=99).load_state_dict(queried.state_dict())
    on_z = queried.z[:5].copy()  # a trip on inducing segments: Z does not move
    extra = [(on_z, small.e_det()[on_z]), *trips[10:]]
    for route, y in extra:
        for m in (queried, silent, restored):
            m.update(route, y)
        queried.posterior()
    ref = queried.posterior()
    for m in (silent, restored):
        post = m.posterior()
        assert np.array_equal(post.mean, ref.mean)
        assert np.array_equal(post.std, ref.std)
