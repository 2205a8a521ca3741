"""``ev-nav network build | info | fetch | chargers``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ev_nav.cli import seed_arg, tell, town_size_arg
from ev_nav.roads.network import RoadNetwork
from ev_nav.wording import plural

if TYPE_CHECKING:
    from collections.abc import Callable

    from ev_nav.roads.chargers import ChargerRows, Chargers


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (value > 0 and value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a positive, finite number, got {text!r}")
    return value


def _max_grade_arg(text: str) -> float:
    # a slope, not a percentage: -1 or 0 flattened every road, 30 limited nothing
    value = _positive_float(text)
    if value > 1.0:
        raise argparse.ArgumentTypeError(
            f"a grade limit is a slope in (0, 1] (0.3 = 30 %), got {text!r}"
        )
    return value


def _network_out_arg(text: str) -> Path:
    """Where ``network build | fetch`` writes: a ``.npz`` file name (other commands tell a
    network file from an OSM file by it; an ``--out`` naming the OSM input overwrote it), not a
    folder. Checked before the build, which may take minutes."""
    if not text.strip():  # Path("") is the current folder
        raise argparse.ArgumentTypeError("a file name is needed, e.g. network.npz")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            f"{text} is a folder; give a file name in it, e.g. {path / 'network.npz'}"
        )
    if path.suffix.lower() != ".npz":
        hint = path.with_name(f"{path.name.split('.')[0] or 'network'}.npz")
        raise argparse.ArgumentTypeError(
            f"a network file name ends in .npz (e.g. {hint}), got {text!r}"
        )
    # a file where a folder of the path belongs fails only when writing, after the build
    for folder in path.parents:
        if folder.exists():
            if not folder.is_dir():
                raise argparse.ArgumentTypeError(
                    f"{folder} is a file, so {text} cannot be written inside it"
                )
            try:  # a folder nothing can be written in (read-only, /proc): found before the build
                import tempfile

                with tempfile.TemporaryFile(dir=folder):
                    pass
            except OSError as exc:
                raise argparse.ArgumentTypeError(
                    f"cannot write in {folder} ({exc.strerror or exc}), so not {text}"
                ) from None
            break
    return path


def _place_arg(text: str) -> str:
    """A place name or a ``LAT,LON`` point for ``network fetch``, checked before going online
    (an out-of-range point or an empty name went to the server)."""
    import math

    from ev_nav.roads.load import _looks_like_point

    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"expected a place name ('Monaco') or a LAT,LON point, got {text!r}"
        )
    if _looks_like_point(text):
        lat, lon = (float(x) for x in text.split(","))
        if not (math.isfinite(lat) and math.isfinite(lon) and -90 <= lat <= 90
                and -180 <= lon <= 180):
            raise argparse.ArgumentTypeError(
                "a LAT,LON point has latitude in -90..90 and longitude in -180..180, "
                f"got {text!r}"
            )
    return text


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``network`` command group."""
    parser = subparsers.add_parser("network", help="build, inspect or download road networks")
    sub = parser.add_subparsers(dest="network_command", metavar="ACTION")
    parser.set_defaults(func=lambda _a: parser.print_help() or 1)

    build = sub.add_parser("build", help="build a network from an OSM XML or PBF file (offline)")
    build.add_argument(
        "--osm", required=True, type=Path, help=".osm, .osm.gz, .osm.bz2 or .osm.pbf file"
    )
    build.add_argument(
        "--dem",
        action="append",
        default=[],
        type=Path,
        help="elevation raster (GeoTIFF, .hgt or .hgt.zip); repeat for several tiles",
    )
    build.add_argument(
        "--out", required=True, type=_network_out_arg, help="output network file (.npz)"
    )
    build.add_argument(
        "--max-grade", type=_max_grade_arg, default=0.3,
        help="limit |grade| to this slope, in (0, 1] (default 0.3)",
    )
    build.add_argument(
        "--chargers",
        action="append",
        default=[],
        type=Path,
        metavar="FILE.csv",
        help="charging sites to add (CSV: lat,lon,power_kw,name[,connectors]); repeatable. "
        "The OSM file's own charging stations are always read",
    )
    build.set_defaults(func=_cmd_build)

    chargers = sub.add_parser(
        "chargers", help="add charging sites from a CSV file to a network file (in place)"
    )
    chargers.add_argument("path", type=Path, help="network file written by 'network build'")
    chargers.add_argument(
        "--csv",
        required=True,
        action="append",
        type=Path,
        metavar="FILE.csv",
        help="charging sites (lat,lon,power_kw,name[,connectors]); repeatable",
    )
    chargers.add_argument(
        "--replace", action="store_true", help="replace the network's sites instead of adding"
    )
    chargers.set_defaults(func=_cmd_chargers)

    info = sub.add_parser("info", help="print a network's summary statistics")
    src = info.add_mutually_exclusive_group(required=True)
    src.add_argument("path", nargs="?", type=Path, help="network file written by 'network build'")
    src.add_argument("--synthetic", action="store_true", help="the embedded synthetic town")
    # no argparse defaults: given with a network file, they would be ignored (refused instead)
    info.add_argument(
        "--segments", type=town_size_arg,
        help=f"synthetic town size [segments] (default {TOWN_DEFAULTS['segments']:,})",
    )
    info.add_argument(
        "--seed", type=seed_arg, help=f"synthetic town seed (default {TOWN_DEFAULTS['seed']})"
    )
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.set_defaults(func=_cmd_info)

    fetch = sub.add_parser(
        "fetch", help="download a place's drivable network from OpenStreetMap (needs internet)"
    )
    fetch.add_argument("place", type=_place_arg, help="place name ('Monaco') or 'LAT,LON' point")
    fetch.add_argument(
        "--dist", type=_positive_float, default=3000.0,
        help="radius around a point [m] (default 3000)",
    )
    fetch.add_argument("--dem", action="append", default=[], type=Path, help="elevation raster")
    fetch.add_argument(
        "--out", required=True, type=_network_out_arg, help="output network file (.npz)"
    )
    fetch.set_defaults(func=_cmd_fetch)


