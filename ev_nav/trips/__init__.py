"""The driver's per-trip workflow as a library: open a state, plan, record, learn.

The ``ev-nav init | route | observe | history`` commands are thin wrappers around these; a
program uses them directly (see the README's "Python API")::

    import ev_nav

    with ev_nav.create_state("mystate", synthetic=2000) as session:
        trip = ev_nav.plan_trip(session, (47.0010, 8.0020), (47.0240, 8.0350), policy="ts")
        ev_nav.record_total(session, trip.trip_id, 530.0)
"""

from ev_nav.trips.observations import (
    HARD_LIMIT_WH,
    PLAUSIBLE_NOISE_SPREAD,
    PLAUSIBLE_SIGMAS,
    check_plausible,
    forget_trip,
    read_segment_csv,
    record_segments,
    record_total,
)
from ev_nav.trips.planning import PlannedTrip, plan_trip, write_trip_files
from ev_nav.trips.session import (
    Session,
    StateNotice,
    apply_batches,
    build_model,
    create_state,
    load_network_ref,
    open_session,
    restore_model,
    save_checkpoint,
    trip_history,
)

__all__ = [
    "HARD_LIMIT_WH",
    "PLAUSIBLE_NOISE_SPREAD",
    "PLAUSIBLE_SIGMAS",
    "PlannedTrip",
    "Session",
    "StateNotice",
    "apply_batches",
    "build_model",
    "check_plausible",
    "create_state",
    "forget_trip",
    "load_network_ref",
    "open_session",
    "plan_trip",
    "read_segment_csv",
    "record_segments",
    "record_total",
    "restore_model",
    "save_checkpoint",
    "trip_history",
    "write_trip_files",
]
