"""PyTorch Profiler (Kineto) Chrome-trace JSON -> canonical frames.

One file is one rank. The file is streamed (:func:`parse_file`): a reader thread decompresses
it block by block (every gzip member, with the inflation cap of
:mod:`traceanalyzer.parsers.inflate`), the ``traceEvents`` array is cut into chunks of about
16 MiB before a line that opens an event, and each chunk is decoded by typed ``msgspec``
Structs that name only the fields we read straight into polars columns
(:mod:`traceanalyzer.parsers.kineto_events`), so no Python dict per event is ever built and
only one chunk of decoded events is alive at a time. Everything after that is polars
expressions. Files the streaming reader does not recognise go through the whole-document path,
which gives the same frames.

Handles: float microsecond ``ts`` with ``baseTimeNanoseconds`` (PyTorch >= 2.1), integer epoch
microseconds without it (older traces), legacy 2021 categories (``Operator``, ``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``), ROCm traces, int or string pid/tid, missing ``M`` events,
zero-duration events, ``"ph": "x"``, begin/end (``B``/``E``) pairs (turned into complete events,
matched per thread), and truncated files (the complete events before the cut are kept: only
the last chunk is re-parsed to find the cut, see :func:`_recover`). A document with a
top-level key written twice (a second ``traceEvents`` array...) is refused: which one a JSON
decoder keeps is not the user's choice.
"""

from __future__ import annotations

import gc
import os
import re
from pathlib import Path
from typing import Callable

import msgspec
import orjson
import polars as pl

from traceanalyzer.errors import InvalidTrace, OutOfMemory
from traceanalyzer.parsers import decoder
from traceanalyzer.parsers import clean, inflate
from traceanalyzer.parsers.categories import GPU_TIMELINE_KINDS, KIND_OF_CAT, MTIA_DMA_KIND
from traceanalyzer.parsers.kineto_events import (
    RAW_SCHEMA,
    decode_native,
    decode_typed,
    depth_message,
    duplicated,
    normal_ph,
    object_keys,
    raw_frame_from_dicts,
    too_deep,
)
from traceanalyzer.parsers.kineto_events import short as _short
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import EVENT_SCHEMA, KIND, META_SCHEMA, conform

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


# ---------------------------------------------------------------------------------------------
# bytes -> document


def read_bytes(path: Path) -> tuple[bytes, bool]:
    """Return the (decompressed) bytes of ``path`` and whether a gzip stream was cut short.

    Every gzip member is read. A truncated gzip yields everything decompressed before the cut;
    a corrupt gzip raises :class:`InvalidTrace`, and so does gzip data past the inflation cap
    (:mod:`traceanalyzer.parsers.inflate`).
    """
    data, cut, _warnings = inflate.read_all(path, _BLOCK)
    return data, cut


def decode_document(raw: bytes, path: Path, cut: bool, warnings: list[str] | None = None) -> tuple[dict, float | None]:
    """Decode a Chrome-trace document; recover the complete events of a truncated one.

    Returns the document and, when it was recovered from a truncated file, the fraction of the
    bytes that were kept (else None). A complete document with a top-level key written twice is
    refused (:func:`check_keys`), so is one nested deeper than
    :data:`~traceanalyzer.parsers.kineto_events.MAX_JSON_DEPTH` (:func:`check_depth`). Bytes that
    are not UTF-8 are read as U+FFFD, with a warning appended to ``warnings``.
    """
    check_depth(raw, path)
    check_memory(len(raw), path)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        err = exc
        if _OUT_OF_MEMORY.search(str(exc)):
            raise out_of_memory(path, len(raw)) from None
        if "UTF-8" in str(exc):
            raw, n = replace_invalid_utf8(raw)
            if n:
                if warnings is not None:
                    warnings.append(utf8_warning(path, n))
                return decode_document(raw, path, cut, warnings)
    else:
        if isinstance(doc, dict):
            check_keys(object_keys(raw), path)
        return _as_document(doc, path), None
    fixed = clean.repair_json(raw)  # a BOM, NaN / Infinity literals (Python's json writes them)
    if fixed is not None:
        raw = fixed
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            err = exc
        else:
            if isinstance(doc, dict):
                check_keys(object_keys(raw), path)
            return _as_document(doc, path), None
    if b'"traceEvents"' not in raw[:1 << 20] and b"traceEvents" not in raw:
        raise InvalidTrace(f"not valid JSON ({_short(err)})", path)
    doc, cut_at = _recover(raw)
    if doc is None:
        raise InvalidTrace(f"invalid JSON that could not be recovered ({_short(err)})", path)
    return _as_document(doc, path), cut_at / max(len(raw), 1)


