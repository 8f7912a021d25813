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
    "load", "scan", "analyze", "select", "breakdown", "rank_summary", "comm", "idle", "stragglers", "compare", "report", "plan",
]


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

    paths = [Path(_path(path))] if isinstance(path, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(path)]
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
    directory = parse_cache.resolve_dir(None if cache is True else Path(_path(cache)))
    items = [path] if isinstance(path, (str, os.PathLike)) else _paths(path)
    files = [f for p in items for f in discover(Path(_path(p)))]
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
        ConfigError: a bad ``comm_kernels`` or ``recompute_range`` pattern.
        InvariantViolation: an internal consistency check failed (please report it).

    Example:
        >>> import polars as pl
        >>> import traceanalyzer as ta
        >>> a = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> a.steps.height, a.steps["duration_ns"].sum()
        (8, 115695000)
        >>> a.steps.select(pl.sum_horizontal("compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns")).to_series().sum()
        115695000
    """
    from traceanalyzer.classify import Analysis
    from traceanalyzer.schema import Trace

    if isinstance(source, Analysis):
        return source
    _check_patterns(recompute_range, comm_kernels)
    if not (isinstance(bus_bw_gbps, (int, float)) and 0 < bus_bw_gbps < float("inf")):
        raise InvalidArgument(f"bus_bw_gbps must be a finite positive number (GB/s), got {bus_bw_gbps!r}")
    from traceanalyzer.engine import Options, analyse, analyse_trace, check_workers

    # the per-kernel and per-op rows are computed when kernels(), ops() or report() first ask
    # (classify.tables.with_tables): the analysis keeps the events and the GPU work they need
    opts = Options(step_name=step_range, recompute_pattern=recompute_range, bus_bw_gbps=float(bus_bw_gbps),
                   comm_kernels=tuple(comm_kernels or ()))
    if isinstance(source, Trace):
        return analyse_trace(source, opts)
    paths = [Path(_path(source))] if isinstance(source, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(source)]
    check_workers(workers)
    cache_arg = _cache_arg(cache)
    if isinstance(cache_arg, Path):  # a cache directory of its own: loaded in this process
        return analyse_trace(load(paths, cache=cache_arg), opts)
    opts.keep = "events"  # the API keeps the events: the trace stays explorable
    opts.cache = cache_arg
    return analyse(paths, opts, workers=workers, quiet=True)


def select(source: Source, *, ranks: Iterable[int] | None = None, steps: Iterable[int] | None = None) -> Analysis:
    """The part of an analysis on some ranks and/or steps, to compare them or look closer.

    Every per-step frame of the analysis is cut to the rows of those ranks and steps (the
    trace's events and the GPU work to those ranks); the cross-rank view (``cross_rank``) is
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
        warnings=list(a.warnings),
    )


# ---------------------------------------------------------------------------------------------
# the partition and its causes


