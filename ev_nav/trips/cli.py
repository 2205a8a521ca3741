"""Per-trip commands on a persistent state: ``init``, ``route``, ``observe``, ``map``, ``history``,
``changes``; and ``vehicles``, the catalogue ``init --vehicle`` takes names from.

Parse, call the library (:mod:`ev_nav.trips`), print. The session logic — opening a state,
restoring the model, planning, checking and recording observations — lives there.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ev_nav.cli import finite_arg, seed_arg, state_arg, tell, town_size_arg
from ev_nav.errors import ConfigError, InvalidObservation, StateIOError
from ev_nav.progress import Stages
from ev_nav.trips.battery import (
    DEFAULT_RESERVE,
    add_forecasts,
    e_det_shift,
    parse_charge,
    reserve_warning,
    route_forecasts,
    route_shift_wh,
    vehicle_model_entry,
)
from ev_nav.trips.plausibility import PLAUSIBLE_SIGMAS, SD_WITH_NOISE
from ev_nav.wording import percent, percent_range, plural, signed

#: What the route table's "± model sd" is (printed under the table).
MODEL_SD_MEANING = (
    "the model's uncertainty about the mean energy; a single drive varies more (drive-to-drive "
    "noise)"
)
#: What the arrival charge's interval and probability count (printed under that table).
ARRIVAL_SPREAD_MEANING = "the model's uncertainty plus the drive-to-drive noise"

if TYPE_CHECKING:
    from ev_nav.energy import Vehicle
    from ev_nav.store.trips import Trip
    from ev_nav.trips.session import Session


# ----------------------------------------------------------------------------- argument types
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


def _distance_arg(text: str) -> float:
    value = finite_arg(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a distance must be positive, got {text!r}")
    return value


def _time_weight_arg(text: str) -> float:
    value = finite_arg(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"a time weight must be >= 0 Wh/min, got {text!r}")
    return value


def _avoid_arg(text: str) -> tuple[str, ...]:
    from ev_nav.errors import RouteOptionError
    from ev_nav.trips.route_options import parse_kinds

    try:
        return parse_kinds([text])
    except RouteOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``init``, ``route``, ``observe``, ``map``, ``history`` and ``vehicles``."""
    p = subparsers.add_parser("init", help="create a state directory for per-trip learning")
    p.add_argument("state", type=state_arg, help="state directory to create")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--network", type=Path, help="network file from 'ev-nav network build'")
    src.add_argument("--synthetic", action="store_true", help="the embedded synthetic town")
    p.add_argument(
        "--segments", type=town_size_arg,
        help="synthetic town size [segments], with --synthetic only (default 2000)",
    )
    p.add_argument(
        "--seed-town", type=seed_arg, help="synthetic town seed, with --synthetic only (default 0)"
    )
    veh = p.add_mutually_exclusive_group()
    veh.add_argument(
        "--vehicle",
        default="sumo-default",
        help="vehicle preset (sumo-default, the default; van) or catalogue model "
        "('ev-nav vehicles' lists them)",
    )
    veh.add_argument(
        "--vehicle-file", type=Path, help="vehicle TOML (preset or catalogue model + overrides)"
    )
    p.add_argument(
        "--model", choices=("gp", "bi"), default="gp",
        help="learning model: gp (a GP over the road graph, default) or bi (independent segments)",
    )
    p.set_defaults(func=_cmd_init)

    p = subparsers.add_parser("route", help="plan a trip, record it, write its map")
    p.add_argument("state", type=state_arg, help="state directory (ev-nav init)")
    p.add_argument("--from", dest="origin", required=True, type=_parse_latlon, metavar="LAT,LON",
                   help="start, snapped to the nearest road")
    p.add_argument("--to", dest="goal", required=True, type=_parse_latlon, metavar="LAT,LON",
                   help="destination, snapped to the nearest road")
    p.add_argument(
        "--policy",
        choices=("ts", "bucb", "ucb", "mean", "safe"),
        help="ts explores by sampling (default), bucb/ucb optimistically, mean is greedy, "
        "safe avoids energy surprises (least sum of the segments' 95%% energy quantiles)",
    )
    p.add_argument(
        "--soc",
        help="state of charge at departure (80%%, 24.5kWh): show arrival charge per route",
    )
    p.add_argument(
        "--reserve", help="charge to keep at arrival, with --soc (default "
        f"{DEFAULT_RESERVE.replace('%', '%%')})",
    )
    p.add_argument(
        "--confidence",
        type=_confidence_arg,
        help="plan charging stops (with --soc): every arrival keeps the reserve with at least "
        "this probability, e.g. 0.95 (the network needs chargers: 'ev-nav network chargers')",
    )
    p.add_argument(
        "--stop-minutes",
        type=_minutes_arg,
        help="time a charging stop costs besides charging [min], with --confidence "
        f"(default {STOP_DEFAULTS['stop_minutes']:g})",
    )
    p.add_argument(
        "--max-charge",
        help="highest charge to plan a stop to, with --confidence "
        f"(default {STOP_DEFAULTS['max_charge'].replace('%', '%%')})",
    )
    p.add_argument(
        "--max-stops", type=_stops_arg,
        help=f"most stops, with --confidence (default {STOP_DEFAULTS['max_stops']})",
    )
    p.add_argument(
        "--vehicle-model",
        metavar="NAME",
        help="plan for this catalogue car ('ev-nav vehicles' lists them) instead of the "
        "state's vehicle: predictions and arrival charge use the learned energies moved by the "
        "two cars' physics difference, and its battery; charging stops (--confidence) its "
        "battery, charging curve and plugs. The routes are chosen on what the state learned",
    )
    p.add_argument(
        "--via",
        type=_parse_latlon,
        action="append",
        default=[],
        metavar="LAT,LON",
        help="a point the route passes (repeat for several, visited in the order given)",
    )
    p.add_argument(
        "--avoid",
        type=_avoid_arg,
        action="append",
        default=[],
        metavar="KIND",
        help="road kinds to avoid: motorway, toll, unpaved, ferry (comma-separated or repeated; "
        "toll and unpaved need a network built from OSM, which tags them; ferry crossings are "
        "not loaded, so a network has none to avoid)",
    )
    p.add_argument(
        "--time-weight",
        type=_time_weight_arg,
        default=0.0,
        metavar="WH_PER_MIN",
        help="price of time: minimise predicted energy + this many Wh per minute of driving "
        "(default 0: energy only)",
    )
    p.add_argument(
        "--seed", type=seed_arg, help="seed of the Thompson draw, 0..2^63-1 (default: trip id)"
    )
    p.add_argument(
        "--temperature", type=finite_arg, metavar="C",
        help="ambient temperature [°C]: predict the trip at it (docs/temperature.md)",
    )
    p.add_argument(
        "--max-snap", type=_distance_arg, default=500.0,
        help="max distance to a road [m] (default 500)",
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.add_argument("--no-map", action="store_true", help="do not write the HTML map")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="plan and print only: record no trip and write no files",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_route)

    p = subparsers.add_parser("observe", help="record the energy a planned trip used")
    p.add_argument("state", type=state_arg, help="state directory (ev-nav init)")
    p.add_argument("trip_id", type=int, help="the trip's id, as 'route' printed it")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--segments", type=Path,
        help="CSV with columns segment,energy_wh (per-segment energies [Wh]; the first and last "
             "rows: of the part of those segments the trip drove)",
    )
    what.add_argument("--total-wh", type=finite_arg, help="only the trip's total energy [Wh]")
    what.add_argument(
        "--undo", action="store_true",
        help="forget this trip's observations; the model forgets what it learned from them",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"record readings more than {PLAUSIBLE_SIGMAS:g} sd from the prediction",
    )
    p.add_argument(
        "--partial", action="store_true",
        help="accept a --segments CSV that covers only part of the route"
    )
    p.add_argument(
        "--gpx",
        type=Path,
        help="GPS track of the drive: records the route actually driven (with --total-wh, or "
        "the track's per-point energy_wh counter)",
    )
    p.add_argument(
        "--gps-sigma", type=_distance_arg, default=None,
        help="GPS noise of a --gpx track [m] (default 10)",
    )
    p.add_argument(
        "--temperature", type=finite_arg, metavar="C",
        help="ambient temperature of the drive [°C], learned with it (docs/temperature.md)",
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_observe)

    p = subparsers.add_parser("map", help="HTML map of the learned network")
    p.add_argument("state", type=state_arg)
    p.add_argument(
        "--layer", choices=("mean", "sd", "visits", "energy-per-km"), default="energy-per-km",
        help="what to draw: predicted Wh/km (default), mean or sd of each segment's energy "
        "[Wh], or times driven",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="HTML file, ending in .html or .htm (default STATE/maps/<layer>.html); the map "
        "library goes in lib/ beside it",
    )
    p.add_argument(
        "--standalone",
        action="store_true",
        help="one self-contained HTML file (library and network inlined) to send around",
    )
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_map)

    p = subparsers.add_parser("history", help="past trips: predicted vs observed energy")
    p.add_argument("state", type=state_arg)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_history)

    p = subparsers.add_parser(
        "changes", help="roads flagged as changed: list them, or dismiss a flag"
    )
    p.add_argument("state", type=state_arg)
    p.add_argument(
        "--dismiss",
        action="append",
        metavar="SEGMENT",
        help="un-flag this segment (repeatable, or a comma list): the road did not change, the "
        "model takes its set-aside readings back",
    )
    p.add_argument("--all", action="store_true", help="list dismissed changes too")
    p.add_argument("--network", type=Path, help="network file, if it moved since init")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_changes)

    p = subparsers.add_parser("vehicles", help="the vehicle catalogue: EV models init can use")
    p.add_argument("--json", action="store_true", help="machine-readable output, with sources")
    p.set_defaults(func=_cmd_vehicles)


