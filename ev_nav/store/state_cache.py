"""The verified cache folder of a state (``STATE/cache/``): derived arrays that change
predictions (the prior kernel, the cached posterior), used only when their bytes match the
checksum the state's store recorded when it wrote them.

Its own module (not beside the store's :class:`~ev_nav.store.caches.CachesMixin`) because it
opens the store facade, which is made of that mixin.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ev_nav.errors import StateError, StateNotice
from ev_nav.store.caches import CACHE_FOLDER, _Hasher, _HashingWriter, _read_npy_hashed
from ev_nav.store.facade import Store

__all__ = ["StateCache"]


class StateCache:
    """The cache folder of a state, with every file verified against the state's store.

    Holds only paths (each operation opens the store briefly), so it can be shared by threads
    and deep-copied with the model that uses it.

    Parameters
    ----------
    state : path
        The state directory; its files are in ``state/cache/``.
    readonly : bool
        Read verified files only: a refused file is left in place (unused) and nothing is
        written (``ev-nav doctor`` checking without ``--repair``).
    """

    def __init__(self, state: str | os.PathLike[str], readonly: bool = False) -> None:
        self.state = Path(state)
        self.folder = self.state / CACHE_FOLDER
        self.readonly = bool(readonly)

    def __repr__(self) -> str:
        return f"StateCache({str(self.state)!r})"

    def _store(self) -> Store:
        return Store.open(self.state)

    # ------------------------------------------------------------------ reading
    def read_array(
        self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float64
    ) -> NDArray[Any] | None:
        """The array in cache file ``name`` if its bytes match the recorded checksum and it has
        this shape and dtype; else ``None`` (missing: silently; refused: with a
        :class:`StateNotice`, and the file is deleted so that the caller's rebuild replaces
        it). Column-major files come back column-major."""
        path = self.folder / name
        if not path.is_file():
            return None
        try:
            with self._store() as store:
                recorded = store.cache_checksum(name)
        except StateError:
            return None  # no store to verify against: not used (it is only a cache)
        if recorded is None:
            self._refuse(name, "was not written by this state (no checksum recorded)")
            return None
        try:
            arr, digest, size = _read_npy_hashed(path, shape, np.dtype(dtype))
        except (OSError, ValueError) as exc:
            self._refuse(name, f"is unreadable ({exc})")
            return None
        if (digest, size) != recorded:
            self._refuse(name, "does not match the checksum recorded when it was written")
            return None
        return arr

    def _refuse(self, name: str, why: str) -> None:
        if self.readonly:
            return  # (the doctor reports cache files itself)
        warnings.warn(
            f"cache file {self.folder / name} {why}: ignored, deleted and recomputed",
            StateNotice,
            stacklevel=3,
        )
        with contextlib.suppress(OSError):
            (self.folder / name).unlink()

    # ------------------------------------------------------------------ writing
    def write_array(self, name: str, arr: NDArray[Any], *, keep: int | None = None) -> None:
        """Write ``arr`` to cache file ``name`` atomically and record its checksum.

        With ``keep``, only the ``keep`` newest files of the same kind (the name's part before
        the first ``-``) are kept. A failure (full disk, read-only state) is silent: a cache
        only saves time.
        """
        if self.readonly:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            import tempfile  # here: a command that writes no cache file skips its import

            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.folder)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as fh, _Hasher() as hasher:
                np.lib.format.write_array(_HashingWriter(fh, hasher), arr, allow_pickle=False)
                digest, size = hasher.hexdigest(), hasher.size
                fh.flush()
                os.fsync(fh.fileno())
            mask = os.umask(0)
            os.umask(mask)
            os.chmod(tmp, 0o666 & ~mask)
            target = self.folder / name
            gone = self._prune(name, keep) if keep is not None else []
            with self._store() as store:
                # the checksum is committed before the file is put in place: a reader (another
                # thread or process) that finds the file then always finds its checksum, where
                # a file installed first could be refused and deleted as "not written by this
                # state" in the moment before the record committed
                store.record_cache_file(name, digest, size, gone=gone)
                try:
                    os.replace(tmp, target)
                except OSError:
                    store.forget_cache_files([name])
                    raise
        except (OSError, StateError):
            pass
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)

    def _prune(self, name: str, keep: int) -> list[str]:
        """Delete all but the ``keep - 1`` newest other files of ``name``'s kind; their names."""
        kind = name.split("-")[0]
        others = [p for p in self.folder.glob(f"{kind}-*") if p.name != name]
        others.sort(key=lambda p: p.stat().st_mtime)
        gone = []
        for stale in others[: max(len(others) - (keep - 1), 0)]:
            with contextlib.suppress(OSError):
                stale.unlink()
                gone.append(stale.name)
        return gone
