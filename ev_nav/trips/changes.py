"""Changes of roads in a driver's state: detected where observations are learned, listed,
dismissed.

Where the product's model learns new observations (``ev-nav observe``, the server's model
writer), :func:`absorb_new` first scores their per-segment readings against the model's
prediction with the change detector (:class:`~ev_nav.gp.changes.ChangeDetector`, two-sided
CUSUM on standardised residuals), then lets the model learn them, and for every segment the
detector flags it records the change in the store and makes the model forget the segment's
readings from before the estimated change point (``reset_segments``). Trip totals are learned
but not scored: the detector is per segment, and a total cannot be split into segments.

Everything is in the store, so a flag survives a restart and a rebuilt model reproduces it:
the detector's state and the newest batch it scored, and per change where in the commit order
the model forgot what (:mod:`ev_nav.store.changes`). Nothing is deleted; the set-aside readings
stay in the observations. Dismissing a change (:func:`dismiss_changes`: the user says the road
did not change) un-flags it and the model takes the set-aside readings back, by rebuilding it
without that change.

An alarm whose change point lies before every reading of the segment has nothing to set
aside: it says that the prior was off there (a road driven for the first few times), not that
the road changed. It is not flagged; the segment's CUSUM starts afresh as after any alarm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ev_nav.errors import InvalidObservation, ModelStateError, UnknownSegmentError
from ev_nav.gp.changes import ChangeConfig, ChangeDetector, ChangeEvent
from ev_nav.store.changes import ChangeRecord, SegmentChange
from ev_nav.trips.session import apply_batches, save_checkpoint

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import NDArray

    from ev_nav.roads.network import RoadNetwork
    from ev_nav.store import ObservationBatch, Store
    from ev_nav.trips.session import Session

__all__ = [
    "DETECTOR_CONFIG",
    "MAX_SCORED_BATCHES",
    "Absorbed",
    "absorb_new",
    "change_rows",
    "dismiss_changes",
    "forget_in_detector",
    "learn_new",
    "load_detector",
    "parse_segments",
]

#: Most batches one pass scores: they are all scored against the model as it was before the
#: pass, which is only a fair prediction for a few trips. A longer backlog (a restart after a
#: crash, a state from before detection) is learned unscored but for its newest batches.
MAX_SCORED_BATCHES = 64

#: The detector's settings in a driver's state (the defaults of ``docs/changes.md``: tuned for
#: shifts of one predictive sd, 5 × 10⁻⁴ false alarms per reading of an unchanged segment), with
#: per-segment scales: the state's learner has one noise variance for every road, while real
#: readings scatter more on long, fast roads than on short ones, and without its own scale such
#: a road alarms again and again (scripts/load_server.py: 10,304 flags on 9,622 trips of an
#: unchanging world without it).
#: Its scale over all segments remembers about 5,000 readings (some 150 trips on Monaco): the
#: state's hyperparameters are refitted as it learns, and each fit moves the scores' scale.
DETECTOR_CONFIG = ChangeConfig(per_segment_scale=True, scale_memory=5000)


@dataclass(frozen=True)
class Absorbed:
    """What :func:`absorb_new` did: the changes it flagged, and whether the model was rebuilt
    from the store instead (another process had scored the same batches)."""

    flagged: list[ChangeRecord] = field(default_factory=list)
    rebuilt: bool = False


def load_detector(store: Store, n_segments: int) -> tuple[ChangeDetector, int]:
    """The state's change detector and the newest batch it has scored (0: none yet).

    A stored state that cannot be restored (damaged, or saved with other settings) gives a
    fresh detector that goes on from the same batch, with a notice: the readings it scored are
    not scored again, and the next batches' are, the fresh detector then replacing the stored
    one. (A damaged state took the newest batch, the one just recorded, for the last scored:
    that batch went unscored, the damaged state was never replaced, and detection stayed off
    for good.)
    """
    import warnings

    from ev_nav.checkpoints import decode
    from ev_nav.errors import StateNotice, UnsafeCheckpointError

    detector = ChangeDetector(n_segments, DETECTOR_CONFIG)
    try:
        saved = store.detector_state()
    except ModelStateError as exc:
        upto = store.detector_scored_upto() or 0
        warnings.warn(StateNotice(f"{exc}: road-change detection starts afresh after batch "
                                  f"{upto} (flags already raised are kept)"), stacklevel=2)
        return detector, upto
    if saved is None:
        return detector, 0
    upto, blob = saved
    try:
        detector.load_state_dict(_unpack(decode(blob, tensors=False), n_segments))
    except (ModelStateError, UnsafeCheckpointError) as exc:
        warnings.warn(StateNotice(f"the change detector's stored state cannot be read ({exc}): "
                                  f"road-change detection starts afresh after batch {upto} "
                                  "(flags already raised are kept)"), stacklevel=2)
        return ChangeDetector(n_segments, DETECTOR_CONFIG), upto
    return detector, upto


def detector_problem(store: Store, n_segments: int) -> str | None:
    """Why the state's stored change detector cannot be restored (``ev-nav doctor``), or
    ``None`` when it can (or none is stored yet)."""
    from ev_nav.checkpoints import decode
    from ev_nav.errors import UnsafeCheckpointError

    try:
        saved = store.detector_state()
    except ModelStateError as exc:
        return str(exc)
    if saved is None:
        return None
    try:
        ChangeDetector(n_segments, DETECTOR_CONFIG).load_state_dict(
            _unpack(decode(saved[1], tensors=False), n_segments))
    except (ModelStateError, UnsafeCheckpointError) as exc:
        return f"the change detector's stored state cannot be read ({exc})"
    return None


def reset_detector(store: Store, n_segments: int) -> int:
    """Replace an unreadable stored change detector with a fresh one that goes on after the
    same batch (as :func:`load_detector` does on the next observation); returns that batch.
    The flags already raised are kept."""
    from ev_nav.checkpoints import encode

    upto = store.detector_scored_upto() or 0
    fresh = ChangeDetector(n_segments, DETECTOR_CONFIG)
    store.record_detection(upto, upto, encode(_pack(fresh)), [])
    return upto


_PER_SEGMENT = ("readings", "stat", "count", "sum_y", "sum_y2", "sum_resid", "seg_sq", "seg_w")


def _pack(detector: ChangeDetector) -> dict[str, object]:
    """The detector's state with its per-segment arrays kept only for the segments it has
    scored (a driver's few hundred roads, not the network's every segment: the state is
    written at every observation)."""
    state = detector.state_dict()
    touched = np.flatnonzero(detector.readings > 0)
    state["touched"] = touched
    for k in _PER_SEGMENT:
        state[k] = np.asarray(state[k])[..., touched]
    return state


def _unpack(state: dict[str, object], n_segments: int) -> dict[str, object]:
    """:func:`_pack`'s inverse (raises :class:`ModelStateError` for a damaged state)."""
    try:
        touched = np.asarray(state["touched"], dtype=np.int64)
        if touched.size and (touched.min() < 0 or touched.max() >= n_segments):
            raise ValueError("segment ids outside the network")
        full = dict(state)
        for k in _PER_SEGMENT:
            packed = np.asarray(state[k])
            arr = np.zeros(packed.shape[:-1] + (n_segments,), dtype=packed.dtype)
            arr[..., touched] = packed
            full[k] = arr
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ModelStateError(f"cannot restore the change detector: {exc}") from None
    return full