# ----------------------------------------------------------------------------- commands
@contextmanager
def _session(
    state: Path,
    network: Path | None,
    *,
    with_model: bool = True,
    save_repairs: bool = True,
    planning: bool = False,
) -> Iterator[Session]:
    """An open session; a fallback notice (damaged/old checkpoint) is printed as one line, and
    so is a model left behind by the replay limit (:data:`ev_nav.settings.CLI_MAX_REPLAY`)."""
    from ev_nav.settings import CLI_MAX_REPLAY
    from ev_nav.trips.session import StateNotice, open_session

    with warnings.catch_warnings():  # each notice (main prints them as one line)
        warnings.simplefilter("always", StateNotice)
        session = open_session(
            state, network, with_model=with_model, save_repairs=save_repairs, planning=planning,
            max_replay=CLI_MAX_REPLAY,
        )
    if session.behind:
        tell("notice", f"the model is {session.behind:,} observation batches behind the state "
             f"(a command replays at most {CLI_MAX_REPLAY:,}); 'ev-nav observe' or a running "
             "server learns them")
    try:
        yield session
    finally:
        session.close()


def _cmd_init(args: argparse.Namespace) -> int:
    from ev_nav.trips.session import create_state

    # a town option beside --network was accepted and ignored: the state got the file's network
    town = {"--segments": args.segments, "--seed-town": args.seed_town}
    given = [option for option, value in town.items() if value is not None]
    if given and not args.synthetic:
        raise ConfigError(
            f"{' and '.join(given)} shape{'s' if len(given) == 1 else ''} the synthetic town; "
            "a --network state takes its network from the file (drop the option, or use "
            "--synthetic)"
        )
    from ev_nav.energy import get_vehicle, load_vehicle  # here: history needs no physics

    vehicle = load_vehicle(args.vehicle_file) if args.vehicle_file else get_vehicle(args.vehicle)
    with Stages("init", 3) as stages:
        session = create_state(
            args.state,
            network=None if args.synthetic else args.network,
            synthetic=(args.segments or 2000) if args.synthetic else None,
            town_seed=args.seed_town or 0,
            model=args.model,
            vehicle=vehicle,
            on_stage=stages.stage,
        )
    session.close()
    net = session.net
    print(
        f"initialised {args.state}: {net.name} ({net.n_segments:,} segments), "
        f"model {args.model}, vehicle {vehicle.name}"
    )
    return 0


