"""The frames the report and the annotated-trace writer share: the elementary segments of every
step window, the maximal runs of one bucket, and the exposed time of each communication kernel."""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.classify.kernels import exposed_by_kernel as kernel_exposure
from traceanalyzer.classify.partition import segment_frame
from traceanalyzer.queries import query_engine


def segments(analysis: Analysis) -> pl.DataFrame:
    """Elementary segments of every step window (``rank, step, t0, t1, n_*, bucket, overlapped,
    len_ns``), sorted by rank and time: the cut the partition itself was computed on."""
    return segment_frame(analysis.gpu, analysis.windows).sort("rank", "t0").collect(engine=query_engine())


def bucket_runs(analysis: Analysis, seg: pl.DataFrame | None = None) -> pl.DataFrame:
    """Maximal runs of one bucket inside each step window.

    Returns ``rank, step, start_ns, end_ns, bucket, overlapped_comm_ns`` sorted by rank and time.
    Per (rank, step) the run lengths of a bucket sum exactly to that bucket in the partition.
    """
    seg = segments(analysis) if seg is None else seg
    prev_bucket = pl.col("bucket").shift(1).over("rank", "step")
    prev_end = pl.col("t1").shift(1).over("rank", "step")
    new = ((pl.col("bucket") != prev_bucket) | (pl.col("t0") != prev_end)).fill_null(True)
    return (
        seg.lazy()
        .with_columns(new.cum_sum().alias("__run"))
        .group_by("__run")
        .agg(
            pl.col("rank").first(),
            pl.col("step").first(),
            pl.col("t0").min().alias("start_ns"),
            pl.col("t1").max().alias("end_ns"),
            pl.col("bucket").first(),
            pl.col("len_ns").filter(pl.col("overlapped")).sum().alias("overlapped_comm_ns"),
        )
        .sort("rank", "start_ns")
        .drop("__run")
        .collect(engine=query_engine())
    )


def exposed_by_kernel(analysis: Analysis, seg: pl.DataFrame | None = None) -> pl.DataFrame:
    """Exposed communication time of every communication kernel.

    Each exposed-comm segment is shared equally among the communication kernels active in it
    (``len / n_comm``), so the kernels' exposed times sum exactly to the partition's
    ``exposed_comm``. A kernel covers a contiguous range of segments (segments are elementary:
    no event boundary falls inside one), found with two as-of joins on a per-rank prefix sum.

    Returns ``rank, name, start_ns, end_ns, exposed_ns`` (Float64) for every comm kernel.
    """
    return kernel_exposure(analysis.gpu, segments(analysis) if seg is None else seg)
