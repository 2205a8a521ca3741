"""Experiments as independent runs on the fleet grids' executors, with one result format.

A family's experiment is a list of :class:`Job` objects (one seed of one method on one problem,
say). :func:`run_jobs` executes them with an executor of :mod:`ev_nav.sim.grid` — a local process
pool by default, Dask when asked, or in-process — each into ``<out>/runs/<run_id>/``:

* ``results.csv`` — the run's rows (one per evaluation), written last, so its presence marks a
  finished run; a resumed experiment skips it;
* ``info.json`` — per-run facts for the manifest (seconds, problem notes, the recommendation).

The family then concatenates the runs in job order and writes the experiment's own
``results.csv`` and ``manifest.json`` (config, seeds, package versions, git commit, executor,
wall time, per-run facts, summary) with :func:`write_results`; :func:`read_results` reads them
back. Every run is single-threaded, so results do not depend on the executor.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ev_nav.errors import ConfigError, EvNavError
from ev_nav.provenance import atomic_path, atomic_write_json, run_metadata, to_jsonable
from ev_nav.sim.fleet import run_dir_for
from ev_nav.sim.grid import Executor, RunOutcome, make_executor

RESULTS = "results.csv"
MANIFEST = "manifest.json"
_INFO = "info.json"


class RunFailed(EvNavError, RuntimeError):
    """One or more runs of an experiment raised; their tracebacks are in ``error.txt``."""


@dataclass
class RunRecord:
    """What one run produced: its rows and the facts that go into the manifest."""

    rows: pd.DataFrame
    info: dict[str, Any] = field(default_factory=dict)


#: A run: module-level function (pickled by reference into worker processes) and its arguments.
RunTask = Callable[..., RunRecord]


@dataclass(frozen=True)
class Job:
    """One independent run of an experiment.

    Attributes
    ----------
    run_id
        Unique, file-name-safe id; the run's folder is ``<out>/runs/<run_id>``.
    task
        Module-level function returning a :class:`RunRecord`.
    args
        Its arguments (small and picklable: configs and names, never models).
    key
        What makes the run, where the arguments do not say it (a user objective's code, not
        its ``module:function`` name): hashed instead of ``args`` when given.
    """

    run_id: str
    task: RunTask
    args: tuple[Any, ...] = ()
    key: Any = None

    @property
    def fingerprint(self) -> str:
        """A hash of the task and what makes the run (``key``, else its arguments): a resumed
        run must have been made by the same."""
        return self._hash(self.args if self.key is None else self.key)

    @property
    def argument_fingerprint(self) -> str:
        """The hash of the task and its arguments alone (what earlier versions recorded)."""
        return self._hash(self.args)

    def _hash(self, made_of: Any) -> str:
        what = [f"{self.task.__module__}.{self.task.__qualname__}", to_jsonable(made_of)]
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def execute_job(
    job: Job, out_dir: str, checkpoint_every: int = 0, resume: bool = True
) -> RunOutcome:
    """Run one job into ``out_dir/runs/<run_id>``; never raises (errors go to ``error.txt``).

    The signature is the grid executors' task protocol (``checkpoint_every`` is unused: a BO run
    restarts from scratch, and runs are small).
    """
    run_dir = run_dir_for(out_dir, job.run_id)
    if resume and (run_dir / RESULTS).is_file():
        return RunOutcome(job.run_id, "skipped")
    t0 = time.perf_counter()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "error.txt").unlink(missing_ok=True)
        record = job.task(*job.args)
        atomic_write_json(run_dir / _INFO, {**record.info, "fingerprint": job.fingerprint})
        write_table(run_dir / RESULTS, record.rows)
    except Exception as exc:  # one failing run must not stop the others
        with atomic_path(run_dir / "error.txt") as tmp:
            tmp.write_text("".join(traceback.format_exception(exc)), encoding="utf-8")
        return RunOutcome(
            job.run_id, "failed", time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
        )
    return RunOutcome(job.run_id, "done", time.perf_counter() - t0)


@dataclass(frozen=True)
class ExecutionConfig:
    """Where and how an experiment's runs execute.

    Attributes
    ----------
    executor
        ``"local"`` (process pool, the default), ``"dask"`` or ``"inprocess"``.
    workers
        Local pool size (default: the number of cores).
    dask_scheduler
        Address of an existing Dask scheduler (default: a new local cluster).
    resume
        Skip runs whose ``results.csv`` exists.
    """

    executor: str = "local"
    workers: int | None = None
    dask_scheduler: str | None = None
    resume: bool = True

    def make(self) -> Executor:
        return make_executor(
            self.executor,
            workers=self.workers,
            dask_scheduler=self.dask_scheduler,
            dask_local=self.workers,
            task=execute_job,
        )


@dataclass
class Execution:
    """The runs of an experiment, read back in job order."""

    records: list[RunRecord]
    outcomes: list[RunOutcome]
    seconds: float
    executor: str


def run_jobs(
    jobs: Sequence[Job],
    out_dir: str | Path | None,
    execution: ExecutionConfig | None = None,
    *,
    progress: bool = False,
    family: str | None = None,
) -> Execution:
    """Execute ``jobs`` and return their records in job order.

    Without ``out_dir`` the runs go to a temporary folder (nothing is kept). With ``family``
    (a key of :data:`COMMANDS`), an ``out_dir`` holding another command's results is refused
    before anything runs (:func:`check_output_folder`). Raises :class:`RunFailed` naming every
    failed run and its ``error.txt``.
    """
    ids = [j.run_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ConfigError("the experiment contains duplicate runs")
    if out_dir is not None and family is not None:
        check_output_folder(out_dir, family)
    ex = execution or ExecutionConfig()
    with _OutputFolder(out_dir) as out:
        if ex.resume:
            _check_resumable(jobs, out)
        executor = ex.make()
        t0 = time.perf_counter()
        outcomes: list[RunOutcome] = []
        bar = None
        if progress:
            from tqdm.auto import tqdm  # only when a bar is shown

            bar = tqdm(total=len(jobs), desc=f"runs ({executor.name})", unit="run")
        try:
            for outcome in executor.map(list(jobs), str(out), 0, ex.resume):
                outcomes.append(outcome)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
            executor.close()
        failed = [o for o in outcomes if o.status == "failed"]
        if failed:
            where = run_dir_for(out, failed[0].run_id) / "error.txt"
            raise RunFailed(
                f"{len(failed)} of {len(jobs)} runs failed (first: {failed[0].run_id}: "
                f"{failed[0].error}; traceback in {where})"
            )
        records = [_read_run(run_dir_for(out, j.run_id)) for j in jobs]
        return Execution(records, outcomes, time.perf_counter() - t0, executor.name)


#: The command that writes each family's experiment folder (the ``family`` of a manifest).
COMMANDS = {
    "cvs": "ev-nav bo cvs run",
    "ucvs": "ev-nav bo ucvs run",
    "ptr": "ev-nav bo ptr run",
    "boke": "ev-nav bo boke run",
    "ptr-ev": "ev-nav bo ptr-ev",
}


def manifest_family(meta: Any) -> str | None:
    """The family (a key of :data:`COMMANDS`) whose experiment wrote the manifest ``meta``.

    Manifests name it (``family``); those written before they did are recognised by their
    config's shape, the keys each family's ``report`` requires. ``None``: none of them.
    """
    if not isinstance(meta, dict):
        return None
    if meta.get("family") in COMMANDS:
        return str(meta["family"])
    config = meta.get("config")

    def has(c: Any, *keys: str) -> bool:
        return isinstance(c, dict) and all(k in c for k in keys)

    if has(config, "budget", "costs", "benchmark", "setting") and config["setting"] in COMMANDS:
        return str(config["setting"])
    if has(config, "benchmarks", "methods", "varsigma"):
        return "boke"
    if isinstance(config, list) and config and all(
        has(c, "benchmark", "method", "iterations") for c in config
    ):
        return "ptr"
    if has(config, "reserve_kwh", "alpha", "iterations"):
        return "ptr-ev"
    return None


def check_output_folder(out_dir: str | Path, family: str) -> None:
    """Refuse an output folder whose ``manifest.json`` another command (or family) wrote.

    Writing there would replace that experiment's ``results.csv`` and ``manifest.json`` and
    leave its figures beside results they do not describe; the same family's folder is
    accepted (more seeds or methods reuse its finished runs).

    Raises
    ------
    ConfigError
        ``out_dir`` holds a manifest of another family, or one no family wrote.
    """
    manifest = Path(out_dir) / MANIFEST
    if not manifest.is_file():
        return
    try:
        other = manifest_family(json.loads(manifest.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        other = None
    if other == family:
        return
    what = (f"the results of '{COMMANDS[other]}'" if other is not None
            else f"a {MANIFEST} that no 'ev-nav bo' experiment wrote")
    raise ConfigError(
        f"{out_dir} holds {what}; '{COMMANDS[family]}' would replace them: use another "
        "output folder"
    )


def _check_resumable(jobs: Sequence[Job], out: Path) -> None:
    """Refuse to resume over finished runs that another configuration made."""
    for job in jobs:
        info = run_dir_for(out, job.run_id) / _INFO
        if (info.parent / RESULTS).is_file() and info.is_file():
            made_by = json.loads(info.read_text(encoding="utf-8")).get("fingerprint")
            if made_by != job.fingerprint:
                why = ("a run of another configuration, or of your objective before it was "
                       "edited" if job.key is not None else "a run of another configuration")
                if job.key is not None and made_by == job.argument_fingerprint:
                    why = ("a run of an earlier ev-nav, which did not record your objective's "
                           "code, so it cannot be checked to be the same")
                raise ConfigError(
                    f"{info.parent} holds {why}; use another output folder or --no-resume to "
                    "recompute"
                )


class _OutputFolder:
    """``out_dir`` as a :class:`Path`, or, when it is ``None``, a temporary folder removed on
    exit unless runs failed (:class:`RunFailed` names the ``error.txt`` of one inside it)."""

    def __init__(self, out_dir: str | Path | None) -> None:
        self._temporary = out_dir is None
        self.path = Path(tempfile.mkdtemp(prefix="ev-nav-bo-") if out_dir is None else out_dir)

    def __enter__(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        return self.path

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if self._temporary and not (exc_type is not None and issubclass(exc_type, RunFailed)):
            shutil.rmtree(self.path, ignore_errors=True)


def _read_run(run_dir: Path) -> RunRecord:
    info = json.loads((run_dir / _INFO).read_text(encoding="utf-8"))
    info.pop("fingerprint", None)
    return RunRecord(read_table(run_dir / RESULTS), info)


def write_table(path: str | Path, table: pd.DataFrame) -> None:
    """Write a table as CSV atomically; floats round-trip exactly, missing values as ``NaN``.

    Missing numbers are written as ``NaN`` (not as an empty field) so that :func:`read_table`
    can keep empty *strings* (e.g. a policy without phases) distinct from missing numbers.
    """
    with atomic_path(path, suffix=".csv") as tmp:
        table.to_csv(tmp, index=False, na_rep="NaN")


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a table written by :func:`write_table`."""
    return pd.read_csv(path, keep_default_na=False, na_values=["NaN"])


