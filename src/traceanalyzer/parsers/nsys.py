"""Nsight Systems (nsys) exports -> canonical frames.

Accepted inputs (all produced by ``nsys export``):

* ``nsys-sqlite``   ``--type sqlite`` (also what ``nsys profile --stats=true`` / ``nsys stats`` write)
* ``nsys-json``     legacy ``--type json``: one protobuf-JSON object per line, string table in a
  ``{"data": [...]}`` line, 64-bit numbers as JSON strings
* ``nsys-jsonlines`` ``--type jsonlines``: one table row per line, with a ``"table"`` key
* ``nsys-parquet``  ``--type parquetdir``: a directory with one ``<TABLE>.parquet`` per table
* ``nsys-arrow``    ``--type arrowdir``: a directory with one Arrow IPC file ``<TABLE>.arrow`` per table

Every format is first turned into the same set of SQLite-named tables (``_Tables``); one shared,
vectorised polars pipeline (``_build``) turns those into a :class:`~traceanalyzer.schema.Trace`.
Columns are selected by name and every non-core column is optional (the schema changed between
nsys 2022.2 / schema 2.9.1 and 2026.2 / schema 3.25.0); tables are checked for existence first
(nsys omits empty tables).

Ranks: one rank per (process, CUDA device) pair that has GPU activity. Ranks are numbered in the
order of the physical GPU id (``TARGET_INFO_CUDA_DEVICE.gpuId`` when the export has it, else the
CUDA ``deviceId``), then by OS pid. An nsys export does not record torch.distributed ranks
(NCCL payloads need ``--include-blobs``), so for a ``torchrun`` job with one GPU per process this
gives rank r = device r, which is the usual ``LOCAL_RANK -> cuda:LOCAL_RANK`` layout.
Host events (CUDA API calls, NVTX ranges) belong to a process: an API call goes to the rank whose
GPU work it launched (joined on (process, correlationId)); API calls without GPU work and NVTX
ranges go to every rank of their process (a single-process multi-GPU program's ``ProfilerStep``
ranges apply to all of its devices). Processes without GPU activity (``torchrun``, ``nsys`` ...)
are dropped.

Timestamps stay on the report's session clock (integer ns), which all processes of one report
share. ``meta.base_time_ns`` is left null: the session clock is not an epoch.

Odd but valid input (``docs/nsys.md``): every column but ``start``, ``end`` and ``deviceId`` may be
absent or NULL (a missing process id is inferred, see :func:`_fill_process`); a value of the wrong
kind reads as NULL. What is unusable (absurd timestamps, the incomplete tail of a truncated legacy
JSON export) is dropped with a count by :mod:`traceanalyzer.parsers.nsys_clean`; damaged files are
exit 4 naming the file.
"""

from __future__ import annotations

import io
import re
import sqlite3
from pathlib import Path

import orjson
import polars as pl

from traceanalyzer.errors import InvalidTrace, NoGpuActivity
from traceanalyzer.parsers.nsys_clean import MAX_BAD_FRACTION, TextCut, drop_absurd, trim_cut
from traceanalyzer.schema import EVENT_SCHEMA, GPU_WORK_KINDS, META_SCHEMA, Trace, conform

I64 = pl.Int64
STR = pl.String
F64 = pl.Float64
_P24 = 1 << 24

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"
GPU_INFO = "TARGET_INFO_GPU"
CUDA_DEVICE = "TARGET_INFO_CUDA_DEVICE"
CONTEXT_INFO = "TARGET_INFO_CUDA_CONTEXT_INFO"
SYSTEM_ENV = "TARGET_INFO_SYSTEM_ENV"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

#: Tables the loader reads (the converter and the columnar readers use this list too).
TABLES_USED = (
    STRINGS, KERNEL, MEMCPY, MEMSET, GRAPH, RUNTIME, SYNC, NVTX,
    GPU_INFO, CUDA_DEVICE, CONTEXT_INFO, SYSTEM_ENV, *META_TABLES,
)

_GPU_COMMON = {
    "start": I64, "end": I64, "deviceId": I64, "contextId": I64, "streamId": I64,
    "correlationId": I64, "globalPid": I64,
}

#: ENUM_CUDA_MEMCPY_OPER (stable since 2.x; the legacy JSON has no ENUM tables).
_COPY_KIND = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
#: ENUM_CUPTI_SYNC_TYPE, named as Kineto names its cuda_sync events.
_SYNC_TYPE = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}
_SYNC_TYPE_BY_ENUM_NAME = {
    "SYNCHRONIZATION_TYPE_UNKNOWN": 0,
    "SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE": 1,
    "SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT": 2,
    "SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE": 3,
    "SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE": 4,
}

_SQLITE_MAGIC = b"SQLite format 3\x00"
_REP_SUFFIXES = (".nsys-rep", ".qdrep")
_EXPORT_HINT = "run `nsys export --type sqlite FILE.nsys-rep` and pass the .sqlite"


# --------------------------------------------------------------------------------------------
# Table sources: every format answers has(table), columns(table), read(table, cols)
# --------------------------------------------------------------------------------------------


def _sqlite_dtype(decl: str) -> pl.DataType:
    d = (decl or "").upper()
    if "INT" in d:
        return I64
    if "REAL" in d or "FLOA" in d or "DOUB" in d:
        return F64
    return STR


def _typed(col: str, dtype: pl.DataType) -> str:
    """SQL for ``col`` that yields only values of its declared kind: SQLite stores any value in any
    column, and a text or blob where an integer belongs (a damaged or hand-edited export) reads as
    NULL, which the loader then handles like any NULL. Integral REALs are read as integers."""
    c = f'"{col}"'
    if dtype == I64:
        return (f"CASE typeof({c}) WHEN 'integer' THEN {c} WHEN 'real' THEN "
                f"CASE WHEN {c} = CAST({c} AS INTEGER) THEN CAST({c} AS INTEGER) END END")
    if dtype == F64:
        return f"CASE WHEN typeof({c}) IN ('integer', 'real') THEN {c} END"
    return f"CASE WHEN typeof({c}) = 'text' THEN {c} WHEN typeof({c}) IN ('integer', 'real') THEN CAST({c} AS TEXT) END"


