"""Unit-level checks of the cost-varying-subset BO (spec bocvs.md §6, A1–A6) and the loop."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from ev_nav.bo.core.functions import ACKLEY6, HARTMANN3, HARTMANN6, LEVY6
from ev_nav.bo.core.maximize import autograd, maximize
from ev_nav.bo.cvs import benchmarks as bm
from ev_nav.bo.cvs.acquisition import CVSMaximizerConfig, maximize_over_set
from ev_nav.bo.cvs.api import CVSLoopConfig, run_episode
from ev_nav.bo.cvs.benchmarks import make_problem
from ev_nav.bo.cvs.policies import (
    ETC,
    cost_groups,
    etc_plays,
    linear_eps,
    make_etc,
    mc_average_moments,
    select_cvs,
    size_groups,
)
from ev_nav.bo.cvs.problems import (
    COST_PRESETS,
    Budget,
    CostModel,
    TruncatedNormal,
    assemble,
    mc_expectation,
    regrets,
    truncnorm_scale,
)
from ev_nav.bo.cvs.registry import KNOWN_COST_METHODS
from ev_nav.bo.cvs.runner import aggregate, summarise
from ev_nav.errors import ConfigError
from ev_nav.gp.exact import ExactGP

D = torch.float64
TINY = CVSLoopConfig(
    n_mc=16, maximizer=CVSMaximizerConfig(n_warmup=20, n_warmup_full=200, n_starts=1, maxiter=20)
)
hartmann3 = HARTMANN3.unit


def _best_raw_plus_random(h, dim, gen, n_warmup, n_starts):
    """The family's maximiser recipe on a plain function (value, maximiser)."""
    best = maximize(
        autograd(h), dim, gen, n_raw=n_warmup, n_starts=n_starts, maxiter=200,
        start_rule="best+random",
    )  # fmt: skip
    return best.value, best.x


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- A1
@pytest.mark.parametrize("var,scale", [(0.02, 0.14182), (0.04, 0.21355), (0.08, 0.90610)])
def test_a1_truncnorm_scale_and_empirical_variance(var, scale):
    assert truncnorm_scale(var) == pytest.approx(scale, abs=1e-4)
    x = TruncatedNormal.with_variance(var).sample((100_000,), _gen(0))
    assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(x.var()) == pytest.approx(var, abs=1e-3)
    assert float(x.mean()) == pytest.approx(0.5, abs=3e-3)


def test_unreachable_variance_raises():
    with pytest.raises(ConfigError):
        truncnorm_scale(0.09)  # above the uniform limit 1/12


# ----------------------------------------------------------------------------- A2
def test_a2_hartmann3_optimum():
    x = torch.tensor(HARTMANN3.optimizers, dtype=D)
    assert float(hartmann3(x)[0]) == pytest.approx(3.86278, abs=1e-4)
    # no random point beats the known maximum
    u = torch.rand(200_000, 3, dtype=D, generator=_gen(1))
    assert float(hartmann3(u).max()) <= HARTMANN3.optimal_value


def test_a2_hartmann3_expected_set_maxima():
    """§4.7, var 0.04: {3} 2.76, {2,3} 3.77, {1,2,3} 3.863 (±0.03).

    Deviation: a 200×200 Gauss–Legendre quadrature over the truncated-normal density (grid of
    2001 values of x3) puts max F_{3} at 2.792, 0.032 above the spec's MC-based 2.76. The test
    checks {3} against the quadrature value (±0.02) and allows ±0.04 around the spec's number.
    """
    p = make_problem("hartmann3", variance=0.04)
    S = p.mc_matrix(4096, _gen(2))
    cfg = CVSMaximizerConfig(n_warmup=64, n_warmup_full=2000, n_starts=2)
    got = {
        cs: maximize_over_set(p.objective, 3, cs, S, _gen(3), cfg).value
        for cs in [(2,), (1, 2), (0, 1, 2)]
    }
    assert got[(2,)] == pytest.approx(2.792, abs=0.02)
    assert got[(2,)] == pytest.approx(2.76, abs=0.04)
    assert got[(1, 2)] == pytest.approx(3.77, abs=0.03)
    assert got[(0, 1, 2)] == pytest.approx(3.863, abs=0.03)


