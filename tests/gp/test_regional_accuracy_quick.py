"""``scripts/regional_accuracy.py --quick``: the accuracy table runs and holds on a town."""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "regional_accuracy.py"


def test_regional_accuracy_quick_prints_its_table():
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    row = re.search(r"^\| town2k \| [\d,]+ \| 60 \| ([\d.e+-]+) \| [\d.e+-]+ \| ([\d.e+-]+) \|",
                    out, re.M)
    assert row, out
    assert float(row.group(1)) <= 0.01 and float(row.group(2)) <= 0.01


def test_unknown_network_is_refused():
    res = subprocess.run([sys.executable, str(SCRIPT), "--networks", "atlantis"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "unknown network 'atlantis'" in res.stderr


def test_the_drift_mode_prints_its_table():
    """``--drift``: the per-trip updates against refactorising after every trip (10 trips on
    the 2,000-segment town: a few 1e-5 of a prior sd), the mean's and a draw's; and the kept
    B against its exact value from a sparse LU, beside the refactorised B's."""
    out = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--drift", "10"],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    num = r"([\d.e+-]+)"
    row = re.search(rf"^\| town2k \| [\d,]+ \| {num} \| {num} \| {num} \| {num} \|", out, re.M)
    assert row, out
    worst, final, worst_draw, final_draw = (float(row.group(i)) for i in range(1, 5))
    assert 0.0 < final <= worst <= 1e-3
    assert 0.0 < final_draw <= worst_draw <= 1e-2
    b = re.search(rf"^\| town2k \| {num} \| {num} \|$", out, re.M)
    assert b, out
    assert 0.0 < float(b.group(1)) < 0.05 and 0.0 < float(b.group(2)) < 0.05
