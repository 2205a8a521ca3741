"""``scripts/bench_regional.py --quick``: the benchmark runs end to end and prints its lines."""

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_regional.py"


def test_bench_regional_quick_prints_its_lines(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    assert re.search(r"^town3k ts trip: \d+ ms$", out, re.M), out
    assert re.search(r"^town3k bucb trip: \d+ ms \([\d.]+x the ts trip\)$", out, re.M), out
    assert re.search(r"^town3k trip speed-up: [\d.]+x$", out, re.M), out
    assert re.search(r"^town3k ts trip, fits amortised: \d+ ms$", out, re.M), out
    assert re.search(r"^hyperparameter fits: \d+ in the run, \d+ accepted", out, re.M), out
    assert re.search(r"^steady state: 100 fleet trips, \d+ fits on the schedule", out, re.M), out
    rec = json.loads((tmp_path / "r.json").read_text())
    # the fleet drove what it was asked to before the timed trips
    assert rec["distinct"] >= 1000 and len(rec["ts_ms"]["trip"]) == 3
    assert rec["meta"]["seeds"] == [0]
    # the learner fitted on the exact learner's schedule while the fleet drove
    assert len(rec["fit_s"]) >= 3 and rec["refit_s"] > 0
    # and went on through the steady state's fits, each recorded with its test's outcome
    assert rec["steady_trips"] == 100 and len(rec["steady_fit_s"]) >= 1
    assert rec["fits"][0]["accepted"] and all(f["gain"] >= 0 for f in rec["fits"])


def test_bench_regional_quick_at_a_temperature(tmp_path):
    """``--temperature C``: readings and draws at an ambient temperature, and a changed road's
    reset, timed and recorded."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--no-fallback", "--no-fits",
         "--temperature", "-5", "--json", str(tmp_path / "t.json")],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    assert re.search(r"^town3k ts trip at -5 °C: \d+ ms$", out, re.M), out
    assert re.search(r"^one changed road \(reset_segments\) and the next draw: [\d.]+ s$",
                     out, re.M), out
    rec = json.loads((tmp_path / "t.json").read_text())
    assert rec["temperature_c"] == -5.0 and rec["reset_s"] > 0
