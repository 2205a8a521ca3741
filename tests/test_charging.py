"""The charging-stop planner (``ev_nav.trips.charging``): what a plan promises holds up when
recomputed independently — its legs connect, its levels follow the rules, its risk bound is the
legs' own, and trips drawn from the model's joint posterior miss the reserve no more often than
the plan says. Optimality against exhaustive search is ``tests/trips/test_charging_optimality.py``;
the benchmark's smoke form runs here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from ev_nav.energy import get_vehicle
from ev_nav.errors import ConfigError, UnknownSegmentError
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.sim.fleet import AgentSpec, make_model
from ev_nav.trips.battery import route_energy
from ev_nav.trips.charging import (
    ChargeSettings,
    ChargingSite,
    charge_time_table,
    plan_charging,
)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench_charging.py"
CAP = 400.0


@pytest.fixture(scope="module")
def world():
    net = synthetic_town(1200, seed=4)
    model = make_model(AgentSpec(segment_scale="loss"), net, 0)
    rng = np.random.default_rng(0)
    # a few observations so means and sds differ across the town
    seen = rng.choice(net.n_segments, 300, replace=False)
    model.update(seen, model.posterior().mean[seen] * rng.uniform(0.8, 1.3, seen.size))
    id3 = get_vehicle("volkswagen-id3-pro")
    k = CAP / id3.battery_wh
    veh = id3.replace(battery_wh=CAP, charge_curve=[[s, p * k] for s, p in id3.charge_curve])
    segs = rng.choice(net.n_segments, 10, replace=False)
    sites = [ChargingSite(int(e), float(rng.uniform()), 150 * k, True, f"c{i}", i)
             for i, e in enumerate(segs)]
    return net, model, veh, sites


def _trip(net, model, seed):
    """A start and goal far enough apart that the trip needs a stop from 30 %."""
    rng = np.random.default_rng(seed)
    mean = model.posterior().mean
    while True:
        s, g = rng.integers(0, net.n_segments, 2)
        if s != g and np.hypot(*(net.segment_midpoints()[s] - net.segment_midpoints()[g])) > 0.02:
            return (int(s), 0.4), (int(g), 0.6), mean


def test_charging_minutes_with_a_power_limit_matches_numerical_integration():
    v = get_vehicle("volkswagen-id3-pro")
    soc = np.array([p[0] for p in v.charge_curve])
    kw = np.array([p[1] for p in v.charge_curve])
    for cap_kw in (30.0, 50.0, 100.0, 500.0):
        s = np.linspace(10, 80, 400_001)
        p = np.minimum(np.interp(s, soc, kw), cap_kw)
        minutes = 60 * np.trapezoid(v.battery_wh / 1000 / 100 / p, s)
        assert v.charging_minutes(10, 80, max_kw=cap_kw) == pytest.approx(minutes, rel=1e-6)
    assert v.charging_minutes(10, 80, max_kw=500) == v.charging_minutes(10, 80)
    with pytest.raises(ConfigError):
        v.charging_minutes(10, 80, max_kw=0)


def test_a_plan_is_consistent_with_its_legs_and_the_rules(world):
    net, model, veh, sites = world
    indptr, indices = net.routing_graph()
    checked = 0
    for seed in range(6):
        start, goal, _ = _trip(net, model, seed)
        st = ChargeSettings(start_wh=0.3 * CAP, reserve_wh=0.1 * CAP, confidence=0.95)
        plan = plan_charging(net, model, veh, sites, start, goal, st)
        assert len(plan.legs) == len(plan.stops) + 1
        ends = [start, *((s.site.segment, s.site.fraction) for s in plan.stops), goal]
        depart = st.start_wh
        risk = 0.0
        for j, leg in enumerate(plan.legs):
            path = leg.segments
            assert path[0] == ends[j][0] and path[-1] == ends[j + 1][0]
            for a, b in zip(path[:-1], path[1:], strict=True):  # each step a legal turn
                assert b in indices[indptr[a]:indptr[a + 1]]
            e = route_energy(model, path, leg.shares)
            assert leg.mean_wh == pytest.approx(e.mean_wh)
            assert leg.sd_wh == pytest.approx(e.sd_wh)
            risk += norm.cdf((st.reserve_wh + e.mean_wh - depart) / e.sd_wh)
            if j < len(plan.stops):
                stop = plan.stops[j]
                assert stop.arrival_mean_wh == pytest.approx(depart - e.mean_wh)
                pct = 100 * stop.charge_to_wh / CAP
                assert pct == pytest.approx(round(pct)) and pct <= 100  # the 1 % grid
                assert stop.charge_to_wh >= stop.arrival_mean_wh - 1e-9
                table = charge_time_table(veh, stop.site)
                lo = np.interp(100 * max(stop.arrival_mean_wh, 0) / CAP, np.arange(101), table)
                assert stop.charge_min == pytest.approx(table[round(pct)] - lo, abs=1e-9)
                depart = stop.charge_to_wh
                checked += 1
        assert plan.risk == pytest.approx(risk, rel=1e-9, abs=1e-12)
        assert plan.feasible and plan.risk <= 0.05 + 1e-12
        drive = sum(leg.drive_min for leg in plan.legs)
        charge = sum(s.charge_min + s.overhead_min for s in plan.stops)
        assert plan.total_min == pytest.approx(drive + charge)
    assert checked >= 3  # the trips did need stops


def test_posterior_draws_miss_the_reserve_no_more_often_than_the_plan_says(world):
    """Monte Carlo against the model's joint posterior of every segment the plan drives (plus
    noise as the model states it): the miss rate stays within the plan's Boole bound."""
    net, model, veh, sites = world
    st = ChargeSettings(start_wh=0.3 * CAP, reserve_wh=0.1 * CAP, confidence=0.8)
    for seed in range(20):  # the first trip that needs a stop
        start, goal, _ = _trip(net, model, seed)
        plan = plan_charging(net, model, veh, sites, start, goal, st)
        if plan.stops:
            break
    assert plan.stops and 0.1 < plan.risk <= 0.2
    segs = np.unique(np.concatenate([leg.segments for leg in plan.legs]))
    # the leg sums are linear in the segments: their joint law is exact from the union's
    h = np.zeros((len(plan.legs), segs.size))
    for j, leg in enumerate(plan.legs):
        np.add.at(h[j], np.searchsorted(segs, leg.segments), leg.shares)
    mean = h @ model.posterior().mean[segs]
    cov = h @ model.route_covariance(segs) @ h.T
    cov += np.diag([model.noise_variance(leg.segments, leg.shares) for leg in plan.legs])
    draws = np.random.default_rng(3).multivariate_normal(mean, cov, 200_000)
    levels = plan.levels_wh()
    missed = (levels[None, :] - draws < st.reserve_wh).any(axis=1).mean()
    assert missed <= plan.risk + 0.003
    assert missed >= plan.risk - 0.02  # the bound is nearly tight: legs are nearly independent


