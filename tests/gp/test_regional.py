"""The regional learner (issue 26): its posterior against the exact learner's on the production
kernel, its Thompson draws against its own dense posterior, checkpoints, and bad input."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla
import torch

from ev_nav.errors import ConfigError, InvalidObservation, ModelStateError, UnknownSegmentError
from ev_nav.gp.groundtruth import sample_ground_truth
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.numerics import matern52
from ev_nav.gp.posterior import SegmentModel
from ev_nav.gp.regional import RegionalConfig, RegionalGP, VecchiaSettings
from ev_nav.gp.testing import (
    fleet_log,
    load_real,
    random_route,
    regional_prior_covariance,
    replay,
    subnetwork,
)


def _fleet(net, models, trips: int, seed: int,
           truth_method="auto") -> list[tuple[np.ndarray, np.ndarray]]:
    """A :func:`fleet_log` fed to ``models`` trip by trip (the first model's noise level)."""
    log = fleet_log(net, trips, seed, models[0].noise_std, truth_method)
    for entry in log:
        for m in models:
            replay(m, [entry])
    return log


def _worst(a, b, prior_sd) -> tuple[float, float]:
    pa, pb = a.posterior(), b.posterior()
    return (float((np.abs(pa.mean - pb.mean) / prior_sd).max()),
            float((np.abs(pa.std - pb.std) / prior_sd).max()))


@pytest.mark.parametrize("name", ["monaco", "luxembourg"])
def test_agrees_with_the_exact_learner_after_500_fleet_trips(name, request):
    """Issue 26 item 3: after 500 fleet trips, every segment's posterior mean and sd within 1 %
    of its prior sd of the exact learner's, on the kernel the exact learner fitted to them (one
    fit after the last trip rather than its whole schedule, which would only make the test
    slower; the regional learner is then given those hyperparameters and the same trips)."""
    net = request.getfixturevalue(name)
    # (5 L-BFGS iterations of the fit: the test needs fitted values, not the best ones; 20 took
    # 11 s of the test's 39 on Luxembourg)
    exact = IncrementalGP(net, config=IncrementalConfig(first_fit=500, fit_iterations=5), seed=0)
    # (the world only has to give the learners data: its random-feature draw takes 0.3 s where
    # the exact one factorises the whole 5,614-segment covariance, 7 s)
    log = _fleet(net, [exact], 500, seed=1, truth_method="approx")
    assert len(exact.fits) == 1, "the exact learner fitted its hyperparameters"
    assert exact.hyperparameters() != IncrementalGP(net, seed=0).hyperparameters()
    hyper = exact.hyperparameters()
    regional = RegionalGP(net, config=RegionalConfig(learn_hyperparameters=False),
                          hyperparameters=hyper)
    replay(regional, log)
    prior_sd = np.sqrt(np.diag(exact._prior_covariance()))
    mean_err, sd_err = _worst(exact, regional, prior_sd)
    assert mean_err <= 0.01 and sd_err <= 0.01, (mean_err, sd_err)
    # the data moved the posterior far more than that
    moved = np.abs(exact.posterior().mean - exact.prior_mean) / prior_sd
    assert moved.max() > 50 * mean_err


def test_same_data_same_posterior_as_the_exact_learner_on_a_town(town):
    """At the same (default) hyperparameters, update by update, on the synthetic town."""
    exact = IncrementalGP(town, config=IncrementalConfig(learn_hyperparameters=False), seed=0)
    regional = RegionalGP(town, config=RegionalConfig(learn_hyperparameters=False),
                          hyperparameters=exact.hyperparameters())
    assert isinstance(regional, SegmentModel)
    prior_sd = exact.posterior().std.copy()
    assert _worst(exact, regional, prior_sd)[1] < 1e-3  # the priors agree
    _fleet(town, [exact, regional], 60, seed=2)
    mean_err, sd_err = _worst(exact, regional, prior_sd)
    assert mean_err <= 0.01 and sd_err <= 0.01, (mean_err, sd_err)
    rng = np.random.default_rng(5)
    ids = random_route(town, 30, rng)
    m_e, v_e = exact.predict_sum(ids)
    m_r, v_r = regional.predict_sum(ids)
    assert abs(m_e - m_r) <= 0.01 * np.sqrt(v_e + 1.0) * 10
    assert v_r == pytest.approx(v_e, rel=0.02)


@pytest.fixture(scope="module")
def small_regional():
    net = subnetwork(load_real(), 120, seed=4)
    model = RegionalGP(net, config=RegionalConfig(vecchia=VecchiaSettings(neighbours=30)))
    rng = np.random.default_rng(3)
    for k in range(6):
        path = random_route(net, 10, rng)
        y = model.prior_mean[path] + rng.normal(0.0, 5.0, path.size)
        if k == 5:
            model.update_total(path, y.sum())
        else:
            model.update(path, y)
    return net, model


def test_prior_is_the_production_kernel_within_the_vecchia_error(small_regional):
    net, model = small_regional
    exact = IncrementalGP(net, config=IncrementalConfig(learn_hyperparameters=False), seed=0)
    k = np.array(exact._prior_covariance())
    k = np.tril(k) + np.tril(k, -1).T
    approx = regional_prior_covariance(model)
    assert np.abs(approx - k).max() <= 1e-3 * np.diag(k).max()
    # and independently of the exact learner: s₁ K_G ∘ k_f + s₂ k'_f from the kernel parts
    with torch.no_grad():
        kg = exact.kernel.graph.dense_matrix().numpy()
        x = torch.as_tensor(net.features)
        h = model.hyperparameters()
        kf = matern52(x, x, torch.as_tensor(h["lengthscale_product"])).numpy()
        kf2 = matern52(x, x, torch.as_tensor(h["lengthscale_feature"])).numpy()
    direct = h["outputscale_product"] * kg * kf + h["outputscale_feature"] * kf2
    assert np.abs(approx - direct).max() <= 1e-3 * np.diag(direct).max()


def test_the_vecchia_build_reads_only_each_rows_earlier_entries(small_regional):
    """network_entries keeps of each segment its graph-kernel entries of earlier segments (all
    the build reads), column-sorted; they are the exact kernel's (to its truncation); and the
    full symmetric matrix made of them gives the very same prior (the build partitions a copy)."""
    from ev_nav.gp.kernels import GraphMaternKernel, incidence_laplacian
    from ev_nav.gp.regional.vecchia import build_vecchia, network_entries

    net, model = small_regional
    kappa = 1.5
    rank, kg, diag, _ = network_entries(net, incidence_laplacian(net), 2.0 * 2 / kappa**2, 2,
                                        VecchiaSettings(), seed=0)
    assert kg.has_sorted_indices and kg.indices.dtype == np.int32
    coo = kg.tocoo()
    assert np.all(rank[coo.col] < rank[coo.row]) and kg.nnz > 0
    with torch.no_grad():
        dense = GraphMaternKernel(net, nu=2, kappa=kappa, mode="dense").dense_matrix().numpy()
    np.testing.assert_allclose(diag, np.diag(dense), rtol=1e-9)
    np.testing.assert_allclose(coo.data, dense[coo.row, coo.col], rtol=1e-6,
                               atol=1e-9 * diag.max())
    earlier = rank[None, :] < rank[:, None]
    dropped = np.abs(dense) * earlier * (kg.toarray() == 0)
    assert dropped.max() < 1e-5 * diag.max()  # what is left out is below entry_tol
    full = (kg + kg.T).tocsr()
    x = np.asarray(net.features, dtype=np.float64)
    ls = np.linspace(0.7, 1.3, x.shape[1])
    amp = np.ones(net.n_segments)
    a = build_vecchia(kg, diag, rank, x, ls, 3.0, amp, 30, np.full(net.n_segments, 0.01))
    b = build_vecchia(full, diag, rank, x, ls, 3.0, amp, 30, np.full(net.n_segments, 0.01))
    assert np.array_equal(a.a_matrix.indices, b.a_matrix.indices)
    assert np.array_equal(a.a_matrix.data, b.a_matrix.data) and np.array_equal(a.d, b.d)


def _gone_with_the_last_holder(folder, holders: list) -> None:
    """``folder`` stays while ``holders`` (the last copies holding it) live, and goes with
    them."""
    import gc

    gc.collect()
    assert folder.is_dir()  # the copy still holds it
    holders.clear()
    gc.collect()
    assert not folder.exists()


def test_a_fitting_learner_keeps_its_graph_kernel_entries_on_disk(small_regional):
    """The entries a fitting learner reads at every fit are written once to a private folder
    and mapped read-only for each use: the same numbers, the same prior from them, and the
    folder gone once the learner (and every copy sharing them) is let go."""
    import copy

    from ev_nav.gp.kernels import incidence_laplacian
    from ev_nav.gp.regional.vecchia import SpilledEntries, build_vecchia, network_entries

    net, model = small_regional
    fitting = RegionalGP(net, config=replace(model.config, learn_hyperparameters=True))
    fitting._entries()
    kappa, spilled = fitting._kept_entries
    assert isinstance(spilled, SpilledEntries) and kappa == fitting.hyper["graph_kappa"]
    folder = spilled.folder
    rank, kg, diag, z = fitting._entries()
    # mapped, not copied (a copy would be writeable)
    assert not kg.data.flags.writeable and not kg.indices.flags.writeable
    ref = network_entries(net, incidence_laplacian(net), 2.0 * 2 / kappa**2, 2,
                          fitting.config.vecchia, seed=fitting.seed)
    assert np.array_equal(rank, ref[0]) and np.array_equal(diag, ref[2]) and z == ref[3]
    assert (kg != ref[1]).nnz == 0 and kg.data.dtype == np.float32
    x = np.asarray(net.features, dtype=np.float64)
    ones = np.ones(net.n_segments)
    a = build_vecchia(kg, diag, rank, x, np.ones(x.shape[1]), 2.0, ones, 30)
    b = build_vecchia(ref[1], ref[2], ref[0], x, np.ones(x.shape[1]), 2.0, ones, 30)
    assert np.array_equal(a.a_matrix.data, b.a_matrix.data) and np.array_equal(a.d, b.d)
    twin = [copy.deepcopy(fitting)]
    assert twin[0]._kept_entries[1] is spilled  # copies share the folder
    del kg, rank, diag, a, spilled, fitting
    _gone_with_the_last_holder(folder, twin)


def test_a_large_prior_keeps_its_a_on_disk_and_learns_the_same(small_regional):
    """Past ``prior_spill_bytes`` the Vecchia prior's A is written to a private folder and
    mapped read-only for each use: the same A, the same posterior bit for bit after trips, and
    the folder gone once the learner (and every copy sharing it) is let go."""
    import copy

    from ev_nav.gp.regional.vecchia import SpilledCSR

    net, model = small_regional
    held = RegionalGP(net, config=replace(model.config, prior_spill_bytes=1 << 40))
    spilled = RegionalGP(net, config=replace(model.config, prior_spill_bytes=0))
    assert not isinstance(held.prior.a_stored, SpilledCSR)
    store = spilled.prior.a_stored
    assert isinstance(store, SpilledCSR)
    folder = store.folder
    a, b = spilled.prior.a_matrix, held.prior.a_matrix
    assert not a.data.flags.writeable and not a.indices.flags.writeable  # mapped, not copied
    assert (a != b).nnz == 0 and a.has_sorted_indices
    assert np.array_equal(spilled.factor.q_values, held.factor.q_values)
    rng = np.random.default_rng(4)
    for _ in range(5):
        path = random_route(net, 20, rng)
        y = net.e_det()[path] + rng.standard_normal(path.size)
        held.update(path, y)
        spilled.update(path, y)
    p, q = held.posterior(), spilled.posterior()
    assert np.array_equal(p.mean, q.mean) and np.array_equal(p.std, q.std)
    twin = [copy.deepcopy(spilled)]
    assert twin[0].prior is spilled.prior
    del a, b, store, spilled, p, q
    _gone_with_the_last_holder(folder, twin)


def test_the_priors_factor_in_closed_form_is_its_cholesky_factor(small_regional):
    """Without readings the factor is Aᵀ D^{-1/2} as built, no factorisation: it equals the
    factorisation of Q on the same pattern, and L Lᵀ reproduces Q there."""
    from ev_nav.gp.regional.factor import PrecisionFactor, _ic0

    net, model = small_regional
    f = PrecisionFactor(model.prior)
    # Q's values on the pattern, computed from the factor, are the sparse product's
    q_full = model.prior.precision()[f.seg][:, f.seg].tocsc()
    cols = np.repeat(np.arange(f.n), np.diff(f.colptr))
    np.testing.assert_allclose(f.q_values, np.asarray(q_full[f.rowidx, cols]).ravel(),
                               rtol=1e-12, atol=1e-14 * np.abs(f.q_values).max())
    ic = f.q_values.copy()
    assert _ic0(f.colptr, f.rowidx, ic, f._rptr, f._rcol) < 0
    np.testing.assert_allclose(f.values, ic, rtol=1e-9, atol=1e-12 * np.abs(ic).max())
    lower = sp.csc_matrix((f.values, f.rowidx, f.colptr), shape=(f.n, f.n)).toarray()
    q = model.prior.precision().toarray()[np.ix_(f.seg, f.seg)]
    np.testing.assert_allclose(lower @ lower.T, q, atol=1e-10 * np.abs(q).max())


def test_joint_draws_have_the_models_posterior_covariance(small_regional):
    net, model = small_regional
    n = net.n_segments
    cov = model.route_covariance(np.arange(n))
    post = model.posterior()
    assert np.allclose(np.sqrt(np.diag(cov)), post.std, rtol=1e-6)
    rng = np.random.default_rng(11)
    draws = 20_000
    f = np.stack([post.std * post.joint_scores(rng) for _ in range(draws)])
    emp = np.cov(f, rowvar=False)
    sd = np.sqrt(np.outer(np.diag(cov), np.diag(cov)))
    assert np.all(np.abs(emp - cov) <= 5.0 * np.sqrt(2.0 / draws) * sd + 1e-9)
    assert np.abs(f.mean(axis=0) / post.std).max() < 5.0 / np.sqrt(draws)
    rho = cov / sd
    np.fill_diagonal(rho, 0.0)
    assert np.abs(rho).max() > 0.5  # a joint draw, not independent segments


def test_route_totals_need_no_variances_and_b_comes_with_the_factorisation(small_regional):
    """A route's total (one column of the covariance) and a draw with trip totals in the data
    need no variances; the total agrees with the route's full covariance. B = G − (Q+W)⁻¹WG
    is made by the factorisation (float32 of the float64 solves)."""
    net, model = small_regional
    fresh = RegionalGP(net, config=model.config).load_state_dict(model.state_dict())
    assert fresh.totals
    rng = np.random.default_rng(8)
    ids = random_route(net, 12, rng)
    w = rng.uniform(0.2, 1.0, ids.size)
    mean, var = fresh.predict_sum(ids, weights=w)
    fresh.sample(rng)
    assert "var" not in fresh._mom and fresh._var1 is None and fresh._var2 is None
    u, h = np.unique(ids, return_inverse=True)
    hw = np.bincount(h, weights=w)
    cov = fresh.route_covariance(u)
    assert var == pytest.approx(hw @ cov @ hw, rel=1e-9)
    assert mean == pytest.approx(hw @ fresh.posterior_mean()[u], rel=1e-12)
    f = fresh.factor
    g = fresh.landmarks.astype(np.float64)
    assert fresh._bl.dtype == np.float32
    assert np.array_equal(fresh._bl, (g - f.solve(f.w[:, None] * g)).astype(np.float32))


def _three_sweep_draw(model: RegionalGP, e1: np.ndarray, e2: np.ndarray) -> np.ndarray:
    """The joint draw's latent deviation the long way, in float64 without B:
    ``x = L_P⁻ᵀ(L_P⁻¹b + ε)`` by the block factor (three sweeps), ``x₁ + G x₂``."""
    f, g, ls = model.factor, model.landmarks.astype(np.float64), model._ls
    m1 = f.solve(f.b)
    z2 = sla.solve_triangular(ls, g.T @ (f.b - f.w * m1), lower=True)
    x2 = sla.solve_triangular(ls, z2 + e2, lower=True, trans="T")
    le = np.ascontiguousarray(e1[:, None])  # ε₁ is read in the factor's numbering
    f.sweep(le, transpose=True)
    x1 = f.solve(f.b - f.w * (g @ x2)) + le[f.pos, 0]
    return x1 + g @ x2


def test_a_draw_through_b_is_the_three_sweep_draw(small_regional):
    """A draw reads the kept B (one sweep of the factor): from the same normals it is the
    block factor's three-sweep draw, after a factorisation and through per-trip updates
    (B then kept by the halo updates), within float32's rounding of the products."""
    net, model = small_regional
    m = RegionalGP(net, config=model.config).load_state_dict(model.state_dict())
    rng = np.random.default_rng(21)
    sd = float(np.sqrt(model.hyperparameters()["outputscale_product"]
                       + model.hyperparameters()["outputscale_feature"]))
    for trip in range(6):
        e = rng.standard_normal(m.n + m.landmarks.shape[1])
        got = m._solve_parts((e[: m.n], e[m.n:]))
        want = _three_sweep_draw(m, e[: m.n], e[m.n:])
        assert np.max(np.abs(got - want)) < 1e-4 * sd, trip
        ids = random_route(net, 15, rng)
        m.update(ids, m.prior_mean[ids] + rng.standard_normal(ids.size))


def test_landmark_solves_in_column_blocks_equal_the_one_sweep_form(small_regional):
    """Past ``core_block_bytes`` (a region) the Schur complement and B are solved a block of
    columns at a time, two sweeps a block, reading only the driven rows: the same posterior
    (means, variances, a draw from the same numbers) as the one-sweep form, through
    factorisations and per-trip updates; and the landmarks are held in float32 only."""
    net, model = small_regional
    state = model.state_dict()
    one = RegionalGP(net, config=model.config).load_state_dict(state)
    cfg = replace(model.config, core_block_bytes=8 * net.n_segments * 3)  # 3 columns a block
    blocked = RegionalGP(net, config=cfg).load_state_dict(state)
    assert len(blocked._column_blocks()) > 2 and len(one._column_blocks()) == 1
    assert blocked.landmarks.dtype == np.float32
    rng = np.random.default_rng(11)
    for trip in range(4):
        for m in (one, blocked):
            m._core()
        np.testing.assert_allclose(blocked._s, one._s, rtol=1e-10, atol=1e-10)
        a, b = one.posterior(), blocked.posterior()
        np.testing.assert_allclose(b.mean, a.mean, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(b.std, a.std, rtol=1e-6)  # B in float32 in both
        np.testing.assert_allclose(blocked._bl, one._bl, rtol=1e-5, atol=1e-6 * np.abs(
            one._bl).max())
        d1 = one.sample(np.random.default_rng(trip))
        d2 = blocked.sample(np.random.default_rng(trip))
        np.testing.assert_allclose(d2, d1, rtol=1e-6, atol=1e-6 * np.abs(d1).max())
        path = random_route(net, 10, rng)
        y = one.prior_mean[path] + rng.normal(0.0, 5.0, path.size)
        for m in (one, blocked):
            m.update(path, y)
        if trip == 1:  # a refactorisation (as after a fit or a reset) in both forms
            for m in (one, blocked):
                m.restart_from_statistics()


def test_a_stale_posterior_refuses_to_draw(small_regional):
    net, _ = small_regional
    model = RegionalGP(net, config=RegionalConfig(vecchia=VecchiaSettings(neighbours=30)))
    post = model.posterior()
    model.update([0], [model.prior_mean[0] + 1.0])
    with pytest.raises(ModelStateError):
        post.joint_scores(np.random.default_rng(0))


def test_checkpoint_round_trip_is_bit_identical_and_pickle_free(small_regional):
    net, model = small_regional
    state = model.state_dict()
    for key in ("n_obs", "sum_r", "sum_r2"):
        assert isinstance(state[key], np.ndarray)
    again = RegionalGP(net, config=model.config, hyperparameters=state["hyperparameters"])
    again.load_state_dict(state)
    a, b = model.posterior(), again.posterior()
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)
    other = RegionalGP(net, config=RegionalConfig(vecchia=VecchiaSettings(neighbours=20)))
    with pytest.raises(ModelStateError):
        other.load_state_dict(state)
    # a checkpoint's (fitted) hyperparameters are adopted: the prior is rebuilt at them
    moved = {**state["hyperparameters"], "noise_var": 1.0}
    adopted = RegionalGP(net, config=model.config).load_state_dict(
        {**state, "hyperparameters": moved})
    built = RegionalGP(net, config=model.config, hyperparameters=moved).load_state_dict(
        {**state, "hyperparameters": moved})
    assert adopted.hyperparameters() == moved
    assert np.array_equal(adopted.posterior().mean, built.posterior().mean)
    for bad in ({**moved, "noise_var": -1.0}, {**moved, "lengthscale_product": [1.0]},
                {"noise_var": 1.0}):
        with pytest.raises(ModelStateError):
            RegionalGP(net, config=model.config).load_state_dict(
                {**state, "hyperparameters": bad})


def test_the_prior_cached_in_a_state_gives_the_same_bits(small_regional, tmp_path, monkeypatch):
    """A state's cache keeps the prior (Vecchia factor, landmarks): a second learner reads it
    instead of building it and has the very same posterior; other hyperparameters build their
    own; a damaged file is refused with a notice and rebuilt, never trusted."""
    from ev_nav.errors import StateNotice
    from ev_nav.store import StateCache, Store

    net, model = small_regional
    Store.create(tmp_path, net.content_hash, "test", "gp", {}).close()
    cache = StateCache(tmp_path)
    state = model.state_dict()
    first = RegionalGP(net, config=model.config, cache=cache).load_state_dict(state)
    first.posterior()  # the prior is built (and cached) when first needed
    names = sorted(p.name for p in cache.folder.glob("regional*"))
    assert [n.split("-")[0] for n in names] == ["regionalfloat", "regionalint", "regionalmeta"]
    import ev_nav.gp.regional.model as regional_model

    built = []
    real = regional_model.RegionalGP._build_prior

    def counting(self, amp):
        built.append(1)
        return real(self, amp)

    monkeypatch.setattr(regional_model.RegionalGP, "_build_prior", counting)
    warm = RegionalGP(net, config=model.config, cache=cache).load_state_dict(state)
    assert built == []
    for other in (first, warm):
        a, b = model.posterior(), other.posterior()
        assert np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)
    RegionalGP(net, config=model.config, cache=cache,
               hyperparameters={"noise_var": 2.0 * model.noise_var}).sample(
                   np.random.default_rng(0))
    assert built == [1]
    assert len(list(cache.folder.glob("regionalmeta-*"))) == 2
    floats = cache.folder / names[0]
    floats.write_bytes(floats.read_bytes()[:-8] + b"\0" * 8)
    with pytest.warns(StateNotice, match="checksum"):
        again = RegionalGP(net, config=model.config, cache=cache).load_state_dict(state)
        again.posterior()
    assert built == [1, 1]
    assert np.array_equal(again.posterior().mean, model.posterior().mean)


