"""Shared fixtures: real networks from ../shared/data (cached per test session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ev_nav.settings import data_dir

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = data_dir()


def shared(name: str) -> Path:
    """Path of a file in ../shared/data; fails loudly when the data folder is missing."""
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.fail(f"shared data file missing: {path} (CI checks out ../shared beside the repo)")
    return path


@pytest.fixture(scope="session", autouse=True)
def _single_torch_thread():
    """One torch thread: the suite's matrices are small, and on 2 shared cores thread start-up
    and oversubscription made small operations up to 100x slower (measured by the PTR tests)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def network_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("network-cache")


@pytest.fixture(scope="session")
def monaco(network_cache):
    from ev_nav.roads.load import load_osm

    return load_osm(shared("most_monaco.osm.gz"), cache_dir=network_cache)


@pytest.fixture(scope="session")
def luxembourg(network_cache):
    from ev_nav.roads.load import load_osm

    return load_osm(shared("lust_luxembourg.osm.gz"), cache_dir=network_cache)


@pytest.fixture(scope="session")
def town():
    from ev_nav.roads.synthetic import synthetic_town

    return synthetic_town(2000, seed=0)


@pytest.fixture(scope="session")
def shared_file():
    """Function mapping a file name to its path in ../shared/data (fails if missing)."""
    return shared
