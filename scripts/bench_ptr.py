"""Time one BPT-UCB and one BPT-TS iteration on the 50 × 50 grid with 100 observations,
against a straightforward reference in the same run.

An iteration = choose ``(x_t, w_t)`` from the current posterior (for TS: one exact joint
posterior sample on all 2500 grid points by Kronecker prior + Matheron update), observe, and
update the grid posterior. The reference does the same the direct way: condition the shared
exact GP on all observations afresh (:class:`ev_nav.gp.exact.ExactGP`), predict all 2500 grid
points, and for TS factorise the 2500 × 2500 posterior covariance. Printed: both times and the
ratio reference / ours. Targets (issue 7): BPT-UCB ≤ 50 ms, BPT-TS ≤ 200 ms; a whole BPT-UCB run
of T = 100 ≤ 15 s. Times are process CPU seconds with ``--threads 1`` (torch and BLAS on one
thread, so other jobs on a shared machine do not inflate them; on a quiet machine they equal
the wall time); with more threads they are wall times.

Usage: ``python scripts/bench_ptr.py [--repeats 30] [--threads 1] [--quick]``
"""

from __future__ import annotations

import argparse
import contextlib
import time

import numpy as np
import torch

from ev_nav.bo.core.maximize import blas_single_threaded
from ev_nav.bo.ptr.context import StepContext
from ev_nav.bo.ptr.grid import GridPosterior, ProductGrid
from ev_nav.bo.ptr.measure import argmax_random, ptr_of_values, ptr_posterior, select_w
from ev_nav.bo.ptr.problems import make_problem
from ev_nav.bo.ptr.registry import make_policy
from ev_nav.bo.ptr.runner import run_trial
from ev_nav.cli import count_arg
from ev_nav.gp.exact import ExactGP


def _context(n_obs: int, seed: int) -> StepContext:
    prob = make_problem("gp-test", seed=seed)
    grid = ProductGrid(prob.x_points, prob.w_points)
    gp = GridPosterior(grid, prob.kernel, prob.noise_std**2, capacity=n_obs + 1024)
    rng = np.random.default_rng(seed)
    ctx = StepContext(prob, gp, [], rng, torch.Generator().manual_seed(seed))
    for _ in range(n_obs):
        ix, iw = int(rng.integers(50)), int(rng.integers(50))
        gp.add(ix, iw, prob.observe_y(ix, iw, rng))
        ctx.queried_x.append(ix)
    return ctx


#: What the reference computes per iteration, by method.
REFERENCE = {
    "bpt-ucb": "fit + predict all 2500 points afresh",
    "bpt-ts": "fit + dense joint draw on all 2500 points afresh",
}
#: The timer: process CPU time when everything runs on one thread (see ``main``), else wall time.
_clock = time.perf_counter


def time_iteration(method: str, repeats: int, n_obs: int = 100) -> np.ndarray:
    """Per-iteration times [s] of ``method`` starting from ``n_obs`` observations."""
    policy = make_policy(method)
    times = []
    for r in range(repeats):
        ctx = _context(n_obs, seed=r)
        rng = np.random.default_rng(1000 + r)
        t0 = _clock()
        ix, iw = policy.select(ctx)
        ctx.gp.add(ix, iw, ctx.problem.observe_y(ix, iw, rng))
        ctx.queried_x.append(ix)
        policy.report(ctx)
        times.append(_clock() - t0)
    return np.asarray(times)


def time_reference(method: str, repeats: int, n_obs: int = 100) -> np.ndarray:
    """Per-iteration times [s] of the direct computation of the same step."""
    times = []
    for r in range(repeats):
        ctx = _context(n_obs, seed=r)
        prob, gp = ctx.problem, ctx.gp
        Z = gp.grid.Z[torch.as_tensor(gp.obs_index)]
        k = prob.kernel
        t0 = _clock()
        ref = ExactGP(k.kind, k.ls_tensor(Z.shape[1]), k.outputscale, prob.noise_std**2)
        ref.fit(Z, torch.as_tensor(gp.y, dtype=torch.float64))
        mu, var = ref.posterior(gp.grid.Z)
        mean, v = mu.numpy().reshape(50, 50), var.numpy().reshape(50, 50)
        if method == "bpt-ucb":
            post = ptr_posterior(mean, v, prob.p_w, prob.h)
            ix = argmax_random(post.mean + np.sqrt(2.0) * np.sqrt(post.gamma2), ctx.rng)
        else:  # one joint draw: the dense 2500 x 2500 posterior covariance, factorised
            f = ref.sample(gp.grid.Z, 1, ctx.torch_gen).numpy().reshape(50, 50)
            ix = argmax_random(ptr_of_values(f, prob.p_w, prob.h), ctx.rng)
        select_w(mean[ix], v[ix], prob.h, ctx.rng)
        times.append(_clock() - t0)
    return np.asarray(times)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--repeats", type=count_arg, help="timed iterations a median is of (default 30; quick 3)"
    )
    ap.add_argument("--threads", type=count_arg, default=1, help="torch threads (default 1)")
    ap.add_argument(
        "--quick", action="store_true", help="3 repeats (unless --repeats), reference once"
    )
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.quick else 30)
    torch.set_num_threads(args.threads)
    global _clock
    one_thread = args.threads == 1
    _clock = time.process_time if one_thread else time.perf_counter
    clock = "process CPU" if one_thread else "wall"
    print(f"torch threads: {torch.get_num_threads()}; grid 50x50; 100 observations; {clock} time")
    with blas_single_threaded() if one_thread else contextlib.nullcontext():
        _bench(args.quick, repeats)


def _bench(quick: bool, repeats: int) -> None:
    for method, target in (("bpt-ucb", 0.050), ("bpt-ts", 0.200)):
        time_iteration(method, 3)  # warm-up (imports, allocator)
        t = time_iteration(method, repeats)
        ref = time_reference(method, 1 if quick else max(3, repeats // 5))
        ok = "OK" if np.median(t) <= target else "MISSED"
        print(
            f"{method:8s} iteration: median {1e3 * np.median(t):6.1f} ms, "
            f"p90 {1e3 * np.quantile(t, 0.9):6.1f} ms (target <= {1e3 * target:.0f} ms) {ok}; "
            f"reference ({REFERENCE[method]}) {1e3 * np.median(ref):7.1f} ms, "
            f"ratio reference / ours {np.median(ref) / np.median(t):.0f}x"
        )
    prob = make_problem("gp-test", seed=0)
    t0 = _clock()
    run_trial(prob, "bpt-ucb", 100, seed=0)
    run_s = _clock() - t0
    ok = "OK" if run_s <= 15 else "MISSED"
    print(f"bpt-ucb run T=100 on 2500 points: {run_s:.2f} s (target <= 15 s) {ok}")


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