def _sqlite_size(path: Path) -> tuple[int | None, int]:
    """(size the SQLite header promises, size on disk); None when the header does not say."""
    try:
        with open(path, "rb") as f:
            head = f.read(100)
        size = path.stat().st_size
    except OSError:
        return None, 0
    if len(head) < 100:
        return None, size
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96]  # "in-header database size" is valid only then
    return (page * pages if valid and pages else None), size


class _SqliteTables:
    def __init__(self, path: Path):
        self.path = path
        self.warnings: list[str] = []
        self.truncated: TextCut | None = None
        try:
            self.conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            # Some real exports hold non-UTF-8 bytes in TEXT columns (e.g. TARGET_INFO_SYSTEM_ENV).
            self.conn.text_factory = lambda b: b.decode("utf-8", "replace")
            rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        except sqlite3.DatabaseError as e:
            raise InvalidTrace(f"not a readable SQLite database ({e})", path) from None
        self.names = {r[0] for r in rows}
        self._cols: dict[str, dict[str, pl.DataType]] = {}
        want, size = _sqlite_size(path)
        if want and size < want:
            self.warnings.append(
                f"{path}: the SQLite file is shorter than its header says ({size:,} of {want:,} bytes): it was cut "
                "off; the tables the analysis reads were read completely (a damaged table is an error)")

    def has(self, table: str) -> bool:
        return table in self.names

    def _info(self, table: str) -> dict[str, pl.DataType]:
        if table not in self._cols:
            try:
                info = self.conn.execute(f'PRAGMA table_info("{table}")').fetchall()
            except sqlite3.DatabaseError as e:
                raise InvalidTrace(f"damaged SQLite export: table {table} cannot be read ({e})", self.path) from None
            self._cols[table] = {r[1]: _sqlite_dtype(r[2]) for r in info}
        return self._cols[table]

    def columns(self, table: str) -> list[str]:
        return list(self._info(table))

    def read(self, table: str, cols: list[str]) -> pl.DataFrame:
        info = self._info(table)
        sql = "SELECT " + ", ".join(_typed(c, info[c]) for c in cols) + f' FROM "{table}"'
        try:
            rows = self.conn.execute(sql).fetchall()
        except sqlite3.DatabaseError as e:  # a damaged or truncated database file
            raise InvalidTrace(f"damaged SQLite export: reading table {table} failed ({e})", self.path) from None
        return pl.DataFrame(rows, schema={c: info[c] for c in cols}, orient="row", strict=False)

    def close(self) -> None:
        self.conn.close()


def _unreadable(path: Path, e: OSError) -> Exception:
    """An OS error while reading an input: exit 3 naming the file."""
    from traceanalyzer.errors import InputNotFound

    if isinstance(e, PermissionError):
        return InputNotFound("permission denied", path)
    return InputNotFound(f"cannot read: {e.strerror or e}", path)


#: what polars raises for a damaged Parquet / Arrow file or unreadable JSON rows
_DAMAGED = (pl.exceptions.PolarsError, OSError, ValueError)


class _FrameTables:
    """Tables already in memory (JSON Lines, legacy JSON) or one file per table (Parquet/Arrow)."""

    def __init__(self, frames: dict[str, pl.DataFrame] | None = None, files: dict[str, Path] | None = None,
                 reader: str = "parquet", warnings: list[str] | None = None, truncated: TextCut | None = None):
        self.frames = frames or {}
        self.files = files or {}
        self.reader = reader
        self.warnings = warnings or []
        self.truncated = truncated

    def has(self, table: str) -> bool:
        return table in self.frames or table in self.files

    def _damaged(self, table: str, e: Exception) -> Exception:
        f = self.files[table]
        if isinstance(e, PermissionError) or not f.exists():  # unreadable, or a dangling link
            return _unreadable(f, e if isinstance(e, OSError) else FileNotFoundError(2, "no such file"))
        kind = "Parquet" if self.reader == "parquet" else "Arrow IPC"
        why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        return InvalidTrace(f"damaged {kind} table file of an nsys export ({why})", self.files[table])

    def columns(self, table: str) -> list[str]:
        if table in self.frames:
            return self.frames[table].columns
        f = self.files[table]
        try:
            if self.reader == "parquet":
                return list(pl.read_parquet_schema(f))
            return list(pl.read_ipc_schema(f))
        except _DAMAGED as e:
            raise self._damaged(table, e) from None

    def read(self, table: str, cols: list[str]) -> pl.DataFrame:
        if table in self.frames:
            return self.frames[table].select(cols)
        f = self.files[table]
        try:
            if self.reader == "parquet":
                return pl.read_parquet(f, columns=cols)
            return pl.read_ipc(f, columns=cols)
        except _DAMAGED as e:
            raise self._damaged(table, e) from None

    def close(self) -> None:
        pass


def _frame(src, table: str, cols: dict[str, pl.DataType]) -> pl.DataFrame | None:
    """Read ``cols`` of ``table`` by name; absent columns come back as nulls. None if no table."""
    if not src.has(table):
        return None
    present = set(src.columns(table))
    have = [c for c in cols if c in present]
    df = src.read(table, have) if have else pl.DataFrame()
    # a value of the wrong kind (a list or object where a number or a name belongs) reads as NULL
    usable = {c for c in have if not df.schema[c].is_nested() and df.schema[c] != pl.Object}
    exprs = [
        (pl.col(c).cast(t, strict=False) if c in usable else pl.lit(None, dtype=t)).alias(c)
        for c, t in cols.items()
    ]
    if not have:  # keep the row count of an all-absent selection at zero
        return pl.DataFrame(schema=cols)
    return df.select(exprs)


