"""Kineto event objects -> the raw columns the parser reads (one chunk of events at a time).

Two decoders give the same frame:

* the typed one (:func:`decode_typed`): ``msgspec`` Structs that name only the fields we read, so
  the decoder skips every other key natively and never builds a Python dict per event; each
  field becomes a column through ``map(attrgetter)`` (C-level iteration, no Python loop);
* the dict one (:func:`raw_frame_from_dicts`): ``orjson`` dicts turned into columns by
  ``pl.from_dicts`` with an explicit schema. It accepts anything JSON can hold and applies the
  historical leniency (a string such as ROCm's ``"0x0"`` where a number belongs becomes null, a
  float where an integer belongs is truncated, non-object ``args`` count as absent).

The typed decoder only accepts chunks whose every value has the JSON type the frame expects
(``msgspec.ValidationError`` otherwise), and the caller then decodes that chunk with the dict
decoder: the frame is the same either way, and odd chunks keep their historical handling.

Raw frame columns: ``ph`` (``"x"`` as written: the parser counts it and reads it as ``"X"``), ``cat``, ``name``, ``pid``, ``tid`` (text),
``ts``, ``dur`` (float µs), one ``args.<key>`` column per entry of :data:`ARG_SCHEMA`, and
``input_dims`` (compact JSON text, shaped ops only), ``input_type`` (the element type Kineto's
``Input type`` gives the first tensor input of a shaped op, e.g. ``c10::BFloat16``).
"""

from __future__ import annotations

import codecs
import json
import re
from itertools import compress
from operator import attrgetter
from typing import Annotated, Union

import msgspec
from msgspec.structs import astuple
import orjson
import polars as pl

from traceanalyzer.errors import InvalidTrace

