"""One routing server for the server tests: ``ev-nav serve`` in a child process on a free
loopback port, on a fresh state of the embedded town with the GP model, token required."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

TOKEN = "fleet-secret-42"
TOWN_SEGMENTS = 400


@pytest.fixture(scope="package")
def served_state(tmp_path_factory) -> Path:
    from ev_nav.trips.session import create_state

    state = tmp_path_factory.mktemp("served") / "state"
    create_state(state, synthetic=TOWN_SEGMENTS, model="gp").close()
    return state


@pytest.fixture(scope="package")
def server(served_state: Path) -> Iterator[object]:
    from ev_nav.server.client import ServerProcess

    proc = ServerProcess(served_state, token=TOKEN, args=["--checkpoint-every", "1"])
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, "\n".join(proc.log[-20:])


@pytest.fixture(scope="package")
def served_town():
    from ev_nav.roads.synthetic import synthetic_town

    return synthetic_town(TOWN_SEGMENTS, seed=0)


@pytest.fixture()
def state(tmp_path) -> Path:
    """A fresh state of a 300-segment town with the GP model (one per test)."""
    from ev_nav.trips.session import create_state

    path = tmp_path / "state"
    create_state(path, synthetic=300, model="gp").close()
    return path

