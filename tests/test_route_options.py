"""Route options (via points, avoided road kinds, time weight) through the library and the CLI,
and the optional road-kind array of the network format (issue 29, item 11).

Routes are checked against independent computations: SciPy's Dijkstra on the line graph (per
leg, or with the avoided segments removed), never against ev-nav's own router.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import textwrap

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.csgraph import dijkstra

from ev_nav.errors import (
    ConfigError,
    NetworkCacheError,
    OutsideNetworkError,
    RouteOptionError,
    UnreachableError,
)
from ev_nav.roads.network import ROAD_FLAGS, RoadNetwork
from ev_nav.roads.synthetic import synthetic_town
from ev_nav.store import Store
from ev_nav.trips.planning import plan_trip
from ev_nav.trips.route_options import MAX_TIME_WEIGHT, RouteOptions, avoided_segments
from ev_nav.trips.session import create_state, open_session
from tests.cli_helpers import latlon as _latlon
from tests.cli_helpers import run_cli as _run

SEGMENTS = 600
#: a price of time so high that energy no longer matters [Wh/min]
HUGE_TIME_WEIGHT = 1e7


@pytest.fixture(scope="module")
def net() -> RoadNetwork:
    return synthetic_town(SEGMENTS, seed=0)


@pytest.fixture(scope="module")
def session(tmp_path_factory, net):
    s = create_state(tmp_path_factory.mktemp("opts") / "state", synthetic=SEGMENTS, model="bi")
    yield s
    s.close()


def _point(net: RoadNetwork, e: int) -> tuple[float, float]:
    """(lat, lon) beside segment ``e`` that snaps back to ``e``."""
    lon, lat = net.segment_anchor(e)
    return lat, lon


def _corners(net: RoadNetwork) -> tuple[int, int]:
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    return int(order[5]), int(order[-5])


def _motorway(net: RoadNetwork) -> np.ndarray:
    return net.highway == net.highway_classes.index("motorway")


def _dist(net: RoadNetwork, weights: np.ndarray, removed: np.ndarray | None = None):
    """All-pairs-from-sources SciPy Dijkstra on the line graph: entering segment e costs
    weights[e]; ``removed`` segments cannot be entered."""
    src = np.repeat(np.arange(net.n_segments), np.diff(net.lg_indptr))
    dst = np.asarray(net.lg_indices)
    keep = np.ones(dst.shape[0], dtype=bool) if removed is None else ~removed[dst]
    g = sp.csr_matrix(
        (weights[dst[keep]] + 1e-12, (src[keep], dst[keep])), shape=(net.n_segments,) * 2
    )
    return lambda a: dijkstra(g, directed=True, indices=a)


def _cands(net: RoadNetwork, e: int) -> list[tuple[int, float]]:
    """Where the point beside segment ``e`` lies on the road: (segment, fraction) for each
    direction of the street."""
    return list(net.snap(*net.segment_anchor(e)).candidates)


def _partial(net, w, c, d, removed=None) -> float:
    """SciPy reference: least cost from point ``c`` to point ``d`` ((segment, fraction) each),
    the partly driven end segments counted with their share."""
    (s, fs), (g, fg) = c, d
    if s == g and fg >= fs:
        return w[s] * (fg - fs)
    dist = _dist(net, w, removed)
    if s == g:
        succ = net.lg_indices[net.lg_indptr[s] : net.lg_indptr[s + 1]]
        back = min(w[n] + dist(n)[s] for n in succ)
        return w[s] * (1 - fs) + back - w[s] + w[s] * fg
    return w[s] * (1 - fs) + dist(s)[g] - w[g] * (1 - fg)


def _through(net, w, stops, removed=None) -> float:
    """SciPy reference: least cost through the stops' candidate points in order."""
    best = {c: 0.0 for c in stops[0]}
    for stop in stops[1:]:
        best = {d: min(v + _partial(net, w, c, d, removed) for c, v in best.items())
                for d in stop}
    return min(best.values())