def _confidence_arg(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a probability like 0.95, got {text!r}"
        ) from None
    if not 0.5 < value < 1.0:
        raise argparse.ArgumentTypeError(f"confidence must be in (0.5, 1), got {text!r}")
    return value


def _minutes_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected minutes, got {text!r}") from None
    if not (math.isfinite(value) and 0 <= value <= 600):
        raise argparse.ArgumentTypeError(f"minutes must be in 0..600, got {text!r}")
    return value


def _stops_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number of stops, got {text!r}"
        ) from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"stops must be in 0..10, got {text!r}")
    return value


#: What shapes the stops of ``route --confidence`` when not given (``None`` on the command line
#: tells an option given at its default from one not given: either is refused without
#: --confidence).
STOP_DEFAULTS: dict[str, object] = {"stop_minutes": 5.0, "max_charge": "100%", "max_stops": 4}


def _model_car(name: str | None) -> Vehicle | None:
    """The catalogue car ``--vehicle-model`` names (None without the option); an unknown name
    is the catalogue's one-line error listing the valid ones, before anything is opened."""
    if name is None:
        return None
    from ev_nav.vehicles import catalogue_vehicle

    return catalogue_vehicle(name).vehicle


def _route_with_stops(args: argparse.Namespace) -> int:
    """``ev-nav route --confidence``: a trip with charging stops (planned, not recorded)."""
    from ev_nav.trips.charging import (
        ChargeSettings,
        plan_charging,
        plan_table,
        plan_to_dict,
        trip_ends,
        vehicle_sites,
    )
    from ev_nav.trips.planning import _router

    if args.soc is None:
        raise ConfigError("planning charging stops needs the departure charge: add --soc")
    if args.via or args.avoid or args.time_weight:
        raise ConfigError("--via, --avoid and --time-weight do not combine with --confidence yet")
    for option in ("policy", "seed"):
        if getattr(args, option) is not None:
            raise ConfigError(
                f"--{option} chooses a single route; a charging plan (--confidence) chooses its "
                "legs by the model's mean and joint posterior"
            )
    for key, value in STOP_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    model_car = _model_car(args.vehicle_model)
    with _session(args.state, args.network, save_repairs=False,
                  planning=args.temperature is None) as session:
        _at_temperature(session, args.temperature)
        net = session.net
        # another car plans with its battery, curve and plugs on the learned energies moved by
        # the cars' E_det difference (as the server's charging plans)
        vehicle = model_car or session.vehicle
        shift = None if model_car is None else e_det_shift(net, model_car, session.vehicle)
        capacity = vehicle.battery_wh
        max_charge = parse_charge(args.max_charge, capacity)
        settings = ChargeSettings(
            start_wh=parse_charge(args.soc, capacity),
            reserve_wh=parse_charge(args.reserve or DEFAULT_RESERVE, capacity),
            confidence=args.confidence,
            stop_overhead_min=args.stop_minutes,
            max_stops=args.max_stops,
            max_charge_pct=max(1, int(math.floor(100 * max_charge / capacity + 1e-9))),
        )
        # the direction of a two-way street and the road at a junction the direct route takes
        start, goal = trip_ends(
            net, session.model, vehicle,
            net.snap(args.origin[1], args.origin[0], args.max_snap).candidates,
            net.snap(args.goal[1], args.goal[0], args.max_snap).candidates,
            router=_router(net), mean_shift=shift,
        )
        sites = vehicle_sites(net, vehicle)
        plan = plan_charging(
            net, session.model, vehicle, sites, start, goal, settings, router=_router(net),
            mean_shift=shift,
        )
        if args.json:
            # "vehicle": the state's; "vehicle_model": the car planned for (the API's key)
            doc = {"vehicle": session.vehicle.name, "vehicle_model": vehicle.name,
                   "chargers_usable": len(sites), **plan_to_dict(plan, net)}
            print(json.dumps(doc, indent=2))
            return 0 if plan.feasible else 3
        learned = "" if model_car is None else f"; energies learned for {session.vehicle.name}"
        print(f"long trip: segment {start[0]} -> {goal[0]}, vehicle {vehicle.name} "
              f"({capacity / 1000:g} kWh{learned}), departing at "
              f"{percent(plan.pct(settings.start_wh))}, {len(sites)} usable chargers on this "
              "network")
        for note in plan.notes:
            tell("notice", note)
        add_sites = None
        if not sites:
            from ev_nav.trips.session import SYNTHETIC_PREFIX

            ref = str(args.network or session.store.network_ref)
            add_sites = ("the embedded town has none: a network built from OSM with "
                         "'ev-nav network build --chargers FILE'"
                         if ref.startswith(SYNTHETIC_PREFIX)
                         else f"'ev-nav network chargers {ref} --csv FILE'")
        for line in plan_table(plan, net, add_sites):
            print(line)
        if not (args.no_map or args.dry_run):
            from ev_nav.trips.planning import write_charging_map

            page = write_charging_map(session, plan)
            print(f"map: {page}")
        print("planned only (nothing recorded): plan each leg with 'ev-nav route' to record "
              "its drive")
    return 0 if plan.feasible else 3


