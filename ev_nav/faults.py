"""Deterministic crash points for the durability tests.

The crash tests must kill a process *inside* a commit, a model update or a checkpoint write every
time, not when a timer happens to land there (on a loaded machine timers miss). Code that writes
state calls :func:`crash_point` with a name at the instants that matter; when the environment
variable ``EV_NAV_CRASH_AT`` names that point (``NAME`` or ``NAME:K`` for its K-th passage in this
process), the process SIGKILLs itself there, exactly as an external ``kill -9`` would. Unset (the
normal case) a call costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV_VAR = "EV_NAV_CRASH_AT"

_passages: dict[str, int] = {}


def crash_point(name: str) -> None:
    """SIGKILL this process here if ``EV_NAV_CRASH_AT`` asks for ``name`` (see module doc)."""
    wanted = os.environ.get(ENV_VAR)
    if not wanted:
        return
    point, _, nth = wanted.partition(":")
    if point != name:
        return
    _passages[name] = _passages.get(name, 0) + 1
    if _passages[name] == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)