# --------------------------------------------------------------------------------------------
# Format readers
# --------------------------------------------------------------------------------------------

def _read_lines(path: Path, what: str) -> tuple[pl.Series, TextCut | None]:
    """The non-blank lines of a text export, and where it was cut off (None if it is complete).

    A file is cut off when its last non-blank line is not a complete JSON value (every line of both
    formats is one JSON object); that line is left out. Invalid UTF-8 is an error (exit 4), except
    for a character split by the cut itself at the very end."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise _unreadable(path, e) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.end >= len(raw) and "unexpected end" in e.reason:  # a multi-byte character split by a cut
            text = raw[: e.start].decode("utf-8", "strict")
        else:
            line = raw.count(b"\n", 0, e.start) + 1
            raise InvalidTrace(f"not valid UTF-8 (byte {e.start}, line {line}): an nsys {what} export is UTF-8 "
                               "text; was the file re-encoded or damaged?", path) from None
    body = text.rstrip()
    start = body.rfind("\n") + 1
    cut = None
    if body:
        try:
            orjson.loads(body[start:])
        except orjson.JSONDecodeError:
            head = body[:start].encode("utf-8")
            cut = TextCut(size=len(raw), kept=len(head), line=head.count(b"\n") + 1)
            body = body[:start]
    lines = pl.Series("l", body.splitlines(), dtype=STR)
    return lines.filter(lines.str.strip_chars() != ""), cut




def _jsonlines_tables(path: Path) -> _FrameTables:
    lines, cut = _read_lines(path, "JSON Lines")
    if cut is not None:
        # one table after another: the rows after the cut, and every table after it, are missing
        raise InvalidTrace(
            f"truncated nsys JSON Lines export: its last line (line {cut.line}, from byte {cut.kept:,} of "
            f"{cut.size:,}) is cut off; the tables written after it are missing, so no breakdown would be "
            "complete: export the report again", path)
    df = pl.DataFrame({"l": lines}).with_columns(table=pl.col("l").str.json_path_match("$.table"))
    warnings = []
    n_bad = df.get_column("table").null_count()
    if n_bad:
        if n_bad > MAX_BAD_FRACTION * df.height:
            raise InvalidTrace(f"{n_bad} of {df.height} lines are not JSON table rows (no \"table\" key or not "
                               "JSON): not an intact nsys JSON Lines export", path)
        warnings.append(f"{path}: ignored {n_bad} lines that are not JSON table rows (no \"table\" key or not JSON)")
    frames: dict[str, pl.DataFrame] = {}
    for (table,), part in df.filter(pl.col("table").is_not_null()).group_by("table"):
        body = "\n".join(part.get_column("l").to_list()).encode()
        try:
            frames[table] = pl.read_ndjson(io.BytesIO(body), infer_schema_length=None).drop("table")
        except _DAMAGED as e:  # conflicting column types, damaged rows
            why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise InvalidTrace(f"nsys JSON Lines export: rows of table {table} cannot be read ({why})", path) from None
    return _FrameTables(frames=frames, warnings=warnings)


def _legacy_json_tables(path: Path) -> _FrameTables:
    """Legacy ``--type json``: rebuild the SQLite tables the loader needs from the event lines."""
    lines, cut = _read_lines(path, "JSON")
    df = pl.DataFrame({"l": lines})
    df = df.with_columns(
        typ=pl.col("l").str.json_path_match("$.Type").cast(I64, strict=False),
        is_data=pl.col("l").str.contains(r'^\s*\{\s*"data"\s*:'),
    )
    frames: dict[str, pl.DataFrame] = {}
    data = df.filter(pl.col("is_data"))
    if data.height:
        try:
            strings = orjson.loads(data.item(0, "l"))["data"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise InvalidTrace("nsys JSON export: its string table line is not a JSON object with a data list",
                               path) from None
        frames[STRINGS] = pl.DataFrame({"value": pl.Series(strings, dtype=STR)}).with_row_index("id").with_columns(
            pl.col("id").cast(I64)
        )

    damaged = [0]

    def decode(types: list[int], key: str) -> pl.DataFrame | None:
        part = df.filter(pl.col("typ").is_in(types) & ~pl.col("is_data"))
        ok = part.filter(pl.col("l").str.contains(rf'"{key}"\s*:\s*\{{'))  # the payload is an object
        damaged[0] += part.height - ok.height
        part = ok
        if part.height == 0:
            return None
        body = "\n".join(part.get_column("l").to_list()).encode()
        try:
            raw = pl.read_ndjson(io.BytesIO(body), infer_schema_length=None)
        except _DAMAGED as e:  # a damaged event line
            why = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            raise InvalidTrace(f"nsys JSON export: {key} lines cannot be read ({why})", path) from None
        if key not in raw.columns or not isinstance(raw.schema[key], pl.Struct) or "Type" not in raw.columns:
            return None
        return raw.select(pl.col("Type").alias("_type"), pl.col(key)).unnest(key)

    def scalar(dtype: pl.DataType) -> bool:
        return not dtype.is_nested() and dtype != pl.Object

    def num(c: str, frame: pl.DataFrame) -> pl.Expr:
        ok = c in frame.columns and scalar(frame.schema[c])
        return (pl.col(c).cast(STR).cast(I64, strict=False) if ok else pl.lit(None, I64)).alias(c)

    def sub(c: str, field: str, frame: pl.DataFrame) -> pl.Expr:
        dtype = frame.schema.get(c)
        if not isinstance(dtype, pl.Struct) or field not in dtype.to_schema() or not scalar(dtype.to_schema()[field]):
            return pl.lit(None, I64)
        return pl.col(c).struct.field(field).cast(STR).cast(I64, strict=False)

    gpu_map = {"startNs": "start", "endNs": "end", "deviceId": "deviceId", "contextId": "contextId",
               "streamId": "streamId", "correlationId": "correlationId", "globalPid": "globalPid",
               "greenContextId": "greenContextId"}
    cuda = decode([79, 80, 106, 130], "CudaEvent")
    if cuda is not None:
        base = [num(k, cuda).alias(v) for k, v in gpu_map.items()]
        has = lambda k: isinstance(cuda.schema.get(k), pl.Struct)  # noqa: E731
        kern = cuda.filter(pl.col("_type") == 79)
        if has("kernel") and kern.height:
            frames[KERNEL] = kern.select(*base, *[sub("kernel", f, kern).alias(f) for f in
                                                   ("demangledName", "shortName", "mangledName")])
        if has("memcpy"):
            mc = cuda.filter(pl.col("memcpy").is_not_null())
            if mc.height:
                frames[MEMCPY] = mc.select(*base, sub("memcpy", "sizebytes", mc).alias("bytes"),
                                           sub("memcpy", "copyKind", mc).alias("copyKind"))
        if has("memset"):
            ms = cuda.filter(pl.col("memset").is_not_null())
            if ms.height:
                frames[MEMSET] = ms.select(*base, sub("memset", "sizebytes", ms).alias("bytes"),
                                           sub("memset", "value", ms).alias("value"))
        if has("sync"):
            sy = cuda.filter(pl.col("sync").is_not_null())
            if sy.height:
                fields = cuda.schema["sync"].to_schema()  # type: ignore[union-attr]
                st = (pl.col("sync").struct.field("syncType").cast(STR)
                      if scalar(fields.get("syncType", pl.Object)) else pl.lit(None, STR))
                frames[SYNC] = sy.select(
                    *base,
                    pl.coalesce(st.replace_strict(_SYNC_TYPE_BY_ENUM_NAME, default=None, return_dtype=I64),
                                st.cast(I64, strict=False)).alias("syncType"),
                )
        if has("graph"):
            gr = cuda.filter(pl.col("graph").is_not_null())
            if gr.height:
                frames[GRAPH] = gr.select(*base, sub("graph", "graphId", gr).alias("graphId"),
                                          sub("graph", "graphExecId", gr).alias("graphExecId"))
    api = decode([47, 48], "TraceProcessEvent")
    if api is not None:
        frames[RUNTIME] = api.select(
            num("startNs", api).alias("start"), num("endNs", api).alias("end"),
            num("eventClass", api), num("globalTid", api), num("correlationId", api),
            num("name", api).alias("nameId"),
        )
    nv = decode([59, 60, 34, 75], "NvtxEvent")
    if nv is not None:
        frames[NVTX] = nv.select(
            num("Timestamp", nv).alias("start"), num("EndTimestamp", nv).alias("end"),
            pl.col("_type").cast(I64).alias("eventType"),
            (pl.col("Text").cast(STR) if scalar(nv.schema.get("Text", pl.Object)) else pl.lit(None, STR)).alias("text"),
            num("TextId", nv).alias("textId"), num("GlobalTid", nv).alias("globalTid"),
            num("DomainId", nv).alias("domainId"),
        )
    warnings = []
    n_events = df.filter(pl.col("typ").is_in([79, 80, 106, 130, 47, 48, 59, 60, 34, 75]) & ~pl.col("is_data")).height
    if damaged[0]:
        if damaged[0] > MAX_BAD_FRACTION * n_events:
            raise InvalidTrace(f"{damaged[0]} of {n_events} event lines have no event object (more than "
                               f"{MAX_BAD_FRACTION:.0%}): not an intact nsys JSON export", path)
        warnings.append(f"{path}: ignored {damaged[0]} event lines whose event is not a JSON object")
    if cut is not None:
        if STRINGS not in frames:
            raise InvalidTrace(f"truncated nsys JSON export: its last line (line {cut.line}) is cut off, and the "
                               "string table is missing: export the report again", path)
        starts = [f.get_column("start").max() for f in frames.values() if "start" in f.columns and f.height]
        starts = [t for t in starts if t is not None]
        cut.t_ns = int(max(starts)) if starts else None
    return _FrameTables(frames=frames, truncated=cut, warnings=warnings)


def _columnar_tables(path: Path, suffixes: tuple[str, ...], reader: str) -> _FrameTables:
    files = {f.name[: -len(s)]: f for f in sorted(path.iterdir()) for s in suffixes if f.name.endswith(s)}
    return _FrameTables(files=files, reader=reader)


# --------------------------------------------------------------------------------------------
# Sniffing
# --------------------------------------------------------------------------------------------

_LEGACY_DATA_RE = re.compile(rb'\s*\{\s*"data"\s*:\s*\[')
_NSYS_TABLE_RE = re.compile(r"^(StringIds|CUPTI_ACTIVITY_KIND_\w+|NVTX_EVENTS|META_DATA_EXPORT|EXPORT_META_DATA)$")


def _dir_format(path: Path) -> str | None:
    try:
        names = [f.name for f in path.iterdir() if f.is_file()]
    except OSError:
        return None
    for fmt, suffixes in (("nsys-parquet", (".parquet",)), ("nsys-arrow", (".arrow", ".feather", ".ipc"))):
        stems = [n[: -len(s)] for n in names for s in suffixes if n.endswith(s)]
        if any(_NSYS_TABLE_RE.match(s) for s in stems):
            return fmt
    return None


def _first_json_line(path: Path) -> dict | None:
    with open(path, "rb") as f:
        head = f.read(1 << 20)
    for line in head.splitlines():
        if line.strip():
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError:
                return None
            return obj if isinstance(obj, dict) else None
    return None


def sniff_nsys(path: Path) -> str | None:
    """Return the nsys format of ``path`` (detected by content), or None if it is not one.

    Any SQLite database answers ``"nsys-sqlite"`` (nothing else in traceanalyzer reads SQLite), so that
    :func:`load_nsys` can say clearly when it is not an nsys export. ``.nsys-rep`` / ``.qdrep`` answer
    ``"nsys-rep"``; :func:`load_nsys` then explains how to export them.
    """
    path = Path(path)
    if path.is_dir():
        return _dir_format(path)
    if path.name.lower().endswith(_REP_SUFFIXES):
        return "nsys-rep"
    try:
        with open(path, "rb") as f:
            magic = f.read(16)
    except OSError:
        return None
    if magic == _SQLITE_MAGIC:
        return "nsys-sqlite"
    if not magic.lstrip().startswith(b"{"):
        return None
    with open(path, "rb") as f:
        head = f.read(4096)
    if _LEGACY_DATA_RE.match(head):  # the string-table line can be megabytes long
        return "nsys-json"
    try:
        obj = _first_json_line(path)
    except OSError:
        return None
    if not obj:
        return None
    if isinstance(obj.get("table"), str):
        return "nsys-jsonlines"
    if isinstance(obj.get("data"), list) and "traceEvents" not in obj:
        return "nsys-json"
    if isinstance(obj.get("Type"), int) and any(
        k in obj for k in ("CudaEvent", "TraceProcessEvent", "NvtxEvent", "CommEvent", "SchedEvent", "DiagnosticEvent")
    ):
        return "nsys-json"
    if obj.get("type") in ("String", "ThreadName"):  # --separate-strings layout
        return "nsys-json"
    return None


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_nsys(path: Path) -> Trace:
    """Load an nsys export (any format :func:`sniff_nsys` recognises) into canonical frames."""
    path = Path(path)
    if not path.exists():
        from traceanalyzer.errors import InputNotFound

        raise InputNotFound("no such file or directory", path)
    fmt = sniff_nsys(path)
    if fmt == "nsys-rep":
        raise InvalidTrace(f"an Nsight Systems report must be exported first: {_EXPORT_HINT}", path)
    if fmt is None:
        raise InvalidTrace("not an Nsight Systems export (expected SQLite, JSON, JSON Lines, or a Parquet/Arrow "
                           f"table directory); for a .nsys-rep, {_EXPORT_HINT}", path)
    if fmt == "nsys-sqlite":
        src = _SqliteTables(path)
    elif fmt == "nsys-jsonlines":
        src = _jsonlines_tables(path)
    elif fmt == "nsys-json":
        src = _legacy_json_tables(path)
    elif fmt == "nsys-parquet":
        src = _columnar_tables(path, (".parquet",), "parquet")
    else:
        src = _columnar_tables(path, (".arrow", ".feather", ".ipc"), "ipc")
    try:
        return _build(src, path, fmt)
    finally:
        src.close()


def _strip_version(name: pl.Expr) -> pl.Expr:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (the name Kineto uses)."""
    return name.str.replace(r"_v\d+$", "")


