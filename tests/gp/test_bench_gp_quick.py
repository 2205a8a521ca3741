"""``scripts/bench_gp.py`` in tiny settings: the benchmark and the dense-algebra floor run end
to end (the full-size numbers are quoted in docs/gp.md; timings are not asserted)."""

import json
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_gp.py"


def _run(*args):
    cmd = [sys.executable, str(SCRIPT), *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def test_bench_gp_tiny_runs_ours_and_the_reference(tmp_path):
    out = tmp_path / "bench.json"
    text = _run(
        "--networks", "monaco", "--variants", "ours", "--trips", 2, "--warm-trips", 3,
        "--num-inducing", 100, "--batch-size", 200, "--out", out,
    )  # fmt: skip
    assert re.search(r"monaco\s+ours\s+segments\s+2584 .* per trip .* ms", text)
    assert re.search(r"ratio reference/ours per trip: [\d.]+x", text)
    saved = json.loads(out.read_text())
    assert [r["impl"] for r in saved["results"]] == ["ours", "reference"]
    assert all(r["trip_median_s"] > 0 for r in saved["results"])
    assert "metadata" in saved


def test_dense_floor_lists_every_operation_of_a_trip():
    text = _run("--floor", "--networks", "monaco", "--num-inducing", 150, "--floor-batch", 200)
    assert "monaco: n = 2584, M = 150, U = 200, 1 thread(s)" in text
    ops = re.findall(r"^  (.+?)\s+([\d.]+) ms$", text, flags=re.MULTILINE)
    assert len(ops) == 10 and ops[-1][0].startswith("sum")
    parts = sum(float(ms) for _, ms in ops[:-1])
    assert abs(parts - float(ops[-1][1])) < 0.1 * len(ops)


def test_bench_gp_refuses_an_unknown_network_at_once(tmp_path):
    # the name used to end the spawned case; the parent then waited out --timeout for it
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--networks", "atlantis", "--timeout", "60",
         "--out", str(tmp_path / "b.json")],
        capture_output=True, text=True, timeout=50,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--networks: unknown atlantis; use monaco, luxembourg, town100k" in proc.stderr
    assert not (tmp_path / "b.json").exists()
