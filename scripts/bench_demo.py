#!/usr/bin/env python
"""How the demo's default thread use fares on a busy machine: ``ev-nav demo`` timed once with
one thread forced and once with its default settings, while busy loops run beside it.

Each demo is a fresh ``python -m ev_nav.cli demo`` process (imports included, as a user waits
for it). The one-thread run sets ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``,
``OPENBLAS_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` to 1; the default run removes them from its
environment. ``--busy`` processes running ``while True: pass`` are started before the first demo
and stopped after the last, so both runs see the same load. With ``--repeat n`` the two runs
alternate n times and the medians are compared::

    python scripts/bench_demo.py                 # the full demo, 2 busy loops
    python scripts/bench_demo.py --busy 0        # the demo's own time on a quiet machine
    python scripts/bench_demo.py --quick         # a small town, a few rounds (seconds)

Prints both times and ``demo default/one-thread ratio under load: R``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
#: A small demo for --quick: a 600-segment town, 3 rounds of 2 vehicles, one world.
QUICK_ARGS = ("--segments", "600", "--rounds", "3", "--vehicles", "2", "--seeds", "1")


@contextmanager
def busy_loops(n: int) -> Iterator[None]:
    """``n`` processes spinning on a core each, stopped (and reaped) on leaving the block."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def _seconds(text: str) -> float:
    """A time limit: a finite number of seconds > 0."""
    from ev_nav.cli import finite_arg

    value = finite_arg(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def time_demo(demo_args: list[str], out: Path, one_thread: bool, timeout_s: float) -> float:
    """Wall seconds of one ``ev-nav demo`` process (raises if it fails)."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    if one_thread:
        env.update(dict.fromkeys(THREAD_VARS, "1"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "ev_nav.cli", "demo", "--quiet", "--out", str(out), *demo_args]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"bench_demo.py: error: the demo ran past --timeout {timeout_s:g} s "
                         "(stopped)") from None
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"demo failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a small demo (seconds), for the tests")
    p.add_argument("--busy", type=int, default=2, help="busy loops beside the demo (default 2)")
    p.add_argument("--repeat", type=int, default=1, help="alternate the two runs n times")
    p.add_argument("--timeout", type=_seconds, default=900.0, help="seconds allowed per demo run")
    p.add_argument(
        "demo_args", nargs="*", help="extra `ev-nav demo` options (after --), e.g. -- --rounds 10"
    )
    args = p.parse_args(argv)
    if args.busy < 0 or args.repeat < 1:
        p.error("--busy must be >= 0 and --repeat >= 1")
    demo_args = [*(QUICK_ARGS if args.quick else ()), *args.demo_args]
    times: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp, busy_loops(args.busy):
        for i in range(args.repeat):
            for one_thread in (True, False):
                out = Path(tmp) / f"{'one' if one_thread else 'default'}-{i}"
                times[one_thread].append(time_demo(demo_args, out, one_thread, args.timeout))
    one, default = (statistics.median(times[k]) for k in (True, False))
    cores = os.cpu_count()
    print(f"machine: {cores} cores; {args.busy} busy loop(s) beside the demo")
    print(f"demo args: {' '.join(demo_args) or '(defaults)'}; median of {args.repeat} run(s)")
    print(f"demo one-thread: {one:.1f} s  ({', '.join(f'{t:.1f}' for t in times[True])})")
    print(f"demo default:    {default:.1f} s  ({', '.join(f'{t:.1f}' for t in times[False])})")
    load = "under load" if args.busy else "without load"
    print(f"demo default/one-thread ratio {load}: {default / one:.2f}")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
