"""Stragglers over many steps: which ranks are slow, on how many steps, and in which bucket.

:func:`traceanalyzer.classify.crossrank.cross_rank` names the one slowest rank of each step.
Over many steps the question is which ranks are *repeatedly* slow, and why. Here, for every step
present on at least two ranks:

* a rank is **slow** on a step when its step duration exceeds the step's median over the ranks
  by more than ``tolerance`` × that median (default 5 %);
* its **bucket** on that step is the field whose time on that rank exceeds the field's median
  over the ranks by the most (the non-idle buckets and, when present, the idle causes, which
  refine ``idle``): the same rule as the per-step straggler bucket of ``cross_rank``;
* the step's **slowest** rank is the one with the longest step (the lowest rank on a tie).

:func:`straggler_steps` gives one row per rank and step; :func:`stragglers` sums it per rank.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.idle import CAUSES
from traceanalyzer.classify.partition import BUCKETS

#: a rank is slow on a step when its duration exceeds the step's median by more than this fraction
DEFAULT_TOLERANCE = 0.05


def _fields(steps: pl.DataFrame) -> list[str]:
    causes = [f"idle_{c}" for c in CAUSES if f"idle_{c}_ns" in steps.columns]
    if causes:
        return [*[b for b in BUCKETS if b != "idle"], *causes]
    return list(BUCKETS)


def straggler_steps(steps: pl.DataFrame, tolerance: float = DEFAULT_TOLERANCE) -> pl.DataFrame:
    """One row per rank and step, for the steps present on at least two ranks.

    Columns: ``rank`` (Int32), ``step`` (Int64), ``duration_ns`` (Int64), ``median_ns``
    (Float64: the step's median duration over the ranks), ``excess_ns`` (Float64: duration −
    median), ``slow`` (Boolean: ``excess_ns > tolerance × median_ns``), ``slowest`` (Boolean:
    the longest step of that step number), ``bucket`` (String: the field with the largest
    excess over its median on that rank) and ``bucket_excess_ns`` (Float64: that excess).
    Sorted by step, then rank.
    """
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be a non-negative fraction, got {tolerance}")
    fields = _fields(steps)
    multi = steps.filter(pl.len().over("step") >= 2)
    median = pl.col("duration_ns").median().over("step")
    slowest_rank = pl.col("rank").sort_by(["duration_ns", "rank"], descending=[True, False]).first().over("step")
    ex = multi.select(
        "rank",
        "step",
        "duration_ns",
        median.alias("median_ns"),
        (pl.col("duration_ns") - median).alias("excess_ns"),
        (pl.col("rank") == slowest_rank).alias("slowest"),
        pl.concat_list([(pl.col(f"{f}_ns") - pl.col(f"{f}_ns").median().over("step")).cast(pl.Float64) for f in fields]).alias("__ex"),
    )
    return (
        ex.with_columns(pl.col("__ex").list.arg_max().alias("__i"))
        .with_columns(
            (pl.col("excess_ns") > tolerance * pl.col("median_ns")).alias("slow"),
            pl.lit(fields).list.get(pl.col("__i")).alias("bucket"),
            pl.col("__ex").list.get(pl.col("__i")).alias("bucket_excess_ns"),
        )
        .select("rank", "step", "duration_ns", "median_ns", "excess_ns", "slow", "slowest", "bucket", "bucket_excess_ns")
        .sort("step", "rank")
    )


def stragglers(steps: pl.DataFrame, tolerance: float = DEFAULT_TOLERANCE) -> pl.DataFrame:
    """Per rank, over the steps present on at least two ranks (see :func:`straggler_steps`).

    Columns: ``rank`` (Int32), ``steps`` (UInt32: steps compared), ``slow_steps`` (UInt32: steps
    on which it was slow), ``slowest_steps`` (UInt32: steps on which it was the slowest rank),
    ``excess_ns`` (Float64: its step time above the median, summed over its slow steps),
    ``max_excess_ns`` (Float64: the largest of those), ``bucket`` (String: the bucket it was
    slow in on the most of its slow steps, ties to the larger summed excess; null when never
    slow), ``bucket_steps`` (UInt32: on how many slow steps), ``bucket_excess_ns`` (Float64:
    that bucket's excess summed over those steps). Every rank is listed; sorted by
    ``slow_steps``, ``slowest_steps`` and ``excess_ns`` (most first), then rank.
    """
    per = straggler_steps(steps, tolerance)
    slow = per.filter(pl.col("slow"))
    by_bucket = (
        slow.group_by("rank", "bucket")
        .agg(pl.len().alias("bucket_steps"), pl.col("bucket_excess_ns").sum())
        .sort(["rank", "bucket_steps", "bucket_excess_ns", "bucket"], descending=[False, True, True, False])
        .group_by("rank", maintain_order=True)
        .first()
    )
    base = per.group_by("rank").agg(
        pl.len().alias("steps"),
        pl.col("slow").sum().alias("slow_steps"),
        pl.col("slowest").sum().alias("slowest_steps"),
        pl.col("excess_ns").filter(pl.col("slow")).sum().alias("excess_ns"),
        pl.col("excess_ns").filter(pl.col("slow")).max().alias("max_excess_ns"),
    )
    return (
        base.join(by_bucket, on="rank", how="left")
        .with_columns(
            pl.col("steps").cast(pl.UInt32),
            pl.col("slow_steps").cast(pl.UInt32),
            pl.col("slowest_steps").cast(pl.UInt32),
            pl.col("excess_ns").cast(pl.Float64),
            pl.col("bucket_steps").fill_null(0).cast(pl.UInt32),
        )
        .select("rank", "steps", "slow_steps", "slowest_steps", "excess_ns", "max_excess_ns", "bucket", "bucket_steps", "bucket_excess_ns")
        .sort(["slow_steps", "slowest_steps", "excess_ns", "rank"], descending=[True, True, True, False])
    )