def breakdown(source: Source, step_range: str | None = DEFAULT_STEP, *, by: Literal["step", "rank"] = "step") -> pl.DataFrame:
    """The exact partition of GPU time: per (rank, step), or per rank summed over its steps.

    Parameters:
        source: as in :func:`analyze`.
        step_range: as in :func:`analyze` (ignored when ``source`` is an analysis).
        by: ``"step"``: one row per (rank, step); ``"rank"``: one row per rank, summed over
            its steps, with the number of steps.

    Returns:
        ``by="step"``: ``rank``, ``step``, ``start_ns`` (step start on the job's time base),
        ``duration_ns``, ``compute_ns``, ``recompute_ns``, ``exposed_comm_ns``, ``other_ns``,
        ``idle_ns`` (Int64 ns; the five buckets sum exactly to ``duration_ns``),
        ``overlapped_comm_ns`` (communication hidden under compute; not part of the sum),
        ``idle_<cause>_ns`` for the causes ``host_bound``, ``sync``, ``bubble``, ``other``
        (sum = ``idle_ns``), ``exposed_comm_<dim>_ns`` for ``tp``, ``dp``, ``pp``, ``cp``,
        ``ep``, ``unknown``, ``concurrent`` (sum = ``exposed_comm_ns``), and every ``*_ns``
        column again as ``*_us`` (Float64 µs). Sorted by rank and start.
        ``by="rank"``: ``rank``, ``steps`` (UInt32) and every field above summed over the
        rank's steps, as ``*_ns`` and ``*_us``.

    Raises:
        InvalidArgument: ``by`` is not ``"step"`` or ``"rank"``.
        InputNotFound, InvalidTrace, NoGpuActivity: as in :func:`analyze`.

    Example:
        >>> import traceanalyzer as ta
        >>> df = ta.breakdown("fixtures/kineto/dlrm-v100-8rank")
        >>> df.select("rank", "duration_ns", "exposed_comm_ns").row(1)
        (1, 18467000, 11056000)
        >>> ta.breakdown("fixtures/kineto/dlrm-v100-8rank", by="rank")["steps"].to_list()
        [1, 1, 1, 1, 1, 1, 1, 1]
    """
    _choice("by", by, ("step", "rank"))
    a = _analysis(source, step_range)
    return a.steps if by == "step" else a.totals()


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
        (10967000.0, 14700500.0, 18467000.0, 1)
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
        (6419000, 5021000, 83000, 1315000)
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
        7.5
        >>> d.row(0)
        ('exposed_comm_dp', 1.58, 11.056, 9.476)
    """
    from traceanalyzer.reconcile import compare_time

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
        rank: the rank whose per-step timeline is shown (default: the slowest).
        top: rows in the top-kernel and top-collective tables.
        ranks: ``"auto"``: a summary of the ranks' distribution above 16 ranks, every rank up
            to that; ``"all"``: every rank; ``"summary"``: the summary whatever the count.

    Returns:
        The report model as a ``dict`` (the document ``traceanalyzer report -f json`` writes):
        ``headline``, ``ranks`` (one entry per rank), ``rank_summary`` (the rows of
        :func:`rank_summary` in ms, or ``None`` when every rank is listed), ``stragglers``,
        ``steps``, ``timeline``, ``top_kernels``, ``top_exposed_collectives``, ``warnings``...;
        times in ms (``*_ms``), shares in % (``*_pct``).

    Raises:
        InvalidArgument: a bad ``format``, ``ranks``, ``rank`` or ``top``.
        OutputError: ``output`` cannot be written or is one of the inputs.
        ConfigError: ``config`` is missing or invalid.

    Example:
        >>> import traceanalyzer as ta
        >>> m = ta.report("fixtures/kineto/dlrm-v100-8rank")
        >>> m["headline"]["slowest_rank"], round(m["headline"]["step_ms"], 3)
        (1, 14.462)
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
    from traceanalyzer.classify.tables import with_tables

    a = _analysis(source)
    a = with_tables(a, if_possible=True)  # the top-kernel table
    if rank is not None and rank not in a.trace.ranks:
        raise InvalidArgument(f"no rank {rank} in the trace (ranks: {a.trace.ranks[:16]})")
    model = document.build(a, rank=rank, config=Path(config) if config is not None else None, top=top, ranks=ranks)
    if output is None:
        return model
    out = Path(output)
    fmt = format or ("markdown" if out.suffix.lower() in (".md", ".markdown") else "json" if out.suffix.lower() == ".json" else "html")
    outputs = Outputs([*a.trace.sources, *([Path(config)] if config is not None else [])])
    outputs.check(out)
    if fmt == "json":
        from traceanalyzer.render import json as json_render

        outputs.write_bytes(out, json_render.dumps(model))
        return model
    from traceanalyzer.render import plots

    images = plots.render_all(model)
    if fmt == "html":
        from traceanalyzer.render import html

        outputs.write_text(out, html.render(model, images))
    else:
        from traceanalyzer.render import markdown

        outputs.write_text(out, markdown.render(model, {stem: markdown.data_uri(png) for stem, png in images.items()}))
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
# helpers


def _analysis(source: Source, step_range: str | None = DEFAULT_STEP) -> Analysis:
    return analyze(source, step_range)


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidArgument(f"{name}={value!r} is not one of {', '.join(map(repr, choices))}")


def _path(p: object) -> str | os.PathLike[str]:
    if isinstance(p, (str, os.PathLike)):
        return p
    raise InvalidArgument(f"expected a path, a Trace or an Analysis, got {type(p).__name__}")


def _paths(ps: object) -> list:
    try:
        items = list(ps)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgument(f"expected a path, a list of paths, a Trace or an Analysis, got {type(ps).__name__}") from None
    if not items:
        raise InvalidArgument("no trace files given")
    return items


def _cache_arg(cache: bool | PathLike) -> bool | Path:
    if isinstance(cache, bool):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return Path(cache)
    raise InvalidArgument(f"cache must be True, False or a directory, got {cache!r}")


def _check_patterns(recompute_range: str | None, comm_kernels: list[str] | None) -> None:
    import re

    from traceanalyzer.classify.labels import check_comm_pattern
    from traceanalyzer.errors import ConfigError

    if recompute_range is not None:
        try:
            re.compile(recompute_range)
        except re.error as exc:
            raise ConfigError(f"recompute_range is not a valid regex: {exc}") from None
    if isinstance(comm_kernels, str):
        raise InvalidArgument("comm_kernels is a list of patterns, not one string")
    for p in comm_kernels or ():
        check_comm_pattern(p)
