"""Parse cache: one rank file's canonical events + meta, stored as Parquet.

A re-run on an unchanged trace reads the Parquet file instead of decoding the JSON again.

* Where: ``$TRACEANALYZER_CACHE`` if set, else ``~/.cache/traceanalyzer``.
* Key: the file's resolved path, size and modification time (ns), plus :data:`CACHE_VERSION`
  (bumped whenever the parser's output changes), hashed into the entry name. A file that is
  rewritten, appended to or touched gets a new key; the stale entry is never read again.
* Entry: ``<key>.parquet`` (the events frame, rank column null, exactly as
  :func:`traceanalyzer.parsers.kineto.parse_file` returns it) and ``<key>.json`` (meta dict and
  warnings), written to temporary names and renamed, the JSON last: an entry without its JSON
  is incomplete and ignored.
* Opt-in: ``load(path, cache=True)`` and ``traceanalyzer breakdown --cache``. A cache that
  cannot be read or written is skipped silently: the trace is parsed as if there were none.
* No eviction: delete the directory to reclaim space.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import orjson
import polars as pl

from traceanalyzer.schema import EVENT_SCHEMA, conform

#: part of every key: bump when the parser's canonical output changes
CACHE_VERSION = "kineto-2"  # 2: begin/end pairs, gzip members, launch-time check


def cache_dir() -> Path:
    env = os.environ.get("TRACEANALYZER_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "traceanalyzer"


def cache_key(path: Path) -> str | None:
    """The entry name for ``path`` as it is now (None if it cannot be stat'ed)."""
    try:
        p = Path(path).resolve()
        st = p.stat()
    except OSError:
        return None
    ident = f"{CACHE_VERSION}\0{p}\0{st.st_size}\0{st.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:32]


def get(path: Path) -> tuple[pl.DataFrame, dict, list[str]] | None:
    """The cached ``(events, meta, warnings)`` of ``path``, or None on a miss."""
    key = cache_key(path)
    if key is None:
        return None
    d = cache_dir()
    side, data = d / f"{key}.json", d / f"{key}.parquet"
    try:
        info = orjson.loads(side.read_bytes())
        events = conform(pl.read_parquet(data), EVENT_SCHEMA)
    except Exception:  # missing, partial or unreadable entry: a miss
        return None
    meta = info["meta"]
    meta["file"] = str(path)  # as the caller named it this time
    warnings = [w.replace(info["source"], str(path)) for w in info["warnings"]]
    return events, meta, warnings


def put(path: Path, events: pl.DataFrame, meta: dict, warnings: list[str]) -> bool:
    """Store an entry for ``path``; False (and nothing left behind) if it cannot be written."""
    key = cache_key(path)
    if key is None:
        return False
    d = cache_dir()
    side, data = d / f"{key}.json", d / f"{key}.parquet"
    tmp_data, tmp_side = data.with_suffix(f".parquet.{os.getpid()}.tmp"), side.with_suffix(f".json.{os.getpid()}.tmp")
    try:
        d.mkdir(parents=True, exist_ok=True)
        events.write_parquet(tmp_data, compression="lz4", statistics=False)
        tmp_side.write_bytes(orjson.dumps({"meta": meta, "warnings": warnings, "source": str(path)}))
        os.replace(tmp_data, data)
        os.replace(tmp_side, side)
        return True
    except Exception:
        for t in (tmp_data, tmp_side):
            try:
                t.unlink()
            except OSError:
                pass
        return False
