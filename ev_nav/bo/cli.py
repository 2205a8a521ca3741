"""``ev-nav bo ...``: the Bayesian-optimisation algorithms that share the GP core.

Each algorithm family registers its own sub-command from its own module (``register(sub)``).
"""

from __future__ import annotations

import argparse
import importlib

BO_COMMAND_MODULES: tuple[str, ...] = (
    "ev_nav.bo.cvs_cli",  # bo cvs  (known and unknown costs)
    "ev_nav.bo.ptr_cli",  # bo ptr
    "ev_nav.bo.boke_cli",  # bo boke
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bo`` command group."""
    parser = subparsers.add_parser(
        "bo", help="Bayesian-optimisation experiments on the shared GP core"
    )
    sub = parser.add_subparsers(dest="bo_command", metavar="ALGORITHM")
    parser.set_defaults(func=lambda _args: parser.print_help() or 1)
    for name in BO_COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