def print_summary(net: RoadNetwork, as_json: bool = False) -> None:
    """Print :meth:`RoadNetwork.summary` as a table or JSON."""
    summary = net.summary()
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    width = max(len(k) for k in summary)
    for key, value in summary.items():
        if key == "bounds":
            value = ", ".join(f"{k} {lo:.4f} .. {hi:.4f}" for k, (lo, hi) in value.items())
        elif key == "elevation_m":
            value = ("flat (no elevation source)" if value is None
                     else f"{value[0]:,.1f} – {value[1]:,.1f}")
        elif key == "road_kind_segments" and value is None:
            # no road tags kept (a synthetic town, or a network built before they were)
            value = "not recorded (--avoid motorway works; toll, unpaved and ferry need them)"
        elif value is None:
            value = "not recorded"
        elif isinstance(value, float):
            value = f"{value:,.3f}"
        elif isinstance(value, int):
            value = f"{value:,}"
        elif isinstance(value, dict):
            value = ", ".join(f"{k} {v:,}" for k, v in value.items())
        print(f"{key:<{width}}  {value}")


def _cmd_build(args: argparse.Namespace) -> int:
    from ev_nav.progress import Stages
    from ev_nav.roads.chargers import parse_charger_csv
    from ev_nav.roads.load import LoadOptions, load_osm

    # the charger files are read and checked before the build, which may take minutes
    sites = [(path, parse_charger_csv(path)) for path in args.chargers]
    with Stages("network build", 4 + bool(sites)) as stages:
        net = load_osm(args.osm, dems=args.dem, options=LoadOptions(max_grade=args.max_grade),
                       on_stage=stages.stage)
        osm_notes = net.meta.get("chargers_osm", {})
        if osm_notes.get("stations"):
            stages.print(f"OSM: {_describe(net.chargers, osm_notes)}")
        if sites:
            stages.stage("attaching the charger files' sites")
            net = _add_csv_chargers(net, sites, replace=False, say=stages.print)
        stages.stage(f"writing {args.out}")
        net.save(args.out)
        try:
            stages.close()
            print(f"wrote {args.out}  ({net.n_segments:,} segments, "
                  f"{net.n_connections:,} connections)")
            print_summary(net)
        except KeyboardInterrupt:
            # the bare 'interrupted' left a user who waited minutes unsure whether the file was
            # whole; save() is atomic, so it is
            tell("notice", f"interrupted after {args.out} was written; the file is complete "
                 f"('ev-nav network info {args.out}' summarises it)")
            return 130
    return 0


