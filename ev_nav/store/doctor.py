"""``ev-nav doctor STATE``: check a state and repair what can be repaired without losing data.

What is checked, in order:

1. the database file: present, non-empty, an SQLite file, ``PRAGMA integrity_check``;
2. the observations: every batch complete (its rows all present);
3. the network: the state's reference loads, its build hash matches, and the hash of its arrays
   matches the one recorded at ``init`` (a file altered behind an unchanged header is caught);
4. the model checkpoints: each verifies against its hash, is in the pickle-free format (an old
   pickled one is reported, never loaded) and loads into a model for this network;
5. the cache files (``STATE/cache/``: prior kernel, posterior): each must hash to the checksum
   the store recorded when it was written (a planted, tampered or damaged file is reported).

``--repair`` then fixes what it can, and never deletes an observation:

* a damaged database is *salvaged*: every row that can still be read is copied, table by table
  (row by row where a table scan hits a damaged page), into a fresh file that replaces it; the
  damaged file is kept beside it as ``ev-nav.sqlite.damaged-<time>`` (with its ``-wal``), and the
  report says how many rows of each table were recovered;
* unusable checkpoints are deleted (they are caches: the observations are the data) and a fresh
  one is written by rebuilding the model from the prior and every observation;
* a state made before arrays hashes were recorded gets its network's arrays hash;
* cache files that fail verification are deleted (derived data: the next command that needs
  one recomputes it).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ev_nav.cli import state_arg
from ev_nav.errors import EvNavError, StateDamagedError, StateError
from ev_nav.store.connection import read_only
from ev_nav.store.observations import is_finite_number
from ev_nav.wording import plural

if TYPE_CHECKING:
    from ev_nav.store.facade import Store

__all__ = ["DoctorReport", "check_state", "register", "salvage_database"]


@dataclass
class DoctorReport:
    """What :func:`check_state` found and did.

    Attributes
    ----------
    problems : list of str
        Everything found wrong (one line each); empty for a healthy state.
    repairs : list of str
        What ``repair=True`` changed (one line each).
    info : list of str
        Facts about a state (counts, checkpoints) for the report.
    repaired_all : bool
        ``repair=True`` fixed every problem found.
    advice : str, optional
        What to do instead, where ``--repair`` cannot help (a database file SQLite cannot read
        at all, a network file that is missing or not the state's); None where it can.
    """

    state: Path
    problems: list[str] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    info: list[str] = field(default_factory=list)
    repaired_all: bool = False
    advice: str | None = None

    @property
    def healthy(self) -> bool:
        """Nothing wrong is left: no problem found, or every one repaired."""
        return not self.problems or self.repaired_all


def check_state(
    state: str | Path, *, repair: bool = False, network: Path | None = None
) -> DoctorReport:
    """Check the state in directory ``state``; with ``repair``, fix what can be fixed.

    Parameters
    ----------
    state : path
        State directory (the one given to ``ev-nav init``).
    repair : bool
        Salvage a damaged database, replace unusable checkpoints, record a missing arrays hash.
    network : path, optional
        The network file, if it moved since ``init``.
    """
    from ev_nav.store import Store

    report = DoctorReport(Path(state))
    path = Store.db_path(state)
    if not path.is_file():
        raise Store.no_state_error(state)
    try:
        Store._check_file(path)
    except StateDamagedError as exc:
        cut = _truncation(path)
        if cut is not None:
            # an interrupted copy, a full disk: SQLite refuses the whole file, yet every page
            # that remains still holds its rows
            page_size, have, want = cut
            report.problems.append(
                f"{path.name} is cut short: {have:,} of its {want:,} pages of {page_size:,} "
                "bytes remain (an interrupted copy, a full disk?)"
            )
            if not repair:
                report.advice = (
                    "--repair salvages every row on the pages that remain into a new file (this "
                    "one is kept beside it); a backup of the whole file, if there is one, holds "
                    "more"
                )
                return report
            try:
                report.repairs.extend(salvage_database(path, cut_short=cut))
            except sqlite3.DatabaseError:
                # the table of tables itself lay on the lost pages: no row can be found
                report.advice = (
                    "--repair cannot help: the pages that list the file's tables are among the "
                    f"lost ones, so no row can be found; the file was left as it is (keep it) - "
                    f"restore {path} from a backup, or create a new state with 'ev-nav init' "
                    "in another directory"
                )
                return report
            fixed_all = _check_contents(report, state, repair=repair, network=network)
            report.repaired_all = fixed_all
            return report
        report.problems.append(exc.problem or str(exc))
        # nothing SQLite can read: there is nothing to salvage either, so --repair cannot help;
        # the file may still be the user's only copy of the data, so it is never deleted
        report.advice = (
            "--repair cannot help: SQLite reads nothing from this file, so there is nothing to "
            f"salvage; the file was left as it is (keep it) - if {path} is the right file, "
            "restore it from a backup, or create a new state with 'ev-nav init' in another "
            "directory"
        )
        return report
    damaged = _integrity_problems(path)
    if damaged:
        more = f"; and {len(damaged) - 3} more" if len(damaged) > 3 else ""
        report.problems.append(f"database damaged: {'; '.join(damaged[:3])}{more}")
        if not repair:
            return report
        report.repairs.extend(salvage_database(path))
    fixed_all = _check_contents(report, state, repair=repair, network=network)
    report.repaired_all = repair and fixed_all
    return report


def _damaged_records(store: Store) -> list[str]:
    """One line per stored record that does not read back (a value ev-nav cannot have written:
    a trip's route that is not JSON, a vehicle description that is not an object, an energy
    that is not a number), found record by record so that each is named. The rest of a batch
    (a total's route and fractions) is checked by reading the batches, with their reader."""
    problems = []
    conn = store._conn
    for row in conn.execute(f"SELECT {store._TRIP_COLUMNS} FROM trips ORDER BY id"):
        try:
            store._trip_from_row(row)
        except StateDamagedError as exc:
            problems.append(exc.problem or str(exc))
    for row in conn.execute("SELECT id, name, spec, created FROM vehicles ORDER BY id"):
        try:
            store._vehicle_from_row(row)
        except StateDamagedError as exc:
            problems.append(exc.problem or str(exc))
    for bid, seg, value in conn.execute(
        "SELECT batch_id, segment_id, energy_wh FROM observations WHERE "
        "typeof(energy_wh) NOT IN ('real', 'integer') OR abs(energy_wh) > 1e308 "
        "OR (segment_id IS NOT NULL AND typeof(segment_id) != 'integer') ORDER BY id"
    ):
        what = f"energy {value!r}" if not is_finite_number(value) else f"segment {seg!r}"
        problems.append(f"an observation of batch {bid}: {what} is not a number")
    return problems


def _integrity_problems(path: Path) -> list[str]:
    """Rows of ``PRAGMA integrity_check`` that are not ``ok`` (or why it could not run)."""
    try:
        with read_only(path) as conn:
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    # a row can hold several lines ("On tree page 75 ...\nPage 80 is never used"): one
    # problem per line, so the report's line stays one line
    return [ln.strip() for r in rows if r != "ok" for ln in r.splitlines() if ln.strip()]


def _check_contents(
    report: DoctorReport, state: str | Path, *, repair: bool, network: Path | None
) -> bool:
    """Observations, network and checkpoints; returns whether every problem was repaired."""
    from ev_nav.checkpoints import decode
    from ev_nav.energy import Vehicle
    from ev_nav.store import Store
    from ev_nav.store.state_cache import StateCache
    from ev_nav.trips.session import (
        Session,
        apply_batches,
        build_model,
        load_network_ref,
        save_checkpoint,
    )

    all_fixed = True
    with Store.open(state) as store:
        if not _check_tables(report, store, repair=repair):
            return False  # the checks below read those tables
        damaged = _damaged_records(store)
        if not damaged:
            try:  # the batches' own reader: it names the first damaged batch
                batches = store.observations()
            except StateDamagedError as exc:
                damaged.append(exc.problem or str(exc))
        if damaged:
            report.problems.extend(damaged)
            report.advice = (
                "--repair cannot restore a damaged record (ev-nav did not write it so: its "
                "value is gone); restore the state from a backup. Checkpoints and caches are "
                "checked once every record reads"
            )
            return False
        report.info.append(
            f"{plural(store.n_trips(), 'trip')}, "
            f"{plural(len(batches), 'observation batch')}, "
            f"{plural(store.n_observations(), 'observation')}"
        )
        incomplete = store._conn.execute(
            """SELECT b.id, b.trip_id FROM observation_batches b LEFT JOIN observations o
               ON o.batch_id = b.id GROUP BY b.id HAVING COUNT(o.id) != b.n_rows"""
        ).fetchall()
        # checkpoints that learned a batch whose rows are now partly lost hold readings the
        # state no longer has: a later rebuild (an undo, a dismissal) would drop them and the
        # model jump; --repair rebuilds from what is left
        lost_from: int | None = None
        if incomplete:
            trips = sorted({int(r[1]) for r in incomplete})
            lost_from = min(int(r[0]) for r in incomplete)
            report.problems.append(
                f"{plural(len(incomplete), 'observation batch')} "
                f"{'has' if len(incomplete) == 1 else 'have'} rows missing (batch "
                f"{', '.join(str(r[0]) for r in incomplete[:5])} of "
                f"{'trip' if len(trips) == 1 else 'trips'} "
                f"{', '.join(map(str, trips[:5]))}); the state cannot restore them"
            )
            if repair:
                store.settle_batch_rows([int(r[0]) for r in incomplete])
                batches = store.observations()  # what is left: the model is rebuilt from it
                report.repairs.append(
                    f"took {plural(len(incomplete), 'observation batch')} as the rows left of "
                    "them (the state cannot restore the lost readings; the damaged file, if "
                    "this repair salvaged one, is kept beside it)"
                )
            else:
                report.advice = report.advice or (
                    "--repair cannot restore missing readings: it rebuilds the model from what "
                    f"is left of those batches; if that is wrong, 'ev-nav observe {state} TRIP "
                    "--undo' forgets a trip's readings (then record them again)"
                )
                all_fixed = False
        # batches whose trip was lost (a salvage that could not read its row): kept, but no
        # model learns them (a reading needs its trip's route)
        orphans = [int(r[0]) for r in store._conn.execute(
            "SELECT b.id FROM observation_batches b LEFT JOIN trips t ON t.id = b.trip_id "
            "WHERE t.id IS NULL ORDER BY b.id")]
        if orphans:  # (the salvage that lost their trips set aside the checkpoints of them)
            report.info.append(
                f"{plural(len(orphans), 'observation batch')} of lost trips (from batch "
                f"{orphans[0]}): kept, but no model learns them"
            )
        ref = str(network.resolve()) if network is not None else store.network_ref
        try:
            net = load_network_ref(ref)
        except (EvNavError, OSError) as exc:
            report.problems.append(f"network {ref} cannot be loaded ({exc})")
            moved = ("check the path given with --network" if network is not None else
                     "if the file moved, give it with --network PATH (here and to every "
                     "command)")
            report.advice = (
                f"--repair cannot fix the network: {moved}; otherwise rebuild it with 'ev-nav "
                "network build' from the same OSM file and options. Checkpoints and caches are "
                "checked once the network loads"
            )
            return False
        recorded = store.meta().get("network_arrays_hash")
        try:
            store.check_network(net.content_hash, net.arrays_hash if recorded else None)
        except StateError as exc:
            report.problems.append(str(exc))
            report.advice = (
                "--repair cannot fix this: give the file the state was made with, with "
                "--network PATH. Checkpoints and caches are checked once the network matches"
            )
            return False
        if recorded is None:
            report.problems.append("the network's arrays hash was never recorded (older state)")
            if repair:
                store.check_network(net.content_hash, net.arrays_hash)
                report.repairs.append("recorded the network's arrays hash")
            else:
                all_fixed = False
        vehicle = Vehicle(**store.vehicle().spec)
        bad: list[int] = []
        records = store.checkpoints()
        # the state's verified derived files (a regional prior takes a minute to build at 100k
        # segments); read only when checking, and a refused file is the cache check's to report
        cache = StateCache(store.path.parent, readonly=not repair)
        for ck in records:
            why = None
            if not ck.verified:
                why = "damaged (hash mismatch)"
            elif lost_from is not None and ck.last_batch_id >= lost_from:
                why = (f"learned batch {lost_from}, whose lost readings the state no longer "
                       "holds")
            else:
                try:
                    build_model(store.model_kind, net, vehicle, cache=cache).load_state_dict(
                        decode(ck.blob))
                except EvNavError as exc:
                    why = str(exc)
                except (KeyError, TypeError, ValueError, RuntimeError) as exc:
                    why = f"does not fit this model ({exc})"
            if why is not None:
                bad.append(ck.id)
                report.problems.append(f"checkpoint {ck.id}: {why}")
        usable = len(records) - len(bad)
        report.info.append(f"{plural(len(records), 'checkpoint')}, {usable} usable")
        if bad or not records:
            if not records:
                report.problems.append("no model checkpoint")
            if repair:
                store.delete_checkpoints(bad)
                model = build_model(store.model_kind, net, vehicle, cache=cache)
                apply_batches(model, batches, store.resets())
                session = Session(store, net, vehicle, model, max([0, *(b.id for b in batches)]))
                save_checkpoint(session)
                report.repairs.append(
                    f"deleted {plural(len(bad), 'unusable checkpoint')}; rebuilt the model from "
                    f"the prior and {plural(len(batches), 'observation batch')}"
                    " and saved it"
                )
            else:
                all_fixed = False
        all_fixed &= _check_caches(report, store, repair=repair)
        all_fixed &= _check_detector(report, store, net.n_segments, repair=repair)
    return all_fixed


def _check_detector(report: DoctorReport, store: Store, n_segments: int, *,
                    repair: bool) -> bool:
    """The stored change detector: an unreadable one is replaced on ``repair`` by a fresh one
    going on after the same batch (the next observation does that too, with a notice; a
    damaged one used to switch detection off for good). Returns whether it is usable now."""
    from ev_nav.trips.changes import detector_problem, reset_detector

    why = detector_problem(store, n_segments)
    if why is None:
        return True
    report.problems.append(f"{why}; road-change detection cannot go on from it")
    if not repair:
        return False
    upto = reset_detector(store, n_segments)
    report.repairs.append(
        f"replaced the change detector with a fresh one, scoring the batches after {upto} "
        "(the flags already raised are kept)"
    )
    return True


#: Tables whose content the state can do without, so that ``--repair`` may recreate one
#: empty: the model is rebuilt from the observations, derived files are checked again, flagged
#: changes are found again by the detector. The others are the state's record (its trips,
#: readings, vehicles, metadata): empty, the state would be another one.
RECREATABLE_TABLES = frozenset({"checkpoints", "cache_files", "segment_changes",
                                "change_detector"})


def _check_tables(report: DoctorReport, store: Store, *, repair: bool) -> bool:
    """Tables the state's schema has but its file lacks (dropped by hand or by another tool):
    every command that reads one reports the state damaged. ``repair`` recreates the
    :data:`RECREATABLE_TABLES` empty; returns whether none is missing now (the other checks
    read the tables, so they run only then)."""
    from ev_nav.store.schema import schema_tables

    present = {r[0] for r in store._conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    missing = {name: sql for name, sql in schema_tables().items() if name not in present}
    if not missing:
        return True
    names = ", ".join(sorted(missing))
    report.problems.append(f"table(s) missing: {names} (what they held is gone)")
    record = sorted(set(missing) - RECREATABLE_TABLES)
    if record:
        report.advice = (
            f"--repair cannot recreate {', '.join(record)}: the state's trips, readings and "
            "vehicle are in them; restore the state from a backup"
        )
        return False
    if not repair:
        report.advice = f"'ev-nav doctor {store.path.parent} --repair' recreates them empty"
        return False
    with store._write("doctor-tables") as conn:
        for statements in missing.values():
            for sql in statements:
                conn.execute(sql)
    report.repairs.append(f"created the missing table(s) {names}, empty")
    return True


def _check_caches(report: DoctorReport, store: Store, *, repair: bool) -> bool:
    """Every file of the state's cache folder against its recorded checksum; returns whether
    every problem was repaired."""
    from ev_nav.store.caches import file_checksum
    from ev_nav.store.state_cache import StateCache

    cache = StateCache(store.path.parent)
    recorded = store.cache_checksums()
    # (dot files are unfinished writes of a killed process: never read, replaced next time)
    files = sorted(
        p for p in cache.folder.glob("*") if p.is_file() and not p.name.startswith(".")
    ) if cache.folder.is_dir() else []
    bad = []
    for path in files:
        expected = recorded.get(path.name)
        if expected is None:
            why = "was not written by this state (no checksum recorded)"
        else:
            try:
                why = None if file_checksum(path) == expected else (
                    "does not match the checksum recorded when it was written (tampered or "
                    "damaged)"
                )
            except OSError as exc:
                why = f"is unreadable ({exc.strerror})"
        if why is not None:
            bad.append(path)
            report.problems.append(f"cache file {path.name} {why}")
    report.info.append(f"{plural(len(files), 'cache file')}, {len(files) - len(bad)} verified")
    gone = [name for name in recorded if not (cache.folder / name).is_file()]
    if repair and (bad or gone):
        for path in bad:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        store.forget_cache_files([p.name for p in bad] + gone)
        if bad:
            report.repairs.append(
                f"deleted {plural(len(bad), 'cache file')} that failed verification (derived data: "
                "recomputed when next needed)"
            )
    return not bad or repair


# ----------------------------------------------------------------------------- salvage
def _truncation(path: Path) -> tuple[int, int, int] | None:
    """``(page size [bytes], whole pages the file holds, pages its header says it has)`` of an
    SQLite file cut short, else ``None`` (not SQLite's, or not shorter than its header says)."""
    try:
        with open(path, "rb") as fh:  # (read before any SQLite connection of this process)
            head = fh.read(100)
            size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return None
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    want = int.from_bytes(head[28:32], "big")
    if page_size < 512 or want == 0 or size >= page_size * want:
        return None
    return page_size, size // page_size, want


def salvage_database(path: Path, *, cut_short: tuple[int, int, int] | None = None) -> list[str]:
    """Copy every readable row of the damaged database ``path`` into a fresh file that replaces
    it; the damaged file is kept as ``<name>.damaged-<UTC time>``. Returns report lines.

    ``cut_short`` (:func:`_truncation`): the file ends before its header says; the rows are read
    from a copy of its whole pages whose header counts only those (SQLite refuses the file
    itself), the file itself kept as it is.
    """
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    fresh = path.with_name(path.name + f".salvage-{stamp}")
    kept = path.with_name(path.name + f".damaged-{stamp}")
    lines: list[str] = []
    source = path
    if cut_short is not None:
        page_size, have, _ = cut_short
        source = path.with_name(path.name + f".pages-{stamp}")
        with open(path, "rb") as src_fh, open(source, "wb") as dst_fh:
            dst_fh.write(src_fh.read(page_size * have))
            dst_fh.seek(28)
            dst_fh.write(int(have).to_bytes(4, "big"))
    try:
        with read_only(source) as src:
            _salvage_into(src, fresh, lines)
    except BaseException:
        fresh.unlink(missing_ok=True)  # half made: the damaged file stays the state's
        raise
    finally:
        if source != path:
            source.unlink(missing_ok=True)
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            os.replace(side, kept.with_name(kept.name + suffix))
    os.replace(path, kept)
    os.replace(fresh, path)
    lines.append(f"damaged file kept as {kept.name}; the state now uses the salvaged copy")
    return lines


def _salvage_into(src: sqlite3.Connection, fresh: Path, lines: list[str]) -> None:
    """Copy the schema, every readable row and the id counters of ``src`` into a new database
    at ``fresh``; appends report lines to ``lines``."""
    dst = sqlite3.connect(fresh, isolation_level=None)
    try:
        version = _safe_scalar(src, "PRAGMA user_version", 0)
        schema = src.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY type = 'index'"
        ).fetchall()
        dst.execute("BEGIN")
        for kind, _name, sql in schema:
            if kind == "table":
                dst.execute(sql)
        for kind, name, _sql in schema:
            if kind != "table":
                continue
            got, lost = _copy_table(src, dst, name)
            lines.append(
                f"table {name}: {got} rows recovered"
                + (f", {lost} unreadable (damaged pages)" if lost else "")
            )
        for kind, _name, sql in schema:
            if kind in ("index", "trigger"):
                with contextlib.suppress(sqlite3.DatabaseError):  # e.g. a now-violated unique
                    dst.execute(sql)
        lines += _keep_id_counters(src, dst)
        dst.execute(f"PRAGMA user_version = {int(version)}")
        dst.execute("COMMIT")
        dst.execute("PRAGMA journal_mode = WAL")
    finally:
        dst.close()


def _keep_id_counters(src: sqlite3.Connection, dst: sqlite3.Connection) -> list[str]:
    """Carry the damaged file's id counters (``sqlite_sequence``) into the salvaged one, and
    keep the trips' above every trip id the salvaged readings name; returns report lines.

    The counters are not a table of the schema the salvage copies: without them the next trip
    took the id of the newest lost one and inherited its readings (``observe`` then refused the
    trip as already observed, and ``history`` showed them against the new route).
    """
    counters: dict[str, int] = {}
    with contextlib.suppress(sqlite3.DatabaseError):
        counters = {str(n): int(q) for n, q in src.execute(  # a damaged row is skipped
            "SELECT name, seq FROM sqlite_sequence WHERE typeof(seq) = 'integer'").fetchall()}
    lines = []
    orphans: list[tuple[int, int]] = []
    with contextlib.suppress(sqlite3.DatabaseError):  # a table the damaged file lacked
        orphans = dst.execute(
            "SELECT b.id, b.trip_id FROM observation_batches b "
            "LEFT JOIN trips t ON t.id = b.trip_id WHERE t.id IS NULL ORDER BY b.id").fetchall()
    if orphans:
        counters["trips"] = max(counters.get("trips", 0), max(t for _, t in orphans))
        trips = ", ".join(str(t) for t in sorted({t for _, t in orphans}))
        lines.append(
            f"{len(orphans)} observation batch(es) belong to lost trips ({trips}): kept in the "
            "state, but no model learns them (a reading needs its trip's route); new trips are "
            "numbered after them"
        )
        # the checkpoints that learned them: they hold readings no rebuild has, so the
        # predictions jumped at the next rebuild (an undo, a dismissal); set aside, the model
        # is rebuilt from what the state's trips have
        with contextlib.suppress(sqlite3.DatabaseError):
            gone = dst.execute("DELETE FROM checkpoints WHERE last_batch_id >= ?",
                               (int(orphans[0][0]),)).rowcount
            if gone:
                lines.append(f"{gone} checkpoint(s) had learned them: deleted (the model is "
                             "rebuilt without them)")
    for name, seq in counters.items():
        current = dst.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (name,)).fetchone()
        if current is None:
            dst.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, seq))
        elif int(current[0]) < seq:
            dst.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (seq, name))
    return lines


