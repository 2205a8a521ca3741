"""``scripts/bench_learner.py --quick``: the benchmark itself runs and prints its ratio lines."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_learner.py"


def test_bench_learner_quick_prints_the_speed_up(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, check=True, timeout=900,
    ).stdout
    assert re.search(r"^town600 trip speed-up: \d+\.\dx$", out, re.M), out
    assert re.search(r"town600\s+exact: median\s+[\d.]+ ms/trip", out), out
    assert (tmp_path / "r.json").is_file()


def test_unknown_network_is_refused():
    res = subprocess.run([sys.executable, str(SCRIPT), "--networks", "atlantis"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "unknown network 'atlantis'" in res.stderr
    assert "Traceback" not in res.stderr