def test_known_optima_of_other_benchmarks():
    x6 = torch.tensor(HARTMANN6.optimizers, dtype=D)
    assert float(HARTMANN6.unit(x6)[0]) == pytest.approx(3.32237, abs=1e-4)
    assert float(ACKLEY6.unit(torch.full((1, 6), 0.5, dtype=D))[0]) == pytest.approx(0.0, abs=1e-9)
    assert float(LEVY6.unit(torch.full((1, 6), 0.55, dtype=D))[0]) == pytest.approx(0.0, abs=1e-9)
    u = torch.rand(50_000, 6, dtype=D, generator=_gen(4))
    assert float(ACKLEY6.unit(u).max()) < 0.0 and float(LEVY6.unit(u).max()) < 0.0


def test_gp_sample_objective_is_an_interpolant_of_a_prior_draw():
    f = bm.gp_sample_objective(_gen(5), dim=3, n_points=300)
    vals = f(f.points)
    # K^{-1}v interpolation with jitter 1e-6 reproduces the draw at the anchors: unit variance
    assert 0.4 < float(vals.std()) < 1.6
    g = bm.gp_sample_objective(_gen(5), dim=3, n_points=300)
    torch.testing.assert_close(f(f.points[:5]), g(g.points[:5]))


# ----------------------------------------------------------------------------- A3
V = (1.0, 0.9, 1.2, 1.5, 1.45, 1.3, 1.6)
CHEAP = COST_PRESETS["cheap"]


@pytest.mark.parametrize("eps,expected", [(0.0, 7), (0.2, 4), (1.0, 3)])
def test_a3_selection_rule(eps, expected):
    assert select_cvs(V, CHEAP, eps) + 1 == expected


def test_linear_schedule():
    eps = linear_eps(2.0, 10)
    assert eps(0) == 2.0 and eps(5) == pytest.approx(1.0) and eps(10) == 0.0 and eps(50) == 0.0


# ----------------------------------------------------------------------------- A4
@pytest.mark.parametrize(
    "costs,plays", [("cheap", [400, 40]), ("moderate", [40, 20]), ("expensive", [6, 5])]
)
def test_a4_etc_ada_play_counts(costs, plays):
    means = COST_PRESETS[costs]
    groups = cost_groups(means)
    assert groups == [[0, 1, 2], [3, 4, 5]]
    assert etc_plays("etcada", [means[g[0]] for g in groups]) == plays
    assert etc_plays("etc50", [0.1, 0.2]) == [50, 50]
    assert etc_plays("etc100", [0.1, 0.2]) == [100, 100]


def test_a4_etc50_expensive_never_plays_full_set():
    p = make_problem("hartmann3", costs="expensive", variance=0.04)
    ep, _ = run_episode(p, make_etc(p, "etc50"), 50.0, 0, TINY)
    sets = [s.set_idx for s in ep.steps]
    assert 6 not in sets
    # 50 plays at 0.6 (= 30) then 25 plays at 0.8 (= 20): the budget ends inside group 2
    assert sets[:50] == [s for s in sets[:50] if s in (0, 1, 2)] and len(sets) == 75
    assert ep.spent == pytest.approx(50.0)


# ----------------------------------------------------------------------------- A5
def test_a5_budget_accounting_stops_at_first_unaffordable_choice():
    b = Budget(1.0)
    assert b.try_spend(0.6) and not b.try_spend(0.6) and b.try_spend(0.4)
    assert b.remaining == pytest.approx(0.0)
    p = make_problem("hartmann3", costs="moderate", variance=0.04)
    for method in ("ucb-psq", "etcada"):
        ep, _ = run_episode(p, method, 2.5, 1, TINY)
        spent = np.array([s.spent for s in ep.steps])
        assert spent[-1] <= 2.5 + 1e-9 and np.all(np.diff(spent) > 0)
        assert ep.stopped_by == "budget"
    # UCB-PSQ pays 1 per play: two plays fit, the third (cost 1 > 0.5 left) stops the run
    ep, _ = run_episode(p, "ucb-psq", 2.5, 1, TINY)
    assert len(ep.steps) == 2


def test_run_stops_even_if_a_cheaper_set_would_fit():
    p = make_problem("hartmann3", costs="moderate", variance=0.04)
    etc = ETC([[0, 1, 2]], [3], name="etc-small")  # 3 cheap plays (0.3), then the full set
    ep, _ = run_episode(p, etc, 1.2, 0, TINY)
    assert [s.set_idx for s in ep.steps][:3] == [s.set_idx for s in ep.steps][:3]
    assert len(ep.steps) == 3 and ep.spent == pytest.approx(0.3)


