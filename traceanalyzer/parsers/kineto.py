"""PyTorch Profiler (Kineto) Chrome-trace JSON -> canonical frames.

One file is one rank. The whole document is decoded with orjson, then polars builds the event
columns in one call (``pl.from_dicts`` with an explicit schema: unknown keys are skipped, lists
such as ``Input Dims`` become compact JSON text). Everything after that is polars expressions.

Handles: float microsecond ``ts`` with ``baseTimeNanoseconds`` (PyTorch >= 2.1), integer epoch
microseconds without it (older traces), legacy 2021 categories (``Operator``, ``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``), ROCm traces, int or string pid/tid, missing ``M`` events,
zero-duration events, and truncated files (see :func:`decode_document`).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import orjson
import polars as pl

from traceanalyzer.errors import InputNotFound, InvalidTrace
from traceanalyzer.parsers import clean
from traceanalyzer.schema import EVENT_SCHEMA, META_SCHEMA, conform

_ARGS = pl.Struct(
    {
        "External id": pl.Int64,
        "external id": pl.Int64,
        "correlation": pl.Int64,
        "stream": pl.Int64,
        "device": pl.Int64,
        "Sequence number": pl.Int64,
        "Fwd thread id": pl.Int64,
        "bytes": pl.Int64,
        "Collective name": pl.String,
        "In msg nelems": pl.Int64,
        "Out msg nelems": pl.Int64,
        "Group size": pl.Int64,
        "dtype": pl.String,
        "Process Group Name": pl.String,
        "Process Group Description": pl.String,
        "Process Group Ranks": pl.String,
        "Seq": pl.Int64,
        "Src Rank": pl.Int64,
        "Dst Rank": pl.Int64,
    }
)
#: ops whose ``Input Dims`` we keep (FLOPs counting needs GEMM/conv/attention shapes only)
_SHAPED_OPS = r"(?i)(mm|linear|matmul|conv|attention|einsum)"
_RAW = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.String,
    "tid": pl.String,
    "ts": pl.Float64,
    "dur": pl.Float64,
    "args": _ARGS,
}

_KIND_OF_CAT = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "gpu_sync",
    "gpu_user_annotation": "gpu_annotation",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "driver": "runtime",
    "python_function": "python",
}

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# bytes -> document


def read_bytes(path: Path) -> tuple[bytes, bool]:
    """Return the (decompressed) bytes of ``path`` and whether a gzip stream was cut short.

    A truncated gzip yields everything decompressed before the cut; a corrupt gzip raises
    :class:`InvalidTrace`.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputNotFound("no such file", path) from None
    except PermissionError:
        raise InputNotFound("permission denied", path) from None
    except IsADirectoryError:
        raise InputNotFound("is a directory", path) from None
    except OSError as exc:
        raise InputNotFound(f"cannot read: {exc.strerror or exc}", path) from None
    if not data:
        raise InvalidTrace("empty file (0 bytes)", path)
    if data[:2] != b"\x1f\x8b":
        return data, False
    out: list[bytes] = []
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    chunk = 1 << 24
    try:
        for i in range(0, len(data), chunk):
            out.append(d.decompress(data[i : i + chunk]))
            if d.eof:
                break
        out.append(d.flush())
    except zlib.error as exc:
        # not a cut: damaged bytes, and what inflated before the error may be garbled already
        raise InvalidTrace(f"corrupt gzip data ({exc})", path) from None
    return b"".join(out), not d.eof


def decode_document(raw: bytes, path: Path, cut: bool) -> tuple[dict, float | None]:
    """Decode a Chrome-trace document; recover the complete events of a truncated one.

    Returns the document and, when it was recovered from a truncated file, the fraction of the
    bytes that were kept (else None).
    """
    try:
        doc = orjson.loads(raw)
        if cut:  # the gzip stream was cut but the JSON happens to be complete
            return _as_document(doc, path), None
        return _as_document(doc, path), None
    except orjson.JSONDecodeError as exc:
        err = exc
    fixed = clean.repair_json(raw)  # a BOM, NaN / Infinity literals (Python's json writes them)
    if fixed is not None:
        raw = fixed
        try:
            return _as_document(orjson.loads(raw), path), None
        except orjson.JSONDecodeError as exc:
            err = exc
    if b'"traceEvents"' not in raw[:1 << 20] and b"traceEvents" not in raw:
        raise InvalidTrace(f"not valid JSON ({_short(err)})", path)
    doc, kept = _recover(raw)
    if doc is None:
        raise InvalidTrace(f"invalid JSON that could not be recovered ({_short(err)})", path)
    return _as_document(doc, path), kept


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


def _as_document(doc: object, path: Path) -> dict:
    if isinstance(doc, list):  # the bare-array Chrome trace form
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise InvalidTrace("JSON is not a Chrome trace (no 'traceEvents')", path)
    if not isinstance(doc["traceEvents"], list):
        raise InvalidTrace("'traceEvents' is not a list", path)
    return doc


