"""Trace files on disk -> one :class:`~traceanalyzer.schema.Trace` per job: which files a path
stands for (:func:`discover`), which parser reads each (by content: gzip/JSON Chrome traces go to
the Kineto parser, Nsight Systems exports to the nsys parser) and the job they make
(:func:`load`). Re-exported by :mod:`traceanalyzer.parsers`.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Callable, Iterable

import polars as pl

from traceanalyzer.errors import InputNotFound, InvalidTrace
from traceanalyzer.parsers import clean, kineto
from traceanalyzer.schema import Trace

TRACE_SUFFIXES = (".json", ".json.gz", ".sqlite", ".sqlite3", ".jsonl", ".nsys-rep")
#: a batch run's manifest (:mod:`traceanalyzer.store.discover`): not a file to warn about
RUN_MANIFEST = "traceanalyzer-run.toml"

ProgressFn = Callable[[Path], None]


def discover(path: Path, skipped: list[str] | None = None) -> list[Path]:
    """The trace files a path stands for: the file itself, or the trace files in a directory.

    In a directory, every entry named like a trace file (``TRACE_SUFFIXES``) is a rank file: one
    that is a dangling symbolic link, a symbolic-link loop or unreadable is an error naming it
    (exit 3), never silently left out. A file that is not a trace (a JSON document without
    ``traceEvents`` such as ``config.json`` or ``metrics.json``, a log, a checkpoint: see
    :mod:`traceanalyzer.parsers.sniff`) is skipped, with one warning line naming it appended to
    ``skipped`` when given; only a directory with no trace left is an error (exit 3).
    Sub-directories, symbolic links to directories included (a ``loop -> ..`` link), are not
    followed."""
    from traceanalyzer.parsers.sniff import not_a_trace, skip_lines

    path = Path(path)
    if not path.exists():
        raise InputNotFound(_broken_link(path) or "no such file or directory", path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputNotFound("not a regular file or directory", path)
    try:
        entries = sorted(path.iterdir())
    except PermissionError:
        raise InputNotFound("permission denied (the directory cannot be listed)", path) from None
    files, others = [], []
    for p in entries:  # directory entries, a handful: not a loop over events
        if not p.name.lower().endswith(TRACE_SUFFIXES):
            if not p.name.startswith(".") and p.name != RUN_MANIFEST and p.is_file() and not p.is_symlink():
                others.append((p, "not named like a trace (.json, .json.gz, .sqlite, .nsys-rep)"))
            continue
        problem = _broken_link(p)
        if problem:
            raise InputNotFound(problem, p)
        if not p.is_file():  # a directory (or a link to one) or a special file: not followed
            continue
        if not os.access(p, os.R_OK):
            raise InputNotFound("permission denied", p)
        why = not_a_trace(p)
        if why:
            others.append((p, why))
            continue
        files.append(p)
    if not files:
        # nsys parquet/arrow directories are one trace
        if _nsys_sniff(path):
            return [path]
        shown = ", ".join(p.name for p, _ in others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        extra = f" (skipped, not traces: {shown})" if others else ""
        raise InputNotFound(f"directory holds no trace files (*.json, *.json.gz, *.sqlite){extra}", path)
    if skipped is not None:
        skipped.extend(skip_lines(path, others))
    return files


def _broken_link(p: Path) -> str | None:
    """What is wrong with a symbolic link that leads nowhere (None for anything else)."""
    if not p.is_symlink():
        return None
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symbolic link loop (following it never reaches a file)"
        if e.errno == errno.ENOENT:
            return f"dangling symbolic link (its target {os.readlink(p)} does not exist)"
        return f"symbolic link cannot be followed ({e.strerror})"
    return None


def _nsys_sniff(path: Path) -> str | None:
    if _gzip_file(path):  # a Kineto trace as written: no nsys export is gzip (nor named .gz), no import
        return None
    try:
        from traceanalyzer.parsers.nsys import sniff_nsys
    except ImportError:
        return None
    return sniff_nsys(path)


def _gzip_file(path: Path) -> bool:
    """A file named ``*.gz`` that begins with gzip's magic bytes (what
    :func:`~traceanalyzer.parsers.nsys.sniff_nsys` answers None for, read without loading the
    Nsight Systems parser)."""
    if not str(path).lower().endswith(".gz"):
        return False
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def one_profiler(kineto_files: list[Path], nsys_files: list[Path]) -> None:
    """The rank files of one job come from one profiler: Kineto traces and Nsight Systems
    exports have different clocks and rank numbering, so a mix is refused (exit 4), naming one
    file of each, never merged into a job whose ranks disagree by hours."""
    if kineto_files and nsys_files:
        raise InvalidTrace(
            f"an Nsight Systems export mixed with a Kineto trace ({kineto_files[0]}): the ranks of one job come from one "
            "profiler; analyse them separately",
            nsys_files[0],
        )


def profiler_files(paths: Iterable[str | Path], skipped: list[str] | None = None) -> tuple[list[Path], list[Path]]:
    """(Kineto files, Nsight Systems inputs) the paths stand for, of one profiler
    (:func:`one_profiler`); ``skipped``: where the warning lines of the directories' files that
    are not traces go (see :func:`discover`)."""
    files = [f for p in paths for f in discover(Path(p), skipped)]
    if not files:
        raise InputNotFound("no trace files given")
    kineto_files: list[Path] = []
    nsys_files: list[Path] = []
    for f in files:
        (nsys_files if f.is_dir() or _nsys_sniff(f) else kineto_files).append(f)
    one_profiler(kineto_files, nsys_files)
    return kineto_files, nsys_files


def load(
    path: str | Path | Iterable[str | Path], progress: ProgressFn | None = None, cache: bool | str | Path = False
) -> Trace:
    """Load one trace file, a directory of rank files, or a list of files as one job.

    ``cache=True`` reads and writes the Parquet parse cache (:mod:`traceanalyzer.cache`) in its
    default directory, ``cache=DIR`` in ``DIR``, for Kineto files: a file whose bytes were parsed
    before is read back from Parquet instead of being decoded.
    """
    skipped: list[str] = []
    kineto_files, nsys_files = profiler_files([path] if isinstance(path, (str, Path)) else path, skipped)
    traces: list[Trace] = []
    if kineto_files:
        traces.append(_load_kineto(kineto_files, progress, cache))
    for f in nsys_files:
        from traceanalyzer.parsers.nsys import load_nsys

        if progress:
            progress(f)
        traces.append(load_nsys(f))
    trace = traces[0] if len(traces) == 1 else _merge(traces)
    if skipped:
        trace.warnings[:0] = skipped
    return trace


def _load_kineto(files: list[Path], progress: ProgressFn | None, cache: bool | str | Path = False) -> Trace:
    frames, metas, warnings = [], [], []
    for f in files:
        df, meta, warns = _parse_kineto_file(f, cache)
        frames.append(df)
        metas.append(meta)
        warnings.extend(warns)
        if progress:
            progress(f)
    _assign_ranks(files, metas, warnings)
    _share_base_time(frames, metas, warnings)
    events = pl.concat(
        [df.with_columns(pl.lit(m["rank"], dtype=pl.Int32).alias("rank")) for df, m in zip(frames, metas)],
        how="vertical",
    )
    kineto.single_process(metas)
    meta = kineto.meta_frame(metas)
    warnings.extend(clean.check_job(events, meta))
    return Trace(events=events, meta=meta, warnings=warnings, sources=list(files))


def _parse_kineto_file(f: Path, cache: bool | str | Path, progress: Callable[[int], None] | None = None) -> tuple[pl.DataFrame, dict, list[str]]:
    """Parse and clean one rank file (de-duplicate, drop stray events, cut a truncated trace back
    to its complete steps); with ``cache`` (True or a directory), through the parse cache.
    ``progress(n)``: bytes of the file read since the last call (see :func:`kineto.parse_file`)."""
    cache_dir = None if cache is True else cache
    if cache is not None and cache is not False:
        import traceanalyzer.cache as parse_cache

        hit = parse_cache.get(f, cache_dir)
        if hit is not None:
            return hit
    clean.sniff_foreign(f)
    df, meta, warns = kineto.parse_file(f, progress) if progress is not None else kineto.parse_file(f)
    df, more = clean.clean_events(df, f)
    if meta.get("truncated"):
        df, trimmed = clean.trim_truncated(df, f)
        more += trimmed
    warns = [*warns, *more, *_sane_meta(f, meta)]
    meta["n_events"] = df.height
    if cache is not None and cache is not False:
        parse_cache.put(f, df, meta, warns, cache_dir)
    return df, meta, warns


def _sane_meta(f: Path, meta: dict) -> list[str]:
    """Rank, world size and SM count outside 0 .. 2^31-1 (e.g. 2^40) are ignored, with a warning."""
    warnings = []
    for key, field in (("rank", "distributedInfo.rank"), ("world_size", "distributedInfo.world_size"), ("num_sms", "numSms")):
        if meta.get(key) is not None and not 0 <= meta[key] < 2**31:
            shown = str(meta[key]) if len(str(meta[key])) <= 20 else f"{float(meta[key]):.3g}"
            warnings.append(f"{f}: {field} {shown} is out of range: ignored")
            meta[key] = None
            meta[f"{key}_dropped"] = True
    return warnings


def _assign_ranks(files: list[Path], metas: list[dict], warnings: list[str]) -> None:
    """Rank from distributedInfo, else from the file name, else the file's position."""
    for f, m in zip(files, metas):
        if m["rank"] is None:
            m["rank"] = kineto.rank_from_name(f)
            if m["rank"] is None and len(files) > 1:
                warnings.append(f"{f}: no rank in distributedInfo or file name")
    if any(m["rank"] is None for m in metas):
        taken = {m["rank"] for m in metas if m["rank"] is not None}
        nxt = 0
        for m in metas:
            if m["rank"] is None:
                while nxt in taken:
                    nxt += 1
                m["rank"] = nxt
                taken.add(nxt)
    seen: dict[int, Path] = {}
    for f, m in zip(files, metas):
        if m["rank"] in seen:
            raise InvalidTrace(
                f"rank {m['rank']} appears twice (also in {seen[m['rank']]}): "
                "a directory must hold the rank traces of one job",
                f,
            )
        seen[m["rank"]] = f
    # files of different jobs (world size, PyTorch version, hours apart): clean.check_job


