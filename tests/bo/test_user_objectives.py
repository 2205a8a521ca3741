"""Every family optimises a user's own callable, from Python (ask/tell) and from the CLI
(``module:function``), and recommends a point near the function's known optimum.

Tolerances (the objectives are in ``user_objectives.py``):

* cost-varying subsets, known and unknown costs: the recommendation plays the full set and lies
  within 0.1 of the maximiser (2.5 % of the box width) in every input (see ``BUDGET``);
* PTR: the recommended design is one of the maximisers of the PTR (``|x - 0.3| < 0.115``) and
  its posterior PTR mean is within 0.1 of the maximum 0.5;
* BOKE: within 0.3 of the maximiser (7.5 % of the box width) after 40 evaluations — BOKE's
  regret falls slowly (docs/bo-boke.md), a GP baseline gets within 0.01 on the same budget.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ev_nav.bo import load_objective
from ev_nav.bo.boke import BOKEOptimizer
from ev_nav.bo.core.api import AskTell
from ev_nav.bo.cvs import CVSOptimizer
from ev_nav.bo.cvs.benchmarks import user_problem as cvs_problem
from ev_nav.bo.ptr import PTROptimizer
from ev_nav.bo.ptr import user_problem as ptr_problem
from ev_nav.cli import main
from ev_nav.errors import ConfigError

FILE = Path(__file__).with_name("user_objectives.py")
_spec = importlib.util.spec_from_file_location("_test_user_objectives", FILE)
assert _spec is not None and _spec.loader is not None
uo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uo)
FAST = ["--executor", "inprocess", "--quiet"]
#: Cost-varying subsets: budget of the Python-API runs. The fitted surrogate (standardised y,
#: marginal-likelihood refits, the user-objective default) spends UCB-PSQ's first full-set plays
#: (cost 1) across the box before it converges: 10 plays left it 0.9 from the optimum, 20 reach
#: it; the unknown-cost method plays the cheap sets and needs no more than 10.
BUDGET = {"cvs": 20.0, "ucvs": 10.0}


def _cvs_loop(family: str, method: str, cost_noise: float, seed: int = 0):
    user = load_objective(f"{FILE}:bowl")
    problem = cvs_problem(user, cost_noise_std=cost_noise)
    budget = BUDGET[family]
    opt = CVSOptimizer(problem, method, budget, family=family, bounds=user.bounds, seed=seed)
    assert isinstance(opt, AskTell)
    env = torch.Generator().manual_seed(100 + seed)
    while True:
        s = opt.ask()
        if s.detail["phase"] == "init":
            opt.tell(s.x, user(s.x))
            continue
        assert np.isnan(s.x).sum() == 2 - len(problem.control_sets[s.detail["control_set"]])
        cost = problem.costs.sample(s.detail["control_set"], env)
        if not opt.can_afford(cost):
            break
        x = opt.fill_random(s, env)  # the environment sets the inputs the learner does not
        opt.tell(x, user(x), cost=cost)
    return opt.result()


@pytest.mark.parametrize(
    ("family", "method", "noise"), [("cvs", "ucb-psq", 0.0), ("ucvs", "ucvs", 0.02)]
)
def test_cost_varying_subsets_python_api(family, method, noise):
    r = _cvs_loop(family, method, noise)
    assert r.detail["control_set"] == 2  # the full set {0, 1}
    np.testing.assert_allclose(r.x_best, uo.BOWL_OPTIMUM, atol=0.1)
    assert r.value == pytest.approx(2.0, abs=0.1)
    assert r.detail["spent"] <= BUDGET[family] + 1e-9


def test_cost_varying_subsets_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(FILE.parent)  # module:function resolves in the current folder
    out = tmp_path / "cvs"
    code = main(
        ["bo", "cvs", "run", "--objective", "user_objectives:bowl", "--method", "ucb-psq",
         "--budget", "10", "--seeds", "1", "--out", str(out), "--no-figures", "--executor",
         "inprocess", "--n-mc", "64", "--n-warmup-full", "2000"]
    )  # fmt: skip
    assert code == 0
    assert "recommended x" in capsys.readouterr().out
    rec = json.loads((out / "manifest.json").read_text())["runs"]["ucb-psq-s0"]["recommendation"]
    assert rec["control_set"] == 3
    np.testing.assert_allclose(rec["x_best"], uo.BOWL_OPTIMUM, atol=0.1)
    # unknown costs, the declared costs as means of noisy simulated costs
    out = tmp_path / "ucvs"
    code = main(
        ["bo", "ucvs", "run", "--objective", f"{FILE}:bowl", "--method", "ucvs", "--budget",
         "10", "--seeds", "1", "--out", str(out), "--no-figures", "--n-mc", "64", *FAST]
    )  # fmt: skip
    assert code == 0
    rec = json.loads((out / "manifest.json").read_text())["runs"]["ucvs-s0"]["recommendation"]
    np.testing.assert_allclose(rec["x_best"], uo.BOWL_OPTIMUM, atol=0.1)


def _in_robust_optima(x: float) -> bool:
    return uo.ROBUST_OPTIMA[0] < x < uo.ROBUST_OPTIMA[1]


def test_ptr_python_api():
    user = load_objective(f"{FILE}:robust")
    problem = ptr_problem(user)
    X, W = problem.info["design_points"], problem.info["environment"]
    opt = PTROptimizer(problem, "bpt-ucb", seed=0)
    for _ in range(problem.n_init + 20):
        s = opt.ask()
        opt.tell(s.x, user(X[s.detail["ix"]], W[s.detail["iw"]]))
    r = opt.result()
    assert _in_robust_optima(float(r.x_best[0])) and r.value == pytest.approx(0.5, abs=0.1)
    assert r.n_evaluations == problem.n_init + 20


def test_ptr_cli(tmp_path, capsys):
    out = tmp_path / "ptr"
    code = main(
        ["bo", "ptr", "run", "--objective", f"{FILE}:robust", "--method", "bpt-ucb,bpt-ts",
         "-T", "20", "--trials", "1", "--out", str(out), "--executor", "inprocess"]
    )  # fmt: skip
    assert code == 0
    assert "recommended design" in capsys.readouterr().out
    runs = json.loads((out / "manifest.json").read_text())["runs"]
    for rid in ("bpt-ucb-s0", "bpt-ts-s0"):
        assert _in_robust_optima(runs[rid]["recommendation"]["x_best"][0]), rid


def test_boke_python_api():
    user = load_objective(f"{FILE}:bowl")
    for method, tol in (("boke", 0.3), ("gp-ucb", 0.01)):
        opt = BOKEOptimizer(user.bounds, method, seed=0)
        for _ in range(40):
            s = opt.ask()
            assert np.all((s.x >= user.lower) & (s.x <= user.upper))
            opt.tell(s.x, user(s.x))
        r = opt.result()
        np.testing.assert_allclose(r.x_best, uo.BOWL_OPTIMUM, atol=tol)
        assert r.value == pytest.approx(user(r.x_best))


def test_boke_cli(tmp_path, capsys):
    """The CLI's run for seed s is the Python API's ``BOKEOptimizer(bounds, method, seed=s)``
    (the same queries, whatever the objective file is called or where it lies), so it meets the
    API test's tolerance by the same computation, not by the luck of a path."""
    out = tmp_path / "boke"
    code = main(
        ["bo", "boke", "run", "--objective", f"{FILE}:bowl", "--methods", "boke", "--seeds", "1",
         "--budget", "40", "--out", str(out), "--no-figure", *FAST]
    )  # fmt: skip
    assert code == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if "best observed" in ln][0]
    x = np.array(json.loads(line.split("at x = ")[1]))
    np.testing.assert_allclose(x, uo.BOWL_OPTIMUM, atol=0.3)
    user = load_objective(f"{FILE}:bowl")
    opt = BOKEOptimizer(user.bounds, "boke", seed=0)
    for _ in range(40):
        s = opt.ask()
        opt.tell(s.x, user(s.x))
    rows = pd.read_csv(out / "results.csv")
    assert set(rows["benchmark"]) == {"user_objectives:bowl"}  # no folder in the results
    np.testing.assert_allclose(user.from_unit(rows[["x0", "x1"]].to_numpy()), opt.result().X)
    np.testing.assert_array_equal(rows["y"].to_numpy(), opt.result().y)


