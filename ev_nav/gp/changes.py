"""Per-segment change detection: a two-sided CUSUM on standardised residuals, and the response.

Roads change (roadworks, a new speed limit, a resurfaced road): a model that keeps every old
reading believes the old road for a long time. Each reading ``y`` of segment ``e`` is scored
against what the model predicted for it *before* learning from it,

    z = (y − μ_e) / √(σ_e² + ν_e)          (posterior variance plus one reading's noise),

which is standard normal while the road is as the model believes. Misfit shared by all segments
(a noise scale fitted 20 % low, say) would otherwise look like change everywhere, so the scores
are divided by a running root-mean-square of all scores (winsorised at 3, so that changed roads
do not inflate it; ``calibrate=False`` turns this off). A model whose noise is one number for
every road (the driver's state) is wrong the other way: a long, fast segment's readings scatter
several times more than its predictive sd says, and its scores alone would alarm again and again.
With ``per_segment_scale`` each segment's scores are also divided by their own running RMS,
winsorised at 3 of that RMS (so it can grow to a misfit of any size in a few readings), over
about its last 20 readings (the model's noise is refitted on a schedule) and shrunk towards 1
with the weight of :data:`_SEGMENT_PRIOR_READINGS` readings. Per segment two one-sided
CUSUMs

    S⁺ ← max(0, S⁺ + z − k),   S⁻ ← max(0, S⁻ − z − k)

accumulate evidence of a rise or a fall of at least ``2k`` standard deviations (``shift``); the
segment is flagged when either exceeds ``h``. ``h`` follows from the false-alarm rate asked for,
per reading of an unchanged segment, through Siegmund's approximation of the CUSUM's in-control
run length, ``ARL₀ ≈ (e^{2kb} − 2kb − 1) / 2k²`` with ``b = h + 1.166`` (each side gets half the
rate). The delay to detect a shift of ``δ`` standard deviations is then about
``(h + 1.166) / (δ − k)`` readings; no detector with that false-alarm rate can be much faster
than Lorden's bound ``ln(ARL₀) / (δ²/2)`` (``docs/changes.md`` has the numbers).

**Response.** The change point is estimated as the last reading at which the alarming side
stood at 0, and the statistics of the readings since then are kept per side; on an alarm the
model forgets the segment's readings from before that point and keeps those after
(``reset_segments``, where the model has it: the exact learner and BI). A flagged segment's
CUSUM starts afresh at once. Through the kernel the
segment's neighbours lose what they had learned from its old readings too, so exploration
returns where the road changed and nowhere else. Nothing is deleted here: the events say what
was forgotten, and the readings stay wherever the caller keeps them.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import ConfigError, InvalidObservation, ModelStateError

__all__ = ["ChangeConfig", "ChangeDetector", "ChangeEvent", "cusum_threshold"]

#: Scores are winsorised at this many standard deviations for the running scale.
_WINSOR = 3.0
#: E[min(Z², 9)] for a standard normal Z: the running mean of winsorised squares is divided by
#: it, so that the scale is 1 for a calibrated model.
_WINSOR_MEAN = (math.erf(_WINSOR / math.sqrt(2.0))
                - 2.0 * _WINSOR * math.exp(-0.5 * _WINSOR**2) / math.sqrt(2.0 * math.pi)
                + _WINSOR**2 * math.erfc(_WINSOR / math.sqrt(2.0)))
#: Readings scored before the running scale is trusted (until then it is 1).
_SCALE_MIN_READINGS = 200
#: Weight, in readings, of the prior scale 1 in a segment's own running scale: a segment's
#: first readings are judged mostly by the model's variance, later ones by their own scatter.
_SEGMENT_PRIOR_READINGS = 3.0
#: Each reading of a segment discounts its earlier squares by this factor (a memory of about
#: 20 readings): the model's noise is refitted on a schedule, and a scale learned against the
#: old fit would misjudge the new one's scores for as long as it remembered them.
_SEGMENT_DISCOUNT = 0.95


def cusum_threshold(drift: float, run_length: float) -> float:
    """Decision threshold ``h`` of a one-sided CUSUM with reference value ``drift`` (``k``)
    whose in-control average run length is ``run_length`` readings (Siegmund's approximation,
    solved by bisection)."""
    if not (drift > 0 and run_length > 1):
        raise ConfigError("the CUSUM drift must be > 0 and the run length > 1")

    def arl(h: float) -> float:
        b = 2.0 * drift * (h + 1.166)
        return (math.expm1(b) - b) / (2.0 * drift * drift)

    lo, hi = 0.0, 1.0
    while arl(hi) < run_length:
        hi *= 2.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if arl(mid) < run_length else (lo, mid)
    return hi


#: Largest :attr:`ChangeConfig.shift` [standard deviations of a reading's prediction error].
MAX_SHIFT_SD = 10.0


@dataclass(frozen=True)
class ChangeConfig:
    """Settings of :class:`ChangeDetector`.

    Attributes
    ----------
    shift : float
        The shift, in standard deviations of a reading's prediction error, the detector is
        tuned to find fastest (the CUSUM's reference value is half of it). Larger shifts are
        found faster still.
    false_alarm_rate : float
        Alarms per reading of an unchanged segment (both directions together). Half of the 1
        per 1,000 the product promises: a change leaks through the kernel into its neighbours'
        predictions until it is found, which adds alarms next to changed roads
        (``docs/changes.md``).
    calibrate : bool
        Divide the scores by their running RMS over all segments (see the module doc).
    per_segment_scale : bool
        Also divide each segment's scores by their own running RMS (see the module doc): for
        models whose noise does not follow each segment's own scatter (one noise variance for
        every road, as in a driver's state). A change inflates that RMS too, so detection is a
        little slower.
    scale_memory : int, optional
        Readings the running RMS over all segments remembers (each reading discounts the
        earlier ones by ``1 − 1/scale_memory``); None: all of them. A model whose
        hyperparameters are refitted while it serves changes its scores' scale at each fit, and
        a scale that remembers every earlier reading would take as many again to follow.
    """

    shift: float = 1.0
    false_alarm_rate: float = 5e-4
    calibrate: bool = True
    per_segment_scale: bool = False
    scale_memory: int | None = None

    def __post_init__(self) -> None:
        for name in ("shift", "false_alarm_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ConfigError(f"{name} must be a number, got {value!r}")
        # beyond 10 sd one reading past half the shift alarms at any false-alarm rate (the
        # threshold is 0), and the run-length formula overflows; inf never alarmed
        if not (0 < self.shift <= MAX_SHIFT_SD and 0 < self.false_alarm_rate < 0.5):
            raise ConfigError(f"shift must be in (0, {MAX_SHIFT_SD:g}] standard deviations and "
                              f"false_alarm_rate in (0, 0.5), got {self.shift!r} and "
                              f"{self.false_alarm_rate!r}")
        if self.scale_memory is not None and not self.scale_memory >= 1:
            raise ConfigError(f"scale_memory must be >= 1 reading, got {self.scale_memory}")


@dataclass(frozen=True)
class ChangeEvent:
    """One flagged segment.

    Attributes
    ----------
    segment : int
        The segment id.
    reading : int
        How many readings of the segment the detector had scored at the alarm.
    direction : int
        ``+1``: it costs more energy than the model believed; ``-1``: less.
    evidence : float
        The CUSUM statistic at the alarm (in standard deviations; the threshold is ``h``).
    readings_since : int
        Readings since the estimated change point (kept by the response).
    shift_wh : float
        Mean of those readings minus the model's predictions for them [Wh].
    kept_sum_wh, kept_sum_sq : float
        Sum [Wh] and sum of squares [Wh²] of those readings (what the response keeps).
    """

    segment: int
    reading: int
    direction: int
    evidence: float
    readings_since: int
    shift_wh: float
    kept_sum_wh: float
    kept_sum_sq: float


class ChangeDetector:
    """Two-sided CUSUM per segment on standardised residuals (module doc).

    Parameters
    ----------
    n_segments : int
        Segments of the network.
    config : ChangeConfig, optional
    """

    def __init__(self, n_segments: int, config: ChangeConfig | None = None) -> None:
        self.config = config or ChangeConfig()
        if isinstance(n_segments, bool) or not isinstance(n_segments, numbers.Integral) or (
            n_segments < 0
        ):  # was numpy's "negative dimensions are not allowed"
            raise ConfigError(f"n_segments must be a whole number >= 0, got {n_segments!r}")
        self.n_segments = int(n_segments)
        self.drift = 0.5 * self.config.shift
        self.threshold = cusum_threshold(self.drift, 2.0 / self.config.false_alarm_rate)
        n = self.n_segments
        self.readings = np.zeros(n, dtype=np.int64)
        # per side (0: up, 1: down): the statistic, and since it last stood at 0 the count,
        # sum and sum of squares of the readings [Wh, Wh²] and the sum of residuals [Wh]
        self.stat = np.zeros((2, n))
        self.count = np.zeros((2, n), dtype=np.int64)
        self.sum_y = np.zeros((2, n))
        self.sum_y2 = np.zeros((2, n))
        self.sum_resid = np.zeros((2, n))
        self.sum_sq_scores = 0.0  # winsorised squares of all raw scores (discounted: scale_memory)
        self.sum_w_scores = 0.0  # their (discounted) count
        self.n_scores = 0
        # per segment (per_segment_scale): winsorised squares of its calibrated scores
        self.seg_sq = np.zeros(n)
        self.seg_w = np.zeros(n)  # their discounted count

    @property
    def scale(self) -> float:
        """The running RMS of the raw scores (1 until enough readings, or without calibration)."""
        if not self.config.calibrate or self.n_scores < _SCALE_MIN_READINGS:
            return 1.0
        return math.sqrt(self.sum_sq_scores / self.sum_w_scores / _WINSOR_MEAN)

    def observe(
        self,
        segment_ids: ArrayLike,
        energies: ArrayLike,
        mean: ArrayLike,
        variance: ArrayLike,
    ) -> list[ChangeEvent]:
        """Score one batch of readings and return the segments flagged by it.

        Parameters
        ----------
        segment_ids : array of int
            The segment of each reading (repeats allowed: taken in order).
        energies : array of float
            The readings [Wh].
        mean, variance : array of float
            The model's predictive mean [Wh] and variance [Wh²] of each reading, from before it
            learned from this batch: ``μ_e`` and ``σ_e² + ν_e``.
        """
        given = np.asarray(segment_ids)
        if given.size and not (np.issubdtype(given.dtype, np.integer) or (
                np.issubdtype(given.dtype, np.floating) and np.all(np.mod(given, 1) == 0))):
            raise InvalidObservation("segment ids must be whole numbers (3.7 was read as 3)")
        ids = given.astype(np.int64)
        y = np.asarray(energies, dtype=np.float64)
        mu = np.asarray(mean, dtype=np.float64)
        var = np.asarray(variance, dtype=np.float64)
        if not (ids.shape == y.shape == mu.shape == var.shape) or ids.ndim != 1:
            raise InvalidObservation("one segment id, reading, mean and variance per reading")
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_segments):
            raise InvalidObservation(f"segment ids must lie in 0..{self.n_segments - 1}")
        if not (np.all(np.isfinite(y)) and np.all(np.isfinite(mu))
                and np.all(np.isfinite(var)) and np.all(var > 0)):
            raise InvalidObservation("readings and means must be finite, variances finite "
                                     "and > 0")
        resid = y - mu
        raw = resid / np.sqrt(var)
        scale = self.scale  # of the readings before this batch: the batch cannot mask itself
        sq = np.minimum(raw * raw, _WINSOR**2)
        if self.config.scale_memory is None:
            self.sum_sq_scores += float(sq.sum())
            self.sum_w_scores += float(raw.size)
        else:  # the batch's readings in order, each discounting those before it
            d = 1.0 - 1.0 / self.config.scale_memory
            w = d ** np.arange(raw.size - 1, -1, -1, dtype=np.float64)
            self.sum_sq_scores = d**raw.size * self.sum_sq_scores + float(w @ sq)
            self.sum_w_scores = d**raw.size * self.sum_w_scores + float(w.sum())
        self.n_scores += int(raw.size)
        z = raw / scale
        events: list[ChangeEvent] = []
        # a trip may read a segment twice: the k-th readings of every segment form layer k, and
        # the layers are applied in order (each a vectorised step)
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        first = np.r_[0, np.flatnonzero(np.diff(sorted_ids)) + 1]
        rank = np.arange(ids.size) - np.repeat(first, np.diff(np.r_[first, ids.size]))
        layer_of = np.empty(ids.size, dtype=np.int64)
        layer_of[order] = rank
        for layer in range(int(layer_of.max()) + 1 if ids.size else 0):
            sel = np.flatnonzero(layer_of == layer)
            zl = z[sel]
            if self.config.per_segment_scale:
                zl = self._segment_scaled(ids[sel], zl)
            events.extend(self._step(ids[sel], y[sel], zl, resid[sel]))
        return events

    def segment_scale(self, ids: ArrayLike) -> NDArray[np.float64]:
        """Each segment's own running RMS of its calibrated scores, shrunk towards 1
        (``per_segment_scale``; 1 for segments without readings)."""
        u = np.asarray(ids, dtype=np.int64)
        k = _SEGMENT_PRIOR_READINGS
        return np.sqrt((k + self.seg_sq[u] / _WINSOR_MEAN) / (k + self.seg_w[u]))

    def _segment_scaled(self, u: NDArray[np.int64], z: NDArray[np.float64]) -> NDArray[np.float64]:
        """``z`` over each segment's scale from its readings before this one (a reading cannot
        mask itself); then the reading joins the segment's squares, winsorised at 3 of that
        scale, so a misfit of any size is learned in a few readings while one outlier is not."""
        s = self.segment_scale(u)
        self.seg_sq[u] = _SEGMENT_DISCOUNT * self.seg_sq[u] + np.minimum(z * z, (_WINSOR * s) ** 2)
        self.seg_w[u] = _SEGMENT_DISCOUNT * self.seg_w[u] + 1.0
        return z / s

    def _step(
        self,
        u: NDArray[np.int64],
        y: NDArray[np.float64],
        z: NDArray[np.float64],
        resid: NDArray[np.float64],
    ) -> list[ChangeEvent]:
        self.readings[u] += 1
        for side, signed in ((0, z), (1, -z)):
            s = self.stat[side, u] + signed - self.drift
            alive = s > 0
            self.stat[side, u] = np.where(alive, s, 0.0)
            # readings since the side last stood at 0: this one joins them, or they restart
            for arr, val in ((self.count, 1), (self.sum_y, y), (self.sum_y2, y * y),
                             (self.sum_resid, resid)):
                arr[side, u] = np.where(alive, arr[side, u] + val, 0)
        hit = np.flatnonzero((self.stat[:, u] > self.threshold).any(axis=0))
        events = []
        for e in u[hit]:  # alarms are rare: a loop over the flagged segments only
            side = int(np.argmax(self.stat[:, e]))
            n_since = int(self.count[side, e])
            events.append(
                ChangeEvent(
                    segment=int(e),
                    reading=int(self.readings[e]),
                    direction=1 if side == 0 else -1,
                    evidence=float(self.stat[side, e]),
                    readings_since=n_since,
                    shift_wh=float(self.sum_resid[side, e] / max(n_since, 1)),
                    kept_sum_wh=float(self.sum_y[side, e]),
                    kept_sum_sq=float(self.sum_y2[side, e]),
                )
            )
        if hit.size:  # a flagged segment starts afresh: the next alarm needs new evidence
            flagged = u[hit]
            self.stat[:, flagged] = 0.0
            for arr in (self.count, self.sum_y, self.sum_y2, self.sum_resid):
                arr[:, flagged] = 0
        return events

    def forget_segments(self, segment_ids: ArrayLike) -> None:
        """Drop the evidence of the listed segments: their CUSUM statistics, the readings since
        the change points and their own scales start afresh (a segment read twice is listed
        twice: its reading count goes down by two). What a taken-back reading leaves behind
        cannot be subtracted from a CUSUM (its maximum over the readings since zero), so the
        segments it read lose what the other readings had gathered too: a later change there
        is found a few readings later, and never is a road flagged by a reading that was
        taken back. The scale over all segments keeps them (their part of it is small)."""
        ids = np.asarray(segment_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_segments):
            raise InvalidObservation(f"segment ids must lie in 0..{self.n_segments - 1}")
        np.subtract.at(self.readings, ids, 1)
        np.maximum(self.readings, 0, out=self.readings)
        u = np.unique(ids)
        for arr in (self.stat, self.count, self.sum_y, self.sum_y2, self.sum_resid):
            arr[:, u] = 0
        self.seg_sq[u] = 0.0
        self.seg_w[u] = 0.0

    def state_dict(self) -> dict[str, object]:
        """Everything needed to continue detecting where it stopped (plain arrays)."""
        return {
            "kind": "change-detector",
            "config": [self.config.shift, self.config.false_alarm_rate, self.config.calibrate,
                       self.config.per_segment_scale, self.config.scale_memory],
            "readings": self.readings.copy(),
            "stat": self.stat.copy(),
            "count": self.count.copy(),
            "sum_y": self.sum_y.copy(),
            "sum_y2": self.sum_y2.copy(),
            "sum_resid": self.sum_resid.copy(),
            "scores": [self.sum_sq_scores, self.n_scores, self.sum_w_scores],
            "seg_sq": self.seg_sq.copy(),
            "seg_w": self.seg_w.copy(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> ChangeDetector:
        """Restore a :meth:`state_dict` of a detector with the same settings and network."""
        try:
            if state["kind"] != "change-detector":
                raise ValueError("not a change detector's state")
            shift, rate, calibrate, *rest = state["config"]  # saved before per-segment scales: 3
            per_segment = bool(rest[0]) if rest else False
            memory = None if len(rest) < 2 or rest[1] is None else int(rest[1])
            saved = ChangeConfig(float(shift), float(rate), bool(calibrate), per_segment, memory)
            if saved != self.config:
                raise ValueError("it was saved with other settings")
            arrays = {k: np.asarray(state[k]) for k in
                      ("readings", "stat", "count", "sum_y", "sum_y2", "sum_resid")}
            n = self.n_segments
            if arrays["readings"].shape != (n,) or any(
                arrays[k].shape != (2, n) for k in arrays if k != "readings"
            ):
                raise ValueError("it was saved for another network")
            sum_sq, n_scores, *sum_w = state["scores"]  # saved before discounting: 2
            sum_w = float(sum_w[0]) if sum_w else float(n_scores)
            seg_sq = np.asarray(state.get("seg_sq", np.zeros(self.n_segments)), dtype=np.float64)
            seg_w = np.asarray(state.get("seg_w", np.zeros(self.n_segments)), dtype=np.float64)
            if seg_sq.shape != (self.n_segments,) or seg_w.shape != seg_sq.shape:
                raise ValueError("it was saved for another network")
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelStateError(f"cannot restore the change detector: {exc}") from None
        self.readings = arrays["readings"].astype(np.int64)
        self.stat = arrays["stat"].astype(np.float64)
        self.count = arrays["count"].astype(np.int64)
        self.sum_y = arrays["sum_y"].astype(np.float64)
        self.sum_y2 = arrays["sum_y2"].astype(np.float64)
        self.sum_resid = arrays["sum_resid"].astype(np.float64)
        self.sum_sq_scores, self.n_scores = float(sum_sq), int(n_scores)
        self.sum_w_scores = sum_w
        self.seg_sq, self.seg_w = seg_sq, seg_w
        return self

    @staticmethod
    def respond(model: object, events: list[ChangeEvent]) -> bool:
        """Make ``model`` forget the flagged segments' readings from before their change points
        and keep those after (one ``reset_segments`` call for all of them; a segment flagged
        twice keeps what its last event kept). Returns whether the model could: models without
        ``reset_segments`` only get the flags."""
        reset = getattr(model, "reset_segments", None)
        if not events or reset is None:
            return False
        last = {ev.segment: ev for ev in events}
        evs = [last[e] for e in sorted(last)]
        reset(
            np.array([ev.segment for ev in evs], dtype=np.int64),
            np.array([ev.readings_since for ev in evs], dtype=np.int64),
            np.array([ev.kept_sum_wh for ev in evs]),
            np.array([ev.kept_sum_sq for ev in evs]),
        )
        return True
