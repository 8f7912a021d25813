from __future__ import annotations

import gzip
import math

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.errors import InvalidTrace
from traceanalyzer.schema import EVENT_SCHEMA

from conftest import DEMO, DLRM, FIXTURES, real_gpu_traces, needs_shared


def _gpu_counts_from_json(path) -> dict[str, tuple[int, int]]:
    """Plain Python over the raw JSON: per GPU kind, the number of complete events and their
    summed duration in ns (the decimal text of ``dur`` in µs, times 1000, exactly)."""
    from decimal import Decimal

    kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset"}
    doc = orjson.loads(gzip.open(path).read())
    out: dict[str, list[int]] = {}
    for e in doc["traceEvents"] if isinstance(doc, dict) else doc:
        kind = kinds.get(str(e.get("cat", "")).lower())
        if e.get("ph") == "X" and kind:
            n, d = out.setdefault(kind, [0, 0]), Decimal(str(e["dur"])) * 1000
            n[0], n[1] = n[0] + 1, n[1] + int(d)
    return {k: tuple(v) for k, v in out.items()}


@pytest.mark.parametrize("path", real_gpu_traces(), ids=lambda p: p.name)
def test_every_real_trace_parses_every_gpu_event_of_the_json(path):
    trace = ta.load(path)
    trace.validate()
    assert trace.events.height > 0 and trace.meta.height == 1
    gpu = trace.events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    got = {k: (n, d) for k, n, d in gpu.group_by("kind").agg(pl.len(), (pl.col("end_ns") - pl.col("start_ns")).sum()).rows()}
    assert got == _gpu_counts_from_json(path)


def _raw_events(path):
    return orjson.loads(gzip.open(path).read())


def test_timestamps_are_exact_integer_nanoseconds_on_the_common_base():
    doc = _raw_events(DEMO)
    base = doc["baseTimeNanoseconds"]
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    k = max(kernels, key=lambda e: e["dur"])
    # "{us}.{ns:03}" as written: parse the decimal text exactly, independent of floats
    us, _, frac = f"{k['ts']:.3f}".partition(".")
    want = base + int(us) * 1000 + int(frac)
    trace = ta.load(DEMO)
    got = trace.events.filter((pl.col("kind") == "kernel") & (pl.col("correlation") == k["args"]["correlation"]))
    assert got["start_ns"].to_list() == [want]
    assert got["end_ns"][0] - got["start_ns"][0] == round(k["dur"] * 1000)


def test_integer_epoch_microseconds_without_base_keep_full_precision():
    path = sorted(DLRM.glob("worker0_*"))[0]
    doc = _raw_events(path)
    assert "baseTimeNanoseconds" not in doc
    first = min(e["ts"] for e in doc["traceEvents"] if e.get("ph") == "X" and "ts" in e and e.get("cat") == "kernel")
    trace = ta.load(path)
    assert isinstance(first, int) and first > 1.6e15
    assert trace.events.filter(pl.col("kind") == "kernel")["start_ns"].min() == first * 1000


def test_directory_loads_every_rank_with_rank_and_world_size():
    trace = ta.load(DLRM)
    assert trace.ranks == list(range(8))
    assert set(trace.meta["world_size"].to_list()) == {8}
    assert set(trace.meta["device_name"].to_list()) == {"Tesla V100-SXM2-32GB"}


def test_legacy_2021_categories_map_to_canonical_kinds():
    trace = ta.load(FIXTURES / "kineto" / "v100_resnet50_legacy2021.json.gz")
    kinds = dict(trace.events.group_by("kind").len().iter_rows())
    assert kinds["kernel"] == 8772 and kinds["cpu_op"] == 23646 and kinds["runtime"] == 11923
    # legacy GPU rows carry the stream in a string tid ("stream 7")
    assert trace.events.filter(pl.col("kind") == "kernel")["stream"].null_count() == 0


def test_rocm_string_values_in_numeric_args_become_null_not_errors():
    trace = ta.load(FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz")
    assert trace.events.filter(pl.col("kind") == "kernel").height == 14


def test_collective_args_and_input_dims_are_kept():
    trace = ta.load(DEMO)
    rpc = trace.events.filter(pl.col("name") == "record_param_comms")
    assert rpc.height > 0 and rpc["coll_name"].drop_nulls().len() > 0
    assert 8 in set(rpc["group_size"].drop_nulls().to_list())
    mm = trace.events.filter(pl.col("name") == "aten::mm")["input_dims"].drop_nulls()
    assert mm.len() > 0 and orjson.loads(mm[0])[0]  # compact JSON text


def test_truncated_trace_is_recovered_with_a_warning(tmp_path):
    raw = gzip.open(DEMO).read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: int(len(raw) * 0.6)])
    trace = ta.load(cut)
    assert any("truncated" in w and "recovered" in w for w in trace.warnings)
    full = ta.load(DEMO)
    assert 0.4 * full.events.height < trace.events.height < 0.8 * full.events.height
    assert trace.meta["truncated"][0] is True
    # truncated gzip stream as well
    gz = tmp_path / "cut.json.gz"
    data = DEMO.read_bytes()
    gz.write_bytes(data[: len(data) // 2])
    t2 = ta.load(gz)
    assert t2.meta["truncated"][0] is True and t2.events.height > 0


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"hello, not json", "not valid JSON"),
        (b'{"foo": 1}', "not a Chrome trace"),
        (b"\x1f\x8b\x08\x00garbage-garbage", "corrupt gzip"),
        (b'{"traceEvents": []}', "no events"),
    ],
)
def test_bad_inputs_raise_invalid_trace_naming_the_file(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(InvalidTrace) as exc:
        ta.load(p)
    assert message in str(exc.value) and str(p) in str(exc.value)


def test_canonical_schema_is_documented_in_the_module():
    import traceanalyzer.schema as schema

    for col in EVENT_SCHEMA:
        assert col in schema.__doc__


def test_empty_device_name_gets_a_fallback_that_says_so(tmp_path):
    """Some ROCm traces leave deviceProperties[].name empty: the meta says the name was not
    recorded (with the architecture when given) instead of showing an empty string."""
    import gzip

    import orjson

    import traceanalyzer as ta
    from conftest import DEMO

    doc = orjson.loads(gzip.decompress(DEMO.read_bytes()))
    props = doc["deviceProperties"]
    assert ta.load(DEMO).meta["device_name"].to_list() == ["AMD Instinct MI300X"]
    for p in props:
        p["name"] = ""
    f = tmp_path / "noname.json"
    f.write_bytes(orjson.dumps(doc))
    (name,) = ta.load(f).meta["device_name"].to_list()
    import re

    # the rank's GPU is the device pid with the most kernels: pid 2 in this MI300X trace
    assert re.fullmatch(r"GPU 2 \(name not recorded\)", name), name
    for p in props:
        p["gcnArchName"] = "gfx942:sramecc+:xnack-"
    f.write_bytes(orjson.dumps(doc))
    assert ta.load(f).meta["device_name"].to_list() == ["GPU 2 (name not recorded, gfx942:sramecc+:xnack-)"]