def _share_base_time(frames: list[pl.DataFrame], metas: list[dict], warnings: list[str]) -> None:
    """A truncated rank file loses its trailing ``baseTimeNanoseconds``: borrow the job's base."""
    bases = {m["base_time_ns"] for m in metas if m["base_time_ns"]}
    if len(bases) != 1:
        return
    (base,) = bases
    for i, m in enumerate(metas):
        if not m["base_time_ns"] and frames[i].height:
            first = frames[i].get_column("start_ns").min()
            if first is not None and first < base // 2:  # relative timestamps
                frames[i] = frames[i].with_columns(pl.col("start_ns") + base, pl.col("end_ns") + base)
                m["base_time_ns"] = base
                warnings.append(f"{m['file']}: no baseTimeNanoseconds (truncated?): used the job's base time")


def _merge(traces: list[Trace]) -> Trace:
    events = pl.concat([t.events for t in traces], how="vertical")
    meta = pl.concat([t.meta for t in traces], how="vertical")
    if meta.get_column("rank").is_duplicated().any():
        dup = meta.filter(pl.col("rank").is_duplicated()).sort("rank")
        files = dup.filter(pl.col("rank") == dup.item(0, "rank")).get_column("file").to_list()
        raise InvalidTrace(f"rank {dup.item(0, 'rank')} appears twice (also in {files[0]}): the inputs must be the ranks of one job", files[-1])
    return Trace(
        events=events,
        meta=meta,
        warnings=[w for t in traces for w in t.warnings],
        sources=[s for t in traces for s in t.sources],
    )


def load_cached(paths: str | Path | list[str | Path], cache_dir: str | Path | None, key: str | None = None) -> tuple["Trace", str, bool]:
    """``parsers.load(paths)`` through the cache: (trace, input key, whether every file was a hit).

    ``cache_dir=None``: the cache is neither read nor written (the key is still computed)."""
    from traceanalyzer.cache import cache_key, stats

    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files = [f for p in items for f in discover(Path(p))]
    key = key or cache_key(files, directory=cache_dir)
    hits, misses = stats["hits"], stats["misses"]
    trace = load(files if len(files) > 1 else files[0], cache=Path(cache_dir) if cache_dir is not None else False)
    hit = cache_dir is not None and stats["misses"] == misses and stats["hits"] > hits
    return trace, key, hit
