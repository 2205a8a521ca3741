"""``ev-nav serve STATE``: the routing server (HTTP API and web page) of a state.

Loopback by default. ``--token`` (or ``EV_NAV_TOKEN``) makes every request that changes the state
require ``Authorization: Bearer TOKEN``. The web framework is imported only when the command runs.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import math
import os
import signal
import socket
import sys
import threading
from pathlib import Path

from ev_nav.cli import state_arg, tell

#: Environment variable holding the shared token when ``--token`` is not given.
TOKEN_ENV = "EV_NAV_TOKEN"


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535 (0: any free one), got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive, finite number of seconds, got {text}"
        )
    return value


def _host(text: str) -> str:
    """``--host``: an address, never empty (an empty one listens on every interface, which an
    unset ``$HOST`` would do without anyone asking for it)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            "expected an address to listen on, e.g. 127.0.0.1 (0.0.0.0 for every interface)"
        )
    return text.strip()


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``serve``."""
    p = subparsers.add_parser(
        "serve", help="routing server: HTTP API and web page for a fleet (loopback by default)"
    )
    p.add_argument("state", type=state_arg, help="state directory (ev-nav init)")
    p.add_argument("--host", type=_host, default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0: every interface)")
    p.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0: any free)")
    p.add_argument(
        "--token",
        help=f"shared token required to plan and post (default: ${TOKEN_ENV}, else none; "
        "prefer the variable: a command line is visible to other users)",
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.add_argument(
        "--checkpoint-every", type=_seconds, default=30.0, metavar="S",
        help="least seconds between model checkpoints (default 30; observations are durable "
        "anyway)",
    )
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(func=_cmd_serve)


def resolve_token(given: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The token from ``--token``, else ``$EV_NAV_TOKEN``; empty means none.

    Raises
    ------
    ConfigError
        For a token with whitespace or control characters (it could not be sent in a header).
    """
    from ev_nav.errors import ConfigError

    env = os.environ if environ is None else environ
    token = given if given is not None else env.get(TOKEN_ENV)
    if not token:
        return None
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in token):
        raise ConfigError("the token must not contain spaces or control characters")
    return token


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _cmd_serve(args: argparse.Namespace) -> int:
    from ev_nav.errors import StateIOError

    token = resolve_token(args.token)
    # Bind before the (slow) state is opened: a taken port is reported at once, and with
    # --port 0 the real port is known for the start-up line.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
        # listening from now on: a client that connects while the state is being opened waits
        # in the backlog instead of being refused (uvicorn accepts once it runs)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        taken = (" - another program uses that port: give another --port, or --port 0 for "
                 "any free one") if exc.errno == errno.EADDRINUSE else ""
        raise StateIOError(
            f"cannot listen on {args.host}:{args.port} ({exc.strerror}){taken}"
        ) from None
    try:
        return _serve(args, sock, token)
    finally:
        sock.close()


def _one_thread_pools() -> None:
    """Run torch and the BLAS/OpenMP pools on one thread in the server process.

    A server's parallelism is its threads (request handlers, the model writer, a background
    refit); a multi-threaded BLAS call from one of them would take every core from the others
    (the request handlers' route latency), and the matrices are small enough that one thread
    does them in milliseconds.
    """
    import scipy.linalg  # noqa: F401  (load SciPy's own OpenBLAS before limiting it)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)


def _load_lazy_code() -> None:
    """Load before serving what the first requests and the first refit would load while the
    fleet waits: the compiled routing kernels (0.8 s) and the part of torch its optimiser
    imports on first use (``torch._dynamo``, 1.3 s). Imports hold the interpreter lock, so
    inside the first seconds of serving they stalled every request (the slowest of a load
    run's first second took 0.8 s)."""
    import torch

    from ev_nav.bandits.routing import load_compiled

    try:
        load_compiled()
        torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])
    except Exception:  # noqa: BLE001 - only a head start: what fails here fails as before later
        pass


def _freeze_start_up() -> None:
    """Exempt what start-up made from the garbage collector's full collections.

    The libraries, the network and the opened state are a few hundred thousand objects that
    live as long as the process. Every full (oldest-generation) collection, which the requests'
    temporary objects set off every few hundred requests, walked them all: 0.1-0.4 s with the
    GIL held, over a millisecond a request on Monaco. Collected once and frozen
    (``gc.freeze``), they are not walked again; what requests make is collected as before.
    """
    import gc

    gc.collect()
    gc.freeze()


def _serve(args: argparse.Namespace, sock: socket.socket, token: str | None) -> int:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    # A SIGINT/SIGTERM during start-up is remembered and honoured as soon as uvicorn runs.
    # Left to Python's default, it raised KeyboardInterrupt wherever start-up was — or, once
    # asyncio's runner held SIGINT, cancelled uvicorn's start-up — and the service's threads
    # then kept the process alive until a second signal (a test hung on a loaded machine).
    early: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: early.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        return _run_server(args, sock, token, shown, port, early)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run_server(
    args: argparse.Namespace,
    sock: socket.socket,
    token: str | None,
    shown: str,
    port: int,
    early: list[int],
) -> int:
    import uvicorn

    from ev_nav.server.app import create_app
    from ev_nav.server.service import FleetService

    _one_thread_pools()
    # loaded while the state opens (the writer's thread: mostly I/O and BLAS, which release
    # the interpreter lock); before the first request either way
    loader = threading.Thread(target=_load_lazy_code, name="ev-nav-load-code")
    loader.start()
    try:
        service = FleetService(
            args.state, args.network, checkpoint_every_s=args.checkpoint_every,
            address=f"http://{shown}:{port}/",
        )
    finally:
        loader.join()
    for note in service.notices:
        tell("notice", note)
    if not _is_loopback(args.host) and token is None:
        tell("notice", f"serving on {args.host} without a token: anyone who can reach it can "
             f"plan and record trips (set ${TOKEN_ENV} or --token)")
    app = create_app(service, token=token)
    _freeze_start_up()
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=args.access_log,
        # the service is one process holding one model; more workers would be more models
        workers=1,
        timeout_graceful_shutdown=30,
    )
    banner = (
        f"ev-nav: serving {args.state} ({service.net.name}, {service.net.n_segments:,} segments, "
        f"model {service.model_kind}) on http://{shown}:{port}/"
        f"{' (token required to post)' if token else ''}"
    )

    class _AnnouncedServer(uvicorn.Server):
        """Says "serving" only once it has started — listening, with its signal handlers
        installed. Announced earlier, a supervisor's SIGINT could land while asyncio's runner
        still owned the signal: it cancelled the start-up, and the runner's shutdown then
        waited for the service's threads, which stop only after it (the process hung until a
        second SIGINT; seen on a loaded 2-core machine in tests/server)."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if early:  # asked to stop while starting: stop now (uvicorn's graceful path)
                self.should_exit = True
            elif self.started:
                print(banner, file=sys.stderr, flush=True)

    server = _AnnouncedServer(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        # uvicorn shuts down gracefully on Ctrl-C / SIGINT, then raises the signal again
        pass
    finally:
        stopped = service.close(timeout_s=1.0)  # the app's shutdown normally waited already
    if not stopped:
        # The writer is inside an update that cannot be interrupted (a hyperparameter fit).
        # Its input is in the store; the next start replays it. Leave now, without running
        # the interpreter's teardown under a thread that is still computing (a crash-safe
        # exit for the store: an unfinished write is rolled back when the state is opened).
        print("ev-nav: server stopped while the model was still learning; every acknowledged "
              "observation is in the store and is learned again at the next start",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)
    print("ev-nav: server stopped", file=sys.stderr, flush=True)
    return 0