def test_no_stop_when_the_battery_suffices(world):
    net, model, veh, sites = world
    start, goal, _ = _trip(net, model, 2)
    plan = plan_charging(net, model, veh, sites, start, goal,
                         ChargeSettings(start_wh=CAP, reserve_wh=0.1 * CAP))
    assert plan.stops == () and plan.feasible
    assert plan.total_min == pytest.approx(plan.legs[0].drive_min)


def test_legs_start_and_end_where_their_waypoints_are(world):
    """A leg within one segment (origin and goal on it; a charger on the start's segment)
    was drawn from the segment's start to its end, 125 m off the points asked for; every leg
    now carries the fractions of its waypoints."""
    from ev_nav.trips.charging import plan_to_dict

    net, model, veh, sites = world
    seg = int(np.argmax(model.posterior().mean))  # the costliest road: uphill, long
    plan = plan_charging(net, model, veh, sites, (seg, 0.2), (seg, 0.7),
                         ChargeSettings(start_wh=CAP, reserve_wh=0.1 * CAP))
    (leg,) = plan.legs
    assert leg.segments.tolist() == [seg] and (leg.start_fraction, leg.end_fraction) == (0.2, 0.7)
    doc = plan_to_dict(plan, net)["legs"][0]
    assert doc["from_lonlat"] == pytest.approx(net.segment_point(seg, 0.2), abs=1e-7)
    assert doc["to_lonlat"] == pytest.approx(net.segment_point(seg, 0.7), abs=1e-7)
    # a stop on the start's own segment, further along: the first leg ends at the charger
    start = (seg, 0.1)
    after = np.flatnonzero(net.seg_u == net.seg_v[seg])
    goal = (int(after[after != seg][0]), 0.5)  # on a road that follows
    here = ChargingSite(seg, 0.15, sites[0].power_kw, True, "here", 0)  # ~5 Wh on
    plan = plan_charging(net, model, veh, [here], start, goal,
                         ChargeSettings(start_wh=0.12 * CAP, reserve_wh=0.1 * CAP))
    assert [s.site.name for s in plan.stops] == ["here"]  # the 8 Wh above the reserve
    for leg, a, b in zip(plan.legs, [start, *((s.site.segment, s.site.fraction)
                                              for s in plan.stops)],
                         [*((s.site.segment, s.site.fraction) for s in plan.stops), goal],
                         strict=True):
        assert (int(leg.segments[0]), leg.start_fraction) == a
        assert (int(leg.segments[-1]), leg.end_fraction) == b


