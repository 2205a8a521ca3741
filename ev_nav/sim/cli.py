"""``ev-nav fleet run | grid | report``: simulated fleet-learning experiments; ``ev-nav routes
pick``: experiment routes for any network."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ev_nav.cli import count_arg, seed_arg
from ev_nav.wording import plural


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``fleet`` command group."""
    parser = subparsers.add_parser("fleet", help="simulated fleet-learning experiments")
    sub = parser.add_subparsers(dest="fleet_command", metavar="ACTION")
    parser.set_defaults(func=lambda _a: parser.print_help() or 1)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("config", type=Path, help="experiment config (TOML, see README)")
        p.add_argument(
            "--out", type=Path,
            help="output folder (default: the config's [output] dir, else runs/CONFIG-NAME)",
        )
        p.add_argument(
            "--resume",
            action="store_true",
            help="continue an interrupted experiment: finished runs are skipped, "
            "half-finished ones continue from their checkpoint",
        )
        p.add_argument(
            "--checkpoint-every", type=count_arg,
            help="rounds between checkpoints (default: the config's [output] checkpoint_every, "
            "else 50)",
        )
        p.add_argument("--quiet", action="store_true",
                       help="no progress bars (drawn only when stderr is a terminal)")

    run = sub.add_parser("run", help="run a fleet config in this process (progress per run)")
    common(run)
    run.set_defaults(func=_cmd_run)

    grid = sub.add_parser(
        "grid", help="run a config's runs in parallel (local processes or a Dask cluster)"
    )
    common(grid)
    grid.add_argument(
        "--executor",
        choices=("local", "dask", "inprocess"),
        help="local process pool (default), Dask (default with --dask-*), or in-process "
        "(debugging)",
    )
    grid.add_argument(
        "--workers", type=count_arg, help="local process pool size (default: all cores)"
    )
    dask = grid.add_mutually_exclusive_group()
    dask.add_argument(
        "--dask-scheduler", help="address of an existing Dask scheduler, e.g. tcp://host:8786"
    )
    dask.add_argument(
        "--dask-local", type=count_arg, metavar="N",
        help="start a Dask LocalCluster with N workers (default with --executor dask: all cores)",
    )
    grid.set_defaults(func=_cmd_grid)

    drive = sub.add_parser(
        "drive", help="drive a running 'ev-nav serve' with the config's simulated fleet"
    )
    from ev_nav.server.client import add_drive_arguments  # light: no web framework, no torch

    add_drive_arguments(drive)

    report = sub.add_parser("report", help="write regret figures and tables of a finished run")
    report.add_argument("run_dir", type=Path, help="output folder of 'fleet run' / 'fleet grid'")
    report.set_defaults(func=_cmd_report)

    routes = subparsers.add_parser("routes", help="experiment routes for a network")
    rsub = routes.add_subparsers(dest="routes_command", metavar="ACTION")
    routes.set_defaults(func=lambda _a: routes.print_help() or 1)
    pick = rsub.add_parser(
        "pick", help="far-apart routes where energy matters; prints a fleet config's [[routes]]"
    )
    pick.add_argument("network", help="network: .npz from 'network build', or an OSM file")
    pick.add_argument("--count", type=int, default=2,
                      help="how many routes (A, B, ...; default 2)")
    pick.add_argument("--seed", type=seed_arg, default=0,
                      help="seed of the candidate draw (default 0)")
    pick.add_argument("--starts", type=int, default=60,
                      help="random start segments tried (default 60)")
    pick.add_argument("--min-separation", type=float, default=1000.0,
                      help="between routes' endpoints [m] (default 1000)")
    pick.add_argument("--out", type=Path,
                      help="also write the TOML snippet to this new file (see --force)")
    pick.add_argument("--force", action="store_true",
                      help="let --out replace a file that exists")
    pick.set_defaults(func=_cmd_routes_pick)


