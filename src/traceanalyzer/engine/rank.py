"""The map step: one rank file -> a compact :class:`RankResult`.

A worker parses the file, runs the breakdown's recipe on its events
(:mod:`traceanalyzer.classify.pipeline`) and keeps the compact tables, the optional ones asked
for (:data:`TABLES`) and the small tables the job checks need (step starts, median event time).
The raw events never leave the worker unless a verb asks for them (the ``events`` table).

Errors about the input (:class:`~traceanalyzer.errors.TraceAnalyzerError`) are returned in the
result, not raised, so that the job reducer raises them in the order the single-process path
would (the first file's parse error, "no GPU activity" before a per-rank invariant, ...).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import polars as pl

from traceanalyzer.classify import comm, pipeline
from traceanalyzer.classify.pipeline import EXTRAS, extra_table
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InputNotFound, InternalFailure, TraceAnalyzerError
from traceanalyzer.parsers.clean import step_starts
from traceanalyzer.queries import sized
from traceanalyzer.schema import GPU_WORK_KINDS

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
    "trace_facts": "what each rank's trace can show: host events, graph launches, compiled regions, stream overlaps, "
                   "sync calls (Analysis.extras['trace_facts']): the integrity checks",
    "memory": "the allocator events of each Kineto rank file (engine.load only)",
}

#: what a command keeps beyond the compact tables, by name: the optional tables each needs
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
    """How to classify: the same for every rank of a job. ``tables`` names the optional tables
    (:data:`TABLES`) to compute besides the compact ones."""

    step_name: str | None = DEFAULT_STEP
    recompute_pattern: str | None = None
    bus_bw_gbps: float = comm.DEFAULT_BUS_BW_GBPS
    cache: bool = False
    comm_kernels: tuple[str, ...] = ()  # extra kernel-name regexes that are communication
    tables: frozenset[str] = frozenset()  # optional tables (names in TABLES)
    parse_only: bool = False  # the events (with "events") and the job checks' tables: nothing classified (engine.load)

    def __post_init__(self) -> None:
        self.tables = check_tables(self.tables)

    def with_tables(self, *names: str, without: tuple[str, ...] = ()) -> "Options":
        """These options asking for ``names`` too (and not for ``without``)."""
        return replace(self, tables=(self.tables | check_tables(names)) - frozenset(without))


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
    window_warnings: list[str] = []
    with pipeline.beside(events.height) as side:
        if not _tables(events, meta, opts, source, into, side, window_warnings):
            return
    for r in into:
        r.stepless = r.windows is not None and r.windows.height > 0 and r.windows.get_column("cpu_start_ns").is_null().all()


def _tables(events: pl.DataFrame, meta: pl.DataFrame, opts: Options, source: str, into: list[RankResult],
            side: pipeline.Beside, window_warnings: list[str]) -> bool:
    """The classification's tables of the ranks in ``events`` into ``into``; False for an
    input's error (in the first result's ``deferred``)."""
    ranks = [r.rank for r in into]
    by_rank = {r.rank: r for r in into}
    try:
        from traceanalyzer.parsers.kineto_header import profiler_options

        # the profiler options each rank's file header lists (read by the worker, else here)
        headers = {r.rank: r.profiler_options if r.profiler_options is not None else (profiler_options(r.file) if r.file else [])
                   for r in into}
        for res in into:  # kept: the job's Analysis carries them (engine.job.reduce_job)
            res.profiler_options = headers[res.rank]
        r = pipeline.breakdown(events, meta, step_name=opts.step_name, recompute_pattern=opts.recompute_pattern,
                               comm_kernels=opts.comm_kernels, source=source, window_warnings=window_warnings,
                               profiler_options=headers, side=side, tables=opts.tables)
    except TraceAnalyzerError as exc:
        into[0].deferred = exc
        return False
    finally:
        for w in window_warnings:  # "rank R: n of m steps ... skipped"
            by_rank[int(w.split(":", 1)[0].split()[1])].window_warnings.append(w)
    frames = pipeline.frames(r, events, opts.tables)
    for name, df in frames.items():
        for rank, part in _split(df, ranks).items():
            setattr(by_rank[rank], name, part)
    try:
        extras = {name: r.beside[name]() if name in r.beside else extra_table(name, events, r.gpu, r.windows, r.steps, source)
                  for name in opts.tables if name in EXTRAS}
    except TraceAnalyzerError as exc:
        into[0].deferred = exc
        return False
    for name, df in extras.items():
        for rank, part in _split(df, ranks).items():
            by_rank[rank].extras[name] = part
    return True


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
        import traceanalyzer.cache as parse_cache

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
