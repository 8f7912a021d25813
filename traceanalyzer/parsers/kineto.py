"""PyTorch Profiler (Kineto) Chrome-trace JSON -> canonical frames.

One file is one rank. The file is streamed (:func:`parse_file`): a reader thread decompresses
it block by block, the ``traceEvents`` array is cut into chunks of about 16 MiB before a line
that opens an event, and each chunk is decoded with orjson and turned into polars columns at
once (``pl.from_dicts`` with an explicit schema: unknown keys are skipped, lists such as
``Input Dims`` become compact JSON text), so only one chunk of Python dicts is alive at a time.
Everything after that is polars expressions. Files the streaming reader does not recognise go
through the whole-document path, which gives the same frames.

Handles: float microsecond ``ts`` with ``baseTimeNanoseconds`` (PyTorch >= 2.1), integer epoch
microseconds without it (older traces), legacy 2021 categories (``Operator``, ``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``), ROCm traces, int or string pid/tid, missing ``M`` events,
zero-duration events, and truncated files (the complete events before the cut are kept: only
the last chunk is re-parsed to find the cut, see :func:`_recover`).
"""

from __future__ import annotations

import gc
import queue
import re
import threading
import zlib
from pathlib import Path
from typing import Callable

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


def open_trace(path: Path):
    """``open(path, "rb")`` with every way it can fail turned into :class:`InputNotFound`."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputNotFound("no such file", path) from None
    except PermissionError:
        raise InputNotFound("permission denied", path) from None
    except IsADirectoryError:
        raise InputNotFound("is a directory", path) from None
    except OSError as exc:
        raise InputNotFound(f"cannot read: {exc.strerror or exc}", path) from None


def read_bytes(path: Path) -> tuple[bytes, bool]:
    """Return the (decompressed) bytes of ``path`` and whether a gzip stream was cut short.

    A truncated gzip yields everything decompressed before the cut; a corrupt gzip raises
    :class:`InvalidTrace`.
    """
    with open_trace(path) as fh:
        data = fh.read()
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
    doc, cut_at = _recover(raw)
    if doc is None:
        raise InvalidTrace(f"invalid JSON that could not be recovered ({_short(err)})", path)
    return _as_document(doc, path), cut_at / max(len(raw), 1)


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


def _recover(raw: bytes) -> tuple[dict | None, int]:
    """Cut a truncated document before the last event that is incomplete, close it, parse.

    Kineto writes one event per ``{ ... }`` block starting on its own line. We try cut points
    from the end backwards (the last few event starts), so the cost is a handful of parses.
    """
    start = raw.find(b'"traceEvents"')
    if start < 0:
        return None, 0
    arr = raw.find(b"[", start)
    if arr < 0:
        return None, 0
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
        return doc, cut
    return None, 0


# ---------------------------------------------------------------------------------------------
# document -> frames


def rank_from_name(path: Path) -> int | None:
    m = _RANK_IN_NAME.search(path.name)
    return int(m.group(1)) if m else None


def parse_file(path: Path, progress: Callable[[int], None] | None = None) -> tuple[pl.DataFrame, dict, list[str]]:
    """Parse one Kineto file into (events without rank column filled, meta dict, warnings).

    Streams the file: the ``traceEvents`` array is decoded a chunk of events at a time
    (:func:`_parse_streaming`), so memory holds the compact polars columns plus one chunk of
    Python objects, never the whole document as Python dicts. Anything the streaming reader
    does not recognise (a bare-array trace, a corrupt middle, a truncation it cannot repair)
    falls back to the whole-document path (:func:`_parse_whole`), which gives the same result
    and the same error messages. ``progress(n)``: called with the bytes of the file (compressed
    bytes for gzip) read since the last call.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived dicts: the cyclic GC would double the decode time
    try:
        try:
            return _parse_streaming(path, progress)
        except _Fallback:
            return _parse_whole(path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_whole(path: Path) -> tuple[pl.DataFrame, dict, list[str]]:
    """The whole-document path: decode everything with orjson, then build the frames."""
    raw, cut = read_bytes(path)
    doc, kept = decode_document(raw, path, cut)
    total = len(raw)
    del raw
    events = doc["traceEvents"]
    if not events:
        raise InvalidTrace("trace has no events ('traceEvents' is empty)", path)
    if not all(isinstance(e, dict) for e in events[:1000]):
        raise InvalidTrace("'traceEvents' holds non-object entries", path)
    frame, counts = _chunk_frame(events, path)
    del events
    return _finish(path, doc, [frame], [counts], cut, kept, total)


def _finish(
    path: Path, doc: dict, frames: list[pl.DataFrame], counts: list[dict], cut: bool, kept: float | None, total: int
) -> tuple[pl.DataFrame, dict, list[str]]:
    """Concatenate the chunk frames, put them on the trace's base time, judge what was dropped
    (:func:`clean.judge`, over the whole file), build meta and warnings."""
    warnings: list[str] = []
    if kept is not None or cut:
        n = sum(c["n"] for c in counts)
        warnings.append(f"{path}: truncated trace (the file ends mid-event): recovered {n} complete events")
    total_counts = clean.merge_counts(counts)
    warnings.extend(clean.judge(total_counts, path))
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
    if not base_ns and total_counts.get("coarse"):
        warnings.append(
            f"{path}: {total_counts['coarse']} timestamps are fractional epoch microseconds (no baseTimeNanoseconds): "
            "a float64 holds them to about 0.25 µs, so sub-microsecond digits are approximate"
        )
    df = frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical", rechunk=False)
    if base_ns:
        df = df.with_columns(pl.col("start_ns") + base_ns, pl.col("end_ns") + base_ns)
    meta = _meta(doc, path, df, base_ns)
    meta["truncated"] = kept is not None or cut
    meta["recovered_fraction"] = kept if kept is not None else 1.0
    meta["n_events"] = df.height
    return df, meta, warnings


def _chunk_frame(events: list, path: Path) -> tuple[pl.DataFrame, dict]:
    """Canonical events (start/end relative to the base time, added in :func:`_finish`) of a
    list of event dicts, and the counts :func:`clean.judge` needs (what was dropped, and why)."""
    raw_df = _raw_frame(events, path)
    input_dims = _input_dims(raw_df, events)
    usable, counts = clean.flag_raw(raw_df.with_columns(input_dims))
    return _canonical(usable, 0), counts


# ---------------------------------------------------------------------------------------------
# streaming: the traceEvents array a chunk at a time

#: decompressed bytes handed over per read; events are decoded about ``_CHUNK`` bytes at a time
_BLOCK = 1 << 22
_CHUNK = 1 << 24
#: the head (everything before the ``traceEvents`` array) must show up within this many bytes
_HEAD_LIMIT = 1 << 26


class _Fallback(Exception):
    """The streaming reader hands the file to the whole-document path."""


class _Stream:
    """Decompressed blocks of a file (plain or gzip), with whether the gzip stream was cut."""

    def __init__(self, path: Path, progress: Callable[[int], None] | None = None):
        self.path = path
        self.cut = False
        self.total = 0
        self.progress = progress or (lambda n: None)  # bytes of the file consumed since the last call

    def blocks(self):
        path = self.path
        with open_trace(path) as fh:
            first = fh.read(_BLOCK)
            if not first:
                raise InvalidTrace("empty file (0 bytes)", path)
            if first[:2] != b"\x1f\x8b":
                data = first
                while data:
                    self.total += len(data)
                    self.progress(len(data))
                    yield data
                    data = fh.read(_BLOCK)
                return
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = first
            while True:
                try:
                    out = d.decompress(data, _BLOCK)
                except zlib.error as exc:
                    if not self.total:
                        raise InvalidTrace(f"corrupt gzip data ({exc})", path) from None
                    self.cut = True
                    return
                self.progress(len(data) - len(d.unconsumed_tail))
                if out:
                    self.total += len(out)
                    yield out
                if d.eof:
                    return
                data = d.unconsumed_tail or fh.read(_BLOCK >> 2)
                if not data:
                    break
            try:
                out = d.flush()
            except zlib.error:
                out = b""
            if out:
                self.total += len(out)
                yield out
            self.cut = not d.eof


def _prefetched(blocks, depth: int = 3):
    """Run the ``blocks`` generator in a thread, ``depth`` blocks ahead: zlib and file reads
    release the GIL, so decompression overlaps with decoding. Exceptions are re-raised here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def produce() -> None:
        try:
            for b in blocks:
                while not stop.is_set():
                    try:
                        q.put((b, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            item = (done, None)
        except BaseException as exc:  # handed to the consumer
            item = (None, exc)
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    t = threading.Thread(target=produce, name="traceanalyzer-read", daemon=True)
    t.start()
    try:
        while True:
            b, exc = q.get()
            if exc is not None:
                raise exc
            if b is done:
                return
            yield b
    finally:
        stop.set()
        t.join()


def _last_event_start(buf: bytearray, lo: int) -> int:
    """Index of the newline before the last line of ``buf[lo:]`` that opens an event (its first
    non-blank character is ``{``), or -1. Newlines never occur inside JSON strings, so such a
    line is a value boundary candidate; the decode of each chunk verifies it."""
    end = len(buf)
    for _ in range(10_000):  # Kineto writes ~8 lines per event: found within a few steps
        nl = buf.rfind(b"\n", lo, end)
        if nl < 0:
            return -1
        j = nl + 1
        while j < len(buf) and buf[j] in (32, 9, 13):
            j += 1
        if j < len(buf) and buf[j] == 123:  # "{"
            return nl
        end = nl
    return -1


def _decode_events(buf: bytearray, cut: int) -> list:
    """Decode ``buf[:cut]`` (whole events separated by commas) as a JSON array."""
    j = cut
    while j > 0 and buf[j - 1] in (32, 9, 10, 13):
        j -= 1
    if j > 0 and buf[j - 1] == 44:  # trailing ","
        j -= 1
    piece = bytearray(b"[")
    with memoryview(buf) as mv:
        piece += mv[:j]
    piece += b"]"
    try:
        events = orjson.loads(piece)
    except orjson.JSONDecodeError:
        raise _Fallback from None
    if not all(isinstance(e, dict) for e in events[:1000]):
        raise _Fallback
    return events


def _parse_streaming(path: Path, progress: Callable[[int], None] | None = None) -> tuple[pl.DataFrame, dict, list[str]]:
    stream = _Stream(path, progress)
    blocks = _prefetched(stream.blocks())
    try:
        return _parse_blocks(path, stream, blocks)
    finally:
        blocks.close()  # stops the reader thread when we leave early


def _parse_blocks(path: Path, stream: _Stream, blocks) -> tuple[pl.DataFrame, dict, list[str]]:
    buf = bytearray()
    # 1. the head: every key before the traceEvents array
    while True:
        pos = buf.find(b'"traceEvents"')
        arr = buf.find(b"[", pos) if pos >= 0 else -1
        if arr >= 0:
            break
        block = next(blocks, None)
        if block is None or len(buf) > _HEAD_LIMIT:
            raise _Fallback
        buf += block
    if bytes(buf[pos + 13 : arr]).strip() != b":":
        raise _Fallback
    try:
        head = orjson.loads(bytes(buf[: arr + 1]) + b"]}")
    except orjson.JSONDecodeError:
        raise _Fallback from None
    if not isinstance(head, dict) or head.get("traceEvents") != []:
        raise _Fallback
    offset = arr + 1  # bytes of the file before buf[0]
    del buf[: arr + 1]
    # 2. the events, a chunk at a time, cut before a line that opens an event
    frames: list[pl.DataFrame] = []
    counts: list[dict] = []
    searched = 0
    for block in blocks:
        buf += block
        if len(buf) < _CHUNK:
            continue
        cut = _last_event_start(buf, max(0, searched - 64))
        searched = len(buf)
        if cut <= 0:
            continue
        events = _decode_events(buf, cut)
        try:
            frame, chunk_counts = _chunk_frame(events, path)
        except InvalidTrace:
            raise _Fallback from None
        del events
        frames.append(frame)
        counts.append(chunk_counts)
        offset += cut
        del buf[:cut]
        searched = 0
    # 3. the last events and the keys after the array (or a truncated end)
    total = stream.total
    prefix = b'{"traceEvents":['
    last = prefix + bytes(buf)
    del buf
    kept = None
    try:
        tail = orjson.loads(last)
    except orjson.JSONDecodeError:
        fixed = clean.repair_json(last)  # NaN / Infinity literals are not a truncation
        if fixed is not None:
            raise _Fallback from None  # the whole-document path repairs them, with its warning
        tail, cut_at = _recover(last)
        if tail is None:
            raise _Fallback from None
        kept = (offset + cut_at - len(prefix)) / max(total, 1)
    del last
    if not isinstance(tail, dict) or not isinstance(tail.get("traceEvents"), list):
        raise _Fallback
    events = tail.pop("traceEvents")
    if events:
        if not all(isinstance(e, dict) for e in events[:1000]):
            raise _Fallback
        try:
            frame, chunk_counts = _chunk_frame(events, path)
        except InvalidTrace:
            raise _Fallback from None
        frames.append(frame)
        counts.append(chunk_counts)
    del events
    if not frames:
        raise _Fallback  # no events: the whole-document path says so in its own words
    doc = {**{k: v for k, v in head.items() if k != "traceEvents"}, **tail}
    return _finish(path, doc, frames, counts, stream.cut, kept, total)


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
