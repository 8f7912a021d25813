"""The engine: a job's rank files analysed in parallel, map -> reduce.

* **map** (:mod:`.rank`): one rank file -> a compact :class:`~.rank.RankResult` (the rank's
  per-step partition with every cause column, its collective instances, exposed communication
  by type/group/dimension, recomputed ops, meta, warnings — never the raw events);
* **reduce** (:mod:`.job`): every rank's result -> the :class:`~traceanalyzer.classify.Analysis`
  renderers read (rank assignment, job checks, clock alignment, wait vs transfer across ranks,
  skew and straggler, job totals);
* **where the maps run** (:mod:`.pool`): this process, a local process pool, or Ray tasks;
* **progress** (:mod:`.progress`): bytes read of the whole job.

Every command and ``batch`` call :func:`analyse`; :func:`analyse_trace` (what
``traceanalyzer.analyze(trace)`` runs) runs the same map (in this process, over an already loaded
trace) and the same reduce, so both give identical numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import polars as pl

from traceanalyzer.classify.pipeline import EXTRAS, extra_table
from traceanalyzer.engine.job import base_shifts, job_trace, reduce_job
from traceanalyzer.engine.pool import ENGINES, WorkerDied, run_tasks
from traceanalyzer.engine.progress import JobProgress, json_bytes
from traceanalyzer.engine.rank import KEEP, TABLES, Options, RankResult, RankTask, check_tables, classify_ranks, default_workers
from traceanalyzer.errors import ConfigError, InvalidArgument
from traceanalyzer.queries import query_engine

#: below this much JSON in all (inflated), the default is one process (starting worker
#: processes would cost more than they save)
POOL_BYTES = 32 * 2**20

__all__ = ["analyse", "load", "check_workers", "check_engine", "analyse_trace", "with_tables",
           "kineto_files", "reduce_ranks", "run_tasks", "Options", "RankResult", "RankTask", "ENGINES", "KEEP", "TABLES", "WorkerDied",
           "default_workers"]


def check_workers(workers) -> None:
    """A Python caller's ``workers``: None or a positive integer (InvalidArgument otherwise; the
    command line's ``--workers`` is checked by its option)."""
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise InvalidArgument(f"workers must be a positive integer, got {workers!r}")


def check_engine(engine: str, address: str | None = None) -> None:
    """ConfigError for an unknown engine, or a Ray address given to the local engine."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}: one of {', '.join(ENGINES)}")
    if engine == "local" and address:
        raise ConfigError("`address` is for `engine` ray")


def reduce_ranks(results: list[RankResult], files: list[Path], opts: Options):
    """(the job's :class:`~traceanalyzer.classify.Analysis`, whether every rank file came from
    the parse cache) from the results of its rank tasks (any order): the first file's error
    raised, a truncated file that lost its base time analysed again on the job's clock (in this
    process), then the job-level checks and the reduce. For a caller that ran the tasks of
    several jobs on one engine (``batch``)."""
    results = sorted(results, key=lambda r: r.index)
    for r in results:
        if r.error is not None:
            raise r.error
    source = _source(files)
    shifts = base_shifts(results)
    if shifts:  # truncated files that lost their base time: again, on the job's clock, here
        redo = [RankTask(i, str(files[i]), opts, source, shift_ns=b) for i, b in shifts.items()]
        fixed = {r.index: r for r in run_tasks(redo, "local", 1)}
        results = [fixed.get(r.index, r) for r in results]
    return reduce_job(results, job_trace(results, files), opts, source), all(r.cache_hit for r in results)


def _source(files: list[Path]) -> str:
    return ", ".join(str(s) for s in files[:3]) or "trace"


def analyse_trace(trace, opts: Options):
    """Classify an already loaded :class:`~traceanalyzer.schema.Trace` (any format): every rank
    mapped in this process, then reduced."""
    source = _source(trace.sources)
    results = [
        RankResult(index=i, file=row["file"] or "", rank=row["rank"], meta=row)
        for i, row in enumerate(trace.meta.iter_rows(named=True))  # one row per rank
    ]
    # the events are the trace's own; the GPU work is kept; the report's kernel section reads the
    # per-kernel rows (kernel_stats) when loaded in this process
    want = {"gpu", *(["kernel_stats"] if "kernel_rows" in opts.tables else [])}
    classify_ranks(trace.events, trace.meta, opts.with_tables(*want, without=("events", "kernel_rows")), source, results)
    return reduce_job(results, trace, opts, source)


def kineto_files(paths: Iterable[Path], skipped: list[str] | None = None) -> tuple[list[Path], list[Path]]:
    """(Kineto files, Nsight Systems inputs) the paths stand for; ``skipped``: where the warning
    lines of the directories' files that are not traces go (see :func:`~traceanalyzer.parsers.discover`)."""
    from traceanalyzer.parsers import profiler_files

    return profiler_files(paths, skipped)


