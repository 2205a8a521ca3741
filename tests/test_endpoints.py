"""Trips between exact points (issue 29, items 2–5): snapping onto a segment, routes that start
and end part-way along their end segments, the best-guess row, dry runs and downhill totals.

Routing costs are checked against an independent computation: SciPy's Dijkstra on the line
graph (as a sparse matrix) between every pair of candidate end segments, with the partly driven
shares applied by hand.
"""

from __future__ import annotations

import contextlib
import re

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

import ev_nav
from ev_nav.bandits.routing import Router
from ev_nav.errors import RouteOptionError, UnreachableError
from ev_nav.roads.network import EARTH_RADIUS_M
from ev_nav.store import Store
from tests.cli_helpers import run_cli


def _point_on(net, e: int, fraction: float, offset_m: float = 0.0) -> tuple[float, float]:
    """(lon, lat) of the point ``fraction`` along segment ``e``, ``offset_m`` to its right."""
    lon, lat = net.segment_point(e, fraction)
    if offset_m:
        xy = net.segment_coords(e)
        sx = EARTH_RADIUS_M * np.cos(np.radians(lat)) * np.pi / 180.0
        sy = EARTH_RADIUS_M * np.pi / 180.0
        d = (xy[-1] - xy[0]) * [sx, sy]
        d = d / np.hypot(*d)
        lon, lat = lon + offset_m * d[1] / sx, lat - offset_m * d[0] / sy
    return lon, lat


def test_snap_finds_the_point_and_its_position_along_both_directions(town):
    rng = np.random.default_rng(0)
    twoway = 0
    for e in rng.choice(town.n_segments, 40, replace=False):
        f = float(rng.uniform(0.05, 0.95))
        lon, lat = _point_on(town, int(e), f, offset_m=2.0)
        snap = town.snap(lon, lat)
        assert snap.segment == e
        assert snap.fraction == pytest.approx(f, abs=1e-6)
        assert snap.distance_m == pytest.approx(2.0, abs=0.05)
        for seg, frac in snap.candidates[1:]:  # the other direction of a two-way street
            twoway += 1
            assert (town.seg_u[seg], town.seg_v[seg]) == (town.seg_v[e], town.seg_u[e])
            assert frac == pytest.approx(1.0 - f, abs=1e-6)
    assert twoway > 10


def _reference_cost(net, w, origin, goal) -> float:
    """Least partial-route cost by SciPy's Dijkstra on the line graph: a path s → … → g costs
    ``w[s]·(1 − f_s) + Σ middle + w[g]·f_g``; the same segment, goal ahead: ``w·(f_g − f_s)``."""
    n = net.n_segments
    src = np.repeat(np.arange(n), np.diff(net.lg_indptr))
    graph = sp.csr_matrix((w[net.lg_indices] + 1e-300, (src, net.lg_indices)), shape=(n, n))
    best = np.inf
    for s, fs in origin:
        dist = dijkstra(graph, indices=s)  # includes w[g], excludes w[s]
        for g, fg in goal:
            if s == g and fg >= fs:
                cost = w[s] * (fg - fs)
            elif s == g:
                succ = net.lg_indices[net.lg_indptr[s] : net.lg_indptr[s + 1]]
                back = dijkstra(graph, indices=succ)[:, s] if succ.size else [np.inf]
                cost = w[s] * (1 - fs) + min(w[succ] + back - w[s]) + w[s] * fg
            else:
                cost = w[s] * (1 - fs) + dist[g] - w[g] * (1 - fg)
            best = min(best, cost)
    return best


def test_route_between_points_costs_what_an_independent_dijkstra_says(town):
    router = Router(town)
    rng = np.random.default_rng(1)
    for _ in range(60):
        w = rng.uniform(0.5, 5.0, town.n_segments)
        a, b = rng.choice(town.n_segments, 2, replace=False)
        origin = town.snap(*_point_on(town, int(a), float(rng.uniform()))).candidates
        goal = town.snap(*_point_on(town, int(b), float(rng.uniform()))).candidates
        path = router.route_between(w, origin, goal)
        assert path.cost == pytest.approx(_reference_cost(town, w, origin, goal), rel=1e-9)
        assert path.cost == pytest.approx(float(path.shares @ w[path.segments]), rel=1e-12)
        # a connected route in the line graph, starting and ending where the points are
        for e1, e2 in zip(path.segments[:-1], path.segments[1:], strict=True):
            assert e2 in town.lg_indices[town.lg_indptr[e1] : town.lg_indptr[e1 + 1]]
        assert (path.segments[0], path.start_fraction) in [(s, f) for s, f in origin]
        assert (path.segments[-1], path.end_fraction) in [(g, f) for g, f in goal]


