"""The dependency graph of a step: host threads, GPU streams and the edges between them.

Every timed event becomes points on a **chain**, a sequence of points in time order that can
only be walked forwards:

* a host thread (``rank, pid, tid``): the start and end of every CPU op, ``record_function``
  range and runtime call that starts in the step's host window; consecutive points are joined by
  an edge that weighs the time between them and belongs to the innermost op or call open there
  (``host_op``); time inside no op or call — the own time of a ``record_function`` range, or
  between ranges: Python between ops — is ``host_gap``. Inside a *blocking* runtime call
  (device/stream/event synchronisation, synchronous copies) the edge weighs nothing: the host
  is waiting, and the time is carried by what it waits for.
* a GPU stream (``rank, device, stream``): the start and end of every kernel, memcpy and memset
  of the step's GPU window, in stream order. The edge inside an activity weighs its duration;
  the gap before it weighs the gap only when the previous activity on the stream is what held it
  back (see *binding* below). A collective whose instance is matched on all ranks of its group
  gets a third point where the last rank arrived: before it the kernel waits (weight 0), after it
  the data moves.

Edges between chains (``cross`` edges), each from an earlier point to a later one (at the same
instant: to the chain with the higher id, so that the graph has no cycle; collective edges
excepted, see :func:`build`):

* **launch**: the runtime call's start -> the activity's start (correlation id);
* **host sync**: the end of the last activity of each stream of the rank that ended while a
  blocking call was in progress -> the end of that call (the call returned once the GPU was
  done);
* **stream wait** (inferred): an activity that started more than ``wait_slack_ns`` after both
  its launch call ended and its stream predecessor ended waited on something else: the
  activity on another stream of the rank that ended last before it started (and after the
  other two) is taken as what it waited for (``cudaStreamWaitEvent`` on a recorded event);
* **thread**: from the start of a host gap of one thread to the first op another thread of the
  same process starts inside it, and from that thread's last op end inside it back to the gap's
  end (the main thread waiting in ``backward`` while autograd's worker thread runs it); such a
  gap weighs only the time when no thread of the process is inside an op (:mod:`.threads`);
* **collective** (several ranks only): the start of the last rank's kernel of a matched
  collective instance -> the point where every other rank's kernel of that instance could start
  moving data.

**Binding predecessor.** An activity can start only after its stream predecessor ended, its
launch call was issued and, for an inferred wait, the activity it waited on ended. The latest of
these is the one that held it back: only that edge weighs the delay up to the start (a launch
delay, a gap between kernels, or the wake-up after a wait); the others weigh nothing. This is
the rule of Holistic Trace Analysis' critical path (kernel launch delay vs kernel-kernel delay),
extended to waits.

Everything here is a polars expression over all points at once; no loop over events.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.critical_path import threads
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS

#: host kinds that become chain points (``python`` stack frames and ``other`` are left out)
HOST_KINDS = ["cpu_op", "annotation", "runtime"]
#: runtime calls during which the host waits for the GPU (CUDA and HIP spellings)
BLOCKING = (
    r"^(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|EventQuery|Memcpy|MemcpyAsync|MemcpyWithStream)$"
    r"|^cu(CtxSynchronize|StreamSynchronize|EventSynchronize)$"
)
#: an activity that started later than this after its launch and its stream predecessor waited
#: on another stream (default 10 µs: well above a launch's latency on the GPU)
WAIT_SLACK_NS = 10_000

#: a host gap shorter than this between two points of one thread is dispatch (``host_dispatch``), not a stall
DISPATCH_GAP_NS = 10_000

# point types, in the order points at the same instant are walked on one chain
END, READY, START = 0, 1, 2

def _windows(windows: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step: the host window (the step range; the whole trace for a rank without
    step markers, whose one step is the whole trace) and the GPU window."""
    return windows.select(
        "rank", "step", "wstart_ns", "wend_ns",
        pl.coalesce("cpu_start_ns", pl.lit(-(2**62), pl.Int64)).alias("hlo"),
        pl.coalesce("cpu_end_ns", pl.lit(2**62, pl.Int64)).alias("hhi"),
    )