def _env_version(src, var: str) -> str | None:
    env = _frame(src, SYSTEM_ENV, {"name": STR, "value": STR})
    if env is None:
        return None
    hit = env.filter(pl.col("name") == "DeviceEnvironment").select(
        pl.col("value").str.extract(rf"(?:^|;){var}=([^;]*)")
    ).drop_nulls()
    return hit.item(0, 0) if hit.height and hit.item(0, 0) else None


_UNKNOWN_PROC = -1  # GPU rows whose process cannot be told (no globalPid and nothing to infer it from)


def _proc_of(col: str) -> pl.Expr:
    """The process part (hw, vm, pid) of a serialized globalPid / globalTid."""
    return pl.col(col) // _P24


def _context_procs(src) -> pl.DataFrame | None:
    """(deviceId, contextId) -> process from TARGET_INFO_CUDA_CONTEXT_INFO, where unambiguous."""
    ci = _frame(src, CONTEXT_INFO, {"hwId": I64, "vmId": I64, "processId": I64, "contextId": I64, "deviceId": I64})
    if ci is None or not ci.height:
        return None
    return ci.filter(pl.col("processId").is_not_null()).select(
        (pl.col("hwId").fill_null(0) * (1 << 32) + pl.col("vmId").fill_null(0) * _P24 + pl.col("processId"))
        .alias("proc"), "contextId", "deviceId",
    ).unique()


