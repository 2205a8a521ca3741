"""The fleet service behind ``ev-nav serve``: one network and one learned model in memory, many
vehicles asking for routes and posting what their trips cost.

Every operation runs on the driver library (:mod:`ev_nav.trips`): :func:`plan_trip`,
:func:`record_total` / :func:`record_segments` with their plausibility checks,
:func:`forget_trip`, :func:`arrival_forecast`. There is no second copy of the trip logic.

How many vehicles are served at once
------------------------------------
* **Readers use immutable snapshots.** A route request takes the current :class:`Snapshot` (one
  reference read) and plans on it: a copy of the model as of some observation batch, with its
  marginal posterior computed before it was published. Nothing ever updates a published
  snapshot, so a route is planned on one consistent model state even while observations arrive.
  Models keep lazy caches (kernel columns), so each call on a snapshot's model holds the
  snapshot's own lock, for that call only (not across a request's store transaction); the
  writer never takes it.
* **One writer.** A single thread owns the live model (and the state's checkpoints). It applies
  the new observation batches in commit order (all that are waiting, then one publication), then
  publishes a fresh snapshot: a deep copy of the live model (its posterior checked equal), or,
  for a model that cannot be copied, a new model of the same kind loaded with its
  ``state_dict``; its posterior is computed, and it is swapped in by assigning one reference.
  Any :class:`~ev_nav.gp.posterior.SegmentModel` works; nothing here depends on how it learns.
* **Durable once acknowledged.** A posted observation is checked (against the current snapshot's
  posterior and noise, read only) and committed to the SQLite store in the request; only then is
  the answer sent. The writer is woken and absorbs it afterwards; a crash in between loses
  nothing (the store is the data, checkpoints only save replay time, and the writer also polls
  the store, so observations committed by other processes, e.g. ``ev-nav observe``, are learned
  too).
* **The model update never blocks a route request.** Requests keep planning on the previous
  snapshot while the writer updates its own model; they see the new one from the swap on. The
  answer to a posted observation carries the model version it will be part of, and ``health``
  tells which version is being served.
* **Forgetting goes through the writer** (it rebuilds the model without the trip and must not
  race a checkpoint); the request waits for it.
* **Changes of roads.** The writer scores what it absorbs for changed roads as ``ev-nav
  observe`` does (:func:`ev_nav.trips.changes.absorb_new`); :meth:`FleetService.changes` lists
  the flagged ones, and a dismissal by ``ev-nav changes --dismiss`` makes the writer rebuild
  its model (as a trip forgotten by another process does).
* **One service per state.** The service holds an exclusive lock on ``STATE/serve.lock`` for
  its life (:class:`ServeLock`): a second one, in this process or another, is refused with one
  line naming the first. The operating system drops the lock when its holder exits, however
  it exits (``kill -9`` included), so a stale lock file never blocks a restart.
"""

from __future__ import annotations

import copy
import json
import math
import queue
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ev_nav.errors import ConfigError, ModelStateError, StateError

if TYPE_CHECKING:
    from ev_nav.energy import Vehicle
    from ev_nav.gp.posterior import SegmentModel, SegmentPosterior
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.store import Store
    from ev_nav.trips.session import Session

__all__ = ["LOCK_NAME", "FleetService", "ServeLock", "ServiceClosed", "Snapshot"]

#: The lock file a serving process holds in its state directory.
LOCK_NAME = "serve.lock"

#: Largest number of segment energies one observation may carry (a route of a large city has a
#: few hundred; far more is not one trip's data).
MAX_SEGMENTS_PER_OBSERVATION = 100_000

#: An observation's wake is acted on once it is this old [s]: what arrives meanwhile is absorbed
#: with it, so at a fleet's rate of posts one update and one snapshot cover several (the model
#: lag grows by at most this; a wake that waited through the writer's previous pass is acted on
#: at once).
GATHER_S = 0.4

#: Most observation batches the writer absorbs in one update before publishing a snapshot: a
#: backlog of thousands after a restart is absorbed in a few such steps, each visible to route
#: requests as soon as it is done.
ABSORB_CHUNK = 2_000

#: The server's refit schedule, counted in absorbed observation rows: the first refit of the
#: hyperparameters once this many rows are absorbed, then whenever the absorbed rows have grown
#: by :data:`REFIT_GROWTH` since the last one. A fit and refresh cost seconds (5.6 s on Monaco
#: on a busy machine), so a server refits rarely, in a background thread, on a copy of the model
#: (the live model absorbs observations meanwhile and is swapped for the refitted copy, caught
#: up, when the fit is done).
REFIT_FIRST_ROWS = 200
REFIT_GROWTH = 2.0
#: A refitted copy is caught up with the served model in its own thread, in at most this many
#: rounds, until at most :data:`REFIT_CATCH_UP_LEFT` batches are left for the writer's swap.
REFIT_CATCH_UP_ROUNDS = 4
REFIT_CATCH_UP_LEFT = 20

#: The learned layers served as GeoJSON: property name -> title (with units).
LAYER_TITLES: dict[str, str] = {
    "wh_per_km": "predicted energy [Wh/km]",
    "mean_wh": "posterior mean energy [Wh]",
    "sd_wh": "posterior sd [Wh]",
    "visits": "times driven",
}


class ServiceClosed(StateError):
    """The service is shutting down (or its model writer stopped); retry against a live one."""


