"""The compiled Kineto decoder (``traceanalyzer.parsers._kineto``) against the Python decoders, the
reference: the same frames (exactly: every value, dtype and row) on every fixture and every real
trace under ``../shared/traces``, the same exit code and stderr on every entry of the bad-input
corpus, and, on generated events and byte mutations of real traces, the same raw frame or a
hand-over to the Python decoder (``None``), never a different answer.

Skipped where the extension is not built (``python setup.py build_ext --inplace``).
"""

from __future__ import annotations

import gzip

import orjson
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from traceanalyzer.cli import main
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.parsers import decoder
from traceanalyzer.parsers import kineto
from traceanalyzer.parsers.kineto_events import (
    ARG_SCHEMA,
    OTHER_PHASES,
    decode_native,
    decode_typed,
    raw_frame_from_dicts,
)

from conftest import FIXTURES, TRACES, write_bad_corpus

native = decoder._compiled()
pytestmark = pytest.mark.skipif(native is None, reason="the compiled decoder is not built (python setup.py build_ext --inplace)")

KINETO_FIXTURES = sorted((FIXTURES / "kineto").rglob("*.json.gz"))
REAL = sorted(p for p in TRACES.rglob("*.json*") if p.name.endswith((".json", ".json.gz")) and "truth" not in p.name) if TRACES.exists() else []


def _parse(path, which: str, monkeypatch):
    """(frame, meta, warnings) or the error's (type, exit code, message) with decoder ``which``."""
    monkeypatch.setenv("TRACEANALYZER_DECODER", which)
    try:
        return kineto.parse_file(path)
    except TraceAnalyzerError as exc:
        return (type(exc).__name__, exc.exit_code, str(exc))


def _same(a, b) -> None:
    assert type(a) is type(b)
    if isinstance(a, tuple) and isinstance(a[0], pl.DataFrame):
        assert_frame_equal(a[0], b[0], check_exact=True)
        assert a[1:] == b[1:]
    else:
        assert a == b


@pytest.mark.parametrize("path", KINETO_FIXTURES, ids=lambda p: p.name[:40])
def test_fixtures_give_the_same_frames(path, monkeypatch):
    _same(_parse(path, "native", monkeypatch), _parse(path, "python", monkeypatch))


@pytest.mark.skipif(not REAL, reason=f"shared traces not found at {TRACES}")
@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(TRACES))[-60:])
def test_real_traces_give_the_same_frames(path, monkeypatch):
    _same(_parse(path, "native", monkeypatch), _parse(path, "python", monkeypatch))


def _events_text(path) -> bytes:
    return orjson.dumps(orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"])


@pytest.mark.parametrize("path", KINETO_FIXTURES, ids=lambda p: p.name[:40])
def test_the_compiled_decoder_takes_every_fixture(path):
    """Whole event arrays of every Kineto variant (legacy 2021, ROCm with "0x0" in numeric args,
    MTIA, CPU-only...) are decoded natively, not handed back, and equal the typed decoder's."""
    text = _events_text(path)
    got, want = decode_native(native, text), decode_typed(text)
    assert got is not None and want is not None
    assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1:] == want[1:]


def _reference(text: bytes):
    """The Python decoders' raw frame of ``text``, or "malformed" (what the streaming parser
    hands to the whole-document path)."""
    import msgspec

    try:
        typed = decode_typed(text)
    except msgspec.DecodeError:
        return "malformed"
    if typed is not None:
        return typed
    try:
        events = orjson.loads(text)
    except orjson.JSONDecodeError:
        return "malformed"
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        return "malformed"
    try:
        return raw_frame_from_dicts(events, "x")
    except TraceAnalyzerError:
        return "malformed"


def _check(text: bytes) -> None:
    got = decode_native(native, text)
    if got is None:  # handed back: the Python decoders decide, as they always did
        return
    want = _reference(text)
    assert not isinstance(want, str), "the compiled decoder took input the reference calls malformed"
    assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1:] == want[1:]