def _unique_map(df: pl.DataFrame, keys: list[str], out: str) -> pl.DataFrame:
    """keys -> proc where exactly one process has rows with those keys."""
    return (df.filter(pl.col("proc").is_not_null() & pl.all_horizontal(pl.col(k).is_not_null() for k in keys))
            .group_by(keys).agg(pl.col("proc").unique().alias(out))
            .filter(pl.col(out).list.len() == 1).with_columns(pl.col(out).list.first()))


def _fill_process(gpu: pl.DataFrame, src, host_procs: list[int], path: Path,
                  warnings: list[str]) -> pl.DataFrame:
    """Give every GPU row a process (``proc``) when its ``globalPid`` is missing (NULL, or no column).

    In this order: the one process whose other GPU rows use the same (device, context); the one
    process TARGET_INFO_CUDA_CONTEXT_INFO gives for it; the one process with GPU rows on that device;
    the one process that made CUDA API calls. Rows still without a process get ``_UNKNOWN_PROC``:
    they form one rank per device, and no host event (API call, NVTX range) can be attached to it."""
    gpu = gpu.with_columns(proc=_proc_of("globalPid"))
    n_null = gpu.get_column("proc").null_count()
    if not n_null:
        return gpu
    fills = [_unique_map(gpu, ["deviceId", "contextId"], "_p1")]
    ctx = _context_procs(src)
    if ctx is not None:
        fills.append(_unique_map(ctx, ["deviceId", "contextId"], "_p2"))
    fills.append(_unique_map(gpu, ["deviceId"], "_p3"))
    cols = []
    for f in fills:
        keys = [c for c in f.columns if not c.startswith("_p")]
        gpu = gpu.join(f, on=keys, how="left", maintain_order="left")
        cols.append(f.columns[-1])
    only_host = pl.lit(host_procs[0] if len(host_procs) == 1 else None, I64)
    gpu = gpu.with_columns(proc=pl.coalesce("proc", *cols, only_host)).drop(cols)
    n_unknown = gpu.get_column("proc").null_count()
    if n_unknown:
        devices = sorted(gpu.filter(pl.col("proc").is_null()).get_column("deviceId").unique().drop_nulls().to_list())
        warnings.append(
            f"{path}: {n_unknown} GPU activity rows (devices {', '.join(map(str, devices))}) have no process id "
            "(globalPid) and none could be inferred: they are analysed per device, without their CUDA API "
            "calls and NVTX ranges")
        gpu = gpu.with_columns(pl.col("proc").fill_null(_UNKNOWN_PROC))
    return gpu


