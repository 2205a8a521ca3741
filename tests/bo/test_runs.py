"""BO experiments on the fleet grids' executors: same numbers everywhere, resumable, safe."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ev_nav.bo.boke.methods import BOKEMaximizerConfig
from ev_nav.bo.boke.runner import BOKERunConfig, run_experiment
from ev_nav.bo.core.runs import ExecutionConfig, Job, RunFailed, RunRecord, read_results, run_jobs
from ev_nav.errors import ConfigError

CFG = BOKERunConfig(
    benchmarks=("forrester",),
    methods=("boke", "random"),
    seeds=(0, 1),
    budget=8,
    opt=BOKEMaximizerConfig(n_per_dim=100, maxiter=3),
)
NUMBERS = ["benchmark", "method", "seed", "t", "f", "y", "x0"]


def _table(path) -> pd.DataFrame:
    return read_results(path)[0][NUMBERS]


@pytest.mark.parametrize("executor", ["local", "dask"])
def test_executors_give_the_in_process_numbers(tmp_path, executor):
    run_experiment(CFG, tmp_path / "a", ExecutionConfig(executor="inprocess"))
    run_experiment(CFG, tmp_path / "b", ExecutionConfig(executor=executor, workers=2))
    pd.testing.assert_frame_equal(_table(tmp_path / "a"), _table(tmp_path / "b"))
    meta = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert meta["executor"] == executor and set(meta["outcomes"].values()) == {"done"}
    assert "torch" in meta["versions"] and meta["seeds"] == [0, 1]


def test_resume_recomputes_only_missing_runs_and_more_seeds_reuse_finished_ones(tmp_path):
    inproc = ExecutionConfig(executor="inprocess")
    run_experiment(CFG, tmp_path, inproc)
    before = _table(tmp_path)
    (tmp_path / "runs" / "forrester-random-s1" / "results.csv").unlink()
    run_experiment(CFG, tmp_path, inproc)
    outcomes = json.loads((tmp_path / "manifest.json").read_text())["outcomes"]
    assert outcomes["forrester-random-s1"] == "done"
    assert [v for k, v in outcomes.items() if k != "forrester-random-s1"] == ["skipped"] * 3
    pd.testing.assert_frame_equal(before, _table(tmp_path))
    # a third seed: the four finished runs are reused, one per method is new
    bigger = BOKERunConfig(**{**CFG.__dict__, "seeds": (0, 1, 2)})
    run_experiment(bigger, tmp_path, inproc)
    outcomes = json.loads((tmp_path / "manifest.json").read_text())["outcomes"]
    assert sorted(k for k, v in outcomes.items() if v == "done") == [
        "forrester-boke-s2",
        "forrester-random-s2",
    ]


def test_resume_refuses_runs_of_another_configuration(tmp_path):
    run_experiment(CFG, tmp_path, ExecutionConfig(executor="inprocess"))
    other = BOKERunConfig(**{**CFG.__dict__, "varsigma": 0.5})
    with pytest.raises(ConfigError, match="another configuration"):
        run_experiment(other, tmp_path, ExecutionConfig(executor="inprocess"))
    run_experiment(other, tmp_path, ExecutionConfig(executor="inprocess", resume=False))


def _boom(x: int) -> RunRecord:
    if x == 1:
        raise ValueError("bad run")
    return RunRecord(pd.DataFrame({"x": [x]}), {})


def test_a_failing_run_is_named_with_its_traceback_and_the_others_finish(tmp_path):
    jobs = [Job(f"j{i}", _boom, (i,)) for i in range(3)]
    with pytest.raises(RunFailed, match="j1: ValueError: bad run") as err:
        run_jobs(jobs, tmp_path, ExecutionConfig(executor="inprocess"))
    assert "error.txt" in str(err.value)
    assert "Traceback" in (tmp_path / "runs" / "j1" / "error.txt").read_text()
    assert (tmp_path / "runs" / "j2" / "results.csv").is_file()
    # without an output folder the runs go to a temporary one, kept when a run failed: the
    # message's error.txt was in a folder already removed
    with pytest.raises(RunFailed) as err:
        run_jobs(jobs, None, ExecutionConfig(executor="inprocess"))
    where = Path(re.search(r"traceback in (\S+error\.txt)", str(err.value)).group(1))
    assert "ValueError: bad run" in where.read_text()
    shutil.rmtree(where.parents[2])