#: the ``args`` keys we read, with their column types
ARG_SCHEMA: dict[str, pl.DataType] = {
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
#: top-level event fields and their column types
TOP_SCHEMA: dict[str, pl.DataType] = {
    "ph": pl.String,
    "cat": pl.String,
    "name": pl.String,
    "pid": pl.String,
    "tid": pl.String,
    "ts": pl.Float64,
    "dur": pl.Float64,
}
#: every column of a raw frame, in order
RAW_SCHEMA: dict[str, pl.DataType] = {
    **TOP_SCHEMA,
    **{f"args.{k}": v for k, v in ARG_SCHEMA.items()},
    "input_dims": pl.String,
    "input_type": pl.String,
}
#: ops whose ``Input Dims`` we keep (FLOPs counting needs GEMM/conv/attention shapes only)
SHAPED_OPS = r"(?i)(mm|linear|matmul|conv|attention|attn|einsum)"

# ---------------------------------------------------------------------------------------------
# the typed decoder

_I64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_ATTR = {k: "a_" + "".join(ch if ch.isalnum() else "_" for ch in k.lower()) for k in ARG_SCHEMA}
_ATTR["External id"] = "a_external_id_cap"  # the two spellings must not share an attribute

# integer args may hold strings (ROCm writes "0x0" for some): read as text, cast, non-numbers
# become null, as the dict decoder does
_arg_fields = [
    (_ATTR[k], (_I64 | str if v == pl.Int64 else str) | None, msgspec.field(default=None, name=k))
    for k, v in ARG_SCHEMA.items()
]
_NO_RAW = msgspec.Raw()  # a Raw cannot be in a union with None: empty means "absent"
_arg_fields.append(("a_input_dims", msgspec.Raw, msgspec.field(default=_NO_RAW, name="Input Dims")))
_arg_fields.append(("a_input_type", msgspec.Raw, msgspec.field(default=_NO_RAW, name="Input type")))
_Args = msgspec.defstruct("_Args", _arg_fields, frozen=True, gc=False)
_NO_ARGS = _Args()


_EVENT_FIELDS = [
    ("cat", str | None, None),
    ("name", str | None, None),
    # a missing pid/tid is "" (the canonical frame fills nulls with "" anyway), so that the
    # column is ``map(str, ...)`` of ints and strings; an explicit null goes to the dict decoder
    ("pid", _I64 | str, ""),
    ("tid", _I64 | str, ""),
    ("ts", float | None, None),
    ("dur", float | None, None),
    ("args", _Args, _NO_ARGS),
]
#: the phases whose events become rows (complete, begin, end); the others only count
KEPT_PHASES = ["X", "B", "E"]
#: every other phase of the Chrome trace event format (flow, instant, counter, async, sample,
#: object, metadata, memory dump, mark, context): decoded as an empty Struct, so the decoder
#: skips their fields natively and builds nothing for them. A phase outside both lists (or an
#: event without ``ph``) is a ``ValidationError``: that chunk goes to the dict decoder.
OTHER_PHASES = ["i", "I", "C", "b", "n", "e", "S", "T", "p", "F", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v", "R", "c", "(", ")"]

#: one Struct type per phase, tagged by ``ph``: the type of a decoded event is its phase
_KEPT_TYPES = {
    ph: msgspec.defstruct(
        f"_Event_{ph}", [(k, t, msgspec.field(default=d)) for k, t, d in _EVENT_FIELDS], tag_field="ph", tag=ph, gc=False
    )
    for ph in [*KEPT_PHASES, "x"]  # "x" (no such phase in the Chrome trace format) is "X" written lower-case
}
_OTHER_TYPES = [msgspec.defstruct(f"_Other_{i}", [], tag_field="ph", tag=ph, gc=False) for i, ph in enumerate(OTHER_PHASES)]
#: the type of a decoded event -> its ``ph`` column value (None: not kept)
_PH_OF_TYPE = {**{t: ph for ph, t in _KEPT_TYPES.items()}, **dict.fromkeys(_OTHER_TYPES)}
_DECODER = msgspec.json.Decoder(list[Union[tuple([*_KEPT_TYPES.values(), *_OTHER_TYPES])]])
_GET_REST = attrgetter(*[k for k in TOP_SCHEMA if k != "ph"], "args")


def is_utf8(data) -> bool:
    """Whether ``data`` (``bytes``-like) is valid UTF-8. A decode error is classified by this,
    not by the exception type: msgspec before 0.23 raises ``UnicodeDecodeError`` on a string
    that is not UTF-8, 0.23 and later ``msgspec.DecodeError``."""
    try:
        codecs.utf_8_decode(data, "strict", True)
    except UnicodeDecodeError:
        return False
    return True


def decode_typed(piece) -> tuple[pl.DataFrame, int, int] | None:
    """The raw frame of a JSON array of events (``bytes``-like) holding the rows of complete and
    begin/end events (``row`` column: the event's index in ``piece``), with the number of events
    and of events without ``ph``; None when some value has a JSON type the typed decoder does
    not take (decode the chunk with :func:`raw_frame_from_dicts` then). Malformed JSON raises
    ``msgspec.DecodeError``, a string that is not UTF-8 ``UnicodeDecodeError`` and a value nested
    deeper than the decoder follows ``RecursionError`` (the caller handles each).

    Fields become columns through C-level iteration (``map`` over ``attrgetter`` /
    ``astuple``, ``zip`` to transpose); the other phases (flow, instant, metadata: a third to a
    half of a Kineto trace) decode into empty Structs (:data:`OTHER_PHASES`), so the decoder
    skips their fields natively and they are only counted.
    """
    try:
        events = _DECODER.decode(piece)
    except msgspec.ValidationError:
        return None
    except msgspec.DecodeError as exc:
        if not is_utf8(piece):
            raise UnicodeDecodeError("utf-8", b"", 0, 1, "a string that is not UTF-8") from exc
        raise
    n = len(events)
    phs = list(map(_PH_OF_TYPE.__getitem__, map(type, events)))
    ph = pl.Series("ph", phs, dtype=pl.String)
    rows = ph.is_not_null().arg_true()
    if rows.len() < n:
        events = list(compress(events, phs))  # the kept phases' values are non-empty strings
        ph = ph.gather(rows)
    del phs
    cols: dict[str, pl.Series] = {"row": rows.cast(pl.Int64), "ph": ph}
    if events:
        *top, args = zip(*map(_GET_REST, events))
        arg_cols = list(zip(*map(astuple, args)))
    else:
        top, arg_cols = [()] * (len(TOP_SCHEMA) - 1), [()] * (len(ARG_SCHEMA) + 2)
    # polars builds every column from the decoded values natively (strict: a value of another
    # type raises TypeError instead of being converted)
    for (k, dtype), values in zip(list(TOP_SCHEMA.items())[1:], top):
        if k in ("pid", "tid"):  # ints (Kineto) or strings ("Spans", "Traces"...), as text
            try:
                cols[k] = pl.Series(k, values, dtype=pl.Int64, strict=True).cast(pl.String)
                continue
            except TypeError:  # strings among them: "" and the names as they are
                values = list(map(str, values))
        cols[k] = pl.Series(k, values, dtype=dtype, strict=True)
    for (k, dtype), values in zip(ARG_SCHEMA.items(), arg_cols):
        name = f"args.{k}"
        try:
            cols[name] = pl.Series(name, values, dtype=dtype, strict=True)
        except TypeError:  # strings among the integers: numbers as text are read, the rest null
            cols[name] = pl.Series(name, values, dtype=pl.String, strict=False).cast(dtype, strict=False)
    df = pl.DataFrame(cols).select("row", *list(RAW_SCHEMA)[:-2])
    dims, types = arg_cols[-2], arg_cols[-1]
    # an event without "ph" is a ValidationError (dict decoder)
    return df.with_columns(_input_dims(df, lambda i: _raw_dims(dims[i]), lambda i: _raw_dims(types[i]))), n, 0


class _ArrowColumn:
    """One column from the compiled decoder: its Arrow C data interface capsules (polars takes
    the buffers over without a copy for numbers)."""

    __slots__ = ("capsules",)

    def __init__(self, capsules):
        self.capsules = capsules

    def __arrow_c_array__(self, requested_schema=None):
        return self.capsules


#: the compiled decoder's columns, in its order (four more follow: the spans of "Input Dims" and
#: "Input type", which the shaped ops' rows decode here)
_NATIVE_COLUMNS = ["row", *list(RAW_SCHEMA)[:-2]]


def decode_native(module, piece) -> tuple[pl.DataFrame, int, int] | None:
    """As :func:`decode_typed`, by the compiled decoder ``module`` (``traceanalyzer.parsers._kineto``):
    the same frame, or None when the piece holds anything it leaves to the Python decoders
    (malformed JSON included: the caller then runs :func:`decode_typed`, which decides)."""
    out = module.decode(piece)
    if out is None:
        return None
    cols, n = out
    series = [pl.Series(_ArrowColumn(c)) for c in cols]
    df = pl.DataFrame([s.alias(k) for s, k in zip(series, _NATIVE_COLUMNS)])
    mv = memoryview(piece)
    spans: dict[int, tuple] = {}

    def gather(idx: list[int]) -> None:  # the spans of the shaped ops' rows, as Python ints at once
        rows = pl.Series(idx, dtype=pl.UInt32)
        spans.update(zip(idx, zip(*(s.gather(rows).to_list() for s in series[-4:]))))

    def dims(i: int) -> object:
        at, length = spans[i][:2]
        return None if at is None else _raw_dims(mv[at : at + length])

    def types(i: int) -> object:
        at, length = spans[i][2:]
        return None if at is None else _raw_dims(mv[at : at + length])

    return df.with_columns(_input_dims(df, dims, types, gather)), n, 0


def _raw_dims(raw) -> object:
    """The value of an ``Input Dims`` / ``Input type`` span (valid JSON: the decoder skipped it).
    orjson refuses some valid JSON (a number beyond a double's range, ``1e400``): Python's
    decoder reads those (``inf``, written back as ``null``)."""
    if not len(raw):
        return None
    try:
        return orjson.loads(memoryview(raw))
    except orjson.JSONDecodeError:
        return json.loads(bytes(raw))


def normal_ph() -> pl.Expr:
    """``"x"`` (no such phase in the Chrome trace format) is a complete event written lower-case."""
    ph = pl.col("ph")
    return pl.when(ph == "x").then(pl.lit("X")).otherwise(ph).alias("ph")


# ---------------------------------------------------------------------------------------------
# the dict decoder


def _bad_field(events: list) -> str | None:
    """The first event field holding an object or an array where a name or a number belongs
    (``"name": {...}``), said by field and event: the error path only, after polars refused the
    rows (its own message shows the value, not where it is)."""
    for i, e in enumerate(events):  # only once the frame could not be built: an error path
        if not isinstance(e, dict):
            continue
        for key in TOP_SCHEMA:
            v = e.get(key)
            if isinstance(v, (dict, list)):
                kind = "an object" if isinstance(v, dict) else "an array"
                return (f"malformed events: event {i} ('ph': {str(e.get('ph'))[:8]!r}) has {kind} for '{key}' "
                        f"(a {'string' if TOP_SCHEMA[key] == pl.String else 'number'} is expected)")
    return None


def raw_frame_from_dicts(events: list, path) -> tuple[pl.DataFrame, int, int]:
    """As :func:`decode_typed`, from event dicts: top-level event fields and the ``args``
    fields we use, built by polars.

    ``args`` are decoded as their own frame: polars would otherwise infer a type for every key
    of every args dict, and some (nested ``Input Dims``...) have no common type.
    """
    try:
        df = _typed_dicts(events, TOP_SCHEMA)
        try:
            arg_dicts = [e.get("args") or {} for e in events]
            args = _typed_dicts(arg_dicts, ARG_SCHEMA)
        except Exception:  # non-object args somewhere: treat them as absent
            arg_dicts = [a if isinstance(a := e.get("args"), dict) else {} for e in events]
            args = _typed_dicts(arg_dicts, ARG_SCHEMA)
    except Exception as exc:  # polars raises several types on malformed rows
        raise InvalidTrace(_bad_field(events) or f"malformed events ({short(exc)})", path) from None
    df = pl.concat([df, args.rename({k: f"args.{k}" for k in ARG_SCHEMA})], how="horizontal")

    def dims(i: int) -> object:
        a = events[i].get("args")
        return a.get("Input Dims") if isinstance(a, dict) else None

    def types(i: int) -> object:
        a = events[i].get("args")
        return a.get("Input type") if isinstance(a, dict) else None

    df = df.with_columns(_input_dims(df, dims, types))
    n, no_ph = df.height, df.get_column("ph").null_count()
    df = df.with_row_index("row").filter(pl.col("ph").is_in([*KEPT_PHASES, "x"]))
    return df.with_columns(pl.col("row").cast(pl.Int64)).select(["row", *RAW_SCHEMA]), n, no_ph


def _typed_dicts(rows: list, schema: dict) -> pl.DataFrame:
    """``pl.from_dicts`` with ``schema``; if some value has the wrong JSON type (a string
    where a number belongs, as ROCm's ``"0x0"``), read every column as text and cast, turning
    values that do not parse into nulls."""
    try:
        return pl.from_dicts(rows, schema=schema, strict=False)
    except Exception:
        text = pl.from_dicts(rows, schema={k: pl.String for k in schema}, strict=False)
        return text.select(pl.col(k).cast(v, strict=False) for k, v in schema.items())


def _input_dims(raw: pl.DataFrame, dims_of, types_of=None, prepare=None) -> list[pl.Series]:
    """``Input Dims`` as compact JSON text, and the element type of the first tensor input
    (``Input type`` at the first position whose dims are a tensor's), for the shaped ops only
    (GEMM, conv, attention).

    Input Dims nests to varying depth (tensor lists), which no single polars dtype holds, so
    the few rows that need it are serialised with orjson, selected by a polars filter. The
    host ops are found by their categories as written (the few distinct spellings are
    lower-cased, not the column), and the values of the shaped ops are put in place by index
    (no Python list as long as the chunk).
    """
    cats = raw.get_column("cat").unique().drop_nulls()
    host = cats.filter(cats.str.to_lowercase().is_in(["cpu_op", "operator"]))
    n = raw.height
    if host.len():
        # the host ops: the phase and each spelling (one or two) compared, no hash of every row
        is_host = pl.any_horizontal(pl.col("cat") == c for c in host)
        ops = raw.select(pl.arg_where(((pl.col("ph") == "X") | (pl.col("ph") == "x")) & is_host)).to_series()
        # the (case-insensitive) name pattern only over the host ops' distinct names (a few
        # hundred): over every row it cost 4x the rest, over every host op twice the rest
        names = raw.get_column("name").gather(ops)
        distinct = names.unique()
        shaped = distinct.filter(distinct.str.contains(SHAPED_OPS))
        idx = ops.filter(names.is_in(shaped.implode())).to_list() if shaped.len() else []
    else:
        idx = []
    if prepare is not None:  # ``prepare(idx)``: before ``dims_of`` / ``types_of`` are asked about those rows
        prepare(idx)
    at: list[int] = []
    values: list[str] = []
    kinds: list[str | None] = []
    dumps = orjson.dumps
    for i in idx:  # the shaped ops only
        dims = dims_of(i)
        if dims is not None:
            at.append(i)
            values.append(dumps(dims).decode())
            kinds.append(_first_tensor_type(dims, types_of(i)) if types_of is not None and isinstance(dims, list) else None)
    if not at:
        return [pl.Series("input_dims", dtype=pl.String).clear(n), pl.Series("input_type", dtype=pl.String).clear(n)]
    where = pl.Series(at, dtype=pl.UInt32)
    out = [pl.Series("input_dims", dtype=pl.String).clear(n).scatter(where, pl.Series(values, dtype=pl.String))]
    if any(k is not None for k in kinds):
        out.append(pl.Series("input_type", dtype=pl.String).clear(n).scatter(where, pl.Series(kinds, dtype=pl.String)))
    else:
        out.append(pl.Series("input_type", dtype=pl.String).clear(n))
    return out


def _first_tensor_type(dims: list, types: object) -> str | None:
    if not isinstance(types, list):
        return None
    for d, t in zip(dims, types):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d) and isinstance(t, str) and t:
            return t
    return None


def short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120]


