"""The ``ev-nav`` command line: parse, call the library, print.

Sub-commands live next to the code they drive; each such module exposes
``register(subparsers)`` and sets ``func`` on its parsers. This file only wires them together and
turns :class:`ev_nav.errors.EvNavError` into a one-line message and a non-zero exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys
from collections.abc import Sequence
from typing import NoReturn

from ev_nav import __version__
from ev_nav.errors import EvNavError

# Modules that contribute sub-commands, in the order they appear in ``--help``.
COMMAND_MODULES: tuple[str, ...] = (
    "ev_nav.roads.cli",  # network build | info | fetch
    "ev_nav.trips_cli",  # init | route | observe | map | history
    "ev_nav.doctor",  # doctor
    "ev_nav.sim.cli",  # fleet run | report | grid
    "ev_nav.bo.cli",  # bo cvs | ucvs | ptr | boke
    "ev_nav.demo",  # demo
)


def _load_command_module(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        # Only tolerate the module itself being absent (a partial install); a missing
        # dependency inside it is a real error and must surface.
        if exc.name == name:
            return None
        raise


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (like every other ev-nav error)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"ev-nav: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """Build the full argument parser (all registered sub-commands)."""
    parser = OneLineErrorParser(
        prog="ev-nav",
        description="Energy-efficient EV routing that learns what each road segment costs.",
    )
    parser.add_argument("--version", action="version", version=f"ev-nav {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = _load_command_module(name)
        if module is not None:
            module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ev-nav`` console script; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 1
    try:
        code = func(args)
    except EvNavError as exc:
        print(f"ev-nav: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except sqlite3.DatabaseError as exc:
        # Last resort: the store translates its own errors, but a damaged page can surface in
        # any query; never a traceback, and never advice that could destroy intact data.
        print(
            f"ev-nav: error: a state database could not be read ({exc}); "
            "'ev-nav doctor STATE' checks it and salvages what is readable",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("ev-nav: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
