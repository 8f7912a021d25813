"""Content-addressed cache of parsed traces: ``<cache_dir>/<key>.parquet``.

Parsing is the expensive part of an analysis; the canonical frames it produces depend only on
the bytes of the input files (and their names, which can carry the rank), so they are cached
under a key derived from those:

* :func:`file_sha256` — SHA-256 of one file's bytes (streamed);
* :func:`cache_key` — SHA-256 over the sorted ``(file name, file SHA-256)`` pairs of one load,
  plus the traceanalyzer version (a new parser never reads an old cache entry);
* :func:`load_cached` — ``parsers.load(files)`` through the cache.

One entry is one Parquet file: the canonical ``events`` frame as the table, the ``meta`` frame and
the load's warnings as JSON in the file's key-value metadata. Entries are written to a temporary
name and renamed into place, so concurrent workers never see a partial file and never need a lock.

Self-contained on purpose (nothing here knows about batch runs): any command can call
``load_cached(paths, cache_dir)`` instead of ``load(paths)``.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import orjson
import polars as pl

from traceanalyzer import __version__
from traceanalyzer.parsers import discover, load
from traceanalyzer.schema import EVENT_SCHEMA, META_SCHEMA, Trace, conform

_CHUNK = 4 * 2**20


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def cache_key(files: list[Path], hashes: list[str] | None = None) -> str:
    """Key of one load of ``files``: their names and contents, and the parser version."""
    hashes = hashes if hashes is not None else [file_sha256(f) for f in files]
    h = hashlib.sha256(f"traceanalyzer {__version__}\n".encode())
    for name, digest in sorted(zip((Path(f).name for f in files), hashes)):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def read_entry(path: Path, files: list[Path]) -> Trace:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    info = orjson.loads(table.schema.metadata[b"traceanalyzer"])
    events = conform(pl.from_arrow(table.replace_schema_metadata(None)), EVENT_SCHEMA)
    meta = conform(pl.read_json(io.BytesIO(info["meta"].encode())), META_SCHEMA) if info["meta_rows"] else pl.DataFrame(schema=META_SCHEMA)
    # the same bytes may sit elsewhere now: point meta.file at the files of this load
    where = {Path(f).name: str(f) for f in files}
    meta = meta.with_columns(
        pl.col("file").str.extract(r"([^/\\]+)$").replace_strict(where, default=pl.col("file"), return_dtype=pl.String)
    )
    return Trace(events=events, meta=meta, warnings=list(info["warnings"]), sources=[Path(f) for f in files])


def write_entry(path: Path, trace: Trace) -> None:
    import pyarrow.parquet as pq

    info = {
        "version": __version__,
        "meta": trace.meta.write_json(),
        "meta_rows": trace.meta.height,
        "warnings": list(trace.warnings),
    }
    table = trace.events.to_arrow()
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"traceanalyzer": orjson.dumps(info)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)


def load_cached(paths: str | Path | list[str | Path], cache_dir: str | Path | None, key: str | None = None) -> tuple[Trace, str, bool]:
    """``parsers.load(paths)`` through the cache: (trace, cache key, whether it was a hit).

    With ``cache_dir=None`` nothing is cached (the key is still computed). A damaged cache entry
    is ignored and rewritten.
    """
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    files = [f for p in items for f in discover(Path(p))]
    key = key or cache_key(files)
    entry = Path(cache_dir) / f"{key}.parquet" if cache_dir is not None else None
    if entry is not None and entry.is_file():
        try:
            return read_entry(entry, files), key, True
        except Exception:  # noqa: BLE001 - a damaged entry is a cache miss, never an error
            pass
    trace = load(files if len(files) > 1 else files[0])
    if entry is not None:
        write_entry(entry, trace)
    return trace, key, False
