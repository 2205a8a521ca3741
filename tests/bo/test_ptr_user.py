"""PTR on your own objective: user coordinates everywhere, prior data, units, written outputs.

``robust`` (``user_objectives_extra.py``) has ``P_w[f(x, w) > 0] = 0.5`` for
``|x - 0.3| < 0.115`` and less elsewhere; the true PTR of every design is computed here
directly from the function, independently of the learner.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ev_nav.bo import load_objective
from ev_nav.bo.ptr import PTROptimizer
from ev_nav.bo.ptr import user_problem as ptr_problem
from ev_nav.cli import main
from ev_nav.errors import OutOfDomainError

FILE = Path(__file__).with_name("user_objectives_extra.py")


def _true_ptr(user, problem) -> np.ndarray:
    X, W = problem.designs, problem.environments
    f = np.array([[user(x, w) for w in W] for x in X])
    return (f > problem.h).mean(axis=1)


def test_prior_data_and_results_in_user_coordinates() -> None:
    user = load_objective(f"{FILE}:robust")
    problem = ptr_problem(user)
    opt = PTROptimizer(problem, "bpt-ucb", seed=0)
    prior = np.array([[0.333, -0.5], [0.9, 1.0], [0.0, -1.0]])  # the first is off the grid
    for p in prior:
        opt.tell(p, user(p[:1], p[1:]))
    ix, iw = opt.grid_point(prior[0])
    np.testing.assert_allclose(problem.designs[ix], [16 / 49])  # nearest of the 50 designs
    np.testing.assert_allclose(problem.environments[iw], [-9 / 19])  # nearest of the 20 w
    for _ in range(25):
        s = opt.ask()
        assert s.x[0] == problem.designs[s.detail["ix"]][0]  # suggestions in user units
        opt.tell(s.x, user(s.x[:1], s.x[1:]))
    r = opt.result()
    assert r.n_evaluations == 28 and r.X.shape == (28, 2)
    np.testing.assert_allclose(r.X[:3], prior)  # told points as given, not grid coordinates
    np.testing.assert_allclose(r.y, [user(x[:1], x[1:]) for x in r.X])
    assert abs(r.x_best[0] - 0.3) < 0.115 and r.value == pytest.approx(0.5, abs=0.1)
    with pytest.raises(OutOfDomainError, match="outside the grid's box"):
        opt.tell([1.5, 0.0], 0.0)
    with pytest.raises(OutOfDomainError, match="design value"):
        opt.tell([0.5], 0.0)


def _regrets(spec: str) -> np.ndarray:
    user = load_objective(f"{FILE}:{spec}")
    problem = ptr_problem(user)
    p = _true_ptr(user, problem)
    out = []
    for seed in range(5):
        opt = PTROptimizer(problem, "bpt-ucb", seed=seed)
        for _ in range(problem.n_init + 12):
            s = opt.ask()
            opt.tell(s.x, user(s.x[:1], s.x[1:]))
        out.append(p.max() - p[opt.result().detail["ix"]])
    return np.array(out)


def test_regret_does_not_depend_on_the_objective_units() -> None:
    """``robust_1e4`` is ``1e4 f + 5e4`` with ``h`` moved alike: the same PTR. Outputs are
    standardised and the hyperparameters fitted, so its regrets stay within the unscaled runs'
    inter-quartile range."""
    plain, scaled = _regrets("robust"), _regrets("robust_1e4")
    q25, q75 = np.quantile(plain, [0.25, 0.75])
    assert q25 - 1e-9 <= np.median(scaled) <= q75 + 1e-9, (plain, scaled)


def test_cli_writes_points_level_set_and_recommendation(tmp_path: Path, capsys) -> None:
    out = tmp_path / "lse"
    code = main(
        ["bo", "ptr", "run", "--objective", f"{FILE}:robust", "--method", "bpt-lse",
         "--alpha", "0.42", "-T", "15", "--trials", "1", "--out", str(out),
         "--executor", "inprocess"]
    )  # fmt: skip
    assert code == 0 and "level_set.csv" in capsys.readouterr().out
    user = load_objective(f"{FILE}:robust")
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 5 + 15 and "metric" not in rows  # a black box has no regret or F1
    np.testing.assert_allclose(
        rows["y"],
        [user(np.array([x]), np.array([w])) for x, w in zip(rows["x0"], rows["w0"], strict=True)],
    )
    level = pd.read_csv(out / "level_set.csv")
    assert len(level) == 50 and set(level["class"]) <= {"high", "low", "unclassified"}
    high = level[level["class"] == "high"]
    assert (high["ptr_mean"] >= 0.42 - 0.2).all() and not high.empty
    # the designs classified high are the true super-level set {x : PTR(x) >= 0.42} (the PTRs
    # here are multiples of 0.05, so no design sits on the level)
    truth = _true_ptr(user, ptr_problem(user)) >= 0.42
    pred = (level["class"] == "high").to_numpy()
    f1 = 2 * (pred & truth).sum() / (pred.sum() + truth.sum())
    assert f1 >= 0.9, f1
    rec = pd.read_csv(out / "recommendations.csv")
    assert abs(float(rec["x0"].iloc[0]) - 0.3) < 0.115
    meta = json.loads((out / "manifest.json").read_text())
    assert "nan" not in meta["markdown_table"].lower()
    assert main(["bo", "ptr", "report", str(out)]) == 0
    assert "nan" not in capsys.readouterr().out.lower()
