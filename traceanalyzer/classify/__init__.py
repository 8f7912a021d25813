"""Classifiers: canonical frames -> per-rank, per-step partition of GPU time.

Public surface: :func:`analyze` (everything the renderers need) and :func:`breakdown`
(the per-rank, per-step partition as one polars DataFrame). Classifiers never print.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.classify.labels import label_gpu
from traceanalyzer.classify.partition import BUCKETS, FIELDS, partition
from traceanalyzer.classify.steps import DEFAULT_STEP, gpu_windows
from traceanalyzer.errors import NoGpuActivity
from traceanalyzer.schema import GPU_WORK_KINDS, Trace

__all__ = ["Analysis", "analyze", "breakdown", "BUCKETS", "FIELDS"]


@dataclass
class Analysis:
    """The classified trace: per-step partition plus the frames it was computed from."""

    trace: Trace
    steps: pl.DataFrame  # rank, step, start_*, duration_*, <bucket>_ns/_us, overlapped_comm_*
    gpu: pl.DataFrame  # GPU work events with their class (cls)
    windows: pl.DataFrame  # rank, step, wstart_ns, wend_ns, cpu_start_ns, cpu_end_ns
    warnings: list[str] = field(default_factory=list)

    def totals(self) -> pl.DataFrame:
        """Per rank: step count and every field summed over its steps."""
        return (
            self.steps.group_by("rank")
            .agg(pl.len().alias("steps"), *[pl.col(f"{f}_ns").sum() for f in FIELDS])
            .with_columns(*[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in FIELDS])
            .sort("rank")
        )


def analyze(trace: Trace, step_name: str = DEFAULT_STEP) -> Analysis:
    source = ", ".join(str(s) for s in trace.sources[:3]) or "trace"
    if not trace.events.select(pl.col("kind").is_in(GPU_WORK_KINDS).any()).item():
        truncated = trace.meta.filter(pl.col("truncated"))
        if truncated.height:
            kept = truncated["recovered_fraction"].min()
            raise NoGpuActivity(
                f"no GPU activity in the recovered {kept:.0%} of a truncated trace "
                "(Kineto writes GPU events last, so they were cut off)",
                source,
            )
        raise NoGpuActivity(
            "no GPU activity (no kernel, memcpy or memset events): a CPU-only profile has nothing to break down",
            source,
        )
    windows, warnings = gpu_windows(trace.events, step_name)
    gpu = label_gpu(trace.events)
    steps = partition(gpu, windows, source)
    return Analysis(trace=trace, steps=steps, gpu=gpu, windows=windows, warnings=[*trace.warnings, *warnings])


def breakdown(trace: Trace, step_name: str = DEFAULT_STEP) -> pl.DataFrame:
    """Per-rank, per-step exact partition of GPU time (see :mod:`.partition`)."""
    return analyze(trace, step_name).steps
