#!/usr/bin/env python
"""Trip-energy prediction through the seasons, with and without temperature (issue 31, item 3).

On MoST Monaco (``--quick``: a 900-segment sub-town of it; ``--smoke``: a synthetic town), a
fleet drives random trips (``--vehicles`` a day, origin and destination ≥ 1 km apart, each on
the least-energy route under the physics model, so which roads are driven does not depend on
what a model learns) for ``--days`` days in the physical world (``docs/objective.md``) with a
seasonal temperature cycle: day ``d`` has ``mean − amplitude·cos(2π d/365)`` °C plus weather
(sd 3 K), and every energy of that day is the world's at that temperature
(:mod:`ev_nav.sim.climate`: AAA's 2019 cold- and hot-weather range tests, fixed before this
benchmark was run). Two exact learners (per-segment scales, hyperparameters fitted on their
schedule) learn from the same readings: one is given each day's temperature
(:mod:`ev_nav.gp.temperature`), the other is not and averages over the seasons.

Then held-out trips (their own generator: other origins, destinations and days of the year,
not learned from) are predicted by both, and compared with their measured energy (the world at
that day's temperature plus one drive's noise): the mean absolute percentage error of each, and
how often the measured energy falls in the temperature-aware model's 90 % predictive interval
(posterior of the trip's sum plus one drive's noise). Held-out trips whose expected energy on
their day is below ``--min-energy`` (100 Wh) are skipped: Monaco's downhill trips nearly break
even, and a percentage of nearly nothing would decide the mean. The target (acceptance 3 of
issue 31): ``MAPE ratio (with/without temperature)`` ≤ 0.5 and a coverage of 0.85–0.95.

Usage: python scripts/bench_temperature.py [--quick | --smoke] [--days D] [--seed S]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ev_nav.cli import count_arg, seed_arg  # noqa: E402 (after the path)

Z90 = 1.6448536269514722  # the standard normal's 95 % quantile: a central 90 % interval


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="fewer days and trips (≤ 3 min)")
    mode.add_argument("--smoke", action="store_true", help="a small town, seconds (the suite)")
    p.add_argument(
        "--days", type=count_arg, help="days of driving (default 365; quick 240; smoke 120)"
    )
    p.add_argument("--vehicles", type=count_arg, default=4, help="trips a day (default 4)")
    p.add_argument(
        "--held-out", type=count_arg, help="held-out trips (default 300; quick 150; smoke 80)"
    )
    p.add_argument("--mean", type=float, default=10.0, help="mean temperature [°C]")
    p.add_argument("--amplitude", type=float, default=10.0, help="seasonal amplitude [K]")
    p.add_argument("--min-energy", type=float, default=100.0,
                   help="held-out trips use at least this much energy [Wh] (expected, on their "
                   "day): a percentage error of a trip that nearly breaks even downhill says "
                   "nothing")
    p.add_argument("--no-shape", action="store_true",
                   help="the learner with temperature gets the three physics features only "
                   "(ClimateModel(shape_knots_c=()))")
    p.add_argument("--seed", type=seed_arg, default=0)
    args = p.parse_args()

    from ev_nav import settings
    from ev_nav.bandits.routing import Router
    from ev_nav.energy import ClimateModel
    from ev_nav.gp.incremental import IncrementalConfig, IncrementalGP
    from ev_nav.potential import loss_scale
    from ev_nav.sim.climate import energy_at, seasonal_temperature
    from ev_nav.sim.environment import Environment, TruthSpec
    from ev_nav.sim.fleet import NetworkSpec, TripGenerator, TripSpec, load_network

    t_start = time.perf_counter()
    if args.smoke:
        spec = NetworkSpec(kind="synthetic", n_segments=400, seed=2)
        days, held = args.days or 120, args.held_out or 80
    else:
        osm = settings.data_dir() / "most_monaco.osm.gz"
        if not osm.is_file():
            sys.exit(f"bench_temperature: {osm} is missing (set EV_NAV_DATA)")
        spec = NetworkSpec(kind="osm", path=str(osm))
        days = args.days or (240 if args.quick else 365)
        held = args.held_out or (150 if args.quick else 300)
    net = load_network(spec)
    if args.quick:  # a real sub-town of Monaco: the exact learners' N² steps cost a quarter
        from ev_nav.gp.testing import subnetwork

        net = subnetwork(net, 900, seed=args.seed)
    env = Environment.create(net, seed=args.seed, truth=TruthSpec(kind="physical"))
    base = env.true_energy.copy()
    sd = env.noise_sd(np.arange(net.n_segments))
    router = Router(net)
    weights = loss_scale(net)  # E_det − ΔΦ ≥ 0: the least-energy route under the physics model

    def temperature(day: int, stream: int) -> float:
        return seasonal_temperature(day, mean_c=args.mean, amplitude_c=args.amplitude,
                                    period=365, noise_c=3.0, seed=args.seed * 1000 + stream)

    learn = not args.smoke
    config = IncrementalConfig(segment_scale="loss", learn_hyperparameters=learn)
    climate = ClimateModel(shape_knots_c=()) if args.no_shape else ClimateModel()
    with_t = IncrementalGP(net, config=config, seed=args.seed, climate=climate)
    without = IncrementalGP(net, config=config, seed=args.seed)
    trips = TripGenerator(TripSpec(kind="random", min_distance_m=1000.0), net, args.seed)
    noise_rng = np.random.default_rng(args.seed + 1)
    from tqdm.auto import tqdm

    temps = []
    for day in tqdm(range(days), desc="days", disable=args.smoke, leave=False):
        t = temperature(day, 0)
        temps.append(t)
        f = energy_at(net, base, t)
        paths = [router.route(weights, *trips.next()) for _ in range(args.vehicles)]
        ids = np.concatenate(paths)
        y = f[ids] + sd[ids] * noise_rng.standard_normal(ids.size)
        with_t.update(ids, y, temperature=t)
        without.update(ids, y)
    learned = time.perf_counter() - t_start

    # held-out trips: their own origins and destinations, days and drive noise
    held_trips = TripGenerator(TripSpec(kind="random", min_distance_m=1000.0), net,
                               args.seed + 7919)
    day_rng = np.random.default_rng(args.seed + 2)
    held_noise = np.random.default_rng(args.seed + 3)
    err_with, err_without, inside, measured, scores = [], [], 0, [], []
    held_temps, skipped = [], 0
    while len(measured) < held:
        path = router.route(weights, *held_trips.next())
        t = temperature(int(day_rng.integers(365)), 1)
        f = energy_at(net, base, t)
        if f[path].sum() < args.min_energy:
            skipped += 1
            continue
        held_temps.append(t)
        actual = float(f[path].sum() + math.sqrt(float(sd[path] @ sd[path]))
                       * held_noise.standard_normal())
        m1, v1 = with_t.predict_sum(path, temperature=t)
        m0, _ = without.predict_sum(path)
        s1 = math.sqrt(max(v1, 0.0) + with_t.noise_variance(path))
        err_with.append(abs(m1 - actual) / abs(actual))
        err_without.append(abs(m0 - actual) / abs(actual))
        inside += abs(actual - m1) <= Z90 * s1
        scores.append((actual - m1) / s1)
        measured.append(actual)
    mape_with = float(np.mean(err_with))
    mape_without = float(np.mean(err_without))
    wall = time.perf_counter() - t_start

    cold = [e for e, t in zip(err_with, held_temps, strict=True) if t < 5.0]
    cold0 = [e for e, t in zip(err_without, held_temps, strict=True) if t < 5.0]
    coef = with_t.temp.posterior_coefficients()
    print(f"network: {net.name} ({net.n_segments} segments); {days} days × {args.vehicles} "
          f"trips; temperatures {min(temps):.1f}..{max(temps):.1f} °C (mean {args.mean:g}, "
          f"amplitude {args.amplitude:g} K, weather sd 3 K)")
    print(f"held-out trips: {held} using at least {args.min_energy:g} Wh ({skipped} drawn trips "
          f"below it skipped), measured energy median {np.median(measured):.0f} Wh")
    print(f"MAPE with temperature: {100 * mape_with:.1f} %   without: "
          f"{100 * mape_without:.1f} %")
    if cold:
        print(f"  held-out trips below 5 °C ({len(cold)}): with {100 * np.mean(cold):.1f} %, "
              f"without {100 * np.mean(cold0):.1f} %")
    print("learned physics coefficients (heating W/K, cooling W/K, battery 1/K): "
          + ", ".join(f"{m:.3g} ± {s:.2g}" for m, s in zip(coef["mean"][:3], coef["sd"][:3],
                                                            strict=True))
          + " (prior " + ", ".join(f"{m:.3g}" for m in coef["prior_mean"][:3]) + ")")
    z = np.asarray(scores)
    bands = [(-99, 5), (5, 15), (15, 99)]
    print("standardised errors (measured − predicted)/sd by temperature: " + "; ".join(
        f"{lo if lo > -99 else ''}..{hi if hi < 99 else ''} °C mean {z[m].mean():+.2f} sd "
        f"{z[m].std():.2f} (n={int(m.sum())})"
        for lo, hi in bands
        if (m := (np.asarray(held_temps) >= lo) & (np.asarray(held_temps) < hi)).any()
    ))
    print(f"MAPE ratio (with/without temperature): {mape_with / mape_without:.2f}")
    print(f"90% interval coverage: {inside / held:.2f}")
    print(f"wall time: {wall:.0f} s (learning {learned:.0f} s)")
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
