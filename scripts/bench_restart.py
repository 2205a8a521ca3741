#!/usr/bin/env python
"""Restart after a crash with a backlog (issue 32, item 2): how soon ``ev-nav serve`` answers,
and how soon it has learned what it had not.

Bounded and loopback only. The script

1. creates a state (MoST Monaco, or with ``--quick`` a small synthetic town), serves it, plans
   and records a few trips through the API so the server saves a checkpoint, and kills the
   server with SIGKILL (the lock it held must not be stale);
2. records a backlog of ``--batches`` observation batches the model has not learned — trips on
   random routes with per-segment energies from the simulator's physical world, written to the
   store directly as a server killed before its writer absorbed them leaves them;
3. starts ``ev-nav serve`` again and times, from the moment the process is started: the first
   answer of ``/api/health`` (routes are planned on the last checkpoint meanwhile, reported
   ``stale``), the moment the served model includes the last batch, and the first checkpoint
   that covers it;
4. times ``ev-nav route`` on the state with the same backlog (a command replays at most
   ``ev_nav.settings.CLI_MAX_REPLAY`` batches before answering).

Prints ``restart to health: 1.4 s``, ``backlog 5000 absorbed in 12.0 s`` (goals 5 s and 60 s)
and the checkpoint and CLI figures.

    python scripts/bench_restart.py                 # Monaco, 5,000 batches
    python scripts/bench_restart.py --quick         # a 400-segment town, 300 batches
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ev_nav.cli import count_arg

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _backlog(state: Path, n_batches: int, seed: int) -> int:
    """Record ``n_batches`` trips with per-segment energies straight into the store; returns the
    newest batch id."""
    from ev_nav.bandits.routing import Router
    from ev_nav.sim.environment import Environment
    from ev_nav.store import Store
    from ev_nav.trips.session import open_session

    with open_session(state, with_model=False) as session:
        net, vehicle = session.net, session.vehicle
    world = Environment.create(net, seed=seed, vehicle=vehicle)
    router = Router(net)
    rng = np.random.default_rng(seed)
    last = 0
    with Store.open(state) as store:
        made = 0
        while made < n_batches:
            s, g = (int(x) for x in rng.integers(0, net.n_segments, 2))
            if s == g:
                continue
            path = router.route(net.length_m, s, g)
            energy = world.drive(path, rng)
            trip = store.add_trip(
                origin_segment=int(path[0]), goal_segment=int(path[-1]), policy="ts",
                route=path, predicted_wh=float(energy.sum()), predicted_sd_wh=1.0,
                length_m=float(net.length_m[path].sum()),
                time_s=float(net.travel_time_s[path].sum()),
            )
            last = store.add_observations(trip, path, energy)
            made += 1
    return last


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--batches", type=count_arg,
        help="unlearned batches at the restart (default 5000; quick 300)",
    )
    ap.add_argument(
        "--quick", action="store_true", help="a 400-segment town, 300 batches (unless --batches)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0, help="give up after this [s]")
    args = ap.parse_args(argv)
    if args.batches is None:
        args.batches = 300 if args.quick else 5000
    # the state, network file and server logs live in a folder removed when the
    # command ends (each run of --quick in the tests left one behind before)
    with tempfile.TemporaryDirectory(prefix="bench-restart-") as d:
        return _bench(args, Path(d))


def _bench(args: argparse.Namespace, work: Path) -> int:
    """The measurement, with its files in ``work``."""
    import httpx

    import ev_nav
    from ev_nav.server.client import _SERVING, RoutingClient, ServerProcess
    from ev_nav.settings import CLI_MAX_REPLAY
    from ev_nav.store import Store

    state = work / "state"
    if args.quick:
        ev_nav.create_state(state, synthetic=400, model="gp").close()
        label = "synthetic town (400 segments)"
    else:
        from ev_nav.roads.load import load_osm
        from ev_nav.settings import data_dir, network_cache_dir

        net = load_osm(data_dir() / "most_monaco.osm.gz", cache_dir=network_cache_dir())
        net.save(work / "monaco.npz")
        ev_nav.create_state(state, network=work / "monaco.npz", model="gp").close()
        label = f"MoST Monaco ({net.n_segments:,} segments)"
    token = "bench-restart-token"

    # 1. a server that learned a little and saved a checkpoint, then SIGKILL
    server = ServerProcess(state, token=token, args=["--checkpoint-every", "1"])
    with RoutingClient(server.url, token) as client:
        rng = np.random.default_rng(args.seed)
        with ev_nav.open_state(state) as session:
            mid = session.net.segment_midpoints()  # (lon, lat): points on the roads
        for _ in range(3):
            a, b = rng.choice(mid.shape[0], 2, replace=False)
            trip = client.plan((mid[a, 1], mid[a, 0]), (mid[b, 1], mid[b, 0]))
            r = trip["routes"]["planned"]
            client.record_total(int(trip["trip"]), float(r["predicted_wh"]), force=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with Store.open(state) as store:
                if store.checkpoints() and store.checkpoints()[0].last_batch_id >= 3:
                    break
            time.sleep(0.5)
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()

    # 2. the backlog
    t0 = time.perf_counter()
    newest = _backlog(state, args.batches, args.seed)
    print(f"{label}: {args.batches:,} unlearned observation batches recorded in "
          f"{time.perf_counter() - t0:.1f} s (newest batch {newest})", flush=True)

    # 3. the restart
    t_start = time.monotonic()
    cmd = [sys.executable, "-m", "ev_nav.cli", "serve", str(state), "--host", "127.0.0.1",
           "--port", "0", "--token", token]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = ""
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    buf = ""
    health_s = absorbed_s = checkpoint_s = None
    stale_seen = False
    try:
        while time.monotonic() - t_start < args.timeout:
            try:
                buf += proc.stdout.read() or ""
            except (BlockingIOError, TypeError):
                pass
            found = _SERVING.search(buf)
            if not url and found:
                url = f"http://127.0.0.1:{found.group(1)}"
            if proc.poll() is not None:
                print(buf[-2000:])
                raise SystemExit("the server exited")
            if url:
                try:
                    h = httpx.get(url + "/api/health", timeout=5).json()
                except httpx.HTTPError:
                    h = None
                if h is not None:
                    now = time.monotonic() - t_start
                    if health_s is None:
                        health_s = now
                        stale_seen = bool(h.get("stale"))
                    if absorbed_s is None and int(h["model_applied_upto"]) >= newest:
                        absorbed_s = now
                    if absorbed_s is not None:
                        with Store.open(state) as store:
                            cks = store.checkpoints()
                        if cks and cks[0].last_batch_id >= newest:
                            checkpoint_s = now
                            break
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()

    def fmt(x: float | None) -> str:
        return "not within the timeout" if x is None else f"{x:.1f} s"

    print(f"restart to health: {fmt(health_s)} (goal <= 5 s; the first answer reported "
          f"stale={stale_seen})")
    print(f"backlog {args.batches} absorbed in {fmt(absorbed_s)} (goal <= 60 s)")
    print(f"backlog checkpointed after {fmt(checkpoint_s)}")

    # 4. a command on a state with the same backlog (the server's checkpoint is newer now, so
    # record the backlog again for the command to replay)
    newest = _backlog(state, args.batches, args.seed + 1)
    a, b = rng.choice(mid.shape[0], 2, replace=False)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "ev_nav.cli", "route", str(state), "--from",
         f"{mid[a, 1]},{mid[a, 0]}", "--to", f"{mid[b, 1]},{mid[b, 0]}", "--dry-run", "--no-map"],
        capture_output=True, text=True, timeout=args.timeout,
    )
    took = time.monotonic() - t0
    print(f"ev-nav route with {args.batches:,} unlearned batches: {took:.1f} s, exit "
          f"{out.returncode} (replays at most {CLI_MAX_REPLAY:,} batches before answering)")
    ok = health_s is not None and absorbed_s is not None and out.returncode == 0
    return 0 if ok else 1


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