def _cmd_routes_pick(args: argparse.Namespace) -> int:
    from ev_nav.errors import ConfigError
    from ev_nav.provenance import atomic_write_text
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.sim.routes import pick_routes, routes_toml

    path = Path(args.network)
    if args.out is not None:  # before the picking, which takes seconds to minutes
        if args.out.is_dir():
            raise ConfigError(f"--out {args.out} is a folder; give a file, e.g. routes.toml")
        if args.out.resolve() == path.resolve():
            raise ConfigError(
                f"--out {args.out} is the network file itself; give the TOML snippet its own "
                "file, e.g. routes.toml"
            )
        if args.out.suffix.lower() != ".toml":
            # the snippet replaces the file: a typo must not overwrite a state's database or
            # a network (it did, silently)
            raise ConfigError(f"--out {args.out} is not a .toml file; the routes are a TOML "
                              "snippet, e.g. --out routes.toml")
        if args.out.exists() and not args.force:
            # e.g. the fleet config the routes are meant for: it was replaced, silently
            raise ConfigError(f"--out {args.out} exists; give a new file (then copy the "
                              "[[routes]] tables into your config), or --force to replace it")
    if path.suffix == ".npz":
        net = RoadNetwork.load(path)
    else:
        net = _load_osm_for_pick(path)
    routes = pick_routes(
        net,
        args.count,
        n_starts=args.starts,
        seed=args.seed,
        min_separation_m=args.min_separation,
    )
    text = f"# routes picked on {net.name} by 'ev-nav routes pick' (seed {args.seed})\n"
    text += routes_toml(routes)
    print(text, end="")
    if args.out is not None:
        try:
            atomic_write_text(args.out, text)
        except OSError as exc:
            raise ConfigError(f"cannot write {args.out} ({exc.strerror or exc})") from None
        print(f"# written to {args.out}", file=sys.stderr)
    return 0


def _load_osm_for_pick(path: Path):
    """The network of an OSM file, its warnings passed on with hints that fit ``routes pick``.

    The loader's "no --dem" names ``network build``'s option, which ``routes pick`` has not:
    the hint says how to get grades (build the network with a DEM, pick on the ``.npz``).
    """
    import warnings

    from ev_nav.roads.load import load_osm

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        net = load_osm(path)
    for w in caught:  # (again through the filters in force: what they hide stays hidden)
        text = str(w.message)
        if "no --dem" in text:
            text = (text.replace("no --dem", "no DEM") + f"; for grades, build it with "
                    f"'ev-nav network build --osm {path} --dem TILE --out NET.npz' and pick "
                    "on NET.npz")
        warnings.warn(text, w.category, stacklevel=1)
    return net


def _prepare(args: argparse.Namespace):
    from ev_nav.errors import ConfigError
    from ev_nav.sim.fleet import specs_from_toml

    specs, output = specs_from_toml(args.config)
    out = args.out or Path(output.get("dir", Path("runs") / args.config.stem))
    if out.exists() and not out.is_dir():
        raise ConfigError(f"the output folder {out} is a file; give a folder with --out")
    if not args.resume and (out / "runs").is_dir() and any((out / "runs").iterdir()):
        raise ConfigError(
            f"{out} already holds runs; pass --resume to continue them or --out for a new folder"
        )
    every = args.checkpoint_every or int(output.get("checkpoint_every", 50))  # both >= 1
    return specs, out, every


def _config_record(path: Path) -> dict[str, str]:
    """What ``grid.json`` keeps of the config: its path as given, its text and the text's
    SHA-256 (the path alone left the results unreproducible once the file was edited or the
    folder moved)."""
    import hashlib

    data = path.read_bytes()  # (just parsed by specs_from_toml: readable, UTF-8)
    return {"config_file": str(path), "config_sha256": hashlib.sha256(data).hexdigest(),
            "config_text": data.decode("utf-8")}


def _finish(result, out: Path) -> int:
    from ev_nav.sim.report import write_report

    reused = sum(o.status == "skipped" for o in result.outcomes)
    ran = len(result.outcomes) - reused
    note = ""
    if reused:  # --resume: finished runs are read back, not run again
        were = "was" if reused == 1 else "were"
        note = (" (every run had finished: reused, none run again)" if not ran
                else f" ({reused} had finished and {were} reused, {ran} run now)")
    print(f"{plural(len(result.outcomes), 'run')} in {result.seconds:.1f} s -> {out}{note}")
    for o in result.failed:
        print(f"FAILED {o.run_id}: {o.error} (see {out / 'runs' / o.run_id / 'error.txt'})")
    # the report covers this config's runs: a folder resumed with an edited config also holds
    # the old config's runs, which the summary would average in as more seeds
    own = {o.run_id for o in result.outcomes}
    others = [d for d in (out / "runs").iterdir() if d.is_dir() and d.name not in own]
    if others:
        print(f"note: {out / 'runs'} also holds {plural(len(others), 'run')} this config does "
              "not make (left out of this report; 'ev-nav fleet report' includes every run)")
    table = write_report(out, [o.run_id for o in result.outcomes if o.status != "failed"])
    if table:
        print(table)
        _print_written(out)
    return 1 if result.failed else 0


