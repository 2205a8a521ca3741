"""scripts/bench_cli.py --quick runs and prints the ratios the driver-tool issue asks for (no
timing is asserted: the figures are quoted from a full run)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_cli.py"


def test_bench_cli_quick():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for key in ("version/numpy-import ratio:", "history/numpy-import ratio:",
                "route/numpy-scipy-import ratio:", "route/torch-import ratio:",
                "observe/torch-import ratio:"):
        assert key in proc.stdout
