"""The Python API: verbs that take a trace (a path, a :class:`~traceanalyzer.schema.Trace` or an
:class:`~traceanalyzer.classify.Analysis`) and return polars frames.

Every verb is re-exported at the top level (``import traceanalyzer as ta; ta.breakdown(...)``)
and documented in ``docs/api.md``, which ``scripts/gen_api_docs.py`` generates from the
docstrings here. Conventions shared by every frame:

* times are integer nanoseconds in ``*_ns`` columns (exact; a partition sums exactly) and, where
  a column is a mean or a median, Float64 nanoseconds; ``*_us`` columns are ``*_ns / 1000``;
* ``rank`` is the global rank (Int32), ``step`` the step number (Int64, ``N`` of
  ``ProfilerStep#N``; 0 when the whole trace is one step);
* the buckets ``compute``, ``recompute``, ``exposed_comm``, ``other`` and ``idle`` partition each
  step exactly; ``overlapped_comm`` is reported beside them.

Errors are :class:`traceanalyzer.errors.TraceAnalyzerError` subclasses, the same ones the
command line turns into its documented exit codes.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Literal, Union

import polars as pl

from traceanalyzer.classify.comm import DEFAULT_BUS_BW_GBPS
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis
    from traceanalyzer.schema import Trace

PathLike = Union[str, "os.PathLike[str]"]
#: what every verb accepts as its trace: a file or directory of rank files (or several), a
#: loaded :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
Source = Union[PathLike, Iterable[PathLike], "Trace", "Analysis"]

__all__ = [
    "load", "scan", "analyze", "select", "breakdown", "rank_summary", "comm", "idle", "stragglers", "compare", "report",
    "kernels", "ops", "kernel_diff", "annotations", "launches", "queue_length", "critical_path", "reconcile", "memory", "whatif",
    "search_layouts", "predict", "plan", "annotate", "baseline", "batch", "trend", "gate",
]
__all__ += ["straggler_view", "straggler_costs", "replay", "wait_matrix", "comm_bytes"]

# ---------------------------------------------------------------------------------------------
# loading and classifying


def load(path: PathLike | Iterable[PathLike], *, cache: bool | PathLike = False, workers: int | None = None) -> Trace:
    """Load a trace: one file, a directory of rank files, or a list of files of one job.

    Formats are recognised by content: PyTorch Profiler (Kineto) JSON, plain or gzipped, and
    Nsight Systems exports (SQLite, JSON, JSON Lines, Parquet or Arrow directories). The rank of
    a Kineto file comes from its ``distributedInfo``, else from its name (``rank3``,
    ``worker3``), else from its position. All ranks share one time base.

    Parameters:
        path: a trace file, a directory holding the rank files of one job (every ``*.json``,
            ``*.json.gz``, ``*.sqlite`` in it; sub-directories are not followed), or a list of
            files and directories.
        cache: ``True`` to read and write the Parquet parse cache in its default directory
            (``$TRACEANALYZER_CACHE``, else the user cache directory), or a directory to use
            instead. A Kineto file whose bytes were parsed before is then read back from
            Parquet instead of being decoded again.
        workers: rank files parsed in parallel processes (default: one process for a small
            job, all cores for a large one; 1: in this process).

    Returns:
        A :class:`~traceanalyzer.schema.Trace`: ``events`` (one row per timed event, all ranks;
        ``start_ns``/``end_ns`` in integer ns on the job's time base) and ``meta`` (one row per
        rank: file, format, world size, device, versions), plus ``warnings`` and ``sources``.

    Raises:
        InputNotFound: a path does not exist, cannot be read, or a directory holds no trace.
        InvalidTrace: a file is not a trace (not JSON, truncated gzip, unknown format), or two
            files claim the same rank.

    Example:
        >>> import traceanalyzer as ta
        >>> trace = ta.load("fixtures/kineto/dlrm-v100-8rank")
        >>> trace.ranks
        [0, 1, 2, 3, 4, 5, 6, 7]
        >>> trace.events.filter(kind="kernel").height
        2104
    """
    from traceanalyzer.parsers import load as parse

    from traceanalyzer.engine import check_workers

    paths = [Path(_path(path, "path"))] if isinstance(path, (str, os.PathLike)) else [Path(_path(p, "path")) for p in _paths(path, "path")]
    check_workers(workers)
    cache_arg = _cache_arg(cache)
    if workers == 1 or isinstance(cache_arg, Path):  # in this process (a cache directory of its own too)
        return parse(paths[0] if isinstance(path, (str, os.PathLike)) else paths, cache=cache_arg)
    from traceanalyzer.engine import load as load_job

    return load_job(paths, workers=workers, quiet=True, cache=cache_arg)[0]


def scan(path: PathLike | Iterable[PathLike], *, cache: bool | PathLike = True) -> pl.LazyFrame:
    """The canonical events of a job as a polars LazyFrame read from the Parquet parse cache.

    Each Kineto rank file is parsed once into the parse cache (as ``load(..., cache=True)``
    does) and then scanned from its Parquet file: a query reads only the columns and row groups
    it needs, so a question about some events of many ranks (the kernels, one rank, one time
    window) never holds every event of the job in memory, which :func:`load` does. Nsight
    Systems inputs (not cached) are loaded and then made lazy.

    Parameters:
        path: as in :func:`load`.
        cache: ``True``: the default cache directory (``$TRACEANALYZER_CACHE``, else the user
            cache directory); or a directory. ``False`` is refused: scanning needs the cache.

    Returns:
        A LazyFrame with the columns of ``Trace.events`` (``rank`` set as :func:`load` sets it:
        ``distributedInfo``, else the file name, else the position). ``collect()`` it.
        A file whose entry cannot be written to the cache is held in memory instead. Unlike
        :func:`load`, a truncated file that lost its base time is not moved onto the job's
        clock, and the job-level checks (same job, clock skew) are not made.

    Raises:
        InputNotFound, InvalidTrace: as in :func:`load` (raised by ``scan`` itself, not at
            ``collect()``).
        InvalidArgument: ``cache=False``.

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> lf = ta.scan("fixtures/kineto/dlrm-v100-8rank")
        >>> lf.filter(pl.col("kind") == "kernel").group_by("rank").len().sort("rank").collect()["len"].to_list()
        [245, 310, 246, 315, 251, 245, 246, 246]
    """
    import orjson

    from traceanalyzer import cache as parse_cache
    from traceanalyzer.parsers import _assign_ranks, _nsys_sniff, _parse_kineto_file, discover, one_profiler
    from traceanalyzer.schema import EVENT_SCHEMA

    if cache is False:
        raise InvalidArgument("scan reads the parse cache: give cache=True or a cache directory (or use load)")
    directory = parse_cache.resolve_dir(None if cache is True else Path(_path(cache, "cache")))
    items = [path] if isinstance(path, (str, os.PathLike)) else _paths(path, "path")
    files = [f for p in items for f in discover(Path(_path(p, "path")))]
    kineto = [f for f in files if not (f.is_dir() or _nsys_sniff(f))]
    one_profiler(kineto, [f for f in files if f not in kineto])
    frames: list[pl.LazyFrame] = []
    metas: list[dict] = []
    for f in kineto:  # one entry per rank file
        frame, meta = _cached_entry(f, directory, parse_cache, orjson)
        if frame is None:
            df, meta, _warns = _parse_kineto_file(f, directory)  # parsed once, into the cache
            frame = _cached_entry(f, directory, parse_cache, orjson)[0]
            if frame is None:  # the cache could not be written: this file stays in memory
                frame = df.lazy()
        metas.append(meta)
        frames.append(frame)
    _assign_ranks(kineto, metas, [])
    lazy = [fr.with_columns(pl.lit(m["rank"], dtype=pl.Int32).alias("rank")).select([pl.col(c).cast(t) for c, t in EVENT_SCHEMA.items()])
            for fr, m in zip(frames, metas)]
    others = [f for f in files if f not in kineto]
    if others:
        lazy.append(load(others).events.lazy())
    return pl.concat(lazy, how="vertical")


def _cached_entry(f: Path, directory: Path, parse_cache: Any, orjson: Any) -> tuple[pl.LazyFrame | None, dict]:
    """(the cache entry of ``f`` as a LazyFrame, its meta), or (None, {}) when it has none."""
    try:
        digest = parse_cache.file_sha256(f, directory)
        entry = parse_cache._entry(digest, directory)
        info = orjson.loads(parse_cache._read_info(entry))
        if info["sha256"] != digest or info["cache_version"] != parse_cache.CACHE_VERSION:
            return None, {}
    except Exception:  # noqa: BLE001 - missing, partial or foreign entry: a miss
        return None, {}
    meta = dict(info["meta"])
    meta["file"] = str(f)
    return pl.scan_parquet(entry), meta


def analyze(
    source: Source,
    step_range: str | None = DEFAULT_STEP,
    *,
    recompute_range: str | None = None,
    comm_kernels: list[str] | None = None,
    bus_bw_gbps: float = DEFAULT_BUS_BW_GBPS,
    cache: bool | PathLike = False,
    workers: int | None = None,
) -> Analysis:
    """Classify a trace: every rank's GPU time per step, split exactly into buckets and causes.

    The same analysis as ``traceanalyzer breakdown``; every other verb starts from it, so when
    asking several questions of one trace, analyse it once and pass the result on.

    Parameters:
        source: a path (file, directory of rank files, or a list), a loaded
            :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
            (returned as it is).
        step_range: name of the host range that marks a training step (``ProfilerStep`` for
            ``ProfilerStep#N``); ``None`` analyses each rank's whole GPU span as one step (0).
        recompute_range: regular expression of extra host or NVTX ranges whose GPU work is
            recompute (e.g. ``"CheckpointFunctionBackward"``), besides the recompute found from
            autograd.
        comm_kernels: regular expressions (case-insensitive) of kernel names that are
            communication, besides the known libraries (NCCL/RCCL, DeepEP, NVSHMEM, ...).
        bus_bw_gbps: bus bandwidth in GB/s used to estimate a collective's transfer time when
            only one rank of its group is loaded.
        cache: as in :func:`load` (paths only).
        workers: rank files parsed in parallel processes when given a path (default: one
            process for a small job, all cores for a large one; 1: in this process).

    Returns:
        An :class:`~traceanalyzer.classify.Analysis`. Its ``steps`` frame has one row per
        (rank, step): ``duration_ns`` and the buckets ``compute_ns``, ``recompute_ns``,
        ``exposed_comm_ns``, ``other_ns``, ``idle_ns`` (integer ns, summing exactly to
        ``duration_ns``), ``overlapped_comm_ns``, the idle causes ``idle_<cause>_ns`` and the
        exposed communication per parallelism dimension ``exposed_comm_<dim>_ns``, each also as
        ``*_us``. The other frames (``comm``, ``collectives``, ``cross_rank``, ``gpu``,
        ``windows``...) are what the other verbs read.

    Raises:
        InputNotFound, InvalidTrace: as in :func:`load`.
        NoGpuActivity: the trace has no kernel, memcpy or memset (e.g. a CPU-only profile).
        InvalidArgument: a bad ``comm_kernels`` or ``recompute_range`` pattern, ``bus_bw_gbps``,
            ``cache`` or ``workers``.
        InvariantViolation: an internal consistency check failed (please report it).

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> a = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> a.steps.height, a.steps["duration_ns"].sum()
        (8, 128062000)
        >>> a.steps.select(pl.sum_horizontal("compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns")).to_series().sum()
        128062000
    """
    from traceanalyzer.classify import Analysis
    from traceanalyzer.schema import Trace

    if isinstance(source, Analysis):
        return source
    _check_patterns(recompute_range, comm_kernels)
    if not (isinstance(bus_bw_gbps, (int, float)) and 0 < bus_bw_gbps < float("inf")):
        raise InvalidArgument(f"bus_bw_gbps must be a finite positive number (GB/s), got {bus_bw_gbps!r}")
    from traceanalyzer.engine import Options, analyse, analyse_trace, check_workers

    # the optional tables (per-kernel and per-op rows, launches, annotations...) are computed when
    # a verb first asks (engine.with_tables), from the events and the GPU work the analysis keeps,
    # with the options recorded in it
    opts = Options(step_name=step_range, recompute_pattern=recompute_range, bus_bw_gbps=float(bus_bw_gbps),
                   comm_kernels=tuple(comm_kernels or ()))
    if isinstance(source, Trace):
        return analyse_trace(source, opts)
    paths = [Path(_path(source))] if isinstance(source, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(source)]
    check_workers(workers)
    cache_arg = _cache_arg(cache)
    if isinstance(cache_arg, Path):  # a cache directory of its own: loaded in this process
        return analyse_trace(load(paths, cache=cache_arg), opts)
    opts = opts.with_tables("events", "gpu")  # the API keeps the events: the trace stays explorable
    opts.cache = cache_arg
    return analyse(paths, opts, workers=workers, quiet=True)


def select(source: Source, *, ranks: Iterable[int] | None = None, steps: Iterable[int] | None = None) -> Analysis:
    """The part of an analysis on some ranks and/or steps, to compare them or look closer.

    Every per-step frame of the analysis, its optional tables (launches, annotations...)
    included, is cut to the rows of those ranks and steps (the trace's events and the GPU work
    to those ranks); the cross-rank view (``cross_rank``) is
    computed again over what is kept. Nothing is re-classified: a step's buckets are the same
    numbers as in the whole analysis.

    Parameters:
        source: as in :func:`analyze` (a path or trace is analysed first).
        ranks: global ranks to keep (default: all).
        steps: step numbers to keep (default: all).

    Returns:
        An :class:`~traceanalyzer.classify.Analysis` holding only those rows.

    Raises:
        InvalidArgument: no (rank, step) of the analysis is left.

    Example:
        >>> import traceanalyzer as ta
        >>> a = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> ta.select(a, ranks=[1, 7]).steps["rank"].to_list()
        [1, 7]
    """
    from traceanalyzer.classify import IDLE_FIELDS, crossrank

    a = analyze(source)
    rank_list = None if ranks is None else [int(r) for r in ranks]
    step_list = None if steps is None else [int(s) for s in steps]

    def cut(df: pl.DataFrame | None) -> pl.DataFrame | None:
        if df is None or not df.width:
            return df
        if rank_list is not None and "rank" in df.columns:
            df = df.filter(pl.col("rank").is_in(rank_list))
        if step_list is not None and "step" in df.columns:
            df = df.filter(pl.col("step").is_in(step_list))
        return df

    steps_df = cut(a.steps)
    assert steps_df is not None
    if steps_df.height == 0:
        raise InvalidArgument(f"no step of the analysis is on ranks {rank_list} and steps {step_list}")
    trace = a.trace
    if rank_list is not None:
        trace = dataclasses.replace(
            trace, events=trace.events.filter(pl.col("rank").is_in(rank_list)), meta=trace.meta.filter(pl.col("rank").is_in(rank_list))
        )
    coll = cut(a.collectives)
    return dataclasses.replace(
        a,
        trace=trace,
        steps=steps_df,
        gpu=cut(a.gpu) if rank_list is not None else a.gpu,
        windows=cut(a.windows),
        recompute_ops=cut(a.recompute_ops),
        recomputed_by_name=cut(a.recomputed_by_name),
        collectives=coll,
        comm=cut(a.comm),
        cross_rank=crossrank.cross_rank(steps_df, IDLE_FIELDS, coll),
        outside_steps=cut(a.outside_steps),
        kernel_rows=cut(a.kernel_rows),
        exposed_kernels=cut(a.exposed_kernels),
        kernel_stats=cut(a.kernel_stats),
        op_stats=cut(a.op_stats),
        extras={name: cut(df) for name, df in a.extras.items()},
        warnings=list(a.warnings),
    )


# ---------------------------------------------------------------------------------------------
# the partition and its causes


def breakdown(source: Source, step_range: str | None = DEFAULT_STEP, *, per: Literal["step", "rank"] = "step",
              by: str | None = None) -> pl.DataFrame:
    """The exact partition of GPU time: per (rank, step), or per rank summed over its steps.

    Parameters:
        source: as in :func:`analyze`.
        step_range: as in :func:`analyze` (ignored when ``source`` is an analysis).
        per: ``"step"``: one row per (rank, step); ``"rank"``: one row per rank, summed over
            its steps, with the number of steps.
        by: the older name of ``per``.

    Returns:
        ``per="step"``: ``rank``, ``step``, ``start_ns`` (step start on the job's time base),
        ``duration_ns``, ``compute_ns``, ``recompute_ns``, ``exposed_comm_ns``, ``other_ns``,
        ``idle_ns`` (Int64 ns; the five buckets sum exactly to ``duration_ns``),
        ``overlapped_comm_ns`` (communication hidden under compute; not part of the sum),
        ``idle_<cause>_ns`` for the causes ``host_bound``, ``sync``, ``bubble``, ``other``
        (sum = ``idle_ns``), ``exposed_comm_<dim>_ns`` for ``tp``, ``dp``, ``pp``, ``cp``,
        ``ep``, ``unknown``, ``concurrent`` (sum = ``exposed_comm_ns``), and every ``*_ns``
        column again as ``*_us`` (Float64 µs). Sorted by rank and start.
        ``per="rank"``: ``rank``, ``steps`` (UInt32) and every field above summed over the
        rank's steps, as ``*_ns`` and ``*_us``.

    Raises:
        InvalidArgument: ``per`` is not ``"step"`` or ``"rank"``.
        InputNotFound, InvalidTrace, NoGpuActivity: as in :func:`analyze`.

    Example:
        >>> import traceanalyzer as ta
        >>> df = ta.breakdown("fixtures/kineto/dlrm-v100-8rank")
        >>> df.select("rank", "duration_ns", "exposed_comm_ns").row(1)
        (1, 19901000, 11056000)
        >>> ta.breakdown("fixtures/kineto/dlrm-v100-8rank", per="rank")["steps"].to_list()
        [1, 1, 1, 1, 1, 1, 1, 1]
    """
    per = _renamed("per", per, "by", by)
    _choice("per", per, ("step", "rank"))
    a = _analysis(source, step_range)
    return a.steps if per == "step" else a.totals()


def rank_summary(source: Source, *, top: int = 3) -> pl.DataFrame:
    """Many ranks at a glance: each bucket's distribution over the ranks, not one row per rank.

    Each rank's mean per step is taken first (as in the per-rank tables); this reduces them to
    one row per field. ``traceanalyzer breakdown`` and ``report`` show this table instead of
    one row per rank above 16 ranks (``--ranks all`` lists every rank).

    Parameters:
        source: as in :func:`analyze`.
        top: how many ranks to name per field, those with the most time in it.

    Returns:
        One row per field, in this order: ``duration`` (the step time), ``compute``,
        ``recompute``, ``exposed_comm``, ``other``, ``idle``, ``overlapped_comm`` and the idle
        causes ``idle_host_bound``, ``idle_sync``, ``idle_bubble``, ``idle_other``. Columns:
        ``field``, ``ranks`` (UInt32), ``min_ns``, ``p50_ns`` (median over the ranks; the mean
        of the middle two for an even count), ``mean_ns``, ``max_ns`` (Float64 ns per step),
        ``max_rank`` (Int32: the rank at the max, i.e. the slowest rank for that bucket; the
        lowest on a tie), ``top_ranks`` (List[Int32]) and ``top_ns`` (List[Float64]).

    Raises:
        InvalidArgument: ``top`` is not a positive integer.

    Example:
        >>> import traceanalyzer as ta
        >>> s = ta.rank_summary("fixtures/kineto/dlrm-v100-8rank")
        >>> s.filter(field="duration").select("min_ns", "p50_ns", "max_ns", "max_rank").row(0)
        (12509000.0, 16126000.0, 19901000.0, 1)
        >>> s.filter(field="exposed_comm")["top_ranks"].to_list()
        [[1, 3, 4]]
    """
    from traceanalyzer.classify.rankspread import rank_spread

    if not isinstance(top, int) or top < 1:
        raise InvalidArgument(f"top must be a positive integer, got {top!r}")
    return rank_spread(_analysis(source).steps, top=top)


def comm(
    source: Source, *, by: Literal["type", "group", "dim"] = "type", per: Literal["step", "rank"] = "rank"
) -> pl.DataFrame:
    """Communication per collective type, process group or parallelism dimension.

    Wait is the time a collective kernel spent waiting for the last rank of its group to
    arrive; transfer is the rest (its data moving). Both are measured when all ranks of a group
    are loaded (instances matched across ranks), else estimated from the bytes and
    ``bus_bw_gbps`` (``transfer_estimated``).

    Parameters:
        source: as in :func:`analyze`.
        by: ``"type"`` (all_reduce, all_gather, ...), ``"group"`` (process group) or ``"dim"``
            (TP, DP, PP, CP, EP, unknown: from the process group's description and ranks).
        per: ``"rank"``: summed over the steps; ``"step"``: one row per rank and step.

    Returns:
        ``rank``, (``step`` with ``per="step"``), ``key`` (the type, group or dimension),
        ``count`` (kernels), ``bytes`` (null when the trace does not record sizes),
        ``time_ns`` (kernel time), ``exposed_ns`` (not hidden under compute: its share of the
        partition's ``exposed_comm_ns``), ``overlapped_ns``, ``wait_ns``, ``transfer_ns``
        (null when unknown), ``transfer_estimated`` (Boolean), ``dim``, and for groups
        ``pg_desc``, ``group_size``, ``pg_ranks``. Sorted by rank, then exposed time (most
        first).

    Raises:
        InvalidArgument: ``by`` or ``per`` is not one of its choices.

    Example:
        >>> import traceanalyzer as ta
        >>> c = ta.comm("fixtures/kineto/dlrm-v100-8rank")
        >>> c.filter(rank=1).select("key", "count", "exposed_ns", "wait_ns").rows()
        [('all_to_all', 5, 9389000, 9461000), ('all_reduce', 3, 1667000, 1664000)]
    """
    _choice("by", by, ("type", "group", "dim"))
    _choice("per", per, ("step", "rank"))
    a = _analysis(source)
    c = a.comm if a.comm is not None else pl.DataFrame()
    if not c.height:
        return c
    c = c.filter(pl.col("by") == by).drop("by")
    if per == "rank":
        c = c.group_by("rank", "key").agg(
            pl.col("count").sum(),
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
            *[pl.col(f"{x}_ns").sum() for x in ("time", "exposed", "overlapped")],
            *[pl.when(pl.col(f"{x}_ns").is_not_null().all()).then(pl.col(f"{x}_ns").sum()).alias(f"{x}_ns") for x in ("wait", "transfer")],
            pl.col("transfer_estimated").any(),
            *[pl.col(x).drop_nulls().first() for x in ("dim", "pg_desc", "group_size", "pg_ranks")],
        )
        cols = ["rank", "key"]
    else:
        cols = ["rank", "step", "key"]
    order = [*cols, "count", "bytes", "time_ns", "exposed_ns", "overlapped_ns", "wait_ns", "transfer_ns", "transfer_estimated",
             "dim", "pg_desc", "group_size", "pg_ranks"]
    sort = ["rank", *(["step"] if per == "step" else []), "exposed_ns", "key"]
    desc = [False, *([False] if per == "step" else []), True, False]
    return c.select(order).sort(sort, descending=desc)


def idle(source: Source, *, per: Literal["step", "rank"] = "step") -> pl.DataFrame:
    """Why the GPU sat idle: the idle bucket split by cause.

    Causes (by priority where several hold at once): ``bubble`` (a pipeline-parallel transfer
    is outstanding), ``sync`` (the host is inside a synchronisation: ``cudaStreamSynchronize``,
    ``.item()``, ...), ``host_bound`` (the launch of the work that ends the gap had not started:
    the GPU was starved by the host), ``other``.

    Parameters:
        source: as in :func:`analyze`.
        per: ``"step"``: one row per (rank, step); ``"rank"``: summed over each rank's steps.

    Returns:
        ``rank``, (``step`` with ``per="step"``; ``steps`` with ``per="rank"``),
        ``duration_ns``, ``idle_ns``, ``idle_host_bound_ns``, ``idle_sync_ns``,
        ``idle_bubble_ns``, ``idle_other_ns`` (Int64 ns; the causes sum exactly to
        ``idle_ns``) and ``idle_pct`` (Float64: idle as % of the step time).

    Raises:
        InvalidArgument: ``per`` is not ``"step"`` or ``"rank"``.

    Example:
        >>> import traceanalyzer as ta
        >>> i = ta.idle("fixtures/kineto/dlrm-v100-8rank")
        >>> i.filter(rank=0).select("idle_ns", "idle_host_bound_ns", "idle_sync_ns", "idle_other_ns").row(0)
        (7865000, 6440000, 96000, 1329000)
    """
    from traceanalyzer.classify import IDLE_FIELDS

    _choice("per", per, ("step", "rank"))
    a = _analysis(source)
    fields = ["duration", "idle", *[f for f in IDLE_FIELDS if f"{f}_ns" in a.steps.columns]]
    if per == "step":
        df = a.steps.select("rank", "step", *[f"{f}_ns" for f in fields])
    else:
        df = a.steps.group_by("rank").agg(pl.len().cast(pl.UInt32).alias("steps"), *[pl.col(f"{f}_ns").sum() for f in fields]).sort("rank")
    pct = pl.when(pl.col("duration_ns") > 0).then(100 * pl.col("idle_ns") / pl.col("duration_ns")).otherwise(0.0)
    return df.with_columns(pct.alias("idle_pct"))


def stragglers(
    source: Source, *, per: Literal["rank", "rank_step", "step"] = "rank", tolerance: float = 0.05
) -> pl.DataFrame:
    """Which ranks are slow, on how many steps, and in which bucket.

    For every step present on at least two ranks, a rank is slow when its step time exceeds the
    step's median over the ranks by more than ``tolerance`` × the median; its bucket is the one
    (or the idle cause) whose time on that rank exceeds that bucket's median over the ranks by
    the most: what makes it slow.

    Parameters:
        source: as in :func:`analyze`.
        per: ``"rank"``: one row per rank over all steps; ``"rank_step"``: one row per rank and
            step; ``"step"``: one row per step: its slowest rank, the skew and the rank the
            others waited on in collectives.
        tolerance: fraction of the median step time a rank must exceed it by to count as slow.

    Returns:
        ``per="rank"``: ``rank``, ``steps`` (compared), ``slow_steps``, ``slowest_steps`` (steps
        on which it was the slowest rank), ``excess_ns`` (its time above the median, summed over
        its slow steps), ``max_excess_ns``, ``bucket`` (the bucket it was slow in most often;
        null if never slow), ``bucket_steps``, ``bucket_excess_ns``; sorted by slow steps, then
        excess, most first.
        ``per="rank_step"``: ``rank``, ``step``, ``duration_ns``, ``median_ns``, ``excess_ns``,
        ``slow``, ``slowest``, ``bucket``, ``bucket_excess_ns``.
        ``per="step"``: ``step``, ``ranks``, ``slowest_rank``, ``max_ns``, ``median_ns``,
        ``min_ns``, ``skew_ns`` (max − median), ``straggler_bucket``, ``straggler_excess_ns``,
        ``durations``, ``waited_on_rank`` (the rank with the least collective wait: the late
        arriver the others waited for), ``waited_on_wait_ns``.
        Times in ns (Int64 for durations, Float64 for medians and differences).

    Raises:
        InvalidArgument: ``per`` is not one of its choices or ``tolerance`` is negative.

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> s = ta.stragglers("fixtures/kineto/dlrm-v100-8rank")
        >>> s.filter(pl.col("slow_steps") > 0).select("rank", "slowest_steps", "bucket").rows()
        [(1, 1, 'exposed_comm'), (3, 0, 'exposed_comm'), (4, 0, 'idle_host_bound'), (5, 0, 'idle_host_bound')]
    """
    from traceanalyzer.classify import stragglers as strag

    _choice("per", per, ("rank", "rank_step", "step"))
    if not isinstance(tolerance, (int, float)) or not tolerance >= 0:
        raise InvalidArgument(f"tolerance must be a non-negative fraction, got {tolerance!r}")
    a = _analysis(source)
    if per == "step":
        return a.cross_rank if a.cross_rank is not None else pl.DataFrame()
    if per == "rank_step":
        return strag.straggler_steps(a.steps, tolerance)
    return strag.stragglers(a.steps, tolerance)


# ---------------------------------------------------------------------------------------------
# two runs, and the report


def compare(a: Source, b: Source) -> pl.DataFrame:
    """Why is B slower (or faster) than A: the gap in mean step time, split exactly by bucket.

    Each step is an exact partition, so the mean step time is the sum of the mean buckets and
    the per-bucket differences sum exactly to the gap. ``exposed_comm`` and ``idle`` are split
    into their causes (dimensions, idle causes). Compare two runs, or two parts of one run
    with :func:`select` (two steps, the fastest and the slowest rank).

    Parameters:
        a: the reference (as in :func:`analyze`).
        b: the run compared with it.

    Returns:
        One row per term (``compute``, ``recompute``, ``exposed_comm_<dim>``, ``other``,
        ``idle_<cause>``), largest difference first: ``term``, ``a_ms``, ``b_ms`` (Float64:
        mean per rank and step, milliseconds) and ``diff_ms`` (``b_ms − a_ms``). The sum of
        ``diff_ms`` is the gap in mean step time.

    Example:
        >>> import traceanalyzer as ta
        >>> an = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> d = ta.compare(ta.select(an, ranks=[7]), ta.select(an, ranks=[1]))
        >>> round(d["diff_ms"].sum(), 3)
        7.392
        >>> d.row(0)
        ('exposed_comm_dp', 1.58, 11.056, 9.476)
    """
    from traceanalyzer.reconciliation import compare_time

    res = compare_time(_analysis(a), _analysis(b))
    return pl.DataFrame(
        [(t["term"], t["a_ms"], t["b_ms"], t["contribution_ms"]) for t in res["terms"]],
        schema={"term": pl.String, "a_ms": pl.Float64, "b_ms": pl.Float64, "diff_ms": pl.Float64},
        orient="row",
    )


def report(
    source: Source,
    output: PathLike | None = None,
    *,
    format: Literal["html", "markdown", "json"] | None = None,
    config: PathLike | None = None,
    rank: int | None = None,
    top: int = 10,
    ranks: Literal["auto", "all", "summary"] = "auto",
) -> dict[str, Any]:
    """The report model (every number a report shows), optionally written as HTML, Markdown or JSON.

    Parameters:
        source: as in :func:`analyze`.
        output: file to write; none: only return the model.
        format: ``"html"`` (one self-contained file), ``"markdown"`` (plots embedded as data
            URIs) or ``"json"``; default: from the suffix of ``output`` (``.md`` Markdown,
            ``.json`` JSON, anything else HTML).
        config: run configuration (TOML) for achieved TFLOP/s, MFU and the waterfall.
        rank: the rank whose per-step timeline is shown first (default: the slowest); the model
            holds up to 7 more ranks' timelines (``more_timelines``), the HTML a selector.
        top: rows in the top-kernel and top-collective tables.
        ranks: ``"auto"``: a summary of the ranks' distribution above 16 ranks, every rank up
            to that; ``"all"``: every rank; ``"summary"``: the summary whatever the count.

    Returns:
        The report model as a ``dict`` (the document ``traceanalyzer report -f json`` writes):
        ``headline``, ``ranks`` (one entry per rank), ``rank_summary`` (the rows of
        :func:`rank_summary` in ms, or ``None`` when every rank is listed), ``stragglers``,
        ``steps``, ``timeline``, ``more_timelines``, ``top_kernels``, ``top_exposed_collectives``, ``warnings``...;
        times in ms (``*_ms``), shares in % (``*_pct``).

    Raises:
        InvalidArgument: a bad ``format``, ``ranks``, ``rank`` or ``top``.
        OutputError: ``output`` cannot be written or is one of the inputs.
        ConfigError: ``config`` is missing or invalid.

    Example:
        >>> import traceanalyzer as ta
        >>> m = ta.report("fixtures/kineto/dlrm-v100-8rank")
        >>> m["headline"]["slowest_rank"], round(m["headline"]["step_ms"], 3)
        (1, 16.008)
        >>> m["rank_summary"] is None, len(m["ranks"])
        (True, 8)
    """
    from traceanalyzer.outputs import Outputs
    from traceanalyzer.report import document

    if format is not None:
        _choice("format", format, ("html", "markdown", "json"))
    _choice("ranks", ranks, ("auto", "all", "summary"))
    if not isinstance(top, int) or not 1 <= top <= 1000:
        raise InvalidArgument(f"top must be an integer from 1 to 1000, got {top!r}")
    from traceanalyzer.engine import with_tables

    a = _analysis(source)
    a = with_tables(a, "kernel_stats", if_possible=True)  # the top-kernel table
    if rank is not None and rank not in a.trace.ranks:
        raise InvalidArgument(f"no rank {rank} in the trace (ranks: {a.trace.ranks[:16]})")
    model = document.build(a, rank=rank, config=Path(config) if config is not None else None, top=top, ranks=ranks)
    if output is None:
        return model
    out = Path(output)
    fmt = format or ("markdown" if out.suffix.lower() in (".md", ".markdown") else "json" if out.suffix.lower() == ".json" else "html")
    outputs = Outputs([*a.trace.sources, *([Path(config)] if config is not None else [])])
    outputs.check(out)
    write_report(model, out, fmt, outputs, embed=True)
    return model


def plan(
    tokens: float | str,
    config: PathLike | None = None,
    *,
    params: float | str | None = None,
    gpus: int | None = None,
    gpu: str | None = None,
    mfu: float | str | tuple[float, float] | None = None,
    tflops: float | str | tuple[float, float] | None = None,
    convention: str = "6nt",
    price_per_gpu_hour: float | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Plan a training run: total FLOPs, GPU-hours, wall-clock days, energy and cost, with margins.

    Total FLOPs = FLOPs per token × tokens (``6nt``: 6 × parameters; ``megatron``/``palm``:
    from a run configuration); GPU time = FLOPs / sustained FLOP/s per GPU, then × (1 + margin)
    for each margin (framework overhead, jitter, data loading, interruptions: assumed unless
    measured from a trace). Every figure has a low / expected / high value.

    Parameters:
        tokens: training tokens: a number or ``"15T"``, ``"300B"``.
        config: run configuration (TOML) for the model's FLOPs per token and the GPU.
        params: parameter count (``"405B"``) for the ``6nt`` convention.
        gpus: number of GPUs (for wall-clock time).
        gpu: GPU name (``"H100 SXM"``) for its dense peak.
        mfu: model FLOPs utilisation: a fraction, or a range ``"38-43%"``.
        tflops: sustained TFLOP/s per GPU instead of ``mfu``.
        convention: FLOPs convention: ``6nt``, ``megatron``, ``megatron2024``, ``palm``.
        price_per_gpu_hour: price for the cost estimate.
        **options: passed to :func:`traceanalyzer.model.runplan.plan_run` (``gpu_power_w``,
            ``pue``, ``margins``, ``measured``, ``precision``, ``flops``).

    Returns:
        A ``dict``: ``total_flops``, ``flops_per_token``, ``gpu_hours``, ``days``, ``energy_mwh``,
        ``cost`` (each range-valued figure as ``{low, expected, high}``), ``margins`` and notes.

    Raises:
        ConfigError: missing or inconsistent inputs (no throughput, unknown GPU, bad range).

    Example:
        >>> import traceanalyzer as ta
        >>> p = ta.plan("15T", params="405B", mfu="38-43%", gpu="H100 SXM", gpus=16384)
        >>> p["total_flops"]
        3.645e+25
    """
    from traceanalyzer.model.runplan import plan_run

    cfg = None
    if config is not None:
        from traceanalyzer.model import load_config

        cfg = load_config(Path(config), None)
    return plan_run(tokens, cfg, params=params, gpus=gpus, gpu=gpu, mfu=mfu, tflops=tflops, convention=convention,
                    price_per_gpu_hour=price_per_gpu_hour, **options)


# ---------------------------------------------------------------------------------------------
# the kernel and op tables, launches, annotations, the critical path


def analysis_with_tables(source: Source, step_range: str | None = DEFAULT_STEP, **options: Any) -> Analysis:
    """The :class:`~traceanalyzer.classify.Analysis` of ``source`` with the per-kernel and per-op
    rows (``kernel_stats``, ``op_stats``). An analysis is given them with the options it was made
    with; otherwise ``options`` are the classification's (``recompute_range``, ``comm_kernels``,
    ``bus_bw_gbps``) and, for files, ``cache``, ``workers``, ``engine``, ``address``, ``quiet``."""
    return _with_optional(source, ("kernel_stats",), step_range, options)


def kernels(
    source: Source,
    *,
    name: str | None = None,
    rank: int | Iterable[int] | None = None,
    step: int | Iterable[int] | None = None,
    sort: str = "total",
    top: int | None = None,
    precision: str | None = None,
    step_range: str | None = DEFAULT_STEP,
    **options: Any,
) -> pl.DataFrame:
    """Every GPU kernel (and memcpy / memset) by name: calls, time statistics, its exact share
    of the breakdown, and achieved TFLOP/s where its launching op recorded shapes.

    Parameters
    ----------
    source:
        Trace file(s) or a directory of rank traces (``.json``, ``.json.gz``, Nsight Systems
        ``.sqlite``), a loaded :class:`~traceanalyzer.schema.Trace`, or an
        :class:`~traceanalyzer.classify.Analysis` (given its per-kernel rows with the options it
        was made with; never changed).
    name:
        Regex (Python ``re`` syntax, searched anywhere in the name) the kernel name must match.
    rank, step:
        Only these ranks / step numbers (``ProfilerStep#N``: ``N``; one int or several).
    sort:
        ``total`` (summed duration, default), ``bucket`` (share of the breakdown), ``calls``,
        ``mean``, ``p50``, ``p99``, ``max``, ``tflops`` or ``name``; biggest first.
    top:
        Keep the first ``top`` rows after sorting.
    precision:
        ``bf16``, ``fp16``, ``fp8``, ``tf32`` or ``fp32``: the precision of kernels whose name
        states none (bytes and the roofline need it; a name such as ``..._bf16_...`` wins).
    step_range:
        As in :func:`analyze` (default ``ProfilerStep``; ``None``: each rank's whole GPU span is
        step 0; ``step_name`` is its older name). Ignored for an analysis.
    options:
        ``recompute_range``, ``comm_kernels``, ``bus_bw_gbps`` (classification, as in
        :func:`analyze`), ``cache``, ``workers``, ``engine``, ``address``, ``quiet`` (loading
        files). Ignored for an analysis.

    Returns
    -------
    polars.DataFrame
        One row per kernel name and class, times in integer nanoseconds:
        ``name``, ``bucket`` (compute / recompute / comm / other), ``kind`` (kernel, memcpy,
        memset, gpu_other), ``streams`` (e.g. ``"7,20"``), ``ranks``, ``calls``, ``total_ns``,
        ``mean_ns`` (float), ``p50_ns``, ``p99_ns`` (nearest-rank percentiles: one of the
        durations), ``min_ns``, ``max_ns``, ``bucket_ns`` (the kernel's exact share of its
        bucket of the breakdown: over the kernels of a class these sum exactly to
        compute / recompute / exposed_comm / other), ``share_pct`` (``bucket_ns`` in percent of
        the selected rank-steps' wall time), ``precision``, ``flops_calls`` (calls with known
        FLOPs), ``flops``, ``bytes`` (of those calls), ``tflops`` (achieved TFLOP/s over those
        calls' time), ``gbps`` (achieved GB/s), ``peak_tflops`` (dense peak of the device at
        that precision), ``roofline_pct`` (achieved over the roofline's attainable rate, %).

    Raises
    ------
    InvalidArgument
        A bad ``name`` regex, ``sort``, ``precision`` or ``top``.

    Example
    -------
    The bundled 8-rank DLRM job on V100s (run from the repository root), its three biggest
    kernels: two NCCL kernels whose exposed part (``bucket_ns``) is 40 % of the ranks' step
    time, then a GEMM:

    >>> import traceanalyzer as ta
    >>> k = ta.kernels("fixtures/kineto/dlrm-v100-8rank", top=3)
    >>> k.select("bucket", "ranks", "calls", "total_ns", "bucket_ns").rows()
    [('comm', 8, 40, 37935000, 37248000), ('comm', 8, 24, 10607000, 9642000), ('compute', 8, 56, 409000, 409000)]
    >>> k["name"][2], round(k["share_pct"][0], 1)
    ('volta_sgemm_128x32_nt', 32.2)
    """
    from traceanalyzer.classify.kernelstats import kernel_table

    _check_table_args(name, sort, precision, top)
    an = analysis_with_tables(source, _step_alias(step_range, options), **options)
    ranks = _ints(rank)
    return kernel_table(an.kernel_stats, an.steps, _device(an, ranks), name=name, rank=ranks, step=_ints(step),
                        precision=precision, sort=sort, top=top)


def ops(
    source: Source,
    *,
    name: str | None = None,
    rank: int | Iterable[int] | None = None,
    step: int | Iterable[int] | None = None,
    sort: str = "total",
    top: int | None = None,
    precision: str | None = None,
    step_range: str | None = DEFAULT_STEP,
    **options: Any,
) -> pl.DataFrame:
    """Every host (CPU) op by name and input shapes: calls, host-time statistics, the GPU time
    of the kernels it launched, and FLOPs / achieved TFLOP/s / roofline where the shapes have a
    formula (GEMMs: ``aten::mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``; scaled
    dot-product / flash attention). Shapes need ``record_shapes=True`` in the profiler.

    Parameters
    ----------
    source:
        As for :func:`kernels`: trace file(s), a directory of rank traces, a loaded
        :class:`~traceanalyzer.schema.Trace`, or an Analysis.
    name:
        Regex (Python ``re`` syntax, searched anywhere in the name) the op name must match.
    rank, step:
        Only these ranks / step numbers (``ProfilerStep#N``: ``N``; one int or several).
    sort:
        As for :func:`kernels` (``total`` is the host time), and also ``gpu``: the GPU time of
        the op's kernels; biggest first.
    top:
        Keep the first ``top`` rows after sorting.
    precision:
        ``bf16``, ``fp16``, ``fp8``, ``tf32`` or ``fp32``: the precision used for the FLOPs'
        roofline where the op's kernels' names state none.
    step_range:
        As for :func:`kernels`.
    options:
        As for :func:`kernels`.

    Returns
    -------
    polars.DataFrame
        One row per op name and ``input_dims`` (JSON text of Kineto's ``Input Dims``; null
        without shapes), times in integer nanoseconds: ``name``, ``input_dims``, ``bucket`` (the
        class with most of its kernels' GPU time; null when it launched none), ``ranks``,
        ``calls``, ``total_ns`` (host time), ``mean_ns`` (float), ``p50_ns``, ``p99_ns``,
        ``min_ns``, ``max_ns`` (host), ``kernels`` (GPU work it launched itself: a parent op
        such as ``aten::linear`` shows none, its child ``aten::addmm`` shows them), ``gpu_ns``
        (their summed durations), ``gpu_share_pct`` (of the selected rank-steps' wall time),
        ``op_kind`` (gemm / attention / null), ``precision``, ``flops``, ``bytes`` (all calls),
        ``tflops`` and ``gbps`` (achieved, over ``gpu_ns``), ``peak_tflops``, ``roofline_pct``.

    Raises
    ------
    InvalidArgument
        As for :func:`kernels`.

    Example
    -------
    The GEMMs of the bundled MI300X trace (run from the repository root; recorded with
    shapes): the classifier's small ``[10, 512] x [512, 1000]`` layer, 3 calls each, far below
    the device's bf16 roofline:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> o = ta.ops("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz",
    ...            name=r"^aten::(mm|addmm)$", sort="gpu", precision="bf16")
    >>> o.select("name", "input_dims", "calls", "gpu_ns").rows()[2]
    ('aten::addmm', '[[1000],[10,512],[512,1000],[],[]]', 3, 16597)
    >>> o.select(pl.col("tflops", "roofline_pct").round(2)).rows()
    [(1.16, 2.24), (1.72, 3.34), (1.85, 3.6)]
    """
    from traceanalyzer.classify.opstats import op_table

    _check_table_args(name, sort, precision, top)
    an = analysis_with_tables(source, _step_alias(step_range, options), **options)
    ranks = _ints(rank)
    return op_table(an.op_stats, an.steps, _device(an, ranks), name=name, rank=ranks, step=_ints(step),
                    precision=precision, sort=sort, top=top)


def launches(
    source: Source,
    *,
    per: Literal["step", "kernel"] = "step",
    threshold: float = 0.10,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    **engine_kw: Any,
) -> pl.DataFrame:
    """Kernel launch statistics: per step (default) or one row per launched GPU item.

    Parameters
    ----------
    source:
        A trace file, a directory of rank files, a list of files, a loaded
        :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
        (given the launch table with the options it was made with: its steps stay its steps).
    per:
        ``"step"``: one row per (rank, step); ``"kernel"``: one row per launched GPU item
        (kernel, memcpy, memset) that has a launch record. ``by`` is its older name.
    threshold:
        With ``per="step"``: the share of the step (0 to 1) the GPU must sit idle waiting for a
        launch call that had not begun yet for the step to count as launch-bound.
    step_range:
        As in :func:`analyze` (``step_name`` is its older name). Ignored for an analysis.
    comm_kernels:
        As in :func:`analyze`. Ignored for an analysis.
    engine_kw:
        ``cache``, ``workers``, ``engine``, ``address``, ``quiet`` for files.

    Returns
    -------
    polars.DataFrame
        ``per="step"``: ``rank, step, kernels, memcpy, memset, launched,
        launch_latency_{mean,p50,p99,max}_ns, launch_delay_p50_ns, launch_cpu_p50_ns,
        launch_cpu_ns, gpu_work_p50_ns, duration_ns, idle_ns, idle_host_bound_ns,
        host_bound_share, launch_bound`` (percentiles: nearest rank).
        ``per="kernel"``: ``rank, step, pid, stream, kind, name, cls, correlation, launch_name,
        launch_ns, launch_end_ns, start_ns, end_ns, launch_latency_ns, launch_delay_ns, cpu_ns,
        gpu_ns`` (``step`` null outside every step window). Integer nanoseconds on the trace's
        clock; ``launch_latency_ns`` = GPU start − launch call start, ``launch_delay_ns`` = GPU
        start − launch call end (HTA's launch delay before its clip at 0).

    Raises
    ------
    InvalidArgument
        ``per`` is not ``"step"`` or ``"kernel"``, or ``threshold`` is not between 0 and 1.

    Example
    -------
    The bundled MI300X trace (run from the repository root): the host runs ~25 ms ahead of the
    GPU, so the kernels that start inside a step's host range were launched earlier (in step 15's
    range, before the profile began: no launch record), and no step is launch- or CPU-bound:

    >>> import traceanalyzer as ta
    >>> per_step = ta.launches("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz")
    >>> per_step.select("step", "kernels", "launched", "launch_latency_p50_ns", "launch_bound", "cpu_bound").rows()
    [(15, 637, 0, None, False, False), (16, 406, 354, 27148331, False, False), (17, 459, 483, 22017999, False, False)]
    >>> ta.launches("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz", per="kernel").height
    2685
    """
    from traceanalyzer.classify.launches import with_launch_bound

    per = _renamed("per", per, "by", engine_kw.pop("by", None))
    _choice("per", per, ("step", "kernel"))
    if not isinstance(threshold, (int, float)) or isinstance(threshold, bool) or not 0 <= threshold <= 1:
        raise InvalidArgument(f"threshold must be a share between 0 and 1, got {threshold!r}")
    table = "launches" if per == "step" else "launch_rows"
    a = _with_optional(source, (table,), _step_alias(step_range, engine_kw), {"comm_kernels": comm_kernels, **engine_kw})
    df = a.extras.get(table)
    if df is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64})
    return with_launch_bound(df, threshold) if per == "step" else df


def queue_length(
    source: Source,
    *,
    series: bool = False,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    **engine_kw: Any,
) -> pl.DataFrame:
    """Launch queue length per (rank, device, stream): a summary, or the step function itself.

    Parameters
    ----------
    source:
        As for :func:`launches`.
    series:
        ``False`` (default): one summary row per stream; ``True``: the time series.
    step_range, comm_kernels, engine_kw:
        As for :func:`launches`.

    Returns
    -------
    polars.DataFrame
        Summary: ``rank, pid, stream, launched, span_ns, queued_mean, queued_max,
        outstanding_mean, outstanding_max`` (means weighted by time over ``span_ns``, from the
        first launch to the last end on the stream) and HTA's statistics of the queued count
        ``hta_count, hta_mean, hta_std, hta_min, hta_p25, hta_p50, hta_p75, hta_max`` (one value
        per launch and per start, not weighted by time). Series: ``rank, pid, stream, t_ns,
        queued, outstanding``; each value holds from ``t_ns`` (integer ns) to the next row.
        ``queued`` = launched and not started; ``outstanding`` = launched and not finished.

    Example
    -------
    The bundled MI300X trace: up to 1,840 kernels queued on stream 0:

    >>> import traceanalyzer as ta
    >>> ta.queue_length("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz").select(
    ...     "stream", "launched", "queued_max", "outstanding_max").rows()
    [(0, 2673, 1840, 1840), (4, 12, 8, 9)]
    """
    table = "queue_series" if series else "queue"
    a = _with_optional(source, (table,), _step_alias(step_range, engine_kw), {"comm_kernels": comm_kernels, **engine_kw})
    df = a.extras.get(table)
    if df is None:
        return pl.DataFrame(schema={"rank": pl.Int32, "pid": pl.String, "stream": pl.Int64})
    return df


def annotations(
    trace: Source,
    *,
    name: str | None = None,
    level: int | None = None,
    source: Literal["auto", "gpu", "host"] = "auto",
    per: Literal["step", "rank", "name"] = "step",
    config: PathLike | Any | None = None,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    **engine_kw: Any,
) -> pl.DataFrame:
    """GPU time under each NVTX / ``record_function`` range, split into the partition's buckets.

    Parameters
    ----------
    trace:
        A trace file, a directory of rank files, a list of files, a loaded
        :class:`~traceanalyzer.schema.Trace`, or an :class:`~traceanalyzer.classify.Analysis`
        (given the annotation table with the options it was made with).
    name:
        Regex (polars dialect, searched anywhere) the range name must match; ``None``: all.
    level:
        Only ranges at this nesting level (0: outermost on their thread or stream).
    source:
        ``"gpu"``: Kineto's GPU-side range copies (``gpu_user_annotation``, HTA's input);
        ``"host"``: host ranges (``record_function``, NVTX) projected onto the GPU through the
        launches made inside them; ``"auto"`` (default): ``gpu`` for ranks that have GPU-side
        ranges, else ``host``.
    per:
        ``"step"`` (default): one row per (rank, step, source, name, level); ``"rank"``: summed
        over steps (``steps`` column: how many); ``"name"``: summed over ranks and steps
        (``ranks`` column). ``by`` is its older name.
    config:
        Run configuration (a TOML path, or a :class:`~traceanalyzer.model.RunConfig`): adds
        ``model_flops`` (per GPU) and ``mfu`` columns (for a range that covers part of a step, MFU is
        its model FLOPs share of the step over its time: ``docs/annotations.md``).
    step_range:
        As in :func:`analyze` (``step_name`` is its older name). Ignored for an analysis.
    comm_kernels:
        As in :func:`analyze`. Ignored for an analysis.
    engine_kw:
        ``cache``, ``workers``, ``engine``, ``address``, ``quiet`` for files.

    Returns
    -------
    polars.DataFrame
        Columns ``rank, step, source, name, level, count, gpu_work, gpu_work_ns, duration_ns,
        compute_ns, recompute_ns, exposed_comm_ns, other_ns, idle_ns, overlapped_comm_ns,
        outside_ns`` (+ ``model_flops, mfu`` with ``config``), sorted by ``duration_ns``
        descending. Times are integer nanoseconds; the five buckets sum exactly to
        ``duration_ns`` (the range's GPU time inside step windows), ``outside_ns`` is its GPU
        time in no step. ``count``: range instances; ``gpu_work``/``gpu_work_ns``: GPU items
        under them and their summed duration.

    Raises
    ------
    InvalidArgument
        A bad ``name`` regex, ``level``, ``source`` or ``per``.
    ConfigError
        ``config`` is missing or invalid.

    Example
    -------
    The bundled MI300X trace (run from the repository root), its optimizer ranges summed over
    steps: 3 instances, 90.761 µs of GPU time of which 90.756 µs compute. Its host runs ~25 ms
    ahead of the GPU, so the optimizer's kernels run after the last step's host range has ended:
    outside every step, unless the whole trace is one step (``step_range=None``):

    >>> import traceanalyzer as ta
    >>> mi300x = "fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz"
    >>> ta.annotations(mi300x, name="Optimizer", per="name").select("name", "count", "duration_ns", "outside_ns").rows()
    [('Optimizer.step#SGD.step', 3, 0, 90762)]
    >>> df = ta.annotations(mi300x, name="Optimizer", per="name", step_range=None)
    >>> df.select("name", "count", "duration_ns", "compute_ns", "idle_ns").rows()
    [('Optimizer.step#SGD.step', 3, 90761, 90756, 5)]
    """
    from traceanalyzer.classify import annotation_ranges as ann

    _regex("name", name, polars=True)
    _choice("source", source, ann.SOURCES)
    per = _renamed("per", per, "by", engine_kw.pop("by", None))
    _choice("per", per, ("step", "rank", "name"))
    if level is not None and (not isinstance(level, int) or isinstance(level, bool) or level < 0):
        raise InvalidArgument(f"level must be a nesting level (0, 1, ...), got {level!r}")
    a = _with_optional(trace, ("annotations",), _step_alias(step_range, engine_kw), {"comm_kernels": comm_kernels, **engine_kw})
    table = a.extras.get("annotations")
    if table is None:
        table = ann.empty_table()
    peak = None
    if config is not None:
        flops, peak = _model_flops_and_peak(config, a)
        table = ann.with_mfu(table, a.steps, flops, peak)
    out = ann.select(table, name=name, level=level, source=source, by=per)
    if peak is not None and per != "step":
        out = ann.add_mfu(out, peak)
    return out


def critical_path(
    source: Source | None = None,
    step: int | None = None,
    rank: int | None = None,
    *,
    analysis: Analysis | None = None,
    step_range: str | None = DEFAULT_STEP,
    infer_waits: bool = True,
    wait_slack_ns: int = 10_000,  # classify.critical_path.WAIT_SLACK_NS
    host_gaps: bool = True,
    workers: int | None = None,
    **options: Any,
) -> Any:
    """The critical path of every step (or of one): what the step waited on, piece by piece.

    The path is the longest path through the step's dependency graph: host threads (CPU ops,
    ``record_function`` ranges, runtime calls, and the time between them), GPU streams
    (kernels, memcpy, memset in stream order), launch edges (runtime call -> its activity, by
    correlation id), synchronisations (a blocking call such as ``cudaDeviceSynchronize`` or
    ``cudaStreamSynchronize`` returns after the activity it waited for), waits between streams
    (inferred: see ``infer_waits``) and, when several ranks are loaded and ``rank`` is not
    given, matched collectives (a rank's collective kernel moves data only once the last rank of
    its group arrived, so the path can cross to that rank). Waiting weighs nothing on the path;
    work and the delays that held work back weigh their time (see ``docs/critical-path.md``).

    Parameters
    ----------
    source : path, Trace or Analysis
        A trace file or directory of rank files (one rank, or all ranks of a job), a loaded
        trace (:func:`load`), or an analysis (:func:`analyze`; one made without its events is
        given them with the options it was made with).
    step : int, optional
        Only this step number (as in ``breakdown``); default: every step.
    rank : int, optional
        Only this rank, on its own (no cross-rank edges). Default: every rank; with several
        ranks the path of a step runs through all of them.
    analysis : Analysis, optional
        The trace already classified (``traceanalyzer.analyze(trace)``), to reuse its GPU
        labels, step windows and matched collectives; computed when not given.
    step_range : str or None
        As in :func:`analyze` (``ProfilerStep``; ``None``: each rank's whole trace is one step,
        step 0; ``step_name`` is its older name). Ignored when ``analysis`` is given.
    infer_waits : bool
        Link an activity that started more than ``wait_slack_ns`` after both its launch call and
        its stream predecessor to the activity on another stream of its rank that ended last
        before it (what a ``cudaStreamWaitEvent`` waits for). ``False``: no such edge (HTA
        without CUDA synchronisation events behaves so).
    wait_slack_ns : int
        See ``infer_waits`` (default 10 000 ns).
    host_gaps : bool
        Weigh the host's time inside no op or runtime call (``host_gap``: the own time of
        ``record_function`` ranges such as ``ProfilerStep#N``, and the time between them: Python
        between ops, a ``time.sleep``, a slow data loader). Default ``True``: a host stall is on
        the path as the host's (bucket ``host``), not as nothing. ``False`` weighs only ops and
        runtime calls, as HTA's critical path does: then a host stall outside every op leaves
        ``path_ns`` short of the step (a thread blocked outside any op, e.g. the main thread
        while the autograd thread runs ``backward``, also counts as host with ``True``).
    workers : int, optional
        When ``source`` is a path: rank files parsed and classified in parallel processes
        (default: one process for a small job, all cores for a large one; 1: in this process).
    options
        ``step_name`` and ``trace``: the older names of ``step_range`` and ``source``.

    Returns
    -------
    CriticalPath
        ``summary``: one row per step (and per rank when ranks are on their own): ``step``,
        ``rank`` (null for a path through several ranks), ``ranks`` (ranks the path visits),
        ``path_ns`` (length of the path), ``window_ns`` (span of the step's events: its host
        events and GPU work, first start to last end over the ranks; ``path_ns <= window_ns``),
        ``<bucket>_ns`` and ``<bucket>_share`` (fraction of ``path_ns``) for the buckets
        ``compute, recompute, exposed_comm, other, idle, host``, ``segments``, ``syncs`` / ``waits`` / ``collectives`` (hops of each kind on the path)
        and ``rounds`` (relaxation rounds the solver needed).

        ``segments``: the pieces of the path with weight, in time order: ``step, rank, seq,
        what`` (``kernel``, ``transfer`` — a collective after the last rank arrived —,
        ``kernel_gap``, ``launch_delay``, ``wait_gap``, ``host_op``, ``host_gap`` — Python
        outside every op: the range it is in, or null), ``bucket``, ``name`` (the op, kernel,
        range, or the activity a delay held back),
        ``where`` (``thread PID/TID`` or ``stream DEVICE/STREAM``), ``start_ns, end_ns`` and
        ``dur_ns`` (its weight: the bucket sums of a step equal ``path_ns``). All times are
        integer nanoseconds on the trace's time base.
    warnings : list of str
        The analysis' warnings (steps without GPU work, truncated files, ...).

    Raises
    ------
    InvalidArgument
        ``step`` or ``rank`` is not in the trace (the message lists the ones that are), or
        ``source`` is not a path, a trace or an analysis.

    Example
    -------
    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> cp = ta.critical_path(ta.load("fixtures/kineto/dlrm-v100-8rank"))  # 8 ranks: one path per step
    >>> cp.summary.select("step", "ranks", "path_ns", "idle_share", "host_share").row(0)
    (10, 1, 14402000, 0.06374114706290793, 0.9357033745313151)
    >>> cp.segments.group_by("rank").agg(pl.col("dur_ns").sum()).sort("rank").rows()
    [(3, 14402000)]
    """
    from traceanalyzer.classify import Analysis
    from traceanalyzer.classify.critical_path import critical_path as solve

    step_range = _step_alias(step_range, options)
    source = options.pop("trace", source)  # its older name
    if options:
        raise InvalidArgument(f"critical_path got an unexpected argument {next(iter(options))!r}")
    if isinstance(source, Analysis):
        analysis = source
    if analysis is None:
        if source is None:
            raise InvalidArgument("critical_path needs a trace (source) or an analysis")
        analysis = analyze(source, step_range, workers=workers)
    analysis = _with(analysis, "events", "gpu")
    try:
        return solve(analysis.trace, step, rank, analysis=analysis, infer_waits=infer_waits, wait_slack_ns=wait_slack_ns,
                     host_gaps=host_gaps)
    except ValueError as exc:  # a step or rank not in the trace: the message lists those that are
        raise InvalidArgument(str(exc)) from None


# ---------------------------------------------------------------------------------------------
# the model: memory and what-if


def memory(
    source: Source | None = None,
    config: PathLike | Any | None = None,
    *,
    megatron_args: PathLike | None = None,
    reserve_gib: float = 4.0,
    step_range: str | None = DEFAULT_STEP,
    gpu_only: bool = True,
    cache: bool | PathLike = False,
    workers: int | None = None,
    quiet: bool = True,
    trace: Source | None = None,
    reserve_gb: float | None = None,
) -> Any:
    """Memory per GPU: the analytic prediction for a run configuration, and what a trace measured.

    Parameters
    ----------
    source:
        A trace file, a directory of rank files, a list of files, a loaded
        :class:`traceanalyzer.schema.Trace` or an :class:`~traceanalyzer.classify.Analysis`
        (its trace; ``trace`` is this argument's older name). Its Kineto ``[memory]`` events (recorded with
        ``torch.profiler.profile(profile_memory=True)``) give the allocated and reserved bytes
        over time per rank; its memcpy/memset events the copy bandwidth. None: prediction only.
    config:
        A run configuration (TOML path or :class:`~traceanalyzer.model.config.RunConfig`).
        None (and no ``megatron_args``): measurement only.
    megatron_args:
        Megatron-LM launch script, arguments or training log (with or instead of ``config``).
    reserve_gib:
        GiB (2^30 bytes) kept free for what the model does not count (CUDA context, NCCL and
        cuBLAS buffers, fragmentation); the verdict is ``total + reserve <= device memory``.
    step_range:
        Name of the host range that marks a training step (for the step of the peak).
    gpu_only:
        Keep the GPU allocator only (not the host's ``[memory]`` events).
    cache:
        Use the parse cache (True, or a directory), as :func:`traceanalyzer.parsers.load`.
    workers:
        Rank files read in parallel processes (default: one process for a small job, all
        cores for a large one; 1: in this process).
    quiet:
        No progress bar on standard error (``False``: the command line's bar, bytes read of
        the job).
    trace:
        The older name of ``source``.
    reserve_gb:
        The older name of ``reserve_gib`` (the value was always GiB).

    Returns
    -------
    MemoryResult
        ``predicted`` (component, bytes, gib, share, what), ``fit`` (one row: most loaded stage,
        total, device memory, reserve, headroom, fits, and the measured peaks beside them),
        ``measured`` (per rank/device: peak_allocated, peak_allocated_ns, peak_step,
        peak_reserved, peak_reserved_ns, source), ``timeline`` (rank, device, ts_ns, bytes,
        allocated, reserved, source), ``copies`` (rank, kind, name, count, bytes, busy_ns,
        gb_per_s). Bytes are bytes; times integer ns on the trace's time base.

    Raises
    ------
    traceanalyzer.errors.InvalidArgument
        A bad ``reserve_gib``, ``workers`` or ``source``, or nothing to do.
    traceanalyzer.errors.ConfigError
        A bad configuration value (exit code 7 on the command line), naming it.
    traceanalyzer.errors.NoGpuActivity
        A trace alone (no configuration) with neither GPU memory events nor copies (exit 5).

    Example
    -------
    The 70B run of docs/examples (TP8 PP8 DP2, full recompute, 80 GB H100), from the repository root:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> r = ta.memory(config="docs/examples/issue1031-70b.toml", reserve_gib=4)
    >>> r.fit.select("stage", "fits").row(0)
    (0, True)
    >>> round(r.predicted.filter(pl.col("component") == "optimizer_states")["gib"].item(), 2)
    6.38

    With a trace recorded with ``profile_memory=True``, ``r.measured`` holds the peaks and
    ``r.fit`` the largest measured peak beside the predicted total.
    """
    from traceanalyzer.classify import Analysis
    from traceanalyzer.reconciliation.footprint import memory as footprint
    from traceanalyzer.schema import Trace

    source = trace if source is None else source  # ``trace``: its older name
    reserve = _renamed("reserve_gib", reserve_gib, "reserve_gb", reserve_gb, 4.0)
    if not isinstance(reserve, (int, float)) or isinstance(reserve, bool) or not 0 <= reserve < float("inf"):
        raise InvalidArgument(f"reserve_gib must be a finite number of GiB, zero or more, got {reserve!r}")
    if source is None and config is None and megatron_args is None:
        raise InvalidArgument("nothing to do: give a trace (source), a run configuration (config) or both")
    if isinstance(source, Analysis):
        source = source.trace if source.trace.events.height else [Path(s) for s in source.trace.sources]
    elif source is not None and not isinstance(source, Trace):
        source = [Path(_path(source))] if isinstance(source, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(source)]
    from traceanalyzer.engine import check_workers

    check_workers(workers)
    return footprint(source, _config(config) if config is not None and megatron_args is None else config,
                     megatron_args=megatron_args, reserve_gb=reserve, step_range=step_range, gpu_only=gpu_only,
                     cache=_cache_arg(cache), workers=workers, quiet=quiet)


def whatif(
    config: PathLike | Any,
    sets: list[str] | dict[str, Any] | Any,
    *,
    source: Source | None = None,
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
    convention: str | None = None,
    analysis: Analysis | None = None,
) -> pl.DataFrame:
    """Predict another layout of a run from its measured (or published) step.

    Parameters
    ----------
    config:
        The run configuration of the anchor run: a TOML file, or a
        :class:`~traceanalyzer.model.RunConfig`.
    sets:
        The change: ``["pp=2", "recompute=selective", "micro_batch=2"]`` (as ``--set``), the same
        as a dict, or a whole new :class:`RunConfig`.
    source:
        The anchor run's trace (a path, a :class:`~traceanalyzer.schema.Trace` or an
        :class:`~traceanalyzer.classify.Analysis`). Without it the anchor is the analytic model
        of ``config``, its compute time implied by ``[reported]`` when given (a published run),
        else at peak.
    baseline:
        nccl-tests output (a file, several, or a frame already read): every communication
        family's bandwidth is read off it at its message size and scope.
    convention:
        FLOPs convention of the TFLOP/s (default: the reported one, else the configuration's).
    analysis:
        The anchor's analysis (the older spelling of ``source``).

    Returns
    -------
    polars.DataFrame
        Two rows, ``scenario`` = ``"anchor"`` and ``"predicted"``: the layout (``gpus tp pp vp dp
        cp ep micro_batch global_batch recompute sequence_parallel distributed_optimizer``),
        ``step_time_s``, ``tflops_per_gpu`` (model FLOPs), ``hw_tflops_per_gpu``, ``mfu``,
        ``hfu``, ``memory_gib`` / ``margin_gib`` / ``fits`` (the most loaded stage against the
        GPU's memory less the reserve; null when the memory model cannot size it) and one ``<term>_ms`` column per
        term of the step (compute by family, recompute, imbalance, exposed communication by
        dimension, bubble, other, idle by cause). ``anchor_source`` says what the anchor was:
        ``trace``, ``reported`` or ``analytic``. The rules that moved each term are in
        :func:`project` (``traceanalyzer whatif -f json`` prints them).

    Raises
    ------
    SetUsageError
        (exit 2) a malformed ``KEY=VALUE`` or an unknown key.
    ConfigError
        (exit 7) a bad value or an inconsistent layout, naming the key.

    Example
    -------
    The published 70B run of docs/examples (TP8 PP8 DP2, full recompute, 296.5 TFLOP/s/GPU
    reported) moved to PP4 with selective recompute (run from the repository root): a shorter
    step, at the price of three times the memory, which still fits the 80 GB H100:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> w = ta.whatif("docs/examples/issue1031-70b.toml", ["pp=4", "recompute=selective"])
    >>> w.select("scenario", "anchor_source", "pp", "recompute", pl.col("step_time_s", "tflops_per_gpu", "memory_gib").round(1), "fits").rows()
    [('anchor', 'reported', 8, 'full', 2.9, 296.5, 16.0, True), ('predicted', 'reported', 4, 'selective', 2.0, 431.8, 50.6, True)]
    """
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.reconciliation.anchor import whatif as predict_layout

    if convention is not None:
        _choice("convention", convention, CONVENTIONS)
    if isinstance(sets, str):
        raise InvalidArgument("sets is a list of KEY=VALUE changes (or a dict), not one string")
    anchor = analysis if analysis is not None else (analyze(source) if source is not None else None)
    return predict_layout(_config(config), sets, analysis=anchor, baseline=_baseline(baseline), convention=convention)


# ---------------------------------------------------------------------------------------------
# the model against the trace, and the run configuration alone


def reconcile(
    source: Source,
    config: PathLike | Any | None = None,
    *,
    megatron_args: PathLike | None = None,
    convention: str | None = None,
    hfu: Literal["forward", "megatron", "none"] = "forward",
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    cache: bool | PathLike = False,
    workers: int | None = None,
) -> dict[str, Any]:
    """The waterfall from peak to achieved TFLOP/s per GPU: every measured loss beside the theory.

    The same document as ``traceanalyzer reconcile -f json``.

    Parameters:
        source: as in :func:`analyze` (an analysis is given its events with the options it was
            made with).
        config: the run configuration (a TOML file or a :class:`~traceanalyzer.model.RunConfig`).
        megatron_args: Megatron-LM launch arguments, script or training log (with or instead of
            ``config``).
        convention: FLOPs convention (``megatron``, ``megatron2024``, ``palm``; default: the
            configuration's).
        hfu: how recompute counts in HFU (``forward``, ``megatron`` or ``none``).
        baseline: nccl-tests output (file(s) or a frame): predicted communication at the
            bandwidth of its message size and scope.
        step_range: as in :func:`analyze` (ignored for an analysis).
        comm_kernels: as in :func:`analyze`, besides the configuration's ``[trace]`` patterns.
        cache: as in :func:`analyze`.
        workers: as in :func:`analyze`.

    Returns:
        A ``dict``: ``schema`` (``traceanalyzer.reconcile``), ``peak_tflops``,
        ``achieved_tflops``, ``terms`` (each loss in TFLOP/s and % of peak, measured beside
        predicted), ``warnings``...; documented in ``docs/report-schema.md``.

    Raises:
        ConfigError: the configuration is missing or invalid.
        InvalidArgument: a bad ``convention``, ``hfu`` or pattern.

    Example:
        >>> import traceanalyzer as ta
        >>> w = ta.reconcile("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz",
        ...                  "docs/examples/traces/mi300x-resnet18-ckpt.toml")
        >>> w["schema"], "exact" in w
        ('traceanalyzer.reconcile', False)
    """
    wf, _warnings = _reconcile(source, config, megatron_args, convention, hfu, baseline, step_range, comm_kernels, cache, workers)
    return {"schema": "traceanalyzer.reconcile", "schema_version": 1, **public(wf)}


def predict(
    config: PathLike | Any | None = None,
    *,
    megatron_args: PathLike | None = None,
    vs: PathLike | Any | None = None,
    global_batch: int | Iterable[int] | None = None,
    convention: str | None = None,
    hfu: Literal["forward", "megatron", "none"] = "forward",
    kernel_efficiency: float | None = None,
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Predict a run from its configuration alone: FLOPs, bubble, recompute, communication, memory.

    The same document as ``traceanalyzer predict -f json``.

    Parameters:
        config: the run configuration (a TOML file or a :class:`~traceanalyzer.model.RunConfig`).
        megatron_args: Megatron-LM launch arguments, script or training log.
        vs: a reference configuration: its ``[reported]`` throughput sets the kernel efficiency,
            and the gap to it is split into causes.
        global_batch: another global batch, or several (a sweep).
        convention: FLOPs convention (default: the configuration's).
        hfu: how recompute counts in HFU.
        kernel_efficiency: fraction of peak reached by compute kernels, in (0, 1].
        baseline: nccl-tests output (file(s) or a frame): bandwidth by message size.

    Returns:
        A ``dict``: ``schema`` (``traceanalyzer.predict``), ``prediction``, and with a sweep
        ``sweep``, with ``vs`` the reference's prediction and ``comparison``; ``memory`` (the
        memory per GPU by component, or None) and ``warnings``.

    Raises:
        ConfigError: the configuration is missing or invalid.
        InvalidArgument: a bad ``kernel_efficiency``, ``global_batch`` or ``convention``.

    Example:
        >>> import traceanalyzer as ta
        >>> p = ta.predict("docs/examples/megatron-readme-70b.toml")
        >>> p["schema"], p["prediction"]["convention"]
        ('traceanalyzer.predict', 'megatron2024')
    """
    doc, _sections, _warnings = predict_parts(config, megatron_args, vs, global_batch, convention, hfu, kernel_efficiency, baseline)
    return doc


def search_layouts(
    config: PathLike | Any,
    sets: list[str] | dict[str, Any] | None = None,
    *,
    source: Source | None = None,
    top: int = 10,
    capacity_gib: float | None = None,
    reserve_gib: float | None = None,
    baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None = None,
    convention: str | None = None,
    capacity_gb: float | None = None,
    reserve_gb: float | None = None,
) -> pl.DataFrame:
    """Rank every valid layout of a run's model on the same GPUs and global batch by predicted TFLOP/s/GPU.

    The table of ``traceanalyzer whatif --search`` (its JSON document adds the counts).

    Parameters:
        config: the run configuration of the anchor run (a TOML file or a
            :class:`~traceanalyzer.model.RunConfig`).
        sets: changes (``["micro_batch=2"]``, as in :func:`whatif`): each key also pins that knob.
        source: the anchor run's trace (as in :func:`whatif`); without it the analytic model.
        top: size the memory of layouts in order of predicted TFLOP/s until this many fit (0:
            all); the others keep ``fits`` null.
        capacity_gib: memory of one GPU in GiB (default: ``[hardware] memory_gb``, else the GPU
            table's).
        reserve_gib: memory kept free per GPU in GiB (default 4).
        baseline: nccl-tests output (file(s) or a frame).
        convention: FLOPs convention (default: the reported one, else the configuration's).
        capacity_gb, reserve_gb: the older names of ``capacity_gib`` and ``reserve_gib``.

    Returns:
        One row per layout: the knobs (``tp pp vp cp ep dp micro_batch recompute
        sequence_parallel distributed_optimizer``), ``microbatches``, ``step_time_s``,
        ``tflops_per_gpu``, ``mfu``, ``bubble_ms``, ``recompute_ms``, ``exposed_comm_ms``,
        ``memory_gib``, ``margin_gib``, ``fits``, ``is_anchor`` and ``rank`` (1 = fastest among
        the layouts that fit). Sorted by ``rank`` then predicted TFLOP/s.

    Raises:
        SetUsageError: a malformed ``KEY=VALUE`` or an unknown key.
        ConfigError: a bad value or an inconsistent layout.
        InvalidArgument: a bad ``top``, ``capacity_gib``, ``reserve_gib`` or ``convention``.

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> s = ta.search_layouts("docs/examples/issue1031-70b.toml", ["tp=8", "pp=2"], top=3)
        >>> s.height
        960
        >>> s.head(2).select("rank", "tp", "pp", "vp", "dp", "micro_batch", "recompute", pl.col("tflops_per_gpu", "memory_gib").round(1), "fits").rows()
        [(1, 8, 2, 8, 8, 1, 'none', 529.0, 63.7, True), (2, 8, 2, 5, 8, 1, 'none', 524.1, 64.9, True)]
    """
    capacity = _renamed("capacity_gib", capacity_gib, "capacity_gb", capacity_gb, None)
    reserve = _renamed("reserve_gib", reserve_gib, "reserve_gb", reserve_gb, None)
    found = search_parts(config, None, sets, source, top, capacity, reserve, baseline, convention)
    return found["frame"]


# ---------------------------------------------------------------------------------------------
# the trace with its classification, and the cluster's own baseline


def annotate(
    source: Source,
    output: PathLike,
    *,
    merge: bool = False,
    step_range: str | None = DEFAULT_STEP,
    comm_kernels: list[str] | None = None,
    cache: bool | PathLike = False,
    workers: int | None = None,
) -> list[Path]:
    """Write the trace with tracks per rank showing the buckets, for Perfetto UI.

    The same files as ``traceanalyzer annotate``: Kineto input keeps its own events and gains
    the classification tracks; Nsight Systems input (and ``merge``) is rebuilt from the parsed
    events, one process per rank.

    Parameters:
        source: as in :func:`analyze` (an analysis is given its events with the options it was
            made with).
        output: a name ending in ``.json`` or ``.json.gz`` (one rank file, or ``merge``), else a
            directory to write each rank's trace into. Never an input.
        merge: every rank in one trace.
        step_range: as in :func:`analyze` (ignored for an analysis).
        comm_kernels: as in :func:`analyze`.
        cache: as in :func:`analyze`.
        workers: as in :func:`analyze`.

    Returns:
        The files written.

    Raises:
        OutputError: ``output`` cannot be written, is an input, or names one file for several.

    Example:
        >>> import tempfile, pathlib
        >>> import traceanalyzer as ta
        >>> out = pathlib.Path(tempfile.mkdtemp()) / "annotated.json.gz"
        >>> [f.name for f in ta.annotate("fixtures/kineto/mi300x_resnet_act_checkpoint_rank0.json.gz", out)]
        ['annotated.json.gz']
    """
    from traceanalyzer.outputs import Outputs
    from traceanalyzer.parsers import discover
    from traceanalyzer.report.annotate import annotate as write_annotated, check_output

    a = _events_analysis(source, step_range, comm_kernels, cache, workers)
    out = Path(_path(output, "output"))
    outputs = Outputs([Path(s) for s in a.trace.sources])
    check_output(outputs, out, sum(len(discover(Path(s))) for s in a.trace.sources) or a.trace.meta.height, merge)
    return write_annotated(a, out, outputs, merge)


def baseline(
    files: PathLike | Iterable[PathLike] | None = None,
    *,
    topo: PathLike | None = None,
    source: Source | None = None,
    config: PathLike | Any | None = None,
    gpu: str | None = None,
    nvlink_gbps: float | None = None,
    net_gbps: float | None = None,
    collective: str | None = None,
    nranks: int | None = None,
    scope: Literal["intra", "inter"] | None = None,
    step_range: str | None = DEFAULT_STEP,
) -> dict[str, pl.DataFrame]:
    """The cluster's own baseline (nccl-tests, ``nvidia-smi topo -m``) and the trace's collectives against it.

    The tables of ``traceanalyzer baseline``.

    Parameters:
        files: nccl-tests output file(s) (any ``*_perf`` binary; a log may hold several tests).
        topo: ``nvidia-smi topo -m`` output.
        source: a trace (as in :func:`analyze`): each collective's achieved bus bandwidth against
            the baseline (or the hardware table without ``files``).
        config: a run configuration: with ``topo``, its TP groups against the links.
        gpu: the GPU for the link figures when the files do not name it (``"H100 SXM"``).
        nvlink_gbps: the NVLink line rate, GB/s per direction, instead of the table's.
        net_gbps: the NIC bandwidth per GPU, GB/s per direction, instead of the table's.
        collective: the collective of files that do not say.
        nranks: the rank count of files that do not list their ranks.
        scope: ``intra`` or ``inter`` (node), for files that do not list their hosts.
        step_range: as in :func:`analyze` (ignored for an analysis).

    Returns:
        A ``dict`` of frames, those that apply: ``nccl_tests`` (every measured size against the
        link), ``health`` (per test), ``gpus`` and ``links`` (topology), ``tp_groups``,
        ``collectives`` (each instance's achieved bus bandwidth), ``collective_summary`` and
        ``exposed_split`` (the exposed communication: bandwidth below the baseline vs waiting).

    Raises:
        InvalidArgument: none of ``files``, ``topo`` and ``source``, or ``config`` without ``topo``.
        InvalidTrace: a file is not nccl-tests or ``topo`` output.

    Example:
        >>> import traceanalyzer as ta
        >>> b = ta.baseline("fixtures/baselines/all_reduce_perf_h100_2node.txt")
        >>> sorted(b)
        ['health', 'nccl_tests']
    """
    if files is None and topo is None and source is None:
        raise InvalidArgument("give nccl-tests output files, topo and/or a trace (source)")
    if config is not None and topo is None:
        raise InvalidArgument("config flags TP groups against a topology: give topo too")
    if scope is not None:
        _choice("scope", scope, ("intra", "inter"))
    paths = None if files is None else ([files] if isinstance(files, (str, os.PathLike)) else _paths(files, "files"))
    out, base, _topology = _baseline_tables(paths, topo, config, gpu, nvlink_gbps, net_gbps, collective, nranks, scope)
    if source is not None:
        per, summary, split = collective_busbw(analyze(source, step_range), base, gpu)
        out["collectives"], out["collective_summary"], out["exposed_split"] = per, summary, split
    return out


def _baseline_tables(paths: list | None, topo: PathLike | None, config: PathLike | Any | None, gpu: str | None,
                     nvlink_gbps: float | None, net_gbps: float | None, collective: str | None, nranks: int | None,
                     scope: str | None) -> tuple[dict[str, pl.DataFrame], pl.DataFrame | None, Any]:
    """(the tables of :func:`baseline` from nccl-tests files and a topology, the nccl-tests
    frame, the topology); ``config`` without ``topo``: ConfigError, once the files are read."""
    out: dict[str, pl.DataFrame] = {}
    base = None
    if paths:
        from traceanalyzer.baselines import health_summary, link_health, read_nccl_tests

        base = pl.concat([read_nccl_tests(Path(_path(f, "files")), collective=collective, nranks=nranks, scope=scope) for f in paths])
        out["nccl_tests"] = link_health(base, gpu, nvlink_gbps, net_gbps)
        out["health"] = health_summary(base, gpu, nvlink_gbps, net_gbps)
    t = None
    if topo is not None:
        from traceanalyzer.baselines import read_topology, tp_group_links

        t = read_topology(Path(_path(topo, "topo")))
        out["gpus"], out["links"] = t.devices, t.links
        if config is not None:
            out["tp_groups"] = tp_group_links(t, _config(config).parallel.tp)
    elif config is not None:
        from traceanalyzer.errors import ConfigError

        raise ConfigError("--config flags TP groups against a topology: give --topo FILE too")
    return out, base, t


# ---------------------------------------------------------------------------------------------
# the store of nightly runs


def batch(
    roots: PathLike | Iterable[PathLike],
    store: PathLike,
    *,
    force: bool = False,
    engine: Literal["local", "ray"] = "local",
    workers: int | None = None,
    address: str | None = None,
    config: PathLike | None = None,
    step_range: str = DEFAULT_STEP,
    cache: bool | PathLike = True,
) -> dict[str, Any]:
    """Analyse every run under ``roots`` not yet stored into a Parquet store (``traceanalyzer batch``).

    A run is a directory of rank traces (or one trace file); one already stored on the very same
    inputs is skipped; each run is stored as one transaction, under the store's write lock.

    Parameters:
        roots: directories (searched recursively) or trace files.
        store: the store directory (a Parquet dataset, created if missing).
        force: analyse runs already stored again, replacing their rows.
        engine: ``local`` (processes) or ``ray``.
        workers: rank files analysed in parallel, over all runs.
        address: the Ray cluster (with ``engine="ray"``).
        config: a run configuration for MFU, for runs whose manifest names none.
        step_range: as in :func:`analyze`.
        cache: the parse cache (True: its default directory; a directory; False: none).

    Returns:
        The summary (``traceanalyzer batch -f json``'s document without its time stamp):
        ``runs``, ``analysed``, ``reanalysed``, ``skipped``, ``failed`` (run, error, exit code),
        ``cache_hits``, ``warnings`` per run and ``ok``.

    Raises:
        InputNotFound: ``config`` does not exist.
        InvalidArgument: a bad ``engine`` or ``workers``.

    Example:
        >>> import tempfile
        >>> import traceanalyzer as ta
        >>> s = ta.batch("fixtures/kineto/dlrm-v100-8rank", tempfile.mkdtemp(), cache=False)
        >>> s["analysed"], s["ok"]
        (['dlrm-v100-8rank'], True)
    """
    from traceanalyzer.batch import run_batch
    from traceanalyzer.engine import check_workers

    _choice("engine", engine, ("local", "ray"))
    check_workers(workers)
    if config is not None and not Path(config).is_file():
        from traceanalyzer.errors import InputNotFound

        raise InputNotFound("configuration file not found", config)
    items = [roots] if isinstance(roots, (str, os.PathLike)) else _paths(roots, "roots")
    summary = run_batch([Path(_path(r, "roots")) for r in items], Path(_path(store, "store")), force=force, engine=engine, workers=workers,
                        address=address, config=config, step_range=step_range, cache=cache)
    return batch_summary(summary, force)


def trend(
    store: PathLike,
    *,
    metric: str = "step_time",
    since: str | None = None,
    job: str | None = None,
) -> pl.DataFrame:
    """One metric of the stored runs over time, per job (``traceanalyzer trend``).

    Parameters:
        store: the store directory (``traceanalyzer batch``).
        metric: ``step_time`` (default), ``mfu``, or a bucket's share (``exposed_comm_pct``...;
            ``traceanalyzer trend --help`` lists them).
        since: only runs on or after this date (``YYYY-MM-DD``).
        job: only this job.

    Returns:
        One row per run: ``date``, ``job``, ``run_id``, ``value`` and ``change`` (relative to the
        job's previous run).

    Raises:
        InvalidArgument: an unknown ``metric``.
        InputNotFound: no store there.

    Example:
        >>> import tempfile
        >>> import traceanalyzer as ta
        >>> store = tempfile.mkdtemp()
        >>> _ = ta.batch("fixtures/kineto/dlrm-v100-8rank", store, cache=False)
        >>> ta.trend(store).select("job", "run_id").rows()
        [('dlrm-v100-8rank', 'dlrm-v100-8rank')]
    """
    from traceanalyzer.batch.store import Store
    from traceanalyzer.batch.trend import METRICS, trend_frame

    _choice("metric", metric, tuple(METRICS))
    return trend_frame(Store(Path(_path(store, "store"))), metric, since, job)


def gate(
    store: PathLike,
    *,
    baseline: str = "last-good",
    max_regression: float | str = 0.03,
    job: str | None = None,
) -> pl.DataFrame:
    """Whether the latest run of each job regressed against a baseline on mean step time (``traceanalyzer gate``).

    Parameters:
        store: the store directory (``traceanalyzer batch``).
        baseline: ``last-good`` (the latest earlier run that passed) or a run id.
        max_regression: the largest slowdown allowed: a fraction (0.03) or ``"3%"``.
        job: only this job.

    Returns:
        One row per job: ``job``, ``passed``, ``latest``, ``baseline``, ``change`` (relative
        change of the mean step time; 0.05 = 5 % slower) and ``message`` (the explanation the
        command prints).

    Raises:
        InvalidArgument: a bad ``max_regression``.
        InputNotFound: no store there.

    Example:
        >>> import tempfile
        >>> import traceanalyzer as ta
        >>> store = tempfile.mkdtemp()
        >>> _ = ta.batch("fixtures/kineto/dlrm-v100-8rank", store, cache=False)
        >>> ta.gate(store)["passed"].to_list()
        [True]
    """
    from traceanalyzer.batch.gate import gate_check, parse_threshold
    from traceanalyzer.batch.store import Store

    if isinstance(max_regression, str):
        threshold = parse_threshold(max_regression)
    elif isinstance(max_regression, (int, float)) and not isinstance(max_regression, bool) and 0 <= max_regression < float("inf"):
        threshold = float(max_regression)
    else:
        raise InvalidArgument(f"max_regression must be a non-negative fraction or a percentage, got {max_regression!r}")
    results = gate_check(Store(Path(_path(store, "store"))), baseline, threshold, job)
    return pl.DataFrame(
        [(r.job, r.passed, r.latest, r.baseline, r.change, r.message) for r in results],
        schema={"job": pl.String, "passed": pl.Boolean, "latest": pl.String, "baseline": pl.String, "change": pl.Float64,
                "message": pl.String},
        orient="row",
    )


# ---------------------------------------------------------------------------------------------
# what the command line shares with the verbs above (the command only formats what these give)


def public(d: dict[str, Any]) -> dict[str, Any]:
    """A document without its exact fractions (kept for tests and the sum checks)."""
    return {k: v for k, v in d.items() if k != "exact"}


def _events_analysis(source: Source, step_range: str | None, comm_kernels: list[str] | None, cache: bool | PathLike,
                     workers: int | None) -> Analysis:
    """An analysis holding its events and GPU work: an analysis given them (its own options),
    else ``source`` analysed with these."""
    from traceanalyzer.classify import Analysis

    if isinstance(source, Analysis):
        return _with(source, "events", "gpu")
    return _with_optional(source, ("events", "gpu"), step_range,
                          {"comm_kernels": comm_kernels, "cache": cache, "workers": workers})


def waterfall_of(analysis: Analysis, config: Any, *, convention: str | None = None, hfu: str = "forward",
                 baseline: pl.DataFrame | None = None) -> dict[str, Any]:
    """The waterfall of an analysis (holding its events) against a run configuration, with the
    overlapped communication attached (what ``reconcile`` and ``compare --config`` show)."""
    from traceanalyzer.reconciliation import attach_overlapped, waterfall

    step_name = analysis.options.step_name if analysis.options is not None else DEFAULT_STEP
    wf = waterfall(analysis, config, convention=convention, step_name=step_name, hfu=hfu, baseline=baseline)
    attach_overlapped(wf, analysis)
    return wf


def _reconcile(source, config, megatron_args, convention, hfu, baseline, step_range, comm_kernels, cache, workers):
    from traceanalyzer.model import load_config
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.flops import HFU_CONVENTIONS

    if convention is not None:
        _choice("convention", convention, tuple(CONVENTIONS))
    _choice("hfu", hfu, tuple(HFU_CONVENTIONS))
    cfg = _config(config) if megatron_args is None and config is not None else load_config(config, megatron_args)
    patterns = list(comm_kernels or [])
    patterns += [p for p in cfg.trace.comm_kernels if p not in patterns]
    a = _events_analysis(source, step_range, patterns, cache, workers)
    wf = waterfall_of(a, cfg, convention=convention, hfu=hfu, baseline=_baseline(baseline))
    return wf, [*a.warnings, *wf["warnings"]]


def time_comparison(a: Analysis, b: Analysis) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the step-time gap split by bucket, the kernel diff) of two analyses holding their
    per-kernel rows; the kernel diff must sum exactly to the bucket differences
    (InvariantViolation naming both runs otherwise)."""
    from traceanalyzer.errors import InvariantViolation
    from traceanalyzer.reconciliation import compare_time
    from traceanalyzer.reconciliation.kerneldiff import bucket_gaps, kernel_diff

    cmp_t = compare_time(a, b)
    diff = kernel_diff(a, b)
    gaps = bucket_gaps(cmp_t)
    if any(diff["exact"][f"{k}_ns"] != gaps[k] for k in gaps):
        names = [", ".join(map(str, x.trace.sources[:3])) or "trace" for x in (a, b)]
        raise InvariantViolation(f"the kernel diff does not sum to the bucket differences of {names[0]} and {names[1]}")
    return cmp_t, diff


def kernel_diff(a: Source, b: Source) -> pl.DataFrame:
    """Which kernels made B slower (or faster) than A: the step-time gap per kernel.

    Each kernel's contribution is the change of its exact share of its bucket per rank-step, so
    the contributions of the kernels of a bucket sum exactly to that bucket's difference in
    :func:`compare` (checked).

    Parameters:
        a: the reference (as in :func:`analyze`; an analysis is given its per-kernel rows with
            the options it was made with).
        b: the run compared with it.

    Returns:
        One row per kernel name and class, largest change first: ``name``, ``bucket`` (its
        class: compute, recompute, comm, other), ``status`` (``changed``, ``new``, ``gone``),
        ``calls_a``, ``calls_b`` (per rank-step), ``total_ms_a``, ``total_ms_b`` (its time),
        ``bucket_ms_a``, ``bucket_ms_b`` (its exact share of its bucket) and
        ``contribution_ms`` (``bucket_ms_b − bucket_ms_a``; Float64 milliseconds per rank-step).

    Raises:
        InvariantViolation: the contributions do not sum to the bucket differences (a bug).

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> an = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> d = ta.kernel_diff(ta.select(an, ranks=[7]), ta.select(an, ranks=[1]))
        >>> d.select("bucket", "calls_b", pl.col("bucket_ms_a", "bucket_ms_b", "contribution_ms").round(3)).row(0)
        ('comm', 5.0, 0.335, 9.389, 9.054)
        >>> round(d.filter(bucket="comm")["contribution_ms"].sum(), 3)  # = compare's exposed_comm_dp
        9.476
    """
    _cmp, diff = time_comparison(analysis_with_tables(a), analysis_with_tables(b))
    return pl.DataFrame(diff["rows"])


def collective_busbw(analysis: Analysis, baseline: pl.DataFrame | None = None, gpu: str | None = None
                     ) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(per instance, summary, exposed split): each collective's achieved bus bandwidth against
    ``baseline`` (an nccl-tests frame; None: the hardware table), for the device ``gpu``
    (default: the trace's)."""
    from traceanalyzer.reconciliation.busbw import achieved_busbw, busbw_summary, exposed_split

    dev = gpu or next(iter(analysis.trace.meta["device_name"].drop_nulls().to_list()), None)
    per = achieved_busbw(analysis.collectives, baseline=baseline, gpu=dev)
    return per, busbw_summary(per), exposed_split(per, analysis.comm)


def batch_summary(summary: Any, force: bool) -> dict[str, Any]:
    """A batch's summary as a document (without the store and the time stamp)."""
    return {
        "force": force,
        "runs": len(summary.analysed) + len(summary.skipped) + len(summary.failed),
        "analysed": list(summary.analysed),
        "reanalysed": list(summary.reanalysed),
        "skipped": list(summary.skipped),
        "failed": [{k: f[k] for k in ("run_id", "error", "exit_code", "error_class")} for f in summary.failed],
        "cache_hits": summary.cache_hits,
        "warnings": {k: list(v) for k, v in summary.warnings.items()},
        "ok": not summary.failed,
    }


def write_report(model: dict[str, Any], output: Path | None, fmt: str, outputs: Any, *, embed: bool = True) -> None:
    """Write a report model as ``fmt`` (``json``: to ``output``, or standard output without it;
    ``html``; ``markdown``: plots as data URIs with ``embed``, else PNG files beside it), every
    file through ``outputs`` (none over an input, each whole or not at all)."""
    if fmt == "json":
        from traceanalyzer.render import json as json_render

        with outputs.stream(output) as fh:
            fh.write(json_render.dumps(model))
        return
    assert output is not None
    if fmt == "html":  # plots as inline SVG: no matplotlib
        from traceanalyzer.render import html

        outputs.write_text(output, html.render(model))
        return
    from traceanalyzer.render import markdown, plots

    images = plots.render_all(model)

    if embed:
        refs = {stem: markdown.data_uri(png) for stem, png in images.items()}
    else:
        stem = output.name[: -len(".md")] if output.name.endswith(".md") else output.name
        refs = {plot: f"{stem}_{plot}.png" for plot in images}
        for name in refs.values():  # all checked before any is written
            outputs.check(output.parent / name)
        for plot, png in images.items():
            outputs.write_bytes(output.parent / refs[plot], png)
    outputs.write_text(output, markdown.render(model, refs))


#: microbatches per pipeline shown when the global batch is unknown: the spread of the verdict
SPREAD_MICROBATCHES = (1, 2, 4, 8, 16, 32)


def predict_parts(config, megatron_args, vs, global_batch, convention, hfu, kernel_efficiency, baseline, *, all_rows: bool = False):
    """(the predict document, its sections, its warnings); ``all_rows``: the sections keep the
    terms that are exactly zero."""
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.model import compare_predictions, load_config, predict as predict_run
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.flops import HFU_CONVENTIONS
    from traceanalyzer.model.memory import estimate_memory
    from traceanalyzer.render.memory import estimate_sections
    from traceanalyzer.render.predictions import comparison_sections, prediction_sections, sweep_section

    if convention is not None:
        _choice("convention", convention, tuple(CONVENTIONS))
    _choice("hfu", hfu, tuple(HFU_CONVENTIONS))
    if kernel_efficiency is not None and not (isinstance(kernel_efficiency, (int, float)) and 0 < kernel_efficiency <= 1):
        raise InvalidArgument(f"kernel_efficiency must be a fraction in (0, 1], got {kernel_efficiency!r}")
    gbs = _ints(global_batch)
    if gbs is not None and any(g < 1 for g in gbs):
        raise InvalidArgument(f"global_batch must be positive, got {global_batch!r}")
    cfg = _config(config) if megatron_args is None and config is not None else load_config(config, megatron_args)
    base = _baseline(baseline)
    warnings: list[str] = []
    ref_pred = None
    if vs is not None:
        ref_pred = predict_run(_config(vs), convention=convention, hfu=hfu)
        convention = ref_pred["convention"]
        if kernel_efficiency is None:
            kernel_efficiency = ref_pred["kernel_efficiency"]
    batches: list[int | None] = list(gbs or [None])
    spread = False
    if not gbs and cfg.batch.global_batch is None and cfg.dp is not None:
        # the verdict depends on an unknown: show its spread instead of one number
        unit = cfg.dp * cfg.batch.micro_batch
        batches = [unit * m for m in SPREAD_MICROBATCHES]
        spread = True
        warnings.append(f"the global batch is unknown: the prediction is shown for {len(batches)} global batches "
                        f"({batches[0]}–{batches[-1]}); give [batch] global_batch or --global-batch for one answer")
    preds = [predict_run(cfg, convention=convention, kernel_efficiency=kernel_efficiency, global_batch=g, hfu=hfu,
                         baseline=base)
             for g in batches]
    sections = prediction_sections(preds[0], all_rows)
    doc: dict[str, Any] = {"schema": "traceanalyzer.predict", "schema_version": 1, "prediction": preds[0]}
    if len(preds) > 1:
        title = (f"Global batch unknown: the spread [{preds[0]['convention']}]" if spread else None)
        sections.append(sweep_section(preds, title))
        doc["sweep"] = preds
        doc["global_batch_known"] = not spread
    if ref_pred is not None:
        sections += prediction_sections(ref_pred, all_rows)
        cmps = [compare_predictions(p, ref_pred) for p in preds]
        for c in cmps:
            sections += comparison_sections(c)
        doc["vs"] = ref_pred
        doc["comparison"] = cmps[0] if len(cmps) == 1 else cmps
    try:  # memory per GPU by component; None (with a warning) when the configuration cannot say
        est = estimate_memory(cfg)
    except ConfigError as exc:
        warnings.append(f"memory per GPU not estimated: {exc.message}")
        doc["memory"] = None
    else:
        doc["memory"] = est.as_dict()
        sections += estimate_sections(est, doc["memory"])
    warnings += [w for p in preds + ([ref_pred] if ref_pred else []) for w in p["warnings"]]
    warnings = list(dict.fromkeys(warnings))
    doc["warnings"] = warnings
    return doc, sections, warnings


def search_parts(config, megatron_args, sets, source, top, capacity_gb, reserve_gb, baseline, convention, *,
            anchor: Any = None, warnings: list[str] | None = None) -> dict[str, Any]:
    """Every layout ranked (``whatif --search``): ``frame`` (all layouts), ``document`` (the
    JSON document, without its warnings), ``title`` and ``notes`` (for the table), ``warnings``."""
    from traceanalyzer.model import load_config
    from traceanalyzer.model.config import CONVENTIONS
    from traceanalyzer.model.search import KNOBS, search_layouts as rank_layouts
    from traceanalyzer.model.whatif import _parse_one, anchor_from_config, apply_sets
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis

    if convention is not None:
        _choice("convention", convention, tuple(CONVENTIONS))
    if not isinstance(top, int) or isinstance(top, bool) or top < 0:
        raise InvalidArgument(f"top must be a count of layouts (0: all), got {top!r}")
    for arg, v in (("capacity_gb", capacity_gb), ("reserve_gb", reserve_gb)):
        if v is not None and not (isinstance(v, (int, float)) and 0 <= v < float("inf") and (v > 0 or arg == "reserve_gb")):
            raise InvalidArgument(f"{arg} must be a finite {'positive' if arg == 'capacity_gb' else 'non-negative'} number of GiB, got {v!r}")
    cfg = _config(config) if megatron_args is None else load_config(config, megatron_args)
    if isinstance(sets, str):
        raise InvalidArgument("sets is a list of KEY=VALUE changes (or a dict), not one string")
    new = apply_sets(cfg, sets or [])
    base = _baseline(baseline)
    warnings = list(warnings or [])
    if anchor is None and source is not None:
        anchor = anchor_from_analysis(analyze(source), cfg, convention=convention, baseline=base)
    elif anchor is None:
        anchor = anchor_from_config(cfg, convention=convention, baseline=base)
    keys = {_parse_one(s)[0] for s in sets or []} if not isinstance(sets, dict) else set(sets)
    fixed = {k: _knob_value(new, k) for k in keys if k in KNOBS or k == "dp"}
    df = rank_layouts(anchor, base=new, fixed=fixed, capacity_gib=capacity_gb, reserve_gib=reserve_gb, top=top)
    shown = df if top == 0 else df.head(top)
    notes = [f"anchor: {anchor.description}", f"FLOPs convention: {anchor.convention}"]
    if df["fits"].null_count() == df.height and df.height:
        warnings.append("the memory model cannot size this configuration: no layout was dropped for memory")
    if fixed:
        notes.append("pinned: " + ", ".join(f"{k}={v}" for k, v in fixed.items()))
    bound = anchor.source == "analytic"  # no trace, no [reported] throughput: the peak bounds the layouts
    title = (f"Layouts of {new.num_gpus} GPUs at global batch {new.batch.global_batch}, ranked by "
             + ("an upper bound of TFLOP/s/GPU" if bound else "predicted TFLOP/s/GPU")
             + (" (those that fit in memory)" if df["fits"].null_count() < df.height else ""))
    sized = df.height - df["fits"].null_count()
    doc = {"schema": "traceanalyzer.whatif_search", "schema_version": 1, "anchor": anchor.description, "anchor_source": anchor.source,
           "convention": anchor.convention, "valid_layouts": df.height, "sized_layouts": sized,
           "fitting_layouts": int(df["fits"].sum() or 0), "not_fitting_layouts": sized - int(df["fits"].sum() or 0),
           "pinned": fixed, "layouts": shown.to_dicts()}
    return {"frame": df, "document": doc, "title": title, "notes": notes, "warnings": warnings, "anchor": anchor, "bound": bound}


def _knob_value(cfg: Any, key: str) -> Any:
    p = cfg.parallel
    return {
        "tp": p.tp, "pp": p.pp, "vp": p.vp, "cp": p.cp, "ep": p.ep, "dp": cfg.dp, "micro_batch": cfg.batch.micro_batch,
        "recompute": cfg.recompute.granularity, "sequence_parallel": p.sequence_parallel,
        "distributed_optimizer": p.distributed_optimizer,
    }[key]


# ---------------------------------------------------------------------------------------------
# helpers


def _analysis(source: Source, step_range: str | None = DEFAULT_STEP) -> Analysis:
    return analyze(source, step_range)


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def _path(p: object, arg: str = "source") -> str | os.PathLike[str]:
    if isinstance(p, (str, os.PathLike)):
        return p
    what = "a Trace or an Analysis" if arg == "source" else "a file name"
    raise InvalidArgument(f"{arg}: expected a path, {what}, got {type(p).__name__}")


def _paths(ps: object, arg: str = "source") -> list:
    try:
        items = list(ps)  # type: ignore[call-overload]
    except TypeError:
        what = "a Trace or an Analysis" if arg == "source" else "file names"
        raise InvalidArgument(f"{arg}: expected a path, a list of paths, {what}, got {type(ps).__name__}") from None
    if not items:
        raise InvalidArgument(f"{arg}: no trace files given" if arg in ("source", "path") else f"{arg}: no files given")
    return items


def _cache_arg(cache: bool | PathLike) -> bool | Path:
    if isinstance(cache, bool):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return Path(cache)
    raise InvalidArgument(f"cache must be True, False or a directory, got {cache!r}")


def _check_patterns(recompute_range: str | None, comm_kernels: Iterable[str] | None) -> None:
    """InvalidArgument naming the argument for a bad ``recompute_range`` or ``comm_kernels``."""
    _regex("recompute_range", recompute_range)
    if isinstance(comm_kernels, str):
        raise InvalidArgument("comm_kernels is a list of patterns, not one string")
    for p in comm_kernels or ():
        _regex("comm_kernels", p, polars=True)

# ---------------------------------------------------------------------------------------------
# shared by the verbs


def _renamed(name: str, value: Any, older: str, older_value: Any, default: Any = "step") -> Any:
    """The argument ``name`` (whose default is ``default``), or its older name ``older`` where
    that was given; both, with different values, is refused."""
    if older_value is None:
        return value
    if value != default and value != older_value:
        raise InvalidArgument(f"{name}={value!r} and {older}={older_value!r}: {older} is the older name of {name}; give one")
    return older_value


def _step_alias(step_range: str | None, kw: dict) -> str | None:
    """``step_range``, or ``step_name`` (its older name) popped from ``kw``."""
    if "step_name" in kw:
        return kw.pop("step_name")
    return step_range


_RUN_KW = ("cache", "workers", "engine", "address", "quiet", "console")
_OPT_KW = {"recompute_range": "recompute_pattern", "recompute_pattern": "recompute_pattern", "comm_kernels": "comm_kernels",
           "bus_bw_gbps": "bus_bw_gbps"}


def _with_optional(source: Source, tables: tuple[str, ...], step_range: str | None, options: dict) -> Analysis:
    """An analysis of ``source`` holding the optional ``tables``: an analysis is given them with
    the options it was made with (never these); a trace or files are classified with these."""
    from traceanalyzer.classify import Analysis
    from traceanalyzer.engine import Options, analyse, analyse_trace, check_workers
    from traceanalyzer.schema import Trace

    run = {k: options.pop(k) for k in _RUN_KW if k in options}
    unknown = [k for k in options if k not in _OPT_KW]
    if unknown:
        raise InvalidArgument(f"unexpected argument {unknown[0]!r}")
    if isinstance(source, Analysis):
        return _with(source, *tables)
    opts = {_OPT_KW[k]: v for k, v in options.items() if v is not None}
    _check_patterns(opts.get("recompute_pattern"), opts.get("comm_kernels"))
    if "comm_kernels" in opts:
        opts["comm_kernels"] = tuple(opts["comm_kernels"])
    o = Options(step_name=step_range, tables=frozenset(tables), **opts)
    if isinstance(source, Trace):
        return analyse_trace(source, o)
    paths = [Path(_path(source))] if isinstance(source, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(source)]
    check_workers(run.get("workers"))
    cache = _cache_arg(run.pop("cache", False))
    if isinstance(cache, Path):  # a cache directory of its own: loaded in this process
        return analyse_trace(load(paths, cache=cache), o)
    o.cache = cache
    run.setdefault("quiet", True)
    return analyse(paths, o, **run)


def _with(analysis: Analysis, *tables: str) -> Analysis:
    from traceanalyzer.engine import with_tables

    return with_tables(analysis, *tables)


def _check_table_args(name: str | None, sort: str, precision: str | None, top: int | None) -> None:
    from traceanalyzer.classify.kernelstats import SORT_KEYS
    from traceanalyzer.classify.roofline import ELEMENT_BYTES

    _regex("name", name)
    _choice("sort", sort, tuple(SORT_KEYS))
    if precision is not None:
        _choice("precision", precision, tuple(ELEMENT_BYTES))
    if top is not None and (not isinstance(top, int) or isinstance(top, bool) or top < 1):
        raise InvalidArgument(f"top must be a positive integer, got {top!r}")


def _regex(arg: str, pattern: str | None, *, polars: bool = False) -> None:
    """InvalidArgument naming ``arg`` unless ``pattern`` is None or a regex (Python's ``re``, or
    with ``polars`` the dialect polars matches with: no look-around, no back-references)."""
    if pattern is None:
        return
    if not isinstance(pattern, str):
        raise InvalidArgument(f"{arg} must be a regular expression (a string), got {type(pattern).__name__}")
    try:
        if polars:
            pl.Series([""]).str.contains(pattern)
        else:
            import re

            re.compile(pattern)
    except Exception as exc:  # noqa: BLE001 - re.error, or polars' ComputeError
        why = [ln[len("error: "):] for ln in str(exc).splitlines() if ln.startswith("error: ")]
        raise InvalidArgument(f"{arg}={pattern!r} is not a valid regular expression ({why[0] if why else exc})") from None


def _ints(value: int | Iterable[int] | None) -> list[int] | None:
    if value is None:
        return None
    return [int(value)] if isinstance(value, int) else [int(v) for v in value]


def _device(analysis: Analysis, ranks: list[int] | None) -> str | None:
    meta = analysis.trace.meta
    if ranks:
        meta = meta.filter(pl.col("rank").is_in(ranks))
    names = meta.get_column("device_name").drop_nulls()
    return names[0] if names.len() else None


def _config(config: PathLike | Any) -> Any:
    """A run configuration: a :class:`~traceanalyzer.model.RunConfig` as it is, a path loaded."""
    from traceanalyzer.model import RunConfig, load_config

    if isinstance(config, RunConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return load_config(Path(config))
    raise InvalidArgument(f"config must be a run configuration file (a path) or a RunConfig, got {type(config).__name__}")


def _baseline(baseline: PathLike | Iterable[PathLike] | pl.DataFrame | None) -> pl.DataFrame | None:
    """nccl-tests output: a frame as it is, file(s) read and stacked."""
    if baseline is None or isinstance(baseline, pl.DataFrame):
        return baseline
    from traceanalyzer.baselines import read_nccl_tests

    files = [baseline] if isinstance(baseline, (str, os.PathLike)) else _paths(baseline, "baseline")
    return pl.concat([read_nccl_tests(Path(_path(f, "baseline"))) for f in files], how="diagonal_relaxed")


def _model_flops_and_peak(config: PathLike | Any, analysis: Analysis) -> tuple[float, float]:
    """(model FLOPs per GPU per step, peak TFLOP/s per GPU) of a run configuration, as
    ``reconcile`` computes them."""
    from traceanalyzer.model import step_flops
    from traceanalyzer.reconciliation.waterfall import _peak

    cfg = _config(config)
    gpus = cfg.num_gpus
    if gpus is None:
        ws = analysis.trace.meta["world_size"].drop_nulls()
        gpus = int(ws.max()) if ws.len() else None
    gpus = cfg.need(gpus, "[hardware] num_gpus", "the FLOPs per GPU (the trace does not give a world size either)")
    peak, _gpu, _where = _peak(cfg, analysis.trace, [])
    return step_flops(cfg).model / gpus, peak


from traceanalyzer.api.crossrank import comm_bytes, replay, straggler_costs, straggler_view, wait_matrix  # noqa: E402
