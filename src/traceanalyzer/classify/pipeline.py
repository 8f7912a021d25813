"""The recipe of the breakdown: one or more ranks' canonical events -> their tables.

Everything here needs one rank only (several ranks in one frame give each rank exactly what it
gets alone): the step windows, the recompute marking, the labels, the partition with every cause
column, the collective instances (type, bytes, group, step, instance: what cross-rank matching
needs), the exposed communication per type / group / dimension, the recomputed ops by name, and
the optional tables (:data:`EXTRAS`, the kernel and op rows) when asked. The engine runs this
recipe in its rank workers and reduces the ranks to the job; the order of the steps here is the
order of the checks, so the first bad input found is the one reported.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import polars as pl

from traceanalyzer import queries
from traceanalyzer.classify import (
    COMM_DIM_FIELDS, HOST_FIELDS, IDLE_FIELDS, annotation_ranges, comm, idle, launches, profiler_cost, recompute, replaypoints,
    tracefacts,
)
from traceanalyzer.classify.invariants import check_event_span, check_windows
from traceanalyzer.classify.labels import label_gpu
from traceanalyzer.classify.partition import FIELDS, check_causes, partition
from traceanalyzer.classify.steps import gpu_windows, outside_steps, refuse_duplicate_steps
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS

#: the per-step table's columns, in this order
STEP_COLUMNS = [
    "rank", "step", "start_ns", "duration_ns", "compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns",
    "overlapped_comm_ns", "start_us", *[f"{f}_us" for f in FIELDS],
    *[f"{f}_ns" for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]], *[f"{f}_us" for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]],
    *[f"{f}_ns" for f in HOST_FIELDS], *[f"{f}_us" for f in HOST_FIELDS],
]
#: the profiler's cost and the host-bound gains per step (classify.profiler_cost), after STEP_COLUMNS
PROFILER_COLUMNS = [
    "profiler_host_ns", "profiler_overhead_ns", "unprofiled_estimate_ns",
    "profiler_host_us", "profiler_overhead_us", "unprofiled_estimate_us",
    *[f"gain_{g}_ns" for g in profiler_cost.GAINS], "profiler_options", "profiler_note",
]


@dataclass
class RankTables:
    """The breakdown's tables of the ranks classified together (every frame has a ``rank`` column)."""

    steps: pl.DataFrame
    windows: pl.DataFrame
    instances: pl.DataFrame  # comm.collective_instances
    exposure: pl.DataFrame  # comm.exposure
    points: pl.DataFrame  # replaypoints.rank_points: what the cross-rank replay needs of the ranks
    recompute_ops: pl.DataFrame
    outside_steps: pl.DataFrame  # rank, outside_ns, before_ns, after_ns (classify.steps.outside_steps)
    gpu: pl.DataFrame  # the labelled GPU work
    #: the optional tables of :data:`BESIDE` asked for, started beside the classification: name
    #: -> a function that gives the table (or raises its error) when called
    beside: dict[str, Callable[[], pl.DataFrame]] = field(default_factory=dict)


T = TypeVar("T")

#: whether a rank's classification runs the work that needs only the events, the GPU work and the
#: step windows (the profiler's cost, :data:`BESIDE`) in a second thread (the tests compare both ways)
CONCURRENT = True


class Beside:
    """Work started beside a rank's classification: in a second thread where the process has a
    core to spare (polars runs more than one thread: a file analysed in the command's own
    process, not a pool worker) and the frame is small enough that the work's fixed cost per
    query is most of it (:func:`beside`), else run where its result is asked for. Either way a
    result (or its error) is seen only where it is asked for, so the order of the checks is
    kept; polars releases Python's interpreter lock while a query runs, so the two threads'
    queries overlap. The block that made it (:func:`beside`) waits for whatever is still
    running when it ends."""

    def __init__(self, concurrent: bool) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceanalyzer-beside") if concurrent else None

    def submit(self, fn: Callable[..., T], *args: object) -> Callable[[], T]:
        """``fn(*args)``, started now (with this thread's query engine: :mod:`traceanalyzer.queries`);
        call what this returns for its result."""
        if self._pool is None:
            return lambda: fn(*args)
        return self._pool.submit(contextvars.copy_context().run, fn, *args).result

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def beside(events: int) -> Iterator[Beside]:
    """A :class:`Beside` for the classification of a frame of ``events`` rows: concurrent where
    polars has more than one thread and the frame is below :data:`.queries.LARGE_EVENTS`. A
    large frame's queries are its data, not their overhead, and run on polars' streaming engine
    on every thread already: there the second thread's working frames would only raise the
    peak (200 MB of JSON in one process: 0.85x the time, 1.06x the peak memory)."""
    side = Beside(CONCURRENT and pl.thread_pool_size() > 1 and events < queries.LARGE_EVENTS)
    try:
        yield side
    finally:
        side.close()


