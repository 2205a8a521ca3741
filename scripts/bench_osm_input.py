#!/usr/bin/env python
"""OSM input benchmark (issue 26): build time and peak memory from XML vs PBF.

The shared extract is converted to PBF (pyosmium) in a temporary folder; each build runs in a
fresh subprocess so its peak memory (ru_maxrss) is its own. "above imports" subtracts a child
that only imports the loader, so the column is what reading and building cost. A second PBF
adds non-road data (buildings: nodes and closed ways, none of it drivable) to the same extract:
the PBF reader's memory should follow the road network, not the file, so its row should barely
move while the file grows several-fold (the same data as XML, which osmnx parses whole, shows
the difference).

Usage: python scripts/bench_osm_input.py [--quick] [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def _child(kind: str, src: str, out: str) -> dict:
    """Inside the child: import only, or build ``src`` and save it to ``out``."""
    import warnings

    from ev_nav.roads.load import load_osm

    if kind == "imports":
        import osmium  # noqa: F401
        import osmnx  # noqa: F401

        return {"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3}
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    net = load_osm(src)
    build = time.perf_counter() - t0
    net.save(out)
    return {
        "segments": net.n_segments,
        "forbidden_turns": int(net.forbidden_turns.shape[0]),
        "build_s": build,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
    }


def _run(kind: str, src: Path | str, out: Path | str) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(src), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def write_osm(src: Path, dst: Path, padding_buildings: int = 0) -> Path:
    """``src``'s data as ``dst``'s format (PBF or XML, by its suffix: nodes, ways, relations,
    each in file order), plus
    ``padding_buildings`` square buildings (closed ways of 4 new nodes, ids above the file's)
    scattered over its area."""
    import osmium

    rng = np.random.default_rng(0)
    with osmium.SimpleWriter(str(dst), overwrite=True) as writer:
        lonlat, max_node, max_way = [], 0, 0
        for node in osmium.FileProcessor(str(src), osmium.osm.NODE):
            lonlat.append((node.location.lon, node.location.lat))
            max_node = max(max_node, node.id)
            writer.add(node)
        lo, hi = np.min(lonlat, axis=0), np.max(lonlat, axis=0)
        corners = lo + rng.random((padding_buildings, 2)) * (hi - lo)
        nid = max_node
        for x, y in corners:
            for dx, dy in ((0.0, 0.0), (1e-4, 0.0), (1e-4, 1e-4), (0.0, 1e-4)):
                nid += 1
                writer.add_node(osmium.osm.mutable.Node(
                    id=nid, location=(x + dx, y + dy), tags={"addr:housenumber": "1"}))
        for way in osmium.FileProcessor(str(src), osmium.osm.WAY):
            max_way = max(max_way, way.id)
            writer.add(way)
        for k in range(padding_buildings):
            first = max_node + 4 * k + 1
            writer.add_way(osmium.osm.mutable.Way(
                id=max_way + k + 1, nodes=[first, first + 1, first + 2, first + 3, first],
                tags={"building": "yes"}))
        for rel in osmium.FileProcessor(str(src), osmium.osm.RELATION):
            writer.add(rel)
    return dst


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="Monaco only, no padding (tests)")
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--padding", type=int, default=200_000,
                        help="buildings added to the padded PBF (default 200,000)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return 0

    from ev_nav.errors import require_file
    from ev_nav.roads.network import RoadNetwork

    name = "most_monaco" if args.quick else "lust_luxembourg"
    # checked here: the children would fail on it with a traceback
    xml = require_file(args.data / f"{name}.osm.gz", "OSM file")
    base = _run("imports", "-", "-")["peak_rss_mb"]
    print(f"{name}: peak RSS of the imports alone {base:,.0f} MB")
    print(f"{'input':<22}{'file MB':>9}{'segments':>10}{'forbidden':>10}{'build s':>9}"
          f"{'peak MB':>9}{'above imports MB':>18}")
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        inputs = [("XML (.osm.gz)", xml), ("PBF", write_osm(xml, t / f"{name}.osm.pbf"))]
        if not args.quick:
            pad = f" + {args.padding // 1000}k bldgs"
            for fmt, suffix in (("PBF", "osm.pbf"), ("XML", "osm.gz")):
                padded = write_osm(xml, t / f"{name}-padded.{suffix}", args.padding)
                inputs.append((fmt + pad, padded))
        nets = {}
        for label, src in inputs:
            out = t / f"{len(nets)}.npz"
            r = _run("build", src, out)
            nets[label] = RoadNetwork.load(out)
            print(f"{label:<22}{src.stat().st_size / 1e6:>9.2f}{r['segments']:>10,}"
                  f"{r['forbidden_turns']:>10,}{r['build_s']:>9.2f}{r['peak_rss_mb']:>9,.0f}"
                  f"{r['peak_rss_mb'] - base:>18,.0f}")
    a, b = nets["XML (.osm.gz)"], nets["PBF"]
    differ = [
        f
        for f in ("node_osmid", "seg_u", "seg_v", "highway", "speed_mps", "lg_indices",
                  "forbidden_turns")
        if not np.array_equal(getattr(a, f), getattr(b, f))
    ]
    print(f"PBF network: same nodes, segments and turns as XML: {not differ} {differ or ''}; "
          f"identical arrays: {a.arrays_hash == b.arrays_hash}; "
          f"max |Δ length| {np.abs(a.length_m - b.length_m).max():.4f} m "
          "(PBF stores coordinates to 1e-7°)")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
