#!/usr/bin/env python
"""Reproduce the BOKE study: space-filling (check 2), regret sanity (check 4), 8-D / HPO smoke
(check 5 analogue) and the regret-vs-iteration / regret-vs-CPU figures.

The work is split into parts so that each invocation stays below ~15 minutes on 2 shared cores;
every part saves ``results.csv`` + ``manifest.json`` under ``--out`` (resumable: a part cut
short keeps its finished runs) and ``--part report`` reads whatever is there, prints the checks
and writes the figures::

    python scripts/reproduce_boke.py --part spacefill
    python scripts/reproduce_boke.py --part regret --benchmarks sphere6,rosenbrock4
    python scripts/reproduce_boke.py --part regret --benchmarks forrester,goldstein-price,...
    python scripts/reproduce_boke.py --part noisy --benchmarks sphere6
    python scripts/reproduce_boke.py --part smoke          # Hartmann-6-in-8-D and RF/diabetes HPO
    python scripts/reproduce_boke.py --part bandwidth --workers 16   # c_h sensitivity study
    python scripts/reproduce_boke.py --part report

``--quick`` shrinks seeds and budgets (minutes in total) but keeps every check. Results go to
``--out`` (default ``runs/boke``, not committed) and figures to ``--figures`` (default
``OUT/figures``); nothing is written into ``docs/`` unless ``--figures docs/figures/bo`` is given.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ev_nav.bo.boke.figures import plot_benchmarks, regret_on_cpu_grid
from ev_nav.bo.boke.methods import BOKEMaximizerConfig
from ev_nav.bo.boke.problems import SYNTHETIC
from ev_nav.bo.boke.runner import (
    BOKERunConfig,
    RunResult,
    format_table,
    load_results,
    reference_values,
    run_experiment,
    summarise,
)
from ev_nav.bo.boke.spacefill import spacefill_study
from ev_nav.bo.boke.surrogate import DEFAULT_C_H
from ev_nav.bo.core.runs import ExecutionConfig, read_results, write_results
from ev_nav.cli import count_arg

#: The bandwidth study (docs/bo-boke.md, "Bandwidth sensitivity"): BOKE on four benchmarks,
#: two of them in >= 6 dimensions with the optimum off the corners.
BANDWIDTH_BENCHMARKS = ("hartmann3", "rosenbrock4", "sphere6-shifted", "hartmann6-8d")
BANDWIDTH_GRID = (0.1, 0.15, 0.2, DEFAULT_C_H, 0.35, 0.45, 0.6)
REGRET_METHODS = ("boke", "boke+", "gp-ucb", "gp-ucb-wide", "kr-ucb", "random")
NOISY_METHODS = ("boke", "boke+", "gp-ucb", "gp-ucb-wide", "kr-ucb", "random")
SMOKE_METHODS = ("boke", "boke+", "gp-ucb", "kr-ucb", "random")


def _status(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ----------------------------------------------------------------------------------- parts
def part_spacefill(args: argparse.Namespace, out: Path) -> None:
    seeds = tuple(range(2 if args.quick else 5))
    ts = (20, 50, 100) if args.quick else (20, 50, 100, 200)
    rows = []
    for d in (2, 4):
        r = spacefill_study(d, ts=ts, seeds=seeds, log2_reference=13 if args.quick else 15)
        print(f"d={d}: mean fill distance over {len(seeds)} seeds at t={list(ts)}")
        for k, v in r.mean().items():
            print(f"  {k:6s} " + " ".join(f"{x:.3f}" for x in v))
        for k, fill in r.fill.items():
            for i, seed in enumerate(r.seeds):
                for j, t in enumerate(r.ts):
                    rows.append({"d": d, "design": k, "seed": seed, "t": t, "fill": fill[i, j]})
    write_results(out / "spacefill", pd.DataFrame(rows), {"ts": ts, "n_candidates": 4000}, seeds)


def _config(
    args: argparse.Namespace, benchmarks, methods, noisy: bool, n_seeds: int, budget: int | None
) -> BOKERunConfig:
    opt = BOKEMaximizerConfig(maxiter=args.maxiter)
    seeds = tuple(range(args.seed_offset, args.seed_offset + n_seeds))
    return BOKERunConfig(
        benchmarks=tuple(benchmarks),
        methods=tuple(methods),
        seeds=seeds,
        noisy=noisy,
        budget=budget,
        opt=opt,
        varsigma=args.varsigma,
    )


def part_runs(args: argparse.Namespace, out: Path, kind: str) -> None:
    if kind == "smoke":
        benches = ("hartmann6-8d", "rf-diabetes") if not args.benchmarks else args.benchmarks
        methods, noisy = SMOKE_METHODS, False
        n_seeds = 2 if args.quick else 5
    elif kind in ("extra", "sweep"):
        benches = args.benchmarks or ("sphere6-shifted",)
        methods = (
            ("boke", "boke+", "gp-ucb", "gp-ucb-wide", "random") if kind == "extra" else ("boke",)
        )
        noisy, n_seeds = False, (3 if args.quick else 10)
    else:
        benches = args.benchmarks or SYNTHETIC
        methods = REGRET_METHODS if kind == "regret" else NOISY_METHODS
        noisy = kind == "noisy"
        n_seeds = 3 if args.quick else 10
    if args.seeds:
        n_seeds = args.seeds
    if args.methods:
        methods = args.methods
    for b in benches:
        budget = None
        if args.quick:
            budget = 40 if b in ("forrester", "goldstein-price", "six-hump-camel") else 60
            if b == "rf-diabetes":
                budget = 20
        elif b == "rf-diabetes":
            budget = 40  # the RF objective costs ~0.4 s per evaluation
        cfg = _config(args, (b,), methods, noisy, n_seeds, budget)
        folder = out / kind / f"{b}-s{args.seed_offset}{'-' + args.tag if args.tag else ''}"
        if kind == "sweep":
            folder = out / kind / f"{b}-vs{args.varsigma:g}-s{args.seed_offset}"
        # every run is saved as it finishes: a part cut short resumes where it stopped
        execution = ExecutionConfig(executor=args.executor, workers=args.workers)
        res = run_experiment(cfg, folder, execution, progress=not args.quiet)
        print(format_table(summarise(res)))


def part_bandwidth(args: argparse.Namespace, out: Path) -> None:
    """BOKE at every ``c_h`` of the grid on every benchmark (one folder each, resumable)."""
    benches = args.benchmarks or BANDWIDTH_BENCHMARKS
    grid = args.c_h_grid or BANDWIDTH_GRID
    n_seeds = args.seeds or (3 if args.quick else 20)
    execution = ExecutionConfig(executor=args.executor, workers=args.workers)
    for b in benches:
        budget = 40 if args.quick else None
        for c in grid:
            cfg = replace(_config(args, (b,), ("boke",), False, n_seeds, budget), c_h=float(c))
            folder = out / "bandwidth" / f"{b}-ch{c:.4g}-s{args.seed_offset}"
            run_experiment(cfg, folder, execution, progress=not args.quiet)
    print(bandwidth_table(out, range(args.seed_offset, args.seed_offset + n_seeds)))


def _face_share(r: RunResult) -> float:
    """Share of the coordinates of the BO queries (design excluded) on a face of the cube."""
    X = np.asarray(r.X)[r.n_init :]
    return float(np.mean((X < 1e-3) | (X > 1 - 1e-3))) if X.size else float("nan")


def bandwidth_table(out: Path, seeds: Iterable[int] | None = None) -> str:
    """Markdown tables of the bandwidth study: final regret and the share of queries on a face.

    Cells are median [q25, q75] over the seeds of each (c_h, benchmark) folder (only ``seeds``
    when given).
    """
    keep = None if seeds is None else set(seeds)
    cells: dict[tuple[float, str], list[RunResult]] = {}
    for p in sorted((out / "bandwidth").glob("*/results.csv")):
        table, meta = read_results(p.parent)
        c = float(meta["config"]["c_h"])
        for r in load_results(p.parent):
            if keep is None or r.seed in keep:
                cells.setdefault((c, r.benchmark), []).append(r)
    if not cells:
        return "no bandwidth runs under " + str(out / "bandwidth")
    grid = sorted({c for c, _ in cells})
    benches = list(dict.fromkeys(b for _, b in cells))
    lines = ["| c_h | " + " | ".join(benches) + " |", "|---" * (len(benches) + 1) + "|"]
    faces = ["| c_h | " + " | ".join(benches) + " |", "|---" * (len(benches) + 1) + "|"]
    for c in grid:
        row, face = [], []
        for b in benches:
            rs = cells.get((c, b), [])
            if not rs:
                row.append("—")
                face.append("—")
                continue
            fin = np.array([r.simple_regret()[-1] for r in rs])
            q25, med, q75 = np.quantile(fin, [0.25, 0.5, 0.75])
            row.append(f"{med:.3g} [{q25:.3g}, {q75:.3g}] (n={len(rs)})")
            face.append(f"{np.median([_face_share(r) for r in rs]):.2f}")
        label = f"{c:.3g}" + (" (1/√12)" if abs(c - DEFAULT_C_H) < 1e-12 else "")
        lines.append(f"| {label} | " + " | ".join(row) + " |")
        faces.append(f"| {label} | " + " | ".join(face) + " |")
    return (
        "final simple regret of BOKE, median [q25, q75] over seeds\n"
        + "\n".join(lines)
        + "\n\nmedian share of BO-query coordinates on a face of the cube (|u| < 1e-3 or"
        " |1 - u| < 1e-3)\n" + "\n".join(faces)
    )


# ---------------------------------------------------------------------------------- report
def _load(out: Path, kind: str) -> list[RunResult]:
    """All runs of a part; seeds that lack a method (a part cut short) are dropped."""
    by_key: dict[tuple[str, str, int], RunResult] = {}
    for p in sorted((out / kind).glob("*/results.csv"), key=lambda q: q.stat().st_mtime):
        for r in load_results(p):  # a re-run of a seed (newer file) replaces the earlier one
            by_key[(r.benchmark, r.method, r.seed)] = r
    res = list(by_key.values())
    methods: dict[str, set[str]] = {}
    for r in res:
        methods.setdefault(r.benchmark, set()).add(r.method)
    have: dict[tuple[str, int], set[str]] = {}
    for r in res:
        have.setdefault((r.benchmark, r.seed), set()).add(r.method)
    return [r for r in res if have[(r.benchmark, r.seed)] == methods[r.benchmark]]


def _medians(results: list[RunResult]) -> dict[tuple[str, str], tuple[float, float]]:
    """(benchmark, method) -> (median regret at n0, median final regret)."""
    ref = reference_values(results)
    out: dict[tuple[str, str], tuple[float, float]] = {}
    groups: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        groups.setdefault((r.benchmark, r.method), []).append(r)
    for key, rs in groups.items():
        reg = np.array([r.simple_regret(ref[key[0]]) for r in rs])
        out[key] = (float(np.median(reg[:, rs[0].n_init - 1])), float(np.median(reg[:, -1])))
    return out


def _cpu_budget_comparison(results: list[RunResult], a: str, b: str) -> dict[str, str]:
    """Per benchmark: median regret of ``a`` and ``b`` at ``a``'s median total CPU time."""
    ref = reference_values(results)
    out = {}
    for bench in dict.fromkeys(r.benchmark for r in results):
        ra = [r for r in results if r.benchmark == bench and r.method == a]
        rb = [r for r in results if r.benchmark == bench and r.method == b]
        if not ra or not rb:
            continue
        budget = float(np.median([r.acq_cpu[-1] for r in ra]))
        grid = np.array([budget])
        ma = float(np.median(regret_on_cpu_grid(ra, ref[bench], grid)))
        mb = float(np.median(regret_on_cpu_grid(rb, ref[bench], grid)))
        verdict = f"{a} better" if ma < mb else (f"{b} better" if mb < ma else "tie")
        out[bench] = f"CPU budget {budget:.3g}s: {a} {ma:.3g} vs {b} {mb:.3g} -> {verdict}"
    return out


