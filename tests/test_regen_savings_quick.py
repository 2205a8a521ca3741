"""scripts/regen_savings.py --quick runs; the regeneration-aware route never loses (the script
asserts it per pair) and the figures are printed."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "regen_savings.py"


def test_regen_savings_quick(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--cache", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "E_det (prior physics): saving per trip mean" in proc.stdout
    assert "physical truth draw: saving per trip mean" in proc.stdout
