"""Classifiers: canonical frames -> per-rank, per-step partition of GPU time.

Public surface: :class:`Analysis` (everything the renderers need), built from the per-rank
classifiers here by :func:`traceanalyzer.engine.analyze` (map per rank, reduce per job).
Classifiers never print.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.classify import comm, idle
from traceanalyzer.classify.partition import BUCKETS, FIELDS
from traceanalyzer.schema import Trace

__all__ = ["Analysis", "BUCKETS", "FIELDS", "IDLE_FIELDS", "COMM_DIM_FIELDS"]

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
    kernel_rows: pl.DataFrame | None = None  # per rank and kernel: calls, total_ns (classify.kernels.kernel_rows)
    exposed_kernels: pl.DataFrame | None = None  # comm kernels with exposed time (classify.kernels.exposed_rows)

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
