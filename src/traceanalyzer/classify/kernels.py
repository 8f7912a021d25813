"""Per-kernel tables of one or more ranks: what the report's top-kernel and top-exposed tables
sum (a rank worker computes its own rows; the report adds them up). Classification only: no
formatting, no printing."""

from __future__ import annotations

import polars as pl
from traceanalyzer.queries import query_engine


def exposed_by_kernel(gpu: pl.DataFrame, seg: pl.DataFrame) -> pl.DataFrame:
    """Each communication kernel's exposed time: its share of the exposed-communication segments
    it spans (``seg``: :func:`~traceanalyzer.classify.partition.segment_frame`), shared equally
    among the collectives running at once."""
    share = (
        pl.when(pl.col("bucket") == "exposed_comm")
        .then(pl.col("len_ns") / pl.col("n_comm"))
        .otherwise(0.0)
        .cast(pl.Float64)
    )
    pref = seg.lazy().select("rank", "t0", "t1", share.alias("share")).with_columns(
        pl.col("share").cum_sum().over("rank").alias("incl")
    )
    first = pref.select("rank", "t0", (pl.col("incl") - pl.col("share")).alias("before")).sort("t0")
    last = pref.select("rank", "t1", pl.col("incl").alias("upto")).sort("t1")
    comm = (
        gpu.lazy()
        .filter((pl.col("cls") == "comm") & (pl.col("end_ns") > pl.col("start_ns")))
        .select("rank", "name", "start_ns", "end_ns")
    )
    return (
        comm.sort("start_ns")
        .join_asof(first, left_on="start_ns", right_on="t0", by="rank", strategy="forward", check_sortedness=False)
        .sort("end_ns")
        .join_asof(last, left_on="end_ns", right_on="t1", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(
            pl.max_horizontal(pl.col("upto").fill_null(0.0) - pl.col("before").fill_null(pl.col("upto")), pl.lit(0.0))
            .fill_null(0.0)
            .alias("exposed_ns")
        )
        .select("rank", "name", "start_ns", "end_ns", "exposed_ns")
        .sort("rank", "start_ns")
        .collect(engine=query_engine())
    )


def in_windows(frame: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Rows of ``frame`` (``rank, start_ns, ...``) that start inside a step window, with ``step``."""
    win = windows.select("rank", "step", "wstart_ns", "wend_ns").sort("wstart_ns")
    return (
        frame.sort("start_ns")
        .join_asof(win, left_on="start_ns", right_on="wstart_ns", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("start_ns") < pl.col("wend_ns")))
        .drop("wstart_ns", "wend_ns")
    )


def kernel_rows(gpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per rank and kernel (name, class) inside the step windows: ``rank, name, cls, kind,
    calls, total_ns, first_ns`` (a rank worker computes its own; :func:`_top_kernels` sums them)."""
    g = in_windows(gpu.select("rank", "name", "kind", "cls", "start_ns", "end_ns"), windows)
    return g.group_by("rank", "name", "cls").agg(
        pl.col("kind").sort_by("start_ns").first().cast(pl.String).alias("kind"),
        pl.len().alias("calls"),
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("total_ns"),
        pl.col("start_ns").min().alias("first_ns"),
    )


def exposed_rows(gpu: pl.DataFrame, windows: pl.DataFrame, seg: pl.DataFrame) -> pl.DataFrame:
    """The communication kernels the top-exposed table counts, with their exposed time
    (:func:`exposed_by_kernel`): those starting inside a step window, and any kernel with exposed
    time (it lies inside windows by construction), so the exposed times sum to the partition."""
    k = exposed_by_kernel(gpu, seg)
    inside = in_windows(k, windows).drop("step")
    return pl.concat([inside, k.join(inside, on=["rank", "name", "start_ns", "end_ns"], how="anti").filter(pl.col("exposed_ns") > 0)])
