"""``traceanalyzer trend``: one metric of the stored runs over time, per job."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from traceanalyzer.api.commandline import METRICS, plot_trend, read_store, trend_of
from traceanalyzer.commands.common import (
    JobOpt, StoreOpt, choices, format_opt, iso_date, out_console, output_opt, parsed_by, print_store_warnings,
)
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.frames import write_frame

Metric = choices("Metric", METRICS)


class TrendFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def trend(
    store: StoreOpt,
    metric: Annotated[Metric, typer.Option("--metric", help="Metric per run (times: mean per step over ranks, ms; mfu: a fraction).")] = "step_time",  # type: ignore[valid-type]
    since: Annotated[Optional[str], typer.Option("--since", metavar="YYYY-MM-DD", callback=parsed_by(iso_date), help="Only runs on or after this date.")] = None,
    job: JobOpt = None,
    format: Annotated[TrendFormat, format_opt("table; json or csv: one row per run (date, job, run_id, value, change).")] = TrendFormat.table,
    output: Annotated[Optional[Path], output_opt("A .png name with the table format writes the plot, as --plot.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help="Also write a PNG plot of the metric over time to this file.", show_default=False)] = None,
) -> None:
    """Show a metric over time per job (table, JSON or CSV; a PNG plot with --plot)."""
    metric_name = getattr(metric, "value", metric)
    if output is not None and plot is None and format is TrendFormat.table and output.suffix.lower() == ".png":
        plot, output = output, None  # `-o trend.png`: the plot, as before --plot existed
    outputs = Outputs([store])  # an output inside the store must not replace a stored run
    for o in (output, plot):
        if o is not None:
            outputs.check(o)
    st = read_store(store)
    frame = trend_of(st, metric_name, since, job)
    print_store_warnings(st)  # the damaged files skipped (an error above is one line on its own)
    unit = METRICS[metric_name][1]
    if format is TrendFormat.table:
        table = Table(title=f"{metric_name} ({unit}) per run", title_justify="left")
        for col in ("date", "job", "run", f"{metric_name} {unit}", "vs previous"):
            table.add_column(col, justify="right" if col not in ("job", "run") else "left")
        for r in frame.iter_rows(named=True):  # one row per run
            v, c = r["value"], r["change"]
            table.add_row(str(r["date"]), r["job"], r["run_id"], "" if v is None else f"{v:.3f}", "" if c is None else f"{c:+.1%}")
        with outputs.stream(output, "w") as fh:
            out_console(None if output is None else fh, 160).print(table)
    else:
        with outputs.stream(output) as fh:
            write_frame(frame, format.value, fh, schema="traceanalyzer.trend",
                        extra={"schema_version": 1, "metric": metric_name, "unit": unit, "since": since, "job": job})
    if plot is not None:
        with outputs.open(plot, "wb") as fh:
            plot_trend(frame, metric_name, fh)


def register(app: typer.Typer) -> None:
    app.command()(trend)
