"""Model checkpoints in the state: opaque, hash-verified blobs, one current, the newest kept.

The store knows nothing about models: the caller serialises them (pickle-free, with
:mod:`ev_nav.checkpoints`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from ev_nav.errors import ModelStateError, StateError
from ev_nav.store.connection import StoreConnection, _utcnow, sha256_hex

#: Checkpoints kept per state (older ones are pruned when a new one is saved).
KEEP_CHECKPOINTS = 3


@dataclass(frozen=True)
class Checkpoint:
    """A stored model state (opaque bytes) and how much data it has absorbed."""

    id: int
    created: str
    n_observations: int
    last_batch_id: int
    model_kind: str
    blob: bytes



@dataclass(frozen=True)
class CheckpointRecord(Checkpoint):
    """A stored checkpoint with the verdict of its stored hash (``verified``)."""

    verified: bool = True



class CheckpointsMixin(StoreConnection):
    """Saving, verifying, listing and deleting model checkpoints."""

    def save_checkpoint(self, blob: bytes, n_obs: int, *, last_batch_id: int | None = None) -> int:
        """Store a model state and make it current, in one transaction; return its id.

        If anything fails before the commit (disk full, exception, kill) the previous checkpoint
        stays current and intact. Only the newest :data:`KEEP_CHECKPOINTS` are kept.

        Parameters
        ----------
        blob : bytes
            Serialised model state.
        n_obs : int
            Number of observations the model has absorbed.
        last_batch_id : int, optional
            Newest observation batch included in the model (default: the newest in the store).
        """
        data = bytes(blob)
        if not data:
            raise ModelStateError("refusing to store an empty model checkpoint")
        if int(n_obs) < 0:
            raise ModelStateError(f"n_obs must be >= 0, got {n_obs}")
        digest = sha256_hex(data)
        try:
            with self._write("checkpoint") as conn:
                last = (
                    int(
                        conn.execute(
                            "SELECT COALESCE(MAX(id), 0) FROM observation_batches"
                        ).fetchone()[0]
                    )
                    if last_batch_id is None
                    else int(last_batch_id)
                )
                # Demote first so that the unique "one current" index holds at every statement;
                # if the insert below fails the rollback restores the old flag.
                conn.execute("UPDATE checkpoints SET is_current = 0 WHERE is_current = 1")
                cur = conn.execute(
                    """INSERT INTO checkpoints(created, n_observations, last_batch_id, model_kind,
                           sha256, blob, is_current) VALUES (?, ?, ?, ?, ?, ?, 1)""",
                    (_utcnow(), int(n_obs), last, self.model_kind, digest, sqlite3.Binary(data)),
                )
                cid = int(cur.lastrowid)
                conn.execute(
                    "DELETE FROM checkpoints WHERE id NOT IN "
                    "(SELECT id FROM checkpoints ORDER BY id DESC LIMIT ?)",
                    (KEEP_CHECKPOINTS,),
                )
        except StateError as exc:  # e.g. database or disk is full (translated by _write)
            raise type(exc)(
                f"could not write the model checkpoint: {exc}; the previous checkpoint is still "
                "in use"
            ) from None
        return cid

    def latest_checkpoint(self) -> Checkpoint | None:
        """The current checkpoint (``None`` before the first one), verified against its hash.

        Raises
        ------
        ModelStateError
            If the stored bytes do not match their hash.
        """
        row = self._conn.execute(
            """SELECT id, created, n_observations, last_batch_id, model_kind, sha256,
                      CAST(blob AS BLOB)
               FROM checkpoints WHERE is_current = 1"""
        ).fetchone()
        if row is None:
            return None
        blob = bytes(row[6])
        if sha256_hex(blob) != row[5]:
            raise ModelStateError(
                f"model checkpoint {row[0]} is damaged (hash mismatch); the observations are "
                f"intact: 'ev-nav doctor {self.path.parent} --repair' rebuilds the model from them"
            )
        return Checkpoint(int(row[0]), str(row[1]), int(row[2]), int(row[3]), str(row[4]), blob)

    def checkpoints(self) -> list[CheckpointRecord]:
        """Every kept checkpoint, newest first, each with the verdict of its stored hash.

        Unlike :meth:`latest_checkpoint` this never raises on a damaged blob, so a caller can fall
        back to the next older one (and finally to replaying all observations from the prior).
        """
        with self._read() as conn:
            rows = conn.execute(
                """SELECT id, created, n_observations, last_batch_id, model_kind, sha256,
                      CAST(blob AS BLOB)
                   FROM checkpoints ORDER BY is_current DESC, id DESC"""
            ).fetchall()
        out = []
        for row in rows:
            blob = bytes(row[6] or b"")
            ok = sha256_hex(blob) == row[5]
            out.append(
                CheckpointRecord(
                    int(row[0]), str(row[1]), int(row[2]), int(row[3]), str(row[4]), blob, ok
                )
            )
        return out

    def delete_checkpoints(self, ids: Sequence[int]) -> int:
        """Delete the given checkpoints (never observations); returns how many went."""
        with self._write() as conn:
            cur = conn.executemany("DELETE FROM checkpoints WHERE id = ?", [(int(i),) for i in ids])
            return int(cur.rowcount)

    def checkpoint_ids(self) -> list[int]:
        """Ids of the stored checkpoints, oldest first."""
        return [int(r[0]) for r in self._conn.execute("SELECT id FROM checkpoints ORDER BY id")]