def breakdown(events: pl.DataFrame, meta: pl.DataFrame, *, step_name: str | None, recompute_pattern: str | None,
              comm_kernels: tuple[str, ...], source: str, window_warnings: list[str],
              profiler_options: dict[int, list[str]], side: Beside | None = None,
              tables: frozenset[str] = frozenset()) -> RankTables:
    """Classify ``events`` (of the ranks in ``meta``): the partition of every step and its causes.
    ``window_warnings`` gets each "rank R: n of m steps ... skipped" as it is found (kept when a
    later check fails); ``profiler_options``: per rank, the options its file's header lists (the
    profiler's cost per step reads them with those its events show). Raises a
    :class:`~traceanalyzer.errors.TraceAnalyzerError` for a bad input.

    ``side`` (:func:`beside`): where the work that needs only the events, the GPU work and the
    step windows runs (the profiler's cost, and the tables of :data:`BESIDE` that ``tables``
    names, in :attr:`RankTables.beside`); without one, :func:`beside` of ``events``."""
    if side is None:
        with beside(events.height) as own:
            return breakdown(events, meta, step_name=step_name, recompute_pattern=recompute_pattern, comm_kernels=comm_kernels,
                             source=source, window_warnings=window_warnings, profiler_options=profiler_options, side=own,
                             tables=tables)
    check_event_span(events, source)
    # every GPU item with when (and on which host thread) its launch began: read by the step
    # windows and by the idle split
    launched = idle.launch_times(
        events.lazy(), events.lazy().filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("rank", "start_ns", "end_ns", "correlation", "external_id"),
        tid=True,
    ).collect(engine=query_engine())
    windows, win_warnings = gpu_windows(events, step_name, launched)
    window_warnings.extend(w for w in win_warnings if " step markers: " not in w)  # the reducer words the other
    refuse_duplicate_steps(windows, meta, step_name)
    check_windows(windows, events, source)
    cost = side.submit(_profiler_cost, events, windows, profiler_options)
    ev = events.lazy()
    threads = pl.concat([recompute.recompute_threads(ev, recompute_pattern), comm.linking_threads(ev)]).unique()
    tree = recompute.host_tree(events, threads).collect(engine=query_engine())
    rc_ops = recompute.recompute_ops(events, recompute_pattern, tree=tree)
    gpu = label_gpu(events, rc_ops, comm_kernels=list(comm_kernels) or None)
    early = {name: side.submit(BESIDE[name][0], events, gpu, windows) for name in sorted(tables & BESIDE.keys())}
    steps = partition(gpu, windows, source)
    outside = outside_steps(gpu, windows)
    inst = comm.collective_instances(events, gpu, windows, meta, tree=tree)
    del tree
    expo = comm.exposure(gpu, inst, windows)
    points = replaypoints.rank_points(gpu, windows, inst)
    idle_parts = idle.idle_split(events, gpu, windows, inst, launched)
    del launched
    steps = _with_causes(steps, idle_parts, expo)
    check_causes(steps, IDLE_FIELDS, COMM_DIM_FIELDS, source, HOST_FIELDS)
    steps = _with_profiler_cost(steps, cost())
    done = {name: _finish(BESIDE[name][1], part, steps) for name, part in early.items()}
    return RankTables(steps, windows, inst, expo, points, rc_ops, outside, gpu, done)


def _finish(finish: Callable[[T, pl.DataFrame], pl.DataFrame], part: Callable[[], T], steps: pl.DataFrame) -> Callable[[], pl.DataFrame]:
    """The table of a :data:`BESIDE` entry, made of its work's result and the ``steps`` when asked for."""
    return lambda: finish(part(), steps)


def frames(r: RankTables, events: pl.DataFrame, tables: frozenset[str]) -> dict[str, pl.DataFrame]:
    """The frames a rank hands on: the compact ones, and the GPU work and the kernel and op rows
    where ``tables`` asks for them."""
    frames = {
        "steps": r.steps, "windows": r.windows, "instances": r.instances, "exposure": r.exposure, "points": r.points,
        "recompute_ops": r.recompute_ops,
        "recomputed_by_name": recompute.ops_by_name(r.recompute_ops, r.gpu), "outside_steps": r.outside_steps,
    }
    if "gpu" in tables:
        frames["gpu"] = r.gpu
    if "kernel_rows" in tables or "kernel_stats" in tables:
        from traceanalyzer.classify.kernels import exposed_rows, kernel_rows
        from traceanalyzer.classify.partition import segment_frame
        from traceanalyzer.classify.tables import table_rows

        seg = segment_frame(r.gpu, r.windows).sort("rank", "t0").collect(engine=query_engine())
        if "kernel_rows" in tables:
            frames["kernel_rows"], frames["exposed_kernels"] = kernel_rows(r.gpu, r.windows), exposed_rows(r.gpu, r.windows, seg)
        frames["kernel_stats"], frames["op_stats"] = table_rows(events, r.gpu, r.windows, seg)
    return frames


