"""``scripts/bench_routing.py --quick`` runs end to end (the full run's numbers go in the docs).

Timings are not asserted (no timed unit tests); the script itself checks that our routes cost
the same as networkx's.
"""

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_routing.py"


def test_bench_routing_quick_runs_and_reports_both_targets():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"MoST Monaco\s+2,584\s+[\d.]+\s+[\d.]+\s+[\d.]+", out)
    assert re.search(r"target Dijkstra >= 20x networkx on Monaco: [\d.]+x -> (met|MISSED)", out)
    assert re.search(r"gp: trip [\d.]+ ms \(plan [\d.]+ ms, update [\d.]+ ms", out)
    assert re.search(r"target whole GP trip <= 250 ms: [\d.]+ ms -> (met|MISSED)", out)


def test_bench_routing_region_quick_compares_goal_directed_with_plain():
    """The region mode on a small town: the strategies timed on the same weights (the script
    asserts equal costs), the settled shares and the target line printed."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--region", "--quick"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert re.search(r"region20k route \(weights included\): [\d.]+ ms median; plain Dijkstra: "
                     r"[\d.]+ ms", out)
    assert re.search(r"goal-directed, lazy weights: +[\d.]+ +[\d.]+", out)
    assert re.search(r"segments settled: goal-directed [\d.]+ %, plain [\d.]+ %", out)
    assert re.search(r"target region route with weights <= 50 ms: [\d.]+ ms -> (met|MISSED)", out)