_EVENT_START = re.compile(rb"\n\s*\{|,\s*\{")  # pretty (Kineto) or compact (rewritten) JSON


def _recover(raw: bytes) -> tuple[dict | None, float]:
    """Cut a truncated document before the last event that is incomplete, close it, parse.

    Kineto writes one event per ``{ ... }`` block starting on its own line. We try cut points
    from the end backwards (the last few event starts), so the cost is a handful of parses.
    """
    start = raw.find(b'"traceEvents"')
    if start < 0:
        return None, 0.0
    arr = raw.find(b"[", start)
    if arr < 0:
        return None, 0.0
    starts = [m.start() for m in _EVENT_START.finditer(raw, arr, len(raw))][-64:]
    for cut in reversed(starts):
        body = raw[:cut].rstrip().rstrip(b",")
        if body.endswith(b"["):
            candidate = body + b"]}"
        else:
            candidate = body + b"\n]}"
        try:
            doc = orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
        return doc, cut / max(len(raw), 1)
    return None, 0.0


# ---------------------------------------------------------------------------------------------
# document -> frames


def rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def parse_file(path: Path) -> tuple[pl.DataFrame, dict, list[str]]:
    """Parse one Kineto file into (events without rank column filled, meta dict, warnings)."""
    warnings: list[str] = []
    raw, cut = read_bytes(path)
    doc, kept = decode_document(raw, path, cut)
    del raw
    if kept is not None or cut:
        warnings.append(f"{path}: truncated trace (the file ends mid-event): recovered {len(doc['traceEvents'])} complete events")
    events = doc["traceEvents"]
    if not events:
        raise InvalidTrace("trace has no events ('traceEvents' is empty)", path)
    if not all(isinstance(e, dict) for e in events[:1000]):
        raise InvalidTrace("'traceEvents' holds non-object entries", path)
    raw_df = _raw_frame(events, path)
    input_dims = _input_dims(raw_df, events)
    del events

    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
    usable, clean_warnings = clean.clean_raw(raw_df.with_columns(input_dims), path)
    warnings.extend(clean_warnings)
    df = _canonical(usable, base_ns)

    meta = _meta(doc, path, df, base_ns)
    meta["truncated"] = kept is not None or cut
    meta["recovered_fraction"] = kept if kept is not None else 1.0
    meta["n_events"] = df.height
    return df, meta, warnings


def _raw_frame(events: list, path: Path) -> pl.DataFrame:
    """Top-level event fields and the ``args`` fields we use, built by polars from the dicts.

    ``args`` are decoded as their own frame: polars would otherwise infer a type for every key
    of every args dict, and some (nested ``Input Dims``...) have no common type.
    """
    top = {k: v for k, v in _RAW.items() if k != "args"}
    try:
        df = _typed_dicts(events, top)
        try:
            arg_dicts = [e.get("args") or {} for e in events]
            args = _typed_dicts(arg_dicts, _ARGS.to_schema())
        except Exception:  # non-object args somewhere: treat them as absent
            arg_dicts = [a if isinstance(a := e.get("args"), dict) else {} for e in events]
            args = _typed_dicts(arg_dicts, _ARGS.to_schema())
    except Exception as exc:  # polars raises several types on malformed rows
        raise InvalidTrace(f"malformed events ({_short(exc)})", path) from None
    return df.with_columns(args.to_struct("args"))


def _typed_dicts(rows: list, schema: dict) -> pl.DataFrame:
    """``pl.from_dicts`` with ``schema``; if some value has the wrong JSON type (a string
    where a number belongs, as ROCm's ``"0x0"``), read every column as text and cast, turning
    values that do not parse into nulls."""
    try:
        return pl.from_dicts(rows, schema=schema, strict=False)
    except Exception:
        text = pl.from_dicts(rows, schema={k: pl.String for k in schema}, strict=False)
        return text.select(pl.col(k).cast(v, strict=False) for k, v in schema.items())


def _input_dims(raw: pl.DataFrame, events: list) -> pl.Series:
    """``Input Dims`` as compact JSON text, for the shaped ops only (GEMM, conv, attention).

    Input Dims nests to varying depth (tensor lists), which no single polars dtype holds, so
    the few rows that need it are serialised with orjson, selected by a polars filter.
    """
    idx = (
        raw.with_row_index("i")
        .filter((pl.col("ph") == "X") & pl.col("name").str.contains(_SHAPED_OPS)
                & pl.col("cat").str.to_lowercase().is_in(["cpu_op", "operator"]))
        .get_column("i")
        .to_list()
    )
    values: list[str | None] = [None] * raw.height
    for i in idx:
        args = events[i].get("args")
        dims = args.get("Input Dims") if isinstance(args, dict) else None
        if dims is not None:
            values[i] = orjson.dumps(dims).decode()
    return pl.Series("input_dims", values, dtype=pl.String)


