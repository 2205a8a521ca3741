"""The :class:`Store` facade: one object per open state, composed of per-concept parts.

Each concept's SQL lives in its own module as a mixin over one shared
:class:`~ev_nav.store.connection.StoreConnection`: :mod:`~ev_nav.store.schema` (versions and
migrations), :mod:`~ev_nav.store.vehicles`, :mod:`~ev_nav.store.trips`,
:mod:`~ev_nav.store.observations` and :mod:`~ev_nav.store.checkpoints`. This module adds only
creating and opening a state and its identity (network, model kind, size; the ``meta`` table).

Mixins rather than delegation: the parts write through one connection and call each other inside
one transaction (recording observations reads the trip under the same write lock; forgetting
them deletes checkpoints in that transaction), so they share one object's ``_conn``,
``_write`` and ``_read`` exactly as the single class did; delegation would need every part to
hold references to the others and every public method a forwarding twin here. Callers see one
``Store`` with the same methods as before.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from ev_nav.errors import StateError, StateIOError
from ev_nav.store.caches import CachesMixin
from ev_nav.store.changes import ChangesMixin
from ev_nav.store.checkpoints import CheckpointsMixin
from ev_nav.store.connection import StoreConnection, _db_error, _utcnow
from ev_nav.store.observations import ObservationsMixin
from ev_nav.store.schema import SchemaMixin
from ev_nav.store.trips import TripsMixin
from ev_nav.store.vehicles import VehiclesMixin

MODEL_KINDS: tuple[str, ...] = ("gp", "bi")


class Store(
    TripsMixin,
    ObservationsMixin,
    CheckpointsMixin,
    CachesMixin,
    ChangesMixin,
    VehiclesMixin,
    SchemaMixin,
    StoreConnection,
):
    """The SQLite-backed state of one driver/network (see :mod:`ev_nav.store` for guarantees).

    Use :meth:`create` for a new state directory and :meth:`open` for an existing one; close with
    :meth:`close` or use the store as a context manager. A ``Store`` object belongs to one thread.
    """

    # ------------------------------------------------------------------ opening
    @classmethod
    def create(
        cls,
        state_dir: str | Path,
        network_hash: str,
        network_ref: str,
        model_kind: str,
        vehicle: dict[str, Any],
        *,
        n_segments: int | None = None,
        network_arrays_hash: str | None = None,
    ) -> Store:
        """Create a new state in ``state_dir`` (made if missing) and return it open.

        Parameters
        ----------
        state_dir : path
            Directory of the state; must not already hold a state.
        network_hash : str
            Content hash of the road network (``RoadNetwork.content_hash``).
        network_ref : str
            How to get the network back: a file path or ``synthetic:...`` description.
        model_kind : str
            ``gp`` or ``bi``.
        vehicle : dict
            JSON-serialisable vehicle description (becomes vehicle 1).
        n_segments : int, optional
            Number of segments of the network; when given, segment ids are range-checked.
        network_arrays_hash : str, optional
            ``RoadNetwork.arrays_hash``: lets :meth:`check_network` verify the arrays themselves.

        Raises
        ------
        StateError
            If a state already exists there, or the arguments are invalid.
        """
        if model_kind not in MODEL_KINDS:
            raise StateError(f"unknown model kind {model_kind!r}; use one of {MODEL_KINDS}")
        if not network_hash:
            raise StateError("the network has no content hash; rebuild it with ev-nav")
        if n_segments is not None and n_segments <= 0:
            raise StateError(f"n_segments must be positive, got {n_segments}")
        try:
            vehicle_json = json.dumps(vehicle, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise StateError(f"vehicle description is not JSON-serialisable: {exc}") from None
        directory = Path(state_dir)
        if directory.exists() and not directory.is_dir():
            raise StateError(f"{directory} exists and is not a directory; choose another path")
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a missing parent on a read-only or virtual file system, ...
            raise StateIOError(
                f"cannot create the state directory {directory} ({exc.strerror}); choose a path "
                "in a writable directory"
            ) from None
        path = cls.db_path(directory)
        if path.exists():
            raise StateError(
                f"{directory} already holds an ev-nav state (possibly from an interrupted "
                "'ev-nav init'); use it ('ev-nav history' shows what it holds) or choose a new "
                "directory"
            )
        conn = cls._connect(path)
        store = cls(path, conn)
        try:
            store._migrate()
            with store._write():
                if conn.execute("SELECT COUNT(*) FROM meta").fetchone()[0] > 0:
                    # Another process created the same state between our check and our write.
                    raise StateError(f"{directory} already holds an ev-nav state")
                now = _utcnow()
                rows = {
                    "network_hash": network_hash,
                    "network_ref": str(network_ref),
                    "model_kind": model_kind,
                    "created": now,
                    "current_vehicle": "1",
                }
                if n_segments is not None:
                    rows["n_segments"] = str(int(n_segments))
                if network_arrays_hash:
                    rows["network_arrays_hash"] = str(network_arrays_hash)
                conn.executemany("INSERT INTO meta(key, value) VALUES (?, ?)", rows.items())
                conn.execute(
                    "INSERT INTO vehicles(id, name, spec, created) VALUES (1, ?, ?, ?)",
                    (str(vehicle.get("name", "default")), vehicle_json, now),
                )
        except BaseException:
            store.close()
            raise
        return store

    @staticmethod
    def no_state_error(state_dir: str | Path) -> StateError:
        """The error for a path that holds no state, with advice that fits what is there."""
        if Path(state_dir).is_file():
            # 'ev-nav init FILE' would fail too: a file is in the way
            return StateError(
                f"no ev-nav state in {state_dir}: it is a file; give the state directory "
                "('ev-nav init DIR' creates one)"
            )
        return StateError(
            f"no ev-nav state in {state_dir}; create one with 'ev-nav init {state_dir} ...'"
        )

    @classmethod
    def open(cls, state_dir: str | Path) -> Store:
        """Open an existing state, upgrading its schema if it is older than this code.

        Raises
        ------
        StateError
            If there is no state, it is not an ev-nav database, or it is newer than this code.
        """
        path = cls.db_path(state_dir)
        if not path.is_file():
            raise cls.no_state_error(state_dir)
        cls._check_file(path)
        conn = cls._connect(path)
        store = cls(path, conn)
        try:
            store._migrate()
            if store._meta_get("network_hash") is None:
                raise StateError(
                    f"{path} has no network reference (an interrupted 'ev-nav init'?); "
                    "'ev-nav doctor' shows what it holds; to start over, run 'ev-nav init' with "
                    "a new directory"
                )
        except sqlite3.DatabaseError as exc:
            store.close()
            raise _db_error(path, exc) from None
        except BaseException:
            store.close()
            raise
        return store

    # ------------------------------------------------------------------ meta
    def _meta_get(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def meta(self) -> dict[str, str]:
        """All meta entries (network hash and reference, model kind, creation time, …)."""
        return {str(k): str(v) for k, v in self._conn.execute("SELECT key, value FROM meta")}

    @property
    def network_hash(self) -> str:
        """Content hash of the network this state was created for."""
        return self._meta_get("network_hash") or ""

    @property
    def network_ref(self) -> str:
        """Reference (path or synthetic spec) of the network this state was created for."""
        return self._meta_get("network_ref") or ""

    @property
    def model_kind(self) -> str:
        """``gp`` or ``bi``."""
        return self._meta_get("model_kind") or ""

    @property
    def n_segments(self) -> int | None:
        """Number of network segments if recorded at creation, else ``None``."""
        if self._n_segments_cache is False:
            value = self._meta_get("n_segments")
            self._n_segments_cache = None if value is None else int(value)
        return self._n_segments_cache  # type: ignore[return-value]

    def check_network(self, network_hash: str, arrays_hash: str | None = None) -> None:
        """Raise :class:`StateError` unless the network is the state's network.

        ``network_hash`` is the network's :attr:`~ev_nav.roads.network.RoadNetwork.content_hash`
        (its build inputs); ``arrays_hash`` the hash of its arrays. A state created before arrays
        hashes were recorded learns it on first use (and is checked against it afterwards).
        """
        if network_hash != self.network_hash:
            raise StateError(
                f"the state {self.path.parent} was created for network {self.network_hash!r} "
                f"({self.network_ref}), not {network_hash!r}; use that network or a new state"
            )
        if arrays_hash is None:
            return
        recorded = self._meta_get("network_arrays_hash")
        if recorded is None:
            with contextlib.suppress(StateError):  # a read-only state is still usable
                with self._write() as conn:
                    conn.execute(
                        "INSERT OR IGNORE INTO meta(key, value) VALUES ('network_arrays_hash', ?)",
                        (arrays_hash,),
                    )
        elif recorded != arrays_hash:
            raise StateError(
                f"the network file {self.network_ref} has the state's header but different "
                "contents (its arrays were modified or damaged); routes on it would be wrong - "
                "restore or rebuild that network file"
            )
