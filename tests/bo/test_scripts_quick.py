"""The BO scripts run end to end in their small forms (the full runs and their numbers are in
docs/bo-*.md). Timings are printed by the benchmarks but never asserted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _run(script: str, *args: object, cwd: Path | None = None, codes: tuple[int, ...] = (0,)) -> str:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / script), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
    )
    assert done.returncode in codes, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stdout


def test_bench_cvs_quick_prints_a_ratio_against_the_paper_without_the_official_code():
    text = _run("bench_cvs.py", "--quick")
    assert re.search(r"UCB-CVS step, Hartmann-3, 7 sets, .* ours [\d.]+ CPU-s", text)
    # no checkout given: the comparison says it is against the paper's figure, as a ratio
    assert "official code not given (--official DIR)" in text
    paper = r"paper's reported 38-87 s .*: [\d.]+x-[\d.]+x \(Hartmann 52.34 s: [\d.]+x\)"
    assert re.search(paper, text)
    assert re.search(r"ETC-Ada step .*: [\d.]+ s", text)


def test_bench_ptr_quick_times_a_reference_in_the_same_run():
    text = _run("bench_ptr.py", "--quick")
    for method in ("bpt-ucb", "bpt-ts"):
        assert re.search(rf"{method} +iteration: median .* ratio reference / ours [\d.]+x", text)


def test_bench_boke_quick_compares_with_the_gp_baseline(tmp_path):
    out = tmp_path / "bench.json"
    # its exit code is the timing verdict (slopes on a loaded machine), which is not tested here
    text = _run("bench_boke.py", "--quick", "--skip-e2e", "--out", out, codes=(0, 1))
    assert re.search(r"(PASS|FAIL) BOKE slope <= 1.3", text)
    assert re.search(r"GP/BOKE time ratio at t=\d+: [\d.]+x", text)
    assert json.loads(out.read_text())


@pytest.mark.slow
def test_reproduce_ptr_refuses_an_unknown_part_before_any_work(tmp_path):
    # a misspelt --parts name used to be reported only after the minutes-long checks had run;
    # --quick silently dropped any --parts given with it
    for args, words in (
        (("--parts", "checks,gp-optt"), "--parts: unknown part(s) 'gp-optt'"),
        (("--quick", "--parts", "gp-opt"), "--quick runs only the checks"),
    ):
        text = _run("reproduce_ptr.py", *args, "--out", tmp_path, codes=(2,))
        assert text == ""
        done = subprocess.run(
            [sys.executable, str(SCRIPTS / "reproduce_ptr.py"), *args, "--out", str(tmp_path)],
            capture_output=True, text=True, timeout=120,
        )
        assert words in done.stderr
    assert not any(tmp_path.iterdir())


def test_reproduce_ptr_quick_passes_its_checks(tmp_path):
    text = _run("reproduce_ptr.py", "--quick", "--executor", "inprocess", "--out", tmp_path)
    assert "failures: none" in text and "[FAIL]" not in text
    assert text.count("[PASS]") >= 20


def test_reproduce_boke_spacefill_quick(tmp_path):
    text = _run(
        "reproduce_boke.py", "--part", "spacefill", "--quick", "--quiet",
        "--executor", "inprocess", "--out", tmp_path,
    )  # fmt: skip
    # the density-exploration design fills the cube better than random points early on (at
    # t = 100 in 2-D the two are within 4 %, too close to pin)
    for d in (2, 4):
        block = text.split(f"d={d}:")[1]
        de = [float(v) for v in re.search(r"de +([\d. ]+)", block).group(1).split()]
        rnd = [float(v) for v in re.search(r"random +([\d. ]+)", block).group(1).split()]
        assert len(de) == 3 and de[0] < rnd[0] and de[1] < rnd[1], (de, rnd)
    # the report's check names only what ran: the quick design stops at t = 100
    report = _run("reproduce_boke.py", "--part", "report", "--out", tmp_path)
    assert "d=2: DE below random for t<=100 (t=200 not run)" in report, report


@pytest.mark.slow
def test_reproduce_bocvs_smoke_runs_every_cell_and_the_figures(tmp_path):
    """Toy sizes through the same code: every B-check and check 6-10 cell writes its results
    and manifest, the checks are printed (not judged), and the figures come from the cells."""
    out = tmp_path / "bocvs"
    for part in ("cvs", "ucvs", "ablation"):
        text = _run(
            "reproduce_bocvs.py", "--smoke", "--part", part, "--executor", "inprocess",
            "--out", out, cwd=tmp_path,
        )  # fmt: skip
        assert "[SMOKE]" in text and "[PASS]" not in text and "[FAIL]" not in text
    cells = sorted(p.parent.name for p in out.glob("*/manifest.json"))
    assert cells == [
        "cvs_b1_moderate", "cvs_b2_cheap", "cvs_b3_etcada_20seeds", "cvs_b3_expensive",
        "ucvs_ablation_norefit", "ucvs_ablation_refit",
        "ucvs_airfoil", "ucvs_cheap", "ucvs_cheap_noisy", "ucvs_permuted_P0_clipped",
        "ucvs_permuted_P0_unclipped", "ucvs_permuted_P1",
    ]  # fmt: skip
    table = pd.read_csv(out / "ucvs_cheap" / "results.csv")
    assert set(table["method"]) == {"ucvs", "ucb-psq", "ts-psq", "etc50"}
    _run("reproduce_bocvs.py", "--smoke", "--part", "collect", "--out", out, cwd=tmp_path)
    assert (out / "figures" / "cvs_ucvs_hartmann6_cheap.png").stat().st_size > 10_000
    assert not (tmp_path / "docs").exists()  # figures go under --out, never into docs/
    assert (out / "ucvs_ablation_table.csv").is_file()


def test_bench_cvs_quick_keeps_the_sizes_given():
    # --quick used to replace --n-obs/--n-mc/--repeats with its own 30, 128 and 1
    text = _run("bench_cvs.py", "--quick", "--n-obs", "20", "--n-mc", "64")
    assert re.search(r"UCB-CVS step, Hartmann-3, 7 sets, n=20, N=64,", text), text