def _at_temperature(session: Session, temperature: float | None) -> None:
    """Plan on the model's posterior at ``temperature`` [°C] (None: as it is)."""
    if temperature is not None:
        from ev_nav.gp.temperature import AtTemperature

        session.model = AtTemperature(session.model, temperature)


def _cmd_route(args: argparse.Namespace) -> int:
    from ev_nav.trips.planning import plan_trip, write_trip_files

    if args.reserve is not None and args.soc is None:
        # an arrival reserve means something only against a departure charge
        raise ConfigError("--reserve is checked against the departure charge: add --soc "
                          "(e.g. --soc 80%)")
    if args.confidence is not None:
        return _route_with_stops(args)
    for key in STOP_DEFAULTS:
        if getattr(args, key) is not None:
            option = "--" + key.replace("_", "-")
            raise ConfigError(f"{option} shapes charging stops, which only --confidence plans: "
                              "add --confidence (e.g. 0.95)")
    model_car = _model_car(args.vehicle_model)
    # planning reads the posterior only: restored without torch where possible (issue 29)
    # a temperature needs the learner's temperature coefficients (not the torch-free posterior)
    with _session(
        args.state, args.network, save_repairs=not args.dry_run,
        planning=args.temperature is None,
    ) as session:
        _at_temperature(session, args.temperature)
        # another car (--vehicle-model): the routes are chosen for it on what the state learned;
        # their energies and the arrival charge are that car's (the learned energies moved by the
        # cars' E_det difference, :func:`shifted_energy`), against its battery; as the server's
        shift = None if model_car is None else e_det_shift(session.net, model_car, session.vehicle)
        capacity = (model_car or session.vehicle).battery_wh
        soc = parse_charge(args.soc, capacity) if args.soc is not None else None
        reserve = parse_charge(args.reserve or DEFAULT_RESERVE, capacity)
        trip = plan_trip(
            session,
            args.origin,
            args.goal,
            policy=args.policy or "ts",
            seed=args.seed,
            max_snap_m=args.max_snap,
            with_safe=soc is not None,
            record=not args.dry_run,
            via=args.via,
            avoid=[k for kinds in args.avoid for k in kinds],
            time_weight=args.time_weight,
            # stored with the trip, as the server stores it
            extra=None if model_car is None else {"vehicle_model": model_car.name},
            car=model_car,  # the routes are chosen for the car that drives them
        )
        for notice in trip.notices:
            tell("notice", notice)
        # the trip is recorded: a folder it cannot write to must not hide which route to
        # drive (a script that retried would record the trip twice), so that is said last
        written, unwritten = [], None
        if not args.dry_run:
            try:
                written = write_trip_files(session, trip, html=not args.no_map)
            except StateIOError as exc:
                unwritten = exc
        energies, arrivals = route_forecasts(
            session.model, trip.routes, shift=shift, departure_wh=soc, reserve_wh=reserve,
            capacity_wh=capacity,
        )
        warning = None if soc is None else reserve_warning(
            arrivals["planned"].p_reserve, soc, reserve, capacity, lower="--reserve",
            remedies="consider the 'safe' route (--policy safe) or charging stops "
            "(--confidence 0.95)" if trip.policy != "safe"
            else "consider charging stops (--confidence 0.95)",
        )
        if args.json:
            doc = {**trip.to_dict(session.net), "files": [str(p) for p in written]}
            add_forecasts(doc["routes"], energies, arrivals, other_car=model_car is not None)
            if model_car is not None:
                doc["vehicle_model"] = vehicle_model_entry(model_car.name, capacity, doc, energies)
            if soc is not None:  # the charges and warning as POST /api/routes gives them
                doc["departure_soc_pct"] = round(100 * soc / capacity, 2)
                doc["reserve_pct"] = round(100 * reserve / capacity, 2)
                doc["warning"] = warning
            print(json.dumps(doc, indent=2))
            if unwritten is not None:
                tell("warning", unwritten)
            return 0
        head = "dry run (nothing recorded), as trip" if args.dry_run else "trip"
        via = "".join(f" -> {v}" for v in trip.via_segments)
        car = "" if model_car is None else (
            f", for {model_car.name} ({capacity / 1000:g} kWh; energies learned for "
            f"{session.vehicle.name})"
        )
        print(f"{head} {trip.trip_id}: segment {trip.start_segment}{via} -> {trip.goal_segment}, "
              f"policy {trip.policy}{car}")
        opts = trip.options
        # a kind the network has none of was not avoided (its notice said so): not claimed here
        avoided = [k for k in opts.avoid if k not in trip.absent_kinds]
        avoiding = f"avoiding {', '.join(avoided)}" if avoided else ""
        priced = f"time priced at {opts.time_weight:g} Wh/min" if opts.time_weight else ""
        # recorded with the trip: observe records the drive at it unless told another
        at = "" if args.temperature is None else f"predicted at {args.temperature:g} °C"
        if avoiding or priced or at:
            print("; ".join(x for x in (avoiding, priced, at) if x))
        # Two spreads are shown: the table's sd is the model's uncertainty about each route's
        # mean energy (joint posterior); the arrival interval and probability add one drive's
        # noise (route_energy). Each is labelled, or a driver reads one as the other.
        # Another car's prediction is the learned one moved by the cars' E_det difference; the
        # model's sd is unchanged (the shift is known, the roads are not)
        moved = {
            name: 0.0 if shift is None else route_shift_wh(shift, r.segments, r.shares)
            for name, r in trip.routes.items()
        }
        print(f"{'route':<12}{'km':>8}{'min':>8}{'predicted Wh':>16}{'± model sd':>13}")
        for name, r in trip.routes.items():
            print(
                f"{name:<12}{r.length_m / 1000:>8.2f}{r.time_s / 60:>8.1f}"
                f"{r.predicted_wh + moved[name]:>16.1f}{r.predicted_sd_wh:>13.1f}"
            )
        print(f"model sd: {MODEL_SD_MEANING}")
        if arrivals:
            print(f"arrival charge (departing at {percent(100 * soc / capacity)}, reserve "
                  f"{percent(100 * reserve / capacity)} of {capacity / 1000:g} kWh):")
            print(f"{'route':<12}{'charge':>8}{'90% interval':>16}{'P[>= reserve]':>15}")
            for name, a in arrivals.items():
                interval = percent_range(a.low_pct, a.high_pct)
                print(f"{name:<12}{a.soc_pct:>7.1f}%{interval:>16}{100 * a.p_reserve:>14.1f}%")
            print(f"90% interval, P[>= reserve]: {ARRIVAL_SPREAD_MEANING}")
            if warning is not None:
                print(f"warning: {warning}")
        extra = trip.exploring_cost
        if extra is not None:
            if np.array_equal(trip.routes["planned"].segments,
                              trip.routes["best guess"].segments):
                print("the planned route is the best guess")
            else:
                wh = extra[0] + moved["planned"] - moved["best guess"]  # the table's figures
                if trip.policy == "safe":  # it never explores: it pays for fewer surprises
                    print(f"safe: {signed(wh)} Wh, {signed(extra[1] / 60)} min against the best "
                          "guess (predicted; the price of a route less likely to cost much "
                          "more)")
                else:
                    print(f"exploring: {signed(wh)} Wh, {signed(extra[1] / 60)} min against the "
                          "best guess (predicted; exploring is how the model learns)")
        for path in written:
            if path.suffix == ".html":
                print(f"map: {path}")
        if not args.dry_run:
            print(f"record the drive with: ev-nav observe {args.state} {trip.trip_id} "
                  "--total-wh X")
        if unwritten is not None:
            tell("warning", unwritten)
    return 0


