"""``traceanalyzer trend``: one metric of the stored runs over time, per job."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from traceanalyzer.api.commandline import METRICS, plot_trend, read_store, trend_of
from traceanalyzer.commands.common import checked_outputs
from traceanalyzer.commands.common import (
    FrameFormat, JobOpt, StoreOpt, choices, format_opt, iso_date, output_opt, parsed_by, print_store_warnings,
)
from traceanalyzer.outputs import Outputs
from traceanalyzer.render.formats import write
from traceanalyzer.render.frames import frame_bytes

Metric = choices("Metric", METRICS)


class TrendBy(str, Enum):
    job = "job"
    rank = "rank"


TrendFormat = FrameFormat


def trend(
    store: StoreOpt,
    metric: Annotated[Metric, typer.Option("--metric", help="Metric per run (times: mean per step over ranks, ms; mfu: a fraction).")] = "step_time",  # type: ignore[valid-type]
    since: Annotated[Optional[str], typer.Option("--since", metavar="YYYY-MM-DD", callback=parsed_by(iso_date), help="Only runs on or after this date.")] = None,
    job: JobOpt = None,
    format: Annotated[TrendFormat, format_opt("table; json or csv: one row per run (date, job, run_id, value, change).")] = TrendFormat.table,
    output: Annotated[Optional[Path], output_opt("A .png name with the table format writes the plot, as --plot.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="FILE", help="Also write a PNG plot of the metric over time to this file.", show_default=False)] = None,
    by: Annotated[TrendBy, typer.Option("--by", help="job: the metric per run; rank: per rank and host, how often it was the slowest rank or the late arriver in the last --last runs.")] = TrendBy.job,
    last: Annotated[int, typer.Option("--last", metavar="COUNT", min=1, help="With --by rank: score each job's last COUNT runs (of two ranks or more).")] = 10,
) -> None:
    """Show a metric over time per job (table, JSON or CSV; a PNG plot with --plot); --by rank: which ranks keep being slow."""
    if by is TrendBy.rank:
        return _by_rank(store, job, last, format, output, plot)
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
        write(lambda console: console.print(table), output, outputs, width=160)
    else:
        write(frame_bytes(frame, format.value, schema="traceanalyzer.trend",
                          extra={"schema_version": 1, "metric": metric_name, "unit": unit, "since": since, "job": job}), output, outputs)
    if plot is not None:
        with outputs.open(plot, "wb") as fh:
            plot_trend(frame, metric_name, fh)


def register(app: typer.Typer) -> None:
    app.command()(trend)


def _by_rank(store: Path, job: str | None, last: int, format, output: Path | None, plot: Path | None) -> None:
    from traceanalyzer.api.loop import rank_trend

    if plot is not None:
        from traceanalyzer.errors import ConfigError

        raise ConfigError("--plot draws a metric over time: it does not go with --by rank")
    outputs = checked_outputs([store], output)
    frame = rank_trend(store, last=last, job=job)
    if format is TrendFormat.table:
        table = Table(title=f"ranks in each job's last {last} runs: slowest (longest mean step) or late arriver "
                      "(least exposed communication: the others waited for it)", title_justify="left")
        for col in ("job", "rank", "host", "runs", "slowest", "late arriver", "either", "mean step ms"):
            table.add_column(col, justify="left" if col in ("job", "host") else "right")
        for r in frame.iter_rows(named=True):  # one row per rank
            table.add_row(r["job"], str(r["rank"]), r["host"] or "", f"{r['runs']}/{r['out_of']}", str(r["slowest"]),
                          str(r["late_arriver"]), str(r["either"]), f"{r['mean_step_time_ms']:.3f}")
        write(lambda console: console.print(table), output, outputs, width=160)
    else:
        write(frame_bytes(frame, format.value, schema="traceanalyzer.rank_trend", extra={"schema_version": 1, "last": last, "job": job}),
              output, outputs)
