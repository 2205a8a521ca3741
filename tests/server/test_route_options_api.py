"""Route options over HTTP (issue 29, item 11): ``via``, ``avoid`` and ``time_weight`` in the
route request, through the raw API and the Python client; bad values are one-line 422s that
record nothing."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.server.test_api import AUTH, TOKEN, _assert_error, fingerprint, settle

HUGE_TIME_WEIGHT = 1e7  # [Wh/min]: time is all that matters


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120.0) as client:
        yield client


def _point(net, e: int) -> list[float]:
    lon, lat = net.segment_anchor(e)
    return [lat, lon]


def _corners(net) -> tuple[int, int]:
    mid = net.segment_midpoints()
    order = np.argsort(mid[:, 0] + mid[:, 1])
    return int(order[4]), int(order[-4])


def _motorway(net) -> np.ndarray:
    return net.highway == net.highway_classes.index("motorway")


def test_via_and_avoid_over_http(http, served_town) -> None:
    net = served_town
    s, g = _corners(net)
    mw = _motorway(net)
    base = {"origin": _point(net, s), "goal": _point(net, g), "policy": "ts"}
    plain = http.post("/api/routes", json=base, headers=AUTH).json()
    assert mw[plain["routes"]["fastest"]["segments"]].any()  # there is a motorway to avoid
    east = np.argsort(net.segment_midpoints()[:, 0])[::-1]
    v = int(east[~mw[east]][20])  # far east, not on the motorway
    r = http.post(
        "/api/routes",
        json={**base, "via": [_point(net, v)], "avoid": ["motorway"], "soc": "80%"},
        headers=AUTH,
    )
    assert r.status_code == 200, r.text
    trip = r.json()
    (driven,) = trip["via_segments"]  # the direction of v's street the planned route drives
    assert driven in {e for e, _ in net.snap(*net.segment_anchor(v)).candidates}
    assert driven in trip["routes"]["planned"]["segments"] and trip["avoid"] == ["motorway"]
    assert trip["notices"] == [] and trip["time_weight_wh_per_min"] == 0.0
    assert set(trip["routes"]) == {"planned", "best guess", "safe", "shortest", "fastest"}
    for name, route in trip["routes"].items():
        seg = route["segments"]
        # the route starts and ends at the points, either direction of their streets
        ends = (
            {e for e, _ in net.snap(*net.segment_anchor(s)).candidates},
            {e for e, _ in net.snap(*net.segment_anchor(g)).candidates},
            {e for e, _ in net.snap(*net.segment_anchor(v)).candidates},
        )
        assert seg[0] in ends[0] and seg[-1] in ends[1] and ends[2] & set(seg), name
        assert not mw[seg].any(), name
        # the drawn line passes the via segment's polyline
        coords = np.array(route["coordinates"])[:, :2]
        via_xy = net.segment_coords(v)
        assert np.min(np.abs(coords[:, None, :] - via_xy[None, :, :]).sum(axis=2)) < 1e-5, name


def test_avoid_ferry_on_the_town_is_a_notice(http, served_town) -> None:
    """The served town records no road kinds: avoiding ferry was a 422 advising a rebuild from
    OSM (which loads no ferry either); it is the plan with the one notice, as on OSM networks."""
    net = served_town
    s, g = _corners(net)
    base = {"origin": _point(net, s), "goal": _point(net, g), "policy": "mean",
            "alternatives": False}
    settle(http)  # the same model plans both
    r = http.post("/api/routes", json={**base, "avoid": ["ferry"]}, headers=AUTH)
    assert r.status_code == 200, r.text
    trip = r.json()
    assert trip["avoid"] == ["ferry"] and trip["notices"] == [
        f"{net.name} has no ferries to avoid (ev-nav loads drivable roads only, not ferry "
        "crossings), so avoiding ferry changes no route"
    ]
    plain = http.post("/api/routes", json=base, headers=AUTH).json()
    assert trip["routes"]["planned"]["segments"] == plain["routes"]["planned"]["segments"]


def test_time_weight_through_the_client(server, served_town) -> None:
    from ev_nav.server.client import RoutingClient

    net = served_town
    s, g = _corners(net)
    with RoutingClient(server.url, token=TOKEN) as client:
        doc = client.plan(
            tuple(_point(net, s)), tuple(_point(net, g)), policy="ts",
            time_weight=HUGE_TIME_WEIGHT, avoid=["motorway"],
        )
    routes = doc["routes"]
    assert doc["time_weight_wh_per_min"] == HUGE_TIME_WEIGHT and doc["avoid"] == ["motorway"]
    # with time priced this high the plan is the fastest route (under the same constraints)
    assert routes["planned"]["segments"] == routes["fastest"]["segments"]
    assert routes["best guess"]["segments"] == routes["fastest"]["segments"]
    assert not _motorway(net)[routes["planned"]["segments"]].any()


def test_bad_route_options_are_one_line_422s(http, served_town, served_state) -> None:
    net = served_town
    s, g = _corners(net)
    base = {"origin": _point(net, s), "goal": _point(net, g)}
    on_motorway = int(np.flatnonzero(_motorway(net))[2])
    settle(http)
    before = fingerprint(http, served_state)
    cases = [
        ({"avoid": ["tolls"]}, "avoid.0", "'motorway', 'toll', 'unpaved' or 'ferry'"),
        ({"avoid": "motorway"}, "avoid", "list"),
        ({"avoid": ["toll"]}, "records no toll tags", "synthetic town"),
        ({"time_weight": -1}, "time_weight", "greater than or equal to 0"),
        ({"time_weight": "fast"}, "time_weight"),
        ({"time_weight": 1e308}, "time_weight", "less than or equal to 1000000000"),
        ({"via": [[95.0, 8.0]]}, "via.0.0", "less than or equal to 90"),
        ({"via": [[47.0]]}, "via.0"),
        ({"via": [_point(net, s)] * 26}, "via", "at most 25"),
        ({"goal": _point(net, on_motorway), "avoid": ["motorway"]}, "a motorway road"),
        ({"via": [[47.5, 8.5]]}, "from the nearest road"),
    ]
    for extra, *needles in cases:
        r = http.post("/api/routes", json={**base, **extra}, headers=AUTH)
        _assert_error(r, 422, *needles)
    # NaN is not a number of Wh per minute (JSON has no NaN; Python's encoder writes one)
    raw = f'{{"origin": {base["origin"]}, "goal": {base["goal"]}, "time_weight": NaN}}'.encode()
    r = http.post(
        "/api/routes", content=raw, headers={**AUTH, "Content-Type": "application/json"}
    )
    _assert_error(r, 422, "time_weight: Input should be a finite number")
    assert fingerprint(http, served_state) == before