# ----------------------------------------------------------------------------- A6
def test_a6_partial_query_assembly_scatters_in_original_order():
    x_ctrl = torch.tensor([[0.11, 0.33]], dtype=D)
    x_rand = torch.tensor([[0.7, 0.8, 0.9]], dtype=D)
    x = assemble(5, (3, 1), x_ctrl, x_rand)
    torch.testing.assert_close(x, torch.tensor([[0.7, 0.33, 0.8, 0.11, 0.9]], dtype=D))
    with pytest.raises(ConfigError):
        assemble(5, (3, 1), x_ctrl, x_rand[:, :2])


def test_a6_assembly_in_the_loop():
    p = make_problem("plant", costs="cheap", variance=0.02)
    ep, _ = run_episode(p, make_etc(p, "etc50"), 0.05, 2, TINY)
    for s in ep.steps:
        cs = p.control_sets[s.set_idx]
        x = np.array(s.x)
        np.testing.assert_allclose(x[list(cs)], s.x_ctrl)
        rnd = [j for j in range(5) if j not in cs]
        assert np.all((x[rnd] > 0) & (x[rnd] < 1))


def test_mc_expectation_matches_direct_average():
    S = torch.rand(64, 3, dtype=D, generator=_gen(6))
    x = torch.rand(4, 1, dtype=D, generator=_gen(7))
    got = mc_expectation(hartmann3, 3, (1,), x, S)
    for b in range(4):
        Xb = S.clone()
        Xb[:, 1] = x[b, 0]
        assert float(got[b]) == pytest.approx(float(hartmann3(Xb).mean()), rel=1e-12)
    # full set: no expectation
    xf = torch.rand(2, 3, dtype=D, generator=_gen(8))
    torch.testing.assert_close(mc_expectation(hartmann3, 3, (0, 1, 2), xf, S), hartmann3(xf))


# ----------------------------------------------------------------------------- misc
def test_maximiser_uses_gradients_and_finds_known_optimum():
    calls = {"n": 0}

    def h(x):
        calls["n"] += 1
        return -((x - 0.3) ** 2).sum(-1)

    val, x = _best_raw_plus_random(h, 4, _gen(9), n_warmup=10, n_starts=3)
    assert val == pytest.approx(0.0, abs=1e-10)
    torch.testing.assert_close(x, torch.full((4,), 0.3, dtype=D), atol=1e-5, rtol=0)
    assert calls["n"] < 40  # exact gradients: a quadratic converges in a handful of evaluations


def test_regrets():
    r = regrets([1.0, 3.0, 2.0], [0, 6, 3], [0.1, 1.0, 0.2], 4.0, CHEAP, target=3, alpha=0.0)
    np.testing.assert_allclose(r.simple, [3.0, 1.0, 1.0])
    np.testing.assert_allclose(r.spent, [0.1, 1.1, 1.3])
    np.testing.assert_allclose(r.cost_weighted, [0.3, 1.3, 1.7])
    np.testing.assert_allclose(r.cost, [0.0, 0.9, 0.9])


def test_cost_model_and_groups():
    cm = CostModel((0.01, 0.1, 1.0), noise_std=0.02)
    g = _gen(10)
    assert cm.sample(0, g) == 0.01  # below 0.1: no noise
    draws = [cm.sample(2, g) for _ in range(2000)]
    assert np.std(draws) == pytest.approx(0.02, rel=0.1) and np.mean(draws) == pytest.approx(
        1, abs=3e-3
    )
    assert not cm.known and CostModel((1.0,)).known
    p12 = make_problem("hartmann6")
    assert size_groups(p12.control_sets, 12) == [[0, 1, 2, 3], [4, 5]]
    pa = make_problem("airfoil")
    assert pa.full_set is None and size_groups(pa.control_sets, 5) == [[0, 1, 2], [3, 4, 5]]


def test_plant_simulator_optimum():
    f = bm.load_plant()
    u = torch.rand(20_000, 5, dtype=D, generator=_gen(11))
    assert float(f(u).max()) < bm.PLANT_MAX + 1e-6
    # the peak is narrow (lengthscale 0.29 on a 2.4-wide K axis): a dense warm-up is needed
    val, _ = _best_raw_plus_random(f, 5, _gen(12), n_warmup=100_000, n_starts=4)
    assert val == pytest.approx(bm.PLANT_MAX, abs=2e-3)


def test_unknown_benchmark_and_method_raise():
    with pytest.raises(ConfigError):
        make_problem("branin")
    p = make_problem("hartmann3")
    with pytest.raises(ConfigError):
        KNOWN_COST_METHODS.get("ei")
    assert math.isfinite(p.f_max)