class ServeLock:
    """The exclusive claim of one service on a state: ``flock`` on ``STATE/serve.lock``.

    ``flock`` belongs to the open file, not to a process id written in it: the kernel releases
    it when the holder closes the file or dies in any way, so there is no stale lock to break
    and no pid to trust. The file's text (who holds it) is only for the refusal message.

    Parameters
    ----------
    state : path
        The state directory (must exist).
    holder : str
        Who is asking (shown to a second server), e.g. ``"pid 12 on http://127.0.0.1:8000/"``.

    Raises
    ------
    StateInUseError
        When another service holds the lock.
    StateIOError
        When the lock file cannot be created (read-only state directory, permissions).
    """

    def __init__(self, state: str | Path, holder: str) -> None:
        import fcntl
        import os

        from ev_nav.errors import StateInUseError, StateIOError

        self.path = Path(state) / LOCK_NAME
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StateIOError(
                f"cannot create the server lock {self.path} ({exc.strerror}); a server needs "
                "write access to its state"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                who = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise StateInUseError(
                f"{Path(state)} is already served by another ev-nav server ({who}); one server "
                "per state: use that one, or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode("utf-8"), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        """Give the state up (idempotent); closing the file drops the lock."""
        import os

        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


@dataclass(frozen=True)
class Snapshot:
    """A published, never-modified copy of the model for route requests.

    Attributes
    ----------
    version : int
        Increases by one at every publication (1 = the model as the server started).
    model : SegmentModel
        The model copy; call it only while holding :attr:`lock` (models keep lazy caches).
    posterior : SegmentPosterior
        Its marginal posterior (mean, sd [Wh]), computed before publication.
    noise_std : float
        Its observation-noise sd [Wh].
    applied_upto : int
        Every observation batch with an id up to this one is included.
    published : float
        Wall-clock time of publication [s since the epoch].
    hyperparameters : dict
        The learner's raw hyperparameters when it has them (``raw_hyperparameters``), else
        empty: with them and the stored observations a client rebuilds the served posterior.
    """

    version: int
    model: SegmentModel
    posterior: SegmentPosterior
    noise_std: float
    applied_upto: int
    published: float
    hyperparameters: dict[str, float | list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)


class _SnapshotView:
    """What the plausibility checks of :mod:`ev_nav.trips.observations` read from a model (its
    posterior, noise and a route's covariance), answered from a snapshot's published values
    without touching the model itself; it cannot learn."""

    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap

    @property
    def checkpoint_kind(self) -> str:
        return self._snap.model.checkpoint_kind

    @property
    def noise_std(self) -> float:
        return self._snap.noise_std

    def posterior(self) -> SegmentPosterior:
        return self._snap.posterior

    def noise_variance(self, segment_ids: ArrayLike, weights: ArrayLike | None = None) -> float:
        with self._snap.lock:
            return self._snap.model.noise_variance(segment_ids, weights)

    def noise_variances(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        with self._snap.lock:
            return self._snap.model.noise_variances(segment_ids)

    def route_covariance(self, segment_ids: ArrayLike) -> NDArray[np.float64]:
        # a partial record's prediction (the joint sd of the segments recorded)
        with self._snap.lock:
            return self._snap.model.route_covariance(segment_ids)

    def update(self, segment_ids: ArrayLike, energies: ArrayLike) -> None:
        raise ModelStateError("a served snapshot is read-only; the model writer learns")

    def update_total(
        self, segment_ids: ArrayLike, total_energy: float, weights: ArrayLike | None = None
    ) -> None:
        raise ModelStateError("a served snapshot is read-only; the model writer learns")

    def state_dict(self) -> dict[str, Any]:
        raise ModelStateError("a served snapshot view has no state of its own")

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        raise ModelStateError("a served snapshot is read-only")


class _LockedModel:
    """A snapshot's model for planning: every call holds the snapshot's lock (models keep lazy
    caches), and only for that call, so one request's store transaction never keeps another
    from its model calls. The posterior is the one computed at publication."""

    def __init__(self, snap: Snapshot) -> None:
        self._snap = snap

    @property
    def noise_std(self) -> float:
        return self._snap.noise_std

    def posterior(self, temperature: float | None = None) -> SegmentPosterior:
        if temperature is None:
            return self._snap.posterior
        with self._snap.lock:  # at a temperature: computed for this request
            return self._snap.model.posterior(temperature=temperature)

    def __getattr__(self, name: str) -> object:
        attr = getattr(self._snap.model, name)  # AttributeError as the model: hasattr works
        if not callable(attr):
            return attr
        lock = self._snap.lock

        def locked(*args: object, **kwargs: object) -> object:
            with lock:
                return attr(*args, **kwargs)

        return locked


@dataclass
class _Job:
    kind: str  # "wake" | "forget" | "stop"
    trip_id: int = 0
    done: Future[dict[str, object]] | None = None
    queued: float = field(default_factory=time.monotonic)  # when it was put in the queue [s]


@contextmanager
def _share_factorisations() -> Iterator[None]:
    """While active, ``copy.deepcopy`` shares SciPy's sparse LU factorisations instead of
    failing on them (they cannot be pickled or copied).

    A factorisation is never modified after it is made (a kernel whose hyperparameters change
    makes a new one), and SuperLU solves are thread-safe, so a snapshot and the live model can
    share one. Only the model writer deep-copies, so the (private, documented-stable since
    Python 2) dispatch table entry is installed and removed by one thread.
    """
    from scipy.sparse import identity
    from scipy.sparse.linalg import splu

    table = getattr(copy, "_deepcopy_dispatch", None)
    lu_type = type(splu(identity(1, format="csc")))
    if table is None or lu_type in table:
        yield
        return
    table[lu_type] = lambda obj, memo: obj
    try:
        yield
    finally:
        del table[lu_type]


#: Niceness added to the model writer's thread: learning (hyperparameter fits take seconds)
#: yields the CPU to route requests; it still gets every idle cycle.
WRITER_NICENESS = 10


def _lower_priority() -> None:
    """Lower the calling thread's CPU priority by :data:`WRITER_NICENESS` (Linux schedules
    threads individually; elsewhere, or without permission, nothing changes)."""
    import os

    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + WRITER_NICENESS)
    except (AttributeError, OSError):
        pass


def _clone_model(
    model: SegmentModel, net: RoadNetwork, vehicle: Vehicle, kind: str
) -> tuple[SegmentModel, str]:
    """An independent copy of ``model`` for readers, and how it was made.

    A deep copy (the network and sparse factorisations shared, both immutable) is tried first:
    it costs a memory copy (0.2-0.4 s for the exact GP on Monaco). If the model cannot be
    deep-copied, or the copy's posterior differs from the model's, the protocol's own
    persistence path is used: a new model of the state's kind (``build_model``) loaded with
    ``state_dict()``, which restores bit-identically but may rebuild (8 s for the exact GP on
    Monaco). Any :class:`SegmentModel` gets a correct snapshot either way.
    """
    from ev_nav.trips.session import build_model

    want = model.posterior()
    try:
        with _share_factorisations():
            copied = copy.deepcopy(model, {id(net): net})
        got = copied.posterior()
        if np.array_equal(got.mean, want.mean) and np.array_equal(got.std, want.std):
            return copied, "deep copy"
    except (TypeError, copy.Error, RecursionError, AttributeError):
        pass
    rebuilt = build_model(kind, net, vehicle)
    rebuilt.load_state_dict(model.state_dict())
    return rebuilt, "state_dict"


class FleetService:
    """An open state served to many vehicles (see the module docstring for the design).

    Parameters
    ----------
    state : path
        State directory (``ev-nav init``).
    network : path, optional
        Network file, if it moved since ``init``.
    poll_s : float
        How often the writer looks for observations committed by other processes [s].
    checkpoint_every_s : float
        Least time between model checkpoints [s] (and one at shutdown). Observations are durable
        without them; a checkpoint only spares a restart the replay.
    publish_every_s : float
        While working through a backlog, publish a snapshot at least this often [s] (each costs
        a copy of the model).
    clone : callable, optional
        ``clone(model, net, vehicle, kind) -> (model, how)`` making snapshots (default: a deep
        copy, else a new model loaded with the live one's ``state_dict``; see
        :func:`_clone_model`).
    address : str, optional
        Where the service answers (e.g. its URL), shown to a second service refused the state.

    Raises
    ------
    StateInUseError
        When another service holds the state (:class:`ServeLock`).
    StateError, NetworkCacheError, ...
        Whatever opening the state raises (``open_session``), in the caller's thread.
    """

    def __init__(
        self,
        state: str | Path,
        network: str | Path | None = None,
        *,
        poll_s: float = 1.0,
        checkpoint_every_s: float = 30.0,
        publish_every_s: float = 2.0,
        clone: Callable[
            [SegmentModel, RoadNetwork, Vehicle, str], tuple[SegmentModel, str]
        ] | None = None,
        address: str | None = None,
    ) -> None:
        self.state = Path(state)
        self._network_arg = network
        self.poll_s = float(poll_s)
        self.checkpoint_every_s = float(checkpoint_every_s)
        self.publish_every_s = float(publish_every_s)
        self._clone = clone or _clone_model
        self._jobs: queue.Queue[_Job] = queue.Queue()
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._snapshot: Snapshot | None = None
        self._closed = False
        # E_det(catalogue car) − E_det(state's vehicle) per segment, by catalogue name: the
        # network and vehicle are fixed while serving, so each model's shift is computed once
        #: one line per checkpoint passed over while opening (damaged, old format)
        self.notices: list[str] = []
        #: the last error of the model writer (None while all is well)
        self.writer_error: str | None = None
        #: how the last snapshot was made ("deep copy" or "state_dict") and how long it took [s]
        self.snapshot_method = ""
        self.snapshot_seconds = 0.0
        #: absorbed observation rows when the model was last refitted (the refit schedule)
        self._refit_rows = 0
        #: a refit in a background thread: (model generation, refitted copy, batch it covers)
        self._refitted: tuple[int, SegmentModel, int] | None = None
        self._refitting = False
        #: set on close: a running refit stops at its next objective evaluation, so no thread
        #: is inside torch when the interpreter exits (a daemon thread there aborts the process)
        self._refit_cancel = threading.Event()
        self._refit_thread: threading.Thread | None = None
        self._can_refit = False
        self._absorbed_rows = 0
        #: bumped whenever the live model is replaced by a rebuilt one (a forgotten trip): a
        #: refit of an older generation is discarded
        self._generation = 0
        #: changes of roads dismissed in the store when the live model was last rebuilt
        self._dismissed = 0
        #: refits adopted so far, and the last one's duration [s] (health)
        self.refits = 0
        self.refit_seconds = 0.0
        self._layers_lock = threading.Lock()
        self._stores = threading.local()  # each request thread's store connection
        self._layers_cache: tuple[tuple[int, int], bytes] | None = None
        self._geometry: list[str] | None = None
        import os

        from ev_nav.store import Store

        if not Store.db_path(self.state).is_file():
            Store.open(self.state).close()  # raises the store's one-line error for a non-state
        where = f" on {address}" if address else ""
        self._lock = ServeLock(self.state, f"pid {os.getpid()}{where}")
        self._thread = threading.Thread(target=self._writer_main, name="ev-nav-model-writer")
        self._thread.daemon = True
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._thread.join()
            self._lock.release()
            raise self._startup_error

    # ================================================================== reading side
    @property
    def snapshot(self) -> Snapshot:
        """The snapshot route requests use now."""
        snap = self._snapshot
        if snap is None or self._closed:
            raise ServiceClosed("the routing service is shutting down; retry in a moment")
        return snap

    @contextmanager
    def _session(self, snap: Snapshot, *, read_only_model: bool) -> Iterator[Session]:
        """A per-request session on the snapshot: the thread's store connection
        (:meth:`_store`) and the snapshot's model behind its lock, or a read-only view."""
        from ev_nav.trips.session import Session

        model = _SnapshotView(snap) if read_only_model else _LockedModel(snap)
        yield Session(self._store(), self.net, self.vehicle, model, applied_upto=snap.applied_upto)

    def _store(self) -> Store:
        """The calling thread's connection to the state's store (SQLite connections belong to
        one thread), opened by its first request and kept: opening one (a look at the file, a
        read-only look at its schema, the pragmas) cost every request half a millisecond. Each
        transaction sees the newest commits; the connections close with the service object
        or their thread."""
        from ev_nav.store import Store

        store: Store | None = getattr(self._stores, "store", None)
        if store is None:
            store = self._stores.store = Store.open(self.state)
        return store

    def plan(
        self,
        origin: tuple[float, float],
        goal: tuple[float, float],
        *,
        policy: str = "mean",
        soc: str | None = None,
        reserve: str | None = None,
        seed: int | None = None,
        max_snap_m: float = 500.0,
        vehicle: str | None = None,
        via: Sequence[tuple[float, float]] = (),
        avoid: Sequence[str] = (),
        time_weight: float = 0.0,
        vehicle_model: str | None = None,
        temperature: float | None = None,
        alternatives: bool = True,
    ) -> dict[str, object]:
        """Plan and record a trip (:func:`ev_nav.trips.plan_trip`) on the current snapshot.

        ``origin``/``goal`` are (lat, lon) [deg]; ``soc``/``reserve`` are charges as the CLI takes
        them (``80%``, ``24.5kWh``; ``reserve`` needs ``soc``, default 10%); ``vehicle`` names
        the vehicle asking (stored with the trip);
        ``via``, ``avoid`` and ``time_weight`` [Wh/min] are the route options of ``plan_trip``.
        ``vehicle_model`` names a catalogue model (:mod:`ev_nav.vehicles`) whose physics and
        battery the energy and arrival forecasts use: the learned model's posterior for the
        state's vehicle, shifted by the difference of the two cars' deterministic energies
        ``E_det`` on each segment driven (what the fleet learned about the roads carries over;
        the physics difference between the cars is added). Returns the CLI's ``route --json``
        document plus each route's coordinates and the model version it was planned on. A bad
        charge or an unknown model is refused before anything is recorded. ``temperature``
        [°C]: every route is planned and predicted on the posterior at it
        (``docs/temperature.md``). ``alternatives=False``: the planned route alone, without
        the rows shown for comparison (a vehicle's request; one route search instead of three
        or four).
        """
        from ev_nav.trips.battery import (
            DEFAULT_RESERVE,
            add_forecasts,
            e_det_shift,
            parse_charge,
            reserve_warning,
            route_forecasts,
            vehicle_model_entry,
        )
        from ev_nav.trips.planning import plan_trip
        from ev_nav.vehicles import catalogue_vehicle

        model_car = catalogue_vehicle(vehicle_model).vehicle if vehicle_model else None
        shift = e_det_shift(self.net, model_car, self.vehicle) if model_car is not None else None
        capacity = (model_car or self.vehicle).battery_wh
        soc_wh = parse_charge(soc, capacity) if soc is not None else None
        if reserve is not None and soc is None:
            # an arrival reserve means something only against a departure charge
            raise ConfigError(
                '"reserve" is checked against the departure charge: add "soc" (e.g. "80%")'
            )
        reserve_wh = parse_charge(reserve or DEFAULT_RESERVE, capacity)
        snap = self.snapshot
        extra = {"vehicle": vehicle} if vehicle else {}
        if vehicle_model:
            extra["vehicle_model"] = vehicle_model
        with self._session(snap, read_only_model=False) as session:
            if temperature is not None:
                from ev_nav.gp.temperature import AtTemperature

                session.model = AtTemperature(session.model, temperature)
            trip = plan_trip(
                session,
                origin,
                goal,
                policy=policy,
                seed=seed,
                max_snap_m=max_snap_m,
                with_safe=soc_wh is not None,
                extra=extra or None,
                via=via,
                avoid=avoid,
                time_weight=time_weight,
                alternatives=alternatives,
                car=model_car,
            )
            # another car's forecast and arrival charge need each route's energy; a plain
            # request (most of a fleet's) has its prediction in the document already
            energies, arrivals = route_forecasts(
                session.model, trip.routes, shift=shift, departure_wh=soc_wh,
                reserve_wh=reserve_wh, capacity_wh=capacity,
            )
        doc = trip.to_dict(self.net)  # with each route's [lon, lat, elevation] coordinates
        routes = doc["routes"]
        assert isinstance(routes, dict)
        add_forecasts(routes, energies, arrivals, other_car=model_car is not None)
        doc["vehicle"] = vehicle
        if model_car is not None:
            doc["vehicle_model"] = vehicle_model_entry(vehicle_model, model_car.battery_wh, doc,
                                                       energies)
        doc["model_version"] = snap.version
        if soc_wh is not None:
            doc["departure_soc_pct"] = round(100 * soc_wh / capacity, 2)
            doc["reserve_pct"] = round(100 * reserve_wh / capacity, 2)
            doc["warning"] = reserve_warning(
                arrivals["planned"].p_reserve, soc_wh, reserve_wh, capacity, lower='"reserve"',
                remedies="consider the 'safe' route or charging stops (POST /api/charging-plans)"
                if "safe" in routes
                else "consider charging stops (POST /api/charging-plans)",
            )
        return doc

    def plan_charging(
        self,
        origin: tuple[float, float],
        goal: tuple[float, float],
        *,
        soc: str,
        reserve: str = "10%",
        confidence: float = 0.95,
        stop_minutes: float = 5.0,
        max_charge: str = "100%",
        max_stops: int = 4,
        max_snap_m: float = 500.0,
        vehicle_model: str | None = None,
        temperature: float | None = None,
    ) -> dict[str, object]:
        """A trip with charging stops (:func:`ev_nav.trips.charging.plan_charging`) on the
        current snapshot, as ``ev-nav route --confidence --json`` prints it; nothing is recorded.

        ``vehicle_model`` (a catalogue model) plans with that car's battery, charging curve and
        plugs, and the learned energies shifted by the cars' ``E_det`` difference (as
        :meth:`plan` forecasts arrival charge). ``temperature`` [°C]: the legs' energies at
        that ambient temperature (as ``ev-nav route --temperature``; docs/temperature.md).
        """
        import math

        from ev_nav.trips.battery import e_det_shift, parse_charge
        from ev_nav.trips.charging import ChargeSettings, plan_to_dict, trip_ends, vehicle_sites
        from ev_nav.trips.charging import plan_charging as plan_stops
        from ev_nav.trips.planning import _router
        from ev_nav.vehicles import catalogue_vehicle

        car = catalogue_vehicle(vehicle_model).vehicle if vehicle_model else self.vehicle
        shift = e_det_shift(self.net, car, self.vehicle) if vehicle_model else None
        capacity = car.battery_wh
        top = parse_charge(max_charge, capacity)
        settings = ChargeSettings(
            start_wh=parse_charge(soc, capacity),
            reserve_wh=parse_charge(reserve, capacity),
            confidence=confidence,
            stop_overhead_min=stop_minutes,
            max_stops=max_stops,
            max_charge_pct=max(1, int(math.floor(100 * top / capacity + 1e-9))),
        )
        net = self.net
        start = net.snap(origin[1], origin[0], max_snap_m)
        end = net.snap(goal[1], goal[0], max_snap_m)
        snap = self.snapshot
        sites = vehicle_sites(net, car)
        # the locked model (route covariances, noise); nothing is written to the store
        with self._session(snap, read_only_model=False) as session:
            if temperature is not None:
                from ev_nav.gp.temperature import AtTemperature

                session.model = AtTemperature(session.model, temperature)
            # the direction of a two-way street and the road at a junction the direct route
            # takes (as the CLI's plans)
            ends = trip_ends(net, session.model, car, start.candidates, end.candidates,
                             router=_router(net), mean_shift=shift)
            plan = plan_stops(net, session.model, car, sites, *ends, settings,
                              router=_router(net), mean_shift=shift)
        return {
            "vehicle_model": car.name,
            "chargers_usable": len(sites),
            "model_version": snap.version,
            **plan_to_dict(plan, net),
        }

    def record(
        self,
        trip_id: int,
        *,
        total_wh: float | None = None,
        segments: tuple[NDArray[np.int64], NDArray[np.float64]] | None = None,
        force: bool = False,
        partial: bool = False,
        temperature: float | None = None,
    ) -> dict[str, object]:
        """Check and commit a trip's observations (a total or per-segment energies [Wh]),
        made at ``temperature`` [°C] where given, else at the temperature the trip was planned
        at, if any (stored with them and returned as ``temperature_c``; docs/temperature.md).

        When this returns, the observation is in the store (acknowledged); the model writer
        learns from it afterwards. Raises what the library raises for bad readings
        (:class:`InvalidObservation`, :class:`UnknownTripError`), with nothing recorded.
        """
        from ev_nav.errors import InvalidObservation
        from ev_nav.trips.observations import (
            learned_wh,
            reading_shift,
            record_segments,
            record_total,
            recorded_prediction,
        )

        if (total_wh is None) == (segments is None):
            raise InvalidObservation("give either total_wh or segments (not both)")
        snap = self.snapshot
        if temperature is None:  # as 'ev-nav observe': the drive is taken to be at the plan's
            temperature = self._store().get_trip(trip_id).temperature_c
        # judged at a temperature, the readings need the model's temperature coefficients
        with self._session(snap, read_only_model=temperature is None) as session:
            trip = session.store.get_trip(trip_id)
            # a trip planned for another car (vehicle_model): record_* judge its readings
            # against that car's prediction and store them converted to the state's vehicle
            moved = reading_shift(session, trip)
            if total_wh is not None:
                if not math.isfinite(total_wh):
                    raise InvalidObservation(f"total_wh must be a finite number, got {total_wh}")
                batch = record_total(session, trip.id, total_wh, force=force, absorb=False,
                                     temperature_c=temperature)
                observed, what = float(total_wh), "total"
            else:
                seg, wh = segments  # type: ignore[misc]
                batch = record_segments(
                    session, trip.id, seg, wh, force=force, partial=partial,
                    source="the observation", absorb=False, temperature_c=temperature,
                )
                observed, what = float(np.sum(wh)), "segments"
            # what the model learns, as stored (the reading converted to the state's vehicle)
            learned = None if moved is None else learned_wh(session, trip.id, batch)
            # what the readings were compared with, as 'ev-nav observe --json' shows it: the
            # trip's prediction, or a partial record's segments', for the car that drove
            expected = recorded_prediction(
                session, trip, None if segments is None else segments[0], partial=partial,
                temperature_c=temperature,
            )
        self._jobs.put(_Job("wake"))
        ack: dict[str, object] = {
            "trip": trip.id,
            "batch": batch,
            "recorded": what,
            "observed_wh": round(observed, 3),
            "temperature_c": temperature,
            "predicted_wh": round(expected.mean_wh, 1),
            "predicted_sd_wh": round(expected.model_sd_wh, 1),
            "sd_with_noise_wh": round(expected.sd_with_noise_wh, 1),
            "predicted_segments": expected.n_segments,
            # the snapshot that includes this batch has a larger version; poll health for it
            "model_version_before": snap.version,
        }
        if moved is not None:  # the car that drove, and what the state's vehicle learned
            ack.update(vehicle_model=moved.vehicle_model, learned_for=moved.learned_for,
                       learned_wh=round(learned, 3))
        return ack

    def forget(self, trip_id: int, timeout_s: float = 300.0) -> dict[str, object]:
        """Remove a trip's observations; the model forgets them (done by the writer, waited
        for). Raises :class:`UnknownTripError` / :class:`InvalidObservation` as the library."""
        self.snapshot  # noqa: B018 - raises ServiceClosed when shutting down
        done: Future[dict[str, object]] = Future()
        self._jobs.put(_Job("forget", int(trip_id), done))
        return done.result(timeout=timeout_s)

    def history(self, limit: int | None = None) -> list[dict[str, object]]:
        """The trips (newest ``limit`` of them), as ``ev-nav history --json`` plus ``vehicle``."""
        from ev_nav.trips.session import trip_history

        # the thread's kept connection: opening and closing one per request waited for the
        # process's write lock (closing takes it) behind any pending write
        rows = trip_history(self._store(), with_vehicle=True)
        return rows if limit is None else rows[max(len(rows) - int(limit), 0) :]

    def changes(self, include_dismissed: bool = False) -> list[dict[str, object]]:
        """The roads flagged as changed, as ``ev-nav changes --json`` (oldest first)."""
        from ev_nav.trips.changes import change_rows

        store = self._store()
        return change_rows(store.segment_changes(include_dismissed=include_dismissed), self.net)

    def health(self) -> dict[str, object]:
        """What is served and how fresh the model is."""
        snap = self.snapshot
        store = self._store()
        trips, newest = store.n_trips(), store.last_batch_id()
        behind = store.n_batches_after(snap.applied_upto)
        lon0, lat0, lon1, lat1 = self.net.bounds()
        if not self._thread.is_alive():
            status = "writer stopped"
        else:
            status = "ok" if self.writer_error is None else "degraded"
        return {
            "status": status,
            "network": self.net.name,
            "network_hash": self.net.content_hash,
            "segments": self.net.n_segments,
            "bounds": [lon0, lat0, lon1, lat1],
            "model": self.model_kind,
            "vehicle": self.vehicle.to_dict(),
            "battery_wh": self.vehicle.battery_wh,
            "trips": trips,
            "newest_batch": newest,
            "model_version": snap.version,
            "model_applied_upto": snap.applied_upto,
            "pending": newest > snap.applied_upto,
            # routes plan on a model that has not yet learned this many committed batches
            # (after a restart: the backlog the writer is absorbing)
            "behind_batches": behind,
            "stale": behind > 0,
            "snapshot_age_s": round(max(time.time() - snap.published, 0.0), 3),
            "snapshot_method": self.snapshot_method,
            "snapshot_seconds": self.snapshot_seconds,
            "writer_error": self.writer_error,
            "refits": self.refits,
            "refitting": self.refitting,
            "hyperparameters": snap.hyperparameters,
            "refit_seconds": self.refit_seconds,
            "notices": list(self.notices),
        }

    def layers_geojson(self) -> bytes:
        """The learned layers (:data:`LAYER_TITLES`) of every segment as a GeoJSON
        FeatureCollection (UTF-8 bytes), cached per snapshot and visit counts."""
        snap = self.snapshot
        visits = self._store().visit_counts(self.net.n_segments)
        key = (snap.version, int(visits.sum()))
        with self._layers_lock:
            cached = self._layers_cache
            if cached is not None and cached[0] == key:
                return cached[1]
            body = self._build_layers(snap, visits)
            self._layers_cache = (key, body)
            return body

    def _build_layers(self, snap: Snapshot, visits: NDArray[np.int64]) -> bytes:
        if self._geometry is None:  # the lines never change: serialised once
            flat = np.round(self.net.geom_lonlat, 6).tolist()
            off = self.net.geom_offsets.tolist()
            self._geometry = [
                json.dumps({"type": "LineString", "coordinates": flat[a:b]}, separators=(",", ":"))
                for a, b in zip(off[:-1], off[1:], strict=True)
            ]
        mean, sd = snap.posterior.mean, snap.posterior.std
        per_km = mean / (self.net.length_m / 1000.0)
        columns = {
            "wh_per_km": np.round(per_km, 2).tolist(),
            "mean_wh": np.round(mean, 2).tolist(),
            "sd_wh": np.round(sd, 2).tolist(),
            "visits": visits.astype(int).tolist(),
            "length_m": np.round(self.net.length_m, 1).tolist(),
        }
        parts = []
        for e, geom in enumerate(self._geometry):
            props = {"segment": e, **{k: v[e] for k, v in columns.items()}}
            parts.append(
                '{"type":"Feature","geometry":' + geom + ',"properties":'
                + json.dumps(props, separators=(",", ":")) + "}"
            )
        head = {
            "type": "FeatureCollection",
            "model_version": snap.version,
            "model_applied_upto": snap.applied_upto,
            "layers": LAYER_TITLES,
        }
        text = json.dumps(head, separators=(",", ":"))[:-1] + ',"features":[' + ",".join(parts)
        return (text + "]}").encode("utf-8")

    # ================================================================== writing side
    def _writer_main(self) -> None:
        from ev_nav.trips.session import StateNotice, open_session

        _lower_priority()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", StateNotice)
                # no replay before serving: routes plan on the newest checkpoint at once (marked
                # stale in health) while the loop below absorbs the backlog, so a restart after a
                # crash with thousands of unlearned batches answers in seconds, not minutes
                session = open_session(self.state, self._network_arg, max_replay=0)
            self.notices = [str(w.message) for w in caught if issubclass(w.category, StateNotice)]
            self.net: RoadNetwork = session.net
            self.vehicle: Vehicle = session.vehicle
            self.model_kind: str = session.store.model_kind
            self._absorbed_rows = self._rows_upto(session.store, session.applied_upto)
            self._dismissed = session.store.n_dismissed_changes()
            self._refit_rows = self._absorbed_rows  # the checkpoint's model is as fitted
            self._can_refit = hasattr(session.model, "refit")
            self._defer_refits(session)
            self._publish(session)
        except BaseException as exc:  # handed to the constructor's thread
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        last_checkpoint = time.monotonic()
        unsaved = False
        backlog = session.behind > 0  # checkpoint as soon as the start-up backlog is learned
        try:
            while True:
                jobs = self._next_jobs()
                stop = any(j.kind == "stop" for j in jobs)
                for job in jobs:
                    if job.kind == "forget":
                        self._run_forget(session, job)
                        unsaved = False  # forget_trip saved a checkpoint
                if not stop:
                    # at a stop the backlog is left to the next start's replay: observations
                    # are durable in the store, and a shutdown must not wait for learning
                    try:
                        unsaved |= self._adopt_refit(session)
                        unsaved |= self._absorb_new(session)
                        self._start_refit(session)
                        self.writer_error = None
                    except Exception as exc:  # noqa: BLE001 - the writer must outlive a bad batch
                        # keep serving the last good snapshot; the batches stay in the store
                        # and are retried at the next wake (and replayed by any later session);
                        # health reports the service as degraded meanwhile
                        self.writer_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                due = time.monotonic() - last_checkpoint >= self.checkpoint_every_s
                if backlog and unsaved and not stop:
                    due, backlog = True, False
                if unsaved and (stop or due):
                    self._checkpoint(session)
                    last_checkpoint, unsaved = time.monotonic(), False
                if stop:
                    return
        finally:
            session.close()

    def _next_jobs(self) -> list[_Job]:
        """Jobs waiting now (at least one, or an empty list after ``poll_s``)."""
        try:
            jobs = [self._jobs.get(timeout=self.poll_s)]
        except queue.Empty:
            return []
        # gather what arrives shortly after a wake into the same pass: one update and one
        # snapshot for many observations (each snapshot costs a copy of Σ), at a lag of at most
        # this interval. It counts from when the wake was queued: one that waited through the
        # previous pass (a busy fleet) has gathered its batches already, and absorbing them at
        # once keeps the model lag at one pass rather than a pass and the interval
        if jobs[0].kind == "wake":
            time.sleep(max(0.0, GATHER_S - (time.monotonic() - jobs[0].queued)))
        while True:
            try:
                jobs.append(self._jobs.get_nowait())
            except queue.Empty:
                return jobs

    @staticmethod
    def _rows_upto(store: Store, batch_id: int) -> int:
        """Observation rows in batches up to ``batch_id`` (a fingerprint of the absorbed data)."""
        return sum(b.energy_wh.size for b in store.observations() if b.id <= batch_id)

    def _absorb_new(self, session: Session) -> bool:
        """Apply batches committed since the last snapshot; publish if any. Returns whether the
        model changed."""
        from ev_nav.trips.changes import absorb_new

        store = session.store
        batches = store.observations(after_batch=session.applied_upto)
        # rows counted after reading the batches: a batch committed in between only adds rows,
        # so fewer rows than absorbed + new means observations were forgotten by another
        # process ('ev-nav observe --undo'): rebuild the model from the store then
        rows_now = store.n_observations()
        # so does a change of a road dismissed by another process ('ev-nav changes --dismiss')
        dismissed = store.n_dismissed_changes()
        if (
            rows_now < self._absorbed_rows + sum(b.energy_wh.size for b in batches)
            or dismissed != self._dismissed
        ):
            self._dismissed = dismissed
            session.load_model()
            self._generation += 1
            self._defer_refits(session)
            self._absorbed_rows = self._rows_upto(store, session.applied_upto)
            self._publish(session)
            return True
        if not batches:
            return False
        # everything committed since the last pass as one update (the exact GP absorbs a
        # backlog as one rank-k update: exact, and its cost grows with the distinct segments,
        # not the batches), in chunks of ABSORB_CHUNK batches, in commit order, each followed by
        # a snapshot, so route requests see a long backlog's progress
        for lo in range(0, len(batches), ABSORB_CHUNK):
            chunk = batches[lo : lo + ABSORB_CHUNK]
            # scored for changes of roads as by 'ev-nav observe' (ev_nav.trips.changes)
            if absorb_new(session, chunk).rebuilt:
                self._generation += 1  # another writer scored them: rebuilt from the store
                self._defer_refits(session)
            self._absorbed_rows += sum(b.energy_wh.size for b in chunk)
            self._publish(session)
        return True

    @staticmethod
    def _defer_refits(session: Session) -> None:
        """Let the service, not each update, decide when the learner refits (see
        :data:`REFIT_GROWTH`); models without scheduled refits are left as they are."""
        if hasattr(session.model, "defer_refits"):
            session.model.defer_refits = True  # type: ignore[union-attr]

    def _start_refit(self, session: Session) -> None:
        """Start a background refit of a copy of the model when the schedule says so."""
        model = session.model
        if self._refitting or not self._refit_wanted(model):
            return
        copy_, _ = self._clone(model, self.net, self.vehicle, self.model_kind)
        generation, upto, rows = self._generation, session.applied_upto, self._absorbed_rows
        self._refitting = True

        def run() -> None:
            _lower_priority()
            t0 = time.perf_counter()
            try:
                if copy_.refit(cancel=self._refit_cancel) is False:  # type: ignore[attr-defined]
                    return  # cancelled: the service is closing
                self.refit_seconds = round(time.perf_counter() - t0, 3)
                caught_up = self._catch_up(copy_, upto)
                if caught_up is None:
                    return  # cancelled: the service is closing
                self._refitted = (generation, copy_, caught_up)
                self._refit_rows = rows
            except Exception as exc:  # noqa: BLE001 - the live model stays; health says why
                self.writer_error = f"refit failed: {type(exc).__name__}: {str(exc)[:160]}"
                self._refit_rows = rows  # not retried until the data has grown again
            finally:
                self._refitting = False
                self._jobs.put(_Job("wake"))

        # not a daemon (explicitly: a thread inherits it from the daemon writer): the interpreter
        # waits for it at exit, which `close` keeps short
        self._refit_thread = threading.Thread(target=run, name="ev-nav-model-refit", daemon=False)
        self._refit_thread.start()

    def _catch_up(self, model: SegmentModel, upto: int) -> int | None:
        """Apply to a refitted copy, in the refit's thread, the batches the served model absorbed
        while it was fitted; returns the last batch it includes (None: cancelled).

        A refit takes seconds, in which a fleet posts hundreds of batches: left to the writer's
        swap (:meth:`_adopt_refit`), their update (most of the covariance) held up its next
        snapshot for seconds, the model lag's worst moments. Here the copy follows the served
        model in a few rounds until at most :data:`REFIT_CATCH_UP_LEFT` batches are left, and
        only those are applied at the swap. It takes only batches the served snapshot includes,
        so it never gets ahead of the live model it replaces.
        """
        from ev_nav.store import Store
        from ev_nav.trips.session import apply_batches

        with Store.open(self.state) as store:
            for _ in range(REFIT_CATCH_UP_ROUNDS):
                if self._refit_cancel.is_set():
                    return None
                served = self._snapshot.applied_upto if self._snapshot is not None else upto
                batches = [b for b in store.observations(after_batch=upto) if b.id <= served]
                if len(batches) <= REFIT_CATCH_UP_LEFT:
                    break
                apply_batches(model, batches)
                upto = batches[-1].id
        return upto

    def _refit_wanted(self, model: object) -> bool:
        """Whether the schedule calls for a refit now (and the model can be refitted)."""
        return hasattr(model, "refit") and self._rows_call_for_refit()

    def _rows_call_for_refit(self) -> bool:
        return self._absorbed_rows >= max(REFIT_FIRST_ROWS, REFIT_GROWTH * self._refit_rows)

    @property
    def refitting(self) -> bool:
        """A refit is due, running, or done and not yet swapped in: the served model's
        hyperparameters are about to change (tests wait for this to settle)."""
        return (
            self._refitting
            or self._refitted is not None
            or (self._thread.is_alive() and self._can_refit and self._rows_call_for_refit())
        )

    def _adopt_refit(self, session: Session) -> bool:
        """Swap in a finished background refit, caught up with what the live model absorbed
        meanwhile. Returns whether the model changed."""
        done, self._refitted = self._refitted, None
        if done is None:
            return False
        generation, model, upto = done
        if generation != self._generation:
            return False  # the live model was rebuilt meanwhile (a forgotten trip)
        from ev_nav.trips.session import apply_batches

        since = [b for b in session.store.observations(after_batch=upto)
                 if b.id <= session.applied_upto]
        apply_batches(model, since, session.store.resets(upto, session.applied_upto))
        session.model = model
        self._defer_refits(session)
        self.refits += 1
        self._publish(session)
        return True

    def _run_forget(self, session: Session, job: _Job) -> None:
        from ev_nav.trips.observations import forget_trip

        assert job.done is not None
        try:
            n = forget_trip(session, job.trip_id)  # rebuilds the model and saves a checkpoint
            self._generation += 1
            self._defer_refits(session)
            self._absorbed_rows = self._rows_upto(session.store, session.applied_upto)
            snap = self._publish(session)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request
            job.done.set_exception(exc)
            return
        job.done.set_result(
            {"trip": job.trip_id, "forgotten_batches": n, "model_version": snap.version}
        )

    def _publish(self, session: Session) -> Snapshot:
        t0 = time.perf_counter()
        frozen = getattr(session.model, "frozen_posterior", None)
        temp = getattr(session.model, "temp", None)
        if temp is not None and temp.active:
            frozen = None  # the read-only view has no temperature coefficients: a copy has
        if frozen is not None and self._clone is _clone_model:
            # the exact GP hands out a read-only view of its arrays and copies them before its
            # next update (one N × N memory copy) instead of the whole model being deep-copied
            # for every snapshot: publishing often is what keeps the model lag short
            model, how = frozen(), "shared arrays"
        else:
            model, how = self._clone(session.model, self.net, self.vehicle, self.model_kind)
        post = model.posterior()  # computed here, once, not by the first route request
        self.snapshot_method = how
        self.snapshot_seconds = round(time.perf_counter() - t0, 3)
        old = self._snapshot
        snap = Snapshot(
            version=1 if old is None else old.version + 1,
            model=model,
            posterior=post,
            noise_std=float(model.noise_std),
            applied_upto=session.applied_upto,
            published=time.time(),
            hyperparameters=(
                session.model.raw_hyperparameters()  # type: ignore[union-attr]
                if hasattr(session.model, "raw_hyperparameters")
                else {}
            ),
        )
        self._snapshot = snap  # one reference assignment: readers see the old or the new one
        return snap

    def _checkpoint(self, session: Session) -> None:
        from ev_nav.trips.session import save_checkpoint

        try:
            save_checkpoint(session)
        except StateError as exc:  # e.g. disk full: observations are safe, replay will work
            self.writer_error = f"checkpoint not saved: {str(exc)[:200]}"

    # ================================================================== lifecycle
    def close(self, timeout_s: float = 15.0) -> bool:
        """Stop the writer: it checkpoints what it has absorbed (what it has not is replayed
        from the store at the next start; nothing acknowledged is lost).

        Returns whether it stopped within ``timeout_s``; it may be in the middle of a long
        update (a hyperparameter fit), which cannot be interrupted and is not worth waiting
        for: its input is in the store.
        """
        deadline = time.monotonic() + timeout_s
        self._refit_cancel.set()
        if not self._closed:
            self._closed = True
            self._jobs.put(_Job("stop"))
        self._thread.join(timeout=timeout_s)
        refit = self._refit_thread
        if refit is not None:
            refit.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            # still learning: the state stays claimed until it ends (or the process exits)
            return False
        self._lock.release()
        return True

    def __enter__(self) -> FleetService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