def analyse(
    paths: Path | Iterable[Path],
    opts: Options | None = None,
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    quiet: bool = False,
    console=None,
):
    """Load and classify a job (files or a directory of rank files) on ``engine``.

    Kineto rank files are mapped one per task; Nsight Systems inputs (several ranks per file)
    are loaded and mapped in this process. Returns the :class:`~traceanalyzer.classify.Analysis`.
    """
    opts = opts or Options()
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    mapped = _map(paths, opts, engine, workers, address, quiet, console)
    if not isinstance(mapped, list):  # loaded in this process
        return analyse_trace(mapped, opts)
    kin = [Path(r.file) for r in mapped]
    return reduce_job(mapped, job_trace(mapped, kin), opts, _source(kin))


def load(
    paths: Path | Iterable[Path],
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    quiet: bool = False,
    console=None,
    cache: bool = False,
    memory: bool = False,
):
    """A job's events, parsed on ``engine`` (nothing classified): the
    :class:`~traceanalyzer.schema.Trace` that :func:`traceanalyzer.parsers.load` gives, with the
    rank files of a large job parsed in parallel (as :func:`analyse` chooses). ``memory``: also
    each Kineto rank file's allocator events
    (:func:`~traceanalyzer.parsers.kineto_memory.read_memory_events`, with a ``rank`` column)
    read by the worker that parsed it.

    Returns ``(trace, memory_events)``; ``memory_events`` is None when the job was loaded in
    this process (small jobs, Nsight Systems inputs: read them from the files then)."""
    opts = Options(tables={"events", "gpu", *(["memory"] if memory else [])}, parse_only=True, cache=cache)
    paths = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    mapped = _map(paths, opts, engine, workers, address, quiet, console)
    if not isinstance(mapped, list):
        return mapped, None
    kin = [Path(r.file) for r in mapped]
    trace = job_trace(mapped, kin)
    frames = [r.memory for r in mapped if r.memory is not None]
    return trace, (pl.concat(frames, how="vertical") if memory and frames else None)


def _map(paths: list[Path], opts: Options, engine: str, workers: int | None, address: str | None, quiet: bool, console):
    """The map step of a job: the rank results in file order (first file's error raised), or
    the loaded :class:`~traceanalyzer.schema.Trace` when the job is mapped in this process (Nsight
    Systems inputs, or a small job on the local engine with no ``workers`` asked for)."""
    check_engine(engine, address)  # as batch checks
    skipped: list[str] = []
    kin, nsys = kineto_files(paths, skipped)
    small = sum(json_bytes(f) for f in kin) < POOL_BYTES
    if nsys or (engine == "local" and workers in (None, 1) and small):
        # several ranks per file (Nsight), or a small job: one process, all ranks in one frame
        # (the same per-rank steps, without a pass per rank)
        from traceanalyzer.parsers import load as load_files

        files = kin + nsys
        progress = JobProgress(files, quiet=quiet, console=console)
        index = {str(f): i for i, f in enumerate(files)}
        try:
            return load_files(paths, progress=lambda f: progress.done(index.get(str(f), 0), str(f)), cache=opts.cache)
        finally:
            progress.close()
    source = _source(kin)
    if "kernel_rows" in opts.tables and len(kin) == 1:
        opts = opts.with_tables("gpu")  # the report's timeline needs no second pass
    tasks = [RankTask(i, str(f), opts, source) for i, f in enumerate(kin)]
    results: dict[int, RankResult] = {}
    with JobProgress(kin, quiet=quiet, console=console) as progress:
        for res in run_tasks(tasks, engine, workers, address, on_bytes=progress.bytes):
            results[res.index] = res
            progress.done(res.index, res.file, res.seconds, failed=res.error is not None)
            if res.error is not None:
                # the first file's error wins, as when loading one file after another
                if all(i in results for i in range(res.index)):
                    break
        ordered = [results[i] for i in sorted(results)]
        for r in ordered:
            if r.error is not None:
                raise r.error
        shifts = base_shifts(ordered)
        if shifts:  # truncated files that lost their base time: again, on the job's clock
            redo = [RankTask(i, str(kin[i]), opts, source, shift_ns=b) for i, b in shifts.items()]
            for res in run_tasks(redo, engine, 1 if engine == "local" else workers, address):
                results[res.index] = res
            ordered = [results[i] for i in sorted(results)]
    if skipped and ordered:  # said once for the job, first, as parsers.load says them
        ordered[0].warnings = [*skipped, *ordered[0].warnings]
    return ordered



#: where an analysis holds each optional table of :data:`TABLES` (the rest: ``Analysis.extras``)
_HELD = {"events": ("trace",), "gpu": ("gpu",), "kernel_rows": ("kernel_rows", "exposed_kernels"),
         "kernel_stats": ("kernel_stats", "op_stats")}


