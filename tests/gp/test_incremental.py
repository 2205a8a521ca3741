"""The exact, incremental learner (issue 15): exactness, checkpoints, hyperparameter fits.

Every check compares against an independent dense computation: the GP regression of *all*
observations written out with ``numpy.linalg`` (one row per observation, or per segment mean
where the test says so), at the learner's current kernel and noise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ev_nav.bandits.agent import Agent
from ev_nav.checkpoints import decode, encode
from ev_nav.errors import InvalidObservation, ModelStateError, UnknownSegmentError
from ev_nav.gp.groundtruth import sample_ground_truth
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.prior import PriorSettings
from ev_nav.gp.testing import load_real, random_route, subnetwork

FIXED = IncrementalConfig(learn_hyperparameters=False, first_fit=10**9)


def _dense_kernel(model: IncrementalGP) -> np.ndarray:
    with torch.no_grad():
        k = model.kernel.cross_all(np.arange(model.n)).numpy()
    return 0.5 * (k + k.T)


def _dense_posterior(model, rows, y, noise_units):
    """Posterior mean, var and covariance from the observation matrix ``rows`` (one per datum)."""
    k = _dense_kernel(model)
    h = np.asarray(rows, dtype=float)
    g = h @ k @ h.T + np.diag(np.asarray(noise_units) * model.noise_var)
    a = np.linalg.solve(g, h @ k)
    mean = model.prior_mean + a.T @ (np.asarray(y) - h @ model.prior_mean)
    cov = k - (h @ k).T @ a
    return mean, np.diag(cov), cov


@pytest.fixture(scope="module")
def small():
    return subnetwork(load_real(), 250, seed=5)


def test_every_observation_kind_is_conditioned_exactly(small):
    """Per-segment readings (with repeats), trip totals and a refresh in between: the posterior
    equals the dense GP regression on every individual observation."""
    n = small.n_segments
    cfg = IncrementalConfig(learn_hyperparameters=False, first_fit=4)  # a refresh at update 4
    model = IncrementalGP(small, config=cfg, seed=0)
    rng = np.random.default_rng(0)
    truth = model.prior_mean + rng.normal(0.0, 8.0, n)
    rows, ys, units = [], [], []
    for trip in range(9):
        path = random_route(small, 12, rng)
        path = np.concatenate([path, path[:2]])  # a segment driven twice in one trip
        if trip % 3 == 2:
            total = float(truth[path].sum() + rng.normal(0.0, 5.0))
            model.update_total(path, total)
            rows.append(np.bincount(path, minlength=n))
            ys.append(total)
            units.append(path.size)
        else:
            y = truth[path] + rng.normal(0.0, model.noise_std, path.size)
            model.update(path, y)
            for e, v in zip(path, y, strict=True):
                rows.append(np.eye(1, n, e)[0])
                ys.append(v)
                units.append(1.0)
    mean, var, cov = _dense_posterior(model, rows, ys, units)
    post = model.posterior()
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-9 * np.abs(mean).max())
    np.testing.assert_allclose(post.std**2, var, rtol=1e-9)
    ids = random_route(small, 15, rng)
    np.testing.assert_allclose(
        model.route_covariance(ids), cov[np.ix_(ids, ids)], rtol=1e-8, atol=1e-9 * var.max()
    )
    u, c = np.unique(ids, return_counts=True)
    m, v = model.predict_sum(ids)
    assert m == pytest.approx(mean[ids].sum(), rel=1e-10)
    assert v == pytest.approx(c @ cov[np.ix_(u, u)] @ c, rel=1e-8)
    assert model.n_support == len(np.unique(np.nonzero(np.asarray(rows))[1]))


def test_monaco_200_trips_match_a_dense_exact_gp(monaco):
    """Acceptance 1 of issue 15: 200 recorded Thompson-sampling trips on MoST Monaco, fixed
    hyperparameters, 200 rank-k updates without a refresh; mean and std at every segment
    (driven or not) within 1e-6 relative of one dense GP regression on all the data."""
    model = IncrementalGP(monaco, config=FIXED, seed=0)
    agent = Agent(monaco, model, "ts", seed=0)
    rng = np.random.default_rng(1)
    truth = sample_ground_truth(monaco, seed=3)
    noise = PriorSettings.from_network(monaco).noise_std
    mid = monaco.segment_midpoints()
    start, goal = int(np.argmin(mid[:, 0])), int(np.argmax(mid[:, 0]))
    ids_all, y_all = [], []
    for t in range(1, 201):
        path = agent.plan(start, goal, t)
        y = truth[path] + rng.normal(0.0, noise, path.size)
        model.update(path, y)
        ids_all.append(path)
        y_all.append(y)
    ids, y = np.concatenate(ids_all), np.concatenate(y_all)
    assert ids.size > 10_000 and model.n_support > 100
    # the dense reference on all observations, reduced without loss to per-segment means (the
    # reduction itself is checked observation by observation in the test above)
    u, inv, cnt = np.unique(ids, return_inverse=True, return_counts=True)
    ybar = np.bincount(inv, weights=y) / cnt
    k = _dense_kernel(model)
    g = k[np.ix_(u, u)] + np.diag(model.noise_var / cnt)
    a = np.linalg.solve(g, k[u, :])
    mean = model.prior_mean + a.T @ (ybar - model.prior_mean[u])
    std = np.sqrt(np.diag(k) - np.einsum("ij,ij->j", k[u, :], a))
    post = model.posterior()
    undriven = np.setdiff1d(np.arange(monaco.n_segments), u)
    assert undriven.size > 1000
    assert np.max(np.abs(post.mean - mean) / np.maximum(np.abs(mean), 1.0)) < 1e-6
    assert np.max(np.abs(post.std - std) / std) < 1e-6


def test_checkpoint_round_trip_is_bit_identical_and_pickle_free(small):
    cfg = IncrementalConfig(first_fit=3, fit_iterations=5)
    model = IncrementalGP(small, config=cfg, seed=4)
    rng = np.random.default_rng(2)
    for _ in range(6):  # fits and refreshes at updates 3 and 5, then logged updates
        path = random_route(small, 10, rng)
        model.update(path, small.e_det()[path] + rng.normal(0, 3, path.size))
    model.update_total(path, float(small.e_det()[path].sum()) + 9.0)
    assert [f["update"] for f in model.fits] == [3, 5]
    assert len(model.state_dict()["log"]) == 2  # replayed on load
    blob = encode(model.state_dict())
    assert b"pickle" not in blob[:64]
    again = IncrementalGP(small, config=cfg, seed=4).load_state_dict(decode(blob))
    a, b = model.posterior(), again.posterior()
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)
    assert again.hyperparameters() == model.hyperparameters()
    # and they stay identical as both keep learning (the schedule and the generator survive)
    for m in (model, again):
        r = np.random.default_rng(9)
        for _ in range(4):
            p = random_route(small, 10, r)
            m.update(p, small.e_det()[p] + r.normal(0, 3, p.size))
    assert np.array_equal(model.posterior().std, again.posterior().std)
    assert encode(model.state_dict()) == encode(again.state_dict())


def test_checkpoint_for_another_network_or_config_is_refused(small, town):
    state = IncrementalGP(small, config=FIXED).state_dict()
    with pytest.raises(ModelStateError, match="different road network"):
        IncrementalGP(town, config=FIXED).load_state_dict(state)
    with pytest.raises(ModelStateError, match="different IncrementalConfig"):
        IncrementalGP(small, config=IncrementalConfig(first_fit=7)).load_state_dict(state)
    with pytest.raises(ModelStateError, match="not an incremental-GP"):
        IncrementalGP(small).load_state_dict({**state, "kind": "svgp"})
    broken = {**state, "base": {**state["base"], "n_obs": np.zeros(3)}}
    with pytest.raises(ModelStateError):
        IncrementalGP(small, config=FIXED).load_state_dict(broken)


def test_bad_input_is_refused_and_changes_nothing(small):
    model = IncrementalGP(small, config=FIXED)
    before = model.posterior()
    with pytest.raises(UnknownSegmentError):
        model.update([0, small.n_segments], [1.0, 2.0])
    with pytest.raises(InvalidObservation):
        model.update([0, 1], [1.0, np.nan])
    with pytest.raises(InvalidObservation):
        model.update_total([], 5.0)
    assert model.n_updates == 0 and model.posterior() is before


def test_fit_recovers_the_noise_and_scale_of_the_data(town):
    """Data drawn from the prior with known hyperparameters, a learner started 4x off in noise
    and outputscale: one type-II MAP fit lands near the truth."""
    settings = PriorSettings.from_network(town)
    truth = sample_ground_truth(town, settings=settings, seed=1)
    cfg = IncrementalConfig(
        first_fit=40,
        fit_max_rows=800,
        noise_var=4.0 * settings.noise_var,
        outputscale=0.25 * settings.outputscale,
        learn_graph_kappa=False,
    )
    model = IncrementalGP(town, config=cfg, seed=0)
    rng = np.random.default_rng(0)
    for _ in range(40):
        path = random_route(town, 40, rng)
        model.update(path, truth[path] + rng.normal(0.0, settings.noise_std, path.size))
    fit = model.fits[-1]
    assert fit["noise_var"] == pytest.approx(settings.noise_var, rel=0.15)
    total_scale = fit["outputscale_product"] + fit["outputscale_feature"]
    assert 0.5 * settings.outputscale < total_scale < 2.0 * settings.outputscale
    # the refreshed posterior uses the fitted values: exact for them
    assert model.noise_var == fit["noise_var"]


def test_cached_posterior_restores_the_same_bits(small, tmp_path):
    """A state's cache/ keeps the posterior of a checkpoint: loading it skips refresh and replay
    and gives the very same arrays; a damaged file is refused with a notice (recomputed), never
    trusted."""
    from ev_nav.errors import StateNotice
    from ev_nav.store import StateCache, Store

    Store.create(tmp_path, small.content_hash, "test", "gp", {}).close()
    cache = StateCache(tmp_path)
    cfg = IncrementalConfig(first_fit=3, fit_iterations=5)
    model = IncrementalGP(small, config=cfg, seed=1, cache=cache)
    rng = np.random.default_rng(3)
    for _ in range(5):
        path = random_route(small, 10, rng)
        model.update(path, small.e_det()[path] + rng.normal(0, 3, path.size))
    model.cache_posterior()
    files = sorted(p.name for p in cache.folder.glob("posterior-*.npy"))
    assert len(files) == 1
    state = decode(encode(model.state_dict()))
    warm = IncrementalGP(small, config=cfg, seed=1, cache=cache).load_state_dict(state)
    cold = IncrementalGP(small, config=cfg, seed=1).load_state_dict(state)
    for other in (warm, cold):
        assert np.array_equal(other.posterior().mean, model.posterior().mean)
        assert np.array_equal(other.posterior().std, model.posterior().std)
    assert warm.n_obs.tolist() == model.n_obs.tolist() and warm.n_support == model.n_support
    (cache.folder / files[0]).write_bytes(b"\x93NUMPY garbage")
    with pytest.warns(StateNotice, match="unreadable"):
        again = IncrementalGP(small, config=cfg, seed=1, cache=cache).load_state_dict(state)
    assert np.array_equal(again.posterior().std, model.posterior().std)


def test_partly_driven_end_segments_are_conditioned_exactly(small):
    """A trip that starts and ends part-way along a segment is the linear observation
    ``Σ h_e f(e)`` with the driven shares as ``h`` and noise ``ς² Σ h``: the posterior equals the
    dense regression on those rows, before and after a refresh, and predict_sum agrees."""
    n = small.n_segments
    cfg = IncrementalConfig(learn_hyperparameters=False, first_fit=3)
    model = IncrementalGP(small, config=cfg, seed=0)
    rng = np.random.default_rng(4)
    rows, ys, units = [], [], []
    for _ in range(5):
        path = random_route(small, 10, rng)
        w = np.ones(path.size)
        w[0], w[-1] = rng.uniform(0.05, 0.95, 2)
        total = float(w @ model.prior_mean[path] + rng.normal(0.0, 20.0))
        model.update_total(path, total, weights=w)
        rows.append(np.bincount(path, weights=w, minlength=n))
        ys.append(total)
        units.append(w.sum())
    mean, var, cov = _dense_posterior(model, rows, ys, units)
    post = model.posterior()
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-9 * np.abs(mean).max())
    np.testing.assert_allclose(post.std**2, var, rtol=1e-9)
    ids = random_route(small, 8, rng)
    w = np.linspace(0.2, 1.0, ids.size)
    m, v = model.predict_sum(ids, w)
    h = np.bincount(ids, weights=w, minlength=n)
    assert m == pytest.approx(h @ mean, rel=1e-10)
    assert v == pytest.approx(h @ cov @ h, rel=1e-8)
    # a checkpoint keeps the weights, and one written before weighted totals still opens
    again = IncrementalGP(small, config=cfg, seed=0).load_state_dict(decode(encode(
        model.state_dict())))
    np.testing.assert_array_equal(again.posterior().mean, post.mean)
    with pytest.raises(InvalidObservation):
        model.update_total(path, 10.0, weights=np.zeros(path.size))


def test_unweighted_totals_of_old_checkpoints_still_open(small):
    """Checkpoints written before weighted totals hold ``(ids, total)`` pairs and log entries
    ``("tot", ids, [total])`` over repeated ids: they load to the same posterior."""
    cfg = IncrementalConfig(learn_hyperparameters=False, first_fit=2)
    model = IncrementalGP(small, config=cfg, seed=0)
    rng = np.random.default_rng(5)
    for _ in range(12):  # refreshes move totals into the base; stop with one in the log
        p = random_route(small, 9, rng)
        model.update_total(np.concatenate([p, p[:1]]), float(model.prior_mean[p].sum() + 30.0))
        if model.state_dict()["log"] and model.state_dict()["totals"]:
            break
    state = model.state_dict()
    old = dict(state)
    old["totals"] = [(np.repeat(u, h.astype(int)), t) for u, h, t in state["totals"]]
    old["log"] = [
        (k, np.repeat(i, y[1:].astype(int)), y[:1]) if k == "tot" else (k, i, y)
        for k, i, y in state["log"]
    ]
    assert old["totals"] and old["log"]
    again = IncrementalGP(small, config=cfg, seed=0).load_state_dict(decode(encode(old)))
    np.testing.assert_allclose(again.posterior().mean, model.posterior().mean, rtol=1e-12)
    np.testing.assert_allclose(again.posterior().std, model.posterior().std, rtol=1e-12)


def test_absorbing_a_backlog_at_once_is_the_same_posterior(small):
    """Many batches absorbed as one rank-k update (a server's backlog) give the posterior of
    the dense regression on all of them, as one-by-one updates do; the schedule counts each
    batch, and the replay log keeps each one."""
    n = small.n_segments
    rng = np.random.default_rng(11)
    seg, tot, rows, ys, units = [], [], [], [], []
    model = IncrementalGP(small, config=FIXED, seed=0)
    for k in range(12):
        path = random_route(small, 9, rng)
        if k % 3 == 0:
            w = np.ones(path.size)
            w[0] = 0.4
            total = float(w @ model.prior_mean[path] + rng.normal(0.0, 15.0))
            tot.append((path, total, w))
            rows.append(np.bincount(path, weights=w, minlength=n))
            ys.append(total)
            units.append(w.sum())
        else:
            y = model.prior_mean[path] + rng.normal(0.0, 6.0, path.size)
            seg.append((path, y))
            for e, v in zip(path, y, strict=True):
                rows.append(np.eye(1, n, e)[0])
                ys.append(v)
                units.append(1.0)
    model.absorb(seg, tot)
    mean, var, _ = _dense_posterior(model, rows, ys, units)
    post = model.posterior()
    np.testing.assert_allclose(post.mean, mean, rtol=1e-9, atol=1e-9 * np.abs(mean).max())
    np.testing.assert_allclose(post.std**2, var, rtol=1e-8)
    assert model.n_updates == 12 and len(model.state_dict()["log"]) == 12
    one_by_one = IncrementalGP(small, config=FIXED, seed=0)
    for ids, y in seg:
        one_by_one.update(ids, y)
    for ids, total, w in tot:
        one_by_one.update_total(ids, total, w)
    np.testing.assert_allclose(one_by_one.posterior().mean, post.mean, rtol=1e-9,
                               atol=1e-9 * np.abs(mean).max())


def test_sym_rows_reads_the_lower_triangle_as_the_symmetric_matrix():
    """Rows of Σ stored as a lower triangle (the upper one stale, as after SYRK updates) equal
    the rows of the full symmetric matrix: for any ids, repeated or unsorted, and none."""
    from ev_nav.gp.incremental_state import sym_rows

    rng = np.random.default_rng(3)
    low = np.tril(rng.normal(size=(40, 40)))
    full = low + np.tril(low, -1).T  # exactly symmetric
    stored = np.asfortranarray(np.tril(full) + np.triu(rng.normal(size=(40, 40)), 1))
    for ids in ([0], [39], [5, 2, 30, 2, 39, 0], list(range(40))):
        got = sym_rows(stored, np.array(ids, dtype=np.int64))
        np.testing.assert_array_equal(got, full[ids, :])
    assert sym_rows(stored, np.array([], dtype=np.int64)).shape == (0, 40)