def _cmd_observe(args: argparse.Namespace) -> int:
    from ev_nav.trips.observations import (
        forget_trip,
        learned_wh,
        read_segment_csv,
        reading_shift,
        record_segments,
        record_total,
        recorded_prediction,
    )

    if args.partial and args.segments is None:
        # a total (typed, or with a track) is the whole trip's or the tracked route's: it has
        # no part to leave out, and a total of part of a drive needs that part's route
        raise InvalidObservation(
            "--partial goes with --segments CSV only; for a total of part of the trip give the "
            "route driven with --gpx TRACK --total-wh X"
        )
    if args.undo:
        # (--segments and --total-wh are the parser's to refuse: one group with --undo)
        given = [name for name, value in (
            ("--gpx", args.gpx), ("--temperature", args.temperature),
            ("--force", args.force or None), ("--gps-sigma", args.gps_sigma),
        ) if value is not None]
        if given:  # each was ignored: the trip's readings were forgotten, nothing recorded
            raise InvalidObservation(f"--undo forgets the trip's readings; it records nothing, "
                                     f"so it takes no {', '.join(given)}")
        with _session(args.state, args.network, with_model=False) as session:
            n = forget_trip(session, args.trip_id)
            if args.json:
                # the server's name for it (DELETE /api/trips/N/observations), and the name
                # this command printed before, kept for scripts that read it
                print(json.dumps({"trip": args.trip_id, "forgotten_batches": n,
                                  "forgot_batches": n}))
            else:
                print(f"trip {args.trip_id}: forgot {plural(n, 'observation batch')}")
                print("model updated (the trip's observations are forgotten)")
        return 0
    if args.gpx is not None:
        if args.segments is not None:
            raise InvalidObservation("--gpx goes alone or with --total-wh, not with --segments")
        return _observe_gpx(args)
    if args.gps_sigma is not None:  # it was ignored
        raise InvalidObservation("--gps-sigma is the GPS noise of a --gpx track; give it with "
                                 "--gpx")
    if args.segments is None and args.total_wh is None:
        raise InvalidObservation("give --segments CSV or --total-wh X (or --gpx, or --undo)")
    with _session(args.state, args.network) as session:
        trip = session.store.get_trip(args.trip_id)
        temperature = _drive_temperature(args, trip)
        # a trip planned for another car (route --vehicle-model): its readings and predictions
        # are that car's; the state learns them moved to its own vehicle (record_* convert)
        moved = reading_shift(session, trip)

        def acknowledge(
            what: str, observed: float, mean: float, model_sd: float, noisy_sd: float,
            part: str = "",
        ):
            def done(batch: int) -> None:
                # printed as soon as the record is committed: a kill after it loses nothing;
                # what is learned is read back as stored (the reading converted)
                learned = None if moved is None else learned_wh(session, trip.id, batch)
                if args.json:
                    # both spreads, each under one name whatever was recorded
                    doc = {"trip": trip.id, "batch": batch, "recorded": what,
                           "observed_wh": round(observed, 3), "predicted_wh": round(mean, 1),
                           "predicted_sd_wh": round(model_sd, 1),
                           "sd_with_noise_wh": round(noisy_sd, 1),
                           # null: the trip's own prediction; a count: a partial record's
                           "predicted_segments": expected.n_segments}
                    if moved is not None:  # the car that drove, and what the state learned
                        doc.update(vehicle_model=moved.vehicle_model,
                                   learned_for=moved.learned_for, learned_wh=round(learned, 3))
                    print(json.dumps(doc), flush=True)
                    return
                # the trip's own prediction shows the route table's model sd; a part's, the
                # spread of its readings (with the drive-to-drive noise)
                spread = f"{SD_WITH_NOISE} {noisy_sd:.1f}" if part else f"model sd {model_sd:.1f}"
                car = "" if moved is None else f" by {moved.vehicle_model}"
                print(
                    f"trip {trip.id}: recorded {what}{car} ({observed:.1f} Wh; predicted{part} "
                    f"{mean:.1f} Wh, {spread} Wh)",
                    flush=True,
                )
                if moved is not None:
                    print(f"learned as {learned:.1f} Wh for {moved.learned_for}, the state's "
                          f"vehicle (the two cars' E_det difference taken off)", flush=True)

            return done

        if args.segments is not None:
            seg, wh = read_segment_csv(args.segments)
        # what the readings are compared with: the trip's prediction, or for part of its route
        # those segments' (one rule with the server's acknowledgement)
        expected = recorded_prediction(
            session, trip, None if args.segments is None else seg, partial=args.partial,
            temperature_c=temperature,
        )
        n_part = expected.n_segments
        part = ("" if n_part is None else " for this segment" if n_part == 1
                else f" for these {n_part} segments")
        shown = (expected.mean_wh, expected.model_sd_wh, expected.sd_with_noise_wh, part)
        if args.segments is not None:
            record_segments(
                session, trip.id, seg, wh, force=args.force, partial=args.partial,
                source=str(args.segments), temperature_c=temperature,
                on_recorded=acknowledge(plural(seg.size, "segment energy", "segment energies"),
                                        float(np.sum(wh)), *shown),
            )
        else:
            record_total(
                session, trip.id, args.total_wh, force=args.force,
                temperature_c=temperature,
                on_recorded=acknowledge("the trip total", float(args.total_wh), *shown),
            )
        if not args.json:
            print("model updated")
        _print_flagged(session, args.state, json_mode=args.json)
    return 0


