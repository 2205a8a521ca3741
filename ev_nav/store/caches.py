"""A state's derived files (``STATE/cache/``), each verified against the checksum its store
recorded when the file was written (schema 4).

The prior kernel matrix and the posterior of the current checkpoint are derived data that a
command reads instead of recomputing them (seconds on a city network); read, they *are* the
model's predictions. So none is trusted for being there: the state's store records the SHA-256
of every cache file it writes (table ``cache_files``), and a file is used only when its bytes
hash to the recorded value. A file with no record (planted, or left by an older ev-nav) or
another hash (tampered, damaged) is refused with a one-line :class:`~ev_nav.errors.StateNotice`,
deleted, and recomputed by the caller. ``ev-nav doctor`` checks every cache file the same way.

Why the store and not a file beside the cache: a checksum beside the file can be replaced with
it; the store is the state's own record, written in the same transaction as the file's rename
(so the record and the file change together, and two writers of one file take turns).

Why SHA-256 over the whole file, verified while it is read: a sampled or size-only check would
let a changed value through; SHA-256 is hardware-accelerated on current x86 and ARM processors,
and the plain hash of the file's bytes can be checked with any tool (``sha256sum``). It costs
one pass over bytes that are being read anyway: each chunk is hashed by a helper thread while
the next one is read (both release the GIL), so reading and hashing overlap.
``scripts/bench_cache_verify.py`` measures the cost.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from ev_nav.store.connection import StoreConnection, _utcnow

if TYPE_CHECKING:
    from concurrent.futures import Future

__all__ = ["CACHE_FOLDER", "CHECKSUM", "CachesMixin", "file_checksum"]

#: The folder of a state that holds its derived files.
CACHE_FOLDER = "cache"
#: Hash recorded for every cache file (hashlib name).
CHECKSUM = "sha256"
#: Bytes read (and hashed) at a time: large enough for full-speed I/O, small enough to stay in
#: the CPU cache between the read and the hash.
_CHUNK = 4 << 20


class CachesMixin(StoreConnection):
    """The checksums of a state's cache files (table ``cache_files``)."""

    def cache_checksums(self) -> dict[str, tuple[str, int]]:
        """Every recorded cache file: name -> (SHA-256 hex digest, size [bytes])."""
        rows = self._conn.execute("SELECT name, sha256, size FROM cache_files")
        return {str(n): (str(h), int(s)) for n, h, s in rows}

    def cache_checksum(self, name: str) -> tuple[str, int] | None:
        """The recorded (SHA-256 hex digest, size [bytes]) of cache file ``name``, if any."""
        row = self._conn.execute(
            "SELECT sha256, size FROM cache_files WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def record_cache_file(
        self,
        name: str,
        digest: str,
        size: int,
        *,
        gone: Iterable[str] = (),
    ) -> None:
        """Record cache file ``name``'s checksum (before the file is put in place, so that a
        reader who finds the file finds its checksum: :meth:`StateCache.write_array`). Records
        of the files named in ``gone`` (deleted) are dropped."""
        with self._write("cache") as conn:
            conn.execute(
                "INSERT OR REPLACE INTO cache_files(name, sha256, size, created) "
                "VALUES (?, ?, ?, ?)",
                (name, digest, int(size), _utcnow()),
            )
            conn.executemany("DELETE FROM cache_files WHERE name = ?", [(g,) for g in gone])

    def forget_cache_files(self, names: Iterable[str]) -> None:
        """Drop the records of the named cache files."""
        with self._write("cache") as conn:
            conn.executemany("DELETE FROM cache_files WHERE name = ?", [(n,) for n in names])


def file_checksum(path: str | os.PathLike[str]) -> tuple[str, int]:
    """SHA-256 hex digest and size [bytes] of a file's bytes."""
    import hashlib  # here: see sha256_hex

    digest = hashlib.new(CHECKSUM)
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


class _Hasher:
    """SHA-256 of a sequence of chunks, each hashed by a helper thread while the caller reads or
    writes the next one (use as a context manager). The chunks must not change until
    :meth:`hexdigest` has returned."""

    def __init__(self) -> None:
        # imported here: every command imports the store, few read or write a cache file
        import hashlib
        from concurrent.futures import ThreadPoolExecutor

        self._digest = hashlib.new(CHECKSUM)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ev-nav-hash")
        self._pending: Future[None] | None = None
        self.size = 0

    def update(self, chunk: bytes | memoryview) -> None:
        if self._pending is not None:
            self._pending.result()  # in order: one chunk at a time
        self._pending = self._pool.submit(self._digest.update, chunk)
        self.size += len(chunk)

    def hexdigest(self) -> str:
        if self._pending is not None:
            self._pending.result()
            self._pending = None
        return self._digest.hexdigest()

    def __enter__(self) -> _Hasher:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True)


class _HashingWriter:
    """A binary file that hashes what is written to it (NumPy writes arrays to it in chunks)."""

    def __init__(self, fh: Any, hasher: _Hasher) -> None:
        self.fh = fh
        self.hasher = hasher

    def write(self, data: bytes | memoryview) -> int:
        self.hasher.update(data)
        return self.fh.write(data)


def _read_npy_hashed(
    path: Path, shape: tuple[int, ...], dtype: np.dtype
) -> tuple[NDArray[Any], str, int]:
    """Read a ``.npy`` file of this shape and dtype into a new array, hashing every byte of the
    file on the way (one pass); returns (array, SHA-256 hex digest, size [bytes])."""
    with open(path, "rb") as fh, _Hasher() as digest:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"unsupported .npy version {version}")
        if tuple(got_shape) != tuple(shape) or got_dtype != dtype:
            raise ValueError(f"holds a {got_dtype} array of shape {got_shape}")
        offset = fh.tell()
        fh.seek(0)
        digest.update(fh.read(offset))
        arr = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        view = memoryview(arr.reshape(-1, order="F" if fortran else "C")).cast("B")
        pos = 0
        while pos < len(view):
            n = fh.readinto(view[pos : pos + _CHUNK])  # (the helper hashes the previous chunk)
            if not n:
                raise ValueError("truncated")
            digest.update(view[pos : pos + n])
            pos += n
        size = offset + pos + len(fh.read(1))  # a trailing byte changes the size: refused
        return arr, digest.hexdigest(), size
