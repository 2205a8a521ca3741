"""Experiment grids: many independent runs, executed in-process, on a local pool, or on Dask.

Each run is deterministic from its :class:`~ev_nav.sim.fleet.RunSpec` and writes its own folder
``<out>/runs/<run_id>/``; a finished run (``trips.csv`` present) is skipped on resume, a half-
finished one continues from its checkpoint, and a run that raises leaves ``error.txt`` with the
traceback without stopping the others. Afterwards :func:`aggregate` concatenates everything into
one table.

Workers build each road network once (``fleet.load_network`` memoises per process) and receive
only the small run specs, never networks or kernel factors.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ev_nav import settings
from ev_nav.errors import ConfigError, StateError
from ev_nav.provenance import atomic_write_json, atomic_write_text, run_metadata
from ev_nav.sim.fleet import RunSpec, adopt_legacy_run, read_trips_csv, run_dir_for, run_one


@dataclass
class RunOutcome:
    """What happened to one run of a grid."""

    run_id: str
    status: str  # "done", "skipped" (already finished), "failed"
    seconds: float = 0.0
    error: str | None = None


@dataclass
class GridResult:
    """Summary of a grid execution."""

    out_dir: Path
    outcomes: list[RunOutcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def _limit_threads(n_threads: int) -> None:
    """Cap BLAS/OpenMP/torch threads in a worker so workers do not oversubscribe the cores."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(n_threads)
    try:
        import torch

        torch.set_num_threads(n_threads)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass


def _worker_init(n_threads: int) -> None:
    """A worker process's set-up: Ctrl-C is the parent's to handle (the whole process group gets
    it; a worker interrupted inside the pool's queues deadlocked the pool, and one interrupted
    inside a run wrote a false error.txt), and its threads are capped."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_threads(n_threads)


def _stop_processes(processes: Iterable[Any]) -> None:
    """Terminate worker processes and wait for them (a run's files are written atomically and
    it resumes from its last checkpoint, so a run cut short loses only its last rounds)."""
    processes = list(processes)
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)


class _DeferredInterrupt:
    """Ctrl-C (and SIGTERM) turned into a flag that the pool's loop checks between waits.

    A KeyboardInterrupt raised wherever the parent happened to be can leave it inside
    ``concurrent.futures`` holding a lock that the pool's management thread needs, and the
    interpreter then waits at exit for that thread for good (the hazard of any asynchronous
    exception). With the flag the interrupt is raised at one known point, with no lock held.
    A second Ctrl-C raises at once. Installed only in the main thread over Python's default
    handler: an ignored SIGINT (a background job) or a caller's own handler is kept.

    SIGTERM (what ``timeout``, ``kill`` and job schedulers send, to the parent alone) is taken
    as a Ctrl-C where its handler is the default: the default ended the parent at once, and its
    workers ran on as orphans, writing into the output folder, until killed by hand.
    """

    #: how often the loop looks at the flag [s]
    POLL_S = 0.2

    def __init__(self) -> None:
        self.pending = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handle)
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def _handle(self, signum: int, frame: object) -> None:
        if self.pending:
            raise KeyboardInterrupt
        self.pending = True

    def check(self) -> None:
        """Raise the deferred KeyboardInterrupt, if Ctrl-C came."""
        if self.pending:
            raise KeyboardInterrupt


def _completed(futures: Iterable[Future], interrupt: _DeferredInterrupt) -> Iterator[Future]:
    """``as_completed`` that raises a deferred Ctrl-C between its waits."""
    pending = set(futures)
    while pending:
        interrupt.check()
        done, pending = wait(pending, timeout=interrupt.POLL_S, return_when=FIRST_COMPLETED)
        yield from done
        interrupt.check()


@contextlib.contextmanager
def limited_threads(n_threads: int = 1) -> Iterator[None]:
    """Run torch (intra-op) and the BLAS/OpenMP pools on ``n_threads`` inside the block."""
    # scipy.linalg brings its own OpenBLAS, loaded on first import: load it before limiting,
    # or a run that first touches it inside the block gets a 2-thread BLAS (on a busy 2-core
    # machine a 200×200 Cholesky then took 0.5–1 s instead of 0.3 ms)
    import scipy.linalg  # noqa: F401
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(n_threads)
    try:
        with threadpool_limits(n_threads):
            yield
    finally:
        torch.set_num_threads(before)


def execute_run(
    spec: RunSpec, out_dir: str, checkpoint_every: int = 50, resume: bool = True
) -> RunOutcome:
    """Run one spec into ``out_dir/runs/<run_id>`` and report; never raises (errors recorded)."""
    run_dir = run_dir_for(out_dir, spec.run_id)
    if resume:
        try:
            adopt_legacy_run(out_dir, spec)
        except Exception as exc:  # this run fails, not the grid
            # reported without making the run's folder: a later resume tries the adoption again
            # (with the folder there it would start the run over beside the old one)
            return RunOutcome(spec.run_id, "failed", 0.0, f"{type(exc).__name__}: {exc}")
    if resume and (run_dir / "trips.csv").is_file():
        return RunOutcome(spec.run_id, "skipped")
    t0 = time.perf_counter()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "error.txt").unlink(missing_ok=True)
        # Every run single-threaded, whatever executor runs it: BLAS/LAPACK results depend on
        # the thread count in the last bits, and a grid must give identical numbers in-process,
        # on a pool or on Dask.
        with limited_threads():
            run_one(
                spec,
                run_dir,
                resume=resume,
                checkpoint_every=checkpoint_every,
                truth_cache=settings.truth_cache_dir(out_dir),
            )
    except Exception as exc:  # one failing run must not stop the grid
        text = "".join(traceback.format_exception(exc))
        atomic_write_text(run_dir / "error.txt", text)
        return RunOutcome(
            spec.run_id, "failed", time.perf_counter() - t0, f"{type(exc).__name__}: {exc}"
        )
    return RunOutcome(spec.run_id, "done", time.perf_counter() - t0)


# ----------------------------------------------------------------------------- executors
class Executor:
    """Runs :func:`execute_run` over specs and yields outcomes as they finish."""

    name = "base"

    def map(
        self, specs: Sequence[RunSpec], out_dir: str, checkpoint_every: int, resume: bool
    ) -> Iterable[RunOutcome]:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers."""