def _drive_temperature(args: argparse.Namespace, trip: Trip) -> float | None:
    """The temperature a drive's readings are recorded at [°C]: ``--temperature``, else the one
    the trip was planned at (said on stderr, so that it is never a surprise), else None."""
    if args.temperature is not None or trip.temperature_c is None:
        return args.temperature
    tell("notice", f"recorded at {trip.temperature_c:g} °C, the temperature trip {trip.id} was "
         "planned at (--temperature C for another)")
    return trip.temperature_c


def _print_flagged(session: Session, state: Path, *, json_mode: bool = False) -> None:
    """One line per road the observation flagged as changed: on stdout, or with ``--json`` as
    a notice on stderr (stdout holds the one JSON document, printed before the model learned
    the reading and so before any flag)."""
    for c in session.flagged:
        line = (f"road change flagged on segment {c.segment}: {signed(c.shift_wh)} Wh "
                f"({signed(c.shift_sd)} sd) against the prediction; its older readings are set "
                f"aside ('ev-nav changes {state}' lists it)")
        if json_mode:
            tell("notice", line)
        else:
            print(line)


def _observe_gpx(args: argparse.Namespace) -> int:
    """``observe --gpx``: match the track, record what was driven (:mod:`ev_nav.trips.tracks`)."""
    from ev_nav.roads.matching import MatchConfig
    from ev_nav.trips.gpx import read_gpx
    from ev_nav.trips.observations import learned_wh, reading_shift, recorded_prediction
    from ev_nav.trips.tracks import (
        apportion_energy,
        driven_length_m,
        driven_part,
        record_track,
    )

    with Stages("observe", 4) as stages:
        stages.stage("reading the track")
        track = read_gpx(args.gpx)  # a bad file fails before the state and model are opened
        stages.stage("opening the state")
        with _session(args.state, args.network) as session:
            trip = session.store.get_trip(args.trip_id)
            temperature = _drive_temperature(args, trip)
            moved = reading_shift(session, trip)  # a trip driven by another car: converted
            km = {}
            learned: list[float] = []
            judged = {}

            def matched(m) -> None:
                # the part of the first and last segment driven counts, as in the route table
                route, start, end = driven_part(m)
                km["driven"] = driven_length_m(session.net, m) / 1000.0
                km["share"] = float(np.isin(trip.route, m.segments).mean())
                # what the reading is compared with, one rule with the record's own check
                if args.total_wh is not None:
                    judged["observed"] = float(args.total_wh)
                    judged["prediction"] = recorded_prediction(
                        session, trip, driven=(route, start, end), temperature_c=temperature
                    )
                else:
                    # the readings sum to the counter's drive: the route it covers, the part
                    # of its first and last segment driven counted
                    got = apportion_energy(session.net, m, track.energy_wh)
                    judged["observed"] = float(got.energy_wh.sum())
                    judged["prediction"] = recorded_prediction(
                        session, trip, temperature_c=temperature,
                        driven=(got.route, got.start_fraction, got.end_fraction),
                    )
                if not args.json:
                    stages.print(
                        f"trip {trip.id}: matched {plural(track.n_points, 'track point')} to "
                        f"{plural(m.segments.size, 'segment')} ({km['driven']:.2f} km); "
                        f"{100 * km['share']:.0f}% of the planned route was driven"
                    )
                stages.stage("recording it and updating the model")

            def recorded(batch: int) -> None:
                # printed as soon as the record is committed: a kill after it loses nothing
                what = "the trip total" if args.total_wh is not None else "per-segment energies"
                if moved is not None:
                    learned.append(learned_wh(session, trip.id, batch))
                if args.json:
                    p = judged["prediction"]
                    doc = {"trip": trip.id, "batch": batch, "recorded": what,
                           "observed_wh": round(judged["observed"], 3),
                           "predicted_wh": round(p.mean_wh, 1),
                           "predicted_sd_wh": round(p.model_sd_wh, 1),
                           "sd_with_noise_wh": round(p.sd_with_noise_wh, 1),
                           "predicted_segments": p.n_segments,
                           "driven_km": round(km["driven"], 3),
                           "planned_share": round(km["share"], 4)}
                    if moved is not None:  # the car that drove, and what the state learned
                        doc.update(vehicle_model=moved.vehicle_model,
                                   learned_for=moved.learned_for,
                                   learned_wh=round(learned[0], 3))
                    stages.print(json.dumps(doc))
                else:
                    stages.print(f"trip {trip.id}: recorded {what} on the driven route")

            stages.stage("matching the track to the roads")
            rec = record_track(
                session, trip.id, track, total_wh=args.total_wh,
                config=MatchConfig() if args.gps_sigma is None
                else MatchConfig(gps_sigma_m=args.gps_sigma), force=args.force,
                temperature_c=temperature,
                on_matched=matched, on_recorded=recorded,
            )
            stages.close()
            if not args.json:
                on = plural(rec.segment_ids.size, "segment")
                car = "" if moved is None else f" by {moved.vehicle_model}"
                p = judged["prediction"]
                print(f"observed {rec.observed_wh:.1f} Wh{car} on {on} (predicted "
                      f"{p.mean_wh:.1f} Wh, {SD_WITH_NOISE} {p.sd_with_noise_wh:.1f} Wh)")
                if moved is not None:
                    print(f"learned as {learned[0]:.1f} Wh for {moved.learned_for}, the state's "
                          f"vehicle (the two cars' E_det difference taken off)")
                print("model updated")
            _print_flagged(session, args.state, json_mode=args.json)
    return 0


