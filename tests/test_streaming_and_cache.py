"""The streaming Kineto reader and the Parquet parse cache.

The streaming reader (many small chunks forced here) must give exactly what the whole-document
path gives (one ``orjson.loads`` of the file, then the same frame building): same events, same
meta, same warnings, on complete and on truncated files. The cache must hand back the same
frames, miss when the file's bytes change, hit when only its name, place or mtime do, and treat a
damaged entry as a miss.
"""

from __future__ import annotations

import gzip
import zlib
import os
import shutil

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyzer as ta
from traceanalyzer import cache as parse_cache
from traceanalyzer.parsers import kineto

from conftest import DEMO, DLRM, FIXTURES, run_cli

LEGACY = FIXTURES / "kineto" / "v100_resnet50_legacy2021.json.gz"
ROCM = FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz"


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of ~64 KiB read 16 KiB at a time: every fixture is cut into many chunks."""
    monkeypatch.setattr(kineto, "_CHUNK", 1 << 16)
    monkeypatch.setattr(kineto, "_BLOCK", 1 << 14)


def _same(a, b):
    assert_frame_equal(a[0], b[0])
    # where the cut is reported may differ by a separator byte (comma vs newline before the
    # first lost event) between the two paths; the events kept are identical
    ma, mb = dict(a[1]), dict(b[1])
    assert ma.pop("recovered_fraction") == pytest.approx(mb.pop("recovered_fraction"), abs=1e-6)
    assert ma == mb
    assert a[2] == b[2]


@pytest.mark.parametrize("path", [DEMO, LEGACY, ROCM, sorted(DLRM.glob("*.json.gz"))[0]], ids=lambda p: p.name)
def test_streaming_in_many_chunks_equals_the_whole_document_path(small_chunks, path):
    streamed = kineto._parse_streaming(path)
    whole = kineto._parse_whole(path)
    _same(streamed, whole)
    # and it really was many chunks: the file is far larger than one chunk
    assert len(gzip.open(path).read()) > 8 * kineto._CHUNK or path == ROCM


@pytest.mark.parametrize("path", [DEMO, sorted(DLRM.glob("*.json.gz"))[0]], ids=lambda p: p.name)
def test_a_plain_file_read_into_reused_buffers_equals_the_whole_document_path(small_chunks, tmp_path, path):
    # a plain file is read into a few buffers in turn (16 KiB blocks here: each buffer is
    # refilled dozens of times while the chunks before are decoded); the events are those of
    # the gzip file and of the whole-document path
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.open(path).read())
    assert plain.stat().st_size > 40 * kineto._BLOCK
    streamed = kineto._parse_streaming(plain)
    _same(streamed, kineto._parse_whole(plain))
    assert_frame_equal(streamed[0], kineto._parse_streaming(path)[0])


@pytest.mark.parametrize("fraction", [0.07, 0.33, 0.6, 0.999])
def test_truncated_plain_file_recovers_the_same_events_as_the_whole_document_path(small_chunks, tmp_path, fraction):
    raw = gzip.open(DEMO).read()
    cut = tmp_path / "cut.json"
    size = int(len(raw) * fraction)
    cut.write_bytes(raw[:size])
    streamed = kineto._parse_streaming(cut)
    whole = kineto._parse_whole(cut)
    _same(streamed, whole)
    assert streamed[1]["truncated"] is True
    # the recovered fraction (of the cut file) is where the last complete event ends, just
    # before the cut
    kept_bytes = streamed[1]["recovered_fraction"] * size
    assert size - 20_000 < kept_bytes <= size
    # every event kept is a complete event of the full trace (a prefix of it, in file order)
    full, full_meta, _ = kineto._parse_whole(DEMO)
    n = streamed[0].height
    assert 0 < n < full.height
    base = full_meta["base_time_ns"]  # written after the events: lost with the cut
    assert streamed[1]["base_time_ns"] is None and base
    assert_frame_equal(streamed[0], full.head(n).with_columns(pl.col("start_ns") - base, pl.col("end_ns") - base))


def test_truncated_gzip_stream_matches_the_whole_document_path(small_chunks, tmp_path):
    data = DEMO.read_bytes()
    gz = tmp_path / "cut.json.gz"
    gz.write_bytes(data[: int(len(data) * 0.45)])
    streamed = kineto._parse_streaming(gz)
    _same(streamed, kineto._parse_whole(gz))
    assert streamed[1]["truncated"] is True and streamed[0].height > 0


def test_minified_single_line_trace_is_read_whole(small_chunks, tmp_path):
    import orjson

    doc = orjson.loads(gzip.open(ROCM).read())
    p = tmp_path / "one_line.json"
    p.write_bytes(orjson.dumps(doc))
    assert b"\n" not in p.read_bytes()
    _same(kineto.parse_file(p), kineto._parse_whole(p))


def test_bare_array_trace_falls_back_to_the_whole_document_path(tmp_path):
    import orjson

    doc = orjson.loads(gzip.open(ROCM).read())
    p = tmp_path / "bare.json"
    p.write_bytes(orjson.dumps(doc["traceEvents"], option=orjson.OPT_INDENT_2))
    df, meta, _ = kineto.parse_file(p)
    assert df.height == kineto._parse_whole(ROCM)[0].height
    assert meta["base_time_ns"] is None  # the bare array has no baseTimeNanoseconds


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("TRACEANALYZER_CACHE", str(d))
    parse_cache._digests.clear()  # this process's memo of file digests: start from the disk's
    return d


def _entries(d):
    return sorted((d / "traces").glob("*.parquet"))


def _assert_same_trace(a, b):
    assert_frame_equal(a.events, b.events)
    assert_frame_equal(a.meta, b.meta)
    assert a.warnings == b.warnings


def _count_parses(monkeypatch) -> list:
    calls = []
    real = kineto.parse_file
    monkeypatch.setattr(kineto, "parse_file", lambda f: calls.append(f) or real(f))
    return calls


def test_cache_returns_the_same_frames_and_is_really_used(cache_dir, monkeypatch):
    fresh = ta.load(DLRM)
    first = ta.load(DLRM, cache=True)
    _assert_same_trace(fresh, first)
    # one entry per rank file (8 distinct byte strings), one remembered digest per file
    assert len(_entries(cache_dir)) == 8 and len(list((cache_dir / "digests").glob("*.json"))) == 8

    def no_parse(path):
        raise AssertionError(f"parsed {path} although it is cached")

    monkeypatch.setattr(kineto, "parse_file", no_parse)
    second = ta.load(DLRM, cache=True)
    _assert_same_trace(fresh, second)
    second.validate()
    # breakdown over cached frames is the breakdown over parsed ones
    assert_frame_equal(ta.breakdown(second), ta.breakdown(fresh))


def test_cache_is_keyed_by_content(cache_dir, tmp_path, monkeypatch):
    p = tmp_path / "rank0.json.gz"
    shutil.copy(ROCM, p)
    a = ta.load(p, cache=True)
    calls = _count_parses(monkeypatch)
    assert ta.load(p, cache=True).events.height == a.events.height and calls == []
    # rewrite the file with other content (the DEMO trace): a miss, parsed again
    shutil.copy(DEMO, p)
    b = ta.load(p, cache=True)
    assert calls == [p]
    assert b.events.height == kineto._parse_whole(DEMO)[0].height != a.events.height
    # a touched file (same bytes, new mtime): hashed again, and a hit
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 2 * 10**9))
    hashed = []
    real_hash = parse_cache._sha256_of
    monkeypatch.setattr(parse_cache, "_sha256_of", lambda f: hashed.append(f) or real_hash(f))
    ta.load(p, cache=True)
    assert calls == [p] and len(hashed) == 1
    # the same bytes under another name and place: a hit, and its paths are the new ones
    other = tmp_path / "elsewhere" / "rank3.json.gz"
    other.parent.mkdir()
    shutil.copy(p, other)
    c = ta.load(other, cache=True)
    assert calls == [p] and len(hashed) == 2
    assert c.meta["file"].to_list() == [str(other)]
    _assert_same_trace(c, ta.load(other))
    # an unchanged file is not read again to be hashed (its digest is remembered by identity,
    # also across processes: the memo is on disk)
    parse_cache._digests.clear()
    ta.load(other, cache=True)
    assert len(hashed) == 2


def test_cache_key_holds_the_parser_version(cache_dir, monkeypatch):
    ta.load(ROCM, cache=True)
    calls = _count_parses(monkeypatch)
    monkeypatch.setattr(parse_cache, "CACHE_VERSION", "kineto-999")
    ta.load(ROCM, cache=True)
    assert calls == [ROCM] and len(_entries(cache_dir)) == 2


def test_a_file_that_changes_while_parsed_is_not_cached(cache_dir, tmp_path, monkeypatch):
    p = tmp_path / "growing.json.gz"
    shutil.copy(ROCM, p)
    real = kineto.parse_file

    def parse_while_written(f):
        out = real(f)
        with open(p, "ab") as fh:  # the profiler appends while we parse
            fh.write(b"\n")
        return out

    monkeypatch.setattr(kineto, "parse_file", parse_while_written)
    ta.load(p, cache=True)
    assert _entries(cache_dir) == []


def test_unreadable_cache_entry_is_a_miss_and_is_replaced(cache_dir, monkeypatch):
    ref = ta.load(ROCM)
    ta.load(ROCM, cache=True)
    [entry] = _entries(cache_dir)
    for damage in (b"not parquet", b"", entry.read_bytes()[: entry.stat().st_size // 2]):
        entry.write_bytes(damage)
        again = ta.load(ROCM, cache=True)
        _assert_same_trace(again, ref)
        assert entry.read_bytes()[:4] == b"PAR1" and entry.stat().st_size > 1000  # rewritten
    calls = _count_parses(monkeypatch)
    ta.load(ROCM, cache=True)
    assert calls == []
    # a damaged digest memo is a miss too (the file is hashed again)
    for memo in (cache_dir / "digests").glob("*.json"):
        memo.write_bytes(b"{")
    parse_cache._digests.clear()
    _assert_same_trace(ta.load(ROCM, cache=True), ref)
    assert calls == []


def test_unwritable_cache_is_skipped(tmp_path, monkeypatch):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("TRACEANALYZER_CACHE", str(blocker / "cache"))
    _assert_same_trace(ta.load(ROCM, cache=True), ta.load(ROCM))


def test_default_cache_dir_is_the_platform_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("TRACEANALYZER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    import sys

    if sys.platform.startswith("linux"):
        assert parse_cache.default_dir() == tmp_path / "xdg" / "traceanalyzer"
    monkeypatch.setenv("TRACEANALYZER_CACHE", str(tmp_path / "mine"))
    assert parse_cache.default_dir() == tmp_path / "mine"
    ta.load(ROCM, cache=tmp_path / "explicit")  # an explicit directory wins over both
    assert len(_entries(tmp_path / "explicit")) == 1 and not (tmp_path / "mine").exists()


def test_truncated_trace_warning_survives_the_cache(cache_dir, tmp_path):
    raw = gzip.open(DEMO).read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    first = ta.load(cut, cache=True)
    second = ta.load(cut, cache=True)
    _assert_same_trace(first, second)
    assert any("truncated" in w for w in second.warnings)
    # the same bytes under another name: the warnings name the new file
    moved = tmp_path / "moved.json"
    shutil.copy(cut, moved)
    third = ta.load(moved, cache=True)
    assert third.warnings == [w.replace(str(cut), str(moved)) for w in first.warnings]
    assert any(str(moved) in w for w in third.warnings)


def test_cli_cache_flag_writes_and_reuses_the_cache(cache_dir, tmp_path):
    out1, out2 = tmp_path / "a.json", tmp_path / "b.json"
    r1 = run_cli("breakdown", ROCM, "--cache", "-f", "json", "-o", out1)
    assert r1.returncode == 0, r1.stderr
    assert len(_entries(cache_dir)) == 1
    r2 = run_cli("breakdown", ROCM, "--cache", "-f", "json", "-o", out2)
    assert r2.returncode == 0, r2.stderr
    assert out1.read_bytes() == out2.read_bytes()
    # default is no cache: nothing new written
    r3 = run_cli("breakdown", DEMO, "-f", "json", "-o", out2)
    assert r3.returncode == 0 and len(_entries(cache_dir)) == 1


@pytest.mark.parametrize("where", [0.5, 0.95, "crc"])
def test_gzip_damaged_after_many_blocks_is_corrupt_not_truncated(small_chunks, tmp_path, where):
    # a flipped bit far into the file (in the deflate data, or in the CRC of the trailer: every
    # event inflates intact, then zlib reports the damage): many blocks inflated before the
    # error, which must still be "corrupt gzip data" (exit 4), as the whole-document path says,
    # and not a recovered (truncated) trace: which it was depended on the block size before
    from traceanalyzer.errors import InvalidTrace

    gz = bytearray(DEMO.read_bytes())
    i = len(gz) - 8 if where == "crc" else int(len(gz) * where)
    for bit in range(8):  # the first flip zlib detects (most do)
        bad = bytearray(gz)
        bad[i] ^= 1 << bit
        try:
            gzip.decompress(bytes(bad))
        except (OSError, EOFError, zlib.error):
            break
    else:
        pytest.skip("no detectable flip at this offset")
    path = tmp_path / "damaged.json.gz"
    path.write_bytes(bytes(bad))
    # (the streaming path may first meet garbled text inflated before the error and hand the
    # file to the whole-document path: either way, the same error)
    for parse in (kineto.parse_file, kineto._parse_whole):
        with pytest.raises(InvalidTrace, match="corrupt gzip data"):
            parse(path)
