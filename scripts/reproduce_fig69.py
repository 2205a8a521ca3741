#!/usr/bin/env python
"""Reproduce Figs. 6–9: exploration maps (segments coloured by how often each agent drove them).

Reads the runs of ``reproduce_fig2.py`` (its output folder) and writes, per network, route and
agent, an HTML map (folium) and a PNG of the visit counts summed over seeds.
Usage: python scripts/reproduce_fig69.py [--runs docs/results/fig2] [--out docs/results/fig69]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from ev_nav.sim.fleet import AgentSpec, NetworkSpec, load_network
from ev_nav.viz.maps import visits_map
from ev_nav.viz.plots import visits_png

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--runs", type=Path, default=REPO / "docs" / "results" / "fig2")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "results" / "fig69")
    p.add_argument("--no-html", action="store_true", help="PNG only")
    args = p.parse_args()
    groups: dict[tuple, list[np.ndarray]] = defaultdict(list)
    nets: dict[str, NetworkSpec] = {}
    for meta_path in sorted(args.runs.glob("runs/*/metadata.json")):
        meta = json.loads(meta_path.read_text())
        cfg = meta["config"]
        net_spec = NetworkSpec(**{**cfg["network"], "dems": tuple(cfg["network"]["dems"])})
        label = net_spec.label
        nets[label] = net_spec
        agent = AgentSpec(**cfg["agent"]).label
        groups[(label, cfg["trips"]["name"], agent)].append(
            np.load(meta_path.parent / "visits.npy", allow_pickle=False)
        )
    if not groups:
        print(f"no finished runs under {args.runs}; run scripts/reproduce_fig2.py first")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for (label, route, agent), arrays in sorted(groups.items()):
        net = load_network(nets[label])
        visits = np.sum(arrays, axis=0).astype(float)
        stem = f"{label}_{route}_{agent}".replace(" ", "_")
        png = visits_png(
            net, visits, args.out / f"{stem}.png", title=f"{label} route {route}: {agent}"
        )
        print(f"wrote {png}")
        if not args.no_html:
            html = args.out / f"{stem}.html"
            visits_map(net, visits, title=f"{label} route {route}: {agent}", path=html)
            print(f"wrote {html}")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
