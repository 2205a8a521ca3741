"""The paper-reproduction scripts run end to end in their --quick form (issue 4)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from ev_nav.sim.experiments import fig2_specs, fig3_specs, fig45_specs

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(script, *args, env):
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *map(str, args)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout


def _run_configs(out):
    """The ``config`` of every run folder the script left in ``out``."""
    paths = sorted((out / "runs").glob("*/metadata.json"))
    assert paths
    return [json.loads(p.read_text())["config"] for p in paths]


def _assert_paper_world_exact(configs):
    """Every run in the paper's world (Fig. 2's paper grid), GP agents on the exact learner."""
    paper_world = fig2_specs(horizon=1, seeds=[0])[0]
    for c in configs:
        assert c["truth"]["kind"] == paper_world.truth.kind == "gp"
        assert c["truth"]["optimum"] == paper_world.truth.optimum == "rectified"
        assert c["agent"]["rectification"] == paper_world.agent.rectification == "paper"
        if c["agent"]["model"] == "gp":
            assert c["agent"]["learner"] == "exact"
            assert not c["agent"]["name"] or c["agent"]["name"].startswith("GP-")


def test_reproduction_scripts_quick(tmp_path):
    env = {**os.environ, "EV_NAV_TRUTH_CACHE": str(tmp_path / "truth")}
    out2 = tmp_path / "fig2"
    text = _run(
        "reproduce_fig2.py", "--quick", "--quiet", "--executor", "inprocess", "--out", out2, env=env
    )
    summary = pd.read_csv(out2 / "summary.csv")
    assert len(summary) == 6 and set(summary["network"]) == {"monaco"}
    assert (out2 / "regret.png").stat().st_size > 10_000
    assert "GP-TS" in text and "0 failed" in text

    # a run folder left by an older spec of the same cell (another run id) is named and left out
    # of the report instead of being averaged in as a second seed; finished runs are reused
    old = next((out2 / "runs").glob("*_BI-TS_s0_*"))
    shutil.copytree(old, out2 / "runs" / (old.name.rsplit("_", 1)[0] + "_0ld5pec0"))
    text = _run(
        "reproduce_fig2.py", "--quick", "--quiet", "--executor", "inprocess", "--out", out2,
        "--agents", "BI-TS", env=env,
    )  # fmt: skip
    assert "left out of the report" in text and "_0ld5pec0" in text
    again = pd.read_csv(out2 / "summary.csv")
    assert len(again) == 6 and (again["runs"] == 1).all()
    # report only: runs nothing, reports what is finished (the documented way was '--agents
    # none', refused since filters naming nothing became errors)
    (out2 / "summary.csv").unlink()
    grid = (out2 / "grid.json").read_bytes()
    text = _run("reproduce_fig2.py", "--quick", "--quiet", "--report-only", "--out", out2,
                env=env)
    assert "fig2: report only" in text
    assert len(pd.read_csv(out2 / "summary.csv")) == 6
    assert (out2 / "grid.json").read_bytes() == grid  # the grid's record is left as it was

    out69 = tmp_path / "fig69"
    _run("reproduce_fig69.py", "--runs", out2, "--out", out69, "--no-html", env=env)
    assert len(list(out69.glob("*.png"))) == 6

    out3 = tmp_path / "fig3"
    _run(
        "reproduce_fig3.py", "--quick", "--quiet", "--executor", "inprocess", "--out", out3, env=env
    )
    assert (out3 / "sqrt_beta_monaco.png").is_file()
    assert len(pd.read_csv(out3 / "summary.csv")) == 4
    _assert_paper_world_exact(_run_configs(out3))  # the exact learner unless --learner svgp

    out45 = tmp_path / "fig45"
    _run(
        "reproduce_fig45.py",
        "--quick",
        "--quiet",
        "--executor",
        "inprocess",
        "--out",
        out45,
        env=env,
    )
    table = pd.read_csv(out45 / "final_vs_lengthscale.csv")
    assert sorted(table["lengthscale"].unique()) == [0.1, 0.5]
    # a cell of one seed has no standard error (it read 0)
    assert table.loc[table["count"] == 1, "se"].isna().all()
    assert (out45 / "final_vs_lengthscale.png").is_file()
    assert (out45 / "regret_by_lengthscale.png").is_file()  # Fig. 4: one curve per ℓ
    configs = _run_configs(out45)
    _assert_paper_world_exact(configs)
    assert {c["truth"]["lengthscale"] for c in configs} == {0.1, 0.5}  # the truth's ℓ is swept
    assert all(c["agent"]["lengthscale"] == c["truth"]["lengthscale"] for c in configs)


def test_fig3_fig45_specs_learner_choice():
    """``learner="svgp"`` keeps the paper's Algorithm 3, labelled SVGP-… like Fig. 2's."""
    exact3 = fig3_specs(horizon=1, seeds=[0])
    svgp3 = fig3_specs(horizon=1, seeds=[0], learner="svgp")
    assert {s.agent.learner for s in exact3 if s.agent.model == "gp"} == {"exact"}
    assert {s.agent.learner for s in svgp3} == {"svgp"}
    assert sorted(s.agent.label for s in svgp3[:4]) == [
        "SVGP-BUCB (w=1, xi=0.5)", "SVGP-BUCB (w=1, xi=1)", "SVGP-UCB", "SVGP-UCB (beta x0.5)"
    ]  # fmt: skip
    assert not {s.run_id for s in exact3} & {s.run_id for s in svgp3}
    exact45 = fig45_specs(lengthscales=[0.5], horizon=1, seeds=[0])
    svgp45 = fig45_specs(lengthscales=[0.5], horizon=1, seeds=[0], learner="svgp")
    gp = [s.agent.label for s in svgp45 if s.agent.model == "gp"]
    assert gp and all(label.startswith("SVGP-") for label in gp)
    # BI has no learner: its runs are shared between the two grids, GP runs are not
    ids = {s.run_id for s in exact45} & {s.run_id for s in svgp45}
    assert ids == {s.run_id for s in exact45 if s.agent.model == "bi"}


def test_reproduction_filters_refuse_names_of_no_run(tmp_path):
    # --agents/--networks naming nothing of the run used to run nothing and still write an empty
    # report; --horizon 0 silently ran the default horizon.
    for args, words in (
        (("--agents", "GP-TZ"), "--agents names no agent of this run: GP-TZ"),
        (("--networks", "atlantis"), "--networks names no network of this run: atlantis"),
        (("--horizon", "0"), "argument --horizon: expected a whole number >= 1"),
        (("--report-only",), "--report-only: "),
    ):
        out = tmp_path / "fig2"
        proc = subprocess.run(
            [sys.executable, str(SCRIPTS / "reproduce_fig2.py"), "--quick", "--quiet",
             "--executor", "inprocess", "--out", str(out), *args],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr
        assert not out.exists()


def test_reproduction_help_names_the_quick_output_folder():
    # --quick writes to docs/results/<figure>-quick, which the help did not say
    text = subprocess.run(
        [sys.executable, str(SCRIPTS / "reproduce_fig2.py"), "--help"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    assert "<figure>-quick" in " ".join(text.split())
