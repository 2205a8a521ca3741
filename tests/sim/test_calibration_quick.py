"""scripts/calibration.py --quick: fitted against true scales and the interval coverage print
for both learners (the full run's figures are in docs/objective.md)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "calibration.py"


def test_calibration_quick(tmp_path):
    out = tmp_path / "calibration.md"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in out.read_text(encoding="utf-8").splitlines()
            if line.startswith("| synthetic town")]
    assert [r.split("|")[2].strip() for r in rows] == ["loss", "uniform"]
    # the loss-scaled learner's noise model is the world's: fitted/true is one number
    median, p90 = (float(rows[0].split("|")[i]) for i in (3, 4))
    assert median == p90 and 0.5 < median < 2.0
