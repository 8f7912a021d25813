"""The classification as Chrome-trace tracks: for one rank, a ``buckets`` thread (one complete
event per maximal run of one bucket inside a step window) and a ``steps`` thread (one event per
step window, its partition in ``args``). Shared by the annotated trace (:mod:`.annotate`, the
original events plus these tracks) and the rebuilt trace (:mod:`.rebuilt`, every rank in one
file from the parsed events)."""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify import BUCKETS, Analysis
from traceanalyzer.views.document import LABELS

CATEGORY = "traceanalyzer"
PID_BASE = 0x7A000000  # far above Linux pids (<= 2**22) and device indices, below 2**31
TID_BUCKETS = 1
TID_STEPS = 2
#: chrome://tracing reserved colour names (Perfetto colours by name instead)
CNAME = {"compute": "good", "recompute": "olive", "exposed_comm": "terrible", "other": "yellow", "idle": "grey"}


def _us(ns: pl.Expr) -> pl.Expr:
    """Integer ns -> µs with (at most) 3 decimals, as Kineto writes them.

    Built as the decimal text ``<µs>.<ns:03>`` and parsed (correctly rounded) to the float
    nearest to it: ``ns / 1000`` would go through float64 first, and an epoch in ns (~1.7e18)
    is far past float64's exact integers. So the value read back is the one the original
    file's own timestamps could hold.
    """
    a = ns.abs()
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    return pl.format("{}{}.{}", sign, a // 1000, (a % 1000).cast(pl.String).str.zfill(3)).cast(pl.Float64)


def _viewer_ns(ns: pl.Expr) -> pl.Expr:
    """The integer ns a viewer computes from the ``ts`` we write: ``llround(µs * 1000)``
    (Perfetto's JSON importer). Equal to ``ns`` wherever float64 can hold the file's timestamps
    to the nanosecond (``baseTimeNanoseconds``-relative files); in files with absolute epoch µs
    (~1.7e15, float64 steps of 0.25 µs) it is ``ns`` rounded to that grid."""
    return (_us(ns) * 1000).round(0, mode="half_away_from_zero").cast(pl.Int64)


def _span(start_ns: pl.Expr, end_ns: pl.Expr, base_ns: int) -> list[pl.Expr]:
    """``ts`` and ``dur`` of a slice: ``dur`` is taken between the viewer's own readings of the
    two ends, so slices that touch in our nanoseconds touch in the viewer too (never overlap,
    which Perfetto would reject as improper nesting)."""
    t0, t1 = start_ns - base_ns, end_ns - base_ns
    return [_us(t0).alias("ts"), _us(_viewer_ns(t1) - _viewer_ns(t0)).alias("dur")]


def track_events(analysis: Analysis, runs: pl.DataFrame, rank: int, base_ns: int, pid: int) -> list[dict]:
    """The added events of one rank (metadata first), ready to append to ``traceEvents``.
    ``runs``: :func:`~traceanalyzer.views.document.bucket_runs` of the analysis."""
    runs = runs.filter(pl.col("rank") == rank)
    steps = analysis.steps.filter(pl.col("rank") == rank)
    label = pl.col("bucket").replace_strict(LABELS, return_dtype=pl.String)
    run_events = runs.select(
        pl.lit("X").alias("ph"),
        pl.lit(CATEGORY).alias("cat"),
        label.alias("name"),
        pl.lit(pid).alias("pid"),
        pl.lit(TID_BUCKETS).alias("tid"),
        *_span(pl.col("start_ns"), pl.col("end_ns"), base_ns),
        pl.col("bucket").replace_strict(CNAME, return_dtype=pl.String).alias("cname"),
        pl.struct(
            pl.col("bucket"),
            pl.col("step"),
            _us(pl.col("end_ns") - pl.col("start_ns")).alias("length_us"),
            _us(pl.col("overlapped_comm_ns")).alias("overlapped_comm_us"),
        ).alias("args"),
    )
    step_events = steps.select(
        pl.lit("X").alias("ph"),
        pl.lit(CATEGORY).alias("cat"),
        pl.format("step {}", pl.col("step")).alias("name"),
        pl.lit(pid).alias("pid"),
        pl.lit(TID_STEPS).alias("tid"),
        *_span(pl.col("start_ns"), pl.col("start_ns") + pl.col("duration_ns"), base_ns),
        pl.struct(
            pl.col("step"),
            _us(pl.col("duration_ns")).alias("length_us"),
            *[(pl.col(f"{b}_ns") / 1e6).alias(f"{b}_ms") for b in [*BUCKETS, "overlapped_comm"]],
        ).alias("args"),
    )
    meta = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"traceanalyzer rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "GPU time classification"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_BUCKETS,
         "args": {"name": "buckets: compute / recompute / exposed comm / other / idle"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": TID_BUCKETS, "args": {"sort_index": 0}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_STEPS, "args": {"name": "steps (GPU windows)"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": TID_STEPS, "args": {"sort_index": 1}},
    ]
    return meta + step_events.to_dicts() + run_events.to_dicts()