def test_bad_input_is_refused_and_changes_nothing(small_regional):
    net, model = small_regional
    before = model.posterior().mean.copy()
    with pytest.raises(UnknownSegmentError):
        model.update([net.n_segments], [1.0])
    with pytest.raises(InvalidObservation):
        model.update([0, 1], [1.0])
    with pytest.raises(InvalidObservation):
        model.update([0], [np.nan])
    with pytest.raises(InvalidObservation, match="temperature"):
        model.update([0], [1.0], temperature=500.0)
    with pytest.raises(InvalidObservation, match="temperature"):
        model.update_total([0, 1], 3.0, temperature=float("nan"))
    with pytest.raises(InvalidObservation):
        model.reset_segments([0, 0], [1, 1], [1.0, 1.0], [1.0, 1.0])
    assert not model.temp.active and not model.extra_var.any()
    with pytest.raises(InvalidObservation):
        model.update_total([], 3.0)
    assert np.array_equal(model.posterior().mean, before)
    with pytest.raises(ConfigError):
        RegionalConfig(graph_nu=1.5)
    with pytest.raises(ConfigError):
        RegionalGP(net, hyperparameters={"kappa": 2.0})


def test_each_update_is_applied_before_the_next_draw(town):
    """Issue 26 item 1: a trip's readings change the very next draw. After each of 30 trips the
    incrementally updated learner (factor columns rewritten where the readings reach, the
    landmarks' Schur complement by a halo-local rank-k term) draws what a learner factorised
    afresh from the same statistics draws, from the same random numbers, within 1 % of the
    prior sd."""
    model = RegionalGP(town, config=RegionalConfig(landmarks=100, learn_hyperparameters=False))
    prior_sd = model.posterior().std.copy()
    rng = np.random.default_rng(4)
    truth = sample_ground_truth(town, seed=4)
    worst = 0.0
    for t in range(30):
        path = random_route(town, 40, rng)
        model.update(path, truth[path] + model.noise_std * rng.standard_normal(path.size))
        if t % 10 == 9:
            fresh = RegionalGP(town, config=model.config).load_state_dict(model.state_dict())
            a = model.sample(np.random.default_rng(t))
            b = fresh.sample(np.random.default_rng(t))
            worst = max(worst, float((np.abs(a - b) / prior_sd).max()))
            # the draw did move with the data: the driven segments left their prior
            moved = np.abs(a[path] - model.prior_mean[path]) / prior_sd[path]
            assert moved.max() > 0.5
    assert worst <= 0.01, worst