def _is_path(net: RoadNetwork, path) -> bool:
    """Every step of ``path`` is a line-graph connection."""
    return all(
        b in net.lg_indices[net.lg_indptr[a] : net.lg_indptr[a + 1]]
        for a, b in zip(path[:-1], path[1:], strict=True)
    )


# ------------------------------------------------------------------------------ options
def test_options_are_validated():
    assert RouteOptions(avoid=("Toll", "motorway,toll")).avoid == ("motorway", "toll")
    assert RouteOptions(avoid="ferry").avoid == ("ferry",)
    with pytest.raises(RouteOptionError, match="unknown road kind.*tol; choose from motorway, "
                       "toll, unpaved, ferry"):
        RouteOptions(avoid=("tol",))
    for bad in (float("nan"), -1.0, float("inf"), "fast"):
        with pytest.raises(RouteOptionError, match="time weight"):
            RouteOptions(time_weight=bad)
    # a finite price too large for the route search (λ · minutes overflows to inf) is the
    # option's error, not the router's "Dijkstra weights must be finite" (an InvalidObservation)
    assert RouteOptions(time_weight=MAX_TIME_WEIGHT).time_weight == MAX_TIME_WEIGHT
    for bad in (MAX_TIME_WEIGHT * 10, 1e308):
        with pytest.raises(RouteOptionError, match="time weight.*at most 1e\\+09"):
            RouteOptions(time_weight=bad)
    with pytest.raises(RouteOptionError, match="via point 2"):
        RouteOptions(via=((47.0, 8.0), (95.0, 8.0)))
    with pytest.raises(RouteOptionError, match="at most"):
        RouteOptions(via=((47.0, 8.0),) * 26)


# ------------------------------------------------------------------------------ library
def test_via_point_every_route_passes_it(session, net):
    s, g = _corners(net)
    v = int(np.argsort(net.segment_midpoints()[:, 0])[-40])  # far east, off the diagonal
    trip = plan_trip(session, _point(net, s), _point(net, g), policy="ts", via=[_point(net, v)])
    cs, cv, cg = _cands(net, s), _cands(net, v), _cands(net, g)
    (driven,) = trip.via_segments  # the direction of v's street that the planned route drives
    assert driven in {e for e, _ in cv} and driven in trip.routes["planned"].segments.tolist()
    for name, r in trip.routes.items():
        seg = r.segments.tolist()
        assert (seg[0], r.start_fraction) in cs and (seg[-1], r.end_fraction) in cg, name
        assert {e for e, _ in cv} & set(seg) and _is_path(net, seg), name
    # the shortest route through v is as long as the best two legs (SciPy, per leg)
    expected = _through(net, np.asarray(net.length_m), [cs, cv, cg])
    assert trip.routes["shortest"].length_m == pytest.approx(expected, rel=1e-9)
    direct = plan_trip(session, _point(net, s), _point(net, g), policy="mean")
    assert trip.routes["shortest"].length_m > direct.routes["shortest"].length_m  # a real detour
    # the recorded trip is the planned route, with the options it was planned under
    with Store.open(session.state_dir) as st:
        rec = st.get_trip(trip.trip_id)
    assert np.array_equal(rec.route, trip.routes["planned"].segments)
    assert rec.extra["via_segments"] == [driven]
    assert rec.extra["route_options"]["via"] == [list(_point(net, v))]
    doc = trip.to_dict()
    assert doc["via_segments"] == [driven] and doc["avoid"] == [] and doc["notices"] == []


def test_the_via_segment_named_is_the_one_the_route_drives(session, net):
    """A via point on a two-way street snaps to a segment per direction; the trip named the
    preferred one even where the route drove the other (33 of 86 via points here)."""
    s, g = _corners(net)
    reversed_ = 0
    for v in range(0, SEGMENTS, 7):
        cands = [e for e, _ in net.snap(*net.segment_anchor(v)).candidates]
        trip = plan_trip(session, _point(net, s), _point(net, g), policy="mean",
                         via=[_point(net, v)], record=False)
        (named,) = trip.via_segments
        assert named in cands and named in trip.routes["planned"].segments.tolist(), v
        reversed_ += named != cands[0]
    assert reversed_ >= 10  # the case this is about occurs


