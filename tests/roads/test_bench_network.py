"""The network benchmark script runs (its --quick form) and reports its targets."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_network.py"


def test_bench_network_quick():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, check=True
    ).stdout
    assert "MoST Monaco" in out and "synthetic 2,000" in out
    assert "target cached load Monaco < 0.2 s" in out
