"""scripts/bench_cache_verify.py --quick runs and prints the ratios of verified to unverified
cache reads and writes (no timing is asserted: the figures are quoted from a full run)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_cache_verify.py"


def test_bench_cache_verify_quick():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for key in ("verified/unverified read ratio:", "verified/unverified write ratio:"):
        assert key in proc.stdout


def test_bench_cache_verify_quick_honours_segments_and_refuses_zero():
    # --quick used to replace a given --segments/--repeats with its own 600 and 3
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--segments", "300", "--repeats", "2"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("matrix 300 x 301 float64") and "median of 2," in proc.stdout
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--segments", "0"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--segments: expected a whole number >= 1" in proc.stderr
