"""Kineto ``[memory]`` instant events -> one polars frame (the allocator's own record).

PyTorch writes one instant event per caching-allocator allocation or free when the profiler
runs with ``profile_memory=True``::

    {"ph": "i", "name": "[memory]", "ts": ..., "args": {"Device Type": 1, "Device Id": 0,
     "Addr": ..., "Bytes": 5242880, "Total Allocated": ..., "Total Reserved": ...}}

``Bytes`` is negative for a free; ``Total Allocated`` / ``Total Reserved`` are the allocator's
counters for that device after the event (``torch.cuda.memory_allocated`` /
``memory_reserved``). Device type 1 is CUDA (ROCm traces use it too), 0 the CPU.

Public surface: :func:`read_memory_events` (one file -> frame of :data:`MEMORY_SCHEMA`, on the
same time base as the file's canonical events). The canonical event frames do not carry these
instants (they hold timed events only); the memory commands read them here, from the same
inflated bytes the Kineto parser reads.
"""

from __future__ import annotations

from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Annotated

import msgspec
import polars as pl

from traceanalyzer.errors import InvalidTrace
from traceanalyzer.parsers import inflate
from traceanalyzer.parsers.kineto_events import is_utf8

#: columns of the memory-event frame (``ts_ns``: integer ns on the trace's base time)
MEMORY_SCHEMA: dict[str, pl.DataType] = {
    "ts_ns": pl.Int64,
    "device_type": pl.Int32,
    "device_id": pl.Int32,
    "addr": pl.Int64,
    "bytes": pl.Int64,
    "total_allocated": pl.Int64,
    "total_reserved": pl.Int64,
}
DEVICE_TYPES = {0: "cpu", 1: "cuda"}

_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
# any JSON scalar: a string or float where an integer belongs (ROCm writes some) becomes null
_NUM = _I64 | float | str | None


class _MemArgs(msgspec.Struct, frozen=True, gc=False):
    device_type: _NUM = msgspec.field(default=None, name="Device Type")
    device_id: _NUM = msgspec.field(default=None, name="Device Id")
    addr: _NUM = msgspec.field(default=None, name="Addr")
    nbytes: _NUM = msgspec.field(default=None, name="Bytes")
    allocated: _NUM = msgspec.field(default=None, name="Total Allocated")
    reserved: _NUM = msgspec.field(default=None, name="Total Reserved")


_NO_ARGS = _MemArgs()


class _Event(msgspec.Struct, gc=False):
    name: str | None = None
    ts: _NUM = None
    args: _MemArgs | None = _NO_ARGS


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []  # noqa: N815 (the Chrome trace key)
    baseTimeNanoseconds: _NUM = None  # noqa: N815


_DOC = msgspec.json.Decoder(_Doc)
_ARRAY = msgspec.json.Decoder(list[_Event])
_ARG_FIELDS = ("device_type", "device_id", "addr", "nbytes", "allocated", "reserved")


def _ns(ts: pl.Expr) -> pl.Expr:
    """Float microseconds -> int64 nanoseconds, as the Kineto parser converts them."""
    whole = ts.floor()
    return whole.cast(pl.Int64) * 1000 + ((ts - whole) * 1000).round().cast(pl.Int64)


def _column(values, dtype: pl.DataType) -> pl.Series:
    """Mixed JSON scalars -> ``dtype``; what is not a number becomes null."""
    try:
        return pl.Series(values, dtype=dtype, strict=True)
    except (TypeError, OverflowError, pl.exceptions.PolarsError):
        text = pl.Series(list(map(str, values)), dtype=pl.String)
        return text.cast(pl.Float64, strict=False).cast(dtype, strict=False)


def _decode(raw: bytes, path: Path) -> tuple[list, object]:
    """The events and ``baseTimeNanoseconds`` of a document (or bare array). Nested deeper than
    msgspec follows: refused past ``MAX_JSON_DEPTH``, else decoded by orjson and converted."""
    array = raw.lstrip()[:1] == b"["
    try:
        if array:
            return _ARRAY.decode(raw), None
        doc = _DOC.decode(raw)
    except RecursionError:
        import orjson  # noqa: PLC0415

        from traceanalyzer.parsers.kineto_events import depth_message, too_deep  # noqa: PLC0415

        at = too_deep(raw)
        if at is not None:
            raise InvalidTrace(depth_message(at), path) from None
        # within the limit: safe for orjson; msgspec converts without recursing into skipped values
        obj = orjson.loads(raw.decode("utf-8", errors="replace").encode("utf-8"))
        if array:
            return msgspec.convert(obj, list[_Event]), None
        doc = msgspec.convert(obj, _Doc)
    return doc.traceEvents, doc.baseTimeNanoseconds


def read_memory_events(path: str | Path, base_ns: int | None = None) -> pl.DataFrame:
    """The ``[memory]`` events of one Kineto file, in file order (:data:`MEMORY_SCHEMA`).

    ``base_ns``: the base time the file's canonical events were put on (``meta.base_time_ns``);
    default: the file's own ``baseTimeNanoseconds`` (0 when it has none: epoch microseconds).
    A file without memory events gives an empty frame. Invalid JSON is exit 4 naming the file.
    Decoded natively by ``msgspec`` Structs naming only these fields; the memory events are
    picked by a C-level ``compress`` (no Python loop over events).
    """
    path = Path(path)
    raw, _cut, _warnings = inflate.read_all(path)
    if b'"[memory]"' not in raw:
        return pl.DataFrame(schema=MEMORY_SCHEMA)
    try:
        try:
            events, file_base = _decode(raw, path)
        except (UnicodeDecodeError, msgspec.DecodeError):
            if is_utf8(raw):
                raise
            # names that are not UTF-8: read as U+FFFD, as the trace reader does
            raw = raw.decode("utf-8", errors="replace").encode("utf-8")
            events, file_base = _decode(raw, path)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidTrace(f"cannot read the memory events ({str(exc).splitlines()[0][:120]})", path) from None
    names = pl.Series(list(map(attrgetter("name"), events)), dtype=pl.String)
    mem = list(compress(events, (names == "[memory]").fill_null(False).to_list()))
    args = [a if a is not None else _NO_ARGS for a in map(attrgetter("args"), mem)]
    cols = {"ts": _column(list(map(attrgetter("ts"), mem)), pl.Float64)}
    if mem:
        for key, values in zip(_ARG_FIELDS, zip(*map(attrgetter(*_ARG_FIELDS), args))):
            cols[key] = _column(list(values), pl.Int64)
    else:
        cols.update({k: pl.Series(k, [], dtype=pl.Int64) for k in _ARG_FIELDS})
    base = base_ns if base_ns is not None else (_column([file_base], pl.Int64)[0] or 0)
    df = pl.DataFrame(cols).filter(pl.col("ts").is_not_null() & pl.col("ts").is_finite())
    return df.select(
        (_ns(pl.col("ts")) + base).alias("ts_ns"),
        pl.col("device_type").cast(pl.Int32, strict=False),
        pl.col("device_id").cast(pl.Int32, strict=False),
        pl.col("addr"),
        pl.col("nbytes").alias("bytes"),
        pl.col("allocated").alias("total_allocated"),
        pl.col("reserved").alias("total_reserved"),
    )