def test_hand_made_edge_cases():
    cases = [
        b"[]",
        b' [ ] ',
        b'[{"ph":"X","ts":1.0005,"dur":0.0015,"pid":-0,"tid":"t\\u00e9\\ud83d\\ude00"}]',
        b'[{"ph":"x","ts":-1e-7,"dur":1E2,"pid":9223372036854775807,"tid":-9223372036854775808}]',
        b'[{"ph":"X","ts":12345678901234567890,"dur":1}]',  # beyond int64: a float
        b'[{"ph":"X","ts":1712345678901234.567,"dur":0.1,"name":"a\\"b\\\\c\\/\\n"}]',
        b'[{"ph":"X","ts":1,"dur":1,"args":{"stream":"+7","correlation":"0x0","bytes":"-12","device":"","Seq":"007"}}]',
        b'[{"ph":"X","ts":1,"dur":1,"args":{"stream":"1 ","Src Rank":"--1"}}]',
        b'[{"ph":"X","ts":1,"dur":1,"args":{"Input Dims":[[1, 2], []],"External id":3}},{"ph":"i","args":null}]',
        b'[{"ph":"X","ts":1,"dur":1,"ts":2}]',  # a field written twice
        b'[{"ph":"X","ts":1,"dur":1,"args":null}]',
        b'[{"ph":"X","ts":true,"dur":1}]',
        b'[{"ph":"X","ts":1,"dur":1,"pid":null}]',
        b'[{"ph":"Q","ts":1,"dur":1}]',
        b'[{"ts":1,"dur":1}]',
        b'[1, {"ph":"X"}]',
        b'[{"ph":"X","ts":1,"dur":1},]',
        b'[{"ph":"X","ts":01,"dur":1}]',
        b'[{"ph":"X","ts":1.,"dur":1}]',
        b'[{"ph":"X","name":"\xff","ts":1,"dur":1}]',
        b'[{"ph":"X","name":"\xed\xa0\x80","ts":1,"dur":1}]',
        b'[{"ph":"X","name":"\\ud800","ts":1,"dur":1}]',
        b'[{"ph":"X","name":"a\tb","ts":1,"dur":1}]',
        b'[{"ph":"X","ts":1e400,"dur":1}]',
        b'[{"ph":"M","args":{"name":[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]}}]',
        b'[{"ph":"X","ts":1,"dur":1}] x',
        b'[{"ph":"X","ts":1,"dur":1}',
    ]
    for text in cases:
        _check(text)
    # the common cases are taken, not handed back; lower-case "x" is handed to the Python decoder,
    # which counts it for its notice
    assert decode_native(native, cases[3]) is None
    for text in cases[:3] + cases[4:7] + cases[8:9]:
        assert decode_native(native, text) is not None, text


def test_hand_made_values_are_exact():
    text = b'[{"ph":"X","cat":"kernel","name":"n","pid":3,"tid":"stream 7","ts":1712345678901234.567,"dur":2,"args":{"stream":"+7","correlation":"0x0"}}]'
    df, n, no_ph = decode_native(native, text)
    assert (n, no_ph, df.height) == (1, 0, 1)
    row = df.row(0, named=True)
    assert row["ph"] == "X" and row["pid"] == "3" and row["tid"] == "stream 7"
    assert row["ts"] == float("1712345678901234.567") and row["dur"] == 2.0
    assert row["args.stream"] == 7 and row["args.correlation"] is None


# -- property tests ---------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False, allow_infinity=False), _text,
    st.sampled_from(["0x0", "+5", "-0", "007", "", " 3", "12a"]),
)
_args = st.dictionaries(st.sampled_from([*ARG_SCHEMA, "Input Dims", "other", "Call stack"]), st.one_of(_scalar, st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=3)), max_size=6)
_event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "x", "B", "E", "i", "f", "M", "Z", *OTHER_PHASES[:3]]),
        "cat": st.one_of(st.sampled_from(["kernel", "cpu_op", "Operator", "gpu_memcpy"]), _scalar),
        "name": st.one_of(st.sampled_from(["aten::mm", "conv2d", "ncclKernel", "x"]), _scalar),
        "pid": _scalar, "tid": _scalar, "ts": _scalar, "dur": _scalar,
        "args": st.one_of(_args, _scalar),
    },
)


# events whose values mostly have the types the frame expects (the decoders' common path)
_i64 = st.integers(-(2**63), 2**63 - 1)
_num = st.one_of(_i64, st.floats(allow_nan=False, allow_infinity=False), st.decimals(allow_nan=False, allow_infinity=False, places=4).map(float))
_typed_args = st.fixed_dictionaries(
    {},
    optional={
        k: st.one_of(st.none(), _i64, st.sampled_from(["0x0", "+5", "-12", "", "n/a"])) if v == pl.Int64 else st.one_of(st.none(), _text)
        for k, v in ARG_SCHEMA.items()
    }
    | {"Input Dims": st.lists(st.lists(st.integers(0, 9), max_size=3), max_size=3), "Call stack": _text},
)
_typed_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "x", "B", "E", "i", "f", "s", "M"])},
    optional={
        "cat": st.one_of(st.none(), st.sampled_from(["kernel", "cpu_op", "Operator", "gpu_memcpy"]), _text),
        "name": st.one_of(st.none(), st.sampled_from(["aten::mm", "conv2d", "ncclKernel", "Einsum"]), _text),
        "pid": st.one_of(_i64, _text), "tid": st.one_of(_i64, _text),
        "ts": st.one_of(st.none(), _num), "dur": st.one_of(st.none(), _num),
        "args": _typed_args,
        "id": _i64,
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_typed_event, _typed_event, _typed_event, _event), max_size=8))
def test_generated_events_give_the_same_raw_frame(events):
    _check(orjson.dumps(events))


