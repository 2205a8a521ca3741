"""The end-to-end example of docs/bo-overview.md ("Your own objective, end to end") runs as
written: its ``my_problem.py``, its four command lines and its Python block, in a scratch folder.

The commands get ``--executor inprocess --quiet`` appended (the documented default is the local
process pool, which gives the same numbers: tests/bo/test_runs.py); nothing else is changed.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from ev_nav.cli import main

DOC = Path(__file__).resolve().parents[2] / "docs" / "bo-overview.md"
SECTION = "## Your own objective, end to end"


def _blocks(lang: str) -> list[str]:
    text = DOC.read_text()
    section = text[text.index(SECTION) : text.index("\n## ", text.index(SECTION) + 1)]
    return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.DOTALL)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    python = _blocks("python")
    module = next(b for b in python if b.startswith("# my_problem.py"))
    (tmp_path / "my_problem.py").write_text(module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path, python


@pytest.mark.slow
def test_the_documented_commands_run_and_recommend_near_the_optimum(scratch, capsys):
    tmp, _ = scratch
    (commands,) = _blocks("bash")
    lines = [ln for ln in commands.splitlines() if ln.startswith("ev-nav bo ")]
    assert [ln.split()[2] for ln in lines] == ["boke", "cvs", "ucvs", "ptr"]
    for line in lines:
        argv = shlex.split(line)[1:] + ["--executor", "inprocess", "--quiet"]
        assert main(argv) == 0, line
    capsys.readouterr()
    for family, n_runs in (("cvs", 6), ("ucvs", 3)):
        runs = json.loads((tmp / f"runs/mine-{family}/manifest.json").read_text())["runs"]
        recs = [r["recommendation"] for r in runs.values()]
        # every run recommends the full set (1-based 3) within 0.1 of bowl's maximiser (0.5, 1.2)
        assert len(recs) == n_runs and all(r["control_set"] == 3 for r in recs)
        np.testing.assert_allclose([r["x_best"] for r in recs], [[0.5, 1.2]] * n_runs, atol=0.1)
    assert (tmp / "runs/mine-cvs/best_observed.png").is_file()  # no known optimum: no regret
    ptr = json.loads((tmp / "runs/mine-ptr/manifest.json").read_text())["runs"]
    assert len(ptr) == 6
    assert all(abs(r["recommendation"]["x_best"][0] - 0.3) < 0.115 for r in ptr.values())
    assert (tmp / "runs/mine-boke/results.csv").is_file()


@pytest.mark.slow
def test_the_documented_python_block_runs(scratch, capsys):
    _, python = scratch
    (block,) = [b for b in python if "CVSOptimizer(" in b]
    namespace: dict[str, object] = {}
    exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102 - the documentation's code
    cvs_line, ptr_line = capsys.readouterr().out.strip().splitlines()
    # CVS: "[x0 x1] control_set"; the full set (index 2) near bowl's maximiser (0.5, 1.2)
    x_cvs = np.array(re.findall(r"[-\d.]+", cvs_line.split("]")[0]), dtype=float)
    assert cvs_line.split("]")[1].split() == ["2"]
    np.testing.assert_allclose(x_cvs, [0.5, 1.2], atol=0.1)
    # PTR: "[x] value": a maximiser of P[f > 0] (|x - 0.3| < 0.115), posterior value near 0.5
    x_ptr = float(re.findall(r"[-\d.]+", ptr_line.split("]")[0])[0])
    assert abs(x_ptr - 0.3) < 0.115
    assert abs(float(ptr_line.split("]")[1]) - 0.5) < 0.1


@pytest.mark.slow
def test_the_boke_python_api_block_runs_as_a_script(tmp_path):
    """docs/bo-boke.md's "Python API" block, saved as a script and run: its experiment used the
    default process pool, whose workers import the script again and so died at once ("6 of 6
    runs failed (first: …: WorkerDied …; traceback in" a temporary folder already removed)."""
    import subprocess
    import sys

    text = (DOC.parent / "bo-boke.md").read_text()
    section = text[text.index("## Python API") :]
    block = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    script = tmp_path / "boke_api.py"
    script.write_text(block.group(1))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("| hartmann3 |")]
    assert [r.split("|")[3].strip() for r in rows] == ["boke", "gp-ucb"]
    # the 40-step loop: the best observed point near the bowl's maximiser (0.5, 1.2)
    x_best = np.array(re.findall(r"[-\d.]+", proc.stdout.splitlines()[0]), dtype=float)
    np.testing.assert_allclose(x_best, [0.5, 1.2], atol=0.3)
