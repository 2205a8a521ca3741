"""Stage-by-stage progress of a long command, on stderr.

``ev-nav init`` on a large network, ``map`` and ``observe --gpx`` spend seconds to tens of
seconds in a few stages (loading the network, building the prior covariance, matching a track)
and printed nothing meanwhile. :class:`Stages` names the stage being worked on, with the time so
far, on one tqdm line that is removed when the command ends. Like the progress bars of
``fleet run`` and the BO commands it is shown only where stderr is a terminal, so stdout, pipes,
logs and tests see exactly what they saw before.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any


class Stages:
    """One progress line for ``total`` named stages (shown only on a terminal's stderr).

    Parameters
    ----------
    what : str
        What the command is doing (``"init"``).
    total : int
        How many stages :meth:`stage` will announce.
    enabled : bool, optional
        Show it; default: whether stderr is a terminal.
    """

    def __init__(self, what: str, total: int, *, enabled: bool | None = None) -> None:
        self._bar: Any = None
        self._what = what
        if sys.stderr.isatty() if enabled is None else enabled:
            from tqdm.auto import tqdm  # only when shown

            self._bar = tqdm(
                total=total, desc=what, leave=False, file=sys.stderr,
                bar_format="{desc} (stage {n_fmt}/{total_fmt}, {elapsed})",
            )

    def stage(self, name: str) -> None:
        """Announce the next stage (the previous one is done)."""
        if self._bar is None:
            return
        self._bar.n += 1  # the stage being worked on, counted from 1
        self._bar.set_description_str(f"{self._what}: {name}")  # refreshes the line

    def print(self, text: str) -> None:
        """Print a line on stdout without breaking the progress line (flushed at once)."""
        if self._bar is None:
            print(text, flush=True)
        else:
            self._bar.write(text, file=sys.stdout)
            sys.stdout.flush()

    def close(self) -> None:
        """Remove the line (stdout's output follows as before)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Stages:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
