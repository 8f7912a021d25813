"""Measured memory: allocator events, peaks, copies, the memory command and predict's JSON.

Every expected value is recomputed here from the raw JSON with plain Python (gzip + json),
independently of the msgspec reader and the polars pipeline.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import polars as pl
import pytest

from conftest import FIXTURES, TRACES, needs_shared, run_cli
from traceanalyzer.classify.allocations import REBUILT, RECORDED, allocation_timeline, copy_bandwidth, memory_peaks
from traceanalyzer.model.memory import COMPONENTS, GIB
from traceanalyzer.parsers import load
from traceanalyzer.parsers.kineto_memory import read_memory_events
from traceanalyzer.api import memory  # the verb: it reads the trace and its memory events

LEGACY = FIXTURES / "kineto" / "v100_resnet50_legacy2021.json.gz"
HTA_MEMORY = TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
CONFIG_70B = Path(__file__).resolve().parents[1] / "docs" / "examples" / "issue1031-70b.toml"


def raw_events(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def plain_memory(doc: dict, device_type: int = 1) -> list[dict]:
    """The [memory] events of one device type in time order (stable), as plain dicts."""
    evs = [e for e in doc["traceEvents"] if e.get("name") == "[memory]" and e["args"].get("Device Type") == device_type]
    return sorted(evs, key=lambda e: e["ts"])  # sorted() is stable: file order among equal times


def plain_steps(doc: dict) -> list[tuple[int, float, float]]:
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"):
            out.append((int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]))
    return sorted(set(out))


@needs_shared()
def test_peaks_equal_the_allocator_counters_of_a_real_trace():
    doc = raw_events(HTA_MEMORY)
    evs = plain_memory(doc)
    peak = max(e["args"]["Total Allocated"] for e in evs)
    peak_ts = min(e["ts"] for e in evs if e["args"]["Total Allocated"] == peak)
    reserved = max(e["args"]["Total Reserved"] for e in evs)
    step = next(n for n, a, b in plain_steps(doc) if a <= peak_ts < b)
    assert (peak, reserved, step) == (6629508096, 12782141440, 2)  # by hand from the raw JSON, as above

    r = memory(HTA_MEMORY)
    row = r.measured.row(0, named=True)
    assert (row["rank"], row["device"]) == (1, "cuda:1")  # distributedInfo rank 1, device 1
    assert row["peak_allocated"] == peak and row["peak_reserved"] == reserved and row["peak_step"] == step
    assert row["peak_allocated_ns"] == int(peak_ts) * 1000  # integer epoch µs -> ns
    assert row["events"] == len(evs) and row["source"] == RECORDED
    assert r.fit.item(0, "measured_peak_allocated") == peak
    # in time order the counters are consistent: allocated[i] = allocated[i-1] + bytes[i]
    tl = r.timeline
    assert tl.select((pl.col("allocated").diff() == pl.col("bytes")).slice(1).all()).item()


@needs_shared()
def test_memory_read_by_a_rank_worker_equals_one_process():
    """A job large enough for rank workers (54 MB of JSON): the worker reads the file's allocator
    events while it parses it (one pass per file instead of two); the result is the same as
    from a trace loaded here, whose files are read again for their memory events."""
    one, pool = memory(load(HTA_MEMORY)), memory(HTA_MEMORY)
    for name in ("timeline", "measured", "copies"):
        assert getattr(pool, name).equals(getattr(one, name)), name
    assert pool.measured.height == 1 and pool.warnings == one.warnings


def test_rebuilt_allocation_of_a_legacy_trace_is_the_running_sum():
    doc = raw_events(LEGACY)
    evs = plain_memory(doc)
    run, peak, low = 0, 0, 0
    for e in evs:
        run += e["args"]["Bytes"]
        peak, low = max(peak, run), min(low, run)
    assert (peak - low, len(evs)) == (2791636480, 8220)
    trace = load(LEGACY)
    mem = read_memory_events(LEGACY, trace.meta.item(0, "base_time_ns") or 0).with_columns(pl.lit(0, dtype=pl.Int32).alias("rank"))
    tl = allocation_timeline(mem)
    peaks = memory_peaks(tl, trace.events)
    assert peaks.item(0, "peak_allocated") == peak - low
    assert peaks.item(0, "source") == REBUILT and peaks.item(0, "peak_reserved") is None
    # the host allocator's events are left out unless asked for
    assert allocation_timeline(mem, gpu_only=False).filter(pl.col("device") == "cpu").height == \
        len(plain_memory(doc, device_type=0))


def test_copy_bandwidth_matches_plain_sums():
    doc = raw_events(LEGACY)
    sums: dict[str, list[int]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("Memcpy", "Memset"):
            s = sums.setdefault(e["name"], [0, 0, 0])
            s[0] += 1
            s[1] += e["args"].get("bytes", 0)
            s[2] += e["dur"] * 1000
    got = copy_bandwidth(load(LEGACY).events)
    assert {r["name"]: [r["count"], r["bytes"], r["busy_ns"]] for r in got.iter_rows(named=True)} == sums
    htod = got.filter(pl.col("name").str.starts_with("Memcpy HtoD")).row(0, named=True)
    assert htod["gb_per_s"] == pytest.approx(sums[htod["name"]][1] / sums[htod["name"]][2])


def test_reader_takes_odd_values_and_bare_arrays(tmp_path):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {"stream": 7}},
        {"ph": "i", "name": "[memory]", "ts": 11.5, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1024,
                                                             "Total Allocated": 1024, "Total Reserved": 2097152}},
        {"ph": "i", "name": "[memory]", "ts": 12, "args": {"Device Type": 1, "Device Id": 0, "Bytes": "0x0",
                                                           "Total Allocated": 1024, "Total Reserved": 2097152}},
        {"ph": "i", "name": "[memory]", "ts": 13, "args": {"Device Type": 1, "Device Id": 0, "Bytes": -1024,
                                                           "Total Allocated": 0, "Total Reserved": 2097152}},
    ]
    doc = tmp_path / "t.json"
    doc.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 1_000_000_000}))
    df = read_memory_events(doc)
    assert df.get_column("ts_ns").to_list() == [1_000_011_500, 1_000_012_000, 1_000_013_000]
    assert df.get_column("bytes").to_list() == [1024, None, -1024]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(events))
    assert read_memory_events(bare).get_column("ts_ns").to_list() == [11_500, 12_000, 13_000]
    broken = tmp_path / "broken.json"
    broken.write_text('{"traceEvents": [{"name": "[memory]", "ts": 1}')
    r = run_cli("memory", broken)
    assert r.returncode == 4 and len(r.stderr.strip().splitlines()) == 1 and str(broken) in r.stderr


def test_memory_command_prediction_and_verdict_json():
    r = run_cli("memory", "-c", CONFIG_70B, "-f", "json", "--reserve", "10")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    pred = doc["predicted"]
    assert list(pred["components_bytes"]) == list(COMPONENTS)
    assert pred["total_bytes"] == pytest.approx(sum(pred["components_bytes"].values()))
    assert pred["reserve_bytes"] == 10 * GIB and pred["capacity_bytes"] == 80 * GIB
    assert pred["headroom_bytes"] == pytest.approx(80 * GIB - 10 * GIB - pred["total_bytes"])
    assert doc["fit"]["fits"] is True and doc["measured"] == []
    # a reserve that leaves less than the total: does not fit
    small = json.loads(run_cli("memory", "-c", CONFIG_70B, "-f", "json", "--reserve", "70").stdout)
    assert small["fit"]["fits"] is False


@needs_shared()
def test_memory_command_measured_beside_prediction_table_and_csv():
    r = run_cli("memory", HTA_MEMORY, "-c", CONFIG_70B)
    assert r.returncode == 0, r.stderr
    assert "Predicted memory per GPU" in r.stdout and "Measured memory" in r.stdout and "6.17" in r.stdout
    c = run_cli("memory", HTA_MEMORY, "-f", "csv")
    rows = list(csv.DictReader(io.StringIO(c.stdout)))
    assert len(rows) == 26770 and max(int(x["allocated"]) for x in rows) == 6629508096


@pytest.mark.parametrize("args,code,key", [
    (["--reserve", "-1"], 2, "--reserve"),
    (["--reserve", "nan"], 2, "--reserve"),
    (["--reserve", "x"], 2, "--reserve"),
    ([], 2, "TRACE"),
])
def test_memory_command_bad_values(args, code, key):
    base = ["-c", str(CONFIG_70B)] if args else []
    r = run_cli("memory", *base, *args)
    assert r.returncode == code and key in r.stderr
    assert "Traceback" not in r.stderr


def test_memory_command_bad_config_key_names_it(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text(CONFIG_70B.read_text().replace("[parallel]\n", "[parallel]\nzero_stage = 5\n"))
    r = run_cli("memory", "-c", cfg)
    assert r.returncode == 7 and "[parallel] zero_stage" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_predict_json_carries_memory_by_component():
    r = run_cli("predict", "-c", CONFIG_70B, "-f", "json")
    assert r.returncode == 0, r.stderr
    mem = json.loads(r.stdout)["memory"]
    assert list(mem["components_bytes"]) == list(COMPONENTS) and mem["stage"] == 0
    # TP8 PP8 DP2, distributed optimizer: 2 + 4 + 12/2 bytes per parameter on the first stage
    c = mem["components_bytes"]
    assert c["weights"] / 2 == pytest.approx(mem["params_per_gpu"])
    assert c["optimizer_states"] == pytest.approx(mem["params_per_gpu"] * 12 / 2)


def test_nsys_cuda_memory_usage_events_are_driver_allocations_per_rank(tmp_path):
    """A real 2-GPU nsys export (fixture) with a CUDA_GPU_MEMORY_USAGE_EVENTS table added, in the
    layout nsys 2024+ writes (--cuda-memory-usage=true)."""
    import shutil
    import sqlite3

    from traceanalyzer.classify.allocations import DRIVER

    f = tmp_path / "mem.sqlite"
    shutil.copy(FIXTURES / "nsys" / "mfu_2gpu_before_cut.sqlite", f)
    g0, g1 = 281477392629760, 281477409406976  # the globalPid of the processes of devices 0 and 1
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE CUDA_GPU_MEMORY_USAGE_EVENTS (start INTEGER NOT NULL, globalPid INTEGER NOT NULL, "
                "deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, address INTEGER NOT NULL, pc INTEGER NOT NULL, "
                "bytes INTEGER NOT NULL, memKind INTEGER NOT NULL, memoryOperationType INTEGER NOT NULL, name TEXT, "
                "correlationId INTEGER)")
    rows = [  # (start, globalPid, deviceId, bytes, memKind, op): op 1 = free; memKind 2 = device, 1 = pinned host
        (60126000000, g0, 0, 2**30, 2, 0), (60126000100, g0, 0, 2**29, 2, 0), (60126000200, g0, 0, 2**29, 2, 1),
        (60126000300, g0, 0, 2**20, 2, 0), (60126000400, g0, 0, 2**33, 1, 0),
        (60126000000, g1, 1, 2**31, 2, 0), (60126000500, g1, 1, 2**31, 2, 1),
        (60126000600, 999 * 2**24, 0, 5, 2, 0),  # a process the trace did not analyse
    ]
    con.executemany("INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS VALUES (?, ?, ?, 1, 4096, 0, ?, ?, ?, NULL, NULL)", rows)
    con.commit()
    con.close()
    r = memory(f)
    m = {x["rank"]: x for x in r.measured.iter_rows(named=True)}
    # device 0: 1 GiB + 0.5 GiB - 0.5 GiB + 1 MiB; the peak is 1.5 GiB at the second event; pinned host memory left out
    assert m[0]["peak_reserved"] == 2**30 + 2**29 and m[0]["peak_reserved_ns"] == 60126000100 and m[0]["events"] == 4
    assert m[1]["peak_reserved"] == 2**31 and m[1]["device"] == "cuda:1"
    assert m[0]["peak_allocated"] is None and m[0]["source"] == DRIVER
    assert any("1 CUDA memory events belong to no analysed process" in w for w in r.warnings)
    assert r.timeline.filter(pl.col("rank") == 0).get_column("reserved").to_list() == [2**30, 2**30 + 2**29, 2**30, 2**30 + 2**20]


def test_memory_kept_free_is_checked_before_anything_is_read():
    # the reserve is refused by the reconciler itself too (the verb's checks aside): a negative
    # or infinite reserve is a ConfigError naming it, and so is a call with nothing to do
    from traceanalyzer.errors import ConfigError
    from traceanalyzer.reconciliation.footprint import memory

    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="must be a finite number of GiB, zero or more"):
            memory(config=CONFIG_70B, reserve_gb=bad)
    with pytest.raises(ConfigError, match="nothing to do"):
        memory()


def test_trace_with_nothing_to_measure_is_exit_5_unless_a_configuration_is_given():
    cpu = FIXTURES / "kineto" / "cpu_only_gpt.pt.trace.json.gz"
    r = run_cli("memory", cpu)
    assert r.returncode == 5 and str(cpu) in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("memory", cpu, "-c", CONFIG_70B, "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["measured"] == []
    assert "no GPU memory events" in r.stderr
