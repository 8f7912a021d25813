"""The engine: a job's rank files analysed in parallel, map -> reduce.

* **map** (:mod:`.rank`): one rank file -> a compact :class:`~.rank.RankResult` (the rank's
  per-step partition with every cause column, its collective instances, exposed communication
  by type/group/dimension, recomputed ops, meta, warnings — never the raw events);
* **reduce** (:mod:`.job`): every rank's result -> the :class:`~traceanalyzer.classify.Analysis`
  renderers read (rank assignment, job checks, clock alignment, wait vs transfer across ranks,
  skew and straggler, job totals);
* **where the maps run** (:mod:`.pool`): this process, a local process pool, or Ray tasks;
* **progress** (:mod:`.progress`): bytes read of the whole job.

Every command and ``batch`` call :func:`analyse`; :func:`analyze` (``traceanalyzer.analyze(trace)``)
runs the same map (in this process, over an already loaded trace) and the same reduce, so both
give identical numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import polars as pl

from traceanalyzer.classify import comm
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.engine.job import base_shifts, job_trace, reduce_job
from traceanalyzer.engine.pool import ENGINES, WorkerDied, run_tasks
from traceanalyzer.engine.progress import JobProgress, json_bytes
from traceanalyzer.engine.rank import KEEP, Options, RankResult, RankTask, classify_ranks, default_workers
from traceanalyzer.errors import ConfigError, InputNotFound, InvalidArgument

#: below this much JSON in all (inflated), the default is one process (starting worker
#: processes, ~1 s each, would cost more than they save)
POOL_BYTES = 32 * 2**20

__all__ = ["analyze", "breakdown", "analyse", "load", "check_workers", "analyse_trace", "analyse_any", "Options", "RankResult", "ENGINES", "KEEP", "WorkerDied",
           "default_workers"]


def check_workers(workers) -> None:
    """A Python caller's ``workers``: None or a positive integer (InvalidArgument otherwise; the
    command line's ``--workers`` is checked by its option)."""
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise InvalidArgument(f"workers must be a positive integer, got {workers!r}")


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
    tables = opts.tables or opts.keep == "report"  # the report's kernel section reads the kernel rows
    classify_ranks(trace.events, trace.meta, Options(**{**opts.__dict__, "keep": "gpu", "tables": tables}), source, results)
    return reduce_job(results, trace, opts, source)


def analyze(
    trace,
    step_name: str | None = DEFAULT_STEP,
    recompute_pattern: str | None = None,
    bus_bw_gbps: float = comm.DEFAULT_BUS_BW_GBPS,
    comm_kernels: list[str] | None = None,
):
    """Classify a loaded trace into the :class:`~traceanalyzer.classify.Analysis`.
    ``step_name`` names the step range (``None``: whole trace = one step);
    ``recompute_pattern``: regex of extra host ranges (e.g. NVTX) whose contents are recompute;
    ``bus_bw_gbps``: bus bandwidth for single-rank transfer estimates;
    ``comm_kernels``: extra kernel-name regexes that are communication (``--comm-kernel``).

    Each rank is classified on its own and the ranks are then reduced to the job: the same code
    as the parallel path of the commands."""
    return analyse_trace(trace, Options(step_name, recompute_pattern, bus_bw_gbps, comm_kernels=tuple(comm_kernels or ())))


def breakdown(trace, step_name: str | None = DEFAULT_STEP) -> pl.DataFrame:
    """Per-rank, per-step exact partition of GPU time (see :mod:`traceanalyzer.classify.partition`)."""
    return analyze(trace, step_name).steps


def kineto_files(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(Kineto files, Nsight Systems inputs) the paths stand for."""
    from traceanalyzer.parsers import _nsys_sniff, discover, one_profiler

    files = [f for p in paths for f in discover(Path(p))]
    if not files:
        raise InputNotFound("no trace files given")
    kin, nsys = [], []
    for f in files:
        (nsys if f.is_dir() or _nsys_sniff(f) else kin).append(f)
    one_profiler(kin, nsys)
    return kin, nsys


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
    opts = Options(keep="events", parse_only=True, cache=cache, memory=memory)
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
    if engine == "local" and address:
        raise ConfigError("--address is for --engine ray")  # as batch says
    kin, nsys = kineto_files(paths)
    small = sum(json_bytes(f) for f in kin) < POOL_BYTES
    if nsys or (engine == "local" and workers in (None, 1) and small):
        # several ranks per file (Nsight), or a small job: one process, all ranks in one frame
        # (the same per-rank steps, without a pass per rank: ~0.1 s saved per small rank file)
        from traceanalyzer.parsers import load as load_files

        files = kin + nsys
        progress = JobProgress(files, quiet=quiet, console=console)
        index = {str(f): i for i, f in enumerate(files)}
        try:
            return load_files(paths, progress=lambda f: progress.done(index.get(str(f), 0), str(f)), cache=opts.cache)
        finally:
            progress.close()
    source = _source(kin)
    if opts.keep == "report" and len(kin) == 1:
        opts = Options(**{**opts.__dict__, "keep_gpu": True})  # its timeline needs no second pass
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
    return ordered


def analyse_any(what, opts: Options, **engine_kw):
    """An :class:`~traceanalyzer.classify.Analysis` holding the optional tables ``opts.extras``:
    ``what`` itself when it is an analysis that has them all, :func:`analyse_trace` for a loaded
    :class:`~traceanalyzer.schema.Trace`, else :func:`analyse` of the file(s) or directory
    ``what`` (``engine_kw``: ``engine``, ``workers``, ``address``, ``quiet``, ``console``)."""
    from traceanalyzer.classify import Analysis
    from traceanalyzer.schema import Trace

    if isinstance(what, Analysis):
        missing = [n for n in opts.extras if n not in what.extras]
        if not missing:
            return what
        what = what.trace  # classified again, with the missing tables
    if isinstance(what, Trace):
        return analyse_trace(what, opts)
    return analyse(what, opts, **{"quiet": True, **engine_kw})


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
    one = Options(**{**opts.__dict__, "keep": "gpu"})
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
