"""The typed Kineto decoder, and odd-but-valid or hostile Kineto inputs.

* The frames are the ones the dict decoder (orjson + ``pl.from_dicts``) gave before the typed
  decoder existed: ``tests/data/kineto_frames_frozen.json`` holds, for every fixture, the sha256
  of the frame written as CSV, its schema, meta and warnings, recorded with that decoder by
  ``scripts/kineto_frames_frozen.py`` (``--check`` recomputes them with the dict decoder). The
  script writes nothing unless every frame's kernel, memcpy and memset counts and summed
  durations equal a plain-Python walk over the raw JSON; that check is also a test here.
* Every gzip member is read; ``"ph": "x"`` and ``B``/``E`` pairs are complete events (times
  checked against the decimal text of the input); a top-level key written twice is refused; a
  gzip bomb is refused while streaming, in bounded memory.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyzer.errors import InvalidTrace
from traceanalyzer.parsers import inflate, kineto
from traceanalyzer.parsers.kineto_events import decode_typed, object_keys, raw_frame_from_dicts

from conftest import DEMO, FIXTURES, PYTHONPATH, ROOT, bad_corpus_module, run_cli

FROZEN = json.loads((ROOT / "tests" / "data" / "kineto_frames_frozen.json").read_text())
ROCM = FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz"
BASE = 1_700_000_000_000_000_000


def _digest(path):
    """Today's frame (the decoder in use) as the frozen file's generator digests it."""
    return _generator().digest(path)


@pytest.mark.parametrize("rel", sorted(FROZEN), ids=lambda r: r.rsplit("/", 1)[-1][:40])
def test_frames_equal_the_frozen_reference_of_the_dict_decoder(rel):
    assert _digest(ROOT / rel) == FROZEN[rel]


def _generator():
    spec = importlib.util.spec_from_file_location("kineto_frames_frozen", ROOT / "scripts" / "kineto_frames_frozen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


@pytest.mark.parametrize("rel", sorted(FROZEN), ids=lambda r: r.rsplit("/", 1)[-1][:40])
def test_frozen_frames_hold_every_gpu_event_of_the_raw_json(rel):
    """The independent check the frozen digests were written under: the frame's GPU events,
    counted and summed, equal a plain-Python walk over the JSON; and the generator lists exactly
    the fixtures that are frozen."""
    gen = _generator()
    assert sorted(str(p.relative_to(ROOT)) for p in gen.FIXTURES) == sorted(FROZEN)
    parsed = gen.dict_decoder_frame(ROOT / rel)
    assert gen.frame_gpu_counts(parsed[0]) == gen.plain_gpu_counts(ROOT / rel)
    assert gen.digest(ROOT / rel, parsed) == FROZEN[rel]


def test_input_type_is_the_first_tensor_inputs_element_type_in_both_decoders():
    """``Input type`` of shaped ops: the type at the first position whose dims are a tensor's
    (addmm's bias comes first: ``[[640],[888,2880],...]`` with ``c10::BFloat16``); null elsewhere."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
         "args": {"Input Dims": [[640], [888, 2880], [2880, 640], [], []],
                  "Input type": ["c10::BFloat16", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::_foreach_add_", "pid": 1, "tid": 1, "ts": 4.0, "dur": 1.0,
         "args": {"Input Dims": [[], [], []], "Input type": ["TensorList", "float", "Scalar"]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 6.0, "dur": 1.0,
         "args": {"Input Dims": [[], [4, 4]], "Input type": ["", "float"]}},
    ]
    typed, _, _ = decode_typed(orjson.dumps(events))
    by_dict, _, _ = raw_frame_from_dicts(events, "t.json")
    for df in (typed, by_dict):
        assert df["input_type"].to_list() == ["c10::BFloat16", None, "float"]


@pytest.mark.parametrize("rel", [str(DEMO.relative_to(ROOT)), str(ROCM.relative_to(ROOT))])
def test_frames_equal_the_frozen_reference_in_many_small_chunks(monkeypatch, rel):
    monkeypatch.setattr(kineto, "_CHUNK", 1 << 16)
    monkeypatch.setattr(kineto, "_BLOCK", 1 << 14)
    assert _digest(ROOT / rel) == FROZEN[rel]


def _events_text(path) -> bytes:
    raw = gzip.decompress(path.read_bytes())
    doc = orjson.loads(raw)
    return orjson.dumps(doc["traceEvents"])


@pytest.mark.parametrize("path", [DEMO, ROCM], ids=lambda p: p.name[:20])
def test_typed_and_dict_decoders_give_the_same_raw_frame(path):
    text = _events_text(path)
    typed = decode_typed(text)
    from_dicts = raw_frame_from_dicts(orjson.loads(text), path)
    assert typed is not None
    assert_frame_equal(typed[0], from_dicts[0])
    assert typed[1:] == from_dicts[1:]
    assert typed[0].height < typed[1]  # flow / instant / metadata events are counted, not kept
    if path == ROCM:  # "0x0" strings in numeric args are null, as the dict decoder makes them
        assert typed[0]["args.stream"].null_count() > 0


@pytest.mark.parametrize("odd", [{"bytes": 1.5}, {"stream": True}, {"dtype": 3}, {"correlation": 2**63}])
def test_values_of_other_json_types_go_to_the_dict_decoder(odd):
    events = orjson.loads(_events_text(ROCM))
    k = next(e for e in events if e.get("cat") == "kernel")
    k["args"].update(odd)
    assert decode_typed(orjson.dumps(events)) is None


def test_object_keys_lists_repeated_keys_in_order():
    assert object_keys(b' {"a": [1, {"a": 2}], "b": "}", "a" : null } ') == ["a", "b", "a"]
    assert object_keys(b"{}") == []
    assert object_keys(b'{"a": 1') is None
    assert object_keys(b'[1, 2]') is None
    assert object_keys(b'{"a": 1} x') is None


# ---------------------------------------------------------------------------------------------
# gzip members


def _pretty(doc: dict) -> bytes:
    head = orjson.dumps({k: v for k, v in doc.items() if k != "traceEvents"})[1:-1]
    body = b",".join(b"\n  " + orjson.dumps(e) for e in doc["traceEvents"])
    return b"{" + head + b',\n"traceEvents": [' + body + b"\n]\n}"


def _same_parse(a, b):
    assert_frame_equal(a[0], b[0])
    ma, mb = dict(a[1]), dict(b[1])
    ma.pop("file"), mb.pop("file")
    assert ma == mb


@pytest.mark.parametrize("whole", [False, True], ids=["streaming", "whole-document"])
def test_every_gzip_member_is_read_and_equals_the_concatenated_json(tmp_path, whole):
    text = _pretty(orjson.loads(gzip.decompress(DEMO.read_bytes())))
    plain = tmp_path / "plain.json"
    plain.write_bytes(text)
    cuts = [len(text) // 7, len(text) // 2, len(text) - 100]
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    multi = tmp_path / "multi.json.gz"
    multi.write_bytes(b"".join(gzip.compress(p) for p in parts) + gzip.compress(b""))
    assert gzip.decompress(multi.read_bytes()) == text  # what gzip -dc gives
    parse = kineto._parse_whole if whole else kineto.parse_file
    got, want = parse(multi), parse(plain)
    _same_parse(got, want)
    assert got[2] == [] and got[1]["truncated"] is False
    # the first member alone is a truncated trace: what reading one member used to give
    first = tmp_path / "first.json.gz"
    first.write_bytes(gzip.compress(parts[0]))
    assert parse(first)[0].height < got[0].height / 5


def test_trailing_bytes_after_the_gzip_data_are_counted_in_a_warning(tmp_path):
    raw = gzip.decompress(ROCM.read_bytes())
    p = tmp_path / "junk.json.gz"
    p.write_bytes(gzip.compress(raw) + bytes(100) + b"junk" * 10)
    df, _meta, warns = kineto.parse_file(p)
    assert df.height == kineto.parse_file(ROCM)[0].height
    assert warns == [f"{p}: ignored 40 bytes after the end of the gzip data (not a gzip member)"]


# ---------------------------------------------------------------------------------------------
# phases


def _trace(events: list) -> dict:
    return {"schemaVersion": 1, "traceEvents": events, "baseTimeNanoseconds": BASE}


def _kernel(name, ts, dur, stream=7, corr=1, ph="X"):
    e = {"ph": ph, "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
         "args": {"correlation": corr, "stream": stream, "External id": corr}}
    if dur is not None:
        e["dur"] = dur
    return e


def _load(tmp_path, doc, name="t.json"):
    p = tmp_path / name
    p.write_bytes(_pretty(doc))
    return p, kineto.parse_file(p)


def test_lower_case_x_is_a_complete_event(tmp_path):
    upper = _trace([_kernel("a", 10.5, 2.25), _kernel("b", 20.0, 1.0, corr=2)])
    lower = _trace([_kernel("a", 10.5, 2.25, ph="x"), _kernel("b", 20.0, 1.0, corr=2)])
    _, a = _load(tmp_path, upper, "u.json")
    p, b = _load(tmp_path, lower, "l.json")
    assert_frame_equal(a[0], b[0])
    assert b[0]["start_ns"].to_list() == [BASE + 10_500, BASE + 20_000]
    # read as "X" without changing a number, and said once
    assert a[2] == [] and b[2] == [f"{p}: read 1 event with 'ph': 'x' (lower-case) as complete ('X') events"]


def test_begin_end_pairs_become_complete_events_matched_per_thread(tmp_path):
    def b(name, ts, tid, cat="kernel", **args):
        return {"ph": "B", "cat": cat, "name": name, "pid": 0, "tid": tid, "ts": ts, "args": args}

    def e(ts, tid):
        return {"ph": "E", "pid": 0, "tid": tid, "ts": ts}

    events = [
        # stream 7: back to back kernels, the end of one at the time the next begins
        b("k1", 100.125, 7, correlation=11, stream=7), e(200.5, 7),
        b("k2", 200.5, 7, correlation=12, stream=7), e(300.0, 7),
        # host thread 5: nested ranges, written outer begin, inner begin, inner end, outer end
        b("outer", 50.0, 5, cat="user_annotation"), b("inner", 60.0, 5, cat="user_annotation"),
        e(70.0, 5), e(400.0, 5),
        # a complete kernel on another stream, and an end with no begin on thread 9
        _kernel("k3", 150.0, 10.0, stream=8, corr=13), e(500.0, 9),
    ]
    p, (df, meta, warns) = _load(tmp_path, _trace(events))
    got = {r["name"]: (r["kind"], r["start_ns"] - BASE, r["end_ns"] - BASE) for r in df.iter_rows(named=True)}
    assert got == {
        "k1": ("kernel", 100_125, 200_500),
        "k2": ("kernel", 200_500, 300_000),
        "outer": ("annotation", 50_000, 400_000),
        "inner": ("annotation", 60_000, 70_000),
        "k3": ("kernel", 150_000, 160_000),
    }
    assert df.filter(pl.col("name") == "k1")["correlation"].to_list() == [11]
    # the conversion is said once (4 pairs: k1, k2, outer, inner); the lone end is counted
    assert warns == [
        f"{p}: read 4 begin/end ('B'/'E') pairs as complete events (the begin event's name and args, the end's time)",
        f"{p}: ignored 1 begin/end ('B'/'E') events without a partner on their thread",
    ]


def test_begin_end_pairs_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto, "_CHUNK", 1 << 12)
    monkeypatch.setattr(kineto, "_BLOCK", 1 << 10)
    events = []
    for i in range(200):
        t = 1000.0 * i
        events.append({"ph": "B", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": t,
                       "args": {"correlation": i, "pad": "x" * 40}})
        events.append({"ph": "E", "pid": 0, "tid": 7, "ts": t + 500.25})
    p, (df, _meta, warns) = _load(tmp_path, _trace(events))
    assert warns == [f"{p}: read 200 begin/end ('B'/'E') pairs as complete events (the begin event's name and args, the end's time)"]
    assert df.height == 200
    assert (df["end_ns"] - df["start_ns"]).to_list() == [500_250] * 200
    assert df["correlation"].to_list() == list(range(200))


# ---------------------------------------------------------------------------------------------
# duplicate top-level keys


def _dup_cases(doc: dict) -> dict[str, bytes]:
    text = _pretty(doc)
    half = orjson.dumps(doc["traceEvents"][: len(doc["traceEvents"]) // 2])
    meta = orjson.dumps({k: v for k, v in doc.items() if k != "traceEvents"})[1:-1]
    full = orjson.dumps(doc["traceEvents"])
    return {
        "second_after": text[: text.rstrip().rfind(b"}")] + b',\n"traceEvents": ' + half + b"\n}",
        "second_first_compact": b'{"traceEvents":' + half + b"," + meta + b',"traceEvents":' + full + b"}",
        "base_twice": text[: text.rstrip().rfind(b"}")] + b',\n"baseTimeNanoseconds": 1\n}',
    }


@pytest.mark.parametrize("case", ["second_after", "second_first_compact", "base_twice"])
def test_a_top_level_key_written_twice_is_refused_naming_the_file(tmp_path, case):
    doc = orjson.loads(gzip.decompress(ROCM.read_bytes()))
    p = tmp_path / f"{case}.json"
    p.write_bytes(_dup_cases(doc)[case])
    key = "baseTimeNanoseconds" if case == "base_twice" else "traceEvents"
    for parse in (kineto.parse_file, kineto._parse_whole):
        with pytest.raises(InvalidTrace) as exc:
            parse(p)
        assert str(p) in str(exc.value) and f"'{key}'" in str(exc.value) and "more than once" in str(exc.value)
    r = run_cli("breakdown", p, "-f", "json")
    assert r.returncode == 4 and r.stdout == ""
    assert r.stderr.strip().splitlines() == [f"traceanalyzer: error: {p}: {exc.value.message}"]


# ---------------------------------------------------------------------------------------------
# inflation cap


def _bomb(inflated: int) -> bytes:
    return bad_corpus_module().bomb(inflated)


_MEASURE = """
import resource, subprocess, sys
r = subprocess.run([sys.executable, "-m", "traceanalyzer", "breakdown", sys.argv[1], "-f", "json"],
                   capture_output=True, text=True)
print(r.returncode)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
print(r.stderr.strip())
"""


def test_a_6gib_gzip_bomb_is_refused_under_1gb_of_memory(tmp_path):
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(_bomb(6 << 30))
    assert p.stat().st_size < 7 << 20
    r = subprocess.run([sys.executable, "-c", _MEASURE, str(p)], capture_output=True, text=True, cwd=ROOT,
                       env={**__import__("os").environ, "PYTHONPATH": PYTHONPATH})
    rc, rss_kib, err = r.stdout.split("\n", 2)
    assert int(rc) == 4, err
    assert int(rss_kib) < 1 << 20, f"peak RSS {int(rss_kib) >> 10} MiB"
    assert err.startswith(f"traceanalyzer: error: {p}: gzip data inflates more than 200 times")
    assert "decompression bomb" in err and len(err.splitlines()) == 1


def test_inflation_limits_are_set_by_environment_variables(tmp_path, monkeypatch):
    inflated = len(gzip.decompress(DEMO.read_bytes()))
    monkeypatch.setenv("TRACEANALYZER_MAX_INFLATED", "1M")
    assert inflate.limits() == (200.0, 1 << 20)
    for parse in (kineto.parse_file, kineto._parse_whole):
        with pytest.raises(InvalidTrace, match="inflates to more than 1,048,576 bytes"):
            parse(DEMO)
    monkeypatch.setenv("TRACEANALYZER_MAX_INFLATED", str(inflated))
    assert kineto.parse_file(DEMO)[0].height > 0
    # the ratio applies beyond RATIO_FLOOR bytes only; 0 turns it off
    monkeypatch.setattr(inflate, "RATIO_FLOOR", 1 << 20)
    monkeypatch.setenv("TRACEANALYZER_MAX_INFLATION_RATIO", "2")
    with pytest.raises(InvalidTrace, match="inflates more than 2 times"):
        kineto.parse_file(DEMO)
    monkeypatch.setenv("TRACEANALYZER_MAX_INFLATION_RATIO", "0")
    assert kineto.parse_file(DEMO)[0].height > 0


def test_an_unreadable_limit_is_a_usage_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TRACEANALYZER_MAX_INFLATION_RATIO", "lots")
    with pytest.raises(inflate.BadSetting) as exc:
        kineto.parse_file(DEMO)
    assert exc.value.exit_code == 2 and "TRACEANALYZER_MAX_INFLATION_RATIO" in str(exc.value)


# ---------------------------------------------------------------------------------------------
# absurd timestamps within the trace's span


@pytest.mark.parametrize("src", [ROCM, sorted((FIXTURES / "kineto" / "dlrm-v100-8rank").glob("*.json.gz"))[0]],
                         ids=["base-time", "epoch"])
def test_a_kernel_at_t0_a_minute_before_the_rest_is_dropped_with_a_count(tmp_path, src):
    """Timestamps moved so the trace starts 60 s after its time origin: a kernel copied to t=0 is
    within the 10-minute cluster, but starts a minute before the call that launched it."""
    import traceanalyzer as ta

    doc = orjson.loads(gzip.decompress(src.read_bytes()))
    ev = doc["traceEvents"]
    t0 = min(e["ts"] for e in ev if isinstance(e.get("ts"), (int, float)) and e.get("ph") == "X")
    for e in ev:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] - t0 + 60_000_000
    shifted = tmp_path / "shifted.json"
    shifted.write_bytes(orjson.dumps(doc))
    k = next(e for e in ev if e.get("cat") == "kernel" and e.get("ph") == "X")
    ev.append({**k, "ts": 0})
    stray = tmp_path / "stray.json"
    stray.write_bytes(orjson.dumps(doc))
    a, b = ta.load(shifted), ta.load(stray)
    assert [w for w in b.warnings if "before the runtime call" in w] == [
        f"{stray}: dropped 1 GPU events that start before the runtime call that launched them "
        "(more than 1 ms earlier: absurd timestamps)"
    ]
    assert_frame_equal(ta.breakdown(a), ta.breakdown(b))


def _outcome(path):
    """What the streaming parse of ``path`` gives: its frame, meta and warnings, or its error."""
    try:
        df, meta, warnings = kineto.parse_file(path)
    except Exception as exc:  # noqa: BLE001 - the error is the outcome compared
        return type(exc).__name__, str(exc)
    return df.rows(), meta, warnings


def _damaged_traces(tmp_path):
    """The demo trace as it is and damaged in the ways that change which decoder reads a chunk
    or where the parse stops: a string that is not UTF-8 and a value of the wrong type (the
    compiled decoder leaves those chunks to the Python decoders), malformed JSON in the middle,
    a gzip stream corrupt after malformed JSON, a gzip stream cut short."""
    raw = gzip.decompress(DEMO.read_bytes())
    n = len(raw)
    at = raw.index(b'"ph": "X"', n // 2)
    out = {"plain.json": raw,
           "latin1.json": raw.replace(b'"batched_transpose_16x32_half"', b'"batched_transpose_16x32_half_\xe9"'),
           "wrong-type.json": raw[:at] + raw[at:].replace(b'"ts": ', b'"ts": "x', 1).replace(b', "dur"', b'", "dur"', 1),
           "malformed.json": raw[: n * 2 // 5] + b'{"ph": "X",, }\n' + raw[n * 2 // 5:]}
    bad_gz = bytearray(gzip.compress(out["malformed.json"], 1))
    bad_gz[len(bad_gz) * 4 // 5: len(bad_gz) * 4 // 5 + 64] = bytes(64)
    out["malformed-then-corrupt.json.gz"] = bytes(bad_gz)
    out["cut.json.gz"] = gzip.compress(raw, 1)[: len(gzip.compress(raw, 1)) * 7 // 10]
    paths = []
    for name, data in out.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    return paths


def test_chunks_decoded_in_a_thread_give_what_chunks_decoded_in_turn_give(tmp_path, monkeypatch):
    """The compiled decoder reads each chunk in a thread while the next one is read: in many
    small chunks, on the demo trace whole and damaged, the frames, warnings and errors are those
    of decoding the chunks one after the other. (With the Python decoder, the one this file
    also runs under, both ways decode in turn.)"""
    monkeypatch.setattr(kineto, "_CHUNK", 1 << 16)
    monkeypatch.setattr(kineto, "_BLOCK", 1 << 14)
    outcomes = []
    for path in _damaged_traces(tmp_path):
        monkeypatch.setattr(kineto, "_PIPELINED", True)
        threaded = _outcome(path)
        monkeypatch.setattr(kineto, "_PIPELINED", False)
        in_turn = _outcome(path)
        assert threaded == in_turn, path.name
        outcomes.append((path.name, "error" if isinstance(threaded[0], str) else "frame"))
    # the damage reached the parse: some inputs read, some refused
    assert {o for _, o in outcomes} == {"error", "frame"}, outcomes
