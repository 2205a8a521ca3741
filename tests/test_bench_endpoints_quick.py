"""``scripts/bench_endpoints.py --quick`` runs end to end and prints its goal line; the measure
it prints is checked on hand-made polylines (the full Monaco run's numbers go in the docs)."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_endpoints.py"


def test_bench_endpoints_quick_prints_the_goal_line():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, check=True,
        timeout=600,
    ).stdout
    m = re.search(r"^outside A->B median: ([\d.]+)% \(goal <= 1%\)$", out, re.M)
    assert m and float(m.group(1)) <= 1.0
    assert re.search(r"whole segments \(before\): outside A->B median [\d.]+%", out)


def test_outside_share_counts_overshoot_and_u_turns():
    sys.path.insert(0, str(SCRIPT.parent))
    from bench_endpoints import outside_share

    deg = 1 / 111_195.0  # about a metre of latitude
    # a straight 100 m road north; A at 10 m, B at 60 m
    line = np.array([[8.0, 47.0], [8.0, 47.0 + 100 * deg]])
    a, b = (8.0, 47.0 + 10 * deg), (8.0, 47.0 + 60 * deg)
    assert outside_share(line, a, b) == pytest.approx(0.5, abs=0.01)  # 10 m before, 40 m after
    # from A past B to the road's end and back to B: the 40 + 40 m loop after B is outside
    back = np.array([[8.0, 47.0 + 10 * deg], [8.0, 47.0 + 100 * deg], [8.0, 47.0 + 60 * deg]])
    assert outside_share(back, a, b) == pytest.approx(80 / 130, abs=0.01)
    exact = np.array([[8.0, 47.0 + 10 * deg], [8.0, 47.0 + 60 * deg]])
    assert outside_share(exact, a, b) == pytest.approx(0.0, abs=1e-9)