@pytest.mark.parametrize("scale", [1.0, 0.25])
def test_the_agents_joint_thompson_weights_skip_the_variances_and_match(town, scale):
    """A joint Thompson agent (paper rectification) routes on the regional learner's draw
    directly: the same weights as through ``posterior().joint_scores`` from the same random
    numbers, without the variances being computed; a tempered draw (``scale`` below 1, which
    computed every segment's σ) too."""
    from ev_nav.bandits.agent import Agent
    from ev_nav.bandits.indices import ThompsonIndex, rectified_weights

    model = RegionalGP(town, config=RegionalConfig(landmarks=100))
    rng = np.random.default_rng(6)
    for _ in range(5):
        path = random_route(town, 30, rng)
        model.update(path, model.prior_mean[path] + rng.normal(0.0, 3.0, path.size))
    rule = ThompsonIndex(name="ts-joint", joint=True, scale=scale)
    agent = Agent(town, model, rule, seed=3)
    fast = agent.weights(1)
    assert model._post is None  # no posterior (no variances) was computed
    slow = rectified_weights(rule, model.posterior(), 1, np.random.default_rng(3))
    np.testing.assert_allclose(fast, slow, rtol=1e-9, atol=1e-9)


def test_kept_variances_match_their_recomputation(town):
    """Bayes-UCB's variances are kept trip by trip (the landmarks' part by a float32 Woodbury
    product per trip, the factor's part by Takahashi columns): after each of 40 trips they
    match every segment's variance recomputed from scratch by a learner factorised afresh from
    the same statistics, within 1e-4 relative (the Vecchia factor's pending changes and the
    float32 product are the only differences). Every direction applied at once
    (``variance_tol=0``); the default carries the small ones (the test below)."""
    import scipy.linalg as sla

    model = RegionalGP(town, config=RegionalConfig(landmarks=100, learn_hyperparameters=False,
                                                   variance_tol=0.0))
    rng = np.random.default_rng(8)
    truth = sample_ground_truth(town, seed=8)
    model.posterior()
    worst_part = worst_sd = 0.0
    for t in range(40):
        path = random_route(town, 40, rng)
        model.update(path, truth[path] + model.noise_std * rng.standard_normal(path.size))
        kept = model.posterior().std
        part = model._var2.copy()
        b = model._landmark_b()
        c = sla.solve_triangular(model._ls, b.T, lower=True)
        worst_part = max(worst_part, float(np.max(np.abs(part - (c * c).sum(0))
                                                  / np.maximum((c * c).sum(0), 1e-12))))
        if t % 10 == 9:
            fresh = RegionalGP(town, config=model.config).load_state_dict(model.state_dict())
            worst_sd = max(worst_sd, float(np.max(np.abs(kept - fresh.posterior().std) / kept)))
    assert worst_part <= 1e-4, worst_part
    assert worst_sd <= 1e-4, worst_sd