_SEED = _events_text(FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz")[:20000]
_SEED = _SEED[: _SEED.rfind(b"},{") + 1] + b"]"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(_SEED) - 1), st.integers(0, 5), st.binary(min_size=1, max_size=3)), min_size=1, max_size=4))
def test_byte_mutations_of_a_real_trace_give_the_same_raw_frame(edits):
    text = bytearray(_SEED)
    for at, how, data in edits:
        at = min(at, len(text) - 1)
        if how >= 4:  # a digit for a digit, a letter for a character: mostly still valid JSON
            c = text[at]
            if 48 <= c <= 57:
                text[at] = 48 + data[0] % 10
            elif 65 <= c <= 122:
                text[at : at + 1] = [b"a", b"Z", b"\\u00e9", b"\xc3\xa9", b"-", b"0", b"x", b"\\n"][data[0] % 8]
        elif how == 0:
            text[at : at + len(data)] = data  # overwrite
        elif how == 1:
            text[at:at] = data  # insert
        elif how == 2:
            del text[at : at + len(data)]  # delete
        else:
            text[at : at + 1] = bytes([text[at] ^ data[0]])  # flip bits
    _check(bytes(text))


# -- the bad-input corpus through the CLI -----------------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad_corpus_native")
    return out, write_bad_corpus(out)["entries"]


def _cli(path, which, cache, monkeypatch, capsys):
    monkeypatch.setenv("TRACEANALYZER_DECODER", which)
    monkeypatch.setenv("TRACEANALYZER_CACHE", str(cache))
    capsys.readouterr()
    rc = main(["breakdown", str(path), "-f", "json"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_bad_input_corpus_same_exit_code_and_message(corpus, tmp_path, monkeypatch, capsys):
    root, entries = corpus
    differ = []
    for rel in entries:
        path = root / rel
        a = _cli(path, "native", tmp_path / "n", monkeypatch, capsys)
        b = _cli(path, "python", tmp_path / "p", monkeypatch, capsys)
        if a != b:
            differ.append((rel, a[0], b[0], a[2][:200], b[2][:200]))
    assert not differ, differ
    assert len(entries) > 20


def test_decoder_choice(monkeypatch, capsys):
    monkeypatch.setenv("TRACEANALYZER_DECODER", "python")
    assert decoder.native() is None and decoder.name() == "python"
    monkeypatch.setenv("TRACEANALYZER_DECODER", "native")
    assert decoder.native() is native and decoder.name() == "native"
    monkeypatch.setenv("TRACEANALYZER_DECODER", "fast")
    capsys.readouterr()
    assert main(["breakdown", str(KINETO_FIXTURES[0])]) == 2
    assert capsys.readouterr().err == "traceanalyzer: error: TRACEANALYZER_DECODER: not 'native' or 'python': 'fast'\n"


_TAILS = {
    "as Kineto writes it": b'],\n  "traceName": "benchmark_result_2869224_1695835535_trace.json"\n}\n',
    "nothing after the array": b"]}",
    "a bracket inside the last key's string": b'],\n  "traceName": "run]3.json"\n}',
    "arrays after the array": b'], "extra": [1, [2, 3]], "traceName": "x"}',
    "a key written twice": b'], "traceName": "x", "traceName": "y"}',
    "a long last key without a bracket": b'], "pad": "' + b"z" * 6000 + b'"}',
    "a long last key with brackets": b'], "pad": [' + b"1," * 3000 + b'1]}',
    "a truncated last key": b'], "traceName": "x',
    "a bracket after the object": b'], "traceName": "x"}]',
}


@pytest.mark.parametrize("tail", list(_TAILS), ids=list(_TAILS))
def test_where_the_events_array_ends(tail, tmp_path, monkeypatch):
    # the compiled path finds the array's end from its last "]" when what follows reads as the
    # object's last keys; every other tail takes the reference's way: the same frame, meta,
    # warnings or error from both decoders
    text = gzip.decompress((FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz").read_bytes())
    end = text.rindex(b"]")
    path = tmp_path / "t.json"
    path.write_bytes(text[:end] + _TAILS[tail])
    import msgspec

    scans = []
    decode = msgspec.json.decode

    def spy(data, *args, **kwargs):
        if kwargs.get("type") is msgspec.Raw and len(data) > 100_000:  # the events (the keys' small checks aside)
            scans.append(len(data))
        return decode(data, *args, **kwargs)

    monkeypatch.setattr(msgspec.json, "decode", spy)
    got = _parse(path, "native", monkeypatch)
    fast = not scans  # the array's end found without a second parse of the last chunk
    _same(got, _parse(path, "python", monkeypatch))
    valid = ("as Kineto", "nothing", "a bracket inside", "arrays", "a long")  # whole JSON documents, no key twice
    if tail.startswith(valid):
        assert isinstance(got[0], pl.DataFrame) and got[0].height == 868  # every complete event of the fixture
    # the last "]" is the array's own and what follows reads as the object's last keys (the key
    # written twice is then refused by the key check, as by the reference)
    assert fast == tail.startswith(("as Kineto", "nothing", "a key written twice"))
