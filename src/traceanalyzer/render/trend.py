"""Renderers of the nightly store's trends: a metric per run over time (``trend``) and the ranks
that keep being slow (``trend --by rank``), as terminal tables.

Formatting only: the frames come from :func:`traceanalyzer.api.trend` and
:func:`traceanalyzer.api.loop.rank_trend`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import polars as pl

if TYPE_CHECKING:
    from rich.console import Console


def metric_table(frame: pl.DataFrame, metric: str, unit: str) -> Callable[[Console], None]:
    """The table of a metric per run (date, job, run, value, change against the job's previous
    run), one row per row of ``frame``; what :func:`traceanalyzer.render.formats.write` prints."""
    from rich.table import Table

    table = Table(title=f"{metric} ({unit}) per run", title_justify="left")
    for col in ("date", "job", "run", f"{metric} {unit}", "vs previous"):
        table.add_column(col, justify="right" if col not in ("job", "run") else "left")
    for r in frame.iter_rows(named=True):  # one row per run
        v, c = r["value"], r["change"]
        table.add_row(str(r["date"]), r["job"], r["run_id"], "" if v is None else f"{v:.3f}", "" if c is None else f"{c:+.1%}")
    return lambda console: console.print(table)


def rank_table(frame: pl.DataFrame, last: int) -> Callable[[Console], None]:
    """The table of the ranks in each job's ``last`` runs that were the slowest or the late
    arriver, one row per rank."""
    from rich.table import Table

    table = Table(title=f"ranks in each job's last {last} runs: slowest (longest mean step) or late arriver "
                  "(least exposed communication: the others waited for it)", title_justify="left")
    for col in ("job", "rank", "host", "runs", "slowest", "late arriver", "either", "mean step ms"):
        table.add_column(col, justify="left" if col in ("job", "host") else "right")
    for r in frame.iter_rows(named=True):  # one row per rank
        table.add_row(r["job"], str(r["rank"]), r["host"] or "", f"{r['runs']}/{r['out_of']}", str(r["slowest"]),
                      str(r["late_arriver"]), str(r["either"]), f"{r['mean_step_time_ms']:.3f}")
    return lambda console: console.print(table)