def test_carried_directions_keep_each_landmark_part_within_variance_tol_above_the_exact(town):
    """The default ``variance_tol`` (0.01) applies a trip's directions to the kept landmark
    parts only once one would lower some part by more than 1 % of it, and carries the rest.
    After each of 30 trips (a posterior after each, every fifth trip two updates between
    posteriors) every kept part lies between its exact value ``b S⁻¹ bᵀ`` and 1.01 times it
    (within the float32 product's rounding), fewer directions are applied than with 0, the
    carried ones are applied later (the bound is reached, not left far below), and the
    posterior sds are those of a freshly factorised learner within 0.5 %. A bad tolerance is
    refused."""
    import scipy.linalg as sla

    def run(tol: float) -> tuple[float, float, int]:
        model = RegionalGP(town, config=RegionalConfig(
            landmarks=100, learn_hyperparameters=False, variance_tol=tol))
        applied = []
        real = model._deferred_directions

        def counting(w: np.ndarray) -> np.ndarray:
            out = real(w)
            applied.append(out.shape[1])
            return out

        model._deferred_directions = counting
        rng = np.random.default_rng(12)
        truth = sample_ground_truth(town, seed=12)
        model.posterior()
        lowest, highest, worst_sd = np.inf, -np.inf, 0.0
        for t in range(30):
            for _ in range(2 if t % 5 == 4 else 1):
                path = random_route(town, 60, rng)
                model.update(path, truth[path] + model.noise_std * rng.standard_normal(path.size))
            kept = model.posterior().std
            b = model._landmark_b()
            c = sla.solve_triangular(model._ls, b.T.astype(np.float64), lower=True)
            exact = (c * c).sum(0)
            rel = model._var2 / exact - 1.0
            lowest, highest = min(lowest, float(rel.min())), max(highest, float(rel.max()))
            if t % 10 == 9:
                fresh = RegionalGP(town, config=model.config).load_state_dict(
                    model.state_dict())
                worst_sd = max(worst_sd, float(np.max(np.abs(kept / fresh.posterior().std - 1))))
        assert lowest >= -1e-4, lowest
        assert worst_sd <= 5e-3, worst_sd
        return highest, worst_sd, sum(applied)

    highest, _, applied = run(0.01)
    highest0, _, applied0 = run(0.0)
    assert 3e-3 <= highest <= 0.01 + 1e-4, highest
    assert highest0 <= 1e-4, highest0
    assert applied < 0.6 * applied0, (applied, applied0)
    with pytest.raises(ConfigError, match="variance_tol"):
        RegionalConfig(variance_tol=1.0)


