#!/usr/bin/env python
"""Are the learner's fitted scales the world's? Fitted against true noise and outputscale after a
fleet's trips, and the coverage of the 90 % predictive interval of held-out trips' energy.

For each world (the physical ground truth on SRTM Monaco, the synthetic hilly town and LuST
Luxembourg) and each of ``--seeds`` independent draws of it, a fleet drives ``--trips`` random
trips with the exact learner (GP-TS), whose hyperparameters are fitted on its schedule. Two
learners are compared: ``segment_scale="loss"`` (prior deviation and noise scale with each
segment's deterministic loss, the world's model; every seed) and ``"uniform"`` (the paper's one
σ0² and one ς² for every segment; the first seed, as the contrast). One world is one draw, and
how well a fitted model covers held-out trips varies from draw to draw (measured: 83 % and 95 %
on two draws of the town), so the coverage is the mean over the seeds, with its range. Printed
side by side:

* the median and 90th percentile over segments of fitted / true noise sd;
* fitted / true outputscale (the loss learner's relative σ0² against the world's
  ``exp(s²) − 1``, the variance of its loss factor; a uniform learner's outputscale is in Wh² and
  has no single true counterpart, so it is not compared);
* the share of ``--held-out`` new random trips (driven on their fastest route) whose measured
  energy falls in the model's 90 % predictive interval (posterior plus noise).

Usage: python scripts/calibration.py [--trips 200] [--held-out 300] [--seeds 0,1,2] [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.special import ndtri

from ev_nav.bandits.routing import Router
from ev_nav.potential import loss_scale
from ev_nav.provenance import atomic_write_text
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


def evaluate(
    net_spec: NetworkSpec, scale: str, trips: int, held: int, seed: int
) -> tuple[float, float, float, float]:
    """One fleet run: median and p90 of fitted/true noise sd, fitted/true relative outputscale
    (NaN for the uniform learner) and the held-out coverage."""
    spec = RunSpec(
        network=net_spec,
        agent=AgentSpec(model="gp", policy="ts", segment_scale=scale),
        trips=TripSpec(kind="random", min_distance_m=1000.0, name="fleet"),
        truth=TruthSpec(kind="physical"),
        horizon=trips,
        seed=seed,
    )
    res = run_one(spec)
    model, env = res.model, res.env
    net = env.net
    true_sd = env.noise_sd(np.arange(net.n_segments))
    h = model.hyperparameters()
    s0_ratio = float("nan")
    if scale == "loss":
        fitted_sd = np.sqrt(h["noise_var"]) * loss_scale(net)
        fitted_s0 = h["outputscale_product"] + h["outputscale_feature"]
        s0_ratio = fitted_s0 / env.info["relative_outputscale"]
    else:
        fitted_sd = np.full(net.n_segments, np.sqrt(h["noise_var"]))
    ratio = fitted_sd / true_sd
    cov = coverage(model, env, net, seed, held)
    return float(np.median(ratio)), float(np.percentile(ratio, 90)), s0_ratio, cov


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--trips", type=int, help="fleet trips before the comparison (default 200; quick 30)"
    )
    p.add_argument(
        "--held-out", type=int, help="held-out trips for the coverage (default 300; quick 50)"
    )
    p.add_argument(
        "--seeds", help="world draws (comma-separated whole numbers; default 0,1,2; quick 0)"
    )
    p.add_argument("--worlds", help="only these worlds (comma-separated: town,monaco,luxembourg)")
    p.add_argument(
        "--quick", action="store_true",
        help="30 trips, 50 held out, seed 0, synthetic town only (unless given)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the table here (Markdown)")
    args = p.parse_args()
    trips = args.trips if args.trips is not None else (30 if args.quick else 200)
    held = args.held_out if args.held_out is not None else (50 if args.quick else 300)
    if trips < 1 or held < 1:
        p.error(f"--trips and --held-out must be at least 1, got {trips} and {held}")
    seed_text = args.seeds if args.seeds is not None else ("0" if args.quick else "0,1,2")
    try:
        seeds = [int(x) for x in seed_text.split(",")]
    except ValueError:
        p.error(f"--seeds takes comma-separated whole numbers, got {seed_text!r}")
    if any(s < 0 for s in seeds):
        p.error(f"--seeds must be >= 0, got {seed_text!r}")
    chosen = worlds(args.quick)
    if args.worlds:
        keys = [w.strip().lower() for w in args.worlds.split(",")]
        unknown = [w for w in keys if not any(w and w in k.lower() for k in chosen)]
        if unknown:
            p.error(
                f"--worlds names no world of this run: {', '.join(unknown)} "
                f"(this run's worlds: {'; '.join(chosen)})"
            )
        chosen = {k: v for k, v in chosen.items() if any(w in k.lower() for w in keys)}
    t0 = time.perf_counter()
    lines = [
        f"{trips} fleet trips (GP-TS, exact learner), {held} held-out trips per seed, seeds "
        f"{seeds} (the uniform learner: seed {seeds[0]})",
        "",
        "| world | learner | noise sd fitted/true median | p90 | outputscale fitted/true "
        "(median; range) "
        "| 90 % interval coverage (mean; range) |",
        "|---|---|---|---|---|---|",
    ]
    print(lines[0])
    ok = True
    for label, net_spec in chosen.items():
        for scale in ("loss", "uniform"):
            meds, p90s, s0s, covs = [], [], [], []
            for seed in seeds if scale == "loss" else seeds[:1]:
                med, p90, s0, cov = evaluate(net_spec, scale, trips, held, seed)
                meds.append(med)
                p90s.append(p90)
                s0s.append(s0)
                covs.append(cov)
            s0_ratio = (
                "n/a (Wh²)" if scale == "uniform"
                else f"{np.median(s0s):.2f}" + (
                    f" ({min(s0s):.2f}–{max(s0s):.2f})" if len(s0s) > 1 else "")
            )
            spread = f"; {100 * min(covs):.0f}–{100 * max(covs):.0f} %" if len(covs) > 1 else ""
            row = (f"| {label} | {scale} | {np.median(meds):.2f} | {np.median(p90s):.2f} | "
                   f"{s0_ratio} | {100 * np.mean(covs):.1f} %{spread} |")
            lines.append(row)
            print(row, flush=True)
            if scale == "loss":
                ok &= all(0.67 <= v <= 1.5 for v in (*meds, *p90s, *s0s))
                ok &= 0.85 <= float(np.mean(covs)) <= 0.95
    lines.append("")
    lines.append(f"whole command: {time.perf_counter() - t0:.0f} s")
    print(lines[-1])
    print(f"loss-scaled learner within the targets: {'yes' if ok else 'no'}")
    if args.out:
        atomic_write_text(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
