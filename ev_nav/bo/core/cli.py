"""The command shape every BO family shares: ``ev-nav bo FAMILY run | list | report``.

Each family module (``ev_nav.bo.<family>.cli``) describes itself as :class:`Family` objects
(``cvs`` and ``ucvs`` share a package); :func:`add_family` turns each into a parser with the
three actions and the options every family shares (user objective, executor, resumption). The
old option-only forms (``ev-nav bo cvs --benchmark …``) still run, with a one-line note naming
the new form; the bare family name (no action, no option) prints the family's help instead of
starting its default experiment.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ev_nav.bo.core.runs import ExecutionConfig
from ev_nav.errors import ConfigError

Handler = Callable[[argparse.Namespace], int]


@dataclass(frozen=True)
class Family:
    """One ``ev-nav bo FAMILY`` command.

    Attributes
    ----------
    name, help
        Command name and its one-line help.
    add_run_options
        Adds the family's ``run`` options to a parser; with ``legacy=True`` no option may be
        required (the old option-only form shares them and checks in ``run``).
    run, list, report
        The actions' handlers.
    legacy
        Whether the family had an option-only form that must keep working.
    """

    name: str
    help: str
    add_run_options: Callable[[argparse.ArgumentParser, bool], None]
    run: Handler
    list: Handler
    report: Handler
    legacy: bool = True


def add_family(sub: argparse._SubParsersAction, family: Family) -> argparse.ArgumentParser:
    """A ``FAMILY`` parser with ``run``, ``list`` and ``report``."""
    parser = sub.add_parser(
        family.name,
        help=family.help,
        description=f"{family.help}. Actions: run (experiments, your own objective), list "
        f"(methods and benchmarks), report (tables and figures of a saved run).",
    )
    actions = parser.add_subparsers(dest="bo_action", metavar="ACTION")
    run = actions.add_parser(
        "run",
        help="run methods x seeds (benchmark or --objective); write results.csv + manifest.json",
    )
    family.add_run_options(run, False)
    add_shared_run_options(run)
    run.set_defaults(func=_options_after_action(family, "run", family.run))
    actions.add_parser("list", help="methods and benchmarks").set_defaults(
        func=_options_after_action(family, "list", family.list)
    )
    report = actions.add_parser("report", help="summary table (and figure) of a saved run")
    report.add_argument("path", type=Path, help="folder written by `run` (or its results.csv)")
    report.add_argument("--figure", type=Path, default=None, help="also write this PNG")
    report.set_defaults(func=_options_after_action(family, "report", family.report))
    if family.legacy:
        family.add_run_options(parser, True)
        add_shared_run_options(parser)
        parser.set_defaults(func=_legacy(family, parser))
    else:
        parser.set_defaults(func=lambda _a: parser.print_help() or 1)
    return parser


def _nothing_after(command_line: Sequence[str] | None, family: str) -> bool:
    """Whether ``ev-nav bo FAMILY`` was typed with nothing after the family's name.

    Comparing values with their defaults cannot tell ``--seeds 10`` (the default, but asked
    for) from nothing typed; the tokens as typed (``ev_nav.cli`` keeps them) can.
    """
    rest = _after_bo(command_line)
    if rest is None:  # a parser used outside the CLI: options were given
        return False
    return family in rest and rest.index(family) == len(rest) - 1


def _after_bo(command_line: Sequence[str] | None) -> list[str] | None:
    """The tokens typed after ``bo`` (``ev_nav.cli`` keeps them); None without them."""
    tokens = list(command_line or ())
    return tokens[tokens.index("bo") + 1 :] if "bo" in tokens else None


def _options_after_action(family: Family, action: str, handler: Handler) -> Handler:
    """``handler``, refusing options typed between the family's name and ``action``.

    A legacy family's parser takes the run options itself (its option-only form), but the
    action's parser fills in its own defaults over them: ``ev-nav bo cvs --seeds 1 run`` ran
    three seeds, into the default folder. Refusing says where they go.
    """

    def checked(args: argparse.Namespace) -> int:
        rest = _after_bo(getattr(args, "command_line", None))
        if rest is not None:
            if family.name in rest and action in rest:
                between = rest[rest.index(family.name) + 1 : rest.index(action)]
                if between:
                    raise ConfigError(
                        f"options go after the action: 'ev-nav bo {family.name} {action} "
                        f"{' '.join(between)} …' (typed before '{action}', they would be "
                        "ignored)"
                    )
        return handler(args)

    return checked


def _legacy(family: Family, parser: argparse.ArgumentParser) -> Handler:
    def handler(args: argparse.Namespace) -> int:
        if _nothing_after(getattr(args, "command_line", None), family.name):
            # The bare family name: a user asking what the family does, not for its full
            # default experiment (which takes hours).
            parser.print_help()
            return 1
        print(
            f"ev-nav: note: 'ev-nav bo {family.name} OPTIONS' is now "
            f"'ev-nav bo {family.name} run OPTIONS'",
            file=sys.stderr,
        )
        return family.run(args)

    return handler


def add_shared_run_options(p: argparse.ArgumentParser) -> None:
    """Options of every family's ``run``: user objective, executor, resumption, output."""
    p.add_argument(
        "--objective",
        default=None,
        metavar="MODULE:FUNCTION",
        help="optimise your own function (module:function or file.py:function) instead of a "
        "benchmark; see docs/bo-overview.md 'Your own objective'",
    )
    p.add_argument(
        "--bounds",
        type=json_list,
        default=None,
        metavar="JSON",
        help="box of the objective, e.g. '[[-2, 2], [0, 1]]' (overrides its declaration)",
    )
    p.add_argument(
        "--executor",
        choices=("local", "dask", "inprocess"),
        default="local",
        help="where the runs execute: local process pool (default), Dask, or this process",
    )
    p.add_argument("--workers", type=int, default=None, help="local pool / Dask cluster size")
    p.add_argument("--dask-scheduler", default=None, help="address of an existing Dask scheduler")
    p.add_argument(
        "--no-resume",
        action="store_true",
        help="recompute runs already finished in the output folder",
    )
    p.add_argument(
        "--no-figures",
        "--no-figure",
        dest="no_figures",
        action="store_true",
        help="write results.csv and manifest.json only",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars or printed summary")


def execution_config(args: argparse.Namespace) -> ExecutionConfig:
    """The shared execution options as an :class:`~ev_nav.bo.core.runs.ExecutionConfig`."""
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers must be >= 1")
    return ExecutionConfig(
        executor=args.executor,
        workers=args.workers,
        dask_scheduler=args.dask_scheduler,
        resume=not args.no_resume,
    )


def json_list(text: str) -> list:
    """A JSON list given on the command line (one-line error otherwise)."""
    try:
        value = json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a JSON list: {text!r}") from None
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"not a JSON list: {text!r}")
    return value


def index_sets(value: list, option: str) -> tuple[tuple[int, ...], ...]:
    """A JSON list of lists of 0-based input indices (``--control-sets '[[0], [1], [0, 1]]'``)
    as tuples; a :class:`ConfigError` saying the shape otherwise (``[1]`` was a TypeError)."""
    sets = []
    for entry in value:
        if not isinstance(entry, list) or not all(
            isinstance(j, int) and not isinstance(j, bool) for j in entry
        ):
            raise ConfigError(f"{option} is a list of lists of 0-based input indices, e.g. "
                              f"'[[0], [1], [0, 1]]'; got {json.dumps(value)}")
        sets.append(tuple(entry))
    return tuple(sets)


def csv_list(text: str) -> tuple[str, ...]:
    """A comma-separated, non-empty list of names."""
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated, non-empty list")
    return items