# ---------------------------------------------------------------------------------------------
# nesting depth

#: the deepest nesting of JSON arrays and objects a trace may hold (a Kineto trace nests fewer
#: than 10 levels). The native decoders recurse once per level and stop at Python's recursion
#: limit (about 1,000 levels, less inside a deep call stack); a document they cannot follow is
#: measured by :func:`too_deep` (no recursion): up to this depth it is decoded by the
#: whole-document path, beyond it refused
MAX_JSON_DEPTH = 1024

_STRUCT = re.compile(rb'["\[\]{}]')
_STRING_REST = re.compile(rb'(?:[^"\\]|\\.)*"', re.S)


def _scan(data, start: int, limit: int) -> tuple[int | None, int]:
    """Walk the brackets of ``data`` from ``start`` (strings skipped): (the byte at which the
    nesting first goes deeper than ``limit``, or None; the index just after the value that opens
    at ``start``, or -1 when it does not close)."""
    depth, pos, n = 0, start, len(data)
    search, string_rest = _STRUCT.search, _STRING_REST.match
    while True:
        m = search(data, pos, n)
        if m is None:
            return None, -1
        c = data[m.start()]
        if c == 0x22:  # '"'
            s = string_rest(data, m.end(), n)
            if s is None:
                return None, -1
            pos = s.end()
            if depth == 0:
                return None, pos
            continue
        pos = m.end()
        if c in (0x5B, 0x7B):  # "[" "{"
            depth += 1
            if depth > limit:
                return m.start(), -1
        else:
            depth -= 1
            if depth <= 0:
                return None, pos


