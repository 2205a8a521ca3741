"""scripts/bench_demo.py --quick times a small demo with one thread and with the default
settings beside a busy loop and prints the ratio (no timing is asserted: the README quotes a
full run); ``ev-nav demo --threads`` refuses a bad count in one line."""

import re
import subprocess
import sys
from pathlib import Path

from ev_nav.cli import main

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_demo.py"


def test_bench_demo_quick():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--busy", "1"],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for key in ("1 busy loop(s) beside the demo", "demo one-thread:", "demo default:"):
        assert key in proc.stdout
    ratio = re.search(r"demo default/one-thread ratio under load: (\d+\.\d\d)$", proc.stdout, re.M)
    assert ratio is not None and float(ratio.group(1)) > 0


def test_demo_refuses_a_bad_thread_count(capsys):
    assert main(["demo", "--threads", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ev-nav: error:") and "--threads" in err and err.count("\n") == 1
