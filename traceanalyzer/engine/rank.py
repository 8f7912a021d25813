"""The map step: one rank's events -> a compact :class:`RankResult`.

Everything here needs one rank only: the step windows, the recompute marking, the labels, the
partition with every cause column, the collective instances (type, bytes, group, step, instance:
what cross-rank matching needs), the exposed communication per type / group / dimension, the
recomputed ops by name, and the small tables the job checks need (step starts, median event
time). The raw events never leave the worker unless a renderer asks for them (``keep``).

Errors about the input (:class:`~traceanalyzer.errors.TraceAnalyzerError`) are returned in the
result, not raised, so that the job reducer raises them in the order the single-process path
would (the first file's parse error, "no GPU activity" before a per-rank invariant, ...).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from typing import Callable

import polars as pl

from traceanalyzer.classify import COMM_DIM_FIELDS, HOST_FIELDS, IDLE_FIELDS, comm, idle, profiler_cost, recompute, replaypoints
from traceanalyzer.classify.invariants import check_event_span, check_windows
from traceanalyzer.classify.labels import label_gpu
from traceanalyzer.classify.partition import FIELDS, check_causes, partition
from traceanalyzer.classify.steps import DEFAULT_STEP, gpu_windows, outside_steps, refuse_duplicate_steps
from traceanalyzer.errors import InputNotFound, InternalFailure, InvalidArgument, TraceAnalyzerError
from traceanalyzer.parsers.clean import step_starts
from traceanalyzer.queries import query_engine, sized
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


#: THE registry of optional per-rank tables: everything an analysis may hold beyond its compact
#: tables (the partition, the collectives, the exposed communication, the recomputed ops) is named
#: here, asked for by name in :attr:`Options.tables`, computed by the rank workers only when asked,
#: and held by the :class:`~traceanalyzer.classify.Analysis` (the attribute(s) named, or
#: ``Analysis.extras[name]``). A verb that needs one asks :func:`traceanalyzer.engine.with_tables`
#: for an analysis that holds it: built with the same options, never re-classified with others.
TABLES: dict[str, str] = {
    "events": "every event (Analysis.trace.events): annotate's free pid, reconcile's matmul FLOPs, the critical path",
    "gpu": "the labelled GPU work (Analysis.gpu): timelines",
    "kernel_rows": "per rank and kernel: calls and time, and the exposed communication kernels "
                   "(Analysis.kernel_rows, Analysis.exposed_kernels): the report's top kernels",
    "kernel_stats": "per rank, step and kernel / host op (Analysis.kernel_stats, Analysis.op_stats): kernels, ops, compare",
    "annotations": "user annotation ranges (Analysis.extras['annotations'])",
    "launches": "launch statistics per step (Analysis.extras['launches'])",
    "launch_rows": "one row per launched GPU item (Analysis.extras['launch_rows'])",
    "queue": "launch queue summary per stream (Analysis.extras['queue'])",
    "queue_series": "launch queue length over time (Analysis.extras['queue_series'])",
    "memory": "the allocator events of each Kineto rank file (engine.load only)",
}

#: the older spellings of ``keep`` (accepted by :class:`Options`, folded into ``tables``)
KEEP = {"compact": (), "report": ("kernel_rows", "kernel_stats"), "gpu": ("gpu",), "events": ("events", "gpu")}


def check_tables(names) -> frozenset[str]:
    """``names`` as a set of :data:`TABLES` names (InvalidArgument for another)."""
    from traceanalyzer.errors import InvalidArgument

    if isinstance(names, str):
        names = (names,)
    out = frozenset(names)
    unknown = sorted(out - TABLES.keys())
    if unknown:
        raise InvalidArgument(f"tables: no optional table {unknown[0]!r} (known: {', '.join(TABLES)})")
    return out


@dataclass
class Options:
    """How to classify: the same for every rank of a job.

    ``tables`` names the optional tables (:data:`TABLES`) to compute besides the compact ones.
    ``keep``, ``keep_gpu``, ``extras`` and ``memory`` (and ``tables=True``) are older spellings
    of the same request (deprecated): accepted when constructing, folded into ``tables``, and
    read back from it."""

    step_name: str | None = DEFAULT_STEP
    recompute_pattern: str | None = None
    bus_bw_gbps: float = comm.DEFAULT_BUS_BW_GBPS
    keep: InitVar[str] = "compact"  # older spelling: one of KEEP
    keep_gpu: InitVar[bool] = False  # older spelling of "gpu" in tables
    cache: bool = False
    comm_kernels: tuple[str, ...] = ()  # extra kernel-name regexes that are communication (--comm-kernel)
    tables: frozenset[str] = frozenset()  # optional tables (names in TABLES); True: the older spelling of {"kernel_stats"}
    extras: InitVar[tuple[str, ...]] = ()  # older spelling of tables (its non-core names)
    parse_only: bool = False  # the events (with "events") and the job checks' tables: nothing classified (engine.load)
    memory: InitVar[bool] = False  # older spelling of "memory" in tables

    def __post_init__(self, keep: str, keep_gpu: bool, extras: tuple[str, ...], memory: bool) -> None:
        if keep not in KEEP:
            raise InvalidArgument(f"must be one of {', '.join(KEEP)}, got {keep!r}", "keep")
        names = set(KEEP[keep]) | set(extras) | ({"gpu"} if keep_gpu else set()) | ({"memory"} if memory else set())
        tables = self.tables
        if isinstance(tables, bool):
            tables = ("kernel_stats",) if tables else ()
        self.tables = check_tables(names | set(check_tables(tables)))

    def with_tables(self, *names: str, without: tuple[str, ...] = ()) -> "Options":
        """These options asking for ``names`` too (and not for ``without``)."""
        return replace(self, tables=(self.tables | check_tables(names)) - frozenset(without))


# the older spellings, read back from ``tables`` (set after the class is made: as constructor
# arguments they are init-only and fold into ``tables``)
Options.keep = property(lambda self: next((k for k in ("events", "report", "gpu") if set(KEEP[k]) <= self.tables), "compact"))  # type: ignore[assignment]
Options.keep_gpu = property(lambda self: "gpu" in self.tables)  # type: ignore[assignment]
Options.extras = property(lambda self: tuple(sorted(n for n in self.tables if n in EXTRAS)))  # type: ignore[assignment]
Options.memory = property(lambda self: "memory" in self.tables)  # type: ignore[assignment]


@dataclass
class RankResult:
    """One rank file's compact result (see the module docstring)."""

    index: int  # position of the file in the job's file list
    file: str
    rank: int  # the rank the frames are labelled with (the reducer may relabel)
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the file's own (parse, clean)
    error: TraceAnalyzerError | None = None  # a parse error: the job fails with it
    deferred: TraceAnalyzerError | None = None  # a classification error: raised after the job checks
    nbytes: int = 0
    shift_borrowed: int = 0  # the job's base time this file was shifted by (it had none)
    seconds: float = 0.0
    pid: int = 0  # the process that analysed it
    group: int = 0  # RankTask.group
    cache_hit: bool = False  # parsed events came from the parse cache
    sha256: str | None = None  # the file's content hash, when asked
    threads: int = 0  # its polars thread pool
    has_gpu: bool = False
    first_ns: int | None = None  # earliest event start (a truncated file's borrowed base time)
    mid_ns: float | None = None  # median event start (clock alignment, job checks)
    step_starts: pl.DataFrame | None = None  # rank, step, start_ns of ProfilerStep#N ranges (job checks)
    stepless: bool = False  # no step markers: the whole GPU span is step 0
    window_warnings: list[str] = field(default_factory=list)  # "rank R: n of m steps ... skipped"
    steps: pl.DataFrame | None = None
    windows: pl.DataFrame | None = None
    instances: pl.DataFrame | None = None  # comm.collective_instances
    exposure: pl.DataFrame | None = None  # comm.exposure
    points: pl.DataFrame | None = None  # replaypoints.rank_points: what the cross-rank replay needs of the rank
    recompute_ops: pl.DataFrame | None = None
    recomputed_by_name: pl.DataFrame | None = None
    outside_steps: pl.DataFrame | None = None  # rank, outside_ns, before_ns, after_ns (classify.steps.outside_steps)
    gpu: pl.DataFrame | None = None  # only with "gpu" in Options.tables
    kernel_rows: pl.DataFrame | None = None  # only with "kernel_rows"
    exposed_kernels: pl.DataFrame | None = None  # only with "kernel_rows"
    kernel_stats: pl.DataFrame | None = None  # with "kernel_stats" or "kernel_rows" (classify.kernelstats.kernel_stat_rows)
    op_stats: pl.DataFrame | None = None  # as kernel_stats (classify.opstats.op_stat_rows)
    events: pl.DataFrame | None = None  # only with "events"
    extras: dict[str, pl.DataFrame] = field(default_factory=dict)  # the tables of EXTRAS asked for, by name
    memory: pl.DataFrame | None = None  # with "memory": the allocator events, with rank
    profiler_options: list[str] | None = None  # the profiler options its file's header lists (None: not read)

    def relabel(self, rank: int) -> None:
        """Give every frame the job's rank for this file."""
        if rank == self.rank:
            return
        old = self.rank
        for name in ("step_starts", "steps", "windows", "instances", "exposure", "points", "recompute_ops", "recomputed_by_name", "outside_steps", "gpu", "events",
                     "kernel_rows", "exposed_kernels", "kernel_stats", "op_stats", "memory"):
            df = getattr(self, name)
            if df is not None and "rank" in df.columns:
                setattr(self, name, df.with_columns(pl.lit(rank, pl.Int32).alias("rank")))
        self.extras = {k: v.with_columns(pl.lit(rank, pl.Int32).alias("rank")) if "rank" in v.columns else v
                       for k, v in self.extras.items()}
        self.window_warnings = [w.replace(f"rank {old}: ", f"rank {rank}: ", 1) for w in self.window_warnings]
        self.rank = rank