def _describe(chargers: Chargers, notes: dict[str, int]) -> str:
    from ev_nav.roads.chargers import ChargersRead

    return ChargersRead(chargers, notes).describe()


def _add_csv_chargers(
    net: RoadNetwork,
    sites: list[tuple[Path, ChargerRows]],
    replace: bool,
    *,
    need_sites: bool = False,
    say: Callable[[str], None] = print,
) -> RoadNetwork:
    """``net`` with the CSV files' ``sites`` (each file with its rows,
    :func:`~ev_nav.roads.chargers.parse_charger_csv`) added (or, with ``replace``, instead of its
    own); one line per file says what was attached. ``need_sites``: refuse (ChargerDataError,
    before anything is written) when the files attach no site at all."""
    from ev_nav.errors import ChargerDataError
    from ev_nav.roads.chargers import Chargers

    files = [path for path, _ in sites]
    table = Chargers() if replace else net.chargers
    attached = 0
    for path, rows in sites:
        read = rows.attach(net)
        fresh = read.chargers.new_sites(table)
        known = len(read.chargers) - fresh.size
        again = (f"; {plural(known, 'site')} already on the network, not added again"
                 if known else "")
        say(f"{path}: {read.describe()}{again}")
        table = table.concat(read.chargers.take(fresh))
        attached += len(read.chargers)
    if files and not attached:
        lon0, lat0, lon1, lat1 = net.bounds()
        where = (f"no site of {', '.join(map(str, files))} lies near the roads of {net.name} "
                 f"(lat {lat0:.4f}..{lat1:.4f}, lon {lon0:.4f}..{lon1:.4f})")
        check = "check that the file is for this network and its columns are lat,lon in that order"
        if need_sites:
            raise ChargerDataError(f"{where}; nothing written - {check}")
        # a build keeps what it built (it may have taken minutes); the sites can follow with
        # 'network chargers', which refuses a file that attaches nothing
        tell("warning", f"{where}; {check}, then 'ev-nav network chargers NETWORK --csv FILE'")
    return net.with_chargers(table) if files else net


def _cmd_chargers(args: argparse.Namespace) -> int:
    from ev_nav.roads.chargers import parse_charger_csv

    sites = [(path, parse_charger_csv(path)) for path in args.csv]
    net = RoadNetwork.load(args.path)
    before = len(net.chargers)
    net = _add_csv_chargers(net, sites, replace=args.replace, need_sites=True)
    net.save(args.path)  # atomic: readers see the old file or the new one
    print(f"wrote {args.path}  ({plural(len(net.chargers), 'charging site')}, {before:,} before)")
    return 0


#: The synthetic town ``network info --synthetic`` describes when not told otherwise.
TOWN_DEFAULTS = {"segments": 2000, "seed": 0}


def _cmd_info(args: argparse.Namespace) -> int:
    from ev_nav.errors import ConfigError

    if args.synthetic:
        from ev_nav.roads.synthetic import synthetic_town

        for key, value in TOWN_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
        net = synthetic_town(args.segments, seed=args.seed)
    else:
        for key in TOWN_DEFAULTS:
            if getattr(args, key) is not None:
                raise ConfigError(f"--{key} sizes or seeds the synthetic town; it goes with "
                                  "--synthetic, not a network file")
        net = RoadNetwork.load(args.path)
    print_summary(net, as_json=args.json)
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    from ev_nav.roads.load import check_dems, fetch_place

    check_dems([Path(p) for p in args.dem])  # before the download, which may take minutes

    net = fetch_place(args.place, dist_m=args.dist, dems=args.dem)
    net.save(args.out)
    print(f"wrote {args.out}  ({net.n_segments:,} segments)")
    return 0
