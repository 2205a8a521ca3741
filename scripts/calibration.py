#!/usr/bin/env python
"""Are the learner's fitted scales the world's? Fitted against true noise and outputscale after a
fleet's trips, and the coverage of the 90 % predictive interval of held-out trips' energy.

For each world (the physical ground truth on SRTM Monaco, the synthetic hilly town and LuST
Luxembourg) a fleet drives ``--trips`` random trips with the exact learner (GP-TS), whose
hyperparameters are fitted on its schedule. Two learners are compared: ``segment_scale="loss"``
(prior deviation and noise scale with each segment's deterministic loss, the world's model) and
``"uniform"`` (the paper's one σ0² and one ς² for every segment). Printed side by side:

* the median and 90th percentile over segments of fitted / true noise sd;
* fitted / true outputscale (the loss learner's relative σ0² against the world's
  ``exp(s²) − 1``, the variance of its loss factor; a uniform learner's outputscale is in Wh² and
  has no single true counterpart, so it is not compared);
* the share of ``--held-out`` new random trips (driven on their fastest route) whose measured
  energy falls in the model's 90 % predictive interval (posterior plus noise).

Usage: python scripts/calibration.py [--trips 200] [--held-out 300] [--seed 0] [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from ev_nav.bandits.routing import Router
from ev_nav.potential import loss_scale
from ev_nav.roads.network import RoadNetwork
from ev_nav.settings import data_dir
from ev_nav.sim.environment import Environment, TruthSpec
from ev_nav.sim.fleet import AgentSpec, NetworkSpec, RunSpec, TripGenerator, TripSpec, run_one

Z90 = float(ndtri(0.95))


def worlds(quick: bool) -> dict[str, NetworkSpec]:
    """The worlds' network specs (the synthetic town only with ``quick``)."""
    nets = {"synthetic town (hilly)": NetworkSpec(kind="synthetic", n_segments=2000, seed=0)}
    if quick:
        return nets
    data = data_dir()
    nets["SRTM Monaco"] = NetworkSpec(
        kind="osm", path=str(data / "gh_monaco.osm.gz"), dems=(str(data / "N43E007.hgt.zip"),)
    )
    nets["Luxembourg (flat)"] = NetworkSpec(kind="osm", path=str(data / "lust_luxembourg.osm.gz"))
    return nets


def coverage(model, env: Environment, net: RoadNetwork, seed: int, n: int) -> float:
    """Share of ``n`` held-out random trips whose measured energy is inside the 90 % interval."""
    gen = TripGenerator(TripSpec(kind="random", min_distance_m=1000.0), net, seed + 7919)
    rng = np.random.default_rng(seed + 104729)
    router = Router(net)
    inside = 0
    for _ in range(n):
        s, g = gen.next()
        path = router.route(net.travel_time_s, s, g)
        measured = float(env.drive(path, rng).sum())
        mean, var = model.predict_sum(path)
        sd = np.sqrt(max(var, 0.0) + model.noise_variance(path))
        inside += abs(measured - mean) <= Z90 * sd
    return inside / n


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trips", type=int, default=200, help="fleet trips before the comparison")
    p.add_argument("--held-out", type=int, default=300, help="held-out trips for the coverage")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="30 trips, synthetic town only")
    p.add_argument("--out", type=Path, default=None, help="write the table here (Markdown)")
    args = p.parse_args()
    trips = 30 if args.quick else args.trips
    held = 50 if args.quick else args.held_out
    t0 = time.perf_counter()
    truth = TruthSpec(kind="physical")
    lines = [
        f"{trips} fleet trips (GP-TS, exact learner), {held} held-out trips, seed {args.seed}",
        "",
        "| world | learner | noise sd fitted/true median | p90 | outputscale fitted/true "
        "| 90 % interval coverage |",
        "|---|---|---|---|---|---|",
    ]
    print(lines[0])
    ok = True
    for label, net_spec in worlds(args.quick).items():
        for scale in ("loss", "uniform"):
            spec = RunSpec(
                network=net_spec,
                agent=AgentSpec(model="gp", policy="ts", segment_scale=scale),
                trips=TripSpec(kind="random", min_distance_m=1000.0, name="fleet"),
                truth=truth,
                horizon=trips,
                seed=args.seed,
            )
            res = run_one(spec)
            model, env = res.model, res.env
            net = env.net
            true_sd = env.noise_sd(np.arange(net.n_segments))
            h = model.hyperparameters()
            if scale == "loss":
                fitted_sd = np.sqrt(h["noise_var"]) * loss_scale(net)
                fitted_s0 = h["outputscale_product"] + h["outputscale_feature"]
                s0_ratio = f"{fitted_s0 / env.info['relative_outputscale']:.2f}"
            else:
                fitted_sd = np.full(net.n_segments, np.sqrt(h["noise_var"]))
                s0_ratio = "n/a (Wh²)"
            ratio = fitted_sd / true_sd
            med, p90 = np.median(ratio), np.percentile(ratio, 90)
            cov = coverage(model, env, net, args.seed, held)
            row = (f"| {label} | {scale} | {med:.2f} | {p90:.2f} | {s0_ratio} | "
                   f"{100 * cov:.1f} % |")
            lines.append(row)
            print(row, flush=True)
            if scale == "loss":
                ok &= 0.67 <= med <= 1.5 and 0.67 <= p90 <= 1.5
                ok &= 0.67 <= fitted_s0 / env.info["relative_outputscale"] <= 1.5
                ok &= 0.85 <= cov <= 0.95
    lines.append("")
    lines.append(f"whole command: {time.perf_counter() - t0:.0f} s")
    print(lines[-1])
    print(f"loss-scaled learner within the targets: {'yes' if ok else 'no'}")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
