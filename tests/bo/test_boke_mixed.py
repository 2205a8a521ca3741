"""BOKE on your own objective: data from anywhere, mixed spaces, units, no regret without f*.

Objectives are in ``user_objectives_extra.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ev_nav.bo import load_objective
from ev_nav.bo.boke import BOKEOptimizer
from ev_nav.bo.boke.runner import BOKERunConfig, run_experiment, summarise
from ev_nav.bo.core.runs import ExecutionConfig
from ev_nav.cli import main
from ev_nav.errors import InvalidObservation, OutOfDomainError

FILE = Path(__file__).with_name("user_objectives_extra.py")
INPROCESS = ExecutionConfig(executor="inprocess")


def test_tell_accepts_prior_data_and_points_from_elsewhere() -> None:
    user = load_objective(f"{FILE}:bowl_known")
    opt = BOKEOptimizer(user.bounds, "boke", seed=0)
    n0 = opt.design.shape[0]
    prior = np.array([[0.0, 0.0], [1.0, 1.0], [-1.5, 2.5]])  # earlier experiments
    opt.tell(prior, [user(x) for x in prior])
    asked_design = 0
    while opt.ask().detail["step"] == "design":
        s = opt.ask()
        opt.tell(s.x, user(s.x))
        asked_design += 1
    assert asked_design == n0 - 3  # prior data counts towards the initial design
    s = opt.ask()
    elsewhere = np.array([0.4, 1.3])  # a point nobody suggested, told instead of s
    opt.tell(elsewhere, user(elsewhere))
    assert opt.steps == {}  # the proposal was not evaluated: no step counted
    s2 = opt.ask()  # recomputed with the new data
    opt.tell(s2.x, user(s2.x))
    assert sum(opt.steps.values()) == 1
    r = opt.result()
    assert r.n_evaluations == n0 + 2
    np.testing.assert_allclose(r.X[:3], prior)
    np.testing.assert_allclose(r.X[n0], elsewhere)
    assert r.value == pytest.approx(max(user(x) for x in r.X))
    with pytest.raises(OutOfDomainError, match=r"x1 = 3.5 is outside \[-1.0, 3.0\]"):
        opt.tell([0.0, 3.5], 1.0)
    with pytest.raises(InvalidObservation):
        opt.tell(prior, [1.0])


@pytest.mark.parametrize("method", ["boke", "gp-ucb"])
def test_mixed_objective_finds_integer_and_category(method: str) -> None:
    user = load_objective(f"{FILE}:mixed")
    opt = BOKEOptimizer(user.space, method, seed=0)
    for _ in range(30):
        s = opt.ask()
        assert isinstance(s.x[1], int) and 1 <= s.x[1] <= 6 and s.x[2] in ("a", "b", "c")
        opt.tell(s.x, user(s.x))
    r = opt.result()
    assert r.x_best[1] == 3 and r.x_best[2] == "b"
    assert abs(r.x_best[0] - 0.3) < 0.1 and r.value > 0.99  # the maximum is 1


def _final_regret(spec: str, methods: tuple[str, ...]) -> dict[str, list[float]]:
    cfg = BOKERunConfig(objective=spec, methods=methods, seeds=tuple(range(5)), budget=12)
    rows = summarise(run_experiment(cfg, execution=INPROCESS))
    return {r.method: [r.regret_final_q25, r.regret_final_median, r.regret_final_q75] for r in rows}


def test_regret_does_not_depend_on_the_objective_units() -> None:
    """Outputs are standardised and the GP's hyperparameters fitted: an objective times 1e4
    gives regrets (divided by 1e4) within the unscaled runs' inter-quartile range."""
    methods = ("boke", "gp-ucb")
    plain = _final_regret(f"{FILE}:bowl_known", methods)
    scaled = _final_regret(f"{FILE}:bowl_1e4", methods)
    for m in methods:
        q25, _, q75 = plain[m]
        med = scaled[m][1] / 1e4
        assert q25 - 1e-9 <= med <= q75 + 1e-9, (m, plain[m], med)


def test_cli_reports_regret_only_with_a_known_optimum(tmp_path: Path, capsys) -> None:
    common = ["--methods", "boke", "--seeds", "1", "--budget", "12", "--no-figure"]
    common += ["--executor", "inprocess", "--quiet"]
    assert main(["bo", "boke", "run", "--objective", f"{FILE}:mixed", "--out",
                 str(tmp_path / "a"), *common]) == 0  # fmt: skip
    known = capsys.readouterr().out
    assert "final regret" in known and "nan" not in known.lower()
    # the same function without a declared optimum: best values only, never a regret
    spec = tmp_path / "no_optimum.py"
    spec.write_text(
        "from ev_nav.bo import objective\n"
        "@objective(bounds=[(0.0, 1.0), (0.0, 1.0)])\n"
        "def f(x):\n    return -(x[0] - 0.2) ** 2 - x[1]\n"
    )
    assert main(["bo", "boke", "run", "--objective", f"{spec}:f", "--out", str(tmp_path / "b"),
                 *common]) == 0  # fmt: skip
    out = capsys.readouterr().out.split("results written to")[0]
    assert "regret" not in out and "best f median" in out and "nan" not in out.lower()
    summary = json.loads((tmp_path / "b" / "manifest.json").read_text())["summary"]
    assert summary[0]["regret_final_median"] is None
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in summary[0].values())
    line = [ln for ln in known.splitlines() if "best observed" in ln][0]
    x = json.loads(line.split("at x = ")[1])
    assert isinstance(x[1], int) and x[2] in ("a", "b", "c")