def _device_info(dev: pl.DataFrame, src) -> pl.DataFrame:
    """device_name / num_sms / compute_capability per (process, device) from TARGET_INFO_GPU.

    The GPU row is found by physical id (``TARGET_INFO_CUDA_DEVICE.gpuId`` = ``id``), else by CUDA
    index (``cuDevice`` = deviceId), else by ``id`` = deviceId. Some exports name the id column
    ``deviceId`` instead of ``id``: both are read. A device whose name is missing or empty is
    described as ``GPU <id> (name not recorded)``."""
    info = _frame(src, GPU_INFO, {"id": I64, "deviceId": I64, "name": STR, "smCount": I64, "computeMajor": I64,
                                  "computeMinor": I64, "cuDevice": I64})
    fields = ("_n", "_s", "_c")
    if info is not None and info.height:
        info = info.with_columns(
            id=pl.coalesce("id", "deviceId"),
            _n=pl.when(pl.col("name").str.strip_chars() != "").then(pl.col("name").str.strip_chars()),
            _s="smCount",
            _c=pl.format("{}.{}", "computeMajor", "computeMinor"),
        )
        for i, (key, on) in enumerate((("id", "gpuId"), ("cuDevice", "deviceId"), ("id", "deviceId"))):
            part = info.filter(pl.col(key).is_not_null()).unique(key, keep="first", maintain_order=True).select(
                pl.col(key).alias(on), *[pl.col(f).alias(f"{f}{i}") for f in fields])
            dev = dev.join(part, on=on, how="left", maintain_order="left")
        # the physical-id match counts only when the export maps this process's device to one
        dev = dev.with_columns(
            **{f"{f}0": pl.when(pl.col("gpuId").is_not_null()).then(pl.col(f"{f}0")) for f in fields}
        ).with_columns(
            device_name=pl.coalesce("_n0", "_n1", "_n2"),
            num_sms=pl.coalesce("_s0", "_s1", "_s2", "numMultiprocessors"),
            compute_capability=pl.coalesce("_c0", "_c1", "_c2"),
        ).drop([f"{f}{i}" for f in fields for i in range(3)])
    else:
        dev = dev.with_columns(device_name=pl.lit(None, STR), num_sms=pl.col("numMultiprocessors"),
                               compute_capability=pl.lit(None, STR))
    return dev.with_columns(device_name=pl.coalesce(
        "device_name", pl.format("GPU {} (name not recorded)", pl.coalesce("gpuId", "deviceId"))))


