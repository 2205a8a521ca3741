"""Talking to a running ``ev-nav serve``: a small HTTP client (standard library only) and a
simulated fleet that drives the server as real vehicles would.

The simulated fleet is the end-to-end check of the real path: each vehicle asks the server for a
route between two places, "drives" it in a simulated world (a ground-truth energy per segment
with observation noise, :class:`ev_nav.sim.environment.Environment`), posts what the drive cost,
and measures its regret against the world's true optimum. Vehicles run concurrently (one thread
and one connection each), as a fleet posts to one server. ``ev-nav fleet drive`` and
``scripts/load_server.py`` use it.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

import numpy as np
from numpy.typing import NDArray

from ev_nav.cli import tell
from ev_nav.errors import ConfigError, EvNavError
from ev_nav.roads.partial import driven_shares
from ev_nav.wording import plural

if TYPE_CHECKING:
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.sim.fleet import RunSpec

__all__ = [
    "DriveReport",
    "RoutingClient",
    "ServerError",
    "ServerUnreachable",
    "TripRecord",
    "drive_fleet",
    "ServerProcess",
    "percentile_ms",
]

JsonValue = dict[str, object] | list[object] | str | int | float | bool | None


class ServerError(EvNavError):
    """The server answered with an error (its one-line message and HTTP status)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"server: {message} (HTTP {status})")
        self.status = status
        self.message = message


class ServerUnreachable(EvNavError, ConnectionError):
    """No answer from the server (not running, wrong address, connection lost)."""


