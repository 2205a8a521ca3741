"""Reports of fleet experiments: aggregated tables and regret figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ev_nav.provenance import atomic_write_text

#: Marks a negative cumulative regret in reports: the agent beat the reference route, so the
#: reference is not the optimum (e.g. the paper world's rectified optimum, which discards
#: regeneration). Such rows are never ranked best.
NOT_OPTIMAL = "⚠ negative: reference not optimal"


def summary_markdown(summary) -> str:
    """Final cumulative regret per (network, route, agent) as a Markdown table (mean ± SE).

    Within each route, agents are ranked by regret; a negative mean is flagged
    (:data:`NOT_OPTIMAL`) and listed after the others instead of first, with a note under the
    table, because regret below zero means the reference route was beatable.
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
            f"{row.final_cum_regret_mean:,.1f} ± {row.se:,.1f}{flag} | {row.runs} |"
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


def write_report(out_dir: str | Path, run_ids: Sequence[str] | None = None) -> str:
    """(Re)aggregate an experiment folder, write ``regret.png`` and ``summary.md``.

    ``run_ids`` limits the report to those runs (finished ones; default: every run folder).
    Returns the Markdown summary table ("" when no run has finished).
    """
    from ev_nav.sim.grid import aggregate
    from ev_nav.viz.regret import cumulative_regret_figure

    out = Path(out_dir)
    results, summary = aggregate(out, run_ids)
    if len(results) == 0:
        return ""
    cumulative_regret_figure(results, out / "regret.png")
    table = summary_markdown(summary)
    atomic_write_text(out / "summary.md", table + "\n")
    return table
