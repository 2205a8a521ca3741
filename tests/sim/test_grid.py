"""Experiment grids (issue 8): executors agree, kill+resume == uninterrupted, failures kept."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ev_nav.faults import ENV_VAR
from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripSpec
from ev_nav.sim.grid import make_executor, run_grid

NET = NetworkSpec(kind="synthetic", n_segments=300, seed=5)
TRIPS = TripSpec(kind="random", vehicles=2, min_distance_m=400.0, name="rnd")


def _specs(horizon=6):
    agents = [AgentSpec(model="bi", policy=p) for p in ("ts", "ucb")]
    return [
        RunSpec(network=NET, agent=a, trips=TRIPS, horizon=horizon, seed=s)
        for a in agents
        for s in (0, 1)
    ]


def _results(out: Path) -> pd.DataFrame:
    df = pd.read_csv(out / "results.csv")
    return df.sort_values(["run_id", "t", "vehicle"]).reset_index(drop=True)


def test_executors_give_identical_results(tmp_path):
    specs = _specs()
    frames = {}
    for kind in ("inprocess", "local", "dask"):
        ex = make_executor(kind, workers=2, dask_local=2)
        res = run_grid(specs, tmp_path / kind, executor=ex, progress=False)
        assert not res.failed, res.failed
        frames[kind] = _results(tmp_path / kind)
    # bit-identical, not merely close
    pd.testing.assert_frame_equal(frames["inprocess"], frames["local"], check_exact=True)
    pd.testing.assert_frame_equal(frames["inprocess"], frames["dask"], check_exact=True)
    summary = pd.read_csv(tmp_path / "local" / "summary.csv")
    assert set(summary["agent"]) == {"BI-TS", "BI-UCB"} and (summary["runs"] == 2).all()


def test_failed_run_is_reported_and_others_complete(tmp_path):
    bad = RunSpec(
        network=NET,
        agent=AgentSpec(model="bi", policy="ts"),
        trips=TripSpec(kind="fixed", start=0, goal=10**9, name="bad"),
        horizon=3,
        seed=0,
    )
    res = run_grid([*_specs(3), bad], tmp_path, executor=make_executor("inprocess"), progress=False)
    assert [o.run_id for o in res.failed] == [bad.run_id]
    assert "segment id" in res.failed[0].error
    assert (tmp_path / "runs" / bad.run_id / "error.txt").read_text().startswith("Traceback")
    assert len(pd.read_csv(tmp_path / "summary.csv")) == 2  # the four good runs, two agents


CONFIG = """
horizon = 40
seeds = [0, 1, 2]
[network]
kind = "synthetic"
n_segments = 300
seed = 5
[trips]
kind = "random"
vehicles = 2
min_distance_m = 400.0
name = "rnd"
[[agents]]
model = "bi"
policy = "ts"
[[agents]]
model = "bi"
policy = "bucb"
[output]
checkpoint_every = 5
"""


def test_kill_and_resume_equals_uninterrupted(tmp_path):
    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG)
    cmd = [sys.executable, "-m", "ev_nav.cli", "fleet", "grid", str(cfg), "--quiet"]
    ref = tmp_path / "ref"
    subprocess.run([*cmd, "--executor", "inprocess", "--out", str(ref)], check=True)

    out = tmp_path / "killed"
    # Killed deterministically at its 11th checkpoint (ev_nav.faults): with 8 checkpoints per
    # run, one run has finished and the second is three checkpoints in, on any machine.
    env = dict(os.environ, **{ENV_VAR: "run-checkpointed:11"})
    proc = subprocess.run([*cmd, "--executor", "inprocess", "--out", str(out)], env=env)
    assert proc.returncode == -signal.SIGKILL
    n_done = len(list(out.glob("runs/*/trips.csv")))
    assert n_done == 1
    assert len(list(out.glob("runs/*/checkpoint.evck"))) == 1
    subprocess.run([*cmd, "--resume", "--executor", "inprocess", "--out", str(out)], check=True)
    pd.testing.assert_frame_equal(_results(ref), _results(out), check_exact=True)


def test_resume_of_finished_runs_says_they_were_reused_and_report_names_its_files(
    tmp_path, capsys
):
    """A --resume with every run finished printed '4 runs in 8.4 s' as if they had run, and
    'fleet report' did not say which files it wrote."""
    from ev_nav.cli import main
    from ev_nav.sim.report import REPORT_FILES

    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 2"))
    out = tmp_path / "o"
    argv = ["fleet", "grid", str(cfg), "--executor", "inprocess", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    n = len(list(out.glob("runs/*/trips.csv")))
    assert f"{n} runs in" in first and "reused" not in first
    assert f"wrote {', '.join(REPORT_FILES)} in {out}" in first
    assert main([*argv, "--resume"]) == 0
    again = capsys.readouterr().out
    assert f"{n} runs in" in again
    assert "(every run had finished: reused, none run again)" in again
    for name in REPORT_FILES:
        (out / name).unlink()
    assert main(["fleet", "report", str(out)]) == 0
    report = capsys.readouterr().out
    assert report.strip().endswith(f"wrote {', '.join(REPORT_FILES)} in {out}")
    assert all((out / name).is_file() for name in REPORT_FILES)


def test_refuses_to_mix_without_resume(tmp_path):
    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 2"))
    from ev_nav.cli import main

    assert (
        main(
            [
                "fleet",
                "grid",
                str(cfg),
                "--executor",
                "inprocess",
                "--out",
                str(tmp_path / "o"),
                "--quiet",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "fleet",
                "grid",
                str(cfg),
                "--executor",
                "inprocess",
                "--out",
                str(tmp_path / "o"),
                "--quiet",
            ]
        )
        == 2
    )
    assert main(["fleet", "report", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "regret.png").is_file()


@pytest.mark.parametrize("executor", ["local"])
def test_grid_cli_local(tmp_path, executor):
    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 3"))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "ev_nav.cli",
            "fleet",
            "grid",
            str(cfg),
            "--executor",
            executor,
            "--workers",
            "2",
            "--out",
            str(tmp_path / "o"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "6 runs" in r.stdout and "BI-TS" in r.stdout


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--checkpoint-every", "0"], "argument --checkpoint-every: expected a whole number >= 1"),
        (["--workers", "0"], "argument --workers: expected a whole number >= 1, got '0'"),
        (["--workers", "-2"], "argument --workers: expected a whole number >= 1, got '-2'"),
        (["--dask-local", "0"], "argument --dask-local: expected a whole number >= 1, got '0'"),
        (["--dask-local", "2", "--dask-scheduler", "tcp://h:8786"], "not allowed with argument"),
        (["--executor", "local", "--dask-local", "2"], "--dask-local runs on Dask"),
        (["--executor", "inprocess", "--dask-scheduler", "tcp://h:8786"],
         "--dask-scheduler runs on Dask"),
        (["--executor", "inprocess", "--workers", "3"], "--workers sizes the local process pool"),
        (["--dask-local", "2", "--workers", "3"], "--workers sizes the local process pool"),
    ],
)
def test_grid_cli_refuses_executor_options_it_would_ignore(tmp_path, capsys, options, fragment):
    """Each was accepted and ignored: '--checkpoint-every 0' fell back to the config's interval,
    '--workers 0' took every core and '-2' one, '--dask-local 0' ran the local pool instead of
    Dask, '--executor local --dask-local 2' ran Dask, --workers went unused with Dask or in
    process, and --dask-local unused beside --dask-scheduler. Now a usage error, nothing run."""
    from ev_nav.cli import main

    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 2"))
    out = tmp_path / "o"
    assert main(["fleet", "grid", str(cfg), "--quiet", "--out", str(out), *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ev-nav: error:") and fragment in err, err
    assert not out.exists()


def test_resume_with_a_changed_config_reports_only_its_own_runs(tmp_path, capsys):
    """'fleet grid --resume' with an edited config (horizon 2 -> 3) into the folder of the first
    averaged the old runs with the new ones: summary.md showed 12 'runs' per agent, half of them
    of the other horizon. The grid's report covers the runs of its config, and a line says how
    many other runs the folder holds."""
    from ev_nav.cli import main

    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 2"))
    out = tmp_path / "o"
    argv = ["fleet", "grid", str(cfg), "--executor", "inprocess", "--out", str(out), "--quiet"]
    assert main(argv) == 0
    capsys.readouterr()
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 3"))
    assert main([*argv, "--resume"]) == 0
    printed = capsys.readouterr().out
    summary = pd.read_csv(out / "summary.csv")
    assert summary["runs"].tolist() == [3, 3]  # three seeds per agent, all of horizon 3
    results = pd.read_csv(out / "results.csv")
    assert set(results.groupby("run_id")["t"].max()) == {3}  # rounds 1..3: horizon 3 only
    assert f"{out / 'runs'} also holds 6 runs this config does not make" in printed
    assert "| 3 |" in (out / "summary.md").read_text()
    # 'fleet report' of the whole folder summed an old and a new run of each seed in
    # per_seed.md and averaged them as 6 runs; it names two runs it would merge instead
    before = (out / "per_seed.md").read_text()
    assert main(["fleet", "report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "have the same network, route, agent and seed" in err, err
    assert "move one of them to another folder" in err
    assert (out / "per_seed.md").read_text() == before


def test_out_that_is_a_file_is_refused_with_a_line_that_says_so(tmp_path, capsys):
    """'fleet run fleet.toml --out notes.txt' said only 'File exists: notes.txt'."""
    from ev_nav.cli import main

    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 2"))
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for cmd in ("run", "grid"):
        assert main(["fleet", cmd, str(cfg), "--quiet", "--out", str(notes)]) == 2
        err = capsys.readouterr().err
        assert err == (f"ev-nav: error: the output folder {notes} is a file; give a folder "
                       "with --out\n")
    assert notes.read_text() == "mine\n"


@pytest.mark.parametrize(
    "damage", ["empty", "other header", "cut short", "word for regret_wh", "word for t"]
)
def test_report_on_a_damaged_trips_file_names_it(tmp_path, capsys, damage):
    """A run's trips.csv damaged behind ev-nav's back (it is written atomically): an empty one
    was a pandas EmptyDataError traceback, one with another header was left out of the report
    without a word (the summary counted one run fewer). Now one line names the file and what
    to do; the report files are left as they were."""
    from ev_nav.cli import main

    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG.replace("horizon = 40", "horizon = 2"))
    out = tmp_path / "o"
    assert main(["fleet", "grid", str(cfg), "--executor", "inprocess", "--out", str(out),
                 "--quiet"]) == 0
    capsys.readouterr()
    trips = sorted(out.glob("runs/*/trips.csv"))[0]
    text = trips.read_text()
    if damage.startswith("word for"):  # NA where a number belongs: a text column, then a
        column = damage.split()[-1]     # TypeError in the summary
        df = pd.read_csv(trips, keep_default_na=False)
        df[column] = df[column].astype(object)
        df.loc[1, column] = "NA"
        df.to_csv(trips, index=False)
    else:
        trips.write_text({"empty": "", "other header": "garbage,,,\n",
                          "cut short": text[: len(text) // 2].rsplit(",", 1)[0] + "\n"}[damage])
    before = (out / "summary.md").read_bytes()
    assert main(["fleet", "report", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"ev-nav: error: {trips} is damaged (")
    assert err.endswith(f"delete {trips.parent} and run the grid again with --resume\n")
    assert (out / "summary.md").read_bytes() == before


def test_fleet_help_says_what_the_progress_counts(capsys):
    """'fleet --help' said 'run' shows progress per trip; its bar counts runs (one bar over the
    grid's runs, as the README says: 'in this process, progress per run')."""
    from ev_nav.cli import main

    assert main(["fleet", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "run a fleet config in this process (progress per run)" in text
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "ev-nav fleet run fleet.toml             # in this process, progress per run" in readme


@pytest.mark.parametrize("action", ["run", "grid"])
def test_ctrl_c_says_how_to_go_on(tmp_path, capsys, monkeypatch, action):
    """Ctrl-C during a grid printed 'ev-nav: interrupted' alone; the finished runs and the
    checkpoints are kept, and the line now gives the command that goes on from them."""
    import ev_nav.sim.grid
    from ev_nav.cli import main

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ev_nav.sim.grid, "run_grid", interrupted)
    cfg = tmp_path / "grid.toml"
    cfg.write_text(CONFIG)
    out = tmp_path / "o"
    extra = ["--executor", "inprocess"] if action == "grid" else []
    assert main(["fleet", action, str(cfg), "--quiet", "--out", str(out), *extra]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ev-nav: interrupted;")
    assert f"'ev-nav fleet {action} {cfg} --out {out} --resume' goes on from there" in err


@pytest.mark.parametrize("name", ["NA", "null", "nan", ""])
def test_a_route_named_like_a_missing_value_is_that_name(tmp_path, capsys, name):
    # pandas reads NA, null, nan and "" as missing: the finished run was reported damaged, and
    # the advice (delete it, run again) looped
    from ev_nav.cli import main

    cfg = tmp_path / "grid.toml"
    cfg.write_text(
        CONFIG.replace("horizon = 40", "horizon = 3")
        .replace("seeds = [0, 1, 2]", "seeds = [0]")
        .replace('name = "rnd"', f'name = "{name}"')
    )
    argv = ["fleet", "grid", str(cfg), "--executor", "inprocess", "--out", str(tmp_path / "o")]
    assert main([*argv, "--quiet"]) == 0, capsys.readouterr().err
    results = pd.read_csv(tmp_path / "o" / "results.csv", keep_default_na=False)
    assert set(results["route"]) == {name} and len(results) == 2 * 3 * 2
    assert main([*argv, "--quiet", "--resume"]) == 0  # finished runs read back, not "damaged"
    assert main(["fleet", "report", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "damaged" not in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "grid"])
def test_grid_json_records_the_configs_text_and_hash(tmp_path, command):
    """grid.json kept only the config's path as typed: once the file was edited (or the folder
    moved) the results could not be traced to what made them."""
    import hashlib

    from ev_nav.cli import main

    cfg = tmp_path / "f1.toml"
    text = ('horizon = 2\n[network]\nn_segments = 400\n[[routes]]\nstart = 3\ngoal = 40\n'
            '[[agents]]\nmodel = "bi"\n')
    cfg.write_text(text, encoding="utf-8")
    extra = ["--executor", "inprocess"] if command == "grid" else []
    out = tmp_path / "out"
    assert main(["fleet", command, str(cfg), "--quiet", "--out", str(out), *extra]) == 0
    config = json.loads((out / "grid.json").read_text(encoding="utf-8"))["config"]
    assert config == {"config_file": str(cfg), "config_text": text,
                      "config_sha256": hashlib.sha256(text.encode()).hexdigest()}


def test_fleet_grid_draws_no_progress_bar_into_a_log(tmp_path, capsys):
    """'fleet grid' wrote carriage-return progress bars into redirected stderr (a log file),
    where 'fleet run' draws them only on a terminal; both draw them only there now."""
    from ev_nav.cli import main

    cfg = tmp_path / "f1.toml"
    cfg.write_text('horizon = 2\n[network]\nn_segments = 400\n[[routes]]\nstart = 3\n'
                   'goal = 40\n[[agents]]\nmodel = "bi"\n', encoding="utf-8")
    assert main(["fleet", "grid", str(cfg), "--out", str(tmp_path / "out"),
                 "--executor", "inprocess"]) == 0
    err = capsys.readouterr().err  # (not a terminal)
    assert "\r" not in err and "grid (" not in err


def test_fleet_report_names_the_runs_it_leaves_out(tmp_path, capsys):
    """Unfinished and failed runs were dropped silently: an agent showed 1 run beside agents of
    2, or vanished from the tables. A note names them and why."""
    from ev_nav.cli import main
    from ev_nav.sim.fleet import run_dir_for, run_one, specs_from_toml

    cfg = tmp_path / "f1.toml"
    cfg.write_text('horizon = 3\nseeds = [0, 1]\n[network]\nn_segments = 400\n[[routes]]\n'
                   'start = 3\ngoal = 40\n[[agents]]\nmodel = "bi"\n[[agents]]\nmodel = "bi"\n'
                   'policy = "ucb"\n', encoding="utf-8")
    specs, _ = specs_from_toml(cfg)
    out = tmp_path / "out"
    finished, unfinished, failed = specs[0], specs[1], specs[2]
    run_one(finished, run_dir_for(out, finished.run_id))
    run_one(unfinished, run_dir_for(out, unfinished.run_id), checkpoint_every=1, stop_after=1)
    run_dir_for(out, failed.run_id).mkdir(parents=True)
    (run_dir_for(out, failed.run_id) / "error.txt").write_text("Traceback ...\n")
    assert main(["fleet", "report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (f"note: left out, failed: 1 run ({failed.run_id}; see error.txt in each run's "
            "folder)") in printed
    assert (f"note: left out, unfinished: 1 run ({unfinished.run_id}; 'fleet run' or 'fleet "
            "grid' with --resume continues them)") in printed
    run_one(unfinished, run_dir_for(out, unfinished.run_id))  # resumed to its end
    (run_dir_for(out, failed.run_id) / "error.txt").unlink()
    run_dir_for(out, failed.run_id).rmdir()
    assert main(["fleet", "report", str(out)]) == 0  # nothing left out: nothing to say
    assert "note:" not in capsys.readouterr().out
