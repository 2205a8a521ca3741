"""A simulated vehicle posts the total of the part of its route it drove (``drive_fleet``)."""

from __future__ import annotations

import numpy as np
import pytest

from ev_nav.roads.synthetic import synthetic_town
from ev_nav.server.client import drive_fleet


class _World:
    """Fixed per-segment energies [Wh] and no regret."""

    def __init__(self, energies: np.ndarray) -> None:
        self.energies = energies

    def drive(self, path, rng):
        return self.energies[np.asarray(path)]

    def regret(self, path, start, goal):
        return 0.0, 0.0, 0.0


class _Client:
    """Answers every plan with one route that starts 0.3 along its first segment and ends 0.25
    along its last, and keeps what is posted."""

    posted: list[tuple[str, object]] = []

    def __init__(self) -> None:
        self.last_seconds = 0.0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    asked: list[bool] = []

    def plan(self, origin, dest, *, policy, vehicle, alternatives=True):
        self.asked.append(alternatives)
        return {"trip": 1, "start_segment": 4, "goal_segment": 9, "model_version": 0,
                "routes": {"planned": {"segments": [4, 5, 7, 9], "start_fraction": 0.3,
                                       "end_fraction": 0.25}}}

    def record_total(self, trip, total_wh, *, force=False):
        self.posted.append(("total", total_wh))
        return {"batch": len(self.posted)}

    def record_segments(self, trip, segments, energies, *, force=False):
        self.posted.append(("segments", (segments, energies)))
        return {"batch": len(self.posted)}


def test_a_total_counts_the_driven_part_of_the_first_and_last_segment():
    net = synthetic_town(400, seed=0)
    energies = np.arange(net.n_segments, dtype=np.float64) * 10.0 + 1.0
    _Client.posted, _Client.asked = [], []
    drive_fleet(_Client, net, _World(energies), [[(4, 9)]], observe="total")
    # by hand: 70 % of segment 4 (41 Wh), all of 5 (51) and 7 (71), 25 % of 9 (91)
    assert len(_Client.posted) == 1 and _Client.posted[0][0] == "total"
    assert _Client.posted[0][1] == pytest.approx(0.7 * 41 + 51 + 71 + 0.25 * 91, rel=1e-12)
    # per-segment readings: of the part driven, as a car measures them (the store learns the
    # two ends as those shares of their segments)
    _Client.posted = []
    drive_fleet(_Client, net, _World(energies), [[(4, 9)]], observe="segments")
    assert _Client.posted == [("segments", ([4, 5, 7, 9], pytest.approx(
        [0.7 * 41, 51.0, 71.0, 0.25 * 91], rel=1e-12)))]
    # a vehicle drives the plan: it asks for that route alone, unless told otherwise
    assert _Client.asked == [False, False]
    drive_fleet(_Client, net, _World(energies), [[(4, 9)]], alternatives=True)
    assert _Client.asked[-1] is True
