"""Rebuild the vehicle catalogue (``ev_nav/data/vehicles.json``) from the open EV datasets.

Reads three checkouts and the selection and fills in ``scripts/vehicle_fills.toml``:

* Open EV Data (https://github.com/KilowattApp/open-ev-data, MIT with attribution): usable
  battery, AC/DC maximum power, plugs, DC charging curve, average consumption;
* Open EV Data Dataset (https://github.com/open-ev-data/open-ev-data-dataset,
  CDLA-Permissive-2.0): curb weight, body width and height, plugs of US cars;
* TBTP (https://github.com/tbtp-ev/tbtp-ev.github.io, MIT): fixed-speed consumption tests at
  90 and 120 km/h, from which each car's reference range at 100 km/h is derived.

Every value in the output names its source. Usage::

    python scripts/import_vehicles.py --kilowatt PATH --oed PATH --tbtp PATH [--out FILE]

The output is deterministic (sorted keys, fixed rounding), so rebuilding from the same commits
reproduces the shipped file byte for byte.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FILLS = ROOT / "scripts" / "vehicle_fills.toml"
OUT = ROOT / "ev_nav" / "data" / "vehicles.json"

KILOWATT = "Open EV Data (https://github.com/KilowattApp/open-ev-data)"
OED = "Open EV Data Dataset (https://github.com/open-ev-data/open-ev-data-dataset)"
TBTP = "TBTP consumption tests (https://github.com/tbtp-ev/tbtp-ev.github.io)"


def _commit(path: Path) -> str:
    """The checked-out commit of a dataset (recorded with the catalogue), or 'unknown'."""
    try:
        out = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def kilowatt_models(root: Path) -> dict[str, dict[str, Any]]:
    """Every model of Open EV Data (v2 format), by id."""
    models: dict[str, dict[str, Any]] = {}
    for f in sorted((root / "data" / "v2" / "models").glob("*.json")):
        for m in json.loads(f.read_text(encoding="utf-8"))["models"]:
            models[m["id"]] = m
    return models


def _deep_merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    # the dataset's own rule: objects merge by key, scalars and arrays are replaced
    out = dict(low)
    for k, v in high.items():
        both = isinstance(v, dict) and isinstance(out.get(k), dict)
        out[k] = _deep_merge(out[k], v) if both else v
    return out


def oed_record(root: Path, rel: str) -> dict[str, Any]:
    """A canonical Open EV Data Dataset record: model base, year file, then variant file."""
    path = root / rel
    model_dir = path.parent.parent
    layers = [model_dir / "base.json"]
    stem = path.stem
    year_files = sorted(p.stem for p in path.parent.glob("*.json"))
    # a variant file is '<vehicle>_<variant>.json'; its year base is the longest proper prefix
    bases = [s for s in year_files if s != stem and stem.startswith(s + "_")]
    if bases:
        layers.append(path.parent / f"{max(bases, key=len)}.json")
    layers.append(path)
    record: dict[str, Any] = {}
    for layer in layers:
        record = _deep_merge(record, json.loads(layer.read_text(encoding="utf-8")))
    return record


def tbtp_tests(root: Path) -> dict[str, dict[str, float]]:
    """Summer consumption [Wh/km] at 90 and 120 km/h per TBTP car file (front matter)."""
    out: dict[str, dict[str, float]] = {}
    for f in sorted((root / "_tested_cars").glob("*.md")):
        values: dict[str, float] = {}
        for line in f.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            for speed in ("90", "120"):
                if key.strip() == f"summer_consumption_{speed}kmh_wh-km" and value.strip():
                    values[speed] = float(value)
        out[f.name] = values
    return out


def _v(value: Any, source: str) -> dict[str, Any]:
    return {"value": value, "source": source}


def build(kilowatt: Path, oed: Path, tbtp: Path, fills_path: Path = FILLS) -> dict[str, Any]:
    """The catalogue document (see the module docstring)."""
    fills = tomllib.loads(fills_path.read_text(encoding="utf-8"))
    common = fills["common"]
    kw = kilowatt_models(kilowatt)
    tests = tbtp_tests(tbtp)

    # the reference band: 90 km/h tests / average consumption (low), 120 km/h ones (high)
    ratios_90, ratios_120 = [], []
    for car, kw_id in fills["reference"]["tbtp_pairs"].items():
        avg_wh_km = 10.0 * kw[kw_id]["energy_consumption"]["average_consumption"]
        t = tests[car]
        if "90" in t:
            ratios_90.append(t["90"] / avg_wh_km)
        if "120" in t:
            ratios_120.append(t["120"] / avg_wh_km)
    low_ratio, high_ratio = round(min(ratios_90), 3), round(max(ratios_120), 3)
    band_source = (
        f"{TBTP}: 100 km/h lies between the 90 and 120 km/h tests; over "
        f"{len(fills['reference']['tbtp_pairs'])} tested cars the 90 km/h results are at least "
        f"{low_ratio} x and the 120 km/h results at most {high_ratio} x the car's average "
        f"consumption in {KILOWATT}"
    )

    vehicles: dict[str, Any] = {}
    for name, sel in fills["vehicles"].items():
        m = kw[sel["kilowatt"]]
        rec = oed_record(oed, sel["oed"])
        model_name = f"{m['brand']} {m['model']} {m.get('variant') or ''}".rstrip()
        kw_src = f"{KILOWATT}, model id {m['id']} ({model_name})"
        oed_src = f"{OED}, {sel['oed']}"
        dims = rec["dimensions"]
        width = sel.get("width_mm", _v(float(dims["width_mm"]), oed_src))
        height = _v(float(dims["height_mm"]), oed_src)
        k = common["frontal_area_factor"]
        # a maker's published frontal area beats the width x height estimate
        area = sel.get("frontal_area_m2") or _v(
            round(k["value"] * width["value"] * height["value"] / 1e6, 3),
            f"{k['source']}: width {width['value']:g} mm ({width['source']}), "
            f"height {height['value']:g} mm ({height['source']})",
        )
        curb = float(rec["weights"]["curb_weight_kg"])
        driver = common["driver_kg"]

        if sel["market"] == "EU":
            ports = [*m["ac_charger"]["ports"], *m["dc_charger"]["ports"]]
            plugs = sorted({"ccs2" if p == "ccs" else p for p in ports})
            plug_src = f"{kw_src}; a European 'ccs' inlet is CCS2"
        else:
            src_rec = oed_record(oed, sel.get("connectors_from", sel["oed"]))
            plugs = sorted({p["connector"] for p in src_rec["charge_ports"]})
            if "ccs1" in plugs:
                plugs = sorted({*plugs, "type1"})  # a CCS1 inlet takes a J1772 (type 1) AC plug
            plug_src = f"{OED}, {sel.get('connectors_from', sel['oed'])}; a CCS1 inlet takes J1772"
        params: dict[str, Any] = {
            "mass_kg": _v(
                curb + driver["value"], f"curb weight {curb:g} kg, {oed_src}; + {driver['source']}"
            ),
            "drag_coeff": sel.get("drag_coeff") or _v(rec["body"]["drag_coefficient_cd"], oed_src),
            "frontal_area_m2": area,
            "battery_wh": _v(round(1000.0 * m["usable_battery_size"], 1), kw_src),
            "ac_max_kw": sel.get("ac_max_kw") or _v(float(m["ac_charger"]["max_power"]), kw_src),
            "dc_max_kw": _v(float(m["dc_charger"]["max_power"]), kw_src),
            "connectors": _v(plugs, plug_src),
            "charge_curve": _v(
                [
                    [float(p["percentage"]), float(p["power"])]
                    for p in m["dc_charger"]["charging_curve"]
                ],
                kw_src
                + (
                    "; the dataset marks this curve as its generic default shape"
                    if m["dc_charger"].get("is_default_charging_curve")
                    else ""
                ),
            ),
        }
        for field in ("rolling_coeff", "eta_traction", "eta_recuperation", "aux_power_w",
                      "stops_per_km"):
            params[field] = sel.get(field) or common[field]

        avg = 10.0 * m["energy_consumption"]["average_consumption"]
        if "reference_tbtp" in sel:
            t = tests[sel["reference_tbtp"]]
            reference = {
                "low_wh_per_km": t["90"], "high_wh_per_km": t["120"],
                "source": f"{TBTP}, {sel['reference_tbtp']}: {t['90']:g} Wh/km at 90 km/h, "
                f"{t['120']:g} Wh/km at 120 km/h",
            }
        else:
            reference = {
                "low_wh_per_km": round(low_ratio * avg, 1),
                "high_wh_per_km": round(high_ratio * avg, 1),
                "source": f"{avg:g} Wh/km average consumption ({kw_src}) x "
                f"{low_ratio}..{high_ratio} ({band_source})",
            }
        vehicles[name] = {
            "label": sel["label"], "market": sel["market"], "params": params,
            "reference_100kmh": reference,
        }

    return {
        "about": "ev-nav vehicle catalogue, generated by scripts/import_vehicles.py from "
        "scripts/vehicle_fills.toml and the datasets below; every value names its source.",
        "sources": {
            "kilowatt": {
                "name": KILOWATT, "commit": _commit(kilowatt),
                "licence": "MIT License with Attribution Requirement, Copyright (c) 2024 Tijs "
                "Teulings (text in ev_nav/data/NOTICE.md)",
                "attribution": "Open EV Data (https://github.com/KilowattApp/open-ev-data)",
            },
            "oed": {
                "name": OED, "commit": _commit(oed),
                "licence": "Community Data License Agreement - Permissive - Version 2.0 "
                "(text in ev_nav/data/NOTICE.md)",
                "attribution": "Open EV Data Dataset contributors",
            },
            "tbtp": {
                "name": TBTP, "commit": _commit(tbtp),
                "licence": "MIT, Copyright (c) 2019 (text in ev_nav/data/NOTICE.md)",
                "attribution": "Tesla Bjorn Test Procedure results by Bjorn Nyland",
            },
        },
        "vehicles": vehicles,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kilowatt", type=Path, required=True, help="KilowattApp/open-ev-data")
    parser.add_argument("--oed", type=Path, required=True, help="open-ev-data-dataset checkout")
    parser.add_argument("--tbtp", type=Path, required=True, help="tbtp-ev.github.io checkout")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output (default {OUT})")
    parser.add_argument("--fills", type=Path, default=FILLS, help=f"selection (default {FILLS})")
    args = parser.parse_args(argv)
    doc = build(args.kilowatt, args.oed, args.tbtp, args.fills)
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)  # atomic: a reader never sees half a catalogue
    print(f"wrote {len(doc['vehicles'])} vehicles to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