def _print_written(out: Path) -> None:
    from ev_nav.sim.report import REPORT_FILES

    print(f"wrote {', '.join(REPORT_FILES)} in {out}")


def _cmd_run(args: argparse.Namespace) -> int:
    from ev_nav.sim.grid import InProcessExecutor, run_grid

    specs, out, every = _prepare(args)
    try:
        result = run_grid(
            specs,
            out,
            executor=InProcessExecutor(),
            resume=args.resume,
            checkpoint_every=every,
            progress=not args.quiet and sys.stderr.isatty(),
            config=_config_record(args.config),
        )
    except KeyboardInterrupt:
        return _interrupted(args, out)
    return _finish(result, out)


def _cmd_grid(args: argparse.Namespace) -> int:
    from ev_nav.sim.grid import make_executor, run_grid

    kind = _executor_kind(args)  # before the config is read: a usage error comes first
    specs, out, every = _prepare(args)
    executor = make_executor(
        kind, workers=args.workers, dask_scheduler=args.dask_scheduler, dask_local=args.dask_local
    )
    try:
        result = run_grid(
            specs,
            out,
            executor=executor,
            resume=args.resume,
            checkpoint_every=every,
            # as 'fleet run': a bar's carriage returns in a redirected log are noise
            progress=not args.quiet and sys.stderr.isatty(),
            config=_config_record(args.config),
        )
    except KeyboardInterrupt:
        return _interrupted(args, out)
    return _finish(result, out)


def _interrupted(args: argparse.Namespace, out: Path) -> int:
    """Ctrl-C during a grid: say how to go on (finished runs and each run's last checkpoint
    are kept); exit 130 as any interrupted command."""
    again = ["ev-nav", "fleet", args.fleet_command, str(args.config),
             *([] if args.out is None else ["--out", str(out)]), "--resume"]
    print(f"ev-nav: interrupted; the finished runs and each run's last checkpoint are kept in "
          f"{out}: '{' '.join(again)}' goes on from there", file=sys.stderr)
    return 130


def _executor_kind(args: argparse.Namespace) -> str:
    """The executor ``fleet grid`` runs on; refuses options the chosen one would ignore."""
    from ev_nav.errors import ConfigError

    dask_option = (
        "--dask-scheduler" if args.dask_scheduler else "--dask-local" if args.dask_local else None
    )
    kind = args.executor or ("dask" if dask_option else "local")
    if dask_option and kind != "dask":
        raise ConfigError(f"{dask_option} runs on Dask; drop '--executor {kind}'")
    if args.workers is not None and kind != "local":
        where = (
            "--dask-local N (a scheduler's workers are the 'dask worker' processes it has)"
            if kind == "dask"
            else "nothing (it runs one run at a time)"
        )
        raise ConfigError(
            f"--workers sizes the local process pool; with the {kind} executor use {where}"
        )
    return kind


def _cmd_report(args: argparse.Namespace) -> int:
    from ev_nav.errors import StateError
    from ev_nav.sim.report import write_report

    if not (args.run_dir / "runs").is_dir():
        raise StateError(f"{args.run_dir} is not an experiment folder (no runs/ inside)")
    table = write_report(args.run_dir, distinct=True)
    for line in _left_out_notes(args.run_dir / "runs"):
        print(line)
    print(table or "no finished runs yet: nothing written")
    if table:
        _print_written(args.run_dir)
    return 0


def _left_out_notes(runs: Path) -> list[str]:
    """``note:`` lines naming the run folders a report leaves out (no ``trips.csv``): failed
    ones (an ``error.txt``) and unfinished ones. They were dropped silently: an agent showed
    fewer runs than the others, or was missing from the tables."""
    folders = sorted(d for d in runs.iterdir() if d.is_dir() and not (d / "trips.csv").is_file())
    failed = [d.name for d in folders if (d / "error.txt").is_file()]
    unfinished = [d.name for d in folders if d.name not in failed]
    notes = []
    if failed:
        notes.append(f"note: left out, failed: {plural(len(failed), 'run')} "
                     f"({', '.join(failed)}; see error.txt in each run's folder)")
    if unfinished:
        notes.append(f"note: left out, unfinished: {plural(len(unfinished), 'run')} "
                     f"({', '.join(unfinished)}; 'fleet run' or 'fleet grid' with --resume "
                     "continues them)")
    return notes