def _metres(net, a: tuple[float, float], b: tuple[float, float]) -> float:
    sx = EARTH_RADIUS_M * np.cos(np.radians(a[1])) * np.pi / 180.0
    return float(np.hypot((a[0] - b[0]) * sx, (a[1] - b[1]) * EARTH_RADIUS_M * np.pi / 180.0))


def test_every_candidate_of_a_snap_is_the_snapped_point(monaco):
    """Each direction a snap offers lies where the point was snapped. On a winding two-way
    street the other direction's position was taken from the first stretch of its polyline
    within 0.5 m, not the nearest one: on MoST Monaco a route started 188 m along the road from
    the point (19.9 m away in a straight line)."""
    rng = np.random.default_rng(4)
    snap = monaco.snap(7.462821, 43.766204, 500)  # that point, on segment 1797 and its twin
    points = [(7.462821, 43.766204)]
    for e in rng.choice(monaco.n_segments, 1500, replace=False):
        lon, lat = _point_on(monaco, int(e), float(rng.uniform()))
        points.append((lon + rng.normal(0, 2e-5), lat + rng.normal(0, 2e-5)))  # ~2 m off
    twoway = 0
    for lon, lat in points:
        snap = monaco.snap(lon, lat, None)
        twoway += len(snap.candidates) > 1
        for e, f in snap.candidates:
            assert _metres(monaco, monaco.segment_point(e, f), (snap.lon, snap.lat)) < 0.6, (
                lon, lat, e, f)
    assert twoway > 500


def test_a_point_at_a_junction_may_leave_or_arrive_on_any_road_there(monaco):
    """A point at a junction lay only on the segment snapped to: a trip from it had to drive
    that one-way segment first and looped back to the junction (MoST Monaco node 101: 2.89 km
    instead of 2.81). Checked here against the best whole-segment route over every pair of a
    segment leaving the first node and one reaching the last, found from the node adjacency
    (not from the snap)."""
    router = Router(monaco)
    w = np.asarray(monaco.length_m, dtype=np.float64)
    rng = np.random.default_rng(5)
    nodes = np.unique(np.concatenate([monaco.seg_u, monaco.seg_v]))
    pairs = [(101, int(monaco.seg_u[888]))] + [
        tuple(int(x) for x in rng.choice(nodes, 2, replace=False)) for _ in range(40)]
    shorter = 0
    for a, b in pairs:
        start = monaco.snap(float(monaco.node_lon[a]), float(monaco.node_lat[a]), None)
        goal = monaco.snap(float(monaco.node_lon[b]), float(monaco.node_lat[b]), None)
        # segment to segment, whole (the router's own search: it knows the turn restrictions)
        reference = np.inf
        for s in np.flatnonzero(monaco.seg_u == a).tolist():
            for g in np.flatnonzero(monaco.seg_v == b).tolist():
                with contextlib.suppress(UnreachableError):
                    reference = min(reference, float(w[router.route(w, s, g)].sum()))
        try:
            path = router.route_between(w, start.candidates, goal.candidates)
        except UnreachableError:  # unreachable pairs must be unreachable here too
            assert not np.isfinite(reference)
            continue
        assert path.cost == pytest.approx(reference, rel=1e-9, abs=1e-6)
        # it leaves the junction and never drives back into it
        assert monaco.seg_u[path.segments[0]] == a and path.start_fraction == 0.0
        assert a not in monaco.seg_v[path.segments].tolist() or a == b
        held = start.candidates[0][0]  # the one segment a trip used to have to start on
        shorter += path.segments[0] != held
    assert shorter >= 10


