"""``scripts/bench_matching.py --quick`` runs end to end (the full run's numbers go in the docs).

Timings are not asserted (no timed unit tests).
"""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_matching.py"


def test_bench_matching_quick_runs_and_reports_the_target():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"MoST Monaco\s+2,584\s+[\d.]+\s+\d+\s+[\d.]+\s+[\d.]+\s+\d+", out)
    assert re.search(r"target 10-minute track >= 1000x real time: \d+x -> (met|MISSED)", out)