def _cmd_map(args: argparse.Namespace) -> int:
    from ev_nav.viz.maps import check_map_path, network_map, visits_map

    # the output is checked before any work: nothing is opened or written for a bad one
    out = args.out or Path(args.state) / "maps" / f"{args.layer}.html"
    if out.is_dir():
        raise StateIOError(f"--out {out} is a directory; give the HTML file to write")
    check_map_path(out)
    with Stages("map", 3) as stages:
        stages.stage("opening the state")
        with _session(args.state, args.network, with_model=args.layer != "visits") as session:
            net = session.net
            titles = {
                "mean": "posterior mean energy [Wh]",
                "sd": "posterior sd [Wh]",
                "visits": "times driven",
                "energy-per-km": "predicted energy [Wh/km]",
            }
            title = f"ev-nav: {titles[args.layer]}"
            try:
                stages.stage("computing the layer")
                if args.layer == "visits":
                    # the exploration map: log scale from 1 to the true maximum, never-driven grey
                    counts = session.store.visit_counts(net.n_segments).astype(float)
                    stages.stage("drawing the map")
                    visits_map(
                        net, counts, legend_title=titles["visits"], title=title, path=out,
                        standalone=args.standalone, changes=_change_labels(session),
                    )
                else:
                    post = session.model.posterior()
                    values = {
                        "mean": post.mean,
                        "sd": post.std,
                        "energy-per-km": post.mean / (net.length_m / 1000.0),
                    }[args.layer]
                    stages.stage("drawing the map")
                    network_map(
                        net,
                        values,
                        layer_name=args.layer,
                        legend_title=titles[args.layer],
                        mean_wh=post.mean,
                        sd_wh=post.std,
                        title=title,
                        path=out,
                        standalone=args.standalone,
                        changes=_change_labels(session),
                    )
            except OSError as exc:  # a read-only folder, a path through a file, ...
                raise StateIOError(f"cannot write the map {out} ({exc.strerror or exc})") from None
            stages.close()
            doc = {"map": str(out), "layer": args.layer}
            print(json.dumps(doc) if args.json else f"map: {out}")
    return 0


def _change_labels(session: Session) -> dict[int, str]:
    """The state's flagged roads with a tooltip each, for the maps."""
    return {
        c.segment: f"flagged as changed {c.created[:10]}, {signed(c.shift_wh)} Wh "
        f"({signed(c.shift_sd)} sd) against the prediction, {c.set_aside} older readings set aside"
        for c in session.store.segment_changes()
    }


