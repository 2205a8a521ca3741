#!/usr/bin/env python
"""Behavioural checks and paper figures of the cost-varying-subset BO (known and unknown costs).

Parts (run all by default, or choose with ``--part``):

* ``cvs``   — checks B1–B4 (+ B6, informational) of ``specs/bocvs.md`` §6 on Hartmann-3, var 0.04.
* ``b3``    — check B3's ETC-Ada criterion alone, on seeds 0-19 (also part of ``cvs``).
* ``ucvs``  — checks 6–10 of ``specs/bocvs-unknown-costs.md`` §6 on Hartmann-6 in 12-D.
* ``ucvs-perm`` — only check 10's permuted cost vectors (see :data:`PERMS_HARD`).
* ``ablation`` — the unknown-cost headline cell (check 6's) with every method in two arms, no
  hyperparameter fitting and one marginal-likelihood refit at 0.6 C; medians and quartiles over
  ``--seeds`` seeds (default 20) in ``OUT/ucvs_ablation_table.csv``.
* ``figs``  — the main figures (simple regret vs cost; evaluations vs cost) for Hartmann and plant,
  written to ``OUT/figures/cvs_*.png`` (``--figures DIR`` elsewhere), with the regret table printed.

``--quick`` uses the smallest settings that still assert the orderings (fewer seeds, fewer MC
samples). Every check prints PASS/FAIL with the numbers behind it; the exit code is the number of
failed hard checks. Tidy tables, metadata and figures are written under ``--out`` (default
``runs/bo/reproduce``; nothing is written into ``docs/`` unless ``--figures`` names it). Runs
are resumable: rerunning a command reuses the runs its folder already holds, so more seeds
(``--seeds``) or an interrupted run only compute what is missing; ``--workers N`` runs them
in parallel.
``--smoke`` runs every cell of the chosen parts at toy sizes (one seed, a tenth of the budget,
a few MC samples and warm-up points) through the same code, prints the checks as ``SMOKE``
without judging them and writes the figures under ``--out``: the test suite's form.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ev_nav.bo.core.plots import standard_error
from ev_nav.bo.core.runs import ExecutionConfig, read_results
from ev_nav.bo.cvs.figures import save_panel_figure
from ev_nav.bo.cvs.runner import (
    CVSRunConfig,
    lock_on_spend,
    regret_at,
    run_experiment,
    summarise,
)
from ev_nav.cli import count_arg

FAILS: list[str] = []
#: Set by ``--smoke``: checks are printed, not judged (toy sizes cannot meet them).
SMOKE = False


def check(name: str, ok: bool, detail: str, hard: bool = True) -> None:
    tag = "SMOKE" if SMOKE else "PASS" if ok else ("FAIL" if hard else "WARN")
    print(f"  [{tag}] {name}: {detail}", flush=True)
    if hard and not ok and not SMOKE:
        FAILS.append(name)


def smoke_sized(cfg: CVSRunConfig) -> CVSRunConfig:
    """The toy form of a cell: one seed, a tenth of the budget, tiny MC and maximiser."""
    return replace(
        cfg,
        seeds=cfg.seeds[:1],
        budget=cfg.budget / 10,
        n_mc=8,
        n_warmup=8,
        n_warmup_full=32,
        n_starts=1,
        maxiter=5,
    )


def run(cfg: CVSRunConfig, args: argparse.Namespace, label: str) -> pd.DataFrame:
    t0 = time.time()
    if SMOKE:
        cfg = smoke_sized(cfg)
    execution = ExecutionConfig(executor=args.executor, workers=args.workers)
    df = run_experiment(cfg, args.out / label, execution).table
    print(
        f"  ({label}: {len(cfg.seeds)} seeds x {len(cfg.methods)} methods, "
        f"{time.time() - t0:.0f} s)",
        flush=True,
    )
    return df


def final(df: pd.DataFrame, method: str, spend: float) -> np.ndarray:
    r = regret_at(df[df["method"] == method], spend)
    return r.sort_values("seed")["simple_regret"].to_numpy()


def fmt(a: np.ndarray) -> str:
    if len(a) == 0:
        return "none"
    se = float(standard_error(a))  # sample sd (ddof 1); unknown for one seed
    pm = f"±{se:.3f}" if np.isfinite(se) else "± n/a"
    return f"mean {a.mean():.3f} ({pm}), median {np.median(a):.3f}, n={len(a)}"


# ----------------------------------------------------------------------------- bocvs checks
def b_check_settings(args: argparse.Namespace) -> dict:
    """Settings shared by the B checks and the B3 diagnostic (Hartmann-3, var 0.04)."""
    return dict(
        setting="cvs",
        benchmark="hartmann3",
        variance=0.04,
        n_mc=64 if args.quick else 128,
        n_warmup=100,
        n_warmup_full=args.warmup_full,
        n_starts=2,
        maxiter=100,
    )


def part_cvs(args: argparse.Namespace) -> None:
    print("== bocvs.md §6 behavioural checks (Hartmann-3, var 0.04, beta 2, fixed SE GP) ==")
    n_seeds = 3 if args.quick else 5
    common = b_check_settings(args)
    seeds = tuple(range(n_seeds))

    # B1 moderate, C = 20
    df = run(
        CVSRunConfig(
            costs="moderate",
            budget=20.0,
            seeds=seeds,
            methods=("ucb-psq", "ts-psq", "etcada"),
            **common,
        ),
        args,
        "cvs_b1_moderate",
    )
    u, e, ts = final(df, "ucb-psq", 20), final(df, "etcada", 20), final(df, "ts-psq", 20)
    print(summarise(df, 20).to_string(index=False, float_format="%.3f"))
    check(
        "B1 ETC-Ada final < 0.5 x UCB-PSQ",
        e.mean() < 0.5 * u.mean(),
        f"ETC-Ada {fmt(e)}; UCB-PSQ {fmt(u)}",
    )
    e10, u10 = final(df, "etcada", 10), final(df, "ucb-psq", 10)
    check(
        "B1 ETC-Ada at C=10 < UCB-PSQ",
        e10.mean() < u10.mean(),
        f"{e10.mean():.3f} vs {u10.mean():.3f}",
    )
    g = df[df["method"] == "etcada"]
    dia = np.array([lock_on_spend(s, 7) for _, s in g.groupby("seed")])
    check(
        "B1 ETC-Ada diamond ~ 8",
        bool(np.all(np.abs(dia - 8.0) < 0.5)),
        f"lock-on spends {np.round(dia, 3).tolist()}",
    )
    check(
        "B6 TS-PSQ above ETC-Ada, same order as UCB-PSQ (informational)",
        ts.mean() > e.mean() and ts.mean() < 10 * u.mean() + 0.1,
        f"TS-PSQ {fmt(ts)}",
        hard=False,
    )
    b4 = df

    # B2 cheap, C = 10, ETC-Ada with scaled play count int(1/c)
    df = run(
        CVSRunConfig(
            costs="cheap",
            budget=10.0,
            seeds=seeds,
            ada_scale=1.0,
            methods=("ucb-psq", "etcada"),
            **common,
        ),
        args,
        "cvs_b2_cheap",
    )
    u, e = final(df, "ucb-psq", 10), final(df, "etcada", 10)
    print(summarise(df, 10).to_string(index=False, float_format="%.3f"))
    check(
        "B2 ETC-Ada(1/c) final < 0.3 x UCB-PSQ",
        e.mean() < 0.3 * u.mean(),
        f"ETC-Ada {fmt(e)}; UCB-PSQ {fmt(u)}",
    )
    check(
        "B2 medians ordered too",
        np.median(e) < 0.3 * np.median(u),
        f"{np.median(e):.3f} vs {np.median(u):.3f}",
        hard=False,
    )
    b4 = pd.concat([b4, df])

    # B3 expensive, C = 20
    df = run(
        CVSRunConfig(
            costs="expensive",
            budget=20.0,
            seeds=seeds,
            methods=("ucb-psq", "etc50", "etcada"),
            **common,
        ),
        args,
        "cvs_b3_expensive",
    )
    u, e, e50 = (final(df, m, 20) for m in ("ucb-psq", "etcada", "etc50"))
    print(summarise(df, 20).to_string(index=False, float_format="%.3f"))
    sets50 = set(df[df["method"] == "etc50"]["set"])
    check("B3 ETC-50 never plays set 7", 7 not in sets50, f"sets played {sorted(sets50)}")
    check("B3 ETC-50 final >= 1.0", e50.mean() >= 1.0, f"ETC-50 {fmt(e50)}")
    r20 = b3_twenty_seeds(args)
    check(
        "B3 ETC-Ada final < 0.3 (20 seeds, mean ± SE)",
        r20.mean() < 0.3,
        f"seeds 0-19 {fmt(r20)}; seeds 0-4 {fmt(r20[:5])} "
        f"(paper: Fig. 2, mean ± SE over 10 seeds, plotted only; spec calibration 0.054 ± 0.03)",
    )
    check(
        "B3 ETC-Ada < ETC-50 in every seed",
        bool(np.all(e < e50)),
        f"{np.round(e, 3).tolist()} vs {np.round(e50, 3).tolist()}",
    )
    check("B3 UCB-PSQ < ETC-50", u.mean() < e50.mean(), f"{u.mean():.3f} vs {e50.mean():.3f}")
    b4 = pd.concat([b4, df])

    # B4 invariants over every run above
    psq = b4[b4["method"].isin(["ucb-psq", "ts-psq"])]
    check(
        "B4 UCB-PSQ/TS-PSQ play only the full set",
        bool((psq["set"] == 7).all()),
        f"{len(psq)} plays, sets {sorted(set(psq['set']))}",
    )
    ok, detail = True, []
    for (costs, seed), g in b4[b4["method"] == "etcada"].groupby(["costs", "seed"]):
        n1, n2 = {"moderate": (40, 20), "cheap": (100, 10), "expensive": (6, 5)}[costs]
        s = g.sort_values("t")["set"].to_numpy()
        good = (
            np.isin(s[:n1], [1, 2, 3]).all()
            and np.isin(s[n1 : n1 + n2], [4, 5, 6]).all()
            and (s[n1 + n2 :] == 7).all()
        )
        ok &= bool(good)
        detail.append(f"{costs}/{seed}:{len(s)}")
    check("B4 ETC-Ada plays G1 for n1, G2 for n2, then set 7", ok, ", ".join(detail))
    over = b4.groupby(["costs", "method", "seed"])["spent"].max()
    budgets = {"moderate": 20.0, "cheap": 10.0, "expensive": 20.0}
    check(
        "B4 total spend <= C",
        all(v <= budgets[k[0]] + 1e-9 for k, v in over.items()),
        f"max spend per budget: {over.groupby(level=0).max().round(3).to_dict()}",
    )


#: B3 is judged on 20 seeds (issue 19): 3 of 20 runs settle on Hartmann-3's second mode
#: (f = 3.0898 at (0.109, 0.861, 0.564), simple regret >= 0.77), so five seeds swing the mean
#: from ~0.18 to ~0.37 depending on how many of them land there.
B3_SEEDS = tuple(range(20))


def b3_twenty_seeds(args: argparse.Namespace) -> np.ndarray:
    """ETC-Ada's final simple regret on seeds 0-19 (expensive costs, C = 20, B-check settings);
    prints every seed and how many runs end at the second mode."""
    cfg = CVSRunConfig(
        costs="expensive",
        budget=20.0,
        seeds=B3_SEEDS,
        methods=("etcada",),
        **b_check_settings(args),
    )
    df = run(cfg, args, "cvs_b3_etcada_20seeds")
    r = final(df, "etcada", 20)
    mode2 = r > 0.5
    print(f"  B3 ETC-Ada per seed: {np.round(r, 3).tolist()}")
    at_mode2 = np.flatnonzero(mode2).tolist()
    print(
        f"  at the second mode: {int(mode2.sum())}/{len(r)} (seeds {at_mode2}); "
        f"the others {fmt(r[~mode2])}"
    )
    return r


def part_b3(args: argparse.Namespace) -> None:
    """B3 alone: ETC-Ada on seeds 0-19 with the verdict (mean ± SE < 0.3)."""
    print("== B3: ETC-Ada, expensive, C = 20, seeds 0-19 ==")
    r = b3_twenty_seeds(args)
    check("B3 ETC-Ada final < 0.3 (20 seeds, mean ± SE)", r.mean() < 0.3, f"seeds 0-19 {fmt(r)}")


# ----------------------------------------------------------------------------- ucvs checks
def phase_stats(
    df: pd.DataFrame, costs: tuple[float, ...], label: str, C: float = 20.0, hard: bool = True
) -> str:
    g = df[df["method"] == "ucvs"]
    share4, share_full, creg, balanced = [], [], [], True
    for _, s in g.groupby("seed"):
        s = s.sort_values("t")
        ex = s[s["phase"] == "explore"]
        counts = np.bincount(ex["set"].to_numpy() - 1, minlength=7)
        balanced &= counts.max() - counts.min() <= 1
        exploit = s[s["phase"] == "exploit"]
        share4.append(float((exploit["set"] == 5).mean()) if len(exploit) else 0.0)
        share_full.append(float((exploit["set"] == 7).mean()) if len(exploit) else 1.0)
        tgt = costs[4]
        creg.append(
            float(np.mean([max(costs[i - 1] - tgt, 0) for i in exploit["set"]]))
            if len(exploit)
            else 1.0
        )
        # exploration ends once spend passes 0.6 C
        if len(exploit):
            first = exploit.iloc[0]
            balanced &= bool(first["spent"] - first["cost"] > 0.6 * C)
    check(
        f"{label}: exploration round-robin (counts differ <= 1) until 0.6 C",
        bool(balanced),
        "ok" if balanced else "unbalanced",
        hard,
    )
    check(
        f"{label}: exploitation >= 70% on idx4 (median)",
        np.median(share4) >= 0.7,
        f"idx4 shares {np.round(share4, 2).tolist()}",
        hard,
    )
    check(
        f"{label}: exploitation <= 15% on the full set",
        np.median(share_full) <= 0.15,
        f"full-set shares {np.round(share_full, 2).tolist()}",
        hard,
    )
    check(
        f"{label}: mean per-step cost regret in exploitation <= 0.2",
        float(np.mean(creg)) <= 0.2,
        f"{np.round(creg, 3).tolist()}",
        hard,
    )
    return ""


def ucvs_check_settings() -> dict:
    """Settings shared by checks 6-10 (Hartmann-6 in 12-D, var 0.02, C = 20, seeds 0-2)."""
    return dict(
        setting="ucvs",
        benchmark="hartmann6",
        variance=0.02,
        budget=20.0,
        seeds=(0, 1, 2),
        n_mc=128,
        n_warmup=256,
        n_warmup_full=1000,
        n_starts=2,
        maxiter=50,
        etc_quota=10,
    )


def part_ucvs(args: argparse.Namespace) -> None:
    print("== bocvs-unknown-costs.md §6 checks 6-10 (Hartmann-6 in 12-D, cheap, var 0.02, C=20) ==")
    common = ucvs_check_settings()
    C = 20.0

    # check 6 (+7, 8, 9 with the baselines in the same cell)
    cheap = (0.01, 0.01, 0.01, 0.1, 0.1, 0.1, 1.0)
    df = run(
        CVSRunConfig(
            costs="cheap",
            cost_noise_std=0.0,
            methods=("ucvs", "ucb-psq", "ts-psq", "etc50"),
            **common,
        ),
        args,
        "ucvs_cheap",
    )
    print(summarise(df, C).to_string(index=False, float_format="%.3f"))
    phase_stats(df, cheap, "6")
    psq = df[df["method"].isin(["ucb-psq", "ts-psq"])]
    check(
        "7 UCB-PSQ and TS-PSQ choose the full set at every step",
        bool((psq["set"] == 7).all()),
        f"{len(psq)} plays",
    )
    ok = True
    for _, s in df[df["method"] == "etc50"].groupby("seed"):
        s = s.sort_values("t")["set"].to_numpy()
        ok &= bool(
            np.isin(s[:10], [1, 2, 3, 4]).all()
            and np.isin(s[10:20], [5, 6]).all()
            and (s[20:] == 7).all()
        )
    check("7 ETC (quota 10) plays G1, then G2, then the full set", ok, "size groups")
    n_u = df[df["method"] == "ucvs"].groupby("seed")["t"].max().to_numpy()
    n_p = df[df["method"] == "ucb-psq"].groupby("seed")["t"].max().to_numpy()
    check(
        "8 evaluations at C=20: proposed >= 2x UCB-PSQ",
        n_u.mean() >= 2 * n_p.mean(),
        f"{n_u.tolist()} vs {n_p.tolist()}",
    )
    r_u, r_p = final(df, "ucvs", C), final(df, "ucb-psq", C)
    check(
        "9 median final regret proposed <= UCB-PSQ + 0.3 (soft)",
        np.median(r_u) <= np.median(r_p) + 0.3,
        f"proposed {fmt(r_u)}; UCB-PSQ {fmt(r_p)}",
        hard=False,
    )

    # check 10: cost noise, and a permuted cost vector keeping idx4 the cheapest optimal set
    df = run(
        CVSRunConfig(costs="cheap", cost_noise_std=0.02, methods=("ucvs",), **common),
        args,
        "ucvs_cheap_noisy",
    )
    phase_stats(df, cheap, "10 (cost noise 0.02)")
    part_ucvs_perm(args)

    # check 7 (airfoil): no full set, UCB-PSQ spreads over the pairs, mostly idx5 / idx6
    df = run(
        CVSRunConfig(
            setting="ucvs",
            benchmark="airfoil",
            variance=0.02,
            budget=3.0,
            costs="moderate",
            seeds=(0,),
            methods=("ucb-psq",),
            n_mc=128,
            n_warmup=128,
            n_starts=2,
            maxiter=50,
        ),
        args,
        "ucvs_airfoil",
    )
    counts = np.bincount(df["set"].to_numpy() - 1, minlength=7)
    check(
        "7 airfoil UCB-PSQ mostly idx5/idx6 (informational)",
        counts[5] + counts[6] >= counts.sum() / 2,
        f"plays per set {counts.tolist()}",
        hard=False,
    )


#: Check 10's permuted cost vectors (entries of the cheap vector, idx4 the cheapest optimal set).
#: The check reruns check 6 and keeps its bounds (>= 70 % idx4, <= 15 % full set), which were
#: set for a 0.9 cost gap between the two optimal sets (idx4 0.1, full set 1). The cost rule is
#: UCB1 (Alg. 1 lines 22-26): it separates two sets only after about 2 ln t / gap^2 plays of the
#: dearer one, so the bounds are attainable only if the permutation keeps a wide gap between
#: idx4 and the full set. Gated: P1 (same two optimal costs, the cheap costs moved to the
#: dummy-variable sets, the 3-variable Hartmann sets made dearer). P0 (the full set at 0.1,
#: gap 0.09: 2 ln 150 / 0.09^2 ~ 1200 plays) is run and reported, not gated. A permutation with
#: idx4 at 0.01 and the full set at 1 was tried and stopped: at 0.01 per play the 8 units of
#: exploitation become up to ~800 steps of 7 per-set optimisations (> 15 min per seed here).
PERMS_HARD = {
    "P1": (0.1, 0.1, 0.01, 0.01, 0.1, 0.01, 1.0),
}
PERM_P0 = (1.0, 0.1, 0.01, 0.1, 0.01, 0.01, 0.1)


def part_ucvs_perm(args: argparse.Namespace) -> None:
    """Check 10 with permuted costs: P1 gated, P0 (gap 0.09) clipped and unclipped reported."""
    print("== check 10, permuted cost vectors (cost noise std 0.02) ==")
    common = dict(ucvs_check_settings(), cost_noise_std=0.02, methods=("ucvs",))
    for name, perm in PERMS_HARD.items():
        df = run(CVSRunConfig(costs=perm, **common), args, f"ucvs_permuted_{name}")
        phase_stats(df, perm, f"10 ({name} {perm})")
    for clip in (True, False):
        tag = "clipped" if clip else "unclipped"
        cfg = CVSRunConfig(costs=PERM_P0, clip_cost_lcb=clip, **common)
        df = run(cfg, args, f"ucvs_permuted_P0_{tag}")
        phase_stats(df, PERM_P0, f"10 (P0 {PERM_P0}, {tag} cost LCB; gap 0.09)", hard=False)


# ----------------------------------------------------------------------------- ablation
ABLATION_METHODS = ("ucvs", "ucb-psq", "ts-psq", "etc50")


def ablation_configs(n_seeds: int) -> dict[str, CVSRunConfig]:
    """The unknown-cost headline cell (checks 6-9's settings) in two arms that treat every
    method alike: no hyperparameter fitting at all, and one marginal-likelihood (ARD) refit when
    the spend first exceeds 0.6 C, the moment the proposed method starts exploiting."""
    base = dict(
        ucvs_check_settings(),
        costs="cheap",
        cost_noise_std=0.0,
        methods=ABLATION_METHODS,
        seeds=tuple(range(n_seeds)),
        ucvs_refit=False,  # the loop's refit below is the proposed method's, for every method
    )
    return {
        "no refit": CVSRunConfig(**base),
        "refit at 0.6 C": CVSRunConfig(**base, refit_at_spend=0.6),
    }


def quartiles(a: np.ndarray) -> str:
    q1, med, q3 = np.quantile(a, [0.25, 0.5, 0.75])
    return f"{med:.3f} [{q1:.3f}, {q3:.3f}]"


def part_ablation(args: argparse.Namespace) -> None:
    """The unknown-cost headline with the same hyperparameter treatment for every method."""
    n = args.seeds or (3 if args.quick else 20)
    print(
        f"== unknown-cost headline, hyperparameter ablation (Hartmann-6 in 12-D, cheap, var 0.02, "
        f"C = 20, seeds 0-{n - 1}) =="
    )
    rows = []
    for arm, cfg in ablation_configs(n).items():
        label = "ucvs_ablation_" + ("refit" if cfg.refit_at_spend is not None else "norefit")
        df = run(cfg, args, label)
        for method in cfg.methods:
            r = final(df, method, cfg.budget)
            evals = df[df["method"] == method].groupby("seed")["t"].max().to_numpy()
            q1, med, q3 = np.quantile(r, [0.25, 0.5, 0.75])
            rows.append(
                {"method": method, "arm": arm, "seeds": len(r), "median": med, "q1": q1,
                 "q3": q3, "mean": r.mean(), "evals_median": float(np.median(evals))}
            )  # fmt: skip
            print(f"  {method:8s} {arm:15s} final regret median [Q1, Q3] {quartiles(r)}, "
                  f"evaluations (median) {np.median(evals):.0f}", flush=True)  # fmt: skip
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "ucvs_ablation_table.csv", index=False)
    print(f"  wrote {args.out / 'ucvs_ablation_table.csv'}")
    by = table.set_index(["method", "arm"])
    for arm in ("no refit", "refit at 0.6 C"):
        others = [by.loc[(m, arm), "median"] for m in ABLATION_METHODS if m != "ucvs"]
        check(
            f"9 ({arm}) proposed median <= best baseline median (informational)",
            by.loc[("ucvs", arm), "median"] <= min(others),
            f"proposed {by.loc[('ucvs', arm), 'median']:.3f} vs {min(others):.3f}",
            hard=False,
        )


# ----------------------------------------------------------------------------- figures
FIG_METHODS = ("ts-psq", "ucb-psq", "etc50", "etc100", "etcada")
FIG_BUDGET = {"hartmann3": 50.0, "plant": 50.0}


def fig_config(bench: str, costs: str, quick: bool) -> CVSRunConfig:
    """Reduced paper setting: 3 seeds, N_MC 64, 64 warm-up points + 2 L-BFGS-B starts; ETC-Ada
    with cheap costs uses 1/c plays (100/10) as in check B2; plant budget 50 instead of 200."""
    return CVSRunConfig(
        setting="cvs",
        benchmark=bench,
        costs=costs,
        variance=0.04,
        budget=FIG_BUDGET[bench],
        seeds=tuple(range(2 if quick else 3)),
        methods=FIG_METHODS,
        n_mc=64,
        n_warmup=64,
        n_warmup_full=2000,
        n_starts=2,
        maxiter=60,
        ada_scale=1.0 if costs == "cheap" else 4.0,
    )


def part_figs(args: argparse.Namespace) -> None:
    print("== paper figures: Hartmann-3 and plant, var 0.04 (reduced seeds / MC) ==")
    benches = args.bench or list(FIG_BUDGET)
    costs_list = args.costs or ["cheap", "moderate", "expensive"]
    for bench in benches:
        for costs in costs_list:
            cfg = fig_config(bench, costs, args.quick)
            label = f"fig_{bench}_{costs}"
            df = run(cfg, args, label)
            print(summarise(df, cfg.budget).to_string(index=False, float_format="%.3f"), flush=True)
    collect_figs(args)


def collect_figs(args: argparse.Namespace) -> None:
    """Panel figures and the regret table from whatever figure cells exist under ``--out``."""
    figdir = args.figures
    rows = []
    for bench in FIG_BUDGET:
        frames = {}
        for costs in ("cheap", "moderate", "expensive"):
            f = args.out / f"fig_{bench}_{costs}" / "results.csv"
            if f.is_file():
                frames[costs] = read_results(f)[0]
        if not frames:
            continue
        budget = FIG_BUDGET[bench]
        save_panel_figure(frames, budget, figdir / f"cvs_{bench}.png", bench)
        print(f"  wrote {figdir / f'cvs_{bench}.png'}")
        for costs, df in frames.items():
            s = summarise(df, budget)
            s.insert(0, "costs", costs)
            s.insert(0, "benchmark", bench)
            rows.append(s)
    # the unknown-cost paper's Figures 1-2 analogue: Hartmann-6 in 12-D, cheap costs, C = 20
    f = args.out / "ucvs_cheap" / "results.csv"
    if f.is_file():
        df = read_results(f)[0]
        path = figdir / "cvs_ucvs_hartmann6_cheap.png"
        save_panel_figure({"cheap (unknown)": df}, 20.0, path, "hartmann6-12D")
        print(f"  wrote {path}")
        s = summarise(df, 20.0)
        s.insert(0, "costs", "cheap/unknown")
        s.insert(0, "benchmark", "hartmann6-12D")
        rows.append(s)
    if rows:
        table = pd.concat(rows, ignore_index=True)
        table.to_csv(args.out / "figures_regret_table.csv", index=False)
        cols = [
            "benchmark",
            "costs",
            "method",
            "seeds",
            "regret@C/4",
            "regret@C/2",
            "regret@C",
            "se@C",
            "median@C",
            "evals",
            "lock_on_spend",
        ]
        cols = [c for c in cols if c in table.columns]
        print(table[cols].to_string(index=False, float_format="%.3f"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="smallest settings that still order")
    ap.add_argument(
        "--part",
        choices=["cvs", "b3", "ucvs", "ucvs-perm", "ablation", "figs", "collect", "all"],
        default="all",
    )
    ap.add_argument(
        "--warmup-full",
        type=int,
        default=10_000,
        help="warm-up points for the full set in the B checks (spec 2.1 and 5.9: 10 000; "
        "100 misses the full-set UCB maximum by up to 0.7)",
    )
    ap.add_argument("--bench", nargs="+", choices=sorted(FIG_BUDGET), help="figure benchmarks")
    ap.add_argument("--costs", nargs="+", choices=["cheap", "moderate", "expensive"])
    ap.add_argument(
        "--seeds", type=int, default=None, help="seeds of --part ablation (default 20; quick 3)"
    )
    ap.add_argument("--smoke", action="store_true", help="toy sizes, checks not judged (tests)")
    ap.add_argument("--out", type=Path, default=Path("runs/bo/reproduce"))
    ap.add_argument(
        "--figures",
        type=Path,
        default=None,
        help="figure folder (default OUT/figures; docs/figures/bo refreshes the committed ones)",
    )
    ap.add_argument("--executor", choices=["local", "dask", "inprocess"], default="local")
    ap.add_argument("--workers", type=count_arg, default=None, help="local pool size")
    args = ap.parse_args(argv)
    global SMOKE
    SMOKE = args.smoke
    if args.figures is None:
        args.figures = args.out / "figures"
    torch.set_num_threads(1)
    t0 = time.time()
    if args.part in ("cvs", "all"):
        part_cvs(args)
    if args.part in ("ucvs", "all"):
        part_ucvs(args)
    if args.part in ("figs", "all"):
        part_figs(args)
    if args.part == "ucvs-perm":
        part_ucvs_perm(args)
    if args.part in ("ablation", "all"):
        part_ablation(args)
    if args.part == "b3":
        part_b3(args)
    if args.part == "collect":
        collect_figs(args)
    print(f"== done in {time.time() - t0:.0f} s; failed hard checks: {FAILS or 'none'} ==")
    return len(FAILS)


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