def _boke_from(folder: Path, out: Path) -> pd.DataFrame:
    """Copy the objective file into ``folder`` and run BOKE there, naming the file by its path."""
    objective_file = folder / FILE.name
    objective_file.write_bytes(FILE.read_bytes())
    code = main(
        ["bo", "boke", "run", "--objective", f"{objective_file}:bowl", "--methods", "boke,boke+",
         "--seeds", "2", "--seed", "3", "--budget", "15", "--out", str(out), "--no-figure", *FAST]
    )  # fmt: skip
    assert code == 0
    return pd.read_csv(out / "results.csv")


def test_boke_cli_results_do_not_depend_on_the_folder(tmp_path, monkeypatch):
    """The same objective run from two folders (paths of different lengths) gives identical
    results: no seed derives from the path. Only the measured acquisition CPU may differ."""
    short, long = tmp_path / "a", tmp_path / ("a-much-longer-folder-name" * 4) / "nested" / "b"
    tables = []
    for i, folder in enumerate((short, long)):
        folder.mkdir(parents=True)
        monkeypatch.chdir(folder)
        tables.append(_boke_from(folder, tmp_path / f"out{i}"))
    a, b = (t.drop(columns="acq_cpu") for t in tables)
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert sorted(set(a["seed"])) == [3, 4] and set(a["benchmark"]) == {"user_objectives:bowl"}
    assert len(a) == 2 * 2 * 15
    runs = [
        json.loads((tmp_path / f"out{i}" / "manifest.json").read_text())["runs"] for i in (0, 1)
    ]
    assert runs[0] == runs[1]