# ------------------------------------------------------------------------ the result format
def write_results(
    out_dir: str | Path,
    table: pd.DataFrame,
    config: Any,
    seeds: Sequence[int],
    *,
    execution: Execution | None = None,
    runs: Mapping[str, Any] | None = None,
    family: str | None = None,
    **extra: Any,
) -> dict[str, Path]:
    """Write the experiment's ``results.csv`` and ``manifest.json`` (atomically).

    The manifest holds the config, the seeds, package versions, the git commit, the executor
    and wall time, per-run facts (``runs``), the ``family`` that wrote it (a key of
    :data:`COMMANDS`, when given) and any ``extra`` entries (a summary, references).

    Raises
    ------
    ConfigError
        With ``family``: ``out_dir`` holds another command's results
        (:func:`check_output_folder`); nothing is written.
    """
    out = Path(out_dir)
    if family is not None:
        check_output_folder(out, family)
        extra = {"family": family, **extra}
    out.mkdir(parents=True, exist_ok=True)
    paths = {"results": out / RESULTS, "manifest": out / MANIFEST}
    write_table(paths["results"], table)
    meta: dict[str, Any] = {"runs": to_jsonable(runs or {})}
    if execution is not None:
        meta.update(
            executor=execution.executor,
            wall_seconds=execution.seconds,
            outcomes={o.run_id: o.status for o in execution.outcomes},
        )
    atomic_write_json(paths["manifest"], run_metadata(config, seeds=list(seeds), **meta, **extra))
    return paths


