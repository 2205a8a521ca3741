"""An open driver state: store, network, vehicle and the up-to-date learned model.

A state directory holds the SQLite store (trips, observations, model checkpoints; see
:mod:`ev_nav.store`) and a ``maps/`` folder. The model is rebuilt from the newest usable
checkpoint plus every observation batch committed after it, so an interrupted ``observe`` never
loses data: the next session replays what the checkpoint missed.

Planning only reads the model's posterior. A session opened with ``planning=True`` restores the
exact GP's posterior as plain arrays (:func:`restore_posterior`: checkpoint plus the posterior
cached next to it, and the same rank-k updates for any batch committed since), without the
learner and without torch; hyperparameter fits happen where observations are recorded. When that
is not possible (no cached posterior, a damaged newest checkpoint, or a pending batch at which
the learner refits) the session restores the learner as usual, so planning is always on the
model every observation so far has produced.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ev_nav.errors import (
    ConfigError,
    ModelStateError,
    StateError,
    StateNotice,
    UnsafeCheckpointError,
)

if TYPE_CHECKING:  # scipy/torch-backed; imported where really needed (not by 'history')
    from ev_nav.energy import Vehicle
    from ev_nav.gp.changes import ChangeDetector
    from ev_nav.gp.incremental_state import ExactPosterior
    from ev_nav.gp.posterior import SegmentModel
    from ev_nav.roads.network import RoadNetwork
    from ev_nav.store import ChangeRecord, ObservationBatch, SegmentReset, Store
    from ev_nav.store.state_cache import StateCache

__all__ = [
    "SYNTHETIC_PREFIX",
    "Session",
    "StateNotice",
    "apply_batches",
    "build_model",
    "create_state",
    "load_network_ref",
    "open_session",
    "restore_model",
    "restore_posterior",
    "save_checkpoint",
    "trip_history",
]

#: Prefix of a state's network reference for the embedded synthetic town (``synthetic:N:SEED``).
SYNTHETIC_PREFIX = "synthetic:"


def synthetic_ref(n_segments: int, seed: int = 0) -> str:
    """The network reference of the embedded synthetic town."""
    return f"{SYNTHETIC_PREFIX}{int(n_segments)}:{int(seed)}"


def load_network_ref(ref: str) -> RoadNetwork:
    """Load the network a state refers to (a ``.npz`` path or a synthetic town reference)."""
    if ref.startswith(SYNTHETIC_PREFIX):
        from ev_nav.roads.synthetic import synthetic_town

        n, seed = ref[len(SYNTHETIC_PREFIX) :].split(":")
        return synthetic_town(int(n), seed=int(seed))
    from ev_nav.roads.network import RoadNetwork

    return RoadNetwork.load(ref)


def build_model(
    kind: str,
    net: RoadNetwork,
    vehicle: Vehicle,
    seed: int = 0,
    cache: StateCache | None = None,
) -> SegmentModel:
    """A fresh model of ``kind`` (``gp`` or ``bi``) with the spec's prior for this network.

    The GP is the exact, incremental learner (:class:`~ev_nav.gp.incremental.IncrementalGP`):
    one driver's data is small, and an exact posterior is what a careful user wants. Past its
    :data:`~ev_nav.gp.incremental_state.MAX_EXACT_SEGMENTS` (its N × N covariance no longer
    fits) it is the regional learner (:class:`~ev_nav.gp.regional.RegionalGP`: sparse
    precision, the exact learner's fit schedule). ``cache`` (a state's verified ``cache/``
    folder) keeps the exact learner's prior kernel matrix and posterior, or the regional
    learner's prior, between commands.
    """
    if kind == "bi":
        from ev_nav.gp.independent import BIModel

        return BIModel(net, vehicle=vehicle)
    from ev_nav.gp import incremental_state

    if net.n_segments > incremental_state.MAX_EXACT_SEGMENTS:
        from ev_nav.gp.regional import RegionalGP

        return RegionalGP(net, vehicle=vehicle, seed=seed, cache=cache)
    from ev_nav.gp.incremental import IncrementalGP

    return IncrementalGP(net, vehicle=vehicle, seed=seed, cache=cache)


def state_cache(store: Store) -> StateCache:
    """Where a state keeps derived data (recomputable; never holds an observation), each file
    verified against the checksum the store recorded (:mod:`ev_nav.store.caches`)."""
    from ev_nav.store.state_cache import StateCache

    return StateCache(store.path.parent)


#: Checkpoint kinds written by learners that states no longer use; the model is rebuilt with the
#: current learner from the recorded observations instead (they are the data). States past the
#: exact learner's size were learned by Algorithm 3 before the regional learner took over.
SUPERSEDED_KINDS = {"svgp": "the previous GP learner (Algorithm 3)"}


def apply_batches(
    model: SegmentModel | ExactPosterior,
    batches: list[ObservationBatch],
    resets: Sequence[SegmentReset] = (),
) -> None:
    """Feed stored observation batches to a model, with the flagged changes of roads among them.

    The exact GP (and its read-only posterior) takes them all as one rank-k update
    (``absorb``: exact, and far cheaper than one update per batch for a backlog); other models
    take them one by one, in commit order. A batch's ambient temperature, where it has one,
    goes with it (``docs/temperature.md``). ``resets`` (:meth:`ev_nav.store.Store.resets` for
    the same batches) are applied each right after the batch it follows (``reset_segments``), as
    when the change was detected (:mod:`ev_nav.trips.changes`).
    """
    start = 0
    for r in resets:
        stop = start
        while stop < len(batches) and batches[stop].id <= r.at_batch:
            stop += 1
        _apply(model, batches[start:stop])
        start = stop
        reset = getattr(model, "reset_segments", None)
        if reset is None:
            raise ModelStateError("this model cannot replay a flagged change of a road")
        reset(r.segment_ids, r.counts, r.sums, r.sums_sq)
    _apply(model, batches[start:])


def _apply(model: SegmentModel | ExactPosterior, batches: list[ObservationBatch]) -> None:
    if not batches:
        return
    absorb = getattr(model, "absorb", None)

    def temp(b: ObservationBatch) -> tuple[float, ...]:  # only where recorded: old call shapes
        return () if b.temperature_c is None else (b.temperature_c,)

    if absorb is not None:
        segments, totals = [], []
        for b in batches:
            if b.kind != "segment":
                totals.append((b.segment_ids, float(b.energy_wh[0]), b.weights, *temp(b)))
                continue
            ids, wh, parts = _split_readings(b)
            if ids.size:
                segments.append((ids, wh, *temp(b)))
            totals += [(ids, y, w, *temp(b)) for ids, y, w in parts]
        absorb(segments, totals)
        return
    for b in batches:
        kw = {} if b.temperature_c is None else {"temperature": b.temperature_c}
        if b.kind == "segment":
            ids, wh, parts = _split_readings(b)
            if ids.size:
                model.update(ids, wh, **kw)
            for part, y, w in parts:
                model.update_total(part, y, w, **kw)
        else:
            model.update_total(b.segment_ids, float(b.energy_wh[0]), b.weights, **kw)


def _split_readings(
    b: ObservationBatch,
) -> tuple[np.ndarray, np.ndarray, list[tuple[np.ndarray, float, np.ndarray]]]:
    """A per-segment batch as its whole-segment readings (ids, energies [Wh]) and each reading
    of part of a segment as the linear observation it is, ``y = h f(e)`` with ``h`` its share,
    learned as a one-segment total (a share of 0 drove none of the segment: it tells nothing)."""
    if b.weights is None:
        return b.segment_ids, b.energy_wh, []
    whole = b.weights == 1.0
    parts = [
        (b.segment_ids[i : i + 1], float(b.energy_wh[i]), b.weights[i : i + 1])
        for i in np.flatnonzero(~whole & (b.weights > 0.0))  # at most two: the trip's ends
    ]
    return b.segment_ids[whole], b.energy_wh[whole], parts


@dataclass
class Session:
    """An open state: store, network, vehicle and the up-to-date model.

    Use :func:`open_session` (or :func:`ev_nav.open_state`) to get one, and close it (or use it
    as a context manager) when done.
    """

    store: Store
    net: RoadNetwork
    vehicle: Vehicle
    #: the learner; or, in a session opened for planning, possibly its read-only posterior
    model: SegmentModel | ExactPosterior | None
    applied_upto: int = 0  # the model has absorbed every observation batch with id <= this
    #: observation batches committed after ``applied_upto`` that the model has not absorbed
    #: (a replay limit was reached: see :meth:`load_model`)
    behind: int = 0
    #: checkpoints passed over while loading (damaged, old pickle format): one line each
    skipped: list[str] = field(default_factory=list)
    #: whether the model came from a checkpoint (False: the prior, every batch replayed)
    from_checkpoint: bool = False
    #: changes of roads flagged while this session learned (:func:`ev_nav.trips.changes.learn_new`)
    flagged: list[ChangeRecord] = field(default_factory=list)
    #: the change detector as this session last stored it, with the batch it had scored up to
    #: (a server's writer passes several times a second: decoding the stored one each time cost
    #: a tenth of its throughput); :func:`ev_nav.trips.changes.absorb_new` keeps it
    detector_cache: tuple[int, ChangeDetector] | None = None

    def close(self) -> None:
        """Close the store."""
        self.store.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def state_dir(self) -> Path:
        """The state directory."""
        return self.store.path.parent

    def load_model(self, *, planning: bool = False, max_replay: int | None = None) -> None:
        """Rebuild the model: newest usable checkpoint, then the batches committed after it.

        ``max_replay`` bounds how many of those batches are applied (the oldest first; ``None``:
        all): :attr:`behind` then says how many were left, and :meth:`catch_up` applies them.

        With ``planning`` the model is the read-only posterior of :func:`restore_posterior`
        where that is possible (enough to plan; it cannot learn or be saved).

        A checkpoint is used only if its hash verifies and it is in the pickle-free format
        (:mod:`ev_nav.checkpoints`; an old pickled one is never unpickled). Otherwise the next
        older one is tried, and finally the prior, replaying every observation: the observations
        are the data, checkpoints only save replay time.

        Batch ids grow in commit order (writes are serialised), so the largest id replayed from
        one snapshot is an honest claim that every earlier batch is included too — even while
        another process is observing into the same state.
        """
        if planning:
            restored = restore_posterior(self.store, self.net, max_replay)
            if restored is not None:
                self.model, self.applied_upto, self.behind = restored
                self.skipped, self.from_checkpoint = [], True
                return
        model, after, self.skipped = restore_model(self.store, self.net, self.vehicle)
        self.from_checkpoint = after > 0
        batches = self.store.observations(after_batch=after)
        keep = batches if max_replay is None else batches[: max(int(max_replay), 0)]
        upto = max([after, *(b.id for b in keep)])
        apply_batches(model, keep, self.store.resets(after, upto))
        self.model = model
        self.applied_upto = max([after, *(b.id for b in keep)])
        self.behind = len(batches) - len(keep)

    def catch_up(self) -> None:
        """Apply the observation batches committed since the model was loaded, with the changes
        of roads recorded among them. (Where observations are learned for the first time,
        :func:`ev_nav.trips.changes.learn_new` scores them for changes as well.)"""
        batches = self.store.observations(after_batch=self.applied_upto)
        upto = max([self.applied_upto, *(b.id for b in batches)])
        apply_batches(self.model, batches, self.store.resets(self.applied_upto, upto))
        self.applied_upto = upto
        self.behind = 0

    def notice(self) -> str | None:
        """One line saying how the model was rebuilt when a checkpoint had to be passed over."""
        if not self.skipped:
            return None
        return (
            f"model rebuilt from {'an older checkpoint' if self.from_checkpoint else 'the prior'} "
            f"and the recorded observations ({'; '.join(self.skipped)}); no observation was lost"
        )


def require_session(session: object, what: str) -> Session:
    """``session`` if it is an open :class:`Session`; else a TypeError naming ``what`` (the
    function) and, for a state's folder (the usual slip), how to open it."""
    if isinstance(session, Session):
        return session
    hint = (f" {str(session)[:60]!r}: open the state first, e.g. 'with "
            "ev_nav.open_state(PATH) as session:'" if isinstance(session, str | os.PathLike)
            else "")
    raise TypeError(f"{what} takes an open Session, got {type(session).__name__}{hint}")