def forget_in_detector(session: Session) -> Callable[[bytes, NDArray[np.int64]], bytes]:
    """What :meth:`~ev_nav.store.Store.forget_observations` runs on the stored detector state
    when a trip's readings are taken back: the state without their evidence
    (:meth:`~ev_nav.gp.changes.ChangeDetector.forget_segments`). A state that cannot be read is
    left as it is (``load_detector`` replaces it with a fresh detector)."""
    from ev_nav.checkpoints import decode, encode
    from ev_nav.errors import UnsafeCheckpointError

    n = session.net.n_segments

    def forget(blob: bytes, segment_ids: NDArray[np.int64]) -> bytes:
        detector = ChangeDetector(n, DETECTOR_CONFIG)
        try:
            detector.load_state_dict(_unpack(decode(blob, tensors=False), n))
        except (ModelStateError, UnsafeCheckpointError):
            return blob
        detector.forget_segments(segment_ids)
        return encode(_pack(detector))

    return forget


def learn_new(session: Session) -> list[ChangeRecord]:
    """Learn every batch committed since ``session``'s model was loaded, scoring them for
    changes of roads (:func:`absorb_new`); the changes flagged are also added to
    ``session.flagged``. What ``ev-nav observe`` runs after recording."""
    flagged = absorb_new(session, session.store.observations(after_batch=session.applied_upto))
    session.flagged += flagged.flagged
    session.behind = 0
    return flagged.flagged


