"""Settings in one place: where data, caches and the paper routes live, and osmnx's settings.

Every folder the library reads or writes by default is named here, read from the environment
when asked (not at import), so a test or a long-running server sees a changed variable:

===========================  ===================================================================
``EV_NAV_DATA``              the one data folder (OSM extracts, DEM tiles, benchmark arrays);
                             default ``../shared/data`` beside the repository.
                             ``EV_NAV_SHARED_DATA`` is its older name, still read.
``EV_NAV_CACHE``             derived files of loaded OSM networks (``.npz``, keyed by content);
                             default ``~/.cache/ev-nav``.
``EV_NAV_TRUTH_CACHE``       simulated ground truths of grid runs; default ``<results>/truth``.
===========================  ===================================================================

A driver state keeps its own derived files in ``STATE/cache/`` (see :mod:`ev_nav.trips`);
those follow the state, not these settings.

osmnx keeps module-global settings; :func:`osmnx_settings` changes them for a block and restores
them after, so loading a network never leaves another osmnx user's settings altered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "ROUTES_FILE",
    "RESULTS_DIR",
    "data_dir",
    "network_cache_dir",
    "truth_cache_dir",
    "osmnx_settings",
]

#: The source checkout (meaningful for an editable install, which is how ev-nav is run).
REPO_ROOT = Path(__file__).resolve().parents[1]
#: Routes A and B per network of the paper reproductions.
ROUTES_FILE = REPO_ROOT / "data" / "routes.toml"
#: Most observation batches a command replays before it answers (beyond the newest checkpoint):
#: a state whose model lags further behind (a server killed with a backlog) is planned on as far
#: as this gets it, and the command says how many batches its model is behind. The backlog is
#: learned where learning happens: by ``ev-nav observe`` or the server's writer.
CLI_MAX_REPLAY = 20_000

#: Where the reproduction scripts write their figures and tables by default.
RESULTS_DIR = REPO_ROOT / "docs" / "results"


def data_dir() -> Path:
    """The one data folder: ``$EV_NAV_DATA`` (or its older name ``$EV_NAV_SHARED_DATA``), else
    ``../shared/data`` beside the repository."""
    env = os.environ.get("EV_NAV_DATA") or os.environ.get("EV_NAV_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


def network_cache_dir() -> Path:
    """Derived network files of loaded OSM extracts: ``$EV_NAV_CACHE`` or ``~/.cache/ev-nav``."""
    env = os.environ.get("EV_NAV_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ev-nav"


def truth_cache_dir(results_dir: str | Path) -> Path:
    """Ground truths of a grid run: ``$EV_NAV_TRUTH_CACHE`` or ``<results_dir>/truth``."""
    env = os.environ.get("EV_NAV_TRUTH_CACHE")
    return Path(env) if env else Path(results_dir) / "truth"


@contextmanager
def osmnx_settings(**changes: object) -> Iterator[None]:
    """Set ``osmnx.settings`` attributes for the block and restore the previous values after.

    Parameters
    ----------
    **changes
        Attribute names of ``osmnx.settings`` and their values inside the block.
    """
    import osmnx as ox  # heavy (geopandas, shapely): only when a network is read from OSM

    saved = {name: getattr(ox.settings, name) for name in changes}
    try:
        for name, value in changes.items():
            setattr(ox.settings, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(ox.settings, name, value)
