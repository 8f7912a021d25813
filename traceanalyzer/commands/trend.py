"""``traceanalyzer trend``: one metric of the stored runs over time, per job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from traceanalyzer.batch.store import Store
from traceanalyzer.batch.trend import METRICS, plot_trend, trend_frame
from traceanalyzer.commands.common import out_console, print_store_warnings
from traceanalyzer.errors import ConfigError
from traceanalyzer.outputs import Outputs


def trend(
    store: Annotated[Path, typer.Option("--store", help="Store written by `traceanalyzer batch`.", show_default=False)],
    metric: Annotated[str, typer.Option("--metric", help="One of: " + ", ".join(METRICS) + " (times: mean per step over ranks).")] = "step_time",
    since: Annotated[Optional[str], typer.Option("--since", help="Only runs on or after this date (YYYY-MM-DD).")] = None,
    job: Annotated[Optional[str], typer.Option("--job", help="Only this job.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write a PNG plot to this file.")] = None,
) -> None:
    """Show a metric over time per job (table; PNG plot with -o)."""
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}: one of {', '.join(METRICS)}")
    outputs = Outputs([store])  # -o inside the store must not replace a stored run
    if output is not None:
        outputs.check(output)
    st = Store(store)
    frame = trend_frame(st, metric, since, job)
    print_store_warnings(st)  # the damaged files skipped (an error above is one line on its own)
    unit = METRICS[metric][1]
    table = Table(title=f"{metric} ({unit}) per run", title_justify="left")
    for col in ("date", "job", "run", f"{metric} {unit}", "vs previous"):
        table.add_column(col, justify="right" if col not in ("job", "run") else "left")
    for r in frame.iter_rows(named=True):  # one row per run
        v, c = r["value"], r["change"]
        table.add_row(str(r["date"]), r["job"], r["run_id"], "" if v is None else f"{v:.3f}", "" if c is None else f"{c:+.1%}")
    out_console(width=160).print(table)
    if output is not None:
        with outputs.open(output, "wb") as fh:
            plot_trend(frame, metric, fh)


def register(app: typer.Typer) -> None:
    app.command()(trend)
