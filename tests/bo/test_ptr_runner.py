"""Runner, methods, CLI and the EV application: determinism, orderings, files, errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ev_nav.bo.core.runs import ExecutionConfig
from ev_nav.bo.ptr.ev import EVReserveConfig, ev_problem, run_ev_reserve
from ev_nav.bo.ptr.problems import make_problem
from ev_nav.bo.ptr.registry import LSE_METHODS, OPT_METHODS, PTRMethodConfig, make_policy
from ev_nav.bo.ptr.runner import (
    PTRRunConfig,
    f1_score,
    load_results,
    merge_results,
    results_table,
    run_experiment,
    run_trial,
    save_results,
)
from ev_nav.cli import main
from ev_nav.errors import ConfigError

IN_PROCESS = ExecutionConfig(executor="inprocess")


def policy(name: str, **settings):
    """A registered PTR method with the given settings (alpha, beta, m, eta)."""
    return make_policy(name, PTRMethodConfig(**settings))


def test_f1_convention():
    t = np.array([True, True, False, False])
    assert f1_score(np.array([True, False, False, False]), t) == pytest.approx(2 / 3)
    assert f1_score(np.zeros(4, bool), np.zeros(4, bool)) == 1.0
    assert f1_score(np.zeros(4, bool), t) == 0.0


@pytest.mark.parametrize("method", ["bpt-ucb", "bpt-ts", "bqo-ts", "stableopt", "rs"])
def test_same_seed_same_queries(method):
    prob = make_problem("mccormick")
    a = run_trial(prob, policy(method), 15, seed=7)
    b = run_trial(prob, policy(method), 15, seed=7)
    c = run_trial(prob, policy(method), 15, seed=8)
    np.testing.assert_array_equal(a.queries, b.queries)
    np.testing.assert_array_equal(a.metric, b.metric)
    assert not np.array_equal(a.queries, c.queries)


def test_every_method_runs_and_reports_valid_answers():
    prob = make_problem("himmelblau")
    for name in OPT_METHODS:
        r = run_trial(prob, policy(name), 6, seed=1)
        assert np.all((r.metric >= 0) & (r.metric <= 1))
        assert r.queries.min() >= 0 and r.queries[:, 1].max() < 50
    for name in LSE_METHODS:
        r = run_trial(prob, policy(name, alpha=0.8), 6, seed=1)
        assert np.all((r.metric >= 0) & (r.metric <= 1))


def test_gp_ucb_and_lse_query_only_the_mean_environment():
    prob = make_problem("mccormick")
    r = run_trial(prob, policy("gp-ucb"), 10, seed=0)
    assert set(r.queries[:, 1]) == {prob.ew_index}
    stable = run_trial(prob, policy("stableopt"), 10, seed=0)
    assert set(stable.queries[:, 1]) <= set(prob.delta_indices)


def test_mccormick_bpt_ucb_beats_gp_ucb_and_bqo_ucb():
    """Short version of spec §6.5 (the full check is in scripts/reproduce_ptr.py)."""
    res = {
        m: run_experiment(PTRRunConfig("mccormick", m, 30, 3), execution=IN_PROCESS).mean_se()[0]
        for m in ("bpt-ucb", "gp-ucb", "bqo-ucb")
    }
    assert res["bpt-ucb"][-1] <= 0.01
    assert res["bpt-ucb"][-1] < res["gp-ucb"][-1]
    assert res["bpt-ucb"][-1] < res["bqo-ucb"][-1]


def test_faithful_bpt_lse_terminates_and_carries_estimate():
    prob = make_problem("himmelblau")
    r = run_trial(prob, policy("bpt-lse-stop", alpha=0.8), 80, seed=0)
    assert r.stopped_at is not None and r.stopped_at == r.first_classified
    k = r.stopped_at
    assert np.all(r.queries[k:] == -1)
    assert np.all(r.metric[k - 1 :] == r.metric[k - 1])


def test_lse_method_without_alpha_is_a_config_error():
    with pytest.raises(ConfigError, match="alpha"):
        policy("bpt-lse")
    with pytest.raises(ConfigError, match="unknown ptr method"):
        policy("bpt-foo")


def test_cli_writes_results_and_figure(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(
        [
            "bo", "ptr", "run", "--benchmark", "mccormick", "--method", "bpt-ucb,rs",
            "--iterations", "5", "--trials", "2", "--out", str(out), "--executor", "inprocess",
        ]
    )  # fmt: skip
    assert code == 0
    table = capsys.readouterr().out
    assert "bpt-ucb" in table and "rs" in table
    rows = pd.read_csv(out / "results.csv")
    assert list(dict.fromkeys(rows["method"])) == ["bpt-ucb", "rs"]
    assert rows.groupby("method")["seed"].nunique().tolist() == [2, 2] and rows["t"].max() == 5
    meta = json.loads((out / "manifest.json").read_text())
    assert meta["seeds"] == [0, 1] and [c["method"] for c in meta["config"]] == ["bpt-ucb", "rs"]
    assert "torch" in meta["versions"]
    assert (out / "curves.png").stat().st_size > 1000


def test_methods_in_another_order_reuse_their_trials(tmp_path, capsys):
    """The run ids held each method's position in the list: 'rs,bpt-ucb' after 'bpt-ucb,rs'
    recomputed all four trials beside the old ones. A folder written with those ids is
    adopted (its trials renamed), and the reloaded results are the same."""
    out = tmp_path / "run"
    base = ["bo", "ptr", "run", "--benchmark", "mccormick", "-T", "4", "-n", "2", "--out",
            str(out), "--executor", "inprocess", "--quiet", "--no-figures"]
    assert main([*base, "--method", "bpt-ucb,rs"]) == 0
    first = {r.config.method: r.metric for r in load_results(out)}
    assert main([*base, "--method", "rs,bpt-ucb"]) == 0
    meta = json.loads((out / "manifest.json").read_text())
    assert set(meta["outcomes"].values()) == {"skipped"}
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "bpt-ucb-s0", "bpt-ucb-s1", "rs-s0", "rs-s1"]
    for r in load_results(out):
        np.testing.assert_array_equal(r.metric, first[r.config.method])
    # a folder of an earlier version: trials named by position
    for name in ("bpt-ucb-s0", "bpt-ucb-s1"):
        (out / "runs" / name).rename(out / "runs" / f"00-{name}")
    for name in ("rs-s0", "rs-s1"):
        (out / "runs" / name).rename(out / "runs" / f"01-{name}")
    assert main([*base, "--method", "bpt-ucb,rs"]) == 0
    meta = json.loads((out / "manifest.json").read_text())
    assert set(meta["outcomes"].values()) == {"skipped"}
    assert sorted(p.name for p in (out / "runs").iterdir())[0] == "bpt-ucb-s0"


@pytest.mark.parametrize(("option", "fragment"), [
    (["--threshold", "nan"], "threshold is for a user objective: give it"),
    (["--environment", "[1, 2]"], "environment is for a user objective"),
    (["--beta", "nan"], "beta must be a number >= 0, got nan"),
    (["--beta", "-2"], "beta must be a number >= 0, got -2.0"),
    (["--m", "nan"], "m (the moment order) must be a number >= 2, got nan"),
    (["--n-init", "-2"], "n_init must be a whole number >= 0, got -2"),
])
def test_run_options_that_would_be_ignored_or_meaningless(capsys, option, fragment):
    """Each ran: options of a user objective were ignored with a benchmark, NaN settings gave a
    run labelled 'β=nan'."""
    code = main(["bo", "ptr", "run", "--benchmark", "mccormick", "--method", "bpt-ucb", "-T",
                 "3", "-n", "1", "--executor", "inprocess", "--quiet", *option])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and fragment in err, err


def test_cli_errors_are_one_line(capsys):
    code = main(["bo", "ptr", "run", "--benchmark", "mccormick", "--method", "nope"])
    assert code != 0
    assert "unknown ptr method" in capsys.readouterr().err
    code = main(["bo", "ptr", "run", "--benchmark", "mccormick", "--method", "bpt-ucb,bpt-lse"])
    assert code != 0


def test_newsvendor_small_run_fits_hyperparameters():
    prob = make_problem("newsvendor", x_step=10, n_w_axis=3, reps_true=30, reps_query=10)
    r = run_trial(prob, policy("bpt-ts"), 4, seed=0)
    assert r.optimizer is not None
    gp = r.optimizer.gp
    assert gp.n == prob.n_init + 4
    assert gp.kernel.kind == "matern52"
    assert gp.kernel.lengthscale != prob.kernel.lengthscale  # refitted
    assert np.all((r.metric >= 0) & (r.metric <= 1))


def test_ev_application_finds_the_safe_speed_caps():
    cfg = EVReserveConfig(iterations=40)
    prob = ev_problem(cfg)
    p = prob.p_true
    assert np.all(np.diff(p) <= 1e-12)  # faster caps are never more likely to keep the reserve
    assert 1 <= np.sum(p >= cfg.alpha) < prob.n_x
    rep = run_ev_reserve(cfg)
    assert rep.simulations == cfg.n_init + 40 < rep.exhaustive
    assert rep.f1 >= 0.9
    assert "safe menu" in rep.text()
    with pytest.raises(ConfigError):
        EVReserveConfig(alpha=1.5)


@pytest.mark.parametrize(
    ("option", "fragment"),
    [
        (["--iterations", "-3"], "iterations must be >= 0"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--reserve-kwh", "-1"], "reserve must be >= 0 kWh"),
        (["--start-kwh", "0"], "energy at departure must be in (0, 35] kWh"),
        (["--start-kwh", "1000"], "energy at departure must be in (0, 35] kWh"),
        (["--ambient-c", "500"], "ambient temperature must be in -60..60 °C"),
    ],
)
def test_ptr_ev_bad_options_are_one_line(capsys, option, fragment):
    """--iterations -3 and --threads 0 were tracebacks; a negative reserve, an empty battery
    and 500 °C ran and printed a study of them."""
    code = main(["bo", "ptr-ev", "--quiet", *option])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and fragment in err


def test_uncontrollable_w_extension_draws_environments_from_p():
    cfg = PTRRunConfig("mccormick", "bpt-ucb", 40, 1, uncontrollable_w=True)
    res = run_experiment(cfg, execution=IN_PROCESS)
    prob = make_problem("mccormick")
    w = res.trials[0].queries[:, 1]
    # Gam-w gives w = -1 zero weight: never drawn, unlike the eq. 4 choice which may pick it.
    assert prob.p_w[w].min() > 0
    # The draws follow p(w): the mean index is near E[w]'s index (loose, 40 draws).
    assert abs(w.mean() - prob.p_w @ np.arange(prob.n_w)) < 4


def test_merge_results_concatenates_trials(tmp_path):
    a = run_experiment(PTRRunConfig("mccormick", "rs", 4, 2, seed=0), execution=IN_PROCESS)
    b = run_experiment(PTRRunConfig("mccormick", "rs", 4, 3, seed=2), execution=IN_PROCESS)
    save_results([a], tmp_path / "a")
    merged = merge_results([load_results(tmp_path / "a"), [b]])
    assert [t.seed for t in merged[0].trials] == [0, 1, 2, 3, 4]
    full = run_experiment(PTRRunConfig("mccormick", "rs", 4, 5, seed=0), execution=IN_PROCESS)
    np.testing.assert_array_equal(merged[0].metric, full.metric)


def test_theory_beta_schedule_is_more_conservative():
    const = run_experiment(PTRRunConfig("himmelblau", "bpt-lse", 50, 2), execution=IN_PROCESS)
    theory = run_experiment(
        PTRRunConfig("himmelblau", "bpt-lse", 50, 2, beta_schedule="theory"),
        execution=IN_PROCESS,
    )
    # Wider intervals classify later: fewer designs in H-hat early on.
    assert theory.metric[:, 49].mean() < const.metric[:, 49].mean()
    with pytest.raises(ConfigError, match="theory"):
        PTRRunConfig("mccormick", "gp-ucb", beta_schedule="theory")


def test_standard_error_of_one_trial_is_unknown_not_zero():
    """Trials' SE is the sample sd over sqrt(trials); a single trial's was shown as ± 0.000."""
    three = run_experiment(PTRRunConfig("mccormick", "bpt-ucb", 4, 3), execution=IN_PROCESS)
    _, se = three.mean_se()
    np.testing.assert_allclose(se, three.metric.std(0, ddof=1) / np.sqrt(3))
    one = run_experiment(PTRRunConfig("mccormick", "bpt-ucb", 4, 1), execution=IN_PROCESS)
    assert np.isnan(one.mean_se()[1]).all()
    table = results_table([one])
    assert "± n/a" in table and "± 0.000" not in table and "nan" not in table
