"""What the layers hand each other: the classified job (:class:`Analysis`) and the critical path
(:class:`CriticalPath`). Plain containers of polars frames, in the ground so that every layer,
the renderers included, can name them without importing the layer that fills them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import polars as pl

from traceanalyzer.buckets import BUCKETS, COMM_DIM_FIELDS, FIELDS, HOST_FIELDS, IDLE_FIELDS
from traceanalyzer.schema import Trace

__all__ = ["Analysis", "CriticalPath"]


@dataclass
class Analysis:
    """The classified trace: per-step partition plus the frames it was computed from."""

    trace: Trace  # the trace analysed (its events are empty when a command's workers kept only tables)
    steps: pl.DataFrame  # rank, step, start_*, duration_*, <bucket>_ns/_us, overlapped_comm_*, idle_<cause>_*, exposed_comm_<dim>_*
    gpu: pl.DataFrame  # GPU work events with their class (cls)
    windows: pl.DataFrame  # rank, step, wstart_ns, wend_ns, cpu_start_ns, cpu_end_ns
    warnings: list[str] = field(default_factory=list)  # the trace's and the classifiers' warnings
    recompute_ops: pl.DataFrame | None = None  # recomputed host ops (classify.recompute.recompute_ops)
    recomputed_by_name: pl.DataFrame | None = None  # rank, name, count, gpu_ns (top-level recomputed ops)
    collectives: pl.DataFrame | None = None  # one row per communication kernel (classify.comm.collectives); its text columns (name, coll_type, pg_name, pg_desc, pg_ranks, dim) are pl.Categorical
    comm: pl.DataFrame | None = None  # rank, step, by (type/group/dim), key, count, bytes, time/wait/transfer/exposed/overlapped ns
    cross_rank: pl.DataFrame | None = None  # per step over ranks: slowest rank, skew, straggler bucket
    replay_points: pl.DataFrame | None = None  # per rank: step starts/ends and collective arrivals with their anchor and lead (classify.replaypoints.rank_points)
    replay: pl.DataFrame | None = None  # rank, step, measured_ms, replayed_ms: the cross-rank replay of the measured job (classify.replay.replay_table); None when no rank waits on another
    outside_steps: pl.DataFrame | None = None  # rank, outside_ns, before_ns, after_ns: GPU busy time in no step
    kernel_rows: pl.DataFrame | None = None  # per rank and kernel: calls, total_ns (classify.kernels.kernel_rows)
    exposed_kernels: pl.DataFrame | None = None  # comm kernels with exposed time (classify.kernels.exposed_rows)
    kernel_stats: pl.DataFrame | None = None  # per rank, step, kernel (classify.kernelstats.kernel_stat_rows)
    op_stats: pl.DataFrame | None = None  # per rank, step, host op and shapes (classify.opstats.op_stat_rows)
    extras: dict[str, pl.DataFrame] = field(default_factory=dict)  # optional tables asked for (engine.rank.TABLES)
    options: Any = None  # the options it was made with (step range, patterns, optional tables): a verb that needs another table builds it with these
    _cross_rank_view: Any = field(default=None, init=False, repr=False, compare=False)  # straggler_view's, computed on first use

    def __repr__(self) -> str:
        """A few lines: ranks, steps, events, mean step time and its partition (never the frames)."""
        st = self.steps
        ranks = st.get_column("rank").n_unique() if st.height else 0
        steps = st.get_column("step").n_unique() if st.height else 0
        head = f"<Analysis {ranks} rank{'s' if ranks != 1 else ''} x {steps} step{'s' if steps != 1 else ''} ({st.height} rank-step{'s' if st.height != 1 else ''})"
        if not st.height:
            return head + ">"
        total = int(st.get_column("duration_ns").sum())
        lo, hi = st.select(pl.col("start_ns").min().alias("lo"), (pl.col("start_ns") + pl.col("duration_ns")).max().alias("hi")).row(0)
        parts = ", ".join(f"{b} {100 * int(st.get_column(f'{b}_ns').sum()) / total:.1f}%" for b in BUCKETS) if total else ""
        return (f"{head}, {self.trace.events.height:,} events, span {(hi - lo) / 1e6:.3f} ms\n"
                f"  mean step {total / st.height / 1e6:.3f} ms: {parts}"
                f"{f'; {len(self.warnings)} warnings' if self.warnings else ''}>")

    def straggler_view(self) -> dict[str, Any]:
        """What each straggler costs the job (:func:`traceanalyzer.classify.stragglercost.job_view`
        at the default tolerance): ``costs`` (one row per rank, phase and collective, most costly
        first: its first row is the top straggler), ``ranks`` (made others wait / waited),
        ``replay``, ``wait_matrix``, ``total_cost_ms_per_step``, ``warnings``. Computed on first
        use (a replay per rank and phase), then kept; a copy made by ``dataclasses.replace``
        (a selection) computes its own."""
        if self._cross_rank_view is None:
            # the classifiers compute it; this ground module names them only by string (an import
            # here would make every layer that names the type import classify)
            import importlib

            cost = importlib.import_module("traceanalyzer.classify.stragglercost")
            tolerance = importlib.import_module("traceanalyzer.classify.stragglers").DEFAULT_TOLERANCE
            self._cross_rank_view = cost.job_view(self, tolerance)
        return self._cross_rank_view

    def save(self, path: str | Any) -> Any:
        """Write this analysis to one file (``.taz``: a ZIP of Parquet frames and a JSON header
        with the options it was made with and its trace files' fingerprints), whole or not at
        all and never over one of its trace files; ``traceanalyzer.load_analysis(path)`` reads
        it back, and every verb and command that takes a trace takes that file. Returns the
        path written (a :class:`~pathlib.Path`).

        Raises:
            OutputError: ``path`` is a trace file of the analysis, a directory, or cannot be
                written.
        """
        # the writer is in a layer above (it fingerprints the inputs with the parse cache): this
        # ground module names it only by string, as straggler_view does the classifiers
        import importlib

        return importlib.import_module("traceanalyzer.analysisfile").write(self, path)

    def _fields(self) -> list[str]:
        return [f for f in [*FIELDS, *IDLE_FIELDS, *HOST_FIELDS, *COMM_DIM_FIELDS] if f"{f}_ns" in self.steps.columns]

    def totals(self) -> pl.DataFrame:
        """Per rank: ``rank``, ``steps`` (UInt32) and every field of :attr:`steps` summed over the
        rank's steps (``<field>_ns`` Int64, ``<field>_us`` Float64), sorted by rank."""
        return (
            self.steps.group_by("rank")
            .agg(pl.len().alias("steps"), *[pl.col(f"{f}_ns").sum() for f in self._fields()])
            .with_columns(*[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in self._fields()])
            .sort("rank")
        )


class CriticalPath(NamedTuple):
    """What :func:`traceanalyzer.critical_path` returns: two polars frames (and the warnings)."""

    summary: pl.DataFrame
    segments: pl.DataFrame
    warnings: list[str]
    host_gaps: bool = True  # host time outside every op weighed as the host's (critical_path's host_gaps)
