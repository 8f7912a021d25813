"""Hostile inputs a new user can produce, each answered as docs/errors.md says.

* a value nested deeper than ``MAX_JSON_DEPTH`` (1024) levels: exit 4 naming the file, on the
  streaming and the whole-document paths; a depth the native decoder cannot follow but within
  the limit is read, with the numbers of the same trace without it;
* a byte that is not UTF-8 in a kernel name: the name read with U+FFFD, one warning naming the
  file, every number equal to the clean trace's;
* step ranges ``ProfilerStep#1``, ``ProfilerStep``, ``ProfilerStep#2``: the unnumbered range is
  analysed as its own step, numbered after the highest number, with a warning (never a claim
  that the file holds two ``ProfilerStep#1``);
* ``ph: "x"`` and ``B``/``E`` kernels: the numbers of the original ``X`` events, said once.
"""

from __future__ import annotations

import gzip
import json

import msgspec
import orjson
import pytest

from traceanalyzer.errors import InvalidTrace
from traceanalyzer.parsers import kineto
from traceanalyzer.parsers.kineto_events import MAX_JSON_DEPTH

from conftest import DEMO, run_cli

BASE = 1_700_000_000_000_000_000


def _tiny(extra_args: dict | None = None, name: str = "k") -> list[dict]:
    """One launch and its kernel (10 µs), in a step."""
    return [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 90.0, "dur": 30.0},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 95.0, "dur": 2.0,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 100.0, "dur": 10.0,
         "args": {"correlation": 1, "stream": 7, **(extra_args or {})}},
    ]


def _write(path, events, bare: bool = False, deep: int = 0) -> None:
    doc = events if bare else {"traceEvents": events, "baseTimeNanoseconds": BASE}
    text = json.dumps(doc, indent=1)
    if deep:
        text = text.replace('"@DEEP@"', "[" * deep + "]" * deep)
    path.write_text(text)


def _numbers(r) -> dict:
    """The breakdown document without what names the input."""
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    for k in ("sources", "warnings", "inputs", "command"):
        doc.pop(k, None)
    for r in doc.get("ranks", []):
        r.pop("file", None)
    return doc


# ---------------------------------------------------------------------------------------------
# nesting


@pytest.mark.parametrize("bare", [False, True], ids=["streaming", "whole-document"])
def test_a_value_nested_3000_levels_deep_is_exit_4_naming_the_file(tmp_path, bare):
    p = tmp_path / "deep.json"
    _write(p, _tiny({"deep": "@DEEP@"}), bare=bare, deep=3000)
    r = run_cli("breakdown", p)
    assert r.returncode == 4, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == ""
    assert lines[0].startswith(f"traceanalyzer: error: {p}: JSON nested more than {MAX_JSON_DEPTH} levels deep")
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    # the parser itself, both paths
    for parse in (kineto.parse_file, kineto._parse_whole):
        with pytest.raises(InvalidTrace, match=f"more than {MAX_JSON_DEPTH} levels"):
            parse(p)


def test_a_million_levels_is_refused_without_reaching_the_json_decoder(tmp_path):
    # orjson before 3.9.15 follows any depth and overflows the stack (a crash) past ~100,000
    p = tmp_path / "deeper.json"
    _write(p, _tiny({"deep": "@DEEP@"}), bare=True, deep=1_000_000)
    r = run_cli("breakdown", p)
    assert r.returncode == 4, r.stderr
    assert f"more than {MAX_JSON_DEPTH} levels" in r.stderr


def test_nesting_within_the_limit_reads_the_numbers_of_the_trace_without_it(tmp_path):
    # 1000 levels: past what msgspec follows under Python's default recursion limit, within ours
    plain, deep = tmp_path / "plain.json", tmp_path / "deep.json"
    _write(plain, _tiny({"deep": []}))
    _write(deep, _tiny({"deep": "@DEEP@"}), deep=1000)
    a, b = run_cli("breakdown", "-f", "json", plain), run_cli("breakdown", "-f", "json", deep)
    assert _numbers(a) == _numbers(b)
    assert b.stderr == a.stderr.replace(str(plain), str(deep))
    assert _numbers(b)["ranks"][0]["steps"][0]["compute_us"] == 10.0  # the one 10 µs kernel


# ---------------------------------------------------------------------------------------------
# bytes that are not UTF-8

NAME = b"batched_transpose_16x32_half"  # 452 kernels of the MI300X demo trace, 791 strings in all


