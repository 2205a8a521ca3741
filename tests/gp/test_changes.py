"""Change detection (issue 31): the CUSUM's false-alarm rate is what it was designed for, a
shifted segment is flagged with its change point, repeated readings in a batch count in order,
and the response makes a model equal to one that never saw the forgotten readings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ev_nav.errors import ConfigError, InvalidObservation, ModelStateError
from ev_nav.gp.changes import ChangeConfig, ChangeDetector, cusum_threshold
from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
from ev_nav.gp.independent import BIModel
from ev_nav.gp.testing import load_real, random_route, subnetwork

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_drift.py"


def _stream(det: ChangeDetector, z: np.ndarray) -> list:
    """Feed standard scores ``z`` (rounds × segments) as readings with mean 0 and variance 1."""
    events = []
    ids = np.arange(z.shape[1])
    for row in z:
        events.extend(det.observe(ids, row, np.zeros_like(row), np.ones_like(row)))
    return events


def test_false_alarm_rate_is_the_design_rate():
    # in-control N(0, 1) readings on many segments: alarms per reading ≈ the design rate
    # (Siegmund's approximation is within a few per cent at these settings)
    rate = 0.01
    det = ChangeDetector(400, ChangeConfig(false_alarm_rate=rate, calibrate=False))
    rng = np.random.default_rng(0)
    events = _stream(det, rng.standard_normal((1500, 400)))
    observed = len(events) / (1500 * 400)
    assert 0.7 * rate < observed < 1.3 * rate
    # and the threshold is the one that gives that run length, by an independent simulation
    h = cusum_threshold(0.5, 2.0 / rate)
    s = np.zeros(20_000)
    alive = np.ones(20_000, dtype=bool)
    length = np.zeros(20_000)
    for _ in range(3000):
        s = np.where(alive, np.maximum(0.0, s + rng.standard_normal(s.size) - 0.5), s)
        length += alive
        alive &= s <= h
    assert 0.85 * (2.0 / rate) < length.mean() < 1.15 * (2.0 / rate)


def test_a_shift_is_flagged_with_its_change_point():
    det = ChangeDetector(50, ChangeConfig(calibrate=False))
    rng = np.random.default_rng(1)
    z = rng.standard_normal((200, 50))
    z[120:, 7] += 3.0  # segment 7 rises by 3 sd from reading 121 on
    events = _stream(det, z)
    hits = [ev for ev in events if ev.segment == 7]
    assert hits and hits[0].direction == 1
    first = hits[0]
    assert 121 <= first.reading <= 121 + 8  # (h + 1.166) / (3 − 0.5) ≈ 2.8 readings expected
    # the readings kept are those since the estimated change point: all after the change
    assert 1 <= first.readings_since <= first.reading - 119
    assert first.shift_wh == pytest.approx(
        z[first.reading - first.readings_since : first.reading, 7].mean()
    )
    # the other segments: false alarms at about the design rate (5e-4 a reading: ~5 expected)
    assert len([ev for ev in events if ev.segment != 7]) <= 3 * 5e-4 * 200 * 49


def test_repeated_readings_in_one_batch_count_in_order():
    a = ChangeDetector(3, ChangeConfig(calibrate=False))
    b = ChangeDetector(3, ChangeConfig(calibrate=False))
    ids = np.array([1, 2, 1, 1, 0])
    y = np.array([2.0, -1.0, 2.5, 3.0, 0.4])
    a.observe(ids, y, np.zeros(5), np.ones(5))
    for i in range(5):  # one reading at a time
        b.observe(ids[i : i + 1], y[i : i + 1], np.zeros(1), np.ones(1))
    np.testing.assert_array_equal(a.stat, b.stat)
    np.testing.assert_array_equal(a.count, b.count)
    np.testing.assert_array_equal(a.readings, [1, 3, 1])


def test_the_running_scale_removes_a_shared_misfit():
    # a model whose noise is 30 % too small everywhere: raw scores have sd 1.3; calibrated,
    # the alarm rate stays near the design rate instead of rising many times over
    rng = np.random.default_rng(2)
    z = 1.3 * rng.standard_normal((1000, 300))
    raw = len(_stream(ChangeDetector(300, ChangeConfig(0.5 * 2, 0.01, calibrate=False)), z))
    cal = len(_stream(ChangeDetector(300, ChangeConfig(1.0, 0.01, calibrate=True)), z))
    assert cal < 1.5 * 0.01 * z.size < raw


def test_per_segment_scales_absorb_a_misfit_that_differs_by_road():
    # one noise variance for every road while a third of the roads scatter 4 times more (a
    # driver's state on long, fast roads): a scale over all segments cannot fix that and the
    # noisy roads alarm again and again; each segment's own scale can
    rng = np.random.default_rng(4)
    sd = np.where(np.arange(300) % 3 == 0, 4.0, 1.0)
    z = sd * rng.standard_normal((400, 300))
    design = 5e-4 * z.size
    common = len(_stream(ChangeDetector(300, ChangeConfig()), z))
    own = ChangeDetector(300, ChangeConfig(per_segment_scale=True, scale_memory=5000))
    assert len(_stream(own, z)) < 3 * design < common
    # the learned scales follow each road's scatter relative to the common one
    ratio = own.segment_scale(np.arange(0, 300, 3)).mean() / own.segment_scale(
        np.arange(1, 300, 3)).mean()
    assert 2.5 < ratio < 5.0
    # and a shift of 3 of a road's own sds is still found within a few of its readings
    noisy = np.zeros((40, 300))
    noisy[:, 3] = 4.0 * (3.0 + rng.standard_normal(40))
    hit = [ev for ev in _stream(own, noisy) if ev.segment == 3]
    assert hit and hit[0].direction == 1 and hit[0].reading <= 400 + 12


def test_detector_state_round_trips_and_older_states_load():
    rng = np.random.default_rng(5)
    cfg = ChangeConfig(per_segment_scale=True, scale_memory=700)
    a = ChangeDetector(20, cfg)
    _stream(a, 2.0 * rng.standard_normal((60, 20)))
    b = ChangeDetector(20, cfg).load_state_dict(a.state_dict())
    tail = rng.standard_normal((30, 20))
    ev_a, ev_b = _stream(a, tail), _stream(b, tail)
    assert ev_a == ev_b and a.scale == b.scale
    np.testing.assert_array_equal(a.segment_scale(np.arange(20)), b.segment_scale(np.arange(20)))
    # a state saved before per-segment scales (3 settings, 2 score sums) loads as the defaults
    old = ChangeDetector(20)
    _stream(old, rng.standard_normal((10, 20)))
    state = old.state_dict()
    state["config"] = state["config"][:3]
    state["scores"] = state["scores"][:2]
    del state["seg_sq"], state["seg_w"]
    again = ChangeDetector(20).load_state_dict(state)
    assert again.scale == old.scale and np.array_equal(again.stat, old.stat)
    with pytest.raises(ModelStateError, match="other settings"):
        ChangeDetector(20, cfg).load_state_dict(state)
    with pytest.raises(ConfigError, match="scale_memory"):
        ChangeConfig(scale_memory=0)


def test_bad_input_is_refused():
    det = ChangeDetector(5)
    with pytest.raises(InvalidObservation):
        det.observe([7], [1.0], [0.0], [1.0])
    with pytest.raises(InvalidObservation):
        det.observe([1], [np.nan], [0.0], [1.0])
    with pytest.raises(InvalidObservation):
        det.observe([1], [1.0], [0.0], [0.0])
    with pytest.raises(ConfigError):
        ChangeConfig(false_alarm_rate=0.0)


@pytest.fixture(scope="module")
def small():
    return subnetwork(load_real(), 120, seed=4)


def test_reset_makes_the_exact_learner_forget(small, monkeypatch):
    """After a reset the exact learner is the dense GP given only the kept readings, with one
    prior variance added to each reset segment (the road changed), and a checkpoint keeps it."""
    import torch

    import ev_nav.gp.incremental as incremental_module
    from ev_nav.potential import loss_scale

    n = small.n_segments
    cfg = IncrementalConfig(learn_hyperparameters=False, segment_scale="loss")
    rng = np.random.default_rng(3)
    trips = []
    for _ in range(6):
        path = random_route(small, 10, rng)
        trips.append((path, rng.normal(20.0, 5.0, path.size)))
    forget = np.unique(np.concatenate([trips[0][0][:3], trips[2][0][:2]]))
    model = IncrementalGP(small, config=cfg, seed=0)
    kept_ids, kept_y = [], []
    stats = {int(e): [0, 0.0, 0.0] for e in forget}
    for i, (path, y) in enumerate(trips):
        model.update(path, y)
        for e, v in zip(path, y, strict=True):
            if int(e) not in stats or i >= 4:  # forgotten segments keep trips 4–5 only
                kept_ids.append(int(e))
                kept_y.append(float(v))
                if int(e) in stats:
                    stats[int(e)][0] += 1
                    stats[int(e)][1] += v
                    stats[int(e)][2] += v * v
    ids = np.array(sorted(stats))
    cnt = np.array([stats[e][0] for e in ids])
    s1 = np.array([stats[e][1] for e in ids])
    s2 = np.array([stats[e][2] for e in ids])
    assert cnt.sum() > 0 and (cnt == 0).any()
    before = model.posterior().std[ids]
    used = []
    real = incremental_module.uncondition_segments
    monkeypatch.setattr(incremental_module, "uncondition_segments",
                        lambda *a, **k: used.append(real(*a, **k)) or used[-1])
    model.reset_segments(ids, cnt, s1, s2)
    assert used == [True]  # the downdate, not a recomputation
    # the dense reference: K + diag(τ²) on the reset segments, the kept readings
    a = loss_scale(small)
    with torch.no_grad():
        k = model.kernel.cross_all(np.arange(n)).numpy()
    k = 0.5 * (k + k.T) * np.outer(a, a)
    tau2 = (float(model.kernel.k_f.outputscale) + float(model.kernel.k_f2.outputscale)) * a**2
    k[ids, ids] += tau2[ids]
    h = np.eye(n)[kept_ids]
    g = h @ k @ h.T + np.diag(model.noise_var * a[kept_ids] ** 2)
    gain = np.linalg.solve(g, h @ k)
    mean = model.prior_mean + gain.T @ (np.asarray(kept_y) - model.prior_mean[kept_ids])
    sd = np.sqrt(np.diag(k - (h @ k).T @ gain))
    post = model.posterior()
    np.testing.assert_allclose(post.mean, mean, rtol=0, atol=1e-7)
    np.testing.assert_allclose(post.std, sd, rtol=0, atol=1e-7)
    assert np.all(post.std[ids] > before)  # a changed road: less certain than before
    # the checkpoint replays the reset bit for bit, and a refresh keeps the extra variance
    again = IncrementalGP(small, config=cfg, seed=0).load_state_dict(model.state_dict())
    np.testing.assert_array_equal(again.posterior().mean, post.mean)
    np.testing.assert_array_equal(again.posterior().std, post.std)
    model.refit()  # hyperparameters fixed: a refresh from the statistics
    np.testing.assert_allclose(model.posterior().std, sd, rtol=0, atol=1e-7)
    fresh = IncrementalGP(small, config=cfg, seed=0).load_state_dict(model.state_dict())
    np.testing.assert_allclose(fresh.posterior().mean, mean, rtol=0, atol=1e-7)
    with pytest.raises(InvalidObservation):
        model.reset_segments([ids[0], ids[0]], [0, 0], [0.0, 0.0], [0.0, 0.0])


def test_checkpoints_without_changes_load_as_before(small):
    """A checkpoint written before change detection (no ``extra_var``) opens, and its
    posterior cache key is the one it had."""
    from ev_nav.gp.incremental_state import posterior_key

    cfg = IncrementalConfig(learn_hyperparameters=False)
    model = IncrementalGP(small, config=cfg, seed=0)
    path = random_route(small, 8, np.random.default_rng(0))
    model.update(path, model.prior_mean[path] + 1.0)
    model.refit()
    state = model.state_dict()
    old = dict(state, base={k: v for k, v in state["base"].items() if k != "extra_var"})
    again = IncrementalGP(small, config=cfg, seed=0).load_state_dict(old)
    np.testing.assert_array_equal(again.posterior().mean, model.posterior().mean)
    hyper = {"noise_var": 1.0, **{f: 0.0 for f in ("raw_kappa", "raw_ls_1", "raw_ls_2",
                                                    "raw_s_1", "raw_s_2")}}
    assert posterior_key("n", hyper, old["base"], [], []) == posterior_key(
        "n", hyper, state["base"], [], []
    )


def test_respond_resets_bi_to_the_readings_since_the_change(small):
    model = BIModel(small, segment_scale="loss")
    fresh = BIModel(small, segment_scale="loss")
    det = ChangeDetector(small.n_segments, ChangeConfig(calibrate=False))
    e = 5
    rng = np.random.default_rng(4)
    before = model.prior_mean[e]
    sd = float(np.sqrt(model.noise_variances([e])[0]))
    kept: list[float] = []
    for t in range(60):
        y = before + sd * rng.standard_normal() + (6.0 * sd if t >= 30 else 0.0)
        post = model.posterior()
        var = post.std[e] ** 2 + model.noise_variances([e])[0]
        events = det.observe([e], [y], [post.mean[e]], [var])
        model.update([e], [y])
        if t >= 30:
            kept.append(y)
        if events:
            n = events[0].readings_since
            assert det.respond(model, events)
            break
    assert events and events[0].direction == 1
    fresh.update(np.full(n, e), np.asarray(kept[-n:]))
    assert model.posterior().mean[e] == pytest.approx(fresh.posterior().mean[e], rel=1e-12)
    assert model.posterior().std[e] == pytest.approx(fresh.posterior().std[e], rel=1e-12)
    assert det.stat[:, e].max() == 0.0  # restarted at the alarm


@pytest.mark.parametrize("driver", [False, True], ids=["fleet", "driver"])
def test_bench_drift_smoke_prints_the_goal_lines(driver):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", *(["--driver"] if driver else [])],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout
    assert re.search(r"^detection delay median: (\d+(\.\d+)?|inf) traversals", out, re.M)
    m = re.search(r"^false alarms per 1000 traversals: ([\d.]+)", out, re.M)
    assert m and float(m.group(1)) >= 0.0
