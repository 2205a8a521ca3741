"""End-to-end CLI runs of ``ev-nav bo cvs`` / ``ev-nav bo ucvs`` with tiny settings."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from ev_nav.cli import main

TINY = ["--n-mc", "8", "--n-warmup", "16", "--n-warmup-full", "64", "--n-starts", "1",
        "--executor", "inprocess"]  # fmt: skip


def test_bo_cvs_writes_results_metadata_and_figures(tmp_path, capsys):
    out = tmp_path / "cvs"
    code = main(
        ["bo", "cvs", "run", "--benchmark", "hartmann3", "--method", "ucb-psq", "etcada",
         "--costs", "expensive", "--budget", "2", "--seeds", "2", "--out", str(out), *TINY]
    )  # fmt: skip
    assert code == 0
    df = pd.read_csv(out / "results.csv")
    assert set(df["method"]) == {"ucb-psq", "etcada"} and set(df["seed"]) == {0, 1}
    assert df.groupby(["method", "seed"])["spent"].max().max() <= 2.0 + 1e-9
    meta = json.loads((out / "manifest.json").read_text())
    assert meta["config"]["benchmark"] == "hartmann3" and meta["seeds"] == [0, 1]
    assert "torch" in meta["versions"]
    assert (out / "regret.png").stat().st_size > 1000
    assert "etcada" in capsys.readouterr().out  # the summary table


def test_bo_ucvs_runs_with_hidden_costs(tmp_path):
    out = tmp_path / "ucvs"
    code = main(
        ["bo", "ucvs", "run", "--benchmark", "hartmann3", "--method", "ucvs", "--costs", "cheap",
         "--budget", "2", "--seeds", "1", "--out", str(out), "--quiet", "--no-figures", *TINY]
    )  # fmt: skip
    assert code == 0
    df = pd.read_csv(out / "results.csv")
    assert set(df["phase"]) <= {"explore", "exploit"} and df["spent"].max() <= 2.0 + 1e-9


def test_bad_variance_is_a_one_line_error(tmp_path, capsys):
    code = main(["bo", "cvs", "run", "--variance", "0.5", "--out", str(tmp_path), "--quiet", *TINY])
    assert code != 0
    err = capsys.readouterr().err
    assert err.startswith("ev-nav: error:") and "variance" in err


@pytest.mark.parametrize("family", ["cvs", "ucvs", "ptr", "boke"])
def test_bare_family_name_prints_help_and_runs_nothing(family, tmp_path, capsys, monkeypatch):
    # `ev-nav bo cvs` alone used to start the family's full default experiment (hours).
    monkeypatch.chdir(tmp_path)
    assert main(["bo", family]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: ev-nav bo {family}") and "run" in out and "report" in out
    assert "note:" not in err
    assert list(tmp_path.iterdir()) == []  # no runs/ folder, nothing started


def test_option_only_form_still_runs_with_its_note(tmp_path, capsys):
    out = tmp_path / "legacy"
    code = main(
        ["bo", "cvs", "--benchmark", "hartmann3", "--method", "etcada", "--costs", "cheap",
         "--budget", "2", "--seeds", "1", "--out", str(out), "--quiet", "--no-figures", *TINY]
    )  # fmt: skip
    assert code == 0
    assert "'ev-nav bo cvs OPTIONS' is now 'ev-nav bo cvs run OPTIONS'" in capsys.readouterr().err
    assert set(pd.read_csv(out / "results.csv")["method"]) == {"etcada"}


def test_an_option_given_at_its_default_value_is_still_the_run_alias(capsys):
    # `--executor local` is the default, but typed: the user asked for a run, not for help.
    assert main(["bo", "ptr", "--executor", "local"]) == 2
    err = capsys.readouterr().err
    assert "is now 'ev-nav bo ptr run OPTIONS'" in err and "give --benchmark" in err


@pytest.mark.parametrize("family", ["cvs", "ucvs", "ptr"])
@pytest.mark.parametrize("action", ["run", "list"])
def test_options_before_the_action_are_refused_not_dropped(family, action, tmp_path, capsys,
                                                           monkeypatch):
    # The action's parser filled in its defaults over them: `bo cvs --seeds 1 --out X run`
    # ran the default methods on 3 seeds into runs/bo/cvs, for hours.
    monkeypatch.chdir(tmp_path)
    assert main(["bo", family, "--seeds", "1", "--out", "mine", action]) == 2
    out, err = capsys.readouterr()
    assert f"options go after the action: 'ev-nav bo {family} {action} --seeds 1 --out mine" in err
    assert "Traceback" not in err and out == ""
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def test_methods_take_the_other_families_comma_form_too(tmp_path, capsys):
    # cvs took only '--method a b' (with choices), ptr and boke only '--method a,b'
    out = tmp_path / "comma"
    code = main(
        ["bo", "cvs", "run", "--benchmark", "hartmann3", "--method", "etcada,ucb-psq",
         "--costs", "cheap", "--budget", "2", "--seeds", "1", "--out", str(out), "--quiet",
         "--no-figures", *TINY]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert set(pd.read_csv(out / "results.csv")["method"]) == {"etcada", "ucb-psq"}
    assert main(["bo", "cvs", "run", "--method", "etcada,nope", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--method: unknown 'nope'; choose from ucb-psq" in err and "Traceback" not in err
    assert not (tmp_path / "x").exists()
