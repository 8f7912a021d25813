"""Terminal renderer: rich tables. Formatting only; every number comes from the Analysis."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from traceanalyzer.classify import BUCKETS, Analysis

LABELS = {
    "compute": "compute",
    "recompute": "recompute",
    "exposed_comm": "exposed comm",
    "other": "other",
    "idle": "idle",
}


def breakdown_table(analysis: Analysis) -> Table:
    meta = {r["rank"]: r for r in analysis.trace.meta.iter_rows(named=True)}
    devices = sorted({str(m.get("device_name")) for m in meta.values() if m.get("device_name")})
    table = Table(
        title="GPU time per rank, mean per step: ms and % of the step",
        caption=("device: " + ", ".join(devices)) if devices else None,
        title_justify="left",
        caption_justify="left",
    )
    table.add_column("rank", justify="right")
    table.add_column("steps", justify="right")
    table.add_column("step ms", justify="right")
    for b in BUCKETS:
        table.add_column(LABELS[b], justify="right")
    table.add_column("overlapped comm", justify="right")
    for row in analysis.totals().iter_rows(named=True):
        n = row["steps"]
        dur = row["duration_us"]
        cells = [
            str(row["rank"]),
            str(n),
            f"{dur / n / 1000:.3f}",
        ]
        for b in BUCKETS:
            v = row[f"{b}_us"]
            pct = 100 * v / dur if dur else 0.0
            cells.append(f"{v / n / 1000:.3f}\n{pct:.1f}%")
        ov = row["overlapped_comm_us"]
        cells.append(f"{ov / n / 1000:.3f}\n{100 * ov / dur if dur else 0.0:.1f}%")
        table.add_row(*cells)
    return table


def print_breakdown(analysis: Analysis, console: Console) -> None:
    console.print(breakdown_table(analysis))