def _split(df: pl.DataFrame | None, ranks: list[int]) -> dict[int, pl.DataFrame | None]:
    if df is None:
        return dict.fromkeys(ranks)
    if len(ranks) == 1:
        return {ranks[0]: df}
    parts = {k[0]: v for k, v in df.partition_by("rank", as_dict=True, maintain_order=True).items()}
    return {r: parts.get(r, df.clear()) for r in ranks}


def classify_ranks(events: pl.DataFrame, meta: pl.DataFrame, opts: Options, source: str, into: list[RankResult]) -> None:
    """Classify the events of one or more ranks (every step here is per rank: several ranks in
    one frame give each rank exactly what it gets alone, with less per-query overhead for many
    small ranks in one process) into ``into``, one result per rank (labelled as in ``events``).
    The queries run on the polars engine that suits the frame's size (:func:`.queries.sized`)."""
    with sized(events.height):
        _classify(events, meta, opts, source, into)


def _classify(events: pl.DataFrame, meta: pl.DataFrame, opts: Options, source: str, into: list[RankResult]) -> None:
    ranks = [r.rank for r in into]
    by_rank = {r.rank: r for r in into}
    if events.height:
        # the three columns read, the kind already tested (a group-by gathers its inputs)
        span = events.select("rank", "start_ns", pl.col("kind").is_in(GPU_WORK_KINDS).alias("gpu")).group_by("rank").agg(
            pl.col("start_ns").min().alias("lo"),
            pl.col("start_ns").median().alias("mid"),
            pl.col("gpu").any(),
        )
        for rank, lo, mid, gpu in span.iter_rows():  # one row per rank
            by_rank[rank].first_ns, by_rank[rank].mid_ns, by_rank[rank].has_gpu = lo, mid, bool(gpu)
    starts = step_starts(events)  # the job checks' step markers
    for rank, df in _split(starts, ranks).items():
        by_rank[rank].step_starts = df
    if "events" in opts.tables:
        for rank, df in _split(events, ranks).items():
            by_rank[rank].events = df
    if opts.parse_only or not any(r.has_gpu for r in into):
        return
    try:
        check_event_span(events, source)
        # every GPU item with when (and on which host thread) its launch began: read by the step
        # windows and by the idle split
        launched = idle.launch_times(
            events.lazy(), events.lazy().filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("rank", "start_ns", "end_ns", "correlation", "external_id"),
            tid=True,
        ).collect(engine=query_engine())
        windows, win_warnings = gpu_windows(events, opts.step_name, launched)
        for w in win_warnings:
            if " step markers: " not in w:  # "rank R: n of m steps ... skipped"; the reducer words the other
                by_rank[int(w.split(":", 1)[0].split()[1])].window_warnings.append(w)
        refuse_duplicate_steps(windows, meta, opts.step_name)
        check_windows(windows, events, source)
        ev = events.lazy()
        threads = pl.concat([recompute.recompute_threads(ev, opts.recompute_pattern), comm.linking_threads(ev)]).unique()
        tree = recompute.host_tree(events, threads).collect(engine=query_engine())
        rc_ops = recompute.recompute_ops(events, opts.recompute_pattern, tree=tree)
        gpu = label_gpu(events, rc_ops, comm_kernels=list(opts.comm_kernels) or None)
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
        steps = _with_profiler_cost(steps, events, windows, into)
    except TraceAnalyzerError as exc:
        into[0].deferred = exc
        return
    frames = {
        "steps": steps, "windows": windows, "instances": inst, "exposure": expo, "points": points, "recompute_ops": rc_ops,
        "recomputed_by_name": recompute.ops_by_name(rc_ops, gpu), "outside_steps": outside,
    }
    if "gpu" in opts.tables:
        frames["gpu"] = gpu
    if "kernel_rows" in opts.tables or "kernel_stats" in opts.tables:
        from traceanalyzer.classify.kernels import exposed_rows, kernel_rows
        from traceanalyzer.classify.partition import segment_frame
        from traceanalyzer.classify.tables import table_rows

        seg = segment_frame(gpu, windows).sort("rank", "t0").collect(engine=query_engine())
        if "kernel_rows" in opts.tables:
            frames["kernel_rows"], frames["exposed_kernels"] = kernel_rows(gpu, windows), exposed_rows(gpu, windows, seg)
        frames["kernel_stats"], frames["op_stats"] = table_rows(events, gpu, windows, seg)
    for name, df in frames.items():
        for rank, part in _split(df, ranks).items():
            setattr(by_rank[rank], name, part)
    try:
        extras = {name: extra_table(name, events, gpu, windows, steps, source) for name in opts.tables if name in EXTRAS}
    except TraceAnalyzerError as exc:
        into[0].deferred = exc
        return
    for name, df in extras.items():
        for rank, part in _split(df, ranks).items():
            by_rank[rank].extras[name] = part
    for r in into:
        r.stepless = r.windows is not None and r.windows.height > 0 and r.windows.get_column("cpu_start_ns").is_null().all()


