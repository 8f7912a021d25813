"""Many ranks at a glance: each bucket's distribution over the ranks instead of one row per rank.

With hundreds of ranks a per-rank table is unreadable. :func:`rank_spread` reduces the per-rank
means (mean per step, as the per-rank tables show them) to one row per field: the number of
ranks, min / p50 / mean / max over the ranks, the rank at the max (the slowest rank for that
bucket: the one that spends the most time in it) and the top-N ranks by that field.

:func:`summarise_ranks` says when the outputs switch from one row per rank to this summary.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from traceanalyzer.classify.idle import CAUSES
from traceanalyzer.classify.partition import BUCKETS

#: above this many ranks, ``breakdown`` and ``report`` show the distribution, not every rank
RANK_SUMMARY_THRESHOLD = 16
#: how the outputs show ranks: ``auto`` (every rank up to the threshold, the summary above),
#: ``all`` (every rank), ``summary`` (the summary whatever the count)
RANK_MODES = ("auto", "all", "summary")

RankMode = Literal["auto", "all", "summary"]


def summarise_ranks(n_ranks: int, mode: str = "auto", threshold: int | None = None) -> bool:
    """Whether ``n_ranks`` ranks are shown as a distribution (True) or one row each (False);
    ``threshold``: default :data:`RANK_SUMMARY_THRESHOLD`."""
    if mode not in RANK_MODES:
        raise ValueError(f"rank mode {mode!r} is not one of {', '.join(RANK_MODES)}")
    limit = RANK_SUMMARY_THRESHOLD if threshold is None else threshold
    return mode == "summary" or (mode == "auto" and n_ranks > limit)


def spread_fields(steps: pl.DataFrame) -> list[str]:
    """The fields summarised: step duration, the buckets, overlapped comm, idle causes (those present)."""
    wanted = ["duration", *BUCKETS, "overlapped_comm", *[f"idle_{c}" for c in CAUSES]]
    return [f for f in wanted if f"{f}_ns" in steps.columns]


def rank_means(steps: pl.DataFrame, fields: list[str] | None = None) -> pl.DataFrame:
    """Per rank: ``rank, steps`` and ``<field>_ns`` = the field's mean per step (Float64 ns)."""
    fields = fields or spread_fields(steps)
    return (
        steps.group_by("rank")
        .agg(pl.len().alias("steps"), *[pl.col(f"{f}_ns").sum().alias(f"__sum_{f}") for f in fields])
        .select("rank", "steps", *[(pl.col(f"__sum_{f}") / pl.col("steps")).alias(f"{f}_ns") for f in fields])
        .sort("rank")
    )


def rank_spread(steps: pl.DataFrame, top: int = 3, fields: list[str] | None = None) -> pl.DataFrame:
    """One row per field (``duration`` first, then the buckets, ``overlapped_comm`` and the
    idle causes) summarising the per-rank mean per step over the ranks.

    Columns: ``field`` (String), ``ranks`` (UInt32), ``min_ns``, ``p50_ns`` (the median over
    ranks; the mean of the two middle ranks when their count is even), ``mean_ns``, ``max_ns``
    (Float64 nanoseconds per step), ``max_rank`` (Int32: the rank at the max, the lowest such
    rank on a tie), ``top_ranks`` (List[Int32]: the ``top`` ranks with the most time in the
    field, most first, ties by rank) and ``top_ns`` (List[Float64]: their values).
    """
    fields = fields or spread_fields(steps)
    means = rank_means(steps, fields)
    long = means.unpivot(index="rank", on=[f"{f}_ns" for f in fields], variable_name="field", value_name="v").with_columns(
        pl.col("field").str.strip_suffix("_ns")
    )
    ordered = long.sort(["field", "v", "rank"], descending=[False, True, False])
    out = ordered.group_by("field", maintain_order=True).agg(
        pl.len().alias("ranks"),
        pl.col("v").min().alias("min_ns"),
        pl.col("v").median().alias("p50_ns"),
        pl.col("v").mean().alias("mean_ns"),
        pl.col("v").max().alias("max_ns"),
        pl.col("rank").first().alias("max_rank"),
        pl.col("rank").head(top).alias("top_ranks"),
        pl.col("v").head(top).alias("top_ns"),
    )
    order = pl.DataFrame({"field": fields, "__o": list(range(len(fields)))})
    return out.join(order, on="field").sort("__o").drop("__o").with_columns(pl.col("ranks").cast(pl.UInt32))


def comm_spread(comm: pl.DataFrame) -> pl.DataFrame:
    """Communication per type / group / dimension over the ranks instead of per rank.

    ``comm``: :attr:`traceanalyzer.classify.Analysis.comm` (rank, step, by, key, count,
    exposed/wait/transfer ns...). Each rank's values are summed over its steps first. One row
    per (``by``, ``key``): ``ranks`` (UInt32), ``count`` (kernels, all ranks), ``exposed_min_ns``,
    ``exposed_p50_ns``, ``exposed_max_ns`` (Float64 ns per rank, summed over its steps),
    ``exposed_max_rank`` (Int32: the rank with the most exposed time, lowest on a tie),
    ``wait_p50_ns``, ``wait_max_ns``, ``transfer_p50_ns`` (Float64; null where unknown).
    Sorted by ``by`` and then by ``exposed_max_ns``, most first.
    """
    per_rank = comm.group_by("by", "key", "rank").agg(
        pl.col("count").sum(),
        pl.col("exposed_ns").sum(),
        *[pl.when(pl.col(f"{x}_ns").is_not_null().all()).then(pl.col(f"{x}_ns").sum()).alias(f"{x}_ns") for x in ("wait", "transfer")],
    )
    return (
        per_rank.sort(["by", "key", "exposed_ns", "rank"], descending=[False, False, True, False])
        .group_by("by", "key", maintain_order=True)
        .agg(
            pl.len().cast(pl.UInt32).alias("ranks"),
            pl.col("count").sum().cast(pl.Int64),
            pl.col("exposed_ns").min().cast(pl.Float64).alias("exposed_min_ns"),
            pl.col("exposed_ns").median().alias("exposed_p50_ns"),
            pl.col("exposed_ns").max().cast(pl.Float64).alias("exposed_max_ns"),
            pl.col("rank").first().alias("exposed_max_rank"),
            pl.col("wait_ns").median().alias("wait_p50_ns"),
            pl.col("wait_ns").max().cast(pl.Float64).alias("wait_max_ns"),
            pl.col("transfer_ns").median().alias("transfer_p50_ns"),
        )
        .sort(["by", "exposed_max_ns", "key"], descending=[False, True, False])
    )