def _plot_spacefill(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(data), figsize=(4 * len(data), 3), squeeze=False)
    for ax, (d, r) in zip(axes[0], data.items(), strict=True):
        for k, style in (("de", "o-"), ("random", "s--"), ("lhs", "^:")):
            ax.plot(r["ts"], r["mean"][k], style, label=k.upper() if k != "random" else k)
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="t",
            ylabel="fill distance",
            title=f"d = {d} (mean of {len(r['seeds'])} seeds)",
        )
        ax.grid(alpha=0.3, which="both", lw=0.4)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=70)
    plt.close(fig)


def _spacefill_data(table: pd.DataFrame) -> dict:
    """Per dimension: the sizes, seeds and mean fill distance per design (the report's input)."""
    data = {}
    for d, g in table.groupby("d", sort=True):
        ts = sorted(int(t) for t in g["t"].unique())
        means = g.groupby(["design", "t"])["fill"].mean()
        data[str(d)] = {
            "ts": ts,
            "seeds": sorted(int(s) for s in g["seed"].unique()),
            "mean": {k: [float(means[(k, t)]) for t in ts] for k in ("de", "random", "lhs")},
        }
    return data


def part_report(args: argparse.Namespace, out: Path) -> int:
    failures = 0
    if (out / "spacefill" / "results.csv").exists():
        data = _spacefill_data(read_results(out / "spacefill")[0])
        print("== check 2: space filling (mean fill distance) ==")
        for d, r in data.items():
            de, rnd, lhs = (np.array(r["mean"][k]) for k in ("de", "random", "lhs"))
            ts = r["ts"]
            print(
                f"d={d} t={ts}\n  DE     {np.round(de, 3).tolist()}\n  random "
                f"{np.round(rnd, 3).tolist()}\n  LHS    {np.round(lhs, 3).tolist()}"
            )
            mono = bool(np.all(np.diff(de) < 0))
            if d == "4":
                ok = bool(np.all(de < rnd) and np.all(de < lhs))
                print(f"  {_status(ok)} d=4: DE below random and LHS at every t")
            else:
                small = [i for i, t in enumerate(ts) if t <= 100]
                ok = bool(np.all(de[small] < rnd[small]))
                claim = "DE below random for t<=100"
                if 200 in ts:
                    i = ts.index(200)
                    ok = ok and bool(de[i] <= 1.2 * rnd[i])
                    claim += ", within 1.2x at t=200"
                else:  # a --quick run stops at t=100: say so rather than pass what it never ran
                    claim += " (t=200 not run)"
                print(f"  {_status(ok)} d=2: {claim}")
            print(f"  {_status(mono)} DE fill distance decreases monotonically")
            slope = np.polyfit(np.log(ts), np.log(de), 1)[0]
            print(f"  DE log-log slope {slope:.3f} (uniform-design rate -1/d = {-1 / int(d):.3f})")
            failures += (not ok) + (not mono)
        _plot_spacefill(data, args.figures / "boke_spacefill.png")

    reg = _load(out, "regret")
    if reg:
        print("\n== check 4: regret sanity (noise-free) ==")
        print(format_table(summarise(reg)))
        med = _medians(reg)
        benches = list(dict.fromkeys(r.benchmark for r in reg))
        ok_a = True
        for b in benches:
            for m in ("boke", "boke+", "gp-ucb"):
                if (b, m) in med:
                    i0, fin = med[(b, m)]
                    if not fin < i0:
                        ok_a = False
                        print(f"  (a) {b} {m}: final {fin:.4g} not below n0 {i0:.4g}")
        print(f"  {_status(ok_a)} (a) BOKE, BOKE+, GP-UCB final median < median at n0 everywhere")
        wins = [
            b
            for b in benches
            if (b, "kr-ucb") in med and med[(b, "boke")][1] < med[(b, "kr-ucb")][1]
        ]
        ok_b = len(wins) >= min(4, len(benches))
        print(f"  {_status(ok_b)} (b) BOKE below KR-UCB on {len(wins)}/{len(benches)}: {wins}")
        rnd_wins = [
            b
            for b in ("six-hump-camel", "hartmann3", "goldstein-price")
            if (b, "random") in med and med[(b, "boke")][1] < med[(b, "random")][1]
        ]
        sph = ("sphere6", "boke") in med and med[("sphere6", "boke")][1] < med[
            ("sphere6", "random")
        ][1]
        ok_c = sph and len(rnd_wins) >= 2
        print(f"  {_status(ok_c)} (c) BOKE beats random on sphere6: {sph}; on {rnd_wins}")
        for b in benches:
            if (b, "gp-ucb") in med:
                print(
                    f"     {b}: BOKE {med[(b, 'boke')][1]:.4g}  BOKE+ "
                    f"{med[(b, 'boke+')][1]:.4g}  GP-UCB(0.2) {med[(b, 'gp-ucb')][1]:.4g}  "
                    f"GP-UCB(0.5) {med.get((b, 'gp-ucb-wide'), (0, float('nan')))[1]:.4g}  "
                    f"KR-UCB {med[(b, 'kr-ucb')][1]:.4g}  random {med[(b, 'random')][1]:.4g}"
                )
        failures += (not ok_a) + (not ok_b) + (not ok_c)
        ok_e = any(
            (b, "boke+") in med and med[(b, "boke+")][1] <= med[(b, "boke")][1]
            for b in ("rosenbrock4", "sphere6")
        )
        print(
            f"  {'PASS' if ok_e else 'MISS'} (e, non-blocking) BOKE+ <= BOKE on Rosenbrock4 "
            "or Sphere6"
        )
        for gp in ("gp-ucb", "gp-ucb-wide"):
            print(f"  fixed-CPU-budget comparison (BOKE vs {gp}):")
            for b, s in _cpu_budget_comparison(reg, "boke", gp).items():
                print(f"     {b}: {s}")
        plot_benchmarks(
            reg,
            args.figures / "boke_regret_noisefree.png",
            "Noise-free benchmarks: median and IQR of simple regret",
        )

    noisy = _load(out, "noisy")
    checks_d = []
    for kind, res in (("noise-free", reg), ("noisy", noisy)):
        med = _medians(res) if res else {}
        if ("sphere6", "boke") in med and ("sphere6", "gp-ucb") in med:
            bo = med[("sphere6", "boke")][1]
            g2 = med[("sphere6", "gp-ucb")][1]
            g5 = med.get(("sphere6", "gp-ucb-wide"), (0, float("nan")))[1]
            ok = bo <= 2 * g2 and bo <= g5
            checks_d.append(ok)
            print(
                f"  {_status(ok)} (d) sphere6 {kind}: BOKE {bo:.4g} <= 2 x GP-UCB(0.2) "
                f"{2 * g2:.4g} and <= GP-UCB(0.5) {g5:.4g}"
            )
    failures += sum(not c for c in checks_d)
    if noisy:
        print("\n== noisy benchmarks ==")
        print(format_table(summarise(noisy)))
        for b, s in _cpu_budget_comparison(noisy, "boke", "gp-ucb").items():
            print(f"     {b} (noisy): {s}")
        plot_benchmarks(
            noisy,
            args.figures / "boke_regret_noisy.png",
            "Noisy benchmarks: median and IQR of simple regret",
        )

    smoke = _load(out, "smoke")
    if smoke:
        print("\n== check 5 analogue: Hartmann-6-in-8-D and RF/diabetes HPO ==")
        print(format_table(summarise(smoke)))
        finite = all(np.all(np.isfinite(r.f_values)) for r in smoke)
        print(f"  {_status(finite)} all runs finite")
        failures += not finite
        med = _medians(smoke)
        ref = reference_values(smoke)
        for b in dict.fromkeys(r.benchmark for r in smoke):
            if (b, "boke") in med and (b, "random") in med:
                bo, rn = med[(b, "boke")][1], med[(b, "random")][1]
                best_bo, best_rn = ref[b] - bo, ref[b] - rn
                ok5 = best_bo >= 0.9 * best_rn
                print(
                    f"  {_status(ok5)} (non-blocking) {b}: BOKE median best {best_bo:.4g} "
                    f">= 0.9 x random's {best_rn:.4g} (median regret BOKE {bo:.4g}, "
                    f"random {rn:.4g})"
                )
        for b, s in _cpu_budget_comparison(smoke, "boke", "gp-ucb").items():
            print(f"     {b}: {s}")
        plot_benchmarks(
            smoke,
            args.figures / "boke_regret_8d_hpo.png",
            "8-D substitute and HPO (regret vs best value found for HPO)",
        )
    extra = _load(out, "extra")
    if extra:
        print("\n== extra: optimum moved off the corner ==")
        print(format_table(summarise(extra)))
        for gp in ("gp-ucb", "gp-ucb-wide"):
            for b, s in _cpu_budget_comparison(extra, "boke", gp).items():
                print(f"     {b}: {s}")
        plot_benchmarks(
            extra,
            args.figures / "boke_regret_extra.png",
            "Sphere-6 with the optimum at 0.37 (not a corner)",
        )
    sweep_dirs = sorted((out / "sweep").glob("*/results.csv"))
    if sweep_dirs:
        print("\n== varsigma sweep (BOKE only) ==")
        for p in sweep_dirs:
            rows = summarise(load_results(p))
            for r in rows:
                print(
                    f"  {p.parent.name}: median final regret {r.regret_final_median:.4g} "
                    f"[{r.regret_final_q25:.3g}, {r.regret_final_q75:.3g}] "
                    f"over {r.n_seeds} seeds"
                )
    print(f"\n{failures} blocking check(s) failed")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--part",
        required=True,
        choices=[
            "spacefill",
            "regret",
            "noisy",
            "smoke",
            "extra",
            "sweep",
            "bandwidth",
            "report",
        ],
    )
    p.add_argument(
        "--c-h-grid",
        default="",
        help="comma-separated bandwidth constants (part bandwidth; default "
        + ",".join(f"{c:.4g}" for c in BANDWIDTH_GRID)
        + ")",
    )
    p.add_argument(
        "--figures",
        type=Path,
        default=None,
        help="folder of the report's figures (default OUT/figures)",
    )
    p.add_argument("--varsigma", type=float, default=0.3, help="BOKE varsigma (part sweep)")
    p.add_argument(
        "--tag",
        default="",
        help="suffix of the results folder (a re-run replaces "
        "earlier runs of the same seeds in the report)",
    )
    p.add_argument(
        "--out", type=str, default="runs/boke", help="results folder (default runs/boke)"
    )
    p.add_argument("--benchmarks", default="", help="comma-separated subset")
    p.add_argument("--methods", default="", help="comma-separated subset of the part's methods")
    p.add_argument("--seeds", type=int, default=0, help="override the number of seeds")
    p.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="first seed (to split one part over several invocations)",
    )
    p.add_argument("--maxiter", type=int, default=50, help="L-BFGS-B iterations per start")
    p.add_argument("--quick", action="store_true", help="small seeds/budgets (CI-sized)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--executor", choices=["local", "dask", "inprocess"], default="local")
    p.add_argument("--workers", type=count_arg, default=None, help="local pool size")
    args = p.parse_args(argv)
    args.benchmarks = tuple(b for b in args.benchmarks.split(",") if b)
    args.methods = tuple(m for m in args.methods.split(",") if m)
    args.c_h_grid = tuple(float(c) for c in args.c_h_grid.split(",") if c)
    torch.set_num_threads(1)
    out = Path(args.out)
    if args.figures is None:
        args.figures = out / "figures"
    if args.part == "spacefill":
        part_spacefill(args, out)
    elif args.part in ("regret", "noisy", "smoke", "extra", "sweep"):
        part_runs(args, out, args.part)
    elif args.part == "bandwidth":
        part_bandwidth(args, out)
    else:
        return part_report(args, out)
    return 0


if __name__ == "__main__":
    from ev_nav.cli import run_script

    run_script(main)