#: how the optional tables of ``engine.TABLES`` held in ``Analysis.extras`` are computed: name ->
#: the function; each takes ``(events, gpu, windows, steps, source)`` and returns a compact frame
#: with a ``rank`` column (never raw events, except ``launch_rows``: one row per launched GPU item)
EXTRAS: dict[str, Callable[[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame, str], pl.DataFrame]] = {
    "annotations": annotation_ranges.rank_table,
    "launches": launches.rank_steps,
    "launch_rows": launches.rank_pairs,
    "queue": launches.rank_queue,
    "queue_series": launches.rank_queue_series,
    "trace_facts": tracefacts.rank_facts,
}


#: the optional tables of :data:`EXTRAS` whose work needs only the events, the labelled GPU work
#: and the step windows (not the partition): name -> (that work, what makes the table of its
#: result and the partition's steps). A classification with a second thread (:class:`Beside`)
#: does that work there while it partitions the steps and splits their causes.
BESIDE: dict[str, tuple[Callable[[pl.DataFrame, pl.DataFrame, pl.DataFrame], object],
                        Callable[[object, pl.DataFrame], pl.DataFrame]]] = {
    "trace_facts": (lambda events, gpu, windows: tracefacts.trace_facts(events, windows), lambda facts, steps: facts),
    "launches": (launches.launch_parts, launches.with_steps),
}


def extra_table(name: str, events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame,
                source: str) -> pl.DataFrame:
    """The optional table ``name`` (:data:`EXTRAS`) of the ranks in ``events``."""
    return EXTRAS[name](events, gpu, windows, steps, source)


def _with_causes(steps: pl.DataFrame, idle_parts: pl.DataFrame, expo: pl.DataFrame) -> pl.DataFrame:
    """The partition joined with the idle split and the exposed communication by dimension."""
    dims = (
        expo.filter(pl.col("by") == "dim")
        .with_columns(pl.format("exposed_comm_{}_ns", pl.col("key").str.to_lowercase()).alias("col"))
        .pivot(on="col", index=["rank", "step"], values="exposed_ns", aggregate_function="sum")
    ) if expo.height else pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64})
    extra = [c for c in dims.columns if c not in ("rank", "step") and c.removesuffix("_ns") not in COMM_DIM_FIELDS]
    if extra:  # a dimension outside COMM_DIMENSIONS would break the sum: never silently
        raise AssertionError(f"unexpected exposed-comm dimension columns {extra}")
    steps = (
        steps.join(idle_parts, on=["rank", "step"], how="left")
        .join(dims, on=["rank", "step"], how="left")
        .with_columns(
            *[pl.col(f"{f}_ns").fill_null(0).cast(pl.Int64) if f"{f}_ns" in dims.columns or f.startswith("idle_") else pl.lit(0, pl.Int64).alias(f"{f}_ns") for f in [*IDLE_FIELDS, *HOST_FIELDS, *COMM_DIM_FIELDS]]
        )
        .with_columns(*[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in [*IDLE_FIELDS, *HOST_FIELDS, *COMM_DIM_FIELDS]])
    )
    return steps.select(STEP_COLUMNS)


def _profiler_cost(events: pl.DataFrame, windows: pl.DataFrame, header_options: dict[int, list[str]]) -> pl.DataFrame:
    """The profiler's cost, the unprofiled estimate and the host-bound gains per step
    (:mod:`traceanalyzer.classify.profiler_cost`): the options each file's header lists and
    those its events show."""
    seen = {rank: sorted(set(header_options.get(rank) or []) | set(shown))
            for rank, shown in profiler_cost.infer_options_by_rank(events).items()}
    return profiler_cost.profiler_cost(events, windows, seen)


def _with_profiler_cost(steps: pl.DataFrame, cost: pl.DataFrame) -> pl.DataFrame:
    """The steps joined with :func:`_profiler_cost`."""
    out = steps.join(cost, on=["rank", "step"], how="left").with_columns(
        *[(pl.col(c) / 1000).alias(c.replace("_ns", "_us")) for c in ("profiler_host_ns", "profiler_overhead_ns", "unprofiled_estimate_ns")])
    return out.select(*STEP_COLUMNS, *PROFILER_COLUMNS)
