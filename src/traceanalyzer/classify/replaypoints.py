"""What the cross-rank replay (:mod:`.replay`) needs of one rank: its **points**, computed by the
rank worker (polars only).

A rank's points are each step's start and end and the *arrival* (the start) of each of its
collective kernels. Every point has an **anchor**: the rank's collective kernel that ended last at
or before it (another one for a kernel of no duration, which ends where it arrives; none: the
job's origin, the earliest step start over the ranks, which only the reducer knows), and a
**lead**, the time from the anchor's end to the point, of which ``busy_ns`` is the GPU's busy time
(any kernel, memcpy or memset on any stream of the rank: the work before the point; from the
rank's first step start for an origin anchor) and the rest is idle (the GPU waited for the host).
"""

from __future__ import annotations

import polars as pl

#: the points' kinds
START, ARRIVE, END = "start", "arrive", "end"

POINT_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "point": pl.String, "kernel": pl.Int64, "t_ns": pl.Int64,
    "anchor": pl.Int64, "anchor_end_ns": pl.Int64, "lead_ns": pl.Int64, "busy_ns": pl.Int64,
}


def _union(gpu: pl.DataFrame) -> pl.DataFrame:
    """Per rank the union of the GPU work as disjoint intervals ``us, ue`` in time order, with
    ``before``: the busy time before each one."""
    g = (gpu.select("rank", "start_ns", "end_ns").sort("rank", "start_ns")
         .with_columns(pl.col("end_ns").cum_max().over("rank").alias("__reach")))
    return (
        g.with_columns((pl.col("start_ns") > pl.col("__reach").shift(1).over("rank")).fill_null(True).alias("__new"))
        .with_columns(pl.col("__new").cum_sum().over("rank").alias("__seg"))
        .group_by("rank", "__seg", maintain_order=True)
        .agg(pl.col("start_ns").min().alias("us"), pl.col("end_ns").max().alias("ue"))
        .with_columns(((pl.col("ue") - pl.col("us")).cum_sum().over("rank") - (pl.col("ue") - pl.col("us"))).alias("before"))
        .select(pl.col("rank").cast(pl.Int32), "us", "ue", "before")
        .sort("rank", "us")
    )


def _busy_before(times: pl.DataFrame, col: str, union: pl.DataFrame) -> pl.Series:
    """GPU busy time of each row's rank before its time ``col`` (``times`` in any order)."""
    t = times.select(pl.col("rank").cast(pl.Int32), pl.col(col).alias("__t")).with_row_index("__i")
    hit = t.sort("__t").join_asof(union, left_on="__t", right_on="us", by="rank", strategy="backward", check_sortedness=False)
    busy = pl.when(pl.col("us").is_null()).then(0).otherwise(pl.col("before") + (pl.min_horizontal("__t", "ue") - pl.col("us")).clip(0))
    return hit.sort("__i").select(busy.cast(pl.Int64)).to_series()


def rank_points(gpu: pl.DataFrame, windows: pl.DataFrame, inst: pl.DataFrame) -> pl.DataFrame:
    """The points of each rank (see the module docstring): one row per step start, step end and
    collective kernel, sorted by rank and time.

    ``gpu``: the labelled GPU work; ``windows``: the step windows; ``inst``: the ranks' collective
    instances (:func:`.comm.collective_instances`) in their order. Columns (:data:`POINT_SCHEMA`):
    ``rank``, ``step``, ``point`` (``start`` / ``arrive`` / ``end``), ``kernel`` (the collective
    kernel's position among its rank's instances, arrivals only), ``t_ns``, ``anchor`` (the
    position of the anchoring kernel; null: the job's origin), ``anchor_end_ns`` (its end),
    ``lead_ns`` (``t − anchor end``; null for an origin anchor), ``busy_ns``.
    """
    if windows.height == 0:
        return pl.DataFrame(schema=POINT_SCHEMA)
    w = windows.select(pl.col("rank").cast(pl.Int32), "step", "wstart_ns", "wend_ns")
    k = (inst.select(pl.col("rank").cast(pl.Int32), "step", "start_ns", "end_ns") if inst.height
         else pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}))
    k = k.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("kernel"))
    pts = pl.concat([
        w.select("rank", "step", pl.lit(START).alias("point"), pl.lit(None, pl.Int64).alias("kernel"), pl.col("wstart_ns").alias("t_ns")),
        w.select("rank", "step", pl.lit(END).alias("point"), pl.lit(None, pl.Int64).alias("kernel"), pl.col("wend_ns").alias("t_ns")),
        k.select("rank", "step", pl.lit(ARRIVE).alias("point"), "kernel", pl.col("start_ns").alias("t_ns")),
    ]).with_row_index("__i")
    # the anchor: the kernel with the latest end at or before the point (ties: the later one); a
    # kernel that ends where it arrives is not its own anchor (the one strictly before it is)
    ends = k.select("rank", pl.col("end_ns").alias("anchor_end_ns"), pl.col("kernel").alias("anchor")).sort("rank", "anchor_end_ns", "anchor")
    ordered = pts.sort("t_ns")
    at = ordered.join_asof(ends, left_on="t_ns", right_on="anchor_end_ns", by="rank", strategy="backward",
                        check_sortedness=False)
    before = ordered.join_asof(ends, left_on="t_ns", right_on="anchor_end_ns", by="rank", strategy="backward",
                               allow_exact_matches=False, check_sortedness=False).select("__i", pl.col("anchor").alias("__a2"), pl.col("anchor_end_ns").alias("__e2"))
    own = pl.col("kernel").is_not_null() & (pl.col("anchor") == pl.col("kernel"))
    at = (
        at.join(before, on="__i", how="left")
        .with_columns(
            pl.when(own).then(pl.col("__a2")).otherwise(pl.col("anchor")).alias("anchor"),
            pl.when(own).then(pl.col("__e2")).otherwise(pl.col("anchor_end_ns")).alias("anchor_end_ns"),
        )
        .drop("__a2", "__e2")
    )
    first = w.group_by("rank").agg(pl.col("wstart_ns").min().alias("__first"))
    at = at.join(first, on="rank", how="left").with_columns(
        pl.coalesce("anchor_end_ns", "__first").alias("__lo"),
        (pl.col("t_ns") - pl.col("anchor_end_ns")).alias("lead_ns"),
    ).with_columns(pl.max_horizontal("t_ns", "__lo").alias("__hi"))
    union = _union(gpu)
    busy = (_busy_before(at, "__hi", union) - _busy_before(at, "__lo", union)).clip(0)
    return (
        at.with_columns(busy.alias("busy_ns"))
        .sort("rank", "t_ns", "__i")
        .select(list(POINT_SCHEMA))
        .cast(POINT_SCHEMA)
    )
