#!/usr/bin/env python
"""Run ``make test`` several times in a row from a fresh clone while both cores are kept busy.

The suite must be deterministic under load: no assertion may depend on how fast the machine is.
This script checks that promise the way CI's machine can fail it. It clones the repository
(committed ``HEAD``) into a scratch folder beside a link to ``../shared``, starts one busy loop per
core, runs ``make test`` ``--runs`` times, stops the loops, and prints each run's pytest summary
line and wall time.

Usage: python scripts/suite_under_load.py [--runs 3] [--busy 2] [--workdir /tmp/ev-nav-load]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^=*\s*(\d+ passed.*?)\s*=*$")


def _busy_loops(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def _fresh_clone(workdir: Path) -> Path:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    # The suite reads ../shared/data beside the checkout, as on CI.
    (workdir / "shared").symlink_to(REPO.parent / "shared")
    clone = workdir / "main"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    return clone


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="how many suite runs in a row")
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy loops")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/ev-nav-load"))
    args = parser.parse_args()

    clone = _fresh_clone(args.workdir)
    # Install once before loading the machine: the promise is about the tests, not pip.
    subprocess.run(["make", "-C", str(clone), ".venv/.installed"], check=True,
                   stdout=subprocess.DEVNULL)
    loops = _busy_loops(args.busy)
    failures = 0
    try:
        for i in range(1, args.runs + 1):
            t0 = time.perf_counter()
            proc = subprocess.run(["make", "-C", str(clone), "test"], capture_output=True,
                                  text=True)
            wall = time.perf_counter() - t0
            lines = [ln for ln in proc.stdout.splitlines() if SUMMARY.match(ln.strip())]
            summary = lines[-1].strip() if lines else "(no pytest summary line)"
            print(f"run {i}: exit {proc.returncode}, {wall:.0f} s wall, {args.busy} busy loops: "
                  f"{summary}", flush=True)
            if proc.returncode != 0:
                failures += 1
                log = args.workdir / f"run-{i}.log"
                log.write_text(proc.stdout + proc.stderr)
                print(f"  output kept in {log}", flush=True)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    return 1 if failures else 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
