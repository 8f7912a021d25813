"""Classifiers: canonical frames -> per-rank, per-step partition of GPU time.

Public surface: :func:`analyze` (everything the renderers need) and :func:`breakdown`
(the per-rank, per-step partition as one polars DataFrame). Classifiers never print.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.classify import comm, crossrank, idle, recompute
from traceanalyzer.classify.invariants import check_event_span, check_ranks_aligned, check_windows
from traceanalyzer.classify.labels import label_gpu
from traceanalyzer.classify.partition import BUCKETS, FIELDS, check_causes, partition
from traceanalyzer.classify.steps import DEFAULT_STEP, gpu_windows, outside_steps, outside_warnings, refuse_duplicate_steps
from traceanalyzer.errors import NoGpuActivity
from traceanalyzer.parsers.clean import RANGE_PROFILER_NOTE
from traceanalyzer.schema import GPU_WORK_KINDS, Trace

__all__ = ["Analysis", "analyze", "breakdown", "BUCKETS", "FIELDS", "IDLE_FIELDS", "COMM_DIM_FIELDS"]

#: idle split by cause (``idle_<cause>_ns/_us`` columns of ``Analysis.steps``; sum = idle)
IDLE_FIELDS = [f"idle_{c}" for c in idle.CAUSES]
#: exposed communication by parallelism dimension (``exposed_comm_<dim>_ns/_us``; sum = exposed_comm)
COMM_DIM_FIELDS = [f"exposed_comm_{d.lower()}" for d in [*comm.DIMENSIONS, comm.CONCURRENT]]


@dataclass
class Analysis:
    """The classified trace: per-step partition plus the frames it was computed from."""

    trace: Trace
    steps: pl.DataFrame  # rank, step, start_*, duration_*, <bucket>_ns/_us, overlapped_comm_*, idle_<cause>_*, exposed_comm_<dim>_*
    gpu: pl.DataFrame  # GPU work events with their class (cls)
    windows: pl.DataFrame  # rank, step, wstart_ns, wend_ns, cpu_start_ns, cpu_end_ns
    warnings: list[str] = field(default_factory=list)
    recompute_ops: pl.DataFrame | None = None  # recomputed host ops (classify.recompute.recompute_ops)
    recomputed_by_name: pl.DataFrame | None = None  # rank, name, count, gpu_ns (top-level recomputed ops)
    collectives: pl.DataFrame | None = None  # one row per communication kernel (classify.comm.collectives)
    comm: pl.DataFrame | None = None  # rank, step, by (type/group/dim), key, count, bytes, time/wait/transfer/exposed/overlapped ns
    cross_rank: pl.DataFrame | None = None  # per step over ranks: slowest rank, skew, straggler bucket
    outside_steps: pl.DataFrame | None = None  # rank, outside_ns, before_ns, after_ns: GPU busy time in no step

    def _fields(self) -> list[str]:
        return [f for f in [*FIELDS, *IDLE_FIELDS, *COMM_DIM_FIELDS] if f"{f}_ns" in self.steps.columns]

    def totals(self) -> pl.DataFrame:
        """Per rank: step count and every field summed over its steps."""
        return (
            self.steps.group_by("rank")
            .agg(pl.len().alias("steps"), *[pl.col(f"{f}_ns").sum() for f in self._fields()])
            .with_columns(*[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in self._fields()])
            .sort("rank")
        )


def analyze(
    trace: Trace,
    step_name: str | None = DEFAULT_STEP,
    recompute_pattern: str | None = None,
    bus_bw_gbps: float = comm.DEFAULT_BUS_BW_GBPS,
    comm_kernels: list[str] | None = None,
) -> Analysis:
    """Classify a trace. ``step_name`` names the step range (``None``: whole trace = one step);
    ``recompute_pattern``: regex of extra host ranges (e.g. NVTX) whose contents are recompute;
    ``bus_bw_gbps``: bus bandwidth for single-rank transfer estimates;
    ``comm_kernels``: extra kernel-name regexes that are communication (``--comm-kernel``)."""
    source = ", ".join(str(s) for s in trace.sources[:3]) or "trace"
    if not trace.events.select(pl.col("kind").is_in(GPU_WORK_KINDS).any()).item():
        truncated = trace.meta.filter(pl.col("truncated"))
        if truncated.height:
            raise NoGpuActivity(
                "no GPU activity in what was recovered of a truncated trace "
                "(Kineto writes GPU events last, so they were cut off)",
                source,
            )
        notes = [w.split(": ", 1)[-1] for w in trace.warnings if RANGE_PROFILER_NOTE in w]
        if notes:
            raise NoGpuActivity(f"no GPU activity to break down: {notes[0]}", source)
        raise NoGpuActivity(
            "no GPU activity (no kernel, memcpy or memset events): a CPU-only profile has nothing to break down",
            source,
        )
    check_ranks_aligned(trace.events, source)
    check_event_span(trace.events, source)
    windows, warnings = gpu_windows(trace.events, step_name)
    refuse_duplicate_steps(windows, trace.meta, step_name)
    check_windows(windows, trace.events, source)
    rc_ops = recompute.recompute_ops(trace.events, recompute_pattern)
    gpu = label_gpu(trace.events, rc_ops, comm_kernels=comm_kernels)
    steps = partition(gpu, windows, source)
    outside = outside_steps(gpu, windows)
    coll = comm.collectives(trace.events, gpu, windows, trace.meta, bus_bw_gbps)
    expo = comm.exposure(gpu, coll, windows)
    idle_parts = idle.idle_split(trace.events, gpu, windows, coll)
    dims = (
        expo.filter(pl.col("by") == "dim")
        .with_columns(pl.format("exposed_comm_{}_ns", pl.col("key").str.to_lowercase()).alias("col"))
        .pivot(on="col", index=["rank", "step"], values="exposed_ns", aggregate_function="sum")
    ) if expo.height else pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64})
    steps = (
        steps.join(idle_parts, on=["rank", "step"], how="left")
        .join(dims, on=["rank", "step"], how="left")
        .with_columns(
            *[pl.col(f"{f}_ns").fill_null(0).cast(pl.Int64) if f"{f}_ns" in dims.columns or f.startswith("idle_") else pl.lit(0, pl.Int64).alias(f"{f}_ns") for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]]
        )
        .with_columns(*[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]])
    )
    extra = [c for c in dims.columns if c not in steps.columns]
    if extra:  # a dimension outside DIMENSIONS would break the sum: never silently
        raise AssertionError(f"unexpected exposed-comm dimension columns {extra}")
    check_causes(steps, IDLE_FIELDS, COMM_DIM_FIELDS, source)
    warnings = [*warnings, *outside_warnings(outside), *comm.comm_warnings(coll, trace.meta)]
    if trace.meta["truncated"].any():
        warnings.append(
            "the trace was truncated: host runtime records (launch and synchronisation calls) after the cut "
            "are lost, so the idle split by cause may be incomplete; the partition of the kept steps is exact"
        )
    if coll.height and coll["transfer_estimated"].any():
        warnings.append(
            f"collective wait/transfer for {coll['transfer_estimated'].sum()} of {coll.height} kernels is an estimate "
            f"(bytes over an assumed {bus_bw_gbps:g} GB/s bus bandwidth; load all ranks of a group to measure it)"
        )
    return Analysis(
        trace=trace,
        steps=steps,
        gpu=gpu,
        windows=windows,
        warnings=[*trace.warnings, *warnings],
        recompute_ops=rc_ops,
        recomputed_by_name=recompute.ops_by_name(rc_ops, gpu),
        collectives=coll,
        comm=comm.summary(coll, expo),
        cross_rank=crossrank.cross_rank(steps, IDLE_FIELDS, coll),
        outside_steps=outside,
    )


def breakdown(trace: Trace, step_name: str | None = DEFAULT_STEP) -> pl.DataFrame:
    """Per-rank, per-step exact partition of GPU time (see :mod:`.partition`)."""
    return analyze(trace, step_name).steps