def test_same_segment_ahead_and_behind(town):
    router = Router(town)
    w = np.ones(town.n_segments)
    e = 5
    path = router.route_between(w, [(e, 0.2)], [(e, 0.7)])
    assert path.segments.tolist() == [e] and path.shares == pytest.approx([0.5])
    behind = router.route_between(w, [(e, 0.7)], [(e, 0.2)])  # round the block and back
    assert behind.segments[0] == behind.segments[-1] == e and behind.segments.size > 2
    assert behind.cost == pytest.approx(_reference_cost(town, w, [(e, 0.7)], [(e, 0.2)]))
    # a trip request's error, not an observation's (the API's error type names it)
    with pytest.raises(RouteOptionError, match="same place"):
        router.route_between(w, [(e, 0.4)], [(e, 0.4)])


def test_stops_at_the_same_place_are_trip_request_errors(town):
    """Through stops: an origin on the goal, or a via point where the route already is, is a
    RouteOptionError naming which (the via search skips a same-place leg and looks on)."""
    router = Router(town)
    w = np.ones(town.n_segments)
    e, g = 5, 40
    with pytest.raises(RouteOptionError, match="the same place on the road"):
        router.route_through(w, [[(e, 0.4)], [(e, 0.4)]])
    with pytest.raises(RouteOptionError, match="two consecutive stops of the route are the same"):
        router.route_through(w, [[(e, 0.4)], [(e, 0.4)], [(g, 0.5)]])
    # a stop snaps to both driving directions of a two-way road: a via point on the goal, or
    # the same via point twice, made a U-turn loop of the other direction instead of this error
    two_way = next(
        (int(a), int(b[0])) for a in range(town.n_segments)
        if (b := np.flatnonzero((town.seg_u == town.seg_v[a]) & (town.seg_v == town.seg_u[a]))).size
    )
    here = [(two_way[0], 0.4), (two_way[1], 0.6)]  # one point, both directions
    start = [(g, 0.5)]
    for stops, which in (
        ([start, here, here], "(via point 1 and the goal)"),
        ([start, here, here, [(e, 0.5)]], "(via point 1 and via point 2)"),
    ):
        with pytest.raises(RouteOptionError, match=re.escape(which)):
            router.route_through(w, stops)
    assert router.route_through(w, [start, here, [(e, 0.5)]]).cost > 0  # once is a via point
    # a via point further along the origin's road, then the goal: the two legs' costs
    via = router.route_through(w, [[(e, 0.4)], [(e, 0.8)], [(g, 0.5)]])
    legs = (router.route_between(w, [(e, 0.4)], [(e, 0.8)]).cost
            + router.route_between(w, [(e, 0.8)], [(g, 0.5)]).cost)
    assert via.cost == pytest.approx(legs)


@pytest.fixture(scope="module")
def learned_state(town, tmp_path_factory):
    """A GP state on the synthetic town with 6 recorded totals, so means vary by segment."""
    state = tmp_path_factory.mktemp("endpoints") / "s"
    rng = np.random.default_rng(3)
    with ev_nav.create_state(state, synthetic=2000, model="gp") as session:
        for _ in range(6):
            a, b = rng.choice(session.net.n_segments, 2, replace=False)
            lon_a, lat_a = _point_on(session.net, int(a), 0.5)
            lon_b, lat_b = _point_on(session.net, int(b), 0.5)
            trip = ev_nav.plan_trip(session, (lat_a, lon_a), (lat_b, lon_b), policy="ts")
            p = trip.routes["planned"]
            ev_nav.record_total(session, trip.trip_id, p.predicted_wh + 0.5 * p.predicted_sd_wh)
    return state


def test_route_starts_and_ends_at_the_given_points(learned_state):
    """The planned route's length is the polyline between the two snapped points, and its
    recorded trip keeps where it starts and ends."""
    with ev_nav.open_state(learned_state) as session:
        net = session.net
        e_a, e_b = 100, 1200
        lon_a, lat_a = _point_on(net, e_a, 0.3, offset_m=3.0)
        lon_b, lat_b = _point_on(net, e_b, 0.6, offset_m=3.0)
        trip = ev_nav.plan_trip(session, (lat_a, lon_a), (lat_b, lon_b), policy="mean")
        for r in trip.routes.values():
            first = net.segment_point(int(r.segments[0]), r.start_fraction)
            last = net.segment_point(int(r.segments[-1]), r.end_fraction)
            assert first == pytest.approx(net.segment_point(e_a, 0.3), abs=1e-7)
            assert last == pytest.approx(net.segment_point(e_b, 0.6), abs=1e-7)
            full = float(net.length_m[r.segments].sum())
            cut = net.length_m[r.segments[0]] * r.start_fraction + net.length_m[
                r.segments[-1]
            ] * (1 - r.end_fraction)
            assert r.length_m == pytest.approx(full - cut, rel=1e-9)
        stored = session.store.get_trip(trip.trip_id)
        p = trip.routes["planned"]
        assert (stored.start_fraction, stored.end_fraction) == pytest.approx(
            (p.start_fraction, p.end_fraction)
        )


