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

Idle gaps are those of the rank's whole GPU timeline, cut by the step windows: a gap that
crosses a step boundary (the host sleeping at the end of one step, then starting the next) is
host-bound up to the launch of the work that ends it in every step it spans, and a gap after the
rank's last GPU work (nothing launched before the last step ends) is host-bound to its end.

Host-bound idle is split further by what the launching host thread was doing
(:data:`HOST_CAUSES`, ``idle_host_<cause>_ns``, summing exactly to ``idle_host_bound_ns``):
the thread is the one that launched the work ending the gap (for a gap no work ends, the one
that launched the work before it). By priority:

* ``dataloader``: inside a DataLoader ``__next__`` range (``enumerate(DataLoader)#...``);
* ``optimizer``: inside an ``Optimizer.step#...`` / ``Optimizer.zero_grad#...`` range;
* ``ops``: inside another recorded host op or runtime call (dispatch and launch overhead);
* ``untraced``: in no recorded op or range: Python work, sleeps, I/O.

One boundary sweep (:func:`.intervals.segments`) over GPU work plus the cause intervals, so
the four parts of a step sum exactly to its ``idle_ns``.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.buckets import HOST_CAUSES  # noqa: F401 - the vocabulary, re-exported
from traceanalyzer.buckets import IDLE_CAUSES as CAUSES
from traceanalyzer.classify.intervals import segments
from traceanalyzer.queries import query_engine
DATALOADER_RANGE = r"^enumerate\(DataLoader\)#.*__next__"
OPTIMIZER_RANGE = r"^Optimizer\.(step|zero_grad)#"
SYNC_RUNTIME = r"(?i)^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize|^cu(Stream|Ctx|Event)Synchronize|^hipStreamWaitEvent_sync"
SYNC_OPS = ["aten::item", "aten::_local_scalar_dense"]


def launch_times(events: pl.LazyFrame, gpu: pl.LazyFrame, tid: bool = False) -> pl.LazyFrame:
    """GPU work (``rank, start_ns, end_ns, correlation, external_id``) with ``launch_ns``: the
    start of its launch call (by correlation), else of the op that launched it (External id);
    with ``tid``, also ``launch_tid``: the host thread of that call or op."""
    launches = (
        events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .group_by("rank", "correlation")
        .agg(pl.col("start_ns").min().alias("__l"), *([pl.col("tid").sort_by("start_ns").first().alias("__lt")] if tid else []))
    )
    ops = (
        events.filter(pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("external_id").is_not_null())
        .group_by("rank", "external_id")
        .agg(pl.col("start_ns").min().alias("__o"), *([pl.col("tid").sort_by("start_ns").first().alias("__ot")] if tid else []))
    )
    out = (
        gpu.join(launches, on=["rank", "correlation"], how="left")
        .join(ops, on=["rank", "external_id"], how="left")
        .with_columns(pl.coalesce("__l", "__o").alias("launch_ns"))
        .drop("__l", "__o")
    )
    if tid:
        out = out.with_columns(pl.when(pl.col("__lt").is_not_null()).then(pl.col("__lt")).otherwise(pl.col("__ot")).alias("launch_tid")).drop("__lt", "__ot")
    return out


def idle_split(
    events: pl.DataFrame,
    gpu: pl.DataFrame,
    windows: pl.DataFrame,
    coll: pl.DataFrame | None = None,
    launched: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (rank, step): ``idle_<cause>_ns`` for every cause in ``CAUSES`` (sum = idle_ns).
    ``launched``: :func:`launch_times` of the GPU work with ``tid``, when already computed."""
    ev = events.lazy()
    win = windows.lazy().select("rank", "step", "wstart_ns", "wend_ns")
    work = gpu.lazy().select("rank", "start_ns", "end_ns", "correlation", "external_id")
    busy = work.select("rank", "start_ns", "end_ns", pl.lit("busy").alias("cls"))
    launched = launch_times(ev, work, tid=True) if launched is None else launched.lazy()
    # idle gaps of the rank's whole GPU timeline (not cut at window edges: a gap that crosses a
    # step boundary ends at the work whose launch it waited for), from the first window's start
    # to the last window's end
    edges = win.group_by("rank").agg(pl.col("wstart_ns").min().alias("__lo"), pl.col("wend_ns").max().alias("__hi"))
    ordered = (
        launched.sort("rank", "start_ns")
        .with_columns(
            pl.col("end_ns").cum_max().shift(1).over("rank").alias("__prev_end"),
            pl.col("launch_tid").forward_fill().shift(1).over("rank").alias("__prev_tid"),
        )
        .join(edges, on="rank", how="inner")
        .collect(engine=query_engine())  # read by three queries below: computed once (polars does not share it across them)
        .lazy()
    )
    inner = ordered.filter(pl.col("start_ns") > pl.coalesce("__prev_end", "__lo")).select(
        "rank", pl.coalesce("__prev_end", "__lo").alias("t0"), pl.col("start_ns").alias("t1"), pl.lit(False).alias("__last"),
    )
    tail = ordered.group_by("rank").agg(
        pl.col("end_ns").max().alias("t0"), pl.col("__hi").first().alias("t1"),
        pl.col("launch_tid").sort_by("start_ns").drop_nulls().last().alias("launch_tid"),
    ).filter(pl.col("t1") > pl.col("t0"))
    # the work that ends each gap: when its launch began, and on which thread
    nxt = (
        ordered.group_by("rank", "start_ns")
        .agg(
            pl.col("launch_ns").min(),
            pl.col("launch_tid").sort_by("launch_ns", nulls_last=True).first(),
            pl.col("__prev_tid").first(),
        )
        .rename({"start_ns": "t1"})
        .with_columns(pl.coalesce("launch_tid", "__prev_tid").alias("launch_tid"))
        .drop("__prev_tid")
    )
    starve = pl.concat(
        [
            inner.join(nxt, on=["rank", "t1"], how="left")
            .filter(pl.col("launch_ns") > pl.col("t0"))
            .select("rank", pl.col("t0").alias("start_ns"), pl.min_horizontal("launch_ns", "t1").alias("end_ns"), "launch_tid"),
            # nothing launched after the rank's last GPU work: the GPU waited on the host to the end
            tail.select("rank", pl.col("t0").alias("start_ns"), pl.col("t1").alias("end_ns"), "launch_tid"),
        ],
        how="vertical_relaxed",
    ).with_columns(pl.lit("starve").alias("cls")).collect(engine=query_engine()).lazy()  # read by the sweep and by host_split
    sync = ev.filter(
        ((pl.col("kind") == "runtime") & pl.col("name").str.contains(SYNC_RUNTIME))
        | ((pl.col("kind") == "cpu_op") & pl.col("name").is_in(SYNC_OPS))
        | (pl.col("kind") == "gpu_sync")
    ).select("rank", "start_ns", "end_ns", pl.lit("sync").alias("cls"))
    parts = [busy, starve.select("rank", "start_ns", "end_ns", "cls"), sync]
    # pipeline-parallel transfers: the launch times of the communication kernels only when there are some
    p2p = None if coll is None else coll.filter((pl.col("dim") == "PP") & (pl.col("coll_type") == "send_recv"))
    if p2p is not None and p2p.height:
        pp = (
            launch_times(ev, gpu.lazy().filter(pl.col("cls") == "comm").select("rank", "start_ns", "end_ns", "correlation", "external_id"))
            .join(p2p.lazy().select("rank", "start_ns", "end_ns"), on=["rank", "start_ns", "end_ns"], how="semi")
            .select("rank", pl.coalesce("launch_ns", "start_ns").alias("start_ns"), "end_ns", pl.lit("bubble").alias("cls"))
        )
        parts.append(pp)
    # materialised: the sweep reads its intervals twice (starts and ends)
    seg = segments(pl.concat(parts, how="vertical_relaxed").collect(engine=query_engine()).lazy(), win, ["busy", "starve", "sync", "bubble"])
    cause = (
        pl.when(pl.col("n_bubble") > 0)
        .then(pl.lit("bubble"))
        .when(pl.col("n_sync") > 0)
        .then(pl.lit("sync"))
        .when(pl.col("n_starve") > 0)
        .then(pl.lit("host_bound"))
        .otherwise(pl.lit("other"))
    )
    idle_seg = (
        seg.filter(pl.col("n_busy") == 0)
        .with_columns(cause.alias("cause"), (pl.col("t1") - pl.col("t0")).alias("len_ns"))
        .collect(engine=query_engine())
    )
    sums = idle_seg.lazy().group_by("rank", "step").agg(
        *[pl.col("len_ns").filter(pl.col("cause") == c).sum().alias(f"idle_{c}_ns") for c in CAUSES]
    )
    host = host_split(ev, idle_seg.lazy().filter(pl.col("cause") == "host_bound"), starve)
    return (
        win.select("rank", "step")
        .join(sums, on=["rank", "step"], how="left")
        .join(host, on=["rank", "step"], how="left")
        .with_columns(pl.col(f"idle_{c}_ns").fill_null(0) for c in CAUSES)
        .with_columns(pl.col(f"idle_host_{c}_ns").fill_null(0).cast(pl.Int64) for c in HOST_CAUSES)
        .collect(engine=query_engine())
    )


def host_split(events: pl.LazyFrame, host_seg: pl.LazyFrame, starve: pl.LazyFrame) -> pl.LazyFrame:
    """Per (rank, step): ``idle_host_<cause>_ns`` for every cause in :data:`HOST_CAUSES`: the
    host-bound segments (``rank, step, t0, t1``) cut by what their launching thread (the
    ``launch_tid`` of the starve interval holding them) was inside of."""
    # starve intervals of one rank never overlap (gaps of one timeline): the one at or before t0 holds it
    held = (
        host_seg.select("rank", "step", "t0", "t1")
        .sort("t0")
        .join_asof(starve.select("rank", pl.col("start_ns").alias("__s"), "launch_tid").sort("__s"),
                   left_on="t0", right_on="__s", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(pl.col("launch_tid").fill_null(""))
        .with_row_index("__id")
        .with_columns(pl.col("__id").cast(pl.Int64))
        .collect(engine=query_engine())
    )
    # one key per (rank, thread) that holds host-bound idle
    keys = held.select("rank", "launch_tid").unique().with_row_index("__k").with_columns(pl.col("__k").cast(pl.Int64))
    held = held.join(keys, on=["rank", "launch_tid"], how="left")
    cls = (
        pl.when((pl.col("kind") == "annotation") & pl.col("name").str.contains(DATALOADER_RANGE)).then(pl.lit("dataloader"))
        .when((pl.col("kind") == "annotation") & pl.col("name").str.contains(OPTIMIZER_RANGE)).then(pl.lit("optimizer"))
        .when(pl.col("kind").is_in(["cpu_op", "runtime"])).then(pl.lit("ops"))
    )
    host_iv = (
        events.filter(pl.col("kind").is_in(["cpu_op", "runtime", "annotation"]))
        .select("rank", pl.col("tid").alias("launch_tid"), "kind", "name", "start_ns", "end_ns")
        .join(keys.lazy(), on=["rank", "launch_tid"], how="inner")
        .with_columns(cls.alias("cls"))
        .filter(pl.col("cls").is_not_null())
        .select(pl.col("__k").alias("key"), "start_ns", "end_ns", "cls")
    )
    # only the ranges that overlap a host-bound segment of their key change the sweep inside those
    # segments (the others add boundaries outside them and open and close outside them). A key's
    # segments are disjoint, so a range [s, e) overlaps one exactly when the last segment that
    # starts before e ends after s.
    spans = held.lazy().select(pl.col("__k").alias("key"), pl.col("t0").alias("__t0"), pl.col("t1").alias("__t1")).sort("__t0")
    host_iv = (
        host_iv.filter(pl.col("end_ns") > pl.col("start_ns"))
        .with_columns((pl.col("end_ns") - 1).alias("__q"))
        .sort("__q")
        .join_asof(spans, left_on="__q", right_on="__t0", by="key", strategy="backward", check_sortedness=False)
        .filter(pl.col("__t1") > pl.col("start_ns"))
        .select("key", "start_ns", "end_ns", "cls")
    )
    sub = segments(
        host_iv,
        held.lazy().select(pl.col("__k").alias("key"), pl.col("__id").alias("step"), pl.col("t0").alias("wstart_ns"), pl.col("t1").alias("wend_ns")),
        HOST_CAUSES[:3],
        key="key",
    )
    sub_cause = (
        pl.when(pl.col("n_dataloader") > 0).then(pl.lit("dataloader"))
        .when(pl.col("n_optimizer") > 0).then(pl.lit("optimizer"))
        .when(pl.col("n_ops") > 0).then(pl.lit("ops"))
        .otherwise(pl.lit("untraced"))
    )
    return (
        sub.with_columns(sub_cause.alias("__c"), (pl.col("t1") - pl.col("t0")).alias("__len"))
        .join(held.lazy().select(pl.col("__id").alias("step"), pl.col("rank").alias("__rank"), pl.col("step").alias("__step")), on="step", how="inner")
        .group_by(pl.col("__rank").alias("rank"), pl.col("__step").alias("step"))
        .agg(*[pl.col("__len").filter(pl.col("__c") == c).sum().alias(f"idle_host_{c}_ns") for c in HOST_CAUSES])
    )
