"""Changes of roads flagged on the observations, and the change detector's running state.

A flagged change (:class:`SegmentChange`) says: after the model had absorbed every batch up to
``at_batch``, segment ``segment`` forgot its readings of the batches before
``kept_from_batch`` and kept those from it on (the exact learner's and BI's
``reset_segments``). Nothing is deleted: the set-aside readings stay in ``observations``, and
which they are follows from the change (the segment's readings of earlier batches). A model
rebuilt from the store replays each flagged change at its place in the commit order with the
kept readings' statistics computed here from the stored readings (:meth:`ChangesMixin.resets`),
so it reproduces the model that detected it; a dismissed change is no longer replayed.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import InvalidObservation, ModelStateError
from ev_nav.store.connection import StoreConnection, _utcnow, sha256_hex


@dataclass(frozen=True)
class ChangeRecord:
    """What is recorded when a change is flagged.

    Attributes
    ----------
    segment : int
        The segment.
    at_batch : int
        The model set the old readings aside after absorbing every batch up to this one.
    alarm_batch : int
        The batch whose reading raised the alarm (forgetting its trip drops the flag).
    kept_from_batch : int
        The estimated change point: the segment's readings from this batch on are kept, those
        of earlier batches set aside.
    direction : int
        ``+1``: the road costs more energy than the model believed; ``-1``: less.
    statistic, threshold : float
        The CUSUM statistic at the alarm and the threshold it crossed [sd].
    shift_wh : float
        Mean of the kept readings minus the model's predictions for them [Wh].
    shift_sd : float
        ``shift_wh`` in predictive standard deviations of the alarming reading [-].
    readings_since : int
        Readings since the change point when the alarm was raised.
    reset : bool
        Whether the model set the old readings aside (models without ``reset_segments`` only
        flag).
    """

    segment: int
    at_batch: int
    alarm_batch: int
    kept_from_batch: int
    direction: int
    statistic: float
    threshold: float
    shift_wh: float
    shift_sd: float
    readings_since: int
    reset: bool


@dataclass(frozen=True)
class SegmentChange(ChangeRecord):
    """A recorded change with its id, times and what it means for the data now.

    ``set_aside``: the segment's readings the model does not use because of this change (0 when
    dismissed or when the model only flags); ``traversals_since``: the segment's readings
    recorded after ``at_batch``.
    """

    id: int = 0
    created: str = ""
    dismissed: str | None = None
    set_aside: int = 0
    traversals_since: int = 0


@dataclass(frozen=True)
class SegmentReset:
    """The resets a model applies after absorbing batch ``at_batch``: per segment, the count,
    sum [Wh] and sum of squares [Wh²] of the readings it keeps (``reset_segments``' arguments,
    segments ascending)."""

    at_batch: int
    segment_ids: NDArray[np.int64]
    counts: NDArray[np.int64]
    sums: NDArray[np.float64]
    sums_sq: NDArray[np.float64]


_COLUMNS = (
    "segment_id, at_batch, alarm_batch, kept_from_batch, direction, statistic, threshold, "
    "shift_wh, shift_sd, readings_since, reset"
)


class ChangesMixin(StoreConnection):
    """Recording, listing, dismissing and replaying flagged changes; the detector's state."""

    # ------------------------------------------------------------------ detector state
    def detector_scored_upto(self) -> int | None:
        """The newest batch the stored change detector has scored (``None`` before its first
        batch): a cheap check that a detector held in memory is still the stored one."""
        row = self._conn.execute("SELECT scored_upto FROM change_detector WHERE id = 1").fetchone()
        return None if row is None else int(row[0])

    def detector_state(self) -> tuple[int, bytes] | None:
        """``(scored_upto, blob)`` of the change detector (``None`` before its first batch).

        Raises
        ------
        ModelStateError
            If the stored bytes do not match their hash.
        """
        row = self._conn.execute(
            "SELECT scored_upto, sha256, blob FROM change_detector WHERE id = 1"
        ).fetchone()
        if row is None:
            return None
        blob = bytes(row[2])
        if sha256_hex(blob) != row[1]:
            raise ModelStateError("the change detector's stored state is damaged (hash mismatch)")
        return int(row[0]), blob

    def record_detection(
        self,
        expected_upto: int,
        scored_upto: int,
        blob: bytes,
        changes: Sequence[ChangeRecord],
    ) -> bool:
        """Store the detector's state (it has scored every batch up to ``scored_upto``) and the
        changes it flagged, in one transaction; return ``False`` and store nothing when another
        process has stored a detector state since this one read it at ``expected_upto`` (two
        writers scored the same batches: the caller rebuilds its model from what was stored).
        """
        data = bytes(blob)
        digest = sha256_hex(data)
        now = _utcnow()
        with self._write("change detection") as conn:
            row = conn.execute("SELECT scored_upto FROM change_detector WHERE id = 1").fetchone()
            if (0 if row is None else int(row[0])) != int(expected_upto):
                return False
            conn.execute(
                "INSERT OR REPLACE INTO change_detector(id, scored_upto, sha256, blob, updated) "
                "VALUES (1, ?, ?, ?, ?)",
                (int(scored_upto), digest, sqlite3.Binary(data), now),
            )
            conn.executemany(
                f"INSERT INTO segment_changes({_COLUMNS}, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (int(c.segment), int(c.at_batch), int(c.alarm_batch), int(c.kept_from_batch),
                     int(c.direction), float(c.statistic), float(c.threshold), float(c.shift_wh),
                     float(c.shift_sd), int(c.readings_since), int(bool(c.reset)), now)
                    for c in changes
                ],
            )
        return True

    # ------------------------------------------------------------------ readings of a segment
    def segment_reading_batches(self, segment: int, before_batch: int, limit: int) -> list[int]:
        """Batch ids of the newest ``limit`` whole-segment readings of ``segment`` in batches
        before ``before_batch``, newest first (a reading of part of it is not one of the
        statistics a change is scored with)."""
        rows = self._conn.execute(
            "SELECT batch_id FROM observations WHERE kind = 'segment' AND share IS NULL "
            "AND segment_id = ? AND batch_id < ? ORDER BY batch_id DESC LIMIT ?",
            (int(segment), int(before_batch), int(limit)),
        ).fetchall()
        return [int(r[0]) for r in rows]

    def count_segment_readings(self, segment: int, lo: int, hi: int) -> int:
        """Whole-segment readings of ``segment`` in batches ``lo <= id <= hi``."""
        return int(self._conn.execute(
            "SELECT COUNT(*) FROM observations WHERE kind = 'segment' AND share IS NULL "
            "AND segment_id = ? AND batch_id BETWEEN ? AND ?",
            (int(segment), int(lo), int(hi)),
        ).fetchone()[0])

    @staticmethod
    def _kept_stats(
        conn: sqlite3.Connection, segment: int, kept_from: int, at_batch: int
    ) -> tuple[int, float, float]:
        # exactly rounded sums (fsum): the same readings give the same bits in whatever order
        # SQLite returns them, so detection and every later replay reset identically
        y = [float(r[0]) for r in conn.execute(
            "SELECT energy_wh FROM observations WHERE kind = 'segment' AND share IS NULL "
            "AND segment_id = ? AND batch_id BETWEEN ? AND ?",
            (int(segment), int(kept_from), int(at_batch)),
        )]
        return len(y), math.fsum(y), math.fsum(v * v for v in y)

    # ------------------------------------------------------------------ replay
    def resets(self, after_batch: int = 0, upto_batch: int | None = None) -> list[SegmentReset]:
        """The resets of the flagged (not dismissed) changes with ``after_batch < at_batch <=
        upto_batch`` (default: no upper bound), grouped by ``at_batch`` in commit order.

        A segment flagged twice at one batch keeps what its newest change keeps.
        """
        hi = 2**62 if upto_batch is None else int(upto_batch)
        with self._read() as conn:
            rows = conn.execute(
                "SELECT at_batch, segment_id, kept_from_batch FROM segment_changes "
                "WHERE reset = 1 AND dismissed IS NULL AND at_batch > ? AND at_batch <= ? "
                "ORDER BY at_batch, segment_id, id",
                (int(after_batch), hi),
            ).fetchall()
            groups: dict[int, dict[int, tuple[int, float, float]]] = {}
            for at, seg, kept_from in rows:
                groups.setdefault(int(at), {})[int(seg)] = self._kept_stats(
                    conn, int(seg), int(kept_from), int(at)
                )
        out = []
        for at, per in groups.items():
            ids = np.array(sorted(per), dtype=np.int64)
            stats = [per[int(e)] for e in ids]
            out.append(SegmentReset(
                at,
                ids,
                np.array([s[0] for s in stats], dtype=np.int64),
                np.array([s[1] for s in stats], dtype=np.float64),
                np.array([s[2] for s in stats], dtype=np.float64),
            ))
        return out

    # ------------------------------------------------------------------ listing, dismissing
    def segment_changes(self, *, include_dismissed: bool = False) -> list[SegmentChange]:
        """Recorded changes, oldest first (only the flagged ones unless ``include_dismissed``)."""
        where = "" if include_dismissed else "WHERE dismissed IS NULL"
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {_COLUMNS}, id, created, dismissed FROM segment_changes {where} "
                "ORDER BY id"
            ).fetchall()
            out = []
            for r in rows:
                seg, at, kept_from, reset, dismissed = int(r[0]), int(r[1]), int(r[3]), r[10], r[13]
                aside = (
                    self.count_segment_readings(seg, 0, kept_from - 1)
                    if reset and dismissed is None else 0
                )
                out.append(SegmentChange(
                    seg, at, int(r[2]), kept_from, int(r[4]), float(r[5]), float(r[6]),
                    float(r[7]), float(r[8]), int(r[9]), bool(reset), int(r[11]), str(r[12]),
                    None if dismissed is None else str(dismissed), aside,
                    self.count_segment_readings(seg, at + 1, 2**62),
                ))
        return out

    def dismiss_changes(self, segment_ids: ArrayLike) -> list[SegmentChange]:
        """Un-flag every flagged change of the listed segments (the user says the road did not
        change); return them. Their set-aside readings count again: checkpoints that include
        a reset of theirs are deleted in the same transaction, so the next model load replays
        from an older checkpoint (or the prior) without it.

        Raises
        ------
        InvalidObservation
            If a listed segment has no flagged change (nothing is dismissed then).
        """
        try:
            ids = np.unique(np.asarray(segment_ids, dtype=np.int64).reshape(-1))
        except (TypeError, ValueError, OverflowError):  # was int()'s own message
            raise InvalidObservation(
                f"segment ids are whole numbers, got {segment_ids!r}"
            ) from None
        if ids.size == 0:
            raise InvalidObservation("no segment given to dismiss")
        flagged = [c for c in self.segment_changes() if c.segment in set(ids.tolist())]
        missing = sorted(set(ids.tolist()) - {c.segment for c in flagged})
        if missing:
            raise InvalidObservation(
                f"segment {missing[0]} has no flagged change to dismiss "
                f"('ev-nav changes {self.path.parent}' lists the flagged ones)"
            )
        now = _utcnow()
        with self._write("dismiss") as conn:
            conn.executemany(
                "UPDATE segment_changes SET dismissed = ? WHERE id = ? AND dismissed IS NULL",
                [(now, c.id) for c in flagged],
            )
            replayed = [c.at_batch for c in flagged if c.reset]
            if replayed:
                conn.execute("DELETE FROM checkpoints WHERE last_batch_id >= ?", (min(replayed),))
        return flagged

    def n_dismissed_changes(self) -> int:
        """How many changes were ever dismissed (a writer holding a model compares it to know
        whether another process dismissed one since)."""
        return int(self._conn.execute(
            "SELECT COUNT(*) FROM segment_changes WHERE dismissed IS NOT NULL"
        ).fetchone()[0])