RunTask = Callable[[Any, str, int, bool], RunOutcome]


class InProcessExecutor(Executor):
    """Sequential, in this process (debugging; exceptions keep their full context in error.txt).

    ``task`` is what runs per spec (default :func:`execute_run`), as for the other executors.
    """

    name = "inprocess"

    def __init__(self, task: RunTask | None = None) -> None:
        self.task: RunTask = task or execute_run

    def map(self, specs, out_dir, checkpoint_every, resume):
        for spec in specs:
            yield self.task(spec, out_dir, checkpoint_every, resume)


class LocalPoolExecutor(Executor):
    """A process pool over the local cores, each worker capped at ``cores // workers`` threads.

    A worker process that dies (killed, out of memory, a crash in compiled code) breaks a
    ``ProcessPoolExecutor`` and with it every run still in the pool. So the runs lost that way run
    again, each in a process of its own (resuming from their checkpoints): the one whose process
    dies again is recorded as failed with how it died; the others finish.

    Parameters
    ----------
    workers : int, optional
        Worker processes (default: the number of cores).
    task : callable, optional
        What a worker runs per spec (default :func:`execute_run`); a module-level function with
        its signature. Other experiments (the BO families) run their own specs this way; also
        used for instrumentation and fault-injection tests.
    """

    name = "local"

    def __init__(self, workers: int | None = None, task: RunTask | None = None) -> None:
        cores = os.cpu_count() or 1
        self.workers = max(1, workers or cores)
        self.threads = max(1, cores // self.workers)
        self.task: RunTask = task or execute_run

    def map(self, specs, out_dir, checkpoint_every, resume):
        with _DeferredInterrupt() as interrupt:
            yield from self._map(specs, out_dir, checkpoint_every, resume, interrupt)

    def _map(self, specs, out_dir, checkpoint_every, resume, interrupt: _DeferredInterrupt):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # fork after torch has threads is unsafe
        lost: list[RunSpec] = []
        pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=ctx,
            initializer=_worker_init,
            initargs=(self.threads,),
        )
        try:
            futures: dict[Future, RunSpec] = {
                pool.submit(self.task, spec, out_dir, checkpoint_every, resume): spec
                for spec in specs
            }
            for fut in _completed(futures, interrupt):
                spec = futures[fut]
                try:
                    yield fut.result()
                except BrokenProcessPool:
                    lost.append(spec)
                except Exception as exc:  # e.g. the spec or outcome could not be pickled
                    yield _record_failure(spec, out_dir, f"{type(exc).__name__}: {exc}")
        except BaseException:
            # Ctrl-C (or a consumer that stopped): waiting for the pool's pending runs, as
            # leaving its 'with' block did, hung for good after 'interrupted' was printed
            workers = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            _stop_processes(workers)
            raise
        pool.shutdown(wait=True)
        if lost:
            from concurrent.futures import ThreadPoolExecutor

            # One process per lost run, up to `workers` at a time: a process that dies now can
            # only take its own run with it.
            children: list[Any] = []
            threads = ThreadPoolExecutor(max_workers=self.workers)
            try:
                jobs = [
                    threads.submit(self._alone, ctx, spec, out_dir, checkpoint_every, children)
                    for spec in lost
                ]
                for job in _completed(jobs, interrupt):
                    yield job.result()
            except BaseException:
                threads.shutdown(wait=False, cancel_futures=True)
                _stop_processes(children)  # their threads then return
                raise
            threads.shutdown(wait=True)

    def _alone(self, ctx, spec: RunSpec, out_dir: str, checkpoint_every: int,
               children: list[Any]) -> RunOutcome:
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_run_in_child,
            args=(send, self.task, self.threads, spec, out_dir, checkpoint_every),
        )
        t0 = time.perf_counter()
        proc.start()
        children.append(proc)
        send.close()
        outcome = None
        try:
            outcome = receive.recv()
        except EOFError:  # the child died before it could answer
            pass
        proc.join()
        if outcome is not None:
            return outcome
        code = proc.exitcode
        how = (
            f"killed by signal {-code} ({signal.Signals(-code).name})"
            if code is not None and code < 0
            else f"exited with code {code}"
        )
        return _record_failure(
            spec,
            out_dir,
            f"WorkerDied: the worker process running this run {how}, in the pool and again when "
            "the run was retried alone",
            seconds=time.perf_counter() - t0,
        )


