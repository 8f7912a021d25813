"""The profiler's own cost, per step, and what each step would take without it.

``torch.profiler`` does host work for every event it records: a callback at each op's start
and end (more with ``record_shapes``: the inputs' shapes, types and strides; with
``profile_memory``: every allocation the op makes; with ``with_stack``: the Python stack), and
a CUPTI callback around every CUDA runtime and driver call. That work runs on the thread that
launches the GPU's work, so on a step the host paces it lengthens the step; on a step the GPU
paces (its queue never drains) it hides behind the GPU.

:func:`profiler_cost` estimates it per step: :data:`COST_NS` per recorded host event of each
kind (cpu_op, user annotation, runtime / driver call, Python frame), the op's cost growing
with the options the trace was recorded with (:func:`event_costs`), put at each event's start
on the step's launching threads; then it replays the step's host -> GPU dependencies with
that time taken out (:mod:`traceanalyzer.classify.step_replay`). The difference of
the two replays is what the profiler added to the step; the step's measured length less it
is the unprofiled estimate.

The same replays price the host-bound losses: the step replayed (unprofiled) with the host's
stalls (:data:`STALL_NS` or more outside every recorded op), its data-loader waits, its
synchronisations or its op dispatch taken out; the gain is the difference
(``gain_<cause>_ns``).

The costs were calibrated on the shared H200 recordings (docs/prediction-model.md gives the
method, the per-run error and the leave-one-out error). A rank with no GPU work, no host
events or no launch linked to its GPU work gets no estimate and a ``profiler_note`` saying why.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.step_replay import DEFAULT_LATENCY_NS, QUEUE_GAP_NS, Removal, StepInput, i64, replay_step, union
from traceanalyzer.classify.idle import DATALOADER_RANGE, SYNC_RUNTIME
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS

#: host ns the profiler adds per recorded event, by kind; an op's cost grows with the options
#: on (:data:`OPTION_NS`). Calibrated on the shared H200 recordings (record_shapes,
#: profile_memory, with_flops on): see docs/prediction-model.md
COST_NS = {"cpu_op": 1050.0, "annotation": 1050.0, "runtime": 2000.0, "python": 500.0}
#: the extra host ns per cpu_op of each profiler option (its share of the calibrated op cost:
#: the recordings have all three on together, so the split is an assumption)
OPTION_NS = {"record_shapes": 500.0, "profile_memory": 400.0, "with_flops": 50.0, "with_stack": 1000.0}
#: the options assumed when the trace's header does not say (record_shapes is read from the
#: events: Input Dims present; with_stack: Python frames present)
ASSUMED_OPTIONS: tuple[str, ...] = ()
#: a host gap outside every recorded op of at least this long is a stall (Python between two
#: ops takes microseconds)
STALL_NS = 100_000
#: the host-bound causes the replay prices: column suffix -> what is removed
GAINS = ("host_untraced", "host_dataloader", "host_ops", "sync")
HOST_KINDS = ["cpu_op", "annotation", "runtime", "python"]

COLUMNS = {
    "rank": pl.Int32, "step": pl.Int64, "profiler_host_ns": pl.Int64, "profiler_overhead_ns": pl.Int64,
    "unprofiled_estimate_ns": pl.Int64, **{f"gain_{g}_ns": pl.Int64 for g in GAINS},
    "profiler_options": pl.String, "profiler_note": pl.String,
}


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=COLUMNS)


def event_costs(options: list[str] | tuple[str, ...]) -> dict[str, float]:
    """Host ns per recorded event by kind, for a trace recorded with ``options``."""
    costs = dict(COST_NS)
    extra = sum(OPTION_NS.get(o, 0.0) for o in options)
    costs["cpu_op"] += extra
    return costs


def infer_options(events: pl.DataFrame) -> list[str]:
    """The costly options the events themselves show (a trace whose header does not say)."""
    out = list(ASSUMED_OPTIONS)
    if events.select(pl.col("input_dims").is_not_null().any()).item():
        out.append("record_shapes")
    if events.select((pl.col("kind") == "python").any()).item():
        out.append("with_stack")
    return sorted(set(out))


def infer_options_by_rank(events: pl.DataFrame) -> dict[int, list[str]]:
    """:func:`infer_options` of every rank of ``events`` (one pass over two columns)."""
    seen = events.group_by("rank").agg(pl.col("input_dims").is_not_null().any().alias("shapes"),
                                       (pl.col("kind") == "python").any().alias("stack"))
    return {rank: sorted({*ASSUMED_OPTIONS, *(["record_shapes"] if shapes else []), *(["with_stack"] if stack else [])})
            for rank, shapes, stack in seen.iter_rows()}


def profiler_cost(events: pl.DataFrame, windows: pl.DataFrame, options: dict[int, list[str] | None] | None = None,
                  costs: dict[str, float] | None = None, gains: bool = True) -> pl.DataFrame:
    """Per (rank, step) of ``windows``: the columns of :data:`COLUMNS` (module doc).

    ``events``: the ranks' events; ``windows``: their step windows (``rank, step, wstart_ns,
    wend_ns``); ``options``: per rank, the profiler options its file's header lists (None: not
    known, read from the events); ``costs``: host ns per event kind (default: from the options);
    ``gains``: price the host-bound causes too (else their columns are null)."""
    options = options or {}
    out = []
    for (rank,), ev in _slim(events).partition_by("rank", as_dict=True, maintain_order=True).items():
        win = windows.filter(pl.col("rank") == rank).sort("wstart_ns")
        if win.height == 0:
            continue
        opts = options.get(rank)
        if opts is None:
            opts = infer_options(events.filter(pl.col("rank") == rank))
        out.append(_rank(int(rank), ev, win, opts, costs or event_costs(opts), gains))
    return pl.concat(out, how="vertical_relaxed") if out else empty()


def _slim(events: pl.DataFrame) -> pl.DataFrame:
    """The events the estimate reads (GPU work and host events), in their order, with only the
    columns it reads: the names it tests are read once, as flags."""
    kind, name = pl.col("kind"), pl.col("name")
    return events.lazy().filter(kind.is_in([*GPU_WORK_KINDS, *HOST_KINDS])).select(
        "rank", "kind", "start_ns", "end_ns", "stream", "correlation", "tid",
        ((kind == "annotation") & name.str.starts_with("ProfilerStep#")).alias("is_step"),
        ((kind == "annotation") & name.str.contains(DATALOADER_RANGE)).alias("is_dataloader"),
        ((kind == "runtime") & name.str.contains(SYNC_RUNTIME)).alias("is_sync"),
    ).collect(engine=query_engine())


def _reason_frame(rank: int, win: pl.DataFrame, opts: list[str], why: str) -> pl.DataFrame:
    return pl.DataFrame({"rank": [rank] * win.height, "step": win["step"], "profiler_options": [",".join(opts)] * win.height,
                         "profiler_note": [why] * win.height}).with_columns(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64)).pipe(lambda d: pl.concat([empty(), d], how="diagonal_relaxed"))


def _rank(rank: int, ev: pl.DataFrame, win: pl.DataFrame, opts: list[str], costs: dict[str, float], price: bool) -> pl.DataFrame:
    gpu = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("start_ns", "end_ns", "stream", "correlation")
    host = ev.filter(pl.col("kind").is_in(HOST_KINDS))
    if gpu.height == 0:
        return _reason_frame(rank, win, opts, "no GPU work in the trace: nothing to replay")
    if host.height == 0:
        return _reason_frame(rank, win, opts, "no host events in the trace (a GPU-only capture): the profiler's host cost cannot be counted")
    calls = host.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()).group_by("correlation").agg(
        pl.col("start_ns").min().alias("launch_ns"), pl.col("tid").sort_by("start_ns").first().alias("tid"))
    gpu = gpu.join(calls, on="correlation", how="left").sort("start_ns")
    threads = gpu.get_column("tid").drop_nulls().unique().to_list()
    if not threads:
        return _reason_frame(rank, win, opts, "no GPU work is linked to a launch call (no correlation ids): the host -> GPU dependencies are unknown")
    h = host.filter(pl.col("tid").is_in(threads)).select("kind", "start_ns", "end_ns", "is_step", "is_dataloader", "is_sync").sort("start_ns")
    del host, calls
    streams = {s: i for i, s in enumerate(gpu.get_column("stream").fill_null(-1).unique().sort().to_list())}
    g = gpu.select(pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64),
                   pl.col("stream").fill_null(-1).replace_strict(streams, return_dtype=pl.Int64),
                   pl.col("launch_ns").fill_null(-1).cast(pl.Int64))
    del gpu
    latency = _latency(g)
    # the profiler's cost at each recorded host event's start
    points = h.select(pl.col("start_ns").cast(pl.Int64).alias("t"),
                      pl.col("kind").cast(pl.String).replace_strict({k: float(v) for k, v in costs.items()}, default=0.0, return_dtype=pl.Float64).alias("c"))
    # what the replays remove: the host intervals of each cause
    iv = h.filter(pl.col("end_ns") > pl.col("start_ns"))
    rec_lo, rec_hi = _union_of(iv.filter(~pl.col("is_step")))
    ops_lo, ops_hi = _union_of(iv.filter(pl.col("kind").is_in(["cpu_op", "runtime"])))
    dl_lo, dl_hi = _union_of(iv.filter(pl.col("is_dataloader")))
    syncs = pl.DataFrame(dict(zip(("lo", "hi"), _union_of(iv.filter(pl.col("is_sync"))))))
    del h, iv
    start, end, stream, launch = pl.col("start_ns"), pl.col("end_ns"), pl.col("stream"), pl.col("launch_ns")
    rows = []
    for step, ws, we in win.select("step", "wstart_ns", "wend_ns").iter_rows():
        inside = (launch >= ws) & (launch < we) | ((launch < 0) & (start >= ws) & (start < we))
        before = ~inside & (pl.when(launch >= 0).then(launch).otherwise(start) < ws) & (end > ws)
        ready = {int(st): max(ws, int(e)) for st, e in g.filter(before).group_by(stream).agg(end.max()).iter_rows()}
        step_g = g.filter(inside)
        sm = syncs.filter((pl.col("lo") >= ws) & (pl.col("hi") <= we))
        inp = StepInput(int(ws), int(we), step_g["start_ns"], step_g["end_ns"], step_g["stream"], step_g["launch_ns"], ready,
                        sm["lo"], sm["hi"], latency)
        pm = points.filter((pl.col("t") >= ws) & (pl.col("t") < we))
        step_rm = Removal(pm["t"], pm["c"])
        zero = Removal()
        e0 = replay_step(inp, zero)
        e1 = replay_step(inp, step_rm)
        dur = we - ws
        est = dur - max(e0 - e1, 0.0)
        # gaps outside every recorded op on the launching threads: stalls
        gl, gh = _gaps(rec_lo, rec_hi, ws, we)
        big = (gh - gl) >= STALL_NS
        gains: dict[str, int | None] = dict.fromkeys(GAINS)
        for name, (lo, hi, drop) in ({} if not price else {
            "host_untraced": (gl.filter(big), gh.filter(big), False),
            "host_dataloader": (*_clip(dl_lo, dl_hi, ws, we), False),
            "host_ops": (*_clip(ops_lo, ops_hi, ws, we), False),
            "sync": (inp.sync_start, inp.sync_end, True),  # not anchors, and their wait taken out
        }).items():
            if len(lo) == 0:
                gains[name] = 0
                continue
            gains[name] = int(round(max(e1 - replay_step(inp, step_rm.plus(lo, hi, drop)), 0.0)))
        rows.append({"rank": rank, "step": step, "profiler_host_ns": int(round(pm["c"].sum())),
                     "profiler_overhead_ns": int(round(dur - est)), "unprofiled_estimate_ns": int(round(est)),
                     **{f"gain_{g}_ns": v for g, v in gains.items()}, "profiler_options": ",".join(opts), "profiler_note": None})
    return pl.DataFrame(rows, schema=COLUMNS)


def _union_of(iv: pl.DataFrame) -> tuple[pl.Series, pl.Series]:
    return union(iv.get_column("start_ns"), iv.get_column("end_ns"))


def _latency(g: pl.DataFrame) -> int:
    """The rank's launch latency: the median launch-to-start time of the items that waited on
    their launch (a gap of more than :data:`QUEUE_GAP_NS` behind the item before them)."""
    s, la = pl.col("start_ns"), pl.col("launch_ns")
    # items of one stream do not overlap
    same = (pl.col("stream") == pl.col("stream").shift(1)).fill_null(False)
    waited = same & (s - pl.col("end_ns").shift(1) > QUEUE_GAP_NS) & (la >= 0) & (s >= la)
    lat = g.sort("stream", "start_ns", maintain_order=True).filter(waited).select((s - la).median()).item()
    return DEFAULT_LATENCY_NS if lat is None else int(lat)


def _clip(lo: pl.Series, hi: pl.Series, ws: int, we: int) -> tuple[pl.Series, pl.Series]:
    keep = (hi > ws) & (lo < we)
    return lo.filter(keep).clip(lower_bound=ws), hi.filter(keep).clip(upper_bound=we)


def _gaps(lo: pl.Series, hi: pl.Series, ws: int, we: int) -> tuple[pl.Series, pl.Series]:
    """The gaps of the union ``[lo, hi)`` (sorted, disjoint) inside ``[ws, we)``."""
    lo, hi = _clip(lo, hi, ws, we)
    starts = pl.concat([i64([ws]), hi])
    ends = pl.concat([lo, i64([we])])
    keep = ends > starts
    return starts.filter(keep), ends.filter(keep)
