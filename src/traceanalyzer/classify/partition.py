"""The exact partition of each step's GPU wall time.

Priority per elementary segment (see :mod:`traceanalyzer.classify.intervals`):

* ``compute``      at least one compute kernel runs (any stream);
* ``recompute``    else at least one recompute kernel runs;
* ``exposed_comm`` else at least one communication kernel runs;
* ``other``        else memcpy / memset / other GPU work runs;
* ``idle``         else nothing runs.

``overlapped_comm`` (communication under compute or recompute) is reported beside the partition.
All arithmetic is on integer nanoseconds; the ``*_us`` columns are those divided by 1000.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.buckets import BUCKET_LABELS, BUCKETS, FIELDS  # noqa: F401 - the vocabulary, re-exported
from traceanalyzer.classify.intervals import first_active, segments
from traceanalyzer.classify.labels import CLASSES
from traceanalyzer.errors import InvariantViolation
from traceanalyzer.queries import query_engine


def segment_frame(labelled: pl.DataFrame, windows: pl.DataFrame) -> pl.LazyFrame:
    """Segments of every step window with the bucket each one falls in."""
    seg = segments(labelled.lazy().select("rank", "start_ns", "end_ns", "cls"), windows.lazy(), CLASSES)
    busy_rc = (pl.col("n_compute") > 0) | (pl.col("n_recompute") > 0)
    bucket = first_active([("compute", "compute"), ("recompute", "recompute"), ("comm", "exposed_comm"), ("other", "other")], "idle")
    return seg.with_columns(
        bucket.alias("bucket"),
        ((pl.col("n_comm") > 0) & busy_rc).alias("overlapped"),
        (pl.col("t1") - pl.col("t0")).alias("len_ns"),
    )


def partition(labelled: pl.DataFrame, windows: pl.DataFrame, source: str = "trace") -> pl.DataFrame:
    """Per (rank, step): start, duration and every bucket, in ns (Int64) and µs (Float64)."""
    seg = segment_frame(labelled, windows)
    sums = seg.group_by("rank", "step").agg(
        *[pl.col("len_ns").filter(pl.col("bucket") == b).sum().alias(f"{b}_ns") for b in BUCKETS],
        pl.col("len_ns").filter(pl.col("overlapped")).sum().alias("overlapped_comm_ns"),
    )
    out = (
        windows.lazy()
        .select("rank", "step", pl.col("wstart_ns").alias("start_ns"), (pl.col("wend_ns") - pl.col("wstart_ns")).alias("duration_ns"))
        .join(sums, on=["rank", "step"], how="left")
        .with_columns(pl.col(f"{b}_ns").fill_null(0) for b in [*BUCKETS, "overlapped_comm"])
        # a window with no segment at all (zero length) is all idle, i.e. zero
        .sort("rank", "start_ns")
        .collect(engine=query_engine())
    )
    check_partition(out, source)
    return out.with_columns(
        (pl.col("start_ns") / 1000).alias("start_us"),
        *[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in FIELDS],
    )


def check_partition(df: pl.DataFrame, source: str) -> None:
    """Invariants: buckets are non-negative and sum exactly to the step duration."""
    total = pl.sum_horizontal([pl.col(f"{b}_ns") for b in BUCKETS])
    bad = df.filter(
        (total != pl.col("duration_ns"))
        | pl.any_horizontal([pl.col(f"{b}_ns") < 0 for b in [*BUCKETS, "overlapped_comm"]])
        | (pl.col("overlapped_comm_ns") > pl.col("compute_ns") + pl.col("recompute_ns"))
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise InvariantViolation(
            f"partition invariant violated for rank {r['rank']} step {r['step']} "
            f"(duration {r['duration_ns']} ns): please report this input",
            source,
        )


def check_causes(df: pl.DataFrame, idle_fields: list[str], comm_fields: list[str], source: str,
                 host_fields: list[str] | None = None) -> None:
    """Invariants of the cause splits: idle causes sum to ``idle_ns``, exposed communication
    by dimension to ``exposed_comm_ns`` and the host-bound split (``host_fields``) to
    ``idle_host_bound_ns``, exactly, every part non-negative."""
    idle_sum = pl.sum_horizontal([pl.col(f"{f}_ns") for f in idle_fields])
    comm_sum = pl.sum_horizontal([pl.col(f"{f}_ns") for f in comm_fields])
    host_fields = host_fields or []
    host_ok = (pl.sum_horizontal([pl.col(f"{f}_ns") for f in host_fields]) == pl.col("idle_host_bound_ns")) if host_fields else pl.lit(True)
    bad = df.filter(
        (idle_sum != pl.col("idle_ns"))
        | (comm_sum != pl.col("exposed_comm_ns"))
        | ~host_ok
        | pl.any_horizontal([pl.col(f"{f}_ns") < 0 for f in [*idle_fields, *comm_fields, *host_fields]])
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise InvariantViolation(
            f"cause split invariant violated for rank {r['rank']} step {r['step']}: please report this input",
            source,
        )