def test_the_halo_rows_forms_are_the_dense_ones_on_a_real_halo_solve(town):
    """The factor part's per-trip drop ``diag(Y (Δ⁻¹ + Y_uu)⁻¹ Yᵀ)`` on a halo solve of a real
    route, by the sparse row forms (entries below 1e-14 of their row's largest left out)
    against the dense product: equal within 1e-12 relative, with entries left out (18 % on
    this town's short route of 77 segments; 70–90 % on long routes of a 100k town)."""
    from ev_nav.gp.regional.factor import halo_row_forms

    model = RegionalGP(town, config=RegionalConfig(landmarks=50, learn_hyperparameters=False))
    rng = np.random.default_rng(4)
    for _ in range(20):
        path = random_route(town, 60, rng)
        model.update(path, model.prior_mean[path] + rng.standard_normal(path.size))
    model.posterior()
    u = np.unique(random_route(town, 80, rng))
    u = u[np.argsort(model.factor.pos[u])]
    seg, yh = model.factor.local_solve(u, model._adjacency, model.config.update_hops,
                                       model.config.update_halo_min)
    y_uu = yh[np.searchsorted(model.factor.pos[seg], model.factor.pos[u])]
    m = np.linalg.inv(np.diag(np.full(u.size, 0.5)) + y_uu)
    m = 0.5 * (m + m.T)
    dense = np.einsum("ij,jk,ik->i", yh, m, yh)
    forms = halo_row_forms(yh, np.tril(m))  # (only the lower triangle is read)
    assert np.max(np.abs(forms - dense) / dense) <= 1e-12
    small = np.abs(yh) <= 1e-14 * np.abs(yh).max(1, keepdims=True)
    assert small.mean() > 0.1, small.mean()