def test_best_guess_is_the_least_predicted_route_shown(learned_state):
    """Issue 29, item 4: over 100 random pairs (dry runs), no row shows less predicted energy
    than the row labelled best guess."""
    rng = np.random.default_rng(7)
    with ev_nav.open_state(learned_state) as session:
        net = session.net
        before = session.store.n_trips()
        for _ in range(100):
            a, b = rng.choice(net.n_segments, 2, replace=False)
            lon_a, lat_a = _point_on(net, int(a), float(rng.uniform()))
            lon_b, lat_b = _point_on(net, int(b), float(rng.uniform()))
            policy = str(rng.choice(["ts", "ucb", "bucb"]))
            trip = ev_nav.plan_trip(
                session, (lat_a, lon_a), (lat_b, lon_b), policy=policy, record=False,
                with_safe=True,
            )
            best = trip.routes["best guess"].predicted_wh
            assert all(r.predicted_wh >= best for r in trip.routes.values())
            assert trip.exploring_cost[0] >= 0
        assert session.store.n_trips() == before


def test_for_another_car_the_best_guess_is_its_least_predicted_route(learned_state):
    """With --vehicle-model the routes were chosen for the state's vehicle and only shown with
    the car's energies, so a row could show less than the best guess (18 of 60 LuST trips for
    a Chevrolet Bolt). The routes are now chosen for the car: checked against the car's
    energies computed here, the state's prediction plus the cars' E_det difference over the
    part of each segment driven."""
    from ev_nav.trips.battery import e_det_shift
    from ev_nav.vehicles import catalogue_vehicle

    car = catalogue_vehicle("chevrolet-bolt-ev").vehicle
    rng = np.random.default_rng(8)
    with ev_nav.open_state(learned_state) as session:
        net = session.net
        shift = e_det_shift(net, car, session.vehicle)
        differ = 0
        for _ in range(40):
            a, b = rng.choice(net.n_segments, 2, replace=False)
            lon_a, lat_a = _point_on(net, int(a), float(rng.uniform()))
            lon_b, lat_b = _point_on(net, int(b), float(rng.uniform()))
            kw = dict(policy="ts", record=False, with_safe=True)
            trip = ev_nav.plan_trip(session, (lat_a, lon_a), (lat_b, lon_b), car=car, **kw)
            own = ev_nav.plan_trip(session, (lat_a, lon_a), (lat_b, lon_b), **kw)
            energy = {n: r.predicted_wh + float(r.shares @ shift[r.segments])
                      for n, r in trip.routes.items()}
            assert energy["best guess"] <= min(energy.values()) + 1e-9
            for n, r in trip.car_routes().items():
                assert r.predicted_wh == pytest.approx(energy[n], abs=1e-9)
            differ += not np.array_equal(trip.routes["best guess"].segments,
                                         own.routes["best guess"].segments)
        assert differ > 0  # the car's best route is not always the state vehicle's


def test_the_safe_policy_is_not_told_to_take_itself_nor_said_to_explore(learned_state, capsys):
    """``--policy safe`` with too little charge advised "consider the 'safe' route (--policy
    safe)" and called its extra energy over the best guess "exploring"; it never explores."""
    rng = np.random.default_rng(9)
    with ev_nav.open_state(learned_state) as session:
        net = session.net
    differ = warned = 0
    for _ in range(6):
        a, b = rng.choice(net.n_segments, 2, replace=False)
        lon_a, lat_a = _point_on(net, int(a), 0.5)
        lon_b, lat_b = _point_on(net, int(b), 0.5)
        code, out, err = run_cli(capsys, "route", learned_state, "--from", f"{lat_a},{lon_a}",
                                 "--to", f"{lat_b},{lon_b}", "--policy", "safe", "--soc", "0.25%",
                                 "--reserve", "0.2%", "--dry-run")
        assert code == 0, err
        warned += "warning: " in out
        assert "--policy safe" not in out and "exploring" not in out
        differ += "safe: +" in out  # the safety's price, where it differs from the best guess
        # the charges as given, not rounded to whole percents (0.25 % read "0%")
        assert "departing at 0.25%, reserve 0.2% of" in out
    assert differ > 0 and warned > 0


