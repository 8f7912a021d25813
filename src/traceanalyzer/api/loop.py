"""The API of the training loop: one rank's trace into the store as it is written, and per-rank
scores across the stored runs. ``traceanalyzer.integrations`` (the profiler handler and the
trainer callbacks) call these; they are public for loops of one's own."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any, Callable

import polars as pl

from traceanalyzer.classify.steps import DEFAULT_STEP

PathLike = Any

#: the per-step numbers :func:`store_trace` returns (and the MLflow logger logs), in ms
STEP_METRICS = ("duration", "compute", "recompute", "exposed_comm", "overlapped_comm", "other", "idle")
TOP_LOSSES = 3


def store_trace(
    trace: PathLike,
    store: PathLike,
    *,
    run_id: str,
    job: str,
    rank: int = 0,
    world_size: int | None = None,
    host: str | None = None,
    profiler_step: int | None = None,
    date: str | dt.date | None = None,
    config: PathLike | None = None,
    step_range: str = DEFAULT_STEP,
    keep: Callable[[dict[str, Any]], bool] | None = None,
    report: PathLike | None = None,
    failure: str | None = None,
) -> dict[str, Any]:
    """Analyse one rank's trace file and merge its rows into run ``run_id`` of the store.

    The rows have the schema ``traceanalyzer batch`` writes (docs/store.md): the rank's steps
    (the numbers of ``traceanalyzer breakdown -f json``), its ``ranks`` row with ``host``,
    ``profiler_step``, the findings' ``top_losses``, the profiler-cost estimate where the
    breakdown gives one and ``trace_kept``, and the run's row recomputed over every rank stored
    so far. It never raises for a trace that cannot be analysed: that is a ``failed`` run (the
    first rank) or a line in the run's ``warnings``, as in ``batch``.

    Parameters:
        trace: the rank's trace file.
        store: the store directory (created if missing).
        run_id, job: the store run (one profiling cycle of a training run) and its job.
        rank, world_size, host, profiler_step: who wrote the trace, and the profiler's step count.
        date: the run's date partition (default: today, UTC).
        config: a run configuration (run.toml) for MFU and the findings' predicted gains.
        step_range: as in :func:`analyze`.
        keep: told the summary below before the rows are written; its answer is ``trace_kept``
            (default: kept).
        report: also write the HTML report of the trace to this file (when it can be analysed).
        failure: store a ``failed`` row with this error instead of analysing (what the handler
            stores when the analysis itself could not run to its end).

    Returns:
        ``status`` (``ok``/``failed``), ``error``, ``error_class``, ``steps`` (per step: ``step``
        and ``<bucket>_ms`` for each of :data:`STEP_METRICS`), ``top_losses``, ``kept`` and
        ``report`` (the file written, or None).
    """
    from traceanalyzer.api import analyze
    from traceanalyzer.store.analyse import failed_result, run_result
    from traceanalyzer.store.database import FAULT_ENV, Store
    from traceanalyzer.store.discover import RunSpec
    from traceanalyzer.store.loop import store_rank

    t0 = time.perf_counter()
    trace = Path(trace)
    day = date.isoformat() if isinstance(date, dt.date) else (date or dt.datetime.now(dt.timezone.utc).date().isoformat())
    spec = RunSpec(run_id=run_id, job=job, date=day, path=str(trace), files=(str(trace),),
                   config=str(config) if config else None, step_range=step_range)
    held: dict[str, Any] = {}

    def analyse() -> tuple[Any, bool]:
        if failure is not None:
            raise RuntimeError(failure)
        if os.environ.get(FAULT_ENV) == "loop:analysis":  # the tests' failing analysis
            raise RuntimeError(f"injected failure ({FAULT_ENV}=loop:analysis)")
        held["analysis"] = a = analyze(trace, step_range, workers=1)
        return a, False

    if failure is not None:
        result = failed_result(spec, RuntimeError(failure), step_range, t0=t0)
    else:
        result = run_result(spec, step_range, analyse, lambda: None, t0)
    summary: dict[str, Any] = {"status": result.row["status"], "error": result.row["error"],
                               "error_class": result.row["error_class"], "steps": [], "top_losses": [], "report": None}
    extra: dict[str, Any] = {"host": host, "profiler_step": profiler_step}
    analysis = held.get("analysis")
    if result.row["status"] == "ok" and analysis is not None:
        extra.update(_extras(analysis, config))
        summary["top_losses"] = extra["top_losses"]
        summary["steps"] = (
            result.steps.sort("step")
            .select("step", *[(pl.col(f"{m}_us") / 1000).alias(f"{m}_ms") for m in STEP_METRICS])
            .to_dicts()
        )
        if report is not None:
            from traceanalyzer.api import report as write_report

            write_report(analysis, report, format="html", config=config)
            summary["report"] = str(report)
    summary["kept"] = bool(keep(summary)) if keep is not None else True
    extra["trace_kept"] = summary["kept"]
    store_rank(Store(Path(store)), result, rank, extra, path=str(trace.parent), world_size=world_size)
    return summary


def _extras(analysis: Any, config: PathLike | None) -> dict[str, Any]:
    """The findings' top losses and the profiler-cost estimate (where the breakdown has it)."""
    from traceanalyzer.api.loading import pricing_configuration
    from traceanalyzer.reconciliation.findings import findings
    from traceanalyzer.render.json import document

    found = findings(analysis, pricing_configuration(config))
    doc = document(analysis, found)
    out: dict[str, Any] = {
        "top_losses": [{k: f.get(k) for k in ("loss", "label", "ms_per_step", "share_of_step")} for f in found[:TOP_LOSSES]],
    }
    rank = (doc.get("ranks") or [{}])[0]
    for key in ("profiler_overhead_us", "unprofiled_estimate_us"):  # the rank's medians over its steps
        value = rank.get(key.replace("_us", "_median_us"))
        out[key] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return out


def rank_trend(store: PathLike, *, last: int = 10, job: str | None = None) -> pl.DataFrame:
    """Per rank and host, in how many of each job's last ``last`` runs it was the slowest rank
    or the late arriver (``traceanalyzer trend --by rank``).

    Parameters:
        store: the store directory (``traceanalyzer batch``, or the training-loop handler).
        last: how many of each job's latest successful runs of two ranks or more to score.
        job: only this job.

    Returns:
        One row per job, rank and host: ``runs`` (of those scored, the ones the rank is in),
        ``slowest`` (the longest mean step), ``late_arriver`` (the least exposed communication
        per step: the others waited for it), ``either``, ``mean_step_time_ms`` and ``out_of``
        (the runs scored). Most ``either`` first.

    Raises:
        ConfigError: a bad ``last``.
        InputNotFound: no store there, or no run of ``job``.
    """
    from traceanalyzer.store.ranks import rank_scores
    from traceanalyzer.store.database import Store

    return rank_scores(Store(Path(store)), last, job)
