#!/usr/bin/env python
"""Whole-trip cost of the regional learner on a large synthetic town, against the fallback.

A fleet of random origin–destination trips (shortest routes on E_det, readings of every
segment driven) first drives the town until ``--distinct`` segments have readings; then
``--trips`` Thompson-sampling trips are timed, each: one joint posterior draw of every segment
(:meth:`RegionalGP.sample`) → Algorithm 2's rectified weights → bidirectional Dijkstra between
a random origin and destination → ``update`` with the route's readings (applied before the
next trip's draw). Then as many Bayes-UCB trips: ``posterior()`` (every segment's mean and
variance, kept current by the updates) → the Bayes-UCB weights → route → update. One BLAS
thread. Printed per phase: medians and 90th percentiles [ms].

The learner fits its hyperparameters on the exact learner's schedule throughout (unless
``--no-fits``): each fit is timed (the fit, and where the likelihood-ratio test accepts the
fitted values, the prior's rebuild at them and its factorisation), one more fit after the
timed trips, and then ``--steady-trips`` more fleet trips at the schedule's steady state (one
fit per ``fit_max_gap`` = 100 trips): the fits' seconds over those trips, per trip, are added
to the trips' medians (``… trip, fits amortised``).

With ``--temperature C`` every reading (history and timed trips) is made at ``C`` °C and every
draw and posterior is read at it: the temperature coefficients' terms (m = 7 more columns of
the posterior covariance per trip) are then part of each trip. After the timed trips one road
is flagged as changed (``reset_segments``: its readings forgotten) and the reset with the
next draw is timed (the learner refactorises from its statistics).

Also printed: the one-off costs (building the Vecchia prior; the first factorisation) and the
peak memory, and, unless ``--no-fallback``, the fallback's trip on the same town and history
(the SVGP as driver states build it past 12,000 segments, ``exact_refresh=True``: posterior
over all segments → Thompson index → route → update), timed in the same run, with the ratio
as ``town100k trip speed-up: …x``. The fallback is slow on the 100k town (~1.5 min a trip on a
2-core machine: each κ step solves its 1,000 graph-kernel columns again): ``--no-fallback``
skips it.

Usage: python scripts/bench_regional.py [--segments 103000] [--distinct 20000] [--trips 20]
       [--landmarks 500] [--fallback-trips 3] [--no-fallback] [--no-fits] [--first-fit N]
       [--steady-trips 300] [--temperature C] [--json PATH] [--quick]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _ms(xs: list[float]) -> str:
    return f"{1000 * statistics.median(xs):.1f} ms (p90 {1000 * np.quantile(xs, 0.9):.1f})"


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} s" if xs else "-"


def main(argv: list[str] | None = None) -> int:
    from ev_nav.cli import count_arg

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--segments", type=count_arg, default=103_000,
                    help="size of the synthetic town (default 103000)")
    ap.add_argument("--distinct", type=count_arg, default=20_000,
                    help="distinct segments with readings before timing (default 20000)")
    ap.add_argument("--trips", type=count_arg, default=20, help="timed trips (default 20)")
    ap.add_argument("--landmarks", type=count_arg, default=500,
                    help="most landmarks of the feature-only term (default 500)")
    ap.add_argument("--fallback-trips", type=count_arg, default=3,
                    help="timed trips of the SVGP fallback (default 3)")
    ap.add_argument("--no-fallback", action="store_true", help="skip the SVGP fallback")
    ap.add_argument("--no-fits", action="store_true",
                    help="keep the initial hyperparameters (no fits on the schedule)")
    ap.add_argument("--first-fit", type=count_arg, default=None,
                    help="update of the first fit (default the exact learner's, 10; a later one "
                         "skips the fits of the history's first trips)")
    ap.add_argument("--steady-trips", type=count_arg, default=300,
                    help="fleet trips after the timed ones, over which the steady state's "
                         "fits are amortised (default 300: three fits)")
    ap.add_argument("--temperature", type=float, default=None,
                    help="make every reading and read every posterior at this ambient "
                         "temperature [°C] (default: none recorded)")
    ap.add_argument("--json", type=Path,
                    help="also write the results (with config and versions) here")
    ap.add_argument("--quick", action="store_true",
                    help="a 3,000-segment town, 1,000 distinct, 3 trips (a smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.segments, args.distinct, args.trips, args.fallback_trips = 3000, 1000, 3, 1
        args.steady_trips = 100

    import scipy.linalg  # noqa: F401  (its OpenBLAS must be loaded before the limit below)
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    threadpool_limits(1)
    from tqdm.auto import tqdm

    from ev_nav.bandits.indices import make_index, rectified_weights, rectify
    from ev_nav.bandits.routing import Router
    from ev_nav.gp.fitting import gain_threshold
    from ev_nav.gp.regional import RegionalConfig, RegionalGP
    from ev_nav.roads.synthetic import synthetic_town

    net = synthetic_town(args.segments, seed=0)
    n = net.n_segments
    rng = np.random.default_rng(0)
    truth = net.e_det() * np.exp(0.1 * rng.standard_normal(n))
    t0 = time.perf_counter()
    schedule = {} if args.first_fit is None else {"first_fit": args.first_fit}
    model = RegionalGP(net, config=RegionalConfig(landmarks=args.landmarks,
                                                  learn_hyperparameters=not args.no_fits,
                                                  **schedule))
    _ = model.factor  # the prior is built when first needed: here, inside the timing
    build_s = time.perf_counter() - t0
    # each fit on the schedule, timed: the fit, the prior's rebuild at the fitted values
    fit_s: list[float] = []
    fit_taken: list[bool] = []  # whether each timed fit's values were accepted
    refit = model.refit

    def timed_refit(*a: object, **k: object) -> bool:
        t, seen = time.perf_counter(), len(model.fits)
        try:
            return refit(*a, **k)
        finally:
            fit_s.append(time.perf_counter() - t)
            fit_taken.append(len(model.fits) > seen and bool(model.fits[-1]["accepted"]))

    model.refit = timed_refit  # type: ignore[method-assign]
    noise = model.noise_std
    temp = args.temperature
    router = Router(net)
    base = np.maximum(net.e_det(), 1e-3)

    def od() -> tuple[int, int]:
        a, b = rng.integers(n, size=2)
        return int(a), int(b)

    # ---- the fleet's history
    history: list[tuple[np.ndarray, np.ndarray]] = []

    def fleet_trip() -> None:
        """One trip of the fleet: a random shortest route on E_det, every segment read."""
        while True:
            s, g = od()
            if s != g:
                break
        path = router.route(base, s, g)
        y = truth[path] + noise * rng.standard_normal(path.size)
        model.update(path, y, temperature=temp)
        history.append((path, y))

    t0 = time.perf_counter()
    first_s = 0.0
    with tqdm(total=args.distinct, desc="fleet history (distinct segments)", leave=False,
              disable=not sys.stderr.isatty()) as bar:
        while (model.n_obs > 0).sum() < args.distinct:
            seen = int((model.n_obs > 0).sum())
            t1 = time.perf_counter()
            fleet_trip()
            if len(history) == 1:
                model.sample(rng)  # the first factorisation, once
                first_s = time.perf_counter() - t1
            bar.update(int((model.n_obs > 0).sum()) - seen)
    fleet_s = time.perf_counter() - t0
    n_history = len(history)  # (the fallback is fed this history: the steady trips come later)

    fits_before = len(fit_s)
    name = ("region1m" if args.segments >= 1_000_000 else
            "town100k" if args.segments >= 100_000 else f"town{args.segments // 1000}k")
    at = "" if temp is None else f" at {temp:g} °C"

    def peak_gb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6

    # printed as each phase ends (flushed): a region's run is long, and what it measured
    # stays on the screen if a later phase is stopped
    print(f"{name}: {n:,} segments, {n_history} fleet trips, "
          f"{int((model.n_obs > 0).sum()):,} distinct segments driven, J = "
          f"{model.landmarks.shape[1]} landmarks, factor {model.factor.nnz / n:.1f} entries/column",
          flush=True)
    print(f"one-off: prior build {build_s:.1f} s, first factorisation {first_s:.1f} s, "
          f"fleet history {fleet_s:.1f} s (peak memory so far {peak_gb():.2f} GB)", flush=True)
    # ---- timed Thompson-sampling trips
    phases: dict[str, list[float]] = {"sample": [], "route": [], "update": [], "trip": []}
    for _ in range(args.trips):
        s, g = od()
        t1 = time.perf_counter()
        f = model.sample(rng, temperature=temp)
        t2 = time.perf_counter()
        path = router.route(rectify(f, noise), s, g)
        t3 = time.perf_counter()
        model.update(path, truth[path] + noise * rng.standard_normal(path.size),
                     temperature=temp)
        t4 = time.perf_counter()
        for k, v in zip(phases, (t2 - t1, t3 - t2, t4 - t3, t4 - t1), strict=True):
            phases[k].append(v)
    for k, v in phases.items():
        print(f"  {k:7s} {_ms(v)}")
    print(f"{name} ts trip{at}: {1000 * statistics.median(phases['trip']):.0f} ms")
    print(f"peak memory so far: {peak_gb():.2f} GB", flush=True)
    # ---- Bayes-UCB trips: every segment's mean and variance (kept current), then the index
    t1 = time.perf_counter()
    model.posterior(temperature=temp)
    variances_s = time.perf_counter() - t1
    print(f"one-off: first variances of every segment (posterior()): {variances_s:.1f} s "
          f"(peak memory so far {peak_gb():.2f} GB)", flush=True)
    bucb = make_index("bucb")
    ucb_phases: dict[str, list[float]] = {"posterior": [], "route": [], "update": [], "trip": []}
    for t in range(args.trips):
        s, g = od()
        t1 = time.perf_counter()
        post = model.posterior(temperature=temp)
        t2 = time.perf_counter()
        path = router.route(rectified_weights(bucb, post, n_history + t + 1, rng), s, g)
        t3 = time.perf_counter()
        model.update(path, truth[path] + noise * rng.standard_normal(path.size),
                     temperature=temp)
        t4 = time.perf_counter()
        for k, v in zip(ucb_phases, (t2 - t1, t3 - t2, t4 - t3, t4 - t1), strict=True):
            ucb_phases[k].append(v)
    fits_in_window = len(fit_s) - fits_before
    # ---- a changed road: its readings forgotten, the learner refactorised at the next draw
    road = int(np.flatnonzero(model.n_obs)[0])
    t1 = time.perf_counter()
    model.reset_segments([road], [0], [0.0], [0.0])
    model.sample(rng, temperature=temp)
    reset_s = time.perf_counter() - t1
    print(f"peak memory before the fit: {peak_gb():.2f} GB", flush=True)
    refit_s = first_after_s = 0.0
    steady_s: list[float] = []
    steady_fits: list[dict] = []
    if not args.no_fits:  # one more fit, timed, and the draw after it
        t1 = time.perf_counter()
        model.refit()
        t2 = time.perf_counter()
        model.sample(rng, temperature=temp)
        refit_s, first_after_s = t2 - t1, time.perf_counter() - t2
        print(f"one fit after the timed trips: {refit_s:.1f} s, "
              f"{'accepted (prior rebuilt)' if model.fits[-1]['accepted'] else 'not accepted'}"
              f" (gain {model.fits[-1]['gain']:.1f} nats); the next draw then "
              f"{1000 * first_after_s:.0f} ms", flush=True)
        # ---- the steady state: fleet trips with the fits on their schedule
        n_fits, n_seen = len(fit_s), len(model.fits)
        for _ in tqdm(range(args.steady_trips), desc="steady-state fleet trips", leave=False,
                      disable=not sys.stderr.isatty()):
            fleet_trip()
        steady_s, steady_fits = fit_s[n_fits:], model.fits[n_seen:]
    peak = peak_gb()
    for k, v in ucb_phases.items():
        print(f"  {k:9s} {_ms(v)}")
    ts_ms = 1000 * statistics.median(phases["trip"])
    ucb_ms = 1000 * statistics.median(ucb_phases["trip"])
    print(f"{name} bucb trip{at}: {ucb_ms:.0f} ms ({ucb_ms / ts_ms:.1f}x the ts trip)")
    print(f"one changed road (reset_segments) and the next draw: {reset_s:.1f} s")
    gap = model.config.fit_max_gap
    if args.no_fits:
        print("hyperparameter fits in the timed window: 0 (--no-fits)")
    else:
        fits = model.fits
        took = [f["update"] for f in fits if f["accepted"]]
        print(f"hyperparameter fits: {len(fits)} in the run, {len(took)} accepted (at updates "
              f"{', '.join(map(str, took)) or 'none'}); {fits_in_window} in the timed window")
        gains = ", ".join(f"{f['gain']:.1f}" for f in fits)
        level = model.config.fit_test_level
        print(f"  each fit's gain [nats]: {gains} (at the steady state accepted above "
              f"{gain_threshold(level, 9, 600, 600):.2f} with 9 free against an earlier fit "
              f"of as many rows, {gain_threshold(level, 9):.2f} against fixed values)")
        if fit_s:
            print(f"  seconds per fit: median {statistics.median(fit_s):.1f}, "
                  f"accepted ones {_med([t for t, a in zip(fit_s, fit_taken, strict=True) if a])}, "
                  f"the others {_med([t for t, a in zip(fit_s, fit_taken, strict=True) if not a])}")
        amort = 1000 * sum(steady_s) / max(args.steady_trips, 1)
        print(f"steady state: {args.steady_trips} fleet trips, {len(steady_s)} fits on the "
              f"schedule (one per {gap} trips), {sum(f['accepted'] for f in steady_fits)} "
              f"accepted, {sum(steady_s):.1f} s in all: {amort:.0f} ms a trip")
        print(f"{name} ts trip, fits amortised: {ts_ms + amort:.0f} ms")
        print(f"{name} bucb trip, fits amortised: {ucb_ms + amort:.0f} ms "
              f"({(ucb_ms + amort) / (ts_ms + amort):.1f}x)")
    print(f"peak memory: {peak:.2f} GB")
    result = {
        "segments": n, "fleet_trips": n_history,
        "distinct": int((model.n_obs > 0).sum()), "landmarks": int(model.landmarks.shape[1]),
        "build_s": build_s, "first_factorisation_s": first_s, "first_variances_s": variances_s,
        "ts_ms": {k: [1000 * x for x in v] for k, v in phases.items()},
        "bucb_ms": {k: [1000 * x for x in v] for k, v in ucb_phases.items()},
        "peak_gb": peak, "fit_s": fit_s, "fits_in_window": fits_in_window,
        "refit_s": refit_s, "first_factorisation_after_fit_s": first_after_s,
        "steady_trips": args.steady_trips, "steady_fit_s": steady_s,
        "fits": [{k: f[k] for k in ("update", "gain", "accepted")} for f in model.fits],
        "temperature_c": temp, "reset_s": reset_s,
    }

    def _save() -> None:
        if args.json:
            from ev_nav.provenance import atomic_write_json, run_metadata

            atomic_write_json(args.json, {**result, "meta": run_metadata(
                {k: str(v) for k, v in vars(args).items()}, seeds=[0])})

    if args.no_fallback:
        _save()
        return 0

    # ---- the fallback on the same town and history
    from ev_nav.bandits.agent import Agent
    from ev_nav.gp.svgp import SVGPConfig, SVGPModel

    # the fallback as driver states build it (trips.session.build_model): the closed-form q(u)
    # on the whole history after every trip
    svgp = SVGPModel(net, config=SVGPConfig(exact_refresh=True), seed=0)
    for path, y in history[:n_history]:
        svgp.record(path, y)
    svgp.update(*history[n_history - 1])
    agent = Agent(net, svgp, "ts", seed=0)
    times = []
    for t in range(args.fallback_trips):
        s, g = od()
        t1 = time.perf_counter()
        svgp.posterior()
        path = agent.plan(s, g, n_history + t + 1)
        svgp.update(path, truth[path] + noise * rng.standard_normal(path.size))
        times.append(time.perf_counter() - t1)
    fb = statistics.median(times)
    print(f"fallback (SVGP, M = 1,000, exact refresh) trip: {1000 * fb:.0f} ms")
    print(f"{name} trip speed-up: {fb / statistics.median(phases['trip']):.1f}x")
    result["fallback_ms"] = [1000 * x for x in times]
    _save()
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