def test_round_trip_through_a_via_point(session, net):
    """Origin and goal on one segment are a trip when a via point lies between."""
    s, g = _corners(net)
    trip = plan_trip(session, _point(net, s), _point(net, s), policy="mean", via=[_point(net, g)])
    seg = trip.routes["planned"].segments.tolist()
    ends = {e for e, _ in _cands(net, s)}
    assert seg[0] in ends and seg[-1] in ends and _is_path(net, seg)
    assert {e for e, _ in _cands(net, g)} & set(seg)


def test_avoid_motorway(session, net):
    s, g = _corners(net)
    mw = _motorway(net)
    plain = plan_trip(session, _point(net, s), _point(net, g), policy="mean")
    assert mw[plain.routes["fastest"].segments].any()  # the precondition: it is worth avoiding
    trip = plan_trip(session, _point(net, s), _point(net, g), policy="ts", avoid=["motorway"])
    assert trip.notices == () and trip.to_dict()["avoid"] == ["motorway"]
    for name, r in trip.routes.items():
        assert not mw[r.segments].any(), name
    # the fastest route without motorways, from SciPy with them removed from the graph
    t = np.asarray(net.travel_time_s)
    best = _through(net, t, [_cands(net, s), _cands(net, g)], removed=mw)
    assert trip.routes["fastest"].time_s == pytest.approx(best, rel=1e-9)
    assert trip.routes["fastest"].time_s > plain.routes["fastest"].time_s


def test_time_weight_trades_energy_for_time(session, net):
    s, g = _corners(net)
    a, b = _point(net, s), _point(net, g)
    trips = [plan_trip(session, a, b, policy="mean", time_weight=w) for w in (0.0, 5.0, 50.0)]
    times = [t.routes["planned"].time_s for t in trips]
    energies = [t.routes["planned"].predicted_wh for t in trips]
    # a weighted sum's minimiser: time never rises and energy never falls as time gets dearer
    assert times == sorted(times, reverse=True) and energies == sorted(energies)
    assert times[-1] < times[0]
    fast = plan_trip(session, a, b, policy="ts", time_weight=HUGE_TIME_WEIGHT)
    assert np.array_equal(fast.routes["planned"].segments, fast.routes["fastest"].segments)
    assert np.array_equal(fast.routes["best guess"].segments, fast.routes["fastest"].segments)
    assert fast.to_dict()["time_weight_wh_per_min"] == HUGE_TIME_WEIGHT
    with pytest.raises(RouteOptionError, match="time weight"):
        plan_trip(session, a, b, time_weight=float("nan"))


def test_untagged_kind_and_bad_kind_are_errors(session, net):
    s, g = _corners(net)
    before = session.store.n_trips()
    with pytest.raises(RouteOptionError, match="records no toll tags.*synthetic town"):
        plan_trip(session, _point(net, s), _point(net, g), avoid=["toll"])
    with pytest.raises(RouteOptionError, match="choose from motorway, toll, unpaved, ferry"):
        plan_trip(session, _point(net, s), _point(net, g), avoid=["tolls"])
    mw_seg = int(np.flatnonzero(_motorway(net))[3])
    with pytest.raises(RouteOptionError, match="the goal snaps to .*, a motorway road, which is"):
        plan_trip(session, _point(net, s), _point(net, mw_seg), avoid=["motorway"])
    assert session.store.n_trips() == before  # nothing recorded


