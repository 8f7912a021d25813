"""``traceanalyzer trend``: one metric of the stored runs over time, per job."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from traceanalyzer.api.commandline import plot_trend, trend_parts
from traceanalyzer.api.commandoptions import METRICS
from traceanalyzer.commands.common import (
    FrameFormat, JobOpt, StoreOpt, checked_outputs, choices, format_opt, iso_date, output_opt, parsed_by, print_warnings,
)
from traceanalyzer.render.formats import write
from traceanalyzer.render.frames import frame_bytes
from traceanalyzer.render import trend as render

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
        plot, output = output, None  # `-o trend.png` with the table format: the plot, as --plot
    outputs = checked_outputs([store], output)  # an output inside the store must not replace a stored run
    if plot is not None:
        outputs.check(plot)
    frame, warnings = trend_parts(store, metric_name, since, job)
    print_warnings(warnings)  # the damaged files skipped (an error above is one line on its own)
    unit = METRICS[metric_name][1]
    if format is TrendFormat.table:
        write(render.metric_table(frame, metric_name, unit), output, outputs, width=160)
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
        write(render.rank_table(frame, last), output, outputs, width=160)
    else:
        write(frame_bytes(frame, format.value, schema="traceanalyzer.rank_trend", extra={"schema_version": 1, "last": last, "job": job}),
              output, outputs)
