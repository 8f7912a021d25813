"""Kernel launches and the launch queue: how long GPU work waited between its launch call on
the host and its start on the device, how many kernels a step runs, which steps are
launch-bound, and how many launched items were outstanding on each stream over time.

* A **launch** pairs a host runtime call (``cudaLaunchKernel``, ``cuLaunchKernel``,
  ``cudaMemcpyAsync``, ``cudaGraphLaunch``, ``hipLaunchKernel``...: any runtime or driver call
  that carries the correlation id of GPU work) with the GPU work of that id (kernel, memcpy,
  memset; a graph launch pairs with each of its kernels). GPU work without a launch record
  (launched before the profile began) takes part in no launch statistic.
* ``launch_latency_ns`` = GPU start − launch call start (what the host waits, end to end);
  ``launch_delay_ns`` = GPU start − launch call end (HTA's "launch delay", which HTA clips at 0;
  here it keeps its sign: negative when the work started before the call returned);
  ``cpu_ns`` = the launch call's own duration; ``gpu_ns`` = the work's duration.
* **Queue length** per (rank, device, stream): ``queued`` = launched and not yet started
  (+1 at the launch call's start, −1 at the work's start: HTA's definition), ``outstanding`` =
  launched and not yet finished (−1 at the work's end instead). Both are step functions: a value
  holds from its ``t_ns`` to the next row's.
* A step is **launch-bound** when (1) the GPU sat idle waiting for launch calls that had not
  begun yet (the partition's ``idle_host_bound`` cause) for at least ``threshold`` of the step,
  and (2) the median launched item ran no longer than the median launch call took: the host
  cannot issue work as fast as the GPU finishes it, so launch overhead, not the kernels, sets
  the pace (CUDA graphs, fusion or ``torch.compile`` are the usual cures).
* A step is **CPU-bound** (``cpu_bound``) when the GPU waited on the host for at least
  ``threshold`` of the step (``gpu_wait_share`` = ``idle_host_bound_ns / duration_ns``) and the
  host's time per launched GPU item exceeds the GPU's: ``host_ns_per_kernel`` = the time the
  rank's launching threads spent inside recorded host ops and runtime calls during the step
  (their union: dispatch + launch; synchronisations, where the host waits on the GPU, excluded)
  over the items that start in the step; ``gpu_ns_per_kernel`` = the step's GPU busy time
  (duration − idle) over the same items. The launch call alone (``launch_cpu_p50_ns``) misses
  the dispatch around it: this verdict does not.
* **CUDA graphs** (``cuda_graphs``): a ``cudaGraphLaunch`` / ``cuGraphLaunch`` /
  ``hipGraphLaunch`` call launched work of the step. One graph launch runs many kernels that
  wait on each other, not on the call: its launch latency is counted once, to the graph's first
  kernel, not once per kernel.

Sorted cumulative sums and as-of joins only; no Python loop over events.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS

#: the profiler's cost columns of the steps (classify.profiler_cost) a step table carries
PROFILER_COLUMNS = ["profiler_host_ns", "profiler_overhead_ns", "unprofiled_estimate_ns"]

#: the default share of a step the GPU must wait on the host for the step to be launch-bound
LAUNCH_BOUND_SHARE = 0.10
#: runtime calls that launch a whole CUDA / HIP graph
GRAPH_LAUNCH = r"^(cuda|cu|hip)GraphLaunch"
#: the columns of :func:`launch_pairs`
PAIR_COLUMNS = [
    "rank", "pid", "stream", "kind", "name", "cls", "correlation", "launch_name", "launch_ns", "launch_end_ns",
    "start_ns", "end_ns", "launch_latency_ns", "launch_delay_ns", "cpu_ns", "gpu_ns",
]


def launch_calls(events: pl.LazyFrame) -> pl.LazyFrame:
    """One launch call per (rank, correlation) (the earliest runtime call with that id):
    ``rank, correlation, pid, tid, launch_name, launch_ns, launch_end_ns`` (``pid``/``tid``:
    the host process and thread that made the call)."""
    return (
        events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .sort("start_ns")
        .group_by("rank", "correlation")
        .agg(
            pl.col("pid").first(), pl.col("tid").first(), pl.col("name").first().alias("launch_name"),
            pl.col("start_ns").first().alias("launch_ns"), pl.col("end_ns").first().alias("launch_end_ns"),
        )
    )


def launch_pairs(events: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """Every GPU work item with its launch call (columns :data:`PAIR_COLUMNS`; ``pid`` is the
    GPU's, ``cls`` the work's class when ``gpu`` is labelled, else null)."""
    g = gpu.filter(pl.col("kind").is_in(GPU_WORK_KINDS) & pl.col("correlation").is_not_null())
    if "cls" not in g.collect_schema().names():
        g = g.with_columns(pl.lit(None, pl.String).alias("cls"))
    calls = launch_calls(events).drop("pid", "tid")
    return (
        g.select("rank", "pid", "stream", pl.col("kind").cast(pl.String), "name", "cls", "correlation", "start_ns", "end_ns")
        .join(calls, on=["rank", "correlation"], how="inner")
        .with_columns(
            (pl.col("start_ns") - pl.col("launch_ns")).alias("launch_latency_ns"),
            (pl.col("start_ns") - pl.col("launch_end_ns")).alias("launch_delay_ns"),
            (pl.col("launch_end_ns") - pl.col("launch_ns")).alias("cpu_ns"),
            (pl.col("end_ns") - pl.col("start_ns")).alias("gpu_ns"),
        )
        .select(PAIR_COLUMNS)
    )


def _q(col: str, q: float, alias: str) -> pl.Expr:
    return pl.col(col).quantile(q, interpolation="nearest").cast(pl.Int64).alias(alias)


def step_table(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): ``kernels``, ``memcpy``, ``memset`` (GPU work that starts in the step),
    ``launched`` (of those, the items with a launch record), the launch latency's mean, p50,
    p99 and max, the launch delay's p50, the launch call's p50 and total (``launch_cpu_ns``:
    host time spent in launch calls of the step's work), the launched work's p50 duration, and
    the step's ``duration_ns``, ``idle_ns``, ``idle_host_bound_ns`` (from the partition).
    Integer ns throughout."""
    return with_steps(launch_parts(events, gpu, windows), steps)