def check_depth(raw, path: Path) -> None:
    """Refuse a document nested deeper than ``MAX_JSON_DEPTH`` levels. msgspec skips the document
    natively (about 0.6 GB/s) and gives up at Python's recursion limit; only then are the
    brackets walked (:func:`~traceanalyzer.parsers.kineto_events.too_deep`). Run before any
    ``orjson.loads`` of a whole document: orjson releases before 3.9.15 follow any depth and
    overflow the stack (a crash, not an error) somewhere past 100,000 levels."""
    try:
        msgspec.json.decode(raw, type=msgspec.Raw)
    except RecursionError:
        at = too_deep(raw)
        if at is not None:
            raise InvalidTrace(depth_message(at), path) from None
    except msgspec.DecodeError:
        pass  # malformed: the decoders say where


#: orjson's message when an allocation fails while it decodes
_OUT_OF_MEMORY = re.compile(r"(?i)not enough memory|memory allocation|out of memory")

def whole_document_factor(orjson_version: str) -> int:
    """Address space a whole document takes while orjson decodes it, per byte of JSON, beyond
    what the process already holds. Checked before decoding because orjson crashes (a
    segmentation fault, not an error) where an allocation fails.

    Measured with ``annotate`` of 30 and 60 MB traces made by scripts/make_big_trace.py under
    ``RLIMIT_AS``: orjson before 3.11 crashes with 6.2-6.6x the JSON left and succeeds from 7.2x
    (we ask for 8x); from 3.11 orjson first reserves a parse buffer of about 9x the JSON (touched
    only in part: resident memory stays at about 7x), and 3.11.0 crashes with 15x left and
    succeeds from 16x, 3.13.0 from 15x (we ask for 18x)."""
    try:
        major, minor = (int(x) for x in orjson_version.split(".")[:2])
    except ValueError:
        return 18
    return 8 if (major, minor) < (3, 11) else 18


#: :func:`whole_document_factor` of the installed orjson
WHOLE_DOCUMENT_FACTOR = whole_document_factor(getattr(orjson, "__version__", ""))


def _address_space() -> tuple[int | None, int]:
    """(the address-space limit, ``ulimit -v``, in bytes or None when unlimited; the process's
    address space now). (None, 0) where the platform does not say."""
    try:
        import resource  # noqa: PLC0415 - POSIX only

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError, AttributeError):
        return None, 0
    return (None if limit == resource.RLIM_INFINITY or limit < 0 else limit), used


def check_memory(size: int, path: Path) -> None:
    """Refuse, before trying, a whole document of ``size`` bytes that the address-space limit
    cannot hold (:data:`WHOLE_DOCUMENT_FACTOR`): exit 10, saying how much it needs."""
    limit, used = _address_space()
    need = WHOLE_DOCUMENT_FACTOR * size
    if limit is not None and used + need > limit:
        raise OutOfMemory(
            f"not enough memory to read the whole document: {size / 1e6:,.0f} MB of JSON needs about "
            f"{need / 1e9:.1f} GB more while it is decoded, and the address-space limit (ulimit -v) leaves "
            f"{max(limit - used, 0) / 1e9:.1f} GB: raise it to at least {(used + need) // 1024:,} KB "
            f"(ulimit -v {(used + need) // 1024})",
            path,
        )


def out_of_memory(path: Path, size: int) -> OutOfMemory:
    """The error for a document whose decoding ran out of memory: what the whole document needs."""
    return OutOfMemory(
        f"ran out of memory reading the whole document: {size / 1e6:,.0f} MB of JSON needs about "
        f"{WHOLE_DOCUMENT_FACTOR * size / 1e9:.1f} GB more while it is decoded: give the command more memory "
        "(ulimit -v, the job's memory limit)",
        path,
    )


def replace_invalid_utf8(data) -> tuple[bytes, int]:
    """``data`` with every byte sequence that is not UTF-8 replaced by U+FFFD, and how many."""
    fixed = bytes(data).decode("utf-8", errors="replace").encode("utf-8")
    return fixed, fixed.count(b"\xef\xbf\xbd") - bytes(data).count(b"\xef\xbf\xbd")


def utf8_warning(path: Path, n: int) -> str:
    """Said once per file. Not counted: the typed decoder skips the strings of fields it does not
    read without decoding them, so how many are found depends on the path, not on the file."""
    return f"{path}: strings that are not UTF-8 (Latin-1 text in a name?): their invalid bytes read as U+FFFD"