def _run_in_child(send, task: RunTask, threads: int, spec, out_dir, checkpoint_every) -> None:
    _worker_init(threads)
    send.send(task(spec, out_dir, checkpoint_every, True))
    send.close()


def _record_failure(spec: RunSpec, out_dir: str, error: str, seconds: float = 0.0) -> RunOutcome:
    """A failed outcome whose ``error.txt`` exists and says what really happened."""
    run_dir = run_dir_for(out_dir, spec.run_id)
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "error.txt", error + "\n")
    return RunOutcome(spec.run_id, "failed", seconds, error)


class DaskExecutor(Executor):
    """Dask distributed: an existing scheduler (``tcp://host:port``) or a new LocalCluster.

    ``task`` is what runs per spec (default :func:`execute_run`), as for the other executors.
    """

    name = "dask"

    def __init__(
        self,
        scheduler: str | None = None,
        local_workers: int | None = None,
        task: RunTask | None = None,
    ) -> None:
        self.task: RunTask = task or execute_run
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - dev extra
            raise ConfigError(
                "the Dask executor needs 'dask[distributed]' (pip install 'dask[distributed]')"
            ) from exc
        self._cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout="10s")
            except OSError as exc:
                raise ConfigError(f"cannot connect to Dask scheduler {scheduler}: {exc}") from None
        else:
            n = max(1, local_workers or (os.cpu_count() or 1))
            cores = os.cpu_count() or 1
            self._cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                env={"OMP_NUM_THREADS": str(max(1, cores // n))},
            )
            self.client = Client(self._cluster)
        self.client.run(_limit_threads, 1)

    def map(self, specs, out_dir, checkpoint_every, resume):
        from dask.distributed import as_completed as dask_completed

        futures = [
            self.client.submit(
                self.task, spec, out_dir, checkpoint_every, resume, pure=False, key=spec.run_id
            )
            for spec in specs
        ]
        for fut in dask_completed(futures):
            try:
                yield fut.result()
            except Exception as exc:
                yield RunOutcome(str(fut.key), "failed", error=repr(exc))

    def close(self) -> None:
        self.client.close()
        if self._cluster is not None:
            self._cluster.close()


def make_executor(
    kind: str = "local",
    *,
    workers: int | None = None,
    dask_scheduler: str | None = None,
    dask_local: int | None = None,
    task: RunTask | None = None,
) -> Executor:
    """Executor by name: ``inprocess``, ``local`` (default) or ``dask``.

    ``task`` replaces :func:`execute_run` as what runs per spec (specs then need only a
    ``run_id``); the BO families use it to run their own experiments on these executors.
    """
    if kind == "inprocess":
        return InProcessExecutor(task)
    if kind == "local":
        return LocalPoolExecutor(workers, task)
    if kind == "dask":
        return DaskExecutor(dask_scheduler, dask_local, task)
    raise ConfigError(f"unknown executor {kind!r}; use inprocess, local or dask")


# ----------------------------------------------------------------------------- the grid
def run_grid(
    specs: Sequence[RunSpec],
    out_dir: str | Path,
    *,
    executor: Executor | None = None,
    resume: bool = True,
    checkpoint_every: int = 50,
    progress: bool = True,
    on_outcome: Callable[[RunOutcome], None] | None = None,
    config: Any = None,
) -> GridResult:
    """Execute every run of a grid and aggregate the results into ``out_dir``.

    Writes ``out_dir/runs/<run_id>/…`` per run, then ``results.csv`` (all trips),
    ``summary.csv`` (final cumulative regret per network/route/agent: mean, SE, n) and
    ``grid.json`` (config, seeds, versions, outcomes).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = [s.run_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ConfigError("the grid contains duplicate runs (identical specs)")
    executor = executor or LocalPoolExecutor()
    result = GridResult(out_dir=out)
    t0 = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(specs), desc=f"grid ({executor.name})", unit="run")
    try:
        for outcome in executor.map(list(specs), str(out), checkpoint_every, resume):
            result.outcomes.append(outcome)
            if on_outcome is not None:
                on_outcome(outcome)
            if bar is not None:
                bar.update(1)
                if outcome.status == "failed":
                    bar.write(f"run {outcome.run_id} failed: {outcome.error}")
    finally:
        if bar is not None:
            bar.close()
        executor.close()
    result.seconds = time.perf_counter() - t0
    done_ids = [o.run_id for o in result.outcomes if o.status != "failed"]
    aggregate(out, done_ids)
    atomic_write_json(
        out / "grid.json",
        run_metadata(
            config if config is not None else [s for s in specs],
            seeds=sorted({s.seed for s in specs}),
            executor=executor.name,
            wall_seconds=result.seconds,
            outcomes=[o.__dict__ for o in result.outcomes],
        ),
    )
    return result


def _read_trips(path: Path):
    """A finished run's ``trips.csv``; one written by ev-nav is complete (atomic write), so one
    that is not was damaged behind its back: a StateError naming it and what to do, instead of a
    pandas traceback or a run silently left out of the report."""
    import pandas as pd

    from ev_nav.sim.fleet import RESULT_COLUMNS, TEXT_COLUMNS

    try:
        df = read_trips_csv(path)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError,
            ValueError) as exc:  # ValueError: a word in a number column
        why = str(exc).strip().splitlines()[0]
    else:
        missing = [c for c in RESULT_COLUMNS if c not in df.columns]
        if missing:
            why = f"no column {', '.join(missing)}"
        elif df.empty:
            why = "no trip"
        elif df[list(RESULT_COLUMNS)].isna().to_numpy().any():  # every value is written
            why = "a row is incomplete"
        elif words := [c for c in RESULT_COLUMNS if c not in TEXT_COLUMNS
                       and not pd.api.types.is_numeric_dtype(df[c])]:
            why = f"a word where a number belongs, in column {words[0]}"
        else:
            return df
    raise StateError(
        f"{path} is damaged ({why}); delete {path.parent} and run the grid again with --resume"
    )


def aggregate(
    out_dir: str | Path, run_ids: Sequence[str] | None = None, *, distinct: bool = False
):
    """Concatenate run results into ``results.csv`` and write ``summary.csv``; returns both.

    Cumulative regret is summed over trips in (round, vehicle) order within each run; the summary
    gives the final cumulative regret per (network, route, agent): mean, standard error (NaN
    for a single run), runs.
    Runs that share a network, route, agent and seed (a sweep's, whose labels do not name what
    it varies) are averaged there as runs; with ``distinct`` they are refused instead, naming
    two of them (``fleet report`` of a folder that also holds an edited config's runs).
    """
    import pandas as pd

    out = Path(out_dir)
    runs_dir = out / "runs"
    if run_ids is None:
        paths = sorted(runs_dir.glob("*/trips.csv"))
    else:
        paths = [runs_dir / r / "trips.csv" for r in sorted(run_ids)]
        paths = [p for p in paths if p.is_file()]
    if not paths:
        empty = pd.DataFrame()
        return empty, empty
    df = pd.concat([_read_trips(p) for p in paths], ignore_index=True)
    df = df.sort_values(["run_id", "t", "vehicle"], kind="stable").reset_index(drop=True)
    df["cum_regret_wh"] = df.groupby("run_id")["regret_wh"].cumsum()
    final = df.groupby(["network", "route", "agent", "seed", "run_id"], as_index=False)[
        "cum_regret_wh"
    ].last()
    shared = final[final.duplicated(["network", "route", "agent", "seed"], keep=False)]
    if distinct and len(shared):  # e.g. the runs of an edited config beside the old ones
        first = shared.iloc[0]
        ids = shared[(shared[["network", "route", "agent", "seed"]]
                      == first[["network", "route", "agent", "seed"]]).all(axis=1)]["run_id"]
        raise ConfigError(
            f"{out}: runs {' and '.join(ids)} have the same network, route, agent and seed "
            f"({first['network']}, {first['route']}, {first['agent']}, seed {first['seed']}), so "
            "the tables would merge them; move one of them to another folder (or name the "
            "configs' tables apart) and report again"
        )
    summary = (
        final.groupby(["network", "route", "agent"])["cum_regret_wh"]
        .agg(["mean", "std", "count"])
        .reset_index()
    )
    # one run: no SE (NaN, an empty field in summary.csv), not 0, which read as certainty
    summary["se"] = summary["std"] / summary["count"] ** 0.5
    summary = summary.rename(columns={"mean": "final_cum_regret_mean", "count": "runs"})
    summary = summary[["network", "route", "agent", "final_cum_regret_mean", "se", "runs"]]
    from ev_nav.provenance import atomic_path

    with atomic_path(out / "results.csv") as tmp:
        df.to_csv(tmp, index=False)
    with atomic_path(out / "summary.csv") as tmp:
        summary.to_csv(tmp, index=False)
    return df, summary
