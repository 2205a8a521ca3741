"""Per-trip commands on a persistent state: ``init``, ``route``, ``observe``, ``map``, ``history``.

A state directory holds the SQLite store (trips, observations, model checkpoints; see
:mod:`ev_nav.store`) and a ``maps/`` folder. The learned model is rebuilt from the latest
checkpoint plus any observation batches committed after it, so an interrupted ``observe`` never
loses data: the next command replays what the checkpoint missed.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ev_nav.energy import Vehicle, get_vehicle, load_vehicle
from ev_nav.errors import (
    InvalidObservation,
    ModelStateError,
    StateError,
    StateIOError,
    UnsafeCheckpointError,
)
from ev_nav.faults import crash_point

if TYPE_CHECKING:  # scipy-backed; imported where a network is really loaded (not by 'history')
    from ev_nav.roads.network import RoadNetwork

SYNTHETIC_PREFIX = "synthetic:"


# ----------------------------------------------------------------------------- helpers
def _parse_latlon(text: str) -> tuple[float, float]:
    try:
        lat_s, lon_s = text.split(",")
        lat, lon = float(lat_s), float(lon_s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected LAT,LON (e.g. 47.01,8.02), got {text!r}"
        ) from None
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        raise argparse.ArgumentTypeError(f"coordinates out of range: {text!r}")
    return lat, lon


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not np.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _distance_arg(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a distance must be positive, got {text!r}")
    return value


def _seed_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"a seed must be in 0..2^63-1, got {text}")
    return value


def network_ref_for(args: argparse.Namespace) -> str:
    """How the state finds its network again: an absolute path or ``synthetic:N:SEED``."""
    if args.synthetic:
        return f"{SYNTHETIC_PREFIX}{args.segments}:{args.seed_town}"
    return str(Path(args.network).resolve())


def load_network_ref(ref: str) -> RoadNetwork:
    """Load the network a state refers to."""
    if ref.startswith(SYNTHETIC_PREFIX):
        from ev_nav.roads.synthetic import synthetic_town

        n, seed = ref[len(SYNTHETIC_PREFIX) :].split(":")
        return synthetic_town(int(n), seed=int(seed))
    from ev_nav.roads.network import RoadNetwork

    return RoadNetwork.load(ref)


def build_model(kind: str, net: RoadNetwork, vehicle: Vehicle, seed: int = 0) -> Any:
    """A fresh model of ``kind`` with the spec's prior for this network and vehicle.

    The GP uses the closed-form q(u) refresh after every trip: one driver's data is small, and an
    exact update is what a careful user wants (no learning-rate tuning).
    """
    if kind == "bi":
        from ev_nav.gp.independent import BIModel

        return BIModel(net, vehicle=vehicle)
    from ev_nav.gp.svgp import SVGPConfig, SVGPModel

    return SVGPModel(net, vehicle=vehicle, config=SVGPConfig(exact_refresh=True), seed=seed)


def _model_bytes(model: Any) -> bytes:
    from ev_nav.checkpoints import encode

    return encode(model.state_dict())


@dataclass
class Session:
    """An open state: store, network, vehicle and the up-to-date model."""

    store: Any
    net: RoadNetwork
    vehicle: Vehicle
    model: Any
    applied_upto: int = 0  # the model has absorbed every observation batch with id <= this
    #: checkpoints passed over while loading (damaged, old pickle format): one line each
    skipped: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.store.close()

    def load_model(self) -> None:
        """Rebuild the model: newest usable checkpoint, then every batch committed after it.

        A checkpoint is used only if its hash verifies and it is in the pickle-free format
        (:mod:`ev_nav.checkpoints`; an old pickled one is never unpickled). Otherwise the next
        older one is tried, and finally the prior, replaying every observation: the observations
        are the data, checkpoints only save replay time.

        Batch ids grow in commit order (writes are serialised), so the largest id replayed from
        one snapshot is an honest claim that every earlier batch is included too — even while
        another process is observing into the same state.
        """
        model, after, self.skipped = restore_model(self.store, self.net, self.vehicle)
        batches = self.store.observations(after_batch=after)
        _apply_batches(model, batches)
        self.model = model
        self.applied_upto = max([after, *(b.id for b in batches)])

    def catch_up(self) -> None:
        """Apply the observation batches committed since the model was loaded."""
        batches = self.store.observations(after_batch=self.applied_upto)
        _apply_batches(self.model, batches)
        self.applied_upto = max([self.applied_upto, *(b.id for b in batches)])

    def notice(self) -> str | None:
        """One line saying how the model was rebuilt when a checkpoint had to be passed over."""
        if not self.skipped:
            return None
        return (
            f"model rebuilt from {'an older checkpoint' if self.applied_upto else 'the prior'} "
            f"and the recorded observations ({'; '.join(self.skipped)}); no observation was lost"
        )


def restore_model(store: Any, net: RoadNetwork, vehicle: Vehicle) -> tuple[Any, int, list[str]]:
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
        model = build_model(store.model_kind, net, vehicle)
        try:
            model.load_state_dict(decode(ck.blob))
        except UnsafeCheckpointError:
            skipped.append(f"checkpoint {ck.id} in the old pickle format, never loaded")
            continue
        except (ModelStateError, KeyError, TypeError, ValueError, RuntimeError) as exc:
            skipped.append(f"checkpoint {ck.id} unusable ({str(exc)[:80]})")
            continue
        return model, ck.last_batch_id, skipped
    return build_model(store.model_kind, net, vehicle), 0, skipped


def open_session(state: Path, network: Path | None = None, *, with_model: bool = True) -> Session:
    """Open a state, check its network, and rebuild the model (checkpoint + replay)."""
    from ev_nav.store import Store

    store = Store.open(state)
    try:
        ref = str(network.resolve()) if network is not None else store.network_ref
        try:
            net = load_network_ref(ref)
        except FileNotFoundError as exc:
            raise StateError(
                f"the state's network {ref} is missing ({exc}); pass --network PATH"
            ) from None
        store.check_network(net.content_hash, net.arrays_hash)
        session = Session(store, net, Vehicle(**store.vehicle().spec), None)
        if with_model:
            session.load_model()
            note = session.notice()
            if note:
                print(f"ev-nav: notice: {note}", file=sys.stderr)
                # Save a good checkpoint now so the next command does not replay again (this also
                # migrates a state whose checkpoints are all in the old pickle format).
                try:
                    _checkpoint(session)
                except StateError:
                    pass  # e.g. read-only: the rebuilt model is still right for this command
        return session
    except BaseException:
        store.close()
        raise


def _apply_batches(model: Any, batches: list[Any]) -> None:
    for b in batches:
        if b.kind == "segment":
            model.update(b.segment_ids, b.energy_wh)
        else:
            model.update_total(b.segment_ids, float(b.energy_wh[0]))


def _checkpoint(session: Session) -> None:
    session.store.save_checkpoint(
        _model_bytes(session.model),
        session.store.n_observations(),
        last_batch_id=session.applied_upto,
    )


# ----------------------------------------------------------------------------- registration
def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``init``, ``route``, ``observe``, ``map`` and ``history``."""
    p = subparsers.add_parser("init", help="create a state directory for per-trip learning")
    p.add_argument("state", type=Path, help="state directory to create")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--network", type=Path, help="network file from 'ev-nav network build'")
    src.add_argument("--synthetic", action="store_true", help="the embedded synthetic town")
    p.add_argument("--segments", type=int, default=2000, help="synthetic town size")
    p.add_argument("--seed-town", type=int, default=0, help="synthetic town seed")
    veh = p.add_mutually_exclusive_group()
    veh.add_argument("--vehicle", default="sumo-default", help="vehicle preset name")
    veh.add_argument("--vehicle-file", type=Path, help="vehicle TOML (preset + overrides)")
    p.add_argument("--model", choices=("gp", "bi"), default="gp", help="learning model")
    p.set_defaults(func=_cmd_init)

    p = subparsers.add_parser("route", help="plan a trip, record it, write its map")
    p.add_argument("state", type=Path)
    p.add_argument("--from", dest="origin", required=True, type=_parse_latlon, metavar="LAT,LON")
    p.add_argument("--to", dest="goal", required=True, type=_parse_latlon, metavar="LAT,LON")
    p.add_argument(
        "--policy",
        choices=("ts", "bucb", "ucb", "mean"),
        default="ts",
        help="ts explores by sampling (default), bucb/ucb optimistically, mean is greedy",
    )
    p.add_argument(
        "--seed", type=_seed_arg, help="seed of the Thompson draw, 0..2^63-1 (default: trip id)"
    )
    p.add_argument(
        "--max-snap", type=_distance_arg, default=500.0, help="max distance to a road [m]"
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.add_argument("--no-map", action="store_true", help="do not write the HTML map")
    p.set_defaults(func=_cmd_route)

    p = subparsers.add_parser("observe", help="record the energy a planned trip used")
    p.add_argument("state", type=Path)
    p.add_argument("trip_id", type=int)
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--segments", type=Path, help="CSV with columns segment,energy_wh (per-segment energies)"
    )
    what.add_argument("--total-wh", type=_finite_float, help="only the trip's total energy [Wh]")
    what.add_argument(
        "--undo", action="store_true", help="forget this trip's observations (and the model too)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"record readings more than {PLAUSIBLE_SIGMAS:g} sd from the prediction",
    )
    p.add_argument(
        "--partial", action="store_true", help="accept a CSV that covers only part of the route"
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.set_defaults(func=_cmd_observe)

    p = subparsers.add_parser("map", help="HTML map of the learned network")
    p.add_argument("state", type=Path)
    p.add_argument(
        "--layer", choices=("mean", "sd", "visits", "energy-per-km"), default="energy-per-km"
    )
    p.add_argument("--out", type=Path, help="HTML file (default STATE/maps/<layer>.html)")
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.set_defaults(func=_cmd_map)

    p = subparsers.add_parser("history", help="past trips: predicted vs observed energy")
    p.add_argument("state", type=Path)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_history)