#: how the optional tables of :data:`TABLES` held in ``Analysis.extras`` are computed: name -> (module, function);
#: each function takes ``(events, gpu, windows, steps, source)`` and returns a compact frame with
#: a ``rank`` column (never raw events, except ``launch_rows``: one row per launched GPU item)
EXTRAS = {
    "annotations": ("traceanalyzer.classify.annotation_ranges", "rank_table"),
    "launches": ("traceanalyzer.classify.launches", "rank_steps"),
    "launch_rows": ("traceanalyzer.classify.launches", "rank_pairs"),
    "queue": ("traceanalyzer.classify.launches", "rank_queue"),
    "queue_series": ("traceanalyzer.classify.launches", "rank_queue_series"),
}


def extra_table(name: str, events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame,
                source: str) -> pl.DataFrame:
    """The optional table ``name`` (:data:`EXTRAS`) of the ranks in ``events``."""
    import importlib

    module, func = EXTRAS[name]
    return getattr(importlib.import_module(module), func)(events, gpu, windows, steps, source)


def _with_profiler_cost(steps: pl.DataFrame, events: pl.DataFrame, windows: pl.DataFrame, into: list[RankResult]) -> pl.DataFrame:
    """The steps with the profiler's cost, the unprofiled estimate and the host-bound gains
    (:mod:`traceanalyzer.classify.profiler_cost`): the options each file's header lists and
    those its events show."""
    from traceanalyzer.parsers.kineto_header import profiler_options

    opts = {}
    for r in into:
        header = r.profiler_options if r.profiler_options is not None else (profiler_options(r.file) if r.file else [])
        opts[r.rank] = header
    seen = {}
    for (rank,), ev in events.partition_by("rank", as_dict=True, maintain_order=True).items():
        seen[rank] = sorted(set(opts.get(rank) or []) | set(profiler_cost.infer_options(ev)))
    cost = profiler_cost.profiler_cost(events, windows, seen)
    out = steps.join(cost, on=["rank", "step"], how="left").with_columns(
        *[(pl.col(c) / 1000).alias(c.replace("_ns", "_us")) for c in ("profiler_host_ns", "profiler_overhead_ns", "unprofiled_estimate_ns")])
    return out.select(*STEP_COLUMNS, *PROFILER_COLUMNS)