def _latin1_pair(tmp_path):
    raw = gzip.decompress(DEMO.read_bytes())
    assert raw.count(b'"' + NAME + b'"') == 791
    bad = tmp_path / "latin1.json"
    clean = tmp_path / "clean.json"
    # "é" as Latin-1 (one byte 0xE9: not UTF-8) vs the replacement character, written in UTF-8
    bad.write_bytes(raw.replace(b'"' + NAME + b'"', b'"' + NAME + b'_\xe9"'))
    clean.write_bytes(raw.replace(b'"' + NAME + b'"', b'"' + NAME + "_\ufffd\"".encode()))
    return bad, clean


def test_a_latin1_byte_in_a_kernel_name_is_read_as_u_fffd_with_one_warning(tmp_path):
    bad, clean = _latin1_pair(tmp_path)
    for cmd in (["breakdown", "-f", "json"], ["kernels", "-f", "json", "--top", "100000"]):
        a, b = run_cli(*cmd, clean), run_cli(*cmd, bad)
        assert b.returncode == 0, b.stderr
        assert _numbers(a) == _numbers(b)
        extra = [ln for ln in b.stderr.splitlines() if ln not in a.stderr.replace(str(clean), str(bad)).splitlines()]
        assert extra == [
            f"warning: {bad}: strings that are not UTF-8 (Latin-1 text in a name?): their invalid bytes read as U+FFFD"
        ]
    rows = orjson.loads(run_cli("kernels", "-f", "json", "--top", "100000", bad).stdout)["rows"]
    # the name as read (two streams): every call that starts inside a ProfilerStep range, counted
    # from the raw JSON
    doc = orjson.loads(gzip.decompress(DEMO.read_bytes()))
    ranges = [(e["ts"], e["ts"] + e["dur"]) for e in doc["traceEvents"]
              if e.get("ph") == "X" and e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    want = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("name") == NAME.decode()
               and any(a <= e["ts"] < b for a, b in ranges))
    assert 0 < want < 452
    assert sum(r["calls"] for r in rows if r["name"] == NAME.decode() + "_\ufffd") == want


@pytest.mark.parametrize("path", ["streaming", "small-chunks", "whole-document"])
def test_the_frames_with_a_latin1_byte_equal_the_clean_ones_on_every_path(tmp_path, monkeypatch, path):
    bad, clean = _latin1_pair(tmp_path)
    if path == "small-chunks":
        monkeypatch.setattr(kineto, "_CHUNK", 1 << 16)
        monkeypatch.setattr(kineto, "_BLOCK", 1 << 14)
    parse = kineto._parse_whole if path == "whole-document" else kineto.parse_file
    a, b = parse(clean), parse(bad)
    assert a[0].equals(b[0])
    assert a[2] == [] and len(b[2]) == 1 and b[2] == [f"{bad}: strings that are not UTF-8 (Latin-1 text in a name?): their invalid bytes read as U+FFFD"]


def test_a_string_that_is_not_utf8_is_told_apart_from_malformed_json_by_the_bytes(tmp_path):
    """msgspec 0.22 raises UnicodeDecodeError on bytes that are not UTF-8, 0.23 DecodeError: the
    typed decoder and the memory reader classify the failure by the bytes, so either version
    reads the Latin-1 name (as U+FFFD) and still refuses JSON that is malformed."""
    from traceanalyzer.parsers import kineto_events

    assert kineto_events.is_utf8(b'["\xc3\xa9"]') and not kineto_events.is_utf8(b'["\xe9"]')
    with pytest.raises(UnicodeDecodeError):
        kineto_events.decode_typed(b'[{"ph":"X","name":"k_\xe9","ts":1,"dur":2}]')
    with pytest.raises(msgspec.DecodeError):
        kineto_events.decode_typed(b'[{"ph":"X","name":"k","ts":1,"dur":2},')
    # the typed decoder, not the dict fallback, reads the chunk once the bytes are replaced
    fixed, n = kineto.replace_invalid_utf8(b'[{"ph":"X","name":"k_\xe9","ts":1,"dur":2}]')
    frame = kineto_events.decode_typed(fixed)
    assert n == 1 and frame is not None and frame[0]["name"].to_list() == ["k_\ufffd"]


# ---------------------------------------------------------------------------------------------
# step numbers


def _steps_trace(path, names):
    """One step range per name, 100 µs apart, each launching kernels of 5 and 6 µs."""
    ev, c = [], 0
    for i, nm in enumerate(names):
        t = 1000.0 + 100.0 * i
        ev.append({"ph": "X", "cat": "user_annotation", "name": nm, "pid": 1, "tid": 1, "ts": t, "dur": 90.0})
        for j in range(2):
            c += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": t + 1 + 10 * j, "dur": 2.0, "args": {"correlation": c}})
            ev.append({"ph": "X", "cat": "kernel", "name": f"k{j}", "pid": 0, "tid": 7, "ts": t + 5 + 10 * j,
                       "dur": 5.0 + j, "args": {"correlation": c, "stream": 7}})
    path.write_text(json.dumps({"traceEvents": ev, "baseTimeNanoseconds": BASE}, indent=1))