# ----------------------------------------------------------------------------- commands
def _cmd_init(args: argparse.Namespace) -> int:
    from ev_nav.store import Store

    vehicle = load_vehicle(args.vehicle_file) if args.vehicle_file else get_vehicle(args.vehicle)
    ref = network_ref_for(args)
    net = load_network_ref(ref)
    store = Store.create(
        args.state,
        net.content_hash,
        ref,
        args.model,
        vehicle.to_dict(),
        n_segments=net.n_segments,
        network_arrays_hash=net.arrays_hash,
    )
    try:
        session = Session(store, net, vehicle, build_model(args.model, net, vehicle))
        _checkpoint(session)  # applied_upto = 0: the prior
    finally:
        store.close()
    print(
        f"initialised {args.state}: {net.name} ({net.n_segments:,} segments), "
        f"model {args.model}, vehicle {vehicle.name}"
    )
    return 0


def _cmd_route(args: argparse.Namespace) -> int:
    from ev_nav.bandits.agent import describe_route
    from ev_nav.bandits.indices import make_index, rectified_weights
    from ev_nav.bandits.routing import Router
    from ev_nav.store import TripPlan

    session = open_session(args.state, args.network)
    try:
        net, model, store = session.net, session.model, session.store
        start = net.nearest_segment(args.origin[1], args.origin[0], args.max_snap)
        goal = net.nearest_segment(args.goal[1], args.goal[0], args.max_snap)
        if start == goal:
            raise InvalidObservation(
                f"origin and destination snap to the same road segment ({start}); a trip needs "
                "two different places"
            )
        maps_dir = _maps_dir(Path(args.state))  # checked before anything is recorded
        router = Router(net)
        shortest = router.route(net.length_m, start, goal)
        fastest = router.route(net.travel_time_s, start, goal)
        routes: dict[str, Any] = {}
        post = model.posterior()
        from ev_nav.potential import potential_change

        # Regeneration-aware: rectify in reduced-cost space (downhill savings count in full).
        dphi = potential_change(net, session.vehicle)

        def plan(trip_id: int) -> dict[str, Any]:
            # Runs inside the store's write transaction: trip_id is this trip's own, so the
            # Thompson seed derived from it is never shared with a concurrent route command.
            seed = trip_id if args.seed is None else args.seed
            rng = np.random.default_rng(seed)
            weights = rectified_weights(make_index(args.policy), post, trip_id, rng, dphi)
            planned = router.route(weights, start, goal)
            routes["planned"] = describe_route(net, planned, model, args.policy)
            routes["shortest"] = describe_route(net, shortest, model, "shortest")
            routes["fastest"] = describe_route(net, fastest, model, "fastest")
            p = routes["planned"]
            return TripPlan(
                origin_segment=start,
                goal_segment=goal,
                policy=args.policy,
                route=planned,
                predicted_wh=p.predicted_wh,
                predicted_sd_wh=p.predicted_sd_wh,
                length_m=p.length_m,
                time_s=p.time_s,
                seed=seed,
            )

        trip_id = store.plan_trip(plan)
        planned = routes["planned"].segments
        print(f"trip {trip_id}: segment {start} -> {goal}, policy {args.policy}")
        print(f"{'route':<10}{'km':>8}{'min':>8}{'predicted Wh':>16}{'± sd':>9}")
        for name, r in routes.items():
            print(
                f"{name:<10}{r.length_m / 1000:>8.2f}{r.time_s / 60:>8.1f}"
                f"{r.predicted_wh:>16.1f}{r.predicted_sd_wh:>9.1f}"
            )
        try:
            _write_route_geojson(net, routes, maps_dir / f"trip-{trip_id}.geojson")
            if not args.no_map:
                from ev_nav.viz.maps import route_map

                post = model.posterior()
                html = maps_dir / f"trip-{trip_id}.html"
                route_map(
                    net,
                    planned,
                    {"shortest": shortest, "fastest": fastest},
                    route_name=f"planned ({args.policy})",
                    mean_wh=post.mean,
                    sd_wh=post.std,
                    title=f"ev-nav trip {trip_id}",
                    path=html,
                )
                print(f"map: {html}")
        except OSError as exc:
            raise StateIOError(
                f"trip {trip_id} was recorded, but its map could not be written to {maps_dir} "
                f"({exc}); record the drive as usual, 'ev-nav map' can draw it later"
            ) from None
        print(f"record the drive with: ev-nav observe {args.state} {trip_id} --total-wh X")
    finally:
        session.close()
    return 0