def test_ferry_on_an_untagged_network_is_the_notice(tmp_path, capsys, session, net):
    """``--avoid ferry`` on the synthetic town (no road-kind tags) was an error advising a
    rebuild from OSM, which would add no ferry (ferry ways are never loaded): it is the notice
    an OSM network gives, and the routes are those planned without it; toll stays an error."""
    assert net.flagged("ferry") is None  # the town records no road kinds
    s, g = _corners(net)
    a, b = _point(net, s), _point(net, g)
    plain = plan_trip(session, a, b, policy="mean", record=False)
    trip = plan_trip(session, a, b, policy="mean", avoid=["ferry"], record=False)
    assert trip.absent_kinds == ("ferry",)
    assert trip.notices == (
        f"{net.name} has no ferries to avoid (ev-nav loads drivable roads only, not ferry "
        "crossings), so avoiding ferry changes no route",
    )
    for name, r in plain.routes.items():
        assert np.array_equal(trip.routes[name].segments, r.segments), name
    with pytest.raises(RouteOptionError, match="records no toll tags"):
        plan_trip(session, a, b, avoid=["ferry", "toll"], record=False)
    # the command line: one notice line, no "avoiding ferry", the trip recorded
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    code, out, err = _run(capsys, "route", state, "--from", _latlon(net, s), "--to",
                          _latlon(net, g), "--avoid", "ferry", "--no-map")
    assert code == 0, err
    assert err.splitlines() == [f"ev-nav: notice: {trip.notices[0]}"]
    assert "avoiding" not in out
    with Store.open(state) as st:
        assert st.n_trips() == 1


@pytest.fixture(scope="module")
def tagged(tmp_path_factory, net):
    """A state on the town with toll flags on a band of segments (as OSM tags would give)."""
    mid = net.segment_midpoints()
    x = (mid[:, 0] - mid[:, 0].min()) / np.ptp(mid[:, 0])
    y = (mid[:, 1] - mid[:, 1].min()) / np.ptp(mid[:, 1])
    toll = (x > 0.45) & (x < 0.55) & (y < 0.7)  # a tolled band with a free way round it
    flags = np.where(toll, 1 << ROAD_FLAGS.index("toll"), 0).astype(np.uint8)
    folder = tmp_path_factory.mktemp("tagged")
    path = dataclasses.replace(net, road_flags=flags).save(folder / "tolled.npz")
    s = create_state(folder / "state", network=path, model="bi")
    yield s, toll, path
    s.close()


def test_avoid_tagged_kinds(tagged, net):
    session, toll, _ = tagged
    s, g = _corners(net)
    plain = plan_trip(session, _point(net, s), _point(net, g), policy="mean")
    assert toll[plain.routes["planned"].segments].any()
    trip = plan_trip(
        session, _point(net, s), _point(net, g), policy="mean", avoid=["toll", "unpaved"]
    )
    for name, r in trip.routes.items():
        assert not toll[r.segments].any(), name
    # unpaved is tagged (the network records kinds) but no segment has it: a notice
    assert len(trip.notices) == 1 and "no segment of" in trip.notices[0]
    assert "unpaved" in trip.notices[0]
    mask, notices = avoided_segments(session.net, ["toll"])
    assert np.array_equal(mask, toll) and notices == []


def test_unreachable_without_avoided_kinds(tmp_path, net):
    s, g = _corners(net)
    # every segment leading into the goal's street (either direction) is a toll road
    src = np.repeat(np.arange(net.n_segments), np.diff(net.lg_indptr))
    into_g = src[np.isin(net.lg_indices, [e for e, _ in _cands(net, g)])]
    flags = np.zeros(net.n_segments, dtype=np.uint8)
    flags[into_g] = 1 << ROAD_FLAGS.index("toll")
    path = dataclasses.replace(net, road_flags=flags).save(tmp_path / "closed.npz")
    with create_state(tmp_path / "state", network=path, model="bi") as session:
        with pytest.raises(UnreachableError, match="no route from the origin to the goal avoids "
                           "toll"):
            plan_trip(session, _point(net, s), _point(net, g), avoid=["toll"])
        assert session.store.n_trips() == 0


# ------------------------------------------------------------------------------ network format
def _old_arrays_hash(path) -> str:
    """The arrays hash as ev-nav computed it before road kinds existed (the 15 fields)."""
    names = ("node_lon", "node_lat", "node_elevation", "node_osmid", "seg_u", "seg_v",
             "length_m", "speed_mps", "grade", "highway", "speed_imputed", "geom_offsets",
             "geom_lonlat", "lg_indptr", "lg_indices")
    h = hashlib.sha256()
    with np.load(path) as data:
        for name in names:
            arr = np.ascontiguousarray(data[name])
            h.update(f"{name}:{arr.dtype.str}:{arr.shape};".encode())
            h.update(arr.tobytes())
    return h.hexdigest()