def test_ei_per_cost_moments_match_dense_joint_posterior():

    g = _gen(20)
    X = torch.rand(9, 3, dtype=D, generator=g)
    gp = ExactGP("se", torch.tensor([0.2, 0.3, 0.4]), 1.3, 1e-3).fit(X, torch.sin(5 * X[:, 0]))
    S = torch.rand(12, 3, dtype=D, generator=g)
    xc = torch.rand(4, 1, dtype=D, generator=g)
    m, v, c = mc_average_moments(gp, 3, (1,), S, xc)
    for b in range(4):
        R = S.clone()
        R[:, 1] = xc[b, 0]
        mu, cov = gp.posterior_cov(torch.cat([R, X]))
        N = R.shape[0]
        assert float(m[b]) == pytest.approx(float(mu[:N].mean()), abs=1e-10)
        assert float(v[b]) == pytest.approx(float(cov[:N, :N].mean()), abs=1e-10)
        torch.testing.assert_close(c[b], cov[:N, N:].mean(0), atol=1e-10, rtol=0)


def test_ei_per_cost_runs_and_prefers_value_per_cost():
    p = make_problem("hartmann3", costs="moderate", variance=0.04)
    ep, _ = run_episode(p, "ei-per-cost", 1.0, 0, TINY)
    assert len(ep.steps) >= 1 and ep.spent <= 1.0 + 1e-9


@pytest.mark.parametrize("method", ["ucb-cvs", "ucb-per-cost", "ts-per-cost", "ts-psq"])
def test_other_policies_run_within_budget(method):
    p = make_problem("hartmann3", costs="moderate", variance=0.04)
    ep, _ = run_episode(p, method, 1.0, 3, TINY)
    assert ep.steps and ep.spent <= 1.0 + 1e-9 and ep.stopped_by == "budget"
    if method == "ts-psq":  # B4: the full set whenever it exists
        assert all(s.set_idx == 6 for s in ep.steps)
    if method == "ucb-cvs":  # ε_0 = 1 admits partial sets: it does not pay for the full set only
        assert any(s.set_idx != 6 for s in ep.steps)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_a_cost_that_is_no_positive_finite_number_is_refused(bad):
    # a NaN cost passed 'c <= 0': the run went on and never played that control set
    from ev_nav.bo.cvs.problems import CostModel
    from ev_nav.errors import ConfigError

    with pytest.raises(ConfigError, match="all mean costs must be positive finite numbers"):
        CostModel(means=(bad, 1.0))
    assert CostModel(means=(0.5, 1.0)).n_sets == 2


def _final_regret_table(final: list[float]) -> pd.DataFrame:
    """One method, one seed per final regret: two plays each, the second ending at ``final``."""
    rows = [
        {"method": "etcada", "seed": s, "t": t, "set": 7, "cost": 1.0, "spent": float(t),
         "y": 0.0, "simple_regret": 2.0 if t == 1 else r, "n_sets": 7}
        for s, r in enumerate(final) for t in (1, 2)
    ]  # fmt: skip
    return pd.DataFrame(rows)


def test_standard_errors_use_the_sample_sd_and_one_seed_has_none():
    """The SE was ``std(ddof=0) / sqrt(n)``, 10 % low at 5 seeds: B3's seeds 0-4 (per-seed final
    regrets of docs/bo-cvs.md) gave ±0.163 where their SE is 0.182."""
    b3 = [0.214, 0.838, 0.786, 0.015, 0.019]
    want = float(np.std(b3, ddof=1) / np.sqrt(5))
    assert want == pytest.approx(0.1824, abs=1e-4)
    row = summarise(_final_regret_table(b3), 2.0).iloc[0]
    assert row["se@C"] == pytest.approx(want) and row["regret@C"] == pytest.approx(np.mean(b3))
    grid, mean, se, _ = aggregate(_final_regret_table(b3), budget=2.0)["etcada"]
    np.testing.assert_allclose(se, [0.0, want])  # every seed has regret 2 after the first play
    # one seed: its spread is unknown, so no SE column (was 0) and no band in the figure
    one = summarise(_final_regret_table([0.3]), 2.0)
    assert not any(c.startswith("se@") for c in one.columns) and "regret@C" in one.columns
    assert np.isnan(aggregate(_final_regret_table([0.3]), budget=2.0)["etcada"][2]).all()