def _build(src, path: Path, fmt: str) -> Trace:
    warnings: list[str] = list(src.warnings)
    is_nsys = src.has(STRINGS) or any(src.has(t) for t in META_TABLES)
    if not is_nsys:
        if fmt == "nsys-sqlite":
            raise InvalidTrace("SQLite database is not an Nsight Systems export (no META_DATA_EXPORT or "
                               f"StringIds table); to analyse a profile, {_EXPORT_HINT}", path)
        raise InvalidTrace(f"not an Nsight Systems export: no StringIds table found ({fmt})", path)
    if not src.has(STRINGS):
        raise InvalidTrace("Nsight Systems export is missing its StringIds table (names cannot be resolved)", path)
    strings = _frame(src, STRINGS, {"id": I64, "value": STR})

    def resolve(df: pl.DataFrame, col: str, out: str) -> pl.DataFrame:
        # only the ids the rows use (a legacy JSON string table can hold millions of entries)
        used = strings.filter(pl.col("id").is_in(df.get_column(col).drop_nulls().unique().implode()))
        used = used.unique("id", keep="first", maintain_order=True)
        return df.join(used.rename({"id": col, "value": out}), on=col, how="left", maintain_order="left")

    # ---- GPU activity -----------------------------------------------------------------------
    for table in (KERNEL, MEMCPY, MEMSET):
        if src.has(table):
            lacking = [c for c in ("start", "end", "deviceId") if c not in set(src.columns(table))]
            if lacking:
                raise InvalidTrace(f"{table} has no {'/'.join(lacking)} column: not an nsys export schema", path)
    parts: list[pl.DataFrame] = []
    k = _frame(src, KERNEL, {**_GPU_COMMON, "demangledName": I64, "shortName": I64, "mangledName": I64})
    if k is not None:
        k = resolve(resolve(resolve(k, "demangledName", "_dn"), "shortName", "_sn"), "mangledName", "_mn")
        parts.append(k.select(*_GPU_COMMON, pl.lit("kernel").alias("kind"),
                              pl.coalesce("_dn", "_sn", "_mn", pl.lit("<unnamed kernel>")).alias("name"),
                              pl.lit(None, I64).alias("bytes")))
    m = _frame(src, MEMCPY, {**_GPU_COMMON, "bytes": I64, "copyKind": I64})
    if m is not None:
        label = pl.col("copyKind").replace_strict(_COPY_KIND, default="Unknown", return_dtype=STR)
        parts.append(m.select(*_GPU_COMMON, pl.lit("memcpy").alias("kind"),
                              pl.concat_str(pl.lit("Memcpy "), label).alias("name"), "bytes"))
    s = _frame(src, MEMSET, {**_GPU_COMMON, "bytes": I64})
    if s is not None:
        parts.append(s.select(*_GPU_COMMON, pl.lit("memset").alias("kind"), pl.lit("Memset").alias("name"), "bytes"))
    g = _frame(src, GRAPH, {**_GPU_COMMON, "graphId": I64})
    if g is not None:
        # Default --cuda-graph-trace=graph: the kernels inside are not exported; the launch is opaque
        # GPU activity (never idle).
        parts.append(g.select(*_GPU_COMMON, pl.lit("gpu_other").alias("kind"),
                              pl.concat_str(pl.lit("CUDA graph "), pl.col("graphId").cast(STR).fill_null("?"))
                              .alias("name"), pl.lit(None, I64).alias("bytes")))
        if g.height:
            warnings.append(f"{g.height} CUDA graph launches (GRAPH_TRACE) counted as opaque GPU activity; "
                            "profile with --cuda-graph-trace=node to see the kernels inside them")
    gpu = pl.concat(parts, how="vertical_relaxed") if parts else pl.DataFrame()
    if gpu.height == 0:
        raise NoGpuActivity("Nsight Systems export has no GPU activity (no kernel, memcpy, memset or "
                            "CUDA graph rows); was it captured with `-t cuda`?", path)
    rt = _frame(src, RUNTIME, {"start": I64, "end": I64, "globalTid": I64, "correlationId": I64, "nameId": I64})
    host_procs = (rt.select(_proc_of("globalTid").alias("p")).drop_nulls().unique().get_column("p").to_list()
                  if rt is not None else [])
    gpu = _fill_process(gpu, src, host_procs, path, warnings)
    # a missing deviceId: the device of the same (process, context) in other rows
    if gpu.get_column("deviceId").null_count():
        ctx_dev = (gpu.filter(pl.col("deviceId").is_not_null() & pl.col("contextId").is_not_null())
                   .group_by("proc", "contextId").agg(pl.col("deviceId").unique().alias("_d"))
                   .filter(pl.col("_d").list.len() == 1).with_columns(pl.col("_d").list.first()))
        gpu = gpu.join(ctx_dev, on=["proc", "contextId"], how="left", maintain_order="left").with_columns(
            deviceId=pl.coalesce("deviceId", "_d")).drop("_d")
    complete = pl.col("start").is_not_null() & pl.col("end").is_not_null() & pl.col("deviceId").is_not_null()
    n_incomplete = gpu.height - gpu.filter(complete).height
    if n_incomplete:
        if n_incomplete > MAX_BAD_FRACTION * gpu.height:
            raise InvalidTrace(f"{n_incomplete} of {gpu.height} GPU activity rows have no start, end or device "
                               f"(more than {MAX_BAD_FRACTION:.0%}): refusing to analyse what is left", path)
        warnings.append(f"{path}: dropped {n_incomplete} GPU activity rows with no start, end or device (NULL)")
        gpu = gpu.filter(complete)

    # ---- devices -> ranks --------------------------------------------------------------------
    dev = gpu.group_by("proc", "deviceId").agg().with_columns(
        pid24=pl.when(pl.col("proc") >= 0).then(pl.col("proc") % _P24))
    cd = _frame(src, CUDA_DEVICE, {"gpuId": I64, "cudaId": I64, "pid": I64, "numMultiprocessors": I64})
    if cd is not None and cd.height:
        dev = dev.join(cd.unique(["pid", "cudaId"]).rename({"pid": "pid24", "cudaId": "deviceId"}),
                       on=["pid24", "deviceId"], how="left")
    else:
        dev = dev.with_columns(gpuId=pl.lit(None, I64), numMultiprocessors=pl.lit(None, I64))
    dev = _device_info(dev, src)
    dev = (
        dev.with_columns(gpu_key=pl.coalesce("gpuId", "deviceId"))
        .sort("gpu_key", "pid24", "proc", nulls_last=True)
        .with_row_index("rank")
        .with_columns(pl.col("rank").cast(pl.Int32), dev_pid=pl.col("gpu_key").cast(STR))
    )
    proc_ranks = dev.filter(pl.col("proc") != _UNKNOWN_PROC).select("proc", "rank")
    gpu_procs = proc_ranks.get_column("proc").unique().to_list()
    only_proc = pl.lit(gpu_procs[0] if len(gpu_procs) == 1 else None, I64)

    gpu = gpu.join(dev.select("proc", "deviceId", "rank", "dev_pid"), on=["proc", "deviceId"], how="inner")

    # ---- synchronisation (host waits): device via (process, context); deviceId is unreliable -----
    sync = _frame(src, SYNC, {**_GPU_COMMON, "syncType": I64})
    sync_ev = None
    if sync is not None and sync.height:
        ctx = gpu.select("proc", "contextId", "deviceId")
        ci = _context_procs(src)
        if ci is not None:
            ctx = pl.concat([ctx, ci.select("proc", "contextId", "deviceId")])
        ctx = ctx.unique(["proc", "contextId"], keep="first", maintain_order=True).rename({"deviceId": "_dev"})
        single = dev.group_by("proc").agg(pl.len().alias("_n"), pl.col("deviceId").first().alias("_dev1"))
        ctx_proc = _unique_map(gpu, ["contextId"], "_p")
        sync = (
            sync.with_columns(proc=_proc_of("globalPid"))
            .join(ctx_proc, on="contextId", how="left")
            .with_columns(proc=pl.coalesce("proc", "_p", only_proc)).drop("_p")
            .join(ctx, on=["proc", "contextId"], how="left")
            .join(single.filter(pl.col("_n") == 1).select("proc", "_dev1"), on="proc", how="left")
            .with_columns(deviceId=pl.coalesce("_dev", "_dev1"))
            .join(dev.select("proc", "deviceId", "rank", "dev_pid"), on=["proc", "deviceId"], how="inner")
        )
        sync_ev = sync.select(
            "rank", pl.lit("gpu_sync").alias("kind"), pl.col("dev_pid").alias("pid"),
            pl.col("streamId").cast(STR).alias("tid"), pl.col("streamId").alias("stream"),
            pl.col("syncType").replace_strict(_SYNC_TYPE, default="Unknown Sync", return_dtype=STR).alias("name"),
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
            pl.col("correlationId").alias("correlation"),
        )

    gpu_ev = gpu.select(
        "rank", "kind", pl.col("dev_pid").alias("pid"), pl.col("streamId").cast(STR).alias("tid"),
        pl.col("streamId").alias("stream"), "name", pl.col("start").alias("start_ns"),
        pl.col("end").alias("end_ns"), pl.col("correlationId").alias("correlation"), "bytes",
    )

    # ---- CUDA runtime / driver API ------------------------------------------------------------
    frames = [gpu_ev] + ([sync_ev] if sync_ev is not None else [])
    no_thread = 0
    if rt is not None and rt.height:
        corr = pl.concat([gpu.select("proc", "correlationId", "rank")]
                         + ([sync.select("proc", "correlationId", "rank")] if sync_ev is not None else []))
        corr = corr.filter(pl.col("correlationId").is_not_null()).unique(["proc", "correlationId"], keep="first")
        rt = resolve(rt, "nameId", "name").with_columns(
            proc=pl.coalesce(_proc_of("globalTid"), only_proc), name=pl.col("name").fill_null("<unnamed API call>"))
        no_thread += rt.get_column("proc").null_count()
        rt = rt.join(corr, on=["proc", "correlationId"], how="left")
        rt = pl.concat([
            rt.filter(pl.col("rank").is_not_null()),
            rt.filter(pl.col("rank").is_null()).drop("rank").join(proc_ranks, on="proc", how="inner"),
        ], how="vertical_relaxed")
        frames.append(rt.select(
            "rank", pl.lit("runtime").alias("kind"), (pl.col("proc") % _P24).cast(STR).alias("pid"),
            (pl.col("globalTid") % _P24).cast(STR).alias("tid"), _strip_version(pl.col("name")).alias("name"),
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
            pl.col("correlationId").alias("correlation"),
        ))

    # ---- NVTX push/pop (59) and start/end (60) ranges ---------------------------------------------
    nv = _frame(src, NVTX, {"start": I64, "end": I64, "eventType": I64, "text": STR, "textId": I64,
                            "globalTid": I64})
    if nv is not None and nv.height:
        # marks and unended ranges have no end; ranges ending before they start are counted below
        nv = nv.filter(pl.col("eventType").is_in([59, 60]) & pl.col("end").is_not_null())
        nv = resolve(nv, "textId", "_txt").with_columns(
            name=pl.coalesce("text", "_txt"), proc=pl.coalesce(_proc_of("globalTid"), only_proc)
        ).filter(pl.col("name").is_not_null())
        no_thread += nv.get_column("proc").null_count()
        nv = nv.join(proc_ranks, on="proc", how="inner")
        frames.append(nv.select(
            "rank", pl.lit("annotation").alias("kind"), (pl.col("proc") % _P24).cast(STR).alias("pid"),
            (pl.col("globalTid") % _P24).cast(STR).alias("tid"), "name",
            pl.col("start").alias("start_ns"), pl.col("end").alias("end_ns"),
        ))
    if no_thread:
        warnings.append(f"{path}: ignored {no_thread} CUDA API calls / NVTX ranges with no thread id (globalTid) "
                        "in a capture of several GPU processes: they cannot be attached to a rank")

    events = conform(pl.concat(frames, how="diagonal_relaxed"), EVENT_SCHEMA)
    events = events.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    events, more = drop_absurd(events, path)
    warnings += more
    diag = _frame(src, "DIAGNOSTIC_EVENT", {"text": STR})  # Nsight's own log: did it lose records?
    if diag is not None and diag.height:
        from traceanalyzer.parsers.kineto_log import lost_records

        warnings += lost_records({"WARNING": diag["text"].drop_nulls().to_list()}, path)
    cut = src.truncated
    if cut is not None:
        events, note = trim_cut(events, cut, path)
        warnings.append(note)
        if not events.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).height:
            raise NoGpuActivity(f"truncated nsys JSON export (its last line, line {cut.line}, is cut off): no "
                                "complete GPU activity in what was recovered", path)
    events = events.sort("rank", "start_ns", "end_ns", maintain_order=True)

    # ---- meta ----------------------------------------------------------------------------------
    counts = events.group_by("rank").agg(pl.len().cast(I64).alias("n_events"))
    meta = dev.join(counts, on="rank", how="left").select(
        "rank", pl.lit(str(path)).alias("file"), pl.lit(fmt).alias("format"),
        pl.lit(dev.height, pl.Int32).alias("world_size"), "device_name", "num_sms", "compute_capability",
        pl.lit(_env_version(src, "CUDA_VERSION"), STR).alias("cuda_version"),
        pl.lit(_env_version(src, "NCCL_VERSION"), STR).alias("nccl_version"),
        pl.col("n_events").fill_null(0), pl.lit(cut is not None).alias("truncated"),
        pl.lit(cut.fraction if cut is not None else 1.0).alias("recovered_fraction"),
    )
    meta = conform(meta, META_SCHEMA).sort("rank")
    trace = Trace(events=events, meta=meta, warnings=warnings, sources=[path])
    trace.validate()
    return trace