def test_network_files_without_road_kinds_keep_opening(tmp_path, net, tagged):
    """A file as earlier versions wrote it (no road_flags array) opens, with no kinds recorded
    and its old arrays hash (so states bound to it still open); one with kinds round-trips."""
    old = net.save(tmp_path / "old.npz")
    with np.load(old) as data:
        assert "road_flags" not in data.files
        header = json.loads(bytes(data["header_json"]).decode())
    assert "road_flags" not in header
    back = RoadNetwork.load(old)
    assert back.road_flags is None and back.flagged("toll") is None
    assert back.arrays_hash == _old_arrays_hash(old) == header["arrays_sha256"]
    assert back.summary()["road_kind_segments"] is None

    session, toll, path = tagged
    new = RoadNetwork.load(path)
    assert np.array_equal(new.flagged("toll"), toll) and not new.flagged("unpaved").any()
    assert new.arrays_hash != _old_arrays_hash(path)  # the kinds are covered by the hash
    assert new.summary()["road_kind_segments"] == {"toll": int(toll.sum()), "unpaved": 0,
                                                   "ferry": 0}
    # altered kinds behind an unchanged header are caught
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["road_flags"] = np.zeros_like(arrays["road_flags"])
    np.savez(tmp_path / "altered.npz", **arrays)
    with pytest.raises(NetworkCacheError, match="damaged or was modified"):
        RoadNetwork.load(tmp_path / "altered.npz")
    # a state created on a kind-less network file opens on it again
    create_state(tmp_path / "st", network=old, model="bi").close()
    open_session(tmp_path / "st").close()


OSM = textwrap.dedent("""\
    <?xml version="1.0" encoding="UTF-8"?>
    <osm version="0.6">
    {nodes}
      <way id="1"><nd ref="1"/><nd ref="2"/><nd ref="3"/>
        <tag k="highway" v="residential"/><tag k="toll" v="yes"/></way>
      <way id="2"><nd ref="4"/><nd ref="5"/><nd ref="6"/>
        <tag k="highway" v="residential"/><tag k="surface" v="gravel"/></way>
      <way id="3"><nd ref="7"/><nd ref="8"/><nd ref="9"/>
        <tag k="highway" v="residential"/><tag k="surface" v="asphalt"/></way>
      <way id="4"><nd ref="1"/><nd ref="4"/><nd ref="7"/><tag k="highway" v="residential"/></way>
      <way id="5"><nd ref="2"/><nd ref="5"/><nd ref="8"/><tag k="highway" v="residential"/></way>
      <way id="6"><nd ref="3"/><nd ref="6"/><nd ref="9"/><tag k="highway" v="residential"/></way>
    </osm>
""")


def write_grid_osm(path):
    """:data:`OSM` on a 3 × 3 grid of nodes 0.001° apart (no elevation) written to ``path``."""
    nodes = "\n".join(
        f'  <node id="{1 + 3 * r + c}" lat="{47.0 + 0.001 * r}" lon="{8.0 + 0.001 * c}"/>'
        for r in range(3)
        for c in range(3)
    )
    path.write_text(OSM.format(nodes=nodes))
    return path


def test_loader_records_road_kinds_from_osm_tags(tmp_path):
    from ev_nav.roads.load import load_osm

    osm = write_grid_osm(tmp_path / "grid.osm")
    with pytest.warns(UserWarning, match="no elevation source"):
        net = load_osm(osm)
    def along_row(r: int) -> np.ndarray:
        """Segments whose polyline runs (partly) along grid row ``r`` (a merged edge carries
        the kinds of every way it merges)."""
        out = np.zeros(net.n_segments, dtype=bool)
        for e in range(net.n_segments):
            xy = net.segment_coords(e)
            lat0, lat1 = xy[:-1, 1], xy[1:, 1]
            out[e] = bool(np.any(np.isclose(lat0, 47.0 + 0.001 * r) & np.isclose(lat1, lat0)))
        return out

    toll, gravel = along_row(0), along_row(1)
    assert toll.any() and gravel.any()
    assert np.array_equal(net.flagged("toll"), toll)
    assert np.array_equal(net.flagged("unpaved"), gravel)  # gravel; the asphalt row is not
    assert not net.flagged("ferry").any()
    assert net.summary()["road_kind_segments"] == {
        "toll": int(toll.sum()), "unpaved": int(gravel.sum()), "ferry": 0
    }
    # saved and loaded, the kinds survive
    back = RoadNetwork.load(net.save(tmp_path / "grid.npz"))
    assert np.array_equal(back.road_flags, net.road_flags)


