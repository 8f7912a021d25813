"""The parse cache: parsed rank files kept as Parquet, keyed by the bytes of the file.

Parsing is the expensive part of an analysis, and what it produces for one rank file depends only
on the file's bytes and on the parser. So one entry holds one parsed Kineto rank file, under a
key made of the SHA-256 of its bytes and the parser's version: the same bytes under another name
or in another directory are a hit; a rewritten, appended or newly arrived file is a miss; a new
parser never reads an old entry. Every command that loads traces goes through here
(``load(..., cache=True)``, ``breakdown --cache``, ``batch``).

Where (:func:`default_dir`): ``$TRACEANALYZER_CACHE`` if set, else the platform's user cache
directory (``platformdirs``: ``$XDG_CACHE_HOME/traceanalyzer``, by default
``~/.cache/traceanalyzer``, on Linux; ``~/Library/Caches/traceanalyzer`` on macOS), unless a
directory is passed explicitly. Layout::

    <dir>/traces/<key>.parquet     one parsed rank file: the canonical events frame; its meta
                                   (dict) and warnings as JSON in the Parquet key-value metadata
    <dir>/digests/<ident>.json     memo: (path, size, mtime, ctime, inode, device) -> SHA-256

* Per file (what a rank worker calls): :func:`get` ``(path) -> (events, meta, warnings) | None``
  and :func:`put` ``(path, events, meta, warnings)``. The frames are exactly what
  ``parsers._parse_kineto_file`` returns (rank column null); ``meta["file"]`` and the paths in
  the warnings are those of the path asked for, wherever the bytes were first seen.
* Per run (batch): :func:`cache_key` — the input key of a set of files (their names and
  SHA-256s); :func:`traceanalyzer.parsers.load_cached` — ``parsers.load`` through the cache, saying whether every file
  was a hit.
* Hashing: SHA-256, streamed (about 1.4 GB/s here with the CPU's SHA extensions: 38 ms for the
  54 MB JSON trace, 2 ms for its 3 MB gzip). The digest of a file is remembered under its
  identity (resolved path, size, mtime and ctime in ns, inode, device), so an unchanged file is
  only stat'ed, never re-read; any write to the file changes its ctime (which no tool can set
  back), hence its identity.
* Writes are atomic (a temporary file in the same directory, then ``os.replace``): concurrent
  workers never see a partial entry and need no lock. A missing, partial, damaged or foreign
  entry is a miss (and is replaced by the next ``put``), never an error; a cache that cannot be
  written is skipped silently. A file that changed while it was being parsed is not stored.
* No eviction: delete the directory (or any file in it) at any time to reclaim space.

Nsight Systems exports are not cached: they are read with SQL, which is already fast.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Iterable

import orjson
import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.outputs import replace_atomically

#: part of every entry key: bump whenever the parser's canonical output changes (the package
#: version is in the key too, so a release always starts with an empty cache)
CACHE_VERSION = "kineto-4"
ENV = "TRACEANALYZER_CACHE"
_CHUNK = 4 * 2**20
_META_KEY = b"traceanalyzer"

# (ident) -> digest, for this process; the digests/ directory remembers them across processes
_digests: dict[tuple, str] = {}
# path -> the identity its digest was computed for by the last get(): put() checks it still holds
_seen: dict[str, tuple] = {}
#: hits and misses of get() in this process (load_cached reports a run's hit from them)
stats = {"hits": 0, "misses": 0}


def default_dir() -> Path:
    """``$TRACEANALYZER_CACHE``, else the platform's user cache directory for traceanalyzer."""
    env = os.environ.get(ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("traceanalyzer", appauthor=False))


def resolve_dir(directory: str | Path | None = None) -> Path:
    return Path(directory).expanduser() if directory is not None else default_dir()