def test_a_departure_below_the_reserve_is_said_with_the_plan(world):
    # such a plan had no note saying why it was infeasible (this trip regains enough downhill)
    net, model, veh, sites = world
    start, goal, _ = _trip(net, model, 2)
    plan = plan_charging(net, model, veh, sites, start, goal,
                         ChargeSettings(start_wh=0.05 * CAP, reserve_wh=0.1 * CAP))
    assert "the departure charge (5%) is below the reserve (10%)" in " ".join(plan.notes)


def test_below_the_reserve_a_stop_that_gets_there_beats_running_empty(world):
    """Leaving below the reserve, every plan misses it on its first leg (summed risk ~1 each),
    and time broke the tie: the plan drove on and ran empty, where a charger just ahead got
    there. Where no plan meets the confidence, the plan least likely to run empty comes
    first."""
    net, model, veh, _ = world
    start, _, _ = _trip(net, model, 0)
    goal = (148, 0.5)  # (a drive of some 65 Wh: one stop's charge keeps the reserve after it)
    here = ChargingSite(start[0], start[1] + 0.05, 150 * CAP / 77_000, True, "here", 0)
    st = ChargeSettings(start_wh=0.05 * CAP, reserve_wh=0.1 * CAP)
    direct = plan_charging(net, model, veh, [], start, goal, st)
    assert direct.goal_arrival_mean_wh < 0  # the trip without a stop runs empty
    plan = plan_charging(net, model, veh, [here], start, goal, st)
    assert not plan.feasible and [s.site.name for s in plan.stops] == ["here"]
    assert plan.goal_arrival_mean_wh > st.reserve_wh
    assert min(s.arrival_mean_wh for s in plan.stops) > 0
    assert "the first arrival cannot keep it" in " ".join(plan.notes)


def test_no_plan_meets_the_confidence_says_so(world):
    net, model, veh, sites = world
    st = ChargeSettings(start_wh=0.3 * CAP, reserve_wh=0.1 * CAP)
    for seed in range(20):  # a trip that needs a stop from 30 % ...
        start, goal, _ = _trip(net, model, seed)
        if plan_charging(net, model, veh, sites, start, goal, st).stops:
            break
    plan = plan_charging(net, model, veh, [], start, goal, st)  # ... and no charger on the way
    assert not plan.feasible and plan.risk > 0.05 and plan.stops == ()
    assert plan.probability == pytest.approx(max(0.0, 1 - plan.risk))


def test_reference_planners(world):
    """The deterministic planner charges to reserve + mean (rounded up to 1 %); the buffer
    planner to reserve + 1.2 × mean."""
    net, model, veh, sites = world
    start, goal, _ = _trip(net, model, 0)
    for mode, factor in (("mean", 1.0), ("buffer", 1.2)):
        st = ChargeSettings(start_wh=0.3 * CAP, reserve_wh=0.1 * CAP, mode=mode)
        plan = plan_charging(net, model, veh, sites, start, goal, st)
        assert plan.stops
        for j, stop in enumerate(plan.stops):
            need = st.reserve_wh + factor * plan.legs[j + 1].mean_wh
            assert stop.charge_to_wh >= need - 1e-9
        assert plan.risk == 0.0