def test_an_unnumbered_step_between_numbered_ones_is_its_own_step_with_a_warning(tmp_path):
    p = tmp_path / "steps.json"
    _steps_trace(p, ["ProfilerStep#1", "ProfilerStep", "ProfilerStep#2"])
    r = run_cli("breakdown", "-f", "json", p)
    assert r.returncode == 0, r.stderr
    assert "appears 2 times" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "warning: rank 0: 1 'ProfilerStep' range without a step number among numbered ones: analysed as its own "
        "step, numbered 3 (after the highest number)"
    ]
    steps = orjson.loads(r.stdout)["ranks"][0]["steps"]
    # by hand: each step is its 90 µs host range (at 1000, 1100, 1200 µs), holding its two
    # kernels of 5 and 6 µs
    assert [(s["step"], s["start_us"] - 1_700_000_000_000_000.0, s["duration_us"], s["compute_us"]) for s in steps] == [
        (1, 1000.0, 90.0, 11.0),
        (3, 1100.0, 90.0, 11.0),
        (2, 1200.0, 90.0, 11.0),
    ]


def test_two_numbered_steps_with_one_number_are_still_refused(tmp_path):
    # the refusal itself stays, where it is true
    p = tmp_path / "dup.json"
    _steps_trace(p, ["ProfilerStep#1", "ProfilerStep#1", "ProfilerStep#2"])
    r = run_cli("breakdown", p)
    assert r.returncode == 4
    assert "step number 1 appears 2 times on rank 0" in r.stderr


def test_steps_all_without_a_number_are_numbered_from_0_silently(tmp_path):
    p = tmp_path / "bare.json"
    _steps_trace(p, ["ProfilerStep", "ProfilerStep", "ProfilerStep"])
    r = run_cli("breakdown", "-f", "json", p)
    assert r.returncode == 0 and r.stderr == ""
    assert [s["step"] for s in orjson.loads(r.stdout)["ranks"][0]["steps"]] == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# conversions that change no number: "x" and B/E kernels


def _demo_with_kernels_as(tmp_path, form: str):
    """The MI300X demo trace with every kernel written as ``ph: "x"`` or as a B/E pair."""
    doc = orjson.loads(gzip.decompress(DEMO.read_bytes()))
    events, n = [], 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            n += 1
            if form == "x":
                events.append({**e, "ph": "x"})
            else:
                begin = {k: v for k, v in e.items() if k != "dur"}
                events.append({**begin, "ph": "B"})
                # the end's time as decimal text: ts + dur exactly as the X event implies
                events.append({"ph": "E", "pid": e["pid"], "tid": e["tid"], "ts": e["ts"] + e["dur"]})
        else:
            events.append(e)
    doc["traceEvents"] = events
    p = tmp_path / f"kernels_{form}.json"
    p.write_bytes(orjson.dumps(doc))
    return p, n


@pytest.mark.parametrize("form", ["x", "BE"])
def test_x_and_begin_end_kernels_give_the_numbers_of_the_x_events_and_say_so_once(tmp_path, form):
    p, n = _demo_with_kernels_as(tmp_path, form)
    a, b = run_cli("breakdown", "-f", "json", DEMO), run_cli("breakdown", "-f", "json", p)
    assert _numbers(a) == _numbers(b)
    ka = run_cli("kernels", "-f", "json", "--top", "100000", DEMO)
    kb = run_cli("kernels", "-f", "json", "--top", "100000", p)
    assert _numbers(ka) == _numbers(kb)
    extra = [ln for ln in b.stderr.splitlines() if ln not in a.stderr.splitlines()]
    assert extra == [
        f"warning: {p}: read {n} events with 'ph': 'x' (lower-case) as complete ('X') events" if form == "x" else
        f"warning: {p}: read {n} begin/end ('B'/'E') pairs as complete events (the begin event's name and args, "
        "the end's time)"
    ]


# ---------------------------------------------------------------------------------------------
# an nsys kernel at time 0 on one rank (the 2-GPU fixture, always present)


