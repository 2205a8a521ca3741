"""Cost-varying subsets on a user's objective: the surrogate's treatment (standardised ``y``,
marginal-likelihood refits), scale invariance, summaries without NaN, ``tell()`` of points the
learner did not suggest, declared distributions of the uncontrolled inputs, and integer and
categorical inputs (objectives in ``user_objectives.py``)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from ev_nav.bo import load_objective
from ev_nav.bo.core.runs import ExecutionConfig
from ev_nav.bo.cvs import CVSOptimizer
from ev_nav.bo.cvs.api import BudgetExhausted, CVSLoopConfig
from ev_nav.bo.cvs.benchmarks import make_problem, random_inputs, user_problem
from ev_nav.bo.cvs.runner import CVSRunConfig, run_experiment
from ev_nav.bo.cvs.surrogate import FITTED, SurrogateConfig, condition, refit
from ev_nav.cli import main
from ev_nav.errors import ConfigError, OutOfDomainError
from ev_nav.gp.exact import ExactGP

FILE = Path(__file__).with_name("user_objectives.py")
_spec = importlib.util.spec_from_file_location("_test_cvs_user_objectives", FILE)
assert _spec is not None and _spec.loader is not None
uo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uo)
INPROCESS = ExecutionConfig(executor="inprocess")
D = torch.float64


# ----------------------------------------------------------------------------- surrogate
def test_standardised_gp_is_the_unit_gp_on_standardised_y():
    """Conditioning with ``standardise`` equals an independent GP (outputscale 1, noise 1e-4)
    on ``(y - ȳ) / s_y``, mapped back: mean ``ȳ + s_y μ``, variance ``s_y² σ²``."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(12, 2, dtype=D, generator=g)
    y = 3e3 + 250.0 * torch.sin(6 * X[:, 0]) * X[:, 1]
    model = ExactGP("se", 0.3, 1.0, 1e-4)
    condition(model, X, y, SurrogateConfig(standardise=True), noise_std=None)
    m, s = float(y.mean()), float(y.std())
    unit = ExactGP("se", 0.3, 1.0, 1e-4).fit(X, (y - m) / s)
    Xs = torch.rand(7, 2, dtype=D, generator=g)
    mu, var = model.posterior(Xs)
    mu_u, var_u = unit.posterior(Xs)
    torch.testing.assert_close(mu, m + s * mu_u, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(var, s * s * var_u, rtol=1e-9, atol=1e-9)


def test_standardised_refit_does_not_depend_on_the_scale_of_y():
    g = torch.Generator().manual_seed(1)
    X = torch.rand(15, 2, dtype=D, generator=g)
    y = torch.sin(5 * X[:, 0]) + 0.2 * X[:, 1]
    fitted = []
    for scale in (1.0, 1e4):
        model = ExactGP("se", 0.2, 1.0, 1e-4)
        condition(model, X, scale * y, FITTED, noise_std=None)
        assert refit(model, FITTED, torch.Generator().manual_seed(5))
        fitted.append(model)
    a, b = fitted
    torch.testing.assert_close(a.lengthscale, b.lengthscale, rtol=1e-6, atol=1e-9)
    assert b.outputscale == pytest.approx(1e8 * a.outputscale, rel=1e-6)
    assert b.noise_var == pytest.approx(1e8 * a.noise_var, rel=1e-6)


# ----------------------------------------------------------------------------- runs
def _user_cfg(name: str, **kw) -> CVSRunConfig:
    base = dict(
        setting="cvs",
        objective=f"{FILE}:{name}",
        methods=("ucb-psq",),
        budget=10.0,
        seeds=tuple(range(5)),
        n_mc=32,
        n_warmup=64,
        n_warmup_full=300,
        n_starts=2,
        maxiter=40,
    )
    return CVSRunConfig(**{**base, **kw})


def _final_regret(table) -> np.ndarray:
    last = table.sort_values("t").groupby("seed").tail(1).sort_values("seed")
    return last["simple_regret"].to_numpy()


def test_regret_of_a_1e4_scaled_objective_stays_in_the_unscaled_iqr():
    """Standardised ``y`` and scale-free refits: the scaled run's median regret (divided by
    1e4) lies inside the unscaled run's interquartile range over 5 seeds."""
    plain = run_experiment(_user_cfg("cvs_bowl"), execution=INPROCESS)
    scaled = run_experiment(_user_cfg("cvs_bowl_1e4"), execution=INPROCESS)
    r, r_scaled = _final_regret(plain.table), _final_regret(scaled.table) / 1e4
    assert np.isfinite(r).all() and np.isfinite(r_scaled).all()
    q1, q3 = np.quantile(r, [0.25, 0.75])
    assert q1 - 1e-9 <= np.median(r_scaled) <= q3 + 1e-9, (r, r_scaled)
    assert np.median(r) < 0.05  # and the runs do find the optimum 2 at (0.5, 1.2)
    for exp in (plain, scaled):
        summary = exp.summary()
        assert "median@C" in summary.columns and not summary.isna().any().any()


def test_summary_without_a_known_optimum_has_no_regret_and_no_nan(tmp_path, capsys):
    cfg = _user_cfg("bowl", seeds=(0, 1), methods=("ucb-psq", "etcada"), budget=2.0)
    out = tmp_path / "run"
    exp = run_experiment(cfg, out, INPROCESS)
    summary = exp.summary()
    assert not summary.isna().any().any()
    assert not any(c.startswith(("regret", "median", "se@")) for c in summary.columns)
    assert {"evals", "best_y"} <= set(summary.columns)
    manifest = json.loads((out / "manifest.json").read_text())
    assert all("regret@C" not in row for row in manifest["summary"])
    code = main(["bo", "cvs", "report", str(out)])
    assert code == 0 and "nan" not in capsys.readouterr().out.lower()


# ----------------------------------------------------------------------------- tell()
def _bowl_optimizer(**kw) -> tuple[CVSOptimizer, object]:
    user = load_objective(f"{FILE}:bowl")
    problem = user_problem(user)
    return CVSOptimizer(problem, "ucb-psq", 5.0, seed=0, **kw), user


def test_tell_accepts_prior_data_and_plays_decided_elsewhere():
    opt, user = _bowl_optimizer()
    # prior data before any ask: conditions the GP, shortens the initial design, costs nothing
    prior = [np.array([0.4, 1.0]), np.array([-1.5, 2.5]), np.array([1.9, -0.9])]
    for x in prior:
        opt.tell(x, user(x))
    assert opt.model.n_train == 0 and opt.initialising  # 3 of the 5 initial points
    for _ in range(2):
        s = opt.ask()
        assert s.detail["phase"] == "init"
        opt.tell(s.x, user(s.x))
    assert not opt.initialising and opt.model.n_train == 5 and opt.spent == 0.0
    # a suggested play, then an outside play of set 0 (x0 controlled) at its known cost 0.1
    s = opt.ask()
    x = opt.fill_random(s, torch.Generator().manual_seed(3))
    opt.tell(x, user(x), cost=1.0)
    opt.tell(np.array([0.5, 2.0]), user(np.array([0.5, 2.0])), control_set=0)
    assert opt.spent == pytest.approx(1.1) and opt.ctx.plays == [1, 0, 1]
    assert [t.phase for t in opt.told] == ["prior"] * 3 + ["told"]
    # more prior data after the start, then the best point is one of the told ones
    best = np.array([0.5, 1.2])
    opt.tell(best, user(best))
    assert opt.spent == pytest.approx(1.1) and opt.model.n_train == 8
    r = opt.result()
    assert r.detail["control_set"] == 2
    np.testing.assert_allclose(r.x_best, best, atol=1e-9)
    # every evaluation, in the order told: 3 prior, 2 initial, the suggested play, the outside
    # play, the last prior point (the initial design was left out and told points came last)
    assert r.n_evaluations == 8 and r.X.shape == (8, 2)
    np.testing.assert_allclose(r.X[:3], prior, atol=1e-9)
    np.testing.assert_allclose(r.X[5:], [x, [0.5, 2.0], best], atol=1e-9)
    np.testing.assert_allclose(r.y, [user(p) for p in r.X], atol=1e-9)


def test_result_holds_the_initial_design_and_every_play_in_order():
    """The documented ask/tell loop (docs/bo-cvs.md): ``result()`` has a row for every
    evaluation told — the initial design included — in the order they were told."""
    problem = make_problem("hartmann3", costs="moderate", variance=0.04)
    opt = CVSOptimizer(problem, "etcada", budget=2.0, seed=0, config=CVSLoopConfig(n_mc=64))
    env = torch.Generator().manual_seed(1)
    told_x, told_y = [], []
    while True:
        s = opt.ask()
        if s.detail["phase"] == "init":
            x = s.x
        else:
            if not opt.can_afford(s.detail["cost"]):
                break
            x = opt.fill_random(s, env)
        y = float(problem.observe(torch.as_tensor(x[None]), env)[0])
        opt.tell(x, y, cost=None if s.detail["phase"] == "init" else s.detail["cost"])
        told_x.append(x)
        told_y.append(y)
    r = opt.result()
    assert r.n_evaluations == len(told_y) == opt.config.n_init + len(opt.steps)
    np.testing.assert_allclose(r.X, told_x, atol=1e-12)
    np.testing.assert_array_equal(r.y, told_y)


def test_tell_refuses_points_outside_the_domain_and_unpayable_plays():
    opt, user = _bowl_optimizer()
    with pytest.raises(OutOfDomainError):
        opt.tell(np.array([2.5, 0.0]), 1.0)
    with pytest.raises(OutOfDomainError):
        opt.tell(np.array([0.0, np.nan]), 1.0)
    with pytest.raises(OutOfDomainError):
        opt.tell(np.array([0.0]), 1.0)
    for _ in range(5):
        s = opt.ask()
        opt.tell(s.x, user(s.x))
    with pytest.raises(ConfigError, match="control_set"):
        opt.tell(np.array([0.0, 0.0]), 1.0, control_set=7)
    with pytest.raises(BudgetExhausted):
        opt.tell(np.array([0.0, 0.0]), 1.0, cost=6.0)
    # a cost that is no price: -5 added 5 to the budget, NaN "did not fit in the budget"
    remaining = opt.budget.remaining
    for bad in (-5.0, 0.0, np.nan, np.inf, "cheap"):
        with pytest.raises(ConfigError, match=r"tell\(\): cost must be a finite number > 0"):
            opt.tell(np.array([0.0, 0.0]), 1.0, cost=bad)
    assert opt.budget.remaining == remaining
    hidden = CVSOptimizer(
        user_problem(load_objective(f"{FILE}:bowl"), cost_noise_std=0.02), "ucvs", 5.0,
        family="ucvs",
    )  # fmt: skip
    for _ in range(5):
        s = hidden.ask()
        hidden.tell(s.x, user(s.x))
    with pytest.raises(ConfigError, match="realised cost"):
        hidden.tell(np.array([0.0, 0.0]), 1.0, control_set=2)
    hidden.tell(np.array([0.0, 0.0]), 1.0, control_set=2, cost=0.93)
    assert hidden.ctx.cost_obs[2] == [0.93]


# ----------------------------------------------------------------------------- inputs
def test_declared_uncontrolled_distributions():
    """Sample moments against scipy's truncated normal, an integer's value frequencies and a
    categorical's probabilities (the ``cvs_mixed`` declaration)."""
    user = load_objective(f"{FILE}:cvs_mixed")
    dist = random_inputs(user.space, user.extras["uncontrolled"])
    U = dist.sample_coords(40_000, range(user.space.internal_dim), torch.Generator().manual_seed(0))
    X = user.space.decode(U.numpy())
    x0 = X[:, 0].astype(float)
    assert x0.min() >= 0.0 and x0.max() <= 1.0 and abs(x0.mean() - 0.5) < 0.01  # uniform
    k = X[:, 1].astype(int)
    # a normal (mean 2, sd 1.5) on the integer's cell coordinate, truncated to the box [0.5, 6.5]
    tn = stats.truncnorm((0.5 - 2.0) / 1.5, (6.5 - 2.0) / 1.5, loc=2.0, scale=1.5)
    want = [tn.cdf(v + 0.5) - tn.cdf(v - 0.5) for v in range(1, 7)]
    got = [(k == v).mean() for v in range(1, 7)]
    np.testing.assert_allclose(got, want, atol=0.01)
    c = X[:, 2]
    np.testing.assert_allclose([(c == v).mean() for v in "abc"], [0.6, 0.2, 0.2], atol=0.01)
    with pytest.raises(ConfigError, match="probabilities"):
        random_inputs(user.space, ["uniform", "normal", {"probs": [0.5, 0.5]}])
    with pytest.raises(ConfigError, match="3 inputs"):
        random_inputs(user.space, ["uniform"])


def test_mixed_objective_python_api():
    """Integer and categorical inputs: suggestions are valid values, the environment fills the
    uncontrolled ones from the declaration, and the full-set recommendation is the optimum."""
    user = load_objective(f"{FILE}:cvs_mixed")
    problem = user_problem(user)
    opt = CVSOptimizer(problem, "ucb-psq", 15.0, seed=0)
    env = torch.Generator().manual_seed(7)
    while True:
        s = opt.ask()
        if s.detail["phase"] == "init":
            assert isinstance(s.x[1], int) and s.x[2] in "abc"
            opt.tell(s.x, user(s.x))
            assert not opt.told  # recognised as the initial design's point (a valid value)
            continue
        if not opt.can_afford(s.detail["cost"]):
            break
        x = opt.fill_random(s, env)
        opt.tell(x, user(x), cost=s.detail["cost"])
    r = opt.result()
    assert r.detail["control_set"] == 2
    assert r.x_best[1] == 4 and r.x_best[2] == "b" and abs(r.x_best[0] - 0.3) < 0.05
    assert user(r.x_best) == pytest.approx(0.5, abs=0.01)


def test_mixed_objective_cli_reports_regret(tmp_path, capsys):
    out = tmp_path / "mixed"
    code = main(
        ["bo", "cvs", "run", "--objective", f"{FILE}:cvs_mixed", "--method", "etcada",
         "--budget", "6", "--seeds", "1", "--out", str(out), "--no-figures", "--executor",
         "inprocess", "--n-mc", "16", "--n-warmup-full", "500", "--n-starts", "2"]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "regret@C" in printed and "nan" not in printed.lower()
    rec = json.loads((out / "manifest.json").read_text())["runs"]["etcada-s0"]["recommendation"]
    x = rec["x_best"]
    assert x[1] is None or isinstance(x[1], int)
    assert x[2] is None or x[2] in ("a", "b", "c")


def test_user_objectives_default_to_the_fitted_surrogate():
    user = load_objective(f"{FILE}:bowl")
    opt = CVSOptimizer(user_problem(user), "ucb-psq", 5.0)
    assert opt.surrogate == FITTED
    fixed = CVSOptimizer(user_problem(user), "ucb-psq", 5.0, config=CVSLoopConfig(
        surrogate=SurrogateConfig()))  # fmt: skip
    assert not fixed.surrogate.standardise and fixed.surrogate.refit_every == 0