def absorb_new(session: Session, batches: list[ObservationBatch]) -> Absorbed:
    """Let ``session.model`` learn ``batches`` (committed after ``session.applied_upto``, in
    commit order), scoring those the detector has not scored yet, and respond to what it flags.

    The new batches are scored together against the model as it was before them (one batch
    for ``ev-nav observe``; what arrived since the last pass for the server's writer), learned
    as one update, and the changes flagged are recorded with the detector's state in one
    transaction before the model forgets their old readings. Batches another process has
    scored already are learned with the changes it recorded. If another process stored a
    detector state meanwhile (two writers on one state), nothing is recorded and the model is
    rebuilt from the store.
    """
    from ev_nav.checkpoints import encode

    store, model = session.store, session.model
    if not batches:
        return Absorbed()
    cached, session.detector_cache = session.detector_cache, None  # back only once stored
    if cached is not None and store.detector_scored_upto() == cached[0]:
        scored, detector = cached
    else:
        detector, scored = load_detector(store, session.net.n_segments)
    done = [b for b in batches if b.id <= scored]
    new = [b for b in batches if b.id > scored]
    if done:
        apply_batches(model, done, store.resets(session.applied_upto, done[-1].id))
        session.applied_upto = done[-1].id
    if len(new) > MAX_SCORED_BATCHES:
        backlog, new = new[:-MAX_SCORED_BATCHES], new[-MAX_SCORED_BATCHES:]
        apply_batches(model, backlog)
        session.applied_upto = backlog[-1].id
    if not new:
        session.detector_cache = (scored, detector)  # unchanged: still the stored one
        return Absorbed()
    # the whole-segment readings: a reading of the part of a segment a trip drove is not
    # one of the statistics a segment's change is scored (and reset) with
    marked = [(b, np.ones(b.segment_ids.size, bool) if b.weights is None else b.weights == 1.0)
              for b in new if b.kind == "segment"]
    seg = [(b, whole) for b, whole in marked if whole.any()]
    events: list[ChangeEvent] = []
    if seg:
        ids = np.concatenate([b.segment_ids[whole] for b, whole in seg])
        y = np.concatenate([b.energy_wh[whole] for b, whole in seg])
        bids = np.concatenate([np.full(whole.sum(), b.id, dtype=np.int64) for b, whole in seg])
        # each reading against the prediction at its own trip's temperature: a winter reading
        # scored against the reference conditions would look like a changed road
        temps = np.concatenate([
            np.full(whole.sum(), np.nan if b.temperature_c is None else b.temperature_c)
            for b, whole in seg
        ])
        mean = np.empty(ids.size)
        sd = np.empty(ids.size)
        for t in np.unique(temps):  # NaN (no temperature) sorts last and is found by isnan
            pick = np.isnan(temps) if np.isnan(t) else temps == t
            post = model.posterior() if np.isnan(t) else model.posterior(temperature=float(t))
            mean[pick], sd[pick] = post.mean[ids[pick]], post.std[ids[pick]]
        var = sd**2 + np.asarray(model.noise_variances(ids), dtype=np.float64)
        before = detector.readings.copy()
        events = detector.observe(ids, y, mean, var)
    at = new[-1].id
    apply_batches(model, new)
    session.applied_upto = at
    can_reset = hasattr(model, "reset_segments")
    records = (
        _records(store, events, ids, bids, var, before, at, detector.threshold, can_reset)
        if events else []
    )
    if not store.record_detection(scored, at, encode(_pack(detector)), records):
        session.load_model()
        return Absorbed(rebuilt=True)
    session.detector_cache = (at, detector)
    if any(r.reset for r in records):
        # the statistics of the kept readings come from the store, as in every replay
        apply_batches(model, [], store.resets(at - 1, at))
    return Absorbed(records)


