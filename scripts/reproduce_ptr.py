"""PTR acceptance checks (spec §6) and the 50-trial reproductions of the paper's experiments.

Usage
-----
``python scripts/reproduce_ptr.py --quick``
    Only the §6 checks (a few minutes on 2 cores); prints PASS/FAIL with the measured numbers
    and exits non-zero if any check fails.
``python scripts/reproduce_ptr.py [--trials 50] [--parts checks,gp-opt,...]``
    The checks plus the reproductions; results go to ``--out`` (default
    ``runs/ptr/reproduce``) as ``<part>/`` and figures to ``--figures`` (default ``OUT/figures``)
    as ``ptr_<part>.png``; nothing is written into ``docs/`` unless ``--figures docs/figures/bo``
    is given.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from scipy.stats import norm

from ev_nav.bo.core.runs import ExecutionConfig
from ev_nav.bo.ptr.grid import GridKernel, GridPosterior, ProductGrid
from ev_nav.bo.ptr.measure import credible_interval, ptr_of_values, ptr_posterior, select_w
from ev_nav.bo.ptr.problems import make_problem
from ev_nav.bo.ptr.registry import LSE_METHODS, OPT_METHODS
from ev_nav.bo.ptr.runner import (
    ExperimentResult,
    PTRRunConfig,
    load_results,
    plot_results,
    results_table,
    run_experiment,
    run_experiments,
    run_trial,
)
from ev_nav.cli import count_arg
from ev_nav.gp.exact import ExactGP

REPO = Path(__file__).resolve().parents[1]

_failures: list[str] = []


def check(name: str, ok: bool, detail: str) -> None:
    """Print one check result; remember failures for the exit code."""
    print(f"[{'PASS' if ok else 'FAIL'}] {name}: {detail}", flush=True)
    if not ok:
        _failures.append(name)


#: The §6 checks are tiny (milliseconds per trial): they run in this process.
IN_PROCESS = ExecutionConfig(executor="inprocess")


def _run(bench: str, methods: list[str], T: int, trials: int, seed: int = 0, **kw) -> dict:
    configs = [PTRRunConfig(bench, m, T, trials, seed, **kw) for m in methods]
    return dict(zip(methods, run_experiments(configs, execution=IN_PROCESS), strict=True))


def _curve(res: ExperimentResult) -> np.ndarray:
    return res.mean_se()[0]


# ------------------------------------------------------------------------------ §6.1–6.3
def check_moments() -> None:
    g = np.linspace(-1, 1, 10)
    grid = ProductGrid(g, g)
    gp = GridPosterior(grid, GridKernel("se", 0.5, 1.0), noise_var=0.01)
    rng = np.random.default_rng(3)
    truth = np.sin(3 * grid.Z[:, 0].numpy()) * np.cos(2 * grid.Z[:, 1].numpy())
    for j in rng.choice(100, 8, replace=False):
        gp.add(j // 10, j % 10, truth[j] + 0.1 * rng.standard_normal())
    p_w = norm.pdf(g) / norm.pdf(g).sum()
    ref = ExactGP("se", 0.5, 1.0, 0.01).fit(
        grid.Z[torch.as_tensor(gp.obs_index)], torch.tensor(gp.y)
    )
    f = ref.sample(grid.Z, 20_000, torch.Generator().manual_seed(0)).numpy().reshape(-1, 10, 10)
    p = ptr_of_values(f, p_w, 0.0)
    post = ptr_posterior(gp.mean, gp.var, p_w, 0.0)
    se = p.std(0, ddof=1) / np.sqrt(len(p))
    zmax = float(np.max(np.abs(p.mean(0) - post.mean) / np.maximum(se, 1e-12)))
    check("6.1 PTR mean vs MC", zmax <= 4, f"max |MC - mu_p| = {zmax:.2f} SE (<= 4)")
    excess = float(np.max(p.var(0) - post.gamma2))
    check("6.1 variance bound", excess <= 2e-3, f"max(MC var - gamma^2) = {excess:.2e}")
    lo, up = credible_interval(post, 4.0, 2)
    out = float(((p < lo) | (p > up)).mean())
    check("6.1 interval coverage (beta=4, m=2)", out <= 0.25, f"outside fraction {out:.4f}")


def check_limits() -> None:
    g = np.linspace(-1, 1, 8)
    grid = ProductGrid(g, g)
    p_w = np.full(8, 1 / 8)
    gp0 = GridPosterior(grid, GridKernel("se", 0.5, 4.0), 1e-4)
    m0 = ptr_posterior(gp0.mean, gp0.var, p_w, 0.7).mean
    err0 = float(np.max(np.abs(m0 - norm.cdf(-0.7 / 2.0))))
    check("6.2 no-data limit", err0 < 1e-12, f"max |mu_p - Phi(-h/sigma)| = {err0:.1e}")
    gp = GridPosterior(grid, GridKernel("se", 0.3, 1.0), 1e-10)
    f = np.cos(2 * grid.Z[:, 0].numpy()) + grid.Z[:, 1].numpy()
    for j in range(64):
        gp.add(j // 8, j % 8, f[j])
    post = ptr_posterior(gp.mean, gp.var, p_w, 0.3)
    err = float(np.max(np.abs(post.mean - ptr_of_values(f.reshape(8, 8), p_w, 0.3))))
    check(
        "6.2 full noise-free data",
        err < 1e-6 and post.gamma2.max() < 1e-6,
        f"max |mu_p - p_true| = {err:.1e}, max gamma = {np.sqrt(post.gamma2.max()):.1e}",
    )
    rng = np.random.default_rng(1)
    agree = 0
    for _ in range(1000):
        mean, var, h = rng.normal(size=30) * 3, rng.uniform(0.01, 4, 30), rng.normal()
        z = (mean - h) / np.sqrt(var)
        agree += select_w(mean, var, h, rng) == int(np.argmax(norm.cdf(z) * norm.cdf(-z)))
    check("6.2 argmax Phi(1-Phi) == argmin |z|", agree == 1000, f"{agree}/1000 random cases")


def check_landscapes() -> None:
    import warnings

    from ev_nav.bo.ptr.problems import DegenerateProblemWarning

    def land(name: str) -> tuple[float, int, int]:
        prob = make_problem(name)
        p = prob.p_true
        hs = int(prob.true_level_set().sum()) if prob.alpha else -1
        return round(float(p.max()), 3), int(np.argmax(p)), hs

    mc, hi, ro = land("mccormick"), land("himmelblau"), land("rosenbrock")
    check("6.3 McCormick", mc[:2] == (0.812, 22), f"max {mc[0]} at {mc[1]} (ref 0.812 @ 22)")
    check(
        "6.3 Himmelblau",
        hi == (0.980, 8, 23),
        f"max {hi[0]} at {hi[1]}, |H| = {hi[2]} (ref 0.980 @ 8, 23)",
    )
    check("6.3 Rosenbrock [-5,10]^2", ro[:2] == (0.611, 15), f"max {ro[0]} at {ro[1]}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gp_ = make_problem("goldstein-price")
    warned = any(issubclass(w.category, DegenerateProblemWarning) for w in caught)
    nh = int(gp_.true_level_set().sum())
    check("6.3 Goldstein-Price alpha=0.5", nh == 50 and warned, f"|H| = {nh}, warned={warned}")
    sir = make_problem("sir")
    check(
        "SIR reconstruction (A5)",
        round(float(sir.p_true.max()), 3) == 0.996 and int(sir.true_level_set().sum()) == 15,
        f"max {sir.p_true.max():.3f}, |H|(0.9) = {int(sir.true_level_set().sum())}",
    )


# ------------------------------------------------------------------------------ §6.4–6.10
def check_gp_opt() -> None:
    t0 = time.perf_counter()
    methods = ["bpt-ucb", "bpt-ts", "gp-ucb", "bqo-ucb", "rs", "pmax-gp-ucb"]
    res = _run("gp-test", methods, 60, 10)
    c = {m: _curve(r) for m, r in res.items()}
    at30 = {m: float(v[29]) for m, v in c.items()}
    print("    regret@30 " + ", ".join(f"{m} {v:.3f}" for m, v in at30.items()))
    rivals = ("gp-ucb", "bqo-ucb", "rs")
    for m in ("bpt-ucb", "bpt-ts"):
        check(
            f"6.4 GP test {m} regret@30",
            at30[m] <= 0.02 and all(at30[m] < at30[r] for r in rivals),
            f"{at30[m]:.3f} <= 0.02 and < GP-UCB/BQO-UCB/RS",
        )
    auc = {m: float(v.sum()) for m, v in c.items()}
    check(
        "6.4 AUC BPT-UCB < GP-UCB, BQO-UCB",
        auc["bpt-ucb"] < min(auc["gp-ucb"], auc["bqo-ucb"]),
        f"AUC {auc['bpt-ucb']:.2f} vs {auc['gp-ucb']:.2f}, {auc['bqo-ucb']:.2f}",
    )
    check(
        "6.4 Pmax-GP-UCB not better than BPT-UCB @60",
        c["pmax-gp-ucb"][-1] >= c["bpt-ucb"][-1],
        f"{c['pmax-gp-ucb'][-1]:.3f} vs {c['bpt-ucb'][-1]:.3f} ({time.perf_counter() - t0:.0f} s)",
    )


def check_mccormick() -> None:
    t0 = time.perf_counter()
    res = _run("mccormick", ["bpt-ucb", "bpt-ts", "gp-ucb", "bqo-ucb", "rs"], 60, 5)
    c = {m: _curve(r) for m, r in res.items()}
    print(
        "    regret t=10/30/60 "
        + "; ".join(f"{m} {v[9]:.3f}/{v[29]:.3f}/{v[59]:.3f}" for m, v in c.items())
    )
    check(
        "6.5 McCormick BPT-UCB@30",
        c["bpt-ucb"][29] <= 0.01 and c["bpt-ucb"][29] < min(c["gp-ucb"][29], c["bqo-ucb"][29]),
        f"{c['bpt-ucb'][29]:.3f} <= 0.01, < GP-UCB {c['gp-ucb'][29]:.3f}, "
        f"BQO-UCB {c['bqo-ucb'][29]:.3f}",
    )
    check(
        "6.5 plateaus near 0.067 / 0.032",
        abs(c["gp-ucb"][-1] - 0.067) < 0.02 and abs(c["bqo-ucb"][-1] - 0.032) < 0.01,
        f"GP-UCB {c['gp-ucb'][-1]:.3f}, BQO-UCB {c['bqo-ucb'][-1]:.3f}",
    )
    check(
        "6.5 BPT-UCB vs RS @10",
        c["bpt-ucb"][9] < c["rs"][9],
        f"{c['bpt-ucb'][9]:.3f} vs RS {c['rs'][9]:.3f} ({time.perf_counter() - t0:.0f} s)",
    )


def check_lse() -> None:
    t0 = time.perf_counter()
    res = _run("himmelblau", ["bpt-lse", "lse", "bqlse", "rs-lse"], 100, 5)
    res5 = run_experiment(
        PTRRunConfig("himmelblau", "bpt-lse", 100, 5, m=5.0), execution=IN_PROCESS
    )
    c = {m: _curve(r) for m, r in res.items()}
    print("    F1 t=50/100 " + "; ".join(f"{m} {v[49]:.3f}/{v[99]:.3f}" for m, v in c.items()))
    b = c["bpt-lse"]
    check("6.6 BPT-LSE F1", b[49] >= 0.95 and b[99] >= 0.98, f"{b[49]:.3f} @50, {b[99]:.3f} @100")
    check(
        "6.6 LSE, BQLSE plateau < 0.9",
        c["lse"][-1] < 0.9 and c["bqlse"][-1] < 0.9,
        f"LSE {c['lse'][-1]:.3f}, BQLSE {c['bqlse'][-1]:.3f}",
    )
    check("6.6 BPT-LSE > RS @50", b[49] > c["rs-lse"][49], f"{b[49]:.3f} vs {c['rs-lse'][49]:.3f}")
    m5 = _curve(res5)
    check(
        "6.7 m=5 below m=2 @50",
        m5[49] < b[49],
        f"m=5 {m5[49]:.3f} vs m=2 {b[49]:.3f} ({time.perf_counter() - t0:.0f} s)",
    )


def check_faithful_and_determinism() -> None:
    prob = make_problem("himmelblau")
    steps = []
    for seed in range(5):
        r = run_trial(prob, "bpt-lse-stop", 150, seed, alpha=0.8)
        steps.append((r.stopped_at, round(float(r.metric[-1]), 3)))
    check(
        "6.8 faithful BPT-LSE terminates",
        all(s is not None for s, _ in steps),
        "stop step, final F1 per trial: " + ", ".join(f"{s}/{f}" for s, f in steps),
    )
    same = True
    for m in ("bpt-ucb", "bpt-ts", "bpt-lse"):
        alpha = 0.8 if m == "bpt-lse" else None
        a = run_trial(prob, m, 30, 11, alpha=alpha).queries
        b = run_trial(prob, m, 30, 11, alpha=alpha).queries
        same &= bool(np.array_equal(a, b))
    check("6.9 determinism", same, "identical query sequences for BPT-UCB/TS/LSE, seed 11")
    t0 = time.perf_counter()
    run_trial(make_problem("gp-test", seed=0), "bpt-ucb", 100, 0)
    dt = time.perf_counter() - t0
    check("6.10 BPT-UCB T=100 on 2500 points", dt <= 15, f"{dt:.2f} s (<= 15 s)")


CHECKS: dict[str, Callable[[], None]] = {
    "moments": check_moments,
    "limits": check_limits,
    "landscapes": check_landscapes,
    "gp-opt": check_gp_opt,
    "mccormick": check_mccormick,
    "lse": check_lse,
    "faithful": check_faithful_and_determinism,
}


# ------------------------------------------------------------------------------ reproductions
OPT_ALL = list(OPT_METHODS)
LSE_ALL = [m for m in LSE_METHODS if m != "bpt-lse-stop"]
REPRODUCTIONS: dict[str, tuple[str, list[str], int]] = {
    "gp-opt": ("gp-test", OPT_ALL, 200),
    "mccormick-opt": ("mccormick", OPT_ALL, 200),
    "rosenbrock-opt": ("rosenbrock", OPT_ALL, 200),
    "sir-opt": ("sir", OPT_ALL, 200),
    "newsvendor-opt": (
        "newsvendor",
        ["bpt-ucb", "bpt-ts", "gp-ucb", "bqo-ucb", "bqo-ts", "rs"],
        60,
    ),
    "himmelblau-lse": ("himmelblau", LSE_ALL, 300),
    "gp-lse": ("gp-test", LSE_ALL, 300),
    "goldstein-price-a09-lse": ("goldstein-price-a09", LSE_ALL, 300),
    "sir-lse": ("sir", LSE_ALL, 300),
}


def reproduce(
    part: str,
    trials: int,
    out_root: Path,
    iterations: int | None,
    execution: ExecutionConfig,
    replot: bool = False,
    fig_dir: Path | None = None,
) -> None:
    fig_dir = fig_dir or out_root / "figures"
    bench, methods, T = REPRODUCTIONS[part]
    T = iterations or T
    t0 = time.perf_counter()
    if replot:  # figure and table from a previous run's results.csv + manifest.json
        results = load_results(out_root / part)
        T, trials = results[0].metric.shape[1], len(results[0].trials)
        meta = json.loads((out_root / part / "manifest.json").read_text())
        wall = float(meta.get("wall_seconds") or 0.0)
    else:
        configs = [PTRRunConfig(bench, m, T, trials, 0) for m in methods]
        results = run_experiments(configs, out_root / part, execution, progress=sys.stderr.isatty())
        wall = time.perf_counter() - t0
    fig_dir.mkdir(parents=True, exist_ok=True)
    fig = plot_results(
        results, fig_dir / f"ptr_{part}.png", title=f"{bench}: {trials} trials, mean ± 2 SE"
    )
    steps = (10, 30, 60, T) if results[0].task == "opt" else (25, 50, 100, T)
    print(f"\n### {part} ({bench}, {trials} trials, T={T}, wall {wall:.0f} s) -> {fig.name}")
    print(results_table(results, tuple(sorted(set(s for s in steps if s <= T)))))
    if results[0].task == "lse":
        fc = {
            r.config.method: [t.first_classified for t in r.trials if t.first_classified]
            for r in results
        }
        print(
            "first step with U empty (median over trials that reached it): "
            + ", ".join(
                f"{m} {int(np.median(v)) if v else '-'} ({len(v)}/{trials})" for m, v in fc.items()
            )
        )


SENSITIVITY: dict[str, tuple[str, str, list[tuple[float, float]], int]] = {
    # part: (benchmark, method, [(beta, m), ...], T)  -- spec §4.3 / paper Figs 9-12
    "sensitivity-lse": (
        "himmelblau",
        "bpt-lse",
        [(1.5, 2), (1.5, 3), (1.5, 5), (2.0, 2), (5.0, 2), (5.0, 5)],
        100,
    ),
    "sensitivity-ucb": (
        "mccormick",
        "bpt-ucb",
        [(2.0, 2), (2.0, 5), (1.0, 2), (5.0, 2), (5.0, 5)],
        100,
    ),
}


def sensitivity(
    part: str,
    trials: int,
    out_root: Path,
    execution: ExecutionConfig,
    fig_dir: Path | None = None,
) -> None:
    fig_dir = fig_dir or out_root / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    bench, method, grid, T = SENSITIVITY[part]
    t0 = time.perf_counter()
    configs = [PTRRunConfig(bench, method, T, trials, 0, beta=b, m=m) for b, m in grid]
    results = run_experiments(configs, out_root / part, execution)
    wall = time.perf_counter() - t0
    fig = plot_results(
        results, fig_dir / f"ptr_{part}.png", title=f"{bench} {method}: β and m ({trials} trials)"
    )
    print(f"\n### {part} ({bench}, {trials} trials, T={T}, wall {wall:.0f} s) -> {fig.name}")
    print(results_table(results, (10, 25, 50, T)))


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="only the §6 checks")
    ap.add_argument("--trials", type=int, default=50)
    ap.add_argument("--iterations", type=int, default=None, help="override T of reproductions")
    ap.add_argument(
        "--parts",
        default=None,
        help=f"comma list of checks/{'/'.join([*REPRODUCTIONS, *SENSITIVITY])}",
    )
    ap.add_argument("--out", default=str(REPO / "runs" / "ptr" / "reproduce"))
    ap.add_argument(
        "--figures", type=Path, default=None, help="folder of the figures (default OUT/figures)"
    )
    ap.add_argument("--replot", action="store_true", help="redraw figures from saved results")
    ap.add_argument("--executor", choices=["local", "dask", "inprocess"], default="local")
    ap.add_argument("--workers", type=count_arg, default=None, help="local pool size")
    args = ap.parse_args()
    parts = args.parts.split(",") if args.parts else ["checks", *REPRODUCTIONS, *SENSITIVITY]
    # checked before any work: a misspelt part used to be named only after the checks had run
    known = {"checks", *REPRODUCTIONS, *SENSITIVITY}
    unknown = [p for p in parts if p not in known]
    if unknown:
        ap.error(f"--parts: unknown part(s) {', '.join(map(repr, unknown))}")
    if args.quick and args.parts and parts != ["checks"]:
        ap.error("--quick runs only the checks; leave out --parts or --quick")
    if args.quick:
        parts = ["checks"]
    execution = ExecutionConfig(executor=args.executor, workers=args.workers)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if "checks" in parts:
        for fn in CHECKS.values():
            fn()
    for part in parts:
        if part in REPRODUCTIONS:
            reproduce(
                part,
                args.trials,
                Path(args.out),
                args.iterations,
                execution,
                args.replot,
                args.figures,
            )
        elif part in SENSITIVITY:
            sensitivity(part, args.trials, Path(args.out), execution, args.figures)
        elif part != "checks":
            print(f"unknown part {part!r}", file=sys.stderr)
            return 2
    print(f"\ntotal wall time {time.perf_counter() - t0:.0f} s; failures: {_failures or 'none'}")
    return 1 if _failures else 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