def step_events(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The events of every step window, one row each with an ``eid``: host events starting in the
    step's host window, GPU activity starting in its GPU window. Zero-length events carry no
    time and are left out (as HTA does)."""
    win = _windows(windows)
    host = (
        events.lazy()
        .filter(pl.col("kind").is_in(HOST_KINDS) & (pl.col("end_ns") > pl.col("start_ns")))
        .select("rank", pl.col("kind").cast(pl.String), "pid", "tid", "name", "start_ns", "end_ns", "correlation")
        .sort("start_ns")
        .join_asof(win.lazy().sort("hlo"), left_on="start_ns", right_on="hlo", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("start_ns") <= pl.col("hhi"))
        .select(
            "step", "rank", pl.lit(True).alias("host"), "kind", "pid", "tid", pl.lit(None, pl.Int64).alias("stream"), "name",
            "start_ns", "end_ns", "correlation", pl.lit(None, pl.String).alias("cls"), pl.lit(None, pl.Int64).alias("stream_prev_end"),
        )
    )
    dev = (
        gpu.lazy()
        .filter(pl.col("kind").cast(pl.String).is_in(GPU_WORK_KINDS) & (pl.col("end_ns") > pl.col("start_ns")))
        .select("rank", pl.col("kind").cast(pl.String), "pid", "tid", "stream", "name", "start_ns", "end_ns", "correlation", "cls")
        .sort("start_ns")
        # the end of the previous activity on the stream, wherever it is (the previous step's
        # last kernel can hold back this step's first one)
        .with_columns(pl.col("end_ns").shift(1).over("rank", "pid", "stream").alias("stream_prev_end"))
        .join_asof(win.lazy().sort("wstart_ns"), left_on="start_ns", right_on="wstart_ns", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("start_ns") < pl.col("wend_ns"))
        .select(
            "step", "rank", pl.lit(False).alias("host"), "kind", "pid", "tid", "stream", "name", "start_ns", "end_ns", "correlation", "cls",
            "stream_prev_end",
        )
    )
    out = pl.concat([host, dev]).collect(engine=query_engine())
    return out.sort("step", "rank", "host", "start_ns").with_row_index("eid").with_columns(pl.col("eid").cast(pl.Int64))


def _chain_keys(ev: pl.DataFrame) -> pl.DataFrame:
    """``chain``: a dense id per (step, rank, thread) and (step, rank, device, stream)."""
    key = pl.struct("step", "rank", "host", "pid", pl.when(pl.col("host")).then(pl.col("tid")).otherwise(pl.col("stream").cast(pl.String)))
    return ev.with_columns(key.rank("dense").cast(pl.Int64).sub(1).alias("chain"))


def gpu_binding(ev: pl.DataFrame, infer_waits: bool = True, wait_slack_ns: int = WAIT_SLACK_NS) -> pl.DataFrame:
    """Per GPU activity (``eid``): its stream predecessor's end, its launch call, the activity it
    waited on (inferred) and which of them held it back (``binding``: ``stream`` / ``launch`` /
    ``wait`` / null for a first activity with no launch record)."""
    # prev_end: the stream predecessor's end, also when it lies before the step's window (then
    # it can hold the activity back, but has no point in this step's graph)
    g = ev.filter(~pl.col("host")).sort("chain", "start_ns").with_columns(
        pl.coalesce(pl.col("end_ns").shift(1).over("chain"), pl.col("stream_prev_end")).alias("prev_end"),
    )
    launches = ev.filter(pl.col("host") & (pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()).select(
        "step", "rank", "correlation", pl.col("eid").alias("launch_eid"), pl.col("start_ns").alias("launch_start"), pl.col("end_ns").alias("launch_end"),
    ).unique(["step", "rank", "correlation"], keep="first")
    g = g.join(launches, on=["step", "rank", "correlation"], how="left").with_columns(
        # a launch record after the activity started is no dependency (clock mismatch): dropped
        pl.when(pl.col("launch_start") <= pl.col("start_ns")).then(pl.col("launch_eid")).alias("launch_eid"),
    ).with_columns(
        pl.when(pl.col("launch_eid").is_not_null()).then(pl.col("launch_start")).alias("launch_start"),
        pl.when(pl.col("launch_eid").is_not_null()).then(pl.col("launch_end")).alias("launch_end"),
    )
    explained = pl.max_horizontal(pl.col("prev_end"), pl.col("launch_end").clip(upper_bound=pl.col("start_ns")))
    if infer_waits:
        ends = g.select("step", "rank", pl.col("chain").alias("wchain"), pl.col("eid").alias("wait_eid"), pl.col("end_ns").alias("wait_end"))
        chains = ends.select("step", "rank", "wchain").unique()
        # only an activity whose other constraints are known and left a gap: a first activity
        # with no launch record has nothing to measure the gap against
        late = g.filter(pl.col("start_ns") - explained > wait_slack_ns).select("eid", "step", "rank", "chain", "start_ns")
        cand = (
            late.join(chains, on=["step", "rank"])
            .filter(pl.col("wchain") != pl.col("chain"))
            .sort("start_ns")
            .join_asof(ends.sort("wait_end"), left_on="start_ns", right_on="wait_end", by=["step", "rank", "wchain"], strategy="backward",
                       check_sortedness=False)
            .filter(pl.col("wait_eid").is_not_null())
            .sort("eid", "wait_end", "wait_eid", descending=[False, True, False])
            .unique("eid", keep="first")
            .select("eid", "wait_eid", "wait_end")
        )
        g = g.join(cand, on="eid", how="left").with_columns(
            pl.when(pl.col("wait_end") > explained).then(pl.col("wait_eid")).alias("wait_eid"),
        ).with_columns(pl.when(pl.col("wait_eid").is_not_null()).then(pl.col("wait_end")).alias("wait_end"))
    else:
        g = g.with_columns(pl.lit(None, pl.Int64).alias("wait_eid"), pl.lit(None, pl.Int64).alias("wait_end"))
    binding = (
        pl.when(pl.col("wait_eid").is_not_null()).then(pl.lit("wait"))
        .when(pl.col("launch_eid").is_not_null() & (pl.col("prev_end").is_null() | (pl.col("launch_start") > pl.col("prev_end"))))
        .then(pl.lit("launch"))
        .when(pl.col("prev_end").is_not_null()).then(pl.lit("stream"))
    )
    return g.with_columns(binding.alias("binding")).select(
        "eid", "prev_end", "launch_eid", "launch_start", "wait_eid", "wait_end", "binding",
    )


def ready_points(ev: pl.DataFrame, coll: pl.DataFrame | None) -> pl.DataFrame:
    """Matched collectives: per kernel (``eid``) that started before the last rank of its
    instance, ``ready_ns`` (that rank's start) and ``from_eid`` (that rank's kernel)."""
    empty = pl.DataFrame(schema={"eid": pl.Int64, "ready_ns": pl.Int64, "from_eid": pl.Int64})
    if coll is None or not coll.height or coll["last_arrival_ns"].is_null().all():
        return empty
    keyed = ev.filter(~pl.col("host")).select("eid", "step", "rank", "stream", "start_ns")
    c = (
        coll.filter(pl.col("last_arrival_ns").is_not_null())
        .select("rank", "stream", "start_ns", "end_ns", "pg_name", "instance", "last_arrival_ns")
        .join(keyed, on=["rank", "stream", "start_ns"], how="inner")
    )
    arriver = (
        c.filter(pl.col("start_ns") == pl.col("last_arrival_ns"))
        .sort("rank")
        .unique(["pg_name", "instance"], keep="first")
        .select("pg_name", "instance", pl.col("eid").alias("from_eid"), pl.col("step").alias("from_step"))
    )
    return (
        c.join(arriver, on=["pg_name", "instance"], how="inner")
        .filter((pl.col("last_arrival_ns") > pl.col("start_ns")) & (pl.col("last_arrival_ns") < pl.col("end_ns")) & (pl.col("step") == pl.col("from_step")))
        .select("eid", pl.col("last_arrival_ns").alias("ready_ns"), "from_eid")
        .unique("eid", keep="first")
    )


def build(
    events: pl.DataFrame,
    gpu: pl.DataFrame,
    windows: pl.DataFrame,
    coll: pl.DataFrame | None = None,
    *,
    infer_waits: bool = True,
    wait_slack_ns: int = WAIT_SLACK_NS,
    host_gaps: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """The graph of every step: ``(ev, points, cross)``.

    ``ev``: the step events (:func:`step_events`) with ``chain`` and, for GPU activity, ``bucket``.
    ``points``: one row per node, sorted by chain then time (row number = node id): ``chain, t,
    ptype, eid`` and, for the edge from the previous point of the chain to this one, ``w``
    (weight, ns), ``what`` and ``about`` (the eid it belongs to; null for Python between ops).
    ``cross``: edges between chains: ``src, dst`` (node ids), ``w``, ``what``, ``about``.
    ``host_gaps``: weigh the host's time outside every op and runtime call (Python: the own
    time of ``record_function`` ranges and the time between them); ``False`` weighs it 0, as
    HTA does (it has no node for ranges and joins top-level ops by weightless edges).
    ``coll``: matched collectives (:func:`traceanalyzer.classify.comm.match_instances`) to link
    ranks through; ``None`` keeps every rank on its own.
    """
    ev = _chain_keys(step_events(events, gpu, windows))
    bucket = (
        pl.when(pl.col("host")).then(pl.lit("host"))
        .when(pl.col("cls") == "comm").then(pl.lit("exposed_comm"))
        .when(pl.col("cls").is_in(["compute", "recompute"])).then(pl.col("cls"))
        .otherwise(pl.lit("other"))
    )
    blocking = pl.col("host") & (pl.col("kind") == "runtime") & pl.col("name").str.contains(BLOCKING)
    ev = ev.with_columns(bucket.alias("bucket"), blocking.alias("blocking"))
    bind = gpu_binding(ev, infer_waits, wait_slack_ns)
    ready = ready_points(ev, coll)

    # ---- points -------------------------------------------------------------------------
    base = ev.select("eid", "chain", "host", "start_ns", "end_ns")
    starts = base.select("eid", "chain", "host", pl.col("start_ns").alias("t"), pl.lit(START).alias("ptype"),
                         (-pl.col("end_ns")).alias("tb"))
    ends = base.select("eid", "chain", "host", pl.col("end_ns").alias("t"), pl.lit(END).alias("ptype"), (-pl.col("start_ns")).alias("tb"))
    readies = ready.join(base, on="eid").select("eid", "chain", "host", pl.col("ready_ns").alias("t"), pl.lit(READY).alias("ptype"),
                                                pl.lit(0, pl.Int64).alias("tb"))
    pts = (
        pl.concat([starts, ends, readies])
        .with_columns(pl.col("ptype").cast(pl.Int8))
        .sort("chain", "t", "ptype", "tb", "eid")
        .with_row_index("node")
        .with_columns(pl.col("node").cast(pl.Int64))
    )
    first = pl.col("chain") != pl.col("chain").shift(1)
    pts = pts.with_columns(
        pl.when(first.fill_null(True)).then(0).otherwise(pl.col("t") - pl.col("t").shift(1)).alias("dt"),
        first.fill_null(True).alias("first"),
    )
    # host: the innermost range open after each point (the last start at the same depth)
    depth = pl.when(pl.col("ptype") == START).then(1).otherwise(-1).cum_sum().over("chain")
    pts = pts.with_columns(pl.when(pl.col("host")).then(depth).alias("depth"))
    open_starts = pts.filter(pl.col("host") & (pl.col("ptype") == START)).select("chain", "depth", "node", pl.col("eid").alias("inner"))
    pts = pts.join_asof(open_starts, on="node", by=["chain", "depth"], strategy="backward", check_sortedness=False).with_columns(
        pl.when(pl.col("host") & (pl.col("depth") > 0)).then(pl.col("inner")).alias("inner")
    )
    # the edge into each point belongs to what was open after the previous point of its chain
    prev = lambda c: pl.col(c).shift(1).over("chain")  # noqa: E731
    pts = (
        pts.join(ev.select(pl.col("eid").alias("inner"), pl.col("blocking").alias("iblocking"),
                           (pl.col("kind") == "annotation").alias("irange")), on="inner", how="left")
        .join(bind.select("eid", "binding"), on="eid", how="left")
        .sort("node")
        .with_columns(
            prev("ptype").alias("pptype"), prev("eid").alias("peid"), prev("inner").alias("pinner"),
            prev("iblocking").fill_null(False).alias("pblocking"),
            prev("irange").fill_null(True).alias("prange"),
        )
    )
    host_what = pl.when(pl.col("prange")).then(pl.lit("host_gap")).when(pl.col("pblocking")).then(pl.lit("host_wait")).otherwise(pl.lit("host_op"))
    gpu_what = (
        pl.when(pl.col("pptype") == START).then(pl.when(pl.col("ptype") == READY).then(pl.lit("comm_wait")).otherwise(pl.lit("kernel")))
        .when(pl.col("pptype") == READY).then(pl.lit("transfer"))
        .otherwise(pl.lit("kernel_gap"))
    )
    what = pl.when(pl.col("first")).then(pl.lit(None, pl.String)).when(pl.col("host")).then(host_what).otherwise(gpu_what)
    about = (
        pl.when(pl.col("first")).then(pl.lit(None, pl.Int64))
        .when(pl.col("host")).then(pl.col("pinner"))
        .when(pl.col("pptype").is_in([START, READY])).then(pl.col("peid"))
        .otherwise(pl.col("eid"))
    )
    # a gap shorter than DISPATCH_GAP_NS between two points of a thread is the interpreter and
    # dispatcher issuing the next op (host work, as an op's), not a stall
    what = pl.when((what == "host_gap") & (pl.col("dt") < DISPATCH_GAP_NS)).then(pl.lit("host_dispatch")).otherwise(what)
    pts = pts.with_columns(what.alias("what"), about.alias("about"))
    weighted = (
        pl.col("what").is_in(["host_op", "host_gap", "host_dispatch", "kernel", "transfer"] if host_gaps else ["host_op", "kernel", "transfer"])
        | ((pl.col("what") == "kernel_gap") & (pl.col("ptype") == START) & (pl.col("binding") == "stream"))
    )
    pts = pts.with_columns(pl.when(weighted).then(pl.col("dt")).otherwise(0).cast(pl.Int64).alias("w"))
    # a host gap while another thread of the process runs ops is no stall: weigh only the time
    # when no thread of the process is in an op (.threads)
    chains = ev.select("chain", "step", "rank", "pid", "host").unique("chain")
    gaps = pts.filter(pl.col("what") == "host_gap").select(
        "node", "chain", (pl.col("t") - pl.col("dt")).alias("t0"), pl.col("t").alias("t1")).join(chains.drop("host"), on="chain")
    if host_gaps and gaps.height:
        free = threads.uncovered(gaps, threads.union_runs(ev)).select("node", "free")
        pts = pts.join(free, on="node", how="left").sort("node").with_columns(
            pl.coalesce("free", "w").cast(pl.Int64).alias("w")).drop("free")
    points = pts.select("node", "chain", "t", "ptype", "eid", "w", "what", "about")

    # ---- cross edges --------------------------------------------------------------------
    node_of = points.select("eid", "ptype", "node", "t")
    start_node = node_of.filter(pl.col("ptype") == START).select("eid", pl.col("node").alias("n"), pl.col("t").alias("tn"))
    end_node = node_of.filter(pl.col("ptype") == END).select("eid", pl.col("node").alias("n"), pl.col("t").alias("tn"))
    ready_node = node_of.filter(pl.col("ptype") == READY).select("eid", pl.col("node").alias("n"), pl.col("t").alias("tn"))
    g = bind.join(start_node, on="eid")  # the activity's start: destination of launch and wait edges

    def bound_by(kind: str, source: pl.DataFrame, what: str) -> pl.DataFrame:
        """Edges from ``source``'s node of the activity named by ``{kind}_eid`` to each activity's
        start, weighted by the gap when ``kind`` is what binds the activity (else 0)."""
        return (
            g.filter(pl.col(f"{kind}_eid").is_not_null())
            .join(source.rename({"eid": f"{kind}_eid", "n": "src", "tn": "ts"}), on=f"{kind}_eid")
            .select("src", pl.col("n").alias("dst"),
                    pl.when(pl.col("binding") == kind).then(pl.col("tn") - pl.col("ts")).otherwise(0).alias("w"),
                    pl.lit(what).alias("what"), pl.col("eid").alias("about"))
        )

    launch = bound_by("launch", start_node, "launch_delay")
    wait = bound_by("wait", end_node, "wait_gap")
    # host sync: per blocking call and stream of its rank, the last activity ending during it
    calls = ev.filter(pl.col("blocking")).select("eid", "step", "rank", "start_ns", "end_ns")
    acts = ev.filter(~pl.col("host")).select(pl.col("eid").alias("g_eid"), "step", "rank", pl.col("chain").alias("gchain"), pl.col("end_ns").alias("g_end"))
    sync = (
        calls.join(acts.select("step", "rank", "gchain").unique(), on=["step", "rank"])
        .sort("end_ns")
        .join_asof(acts.sort("g_end"), left_on="end_ns", right_on="g_end", by=["step", "rank", "gchain"], strategy="backward", check_sortedness=False)
        .filter(pl.col("g_end") > pl.col("start_ns"))
        .join(end_node.rename({"eid": "g_eid", "n": "src"}).drop("tn"), on="g_eid")
        .join(end_node.select("eid", pl.col("n").alias("dst")), on="eid")
        .select("src", "dst", pl.lit(0, pl.Int64).alias("w"), pl.lit("sync").alias("what"), pl.col("eid").alias("about"))
    )
    parts = [launch, wait, sync]
    if host_gaps:  # ops only (as HTA): each thread on its own
        parts.append(threads.thread_edges(gaps, points, chains))
    if ready.height:
        parts.append(
            ready.join(ready_node, on="eid")
            .join(start_node.rename({"eid": "from_eid", "n": "src", "tn": "ts"}), on="from_eid")
            .filter(pl.col("ts") <= pl.col("tn"))
            .select("src", pl.col("n").alias("dst"), pl.lit(0, pl.Int64).alias("w"), pl.lit("collective").alias("what"), pl.col("eid").alias("about"))
        )
    schema = {"src": pl.Int64, "dst": pl.Int64, "w": pl.Int64, "what": pl.String, "about": pl.Int64}
    cross = pl.concat([p.select(pl.col(k).cast(v) for k, v in schema.items()) for p in parts])
    # every edge goes forwards in (time, chain) order: the graph is acyclic even where points of
    # two chains share an instant (an edge between equal instants goes to the higher chain id:
    # GPU -> host within a rank, as synchronisation does). A collective edge joins two equal
    # instants by nature (the last rank's start is when the others can move data) and may go
    # to any chain: it ends at a point inside a kernel whose only successor is that kernel's
    # later end, so no cycle can pass through it.
    at = points.select(pl.col("node"), pl.col("t"), pl.col("chain"))
    cross = (
        cross.join(at.rename({"node": "src", "t": "ts", "chain": "cs"}), on="src")
        .join(at.rename({"node": "dst", "t": "td", "chain": "cd"}), on="dst")
        .filter(
            (pl.col("ts") < pl.col("td"))
            | ((pl.col("ts") == pl.col("td")) & ((pl.col("cs") < pl.col("cd")) | (pl.col("what") == "collective")))
        )
        .select(list(schema))
        .sort("dst", "src")
    )
    return ev, points, cross
