"""Loading a trace and classifying it, and the one place that turns what a verb is given (a path, a
:class:`~traceanalyzer.schema.Trace` or an :class:`~traceanalyzer.classify.Analysis`) into an analysis;
and what a report reads besides the trace: its run configuration and its inputs' fingerprints.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, cast

import polars as pl

from traceanalyzer.api._arguments import checked
from traceanalyzer.api._common import PathLike, Source, _cache_arg, _check_patterns, _ints, _path, _paths
from traceanalyzer.classify.comm import DEFAULT_BUS_BW_GBPS
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import InvalidArgument

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis
    from traceanalyzer.model.config import RunConfig
    from traceanalyzer.schema import Trace


@checked
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

    saved = _saved(path)
    if saved is not None:
        return load_analysis(saved).trace
    paths = [Path(_path(path, "path"))] if isinstance(path, (str, os.PathLike)) else [Path(_path(p, "path")) for p in _paths(path, "path")]
    check_workers(workers)
    cache_arg = _cache_arg(cache)
    if workers == 1 or isinstance(cache_arg, Path):  # in this process (a cache directory of its own too)
        return parse(paths[0] if isinstance(path, (str, os.PathLike)) else paths, cache=cache_arg)
    from traceanalyzer.engine import load as load_job

    trace: Trace = load_job(paths, workers=workers, quiet=True, cache=cache_arg)[0]
    return trace


@checked
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

    import traceanalyzer.cache as parse_cache
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
    metas: list[dict[str, Any]] = []
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


def _cached_entry(f: Path, directory: Path, parse_cache: Any, orjson: Any) -> tuple[pl.LazyFrame | None, dict[str, Any]]:
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


@checked
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
    saved = _saved(source)
    if saved is not None:
        return load_analysis(saved)
    _check_patterns(recompute_range, comm_kernels)
    if not (isinstance(bus_bw_gbps, (int, float)) and 0 < bus_bw_gbps < float("inf")):
        raise InvalidArgument(f"bus_bw_gbps must be a finite positive number (GB/s), got {bus_bw_gbps!r}")
    # files analysed here keep their events and GPU work: the trace stays explorable; the other
    # optional tables are computed when a verb first asks, with the options recorded here
    explorable = not isinstance(source, Trace) and not isinstance(_cache_arg(cache), Path)
    return resolve(source, step_range, tables=("events", "gpu") if explorable else (), recompute_range=recompute_range,
                   comm_kernels=comm_kernels, bus_bw_gbps=float(bus_bw_gbps), cache=cache, workers=workers)


@checked
def select(source: Source, *, ranks: int | Iterable[int] | None = None, steps: int | Iterable[int] | None = None) -> Analysis:
    """The part of an analysis on some ranks and/or steps, to compare them or look closer.

    Every per-step frame of the analysis, its optional tables (launches, annotations...)
    included, is cut to the rows of those ranks and steps (the trace's events and the GPU work
    to those ranks); the cross-rank view (``cross_rank``) is
    computed again over what is kept. Nothing is re-classified: a step's buckets are the same
    numbers as in the whole analysis.

    Parameters:
        source: as in :func:`analyze` (a path or trace is analysed first).
        ranks: global ranks to keep: one or several (default: all).
        steps: step numbers to keep: one or several (default: all).

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
    rank_list = _ints(ranks)
    step_list = _ints(steps)

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
        gpu=cast(pl.DataFrame, cut(a.gpu)) if rank_list is not None else a.gpu,
        windows=cast(pl.DataFrame, cut(a.windows)),
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
        extras={name: cast(pl.DataFrame, cut(df)) for name, df in a.extras.items()},
        warnings=list(a.warnings),
    )


