"""``scripts/bench_learner.py --quick``: the benchmark itself runs and prints its ratio lines."""

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_learner.py"


def test_bench_learner_quick_prints_the_speed_up(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(tmp_path / "r.json")],
        capture_output=True, text=True, check=True, timeout=900,
    ).stdout
    assert re.search(r"^town600 trip speed-up: \d+\.\dx$", out, re.M), out
    assert re.search(r"town600\s+exact: median\s+[\d.]+ ms/trip", out), out
    assert (tmp_path / "r.json").is_file()


def test_unknown_network_is_refused():
    res = subprocess.run([sys.executable, str(SCRIPT), "--networks", "atlantis"],
                         capture_output=True, text=True)
    assert res.returncode == 2 and "unknown network 'atlantis'" in res.stderr
    assert "Traceback" not in res.stderr


def test_bench_learner_floor_quick_prints_the_shapes_it_timed(tmp_path):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--floor", "--networks", "town600", "--recorded", "11",
         "--json", str(tmp_path / "f.json")],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    m = re.search(r"^town600 driven-columns floor: N = 598, D = (\d+), k = (\d+): ", out, re.M)
    assert m, out
    d, k = int(m.group(1)), int(m.group(2))
    # D counts distinct driven segments over 11 trips, k the distinct segments of one trip
    assert 0 < k <= d <= 598
    rec = json.loads((tmp_path / "f.json").read_text())[0]
    assert rec["support"] == d and rec["per_trip"] == k
    assert rec["columns_gb"] == 598 * d * 8 / 1e9


def test_bench_learner_quick_keeps_the_networks_given():
    # --quick used to replace --networks (and --recorded, --trips) with its own, so a misspelt
    # name ran the small town and passed
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--networks", "atlantis"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "unknown network 'atlantis'" in proc.stderr and "Traceback" not in proc.stderr