def _cmd_history(args: argparse.Namespace) -> int:
    from ev_nav.trips.session import trip_history

    rows = trip_history(args.state)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no trips yet; plan one with 'ev-nav route'")
        return 0
    # the store's times are UTC (a driver elsewhere read them as local time)
    header = f"{'trip':>5}  {'created (UTC)':<19}  {'policy':<8}{'km':>8}"
    print(f"{header}{'predicted Wh ± model sd':>25}{'observed Wh':>13}{'°C':>7}")
    for r in rows:
        pred = f"{r['predicted_wh']:.1f} ± {r['predicted_sd_wh']:.1f}"
        if r["observed_wh"] is not None:
            obs = f"{r['observed_wh']:.1f}"
        else:  # "part": part of the route recorded, no trip total to show
            obs = "part" if r["recorded"] else "-"
        # the ambient temperature of the observations, else the one the trip was planned at
        # (what observe records it at); blank where neither was given
        c = r["temperature_c"] if r["temperature_c"] is not None else r["planned_temperature_c"]
        temp = "" if c is None else f"{c:.1f}"
        head = f"{r['trip']:>5}  {r['created']:<19}  {r['policy']:<8}{r['length_m'] / 1000:>8.2f}"
        # another car's trip: both figures are the state's vehicle's (its reading converted)
        car = "" if r["vehicle_model"] is None else f"  * driven by {r['vehicle_model']}"
        print(f"{head}{pred:>25}{obs:>13}{temp:>7}{car}".rstrip())
    if any(r["recorded"] and r["observed_wh"] is None for r in rows):
        print("part: only part of the planned route was recorded (observe --partial, or a "
              "track's per-segment energies where it drove another way): no trip total")
    if any(r["vehicle_model"] is not None for r in rows):
        print("* planned for another car: predicted and observed Wh are as learned for the "
              "state's vehicle (that car's reading less the two cars' E_det difference)")
    return 0


def _cmd_changes(args: argparse.Namespace) -> int:
    from ev_nav.trips.changes import change_rows, dismiss_changes, parse_segments

    with _session(args.state, args.network, with_model=False) as session:
        if args.dismiss:
            ids = parse_segments(args.dismiss, session.net.n_segments)
            gone = dismiss_changes(session, ids)
            segs = sorted({c.segment for c in gone})
            if args.json:
                print(json.dumps({"dismissed": segs, "changes": len(gone)}))
            else:
                on, its = ("segment", "its") if len(segs) == 1 else ("segments", "their")
                print(f"dismissed {plural(len(gone), 'change')} on {on} "
                      f"{', '.join(map(str, segs))}; the model uses {its} readings again")
            return 0
        rows = change_rows(
            session.store.segment_changes(include_dismissed=args.all), session.net
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no road flagged as changed")
        return 0
    print(f"{'segment':>8}  {'road':<14}{'flagged (UTC)':<21}{'shift Wh':>9}{'sd':>6}{'CUSUM':>7}"
          f"{'since':>6}{'set aside':>10}")
    for r in rows:
        state = f"  dismissed {r['dismissed']}" if r["dismissed"] else ""
        print(f"{r['segment']:>8}  {r['road']:<14}{r['flagged']:<21}{r['shift_wh']:>+9.1f}"
              f"{r['shift_sd']:>+6.1f}{r['statistic']:>7.1f}{r['traversals_since']:>6}"
              f"{r['set_aside']:>10}{state}")
    print("shift: mean of the readings since the change minus the prediction (Wh, and in "
          "predictive sd); CUSUM: the evidence at the alarm (threshold "
          f"{rows[0]['threshold']:g}); since: readings after the flag; set aside: older readings "
          "the model no longer uses (kept in the state). Dismiss a flag with --dismiss SEGMENT")
    return 0


def _cmd_vehicles(args: argparse.Namespace) -> int:
    from ev_nav.vehicles import catalogue, catalogue_rows

    rows = catalogue_rows()
    if args.json:
        models = catalogue()
        for r in rows:
            c = models[str(r["name"])]
            r["sources"] = c.sources
            r["reference_source"] = c.reference_source
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"{'name':<28}{'battery kWh':>12}  {'connectors':<20}{'DC kW':>7}{'AC kW':>7}"
        f"{'10-80% min':>12}{'Wh/km @100':>12}  reference"
    )
    for r in rows:
        low, high = r["reference_wh_per_km"]  # type: ignore[misc]
        plugs = ",".join(r["connectors"])  # type: ignore[arg-type]
        mark = "*" if r["generic_curve"] else " "
        print(
            f"{r['name']:<28}{r['battery_kwh']:>12.1f}  {plugs:<20}{r['dc_max_kw']:>7g}"
            f"{r['ac_max_kw']:>7g}{r['charge_10_80_min']:>11.1f}{mark}"
            f"{r['wh_per_km_100kmh']:>12.1f}  {low:g}-{high:g}"
        )
    print(
        "10-80% min: charging minutes at a charger of the car's DC power, along its charging "
        "curve; Wh/km @100: the energy model at a steady 100 km/h on a flat road; reference: the "
        "range its sources state (--json lists every value's source; ev_nav/data/NOTICE.md "
        "credits Open EV Data and the Open EV Data Dataset)"
    )
    if any(r["generic_curve"] for r in rows):
        print("* its source gives only a generic charging curve: its charging times (and stop "
              "plans) are rough")
    return 0