def _maps_dir(state: Path) -> Path:
    """``STATE/maps``, created if missing; a clear error if it cannot hold maps."""
    maps = state / "maps"
    if maps.exists() and not maps.is_dir():
        raise StateError(
            f"{maps} exists but is not a folder, so trip maps cannot be written there; move that "
            "file elsewhere (it is not part of the state's data) and retry"
        )
    try:
        maps.mkdir(exist_ok=True)
    except OSError as exc:
        raise StateIOError(f"cannot create {maps} ({exc}); nothing was recorded") from None
    return maps


def _write_route_geojson(net: RoadNetwork, routes: dict[str, Any], path: Path) -> None:
    from ev_nav.provenance import atomic_write_text

    features = []
    for name, r in routes.items():
        coords = np.concatenate([net.segment_coords(int(e)) for e in r.segments])
        features.append(
            {
                "type": "Feature",
                "geometry": {"type": "LineString", "coordinates": coords.round(7).tolist()},
                "properties": {
                    "name": name,
                    "segments": r.segments.tolist(),
                    "length_m": r.length_m,
                    "time_s": r.time_s,
                    "predicted_wh": r.predicted_wh,
                    "predicted_sd_wh": r.predicted_sd_wh,
                },
            }
        )
    atomic_write_text(path, json.dumps({"type": "FeatureCollection", "features": features}))


