"""A saved analysis: an :class:`~traceanalyzer.results.Analysis` in one file, to attach to a
ticket and load again later (:meth:`Analysis.save <traceanalyzer.results.Analysis.save>`,
``traceanalyzer.load_analysis``), without the traces it was made from.

One file (suffix :data:`SUFFIX`, ``.taz``), because one file is what a user attaches, mails or
copies; a directory is not. It is a ZIP archive whose members are stored as they are (each
Parquet member is already zstd-compressed), so any ZIP tool lists and extracts it::

    mimetype                      first, stored: MIMETYPE (the magic: readable at a fixed offset,
                                  as in EPUB and OpenDocument files)
    header.json                   the header (below)
    frames/<name>.parquet         one polars frame each: trace.events, trace.meta, steps, gpu,
                                  windows, the optional frames the analysis holds, extras.<table>

The header: ``format`` (:data:`FORMAT`), ``format_version`` (:data:`FORMAT_VERSION`; a reader
refuses a newer one), ``traceanalyzer_version`` (that wrote it), ``options`` (what the analysis
was made with: step range, patterns, bus bandwidth, optional tables), ``inputs`` (each trace
file's fingerprint: ``path`` as given, ``size``, ``mtime_ns`` and ``sha256`` as the parse cache
computes it; null where the file could not be read when saving), ``sources`` and
``trace_warnings`` (the trace's), ``warnings`` (the analysis'), ``frames`` (member and row
count of each frame), ``none`` (the optional frames it does not hold), ``extras`` (the
names of its optional tables) and ``profiler_options`` (per trace file, the profiler options its
header lists; null: not known). The file's bytes depend only on the analysis (every member dated
1980-01-01).

A file that is not a saved analysis, a damaged one (cut short, a bad member, a row count that
does not match) and one of a newer format version are each an
:class:`~traceanalyzer.errors.InvalidAnalysisFile` (exit 4) naming the file.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import zipfile
from pathlib import Path
from typing import Any, Callable

import orjson
import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.errors import InputNotFound, InvalidAnalysisFile, InvalidTrace, open_input
from traceanalyzer.results import Analysis
from traceanalyzer.schema import Trace

__all__ = ["FORMAT", "FORMAT_VERSION", "MIMETYPE", "SUFFIX", "is_saved", "read", "read_header", "write"]

FORMAT = "traceanalyzer.analysis"
#: bump when a reader of this version could not read what a writer now writes
FORMAT_VERSION = 1
SUFFIX = ".taz"
MIMETYPE = b"application/vnd.traceanalyzer.analysis+zip"
_HEADER = "header.json"
_DATE = (1980, 1, 1, 0, 0, 0)
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
#: the Analysis fields written as JSON or apart, not as frames
_SPECIAL = ("trace", "warnings", "extras", "options", "profiler_options")


def is_saved(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a saved analysis: a file beginning with the archive's magic (its
    ``mimetype`` member), or a file named ``*.taz`` (which :func:`read` then checks)."""
    p = Path(path)
    if p.name.endswith(SUFFIX) and not p.is_dir():
        return True
    try:
        with open(p, "rb") as fh:
            head = fh.read(30 + 8 + len(MIMETYPE))
    except OSError:
        return False
    return _magic(head)


def _magic(head: bytes) -> bool:
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return False
    name_len = int.from_bytes(head[26:28], "little")
    extra_len = int.from_bytes(head[28:30], "little")
    start = 30 + name_len + extra_len
    return head[30:30 + name_len] == b"mimetype" and head[start:start + len(MIMETYPE)] == MIMETYPE and extra_len == 0


# ------------------------------------------------------------------------------------- writing


def _fingerprint(path: Path) -> dict[str, Any]:
    """path, size, mtime_ns, sha256 (the parse cache's digest) of an input; nulls where it cannot
    be read (moved, deleted, a directory export)."""
    from traceanalyzer.cache import file_sha256

    out: dict[str, Any] = {"path": str(path), "size": None, "mtime_ns": None, "sha256": None}
    try:
        st = path.stat()
        out["size"], out["mtime_ns"] = st.st_size, st.st_mtime_ns
        if path.is_file():
            out["sha256"] = file_sha256(path)
    except (OSError, InputNotFound):
        pass
    return out


def _options_doc(options: Any) -> Any:
    """The options as JSON: a dataclass as its fields (sets sorted), None as null."""
    if options is None:
        return None
    if not dataclasses.is_dataclass(options):
        raise TypeError(f"cannot save analysis options of type {type(options).__name__}")

    def plain(v: Any) -> Any:
        if isinstance(v, (set, frozenset)):
            return sorted(v)
        if isinstance(v, tuple):
            return list(v)
        return v

    return {f.name: plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


def _frames(analysis: Analysis) -> tuple[list[tuple[str, pl.DataFrame]], list[str]]:
    """(every frame of the analysis by its key, the optional fields it does not hold)."""
    frames = [("trace.events", analysis.trace.events), ("trace.meta", analysis.trace.meta)]
    none = []
    for f in dataclasses.fields(analysis):
        if not f.init or f.name in _SPECIAL:
            continue
        value = getattr(analysis, f.name)
        if value is None:
            none.append(f.name)
        elif isinstance(value, pl.DataFrame):
            frames.append((f.name, value))
        else:
            raise TypeError(f"cannot save Analysis.{f.name} of type {type(value).__name__}")
    for name, value in analysis.extras.items():
        if not isinstance(value, pl.DataFrame):
            raise TypeError(f"cannot save Analysis.extras[{name!r}] of type {type(value).__name__}")
        frames.append((f"extras.{name}", value))
    return frames, none


def _member(i: int, key: str) -> str:
    return f"frames/{key}.parquet" if _NAME.match(key) else f"frames/{i:03d}.parquet"


def _info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_DATE)
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o644 << 16
    return info


