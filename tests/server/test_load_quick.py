"""scripts/load_server.py --quick: the load script runs end to end (a server on loopback,
concurrent simulated vehicles, the durability check) and prints its figures. No timing is
asserted: the figures come from the full run (see the README)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_load_script_quick(tmp_path) -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "load_server.py"), "--quick", "--workdir",
         str(tmp_path), "--catch-up-timeout", "600"],
        capture_output=True, text=True, timeout=900, check=False, cwd=ROOT,
    )
    out = res.stdout
    assert res.returncode == 0, out + res.stderr
    m = re.search(r"requests: \d+ in ([\d.]+) s = [\d.]+ requests/s", out)
    assert m, out
    # the header says "for 6 s"; a run that ended sooner (the vehicles' trips ran out) says so
    header = re.search(r"load_server: \d+ vehicles for (\d+) s", out)
    assert header, out
    shorter = float(m.group(1)) < float(header.group(1)) - 0.5
    assert shorter == ("before the 6 s were up" in out), out
    assert re.search(r"route latency: p50 \d+ ms, p95 \d+ ms", out), out
    assert re.search(r"observations: acknowledged [1-9]\d*, refused as implausible \d+, "
                     r"request errors 0", out), out
    assert "absorbed the last acknowledged observation" in out, out
    assert out.strip().splitlines()[-1] == "lost observations: 0"