def test_an_nsys_kernel_at_time_0_on_one_rank_is_dropped_and_the_rest_equals_the_original(tmp_path):
    import shutil
    import sqlite3

    from traceanalyzer import breakdown
    from traceanalyzer.parsers.nsys import load_nsys

    from conftest import FIXTURES

    src = FIXTURES / "nsys" / "mfu_2gpu_before_cut.sqlite"
    p = tmp_path / "at_zero.sqlite"
    shutil.copy(src, p)
    p.chmod(0o644)
    con = sqlite3.connect(p)
    k = "CUPTI_ACTIVITY_KIND_KERNEL"
    devices = [r[0] for r in con.execute(f"SELECT DISTINCT deviceId FROM {k} ORDER BY 1")]
    assert len(devices) == 2
    # a copy of one kernel of the second device, at time 0 (what a tool writes for a missing time)
    con.execute(f"CREATE TEMP TABLE x AS SELECT * FROM {k} WHERE deviceId = {devices[1]} LIMIT 1")
    con.execute("UPDATE x SET start = 0, end = 1000")
    con.execute(f"INSERT INTO {k} SELECT * FROM x")
    con.commit()
    con.close()
    cols = ["rank", "step", "start_ns", "duration_ns", "compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns",
            "idle_ns"]
    trace = load_nsys(p)
    hits = [w for w in trace.warnings if "at or before time 0" in w]
    assert len(hits) == 1 and "dropped 1 events" in hits[0] and str(p) in hits[0]
    got = breakdown(trace).select(cols).sort("rank", "step")
    want = breakdown(load_nsys(src)).select(cols).sort("rank", "step")
    assert got.equals(want)  # both ranks, every step, to the nanosecond


# ---------------------------------------------------------------------------------------------
# -o refusals name the output


@pytest.mark.parametrize("case", ["directory", "ranks_to_file", "merge_name", "store_is_file", "annotate_file",
                                  "missing_dir"])
def test_output_refusals_are_one_line_naming_the_output(tmp_path, case):
    from conftest import DLRM

    (tmp_path / "d").mkdir()
    (tmp_path / "file").write_text("x")
    one = DEMO
    out, args, message = {
        "directory": (tmp_path / "d", ["breakdown", one, "-q", "-o"], "is a directory: give a file name"),
        "ranks_to_file": (tmp_path / "x.json.gz", ["annotate", DLRM, "-o"],
                          "8 rank files need a directory, not a file name: give -o DIR, or --merge for one multi-rank file"),
        "merge_name": (tmp_path / "name", ["annotate", "--merge", DLRM, "-o"],
                       "--merge writes one file: give -o NAME.json or NAME.json.gz (or an existing directory)"),
        "store_is_file": (tmp_path / "file", ["batch", DLRM, "--store"], "is a file, not a directory"),
        "annotate_file": (tmp_path / "file", ["annotate", one, "-o"], "is a file, not a directory"),
        "missing_dir": (tmp_path / "missing" / "x.txt", ["breakdown", one, "-q", "-o"],
                        f"the directory {tmp_path / 'missing'} does not exist (traceanalyzer creates no directories)"),
    }[case]
    r = run_cli(*args, out)
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == [f"traceanalyzer: error: {out}: {message}"]
    assert r.stdout == ""


# ---------------------------------------------------------------------------------------------
# the memory-event reader (``memory``): the same answers


def test_memory_event_reader_refuses_deep_nesting_and_reads_latin1_names(tmp_path):
    from traceanalyzer.parsers.kineto_memory import read_memory_events

    def mem(name, nbytes, extra=b""):
        return (b'{"ph": "i", "cat": "cpu_instant_event", "name": "' + name + b'", "ts": 10.5, "args": {"Bytes": '
                + str(nbytes).encode() + b', "Total Allocated": 100' + extra + b"}}")

    def doc(*events):
        return b'{"traceEvents": [' + b", ".join(events) + b"]}"

    p = tmp_path / "m.json"
    p.write_bytes(doc(mem(b"[memory]", 64), mem(b"[memory]", 32, b', "deep": ' + b"[" * 3000 + b"]" * 3000)))
    with pytest.raises(InvalidTrace, match=f"more than {MAX_JSON_DEPTH} levels deep"):
        read_memory_events(p)
    # within the limit (past what msgspec follows): the same events as without the deep value
    p.write_bytes(doc(mem(b"[memory]", 64), mem(b"[memory]", 32, b', "deep": ' + b"[" * 1000 + b"]" * 1000)))
    assert read_memory_events(p)["bytes"].to_list() == [64, 32]
    # a Latin-1 byte in another event's name: read, the memory events unchanged
    p.write_bytes(doc(mem(b"[memory]", 64), mem(b"caf\xe9", 1), mem(b"[memory]", 32)))
    assert read_memory_events(p)["bytes"].to_list() == [64, 32]