def write(analysis: Analysis, path: str | os.PathLike[str]) -> Path:
    """Write ``analysis`` to ``path`` (whole or not at all; never over one of its trace files).
    Returns the path written."""
    from traceanalyzer.outputs import Outputs

    trace = analysis.trace
    frames, none = _frames(analysis)
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "traceanalyzer_version": __version__,
        "options": _options_doc(analysis.options),
        "inputs": [_fingerprint(Path(s)) for s in trace.sources],
        "sources": [str(s) for s in trace.sources],
        "trace_warnings": list(trace.warnings),
        "warnings": list(analysis.warnings),
        "frames": {key: {"member": _member(i, key), "rows": df.height} for i, (key, df) in enumerate(frames)},
        "none": none,
        "extras": list(analysis.extras),
        "profiler_options": analysis.profiler_options,
    }
    out = Path(path)
    with Outputs(trace.sources).open(out, "wb") as fh:
        with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            zf.writestr(_info("mimetype"), MIMETYPE)
            zf.writestr(_info(_HEADER), orjson.dumps(header, option=orjson.OPT_INDENT_2))
            for key, df in frames:
                buf = io.BytesIO()
                df.write_parquet(buf, compression="zstd")
                zf.writestr(_info(header["frames"][key]["member"]), buf.getvalue())
    return out


# ------------------------------------------------------------------------------------- reading


def _open(path: Path) -> zipfile.ZipFile:
    if path.is_dir():
        raise InvalidAnalysisFile("not a saved analysis (a directory)", path)
    with open_input(path) as fh:
        head = fh.read(30 + 8 + len(MIMETYPE))
    if not _magic(head):
        raise InvalidAnalysisFile(f"not a saved traceanalyzer analysis (no '{MIMETYPE.decode()}' header)", path)
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InvalidAnalysisFile(f"damaged saved analysis (not a readable archive: {exc}; it may be cut short)", path) from None


def _header(zf: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    try:
        header = orjson.loads(zf.read(_HEADER))
    except KeyError:
        raise InvalidAnalysisFile(f"damaged saved analysis (no {_HEADER})", path) from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise InvalidAnalysisFile(f"damaged saved analysis ({_HEADER}: {exc})", path) from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise InvalidAnalysisFile(f"not a saved traceanalyzer analysis ({_HEADER} is not a {FORMAT} header)", path)
    version = header.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise InvalidAnalysisFile(f"damaged saved analysis (format_version {version!r})", path)
    if version > FORMAT_VERSION:
        raise InvalidAnalysisFile(
            f"a saved analysis of format version {version} (written by traceanalyzer {header.get('traceanalyzer_version')}); "
            f"traceanalyzer {__version__} reads up to version {FORMAT_VERSION}: upgrade traceanalyzer to load it", path)
    return header


def read_header(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The header of a saved analysis (see the module docstring), without reading its frames."""
    p = Path(path)
    with _open(p) as zf:
        return _header(zf, p)


def _frame(zf: zipfile.ZipFile, key: str, entry: Any, path: Path) -> pl.DataFrame:
    try:
        df = pl.read_parquet(io.BytesIO(zf.read(entry["member"])))
        rows = entry["rows"]
    except KeyError:
        raise InvalidAnalysisFile(f"damaged saved analysis (frame {key}: member missing)", path) from None
    except Exception as exc:  # noqa: BLE001 - a bad CRC, a cut member, Parquet that does not parse
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise InvalidAnalysisFile(f"damaged saved analysis (frame {key}: {first})", path) from None
    if df.height != rows:
        raise InvalidAnalysisFile(f"damaged saved analysis (frame {key}: {df.height} rows, the header says {rows})", path)
    return df


def read(path: str | os.PathLike[str], options: Callable[[dict[str, Any]], Any] | None = None) -> Analysis:
    """The analysis saved in ``path``; ``options``: makes the analysis' options from the
    header's (default: the header's dict as it is)."""
    p = Path(path)
    with _open(p) as zf:
        header = _header(zf, p)
        try:
            entries = dict(header["frames"])
            none = set(header.get("none") or ())
            values: dict[str, Any] = {}
            frames = {key: _frame(zf, key, entry, p) for key, entry in entries.items()}
            trace = Trace(events=frames.pop("trace.events"), meta=frames.pop("trace.meta"),
                          warnings=[str(w) for w in header["trace_warnings"]], sources=[Path(s) for s in header["sources"]])
            for f in dataclasses.fields(Analysis):
                if not f.init or f.name in _SPECIAL:
                    continue
                if f.name in frames:
                    values[f.name] = frames.pop(f.name)
                elif f.name not in none and f.default is dataclasses.MISSING:
                    raise InvalidAnalysisFile(f"damaged saved analysis (frame {f.name} missing)", p)
            extras = {name: frames.pop(f"extras.{name}") for name in header.get("extras") or ()}
            opts = header.get("options")
            profiled = header.get("profiler_options")  # absent: not known
            if profiled is not None:
                profiled = {str(f): [str(o) for o in v] for f, v in dict(profiled).items()}
        except InvalidTrace:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidAnalysisFile(f"damaged saved analysis ({_HEADER}: {type(exc).__name__} {exc})", p) from None
    return Analysis(trace=trace, warnings=[str(w) for w in header.get("warnings") or ()], extras=extras, profiler_options=profiled,
                    options=options(opts) if options is not None and opts is not None else opts, **values)