def test_bad_settings_are_refused(world):
    net, model, veh, sites = world
    start, goal, _ = _trip(net, model, 0)
    for bad in (dict(confidence=1.0), dict(confidence=0.4), dict(start_wh=2 * CAP),
                dict(reserve_wh=CAP), dict(mode="yolo"), dict(max_stops=-1)):
        st = ChargeSettings(**{"start_wh": 0.3 * CAP, "reserve_wh": 0.1 * CAP, **bad})
        with pytest.raises(ConfigError):
            plan_charging(net, model, veh, sites, start, goal, st)
    # said in % as well as Wh: the user gave a % ("reserve 58000 Wh" for --reserve 100%)
    st = ChargeSettings(start_wh=0.3 * CAP, reserve_wh=CAP)
    with pytest.raises(ConfigError, match=r"reserve 400 Wh \(100% of 400 Wh\)"):
        plan_charging(net, model, veh, sites, start, goal, st)
    ok = ChargeSettings(start_wh=0.3 * CAP, reserve_wh=0.1 * CAP)
    for bad_start in ((net.n_segments, 0.5), (-1, 0.5), (start[0], 1.5), (start[0], -0.1)):
        with pytest.raises(UnknownSegmentError):
            plan_charging(net, model, veh, sites, bad_start, goal, ok)


def test_bench_charging_smoke_prints_its_lines():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke"], capture_output=True, text=True, check=True,
        timeout=300,
    ).stdout
    m = re.search(r"^reserve violated: ([\d.]+)% \(allowed ([\d.]+)%\)$", out, re.M)
    assert m and 0.0 <= float(m.group(1)) <= 100.0 and float(m.group(2)) > 5.0
    for label in ("chance 0.95", "posterior mean", "fixed 20% buffer"):
        assert len(re.findall(rf"^  {re.escape(label)} +reserve violated: [\d.]+%", out,
                              re.M)) == 2


def test_bench_charging_smoke_honours_trips_and_refuses_zero():
    # --smoke used to replace a given --trips with its own 10; --trips 0 was accepted
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--trips", "4"], capture_output=True, text=True,
        check=True, timeout=300,
    ).stdout
    assert re.search(r"^trips planned and driven: 4 \(", out, re.M), out
    bad = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--trips", "0"],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "argument --trips: expected a whole number >= 1" in bad.stderr


def test_a_long_trip_from_a_junction_leaves_on_the_road_its_route_takes(monaco):
    """A charging plan started from the one position the snap preferred: from a junction
    (MoST Monaco node 101) on a one-way road it drove away and looped back to the junction.
    ``trip_ends`` picks, among every road there and both directions of a two-way street, the
    ends the direct least-loss route takes: the plan's leg leaves the junction there and never
    returns to it."""
    from ev_nav.trips.charging import trip_ends

    model = make_model(AgentSpec(model="bi"), monaco, 0)
    veh = get_vehicle("volkswagen-id3-pro")
    a, b = 101, int(monaco.seg_u[888])
    start = monaco.snap(float(monaco.node_lon[a]), float(monaco.node_lat[a]), None)
    goal = monaco.snap(float(monaco.node_lon[b]), float(monaco.node_lat[b]), None)
    assert len(start.candidates) > 2  # every road at the junction
    ends = trip_ends(monaco, model, veh, start.candidates, goal.candidates)
    plan = plan_charging(monaco, model, veh, [], *ends,
                         ChargeSettings(start_wh=veh.battery_wh, reserve_wh=0.1 * veh.battery_wh))
    (leg,) = plan.legs
    assert monaco.seg_u[leg.segments[0]] == a and a not in monaco.seg_v[leg.segments].tolist()
    assert (int(leg.segments[0]), leg.shares[0]) == (ends[0][0], pytest.approx(1 - ends[0][1]))
