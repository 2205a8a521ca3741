"""Every script's ``--help`` says what it measures: its whole docstring, not a cut first line."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))


def _words(text: str) -> str:
    return " ".join(text.split())


def _run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python scripts/SCRIPT ARGS`` from the repository root, as a user runs it."""
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_carries_the_whole_docstring(script: Path) -> None:
    doc = ast.get_docstring(ast.parse(script.read_text()))
    assert doc, f"{script.name} has no docstring"
    out = _run(script.name, "--help", timeout=60)
    assert out.returncode == 0, out.stderr
    # Line breaks may differ (argparse keeps the docstring's own with the raw formatter); the
    # words and their order may not.
    assert _words(doc) in _words(out.stdout)


@pytest.mark.parametrize(
    ("script", "args", "words"),
    [
        ("vehicle_consumption.py", ["/nonexistent/a.osm"], "error: OSM file not found"),
        ("bench_endpoints.py", ["--data", "/nonexistent"], "error: OSM file not found"),
        ("regen_savings.py", ["--quick", "--cache", "/proc/ev-nav-none"], "error: No such file"),
        # these two build in child processes; a missing file failed there, as a traceback here
        ("bench_network.py", ["--quick", "--data", "/nonexistent"], "error: OSM file not found"),
        ("bench_osm_input.py", ["--quick", "--data", "/nonexistent"], "error: OSM file not found"),
    ],
)
def test_bad_path_is_one_line_not_a_traceback(script: str, args: list[str], words: str) -> None:
    out = _run(script, *args)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"{script}: {words}")


@pytest.mark.parametrize(
    ("script", "option"),
    [
        ("sigkill_storm.py", "--rounds"),
        ("oracle_regret.py", "--trips"),
        ("regen_savings.py", "--pairs"),
        ("bench_endpoints.py", "--pairs"),
        ("bench_matching.py", "--drives"),
        ("bench_cli.py", "--repeat"),
        ("bench_cli.py", "--trips"),
        ("bench_grid.py", "--runs"),
        ("bench_ptr.py", "--repeats"),
        ("bench_routing.py", "--queries"),
        ("bench_drift.py", "--rounds"),
        ("bench_drift.py", "--warmup"),
        ("bench_temperature.py", "--days"),
        ("bench_temperature.py", "--held-out"),
    ],
)
def test_a_count_of_zero_is_a_usage_error(script: str, option: str) -> None:
    # a count of 0 used to run nothing and still print a verdict (sigkill_storm: "PASS"), or was
    # replaced by --quick's own number (bench_drift, bench_temperature: by the default)
    mode = "--smoke" if script in ("bench_drift.py", "bench_temperature.py") else "--quick"
    out = _run(script, mode, option, "0")
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"argument {option}: expected a whole number >= 1, got '0'" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_script_interrupted_says_so_in_one_line(capsys, monkeypatch):
    """Ctrl-C in a script was a KeyboardInterrupt traceback; it ends as ev-nav's commands do."""
    import sys

    from ev_nav.cli import run_script

    def main():
        raise KeyboardInterrupt

    monkeypatch.setattr(sys, "argv", ["reproduce_fig2.py"])
    with pytest.raises(SystemExit) as stop:
        run_script(main)
    assert stop.value.code == 130
    assert capsys.readouterr().err == "reproduce_fig2.py: interrupted\n"
