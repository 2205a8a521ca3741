"""The driver's per-trip workflow as a library: open a state, plan, record, learn.

The ``ev-nav init | route | observe | history`` commands are thin wrappers around these; a
program uses them directly (see the README's "Python API")::

    import ev_nav

    with ev_nav.create_state("mystate", synthetic=2000) as session:
        trip = ev_nav.plan_trip(session, (47.0010, 8.0020), (47.0240, 8.0350), policy="ts")
        ev_nav.record_total(session, trip.trip_id, 530.0)
"""

from ev_nav.lazy import lazy_exports

#: Each public name and its module: imported on first use (:mod:`ev_nav.lazy`), so a command
#: that needs one module of the workflow does not import the others.
_EXPORTS: dict[str, str] = {
    "HARD_LIMIT_WH": "ev_nav.trips.plausibility",
    "hard_limit_wh": "ev_nav.trips.plausibility",
    "PLAUSIBLE_NOISE_SPREAD": "ev_nav.trips.plausibility",
    "PLAUSIBLE_SIGMAS": "ev_nav.trips.plausibility",
    "check_plausible": "ev_nav.trips.plausibility",
    "forget_trip": "ev_nav.trips.observations",
    "read_segment_csv": "ev_nav.trips.observations",
    "record_segments": "ev_nav.trips.observations",
    "record_total": "ev_nav.trips.observations",
    "PlannedTrip": "ev_nav.trips.planning",
    "plan_trip": "ev_nav.trips.planning",
    "write_trip_files": "ev_nav.trips.planning",
    "Session": "ev_nav.trips.session",
    "StateNotice": "ev_nav.trips.session",
    "apply_batches": "ev_nav.trips.session",
    "build_model": "ev_nav.trips.session",
    "create_state": "ev_nav.trips.session",
    "load_network_ref": "ev_nav.trips.session",
    "open_session": "ev_nav.trips.session",
    "restore_model": "ev_nav.trips.session",
    "save_checkpoint": "ev_nav.trips.session",
    "trip_history": "ev_nav.trips.session",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS, __all__)
