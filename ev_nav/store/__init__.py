"""Persistent per-driver state in SQLite: network reference, vehicles, trips, observations, models.

A *state directory* holds one SQLite database (``ev-nav.sqlite``) in WAL mode. Every write is one
``BEGIN IMMEDIATE`` transaction committed with ``synchronous=FULL``, so

* killing the process at any instant leaves either the old or the new state, never a mixture, and
  a method that has returned (an *acknowledged* write) survives the kill;
* a model checkpoint that fails to write (disk full, kill, exception) rolls back and leaves the
  previous checkpoint current;
* two processes writing to the same state take turns: the second waits on SQLite's busy timeout
  instead of failing or corrupting the file;
* threads of one process queue on one lock before SQLite's, and the frequent small writes of a
  serving process (a planned trip, an observation) share commits: what several threads wrote
  meanwhile is committed with one fsync, each write in a savepoint of its own, and each call
  returns only after the commit that holds its data (group commit,
  :class:`~ev_nav.store.connection._ProcessWriters`).

The schema is versioned with ``PRAGMA user_version`` and upgraded by the ordered list
:data:`MIGRATIONS` when an older state is opened. The store knows nothing about models: a
checkpoint is an opaque byte string that the caller serialises (pickle-free, with
:mod:`ev_nav.checkpoints`); :meth:`Store.checkpoints` lists the kept ones newest first so a caller
can fall back from a damaged one.

Typical use::

    store = Store.create(state_dir, net.content_hash, "synthetic:2000:0", "gp",
                         vehicle_dict, n_segments=net.n_segments)
    store = Store.open(state_dir); store.check_network(net.content_hash)
    trip_id = store.add_trip(origin_segment=route[0], goal_segment=route[-1], policy="ts",
                             route=route, predicted_wh=mu, predicted_sd_wh=sd,
                             length_m=L, time_s=T, seed=seed)
    store.add_observations(trip_id, segment_ids, energies_wh)   # or add_total_observation
    ck = store.latest_checkpoint()                  # restore the model from ck.blob, then
    for batch in store.observations(after_batch=ck.last_batch_id if ck else 0):
        ...                                         # apply the batches the model has not seen
    store.save_checkpoint(blob, n_obs=store.n_observations())

The package is split by concept behind the one facade :class:`Store` (see
:mod:`ev_nav.store.facade`): ``connection`` (file, transactions, errors), ``schema``
(migrations), ``vehicles``, ``trips``, ``observations``, ``checkpoints``, ``caches`` (the verified
derived files of ``STATE/cache/``), ``changes`` (flagged changes of roads); ``doctor`` checks
and repairs a state (``ev-nav doctor``).
"""

from ev_nav.store.caches import CACHE_FOLDER
from ev_nav.store.changes import ChangeRecord, SegmentChange, SegmentReset
from ev_nav.store.checkpoints import KEEP_CHECKPOINTS, Checkpoint, CheckpointRecord
from ev_nav.store.connection import BUSY_TIMEOUT_MS, DB_NAME, SQLITE_MAGIC, io_problem
from ev_nav.store.facade import MODEL_KINDS, Store
from ev_nav.store.observations import ObservationBatch
from ev_nav.store.schema import MIGRATIONS, SCHEMA_VERSION
from ev_nav.store.state_cache import StateCache
from ev_nav.store.trips import TRIP_STATUSES, Trip, TripPlan
from ev_nav.store.vehicles import RegisteredVehicle

__all__ = [
    "BUSY_TIMEOUT_MS",
    "CACHE_FOLDER",
    "ChangeRecord",
    "Checkpoint",
    "CheckpointRecord",
    "DB_NAME",
    "KEEP_CHECKPOINTS",
    "MIGRATIONS",
    "MODEL_KINDS",
    "ObservationBatch",
    "RegisteredVehicle",
    "SCHEMA_VERSION",
    "SQLITE_MAGIC",
    "SegmentChange",
    "SegmentReset",
    "StateCache",
    "Store",
    "TRIP_STATUSES",
    "Trip",
    "TripPlan",
    "io_problem",
]
