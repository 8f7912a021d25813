"""One metric of the stored runs over time, per job (a table, and a PNG plot)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import polars as pl

from traceanalyzer.store.database import Store
from traceanalyzer.errors import ConfigError, InputNotFound

#: metric name -> (runs column, unit shown, scale from the column to that unit)
METRICS: dict[str, tuple[str, str, float]] = {
    "step_time": ("step_time_us", "ms", 1e-3),
    "compute": ("compute_us", "ms", 1e-3),
    "recompute": ("recompute_us", "ms", 1e-3),
    "exposed_comm": ("exposed_comm_us", "ms", 1e-3),
    "overlapped_comm": ("overlapped_comm_us", "ms", 1e-3),
    "other": ("other_us", "ms", 1e-3),
    "idle": ("idle_us", "ms", 1e-3),
    "mfu": ("mfu", "%", 100.0),
}


def trend_frame(store: str | os.PathLike[str] | Store, metric: str = "step_time", since: str | dt.date | None = None, job: str | None = None) -> pl.DataFrame:
    """``date, job, run_id, value, change`` per successful run: the metric in its unit, and its
    relative change from the job's previous run (null for the first).

    Damaged store files are skipped; pass a :class:`Store` to read which (``Store.warnings``).
    Exit 4 (:class:`~traceanalyzer.store.database.DamagedStoreFile`) only if no run can be read."""
    if metric not in METRICS:
        raise ConfigError(f"unknown metric {metric!r}: one of {', '.join(METRICS)}")
    column, _, scale = METRICS[metric]
    st = store if isinstance(store, Store) else Store(store)
    stored = st.require_runs()
    runs = stored.filter(pl.col("status") == "ok")
    if not runs.height:
        raise InputNotFound(f"the store holds no successful run ({stored.height} failed): nothing to show", st.root)
    if since is not None:
        try:
            day = since if isinstance(since, dt.date) else dt.date.fromisoformat(str(since))
        except ValueError as exc:
            raise ConfigError(f"`since` {since!r} is not a date (YYYY-MM-DD)") from exc
        runs = runs.filter(pl.col("date") >= day)
        if not runs.height:
            raise InputNotFound(f"no successful run on or after {day.isoformat()} in the store", st.root)
    if job is not None:
        if job not in runs.get_column("job").unique().to_list():
            raise InputNotFound(f"no successful run of job {job!r} in the store", st.root)
        runs = runs.filter(pl.col("job") == job)
    out = (
        runs.select("date", "job", "run_id", (pl.col(column) * scale).alias("value"))
        .sort("job", "date", "run_id")
        # relative to the job's previous run that has a value
        .with_columns((pl.col("value") / pl.col("value").shift(1).forward_fill().over("job") - 1).alias("change"))
    )
    if metric == "mfu" and out.get_column("value").null_count() == out.height and out.height:
        raise ConfigError("no MFU in the store: run `traceanalyzer batch` with --config run.toml (or a manifest config)")
    return out


def plot_trend(frame: pl.DataFrame, metric: str, path: str | Path) -> None:
    """Write a PNG: one line per job, the metric over date."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, unit, _ = METRICS[metric]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for (job,), part in frame.drop_nulls("value").partition_by("job", as_dict=True, maintain_order=True).items():
        ax.plot(part.get_column("date").to_list(), part.get_column("value").to_list(), marker="o", label=job)
    import matplotlib.dates as mdates

    title = {"step_time": "mean step time", "mfu": "MFU"}.get(metric, f"{metric.replace('_', ' ')} per step")
    ax.set_title(f"{title} per run, by job")
    days = frame.get_column("date").unique().sort().to_list()
    if 0 < len(days) <= 12:
        ax.set_xticks(days)
    else:
        ax.xaxis.set_major_locator(mdates.AutoDateLocator(minticks=3, maxticks=10))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%Y-%m-%d"))
    ax.set_xlabel("date")
    ax.set_ylabel(f"{metric} ({unit}{', mean over ranks and steps' if unit == 'ms' else ''})")
    ax.grid(True, alpha=0.3)
    if frame.height:
        ax.legend(title="job")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
