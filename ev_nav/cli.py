"""The ``ev-nav`` command line: parse, call the library, print.

Sub-commands live next to the code they drive; each such module exposes
``register(subparsers)`` and sets ``func`` on its parsers. This file only wires them together and
turns :class:`ev_nav.errors.EvNavError` into a one-line message and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import importlib
import math
import re
import sqlite3
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

from ev_nav import __version__
from ev_nav.errors import SEED_LIMIT, EvNavError, StateNotice

# Modules that contribute sub-commands, in the order they appear in ``--help``.
COMMAND_MODULES: tuple[str, ...] = (
    "ev_nav.roads.cli",  # network build | info | fetch
    "ev_nav.trips.cli",  # init | route | observe | map | history | changes | vehicles
    "ev_nav.store.doctor",  # doctor
    "ev_nav.server.cli",  # serve
    "ev_nav.sim.cli",  # fleet run | report | grid, routes pick
    "ev_nav.bo.cli",  # bo cvs | ucvs | ptr | boke
    "ev_nav.sim.demo",  # demo
)

#: Every top-level command, its module and its one-line help. Only the module of the command
#: being run is imported: the BO and GP modules import torch (2-3 s), which ``--version``,
#: ``history`` or ``doctor`` must not pay. A test checks this table against the modules.
COMMANDS: dict[str, tuple[str, str]] = {
    "network": ("ev_nav.roads.cli", "build, inspect or download road networks"),
    "init": ("ev_nav.trips.cli", "create a state directory for per-trip learning"),
    "route": ("ev_nav.trips.cli", "plan a trip, record it, write its map"),
    "observe": ("ev_nav.trips.cli", "record the energy a planned trip used"),
    "map": ("ev_nav.trips.cli", "HTML map of the learned network"),
    "history": ("ev_nav.trips.cli", "past trips: predicted vs observed energy"),
    "changes": ("ev_nav.trips.cli", "roads flagged as changed: list them, or dismiss a flag"),
    "vehicles": ("ev_nav.trips.cli", "the vehicle catalogue: EV models init can use"),
    "doctor": (
        "ev_nav.store.doctor",
        "check a state (database, checkpoints, network) and repair it",
    ),
    "serve": (
        "ev_nav.server.cli",
        "routing server: HTTP API and web page for a fleet (loopback by default)",
    ),
    "fleet": ("ev_nav.sim.cli", "simulated fleet-learning experiments"),
    "routes": ("ev_nav.sim.cli", "experiment routes for a network"),
    "bo": ("ev_nav.bo.cli", "Bayesian-optimisation experiments on the shared GP core"),
    "demo": ("ev_nav.sim.demo", "fleet-learning demo on the embedded town"),
}


def _load_command_module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only tolerate the module itself being absent (a partial install); a missing
        # dependency inside it is a real error and must surface.
        if exc.name == name:
            return None
        raise


# ------------------------------------------------------------------ shared argument types
# (used by several command modules; a bad value is a one-line usage error, never a traceback)
def seed_arg(text: str) -> int:
    """A seed of a random generator: a whole number in 0..2^63-1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < SEED_LIMIT:  # the range errors.require_seed keeps from Python
        raise argparse.ArgumentTypeError(f"a seed must be in 0..2^63-1, got {text}")
    return value


def state_arg(text: str) -> Path:
    """A state directory: any path but an empty one (``Path("")`` is the current folder, so
    ``init ""`` made a state there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a state directory is needed, got an empty name")
    return Path(text)


def count_arg(text: str) -> int:
    """A count that must be at least one (workers, rounds between checkpoints, ...)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def finite_arg(text: str) -> float:
    """Any finite number (a range is the option's own check on top)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def fraction_arg(text: str) -> float:
    """A share or probability: a number in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def run_script(main: Callable[[], int | None]) -> NoReturn:
    """Run a ``scripts/*.py`` entry point and exit with its status.

    Bad input the script does not check itself (a missing data file: an
    :class:`~ev_nav.errors.EvNavError`; a folder that cannot be made or written: an ``OSError``)
    ends in one line on stderr, as ``ev-nav`` does, never in a traceback; so does Ctrl-C (exit
    130).
    """
    prog = Path(sys.argv[0]).name
    try:
        code = main()
    except EvNavError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C: what ev-nav says, not a traceback (finished runs stay)
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        raise
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"{prog}: error: {exc.strerror or exc}{where}", file=sys.stderr)
        sys.exit(2)
    sys.exit(int(code or 0))


def town_size_arg(text: str) -> int:
    """The size of the embedded synthetic town [segments], within the range it can be built in."""
    from ev_nav.roads.synthetic import MAX_TOWN_SEGMENTS, MIN_TOWN_SEGMENTS

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not MIN_TOWN_SEGMENTS <= value <= MAX_TOWN_SEGMENTS:
        raise argparse.ArgumentTypeError(
            f"a synthetic town has {MIN_TOWN_SEGMENTS}..{MAX_TOWN_SEGMENTS:,} segments, got {text}"
        )
    return value


#: A negative number (``-1e1`` and ``-10%`` too), or a ``LAT,LON`` point whose latitude is
#: negative (``-33.9,18.4``): a value, never an option. argparse knows only plain negative
#: numbers; a southern point given where a positional belongs (``network fetch -33.9,18.4``) was
#: taken for an unknown option, and ``--temperature -1e1`` for a missing value.
_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_NEGATIVE_VALUE = re.compile(rf"^-{_NUMBER}%?$|^-{_NUMBER}\s*,\s*-?{_NUMBER}$")


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (like every other ev-nav error), and
    that reads a negative number or southern ``LAT,LON`` point as a value wherever one goes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_VALUE

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"ev-nav: error: {message} (see '{self.prog} --help')\n")


