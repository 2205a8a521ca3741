"""``ev-nav bo FAMILY run | list | report``: the Bayesian-optimisation families.

The families' commands live next to their code (``ev_nav.bo.<family>.cli``, built on
:mod:`ev_nav.bo.core.cli`); this module only gathers them under ``bo``.
"""

from __future__ import annotations

import argparse

from ev_nav.bo.boke import cli as boke_cli
from ev_nav.bo.cvs import cli as cvs_cli
from ev_nav.bo.ptr import cli as ptr_cli


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``bo`` command group: ``cvs``, ``ucvs``, ``ptr`` (+ ``ptr-ev``), ``boke``."""
    parser = subparsers.add_parser(
        "bo", help="Bayesian-optimisation experiments on the shared GP core"
    )
    sub = parser.add_subparsers(dest="bo_command", metavar="FAMILY")
    parser.set_defaults(func=lambda _args: parser.print_help() or 1)
    for module in (cvs_cli, ptr_cli, boke_cli):
        module.register(sub)