#: More rows than any trip's route can have on a network ev-nav handles: a file this long is not an
#: observation of one trip (and reading it whole would only exhaust memory).
MAX_CSV_ROWS = 2_000_000


def read_segment_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read ``segment,energy_wh`` rows (header required)."""
    if not path.is_file():
        raise InvalidObservation(f"observation file not found: {path}")
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or not {"segment", "energy_wh"} <= set(
                f.strip() for f in reader.fieldnames
            ):
                raise InvalidObservation(
                    f"{path}: expected a header 'segment,energy_wh', got {reader.fieldnames}"
                )
            seg, wh = [], []
            for i, row in enumerate(reader, start=2):
                if i > MAX_CSV_ROWS:
                    raise InvalidObservation(
                        f"{path} has more than {MAX_CSV_ROWS:,} rows: not one trip's observations"
                    )
                row = {k.strip(): (v or "").strip() for k, v in row.items() if isinstance(k, str)}
                try:
                    seg.append(int(row["segment"]))
                    wh.append(float(row["energy_wh"]))
                    if not -(2**63) <= seg[-1] < 2**63:
                        raise ValueError
                except ValueError:
                    raise InvalidObservation(
                        f"{path}, line {i}: cannot read segment {row['segment']!r} / "
                        f"energy {row['energy_wh']!r}"
                    ) from None
    except UnicodeDecodeError:
        raise InvalidObservation(f"{path} is not a UTF-8 text CSV file") from None
    except csv.Error as exc:  # e.g. a field longer than the csv module's limit, NUL bytes
        raise InvalidObservation(f"{path} is not a readable CSV file ({exc})") from None
    if not seg:
        raise InvalidObservation(f"{path} has no observation rows")
    return np.asarray(seg, dtype=np.int64), np.asarray(wh, dtype=np.float64)


#: An observation further than this many predictive standard deviations from the model's
#: prediction is refused unless ``--force`` (a typo, a unit mix-up, a broken logger). Far beyond
#: what real variation produces, so honest surprises are still learned from.
PLAUSIBLE_SIGMAS = 8.0

#: No segment or trip of a road vehicle can use or recover this much [Wh] (the largest EV
#: batteries hold ~200 kWh); refused even with ``--force``.
HARD_LIMIT_WH = 1_000_000.0


def check_plausible(
    values: np.ndarray, mean: np.ndarray, sd: np.ndarray, what: list[str], *, force: bool = False
) -> None:
    """Raise :class:`InvalidObservation` for readings that cannot be right (see the constants).

    ``values``, ``mean`` and ``sd`` [Wh] are the readings and their predictive distribution;
    ``what`` names each reading for the message. The message says why: too large for any
    vehicle (always), a likely kWh/Wh mix-up, or how many standard deviations from the
    prediction (both skipped with ``force``).
    """
    big = np.flatnonzero(np.abs(values) > HARD_LIMIT_WH)
    if big.size:
        k = int(big[0])
        raise InvalidObservation(
            f"{what[k]}: {values[k]:g} Wh is more than any vehicle can use or recover "
            f"({HARD_LIMIT_WH:,.0f} Wh); energies are in Wh"
        )
    if force:
        return
    sd = np.maximum(sd, 1e-9)
    z = np.abs(values - mean) / sd
    # A unit mix-up: the reading is off, but a thousand times it sits right on the prediction
    # (kWh from the trip computer typed where Wh are asked for).
    fits = (np.abs(values * 1000.0 - mean) / sd < 2.0) & (z > 3.0)
    if fits.any():
        k = int(np.flatnonzero(fits)[0])
        raise InvalidObservation(
            f"{what[k]}: {values[k]:g} looks like kWh (predicted {mean[k]:.1f} ± "
            f"{sd[k]:.1f} Wh); give energies in Wh, or --force to record it as it is"
        )
    bad = np.flatnonzero(z > PLAUSIBLE_SIGMAS)
    if not bad.size:
        return
    k = int(bad[np.argmax(z[bad])])
    pred = f"predicted {mean[k]:.1f} ± {sd[k]:.1f} Wh"
    more = f" (and {bad.size - 1} more)" if bad.size > 1 else ""
    raise InvalidObservation(
        f"{what[k]}: {values[k]:g} Wh is {z[k]:.0f} standard deviations from the {pred}"
        f"{more}; check the reading, or --force to record it"
    )


def _cmd_observe(args: argparse.Namespace) -> int:
    if args.undo:
        return _undo_observe(args)
    if args.segments is None and args.total_wh is None:
        raise InvalidObservation("give --segments CSV or --total-wh X (or --undo)")
    session = open_session(args.state, args.network)
    try:
        store, model = session.store, session.model
        trip = store.get_trip(args.trip_id)
        post = model.posterior()
        noise = float(model.noise_std)
        if args.segments is not None:
            seg, wh = read_segment_csv(args.segments)
            bad = np.flatnonzero(~np.isfinite(wh))
            if bad.size:
                raise InvalidObservation(
                    f"{args.segments}: energies must be finite; segment {int(seg[bad[0]])} has "
                    f"{wh[bad[0]]}"
                )
            missing = np.setdiff1d(trip.route, seg)
            if missing.size and not args.partial:
                raise InvalidObservation(
                    f"{args.segments} covers {trip.route.size - missing.size} of the "
                    f"{trip.route.size} segments of trip {trip.id}; give every segment, or the "
                    "trip total with --total-wh, or --partial to record only these"
                )
            ok = (seg >= 0) & (seg < post.mean.size)
            idx = np.where(ok, seg, 0)
            check_plausible(
                wh,
                post.mean[idx],
                np.sqrt(post.std[idx] ** 2 + noise**2),
                [f"segment {int(e)}" for e in seg],
                force=args.force,
            )
            store.add_observations(trip.id, seg, wh)
            observed = float(wh.sum())
            what = f"{seg.size} segment energies"
        else:
            if args.total_wh == 0 and not args.force:
                raise InvalidObservation(
                    f"trip {trip.id} total: exactly 0 Wh means the trip computer did not "
                    "record this drive; --force if the trip really used no energy"
                )
            sd = np.sqrt(trip.predicted_sd_wh**2 + trip.route.size * noise**2)
            check_plausible(
                np.array([args.total_wh]), np.array([trip.predicted_wh]), np.array([sd]),
                [f"trip {trip.id} total"], force=args.force,
            )
            store.add_total_observation(trip.id, args.total_wh)
            observed = float(args.total_wh)
            what = "the trip total"
        # The observation is committed (acknowledged) now. The model update below replays it from
        # the store, so a kill from here on loses nothing: the next command replays it again.
        print(
            f"trip {trip.id}: recorded {what} ({observed:.1f} Wh; predicted "
            f"{trip.predicted_wh:.1f} ± {trip.predicted_sd_wh:.1f} Wh)",
            flush=True,
        )
        crash_point("observe-acknowledged")
        session.catch_up()
        crash_point("observe-model-updated")
        _checkpoint(session)
        print("model updated")
    finally:
        session.close()
    return 0


def _undo_observe(args: argparse.Namespace) -> int:
    session = open_session(args.state, args.network, with_model=False)
    try:
        n = session.store.forget_observations(args.trip_id)
        print(f"trip {args.trip_id}: forgot {n} observation batch(es)", flush=True)
        session.load_model()  # from a checkpoint that never saw them, or the prior
        _checkpoint(session)
        print("model updated (the trip's observations are forgotten)")
    finally:
        session.close()
    return 0


def _visits(store: Any, n: int) -> np.ndarray:
    visits = np.zeros(n, dtype=np.int64)
    for b in store.observations():
        np.add.at(visits, b.segment_ids, 1)
    return visits


def _cmd_map(args: argparse.Namespace) -> int:
    from ev_nav.viz.maps import network_map

    session = open_session(args.state, args.network, with_model=args.layer != "visits")
    try:
        net = session.net
        titles = {
            "mean": "posterior mean energy [Wh]",
            "sd": "posterior sd [Wh]",
            "visits": "times driven",
            "energy-per-km": "predicted energy [Wh/km]",
        }
        if args.layer == "visits":
            values = _visits(session.store, net.n_segments).astype(float)
            mean = sd = None
        else:
            post = session.model.posterior()
            mean, sd = post.mean, post.std
            values = {
                "mean": post.mean,
                "sd": post.std,
                "energy-per-km": post.mean / (net.length_m / 1000.0),
            }[args.layer]
        out = args.out or Path(args.state) / "maps" / f"{args.layer}.html"
        network_map(
            net,
            values,
            layer_name=args.layer,
            legend_title=titles[args.layer],
            mean_wh=mean,
            sd_wh=sd,
            title=f"ev-nav: {titles[args.layer]}",
            path=out,
        )
        print(f"map: {out}")
    finally:
        session.close()
    return 0


def _cmd_history(args: argparse.Namespace) -> int:
    from ev_nav.store import Store

    with Store.open(args.state) as store:
        rows = []
        for trip in store.list_trips():
            observed = store.observed_total(trip.id)
            rows.append(
                {
                    "trip": trip.id,
                    "created": trip.created[:19],
                    "policy": trip.policy,
                    "km": round(trip.length_m / 1000, 3),
                    "predicted_wh": round(trip.predicted_wh, 1),
                    "predicted_sd_wh": round(trip.predicted_sd_wh, 1),
                    "observed_wh": None if observed is None else round(observed, 1),
                }
            )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no trips yet; plan one with 'ev-nav route'")
        return 0
    header = f"{'trip':>5}  {'created':<19}  {'policy':<8}{'km':>8}"
    print(f"{header}{'predicted Wh':>20}{'observed Wh':>13}")
    for r in rows:
        pred = f"{r['predicted_wh']:.1f} ± {r['predicted_sd_wh']:.1f}"
        obs = "-" if r["observed_wh"] is None else f"{r['observed_wh']:.1f}"
        head = f"{r['trip']:>5}  {r['created']:<19}  {r['policy']:<8}{r['km']:>8.2f}"
        print(f"{head}{pred:>20}{obs:>13}")
    return 0