def _records(
    store: Store,
    events: list[ChangeEvent],
    ids: NDArray[np.int64],
    bids: NDArray[np.int64],
    var: NDArray[np.float64],
    before: NDArray[np.int64],
    at: int,
    threshold: float,
    can_reset: bool,
) -> list[ChangeRecord]:
    """Place each flagged segment's alarm and change point among the stored readings (a loop
    over the flagged segments only: alarms are rare)."""
    last = {ev.segment: ev for ev in events}  # a segment flagged twice in one pass: the last
    out = []
    for e in sorted(last):
        ev = last[e]
        pos = np.flatnonzero(ids == e)  # this pass's readings of e, in commit order
        j = int(ev.reading - before[e])  # the alarm was raised by the j-th of them (1-based)
        n = int(ev.readings_since)
        alarm = pos[j - 1]
        if n <= j:
            kept_from = int(bids[pos[j - n]])
        else:  # the change point lies before this pass: among the stored readings
            older = store.segment_reading_batches(e, int(bids[pos[0]]), n - j)
            kept_from = older[-1] if older else int(bids[pos[0]])
        if store.count_segment_readings(e, 0, kept_from - 1) == 0:
            continue  # nothing before the change point: the prior was off, not the road
        out.append(ChangeRecord(
            segment=e,
            at_batch=at,
            alarm_batch=int(bids[alarm]),
            kept_from_batch=kept_from,
            direction=ev.direction,
            statistic=ev.evidence,
            threshold=threshold,
            shift_wh=ev.shift_wh,
            shift_sd=ev.shift_wh / math.sqrt(float(var[alarm])),
            readings_since=n,
            reset=can_reset,
        ))
    return out


def parse_segments(values: list[str], n_segments: int) -> np.ndarray:
    """Segment ids from ``--dismiss`` values (each one id or a comma list).

    Raises
    ------
    InvalidObservation, UnknownSegmentError
    """
    out: list[int] = []
    for text in values:
        for part in str(text).split(","):
            part = part.strip()
            try:
                out.append(int(part))
            except ValueError:
                raise InvalidObservation(f"expected segment ids, got {part!r}") from None
    bad = [e for e in out if not 0 <= e < n_segments]
    if bad:
        raise UnknownSegmentError(
            f"segment {bad[0]} is not in the network (its segments are 0..{n_segments - 1})"
        )
    return np.asarray(out, dtype=np.int64)


def dismiss_changes(session: Session, segment_ids: np.ndarray) -> list[SegmentChange]:
    """Un-flag the listed segments' changes; the model takes their set-aside readings back.

    Durable and replayable: the changes are marked dismissed in the store (never deleted) and
    the checkpoints that include their resets are deleted in the same transaction; the model is
    then rebuilt without them (an older checkpoint, or the prior, and the stored observations)
    and saved. A running server notices and rebuilds its model too.

    Raises
    ------
    InvalidObservation
        If a listed segment has no flagged change (nothing is dismissed then).
    """
    gone = session.store.dismiss_changes(segment_ids)
    session.load_model()
    save_checkpoint(session)
    return gone


def change_rows(changes: list[SegmentChange], net: RoadNetwork) -> list[dict[str, object]]:
    """The flagged changes as rows of ``ev-nav changes`` (``--json``) and ``GET /api/changes``.

    The networks keep no street names: a segment is described by its road class and length.
    """
    rows = []
    for c in changes:
        e = c.segment
        rows.append({
            "segment": e,
            "road": str(net.highway_classes[int(net.highway[e])]),
            "length_m": round(float(net.length_m[e]), 1),
            "flagged": c.created[:19],
            "at_batch": c.at_batch,
            "direction": "up" if c.direction > 0 else "down",
            "statistic": round(c.statistic, 2),
            "threshold": round(c.threshold, 2),
            "shift_wh": round(c.shift_wh, 2),
            "shift_sd": round(c.shift_sd, 2),
            "readings_since_change": c.readings_since,
            "traversals_since": c.traversals_since,
            "set_aside": c.set_aside,
            "dismissed": c.dismissed[:19] if c.dismissed else None,
        })
    return rows