def _with_causes(steps: pl.DataFrame, idle_parts: pl.DataFrame, expo: pl.DataFrame) -> pl.DataFrame:
    """The partition joined with the idle split and the exposed communication by dimension."""
    dims = (
        expo.filter(pl.col("by") == "dim")
        .with_columns(pl.format("exposed_comm_{}_ns", pl.col("key").str.to_lowercase()).alias("col"))
        .pivot(on="col", index=["rank", "step"], values="exposed_ns", aggregate_function="sum")
    ) if expo.height else pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64})
    extra = [c for c in dims.columns if c not in ("rank", "step") and c.removesuffix("_ns") not in COMM_DIM_FIELDS]
    if extra:  # a dimension outside DIMENSIONS would break the sum: never silently
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


# ---------------------------------------------------------------------------------------------
# the worker: one rank file -> RankResult


@dataclass
class RankTask:
    """What a worker needs to analyse one rank file."""

    index: int
    path: str
    opts: Options
    source: str  # how errors name the job's input
    shift_ns: int = 0  # the job's base time, for a truncated file that lost its own
    group: int = 0  # which job of several (batch: the run)
    cache_dir: str | None = None  # parse cache directory (with opts.cache; default: the user's)
    sha256: bool = False  # also hash the file's bytes (batch's input key)


