"""Property-based fuzzing of the per-trip CLI (issue 17): whatever a user types or feeds it, a
command either succeeds or fails with one line on stderr, a non-zero exit code and the state
exactly as it was (trips, observations and model checkpoints)."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ev_nav.cli import main
from ev_nav.store import Store

SEGMENTS = 300
FUZZ = settings(
    max_examples=40,
    deadline=None,  # the assertion is about behaviour, never about speed
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples every run: a red suite is reproducible
)


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    state = tmp_path_factory.mktemp("fuzz") / "state"
    assert main(["init", str(state), "--synthetic", "--segments", str(SEGMENTS), "--model",
                 "bi"]) == 0
    assert main(["route", str(state), "--from", "47.0010,8.0020", "--to", "47.0040,8.0060",
                 "--policy", "mean", "--no-map"]) == 0
    return state


def _fingerprint(state) -> str:
    """Hash of everything a command could change: trips, observations, checkpoints."""
    h = hashlib.sha256()
    with sqlite3.connect(Store.db_path(state)) as conn:
        for table in ("trips", "observation_batches", "observations", "checkpoints", "meta"):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
                h.update(repr(row).encode())
    return h.hexdigest()


def _check(capsys, state, argv):
    before = _fingerprint(state)
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    err = capsys.readouterr().err
    if code == 0:
        return True
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("ev-nav: error:"), (argv, err)
    assert _fingerprint(state) == before, argv
    return False


text_cell = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=12),
)


@FUZZ
@given(
    header=st.sampled_from(["segment,energy_wh", "energy_wh,segment", "seg,wh", "", "segment"]),
    rows=st.lists(st.tuples(text_cell, text_cell), max_size=8),
    trip=st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.text(max_size=6)),
)
def test_observe_random_csv(tmp_path_factory, capsys, state, header, rows, trip):
    csv_path = tmp_path_factory.mktemp("csv") / "obs.csv"
    body = "".join(f"{a},{b}\n" for a, b in rows)
    csv_path.write_text(f"{header}\n{body}", encoding="utf-8", errors="surrogatepass")
    _check(capsys, state, ["observe", state, str(trip), "--segments", csv_path])
    # only trip 1 exists, and only real observations of its own route can be accepted; never
    # mind which: the state check above is the property


@FUZZ
@given(
    frm=st.one_of(
        st.tuples(st.floats(-100, 100), st.floats(-200, 200)).map(lambda p: f"{p[0]},{p[1]}"),
        st.text(max_size=15),
    ),
    to=st.tuples(st.floats(allow_nan=True), st.floats(allow_nan=True)).map(
        lambda p: f"{p[0]},{p[1]}"
    ),
    seed=st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70)),
    snap=st.one_of(st.none(), st.floats(allow_nan=True)),
)
def test_route_random_coordinates(capsys, state, frm, to, seed, snap):
    argv = ["route", state, "--from", frm, "--to", to, "--no-map", "--policy", "mean"]
    if seed is not None:
        argv += ["--seed", str(seed)]
    if snap is not None:
        argv += ["--max-snap", repr(snap)]
    n_before = _trips(state)
    if _check(capsys, state, argv):
        assert _trips(state) == n_before + 1


@FUZZ
@given(total=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=10)),
       trip=st.integers(min_value=-(2**66), max_value=2**66))
def test_total_random_values_and_ids(capsys, state, total, trip):
    value = repr(total) if isinstance(total, float) else total
    _check(capsys, state, ["observe", state, str(trip), f"--total-wh={value}"])


def _trips(state) -> int:
    with Store.open(state) as s:
        return s.n_trips()