@checked
def load_analysis(path: PathLike) -> Analysis:
    """Read an analysis saved by :meth:`Analysis.save <traceanalyzer.classify.Analysis.save>`.

    A saved analysis is one file (``.taz``: a ZIP of Parquet frames and a JSON header holding the
    options it was made with and each trace file's fingerprint: path, size, mtime and SHA-256).
    The analysis read back holds the same frames, warnings and options as the one saved, so every
    verb gives the same answer from it as from the traces, which it never reads again (unless a
    verb needs a table the analysis did not keep: then, as for any analysis, from its trace files
    where they still exist). Every verb also takes the saved file's path where it takes a trace.

    Parameters:
        path: the saved file. It is recognised by its content (the archive's ``mimetype``
            member), whatever its name.

    Returns:
        An :class:`~traceanalyzer.classify.Analysis`.

    Raises:
        InputNotFound: ``path`` does not exist or cannot be read.
        InvalidAnalysisFile: ``path`` is not a saved analysis, is damaged (cut short, a member
            that does not parse), or was written in a newer format version than this
            traceanalyzer reads (exit 4, naming the file).

    Example:
        >>> import tempfile, pathlib
        >>> import traceanalyzer as ta
        >>> a = ta.analyze("fixtures/kineto/dlrm-v100-8rank")
        >>> saved = a.save(pathlib.Path(tempfile.mkdtemp()) / "dlrm.taz")
        >>> b = ta.load_analysis(saved)
        >>> b.steps.equals(a.steps), b.options == a.options
        (True, True)
        >>> ta.breakdown(saved).equals(ta.breakdown(a))
        True
    """
    from traceanalyzer.analysisfile import read

    return read(Path(_path(path, "path")), _options)


def _options(doc: dict[str, Any]) -> Any:
    """The engine's Options of a saved analysis' header (sets and tuples as the fields have them;
    a field this version lacks is left out)."""
    from traceanalyzer.engine import Options

    known = {f.name: f for f in dataclasses.fields(Options)}
    values: dict[str, Any] = {}
    for name, value in doc.items():
        f = known.get(name)
        if f is None:
            continue
        default = f.default if f.default is not dataclasses.MISSING else None
        values[name] = frozenset(value) if isinstance(default, (set, frozenset)) else tuple(value) if isinstance(default, tuple) else value
    return Options(**values)


def saved_with_tables(path: Path, *tables: str) -> Analysis:
    """The saved analysis at ``path`` holding the optional ``tables`` (computed from its events,
    or from its trace files where they still exist); InvalidAnalysisFile naming the file when it
    can have neither."""
    from traceanalyzer.engine import with_tables
    from traceanalyzer.errors import InvalidAnalysisFile

    a = load_analysis(path)
    try:
        held: Analysis = with_tables(a, *tables)
        return held
    except InvalidArgument:
        from traceanalyzer.engine import has_table

        missing = sorted(t for t in set(tables) if not has_table(a, t))
        raise InvalidAnalysisFile(f"this saved analysis holds no {', '.join(missing)} table(s), nor the events to compute them "
                                  "from, and its trace files are not here: give the trace files instead", path) from None


def _saved(source: object) -> Path | None:
    """The saved analysis ``source`` names (a path, or a list of one path), or None. A saved
    analysis among other files: InvalidArgument."""
    from traceanalyzer.analysisfile import is_saved

    if isinstance(source, (str, os.PathLike)):
        return Path(source) if is_saved(source) else None
    if isinstance(source, (list, tuple)) and source and all(isinstance(p, (str, os.PathLike)) for p in source):
        found = [Path(p) for p in source if is_saved(p)]
        if found and len(source) > 1:
            raise InvalidArgument(f"{found[0]}: a saved analysis is given alone, not with other trace files")
        return found[0] if found else None
    return None


_RUN_KW = ("cache", "workers", "engine", "address", "quiet", "console")
_OPT_KW = {"recompute_range": "recompute_pattern", "comm_kernels": "comm_kernels", "bus_bw_gbps": "bus_bw_gbps"}


