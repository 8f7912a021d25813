#!/usr/bin/env python
"""Generate the bad-input corpus: ``python scripts/make_bad_corpus.py OUTDIR [--seed N]``.

Every entry is derived from a small real trace in ``fixtures/`` (DLRM V100 worker 0/1 with
integer epoch µs, the ROCm 6.2 MI250 mini trace with ``baseTimeNanoseconds``, the A100 alexnet
trace without step markers) or built from scratch (not JSON, SQLite, ...). Next to the files it
writes ``OUTDIR/manifest.json``::

    {"seed": 9, "entries": {"<path relative to OUTDIR>": {
        "case": "truncated",                # the corpus category (docs/errors.md)
        "expect": "error" | "recover" | "ok",
        "exit": 4,                          # expected exit code (0 for recover / ok), or a list of them
        "message": "fragment" | [alternatives],   # error: one of these in the stderr line
        "warning": "fragment",              # recover: in the warnings (stderr and JSON)
        "count": 17,                        # recover: the number the warning must state
        "same_as": "fixtures/...",          # results must equal this original's breakdown
        "checks": [{"warning": ..., "count": n}],  # recover: further warnings that must be there
        "skew": {"ranks": [1], "seconds": 3.0},    # skewed clocks: a named rank and its skew
        "skip_if_readable": true}},         # chmod 000 cases: meaningless when run as root
     "commands": {"<name>": {               # command lines run from OUTDIR (outputs/ holds their inputs)
        "case": "output-is-input" | "output-problem",
        "args": ["breakdown", "outputs/trace.json.gz", "-o", "outputs/link.json.gz"],
        "output": "outputs/link.json.gz", "exit": 3, "message": "fragment"}}}

Expectations are computed here from the *source bytes* (where the cut falls, how many events
were injected), independently of the parser. Deterministic for a given seed; takes seconds.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import os
import random
import re
import sqlite3
import sys
import zlib
from contextlib import closing
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "fixtures" / "kineto"
DLRM = sorted((FIX / "dlrm-v100-8rank").glob("worker*.json.gz"))
SOURCES = {
    "dlrm": DLRM[0],
    "rocm": FIX / "mi250_rocm62_minitoy.json.gz",
    "alexnet": FIX / "a100_alexnet_nosteps.json.gz",
}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
US_2200 = 7_258_118_400_000_000  # 2200-01-01 in epoch µs
US_2100 = 4_102_444_800_000_000


class Corpus:
    def __init__(self, out: Path, seed: int):
        self.out = out
        self.rng = random.Random(seed)
        self.seed = seed
        self.entries: dict[str, dict] = {}

    def add(self, rel: str, data: bytes | None, case: str, **expect) -> Path:
        p = self.out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if data is not None:
            p.write_bytes(data)
        expect.setdefault("exit", 0 if expect.get("expect") in ("recover", "ok") else None)
        assert rel not in self.entries, rel
        self.entries[rel] = {"case": case, **expect}
        return p

    def error(self, rel, data, case, code, message, **kw):
        return self.add(rel, data, case, expect="error", exit=code, message=message, **kw)

    def recover(self, rel, data, case, warning, **kw):
        return self.add(rel, data, case, expect="recover", warning=warning, **kw)

    def ok(self, rel, data, case, **kw):
        return self.add(rel, data, case, expect="ok", **kw)


def src_rel(name: str) -> str:
    return str(SOURCES[name].relative_to(ROOT))


def dumps(doc) -> bytes:
    return orjson.dumps(doc)


def is_gpu(e: dict) -> bool:
    return e.get("ph") == "X" and str(e.get("cat", "")).lower() in GPU_CATS


def complete(e: dict) -> bool:
    return e.get("ph") == "X" and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))


# ---------------------------------------------------------------------------------------------
# truncation


_START = re.compile(rb"\n  \{")  # Kineto writes every event as "\n  {" ... "}"


def truncation_expectation(text: bytes, events: list[dict], cut: int) -> dict:
    """What the loader must do with ``text[:cut]`` (Kineto's pretty JSON, events in order)."""
    key = text.find(b'"traceEvents"')
    arr = text.find(b"[", key)
    if cut <= arr:
        return dict(expect="error", exit=4, message=["not valid JSON", "could not be recovered"])
    starts = [m.start() for m in _START.finditer(text, arr)]
    assert len(starts) == len(events), (len(starts), len(events))
    # event i is recovered when the next event's opening brace lies before the cut
    k = sum(1 for s in starts[1:] if s + 3 < cut)
    if k == 0:
        return dict(expect="error", exit=4, message="no events")
    return recovered_expectation(events[:k])


def recovered_expectation(kept: list[dict]) -> dict:
    """What the loader must do with the complete events ``kept`` of a truncated trace."""
    k = len(kept)
    if not any(complete(e) for e in kept):
        return dict(expect="error", exit=4, message="no complete")
    if not any(complete(e) and is_gpu(e) for e in kept):
        return dict(expect="error", exit=5, message="no GPU activity in what was recovered")
    exp = dict(expect="recover", exit=0, warning="truncated trace (the file ends mid-event): recovered", count=k)
    # launches whose GPU record was cut off: everything from the step holding the first is dropped
    x = [e for e in kept if complete(e)]

    def corr(e):
        a = e.get("args")
        return a.get("correlation") if isinstance(a, dict) else None

    gpu_corr = {corr(e) for e in x if is_gpu(e)} - {None}
    launch_ts: dict = {}
    for e in x:
        if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime", "driver") and corr(e) is not None:
            launch_ts[corr(e)] = min(launch_ts.get(corr(e), e["ts"]), e["ts"])
    missing = [e for e in x if str(e.get("cat", "")).lower() in ("cuda_runtime", "cuda_driver", "runtime", "driver")
               and corr(e) is not None and "launch" in e["name"].lower() and "hostfunc" not in e["name"].lower()
               and corr(e) not in gpu_corr]
    if missing:
        t = min(e["ts"] for e in missing)
        steps = [e for e in x if re.fullmatch(r"ProfilerStep#\d+", e.get("name", "")) and str(e.get("cat", "")).lower() in ("cpu_op", "user_annotation")]
        holding = [e for e in steps if e["ts"] <= t < e["ts"] + e["dur"]]
        cut = min(e["ts"] for e in holding) if holding else t
        left = [e for e in x if is_gpu(e) and launch_ts.get(corr(e), e["ts"]) < cut]
        if not left:
            return dict(expect="error", exit=5, message="no complete GPU activity in what was recovered")
        exp["checks"] = [{"warning": "kernel launches were cut off", "count": len(missing)}]
    return exp


def make_truncations(c: Corpus, name: str, text: bytes, doc: dict) -> None:
    events = doc["traceEvents"]
    n = len(text)
    fracs = sorted({0.0005, 0.002, 0.01, 0.05, *[round(c.rng.uniform(0.02, 0.999), 4) for _ in range(13)], 0.9, 0.97, 0.999})
    for f in fracs:
        cut = max(1, int(n * f))
        exp = truncation_expectation(text, events, cut)
        c.add(f"truncated/{name}_plain_{f:.4f}.json", text[:cut], "truncated", **exp)
    gz = gzip.compress(text, compresslevel=6, mtime=0)
    for f in sorted({0.01, 0.2, *[round(c.rng.uniform(0.05, 0.999), 4) for _ in range(10)], 0.995}):
        cut = max(11, int(len(gz) * f))
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        plain_len = len(d.decompress(gz[:cut]))
        exp = truncation_expectation(text, events, plain_len)
        c.add(f"truncated/{name}_gzip_{f:.4f}.json.gz", gz[:cut], "truncated-gzip", **exp)
    # a rewritten (compact, one-line) trace cut in the middle of its GPU events
    compact = dumps(doc)
    first_gpu = next(i for i, e in enumerate(events) if complete(e) and is_gpu(e))
    # cut in the middle of the event after (the first GPU event + 3): that many are complete
    k = first_gpu + 4
    prefix = dumps({**{kk: v for kk, v in doc.items() if kk != "traceEvents"}, "traceEvents": events[:k]})
    body = prefix[: prefix.rfind(b"]")]  # ...last complete event '}'
    nxt = dumps(events[k])
    cut_text = body + b"," + nxt[: len(nxt) // 2]
    assert compact.startswith(body[: min(len(body), 50)])
    c.add(f"truncated/{name}_compact_mid.json", cut_text, "truncated-compact", **recovered_expectation(events[:k]))


def pretty(doc: dict) -> bytes:
    """Kineto's layout: one event per line, each starting with a newline and two spaces."""
    head = dumps({k: v for k, v in doc.items() if k != "traceEvents"})[1:-1]
    body = b",".join(b"\n  " + dumps(e) for e in doc["traceEvents"])
    return b"{" + head + (b"," if head else b"") + b'\n"traceEvents": [' + body + b"\n]\n}"


def make_gpu_last_truncations(c: Corpus, name: str, doc: dict) -> None:
    """Current Kineto writes host events first and GPU events last: a cut in the GPU part loses
    the GPU records of launches that are in the file, and those steps must not be undercounted."""
    ev = doc["traceEvents"]
    gpu = [e for e in ev if complete(e) and is_gpu(e)]
    other = [e for e in ev if not (complete(e) and is_gpu(e))]
    d2 = {**doc, "traceEvents": other + gpu}
    text = pretty(d2)
    starts = [m.start() for m in _START.finditer(text)]
    first_gpu = starts[len(other)]
    for f in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99):
        cut = first_gpu + int((len(text) - first_gpu) * f)
        exp = truncation_expectation(text, d2["traceEvents"], cut)
        c.add(f"truncated/{name}_gpu_last_{f:.2f}.json", text[:cut], "truncated", **exp)


# ---------------------------------------------------------------------------------------------
# corrupt gzip


def make_corrupt_gzip(c: Corpus, name: str, text: bytes) -> None:
    gz = bytearray(gzip.compress(text, compresslevel=6, mtime=0))
    made = 0
    for where in ("early", "middle", "late", "trailer"):
        for _ in range(50):
            b = bytearray(gz)
            if where == "trailer":
                i = len(b) - 1 - c.rng.randrange(8)
            else:
                lo, hi = {"early": (12, 200), "middle": (len(b) // 3, 2 * len(b) // 3), "late": (len(b) - 300, len(b) - 9)}[where]
                i = c.rng.randrange(lo, hi)
            b[i] ^= 1 << c.rng.randrange(8)
            try:
                gzip.decompress(bytes(b))
            except Exception:  # noqa: BLE001 - any failure: the corruption is detectable
                c.error(f"corrupt_gzip/{name}_{where}.json.gz", bytes(b), "corrupt-gzip", 4, "corrupt gzip")
                made += 1
                break
    c.error(f"corrupt_gzip/{name}_magic_then_garbage.json.gz", b"\x1f\x8b" + bytes(c.rng.randrange(256) for _ in range(4096)), "corrupt-gzip", 4, "corrupt gzip")


# ---------------------------------------------------------------------------------------------
# event-level damage (a few -> recover; many -> error)


def kernels(doc):
    return [i for i, e in enumerate(doc["traceEvents"]) if complete(e) and str(e.get("cat", "")).lower() == "kernel"]


def with_events(doc: dict, events: list) -> bytes:
    return dumps({**doc, "traceEvents": events})


def inject(doc: dict, mutate, n: int, rng: random.Random) -> list:
    """The original events plus ``n`` mutated copies of random kernels (results must not change)."""
    ev = list(doc["traceEvents"])
    extra = []
    for i in rng.sample(kernels(doc), n):
        e = copy.deepcopy(ev[i])
        mutate(e)
        extra.append(e)
    return ev + extra


def make_event_damage(c: Corpus, name: str, doc: dict) -> None:
    rng = c.rng
    same = src_rel(name)
    ev = doc["traceEvents"]
    n_x = sum(1 for e in ev if complete(e))
    n_k = len(kernels(doc))
    # "a few": at most 10% of the GPU events (the refusal threshold), 3 on the larger traces
    few = max(1, min(3, n_k // 20))

    def drop(key):
        return lambda e: e.pop(key, None)

    def setv(key, v):
        return lambda e: e.__setitem__(key, v)

    cases = [
        ("missing_ts", drop("ts"), f"dropped {few} complete events with missing", "missing-field"),
        ("missing_dur", drop("dur"), f"dropped {few} complete events with missing", "missing-field"),
        ("missing_ph", drop("ph"), f"ignored {few} events with no 'ph'", "missing-field"),
        ("ts_string_garbage", setv("ts", "soon"), f"dropped {few} complete events with missing, non-numeric", "wrong-type"),
        ("dur_string_garbage", setv("dur", "long"), f"dropped {few} complete events with missing, non-numeric", "wrong-type"),
        ("ts_bool", setv("ts", True), f"dropped {few} events far outside", "wrong-type"),
        ("dur_negative", setv("dur", -5), f"dropped {few} complete events with missing, non-numeric, negative", "negative-nan"),
        ("dur_nan_string", setv("dur", "NaN"), f"dropped {few} complete events with missing, non-numeric, negative or NaN", "negative-nan"),
        ("ts_year_2200", lambda e: e.__setitem__("ts", US_2200), f"dropped {few} events with timestamps out of range", "absurd-ts"),
        ("ts_year_2100", lambda e: e.__setitem__("ts", US_2100), f"dropped {few} events far outside", "absurd-ts"),
        ("ts_negative", lambda e: e.__setitem__("ts", -1_000_000_000), f"dropped {few} events far outside", "absurd-ts"),
        ("ts_zero", lambda e: e.__setitem__("ts", 0), f"dropped {few} events far outside", "absurd-ts"),
        ("dur_11_days", lambda e: e.__setitem__("dur", 1e12), f"dropped {few} events far outside", "absurd-ts"),
        ("unknown_category", lambda e: e.__setitem__("cat", "my_custom_gpu_cat"), f"unknown categories 'my_custom_gpu_cat' ({few})", "unknown-category"),
    ]
    for tag, mut, warn, case in cases:
        c.recover(f"events/{name}_{tag}.json", with_events(doc, inject(doc, mut, few, rng)), case, warning=warn, same_as=same)
    # NaN / Infinity literals as Python's json writes them (not JSON, but common)
    for tag, lit in (("dur_nan_literal", b"NaN"), ("dur_inf_literal", b"Infinity"), ("dur_neg_inf_literal", b"-Infinity")):
        events = inject(doc, setv("dur", 424242.5), few, rng)
        data = with_events(doc, events).replace(b'"dur":424242.5', b'"dur":' + lit)
        c.recover(f"events/{name}_{tag}.json", data, "negative-nan", warning=f"dropped {few} complete events", same_as=same)
    # a few existing events damaged (results change; the warning counts them)
    for tag, key in (("existing_missing_ts", "ts"), ("existing_missing_dur", "dur")):
        ev2 = copy.deepcopy(ev)
        for i in rng.sample([i for i, e in enumerate(ev2) if complete(e) and not is_gpu(e)], 2):
            ev2[i].pop(key)
        c.recover(f"events/{name}_{tag}.json", with_events(doc, ev2), "missing-field", warning="dropped 2 complete events")
    # many: more than 10% of the events (or of the GPU events) bad -> refused
    ev2 = copy.deepcopy(ev)
    xs = [i for i, e in enumerate(ev2) if complete(e)]
    for i in rng.sample(xs, int(0.25 * len(xs))):
        ev2[i].pop("ts")
    c.error(f"events/{name}_many_missing_ts.json", with_events(doc, ev2), "missing-field", 4, "malformed")
    ev2 = copy.deepcopy(ev)
    for i in kernels(doc):
        ev2[i]["dur"] = -1
    c.error(f"events/{name}_all_kernels_negative_dur.json", with_events(doc, ev2), "negative-nan", 4, ["GPU events", "malformed"])
    # a list where a number belongs: polars cannot build the column; the file is refused
    c.error(f"events/{name}_dur_list.json", with_events(doc, inject(doc, setv("dur", [1, 2]), few, rng)), "wrong-type", 4, "malformed events")
    ev2 = copy.deepcopy(ev)
    for i in rng.sample(xs, int(0.3 * len(xs))):
        ev2[i]["ts"] = ev2[i]["ts"] + 365 * 86400 * 1_000_000
    c.error(f"events/{name}_30pct_shifted_a_year.json", with_events(doc, ev2), "absurd-ts", 4, "far outside the trace's time span")
    ev2 = copy.deepcopy(ev)
    for e in ev2:
        if is_gpu(e):
            e["cat"] = "gpu_kernel_v2"
    c.error(f"events/{name}_renamed_gpu_categories.json", with_events(doc, ev2), "unknown-category", 4, "unknown categories 'gpu_kernel_v2'")
    ev2 = copy.deepcopy(ev)
    for e in ev2:
        if is_gpu(e):
            e["cat"] = "cuda_profiler_range"
    c.error(f"events/{name}_cupti_range_profiler.json", with_events(doc, ev2), "unknown-category", 5, "CUPTI range-profiler")
    # wrong but readable types: numbers as numeric strings -> read as numbers, same results
    ev2 = copy.deepcopy(ev)
    for e in ev2:
        if complete(e):
            e["ts"], e["dur"] = repr(e["ts"]), repr(e["dur"])
    c.ok(f"events/{name}_numbers_as_strings.json", with_events(doc, ev2), "wrong-type", same_as=same)
    ev2 = copy.deepcopy(ev)
    for e in ev2:
        if "pid" in e and isinstance(e["pid"], int):
            e["pid"] = str(e["pid"])
        if isinstance(e.get("args"), dict) and rng.random() < 0.05:
            e["args"] = "not an object"
    # args replaced by a string lose their links; results may change but nothing may crash
    c.add(f"events/{name}_string_pids_bad_args.json", with_events(doc, ev2), "wrong-type", expect="ok")
    # order and duplicates
    ev2 = list(reversed(ev))
    c.ok(f"order/{name}_reversed.json", with_events(doc, ev2), "out-of-order", same_as=same)
    ev2 = list(ev)
    rng.shuffle(ev2)
    c.ok(f"order/{name}_shuffled.json", with_events(doc, ev2), "out-of-order", same_as=same)
    ev2 = ev + ev
    rng.shuffle(ev2)
    c.recover(f"duplicates/{name}_everything_twice.json", with_events(doc, ev2), "duplicates",
              warning=f"removed {n_x} duplicated events", same_as=same, count=n_x)
    dup = [copy.deepcopy(ev[i]) for i in rng.sample(kernels(doc), 5)]
    c.recover(f"duplicates/{name}_five_kernels_twice.json", with_events(doc, ev + dup), "duplicates",
              warning="removed 5 duplicated events", same_as=same, count=5)
    # empty traceEvents, metadata kept
    c.error(f"structure/{name}_empty_traceEvents.json", with_events(doc, []), "empty-events", 4, "no events")
    c.error(f"structure/{name}_empty_traceEvents.json.gz", gzip.compress(with_events(doc, []), mtime=0), "empty-events", 4, "no events")
    c.error(f"structure/{name}_non_object_events.json", with_events(doc, [[1, 2]] * 3 + ev), "wrong-type", 4, "non-object")
    # only B/E events (another tool's Chrome trace): no complete events
    be = [{"ph": "B", "name": "x", "pid": 1, "tid": 1, "ts": 1}, {"ph": "E", "pid": 1, "tid": 1, "ts": 2}]
    c.error(f"structure/{name}_only_begin_end.json", with_events(doc, be), "not-a-trace", 5, "no GPU activity")
    assert n_k >= 5


# ---------------------------------------------------------------------------------------------
# whole-file cases


def make_not_json(c: Corpus) -> None:
    rng = c.rng
    samples = {
        "random_bytes.json": bytes(rng.randrange(256) for _ in range(2048)),
        "hello.json": b"hello world\n",
        "csv.json": b"ts,dur,name\n1,2,gemm\n",
        "html.json": b"<!doctype html><html><body>404 Not Found</body></html>",
        "png.json": b"\x89PNG\r\n\x1a\n" + bytes(64),
        "xml.json": b'<?xml version="1.0"?><trace><event ts="1"/></trace>',
        "yaml.json": b"traceEvents:\n  - ph: X\n    ts: 1\n",
        "comments.json": b'{ // kineto\n "traceEvents": [] }',
        "open_brace.json": b"{",
        "open_bracket.json": b"[",
        "unterminated_string.json": b'{"traceEvents": [{"name": "gemm',
        "single_quotes.json": b"{'traceEvents': []}",
        "trailing_comma_object.json": b'{"a": 1,}',
        "utf16.json": '{"traceEvents": []}'.encode("utf-16"),
        "nul_bytes.json": bytes(1024),
        "whitespace.json": b" \n\t \n",
    }
    for rel, data in samples.items():
        c.error(f"not_json/{rel}", data, "not-json", 4, ["not valid JSON", "could not be recovered"])
    c.error("not_json/gzipped_text.json.gz", gzip.compress(b"just some text\n", mtime=0), "not-json", 4, "not valid JSON")
    # a BOM in front of a real trace: repaired
    text = gzip.decompress(SOURCES["rocm"].read_bytes())
    c.ok("not_json/rocm_with_bom.json", b"\xef\xbb\xbf" + text, "not-json", same_as=src_rel("rocm"))


def make_not_a_trace(c: Corpus) -> None:
    docs = {
        "empty_object.json": ({}, "no 'traceEvents'"),
        "package_json.json": ({"name": "x", "version": "1.0.0", "dependencies": {}}, "no 'traceEvents'"),
        "number.json": (42, "no 'traceEvents'"),
        "string.json": ("trace", "no 'traceEvents'"),
        "null.json": (None, "no 'traceEvents'"),
        "true.json": (True, "no 'traceEvents'"),
        "empty_array.json": ([], "no events"),
        "array_of_numbers.json": ([1, 2, 3], "non-object"),
        "array_of_objects_without_ph.json": ([{"a": 1}, {"b": 2}], "no event has a 'ph'"),
        "traceEvents_object.json": ({"traceEvents": {"ph": "X"}}, "not a list"),
        "traceEvents_string.json": ({"traceEvents": "[]"}, "not a list"),
        "traceEvents_null.json": ({"traceEvents": None}, "not a list"),
        "traceEvents_metadata_only.json": ({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}]}, "no complete"),
        "otel_spans.json": ({"resourceSpans": [{"scopeSpans": []}]}, "no 'traceEvents'"),
    }
    for rel, (doc, msg) in docs.items():
        c.error(f"not_a_trace/{rel}", dumps(doc), "not-a-trace", 4, msg)
    # a Chrome trace from a browser: complete events, nothing on a GPU, unknown categories
    chrome = {"traceEvents": [{"ph": "X", "cat": "devtools.timeline", "name": "RunTask", "pid": 1, "tid": 2, "ts": 1000 + i * 10, "dur": 5} for i in range(50)]}
    c.error("not_a_trace/browser_chrome_trace.json", dumps(chrome), "not-a-trace", 4, "unknown categories 'devtools.timeline'")


def make_empty_and_unreadable(c: Corpus) -> None:
    for rel in ("zero.json", "zero.json.gz", "zero.sqlite", "zero.pt.trace.json"):
        c.error(f"empty/{rel}", b"", "zero-byte", 4, "empty file")
    text = gzip.decompress(SOURCES["rocm"].read_bytes())
    p = c.error("unreadable/rank0.json", text, "unreadable", 3, "permission denied", skip_if_readable=True)
    os.chmod(p, 0)
    c.add("dirs/empty_dir", None, "empty-dir", expect="error", exit=3, message="no trace files")
    (c.out / "dirs/empty_dir").mkdir(parents=True, exist_ok=True)
    c.add("dirs/only_readme", None, "empty-dir", expect="error", exit=3, message="no trace files")
    (c.out / "dirs/only_readme").mkdir(parents=True, exist_ok=True)
    (c.out / "dirs/only_readme/README.txt").write_text("nothing here\n")


def make_nsys(c: Corpus) -> None:
    nsys_msg = ["Nsight Systems", "nsys", "SQLite"]

    def db(rel: str, ddl: list[str]) -> Path:
        p = c.out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(p)) as con, con:
            for stmt in ddl:
                con.execute(stmt)
        return p

    db("sqlite/users.sqlite", ["CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)", "INSERT INTO users VALUES (1, 'ada')"])
    c.add("sqlite/users.sqlite", None, "sqlite-schema", expect="error", exit=4, message=nsys_msg)
    # nsys-looking exports with the GPU tables missing (lazy export of a CPU-only capture, or a
    # tool that dropped them)
    db("sqlite/nsys_missing_kernel_tables.sqlite", [
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT)",
        "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)",
        "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')",
    ])
    # exit 4 today (no Nsight parser on this branch); the Nsight parser may call it 5 (no GPU activity)
    c.add("sqlite/nsys_missing_kernel_tables.sqlite", None, "sqlite-missing-tables", expect="error", exit=[4, 5], message=nsys_msg)
    db("sqlite/nsys_kernel_table_wrong_columns.sqlite", [
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (foo INTEGER, bar TEXT)",
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 'x')",
    ])
    c.add("sqlite/nsys_kernel_table_wrong_columns.sqlite", None, "sqlite-schema", expect="error", exit=4, message=nsys_msg)
    whole = (c.out / "sqlite/users.sqlite").read_bytes()
    c.error("sqlite/truncated.sqlite", whole[: len(whole) // 2], "sqlite-schema", 4, nsys_msg)
    c.error("sqlite/text_named_sqlite.sqlite", b"this is not a database\n", "sqlite-schema", 4, nsys_msg)
    c.error("nsys_rep/capture.nsys-rep", b"\x00NSYS" + bytes(c.rng.randrange(256) for _ in range(4096)), "nsys-rep", 4, ["nsys export", "Nsight Systems"])


NSYS_FIX = ROOT / "fixtures" / "nsys"


def make_nsys_damage(c: Corpus) -> None:
    """Nsight Systems exports that are odd but valid or damaged, and rank directories with broken
    links. Every entry is made from the cut real exports in fixtures/nsys (see fixtures/README.md)."""
    mfu = NSYS_FIX / "mfu_2gpu_before_cut.sqlite"
    mfu_rel = str(mfu.relative_to(ROOT))
    kernel = "CUPTI_ACTIVITY_KIND_KERNEL"

    def variant(rel: str, stmts: list[str], src: Path = mfu) -> None:
        p = c.out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(src.read_bytes())
        con = sqlite3.connect(p)
        for stmt in stmts:
            con.execute(stmt)
        con.commit()
        con.execute("VACUUM")
        con.close()

    def copies(where: str, start: str, end: str) -> list[str]:
        return [f"CREATE TEMP TABLE x AS SELECT * FROM {kernel} WHERE {where}",
                f"UPDATE x SET start = {start}, end = {end}", f"INSERT INTO {kernel} SELECT * FROM x"]

    con = sqlite3.connect(f"{mfu.resolve().as_uri()}?mode=ro", uri=True)
    n_kernels = con.execute(f"SELECT COUNT(*) FROM {kernel}").fetchone()[0]
    con.close()
    # optional columns absent or NULL: the process is inferred, the answer is the original's
    variant("nsys/kernel_null_globalpid.sqlite", [f"UPDATE {kernel} SET globalPid = NULL"])
    c.ok("nsys/kernel_null_globalpid.sqlite", None, "missing-field", same_as=mfu_rel)
    # no globalPid, mangledName, grid/block, green context ... (the correlation stays: without it the
    # communication kernels lose the launch that tells their parallel dimension)
    variant("nsys/kernel_without_optional_columns.sqlite", [
        f"CREATE TABLE k2 AS SELECT start, end, deviceId, contextId, streamId, correlationId, demangledName, "
        f"shortName FROM {kernel}", f"DROP TABLE {kernel}", f"ALTER TABLE k2 RENAME TO {kernel}"])
    c.ok("nsys/kernel_without_optional_columns.sqlite", None, "missing-field", same_as=mfu_rel)
    # absurd timestamps on injected copies: dropped and counted, the answer is the original's
    variant("nsys/kernel_at_t0.sqlite", copies("rowid = 3", "0", "1000"))
    c.recover("nsys/kernel_at_t0.sqlite", None, "absurd-ts", "absurd timestamps", count=1, same_as=mfu_rel)
    variant("nsys/kernels_end_before_start.sqlite", copies("rowid % 20 = 1", "start", "start - 5000"))
    c.recover("nsys/kernels_end_before_start.sqlite", None, "absurd-ts", "ending before they start",
              count=len(range(1, n_kernels + 1, 20)), same_as=mfu_rel)
    variant("nsys/kernels_mostly_reversed.sqlite", [f"UPDATE {kernel} SET end = start - 1 WHERE rowid % 3 = 0"])
    c.add("nsys/kernels_mostly_reversed.sqlite", None, "absurd-ts", expect="error", exit=4,
          message="timestamps are corrupt")
    # truncated text exports: legacy JSON (time order) keeps its complete part with a warning;
    # JSON Lines (one table after another) cannot tell what is missing: exit 4
    for suffix, frac in ((".json", 0.6), (".json", 0.65), (".json", 0.7), (".jsonl", 0.6), (".jsonl", 0.7)):
        data = (NSYS_FIX / f"mfu_2gpu_before_cut{suffix}").read_bytes()
        rel = f"nsys/cut{int(frac * 100)}{suffix}"
        if suffix == ".json":
            c.recover(rel, data[: int(len(data) * frac)], "truncated", "truncated nsys JSON export")
        else:
            c.error(rel, data[: int(len(data) * frac)], "truncated", 4, "truncated nsys JSON Lines export")
    # damaged table files of a Parquet / Arrow export directory
    for fmt, suffix, what in (("_pqtdir", ".parquet", "damaged Parquet"), ("_arwdir", ".arrow", "damaged Arrow")):
        src = NSYS_FIX / f"mfu_2gpu_before_cut{fmt}"
        rel = f"nsys/damaged{fmt}"
        c.add(rel, None, "truncated", expect="error", exit=4, message=what)
        for f in sorted(src.iterdir()):
            data = f.read_bytes()
            (c.out / rel).mkdir(parents=True, exist_ok=True)
            (c.out / rel / f.name).write_bytes(data[: len(data) // 2] if f.name.startswith(kernel) else data)
    # a JSON Lines export with Latin-1 bytes in it
    text = (NSYS_FIX / "mock_cut.jsonl").read_bytes()
    mid = text.index(b"\n", len(text) // 2) + 1
    c.error("nsys/latin1.jsonl", text[:mid] + b'{"id":998,"table":"StringIds","value":"caf\xe9"}\n' + text[mid:],
            "not-json", 4, "not valid UTF-8")
    # rank directories: a dangling link and a link loop are errors naming the link; a link to the
    # parent directory is not followed
    mock = NSYS_FIX / "mock_cut.sqlite"
    for rel, links in (("dirs/dangling_rank_link", {"rank1.sqlite": "gone.sqlite"}),
                       ("dirs/rank_link_loop", {"rank1.json": "rank2.json", "rank2.json": "rank1.json"})):
        what = "dangling symbolic link" if "dangling" in rel else "symbolic link loop"
        c.add(rel, None, "unreadable", expect="error", exit=3, message=what)
        (c.out / rel).mkdir(parents=True, exist_ok=True)
        (c.out / rel / "rank0.sqlite").write_bytes(mock.read_bytes())
        for name, target in links.items():
            (c.out / rel / name).symlink_to(target)
    rel = "dirs/loop_to_parent"
    c.ok(rel, None, "unreadable", same_as=str(mock.relative_to(ROOT)))
    (c.out / rel).mkdir(parents=True, exist_ok=True)
    (c.out / rel / "rank0.sqlite").write_bytes(mock.read_bytes())
    (c.out / rel / "loop").symlink_to("..")


def make_directories(c: Corpus) -> None:
    """Rank sets: skewed clocks (warn), different jobs (exit 4 naming both files)."""
    w0 = orjson.loads(gzip.decompress(DLRM[0].read_bytes()))
    w1 = orjson.loads(gzip.decompress(DLRM[1].read_bytes()))
    w2 = orjson.loads(gzip.decompress(DLRM[2].read_bytes()))

    def shift(doc, us):
        out = copy.deepcopy(doc)
        for e in out["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + us
        return out

    def rankdir(rel, docs, case, **exp):
        c.add(rel, None, case, **exp)
        for i, d in enumerate(docs):
            p = c.out / rel / f"worker{i}.pt.trace.json"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(dumps(d))

    # with two ranks either may be named (each is skewed relative to the other)
    for tag, us in (("rank1_plus_3s", 3_000_000), ("rank1_minus_2s", -2_000_000), ("rank1_plus_30s", 30_000_000), ("rank1_plus_25min", 1_500_000_000)):
        rankdir(f"ranks/{tag}", [w0, shift(w1, us)], "skewed-clocks", expect="recover", warning="rank clocks are skewed",
                skew={"ranks": [0, 1], "seconds": abs(us) / 1e6})
    rankdir("ranks/rank2_of_3_plus_5s", [w0, w1, shift(w2, 5_000_000)], "skewed-clocks", expect="recover",
            warning="rank clocks are skewed", skew={"ranks": [2], "seconds": 5.0})
    rankdir("ranks/aligned_two_ranks", [w0, w1], "skewed-clocks", expect="ok")
    rankdir("ranks/rank1_plus_2h", [w0, shift(w1, 7_200_000_000)], "mixed-jobs", expect="error", exit=4, message="h apart")
    # different jobs
    ws = copy.deepcopy(w1)
    ws["distributedInfo"]["world_size"] = 4
    rankdir("mixed/world_size_8_and_4", [w0, ws], "mixed-jobs", expect="error", exit=4, message="different job")
    alex = orjson.loads(gzip.decompress(SOURCES["alexnet"].read_bytes()))
    rankdir("mixed/dlrm_and_alexnet_both_rank0", [w0, alex], "mixed-jobs", expect="error", exit=4, message="appears twice")
    rocm = orjson.loads(gzip.decompress(SOURCES["rocm"].read_bytes()))
    rankdir("mixed/dlrm_and_rocm", [w0, rocm], "mixed-jobs", expect="error", exit=4, message="h apart")
    same = copy.deepcopy(w1)
    same["distributedInfo"]["rank"] = 0
    rankdir("mixed/two_rank0", [w0, same], "mixed-jobs", expect="error", exit=4, message="appears twice")
    v1, v2 = copy.deepcopy(w0), copy.deepcopy(w1)
    v1["pytorch_version"], v2["pytorch_version"] = "2.1.0", "2.4.1"
    rankdir("mixed/pytorch_versions_differ", [v1, v2], "mixed-jobs", expect="error", exit=4, message="different job")



# ---------------------------------------------------------------------------------------------
# odd but valid metadata, user text that looks like markup, input problems with their own code


def make_odd_inputs(c: Corpus) -> None:
    doc = orjson.loads(gzip.decompress(SOURCES["rocm"].read_bytes()))
    same = src_rel("rocm")
    d = copy.deepcopy(doc)
    d["distributedInfo"] = {"rank": 2**40, "world_size": 2**40}
    c.recover("odd/huge_rank.json", dumps(d), "odd-metadata", warning="distributedInfo.rank 1099511627776 is out of range: ignored",
              checks=[{"warning": "distributedInfo.world_size 1099511627776 is out of range"}], same_as=same)
    for tag, v in (("1e30", 1e30), ("negative", -5), ("2pow63", 2**63)):
        d = copy.deepcopy(doc)
        d["baseTimeNanoseconds"] = v
        # the base time only shifts the clock: the partition is the original's
        c.recover(f"odd/base_time_{tag}.json", dumps(d), "odd-metadata", warning="baseTimeNanoseconds", same_as=None)
    # rich markup in user text: printed as it is
    d = copy.deepcopy(doc)
    k = kernels(d)
    d["traceEvents"][k[0]]["cat"] = "[/]"
    c.recover("markup/category_closing_tag.json", dumps(d), "markup", warning="unknown categories '[/]' (1)")
    d = copy.deepcopy(doc)
    for j, i in enumerate(k):
        d["traceEvents"][i]["name"] = "[/]" if j % 2 else "[bold red]kernel[/bold red] [link=x]"
    for e in d["traceEvents"]:
        if e.get("cat") == "cpu_op":
            e["name"] = "[/][/][red]"
    c.ok("markup/kernel_and_op_names.json", dumps(d), "markup")
    # two step ranges with one number, both launching GPU work: ambiguous -> exit 4
    d = copy.deepcopy(doc)
    for e in d["traceEvents"]:
        if re.fullmatch(r"ProfilerStep#\d+", str(e.get("name", ""))):
            e["name"] = "ProfilerStep#7"
    c.error("odd/duplicate_step_numbers.json", dumps(d), "duplicate-steps", 4, "step number 7 appears 2 times")
    # an nsys export whose kernel ends before it starts: exit 4, not an internal check
    src = ROOT / "fixtures" / "nsys" / "mock_cut.sqlite"
    p = c.add("nsys_bad/kernel_ends_before_start.sqlite", src.read_bytes(), "nsys-negative", expect="error", exit=4,
              message="ending before they start")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    con.commit()
    con.close()
    # a path argument whose name is longer than any file system allows
    c.add(f"long_name/{'n' * 300}.json", None, "long-name", expect="error", exit=3, message="File name too long")


# ---------------------------------------------------------------------------------------------
# outputs: -o naming an input, in every command and every spelling


def make_outputs(c: Corpus) -> dict:
    """Inputs under ``outputs/`` and the command lines (run from OUTDIR) whose ``-o`` names one of
    them; every one must exit 3 with one line naming the output path and change no input byte
    or inode. Returned as the manifest's ``commands``."""
    o = c.out / "outputs"
    (o / "ranks").mkdir(parents=True, exist_ok=True)
    (o / "sub").mkdir(exist_ok=True)
    (o / "trace.json.gz").write_bytes(SOURCES["rocm"].read_bytes())
    (o / "other.json.gz").write_bytes(SOURCES["alexnet"].read_bytes())
    for f in DLRM[:2]:
        (o / "ranks" / f.name).write_bytes(f.read_bytes())
    (o / "run.toml").write_bytes((ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml").read_bytes())
    (o / "megatron_args.txt").write_text("--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 128\n")
    os.symlink("trace.json.gz", o / "link.json.gz")
    os.link(o / "trace.json.gz", o / "hard.json.gz")
    rank0 = f"outputs/ranks/{DLRM[0].name}"
    t, cfg = "outputs/trace.json.gz", "outputs/run.toml"
    spellings = {"same": t, "symlink": "outputs/link.json.gz", "hardlink": "outputs/hard.json.gz", "dotdot": "outputs/sub/../trace.json.gz"}
    cmds: dict[str, dict] = {}

    def refuse(name: str, args: list[str], out: str) -> None:
        cmds[name] = {"case": "output-is-input", "args": [*args, "-o", out], "output": out, "exit": 3, "message": "refusing to overwrite an input"}

    for tag, out in spellings.items():
        refuse(f"breakdown_json_{tag}", ["breakdown", t, "-f", "json"], out)
    refuse("breakdown_table_same", ["breakdown", t], t)
    refuse("breakdown_member_of_dir", ["breakdown", "outputs/ranks"], rank0)
    refuse("breakdown_member_dotdot", ["breakdown", "outputs/ranks"], f"outputs/sub/../ranks/{DLRM[0].name}")
    refuse("report_html_same", ["report", t], t)
    refuse("report_markdown_symlink", ["report", t, "-f", "markdown"], "outputs/link.json.gz")
    refuse("report_json_config", ["report", t, "--config", cfg, "-f", "json"], cfg)
    refuse("annotate_same", ["annotate", t], t)
    refuse("annotate_hardlink", ["annotate", t], "outputs/hard.json.gz")
    refuse("annotate_dir_into_itself", ["annotate", "outputs/ranks"], "outputs/ranks")
    refuse("predict_config", ["predict", "--config", cfg], cfg)
    refuse("predict_megatron_args", ["predict", "--megatron-args", "outputs/megatron_args.txt", "--config", cfg], "outputs/megatron_args.txt")
    refuse("reconcile_trace", ["reconcile", t, "--config", cfg], t)
    refuse("reconcile_config", ["reconcile", t, "--config", cfg, "-f", "json"], "outputs/sub/../run.toml")
    refuse("compare_trace_a", ["compare", t, "outputs/other.json.gz"], t)
    refuse("compare_trace_b", ["compare", t, "outputs/other.json.gz", "-f", "json"], "outputs/other.json.gz")
    # output problems: exit 3 naming the output path, nothing written
    for cmd, args in (("breakdown", ["breakdown", t]), ("report", ["report", t]), ("annotate", ["annotate", t]),
                      ("predict", ["predict", "--config", cfg]), ("reconcile", ["reconcile", t, "--config", cfg]),
                      ("compare", ["compare", t, "outputs/other.json.gz"])):
        for tag, out, msg in (("missing_dir", "outputs/no_such_dir/x.out", "does not exist"),
                              ("a_directory", "outputs/sub", "is a directory"),
                              ("name_too_long", f"outputs/{'x' * 300}.out", "too long")):
            if cmd == "annotate" and tag == "a_directory":
                continue  # annotate -o DIR writes into it
            cmds[f"{cmd}_{tag}"] = {"case": "output-problem", "args": [*args, "-o", out], "output": out, "exit": 3, "message": msg}
    cmds["annotate_two_ranks_to_a_file_name"] = {"case": "output-problem", "args": ["annotate", "outputs/ranks", "-o", "outputs/x.json.gz"],
                                                 "output": "outputs/x.json.gz", "exit": 3, "message": "need a directory"}
    cmds["breakdown_full_disk"] = {"case": "output-problem", "args": ["breakdown", t, "-f", "json", "-o", "/dev/full"],
                                   "output": "/dev/full", "exit": 3, "message": "no space left"}
    return cmds
# ---------------------------------------------------------------------------------------------
# odd but valid Kineto inputs (read every part), and hostile ones (refused)


def begin_end_kernels(doc: dict) -> tuple[list, int]:
    """The events with every kernel of positive duration written as a ``B``/``E`` pair instead of
    one ``X`` event (begin: name, cat, args; end: ts), pairs in time order per stream (an end
    before a begin at the same time). Streams whose kernels overlap are left as they are."""
    ev = doc["traceEvents"]
    by_stream: dict = {}
    for i, e in enumerate(ev):
        if complete(e) and str(e.get("cat", "")).lower() == "kernel" and e["dur"] > 0:
            by_stream.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append(i)
    convert = set()
    for idx in by_stream.values():
        spans = sorted((ev[i]["ts"], ev[i]["ts"] + ev[i]["dur"]) for i in idx)
        if all(a[1] <= b[0] for a, b in zip(spans, spans[1:])):
            convert.update(idx)
    keep = [e for i, e in enumerate(ev) if i not in convert]
    marks = []
    for i in sorted(convert):
        e = ev[i]
        b = {k: v for k, v in e.items() if k != "dur"}
        b["ph"] = "B"
        marks.append((e["ts"], 1, i, b))
        marks.append((e["ts"] + e["dur"], 0, i, {"ph": "E", "pid": e.get("pid"), "tid": e.get("tid"), "ts": e["ts"] + e["dur"]}))
    marks.sort(key=lambda m: m[:3])
    return keep + [m[3] for m in marks], len(convert)


def make_odd_kineto_inputs(c: Corpus) -> None:
    """Odd but valid Kineto inputs and hostile ones, from every source; with a random generator
    of their own, so that the other cases' files do not depend on these."""
    rng = random.Random(c.seed * 7919 + 19)
    for name, path in SOURCES.items():
        doc = orjson.loads(gzip.decompress(path.read_bytes()))
        make_kineto_inputs(c, name, doc, rng)
    make_gzip_bomb(c)


def make_kineto_inputs(c: Corpus, name: str, doc: dict, rng: random.Random) -> None:
    same = src_rel(name)
    text = pretty(doc)
    # every gzip member is read: cat a.gz b.gz, bgzip-style blocks with an empty end member
    cuts = sorted(rng.sample(range(1, len(text)), 3))
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    members = b"".join(gzip.compress(p, mtime=0) for p in parts)
    c.ok(f"gzip/{name}_cat_members.json.gz", members, "gzip-members", same_as=same)
    blocks = b"".join(gzip.compress(text[i : i + 65280], mtime=0) for i in range(0, len(text), 65280))
    c.ok(f"gzip/{name}_bgzip_blocks.json.gz", blocks + gzip.compress(b"", mtime=0), "gzip-members", same_as=same)
    c.ok(f"gzip/{name}_zero_padded.json.gz", gzip.compress(text, mtime=0) + bytes(4096), "gzip-members", same_as=same)
    c.recover(f"gzip/{name}_trailing_garbage.json.gz", gzip.compress(text, mtime=0) + b"not gzip" * 100,
              "gzip-members", "bytes after the end of the gzip data", count=800, same_as=same)
    # phases: "x" for "X", kernels as begin/end pairs (all paired, or a few ends missing)
    ev = doc["traceEvents"]
    lower = [{**e, "ph": "x"} if complete(e) and is_gpu(e) else e for e in ev]
    n_lower = sum(1 for e in ev if complete(e) and is_gpu(e))
    c.recover(f"phases/{name}_lowercase_x.json", with_events(doc, lower), "phase-variants",
              "(lower-case) as complete ('X') events", count=n_lower, same_as=same)  # said once, same numbers
    be, n = begin_end_kernels(doc)
    assert n >= 5, (name, n)
    c.recover(f"phases/{name}_kernels_begin_end.json", pretty({**doc, "traceEvents": be}), "phase-variants",
              "begin/end ('B'/'E') pairs as complete events", count=n, same_as=same)
    ends = [i for i, e in enumerate(be) if e.get("ph") == "E"]
    gone = set(rng.sample(ends, 2))
    cut = [e for i, e in enumerate(be) if i not in gone]
    c.recover(f"phases/{name}_kernels_begin_end_2_unpaired.json", pretty({**doc, "traceEvents": cut}),
              "phase-variants", "without a partner", count=2)
    # a kernel at t=0 in a trace whose times start 60 s after their origin: within the 10-minute
    # cluster, but a minute before the call that launched it
    shifted = copy.deepcopy(ev)
    t0 = min(e["ts"] for e in shifted if complete(e))
    for e in shifted:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] - t0 + 60_000_000
    k = next(e for e in shifted if complete(e) and str(e.get("cat", "")).lower() == "kernel" and "correlation" in e.get("args", {}))
    c.recover(f"events/{name}_kernel_at_t0_60s_early.json", with_events(doc, [*shifted, {**k, "ts": 0}]), "absurd-ts",
              "start before the runtime call that launched them", count=1)
    # a second traceEvents key (after the first, or before it), another key written twice
    one = dumps({k: v for k, v in doc.items() if k != "traceEvents"})[1:-1]
    ev_text = dumps(ev)
    second = dumps(ev[: len(ev) // 2])
    msg = "written more than once"
    c.error(f"dupkeys/{name}_second_trace_events_after.json", text[: text.rstrip().rfind(b"}")] + b',\n"traceEvents": ' + second + b"\n}",
            "duplicate-keys", 4, msg)
    c.error(f"dupkeys/{name}_second_trace_events_compact.json", b'{"traceEvents":' + second + b"," + one + b',"traceEvents":' + ev_text + b"}",
            "duplicate-keys", 4, msg)
    c.error(f"dupkeys/{name}_head_key_twice.json", b'{"schemaVersion":1,' + one + b',"schemaVersion":2,"traceEvents":' + ev_text + b"}",
            "duplicate-keys", 4, msg)


def bomb(inflated: int, member: int = 1 << 24) -> bytes:
    """A valid gzip'd Chrome trace holding one event whose name is ``inflated`` bytes of "0":
    made of gzip members that each inflate to ``member`` bytes (one compressed member, repeated),
    so it takes milliseconds to write. Inflates about 1000 times."""
    zeros = gzip.compress(b"0" * member, compresslevel=9, mtime=0)
    head = gzip.compress(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1, "dur": 1, "name": "', mtime=0)
    tail = gzip.compress(b'"}]}', mtime=0)
    return head + zeros * (inflated // member) + tail


def make_gzip_bomb(c: Corpus) -> None:
    c.error("gzip/bomb_400MiB.json.gz", bomb(400 << 20), "gzip-bomb", 4, "decompression bomb")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--seed", type=int, default=9)
    args = ap.parse_args(argv)
    out: Path = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    c = Corpus(out, args.seed)
    for name, path in SOURCES.items():
        text = gzip.decompress(path.read_bytes())
        doc = orjson.loads(text)
        make_truncations(c, name, text, doc)
        make_gpu_last_truncations(c, name, doc)
        make_corrupt_gzip(c, name, text)
        make_event_damage(c, name, doc)
    make_not_json(c)
    make_not_a_trace(c)
    make_empty_and_unreadable(c)
    make_nsys(c)
    make_nsys_damage(c)
    make_directories(c)
    make_odd_inputs(c)
    commands = make_outputs(c)
    make_odd_kineto_inputs(c)
    (out / "manifest.json").write_bytes(orjson.dumps({"seed": c.seed, "entries": c.entries, "commands": commands}, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    print(f"{len(c.entries)} corpus entries in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