def _base_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = OneLineErrorParser(
        prog="ev-nav",
        description="Energy-efficient EV routing that learns what each road segment costs.",
    )
    parser.add_argument("--version", action="version", version=f"ev-nav {__version__}")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def build_parser(command: str | None = None, *, modules: bool = True) -> argparse.ArgumentParser:
    """Build the argument parser.

    With ``command`` (the sub-command about to run) only that command's module is imported and
    registered in full; the others appear as one-line entries of ``--help``. Without it every
    module is imported (the full parser, for documentation and tests) unless ``modules`` is
    false (``--version``, top-level ``--help``: one-line entries only, nothing heavy imported).
    """
    parser, sub = _base_parser()
    if not modules:
        wanted: tuple[str, ...] = ()
    elif command is None:
        wanted = COMMAND_MODULES
    else:
        wanted = (COMMANDS[command][0],)
    registered: set[str] = set()
    for name in COMMAND_MODULES:
        if name not in wanted:
            continue
        module = _load_command_module(name)
        if module is not None:
            module.register(sub)
            registered |= {c for c, (m, _) in COMMANDS.items() if m == name}
    for name, (_, text) in COMMANDS.items():
        if name not in registered:
            sub.add_parser(name, help=text, add_help=False)
    return parser


def _deepest_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The parser of the (sub-)sub-command ``args`` were parsed for (``network build``)."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)),
                   None)
        chosen = None if sub is None else getattr(args, sub.dest, None)
        if sub is None or chosen not in sub.choices:
            return parser
        parser = sub.choices[chosen]


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line (first argument that is not an option)."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in COMMANDS else None
        if arg in ("-h", "--help", "--version"):
            return None
    return None


#: Options whose value may start with "-" (southern/western coordinates: ``--from -45,-170``,
#: ``--via``; a downhill trip's negative total), which argparse would otherwise take for an
#: option.
_NEGATIVE_VALUE_OPTIONS = frozenset({"--from", "--to", "--via", "--total-wh"})


def _join_negative_values(argv: list[str]) -> list[str]:
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in _NEGATIVE_VALUE_OPTIONS:
            value = next(it, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


def tell(kind: str, message: object) -> None:
    """One ``ev-nav: KIND: message`` line on stderr (``notice`` or ``warning``), as an error is
    one ``ev-nav: error:`` line; what went to stdout before it is flushed first."""
    sys.stdout.flush()
    print(f"ev-nav: {kind}: {message}", file=sys.stderr, flush=True)


@contextmanager
def _one_line_warnings() -> Iterator[None]:
    """Print ev-nav's warnings (a ``UserWarning`` raised in ev-nav's code;
    :class:`~ev_nav.errors.StateNotice` as a notice) as one ``ev-nav: warning:`` line, as its
    errors are, instead of Python's form with the file, line and source line of where they were
    raised. A library's warnings keep Python's form, which names where they come from."""
    shown = warnings.showwarning
    package = Path(__file__).resolve().parent

    def show(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
        if not issubclass(category, UserWarning) or not Path(filename).resolve().is_relative_to(
            package
        ):
            return shown(message, category, filename, lineno, file, line)
        tell("notice" if issubclass(category, StateNotice) else "warning", message)
        return None

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ev-nav`` console script; returns the process exit code."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # Output piped into e.g. `head` that stopped reading: not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        import os

        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None) -> int:
    argv = _join_negative_values(list(sys.argv[1:] if argv is None else argv))
    command = _command_of(argv)
    # ``--version`` and ``--help`` need no command module at all.
    parser = build_parser(command, modules=command is not None)
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # said by the command's own parser: its --help lists what it takes
            _deepest_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # usage error (one line already printed), --help, --version
        return int(exc.code or 0)
    # the tokens as typed: a handler may need to tell an option given at its default value
    # from no option at all (``ev-nav bo FAMILY`` alone prints help)
    args.command_line = tuple(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 1
    try:
        with _one_line_warnings():
            code = func(args)
    except EvNavError as exc:
        # one line whatever the message quotes (a damaged value can hold a line break)
        tell("error", " ".join(str(exc).split()))
        return exc.exit_code
    except sqlite3.DatabaseError as exc:
        # Last resort: the store translates its own errors, but a damaged page can surface in
        # any query; never a traceback, and never advice that could destroy intact data.
        said = " ".join(str(exc).split())
        hint = ("; SQLite writes beside the database (its -wal and -shm files), so a state in "
                "a read-only folder or file system cannot be opened: check that it is writable"
                if "unable to open database file" in said else "")
        tell("error", f"a state database could not be read ({said}){hint}; 'ev-nav doctor "
             "STATE' checks it and salvages what is readable")
        return 2
    except KeyboardInterrupt:
        print("ev-nav: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise  # main() handles it: a reader that stopped, not an error of ours
    except OSError as exc:
        # Last resort for a path the commands do not check themselves (an --out folder that
        # cannot be created or written): what the system said, on one line.
        where = f": {exc.filename}" if exc.filename else ""
        print(f"ev-nav: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return 2
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