def _safe_scalar(conn: sqlite3.Connection, sql: str, default: int) -> int:
    try:
        return int(conn.execute(sql).fetchone()[0])
    except (sqlite3.DatabaseError, TypeError):
        return default


def _copy_table(src: sqlite3.Connection, dst: sqlite3.Connection, name: str) -> tuple[int, int]:
    """Copy ``name``'s readable rows; returns (rows copied, rowids known but unreadable)."""
    cols = [r[1] for r in src.execute(f'PRAGMA table_info("{name}")').fetchall()]
    marks = ", ".join("?" * len(cols))
    insert = f'INSERT OR IGNORE INTO "{name}" ({", ".join(cols)}) VALUES ({marks})'
    try:
        rows = src.execute(f'SELECT {", ".join(cols)} FROM "{name}"').fetchall()
        dst.executemany(insert, rows)
        return len(rows), 0
    except sqlite3.DatabaseError:
        pass
    # A scan stops at the first damaged page; look rows up one by one instead (through any
    # intact path of the b-tree) up to the largest id the table has handed out.
    top = max(
        _safe_scalar(src, f"SELECT seq FROM sqlite_sequence WHERE name = '{name}'", 0),
        _safe_scalar(src, f'SELECT MAX(rowid) FROM "{name}"', 0),
    )
    got = lost = 0
    select = f'SELECT {", ".join(cols)} FROM "{name}" WHERE rowid = ?'
    for rowid in range(1, top + 1):
        try:
            row = src.execute(select, (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            lost += 1
            continue
        if row is not None:
            dst.execute(insert, row)
            got += 1
    return got, lost


# ----------------------------------------------------------------------------- CLI
def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``doctor``."""
    p = subparsers.add_parser(
        "doctor", help="check a state (database, checkpoints, network) and repair it"
    )
    p.add_argument("state", type=state_arg, help="state directory")
    p.add_argument(
        "--repair",
        action="store_true",
        help="salvage a damaged database, replace unusable checkpoints (never deletes data)",
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.set_defaults(func=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    report = check_state(args.state, repair=args.repair, network=args.network)
    for line in report.info:
        print(f"  {line}")
    for line in report.problems:
        print(f"problem: {line}")
    for line in report.repairs:
        print(f"repaired: {line}")
    if not report.problems:
        print(f"{args.state}: healthy")
        return 0
    if args.repair and report.repaired_all:
        print(f"{args.state}: repaired")
        return 0
    if report.advice is not None:
        print(report.advice)
    elif not args.repair:
        print(f"run 'ev-nav doctor {args.state} --repair' to fix what can be fixed")
    return 1
