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


def _bad(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_calibration_refuses_an_unknown_world_and_bad_seeds():
    # An unknown --worlds name used to select nothing and still print "within the targets: yes";
    # --seeds x was a ValueError traceback, and --quick silently replaced any --seeds with 0.
    for args, words in (
        (("--quick", "--worlds", "atlantis"), "--worlds names no world of this run: atlantis"),
        (("--seeds", "x"), "--seeds takes comma-separated whole numbers"),
        (("--quick", "--trips", "0"), "--trips and --held-out must be at least 1"),
    ):
        proc = _bad(*args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and words in proc.stderr
        assert "within the targets" not in proc.stdout
