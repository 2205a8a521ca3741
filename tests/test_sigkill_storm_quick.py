"""The SIGKILL storm script's --quick form runs and passes its own checks (the full storm's figures
are quoted in docs/reliability.md)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sigkill_storm.py"


def test_sigkill_storm_quick():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lost acknowledged observations: 0" in proc.stdout
    assert "storm verdict: PASS" in proc.stdout
