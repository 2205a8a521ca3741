"""The regional learner's hyperparameter fits (issue 26 item 1: "the refit schedule is the
exact learner's"): the same schedule, the same objective and so the same fitted values as the
exact learner on the same data; checkpoints keep them; a deferred or cancelled fit; a state
written before the learner fitted keeps opening as it was."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from ev_nav.errors import ModelStateError
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.regional import RegionalConfig, RegionalGP
from ev_nav.gp.testing import random_route


def _trips(net, models, n: int, seed: int) -> None:
    """``n`` random trips with readings of a fixed smooth truth, fed to every model."""
    rng = np.random.default_rng(seed)
    truth = net.e_det() * (1.0 + 0.3 * np.sin(np.arange(net.n_segments) / 7.0))
    for _ in range(n):
        path = random_route(net, 25, rng)
        y = truth[path] + 2.0 * rng.standard_normal(path.size)
        for m in models:
            m.update(path, y)


@pytest.fixture(scope="module")
def fitted_pair(town):
    exact = IncrementalGP(town, seed=0)
    # the exact learner's acceptance too (every improvement), so the same values
    regional = RegionalGP(town, config=RegionalConfig(landmarks=200, fit_test_level=1.0),
                          seed=0)
    _trips(town, [exact, regional], 24, seed=1)
    return exact, regional


def test_the_schedule_and_the_fitted_values_are_the_exact_learners(fitted_pair):
    exact, regional = fitted_pair
    assert [f["update"] for f in regional.fits] == [f["update"] for f in exact.fits] == [10, 15, 23]
    assert regional.next_refresh == exact.next_refresh
    fitted, theirs = regional.hyperparameters(), exact.hyperparameters()
    assert fitted != RegionalGP(exact.net, config=regional.config).hyperparameters()
    for key, value in theirs.items():
        np.testing.assert_allclose(fitted[key], value, rtol=2e-3, err_msg=key)
    # and so the same posterior, within the regional learner's accuracy
    prior_sd = np.sqrt(np.diag(exact._prior_covariance()))
    pe, pr = exact.posterior(), regional.posterior()
    assert np.abs(pe.mean - pr.mean).max() / prior_sd.min() < 0.01
    assert np.abs(pe.std - pr.std).max() / prior_sd.min() < 0.01


def test_a_checkpoint_keeps_the_fits_and_the_schedule(fitted_pair, town):
    _, regional = fitted_pair
    state = regional.state_dict()
    again = RegionalGP(town, config=RegionalConfig(landmarks=200, fit_test_level=1.0),
                       seed=0).load_state_dict(state)
    assert again.hyperparameters() == regional.hyperparameters()
    assert again.prior_hyper == regional.prior_hyper
    assert again.fits == regional.fits and again.next_refresh == regional.next_refresh
    # bit for bit against the learner refactorised from its statistics (what a restored
    # learner does; the per-trip updates leave changes below their tolerance pending)
    regional.restart_from_statistics()
    a, b = regional.posterior(), again.posterior()
    assert np.array_equal(a.mean, b.mean) and np.array_equal(a.std, b.std)
    # the rows a later fit draws come from the restored generator
    assert again.rng.bit_generator.state == regional.rng.bit_generator.state


@pytest.fixture
def built(monkeypatch):
    """The hyperparameters of every prior built while the test runs."""
    import ev_nav.gp.regional.model as regional_model

    seen = []
    real = regional_model.RegionalGP._build_prior

    def counting(self, amp):
        seen.append(dict(self.hyper))
        return real(self, amp)

    monkeypatch.setattr(regional_model.RegionalGP, "_build_prior", counting)
    return seen


def test_loading_a_fitted_checkpoint_builds_only_its_prior(fitted_pair, town, built):
    """The prior is built when first needed: a learner made to load a checkpoint at fitted
    values never builds the initial one (at 100k segments that is a minute per command)."""
    _, regional = fitted_pair
    again = RegionalGP(town, config=RegionalConfig(landmarks=200, fit_test_level=1.0),
                       seed=0).load_state_dict(regional.state_dict())
    assert built == []
    again.sample(np.random.default_rng(0))
    assert built == [regional.hyperparameters()]


def test_a_deferred_fit_waits_and_a_cancelled_one_changes_nothing(town):
    model = RegionalGP(town, config=RegionalConfig(landmarks=100, first_fit=3,
                                                   fit_test_level=1.0), seed=0)
    model.defer_refits = True
    _trips(town, [model], 4, seed=2)
    assert model.refit_due and model.fits == []
    before = model.hyperparameters()
    cancel = threading.Event()
    cancel.set()
    assert model.refit(cancel=cancel) is False
    assert model.hyperparameters() == before and model.refit_due
    assert model.refit() is True
    assert not model.refit_due and len(model.fits) == 1
    assert model.hyperparameters() != before
    assert model.next_refresh == 4 + 2  # ceil(4 · 0.5) later


def test_a_fit_is_accepted_only_when_the_likelihood_ratio_test_rejects_the_current_values(
    town, built
):
    """The regional default (level 0.01), at the schedule's steady state: a fit that gains less
    than half the χ² quantile keeps the current values and rebuilds nothing; one that gains
    more is taken and rebuilds. Before the steady state every fit is taken."""
    from scipy.stats import chi2

    # fit_max_gap 5: the steady state (one fit per 5 updates) from the first fit on
    steady = RegionalGP(town, config=RegionalConfig(landmarks=100, fit_max_gap=5), seed=0)
    growing = RegionalGP(town, config=RegionalConfig(landmarks=100), seed=0)
    assert steady.config.fit_test_level == 0.01
    # readings 3 × the learner's prior scale: the first fit gains far more than chance
    rng = np.random.default_rng(5)
    truth = steady.prior_mean + 3.0 * np.sqrt(steady.hyper["outputscale_product"]) * np.sin(
        np.arange(town.n_segments) / 5.0)
    for _ in range(60):
        path = random_route(town, 25, rng)
        y = truth[path] + steady.noise_std * rng.standard_normal(path.size)
        steady.update(path, y)
        growing.update(path, y)
    steady.sample(rng)
    growing.sample(rng)
    critical = 0.5 * chi2.ppf(0.99, 9)  # 9 free: ℓ₁ (3), ℓ₂ (3), s₁, s₂, ς²
    assert [f["update"] for f in steady.fits] == list(range(10, 61, 5))
    # the first fit tests the initial (fixed) values: the χ² quantile itself
    assert steady.fits[0]["accepted"] and steady.fits[0]["gain"] > critical
    # each later one tests an earlier fit's values, estimated on `current` rows of their own:
    # the quantile scaled by 1 + rows / current
    current = steady.fits[0]["rows"]
    for f in steady.fits[1:]:
        assert f["accepted"] == (f["gain"] > critical * (1.0 + f["rows"] / current))
        if f["accepted"]:
            current = f["rows"]
    assert not all(f["accepted"] for f in steady.fits)  # later fits: the subsets' noise
    for before, fit in zip(steady.fits, steady.fits[1:], strict=False):
        if not fit["accepted"]:
            keys = ("lengthscale_product", "outputscale_product", "noise_var")
            assert all(fit[k] == before[k] for k in keys)
    assert steady.hyperparameters()["noise_var"] == steady.fits[-1]["noise_var"]
    # the growing schedule (10, 15, 23, 35, 53) takes every fit
    assert [f["update"] for f in growing.fits] == [10, 15, 23, 35, 53]
    assert all(f["accepted"] for f in growing.fits)
    # one build for each accepted fit, none for the others (nothing was drawn before the first
    # fit, so the initial values' prior was never needed)
    assert len(built) == sum(f["accepted"] for f in steady.fits + growing.fits)


def test_the_likelihood_ratio_test_takes_the_chi2_quantile():
    import torch
    from scipy.stats import chi2

    from ev_nav.gp.fitting import MapFit, significant_gain

    theta = torch.zeros(3)
    crit = chi2.ppf(0.95, 9) / 2.0
    assert abs(crit - 8.4595) < 1e-3
    assert abs(chi2.ppf(0.99, 9) / 2.0 - 10.833) < 1e-3
    assert significant_gain(MapFit(theta, 100.0, 100.0 + crit + 1e-6), 9, 0.05)
    assert not significant_gain(MapFit(theta, 100.0, 100.0 + crit - 1e-6), 9, 0.05)
    assert significant_gain(MapFit(theta, 100.0, 100.0 + 1e-9), 9, 1.0)
    assert not significant_gain(MapFit(theta, 100.0, 100.0), 9, 1.0)
    assert significant_gain(MapFit(theta, 100.0, float("inf")), 9, 0.05)
    # against an earlier fit's values: twice the gain is (1 + rows / current_rows) χ²
    from ev_nav.gp.fitting import current_fit_rows, gain_threshold

    assert gain_threshold(0.01, 9, 600, 600) == pytest.approx(chi2.ppf(0.99, 9))
    assert gain_threshold(0.01, 9, 600, 200) == pytest.approx(2.0 * chi2.ppf(0.99, 9))
    assert gain_threshold(0.01, 9, 600, None) == pytest.approx(chi2.ppf(0.99, 9) / 2.0)
    fit = MapFit(theta, 100.0, 100.0 + 15.0)  # above 10.8, below 21.7
    assert significant_gain(fit, 9, 0.01) and not significant_gain(fit, 9, 0.01, 600, 600)
    fits = [{"rows": 300, "accepted": True}, {"rows": 600, "accepted": False}]
    assert current_fit_rows(fits) == 300 and current_fit_rows(fits[1:]) is None
    # the test guards the steady state: from the fit whose next comes fit_max_gap later
    from ev_nav.gp.fitting import at_steady_state

    steady = [n for n in (10, 15, 23, 35, 53, 80, 120, 180, 270, 370) if at_steady_state(
        n, 1.5, 100)]
    assert steady == [270, 370]


def test_a_state_written_before_the_learner_fitted_keeps_its_values(town):
    """Migration: a version-1 checkpoint (no fits, no schedule in it) opens with the
    hyperparameters it was written at, the same posterior, and keeps not fitting."""
    old = RegionalGP(town, config=RegionalConfig(landmarks=100, learn_hyperparameters=False),
                     seed=0)
    _trips(town, [old], 12, seed=3)
    state = old.state_dict()
    v1 = {k: v for k, v in state.items()
          if k not in ("prior_hyperparameters", "next_refresh", "fits", "rng")}
    v1["version"] = 1
    v1["config"] = {k: v for k, v in state["config"].items()
                    if k not in ("learn_hyperparameters", "first_fit", "fit_growth",
                                 "fit_max_gap", "fit_max_rows", "fit_iterations",
                                 "prior_log_sd", "woodbury_tol")}
    opened = RegionalGP(town, config=RegionalConfig(landmarks=100), seed=0).load_state_dict(v1)
    assert opened.config.learn_hyperparameters is False
    assert np.array_equal(opened.posterior().mean, old.posterior().mean)
    _trips(town, [opened], 15, seed=4)
    assert opened.fits == [] and opened.hyperparameters() == old.hyperparameters()
    with pytest.raises(ModelStateError):
        RegionalGP(town, config=RegionalConfig(landmarks=50), seed=0).load_state_dict(v1)


def test_the_fit_settings_are_checked_as_the_exact_learners():
    from ev_nav.errors import ConfigError

    with pytest.raises(ConfigError):
        RegionalConfig(fit_growth=1.0)
    with pytest.raises(ConfigError):
        RegionalConfig(fit_max_rows=1)
    for level in (0.0, 1.5):
        with pytest.raises(ConfigError, match="fit_test_level"):
            RegionalConfig(fit_test_level=level)
        with pytest.raises(ConfigError, match="fit_test_level"):
            IncrementalConfig(fit_test_level=level)
    assert RegionalConfig().fit_max_gap == IncrementalConfig().fit_max_gap


def test_the_graph_kernel_entries_are_computed_once_for_every_fit(town, monkeypatch):
    """κ is not fitted, so its graph-kernel entries (the prior's costliest part) are computed
    for the first prior and kept for every later fit and rebuild; a learner that does not fit
    lets them go after its one build (their memory)."""
    import ev_nav.gp.regional.model as regional_model

    computed = []
    real = regional_model.network_entries

    def counting(*args, **kwargs):
        computed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(regional_model, "network_entries", counting)
    model = RegionalGP(town, config=RegionalConfig(landmarks=100, first_fit=3,
                                                   fit_test_level=1.0), seed=0)
    _trips(town, [model], 8, seed=3)
    assert [f["update"] for f in model.fits] == [3, 5, 8]
    assert model.hyperparameters() != RegionalGP(town, config=model.config).hyperparameters()
    assert computed == [1]
    fixed = RegionalGP(town, config=RegionalConfig(landmarks=100, learn_hyperparameters=False),
                       seed=0)
    fixed.sample(np.random.default_rng(0))
    assert computed == [1, 1] and fixed._kept_entries is None


@pytest.mark.parametrize("learner", ["regional", "exact"])
def test_noise_free_readings_leave_the_fitted_noise_at_its_floor(town, learner):
    """Readings that repeat a smooth truth exactly drove the fitted noise to 0: the exact
    learner's next fit then failed on its logarithm, the regional learner's core matrix lost
    positive definiteness (4e-16 at 30k segments) - either way every later route of the state
    failed. A fit's noise now stops at ``NOISE_FLOOR_SHARE`` of the prior's, and the learner
    keeps predicting the readings."""
    from ev_nav.gp.fitting import NOISE_FLOOR_SHARE

    model = (RegionalGP(town, config=RegionalConfig(landmarks=200, fit_test_level=1.0), seed=0)
             if learner == "regional" else IncrementalGP(town, seed=0))
    floor = NOISE_FLOOR_SHARE * model.hyperparameters()["noise_var"]
    rng = np.random.default_rng(3)
    truth = town.e_det() * (1.0 + 0.3 * np.sin(np.arange(town.n_segments) / 7.0))
    for _ in range(24):
        path = random_route(town, 25, rng)
        model.update(path, truth[path])  # no noise at all
    noise = [f["noise_var"] for f in model.fits if f["accepted"]]
    assert len(noise) >= 2 and min(noise) >= floor * (1 - 1e-9)
    # the bound holds it: the data alone would take it lower
    assert noise[-1] == pytest.approx(floor, rel=1e-6)
    post = model.posterior()
    assert np.isfinite(post.mean).all() and np.isfinite(post.std).all()
    seen = np.flatnonzero(model.n_obs > 0)
    np.testing.assert_allclose(post.mean[seen], truth[seen], rtol=1e-3, atol=0.05)