def read_results(
    path: str | Path,
    family: str | None = None,
    config_keys: Sequence[str] = (),
    columns: Sequence[str] = (),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``results.csv`` and ``manifest.json`` of an experiment folder (or of its CSV file).

    ``family``, where given, names the command whose folder this must be (``"boke"``); its
    config (each of them, for a list) must have ``config_keys`` and its table ``columns``, so
    that another family's folder is refused by name rather than failing on the first key it
    lacks.
    """
    p = Path(path)
    folder = p.parent if p.suffix == ".csv" else p
    csv, manifest = folder / RESULTS, folder / MANIFEST
    if not csv.is_file() or not manifest.is_file():
        raise ConfigError(f"no results in {folder} (need {RESULTS} and {MANIFEST} from a run)")
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
        table = read_table(csv)
    except (ValueError, pd.errors.ParserError) as exc:
        raise ConfigError(f"{folder} does not hold readable BO results ({exc})") from None
    if family is None:
        return table, meta
    config = meta.get("config") if isinstance(meta, dict) else None
    configs = config if isinstance(config, list) else [config]
    missing = [c for c in columns if c not in table.columns]
    if (not configs or not isinstance(meta.get("runs"), dict) or missing or not all(
            isinstance(c, dict) and all(k in c for k in config_keys) for c in configs)):
        raise ConfigError(f"{folder} holds no results of 'ev-nav bo {family} run' (its manifest "
                          "or table has another shape); give a folder that command wrote")
    return table, meta