def restore_model(
    store: Store, net: RoadNetwork, vehicle: Vehicle
) -> tuple[SegmentModel, int, list[str]]:
    """The newest checkpoint that verifies and loads, as ``(model, last_batch_id, skipped)``.

    Falls back to a fresh prior model (``last_batch_id = 0``) when none does; ``skipped`` says
    why each newer checkpoint was passed over.
    """
    from ev_nav.checkpoints import decode

    skipped: list[str] = []
    for ck in store.checkpoints():
        if not ck.verified:
            skipped.append(f"checkpoint {ck.id} damaged (hash mismatch)")
            continue
        model = build_model(store.model_kind, net, vehicle, cache=state_cache(store))
        try:
            state = decode(ck.blob)
            kind = state.get("kind") if isinstance(state, dict) else None
            old = SUPERSEDED_KINDS.get(kind) if kind != model.checkpoint_kind else None
            if old is not None:
                skipped.append(f"checkpoint {ck.id} written by {old}; rebuilt with the current one")
                continue
            model.load_state_dict(state)
        except UnsafeCheckpointError:
            skipped.append(f"checkpoint {ck.id} in the old pickle format, never loaded")
            continue
        except (ModelStateError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            skipped.append(f"checkpoint {ck.id} unusable ({str(exc)[:80]})")
            continue
        return model, ck.last_batch_id, skipped
    model = build_model(store.model_kind, net, vehicle, cache=state_cache(store))
    return model, 0, skipped


def restore_posterior(
    store: Store, net: RoadNetwork, max_replay: int | None = None
) -> tuple[ExactPosterior, int, int] | None:
    """The exact GP's posterior without its learner (no torch), as ``(posterior, last_batch_id,
    batches_behind)``, or None when only the learner can restore it (:meth:`Session.load_model`
    then does). At most ``max_replay`` pending batches are applied (``None``: all).

    Possible when the state's model is the exact GP, its newest checkpoint verifies, and the
    posterior that :func:`save_checkpoint` cached for it is in ``STATE/cache/``. Observation
    batches committed after the checkpoint (recorded by another process, e.g. the server, or by
    an ``observe`` killed before its model update) are applied by the learner's own rank-k
    updates, so the result is bit-identical to the restored learner's, unless one of them is an
    update at which the learner refreshes and refits its hyperparameters: then None.
    """
    from ev_nav.checkpoints import decode
    from ev_nav.gp import incremental_state
    from ev_nav.gp.incremental_state import ExactPosterior

    if store.model_kind != "gp" or net.n_segments > incremental_state.MAX_EXACT_SEGMENTS:
        return None  # BI, or the regional learner of a large network: the model itself
    newest = next(iter(store.checkpoints()), None)
    if newest is None or not newest.verified:
        return None  # the learner's path passes over it and says so
    try:
        state = decode(newest.blob, tensors=False)
    except (UnsafeCheckpointError, ModelStateError):
        return None
    if not isinstance(state, dict):
        return None
    post = ExactPosterior.from_checkpoint(
        state,
        network_hash=net.content_hash,
        n_segments=net.n_segments,
        cache=state_cache(store),
    )
    if post is None:
        return None
    batches = store.observations(after_batch=newest.last_batch_id)
    keep = batches if max_replay is None else batches[: max(int(max_replay), 0)]
    if len(keep) > post.updates_before_refresh:
        return None
    if keep and store.resets(newest.last_batch_id, keep[-1].id):
        return None  # a flagged change to replay: only the learner can forget readings
    if any(b.temperature_c is not None for b in keep):
        return None  # the temperature coefficients live in the learner only
    apply_batches(post, keep)
    return post, max([newest.last_batch_id, *(b.id for b in keep)]), len(batches) - len(keep)


def save_checkpoint(session: Session) -> None:
    """Store the session's model as the state's current checkpoint (pickle-free)."""
    from ev_nav.checkpoints import encode

    session.store.save_checkpoint(
        encode(session.model.state_dict()),
        session.store.n_observations(),
        last_batch_id=session.applied_upto,
    )
    cache = getattr(session.model, "cache_posterior", None)
    if cache is not None:  # the next command restores this posterior instead of recomputing it
        cache()


def open_session(
    state: str | Path,
    network: str | Path | None = None,
    *,
    with_model: bool = True,
    save_repairs: bool = True,
    planning: bool = False,
    max_replay: int | None = None,
) -> Session:
    """Open a state, check its network, and rebuild the model (checkpoint + replay).

    ``planning``: the session only plans, so its model may be the read-only posterior of
    :func:`restore_posterior` (no torch, no hyperparameter fit); see :meth:`Session.load_model`.

    When a checkpoint had to be passed over, a :class:`StateNotice` warning says so (the CLI
    prints it as one line) and a good checkpoint is saved right away (unless ``save_repairs``
    is false: a dry run records nothing), so the next session does not replay again; this also
    migrates states whose checkpoints are in the old pickle format.
    """
    from ev_nav.store import Store

    store = Store.open(state)
    try:
        ref = str(Path(network).resolve()) if network is not None else store.network_ref
        try:
            net = load_network_ref(ref)
        except FileNotFoundError as exc:
            if network is not None:  # the user's own path: no advice to pass what they passed
                raise StateError(f"--network {network}: {exc}") from None
            raise StateError(
                f"the state's network {ref} is missing ({exc}); pass --network PATH"
            ) from None
        store.check_network(net.content_hash, net.arrays_hash)
        from ev_nav.energy import Vehicle

        session = Session(store, net, Vehicle(**store.vehicle().spec), None)
        if with_model:
            session.load_model(planning=planning, max_replay=max_replay)
            note = session.notice()
            if note:
                warnings.warn(note, StateNotice, stacklevel=2)
            if note and save_repairs:
                try:
                    save_checkpoint(session)
                except StateError:
                    pass  # e.g. read-only: the rebuilt model is still right for this session
        return session
    except BaseException:
        store.close()
        raise


def create_state(
    state: str | Path,
    *,
    network: str | Path | None = None,
    synthetic: int | None = None,
    town_seed: int = 0,
    model: str = "gp",
    vehicle: Vehicle | str | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> Session:
    """Create a state directory bound to a network and return it open (with its prior model).

    Parameters
    ----------
    state : path
        New state directory.
    network : path, optional
        A network file from ``ev-nav network build``; or
    synthetic : int, optional
        the embedded synthetic town with about this many segments (``town_seed`` picks it).
    model : {"gp", "bi"}
        The learning model.
    vehicle : Vehicle or str, optional
        The vehicle, or its name (a preset or catalogue model, as ``ev-nav init --vehicle``
        takes: :func:`ev_nav.get_vehicle`). Default: the paper's EV (``sumo-default``).
    on_stage : callable, optional
        Called with the name of each stage as it starts (progress of a large network: the
        prior covariance of LuST's 5,614 segments takes ~15 s).
    """
    from ev_nav.energy import Vehicle, get_vehicle
    from ev_nav.store import Store

    stage = on_stage or (lambda _name: None)

    if (network is None) == (synthetic is None):
        raise StateError("give exactly one of network= and synthetic=")
    ref = synthetic_ref(synthetic, town_seed) if synthetic is not None else str(
        Path(network).resolve()
    )
    if isinstance(vehicle, str):
        veh = get_vehicle(vehicle)
    elif vehicle is None or isinstance(vehicle, Vehicle):
        veh = vehicle or Vehicle()
    else:
        raise ConfigError(
            f"vehicle must be a Vehicle or a catalogue name ('ev-nav vehicles' lists them), "
            f"got {type(vehicle).__name__}"
        )
    stage("loading the network")
    net = load_network_ref(ref)
    store = Store.create(
        state,
        net.content_hash,
        ref,
        model,
        veh.to_dict(),
        n_segments=net.n_segments,
        network_arrays_hash=net.arrays_hash,
    )
    try:
        stage(f"building the prior ({net.n_segments:,} segments)")
        session = Session(
            store, net, veh, build_model(model, net, veh, cache=state_cache(store))
        )
        prepare = getattr(session.model, "prepare", None)
        if prepare is not None:  # the regional learner builds its prior when first used: now
            prepare()
        stage("saving the model")
        save_checkpoint(session)  # applied_upto = 0: the prior
    except BaseException:
        store.close()
        raise
    return session


def trip_history(
    state: str | Path | Store, *, with_vehicle: bool = False
) -> list[dict[str, object]]:
    """Every trip of a state: id, time, policy, km (and ``length_m`` [m], unrounded), predicted
    Wh ± sd, observed Wh (or None),
    whether it has observations (``recorded``: True with ``observed_wh`` None when they cover
    only part of the route) and
    the ambient temperature its observations were recorded at (``temperature_c`` [°C], or None),
    and the catalogue car it was planned for (``vehicle_model``, or None: the state's vehicle;
    its predicted and observed Wh are the state's vehicle's, as the model learned them).

    Reads the store only (no network, no model), so it is fast; ``state`` is a state's folder,
    or an open :class:`~ev_nav.store.Store` (used, not closed). ``with_vehicle`` adds the name
    of the vehicle that asked for the trip (``vehicle``: set by the server, else None).
    """
    from ev_nav.store import Store

    if isinstance(state, Store):  # a connection the caller keeps (the server's)
        history = state.history()
    else:
        with Store.open(state) as store:
            history = store.history()  # one read snapshot, not one query per trip
    rows = []
    for trip, observed, temperature in history:
        row: dict[str, object] = {
            "trip": trip.id,
            "created": trip.created[:19],
            "policy": trip.policy,
            "km": round(trip.length_m / 1000, 3),
            # unrounded: the table rounds it once, as the route table did (5,475.26 m: km
            # 5.475, then 5.47 where the route said 5.48)
            "length_m": trip.length_m,
            "predicted_wh": round(trip.predicted_wh, 1),
            "predicted_sd_wh": round(trip.predicted_sd_wh, 1),
            "observed_wh": None if observed is None else round(observed, 1),
            # observations recorded: with observed_wh None, they cover only part of the route
            # (no trip total); the table said "-" as for a trip never recorded, which observe
            # then refused to record
            "recorded": trip.status == "observed",
            "temperature_c": temperature,
            "planned_temperature_c": trip.temperature_c,
            # planned for another car (route --vehicle-model): predicted and observed Wh are
            # the state's vehicle's, that car's readings converted when they were recorded
            "vehicle_model": trip.extra.get("vehicle_model"),
        }
        if with_vehicle:
            row["vehicle"] = trip.extra.get("vehicle")
        rows.append(row)
    return rows