def has_table(analysis, name: str) -> bool:
    """Whether ``analysis`` holds the optional table ``name``."""
    if name == "events":
        return analysis.trace.events.height > 0
    if name == "gpu":
        return analysis.gpu.height > 0
    if name in _HELD:
        return all(getattr(analysis, a) is not None for a in _HELD[name])
    return name in analysis.extras


def with_tables(analysis, *names: str, if_possible: bool = False):
    """``analysis`` holding the optional tables ``names`` (:data:`TABLES`): itself when it holds
    them all, else a new :class:`~traceanalyzer.classify.Analysis` with the same numbers and the
    missing tables added (``analysis`` itself is never changed). The tables are computed from its
    events and GPU work when it kept them, else by analysing its files again with the options it
    was made with (``Analysis.options``), cut to its ranks and steps. Without either:
    InvalidArgument, or with ``if_possible`` the analysis as it is."""
    import dataclasses

    from traceanalyzer.errors import InvalidArgument

    missing = sorted(n for n in check_tables(names) if not has_table(analysis, n))
    if not missing:
        return analysis
    opts = analysis.options if analysis.options is not None else Options()
    source = _source(analysis.trace.sources)
    found: dict = {}
    if analysis.trace.events.height and analysis.gpu.height and not {"events", "gpu", "memory"} & set(missing):
        # every optional table is per rank: computed from the kept events, as the workers do
        ev, gpu, win = analysis.trace.events, analysis.gpu, analysis.windows
        if "kernel_rows" in missing:
            from traceanalyzer.classify.kernels import exposed_rows, kernel_rows
            from traceanalyzer.classify.partition import segment_frame

            seg = segment_frame(gpu, win).sort("rank", "t0").collect(engine=query_engine())
            found["kernel_rows"], found["exposed_kernels"] = kernel_rows(gpu, win), exposed_rows(gpu, win, seg)
        if "kernel_rows" in missing or "kernel_stats" in missing:
            from traceanalyzer.classify.tables import table_rows

            found["kernel_stats"], found["op_stats"] = table_rows(ev, gpu, win)
        extras = {n: extra_table(n, ev, gpu, win, analysis.steps, source) for n in missing if n in EXTRAS}
    elif analysis.trace.sources and all(Path(s).exists() for s in analysis.trace.sources) and "memory" not in missing:
        again = analyse([Path(s) for s in analysis.trace.sources], opts.with_tables(*missing), quiet=True)
        cut = _cutter(analysis)
        for n in missing:
            for attr in _HELD.get(n, ()):
                if attr == "trace":
                    found["trace"] = dataclasses.replace(analysis.trace, events=cut(again.trace.events, steps=False))
                else:
                    found[attr] = cut(getattr(again, attr), steps=attr != "gpu")
        extras = {n: cut(again.extras[n]) for n in missing if n in again.extras}
    else:
        if if_possible:
            return analysis
        raise InvalidArgument(f"this analysis holds no events to compute the {', '.join(missing)} table(s) from, "
                              "and no trace files to analyse again: pass the trace (or files) instead")
    return dataclasses.replace(analysis, **found, extras={**analysis.extras, **extras})


def _cutter(analysis):
    """A function cutting a frame to the ranks (and, with ``steps``, the steps) of ``analysis.steps``."""
    ranks = analysis.steps.get_column("rank").unique().to_list()
    step_list = analysis.steps.get_column("step").unique().to_list()

    def cut(df, steps: bool = True):
        if df is None or not df.width:
            return df
        if "rank" in df.columns:
            df = df.filter(pl.col("rank").is_in(ranks))
        if steps and "step" in df.columns:
            df = df.filter(pl.col("step").is_in(step_list))
        return df

    return cut


def with_rank_gpu(analysis, rank: int, opts: Options):
    """``analysis`` with the labelled GPU work of one rank (e.g. the report's timeline rank):
    that rank file analysed again in this process, on the job's clock and rank. A no-op when the
    analysis already holds that rank's GPU work."""
    if analysis.gpu.height and "rank" in analysis.gpu.columns and (analysis.gpu["rank"] == rank).any():
        return analysis
    meta = analysis.trace.meta
    rows = meta.with_row_index("__i").filter(pl.col("rank") == rank)
    if not rows.height or meta.get_column("format").ne("kineto").any():
        return analysis
    row = rows.row(0, named=True)
    one = opts.with_tables("gpu", without=("events", "kernel_rows", "kernel_stats"))
    task = RankTask(row["__i"], row["file"], one, _source(analysis.trace.sources))
    res = next(iter(run_tasks([task], "local", 1)))
    if not res.meta.get("base_time_ns") and row["base_time_ns"]:  # it borrowed the job's base time
        task.shift_ns = row["base_time_ns"]
        res = next(iter(run_tasks([task], "local", 1)))
    if res.error is not None or res.gpu is None:
        return analysis
    res.relabel(rank)
    import dataclasses

    return dataclasses.replace(analysis, gpu=res.gpu)
