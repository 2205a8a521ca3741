"""Shared fixtures: real networks from ../shared/data (cached per test session)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ev_nav.settings import data_dir

# One BLAS/OpenMP thread in every test process and in the commands and scripts the tests start
# (they inherit the environment): pytest-xdist already runs one process per core, and each
# process's OpenBLAS starting a thread per core as well made the GP tests 1.8x slower on 2
# cores (tests/gp/test_regional.py: 139 s -> 79 s wall).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

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
    """One torch and one BLAS thread: the suite's matrices are small, and on 2 shared cores
    thread start-up and oversubscription made small operations up to 100x slower (measured by
    the PTR tests). The BLAS limit also covers libraries loaded before the variables above."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
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
