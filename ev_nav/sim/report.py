"""Reports of fleet experiments: aggregated tables and regret figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ev_nav.provenance import atomic_write_text


def summary_markdown(summary) -> str:
    """Final cumulative regret per (network, route, agent) as a Markdown table (mean ± SE)."""
    if summary is None or len(summary) == 0:
        return ""
    lines = [
        "| network | route | agent | final cumulative regret [Wh] (mean ± SE) | runs |",
        "|---|---|---|---|---|",
    ]
    for row in summary.sort_values(["network", "route", "final_cum_regret_mean"]).itertuples():
        lines.append(
            f"| {row.network} | {row.route} | {row.agent} | "
            f"{row.final_cum_regret_mean:,.1f} ± {row.se:,.1f} | {row.runs} |"
        )
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
