#!/usr/bin/env python
"""Load test of ``ev-nav serve``: N simulated vehicles plan and post concurrently for a while.

Bounded and loopback only: the script builds (or reuses) the Monaco network, creates a fresh
state, starts ``ev-nav serve`` on a free port of 127.0.0.1 in a child process, and lets
``--vehicles`` simulated vehicles (one thread and one keep-alive connection each, the real
client of :mod:`ev_nav.server.client`) ask for routes between random places, "drive" them in a
simulated world (physical ground truth with observation noise) and post what they cost, for
``--duration`` seconds. A vehicle asks for the route it drives alone; ``--alternatives`` adds
the rows a person compares (best guess, shortest, fastest), as the previous release always did.
Then it waits (at most ``--catch-up-timeout``) for the model to absorb every acknowledged
observation, stops the server gracefully and checks the state: every acknowledged observation
must be in the store, the durable record the model is rebuilt from.

Prints requests/s, route latency (p50/p95), observation latency, how long the model took to
catch up (or how far behind it still was), and ``lost observations: N``; exits 1 if anything was
lost or a request failed.

    python scripts/load_server.py                       # 8 vehicles, 2 minutes, Monaco
    python scripts/load_server.py --quick               # 2 vehicles, a few seconds, a small town
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ev_nav.settings import data_dir

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = data_dir()


def _monaco(workdir: Path, release: Path | None = None) -> Path:
    """The Monaco network file (built once from the MoST OSM extract with 'ev-nav network
    build', as the README does; by the ``release`` checkout, in its format, when given)."""
    out = workdir / ("most_monaco.npz" if release is None else "most_monaco-release.npz")
    if not out.is_file():
        osm = SHARED_DATA / "most_monaco.osm.gz"
        if not osm.is_file():
            sys.exit(f"load_server: {osm} is missing (set EV_NAV_DATA)")
        where = {} if release is None else {
            "cwd": release.resolve(), "env": {**os.environ, "PYTHONPATH": str(release.resolve())}
        }
        subprocess.run(
            [sys.executable, "-m", "ev_nav.cli", "network", "build", "--osm", str(osm),
             "--out", str(out.resolve())],
            check=True, stdout=subprocess.DEVNULL, **where,
        )
    return out


def _pairs(net, n: int, rng: np.random.Generator, min_m: float) -> list[tuple[int, int]]:
    """``n`` random (start, goal) segment pairs at least ``min_m`` apart (straight line)."""
    from ev_nav.roads.network import haversine_m

    mid = net.segment_midpoints()
    out: list[tuple[int, int]] = []
    while len(out) < n:
        s, g = rng.integers(0, net.n_segments, 2)
        if s != g and haversine_m(mid[s, 0], mid[s, 1], mid[g, 0], mid[g, 1]) >= min_m:
            out.append((int(s), int(g)))
    return out


#: How often the monitor polls what the served model has absorbed [s].
WATCH_S = 0.1
#: The model-lag goal [s]: absorbed/posted counts what is visible this long after the end.
LAG_GOAL_S = 2.0


def _model_lag(trips, seen: list[tuple[float, int]]) -> tuple[list[float], int]:
    """Per acknowledged batch, the seconds until the served model included it (from the polled
    ``model_applied_upto``); and how many were included by the last poll."""
    times = np.array([t for t, _ in seen])
    upto = np.maximum.accumulate(np.array([u for _, u in seen]))
    lags, absorbed = [], 0
    for trip in trips:
        if trip.batch is None or trip.acked_at is None:
            continue
        after = (upto >= trip.batch) & (times >= trip.acked_at - WATCH_S)
        if after.any():
            lags.append(float(times[np.argmax(after)] - trip.acked_at))
            absorbed += 1
    return lags, absorbed


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time [s] a process has used so far (Linux ``/proc``; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


#: What each plausibility refusal says (``ev_nav.trips.plausibility.check_plausible``).
REFUSAL_REASONS = {"standard deviations from": "far from the prediction",
                   "looks like kWh": "kWh/Wh mix-ups", "reads as no reading": "blank readings"}


def _refusal_reasons(messages: list[str | None]) -> str:
    """``11 far from the prediction, 1 blank readings``: refusals counted by their reason."""
    counts = dict.fromkeys([*REFUSAL_REASONS.values(), "other"], 0)
    for m in messages:
        if m is not None:
            counts[next((r for k, r in REFUSAL_REASONS.items() if k in m), "other")] += 1
    return ", ".join(f"{n} {reason}" for reason, n in counts.items() if n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--vehicles", type=int, default=8, help="concurrent vehicles")
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of driving")
    parser.add_argument("--observe", choices=("segments", "total"), default="segments",
                        help="post per-segment energies (default) or trip totals")
    parser.add_argument("--policy", default="ts", help="routing policy the vehicles ask for")
    parser.add_argument("--model", choices=("gp", "bi"), default="gp", help="the state's model")
    parser.add_argument("--network", type=Path, help="network .npz (default: Monaco, built)")
    parser.add_argument("--workdir", type=Path, default=REPO / "cache" / "load_server",
                        help="where the network and the fresh state go")
    parser.add_argument("--catch-up-timeout", type=float, default=300.0,
                        help="longest wait for the model to absorb the last observation [s]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--synthetic", action="store_true",
                        help="the default synthetic state (ev-nav init --synthetic) instead of "
                        "Monaco")
    parser.add_argument("--release", type=Path,
                        help="serve with the ev_nav package of another checkout (e.g. a worktree "
                        "of the last release), to print its figures beside this one's")
    parser.add_argument("--alternatives", action="store_true",
                        help="vehicles ask for the rows shown for comparison too (best guess, "
                        "shortest, fastest), as a person's request does; by default they ask for "
                        "the route they drive alone. Always on with --release (older servers "
                        "have no such option)")
    parser.add_argument("--quick", action="store_true",
                        help="2 vehicles for 6 s on a 400-segment synthetic town (a smoke test)")
    args = parser.parse_args(argv)
    if args.vehicles < 1 or not 0 < args.duration < 86_400:  # (NaN failed later, in int())
        parser.error("--vehicles must be >= 1 and --duration in (0, 86400) seconds")

    from ev_nav.energy import get_vehicle
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.roads.synthetic import synthetic_town
    from ev_nav.server.client import (
        RoutingClient,
        ServerError,
        ServerProcess,
        drive_fleet,
        percentile_ms,
    )
    from ev_nav.sim.environment import Environment
    from ev_nav.store import Store
    from ev_nav.trips.session import create_state

    args.workdir.mkdir(parents=True, exist_ok=True)
    state = args.workdir / f"state-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    if args.quick:
        args.vehicles, args.duration = min(args.vehicles, 2), min(args.duration, 6.0)
        source: dict[str, object] = {"synthetic": 400}
    elif args.synthetic:
        source = {"synthetic": 2000}
    else:
        source = {"network": args.network or _monaco(args.workdir, args.release)}
    if args.release is None:
        session = create_state(state, model=args.model, **source)  # type: ignore[arg-type]
        net, vehicle = session.net, session.vehicle
        session.close()
    else:
        # the other checkout makes the state, in its own format (this one would migrate it)
        how = (["--synthetic", "--segments", str(source["synthetic"])] if "synthetic" in source
               else ["--network", str(source["network"])])
        subprocess.run([sys.executable, "-m", "ev_nav.cli", "init", str(state.resolve()), *how,
                        "--model", args.model], cwd=args.release.resolve(), check=True,
                       env={**os.environ, "PYTHONPATH": str(args.release.resolve())},
                       stdout=subprocess.DEVNULL)
        net = (synthetic_town(int(source["synthetic"]), seed=0) if "synthetic" in source
               else RoadNetwork.load(source["network"]))  # type: ignore[arg-type]
        vehicle = get_vehicle()
    world = Environment.create(net, seed=args.seed, vehicle=vehicle)
    rng = np.random.default_rng(args.seed)
    # more trips than any vehicle can drive in the time: the deadline ends the run
    per_vehicle = max(50, int(args.duration * 20))
    pairs = [_pairs(net, per_vehicle, rng, 500.0) for _ in range(args.vehicles)]
    token = secrets.token_hex(16)

    # a server from before the option plans every comparison row (and refuses the field)
    alternatives = args.alternatives or args.release is not None
    print(f"load_server: {args.vehicles} vehicles for {args.duration:.0f} s against "
          f"'ev-nav serve' on {net.name} ({net.n_segments:,} segments), model {args.model}, "
          f"policy {args.policy}, posting {args.observe}, route documents: "
          f"{'with the comparison rows' if alternatives else 'the planned route alone'}",
          flush=True)
    env, cwd = None, None
    if args.release is not None:
        # 'python -m' puts the working directory first on the path: run the server there
        cwd = args.release.resolve()
        env = {**os.environ, "PYTHONPATH": str(cwd)}
        print(f"serving with the ev_nav package of {args.release}", flush=True)
    with ServerProcess(state.resolve(), token=token, env=env, cwd=cwd) as server:
        url = server.url
        with RoutingClient(url, token) as probe:
            start = probe.health()
            v0 = int(start["model_version"])  # type: ignore[arg-type]
            r0 = int(start.get("refits", 0))  # type: ignore[arg-type]
        # what route requests see: the served model's newest absorbed batch, polled
        seen: list[tuple[float, int]] = []
        watching = threading.Event()

        def watch() -> None:
            with RoutingClient(url, token) as mon:
                while not watching.is_set():
                    try:
                        upto = int(mon.health()["model_applied_upto"])  # type: ignore[arg-type]
                    except ServerError:
                        upto = seen[-1][1] if seen else 0
                    seen.append((time.monotonic(), upto))
                    time.sleep(WATCH_S)

        watcher = threading.Thread(target=watch, name="model-watch", daemon=True)
        watcher.start()
        # CPU counted from here: neither process's start-up (opening or creating the state,
        # loading code) is part of serving the run
        server_cpu0, client_cpu0 = _cpu_seconds(server.proc.pid), time.process_time()
        deadline = time.monotonic() + args.duration
        report = drive_fleet(lambda: RoutingClient(url, token), net, world, pairs,
                             policy=args.policy, observe=args.observe, seed=args.seed,
                             deadline=deadline, alternatives=alternatives)
        acked = report.acknowledged
        t_end = time.monotonic()
        server_cpu = _cpu_seconds(server.proc.pid)
        if server_cpu is not None and server_cpu0 is not None:
            server_cpu -= server_cpu0
        client_cpu = time.process_time() - client_cpu0
        time.sleep(LAG_GOAL_S)  # what the model shows the lag goal after the vehicles stopped
        watching.set()
        watcher.join()
        lags, absorbed = _model_lag(report.trips, seen)
        catch_up, behind = None, 0
        with RoutingClient(url, token) as probe:
            if acked:
                try:
                    catch_up = probe.wait_for_model(acked[-1], timeout_s=args.catch_up_timeout)
                except ServerError:
                    pass  # still learning: reported below, the observations are in the store
            health = probe.health()
            behind = sum(b > int(health["model_applied_upto"]) for b in acked)  # type: ignore
        code = server.stop()
    if code != 0:
        print("\n".join(server.log[-15:]))
    with Store.open(state) as store:
        stored = {b.id for b in store.observations()}
    # lost = acknowledged but not in the store (the durable record the model is rebuilt from)
    lost = [b for b in acked if b not in stored]

    routes = [t.route_seconds for t in report.trips]
    observes = [t.observe_seconds for t in report.trips if t.batch is not None]
    refused = sum(t.refused is not None for t in report.trips)
    n_requests = report.requests
    elapsed = t_end - (deadline - args.duration)
    versions = int(health["model_version"]) - v0  # type: ignore[arg-type]
    print(f"requests: {n_requests} in {elapsed:.1f} s = {n_requests / elapsed:.1f} requests/s "
          f"(routes {len(routes)}, observations {len(observes) + refused})")
    if elapsed < args.duration - 0.5:
        # the header said "for --duration s": say why the run was shorter
        print(f"the vehicles drove all their {per_vehicle} trips each in {elapsed:.1f} s, before "
              f"the {args.duration:.0f} s were up")
    print(f"route latency: p50 {percentile_ms(routes, 50):.0f} ms, "
          f"p95 {percentile_ms(routes, 95):.0f} ms, max {percentile_ms(routes, 100):.0f} ms")
    print(f"observation latency: p50 {percentile_ms(observes, 50):.0f} ms, "
          f"p95 {percentile_ms(observes, 95):.0f} ms")
    quarters = ", ".join(f"{q:.1f}" for q in report.regret_by_quarter())
    print(f"mean regret per trip by quarter of the run [Wh]: {quarters}")
    print(f"observations: acknowledged {len(acked)}, refused as implausible {refused}, "
          f"request errors {len(report.errors)}")
    if refused:
        print(f"refused: {100 * refused / max(len(acked) + refused, 1):.2f} % of the posted "
              f"observations ({_refusal_reasons([t.refused for t in report.trips])})")
    if catch_up is not None:
        lag = f"it had absorbed the last acknowledged observation {catch_up:.1f} s after the " \
              "vehicles stopped"
    else:
        lag = (f"{behind} acknowledged batches were still to be learned {args.catch_up_timeout:.0f}"
               " s after the vehicles stopped (in the store: replayed at the next start)")
    # each refit is seconds of CPU in a background thread (a fit, then catching up): part of
    # the server's CPU per request, and more of them finish where the machine is quieter
    refits = int(health.get("refits", 0)) - r0  # type: ignore[arg-type]
    print(f"model: {versions} snapshots published during the run, {refits} hyperparameter "
          f"refits adopted (the last took {float(health.get('refit_seconds', 0.0)):.1f} s); {lag}")
    if server_cpu is not None:
        print(f"CPU during the run: server {server_cpu:.0f} s, load script (vehicles, world) "
              f"{client_cpu:.0f} s, of {2 * elapsed:.0f} core-seconds on 2 cores; server "
              f"{1000 * server_cpu / max(n_requests, 1):.1f} ms CPU per request")
    print(f"model lag (acknowledged -> visible to route requests): p50 "
          f"{_pct(lags, 50):.2f} s, p95 {_pct(lags, 95):.2f} s (goal p95 <= {LAG_GOAL_S:g} s)")
    print(f"absorbed/posted: {absorbed / max(len(acked), 1):.3f} ({absorbed} of {len(acked)} "
          f"acknowledged batches visible {LAG_GOAL_S:g} s after the vehicles stopped; "
          "goal >= 0.999)")
    print(f"server exit code {code}; state {state}")
    for err in report.errors[:5]:
        print(f"error: {err}")
    print(f"lost observations: {len(lost)}")
    return 0 if not lost and not report.errors and code == 0 else 1


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
