"""The public API names a wrong object instead of failing deep inside: a state's folder where an
open session belongs, a file's path where a road network belongs (each was an AttributeError
such as "'str' object has no attribute 'net'")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ev_nav
from ev_nav.bandits.indices import make_index
from ev_nav.errors import ConfigError, InvalidObservation, UnknownSegmentError

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


# --- a catalogue name where a Vehicle belongs (each failed on a missing attribute) -------------
@pytest.fixture(scope="module")
def town():
    return ev_nav.synthetic_town(300)


VEHICLE_FUNCTIONS = [
    ("node_potential", lambda net, v: ev_nav.node_potential(net, v)),
    ("potential_change", lambda net, v: ev_nav.potential_change(net, v)),
    ("loss_scale", lambda net, v: ev_nav.loss_scale(net, v)),
    ("loss_lower_bound", lambda net, v: ev_nav.loss_lower_bound(net, v)),
    ("vehicle_sites", lambda net, v: ev_nav.vehicle_sites(net, v)),
    ("e_det_shift", lambda net, v: ev_nav.e_det_shift(net, v, ev_nav.get_vehicle())),
    ("RoadNetwork.e_det", lambda net, v: net.e_det(v)),
]


@pytest.mark.parametrize("name,call", VEHICLE_FUNCTIONS, ids=[n for n, _ in VEHICLE_FUNCTIONS])
def test_a_vehicle_name_where_a_vehicle_belongs(town, name, call) -> None:
    car = "volkswagen-id3-pro"
    with pytest.raises(TypeError, match=rf"^{name} takes a Vehicle, got str '{car}': look it "
                       rf"up first \(ev_nav\.get_vehicle\('{car}'\)\)"):
        call(town, car)
    # the same call with the looked-up vehicle works
    assert call(town, ev_nav.get_vehicle(car)) is not None


def test_plan_charging_checks_vehicle_model_and_mean_shift(town) -> None:
    from ev_nav.gp.independent import BIModel

    net = town.with_chargers(ev_nav.generated_chargers(town, 10.0, 1))
    car = ev_nav.get_vehicle("volkswagen-id3-pro")
    sites = ev_nav.vehicle_sites(net, car)
    settings = ev_nav.ChargeSettings(start_wh=20_000.0, reserve_wh=5_000.0)
    args = (sites, (0, 0.3), (150, 0.6), settings)
    with pytest.raises(TypeError, match="^plan_charging takes a Vehicle, got str"):
        ev_nav.plan_charging(net, BIModel(net), "volkswagen-id3-pro", *args)
    with pytest.raises(TypeError, match=r"^plan_charging takes a learner \(a model with "
                       r"posterior\(\)\), got NoneType"):
        ev_nav.plan_charging(net, None, car, *args)
    with pytest.raises(ConfigError, match=rf"one energy \[Wh\] per segment of .* "
                       rf"\({net.n_segments:,}\), got an array of shape \(3,\)"):
        ev_nav.plan_charging(net, BIModel(net), car, *args, mean_shift=np.zeros(3))
    bad = np.zeros(net.n_segments)
    bad[[4, 9]] = np.nan
    with pytest.raises(ConfigError, match="mean_shift must be finite.*2 of its values"):
        ev_nav.plan_charging(net, BIModel(net), car, *args, mean_shift=bad)
    plan = ev_nav.plan_charging(net, BIModel(net), car, *args, mean_shift=np.zeros(net.n_segments))
    assert plan.legs  # a zero shift is the plain plan


# --- values checked where they are given --------------------------------------------------------
@pytest.mark.parametrize("kwargs,message", [
    ({"block_m": -1.0}, r"block_m must be a number in \(0, 10000\], got -1\.0"),
    ({"block_m": float("nan")}, r"block_m must be a number in \(0, 10000\], got nan"),
    ({"relief_m": "45"}, r"relief_m must be a number in \[0, 5000\], got '45'"),
    ({"seed": 1.5}, r"seed must be an integer in 0\.\.2\^63-1, got 1\.5"),
    ({"seed": -1}, r"seed must be an integer in 0\.\.2\^63-1, got -1"),
    ({"n_segments": float("nan")}, r"size is a whole number of segments, got nan"),
    ({"colour": 3}, r"takes block_m, relief_m, origin_lat, origin_lon; got colour"),
])
def test_synthetic_town_checks_its_arguments(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        ev_nav.synthetic_town(**({"n_segments": 300} | kwargs))


def test_a_town_seed_is_not_truncated() -> None:
    # 1.5 built the town of seed 1 under that name; a NumPy integer is a seed like any other
    assert ev_nav.synthetic_town(300, seed=np.int64(1)).name == "synthetic-300-s1"


@pytest.mark.parametrize("seed", [-1, None, 2.0, True])
def test_generated_chargers_need_a_seed(town, seed) -> None:
    # None gave other sites on every call; -1 failed inside NumPy
    with pytest.raises(ConfigError, match="generated chargers' seed must be an integer"):
        ev_nav.generated_chargers(town, 5.0, seed)


def test_segment_accessors_check_the_id_and_fractions(town) -> None:
    n = town.n_segments
    for call in (lambda: town.segment_point(n, 0.5), lambda: town.segment_point(-1, 0.5),
                 lambda: town.segment_coords(-1), lambda: town.segment_anchor(-1),
                 lambda: town.partial_coords(n), lambda: town.segment_coords(2.0)):
        with pytest.raises(UnknownSegmentError, match=rf"ids 0\.\.{n - 1}"):
            call()
    with pytest.raises(ConfigError, match=r"fraction .* in 0\.\.1, got nan"):
        town.segment_point(0, float("nan"))
    with pytest.raises(ConfigError, match="from start to end >= start, got 0.8 to 0.2"):
        town.partial_coords(0, 0.8, 0.2)
    # round-off at either end is the end: the point and the part are those of 1 and 0
    assert town.segment_point(0, 1.0 + 1e-12) == town.segment_point(0, 1.0)
    np.testing.assert_array_equal(town.partial_coords(0, -1e-12, 1.0), town.segment_coords(0))
    lon, lat = town.segment_point(3, 0.5)
    for limit in (float("nan"), -1.0, "100"):  # NaN meant no limit
        with pytest.raises(ConfigError, match="max_distance_m must be a distance >= 0"):
            town.nearest_segment(lon, lat, limit)
    assert town.nearest_segment(lon, lat, 0.5) in (3, *range(n))
    with pytest.raises(ConfigError, match="road kind 'tolls' is none of toll"):
        town.flagged("tolls")


def test_potential_and_climate_values(town) -> None:
    phi = ev_nav.node_potential(town)
    phi[[2, 5]] = np.nan
    with pytest.raises(ConfigError, match=r"a potential must be finite \[Wh\]; 2 of"):
        ev_nav.potential_change(town, None, phi)
    with pytest.raises(ConfigError, match="t_heat_c must be a number, got '18'"):
        ev_nav.ClimateModel(t_heat_c="18")
    with pytest.raises(ConfigError, match="shape knots must be numbers"):
        ev_nav.ClimateModel(shape_knots_c="24")


@pytest.mark.parametrize("shift", [float("inf"), float("nan"), 400.0, 0.0, "1"])
def test_change_config_refuses_a_shift_it_cannot_use(shift) -> None:
    # 400 overflowed computing the threshold; inf never alarmed
    with pytest.raises(ConfigError, match=r"shift must be (in \(0, 10\]|a number)"):
        ev_nav.ChangeConfig(shift=shift)
    assert ev_nav.ChangeDetector(10, ev_nav.ChangeConfig(shift=10.0)).threshold >= 0


def test_change_detector_refuses_fractional_ids_and_infinite_variances() -> None:
    det = ev_nav.ChangeDetector(10)
    with pytest.raises(InvalidObservation, match="whole numbers"):
        det.observe([3.7], [5.0], [0.0], [1.0])
    with pytest.raises(InvalidObservation, match="variances finite and > 0"):
        det.observe([3], [5.0], [0.0], [np.inf])
    assert det.observe([3.0], [5.0], [5.0], [1.0]) == [] and det.readings[3] == 1


def test_run_specs_check_their_values() -> None:
    from ev_nav.sim.fleet import TripSpec

    with pytest.raises(ConfigError, match=r"a run's seed must be an integer"):
        ev_nav.RunSpec(seed=-1)
    for horizon in (0, -5, 2.5):  # -5 ran nothing, silently
        with pytest.raises(ConfigError, match="horizon must be a whole number of rounds"):
            ev_nav.RunSpec(horizon=horizon)
    with pytest.raises(ConfigError, match="vehicles must be a whole number >= 1, got 0"):
        TripSpec(kind="random", vehicles=0)
    with pytest.raises(ConfigError, match="min_distance_m must be >= 0, got nan"):
        TripSpec(kind="random", min_distance_m=float("nan"))


def test_policy_must_be_a_name() -> None:
    with pytest.raises(ConfigError, match="a policy is a name .* got None"):
        make_index(None)


def test_write_trip_files_needs_the_planned_trip(tmp_path) -> None:
    session = ev_nav.create_state(tmp_path / "st", synthetic=300)
    with session, pytest.raises(TypeError, match="^write_trip_files takes the PlannedTrip "
                                "plan_trip returned, got NoneType"):
        ev_nav.write_trip_files(session, None)


def test_record_total_refuses_a_driven_route_that_is_not_a_path(tmp_path) -> None:
    """Four unconnected segments were learned as the trip's driven route (their fractions along
    the first and last segment meant nothing)."""
    with ev_nav.create_state(tmp_path / "st", synthetic=300) as session:
        net = session.net
        lon, lat = net.segment_point(0, 0.3)
        lon2, lat2 = net.segment_point(150, 0.6)
        trip = ev_nav.plan_trip(session, (lat, lon), (lat2, lon2), policy="mean")
        route = trip.routes["planned"].segments
        assert route.size >= 3
        bogus = route.copy()
        bogus[1] = next(e for e in range(net.n_segments) if net.seg_u[e] != net.seg_v[route[0]])
        total = float(session.model.posterior().mean[route].sum())
        with pytest.raises(InvalidObservation, match=rf"not a path: segment {bogus[1]} does not "
                           rf"start where segment {route[0]} ends \(position 1; "):
            ev_nav.record_total(session, trip.trip_id, total, route=bogus)
        assert session.store.observations() == []  # nothing recorded
        assert ev_nav.record_total(session, trip.trip_id, total, route=route) >= 1


def test_match_track_wants_one_value_per_point(town) -> None:
    points = np.array([[8.0, 47.0], [8.001, 47.001]])
    with pytest.raises(InvalidObservation, match=r"1-D arrays\), got arrays of shape \(2, 2\)"):
        ev_nav.match_track(town, points, points)