def resolve(source: Source, step_range: str | None = DEFAULT_STEP, *, tables: Iterable[str] = (), **options: Any) -> Analysis:
    """What every verb does with its ``source``: an analysis holding the optional ``tables``
    (names of ``engine.TABLES``). An analysis is given them with the options it was made with
    (never these: it is not classified again); a :class:`~traceanalyzer.schema.Trace` or
    files are classified with ``step_range`` and ``options``: ``recompute_range``,
    ``comm_kernels``, ``bus_bw_gbps`` (as in :func:`analyze`) and how to run (``cache``,
    ``workers``, ``engine``, ``address``, ``quiet``, ``console``)."""
    from traceanalyzer.classify import Analysis
    from traceanalyzer.engine import Options, analyse, analyse_trace, check_workers, with_tables
    from traceanalyzer.schema import Trace

    tables = tuple(tables)
    run = {k: options.pop(k) for k in _RUN_KW if k in options}
    unknown = [k for k in options if k not in _OPT_KW]
    if unknown:
        raise InvalidArgument(f"unexpected argument {unknown[0]!r}")
    result: Analysis
    saved = _saved(source)
    if saved is not None:
        result = saved_with_tables(saved, *tables)
        return result
    if isinstance(source, Analysis):
        result = with_tables(source, *tables)
        return result
    opts = {_OPT_KW[k]: v for k, v in options.items() if v is not None}
    _check_patterns(opts.get("recompute_pattern"), opts.get("comm_kernels"))
    if "comm_kernels" in opts:
        opts["comm_kernels"] = tuple(opts["comm_kernels"])
    o = Options(step_name=step_range, tables=frozenset(tables), **opts)
    if isinstance(source, Trace):
        result = analyse_trace(source, o)
        return result
    paths = [Path(_path(source))] if isinstance(source, (str, os.PathLike)) else [Path(_path(p)) for p in _paths(source)]
    check_workers(run.get("workers"))
    cache = _cache_arg(run.pop("cache", False))
    if isinstance(cache, Path):  # a cache directory of its own: loaded in this process
        result = analyse_trace(load(paths, cache=cache), o)
        return result
    o.cache = cache
    run.setdefault("quiet", True)
    result = analyse(paths, o, **run)
    return result


# ---------------------------------------------------------------------------------------------
# what a report reads besides the trace: the run configuration and the inputs' fingerprints


def run_configuration(path: PathLike | None) -> RunConfig | None:
    """The run configuration (TOML) at ``path``, loaded for a report (the reconciler's waterfall
    and the findings' prices); None without a path. ConfigError: no such file, or not a valid
    run configuration."""
    if path is None:
        return None
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.model import load_config

    p = Path(path)
    if not p.is_file():
        raise ConfigError("no such run configuration file", p)
    return load_config(p, None)


def pricing_configuration(path: PathLike | None) -> RunConfig | None:
    """The run configuration at ``path`` when it can price the findings
    (:func:`traceanalyzer.reconciliation.findings.pricing_config`), else None: no path, a file
    that is not a valid run configuration, or one without a model."""
    if path is None:
        return None
    from traceanalyzer.errors import TraceAnalyzerError
    from traceanalyzer.model import load_config
    from traceanalyzer.reconciliation.findings import pricing_config

    try:
        cfg = load_config(path)
    except TraceAnalyzerError:
        return None
    return pricing_config(cfg)


def input_fingerprints(sources: Iterable[PathLike], config: PathLike | None = None) -> list[dict[str, Any]]:
    """What a report records of its inputs (``reproduce.inputs``): each trace source (role
    ``trace``), then the run configuration (role ``config``), each as ``path``, ``role``,
    ``size_bytes`` and ``sha256`` (a directory, an nsys Parquet/Arrow export: its files' total
    size and no digest; a path that cannot be read: None for both)."""
    inputs = [_fingerprint(Path(s), "trace") for s in sources]
    if config is not None:
        inputs.append(_fingerprint(Path(config), "config"))
    return inputs


def _fingerprint(path: Path, role: str) -> dict[str, Any]:
    info: dict[str, Any] = {"path": str(path), "role": role, "size_bytes": None, "sha256": None}
    try:
        if path.is_file():
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
            info["size_bytes"] = path.stat().st_size
            info["sha256"] = h.hexdigest()
        elif path.is_dir():
            info["size_bytes"] = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        pass
    return info
