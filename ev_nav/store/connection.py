"""The database file of a state: opening it, refusing foreign files, transactions.

Every part of :class:`~ev_nav.store.Store` reads and writes through this base: one
connection per object (and one shared by a process's grouped writes), ``BEGIN IMMEDIATE`` write
transactions with deterministic crash points
for the durability tests, read transactions on one snapshot, and the translation of SQLite's
errors into the named :class:`~ev_nav.errors.StateIOError` (the medium) or
:class:`~ev_nav.errors.StateDamagedError` (the data).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import sqlite3
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from ev_nav.errors import (
    StateBusyError,
    StateDamagedError,
    StateError,
    StateIOError,
    StateNotice,
)
from ev_nav.faults import crash_point

#: File name of the database inside a state directory.
DB_NAME = "ev-nav.sqlite"

#: How long a writer waits for another process's transaction before giving up [ms].
BUSY_TIMEOUT_MS = 60_000
#: How long a write waits for another process's lock before it says that it is waiting [ms].
LOCK_NOTICE_MS = 2_000

#: Most writes one group commit takes (see :class:`_ProcessWriters`): a bound on how long the
#: first of them waits for the others' statements.
GROUP_COMMIT_MAX = 32
#: How often a write waiting for its group's commit checks that a writer is still to come [s].
GROUP_WAIT_S = 0.05


class _ProcessWriters:
    """This process's writers of one database: the lock they queue on, and the group commit.

    SQLite's busy handler makes a writer that finds the database locked sleep and retry with
    growing sleeps (up to 100 ms each): with a dozen threads writing (a routing server's
    requests), most waits ended long after the lock was free, and those sleeps made the tail of
    the request latencies. Queued on :attr:`lock`, a thread starts the moment the previous
    writer is done; SQLite's own locking still orders writers of different processes.

    Group commit: with ``synchronous=FULL`` every commit waits for an fsync of the WAL, and a
    routing server commits a trip and an observation per vehicle round trip; one transaction a
    write made the fsyncs, with the lock held, the queue every write waited in (2.8 ms a commit
    on a shared disk, 70 % of a 12-vehicle load run's time holding the lock). A write that asks
    for it (:meth:`StoreConnection._write` ``group=True``) runs its statements on this
    process's one shared write connection, inside a savepoint of a transaction other such
    writes may have opened; when it is done and no other writer is queued (or the group is
    full) it commits the whole group, otherwise it leaves the commit to the last of them and
    waits for it. Either way it returns only after the commit that holds its data: an
    acknowledged write is as durable as before, and a write that fails is rolled back to its
    savepoint without touching the others. Batch and trip ids are taken inside the group's
    transaction, so they keep commit order.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        #: counts below are changed under this (``+=`` is not atomic between threads)
        self._count = threading.Lock()
        self.queued = 0  # threads waiting for :attr:`lock` to write
        self.users = 0  # open store objects of this process on the database
        #: the shared write connection of grouped writes (opened on first use, closed with the
        #: last store object), used only while holding :attr:`lock`
        self.conn: sqlite3.Connection | None = None
        self.file_id: tuple[int, int] | None = None  # (device, inode) :attr:`conn` opened
        self.open = False  # a group's transaction is open on :attr:`conn`
        self.members: list[str] = []  # the open group's writes (crash points)
        self.group = 0  # the open (or last) group's number
        self.settled = 0  # the last group committed or rolled back
        #: each recent group's commit error (None: committed)
        self.outcome: dict[int, sqlite3.Error | None] = {}

    def count(self, attr: str, step: int) -> None:
        with self._count:
            setattr(self, attr, getattr(self, attr) + step)

    def acquire(self) -> None:
        """Take :attr:`lock`, counted as queued while waiting for it."""
        self.count("queued", 1)
        try:
            self.lock.acquire()
        finally:
            self.count("queued", -1)

    def settle(self) -> None:
        """Commit the open group (holding :attr:`lock`): crash points for each of its writes,
        one COMMIT (one fsync), then wake its members. A group left with no write (its only
        one failed) is rolled back."""
        conn = self.conn
        assert conn is not None and self.open
        members, self.members, self.open = self.members, [], False
        error: sqlite3.Error | None = None
        try:
            if members:
                for what in members:
                    crash_point(f"commit-{what}")
                conn.execute("COMMIT")
                for what in members:
                    crash_point(f"committed-{what}")
            else:
                conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            error = exc
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        finally:
            self.outcome[self.group] = error
            self.outcome.pop(self.group - 64, None)  # members read theirs before 64 more groups
            self.settled = self.group
            self.cond.notify_all()

    def reconnect_if_replaced(self) -> None:
        """Drop the shared connection (holding :attr:`lock`, between groups) if the database
        file was replaced since it was opened (``ev-nav doctor`` salvages into a new file):
        a kept connection would go on writing to the old one."""
        now = _file_id(self.path)
        if self.conn is not None and now is not None and now != self.file_id:
            conn, self.conn = self.conn, None
            conn.close()

    def release_user(self) -> None:
        """One store object fewer; the last one closes the shared connection."""
        self.count("users", -1)
        if self.users > 0:
            # not the last: closing waits for nothing (a pending write holds the lock for up to
            # a minute); the last one closes the connection, under the lock
            return
        with self.lock:
            if self.users == 0 and not self.open and self.conn is not None:
                conn, self.conn = self.conn, None
                conn.close()


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``; None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


_WRITERS: dict[tuple[int, str], _ProcessWriters] = {}
_WRITERS_GUARD = threading.Lock()


def _process_writers(path: Path) -> _ProcessWriters:
    """The :class:`_ProcessWriters` of the database at ``path`` (one per file per process: a
    forked child makes its own, never using the parent's lock or shared connection)."""
    name = str(path.resolve())
    key = (os.getpid(), name)
    with _WRITERS_GUARD:
        writers = _WRITERS.get(key)
        if writers is None:
            writers = _WRITERS[key] = _ProcessWriters(Path(name))
        return writers


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the database at ``path`` that leaves no files behind it.

    SQLite makes a WAL database's ``-wal`` and ``-shm`` files for a reader that finds none, and a
    read-only connection cannot remove them when it closes, so a check of a damaged state left
    two new files beside a database it said it had not touched. When this connection made them,
    a read-write connection that reads only the header removes them as it closes, as SQLite's
    last connection does: the log is empty, so nothing is copied into the database. While
    another connection has the database open they stay, as they must.
    """
    wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    made_here = not wal.exists() and not shm.exists()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()
        try:  # (no log: a database not in WAL mode, nothing to tidy)
            made_here = made_here and wal.stat().st_size == 0
        except OSError:
            made_here = False
        if made_here:
            with contextlib.suppress(sqlite3.Error):
                tidy = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
                try:  # reading the header opens the log, so that closing removes it
                    tidy.execute("PRAGMA user_version").fetchone()
                finally:
                    tidy.close()


def sha256_hex(data: bytes) -> str:
    """SHA-256 hex digest of ``data``, as the store records its blobs' (checkpoints, the
    detector's state). hashlib is imported here, not with the store: OpenSSL's start-up is a few
    milliseconds that commands reading no blob (``history``) do not pay."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


#: The first 16 bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"

# Messages of sqlite3.OperationalError that mean the medium, not the data, is the problem.
_IO_MARKERS = (
    "disk i/o error",
    "database or disk is full",
    "readonly database",
    "read-only",
    "unable to open database file",
    "permission denied",
)


def io_problem(exc: BaseException) -> bool:
    """Whether an SQLite error is an I/O problem (full disk, read-only, permissions), which says
    nothing about the state's data being damaged."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and any(m in text for m in _IO_MARKERS)


def _db_error(path: Path, exc: sqlite3.Error) -> StateError:
    """The named error for an SQLite failure on ``path``: I/O problem or damaged database."""
    if io_problem(exc):
        return StateIOError(
            f"cannot use the state {path} ({exc}): an I/O problem (full disk, read-only file "
            "system or permissions); the state itself was not changed - fix that and retry"
        )
    problem = f"the state database {path} is damaged ({exc})"
    return StateDamagedError(
        f"{problem}; run 'ev-nav doctor {path.parent}' to check it and salvage every readable "
        "trip and observation",
        problem=problem,
    )


class _ClosedConnection:
    """What a closed store holds in place of its connection: every use of it is the named
    error (a read of a closed session's trip was an AttributeError on None)."""

    def __getattr__(self, name: str) -> object:
        raise StateError("the store is closed")


_CLOSED = _ClosedConnection()


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite gave up waiting for another connection's lock."""
    return "locked" in str(exc) or "busy" in str(exc)


def _utcnow() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")



class StoreConnection:
    """One open state database: the connection, its opening checks and its transactions.

    The base of every part of :class:`~ev_nav.store.Store`; not used on its own.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._writers = _process_writers(path)
        self._writers.count("users", 1)
        #: the process-wide lock every write to this database takes first
        self._write_lock = self._writers.lock
        self._n_segments_cache: int | None | bool = False  # False = not looked up yet

    def _damaged_record(self, what: str, exc: Exception) -> StateDamagedError:
        """The named error for a stored value ev-nav cannot have written (``what``: which
        record), instead of the JSON or number parser's traceback."""
        return StateDamagedError(
            f"the state {self.path.parent} holds a damaged record: {what} ({exc}); ev-nav "
            f"did not write it so - 'ev-nav doctor {self.path.parent}' checks every record; "
            "restore the state from a backup to get the record back",
            problem=f"{what} ({exc})",
        )

    # ------------------------------------------------------------------ opening
    @staticmethod
    def db_path(state_dir: str | Path) -> Path:
        """Path of the database file inside ``state_dir``."""
        return Path(state_dir) / DB_NAME

    @staticmethod
    def _connect(path: Path, *, shared: bool = False) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; every write opens BEGIN IMMEDIATE itself
        # so that a writer takes the write lock up front (a deferred transaction that upgrades
        # from read to write can fail with SQLITE_BUSY without waiting). ``shared``: the group
        # commit's connection, used by many threads, one at a time (under the write lock).
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_MS / 1000.0, isolation_level=None,
                check_same_thread=not shared,
            )
        except sqlite3.Error as exc:  # unreadable directory, permissions, …
            raise StateIOError(
                f"cannot open {path} ({exc}); check the path and permissions"
            ) from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StateError(
                    f"cannot switch {path} to WAL mode (got {mode!r}); put the state directory "
                    "on a local file system"
                )
            # FULL: the WAL is fsynced at every commit, so acknowledged writes survive power loss
            # too (NORMAL would already survive a process kill).
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise _db_error(path, exc) from None
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _check_file(path: Path) -> None:
        """Refuse, without writing a byte, a file that cannot be an ev-nav state.

        SQLite would happily turn an empty or foreign file into a fresh database (and the next
        migration would write a schema into it), so look at it read-only first.

        The file is never opened outside SQLite: closing any descriptor of a file releases
        every POSIX lock the *process* holds on it, including those of this process's other
        open connections (a server answering requests while its model writer keeps the state
        open). Another process closing its connection would then see no other user, checkpoint
        and delete the WAL under the running connections ("disk I/O error"). SQLite's own
        descriptors are kept open while the process holds locks, so a read-only SQLite
        connection looks at the file safely.
        """
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise StateIOError(
                f"cannot read {path} ({exc}); check the path and permissions"
            ) from None
        if size == 0:
            raise StateDamagedError(
                f"{path} is empty (0 bytes): it holds no ev-nav state (truncated or never "
                "written); nothing was written to it - restore it from a backup, or create a new "
                "state in another directory"
            )
        # Read-only look at the schema version before _connect switches the file to WAL (a
        # write): an SQLite file ev-nav never initialised must stay byte-for-byte as it is.
        try:
            with read_only(path) as ro:
                version = int(ro.execute("PRAGMA user_version").fetchone()[0])
                tables = {r[0] for r in ro.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):  # SQLITE_NOTADB: no SQLite header
                raise StateDamagedError(
                    f"{path} is not an SQLite database, so not an ev-nav state; nothing was "
                    "written to it - check the path"
                ) from None
            raise _db_error(path, exc) from None
        if version == 0:
            raise StateError(
                f"{path} is an SQLite database but not an ev-nav state (no schema); nothing was "
                "written to it - check the path"
            )
        if not tables & {"meta", "trips", "observation_batches", "observations", "checkpoints"}:
            # another program's database with a schema version of its own: migrating it would
            # write ev-nav's tables into it (doctor did, before saying it was damaged); a state
            # that lost some of its tables is doctor's to report
            raise StateError(
                f"{path} is an SQLite database but not an ev-nav state (it has no ev-nav "
                "tables); nothing was written to it - check the path"
            )

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        if not isinstance(self._conn, _ClosedConnection):
            self._conn.close()
            self._conn = _CLOSED  # type: ignore[assignment]
            self._writers.release_user()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def _write(self, what: str = "write", *, group: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction: taken with the write lock up front, committed or rolled back.

        ``what`` names the write for the crash tests' deterministic kill points
        (:func:`ev_nav.faults.crash_point` ``commit-WHAT`` just before the commit and
        ``committed-WHAT`` just after it).

        ``group``: the write may share its commit with other threads' writes (group commit,
        :class:`_ProcessWriters`); it returns, as any write, only once its data is committed.
        Its statements run on the shared connection it is given: a grouped write reads through
        that connection what must see the group's uncommitted rows (ids, repeats).
        """
        if isinstance(self._conn, _ClosedConnection):
            raise StateError("the store is closed")
        if group:
            with self._grouped_write(what) as conn:
                yield conn
            return
        writers = self._writers
        writers.acquire()
        try:
            if writers.open:  # grouped writes wait for a commit: this one makes it first
                writers.settle()
            with self._transaction(self._conn, what) as conn:
                yield conn
        finally:
            writers.lock.release()

    def _begin(self, conn: sqlite3.Connection) -> None:
        # A first, short wait; then a notice and the rest of the wait, so that a command held by
        # another process's write says why it waits instead of sitting silent for a minute
        try:
            conn.execute(f"PRAGMA busy_timeout = {LOCK_NOTICE_MS}")
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise _db_error(self.path, exc) from None
            warnings.warn(
                f"the state {self.path.parent} is being written by another process; waiting up "
                f"to {(BUSY_TIMEOUT_MS - LOCK_NOTICE_MS) / 1000:.0f} s for it",
                StateNotice,
                stacklevel=2,
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS - LOCK_NOTICE_MS}")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if not _is_locked(exc):
                    raise _db_error(self.path, exc) from None
                raise StateBusyError(
                    f"the state {self.path.parent} is locked by another process ({exc}); "
                    "try again when it has finished"
                ) from None
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    @contextlib.contextmanager
    def _transaction(self, conn: sqlite3.Connection, what: str) -> Iterator[sqlite3.Connection]:
        self._begin(conn)
        try:
            yield conn
            crash_point(f"commit-{what}")
            conn.execute("COMMIT")
            crash_point(f"committed-{what}")
        except sqlite3.DatabaseError as exc:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise _db_error(self.path, exc) from None
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _grouped_write(self, what: str) -> Iterator[sqlite3.Connection]:
        writers = self._writers
        writers.acquire()
        try:
            if not writers.open:
                writers.reconnect_if_replaced()
            if writers.conn is None:
                writers.conn = self._connect(writers.path, shared=True)
                writers.file_id = _file_id(writers.path)
            conn = writers.conn
            if not writers.open:
                self._begin(conn)
                writers.open = True
                writers.group += 1
            number = writers.group
            failed: BaseException | None = None
            try:
                conn.execute("SAVEPOINT ev_nav_write")
                try:
                    yield conn
                    conn.execute("RELEASE ev_nav_write")
                except BaseException:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK TO ev_nav_write")
                        conn.execute("RELEASE ev_nav_write")
                    raise
                writers.members.append(what)
            except sqlite3.DatabaseError as exc:
                failed = _db_error(self.path, exc)
            except BaseException as exc:
                failed = exc
            # the last write of a group commits it: the others wait, holding nothing
            if writers.queued == 0 or len(writers.members) >= GROUP_COMMIT_MAX:
                writers.settle()
            elif failed is None:
                while writers.settled < number:
                    writers.cond.wait(GROUP_WAIT_S)
                    if writers.settled < number and writers.queued == 0:
                        writers.settle()  # the writer it waited for gave up before joining
            if failed is not None:
                raise failed
            error = writers.outcome.get(number)
            if error is not None:
                raise _db_error(self.path, error) from None
        finally:
            writers.lock.release()

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: all queries inside see the same committed snapshot."""
        conn = self._conn
        if isinstance(conn, _ClosedConnection):
            raise StateError("the store is closed")
        if conn.in_transaction:  # nested inside another read or write: same snapshot already
            yield conn
            return
        try:
            conn.execute("BEGIN")
            yield conn
        except sqlite3.DatabaseError as exc:
            raise _db_error(self.path, exc) from None
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")