def test_objective_errors_are_one_line(tmp_path, capsys):
    for spec, what in (
        ("user_objectives", "module:function"),
        (f"{FILE}:nope", "no function"),
        (f"{FILE}:undeclared", "declares no bounds"),
        ("no_such_module_xyz:f", "cannot import"),
    ):
        with pytest.raises(ConfigError, match=what):
            load_objective(spec)
    code = main(
        ["bo", "boke", "run", "--objective", f"{FILE}:undeclared", "--out", str(tmp_path), *FAST]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("ev-nav: error:") and err.count("\n") == 1
    # an objective that cannot be run is the configuration's error, found before any run: not
    # "4 of 4 runs failed (first: …; traceback in …)" with a folder of failed runs to clean up
    for family, spec, what, budget in (
        ("boke", f"{FILE}:undeclared", "declares no bounds", ["--budget", "5"]),
        ("boke", "no_such_module_xyz:f", "cannot import no_such_module_xyz", ["--budget", "5"]),
        ("cvs", f"{FILE}:robust", "declare control_sets", ["--budget", "5"]),
        ("ptr", f"{FILE}:bowl", "PTR needs environment", ["--method", "bpt-ucb", "-T", "3"]),
    ):
        out = tmp_path / f"{family}-{spec.rsplit(':', 1)[1]}"
        code = main(["bo", family, "run", "--objective", spec, *budget, "--out", str(out),
                     *FAST])
        assert code == 2
        err = capsys.readouterr().err
        assert err.startswith("ev-nav: error:") and err.count("\n") == 1, err
        assert what in err and "runs failed" not in err and "traceback" not in err, err
        assert not (out / "runs").exists()
    # bounds given on the command line replace a missing declaration
    user = load_objective(f"{FILE}:undeclared", bounds=[[0, 2]])
    assert user.bounds == ((0.0, 2.0),) and user(np.array([1.5])) == 1.5


@pytest.mark.parametrize(
    ("override", "points", "fragment"),
    [
        ({"environment": []}, None, "the environment grid needs at least one point"),
        ({"threshold": float("nan")}, None, "threshold must be a finite number"),
        ({"threshold": "high"}, None, "threshold must be a finite number, got 'high'"),
        ({"weights": [1e400] + [1.0] * 19}, None, "one non-negative weight per environment"),
        ({}, 0, "points per axis must be a whole number >= 2, got 0"),
        ({}, -1, "points per axis must be a whole number >= 2, got -1"),
    ],
)
def test_ptr_user_problem_refuses_what_it_cannot_run(override, points, fragment):
    # an empty grid was a ZeroDivisionError, a NaN threshold a run that recommended an arbitrary
    # point, 0 points per axis the default grid and -1 a traceback of the grid's sampler
    user = load_objective(f"{FILE}:robust").with_overrides(**override)
    with pytest.raises(ConfigError, match=fragment):
        ptr_problem(user, points_per_axis=points)


def test_an_error_of_the_objective_itself_keeps_its_type_and_line():
    # a ValueError raised in the user's function was reported as "did not return a number",
    # without the line of the user's code that raised it
    import traceback

    from ev_nav.bo.core.objective import UserObjective

    def buggy(x):
        raise ValueError("user bug")

    user = UserObjective(buggy, ((0.0, 1.0),), "buggy")
    with pytest.raises(ValueError, match="user bug") as info:
        user(np.array([0.5]))
    assert not isinstance(info.value, ConfigError)
    assert 'raise ValueError("user bug")' in "".join(traceback.format_tb(info.tb))
    user = UserObjective(lambda x: "many", ((0.0, 1.0),), "words")  # still its own error
    with pytest.raises(ConfigError, match="did not return a number"):
        user(np.array([0.5]))


def test_a_resumed_run_is_made_by_the_objectives_code_not_its_name(tmp_path, monkeypatch):
    """A rerun with more seeds after the objective was edited mixed the old function's runs
    with the new one's in one table; the same file named another way ('./f.py:bowl' against
    'f:bowl') was refused as another configuration."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_bytes(FILE.read_bytes())
    out = tmp_path / "out"
    run = ["bo", "boke", "run", "--methods", "boke", "--budget", "6", "--out", str(out),
           "--no-figure", *FAST]
    assert main([*run, "--objective", "mine:bowl", "--seeds", "1"]) == 0
    assert main([*run, "--objective", "./mine.py:bowl", "--seeds", "2"]) == 0
    outcomes = json.loads((out / "manifest.json").read_text())["outcomes"]
    assert sorted(outcomes.values()) == ["done", "skipped"]  # seed 0 reused under its new name
    source = (tmp_path / "mine.py").read_text()
    (tmp_path / "mine.py").write_text(source.replace("(x[0] - 0.5)", "(x[0] - 1.5)"))
    with pytest.raises(ConfigError, match="of your objective before it was edited; use another "
                       "output folder or --no-resume"):
        from ev_nav.bo.boke.runner import BOKERunConfig, run_experiment
        from ev_nav.bo.core.runs import ExecutionConfig

        run_experiment(BOKERunConfig(methods=("boke",), seeds=(0, 1, 2), budget=6,
                                     objective="mine:bowl"),
                       out, ExecutionConfig(executor="inprocess"))
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "mine_bowl-boke-s0", "mine_bowl-boke-s1"]  # nothing run or written


@pytest.mark.parametrize(("argv", "fragment"), [
    (["boke", "run", "--objective", f"{FILE}:bowl", "--budget", "5", "--bounds", "[1, 2]"],
     "--bounds: bounds must be a list of (lower, upper) pairs"),
    (["cvs", "run", "--objective", f"{FILE}:bowl", "--budget", "1", "--control-sets", "[1]"],
     "--control-sets is a list of lists of 0-based input indices"),
    (["cvs", "run", "--objective", f"{FILE}:bowl", "--budget", "1", "--control-sets",
      '[["a"]]'], "--control-sets is a list of lists of 0-based input indices"),
    (["ptr", "run", "--objective", f"{FILE}:robust", "--method", "bpt-ucb", "-T", "3",
      "--environment", '[["a"]]'], "the environment grid needs at least one point"),
    (["ptr", "run", "--objective", f"{FILE}:robust", "--method", "bpt-ucb", "-T", "3",
      "--weights", '["x"]'], "one non-negative weight per environment"),
    (["cvs", "run", "--benchmark", "hartmann3", "--method", "ucb-psq", "--budget", "inf"],
     "--budget must be a number > 0, got inf"),
    (["cvs", "run", "--benchmark", "hartmann3", "--method", "etcada", "--budget", "1",
      "--ada-scale", "-1"], "ada_scale must be a number > 0, got -1.0"),
    (["cvs", "run", "--benchmark", "hartmann3", "--method", "ucb-psq", "--budget", "1",
      "--beta", "nan"], "beta must be a number >= 0, got nan"),
    (["cvs", "run", "--benchmark", "hartmann3", "--method", "ucb-psq", "--budget", "1",
      "--lengthscale", "nan"], "lengthscale must be a number > 0, got nan"),
    (["ucvs", "run", "--costs", "moderate", "--method", "ucvs", "--budget", "1",
      "--cost-noise", "nan"], "cost noise sd must be a number >= 0, got nan"),
    (["ucvs", "run", "--costs", "moderate", "--method", "ucvs", "--budget", "1",
      "--cost-noise", "-0.5"], "cost noise sd must be a number >= 0, got -0.5"),
    (["ucvs", "run", "--costs", "moderate", "--method", "etc50", "--budget", "1",
      "--etc-quota", "0"], "etc_quota must be a whole number >= 1, got 0"),
    (["boke", "run", "--objective", f"{FILE}:bowl", "--budget", "5", "--varsigma", "nan"],
     "varsigma must be a number >= 0, got nan"),
    (["cvs", "run", "--benchmark", "hartmann3", "--costs", "0.1,0.2", "--seeds", "1"],
     "2 costs for the 7 control sets of hartmann3; give 7"),
    (["cvs", "run", "--benchmark", "hartmann3", "--variance", "2", "--seeds", "1", "--budget",
      "1"], "variance 2.0 is not reachable by a normal truncated to [0,1]"),
    (["ptr", "run", "--benchmark", "himmelblau", "--method", "bpt-lse", "--alpha", "1.5", "-T",
      "5", "--trials", "1"], "alpha must be a number > 0 and < 1, got 1.5"),
    (["boke", "run", "--objective", f"{FILE}:robust", "--budget", "10", "--seeds", "1"],
     "robust takes (x, w), but BOKE calls f(x) (f(x, w) is PTR's form)"),
    (["cvs", "run", "--objective", f"{FILE}:robust", "--control-sets", "[[0]]", "--costs", "0.1",
      "--budget", "1", "--seeds", "1"],
     "robust takes (x, w), but the cost-varying family calls f(x)"),
    (["ptr", "run", "--objective", f"{FILE}:bowl", "--environment", "[[0.0], [1.0]]",
      "--threshold", "0", "--method", "bpt-ucb", "-T", "3", "--trials", "1"],
     "bowl takes (x), but PTR calls f(x, w)"),
])
def test_malformed_or_meaningless_run_options_are_one_line(tmp_path, capsys, argv, fragment):
    """Each was a traceback (the JSON shapes) or a run of no meaning: --budget inf never ended,
    a NaN cost noise made no evaluation, a negative one acted as positive, --ada-scale -1 and
    --etc-quota 0 explored nothing, a NaN beta or varsigma ran with it. A cost count that does
    not match the benchmark's control sets, an unreachable variance, an LSE level outside
    (0, 1) and an objective the family cannot call failed inside every run (an error.txt per
    run) after the runs had started."""
    code = main(["bo", *argv, "--out", str(tmp_path / "o"), *FAST])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("ev-nav: error:") and err.count("\n") == 1, err
    assert fragment in err, err
    assert not (tmp_path / "o" / "runs").exists()


def test_report_of_another_familys_folder_says_so(tmp_path, capsys):
    """Each family's report on another's folder was a KeyError or AttributeError traceback."""
    folders = {"boke": tmp_path / "bk", "ptr": tmp_path / "pt"}
    assert main(["bo", "boke", "run", "--objective", f"{FILE}:bowl", "--methods", "boke",
                 "--seeds", "1", "--budget", "4", "--out", str(folders["boke"]), "--no-figure",
                 *FAST]) == 0
    assert main(["bo", "ptr", "run", "--benchmark", "mccormick", "--method", "bpt-ucb", "-T",
                 "2", "-n", "1", "--out", str(folders["ptr"]), "--no-figures", *FAST]) == 0
    capsys.readouterr()
    for family, folder in (("cvs", folders["boke"]), ("ptr", folders["boke"]),
                           ("boke", folders["ptr"]), ("cvs", folders["ptr"])):
        code = main(["bo", family, "report", str(folder)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert f"holds no results of 'ev-nav bo {family if family != 'cvs' else 'cvs/ucvs'} " \
               "run'" in err, err
    for family, folder in folders.items():  # their own reports still read them
        assert main(["bo", family, "report", str(folder)]) == 0


def test_a_folder_of_another_familys_experiment_is_refused_before_anything_runs(
    tmp_path, capsys
):
    """A BOKE (or PTR, UCVS) experiment written into a CVS experiment's folder replaced its
    results.csv and manifest.json (exit 0), left the CVS figures beside them and broke
    ``bo cvs report``; more seeds of the same family still reuse the finished runs."""
    out = tmp_path / "x"
    cvs = ["bo", "cvs", "run", "--objective", f"{FILE}:bowl", "--method", "etcada", "--budget",
           "2", "--n-mc", "16", "--n-warmup-full", "200", "--n-starts", "1", "--out", str(out),
           *FAST]  # fmt: skip
    assert main([*cvs, "--seeds", "1", "--no-figures"]) == 0
    before = {p: (out / p).read_bytes() for p in ("results.csv", "manifest.json")}
    others = {
        "boke": ["boke", "run", "--benchmark", "forrester", "--methods", "random", "--budget",
                 "8", "--seeds", "1", "--no-figure"],
        "ptr": ["ptr", "run", "--benchmark", "mccormick", "--method", "bpt-ucb", "-T", "2",
                "-n", "1", "--no-figures"],
        "ucvs": ["ucvs", "run", "--objective", f"{FILE}:bowl", "--method", "ucvs", "--budget",
                 "2", "--seeds", "1", "--no-figures"],
    }  # fmt: skip
    for family, argv in others.items():
        capsys.readouterr()
        code = main(["bo", *argv, "--out", str(out), *FAST])
        err = capsys.readouterr().err
        assert code == 2 and err.startswith("ev-nav: error:") and err.count("\n") == 1, err
        assert f"holds the results of 'ev-nav bo cvs run'; 'ev-nav bo {family} run' would " \
               "replace them" in err, err  # fmt: skip
        assert {p: (out / p).read_bytes() for p in before} == before, family
        assert sorted(p.name for p in (out / "runs").iterdir()) == ["etcada-s0"], family
    # a manifest of an earlier ev-nav (no "family" entry) is recognised by its config's shape
    meta = json.loads(before["manifest.json"])
    assert meta.pop("family") == "cvs"
    (out / "manifest.json").write_text(json.dumps(meta))
    assert main(["bo", *others["boke"], "--out", str(out), *FAST]) == 2
    assert "holds the results of 'ev-nav bo cvs run'" in capsys.readouterr().err
    # the same family: a second seed reuses the first, whose rows stay byte-identical
    assert main([*cvs, "--seeds", "2", "--no-figures"]) == 0
    first = before["results.csv"].decode().splitlines()
    assert (out / "results.csv").read_text().splitlines()[: len(first)] == first
    assert main(["bo", "cvs", "report", str(out)]) == 0