# ------------------------------------------------------------------------------ CLI
def test_cli_route_options(tmp_path, capsys, net, tagged):
    state = tmp_path / "state"
    code, _, err = _run(
        capsys, "init", state, "--synthetic", "--segments", SEGMENTS, "--model", "bi"
    )
    assert code == 0, err
    s, g = _corners(net)
    v = int(np.argsort(net.segment_midpoints()[:, 0])[-40])
    mw = _motorway(net)
    code, out, err = _run(
        capsys, "route", state, "--from", _latlon(net, s), "--to", _latlon(net, g),
        "--via", _latlon(net, v), "--avoid", "motorway", "--json", "--no-map",
    )
    assert code == 0, err
    doc = json.loads(out)
    via_dirs = {e for e, _ in _cands(net, v)}
    (driven,) = doc["via_segments"]
    assert driven in via_dirs and driven in doc["routes"]["planned"]["segments"]
    assert doc["avoid"] == ["motorway"]
    for name, r in doc["routes"].items():
        assert via_dirs & set(r["segments"]) and not mw[r["segments"]].any(), name
    code, out, err = _run(
        capsys, "route", state, "--from", _latlon(net, s), "--to", _latlon(net, g),
        "--time-weight", HUGE_TIME_WEIGHT, "--policy", "mean", "--no-map", "--json",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["time_weight_wh_per_min"] == HUGE_TIME_WEIGHT
    assert doc["routes"]["planned"]["segments"] == doc["routes"]["fastest"]["segments"]
    code, out, err = _run(
        capsys, "route", state, "--from", _latlon(net, s), "--to", _latlon(net, g),
        "--time-weight", HUGE_TIME_WEIGHT, "--avoid", "motorway", "--no-map",
    )
    assert code == 0, err
    assert "avoiding motorway; time priced at 1e+07 Wh/min" in out
    with Store.open(state) as st:
        assert st.n_trips() == 3

    # errors: one line, nothing recorded
    with Store.open(state) as st:
        before = st.n_trips()
    for args, fragment in (
        (["--avoid", "tolls"], "choose from motorway, toll, unpaved, ferry"),
        (["--avoid", "toll"], "records no toll tags"),
        (["--time-weight", "-1"], "time weight must be >= 0"),
        (["--time-weight", "nan"], "finite"),
        (["--time-weight", "1e308"], "at most 1e+09 Wh/min"),
        (["--via", "47.0"], "expected LAT,LON"),
    ):
        code, _, err = _run(
            capsys, "route", state, "--from", _latlon(net, s), "--to", _latlon(net, g), *args
        )
        assert code != 0, args
        assert "Traceback" not in err and fragment in err, (args, err)
    with Store.open(state) as st:
        assert st.n_trips() == before

    # a network with road kinds: a kind no segment has is a notice, the route avoids the rest
    _, toll, path = tagged
    state = tmp_path / "tagged"
    assert _run(capsys, "init", state, "--network", path, "--model", "bi")[0] == 0
    code, out, err = _run(
        capsys, "route", state, "--from", _latlon(net, s), "--to", _latlon(net, g),
        "--avoid", "toll,unpaved", "--json", "--no-map",
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["avoid"] == ["toll", "unpaved"] and len(doc["notices"]) == 1
    assert "ev-nav: notice: no segment of" in err and "unpaved" in err
    for name, r in doc["routes"].items():
        assert not toll[r["segments"]].any(), name


def test_cli_avoid_ferry_says_the_network_has_none(tmp_path, capsys, monaco, net, tagged):
    """``--avoid ferry`` never acts (``network build`` loads no ferry crossings): the route says
    so in one notice line, does not claim "avoiding ferry", and plans the routes it would plan
    without it. A kind that is present is still reported as avoided."""
    # the real Monaco network records road kinds, and (independently of the router) has no ferry
    flags = monaco.flagged("ferry")
    assert flags is not None and not flags.any()
    path = monaco.save(tmp_path / "monaco.npz")
    state = tmp_path / "monaco"
    assert _run(capsys, "init", state, "--network", path, "--model", "bi")[0] == 0
    s, g = _corners(monaco)
    ends = ["--from", _latlon(monaco, s), "--to", _latlon(monaco, g), "--policy", "mean"]
    code, out, err = _run(capsys, "route", state, *ends, "--avoid", "ferry", "--dry-run")
    assert code == 0, err
    assert err.splitlines() == [
        f"ev-nav: notice: {monaco.name} has no ferries to avoid (ev-nav loads drivable roads "
        "only, not ferry crossings), so avoiding ferry changes no route"
    ]
    assert "avoiding" not in out  # was "avoiding ferry": a claim nothing backed
    doc = json.loads(_run(capsys, "route", state, *ends, "--avoid", "ferry", "--dry-run",
                          "--json")[1])  # fmt: skip
    plain = json.loads(_run(capsys, "route", state, *ends, "--dry-run", "--json")[1])
    assert doc["avoid"] == ["ferry"] and doc["notices"] == [err.split("notice: ")[1].strip()]
    for name, r in plain["routes"].items():
        assert doc["routes"][name]["segments"] == r["segments"], name

    # toll is present on the tagged town: avoided and said so; ferry only gets the notice
    _, toll, town_path = tagged
    town_state = tmp_path / "town"
    assert _run(capsys, "init", town_state, "--network", town_path, "--model", "bi")[0] == 0
    s, g = _corners(net)
    code, out, err = _run(
        capsys, "route", town_state, "--from", _latlon(net, s), "--to", _latlon(net, g),
        "--avoid", "toll,ferry", "--dry-run",
    )  # fmt: skip
    assert code == 0, err
    assert "avoiding toll\n" in out and "has no ferries to avoid" in err
    assert len(err.splitlines()) == 1


def test_plan_trip_takes_one_kind_as_a_string_and_names_bad_arguments(session, net):
    """``avoid="motorway"`` is the kind, not its letters (``RouteOptions`` takes a string; the
    planner split it into characters: "unknown road kind(s) to avoid: a, m, o, r, t, w, y");
    a bad seed, snap distance or point is a named one-line error, and nothing is recorded."""
    s, g = _corners(net)
    a, b = _point(net, s), _point(net, g)
    trip = plan_trip(session, a, b, policy="mean", avoid="motorway", record=False)
    assert trip.options.avoid == ("motorway",)
    assert not _motorway(net)[trip.routes["planned"].segments].any()
    before = session.store.n_trips()
    for kwargs, error, fragment in (
        ({"avoid": "motorways"}, RouteOptionError, "unknown road kind(s) to avoid: motorways;"),
        ({"seed": -1}, ConfigError, "seed must be an integer in 0..2^63-1, got -1"),
        ({"seed": 2.5}, ConfigError, "seed must be an integer"),
        ({"max_snap_m": float("nan")}, ConfigError, "max_snap_m must be a finite distance > 0"),
        ({"max_snap_m": -1.0}, ConfigError, "max_snap_m must be a finite distance > 0"),
        ({"origin": (47.0, 8.0, 1.0)}, OutsideNetworkError, "origin must be (lat, lon)"),
        ({"goal": "47.0,8.0"}, OutsideNetworkError, "goal must be (lat, lon)"),
        ({"via": [(47.0,)]}, RouteOptionError, "via point 1 must be (lat, lon)"),
    ):
        args = {"origin": a, "goal": b, **kwargs}
        with pytest.raises(error) as info:
            plan_trip(session, args.pop("origin"), args.pop("goal"), **args)
        assert fragment in str(info.value) and "\n" not in str(info.value), kwargs
    assert session.store.n_trips() == before
