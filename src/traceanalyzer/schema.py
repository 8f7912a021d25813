"""The canonical frames every parser produces and every later stage consumes.

A :class:`Trace` holds two polars frames:

``events`` — one row per timed event, all ranks concatenated (see ``EVENT_SCHEMA``):

=================  =========  ==================================================================
column             dtype      meaning
=================  =========  ==================================================================
rank               Int32      global rank of the trace the event came from
kind               Enum       one of ``KINDS`` (see below)
pid                String     process id as written (GPU events: device index)
tid                String     thread id as written (GPU events: stream id)
stream             Int64      CUDA/HIP stream for GPU events, null for host events
name               String     kernel / op / annotation name
start_ns           Int64      start, integer nanoseconds on the job's common time base
end_ns             Int64      end (>= start_ns), integer nanoseconds
correlation        Int64      CUDA correlation id (runtime launch <-> GPU activity)
external_id        Int64      Kineto "External id" (cpu_op <-> its GPU work)
seq                Int64      autograd "Sequence number" (cpu ops only)
fwd_tid            Int64      autograd "Fwd thread id" (cpu ops only)
bytes              Int64      memcpy/memset bytes
coll_name          String     collective name ("allreduce", "_allgather_base", ...)
in_nelems          Int64      "In msg nelems"
out_nelems         Int64      "Out msg nelems"
group_size         Int64      "Group size"
dtype              String     collective element type
pg_name            String     "Process Group Name"
pg_desc            String     "Process Group Description"
pg_ranks           String     "Process Group Ranks" as written ("[0, 1, ...]")
coll_seq           Int64      "Seq": per-process-group collective sequence number (Kineto 2026+)
src_rank           Int64      "Src Rank" of point-to-point operations
dst_rank           Int64      "Dst Rank" of point-to-point operations
input_dims         String     "Input Dims" (record_shapes) as compact JSON text, for shaped ops
                              (GEMM / conv / attention: names matching mm|linear|matmul|conv|
                              attention|attn|einsum); null elsewhere
input_type         String     element type of the first tensor input of those ops, as Kineto's
                              "Input type" writes it ("c10::BFloat16", "float", "c10::Half")
=================  =========  ==================================================================

``KINDS``:

* GPU activity: ``kernel``, ``memcpy``, ``memset``, ``gpu_other`` (other timed GPU work),
  ``gpu_sync`` (CUPTI synchronisation records: the *host* waiting, not GPU work),
  ``gpu_annotation`` (GPU-side copies of user annotations).
* Host: ``cpu_op``, ``annotation`` (``record_function`` ranges incl. ``ProfilerStep#N``),
  ``runtime`` (CUDA/HIP runtime and driver calls), ``python`` (``with_stack`` frames),
  ``other`` (anything else, kept for completeness).

``meta`` — one row per rank (see ``META_SCHEMA``): file, format, world size, device name and
properties, software versions, the process-group table as JSON text, and how much of the file
was recovered if it was truncated.

Timestamps: every parser converts to int64 nanoseconds; ranks of one load share one time base
(absolute epoch ns when the source gives it), so cross-rank comparisons need no further shift.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from polars._typing import PolarsDataType  # a dtype or a dtype class (pl.Int32)

KINDS = [
    "kernel",
    "memcpy",
    "memset",
    "gpu_other",
    "gpu_sync",
    "gpu_annotation",
    "cpu_op",
    "annotation",
    "runtime",
    "python",
    "other",
]
KIND = pl.Enum(KINDS)

#: GPU kinds that occupy the device (count as activity in the partition).
GPU_WORK_KINDS = ["kernel", "memcpy", "memset", "gpu_other"]

#: a file's events form one cluster in time: sorted start times with no gap above this. Events
#: outside the cluster that holds the median start (or ending more than this after it) are absurd
#: (the parsers' cleaning and the classifiers' invariants both read it)
MAX_GAP_NS = 10 * 60 * 1_000_000_000
#: ranks recorded further apart than this are different runs, not one job
SAME_JOB_NS = 3600 * 1_000_000_000
#: the words every warning of a parser that says the profiler lost activity records contains
#: (the parsers write them, the integrity check finds those warnings by them)
LOST_RECORDS = "the profiler's log says it lost activity records"
#: the profiler options that add host work to every op (a Kineto file's header lists those that were on)
COSTLY_PROFILER_OPTIONS = ("record_shapes", "profile_memory", "with_stack")

EVENT_SCHEMA: dict[str, PolarsDataType] = {
    "rank": pl.Int32,
    "kind": KIND,
    "pid": pl.String,
    "tid": pl.String,
    "stream": pl.Int64,
    "name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "correlation": pl.Int64,
    "external_id": pl.Int64,
    "seq": pl.Int64,
    "fwd_tid": pl.Int64,
    "bytes": pl.Int64,
    "coll_name": pl.String,
    "in_nelems": pl.Int64,
    "out_nelems": pl.Int64,
    "group_size": pl.Int64,
    "dtype": pl.String,
    "pg_name": pl.String,
    "pg_desc": pl.String,
    "pg_ranks": pl.String,
    "coll_seq": pl.Int64,
    "src_rank": pl.Int64,
    "dst_rank": pl.Int64,
    "input_dims": pl.String,
    "input_type": pl.String,
}

META_SCHEMA: dict[str, PolarsDataType] = {
    "rank": pl.Int32,
    "file": pl.String,
    "format": pl.String,  # "kineto", "nsys-sqlite", "nsys-json", ...
    "world_size": pl.Int32,
    "device_name": pl.String,
    "num_sms": pl.Int32,
    "compute_capability": pl.String,
    "backend": pl.String,
    "pytorch_version": pl.String,
    "cuda_version": pl.String,
    "nccl_version": pl.String,
    "base_time_ns": pl.Int64,
    "pg_config": pl.String,  # JSON text of distributedInfo.pg_config
    "n_events": pl.Int64,
    "truncated": pl.Boolean,
    "recovered_fraction": pl.Float64,  # bytes parsed / bytes in file (1.0 when complete)
}


def empty_events() -> pl.DataFrame:
    return pl.DataFrame(schema=EVENT_SCHEMA)


def conform(df: pl.DataFrame, schema: dict[str, PolarsDataType]) -> pl.DataFrame:
    """Add missing columns as nulls, cast, and order columns as in ``schema``."""
    cols: list[pl.Expr] = []
    for name, dtype in schema.items():
        if name in df.columns:
            cols.append(pl.col(name).cast(dtype))
        else:
            cols.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(cols)


@dataclass
class Trace:
    """What a parser returns: canonical events and per-rank metadata for one job."""

    events: pl.DataFrame  # one row per timed event, all ranks (columns: EVENT_SCHEMA in the module doc)
    meta: pl.DataFrame  # one row per rank: file, format, world size, device, versions (META_SCHEMA)
    warnings: list[str] = field(default_factory=list)  # what the parsers noticed (each names its file)
    sources: list[Path] = field(default_factory=list)  # the files loaded, in order

    @property
    def ranks(self) -> list[int]:
        """The global ranks of the job, sorted."""
        return self.meta.get_column("rank").sort().to_list()

    def __repr__(self) -> str:
        """One line: ranks, events, time span and format (never the frames themselves)."""
        ranks = self.ranks
        shown = (f"{ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else ", ".join(map(str, ranks[:8]))
                 + (", ..." if len(ranks) > 8 else "")) if ranks else "none"
        span = ""
        if self.events.height:
            lo, hi = self.events.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
            if lo is not None and hi is not None:
                span = f", span {(hi - lo) / 1e6:.3f} ms"
        formats = ",".join(sorted({str(f) for f in self.meta.get_column("format").drop_nulls().to_list()})) or "?"
        n = len(ranks)
        return (f"<Trace {n} rank{'s' if n != 1 else ''} ({shown}), {self.events.height:,} events{span}, {formats}"
                f"{f', {len(self.warnings)} warnings' if self.warnings else ''}>")

    def lazy(self) -> pl.LazyFrame:
        """The events as a LazyFrame, to build a query that polars optimises before running it."""
        return self.events.lazy()

    def gpu_events(self) -> pl.DataFrame:
        return self.events.filter(pl.col("kind").is_in(GPU_WORK_KINDS))

    def validate(self) -> None:
        """Check the frames follow the canonical schema (used by tests and parsers)."""
        for frame, schema, what in ((self.events, EVENT_SCHEMA, "events"), (self.meta, META_SCHEMA, "meta")):
            got = dict(frame.schema)
            if list(got) != list(schema) or any(got[k] != v for k, v in schema.items()):
                raise AssertionError(f"{what} frame does not follow the canonical schema: {got}")
