"""The public API names a wrong object instead of failing deep inside: a state's folder where an
open session belongs, a file's path where a road network belongs (each was an AttributeError
such as "'str' object has no attribute 'net'")."""

from __future__ import annotations

from pathlib import Path

import pytest

import ev_nav

SESSION_FUNCTIONS = [
    (ev_nav.plan_trip, ((47.0, 8.0), (47.1, 8.1))),
    (ev_nav.write_trip_files, (None,)),
    (ev_nav.record_total, (1, 500.0)),
    (ev_nav.record_segments, (1, [0], [5.0])),
    (ev_nav.forget_trip, (1,)),
    (ev_nav.record_track, (1, "drive.gpx")),
]
NETWORK_FUNCTIONS = [
    (ev_nav.match_track, ([8.0], [47.0])),
    (ev_nav.node_potential, ()),
    (ev_nav.potential_change, ([0.0],)),
    (ev_nav.loss_scale, ()),
    (ev_nav.loss_lower_bound, ()),
]


@pytest.mark.parametrize("func,rest", SESSION_FUNCTIONS, ids=lambda f: getattr(f, "__name__", ""))
@pytest.mark.parametrize("given", ["mystate", Path("mystate")])
def test_a_state_folder_where_a_session_belongs(func, rest, given) -> None:
    with pytest.raises(TypeError, match=rf"^{func.__name__} takes an open Session, got "
                       r"\w+ 'mystate': open the state first, e\.g\. 'with ev_nav\.open_state"):
        func(given, *rest)


@pytest.mark.parametrize("func,rest", NETWORK_FUNCTIONS, ids=lambda f: getattr(f, "__name__", ""))
def test_a_path_where_a_network_belongs(func, rest) -> None:
    with pytest.raises(TypeError, match=rf"^{func.__name__} takes a RoadNetwork, got str "
                       r"'town\.npz': load it first \(RoadNetwork\.load"):
        func("town.npz", *rest)
    with pytest.raises(TypeError, match=rf"^{func.__name__} takes a RoadNetwork, got int$"):
        func(5, *rest)


def test_plan_charging_names_a_network_too() -> None:
    with pytest.raises(TypeError, match="^plan_charging takes a RoadNetwork, got str"):
        ev_nav.plan_charging("town.npz", None, None, [], (0, 0.0), (1, 0.0),
                             ev_nav.ChargeSettings(start_wh=1.0, reserve_wh=0.0))
