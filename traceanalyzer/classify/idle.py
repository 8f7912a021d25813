"""Why the GPU sat idle: each idle segment of the partition split by cause.

Causes, by priority where several hold at once:

* ``bubble``: a pipeline-parallel point-to-point transfer is outstanding (its launch call has
  started and its kernel has not finished) on a rank whose trace shows pipeline parallelism
  (a send/recv collective in a group labelled PP, see :mod:`.comm`);
* ``sync``: the host is inside a synchronisation: ``cudaStreamSynchronize`` /
  ``cudaDeviceSynchronize`` / ``cudaEventSynchronize`` (and the HIP / driver equivalents),
  ``aten::item`` / ``aten::_local_scalar_dense`` (``.item()``), or a CUPTI synchronisation record;
* ``host_bound``: the GPU was starved: the launch call of the next GPU work (the work that
  ends the idle gap) had not started yet. Only the part of the gap before that launch counts;
  the rest (launch latency, or work queued behind a dependency) is ``other``;
* ``other``: everything else.

One boundary sweep (:func:`.intervals.segments`) over GPU work plus the cause intervals, so
the four parts of a step sum exactly to its ``idle_ns``.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.intervals import segments

CAUSES = ["host_bound", "sync", "bubble", "other"]
SYNC_RUNTIME = r"(?i)^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize|^cu(Stream|Ctx|Event)Synchronize|^hipStreamWaitEvent_sync"
SYNC_OPS = ["aten::item", "aten::_local_scalar_dense"]


def launch_times(events: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """GPU work (``rank, start_ns, end_ns, correlation, external_id``) with ``launch_ns``: the
    start of its launch call (by correlation), else of the op that launched it (External id)."""
    launches = (
        events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .group_by("rank", "correlation")
        .agg(pl.col("start_ns").min().alias("__l"))
    )
    ops = (
        events.filter(pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("external_id").is_not_null())
        .group_by("rank", "external_id")
        .agg(pl.col("start_ns").min().alias("__o"))
    )
    return (
        gpu.join(launches, on=["rank", "correlation"], how="left")
        .join(ops, on=["rank", "external_id"], how="left")
        .with_columns(pl.coalesce("__l", "__o").alias("launch_ns"))
        .drop("__l", "__o")
    )


def idle_split(
    events: pl.DataFrame,
    gpu: pl.DataFrame,
    windows: pl.DataFrame,
    coll: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (rank, step): ``idle_<cause>_ns`` for every cause in ``CAUSES`` (sum = idle_ns)."""
    ev = events.lazy()
    win = windows.lazy().select("rank", "step", "wstart_ns", "wend_ns")
    work = gpu.lazy().select("rank", "start_ns", "end_ns", "correlation", "external_id")
    busy = work.select("rank", "start_ns", "end_ns", pl.lit("busy").alias("cls"))
    # idle gaps of the partition (GPU boundaries and window edges only)
    gaps = segments(busy, win, ["busy"]).filter(pl.col("n_busy") == 0).select("rank", "step", "t0", "t1")
    # the work that ends each gap, and when its launch began
    nxt = (
        launch_times(ev, work)
        .group_by("rank", "start_ns")
        .agg(pl.col("launch_ns").min())
        .rename({"start_ns": "t1"})
    )
    starve = (
        gaps.join(nxt, on=["rank", "t1"], how="left")
        .filter(pl.col("launch_ns") > pl.col("t0"))
        .select("rank", pl.col("t0").alias("start_ns"), pl.min_horizontal("launch_ns", "t1").alias("end_ns"), pl.lit("starve").alias("cls"))
    )
    sync = ev.filter(
        ((pl.col("kind") == "runtime") & pl.col("name").str.contains(SYNC_RUNTIME))
        | ((pl.col("kind") == "cpu_op") & pl.col("name").is_in(SYNC_OPS))
        | (pl.col("kind") == "gpu_sync")
    ).select("rank", "start_ns", "end_ns", pl.lit("sync").alias("cls"))
    parts = [busy, starve, sync]
    if coll is not None and coll.height:
        p2p = coll.lazy().filter((pl.col("dim") == "PP") & (pl.col("coll_type") == "send_recv"))
        pp = (
            launch_times(ev, gpu.lazy().filter(pl.col("cls") == "comm").select("rank", "start_ns", "end_ns", "correlation", "external_id"))
            .join(p2p.select("rank", "start_ns", "end_ns"), on=["rank", "start_ns", "end_ns"], how="semi")
            .select("rank", pl.coalesce("launch_ns", "start_ns").alias("start_ns"), "end_ns", pl.lit("bubble").alias("cls"))
        )
        parts.append(pp)
    seg = segments(pl.concat(parts, how="vertical_relaxed"), win, ["busy", "starve", "sync", "bubble"])
    cause = (
        pl.when(pl.col("n_bubble") > 0)
        .then(pl.lit("bubble"))
        .when(pl.col("n_sync") > 0)
        .then(pl.lit("sync"))
        .when(pl.col("n_starve") > 0)
        .then(pl.lit("host_bound"))
        .otherwise(pl.lit("other"))
    )
    sums = (
        seg.filter(pl.col("n_busy") == 0)
        .with_columns(cause.alias("cause"), (pl.col("t1") - pl.col("t0")).alias("len_ns"))
        .group_by("rank", "step")
        .agg(*[pl.col("len_ns").filter(pl.col("cause") == c).sum().alias(f"idle_{c}_ns") for c in CAUSES])
    )
    return (
        win.select("rank", "step")
        .join(sums, on=["rank", "step"], how="left")
        .with_columns(pl.col(f"idle_{c}_ns").fill_null(0) for c in CAUSES)
        .collect()
    )
