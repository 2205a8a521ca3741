#!/usr/bin/env python
"""Complexity scaling of BOKE vs GP-UCB on the shared GP core (spec §9 check 3).

1. **Per-batch timing**: one acquisition batch of ``m`` candidates (default 2000, d = 4) at
   ``t`` in {250, 500, 1000, 2000} observations, median of 5 repeats of the process CPU time
   (robust to other jobs on a shared machine; use ``--threads 1`` for a clean single-core figure).
   BOKE = log-domain NW mean + KDE + IKR-UCB; GP-UCB = ``ExactGP.fit`` (Cholesky) + posterior
   (triangular solve) + UCB. Also reported: GP posterior only (Cholesky cached, as with
   ``ExactGP.update``). Fitted log–log slopes and the GP/BOKE ratio at the largest ``t``.
2. **Incremental updates**: cost of folding one observation into the BOKE candidate cache
   (``CandidateCache.add``, ``O(m)``) vs re-evaluating the surrogate from scratch (``O(m t)``) and
   vs the GP's block-Cholesky ``ExactGP.update`` (``O(t^2)``).
3. **End to end**: Rosenbrock-4, acquisition maximised over a fresh batch of 2000 random
   candidates only (no L-BFGS-B), up to ``T`` = 1000; cumulative acquisition CPU at
   T = 250, 500, 1000.

Prints a report and writes it as JSON (``--out``). ``--quick`` uses smaller sizes.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ev_nav.bo.boke.methods import BOKEMaximizerConfig
from ev_nav.bo.boke.problems import get_benchmark
from ev_nav.bo.boke.runner import BOKERunConfig, run_single
from ev_nav.bo.boke.surrogate import CandidateCache, kr_posterior, log_ikr_ucb, scott_bandwidth
from ev_nav.cli import count_arg
from ev_nav.gp.exact import ExactGP
from ev_nav.provenance import atomic_write_json, run_metadata


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up (allocator, first-call overheads)
    times = []
    for _ in range(repeats):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def per_batch(ts: list[int], m: int, d: int, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(0)
    Xc = torch.rand(m, d, generator=gen, dtype=torch.float64)
    rows = []
    for t in ts:
        X = torch.rand(t, d, generator=gen, dtype=torch.float64)
        y = torch.randn(t, generator=gen, dtype=torch.float64)
        h = scott_bandwidth(t, d)

        def boke(X=X, y=y, h=h):
            post = kr_posterior(Xc, X, y, h)
            return log_ikr_ucb(post, 1.0, float(y.min()))[0]

        def boke_torch(X=X, y=y, h=h):  # same maths, torch.exp (the GP core's exp) instead
            post = kr_posterior(Xc, X, y, h, numpy_exp=False)
            return log_ikr_ucb(post, 1.0, float(y.min()))[0]

        def gp_full(X=X, y=y):
            gp = ExactGP("se", lengthscale=0.2, outputscale=1.0, noise_var=1e-6).fit(X, y)
            mu, var = gp.posterior(Xc)
            return mu + 2.0 * var.sqrt()

        gp_fitted = ExactGP("se", lengthscale=0.2, outputscale=1.0, noise_var=1e-6).fit(X, y)

        def gp_post(gp=gp_fitted):
            mu, var = gp.posterior(Xc)
            return mu + 2.0 * var.sqrt()

        row = {"t": t, "boke_s": _median_time(boke, repeats),
               "boke_torch_exp_s": _median_time(boke_torch, repeats),
               "gp_full_s": _median_time(gp_full, repeats),
               "gp_posterior_only_s": _median_time(gp_post, repeats)}
        rows.append(row)
        print(f"  t={t:5d}  BOKE {1e3 * row['boke_s']:8.2f} ms   (torch exp "
              f"{1e3 * row['boke_torch_exp_s']:8.2f} ms)   GP-UCB (Cholesky+solve) "
              f"{1e3 * row['gp_full_s']:8.2f} ms   GP posterior only "
              f"{1e3 * row['gp_posterior_only_s']:8.2f} ms", flush=True)
    lt = np.log([r["t"] for r in rows])
    slopes = {k: float(np.polyfit(lt, np.log([r[k] for r in rows]), 1)[0])
              for k in ("boke_s", "boke_torch_exp_s", "gp_full_s", "gp_posterior_only_s")}
    ratio = rows[-1]["gp_full_s"] / rows[-1]["boke_s"]
    ratio_torch = rows[-1]["gp_full_s"] / rows[-1]["boke_torch_exp_s"]
    return {"m": m, "d": d, "repeats": repeats, "rows": rows, "slopes": slopes,
            "ratio_at_max_t": ratio, "ratio_torch_exp_at_max_t": ratio_torch}


def incremental(ts: list[int], m: int, d: int, repeats: int) -> dict:
    gen = torch.Generator().manual_seed(1)
    Xc = torch.rand(m, d, generator=gen, dtype=torch.float64)
    rows = []
    for t in ts:
        X = torch.rand(t + 1, d, generator=gen, dtype=torch.float64)
        y = torch.randn(t + 1, generator=gen, dtype=torch.float64)
        h = 0.1
        cache = CandidateCache(Xc, h)
        for i in range(t):
            cache.add(X[i], float(y[i]))
        state = (cache.log_density.clone(), cache.mean.clone(), cache.n_obs)

        def add_one(cache=cache, x=X[t], yv=float(y[t]), state=state):
            cache.log_density, cache.mean, cache.n_obs = (state[0].clone(), state[1].clone(),
                                                          state[2])
            cache.add(x, yv)

        def refit(X=X, y=y, h=h):
            return kr_posterior(Xc, X, y, h)

        gp = ExactGP("se", lengthscale=0.2, outputscale=1.0, noise_var=1e-6).fit(X[:t], y[:t])
        L0, X0, y0 = gp._L, gp.X_train, gp.y_train

        def gp_update(gp=gp, x=X[t:], yv=y[t:], L0=L0, X0=X0, y0=y0):
            gp._L, gp.X_train, gp.y_train = L0, X0, y0
            gp.update(x, yv)

        row = {"t": t, "cache_add_s": _median_time(add_one, repeats),
               "boke_recompute_s": _median_time(refit, repeats),
               "gp_block_update_s": _median_time(gp_update, repeats)}
        rows.append(row)
        print(f"  t={t:5d}  cache.add {1e3 * row['cache_add_s']:7.3f} ms   recompute "
              f"{1e3 * row['boke_recompute_s']:8.2f} ms   ExactGP.update "
              f"{1e3 * row['gp_block_update_s']:8.2f} ms", flush=True)
    lt = np.log([r["t"] for r in rows])
    slopes = {k: float(np.polyfit(lt, np.log([r[k] for r in rows]), 1)[0])
              for k in ("cache_add_s", "boke_recompute_s", "gp_block_update_s")}
    return {"m": m, "d": d, "rows": rows, "slopes": slopes}


def end_to_end(T: int, checkpoints: list[int], m: int) -> dict:
    bench = get_benchmark("rosenbrock4")
    opt = BOKEMaximizerConfig(n_per_dim=m // 4, max_candidates=m, n_best=0, maxiter=0)
    cfg = BOKERunConfig(benchmarks=("rosenbrock4",), methods=("boke", "gp-ucb"), seeds=(0,),
                           budget=T, opt=opt)
    out = {}
    for meth in ("boke", "gp-ucb"):
        t0 = time.perf_counter()
        r = run_single(bench, meth, 0, cfg)
        wall = time.perf_counter() - t0
        out[meth] = {f"T={c}": r.acq_cpu[c - 1] for c in checkpoints}
        out[meth]["wall_s"] = wall
        out[meth]["final_regret"] = float(r.simple_regret()[-1])
        print(f"  {meth:7s} cumulative acquisition CPU: "
              + "  ".join(f"T={c}: {r.acq_cpu[c - 1]:.2f}s" for c in checkpoints)
              + f"   final regret {out[meth]['final_regret']:.3g}", flush=True)
    out["ratio_gp_over_boke"] = {
        f"T={c}": out["gp-ucb"][f"T={c}"] / out["boke"][f"T={c}"] for c in checkpoints
    }
    print("  GP/BOKE ratio: " + "  ".join(f"{k}: {v:.2f}x"
                                         for k, v in out["ratio_gp_over_boke"].items()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", type=count_arg, default=1, help="torch/BLAS threads")
    p.add_argument("--quick", action="store_true", help="smaller t and T")
    p.add_argument("--skip-e2e", action="store_true", help="skip the end-to-end run")
    p.add_argument("--out", type=Path, default=Path("runs/boke/bench.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    ts = [125, 250, 500] if args.quick else [250, 500, 1000, 2000]
    m, d, reps = 2000, 4, 5
    print(f"== per-batch acquisition cost (m={m} candidates, d={d}, median of {reps}, "
          f"{args.threads} thread(s)) ==")
    pb = per_batch(ts, m, d, reps)
    s = pb["slopes"]
    gap = s["gp_full_s"] - s["boke_s"]
    print(f"  log-log slopes: BOKE {s['boke_s']:.2f}  BOKE(torch exp) {s['boke_torch_exp_s']:.2f}  "
          f"GP-UCB {s['gp_full_s']:.2f}  GP posterior only {s['gp_posterior_only_s']:.2f}   "
          f"gap {gap:.2f}")
    print(f"  GP/BOKE time ratio at t={ts[-1]}: {pb['ratio_at_max_t']:.2f}x "
          f"(BOKE with torch exp: {pb['ratio_torch_exp_at_max_t']:.2f}x)")
    ok = s["boke_s"] <= 1.3 and gap >= 0.4 and pb["ratio_at_max_t"] >= 2.0
    print(f"  {'PASS' if ok else 'FAIL'} BOKE slope <= 1.3, slope gap >= 0.4, ratio >= 2")
    print("== incremental update of the candidate cache vs recomputation ==")
    inc = incremental(ts, m, d, reps)
    print("  log-log slopes: " + "  ".join(f"{k} {v:.2f}" for k, v in inc["slopes"].items()))
    report = {"per_batch": pb, "incremental": inc, "pass": ok}
    if not args.skip_e2e:
        T = 500 if args.quick else 1000
        cps = [125, 250, 500] if args.quick else [250, 500, 1000]
        print(f"== end to end: Rosenbrock-4, fresh {m} candidates per step, no L-BFGS-B ==")
        report["end_to_end"] = end_to_end(T, cps, m)
    atomic_write_json(args.out, {**report, "metadata": run_metadata(
        {"threads": args.threads, "quick": args.quick, "ts": ts, "m": m, "d": d})})
    print(f"report written to {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
