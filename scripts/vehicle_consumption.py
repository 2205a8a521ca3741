"""Mean deterministic consumption E_det per km of every preset and catalogue vehicle on a road
network: the whole network's energy over its length, once with the vehicle as it is and once
without the auxiliary and stop-and-go terms (the paper's model with the car's parameters).

Usage::

    python scripts/vehicle_consumption.py [OSM_FILE]   # default ../shared/data lust_luxembourg

Deterministic (no random draws, no timing): the same network gives the same figures anywhere.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from ev_nav import get_vehicle, load_osm
from ev_nav.energy import VEHICLE_PRESETS
from ev_nav.settings import data_dir
from ev_nav.vehicles import catalogue


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("osm", nargs="?", type=Path,
                        default=data_dir() / "lust_luxembourg.osm.gz")
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the flat-network notice is the point here
        net = load_osm(args.osm)
    km = float(net.length_m.sum()) / 1000.0
    flat = "flat (no elevation)" if not net.grade.any() else "with grades"
    print(f"{net.name}: {net.n_segments:,} segments, {km:,.0f} km, {flat}")
    print(f"{'vehicle':<28}{'Wh/km':>8}{'without aux + stops':>22}")
    for name in [*VEHICLE_PRESETS, *catalogue()]:
        veh = get_vehicle(name)
        bare = veh.replace(aux_power_w=0.0, stops_per_km=0.0)
        print(f"{name:<28}{net.e_det(veh).sum() / km:>8.1f}{net.e_det(bare).sum() / km:>22.1f}")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
