"""The partition of each step's GPU time and its causes: the buckets per step or rank, the ranks at a
glance, communication, idle time, the stragglers.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import Source, _choice
from traceanalyzer.api._deprecation import RENAMED_IN, renamed_parameter
from traceanalyzer.api.loading import analyze
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument

#: the communication summary an analysis holds (one row per rank, step, ``by`` and key): what
#: :func:`comm` starts from when an analysis has none
COMM_SUMMARY_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "key": pl.String, "count": pl.UInt32, "bytes": pl.Int64, "time_ns": pl.Int64,
    "wait_ns": pl.Int64, "transfer_ns": pl.Int64, "transfer_estimated": pl.Boolean, "pg_desc": pl.String,
    "group_size": pl.Int64, "pg_ranks": pl.String, "dim": pl.String, "by": pl.String, "exposed_ns": pl.Int64,
    "overlapped_ns": pl.Int64,
}


@renamed_parameter("by", "per", version=RENAMED_IN)
@checked
def breakdown(source: Source, step_range: str | None = DEFAULT_STEP, *, per: Literal["step", "rank"] = "step") -> pl.DataFrame:
    """The exact partition of GPU time: per (rank, step), or per rank summed over its steps.

    Parameters:
        source: as in :func:`analyze`.
        step_range: as in :func:`analyze` (ignored when ``source`` is an analysis).
        per: ``"step"``: one row per (rank, step); ``"rank"``: one row per rank, summed over
            its steps, with the number of steps.

    Returns:
        ``per="step"``: ``rank``, ``step``, ``start_ns`` (step start on the job's time base),
        ``duration_ns``, ``compute_ns``, ``recompute_ns``, ``exposed_comm_ns``, ``other_ns``,
        ``idle_ns`` (Int64 ns; the five buckets sum exactly to ``duration_ns``),
        ``overlapped_comm_ns`` (communication hidden under compute; not part of the sum),
        ``idle_<cause>_ns`` for the causes ``host_bound``, ``sync``, ``bubble``, ``other``
        (sum = ``idle_ns``), ``exposed_comm_<dim>_ns`` for ``tp``, ``dp``, ``pp``, ``cp``,
        ``ep``, ``unknown``, ``concurrent`` (sum = ``exposed_comm_ns``), and every ``*_ns``
        column again as ``*_us`` (Float64 µs). Sorted by rank and start.
        ``per="rank"``: ``rank``, ``steps`` (UInt32) and every field above summed over the
        rank's steps, as ``*_ns`` and ``*_us``.

    Raises:
        InvalidArgument: ``per`` is not ``"step"`` or ``"rank"``.
        InputNotFound, InvalidTrace, NoGpuActivity: as in :func:`analyze`.

    Example:
        >>> import traceanalyzer as ta
        >>> df = ta.breakdown("fixtures/kineto/dlrm-v100-8rank")
        >>> df.select("rank", "duration_ns", "exposed_comm_ns").row(1)
        (1, 19901000, 11056000)
        >>> ta.breakdown("fixtures/kineto/dlrm-v100-8rank", per="rank")["steps"].to_list()
        [1, 1, 1, 1, 1, 1, 1, 1]
    """
    _choice("per", per, ("step", "rank"))
    a = analyze(source, step_range)
    return a.steps if per == "step" else a.totals()


@checked
def rank_summary(source: Source, *, top: int = 3) -> pl.DataFrame:
    """Many ranks at a glance: each bucket's distribution over the ranks, not one row per rank.

    Each rank's mean per step is taken first (as in the per-rank tables); this reduces them to
    one row per field. ``traceanalyzer breakdown`` and ``report`` show this table instead of
    one row per rank above 16 ranks (``--ranks all`` lists every rank).

    Parameters:
        source: as in :func:`analyze`.
        top: how many ranks to name per field, those with the most time in it.

    Returns:
        One row per field, in this order: ``duration`` (the step time), ``compute``,
        ``recompute``, ``exposed_comm``, ``other``, ``idle``, ``overlapped_comm`` and the idle
        causes ``idle_host_bound``, ``idle_sync``, ``idle_bubble``, ``idle_other``. Columns:
        ``field``, ``ranks`` (UInt32), ``min_ns``, ``p50_ns`` (median over the ranks; the mean
        of the middle two for an even count), ``mean_ns``, ``max_ns`` (Float64 ns per step),
        ``max_rank`` (Int32: the rank at the max, i.e. the slowest rank for that bucket; the
        lowest on a tie), ``top_ranks`` (List[Int32]) and ``top_ns`` (List[Float64]).

    Raises:
        InvalidArgument: ``top`` is not a positive integer.

    Example:
        >>> import traceanalyzer as ta
        >>> s = ta.rank_summary("fixtures/kineto/dlrm-v100-8rank")
        >>> s.filter(field="duration").select("min_ns", "p50_ns", "max_ns", "max_rank").row(0)
        (12509000.0, 16126000.0, 19901000.0, 1)
        >>> s.filter(field="exposed_comm")["top_ranks"].to_list()
        [[1, 3, 4]]
    """
    from traceanalyzer.classify.rankspread import rank_spread

    if not isinstance(top, int) or top < 1:
        raise InvalidArgument(f"top must be a positive integer, got {top!r}")
    return rank_spread(analyze(source).steps, top=top)


@checked
def comm(
    source: Source, *, by: Literal["type", "group", "dim"] = "type", per: Literal["step", "rank"] = "rank"
) -> pl.DataFrame:
    """Communication per collective type, process group or parallelism dimension.

    Wait is the time a collective kernel spent waiting for the last rank of its group to
    arrive; transfer is the rest (its data moving). Both are measured when all ranks of a group
    are loaded (instances matched across ranks), else estimated from the bytes and
    ``bus_bw_gbps`` (``transfer_estimated``).

    Parameters:
        source: as in :func:`analyze`.
        by: ``"type"`` (all_reduce, all_gather, ...), ``"group"`` (process group) or ``"dim"``
            (TP, DP, PP, CP, EP, unknown: from the process group's description and ranks).
        per: ``"rank"``: summed over the steps; ``"step"``: one row per rank and step.

    Returns:
        ``rank``, (``step`` with ``per="step"``), ``key`` (the type, group or dimension),
        ``count`` (kernels), ``bytes`` (null when the trace does not record sizes),
        ``time_ns`` (kernel time), ``exposed_ns`` (not hidden under compute: its share of the
        partition's ``exposed_comm_ns``), ``overlapped_ns``, ``wait_ns``, ``transfer_ns``
        (null when unknown), ``transfer_estimated`` (Boolean), ``dim``, and for groups
        ``pg_desc``, ``group_size``, ``pg_ranks``. Sorted by rank, then exposed time (most
        first).

    Raises:
        InvalidArgument: ``by`` or ``per`` is not one of its choices.

    Example:
        >>> import traceanalyzer as ta
        >>> c = ta.comm("fixtures/kineto/dlrm-v100-8rank")
        >>> c.filter(rank=1).select("key", "count", "exposed_ns", "wait_ns").rows()
        [('all_to_all', 5, 9389000, 9461000), ('all_reduce', 3, 1667000, 1664000)]
    """
    _choice("by", by, ("type", "group", "dim"))
    _choice("per", per, ("step", "rank"))
    a = analyze(source)
    c = a.comm if a.comm is not None and a.comm.width else pl.DataFrame(schema=COMM_SUMMARY_SCHEMA)
    # an empty table goes through the same steps: the same columns and dtypes with or without collectives
    c = c.filter(pl.col("by") == by).drop("by")
    if per == "rank":
        c = c.group_by("rank", "key").agg(
            pl.col("count").sum(),
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
            *[pl.col(f"{x}_ns").sum() for x in ("time", "exposed", "overlapped")],
            *[pl.when(pl.col(f"{x}_ns").is_not_null().all()).then(pl.col(f"{x}_ns").sum()).alias(f"{x}_ns") for x in ("wait", "transfer")],
            pl.col("transfer_estimated").any(),
            *[pl.col(x).drop_nulls().first() for x in ("dim", "pg_desc", "group_size", "pg_ranks")],
        )
        cols = ["rank", "key"]
    else:
        cols = ["rank", "step", "key"]
    order = [*cols, "count", "bytes", "time_ns", "exposed_ns", "overlapped_ns", "wait_ns", "transfer_ns", "transfer_estimated",
             "dim", "pg_desc", "group_size", "pg_ranks"]
    sort = ["rank", *(["step"] if per == "step" else []), "exposed_ns", "key"]
    desc = [False, *([False] if per == "step" else []), True, False]
    return c.select(order).sort(sort, descending=desc)


@checked
def idle(source: Source, *, per: Literal["step", "rank"] = "step") -> pl.DataFrame:
    """Why the GPU sat idle: the idle bucket split by cause.

    Causes (by priority where several hold at once): ``bubble`` (a pipeline-parallel transfer
    is outstanding), ``sync`` (the host is inside a synchronisation: ``cudaStreamSynchronize``,
    ``.item()``, ...), ``host_bound`` (the launch of the work that ends the gap had not started:
    the GPU was starved by the host), ``other``.

    Parameters:
        source: as in :func:`analyze`.
        per: ``"step"``: one row per (rank, step); ``"rank"``: summed over each rank's steps.

    Returns:
        ``rank``, (``step`` with ``per="step"``; ``steps`` with ``per="rank"``),
        ``duration_ns``, ``idle_ns``, ``idle_host_bound_ns``, ``idle_sync_ns``,
        ``idle_bubble_ns``, ``idle_other_ns`` (Int64 ns; the causes sum exactly to
        ``idle_ns``) and ``idle_pct`` (Float64: idle as % of the step time).

    Raises:
        InvalidArgument: ``per`` is not ``"step"`` or ``"rank"``.

    Example:
        >>> import traceanalyzer as ta
        >>> i = ta.idle("fixtures/kineto/dlrm-v100-8rank")
        >>> i.filter(rank=0).select("idle_ns", "idle_host_bound_ns", "idle_sync_ns", "idle_other_ns").row(0)
        (7865000, 6440000, 96000, 1329000)
    """
    from traceanalyzer.classify import IDLE_FIELDS

    _choice("per", per, ("step", "rank"))
    a = analyze(source)
    fields = ["duration", "idle", *[f for f in IDLE_FIELDS if f"{f}_ns" in a.steps.columns]]
    if per == "step":
        df = a.steps.select("rank", "step", *[f"{f}_ns" for f in fields])
    else:
        df = a.steps.group_by("rank").agg(pl.len().cast(pl.UInt32).alias("steps"), *[pl.col(f"{f}_ns").sum() for f in fields]).sort("rank")
    pct = pl.when(pl.col("duration_ns") > 0).then(100 * pl.col("idle_ns") / pl.col("duration_ns")).otherwise(0.0)
    return df.with_columns(pct.alias("idle_pct"))


@checked
def stragglers(
    source: Source, *, per: Literal["rank", "rank_step", "step"] = "rank", tolerance: float = 0.05
) -> pl.DataFrame:
    """Which ranks are slow, on how many steps, and in which bucket.

    For every step present on at least two ranks, a rank is slow when its step time exceeds the
    step's median over the ranks by more than ``tolerance`` × the median; its bucket is the one
    (or the idle cause) whose time on that rank exceeds that bucket's median over the ranks by
    the most: what makes it slow.

    Parameters:
        source: as in :func:`analyze`.
        per: ``"rank"``: one row per rank over all steps; ``"rank_step"``: one row per rank and
            step; ``"step"``: one row per step: its slowest rank, the skew and the rank the
            others waited on in collectives.
        tolerance: fraction of the median step time a rank must exceed it by to count as slow.

    Returns:
        ``per="rank"``: ``rank``, ``steps`` (compared), ``slow_steps``, ``slowest_steps`` (steps
        on which it was the slowest rank), ``excess_ns`` (its time above the median, summed over
        its slow steps), ``max_excess_ns``, ``bucket`` (the bucket it was slow in most often;
        null if never slow), ``bucket_steps``, ``bucket_excess_ns``; sorted by slow steps, then
        excess, most first.
        ``per="rank_step"``: ``rank``, ``step``, ``duration_ns``, ``median_ns``, ``excess_ns``,
        ``slow``, ``slowest``, ``bucket``, ``bucket_excess_ns``.
        ``per="step"``: ``step``, ``ranks``, ``slowest_rank``, ``max_ns``, ``median_ns``,
        ``min_ns``, ``skew_ns`` (max − median), ``straggler_bucket``, ``straggler_excess_ns``,
        ``durations``, ``waited_on_rank`` (the rank with the least collective wait: the late
        arriver the others waited for), ``waited_on_wait_ns``.
        Times in ns (Int64 for durations, Float64 for medians and differences).

    Raises:
        InvalidArgument: ``per`` is not one of its choices or ``tolerance`` is negative.

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> s = ta.stragglers("fixtures/kineto/dlrm-v100-8rank")
        >>> s.filter(pl.col("slow_steps") > 0).select("rank", "slowest_steps", "bucket").rows()
        [(1, 1, 'exposed_comm'), (3, 0, 'exposed_comm'), (4, 0, 'idle_host_bound'), (5, 0, 'idle_host_bound')]
    """
    from traceanalyzer.classify import stragglers as strag
    from traceanalyzer.classify.crossrank import CROSS_RANK_SCHEMA

    _choice("per", per, ("rank", "rank_step", "step"))
    if not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise InvalidArgument(f"tolerance must be a non-negative fraction, got {tolerance!r}")
    a = analyze(source)
    if per == "step":
        return a.cross_rank if a.cross_rank is not None else pl.DataFrame(schema=CROSS_RANK_SCHEMA)
    if per == "rank_step":
        return strag.straggler_steps(a.steps, tolerance)
    return strag.stragglers(a.steps, tolerance)