def too_deep(data, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The byte offset at which ``data`` (a JSON document) nests deeper than ``limit`` levels,
    or None. A plain scan of the brackets: slow (used only when a native decoder gives up)."""
    start = _STRUCT.search(data)
    if start is None:
        return None
    return _scan(data, start.start(), limit)[0]


def depth_message(at: int) -> str:
    return (
        f"JSON nested more than {MAX_JSON_DEPTH} levels deep (from byte {at}): refused "
        "(a trace nests fewer than 10 levels)"
    )


# ---------------------------------------------------------------------------------------------
# the keys of a JSON object, duplicates included

_KEY = re.compile(rb'\s*("(?:[^"\\]|\\.)*")\s*:\s*', re.S)


def _skip_value(mv: memoryview, i: int) -> int:
    """Index of the first non-blank character after the JSON value starting at ``mv[i]``, or -1
    when the value is malformed or runs to the end of the input. ``msgspec`` skips the value
    natively (``Raw``: no Python objects) and reports where the trailing characters start."""
    try:
        msgspec.json.decode(mv[i:], type=msgspec.Raw)
    except RecursionError:  # nested deeper than msgspec follows: walk the brackets instead
        _deep, end = _scan(mv, i, MAX_JSON_DEPTH)
        if end < 0:
            return -1
        while end < len(mv) and mv[end] in b" \t\r\n":
            end += 1
        return end if end < len(mv) else -1
    except msgspec.DecodeError as exc:
        msg = str(exc)
        tag = "trailing characters (byte "
        at = msg.find(tag)
        if at < 0:
            return -1
        return i + int(msg[at + len(tag) : msg.index(")", at)]) - 1
    return -1


def object_keys(data) -> list[str] | None:
    """The keys of the JSON object ``data`` holds, in order and with repetitions (a JSON decoder
    keeps only the last of duplicated keys); None when ``data`` is not one well-formed object.
    One step per key: the values are skipped natively (:func:`_skip_value`)."""
    mv = memoryview(data)
    n = len(mv)
    i = 0
    while i < n and data[i] in b" \t\r\n":
        i += 1
    if i >= n or data[i] != 0x7B:  # "{"
        return None
    i += 1
    while i < n and data[i] in b" \t\r\n":
        i += 1
    if i < n and data[i] == 0x7D:
        return []
    keys: list[str] = []
    while True:
        m = _KEY.match(data, i)
        if not m:
            return None
        try:
            keys.append(json.loads(m.group(1)))
        except ValueError:
            return None
        j = _skip_value(mv, m.end())
        if j < 0:
            return None
        if data[j] == 0x2C:  # ","
            i = j + 1
            continue
        if data[j] == 0x7D and not bytes(mv[j + 1 :]).strip():
            return keys
        return None


def duplicated(keys: list[str]) -> list[str]:
    seen: set[str] = set()
    dups: list[str] = []
    for k in keys:
        if k in seen and k not in dups:
            dups.append(k)
        seen.add(k)
    return dups