def check_keys(keys: list[str] | None, path: Path) -> None:
    """Refuse a document whose top level repeats a key (``keys`` in order, as written)."""
    if not keys:
        return
    dups = duplicated(keys)
    if dups:
        shown = ", ".join(f"'{k}'" for k in dups[:3])
        what = (
            "a second 'traceEvents' array: the events of one would be silently replaced by the other"
            if "traceEvents" in dups
            else "which value counts is ambiguous"
        )
        raise InvalidTrace(f"top-level key written more than once ({shown}): {what}", path)


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
    decoded events, never the whole document as Python objects. Anything the streaming reader
    does not recognise (a bare-array trace, a corrupt middle, a truncation it cannot repair)
    falls back to the whole-document path (:func:`_parse_whole`), which gives the same result
    and the same error messages. ``progress(n)``: called with the bytes of the file (compressed
    bytes for gzip) read since the last call.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects: the cyclic GC would double the decode time
    try:
        try:
            return _parse_streaming(path, progress)
        except (_Fallback, RecursionError):  # RecursionError: nested deeper than msgspec follows
            return _parse_whole(path)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_whole(path: Path) -> tuple[pl.DataFrame, dict, list[str]]:
    """The whole-document path: decode everything with orjson, then build the frames."""
    raw, cut, read_warnings = inflate.read_all(path, _BLOCK)
    doc, kept = decode_document(raw, path, cut, read_warnings)
    total = len(raw)
    del raw
    events = doc["traceEvents"]
    if not events:
        raise InvalidTrace("trace has no events ('traceEvents' is empty)", path)
    if not all(isinstance(e, dict) for e in events[:1000]):
        raise InvalidTrace("'traceEvents' holds non-object entries", path)
    part = _chunk_frame(raw_frame_from_dicts(events, path), 0)
    del events
    return _finish(path, doc, [part], cut, kept, total, read_warnings)


class _Part:
    """What one chunk of events gives: canonical events, the counts :func:`clean.judge` needs,
    and the raw begin/end (``B``/``E``) rows, paired over the whole file in :func:`_finish`."""

    __slots__ = ("frame", "counts", "begin_end")

    def __init__(self, frame: pl.DataFrame, counts: dict, begin_end: pl.DataFrame):
        self.frame, self.counts, self.begin_end = frame, counts, begin_end


def _chunk_frame(decoded: tuple[pl.DataFrame, int, int], first: int) -> _Part:
    """Canonical events (start/end relative to the base time, added in :func:`_finish`) of a
    chunk's raw frame (:mod:`~traceanalyzer.parsers.kineto_events`: the rows of complete and
    begin/end events, the number of events, those without ``ph``) whose first event is event
    number ``first`` of the file."""
    raw, n, no_ph = decoded
    lower_x = int((raw.get_column("ph") == "x").sum())
    if lower_x:
        raw = raw.with_columns(normal_ph())
    usable, counts, lower = clean.flag_raw_cats(raw, n=n, no_ph=no_ph)
    counts["lower_x"] = lower_x
    # rows other than complete events are begin/end ones: none (the common case) needs no filter
    be_rows = raw if counts["x"] < raw.height else raw.clear()
    begin_end = be_rows.filter(pl.col("ph").is_in(["B", "E"])).select(
        (pl.col("row") + first).alias("order"), *RAW_SCHEMA
    )
    return _Part(_canonical(usable, 0, lower), counts, begin_end)


def _finish(
    path: Path, doc: dict, parts: list[_Part], cut: bool, kept: float | None, total: int, read_warnings: list[str]
) -> tuple[pl.DataFrame, dict, list[str]]:
    """Concatenate the chunk frames, pair begin/end events, put them on the trace's base time,
    judge what was dropped (:func:`clean.judge`, over the whole file), build meta and warnings."""
    warnings: list[str] = list(read_warnings)
    counts = [p.counts for p in parts]
    frames = [p.frame for p in parts]
    if kept is not None or cut:
        n = sum(c["n"] for c in counts)
        warnings.append(f"{path}: truncated trace (the file ends mid-event): recovered {n} complete events")
    begin_end = [p.begin_end for p in parts if p.begin_end.height]
    if begin_end:
        complete, unpaired = _pair_begin_end(pl.concat(begin_end, how="vertical"))
        if complete.height:
            warnings.append(
                f"{path}: read {complete.height} begin/end ('B'/'E') pairs as complete events "
                "(the begin event's name and args, the end's time)"
            )
            # their B and E rows were counted as events of their chunks already
            usable, paired_counts, lower = clean.flag_raw_cats(complete, n=0, no_ph=0)
            counts.append(paired_counts)
            frames.append(_canonical(usable, 0, lower))
        if unpaired:
            warnings.append(
                f"{path}: ignored {unpaired} begin/end ('B'/'E') events without a partner on their thread"
            )
    total_counts = clean.merge_counts(counts)
    if total_counts.get("lower_x"):
        n_x = total_counts['lower_x']
        warnings.append(f"{path}: read {n_x} event{'s' if n_x != 1 else ''} with 'ph': 'x' (lower-case) as complete ('X') events")
    if total_counts.get("utf8"):
        warnings.append(utf8_warning(path, total_counts["utf8"]))
    warnings.extend(clean.judge(total_counts, path))
    from traceanalyzer.parsers.kineto_log import lost_records

    warnings.extend(lost_records(doc, path))
    base = doc.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) and 0 <= base < 2**62 else 0
    if base not in (None, 0) and not base_ns:
        warnings.append(f"{path}: baseTimeNanoseconds {base!r} is not a time in ns since 1970: ignored")
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