def launch_parts(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """What :func:`step_table` reads of the events, the GPU work and the step windows (not of
    the partition): per (rank, step) the counts, the launch statistics and :func:`host_time`."""
    from traceanalyzer.classify.kernels import in_windows

    g = in_windows(gpu.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("rank", "kind", "start_ns", "correlation"), windows)
    counts = g.group_by("rank", "step").agg(
        *[(pl.col("kind") == k).sum().cast(pl.Int64).alias(k) for k in ("kernel", "memcpy", "memset")],
    ).rename({"kernel": "kernels"})
    pairs = in_windows(launch_pairs(events.lazy(), gpu.lazy()).collect(engine=query_engine()), windows)
    graph = pl.col("launch_name").str.contains(GRAPH_LAUNCH)
    # a graph launch's kernels wait on each other, not on the call: one latency per graph launch
    # (to its first kernel in the step), every other item its own
    lat = pl.concat([
        pairs.filter(~graph).select("rank", "step", "launch_latency_ns", "launch_delay_ns"),
        pairs.filter(graph).group_by("rank", "step", "correlation").agg(
            pl.col("launch_latency_ns").min(), pl.col("launch_delay_ns").min()).select("rank", "step", "launch_latency_ns", "launch_delay_ns"),
    ]).group_by("rank", "step").agg(
        pl.col("launch_latency_ns").mean().alias("launch_latency_mean_ns"),
        _q("launch_latency_ns", 0.5, "launch_latency_p50_ns"),
        _q("launch_latency_ns", 0.99, "launch_latency_p99_ns"),
        pl.col("launch_latency_ns").max().alias("launch_latency_max_ns"),
        _q("launch_delay_ns", 0.5, "launch_delay_p50_ns"),
    )
    stats = pairs.group_by("rank", "step").agg(
        pl.len().cast(pl.Int64).alias("launched"),
        _q("cpu_ns", 0.5, "launch_cpu_p50_ns"),
        # a call that launched several items (a graph) counts once
        pl.col("cpu_ns").filter(pl.col("correlation").is_first_distinct()).sum().alias("launch_cpu_ns"),
        _q("gpu_ns", 0.5, "gpu_work_p50_ns"),
        graph.any().alias("cuda_graphs"),
    ).join(lat, on=["rank", "step"], how="left")
    return counts, stats, host_time(events, windows)


def with_steps(parts: tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame], steps: pl.DataFrame) -> pl.DataFrame:
    """:func:`step_table` of its :func:`launch_parts` and the partition's ``steps``."""
    counts, stats, host = parts
    prof = [c for c in PROFILER_COLUMNS if c in steps.columns]
    base = steps.select("rank", "step", "duration_ns", "idle_ns", "idle_host_bound_ns", *prof).join(
        host, on=["rank", "step"], how="left").with_columns(pl.col("host_ns").fill_null(0))
    return (
        base.join(counts, on=["rank", "step"], how="left")
        .join(stats, on=["rank", "step"], how="left")
        .with_columns(pl.col(c).fill_null(0) for c in ("kernels", "memcpy", "memset", "launched", "launch_cpu_ns"))
        .with_columns(
            pl.col("cuda_graphs").fill_null(False),
            pl.when(pl.col("launched") > 0).then(pl.col("host_ns") // pl.col("launched")).alias("host_ns_per_kernel"),
            pl.when(pl.col("launched") > 0).then((pl.col("duration_ns") - pl.col("idle_ns")) // pl.col("launched")).alias("gpu_ns_per_kernel"),
        )
        .select(
            "rank", "step", "kernels", "memcpy", "memset", "launched",
            "launch_latency_mean_ns", "launch_latency_p50_ns", "launch_latency_p99_ns", "launch_latency_max_ns",
            "launch_delay_p50_ns", "launch_cpu_p50_ns", "launch_cpu_ns", "gpu_work_p50_ns",
            "duration_ns", "idle_ns", "idle_host_bound_ns", "host_ns", "host_ns_per_kernel", "gpu_ns_per_kernel", "cuda_graphs",
            *prof,
        )
        .sort("rank", "step")
    )


def host_time(events: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, step): ``host_ns``, the time inside the step window that the rank's launching
    threads (those that made a launch call) spent in recorded host ops or runtime calls, their
    union over the threads, less the time in synchronisations (the host waiting on the GPU)."""
    from traceanalyzer.classify.idle import SYNC_OPS, SYNC_RUNTIME
    from traceanalyzer.classify.intervals import segments

    ev = events.lazy()
    threads = ev.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()).select("rank", "tid").unique()
    host = ev.filter(pl.col("kind").is_in(["cpu_op", "runtime"])).join(threads, on=["rank", "tid"], how="semi")
    sync = (pl.col("kind") == "runtime") & pl.col("name").str.contains(SYNC_RUNTIME) | (pl.col("kind") == "cpu_op") & pl.col("name").is_in(SYNC_OPS)
    iv = host.select("rank", "start_ns", "end_ns", pl.when(sync).then(pl.lit("sync")).otherwise(pl.lit("op")).alias("cls"))
    seg = segments(iv, windows.lazy().select("rank", "step", "wstart_ns", "wend_ns"), ["op", "sync"])
    return (
        seg.filter((pl.col("n_op") > 0) & (pl.col("n_sync") == 0))
        .group_by("rank", "step")
        .agg((pl.col("t1") - pl.col("t0")).sum().alias("host_ns"))
        .collect(engine=query_engine())
    )


def with_launch_bound(table: pl.DataFrame, threshold: float = LAUNCH_BOUND_SHARE) -> pl.DataFrame:
    """:func:`step_table` with ``host_bound_share`` (``idle_host_bound_ns / duration_ns``) and
    ``launch_bound`` (see the module docstring; ``threshold``: the share, 0 to 1).

    ``cpu_bound`` is the rule applied to the step without the profiler where the trace gives an
    unprofiled estimate (:mod:`.profiler_cost`): ``gpu_wait_share_unprofiled`` = host-bound idle
    less what the profiler added to the step, over the unprofiled estimate;
    ``host_ns_per_kernel_unprofiled`` = host time less the profiler's own, per launched item.
    ``cpu_bound_profiled`` is the rule on the trace's own numbers."""
    share = pl.when(pl.col("duration_ns") > 0).then(pl.col("idle_host_bound_ns") / pl.col("duration_ns")).otherwise(0.0)
    out = table.with_columns(share.alias("host_bound_share"), share.alias("gpu_wait_share")).with_columns(
        ((pl.col("host_bound_share") >= threshold)
         & (pl.col("gpu_work_p50_ns") <= pl.col("launch_cpu_p50_ns")).fill_null(False)).alias("launch_bound"),
        ((pl.col("gpu_wait_share") >= threshold)
         & (pl.col("host_ns_per_kernel") > pl.col("gpu_ns_per_kernel")).fill_null(False)).alias("cpu_bound")
        if {"host_ns_per_kernel", "gpu_ns_per_kernel"} <= set(table.columns) else pl.lit(None, pl.Boolean).alias("cpu_bound"),
    )
    if not {"unprofiled_estimate_ns", "host_ns_per_kernel"} <= set(out.columns):
        return out
    est = pl.col("unprofiled_estimate_ns")
    wait = (pl.col("idle_host_bound_ns") - pl.col("profiler_overhead_ns")).clip(lower_bound=0)
    return out.rename({"cpu_bound": "cpu_bound_profiled"}).with_columns(
        pl.when(est > 0).then(wait / est).alias("gpu_wait_share_unprofiled"),
        pl.when(pl.col("launched") > 0).then((pl.col("host_ns") - pl.col("profiler_host_ns")).clip(lower_bound=0) // pl.col("launched"))
        .alias("host_ns_per_kernel_unprofiled"),
    ).with_columns(
        pl.when(est.is_null()).then(pl.col("cpu_bound_profiled")).otherwise(
            (pl.col("gpu_wait_share_unprofiled") >= threshold)
            & (pl.col("host_ns_per_kernel_unprofiled") > pl.col("gpu_ns_per_kernel")).fill_null(False)).alias("cpu_bound"),
    )


def verdict(steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank, from :func:`launches` per step (with ``cpu_bound``): ``rank, steps,
    cpu_bound_steps, gpu_wait_share`` (host-bound idle over the summed step time),
    ``host_ns_per_kernel`` and ``gpu_ns_per_kernel`` (summed over the steps, over all launched
    items), ``cuda_graphs`` and ``cpu_bound`` (the rule applied to those sums)."""
    if steps.height == 0 or "host_ns" not in steps.columns:
        return pl.DataFrame(schema={"rank": pl.Int32, "steps": pl.UInt32, "cpu_bound_steps": pl.UInt32, "gpu_wait_share": pl.Float64,
                                    "host_ns_per_kernel": pl.Int64, "gpu_ns_per_kernel": pl.Int64, "cuda_graphs": pl.Boolean,
                                    "cpu_bound": pl.Boolean})
    launched = pl.col("launched").sum()
    rule = lambda wait, host: ((pl.col(wait) >= LAUNCH_BOUND_SHARE) & (pl.col(host) > pl.col("gpu_ns_per_kernel")).fill_null(False))  # noqa: E731
    out = (
        steps.group_by("rank")
        .agg(
            pl.len().alias("steps"),
            pl.col("cpu_bound").sum().cast(pl.UInt32).alias("cpu_bound_steps"),
            (pl.col("idle_host_bound_ns").sum() / pl.col("duration_ns").sum()).alias("gpu_wait_share"),
            pl.when(launched > 0).then(pl.col("host_ns").sum() // launched).alias("host_ns_per_kernel"),
            pl.when(launched > 0).then((pl.col("duration_ns") - pl.col("idle_ns")).sum() // launched).alias("gpu_ns_per_kernel"),
            pl.col("cuda_graphs").any(),
            *([
                (pl.col("idle_host_bound_ns") - pl.col("profiler_overhead_ns")).clip(lower_bound=0).sum().alias("__wait"),
                pl.col("unprofiled_estimate_ns").sum().alias("__est"),
                pl.col("unprofiled_estimate_ns").is_null().any().alias("__none"),
                pl.when(launched > 0).then((pl.col("host_ns") - pl.col("profiler_host_ns")).clip(lower_bound=0).sum() // launched)
                .alias("host_ns_per_kernel_unprofiled"),
            ] if "unprofiled_estimate_ns" in steps.columns else []),
        )
        .with_columns(rule("gpu_wait_share", "host_ns_per_kernel").alias("cpu_bound"))
        .sort("rank")
    )
    if "__est" not in out.columns:
        return out
    return out.with_columns(
        pl.when(~pl.col("__none") & (pl.col("__est") > 0)).then(pl.col("__wait") / pl.col("__est")).alias("gpu_wait_share_unprofiled"),
    ).with_columns(
        pl.col("cpu_bound").alias("cpu_bound_profiled"),
        pl.when(pl.col("gpu_wait_share_unprofiled").is_null()).then(pl.col("cpu_bound"))
        .otherwise(rule("gpu_wait_share_unprofiled", "host_ns_per_kernel_unprofiled")).alias("cpu_bound"),
    ).drop("__wait", "__est", "__none")




def _points(pairs: pl.LazyFrame) -> pl.LazyFrame:
    """+1 at each launch, −1 at each start (``__q``) and at each end (``__o``)."""
    key = ["rank", "pid", "stream"]
    return pl.concat([
        pairs.select(*key, pl.col("launch_ns").alias("t_ns"), pl.lit(1, pl.Int64).alias("__q"), pl.lit(1, pl.Int64).alias("__o")),
        pairs.select(*key, pl.col("start_ns").alias("t_ns"), pl.lit(-1, pl.Int64).alias("__q"), pl.lit(0, pl.Int64).alias("__o")),
        pairs.select(*key, pl.col("end_ns").alias("t_ns"), pl.lit(0, pl.Int64).alias("__q"), pl.lit(-1, pl.Int64).alias("__o")),
    ])


def queue_series(pairs: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, pid, stream): ``t_ns, queued, outstanding`` at every instant either changes
    (the values after every change at that instant; each holds until the next row)."""
    key = ["rank", "pid", "stream"]
    return (
        _points(pairs)
        .group_by(*key, "t_ns")
        .agg(pl.col("__q").sum(), pl.col("__o").sum())
        .sort(*key, "t_ns")
        .with_columns(
            pl.col("__q").cum_sum().over(key).alias("queued"),
            pl.col("__o").cum_sum().over(key).alias("outstanding"),
        )
        .select(*key, "t_ns", "queued", "outstanding")
    )


def queue_summary(pairs: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, pid, stream): ``launched``; time-weighted mean and max of ``queued`` and
    ``outstanding`` from the first launch to the last end; and HTA's statistics of the queued
    count (``hta_count``, ``hta_mean``, ``hta_std``, ``hta_min``, ``hta_p25``, ``hta_p50``,
    ``hta_p75``, ``hta_max``): over the value after each launch and each start, one per event
    (a launch and a start at the same instant: the launch first), not weighted by time."""
    key = ["rank", "pid", "stream"]
    series = queue_series(pairs).with_columns(
        (pl.col("t_ns").shift(-1).over(key) - pl.col("t_ns")).fill_null(0).alias("__dt")
    )
    timed = series.group_by(key).agg(
        ((pl.col("queued") * pl.col("__dt")).sum() / pl.col("__dt").sum()).alias("queued_mean"),
        pl.col("queued").max().alias("queued_max"),
        ((pl.col("outstanding") * pl.col("__dt")).sum() / pl.col("__dt").sum()).alias("outstanding_mean"),
        pl.col("outstanding").max().alias("outstanding_max"),
        (pl.col("t_ns").max() - pl.col("t_ns").min()).alias("span_ns"),
    )
    rows = (
        _points(pairs).filter(pl.col("__q") != 0)
        .sort([*key, "t_ns", "__q"], descending=[False, False, False, False, True])
        .with_columns(pl.col("__q").cum_sum().over(key).alias("__v"))
        .group_by(key)
        .agg(
            (pl.col("__q") == 1).sum().cast(pl.Int64).alias("launched"),
            pl.len().cast(pl.Int64).alias("hta_count"),
            pl.col("__v").mean().alias("hta_mean"),
            pl.col("__v").std().alias("hta_std"),
            pl.col("__v").min().alias("hta_min"),
            pl.col("__v").quantile(0.25, interpolation="linear").alias("hta_p25"),
            pl.col("__v").quantile(0.5, interpolation="linear").alias("hta_p50"),
            pl.col("__v").quantile(0.75, interpolation="linear").alias("hta_p75"),
            pl.col("__v").max().alias("hta_max"),
        )
    )
    return rows.join(timed, on=key, how="left").select(
        *key, "launched", "span_ns", "queued_mean", "queued_max", "outstanding_mean", "outstanding_max",
        "hta_count", "hta_mean", "hta_std", "hta_min", "hta_p25", "hta_p50", "hta_p75", "hta_max",
    ).sort(key)


# ---------------------------------------------------------------------------------------------
# per-rank tables for the engine (engine.rank.EXTRAS): computed in the rank worker, compact


def rank_steps(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame, source: str) -> pl.DataFrame:
    """:func:`step_table` of the ranks in ``events``."""
    return step_table(events, gpu, windows, steps)


def rank_pairs(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame, source: str) -> pl.DataFrame:
    """:func:`launch_pairs` with the ``step`` each item starts in (null: in no step window)."""
    pairs = launch_pairs(events.lazy(), gpu.lazy()).collect(engine=query_engine())
    win = windows.select("rank", "step", "wstart_ns", "wend_ns").sort("wstart_ns")
    return (
        pairs.sort("start_ns")
        .join_asof(win, left_on="start_ns", right_on="wstart_ns", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("start_ns") < pl.col("wend_ns")).then(pl.col("step")).alias("step"))
        .select("rank", "step", *PAIR_COLUMNS[1:])
        .sort("rank", "launch_ns", "start_ns")
    )


def rank_queue(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame, source: str) -> pl.DataFrame:
    """:func:`queue_summary` of the ranks in ``events``."""
    return queue_summary(launch_pairs(events.lazy(), gpu.lazy())).collect(engine=query_engine())


def rank_queue_series(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame, source: str) -> pl.DataFrame:
    """:func:`queue_series` of the ranks in ``events``."""
    return queue_series(launch_pairs(events.lazy(), gpu.lazy())).collect(engine=query_engine())


# The Python verbs over these tables (``traceanalyzer.launches``, ``traceanalyzer.queue_length``)
# are in :mod:`traceanalyzer.api`: classifiers take frames, never a path.