def _ns(ts: pl.Expr) -> pl.Expr:
    """Float microseconds -> int64 nanoseconds without losing integer epoch precision."""
    whole = ts.floor()
    return whole.cast(pl.Int64) * 1000 + ((ts - whole) * 1000).round().cast(pl.Int64)


def _canonical(raw: pl.DataFrame, base_ns: int) -> pl.DataFrame:
    a = pl.col("args")
    cat = pl.col("cat").str.to_lowercase()
    kind = cat.replace_strict(_KIND_OF_CAT, default="other", return_dtype=pl.String)
    is_gpu = kind.is_in(["kernel", "memcpy", "memset", "gpu_sync", "gpu_annotation"])
    stream = pl.coalesce(a.struct.field("stream"), pl.col("tid").str.extract(r"(\d+)").cast(pl.Int64, strict=False))
    start = _ns(pl.col("ts")) + base_ns
    df = (
        raw.lazy()
        .filter(
            (pl.col("ph") == "X")
            & pl.col("ts").is_not_null()
            & pl.col("dur").is_not_null()
            & pl.col("ts").is_not_nan()
            & pl.col("dur").is_not_nan()
            & (pl.col("dur") >= 0)
        )
        .select(
            kind.alias("kind"),
            pl.col("pid").fill_null(""),
            pl.col("tid").fill_null(""),
            pl.when(is_gpu).then(stream).alias("stream"),
            pl.col("name").fill_null(""),
            start.alias("start_ns"),
            (start + (pl.col("dur") * 1000).round().cast(pl.Int64)).alias("end_ns"),
            a.struct.field("correlation").alias("correlation"),
            pl.coalesce(a.struct.field("External id"), a.struct.field("external id")).alias("external_id"),
            a.struct.field("Sequence number").alias("seq"),
            a.struct.field("Fwd thread id").alias("fwd_tid"),
            a.struct.field("bytes").alias("bytes"),
            a.struct.field("Collective name").alias("coll_name"),
            a.struct.field("In msg nelems").alias("in_nelems"),
            a.struct.field("Out msg nelems").alias("out_nelems"),
            a.struct.field("Group size").alias("group_size"),
            a.struct.field("dtype").alias("dtype"),
            a.struct.field("Process Group Name").alias("pg_name"),
            a.struct.field("Process Group Description").alias("pg_desc"),
            a.struct.field("Process Group Ranks").alias("pg_ranks"),
            a.struct.field("Seq").alias("coll_seq"),
            a.struct.field("Src Rank").alias("src_rank"),
            a.struct.field("Dst Rank").alias("dst_rank"),
            pl.col("input_dims"),
        )
        .with_columns(pl.lit(None, dtype=pl.Int32).alias("rank"))
        .collect()
    )
    return conform(df, EVENT_SCHEMA)


def _meta(doc: dict, path: Path, df: pl.DataFrame, base_ns: int) -> dict:
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    props = doc.get("deviceProperties") if isinstance(doc.get("deviceProperties"), list) else []
    # the device this rank used: the most common GPU pid among its kernels
    dev_id = None
    kernels = df.filter(pl.col("kind") == "kernel")
    if kernels.height:
        top = kernels.group_by("pid").len().sort("len", descending=True)
        dev_id = top.item(0, "pid")
    dev = None
    for p in props:
        if isinstance(p, dict) and str(p.get("id")) == str(dev_id):
            dev = p
            break
    if dev is None and props and isinstance(props[0], dict):
        dev = props[0] if dev_id is None or len(props) == 1 else None
    cc = None
    if dev and dev.get("computeMajor") is not None:
        cc = f"{dev.get('computeMajor')}.{dev.get('computeMinor', 0)}"
    pg = dist.get("pg_config")
    return {
        "rank": _int(dist.get("rank")),
        "file": str(path),
        "format": "kineto",
        "world_size": _int(dist.get("world_size")),
        "device_name": dev.get("name") if dev else None,
        "num_sms": _int(dev.get("numSms")) if dev else None,
        "compute_capability": cc,
        "backend": dist.get("backend"),
        "pytorch_version": _str(doc.get("pytorch_version") or doc.get("torch_version")),
        "cuda_version": _str(doc.get("cuda_runtime_version") or doc.get("hip_runtime_version")),
        "nccl_version": _str(dist.get("nccl_version")),
        "base_time_ns": base_ns if base_ns else None,
        "pg_config": orjson.dumps(pg).decode() if pg is not None else None,
    }


def _int(v: object) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def meta_frame(rows: list[dict]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows, schema_overrides=META_SCHEMA, strict=False), META_SCHEMA) if rows else pl.DataFrame(schema=META_SCHEMA)
