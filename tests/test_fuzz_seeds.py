"""The decoder fuzzer's seeds (tests/data/fuzz) through both Kineto decoders, and a small trace cut
at every few bytes: the compiled decoder gives the Python decoder's frames, or leaves the input to
it; the whole-file reader (tiny blocks and chunks, plain and as gzip members) gives the same frame,
meta and warnings, or the same error class, with either decoder.

The checks are scripts/fuzz_decoder.py's own (its differential), run here on the in-place build;
the fuzzer itself (clang, ASan, atheris) runs in CI. A crash or difference it finds is added to
tests/data/fuzz (see its README)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import polars as pl
import pytest

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("fuzz_decoder", ROOT / "scripts" / "fuzz_decoder.py")
fz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fz)

try:  # where the compiled decoder lives: the fuzzer's constant
    native = importlib.import_module(fz.NATIVE_MODULE)
except ImportError:
    native = None

pytestmark = pytest.mark.skipif(native is None, reason="the compiled decoder is not built (python setup.py build_ext --inplace)")

SEEDS = sorted(p for p in (ROOT / "tests" / "data" / "fuzz").iterdir() if p.suffix == ".bin")


def test_there_are_seeds_of_each_kind():
    kinds = {p.name.split("-")[0] + "-" + p.name.split("-")[1] for p in SEEDS}
    assert {"piece-taken", "file-plain", "file-gzip", "file-refused"} <= kinds


@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.stem)
def test_seed_gives_the_same_answer_with_both_decoders(seed, tmp_path):
    data = seed.read_bytes()
    fz.check_input(data, tmp_path)
    if seed.name.startswith("piece-taken"):  # the compiled decoder takes it (so the frames were compared)
        assert native.decode(data[1:]) is not None
    if seed.name.startswith("file-refused"):  # refused, with the same class by both (checked above)
        block, chunk, members = fz.file_params(data[1], data[2])
        path = tmp_path / "t.json"
        path.write_bytes(data[3:])
        assert fz._parse_with("python", path, block, chunk) is not None


def test_the_check_catches_a_wrong_frame(monkeypatch, tmp_path):
    """The differential can fail: a compiled decoder whose ``ts`` is off by one is caught."""
    piece = next(p for p in SEEDS if p.name.startswith("piece-taken")).read_bytes()[1:]
    events = fz._modules()[1]
    real = events.decode_native

    def off_by_one(module, data):
        df, n, no_ph = real(module, data)
        return df.with_columns(pl.col("ts") + 1), n, no_ph

    monkeypatch.setattr(events, "decode_native", off_by_one)
    with pytest.raises(fz.Difference, match="frames differ"):
        fz.check_piece(piece)


def test_every_cut_of_a_small_trace_reads_the_same_with_both_decoders(tmp_path):
    doc = fz.sweep_trace()
    assert b'"traceEvents"' in doc and len(doc) > 500
    # every 7th byte plain (64-byte blocks, 256-byte chunks), every 23rd as 97-byte gzip members
    n = fz.sweep(doc, tmp_path, step=7) + fz.sweep(doc, tmp_path, members=97, step=23)
    assert n == len(range(0, len(doc) + 1, 7)) + len(range(0, len(doc) + 1, 23))


def test_input_dims_beyond_a_double_are_read_not_a_traceback(tmp_path):
    """Found by the fuzzer: ``"Input Dims": [[2,3], 1e400]`` on a GEMM is valid JSON that orjson
    refuses (``number is infinity``); the streaming reader raised it as a traceback (a
    ``BufferError`` once chunks were cut). Python's json reads 1e400 as infinity, which JSON writes
    as null: the dims are ``[[2,3],null]``, the element type that of the first tensor, ``float``."""
    seed = ROOT / "tests" / "data" / "fuzz" / "crash-input-dims-1e400-file.bin"
    path = tmp_path / "t.json"
    path.write_bytes(seed.read_bytes()[3:])
    for decoder in ("native", "python"):
        for block, chunk in ((64, 256), (1 << 19, 1 << 24)):
            events, _meta, _warnings = fz._parse_with(decoder, path, block, chunk)
            mm = events.filter(pl.col("name") == "aten::mm")
            assert mm.height == 1 and events.height == 7
            assert mm["input_dims"].to_list() == ["[[2,3],null]"]
            assert mm["input_type"].to_list() == ["float"]