ProgressFn = Callable[[int], None]  # bytes of the file read since the last call


#: memory one rank file's analysis holds at its peak: RANK_BASE_BYTES + RANK_BYTES_PER_BYTE x the
#: JSON bytes (measured, docs/ray.md "Size it")
RANK_BASE_BYTES = 230_000_000
RANK_BYTES_PER_BYTE = 1.35


def analyse_rank_file(task: RankTask, progress: ProgressFn | None = None) -> RankResult:
    """Parse, clean and classify one Kineto rank file (never raises for bad input).

    Anything unexpected — a bug, or a panic in a native library (polars raises a
    ``BaseException`` then) — is returned as the file's :class:`InternalFailure` (exit 1,
    naming the file) instead of escaping the worker: ``batch`` then fails that run alone and
    stores the others. A signal (``Interrupted``, ``KeyboardInterrupt``) still stops the work;
    ``TRACEANALYZER_DEBUG=1`` lets the original exception through, with its traceback."""
    from traceanalyzer.interrupts import Interrupted

    try:
        return _analyse_rank_file(task, progress)
    except (KeyboardInterrupt, SystemExit, GeneratorExit, Interrupted):
        raise
    except BaseException as exc:  # noqa: BLE001 - see the docstring
        from traceanalyzer.interrupts import check

        check()  # a signal that native code turned into another exception is still a signal
        if os.environ.get("TRACEANALYZER_DEBUG"):
            raise
        res = RankResult(index=task.index, file=task.path, rank=task.index, shift_borrowed=task.shift_ns,
                         pid=os.getpid(), threads=pl.thread_pool_size())
        res.group = task.group
        what = " ".join(str(exc).split())[:300]
        if isinstance(exc, MemoryError):  # not a bug and not a bad input: what the file needs
            from traceanalyzer.errors import OutOfMemory

            try:
                size = os.path.getsize(task.path)
            except OSError:
                size = 0
            need = f"{RANK_BASE_BYTES / 1e9:.2f} GB + {RANK_BYTES_PER_BYTE} x its JSON size"
            if not str(task.path).endswith(".gz"):
                need += f" = {(RANK_BASE_BYTES + RANK_BYTES_PER_BYTE * size) / 1e9:.1f} GB"
            res.error = OutOfMemory(
                f"ran out of memory analysing this rank file: it needs about {need} while it is analysed: "
                "give the command more memory (ulimit -v, the job's memory limit), or fewer --workers",
                task.path,
            )
            return res
        res.error = InternalFailure(f"internal error while analysing this rank file ({type(exc).__name__}: {what}); "
                                    "please report it with the file", task.path)
        return res


