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
from traceanalyzer.classify.intervals import first_active, segments
from traceanalyzer.queries import query_engine
DATALOADER_RANGE = r"^enumerate\(DataLoader\)#.*__next__"
OPTIMIZER_RANGE = r"^Optimizer\.(step|zero_grad)#"
SYNC_RUNTIME = r"(?i)^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize|^cu(Stream|Ctx|Event)Synchronize|^hipStreamWaitEvent_sync"
SYNC_OPS = ["aten::item", "aten::_local_scalar_dense"]
#: up to this many threads holding host-bound idle, their ranges are picked by equality tests;
#: more, by a join
FEW_THREADS = 16


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
    by_call = gpu.join(launches, on=["rank", "correlation"], how="left").collect(engine=query_engine())
    # the launching ops are read only for work that no launch call (or its thread) accounts for:
    # usually none, and then the group-by over every host op is not run
    unlaunched = pl.col("__l").is_null() | (pl.col("__lt").is_null() if tid else pl.lit(False))
    if by_call.select((unlaunched & pl.col("external_id").is_not_null()).any()).item():
        out = by_call.lazy().join(ops, on=["rank", "external_id"], how="left")
    else:
        out = by_call.lazy().with_columns(pl.lit(None, pl.Int64).alias("__o"), *([pl.lit(None, pl.String).alias("__ot")] if tid else []))
    out = out.with_columns(pl.coalesce("__l", "__o").alias("launch_ns")).drop("__l", "__o")
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
    cause = first_active([("bubble", "bubble"), ("sync", "sync"), ("starve", "host_bound")], "other")
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
    ``launch_tid`` of the starve interval holding them) was inside of.

    By measure rather than a sweep: for the causes in priority order, the union of the thread's
    ranges of the first one, of the first two, of the first three (:func:`_union`); the time a
    union covers inside ``[t0, t1)`` is ``F(t1) - F(t0)``, ``F(x)`` its covered time before
    ``x`` (:func:`_covered_before`). A cause gets what its union adds to the one before it, and
    ``untraced`` the rest: the same integer nanoseconds as a boundary sweep of the ranges
    inside the segments, with no segment per range boundary."""
    # starve intervals of one rank never overlap (gaps of one timeline): the one at or before t0 holds it
    held = (
        host_seg.select("rank", "step", "t0", "t1")
        .sort("t0")
        .join_asof(starve.select("rank", pl.col("start_ns").alias("__s"), "launch_tid").sort("__s"),
                   left_on="t0", right_on="__s", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(pl.col("launch_tid").fill_null(""))
        .collect(engine=query_engine())
    )
    # one key per (rank, thread) that holds host-bound idle
    keys = held.select("rank", "launch_tid").unique().with_row_index("__k").with_columns(pl.col("__k").cast(pl.Int64))
    held = held.join(keys, on=["rank", "launch_tid"], how="left", maintain_order="left").rename({"__k": "key"})
    # the ranges of those threads, with their key: for a few threads by equality tests (no hash
    # of every row's thread); the causes' names matched on the annotations only
    if keys.height <= FEW_THREADS:
        key = pl.lit(None, pl.Int64)
        for k, r, t in keys.select("__k", "rank", "launch_tid").iter_rows():
            same = (pl.col("rank") == r) & (pl.col("tid") == t)  # a thread never null: "" (none known) matches none
            key = pl.when(same).then(pl.lit(k, pl.Int64)).otherwise(key)
        mine = events.with_columns(key.alias("key")).filter(pl.col("key").is_not_null())
    else:
        mine = events.join(
            keys.lazy().select("rank", pl.col("launch_tid").alias("tid"), pl.col("__k").alias("key")), on=["rank", "tid"], how="inner"
        )
    mine = mine.filter(pl.col("end_ns") > pl.col("start_ns"))
    host_iv = pl.concat([
        mine.filter(pl.col("kind") == "annotation").select(
            "key", "start_ns", "end_ns",
            pl.when(pl.col("name").str.contains(DATALOADER_RANGE)).then(pl.lit("dataloader"))
            .when(pl.col("name").str.contains(OPTIMIZER_RANGE)).then(pl.lit("optimizer"))
            .alias("cls"),
        ).filter(pl.col("cls").is_not_null()),
        mine.filter(pl.col("kind").is_in(["cpu_op", "runtime"])).select("key", "start_ns", "end_ns", pl.lit("ops").alias("cls")),
    ]).collect(engine=query_engine())
    length = held.get_column("t1") - held.get_column("t0")
    present = set(host_iv.get_column("cls").unique().to_list())
    covered = []  # per segment, the time each nested union covers in it
    for n in range(1, len(HOST_CAUSES)):
        if HOST_CAUSES[n - 1] not in present:  # the same union as the one before
            covered.append(covered[-1] if covered else length * 0)
            continue
        union = _union(host_iv.lazy().filter(pl.col("cls").is_in(HOST_CAUSES[:n])))
        covered.append(_covered_before(held, "t1", union) - _covered_before(held, "t0", union))
    parts = [covered[0], *(covered[i] - covered[i - 1] for i in range(1, len(covered))), length - covered[-1]]
    return (
        held.lazy().select("rank", "step", *[p.alias(f"idle_host_{c}_ns") for p, c in zip(parts, HOST_CAUSES)])
        .group_by("rank", "step")
        .agg(pl.col(f"idle_host_{c}_ns").sum() for c in HOST_CAUSES)
    )


def _union(intervals: pl.LazyFrame) -> pl.DataFrame:
    """The union of ``intervals`` (``key, start_ns, end_ns``, all non-empty) per key as disjoint
    ranges ``key, __s, __e`` in order, with ``__before``: the length of the key's ranges before
    each one."""
    x = intervals.select("key", "start_ns", "end_ns").sort("start_ns").collect(engine=query_engine())
    x = x.lazy().sort("key", maintain_order=True)  # two stable sorts: (key, start) order
    reach = pl.col("end_ns").cum_max().shift(1).over("key")  # the furthest end among the earlier ranges of the key
    # a range that starts past every earlier one's end opens a union range; the one before the
    # next opening (or the key's last) closes it, at the furthest end so far. No group-by: polars
    # 1.33's streaming engine stops on this one (an internal error)
    x = x.with_columns(
        ((pl.col("start_ns") > reach) | reach.is_null()).alias("__open"),
        pl.col("end_ns").cum_max().over("key").alias("__reach"),
    ).collect(engine=query_engine())
    opens = x.filter(pl.col("__open")).select("key", pl.col("start_ns").alias("__s"))
    closes = x.filter(pl.col("__open").shift(-1).fill_null(True)).select(pl.col("__reach").alias("__e"))
    return (
        pl.concat([opens, closes], how="horizontal")
        .with_columns(((pl.col("__e") - pl.col("__s")).cum_sum() - (pl.col("__e") - pl.col("__s"))).over("key").alias("__before"))
    )


def _covered_before(points: pl.DataFrame, at: str, union: pl.DataFrame) -> pl.Series:
    """For each row of ``points`` (``key`` and the time column ``at``), the time the key's
    ``union`` (:func:`_union`) covers before that time; in ``points``' order."""
    return (
        points.lazy().select("key", pl.col(at).alias("__x")).with_row_index("__i")
        .sort("__x")
        .join_asof(union.lazy().sort("__s"), left_on="__x", right_on="__s", by="key", strategy="backward", check_sortedness=False)
        .sort("__i")
        .select((pl.col("__before") + pl.min_horizontal(pl.col("__x"), pl.col("__e")) - pl.col("__s")).fill_null(0).cast(pl.Int64))
        .collect(engine=query_engine())
        .to_series()
    )