def test_history_shows_the_km_the_route_table_showed(tmp_path, capsys, town):
    """The history rounded the length twice (to 3 decimals, then 2): 5,475.26 m showed 5.47 km
    where the route table had printed 5.48. A trip of that length, recorded in a store, shows
    5.48 in both."""
    state = tmp_path / "s"
    with ev_nav.create_state(state, synthetic=2000, model="bi"):
        pass
    with Store.open(state) as store:
        store.add_trip(origin_segment=1, goal_segment=1, policy="mean", route=[1],
                       predicted_wh=1.0, predicted_sd_wh=0.0, length_m=5475.26, time_s=1.0)
    code, out, err = run_cli(capsys, "history", state)
    assert code == 0, err
    row = next(ln for ln in out.splitlines() if ln.lstrip().startswith("1 "))
    assert " 5.48 " in row and "5.47" not in row
    assert f"{5475.26 / 1000:.2f}" == "5.48"  # what the route table prints for it


def _counts(state) -> tuple[int, int, list[int]]:
    with Store.open(state) as store:
        return store.n_trips(), store.n_observations(), store.checkpoint_ids()


def test_dry_run_records_nothing(learned_state, capsys, town):
    before = _counts(learned_state)
    maps = sorted((learned_state / "maps").glob("*"))
    lon_a, lat_a = _point_on(town, 40, 0.5)
    lon_b, lat_b = _point_on(town, 900, 0.5)
    code, out, err = run_cli(
        capsys, "route", learned_state, "--from", f"{lat_a},{lon_a}", "--to", f"{lat_b},{lon_b}",
        "--dry-run",
    )
    assert code == 0, err
    assert out.startswith(f"dry run (nothing recorded), as trip {before[0] + 1}:")
    assert "record the drive with" not in out
    assert _counts(learned_state) == before
    assert sorted((learned_state / "maps").glob("*")) == maps


def test_a_downhill_trip_records_its_negative_total(monaco, tmp_path, capsys):
    """Issue 29, item 3: a real descent on MoST Monaco (elevation per node) is predicted below
    zero; its negative total, near the prediction, is recorded and learned from."""
    path = tmp_path / "monaco.npz"
    monaco.save(path)
    state = tmp_path / "m"
    ev_nav.create_state(state, network=path, model="bi").close()
    z = monaco.node_elevation
    hi, lo = np.argsort(z)[-30:], np.argsort(z)[:30]
    found = None
    with ev_nav.open_state(state) as session:
        for a in hi[::-1]:
            for b in lo:
                start = (monaco.node_lat[a], monaco.node_lon[a])
                goal = (monaco.node_lat[b], monaco.node_lon[b])
                try:
                    trip = ev_nav.plan_trip(session, start, goal, policy="mean", record=False)
                except ev_nav.EvNavError:
                    continue
                if trip.routes["planned"].predicted_wh < -20:
                    found = (start, goal)
                    break
            if found:
                break
    assert found is not None, "no descent predicted below zero on Monaco"
    (lat_a, lon_a), (lat_b, lon_b) = found
    code, out, err = run_cli(capsys, "route", state, "--from", f"{lat_a},{lon_a}", "--to",
                             f"{lat_b},{lon_b}", "--policy", "mean", "--no-map", "--json")
    assert code == 0, err
    import json

    planned = json.loads(out)["routes"]["planned"]
    total = planned["predicted_wh"] * 0.9  # a little less regeneration than predicted
    assert total < 0
    code, out, err = run_cli(capsys, "observe", state, 1, "--total-wh", f"{total:.1f}")
    assert code == 0 and "recorded the trip total" in out, err
    with Store.open(state) as store:
        assert store.observed_total(1) == pytest.approx(round(total, 1))
