#!/usr/bin/env python
"""Whole-command latency of the driver's CLI against bare interpreter imports, measured in one run.

Builds a Monaco state (MoST network, GP model) with ``--trips`` recorded trips (default 20), then
times, as a user waits for them (a fresh process each, start-up included, medians of ``--repeat``):
``python -c "import numpy"``, ``python -c "import numpy, scipy.sparse"``,
``python -c "import torch"``, ``ev-nav --version``, ``ev-nav history``, ``ev-nav route --no-map``
and ``ev-nav observe``. ``route`` and the NumPy/SciPy import alternate, run by run, so that a
change in the machine's load shifts both. Each command runs once untimed first, with the
bytecode cache on (``PYTHONDONTWRITEBYTECODE`` dropped, see :data:`ENV`): a user's installed
ev-nav starts from cached bytecode after its first run. Prints each median and the ratios the
issues ask for:

    version/numpy-import ratio: Y              (goal <= 1.5)
    history/numpy-import ratio: Y              (goal <= 1.5)
    route/numpy-scipy-import ratio: X          (goal <= 3; planning imports no torch)
    route/torch-import ratio: X                (goal <= 2.5)
    observe/torch-import ratio: X              (goal <= 2.5)

``--quick`` uses the synthetic town, 2 trips and 1 repeat (a smoke test of the script itself).
Usage: python scripts/bench_cli.py [--trips 20] [--repeat 5] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ev_nav.cli import count_arg

REPO = Path(__file__).resolve().parents[1]
EV_NAV = [sys.executable, "-m", "ev_nav.cli"]


#: The timed processes' environment: this one's without PYTHONDONTWRITEBYTECODE, so that
#: ev-nav's modules start from cached bytecode as in an installation that has run once (the
#: libraries compared with were compiled when pip installed them). With it set, every start
#: compiles ev-nav's modules again: about 30 ms of a 170 ms history on the 2-core machine.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=ENV)
    return time.perf_counter() - t0


def _median(cmd: list[str], repeat: int) -> float:
    _wall(cmd)  # once untimed: the bytecode is written, as by a user's first run
    return statistics.median(_wall(cmd) for _ in range(repeat))


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--trips", type=count_arg, help="trips recorded (default 20; quick 2)")
    p.add_argument("--repeat", type=count_arg, help="timings a median is of (default 5; quick 1)")
    p.add_argument(
        "--quick", action="store_true", help="synthetic town, 2 trips, 1 repeat (unless given)"
    )
    args = p.parse_args()
    trips = args.trips or (2 if args.quick else 20)
    repeat = args.repeat or (1 if args.quick else 5)
    with tempfile.TemporaryDirectory(prefix="ev-nav-bench-cli-") as tmp:
        tmp = Path(tmp)
        state = tmp / "state"
        if args.quick:
            subprocess.run([*EV_NAV, "init", str(state), "--synthetic"], check=True,
                           stdout=subprocess.DEVNULL, env=ENV)
            points = ("47.0010,8.0020", "47.0100,8.0150")
        else:
            net = tmp / "monaco.npz"
            subprocess.run([*EV_NAV, "network", "build", "--osm",
                            str(REPO.parent / "shared" / "data" / "most_monaco.osm.gz"),
                            "--out", str(net)], check=True, stdout=subprocess.DEVNULL, env=ENV,
                           stderr=subprocess.DEVNULL)
            subprocess.run([*EV_NAV, "init", str(state), "--network", str(net)], check=True,
                           stdout=subprocess.DEVNULL, env=ENV)
            points = ("43.7237558,7.3994245", "43.7724615,7.4562873")  # route A
        route = [*EV_NAV, "route", str(state), "--from", points[0], "--to", points[1],
                 "--no-map"]
        for t in range(1, trips + 1):  # (with ENV: route's and observe's bytecode written)
            subprocess.run(route, check=True, stdout=subprocess.DEVNULL, env=ENV)
            subprocess.run([*EV_NAV, "observe", str(state), str(t), "--total-wh", "500",
                            "--force"], check=True, stdout=subprocess.DEVNULL, env=ENV)
        numpy_s = _median([sys.executable, "-c", "import numpy"], repeat)
        torch_s = _median([sys.executable, "-c", "import torch"], repeat)
        version_s = _median([*EV_NAV, "--version"], repeat)
        history_s = _median([*EV_NAV, "history", str(state)], repeat)
        scipy_times, route_times = [], []
        for _ in range(repeat):  # alternating: both see the same load
            scipy_times.append(_wall([sys.executable, "-c", "import numpy, scipy.sparse"]))
            route_times.append(_wall(route))
        scipy_s, route_s = statistics.median(scipy_times), statistics.median(route_times)
        observe_times = []
        for _ in range(repeat):  # each observe needs a trip of its own
            planned = subprocess.run([*route, "--json"], check=True, capture_output=True,
                                     text=True, env=ENV).stdout
            trip = json.loads(planned)["trip"]
            observe_times.append(_wall([*EV_NAV, "observe", str(state), str(trip),
                                        "--total-wh", "500", "--force"]))
        observe_s = statistics.median(observe_times)
    where = "synthetic town (quick)" if args.quick else "MoST Monaco"
    print(f"{where}, {trips} recorded trips, medians of {repeat}:")
    for name, s in (("import numpy", numpy_s), ("import numpy, scipy.sparse", scipy_s),
                    ("import torch", torch_s),
                    ("ev-nav --version", version_s), ("ev-nav history", history_s),
                    ("ev-nav route --no-map", route_s), ("ev-nav observe", observe_s)):
        print(f"  {name:<28}{s * 1000:8.0f} ms")
    print(f"version/numpy-import ratio: {version_s / numpy_s:.2f}")
    print(f"history/numpy-import ratio: {history_s / numpy_s:.2f}")
    print(f"route/numpy-scipy-import ratio: {route_s / scipy_s:.2f}")
    print(f"route/torch-import ratio: {route_s / torch_s:.2f}")
    print(f"observe/torch-import ratio: {observe_s / torch_s:.2f}")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
