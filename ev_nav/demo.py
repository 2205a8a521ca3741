"""``ev-nav demo``: the main job on the embedded synthetic town."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``demo`` command."""
    parser = subparsers.add_parser("demo", help="run the demo on the embedded synthetic town")
    parser.add_argument("--segments", type=int, default=2000, help="synthetic town size")
    parser.add_argument("--seed", type=int, default=0, help="town seed")
    parser.set_defaults(func=_cmd_demo)


def _cmd_demo(args: argparse.Namespace) -> int:
    from ev_nav.roads.cli import print_summary
    from ev_nav.roads.synthetic import synthetic_town

    net = synthetic_town(args.segments, seed=args.seed)
    print("Embedded synthetic town:")
    print_summary(net)
    return 0
