"""Observations a driver can trust (issue 16, item 5): implausible readings are refused with a
one-line reason unless --force, partial CSVs are never silently accepted, a trip's observations
can be forgotten, and awkward inputs behave. Every refusal leaves the state unchanged."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from ev_nav.roads.synthetic import synthetic_town
from ev_nav.store import Store
from tests.cli_helpers import latlon as _latlon
from tests.cli_helpers import run_cli as _run

SEGMENTS = 600


@pytest.fixture(scope="module")
def net():
    return synthetic_town(SEGMENTS, seed=0)


def _fingerprint(state) -> str:
    h = hashlib.sha256()
    with sqlite3.connect(Store.db_path(state)) as conn:
        for table in ("trips", "observation_batches", "observations", "checkpoints"):
            for row in conn.execute(f"SELECT * FROM {table} ORDER BY rowid"):
                h.update(repr(row).encode())
    return h.hexdigest()


@pytest.fixture
def planned(tmp_path, capsys, net):
    """A GP state with one planned trip; returns (state, trip route)."""
    state = tmp_path / "state"
    assert _run(capsys, "init", state, "--synthetic", "--segments", SEGMENTS)[0] == 0
    code, _, err = _run(capsys, "route", state, "--from", _latlon(net, 3), "--to",
                        _latlon(net, 400), "--policy", "mean", "--no-map")
    assert code == 0, err
    with Store.open(state) as s:
        return state, s.get_trip(1)


def _refused(capsys, state, argv, *fragments):
    before = _fingerprint(state)
    code, _, err = _run(capsys, *argv)
    lines = err.strip().splitlines()
    assert code != 0 and len(lines) == 1 and lines[0].startswith("ev-nav: error:"), err
    for f in fragments:
        assert f in lines[0], lines[0]
    assert _fingerprint(state) == before
    return lines[0]


def _csv(tmp_path, route, wh):
    p = tmp_path / "obs.csv"
    p.write_text("segment,energy_wh\n" + "".join(f"{a},{b!r}\n" for a, b in
                                                  zip(route.tolist(), wh, strict=True)))
    return p


@pytest.mark.parametrize(
    "value,reason",
    [("1e12", "more than any vehicle"), ("1e308", "more than any vehicle"),
     ("-1e12", "more than any vehicle")],
)
def test_absurd_totals_refused_even_with_force(capsys, planned, value, reason):
    state, _ = planned
    _refused(capsys, state, ["observe", state, 1, "--total-wh", value, "--force"], reason)


def test_the_hard_limit_grows_with_the_distance_driven(capsys, planned, tmp_path, net):
    """Refused even with --force: more than 30 kWh + 20 kWh per km driven (a total typed with
    three zeros too many once dragged every correlated road's learned energy with it, to a
    forecast of -720 kWh); just below it, --force records it."""
    from ev_nav.trips.plausibility import hard_limit_wh

    state, trip = planned
    km = float(np.asarray(trip.shares) @ net.length_m[trip.route]) / 1000
    limit = 30_000 + 20_000 * km
    assert float(hard_limit_wh(km * 1000)) == pytest.approx(limit)
    assert limit < trip.predicted_wh * 1000  # a kWh-for-Wh slip of this trip is beyond it
    line = _refused(capsys, state, ["observe", state, 1, "--total-wh", f"{limit * 1.01:.0f}",
                                    "--force"], "more than any vehicle can use or recover over")
    assert f"{km:,.3g} km" in line and f"({limit:,.0f} Wh)" in line
    # a segment's reading: limited by that segment's length
    seg = int(trip.route[len(trip.route) // 2])
    wh = np.full(trip.route.size, 10.0)
    wh[len(wh) // 2] = -1.01 * (30_000 + 20 * float(net.length_m[seg]))  # recovery alike
    _refused(capsys, state, ["observe", state, 1, "--segments",
                             _csv(tmp_path, trip.route, wh.tolist()), "--force"],
             f"segment {seg}", "more than any vehicle")
    code, out, err = _run(capsys, "observe", state, 1, "--total-wh", f"{limit * 0.99:.0f}",
                          "--force")
    assert code == 0 and "recorded the trip total" in out, err


def test_zero_total_and_far_readings_need_force(capsys, planned, tmp_path):
    state, trip = planned
    # one rule for a blank reading: 0 and a denormal read alike
    _refused(capsys, state, ["observe", state, 1, "--total-wh", "0"], "no reading")
    _refused(capsys, state, ["observe", state, 1, "--total-wh", "1e-320"], "no reading")
    far = trip.predicted_wh + 50 * max(trip.predicted_sd_wh, 1.0) + 1000
    line = _refused(capsys, state, ["observe", state, 1, "--total-wh", f"{far:.1f}"],
                    "standard deviations from the predicted")
    assert "--force" in line
    code, out, err = _run(capsys, "observe", state, 1, "--total-wh", f"{far:.1f}", "--force")
    assert code == 0 and "recorded the trip total" in out, err
    # the trip's sd is the route table's: the model's uncertainty, labelled as such
    assert f"predicted {trip.predicted_wh:.1f} Wh, model sd {trip.predicted_sd_wh:.1f} Wh)" in out


def test_kwh_mixup_is_named(capsys, planned):
    state, trip = planned
    kwh = trip.predicted_wh / 1000
    _refused(capsys, state, ["observe", state, 1, "--total-wh", repr(kwh)], "looks like kWh")


def test_refusals_name_their_sd(capsys, planned):
    """A refusal's ± was unlabelled, and larger than the route table's sd of the same trip: it
    counts one drive's noise (at least 20 % of each segment's loss), so it says so, in the
    acknowledgement's words; the load script's refusal substrings stay."""
    from ev_nav.potential import loss_scale
    from ev_nav.trips import open_session

    state, trip = planned
    session = open_session(state)
    shares = np.asarray(trip.shares)
    noise = session.model.noise_variance(trip.route, shares)
    floor = 0.2**2 * float(shares @ loss_scale(session.net, session.vehicle)[trip.route] ** 2)
    session.close()
    sd = float(np.sqrt(trip.predicted_sd_wh**2 + max(noise, floor)))
    assert f"{sd:.1f}" != f"{trip.predicted_sd_wh:.1f}"  # not the route table's model sd
    shown = f"predicted {trip.predicted_wh:.1f} Wh, sd with drive-to-drive noise {sd:.1f} Wh"
    far = trip.predicted_wh + 50 * sd
    z = (far - trip.predicted_wh) / sd
    for value, reason, said in [
        ("0", "reads as no reading", f"({shown})"),
        (repr(trip.predicted_wh / 1000), "looks like kWh", f"({shown})"),
        (f"{far:.1f}", "standard deviations from",
         f"{z:.0f} standard deviations from the predicted {trip.predicted_wh:.1f} Wh "
         f"(sd with drive-to-drive noise {sd:.1f} Wh); check the reading"),
    ]:
        line = _refused(capsys, state, ["observe", state, 1, "--total-wh", value], reason, said)
        assert "±" not in line


@pytest.mark.parametrize("value", [1e12, 1e308])
def test_absurd_segment_energies_refused(capsys, planned, tmp_path, value):
    state, trip = planned
    wh = np.full(trip.route.size, 10.0).tolist()
    wh[len(wh) // 2] = value
    _refused(capsys, state, ["observe", state, 1, "--segments", _csv(tmp_path, trip.route, wh)],
             f"segment {int(trip.route[len(wh) // 2])}")


def test_partial_csv_is_refused_or_explicit(capsys, planned, tmp_path):
    state, trip = planned
    half = trip.route[: trip.route.size // 2]
    _refused(capsys, state, ["observe", state, 1, "--segments",
                             _csv(tmp_path, half, [5.0] * half.size)],
             f"covers {half.size} of the {trip.route.size} segment passes", "--partial")
    from ev_nav.trips import open_session

    session = open_session(state)
    # the trip starts part-way along its first segment: that reading is of the part driven
    h = np.ones(half.size)
    h[0] = 1.0 - trip.start_fraction
    assert 0.0 < h[0] < 1.0
    mean = (h * session.model.posterior().mean[half]).tolist()
    # the part's prediction, from the model's parts: joint posterior covariance plus each
    # reading's noise, at least the plausible noise (what the readings are judged by), with
    # the first segment's share
    from ev_nav.potential import loss_scale
    from ev_nav.trips.plausibility import PLAUSIBLE_NOISE_SPREAD

    cov = session.model.route_covariance(half)
    floor = (PLAUSIBLE_NOISE_SPREAD * loss_scale(session.net, session.vehicle)[half]) ** 2
    noise = h @ np.maximum(session.model.noise_variances(half), floor)
    sd = float(np.sqrt(h @ cov @ h + noise))
    session.close()
    code, out, err = _run(capsys, "observe", state, 1, "--segments",
                          _csv(tmp_path, half, mean), "--partial")
    assert code == 0 and f"recorded {half.size} segment energies" in out, err
    # the prediction shown is the observed part's, not the whole route's (it was the latter)
    # labelled: this sd counts the drive-to-drive noise, unlike the route table's model sd
    assert (f"({sum(mean):.1f} Wh; predicted for these {half.size} segments {sum(mean):.1f} "
            f"Wh, sd with drive-to-drive noise {sd:.1f} Wh)") in out
    assert f"{trip.predicted_wh:.1f} Wh" not in out


def test_observe_json_names_both_spreads(capsys, planned, tmp_path):
    """``observe --json``'s predicted_sd_wh was the model sd for a total and the sd with the
    drive-to-drive noise for a --partial record: it is the model sd (the route table's) in
    both, beside sd_with_noise_wh, each computed here from the model's parts. The latter is the
    sd a refusal judges by and names (the model's noise, at least the plausible noise): one
    number under one name."""
    import json
    import re

    from ev_nav.potential import loss_scale
    from ev_nav.trips import open_session
    from ev_nav.trips.plausibility import PLAUSIBLE_NOISE_SPREAD

    state, trip = planned
    half = trip.route[: trip.route.size // 2]
    shares = np.asarray(trip.shares)
    session = open_session(state)
    a = loss_scale(session.net, session.vehicle)
    noise = max(session.model.noise_variance(trip.route, shares),
                PLAUSIBLE_NOISE_SPREAD**2 * float(np.bincount(
                    trip.route, shares, a.size) @ a**2))
    h = shares[: half.size]  # the first reading is of the part of its segment driven
    mean = (h * session.model.posterior().mean[half]).tolist()
    part_var = float(h @ session.model.route_covariance(half) @ h)
    part_noise = float(h @ np.maximum(session.model.noise_variances(half),
                                      (PLAUSIBLE_NOISE_SPREAD * a[half]) ** 2))
    session.close()

    def refusal_sd(*argv):
        line = _refused(capsys, state, ["observe", state, 1, *argv], "standard deviations")
        return float(re.search(r"sd with drive-to-drive noise ([0-9.]+) Wh", line).group(1))

    far = 50 * (trip.predicted_wh + 10 * trip.predicted_sd_wh + 100)
    judged = refusal_sd("--total-wh", f"{far:.1f}")
    code, out, err = _run(capsys, "observe", state, 1, "--total-wh",
                          f"{trip.predicted_wh:.1f}", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["predicted_wh"] == pytest.approx(trip.predicted_wh, abs=0.06)
    assert doc["predicted_sd_wh"] == pytest.approx(trip.predicted_sd_wh, abs=0.06)
    assert doc["sd_with_noise_wh"] == pytest.approx(
        np.sqrt(trip.predicted_sd_wh**2 + noise), abs=0.06)
    assert doc["sd_with_noise_wh"] == pytest.approx(judged, abs=0.051)
    assert doc["sd_with_noise_wh"] > doc["predicted_sd_wh"]
    assert doc["predicted_segments"] is None
    assert _run(capsys, "observe", state, 1, "--undo")[0] == 0  # the model as it was
    code, out, err = _run(capsys, "observe", state, 1, "--segments",
                          _csv(tmp_path, half, mean), "--partial", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["predicted_wh"] == pytest.approx(sum(mean), abs=0.06)
    assert doc["predicted_sd_wh"] == pytest.approx(np.sqrt(part_var), abs=0.06)
    assert doc["sd_with_noise_wh"] == pytest.approx(np.sqrt(part_var + part_noise), abs=0.06)
    assert doc["sd_with_noise_wh"] > doc["predicted_sd_wh"]
    assert doc["predicted_segments"] == np.unique(half).size


def test_partial_goes_with_segments_only(capsys, planned, tmp_path):
    """--partial with --total-wh (or --gpx, --undo) was silently ignored: a total is of the
    whole trip (or of the tracked route), so there is no part to leave out."""
    state, trip = planned
    for more in (["--total-wh", f"{trip.predicted_wh:.1f}"], ["--undo"]):
        _refused(capsys, state, ["observe", state, 1, "--partial", *more],
                 "--partial goes with --segments CSV only", "--gpx TRACK --total-wh X")


def test_undo_forgets_observations_and_the_model_forgets_them(capsys, planned, tmp_path):
    state, trip = planned
    from ev_nav.trips import open_session

    session = open_session(state)
    prior = session.model.posterior()
    session.close()
    code, _, err = _run(capsys, "observe", state, 1, "--total-wh",
                        f"{trip.predicted_wh * 1.2:.3f}")
    assert code == 0, err
    session = open_session(state)
    learned = session.model.posterior()
    session.close()
    assert not np.allclose(learned.mean, prior.mean)
    code, out, err = _run(capsys, "observe", state, 1, "--undo")
    # singular where it is one (it said "forgot 1 observation batch(es)")
    assert code == 0 and "trip 1: forgot 1 observation batch\n" in out, err
    session = open_session(state)
    after = session.model.posterior()
    assert session.store.observations() == []
    assert session.store.get_trip(1).status == "planned"
    session.close()
    np.testing.assert_allclose(after.mean, prior.mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(after.std, prior.std, rtol=1e-9, atol=1e-9)
    _refused(capsys, state, ["observe", state, 1, "--undo"], "no observations to forget")


def test_undo_takes_no_reading_and_answers_in_json(capsys, planned):
    # --undo with a reading forgot the trip's readings and silently dropped the new one, and
    # --json was ignored (plain text)
    state, trip = planned
    total = f"{trip.predicted_wh * 1.1:.3f}"
    assert _run(capsys, "observe", state, 1, "--total-wh", total)[0] == 0
    for more in (["--force"], ["--temperature", "5"]):
        _refused(capsys, state, ["observe", state, 1, "--undo", *more],
                 "--undo forgets the trip's readings; it records nothing, so it takes no "
                 f"{more[0]}")
    code, out, err = _run(capsys, "observe", state, 1, "--undo", "--json")
    assert code == 0, err
    # the server's field name, and the one this command used to print
    assert json.loads(out) == {"trip": 1, "forgotten_batches": 1, "forgot_batches": 1}


def test_awkward_route_inputs(capsys, planned, net):
    state, _ = planned
    _refused(capsys, state, ["route", state, "--from", _latlon(net, 7), "--to",
                             _latlon(net, 7), "--no-map"], "same place on the road")
    _refused(capsys, state, ["route", state, "--from", _latlon(net, 7), "--to",
                             _latlon(net, 300), "--max-snap", "-5", "--no-map"],
             "must be positive")
    # southern/western coordinates are coordinates, not options
    _refused(capsys, state, ["route", state, "--from", "-45,-170", "--to", _latlon(net, 300),
                             "--no-map"], "from the nearest road")
    _refused(capsys, state, ["route", state, "--from", _latlon(net, 7), "--to", "-45.5,-170.25",
                             "--no-map"], "from the nearest road")
    # a via point too (argparse took it for an option: "expected one argument")
    _refused(capsys, state, ["route", state, "--from", _latlon(net, 7), "--to", _latlon(net, 300),
                             "--via", "-45.5,-170.25", "--no-map"], "from the nearest road")


def test_output_piped_into_head(planned, net):
    state, _ = planned
    cmd = (f"{sys.executable} -m ev_nav.cli route {state} --from {_latlon(net, 9)} "
           f"--to {_latlon(net, 350)} --policy mean --no-map | head -1")
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, timeout=300)
    assert proc.stdout.startswith("trip 2:")
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert proc.returncode == 0


def test_record_segments_from_python_needs_one_whole_id_per_energy(planned):
    """The library calls check what the CLI's CSV reader and the server's request model check:
    two ids with one energy were both recorded at that energy (the reading broadcast onto
    every id), 9.5 was recorded as segment 9, a 2-D array was NumPy's ValueError."""
    from ev_nav import open_state, record_segments, record_total
    from ev_nav.errors import InvalidObservation, UnknownSegmentError

    state, trip = planned
    route = np.asarray(trip.route)
    before = _fingerprint(state)
    with open_state(state) as session:
        for ids, wh, error, fragment in (
            (route[:2], [10.0], InvalidObservation, "2 segment ids but 1 energies"),
            (route[:1], [10.0, 5.0], InvalidObservation, "1 segment ids but 2 energies"),
            (route[:4].reshape(2, 2), np.ones((2, 2)), InvalidObservation, "1-D"),
            (route[:2] + 0.5, [1.0, 2.0], UnknownSegmentError, "whole numbers"),
            (np.array(["a", "b"]), [1.0, 2.0], UnknownSegmentError, "whole numbers"),
        ):
            with pytest.raises(error) as info:
                record_segments(session, trip.id, ids, np.asarray(wh), partial=True)
            assert fragment in str(info.value) and "\n" not in str(info.value), fragment
        # a total that is no number (None was float()'s TypeError)
        for total in (None, "lots", [1.0, 2.0]):
            with pytest.raises(InvalidObservation, match="trip total must be a number of Wh"):
                record_total(session, trip.id, total)
        # whole numbers given as floats are the ids they name
        record_segments(session, trip.id, route[:2].astype(float), [10.0, 11.0], partial=True)
    with Store.open(state) as s:
        (batch,) = s.observations()
        assert batch.segment_ids.tolist() == route[:2].tolist()
        assert batch.energy_wh.tolist() == [10.0, 11.0]
    assert _fingerprint(state) != before


def test_a_segment_csv_with_a_byte_order_mark_reads_as_without(tmp_path):
    # a spreadsheet's "CSV UTF-8" starts with a BOM: it was refused with
    # "expected a header 'segment,energy_wh', got ['\ufeffsegment', 'energy_wh']"
    from ev_nav.trips.observations import read_segment_csv

    rows = "segment,energy_wh\n3,12.5\n7,-4.0\n"
    plain, marked = tmp_path / "plain.csv", tmp_path / "marked.csv"
    plain.write_text(rows, encoding="utf-8")
    marked.write_text(rows, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    for got, want in zip(read_segment_csv(marked), read_segment_csv(plain), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(read_segment_csv(marked)[0], [3, 7])


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path):
    """A decimal comma split an energy in two ("1582,12,8096"): the second half went under no
    column and was dropped, and 12.0 Wh was recorded for 12.8096 without a word."""
    from ev_nav.errors import InvalidObservation
    from ev_nav.trips.observations import read_segment_csv

    path = tmp_path / "comma.csv"
    path.write_text("segment,energy_wh\n3,12.5\n1582,12,8096\n")
    with pytest.raises(InvalidObservation, match=r"line 3: 1 more field.*decimal comma"):
        read_segment_csv(path)