def _ident(path: Path) -> tuple:
    p = Path(path).resolve()
    st = p.stat()
    return (str(p), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _digest(path: Path, directory: Path | None) -> tuple[str, tuple]:
    """(SHA-256 of the file's bytes, the identity it was computed for); remembered by identity."""
    ident = _ident(path)
    if ident in _digests:
        return _digests[ident], ident
    memo = None
    if directory is not None:
        name = hashlib.sha256(repr(ident).encode()).hexdigest()[:32]
        memo = directory / "digests" / f"{name}.json"
        try:
            doc = orjson.loads(memo.read_bytes())
            if tuple(doc["ident"]) == ident and len(doc["sha256"]) == 64:
                _digests[ident] = doc["sha256"]
                return doc["sha256"], ident
        except (OSError, ValueError, KeyError, TypeError):
            pass
    digest = _sha256_of(path)
    if _ident(path) != ident:  # written to while we read it: a digest of no stable content
        return digest, ()
    _digests[ident] = digest
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            replace_atomically(memo, lambda t: t.write_bytes(orjson.dumps({"ident": list(ident), "sha256": digest})))
        except OSError:
            pass
    return digest, ident


def file_sha256(path: str | Path, directory: str | Path | None = None) -> str:
    """SHA-256 of a file's bytes (remembered in the cache directory by the file's identity).
    A file that cannot be read is :class:`~traceanalyzer.errors.InputNotFound`, naming it."""
    from traceanalyzer.errors import InputNotFound

    d = resolve_dir(directory)
    try:
        return _digest(Path(path), d)[0]
    except FileNotFoundError as exc:
        raise InputNotFound("no such file or directory" + (" (a dangling link)" if Path(path).is_symlink() else ""), path) from exc
    except PermissionError as exc:
        raise InputNotFound("permission denied", path) from exc
    except OSError as exc:
        raise InputNotFound(f"cannot read: {exc.strerror or exc}", path) from exc


def cache_key(files: Iterable[str | Path], hashes: list[str] | None = None, version: str | None = None,
              directory: str | Path | None = None) -> str:
    """Input key of one load of ``files``: SHA-256 over the sorted (file name, file SHA-256) pairs
    and ``traceanalyzer <version>`` (this version by default; a stored run's own version to
    compare with what it stored)."""
    files = [Path(f) for f in files]
    hashes = hashes if hashes is not None else [file_sha256(f, directory) for f in files]
    h = hashlib.sha256(f"traceanalyzer {version or __version__}\n".encode())
    for name, digest in sorted(zip((f.name for f in files), hashes)):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def _entry(digest: str, directory: Path) -> Path:
    key = hashlib.sha256(f"{CACHE_VERSION}\0{__version__}\0{digest}".encode()).hexdigest()[:40]
    return directory / "traces" / f"{key}.parquet"


def get(path: str | Path, directory: str | Path | None = None) -> tuple[pl.DataFrame, dict, list[str]] | None:
    """The cached ``(events, meta, warnings)`` of the rank file ``path``, or None on a miss."""
    from traceanalyzer.schema import EVENT_SCHEMA, conform

    path = Path(path)
    d = resolve_dir(directory)
    try:
        digest, ident = _digest(path, d)
    except OSError:
        return None  # cannot stat or read it: let the parser say why
    if not ident:  # being written to as we read it: parse it, do not cache it
        stats["misses"] += 1
        return None
    entry = _entry(digest, d)
    try:
        info = orjson.loads(_read_info(entry))
        if info["sha256"] != digest or info["cache_version"] != CACHE_VERSION or info["version"] != __version__:
            raise ValueError("foreign entry")
        events = conform(pl.read_parquet(entry), EVENT_SCHEMA)
        if events.height != info["rows"]:
            raise ValueError("short entry")
    except Exception:  # noqa: BLE001 - missing, partial, damaged or foreign: a miss, never an error
        stats["misses"] += 1
        _seen[str(path)] = ident
        return None
    stats["hits"] += 1
    meta = info["meta"]
    source, here = info["source"], str(path)
    meta["file"] = here  # as the caller named it this time
    warnings = [w.replace(source, here) for w in info["warnings"]] if source != here else list(info["warnings"])
    return events, meta, warnings


def put(path: str | Path, events: pl.DataFrame, meta: dict, warnings: list[str], directory: str | Path | None = None) -> bool:
    """Store the parse of ``path``; False (and nothing left behind) if it cannot be written or if
    the file changed since :func:`get` hashed it (the parse may be of other bytes)."""
    path = Path(path)
    d = resolve_dir(directory)
    try:
        digest, ident = _digest(path, d)
        before = _seen.pop(str(path), ident)
        if not ident or before != ident:
            return False
        info = {
            "sha256": digest,
            "cache_version": CACHE_VERSION,
            "version": __version__,
            "rows": events.height,
            "source": str(path),
            "meta": meta,
            "warnings": list(warnings),
        }
        entry = _entry(digest, d)
        entry.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(entry, lambda t: _write_entry(events, orjson.dumps(info), t))
        return True
    except Exception:  # noqa: BLE001 - a cache that cannot be written is skipped
        return False


def _write_entry(events: pl.DataFrame, info: bytes, target: Path) -> None:
    """The frame as zstd Parquet, ``info`` in the file's key-value metadata (written by polars
    itself, which spares importing pyarrow: 0.4 s per process)."""
    events.write_parquet(target, compression="zstd", statistics=False, metadata={_META_KEY.decode(): info.decode()})


def _read_info(entry: Path) -> bytes:
    return pl.read_parquet_metadata(entry)[_META_KEY.decode()].encode()

