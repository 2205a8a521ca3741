"""Reports of fleet experiments: aggregated tables and regret figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ev_nav.provenance import atomic_write_text

#: Marks a negative cumulative regret in reports: the agent beat the reference route, so the
#: reference is not the optimum (e.g. the paper world's rectified optimum, which discards
#: regeneration). Such rows are never ranked best.
NOT_OPTIMAL = "⚠ negative: reference not optimal"


def frame_markdown(frame, digits: int = 1, index: bool = False) -> str:
    """Any table (a pandas DataFrame) as Markdown, numbers rounded to ``digits`` places."""
    table = frame.reset_index() if index else frame
    cols = [str(c) for c in table.columns]

    def cell(v: object) -> str:
        if isinstance(v, float):
            return "" if v != v else f"{v:,.{digits}f}"
        return str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def _pm(mean: float, se: float, digits: int) -> str:
    """``mean ± SE``, or ``mean ± n/a`` where the SE is undefined (a single run: NaN)."""
    spread = "n/a" if se != se else f"{se:,.{digits}f}"
    return f"{mean:,.{digits}f} ± {spread}"


def summary_markdown(summary) -> str:
    """Final cumulative regret per (network, route, agent) as a Markdown table (mean ± SE).

    Within each route, agents are ranked by regret; a negative mean is flagged
    (:data:`NOT_OPTIMAL`) and listed after the others instead of first, with a note under the
    table, because regret below zero means the reference route was beatable. A cell of one run
    shows ``± n/a`` (its SE is undefined; it showed ``± 0.0``).
    """
    if summary is None or len(summary) == 0:
        return ""
    lines = [
        "| network | route | agent | final cumulative regret [Wh] (mean ± SE) | runs |",
        "|---|---|---|---|---|",
    ]
    table = summary.assign(negative_regret=summary["final_cum_regret_mean"] < 0)
    order = ["network", "route", "negative_regret", "final_cum_regret_mean"]
    for row in table.sort_values(order).itertuples():
        flag = f" {NOT_OPTIMAL}" if row.negative_regret else ""
        lines.append(
            f"| {row.network} | {row.route} | {row.agent} | "
            f"{_pm(row.final_cum_regret_mean, row.se, 1)}{flag} | {row.runs} |"
        )
    if table["negative_regret"].any():
        lines += [
            "",
            "Negative cumulative regret means an agent drove routes cheaper than the reference "
            "optimum, so the reference is not optimal (the paper world's rectified optimum "
            "discards regeneration); those rows are not ranked. Use the physical world "
            "(`[truth] kind = \"physical\"`), whose exact optimum cannot be beaten.",
        ]
    return "\n".join(lines)


def per_seed_markdown(results) -> str:
    """Final cumulative regret [Wh] of every run: one row per (network, route, agent), one
    column per seed (the ``results`` table of :func:`ev_nav.sim.grid.aggregate`)."""
    if results is None or len(results) == 0:
        return ""
    # each run's final regret; runs that share a label and seed (a sweep's) are averaged, not
    # added up as they were
    per_run = results.groupby(["network", "route", "agent", "seed", "run_id"])["regret_wh"].sum()
    final = per_run.groupby(["network", "route", "agent", "seed"]).mean()
    wide = final.unstack("seed")
    seeds = list(wide.columns)
    lines = [
        "| network | route | agent | " + " | ".join(f"seed {s}" for s in seeds) + " |",
        "|---|---|---|" + "---|" * len(seeds),
    ]
    for (network, route, agent), row in wide.iterrows():
        cells = " | ".join("" if v != v else f"{v:,.0f}" for v in row.to_numpy())
        lines.append(f"| {network} | {route} | {agent} | {cells} |")
    return "\n".join(lines)


def model_comparison(summary, first: str = "GP", second: str = "BI") -> str:
    """For each route and index rule: does ``first`` end below ``second`` (mean final regret)?

    Also the Thompson-sampling ratio ``Σ_routes first-TS / Σ_routes second-TS`` (the Fig. 2
    acceptance of issue 15 asks for ≤ 0.5). ``summary``: the table of
    :func:`ev_nav.sim.grid.aggregate`.
    """
    if summary is None or len(summary) == 0:
        return ""
    mean = summary.set_index(["network", "route", "agent"])["final_cum_regret_mean"]
    se = summary.set_index(["network", "route", "agent"])["se"]
    lines = [
        f"| network | route | rule | {first} (mean ± SE) | {second} (mean ± SE) | "
        f"{first} < {second} |",
        "|---|---|---|---|---|---|",
    ]
    sums = {first: 0.0, second: 0.0}
    held = total = 0
    for network, route in sorted({(n, r) for n, r, _ in mean.index}):
        for rule in ("TS", "BUCB", "UCB"):
            a, b = (network, route, f"{first}-{rule}"), (network, route, f"{second}-{rule}")
            if a not in mean.index or b not in mean.index:
                continue
            ok = mean[a] < mean[b]
            held += ok
            total += 1
            if rule == "TS":
                sums[first] += mean[a]
                sums[second] += mean[b]
            lines.append(
                f"| {network} | {route} | {rule} | {_pm(mean[a], se[a], 0)} | "
                f"{_pm(mean[b], se[b], 0)} | {'yes' if ok else '**no**'} |"
            )
    lines.append("")
    lines.append(f"{first} below {second}: {held} of {total} (route, rule) pairs.")
    if sums[second]:
        lines.append(
            f"{first}-TS / {second}-TS, final regret summed over routes: "
            f"{sums[first]:,.0f} / {sums[second]:,.0f} = {sums[first] / sums[second]:.2f}"
        )
    return "\n".join(lines)


#: The files :func:`write_report` (re)writes in the experiment folder.
REPORT_FILES = ("results.csv", "summary.csv", "regret.png", "summary.md", "per_seed.md")


def write_report(
    out_dir: str | Path, run_ids: Sequence[str] | None = None, *, distinct: bool = False
) -> str:
    """(Re)aggregate an experiment folder: :data:`REPORT_FILES` (``results.csv`` and
    ``summary.csv`` by :func:`~ev_nav.sim.grid.aggregate`, ``regret.png``, ``summary.md``,
    ``per_seed.md``).

    ``run_ids`` limits the report to those runs (finished ones; default: every run folder).
    ``distinct``: refuse runs that share a network, route, agent and seed (see
    :func:`~ev_nav.sim.grid.aggregate`). Returns the Markdown summary table ("" when no run has
    finished).
    """
    from ev_nav.sim.grid import aggregate
    from ev_nav.viz.regret import cumulative_regret_figure

    out = Path(out_dir)
    results, summary = aggregate(out, run_ids, distinct=distinct)
    if len(results) == 0:
        return ""
    cumulative_regret_figure(results, out / "regret.png")
    table = summary_markdown(summary)
    atomic_write_text(out / "summary.md", table + "\n")
    atomic_write_text(out / "per_seed.md", per_seed_markdown(results) + "\n")
    return table