def _analyse_rank_file(task: RankTask, progress: ProgressFn | None) -> RankResult:
    from traceanalyzer.parsers import kineto

    t0 = time.perf_counter()
    path = Path(task.path)
    res = RankResult(index=task.index, file=task.path, rank=task.index, shift_borrowed=task.shift_ns,
                     pid=os.getpid(), threads=pl.thread_pool_size())
    try:
        res.nbytes = path.stat().st_size
    except OSError:
        res.nbytes = 0
    res.group = task.group
    try:
        with _cache_dir(task.cache_dir if task.opts.cache else None):
            df, meta, warns, res.cache_hit = _parse(path, task.opts.cache, progress)
        if task.sha256:
            from traceanalyzer.cache import file_sha256  # memoised by file identity: batch hashed it already

            res.sha256 = file_sha256(path, task.cache_dir)
    except OSError as exc:
        res.error = InputNotFound(f"cannot read the file ({exc.strerror or exc})", path)
        return res
    except TraceAnalyzerError as exc:
        res.error = exc
        return res
    rank = meta["rank"] if meta["rank"] is not None else kineto.rank_from_name(path)
    res.rank = task.index if rank is None else rank
    res.meta, res.warnings = meta, list(warns)
    if task.shift_ns:
        df = df.with_columns(pl.col("start_ns") + task.shift_ns, pl.col("end_ns") + task.shift_ns)
    events = df.with_columns(pl.lit(res.rank, dtype=pl.Int32).alias("rank"))
    del df
    release_free_heap()
    meta_row = kineto.meta_frame([{**meta, "rank": res.rank}])
    from traceanalyzer.parsers.kineto_header import profiler_options

    res.profiler_options = profiler_options(path)
    if "memory" in task.opts.tables:
        from traceanalyzer.parsers.kineto_memory import read_memory_events

        # on the job's clock, as the trace's events (a file that lost its base time borrows the job's)
        res.memory = read_memory_events(path, meta.get("base_time_ns") or task.shift_ns or 0).with_columns(
            pl.lit(res.rank, dtype=pl.Int32).alias("rank"))
    classify_ranks(events, meta_row, task.opts, task.source, [res])
    res.seconds = time.perf_counter() - t0
    return res


def release_free_heap() -> None:
    """Hand the whole free pages of the C library's heap back to the system (glibc's
    ``malloc_trim``; nothing elsewhere). After a parse the heap holds the decoder's columns,
    which the events frame keeps, with the freed chunk buffers between them: glibc returns only
    the free space at the heap's top by itself, and polars allocates through its own allocator,
    so those pages stayed resident to the end (~15 MiB at 200 MB of JSON; ~2 ms)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            import ctypes

            _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):  # not glibc
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None


def _parse(path: Path, cache: bool, progress: ProgressFn | None):
    """(events, meta, warnings, whether the parse cache served it)."""
    from traceanalyzer.parsers import _parse_kineto_file

    if cache:
        from traceanalyzer import cache as parse_cache

        hit = parse_cache.get(path)
        if hit is not None:
            return (*hit, True)
    return (*_parse_kineto_file(path, cache, progress=progress), False)


@contextmanager
def _cache_dir(directory: str | None):
    """The parse cache in ``directory`` for the duration (its location comes from the environment)."""
    if directory is None:
        yield
        return
    saved = os.environ.get("TRACEANALYZER_CACHE")
    os.environ["TRACEANALYZER_CACHE"] = directory
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRACEANALYZER_CACHE", None)
        else:
            os.environ["TRACEANALYZER_CACHE"] = saved


def default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