def _pair_begin_end(be: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Complete (``X``) raw rows from the ``B``/``E`` rows of a file, and how many were left
    unpaired.

    Duration events nest per thread (Chrome trace format): on each (pid, tid), in time order
    (file order among equal times), a ``B`` opens a level and an ``E`` closes the innermost
    open one. The depth is a running sum of +1/-1; the k-th ``B`` at a level pairs with the k-th
    ``E`` at that level. The begin event's fields and args are kept; its end is the ``E``'s
    ``ts``. A pair whose end precedes its begin, or with a missing ``ts``, counts as unpaired.
    """
    key = ["pid", "tid"]
    rows = (
        be.with_columns(pl.col("pid").fill_null(""), pl.col("tid").fill_null(""))
        .filter(pl.col("ts").is_not_null() & pl.col("ts").is_finite())
        .sort([*key, "ts", "order"])
        .with_columns(pl.when(pl.col("ph") == "B").then(1).otherwise(-1).alias("__d"))
        .with_columns(pl.col("__d").cum_sum().over(key).alias("__depth"))
        .with_columns(
            pl.when(pl.col("ph") == "B").then(pl.col("__depth")).otherwise(pl.col("__depth") + 1).alias("__level")
        )
        .with_columns(pl.int_range(pl.len()).over([*key, "__level", "ph"]).alias("__k"))
    )
    begins = rows.filter(pl.col("ph") == "B")
    ends = rows.filter(pl.col("ph") == "E").select(*key, "__level", "__k", pl.col("ts").alias("__end"))
    paired = (
        begins.join(ends, on=[*key, "__level", "__k"], how="inner", maintain_order="left")
        .filter(pl.col("__end") >= pl.col("ts"))
        .sort("order")
    )
    complete = paired.with_columns(pl.lit("X").alias("ph"), (pl.col("__end") - pl.col("ts")).alias("dur")).select(
        list(RAW_SCHEMA)
    )
    return complete, be.height - 2 * paired.height


# ---------------------------------------------------------------------------------------------
# streaming: the traceEvents array a chunk at a time

#: decompressed bytes handed over per read; events are decoded about ``_CHUNK`` bytes at a time.
#: Blocks under glibc's mmap threshold (1 MiB in the workers) come from the heap and its pages
#: are reused: 4 MiB blocks were each a fresh mapping (54 MB of gzip: 40,000 page faults, peak
#: 151 MiB; with these, 22,000 and 123 MiB, and 0.32 -> 0.27 s of CPU)
_BLOCK = 1 << 19
_CHUNK = 1 << 24
#: whether the compiled decoder reads a chunk in a thread while the next one is read (the
#: tests compare both ways)
_PIPELINED = True
#: the head (everything before the ``traceEvents`` array) must show up within this many bytes
_HEAD_LIMIT = 1 << 26


class _Fallback(Exception):
    """The streaming reader hands the file to the whole-document path."""


def _last_event_start(buf: bytearray, lo: int, size: int | None = None) -> int:
    """Index of the newline before the last line of ``buf[lo:size]`` (``size``: the bytes of
    ``buf`` in use, all of it by default) that opens an event (its first non-blank character is
    ``{``), or -1. Newlines never occur inside JSON strings, so such a line is a value boundary
    candidate; the decode of each chunk verifies it."""
    size = len(buf) if size is None else size
    end = size
    for _ in range(10_000):  # Kineto writes ~8 lines per event: found within a few steps
        nl = buf.rfind(b"\n", lo, end)
        if nl < 0:
            return -1
        j = nl + 1
        while j < size and buf[j] in (32, 9, 13):
            j += 1
        if j < size and buf[j] == 123:  # "{"
            return nl
        end = nl
    return -1


#: ``native`` of :func:`_events_part` when the compiled decoder has not been tried on the piece
_NOT_TRIED = object()


def _events_part(piece, path: Path, first: int, native=_NOT_TRIED) -> _Part:
    """The part of a JSON array of events (``bytes``-like): the compiled decoder
    (:mod:`~traceanalyzer.parsers.decoder`), else the typed decode, or the dict decoder when
    some value has an unexpected JSON type. Malformed JSON or non-object entries: the
    whole-document path takes over (it reports them in its own words). ``native``: what the
    compiled decoder gave for ``piece`` (None: it left the piece to the Python decoders) when
    the caller ran it already."""
    if native is _NOT_TRIED:
        module = decoder.native()
        native = decode_native(module, piece) if module is not None else None
    typed = native
    if typed is not None:
        part = _chunk_frame(typed, first)
        part.counts["utf8"] = 0
        return part
    bad_utf8 = 0
    try:
        typed = decode_typed(piece)
    except UnicodeDecodeError:  # a string that is not UTF-8 (Latin-1 text in a name...)
        piece, bad_utf8 = replace_invalid_utf8(piece)
        try:
            typed = decode_typed(piece)
        except (msgspec.DecodeError, RecursionError):
            raise _Fallback from None
    except (msgspec.DecodeError, RecursionError):  # RecursionError: the whole-document path measures the depth
        raise _Fallback from None
    if typed is not None:
        part = _chunk_frame(typed, first)
    else:
        try:
            events = orjson.loads(piece)
        except orjson.JSONDecodeError:
            raise _Fallback from None
        if not all(isinstance(e, dict) for e in events[:1000]):
            raise _Fallback
        try:
            part = _chunk_frame(raw_frame_from_dicts(events, path), first)
        except InvalidTrace:
            raise _Fallback from None
    part.counts["utf8"] = bad_utf8
    return part


def _array_end(buf: bytearray, cut: int) -> int:
    """Where ``buf[:cut]`` (``[`` and whole events separated by commas) ends as a JSON array:
    the index after its last event, where the ``]`` goes."""
    j = cut
    while j > 0 and buf[j - 1] in (32, 9, 10, 13):
        j -= 1
    if j > 0 and buf[j - 1] == 44:  # trailing ","
        j -= 1
    return j


def _events_in_place(buf: bytearray, cut: int, path: Path, first: int) -> _Part:
    """The part of ``buf[:cut]`` (``[`` and whole events) decoded where it lies: the byte after
    the last event becomes ``]`` for the decode and gets its value back after it (no copy of
    the chunk)."""
    j = _array_end(buf, cut)
    saved = buf[j]
    buf[j] = 0x5D  # "]"
    try:
        with memoryview(buf) as mv, mv[: j + 1] as piece:  # released on every path: buf changes size next
            return _events_part(piece, path, first)
    finally:
        buf[j] = saved


class _Decoding:
    """A chunk the compiled decoder reads in a thread while the reader fills the other buffer:
    ``buf[:j + 1]`` (``[``, whole events, ``]`` in place of the byte ``saved``)."""

    __slots__ = ("future", "buf", "view", "piece", "j", "saved")

    def __init__(self, pool, module, buf: bytearray, j: int) -> None:
        self.buf, self.j, self.saved = buf, j, buf[j]
        buf[j] = 0x5D  # "]"
        self.view = memoryview(buf)
        self.piece = self.view[: j + 1]
        self.future = pool.submit(decode_native, module, self.piece)

    def decoded(self, path: Path, first: int):
        """Wait for the decode; the chunk's raw frame, or (rarely) its whole part by the Python
        decoders, which read the bytes here and now (its first event is event ``first``). The
        buffer is free afterwards."""
        try:
            native = self.future.result()
            return native if native is not None else _events_part(self.piece, path, first, native=None)
        finally:
            self.release()

    def release(self) -> None:
        self.piece.release()
        self.view.release()
        self.buf[self.j] = self.saved


def _part_of(decoded, path: Path, first: int) -> _Part:
    """The part of a chunk from :meth:`_Decoding.decoded`: the one the Python decoders made, or
    the compiled decoder's frame made into one (:func:`_events_part`, the bytes not needed)."""
    return decoded if isinstance(decoded, _Part) else _events_part(None, path, first, native=decoded)


def _parse_streaming(path: Path, progress: Callable[[int], None] | None = None) -> tuple[pl.DataFrame, dict, list[str]]:
    stream = inflate.Stream(path, _BLOCK, progress=progress, reuse=inflate.REUSE)
    blocks = inflate.prefetched(stream.blocks())
    try:
        return _parse_blocks(path, stream, blocks)
    finally:
        blocks.close()  # stops the reader thread when we leave early


def _parse_blocks(path: Path, stream: inflate.Stream, blocks) -> tuple[pl.DataFrame, dict, list[str]]:
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
    head_text = bytes(buf[: arr + 1]) + b"]}"
    try:
        head = orjson.loads(head_text)
    except orjson.JSONDecodeError:
        raise _Fallback from None
    if not isinstance(head, dict) or head.get("traceEvents") != []:
        raise _Fallback
    head_keys = object_keys(head_text)
    check_keys(head_keys, path)
    # buf[0] is "[" from here on (the array's own, then the one put in place of the byte before
    # each cut), so every chunk is decoded in place as a JSON array
    offset = arr + 1  # bytes of the file before buf[1]
    del buf[:arr]
    # 2. the events, a chunk at a time, cut before a line that opens an event. ``buf[:size]``
    # holds them: one buffer for the whole file that only grows, the rest moved to its front
    # after each chunk (a bytearray shrunk after each chunk and grown again faulted in fresh
    # pages: some 13,000 page faults per 54 MB)
    parts: list[_Part] = []
    n_events = 0
    searched = 0
    size = len(buf)
    # with the compiled decoder (which lets go of the interpreter while it parses) and a core
    # to spare (polars has more than one thread here: one file analysed in the command's own
    # process, not a pool worker of a busy machine), a chunk is decoded in a thread while this
    # one frames the chunk before it and reads the next one into a second buffer (the two take
    # turns); the parts come out in the file's order as before. 200 MB in one process: the parse
    # 0.48 -> 0.36 s, the whole command 1.89 -> 1.75 s; in two busy workers it would cost more
    # than it saves (page faults of the second buffer)
    module = decoder.native()
    pool = None
    if module is not None and _PIPELINED and pl.thread_pool_size() > 1:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="traceanalyzer-decode")
    spare: bytearray | None = bytearray()
    decoding: _Decoding | None = None
    blocks = iter(blocks)
    try:
        while True:
            try:
                block = next(blocks)
            except StopIteration:
                break
            except Exception:
                # an error reading further (a corrupt gzip member...) comes after what the chunk
                # being decoded gives, as when the chunks were decoded one after the other
                if decoding is not None:
                    pending, decoding = decoding, None
                    pending.decoded(path, n_events)
                raise
            # past the buffer's end the assignment grows it (it only grows: its pages are
            # reused); no zeros written first
            buf[size : size + len(block)] = block
            size += len(block)
            if size - 1 < _CHUNK:
                continue
            cut = _last_event_start(buf, max(0, searched - 64), size)
            searched = size
            if cut <= 1:
                continue
            rest = size - (cut - 1)
            if pool is None:
                part = _events_in_place(buf, cut, path, n_events)
                parts.append(part)
                n_events += part.counts["n"]
                buf[:rest] = buf[cut - 1 : size]  # the slice is a copy: no overlap
                buf[0] = 0x5B  # "["
            else:
                before = None
                if decoding is not None:  # the chunk before: decoded, its buffer free again
                    pending, decoding = decoding, None
                    before, spare = pending.decoded(path, n_events), pending.buf
                assert spare is not None
                spare[:rest] = buf[cut - 1 : size]  # the rest goes to the front of the other buffer
                spare[0] = 0x5B  # "["
                decoding = _Decoding(pool, module, buf, _array_end(buf, cut))
                buf, spare = spare, None
                if before is not None:  # framed while the thread decodes this chunk
                    part = _part_of(before, path, n_events)
                    parts.append(part)
                    n_events += part.counts["n"]
            offset += cut - 1
            size = rest
            searched = 0
        if decoding is not None:
            pending, decoding = decoding, None
            part = _part_of(pending.decoded(path, n_events), path, n_events)
            parts.append(part)
            n_events += part.counts["n"]
    finally:
        if pool is not None:
            pool.shutdown(wait=False)
    del buf[size:]
    # 3. the last events and the keys after the array (or a truncated end)
    total = stream.total
    kept = None
    with memoryview(buf) as mv:
        done = _tail(mv, path, n_events)
    if done is not None:
        part, rest_keys, rest = done
        if part is not None:
            parts.append(part)
        check_keys([*head_keys, *rest_keys] if head_keys is not None else None, path)
        doc = {**{k: v for k, v in head.items() if k != "traceEvents"}, **rest}
    else:  # a truncated (or odd) end: today's recovery over the dicts of the last chunk
        prefix = b'{"traceEvents":['
        last = prefix[:-1] + bytes(buf)  # buf starts with the "["
        del buf
        try:
            tail = orjson.loads(last)
        except orjson.JSONDecodeError as exc:
            if "UTF-8" in str(exc):
                raise _Fallback from None  # not a truncation: the whole-document path reads it
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
                parts.append(_chunk_frame(raw_frame_from_dicts(events, path), n_events))
            except InvalidTrace:
                raise _Fallback from None
        del events
        doc = {**{k: v for k, v in head.items() if k != "traceEvents"}, **tail}
    if not parts:
        raise _Fallback  # no events: the whole-document path says so in its own words
    return _finish(path, doc, parts, stream.cut, kept, total, stream.warnings)


def _tail(piece: memoryview, path: Path, first: int) -> tuple[_Part | None, list[str], dict] | None:
    """The last events (``piece``: ``[``, events, the array's ``]``, the keys after it, ``}``), the keys
    after the array as written (repetitions included, for :func:`check_keys`) and their values;
    None when ``piece`` is not exactly that (a truncated or malformed end: the caller recovers).

    Where the array ends: Kineto writes a few keys after it (``"traceName"``), so the last ``]``
    of the piece is tried first, and taken when the compiled decoder reads everything before it as
    one whole JSON array (only the array's own closing bracket can end one that begins at the
    piece's ``[``) and the rest reads as the object's last keys; the events are then decoded once.
    Otherwise it is where ``msgspec`` reports trailing characters after skipping the array (a
    second parse of the last chunk)."""
    native = decoder.native()
    if native is not None:
        close = bytes(piece[-4096:]).rfind(b"]") if len(piece) > 4096 else bytes(piece).rfind(b"]")
        if close >= 0:
            end = close + max(0, len(piece) - 4096)
            rest = _after_array(piece, end + 1)
            if rest is not None:
                typed = decode_native(native, piece[: end + 1])
                if typed is not None:
                    part = _chunk_frame(typed, first)
                    part.counts["utf8"] = 0
                    keys, values = rest
                    return (part if part.counts["n"] else None), keys, values
    try:
        msgspec.json.decode(piece, type=msgspec.Raw)
        return None  # the array closes the input: no "}" after it
    except RecursionError:
        raise _Fallback from None  # nested deeper than msgspec follows: the whole-document path measures it
    except msgspec.DecodeError as exc:
        msg = str(exc)
    tag = "trailing characters (byte "
    at = msg.find(tag)
    if at < 0:
        return None
    trail = int(msg[at + len(tag) : msg.index(")", at)]) - 1
    end = trail - 1
    while end > 0 and piece[end] in (32, 9, 10, 13):
        end -= 1
    if piece[end] != 0x5D:  # "]"
        return None
    rest = _after_array(piece, end + 1)
    if rest is None:
        return None
    keys, values = rest
    part = _events_part(piece[: end + 1], path, first)
    return (part if part.counts["n"] else None), keys, values


def _after_array(piece: memoryview, at: int) -> tuple[list[str], dict] | None:
    """The keys (as written, repetitions included) and values of what follows the events array
    from ``piece[at]`` on: blanks, then ``}`` alone, or ``,`` and the object's last keys and its
    ``}``; None when it is not that."""
    trail = at
    while trail < len(piece) and piece[trail] in (32, 9, 10, 13):
        trail += 1
    if trail >= len(piece) or piece[trail] not in (0x2C, 0x7D):
        return None
    obj = b"{" + bytes(piece[trail + 1 :]) if piece[trail] == 0x2C else bytes(piece[trail:])
    if obj[:1] == b"}":
        if obj[1:].strip():
            return None
        return [], {}
    keys = object_keys(obj)
    if keys is None:
        return None
    try:
        values = orjson.loads(obj)
    except orjson.JSONDecodeError:
        return None
    return keys, values


def _ns(ts: pl.Expr) -> pl.Expr:
    """Float microseconds -> int64 nanoseconds without losing integer epoch precision."""
    whole = ts.floor()
    return whole.cast(pl.Int64) * 1000 + ((ts - whole) * 1000).round().cast(pl.Int64)


def _canonical(raw: pl.DataFrame, base_ns: int, lower: dict[str, str]) -> pl.DataFrame:
    """The canonical events of ``raw``: the usable complete events :func:`clean.flag_raw_cats`
    returns (every row a complete event with a finite, non-negative ``ts`` and ``dur``), with
    ``lower``, the lower-case spelling of each of their categories as written (from the same
    call).

    The kinds are looked up per category as written (``lower`` maps the few spellings), so no
    column is lower-cased; the stream of GPU events without an ``args.stream`` (read from their
    ``tid``, a regular expression over every row) is only looked for when there are some."""

    # a column null in every row (most args of most events) is read as one null: not copied
    # into the frame and then replaced by :func:`_nulls_as_scalars`
    empty = {c for c, n in zip(raw.columns, raw.null_count().row(0)) if n == raw.height} if raw.height else set()
    schema = raw.schema

    def a(key: str) -> pl.Expr:
        name = f"args.{key}"
        return pl.lit(None, dtype=schema[name]) if name in empty else pl.col(name)

    # a handful of spellings: compared one by one (no hash of every row), straight to the Enum
    spellings: dict[str, list[str]] = {}
    for cat, low in lower.items():
        if KIND_OF_CAT.get(low, "other") != "other":
            spellings.setdefault(KIND_OF_CAT[low], []).append(cat)
    kind = pl.lit("other", dtype=KIND)
    for k, cats in spellings.items():
        kind = pl.when(pl.any_horizontal(pl.col("cat") == c for c in cats)).then(pl.lit(k, dtype=KIND)).otherwise(kind)
    # MTIA device work: DMA transfers (``dma_request``...) are copies, as HTA's memory-kernel
    # pattern ``^dma`` classifies them, not compute
    mtia = [cat for cat, low in lower.items() if low == "mtia_ccp_events"]
    if mtia:
        kind = pl.when(pl.col("cat").is_in(mtia) & pl.col("name").str.starts_with("dma")).then(pl.lit(MTIA_DMA_KIND, dtype=KIND)).otherwise(kind)
    is_gpu = kind.is_in(GPU_TIMELINE_KINDS)
    start = _ns(pl.col("ts")) + base_ns
    columns = {
        "rank": pl.lit(None, dtype=pl.Int32),
        "kind": kind,
        "pid": pl.col("pid").fill_null(""),
        "tid": pl.col("tid").fill_null(""),
        "stream": pl.when(is_gpu).then(a("stream")),
        "name": pl.col("name").fill_null(""),
        "start_ns": start,
        "end_ns": start + (pl.col("dur") * 1000).round().cast(pl.Int64),
        "correlation": a("correlation"),
        "external_id": pl.coalesce(a("External id"), a("external id")),
        "seq": a("Sequence number"),
        "fwd_tid": a("Fwd thread id"),
        "bytes": a("bytes"),
        "coll_name": a("Collective name"),
        "in_nelems": a("In msg nelems"),
        "out_nelems": a("Out msg nelems"),
        "group_size": a("Group size"),
        "dtype": a("dtype"),
        "pg_name": a("Process Group Name"),
        "pg_desc": a("Process Group Description"),
        "pg_ranks": a("Process Group Ranks"),
        "coll_seq": a("Seq"),
        "src_rank": a("Src Rank"),
        "dst_rank": a("Dst Rank"),
        "input_dims": pl.lit(None, dtype=pl.String) if "input_dims" in empty else pl.col("input_dims"),
        "input_type": pl.lit(None, dtype=pl.String) if "input_type" in empty else pl.col("input_type"),
    }
    # one query, in EVENT_SCHEMA's order and types (what ``conform`` gives)
    df = raw.lazy().select(columns[k].cast(t).alias(k) for k, t in EVENT_SCHEMA.items()).collect(engine=query_engine())
    gpu = pl.col("kind").is_in(GPU_TIMELINE_KINDS)
    if df.select((gpu & pl.col("stream").is_null()).any()).item():
        # GPU events without args.stream (older traces): the stream is the number in the tid
        from_tid = pl.col("tid").str.extract(r"(\d+)").cast(pl.Int64, strict=False)  # "" (no tid): null
        df = df.with_columns(pl.when(gpu).then(pl.coalesce(pl.col("stream"), from_tid)).alias("stream"))
    return _nulls_as_scalars(df)


def _nulls_as_scalars(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with each column that is null in every row held as one null (a polars scalar
    column) instead of a buffer of the chunk's rows: the collective, shape and rank columns of
    most events, whose decoded buffers (8 or 16 bytes per row each, kept by the frame
    otherwise) are freed with the chunk (~75 MiB at 200 MB of JSON). The same values."""
    if not df.height:
        return df
    empty = [c for c, n in zip(df.columns, df.null_count().row(0)) if n == df.height]
    return df.with_columns(pl.lit(None, dtype=df.schema[c]).alias(c) for c in empty) if empty else df


def _meta(doc: dict, path: Path, df: pl.DataFrame, base_ns: int) -> dict:
    dist = doc.get("distributedInfo") if isinstance(doc.get("distributedInfo"), dict) else {}
    props = doc.get("deviceProperties") if isinstance(doc.get("deviceProperties"), list) else []
    # the device this rank used: the most common GPU pid among its kernels
    dev_id = None
    kernels = df.select("kind", "pid").filter(pl.col("kind") == "kernel")  # two columns, not a copy of every kernel row
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
        "device_name": _device_name(dev, dev_id),
        "num_sms": _int(dev.get("numSms")) if dev else None,
        "compute_capability": cc,
        "backend": dist.get("backend"),
        "pytorch_version": _str(doc.get("pytorch_version") or doc.get("torch_version")),
        "cuda_version": _str(doc.get("cuda_runtime_version") or doc.get("hip_runtime_version")),
        "nccl_version": _str(dist.get("nccl_version")),
        "base_time_ns": base_ns if base_ns else None,
        "pg_config": orjson.dumps(pg).decode() if pg is not None else None,
    }


def _device_name(dev: dict | None, dev_id: object) -> str | None:
    """The device's name; a fallback that says so when the trace leaves it empty (some ROCm
    traces do), with the architecture when the trace gives it."""
    if not dev:
        return None
    name = _str(dev.get("name"))
    if name and name.strip():
        return name
    arch = _str(dev.get("gcnArchName") or dev.get("arch"))
    ident = dev.get("id", dev_id)
    return f"GPU {ident} (name not recorded{', ' + arch if arch else ''})"


def _int(v: object) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def single_process(metas: list[dict]) -> None:
    """A job of one rank file with no ``distributedInfo`` (no rank, world size, backend or
    process groups) ran without ``torch.distributed``: its world size is 1, set in place. The
    profiler writes ``distributedInfo`` whenever the process group is initialised, so one file
    without it is a single-GPU run; several such files keep a world size of null (they may be
    some of a job's ranks, recorded without it)."""
    if len(metas) == 1:
        m = metas[0]
        if all(m.get(k) is None for k in ("world_size", "backend", "pg_config")) and not m.get("world_size_dropped"):
            m["world_size"] = 1


def meta_frame(rows: list[dict]) -> pl.DataFrame:
    return conform(pl.DataFrame(rows, schema_overrides=META_SCHEMA, strict=False), META_SCHEMA) if rows else pl.DataFrame(schema=META_SCHEMA)