def test_a_trips_woodbury_directions_are_the_same_from_either_side(town):
    """A trip's landmark directions W (``W Wᵀ = S⁻¹ − (S + zᵀz)⁻¹``) come from the k × k
    eigenproblem when the route reads at most J segments and from the J × J one beyond: both
    give that difference to 1e-10 of its largest entry, and with a coarse ``woodbury_tol`` the
    two sides keep the same directions (the same W up to their signs)."""
    for tol in (0.0, 1e-3):
        model = RegionalGP(town, config=RegionalConfig(landmarks=40, woodbury_tol=tol,
                                                       learn_hyperparameters=False))
        rng = np.random.default_rng(5)
        for _ in range(10):
            path = random_route(town, 50, rng)
            model.update(path, model.prior_mean[path] + rng.standard_normal(path.size))
        model.posterior()
        s = model._s.copy()
        j = s.shape[0]
        for k in (j // 2, 3 * j):
            # (columns of decaying scale: directions on both sides of the tolerance)
            z = 0.3 * rng.standard_normal((k, j)) * np.logspace(0.0, -3.0, j)
            w = model._woodbury_directions(z, z.T @ z)
            want = np.linalg.inv(s) - np.linalg.inv(s + z.T @ z)
            if tol == 0.0:
                assert np.max(np.abs(w @ w.T - want)) <= 1e-10 * np.max(np.abs(want))
            else:  # the other side's directions, computed here in the k × k form
                zsz = z @ np.linalg.solve(s, z.T)
                e = np.linalg.eigvalsh(0.5 * (zsz + zsz.T))
                assert w.shape[1] == int((e > tol).sum()) < min(k, j)


def test_the_woodbury_terms_directions_left_out_keep_variances_above_and_within_bound(town):
    """A trip's rank-k term leaves out the directions that lower no segment's landmark part
    by more than ``woodbury_tol`` of its value after the trip. With a coarse tolerance
    (1e-3) fewer directions are applied than with 0 (all), and after each of 25 trips the
    kept part is never below its recomputation (what is left out only under-reduces) and
    above it by less than 1e-3 per trip so far; both within the float32 product's rounding
    (1e-4). A bad tolerance is refused."""
    import scipy.linalg as sla

    def run(tol: float) -> tuple[float, float, float, int]:
        model = RegionalGP(town, config=RegionalConfig(
            landmarks=100, learn_hyperparameters=False, woodbury_tol=tol, variance_tol=0.0))
        rng = np.random.default_rng(11)
        truth = sample_ground_truth(town, seed=11)
        model.posterior()
        lowest = highest = per_trip = 0.0
        applied = 0
        for t in range(25):
            path = random_route(town, 60, rng)
            model.update(path, truth[path] + model.noise_std * rng.standard_normal(path.size))
            applied += model._var2_pending[-1].shape[1]
            model.posterior()
            b = model._landmark_b()
            c = sla.solve_triangular(model._ls, b.T, lower=True)
            exact = (c * c).sum(0)
            rel = (model._var2 - exact) / np.maximum(exact, 1e-12)
            lowest = min(lowest, float(rel.min()))
            highest = max(highest, float(rel.max()))
            per_trip = max(per_trip, float(rel.max()) / (t + 1))
        return lowest, highest, per_trip, applied

    lowest, _, per_trip, applied = run(1e-3)
    lowest0, highest0, _, applied0 = run(0.0)
    assert applied < 0.8 * applied0, (applied, applied0)
    assert lowest >= -1e-4 and per_trip <= 1e-3 + 1e-4, (lowest, per_trip)
    assert lowest0 >= -1e-4 and highest0 <= 1e-4, (lowest0, highest0)
    with pytest.raises(ConfigError):
        RegionalConfig(woodbury_tol=1.0)


def test_trip_updates_stay_with_a_refactorised_learner_on_a_sparse_real_network():
    """Each trip changes the landmarks' Schur complement by a solve on a halo of its segments;
    on Monaco, where 5 hops hold a few hundred segments, those changes once moved the
    posterior mean away from a learner refactorised from the same statistics by 3.5e-3 of a
    prior sd within 20 trips (1.5e-2 within 200). Widened to ``update_halo_min`` segments,
    40 Thompson trips (a draw before each update) stay within 1e-3; with the 5-hop halo
    alone they do not (the test can fail)."""
    import copy

    net = load_real()
    truth = sample_ground_truth(net, seed=5)

    def worst(halo_min: int) -> float:
        model = RegionalGP(net, config=RegionalConfig(learn_hyperparameters=False,
                                                      update_halo_min=halo_min))
        sd0 = RegionalGP(net, config=model.config).posterior().std
        rng = np.random.default_rng(5)
        model.sample(rng)
        out = 0.0
        for t in range(40):
            path = random_route(net, 40, rng)
            model.sample(rng)
            model.update(path, truth[path] + model.noise_std * rng.standard_normal(path.size))
            if t % 5 == 4:
                fresh = copy.deepcopy(model)
                fresh.restart_from_statistics()
                gap = np.abs(model.posterior_mean() - fresh.posterior_mean()) / sd0
                out = max(out, float(gap.max()))
        return out

    assert worst(RegionalConfig().update_halo_min) <= 1e-3
    assert worst(0) > 2e-3


def _exact_mean_deviation(model: RegionalGP) -> np.ndarray:
    """The posterior mean's deviation from the prior mean under the learner's own prior and
    readings, by a sparse LU of the whole precision ``[[Q + W, WG], [GᵀW, I + GᵀWG]]`` (no
    zero-fill factor, no per-trip updates)."""
    q = model._parts.prior.precision()
    w, b = model.factor.w, model.factor.b
    g = model.landmarks.astype(np.float64)
    wg = sp.csr_matrix(w[:, None] * g)
    p = sp.bmat([[q + sp.diags(w), wg], [wg.T, sp.identity(g.shape[1]) + g.T @ wg]]).tocsc()
    x = spla.splu(p).solve(np.concatenate([b, g.T @ b]))
    return x[: model.n] + g @ x[model.n:]


def test_a_draws_centre_stays_near_the_exact_posterior_mean_on_a_real_network():
    """A draw reads the kept B (one sweep): its centre (the draw from zero normals) against
    the exact posterior mean of the learner's own prior and readings (a sparse LU), through
    40 Thompson trips on Monaco, stays within 1 % of a prior sd (measured 9.2e-4; the mean's
    own three-sweep path 9.5e-4, asserted within 1e-3)."""
    net = load_real()
    truth = sample_ground_truth(net, seed=5)
    model = RegionalGP(net, config=RegionalConfig(learn_hyperparameters=False))
    sd0 = RegionalGP(net, config=model.config).posterior().std
    zeros = (np.zeros(model.n), np.zeros(model.landmarks.shape[1]))
    rng = np.random.default_rng(5)
    centre = mean = 0.0
    for t in range(40):
        path = random_route(net, 40, rng)
        model.sample(rng)
        model.update(path, truth[path] + model.noise_std * rng.standard_normal(path.size))
        if t % 5 == 4:
            exact = _exact_mean_deviation(model)
            centre = max(centre, float(np.max(np.abs(model._solve_parts(zeros) - exact) / sd0)))
            mean = max(mean, float(np.max(
                np.abs(model.posterior_mean() - model.prior_mean - exact) / sd0)))
    assert mean <= 1e-3 and 0.0 < centre <= 1e-2


def test_a_state_written_with_the_older_factor_tolerance_keeps_it(town):
    """Migration: the factor's tolerance was 1e-8 (now 1e-7). A checkpoint written at 1e-8
    opens in a learner of today's settings, keeps 1e-8 (and so its cached prior's key and
    its very posterior), and a state without the per-trip bookkeeping settings opens too."""
    old_cfg = RegionalConfig(landmarks=100, learn_hyperparameters=False, factor_tol=1e-8)
    old = RegionalGP(town, config=old_cfg, seed=0)
    rng = np.random.default_rng(2)
    for _ in range(6):
        path = random_route(town, 30, rng)
        old.update(path, old.prior_mean[path] + rng.normal(0.0, 3.0, path.size))
    state = old.state_dict()
    state["config"] = {k: v for k, v in state["config"].items()
                       if k not in ("woodbury_tol", "update_halo_min")}
    new = RegionalGP(town, config=RegionalConfig(landmarks=100, learn_hyperparameters=False),
                     seed=0)
    assert new.config.factor_tol == 1e-7
    new.load_state_dict(state)
    assert new.config.factor_tol == 1e-8 and new.factor.tol == 1e-8
    amp = np.ones(town.n_segments)
    assert new._prior_key(amp) == old._prior_key(amp)
    old.restart_from_statistics()
    assert np.array_equal(new.posterior().mean, old.posterior().mean)


@pytest.mark.parametrize("field,value", [
    ("update_halo_min", -1), ("update_halo_min", 2.5), ("update_hops", -1),
    ("variance_refresh", 0), ("factor_tol", float("nan")), ("factor_tol", 1.0),
    ("factor_tol", -1e-7),
])
def test_bookkeeping_settings_out_of_range_are_refused(field, value):
    """A negative halo ran (as no halo), and a NaN factor tolerance left every factor change
    pending for good: each is a ConfigError naming the field."""
    with pytest.raises(ConfigError, match=field):
        RegionalConfig(**{field: value})
    RegionalConfig(update_halo_min=0, factor_tol=0.0)  # the limits themselves are allowed


def test_init_builds_the_regional_prior_into_the_states_cache(tmp_path, monkeypatch):
    """``ev-nav init`` said it was building the prior, but the regional learner built it only
    when first used: the first trip's ``route`` waited for it (164 s at 30k segments)."""
    from ev_nav.gp import incremental_state
    from ev_nav.trips.session import create_state

    monkeypatch.setattr(incremental_state, "MAX_EXACT_SEGMENTS", 300)
    with create_state(tmp_path / "s", synthetic=400, model="gp") as session:
        assert type(session.model).__name__ == "RegionalGP"
    kinds = sorted(p.name.split("-")[0] for p in (tmp_path / "s" / "cache").iterdir())
    assert kinds == ["regionalfloat", "regionalint", "regionalmeta"]
