"""Cross-rank view: which rank is slow in each step, by how much, and why.

For every step number seen on at least two ranks: each rank's step duration, the slowest rank,
``skew = max − median`` of the durations, and the **straggler bucket**: the partition bucket
(or idle cause) whose time on the slowest rank exceeds the median over the ranks by the most,
i.e. what makes the straggler slow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from polars._typing import PolarsDataType

from traceanalyzer.classify.partition import BUCKETS


#: the columns of :func:`cross_rank`, whether a step is on several ranks or none is
CROSS_RANK_SCHEMA: dict[str, PolarsDataType] = {
    "step": pl.Int64, "ranks": pl.UInt32, "slowest_rank": pl.Int32, "max_ns": pl.Int64, "median_ns": pl.Float64,
    "min_ns": pl.Int64, "skew_ns": pl.Float64, "straggler_bucket": pl.String, "straggler_excess_ns": pl.Float64,
    "durations": pl.List(pl.Struct({"rank": pl.Int32, "duration_ns": pl.Int64})), "waited_on_rank": pl.Int32,
    "waited_on_wait_ns": pl.Int64,
}


def cross_rank(steps: pl.DataFrame, causes: list[str] | None = None, coll: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per step present on ≥ 2 ranks.

    Columns: ``step, ranks, slowest_rank, max_ns, median_ns, min_ns, skew_ns, straggler_bucket,
    straggler_excess_ns`` (bucket time on the slowest rank minus its median over ranks) and
    ``durations`` (list of ``{rank, duration_ns}``). ``causes``: extra ``<name>_ns`` columns
    of ``steps`` that may be named as the straggler bucket (e.g. idle causes); when one of them
    wins, it is reported instead of its parent bucket ``idle``.

    ``coll`` (:func:`.comm.collectives`): adds ``waited_on_rank`` and ``waited_on_wait_ns``: the
    rank with the least measured collective wait in the step, i.e. the one the others waited
    for. In a step that ends on a collective, the rank with the longest step is often the one
    that *started* first and then waited; ``waited_on_rank`` names the late arriver.
    """
    fields = [*BUCKETS, *(causes or [])]
    multi = steps.filter(pl.len().over("step") >= 2)
    if multi.height == 0:
        return pl.DataFrame(schema=CROSS_RANK_SCHEMA)  # the columns of a job with steps on several ranks
    med = multi.group_by("step").agg(
        pl.len().alias("ranks"),
        pl.col("duration_ns").max().alias("max_ns"),
        pl.col("duration_ns").median().alias("median_ns"),
        pl.col("duration_ns").min().alias("min_ns"),
        *[pl.col(f"{f}_ns").median().alias(f"__med_{f}") for f in fields],
        pl.struct("rank", "duration_ns").sort_by("rank").alias("durations"),
    )
    slow = (
        multi.sort(["step", "duration_ns", "rank"], descending=[False, True, False])
        .group_by("step", maintain_order=True)
        .first()
        .select("step", pl.col("rank").alias("slowest_rank"), *[pl.col(f"{f}_ns").alias(f"__slow_{f}") for f in fields])
    )
    j = med.join(slow, on="step")
    excess = [(pl.col(f"__slow_{f}") - pl.col(f"__med_{f}")).alias(f) for f in fields]
    # idle causes refine "idle": rank them only against the non-idle buckets
    j = j.with_columns(pl.struct(excess).alias("__ex"))
    names = pl.lit(fields)
    values = pl.concat_list([pl.col("__ex").struct.field(f) for f in fields])
    if causes:
        # compare the non-idle buckets with the idle causes (not with idle itself)
        keep = [f for f in fields if f != "idle"]
        names = pl.lit(keep)
        values = pl.concat_list([pl.col("__ex").struct.field(f) for f in keep])
    j = j.with_columns(names.alias("__names"), values.alias("__vals"))
    j = j.with_columns(pl.col("__vals").list.arg_max().alias("__i")).with_columns(
        pl.col("__names").list.get(pl.col("__i")).alias("straggler_bucket"),
        pl.col("__vals").list.get(pl.col("__i")).alias("straggler_excess_ns"),
    )
    out = j.select(
        "step", "ranks", "slowest_rank", "max_ns", "median_ns", "min_ns",
        (pl.col("max_ns") - pl.col("median_ns")).alias("skew_ns"),
        "straggler_bucket", "straggler_excess_ns", "durations",
    )
    waited = pl.DataFrame(schema={"step": pl.Int64, "waited_on_rank": pl.Int32, "waited_on_wait_ns": pl.Int64})
    if coll is not None and coll.height:
        measured = coll.select("step", "rank", "wait_ns", "transfer_estimated").filter(  # a filter copies what it keeps
            pl.col("step").is_not_null() & ~pl.col("transfer_estimated") & pl.col("wait_ns").is_not_null()
        )
        if measured.height:
            waited = (
                measured.group_by("step", "rank")
                .agg(pl.col("wait_ns").sum())
                .sort(["step", "wait_ns", "rank"])
                .group_by("step", maintain_order=True)
                .first()
                .select("step", pl.col("rank").alias("waited_on_rank"), pl.col("wait_ns").alias("waited_on_wait_ns"))
            )
    return out.join(waited, on="step", how="left").sort("step")
