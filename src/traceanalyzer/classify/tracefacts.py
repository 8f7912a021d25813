"""What a rank's trace can and cannot show: the facts the integrity checks and the findings read.

One row per rank (the optional table ``trace_facts``, :data:`traceanalyzer.engine.rank.TABLES`),
counted from the rank's events, never a number of the partition:

* ``host_events``: recorded host ops and runtime calls (``cpu_op`` + ``runtime``); zero in a
  GPU-only capture, where no cause on the host can be seen;
* ``graph_launches`` (``cudaGraphLaunch`` / ``cuGraphLaunch`` / ``hipGraphLaunch`` calls),
  ``graph_kernels`` (GPU work those calls launched, by correlation id) and
  ``graph_launches_unrecorded`` (launches with no GPU work recorded at all: a replay the
  profiler did not record);
* ``kernels``, ``triton_kernels`` (names starting ``triton``) and ``compiled_regions``
  (``CompiledFunction`` ops, ``Torch-Compiled Region`` / ``CompiledFxGraph`` ranges): the run
  uses ``torch.compile``;
* ``stream_overlaps`` / ``stream_overlap_ns`` / ``stream_overlap_max_ns``: kernels that start
  before the previous kernel of the same stream ended (a stream runs its work in order, so an
  overlap is a timestamp the profiler got wrong: ROCm's ``dur`` overruns), how many, for how long
  in total and at most;
* ``attention_ops`` / ``conv_ops``: host ops of attention (``scaled_dot_product``, ``attention``,
  ``flash``) and of convolutions: which kind of model the trace holds;
* ``steps_without_gpu``: the steps in whose GPU window no GPU activity starts;
* ``sync_calls``: the host's synchronising calls (the runtime's ``*Synchronize``, ``.item()``)
  as a list of ``{name, count, ns}``, longest first.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.idle import SYNC_OPS, SYNC_RUNTIME
from traceanalyzer.classify.launches import GRAPH_LAUNCH

#: kernels of one stream overlapping by less than this are rounding (Kineto writes µs with 3 decimals)
OVERLAP_TOLERANCE_NS = 1_000
ATTENTION = r"(?i)scaled_dot_product|attention|flash_attn|flash_fwd|fmha"
CONV = r"(?i)^aten::(convolution|_convolution|conv[123]d|cudnn_convolution|miopen_convolution)"
COMPILED = r"^(CompiledFunction|Torch-Compiled Region|## Call CompiledFxGraph)"

FACT_SCHEMA = {
    "rank": pl.Int32, "host_events": pl.Int64, "graph_launches": pl.Int64, "graph_kernels": pl.Int64,
    "graph_launches_unrecorded": pl.Int64, "kernels": pl.Int64, "triton_kernels": pl.Int64, "compiled_regions": pl.Int64,
    "stream_overlaps": pl.Int64, "stream_overlap_ns": pl.Int64, "stream_overlap_max_ns": pl.Int64,
    "attention_ops": pl.Int64, "conv_ops": pl.Int64,
    "sync_calls": pl.List(pl.Struct({"name": pl.String, "count": pl.Int64, "ns": pl.Int64})),
    "steps_without_gpu": pl.List(pl.Int64),
}


def _overlaps(kernels: pl.DataFrame) -> pl.DataFrame:
    """Per rank: kernels starting before the running latest end of their stream (beyond the tolerance)."""
    k = kernels.sort("rank", "pid", "stream", "start_ns").with_columns(
        pl.col("end_ns").cum_max().shift(1).over("rank", "pid", "stream").alias("__prev"))
    over = (pl.col("__prev") - pl.col("start_ns")).clip(0)
    return k.filter(over > OVERLAP_TOLERANCE_NS).group_by("rank").agg(
        pl.len().cast(pl.Int64).alias("stream_overlaps"),
        pl.min_horizontal(over, pl.col("end_ns") - pl.col("start_ns")).sum().cast(pl.Int64).alias("stream_overlap_ns"),
        over.max().cast(pl.Int64).alias("stream_overlap_max_ns"),
    )


def _idle_steps(events: pl.DataFrame, windows: pl.DataFrame | None) -> pl.DataFrame:
    """Per rank: the steps of ``windows`` in whose GPU window no GPU activity starts."""
    schema = {"rank": pl.Int32, "steps_without_gpu": pl.List(pl.Int64)}
    if windows is None or windows.height == 0:
        return pl.DataFrame(schema=schema)
    work = events.filter(pl.col("kind").cast(pl.String).is_in(["kernel", "memcpy", "memset", "gpu_other"])).select("rank", "start_ns").sort("start_ns")
    win = windows.select("rank", "step", "wstart_ns", "wend_ns").sort("wstart_ns")
    held = (work.join_asof(win, left_on="start_ns", right_on="wstart_ns", by="rank", strategy="backward", check_sortedness=False)
            .filter(pl.col("start_ns") < pl.col("wend_ns")).select("rank", "step").unique())
    return (win.join(held, on=["rank", "step"], how="anti").sort("rank", "step")
            .group_by("rank", maintain_order=True).agg(pl.col("step").alias("steps_without_gpu")).cast(schema))


def trace_facts(events: pl.DataFrame, windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per rank of ``events`` (see the module docstring); ``windows`` (the step windows)
    adds ``steps_without_gpu``: the steps in whose GPU window no GPU activity starts."""
    ev = events.select("rank", "kind", "name", "stream", "pid", "start_ns", "end_ns", "correlation")
    kind = pl.col("kind").cast(pl.String)
    name = pl.col("name")
    ranks = ev.select(pl.col("rank").unique())
    # the name patterns are tested once per distinct (rank, kind, name), not once per event
    names = ev.group_by("rank", "kind", "name").agg(pl.len().cast(pl.Int64).alias("__n"))
    n = pl.col("__n")
    counts = names.group_by("rank").agg(
        n.filter(kind.is_in(["cpu_op", "runtime"])).sum().alias("host_events"),
        n.filter((kind == "runtime") & name.str.contains(GRAPH_LAUNCH)).sum().alias("graph_launches"),
        n.filter(kind == "kernel").sum().alias("kernels"),
        n.filter((kind == "kernel") & name.str.starts_with("triton")).sum().alias("triton_kernels"),
        n.filter(kind.is_in(["cpu_op", "annotation"]) & name.str.contains(COMPILED)).sum().alias("compiled_regions"),
        n.filter((kind == "cpu_op") & name.str.contains(ATTENTION)).sum().alias("attention_ops"),
        n.filter((kind == "cpu_op") & name.str.contains(CONV)).sum().alias("conv_ops"),
    )
    launches = ev.filter((kind == "runtime") & name.str.contains(GRAPH_LAUNCH)).select("rank", "correlation")
    work = ev.filter(kind.is_in(["kernel", "memcpy", "memset", "gpu_other"]) & pl.col("correlation").is_not_null())
    ran = launches.join(work.group_by("rank", "correlation").len(), on=["rank", "correlation"], how="left")
    graph = ran.group_by("rank").agg(
        pl.col("len").fill_null(0).sum().cast(pl.Int64).alias("graph_kernels"),
        pl.col("len").is_null().sum().cast(pl.Int64).alias("graph_launches_unrecorded"),
    )
    sync = (
        ev.filter(((kind == "runtime") & name.str.contains(SYNC_RUNTIME)) | ((kind == "cpu_op") & name.is_in(SYNC_OPS[:1])))
        .group_by("rank", "name").agg(pl.len().cast(pl.Int64).alias("count"), (pl.col("end_ns") - pl.col("start_ns")).sum().cast(pl.Int64).alias("ns"))
        .sort("rank", "ns", "name", descending=[False, True, False])
        .group_by("rank", maintain_order=True).agg(pl.struct("name", "count", "ns").alias("sync_calls"))
    )
    over = _overlaps(ev.filter(kind == "kernel").select("rank", "pid", "stream", "start_ns", "end_ns"))
    out = ranks.join(counts, on="rank", how="left").join(graph, on="rank", how="left").join(over, on="rank", how="left").join(
        sync, on="rank", how="left").join(_idle_steps(events, windows), on="rank", how="left")
    lists = ("rank", "sync_calls", "steps_without_gpu")
    out = out.with_columns(pl.col(c).fill_null(0) for c in FACT_SCHEMA if c not in lists).with_columns(
        pl.col("sync_calls").fill_null(pl.lit([], FACT_SCHEMA["sync_calls"])),
        pl.col("steps_without_gpu").fill_null(pl.lit([], FACT_SCHEMA["steps_without_gpu"])))
    return out.select([pl.col(c).cast(t) for c, t in FACT_SCHEMA.items()]).sort("rank")


def rank_facts(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame, source: str) -> pl.DataFrame:
    """:func:`trace_facts` of the ranks in ``events`` (the rank workers' optional table)."""
    return trace_facts(events, windows)