class RoutingClient:
    """A keep-alive HTTP/1.1 connection to one ev-nav server. Not shared between threads: each
    vehicle has its own.

    Parameters
    ----------
    base_url : str
        ``http://HOST:PORT`` of the server.
    token : str, optional
        Shared token, sent as ``Authorization: Bearer``.
    timeout_s : float
        Per-request socket timeout [s].
    """

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 120.0) -> None:
        bad = ConfigError(f"expected a server URL like http://127.0.0.1:8000, got {base_url!r}")
        try:
            parts = urlsplit(base_url)
            port = parts.port  # reading it checks it: a ValueError for ':99999' or ':abc'
        except ValueError:
            raise bad from None
        if parts.scheme != "http" or not parts.hostname:
            raise bad
        self.host = parts.hostname
        self.port = port or 80
        self.token = token
        self.timeout_s = timeout_s
        self._conn: http.client.HTTPConnection | None = None
        #: wall time of the last request [s] (connection, request, response)
        self.last_seconds = 0.0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> RoutingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: JsonValue = None) -> JsonValue:
        """Send one request; the decoded JSON answer, or :class:`ServerError` for 4xx/5xx."""
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            payload = json.dumps(body, allow_nan=False).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        t0 = time.perf_counter()
        while True:
            reused = self._conn is not None
            if self._conn is None:
                self._conn = http.client.HTTPConnection(
                    self.host, self.port, timeout=self.timeout_s
                )
            try:
                self._conn.request(method, path, body=payload, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if not reused:
                    raise ServerUnreachable(
                        f"the server at {self.host}:{self.port} closed the connection"
                    ) from None
                # a kept-alive connection that the server closed while it was idle (uvicorn
                # does after a few seconds, before reading anything): retry on a fresh one
            except OSError as exc:  # refused, unreachable, timed out
                self.close()
                raise ServerUnreachable(
                    f"cannot reach the server at {self.host}:{self.port} ({exc})"
                ) from None
        self.last_seconds = time.perf_counter() - t0
        try:
            doc = json.loads(raw) if raw else None
        except ValueError:
            # not JSON: another program answers there (its HTML page was shown as a bytes literal)
            kind = resp.getheader("Content-Type") or "no content type"
            raise ServerError(
                resp.status, f"the answer from {self.host}:{self.port}{path} is not JSON "
                f"({kind}, {len(raw):,} bytes): is an ev-nav server (ev-nav serve) listening there?"
            ) from None
        if resp.status >= 400:
            message = doc.get("error") if isinstance(doc, dict) else None
            raise ServerError(resp.status, str(message or doc))
        return doc

    # ------------------------------------------------------------------ the API
    def health(self) -> dict[str, object]:
        return self._dict(self.request("GET", "/api/health"))

    def plan(
        self,
        origin: tuple[float, float],
        goal: tuple[float, float],
        *,
        policy: str = "ts",
        soc: str | None = None,
        vehicle: str | None = None,
        via: Sequence[tuple[float, float]] = (),
        avoid: Sequence[str] = (),
        time_weight: float = 0.0,
        temperature: float | None = None,
        alternatives: bool = True,
    ) -> dict[str, object]:
        """Plan and record a trip; ``origin``/``goal``/``via`` are (lat, lon) [deg], ``avoid``
        road kinds, ``time_weight`` the price of time [Wh/min] (as ``plan_trip``),
        ``temperature`` the ambient temperature [°C] to predict at; ``alternatives=False``
        asks for the planned route alone (no rows for comparison)."""
        body: dict[str, object] = {"origin": list(origin), "goal": list(goal), "policy": policy}
        if soc is not None:
            body["soc"] = soc
        if vehicle is not None:
            body["vehicle"] = vehicle
        if via:
            body["via"] = [list(p) for p in via]
        if avoid:
            body["avoid"] = list(avoid)
        if time_weight:
            body["time_weight"] = float(time_weight)
        if temperature is not None:
            body["temperature"] = float(temperature)
        if not alternatives:  # sent only when asked: servers before the option refuse the field
            body["alternatives"] = False
        return self._dict(self.request("POST", "/api/routes", body))

    def record_total(
        self, trip: int, total_wh: float, *, force: bool = False,
        temperature: float | None = None,
    ) -> dict[str, object]:
        """Record a trip's total [Wh] (at ``temperature`` [°C], where given)."""
        body: dict[str, object] = {"total_wh": float(total_wh), "force": force}
        if temperature is not None:
            body["temperature"] = float(temperature)
        return self._dict(self.request("POST", f"/api/trips/{int(trip)}/observations", body))

    def record_segments(
        self, trip: int, segments: Sequence[int], energies_wh: Sequence[float], *,
        temperature: float | None = None,
    ) -> dict[str, object]:
        """Record per-segment energies [Wh] (at ``temperature`` [°C], where given)."""
        rows = [
            {"segment": int(s), "energy_wh": float(e)}
            for s, e in zip(segments, energies_wh, strict=True)
        ]
        body: dict[str, object] = {"segments": rows}
        if temperature is not None:
            body["temperature"] = float(temperature)
        return self._dict(
            self.request("POST", f"/api/trips/{int(trip)}/observations", body)
        )

    def forget(self, trip: int) -> dict[str, object]:
        return self._dict(self.request("DELETE", f"/api/trips/{int(trip)}/observations"))

    def history(self, limit: int | None = None) -> list[dict[str, object]]:
        doc = self.request("GET", "/api/trips" + (f"?limit={int(limit)}" if limit else ""))
        if not isinstance(doc, list):
            raise ServerError(200, "history is not a list")
        return [d for d in doc if isinstance(d, dict)]

    def wait_for_model(self, batch: int, timeout_s: float = 600.0, poll_s: float = 0.5) -> float:
        """Wait until the served model includes observation batch ``batch``; seconds waited.

        Raises
        ------
        ServerError
            If it does not within ``timeout_s``.
        """
        t0 = time.monotonic()
        while True:
            h = self.health()
            if int(h["model_applied_upto"]) >= batch:  # type: ignore[arg-type]
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                raise ServerError(
                    200, f"the model has not absorbed batch {batch} after {timeout_s:.0f} s"
                )
            time.sleep(poll_s)

    @staticmethod
    def _dict(doc: JsonValue) -> dict[str, object]:
        if not isinstance(doc, dict):
            raise ServerError(200, f"unexpected answer {str(doc)[:80]!r}")
        return doc


# ====================================================================== simulated fleet
class World(Protocol):
    """The simulated world a vehicle drives in (:class:`ev_nav.sim.environment.Environment`)."""

    def drive(self, path: NDArray[np.int64], rng: np.random.Generator) -> NDArray[np.float64]:
        """Noisy per-segment energies [Wh] of driving ``path``."""
        ...

    def regret(self, path: NDArray[np.int64], start: int, goal: int) -> tuple[float, float, float]:
        """(regret, energy, optimal energy) [Wh] of ``path``."""
        ...


@dataclass(frozen=True)
class TripRecord:
    """One simulated trip through the server."""

    vehicle: int
    trip: int
    batch: int | None  # acknowledged observation batch; None when the server refused it
    route_seconds: float
    observe_seconds: float
    regret_wh: float
    energy_wh: float
    optimal_wh: float
    model_version: int
    refused: str | None = None
    #: ``time.monotonic()`` when the observation was acknowledged (None: refused)
    acked_at: float | None = None


@dataclass
class DriveReport:
    """What a simulated fleet did against a server."""

    trips: list[TripRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def acknowledged(self) -> list[int]:
        """Observation batches the server acknowledged."""
        return sorted(t.batch for t in self.trips if t.batch is not None)

    @property
    def requests(self) -> int:
        """HTTP requests made for trips (a route and an observation each)."""
        return sum(1 + (t.refused is None or t.batch is not None) for t in self.trips)

    def regret_by_quarter(self) -> list[float]:
        """Mean regret [Wh] of the trips in each quarter of the run (in completion order)."""
        r = np.array([t.regret_wh for t in self.trips])
        if r.size < 4:
            return [float(r.mean())] if r.size else []
        return [float(q.mean()) for q in np.array_split(r, 4)]


def percentile_ms(seconds: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of durations, in milliseconds (NaN when there are none)."""
    return float(np.percentile(np.asarray(seconds) * 1000.0, q)) if len(seconds) else math.nan


def drive_fleet(
    connect: Callable[[], RoutingClient],
    net: RoadNetwork,
    world: World,
    pairs: Sequence[Sequence[tuple[int, int]]],
    *,
    policy: str = "ts",
    observe: str = "segments",
    seed: int = 0,
    deadline: float | None = None,
    on_trip: Callable[[TripRecord], None] | None = None,
    alternatives: bool = False,
) -> DriveReport:
    """Drive ``len(pairs)`` vehicles concurrently against a server.

    Parameters
    ----------
    connect : callable
        Makes a client (one per vehicle thread).
    net : RoadNetwork
        The network the server serves (the same file).
    world : World
        Ground truth: what driving a route really costs.
    pairs : sequence of sequences of (start, goal) segment ids
        Each vehicle's trips, in order; a vehicle asks for a route between the segments'
        midpoints.
    policy : str
        Routing policy the vehicles ask for.
    observe : {"segments", "total"}
        Post per-segment energies (semi-bandit feedback) or only the trip total.
    seed : int
        Seed of the observation noise (one stream per vehicle).
    deadline : float, optional
        ``time.monotonic()`` after which vehicles stop starting trips (a load test's duration).
    on_trip : callable, optional
        Called with each finished trip (from the vehicle's thread).
    alternatives : bool
        Ask for the rows shown for comparison too (best guess, shortest, fastest). A vehicle
        drives the planned route, so by default it asks for that alone; a server from before
        the option needs ``True`` (it refuses the field).
    """
    if observe not in ("segments", "total"):
        raise ConfigError(f"observe must be 'segments' or 'total', got {observe!r}")
    mid = net.segment_midpoints()  # (lon, lat) per segment
    report = DriveReport()
    world_lock = threading.Lock()  # the oracle's router keeps scratch arrays: one user at a time
    report_lock = threading.Lock()

    def vehicle(v: int, trips: Sequence[tuple[int, int]]) -> None:
        rng = np.random.default_rng([seed, v])
        with connect() as client:
            for start, goal in trips:
                if deadline is not None and time.monotonic() >= deadline:
                    return
                try:
                    rec = _one_trip(client, v, start, goal, rng)
                except ServerUnreachable as exc:
                    with report_lock:
                        report.errors.append(f"vehicle {v}: {exc}")
                    return
                except ServerError as exc:
                    with report_lock:
                        report.errors.append(f"vehicle {v}: {exc}")
                    continue
                with report_lock:
                    report.trips.append(rec)
                if on_trip is not None:
                    on_trip(rec)

    def _one_trip(
        client: RoutingClient, v: int, start: int, goal: int, rng: np.random.Generator
    ) -> TripRecord:
        origin = (float(mid[start, 1]), float(mid[start, 0]))
        dest = (float(mid[goal, 1]), float(mid[goal, 0]))
        doc = client.plan(
            origin, dest, policy=policy, vehicle=f"sim-{v}", alternatives=alternatives
        )
        route_s = client.last_seconds
        routes = doc["routes"]
        assert isinstance(routes, dict)
        planned = routes["planned"]
        path = np.asarray(planned["segments"], dtype=np.int64)
        with world_lock:
            energies = world.drive(path, rng)
            regret, energy, best = world.regret(
                path, int(doc["start_segment"]), int(doc["goal_segment"])  # type: ignore[arg-type]
            )
        trip = int(doc["trip"])  # type: ignore[arg-type]
        batch, refused, acked_at = None, None, None
        # the car measures the part of the first and last segment driven, as the server's
        # prediction counts them (not the whole segments)
        shares = driven_shares(
            path.size, float(planned["start_fraction"]), float(planned["end_fraction"])
        )
        try:
            if observe == "segments":
                ack = client.record_segments(trip, path.tolist(), (shares * energies).tolist())
            else:
                ack = client.record_total(trip, float(shares @ energies))
            batch = int(ack["batch"])  # type: ignore[arg-type]
            acked_at = time.monotonic()
        except ServerError as exc:
            if exc.status != 422:
                raise
            refused = exc.message  # an implausible reading: the server keeps the state as it was
        return TripRecord(
            vehicle=v,
            trip=trip,
            batch=batch,
            route_seconds=route_s,
            observe_seconds=client.last_seconds,
            regret_wh=regret,
            energy_wh=energy,
            optimal_wh=best,
            model_version=int(doc["model_version"]),  # type: ignore[arg-type]
            refused=refused,
            acked_at=acked_at,
        )

    t0 = time.monotonic()
    threads = [
        threading.Thread(target=vehicle, args=(v, trips), name=f"vehicle-{v}", daemon=True)
        for v, trips in enumerate(pairs)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report.seconds = time.monotonic() - t0
    return report


def fleet_from_config(
    config: str, server_url: str, *, token: str | None, vehicles: int | None, rounds: int | None,
    observe: str, progress: Callable[[str], None] | None = None,
    notice: Callable[[str], None] | None = None,
) -> tuple[DriveReport, dict[str, object]]:
    """``ev-nav fleet drive``: the first run of a fleet config, driven through a server.

    The config gives the network (the server must serve the same one), the trips, the ground
    truth, the policy (``[[agents]]``' first), the seed, and the horizon (``rounds`` trips per
    vehicle unless given). Returns the report and the server's health afterwards. ``notice``
    is told, for a config of several runs, which one is driven. A world that changes between
    rounds (``[truth] drift_rounds``, ``temperature_mean_c``) is refused (ConfigError): the
    vehicles drive one fixed world; ``fleet run`` simulates those.
    """
    from ev_nav.energy import Vehicle
    from ev_nav.sim.environment import Environment
    from ev_nav.sim.fleet import TripGenerator, load_network, specs_from_toml

    specs, _ = specs_from_toml(config)
    if not specs:
        raise ConfigError(f"{config} defines no runs")
    spec = specs[0]
    _refuse_changing_world(spec, config)
    if len(specs) > 1 and notice is not None:
        # the other runs (seeds, agents, routes, networks) are not driven: say so
        counts = [
            plural(len({getattr(s, part) for s in specs}), noun)
            for part, noun in (("network", "network"), ("trips", "route"),
                               ("agent", "agent"), ("seed", "seed"))
            if len({getattr(s, part) for s in specs}) > 1
        ]
        notice(f"{config} makes {len(specs)} runs ({' x '.join(counts)}); 'fleet drive' drives "
               f"the first: {spec.network.label}, route {spec.trips.name!r}, policy "
               f"{spec.agent.policy}, seed {spec.seed}")
    with RoutingClient(server_url, token) as client:
        health = client.health()
    net = load_network(spec.network)
    if health["network_hash"] != net.content_hash:
        raise ConfigError(
            f"the server serves network {health['network']} ({health['network_hash']}), but "
            f"{config} describes {net.name} ({net.content_hash}); start the server on a state "
            "of the config's network"
        )
    policy = spec.agent.policy
    if policy not in ("ts", "bucb", "ucb", "mean", "safe"):
        raise ConfigError(f"the server plans with ts, bucb, ucb, mean or safe, not {policy!r}")
    vehicle_spec = health["vehicle"]
    assert isinstance(vehicle_spec, dict)
    world = Environment.create(
        net, seed=spec.seed, truth=spec.truth, vehicle=Vehicle(**vehicle_spec)
    )
    n_vehicles = vehicles or spec.trips.vehicles
    n_rounds = rounds or spec.horizon
    gen = TripGenerator(spec.trips, net, spec.seed)
    pairs = [[gen.next() for _ in range(n_rounds)] for _ in range(n_vehicles)]
    done = [0]
    lock = threading.Lock()

    def tick(rec: TripRecord) -> None:
        with lock:
            done[0] += 1
            k = done[0]
        if progress is not None and k % max(1, (n_vehicles * n_rounds) // 10) == 0:
            progress(f"{k}/{n_vehicles * n_rounds} trips, model version {rec.model_version}")

    report = drive_fleet(
        lambda: RoutingClient(server_url, token),
        net,
        world,
        pairs,
        policy=policy,
        observe=observe,
        seed=spec.seed,
        on_trip=tick,
    )
    with RoutingClient(server_url, token) as client:
        if report.acknowledged:
            client.wait_for_model(report.acknowledged[-1])
        health = client.health()
    return report, health


def _refuse_changing_world(spec: RunSpec, config: str) -> None:
    """Refuse a world that changes from round to round (road drift, a temperature cycle).

    ``fleet drive``'s vehicles drive concurrently against one fixed world and post readings
    without a temperature; such a config was driven as if unchanging, silently. Checked before
    the server is asked anything.

    Raises
    ------
    ConfigError
        One line naming the ``[truth]`` keys given.
    """
    truth = spec.truth
    keys = []
    if truth.drift_rounds:
        keys.append("drift_rounds")
    if truth.temperature_mean_c is not None:
        keys.append("temperature_mean_c")
    if keys:
        raise ConfigError(
            f"{config}: [truth] {' and '.join(keys)}: 'fleet drive' drives one world that does "
            "not change (no road changes, no temperature cycle); simulate the config with "
            f"'fleet run', or drop {'these keys' if len(keys) > 1 else 'the key'} to drive it"
        )


# ====================================================================== ev-nav fleet drive
def add_drive_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``ev-nav fleet drive`` (registered by :mod:`ev_nav.sim.cli`)."""
    from pathlib import Path

    parser.add_argument("config", type=Path, help="fleet config (TOML): network, trips, truth")
    parser.add_argument("--server", required=True, help="URL of 'ev-nav serve', http://HOST:PORT")
    parser.add_argument("--token", help="the server's token (default: $EV_NAV_TOKEN)")
    parser.add_argument("--vehicles", type=int, help="concurrent vehicles (default: the config's)")
    parser.add_argument(
        "--rounds", type=int, help="trips per vehicle (default: the config's horizon)"
    )
    parser.add_argument(
        "--observe", choices=("segments", "total"), default="segments",
        help="post per-segment energies (default) or only trip totals",
    )
    parser.set_defaults(func=_cmd_drive)


def _cmd_drive(args: argparse.Namespace) -> int:
    import sys

    for name in ("vehicles", "rounds"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name} must be >= 1")
    token = args.token if args.token is not None else os.environ.get("EV_NAV_TOKEN") or None
    report, health = fleet_from_config(
        str(args.config), args.server, token=token, vehicles=args.vehicles,
        rounds=args.rounds, observe=args.observe,
        progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True),
        notice=lambda line: tell("notice", line),
    )
    routes = [t.route_seconds for t in report.trips]
    refused = sum(t.refused is not None for t in report.trips)
    quarters = ", ".join(f"{q:.1f}" for q in report.regret_by_quarter())
    print(f"{plural(len(report.trips), 'trip')} by "
          f"{plural(len({t.vehicle for t in report.trips}), 'vehicle')} through {args.server} "
          f"in {report.seconds:.1f} s")
    print(f"mean regret per trip by quarter [Wh]: {quarters}")
    print(f"route latency p50 {percentile_ms(routes, 50):.0f} ms, "
          f"p95 {percentile_ms(routes, 95):.0f} ms")
    print(f"observations acknowledged {len(report.acknowledged)}, refused {refused}; model "
          f"version {health['model_version']} includes batches up to "
          f"{health['model_applied_upto']}")
    for err in report.errors[:5]:
        print(f"error: {err}")
    return 1 if report.errors else 0


# ====================================================================== a server subprocess
class ServerProcess:
    """``ev-nav serve STATE`` on a free loopback port, in a child process (tests, load script).

    Use as a context manager: on exit the server is stopped with SIGINT (graceful: it finishes
    the requests in flight and checkpoints its model) and killed only if it does not stop in
    time.

    Attributes
    ----------
    url : str
        ``http://127.0.0.1:PORT``.
    log : list of str
        Everything the server printed (stderr and stdout).
    """

    def __init__(
        self,
        state: str | os.PathLike[str],
        *,
        token: str | None = None,
        args: Sequence[str] = (),
        startup_timeout_s: float = 300.0,
        env: dict[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        import subprocess
        import sys

        cmd = [sys.executable, "-m", "ev_nav.cli", "serve", str(state), "--host", "127.0.0.1",
               "--port", "0", *args]
        if token is not None:
            cmd += ["--token", token]
        self.log: list[str] = []
        # Unbuffered: the pump below relays the server's log line by line as it is written.
        # With a block-buffered stdout on the pipe, the server's final flush at exit failed
        # ("Exception ignored in <stdout>: TypeError", exit code 120) when the machine was
        # heavily loaded — measured with scripts/load_server.py --quick, at this and the
        # previous release; not understood yet, see docs/reliability.md.
        child_env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env,
            cwd=cwd,
        )
        self.url = ""
        started = threading.Event()

        def pump() -> None:  # keeps the pipe drained for the server's whole life
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.append(line.rstrip("\n"))
                found = _SERVING.search(line)
                if found and not self.url:
                    self.url = f"http://127.0.0.1:{found.group(1)}"
                    started.set()
            started.set()

        self._pump = threading.Thread(target=pump, name="ev-nav-serve-log", daemon=True)
        self._pump.start()
        if not started.wait(startup_timeout_s) or not self.url:
            self.stop()
            tail = "\n".join(self.log[-15:])
            raise ServerUnreachable(f"'ev-nav serve' did not start:\n{tail}")

    def stop(self, timeout_s: float = 180.0) -> int:
        """Stop gracefully (SIGINT), kill after ``timeout_s``; returns the exit code."""
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pump.join(timeout=10)
        return int(self.proc.returncode)

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


_SERVING = re.compile(r"on http://127\.0\.0\.1:(\d+)/")
