from __future__ import annotations

import gzip
import importlib
import re

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.errors import InvariantViolation, NoGpuActivity

from conftest import DEMO, DLRM, FIXTURES, TRACES, needs_shared
from reference import partition as ref_partition

# the submodule (classify/__init__ re-exports a function of the same name)
partition_mod = importlib.import_module("traceanalyzer.classify.partition")


# Every step of every real trace against an independent count from the raw JSON: test_vs_hta.py;
# the whole trace: test_hta_reference.py.


@needs_shared()
def test_cupti_range_profiler_trace_has_no_gpu_activity():
    # range-profiler mode: no GPU activity events at all
    with pytest.raises(NoGpuActivity):
        ta.breakdown(ta.load(TRACES / "hta" / "cupti_profiler" / "benchmark_result_924719_1679055439_trace.json.gz"))


def _reference_for_single_step(path):
    """Independent computation on one ProfilerStep trace straight from the JSON."""
    doc = orjson.loads(gzip.open(path).read())
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    step = [e for e in ev if re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))]
    assert len(step) == 1
    s0, s1 = step[0]["ts"], step[0]["ts"] + step[0]["dur"]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    comm_ext = {e["args"]["External id"] for e in ev if e.get("name") == "record_param_comms"}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    # the step is its host range [start, end), whatever GPU work it launched
    assert any(s0 <= launch.get(e["args"].get("correlation"), -1) < s1 for e in gpu)
    w0, w1 = s0 * 1000, s1 * 1000
    intervals = []
    for e in gpu:
        if e["cat"] != "kernel":
            cls = "other"
        elif e["name"].lower().startswith("nccl") or e["args"].get("External id") in comm_ext:
            cls = "comm"
        else:
            cls = "compute"
        intervals.append((e["ts"] * 1000, (e["ts"] + e["dur"]) * 1000, cls))
    return ref_partition(intervals, w0, w1), w1 - w0


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_partition_equals_a_hand_computation_from_the_raw_json(rank):
    path = sorted(DLRM.glob(f"worker{rank}_*"))[0]
    ref, dur = _reference_for_single_step(path)
    row = ta.breakdown(ta.load(path)).row(0, named=True)
    assert row["duration_ns"] == dur
    for b in ["compute", "recompute", "exposed_comm", "other", "idle", "overlapped_comm"]:
        assert row[f"{b}_ns"] == ref[b], b


def test_dlrm_rank0_pinned_values():
    # pinned from the hand computation above (µs): the step is its 14455 µs ProfilerStep range
    row = ta.breakdown(ta.load(sorted(DLRM.glob("worker0_*"))[0])).row(0, named=True)
    assert (row["duration_us"], row["compute_us"], row["exposed_comm_us"], row["idle_us"]) == (14455.0, 1034.0, 5537.0, 7865.0)
    assert row["overlapped_comm_us"] == 261.0 and row["other_us"] == 19.0


def test_steps_are_their_profiler_step_ranges_read_from_the_json():
    a = ta.analyze(ta.load(DEMO))
    w = a.windows.sort("wstart_ns")
    doc = orjson.loads(gzip.open(DEMO).read())
    base = int(doc.get("baseTimeNanoseconds") or 0)
    spans = sorted(
        (int(m.group(1)), base + round(e["ts"] * 1000), base + round((e["ts"] + e["dur"]) * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and (m := re.fullmatch(r"ProfilerStep#(\d+)", e.get("name", "")))
    )
    assert [s for s, _, _ in spans] == w["step"].to_list() == [15, 16, 17]
    assert w["wstart_ns"].to_list() == [s0 for _, s0, _ in spans]
    assert w["wend_ns"].to_list() == [s1 for _, _, s1 in spans]
    # the host runs ahead of this GPU: the work still queued after the last step ends is outside
    # every step, measured and said (not silently dropped)
    assert a.outside_steps["after_ns"][0] > 0
    assert any("after the last" in x for x in a.warnings)


def test_recompute_is_found_on_the_checkpointing_trace_and_zero_elsewhere():
    df = ta.breakdown(ta.load(DEMO))
    # step 15's range holds GPU work launched before it (the host runs ahead): no recompute yet
    assert df.filter(pl.col("step") > 15)["recompute_ns"].min() > 0
    assert ta.breakdown(ta.load(DLRM))["recompute_ns"].sum() == 0


def test_no_step_markers_means_one_step_with_a_warning():
    a = ta.analyze(ta.load(FIXTURES / "kineto" / "a100_alexnet_nosteps.json.gz"))
    assert a.steps.height == 1 and a.steps["step"][0] == 0
    assert any("no 'ProfilerStep' step markers" in w for w in a.warnings)
    gpu = a.trace.gpu_events()
    assert a.steps["duration_ns"][0] == gpu["end_ns"].max() - gpu["start_ns"].min()


def test_cpu_only_trace_raises_no_gpu_activity():
    with pytest.raises(NoGpuActivity):
        ta.breakdown(ta.load(FIXTURES / "kineto" / "cpu_only_gpt.pt.trace.json.gz"))


# The invariant checks themselves, on hand-made rows (the pipeline only ever hands them rows
# that pass, so without these a check that let everything through would go unnoticed).

def _partition_rows(*rows):
    cols = ["rank", "step", "duration_ns", "compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns", "overlapped_comm_ns"]
    return pl.DataFrame([dict(zip(cols, r)) for r in rows])


# 40 + 10 + 50 + 0 + 0 = 100 = duration; overlapped 50 = compute + recompute (the bound, allowed);
# the zero buckets are allowed (non-negative, not positive)
GOOD_PARTITION = (0, 7, 100, 40, 10, 50, 0, 0, 50)


def test_check_partition_accepts_an_exact_partition_with_zero_buckets_and_overlap_at_its_bound():
    partition_mod.check_partition(_partition_rows(GOOD_PARTITION, (1, 8, 0, 0, 0, 0, 0, 0, 0)), "x.json")


@pytest.mark.parametrize("bad", [
    (1, 8, 100, 40, 10, 50, 0, 1, 50),    # buckets sum to 101, not 100
    (1, 8, 100, 40, 10, 50, 0, -1, 50),   # sum to 99
    (1, 8, 100, 41, 10, 50, 0, -1, 50),   # sums to 100, but idle is negative
    (1, 8, 100, 40, 10, 50, 0, 0, -1),    # overlapped negative
    (1, 8, 100, 40, 10, 50, 0, 0, 51),    # overlapped 51 > compute + recompute = 50
], ids=["sum-over", "sum-under", "negative-bucket", "negative-overlap", "overlap-above-busy"])
def test_check_partition_names_the_first_violating_rank_and_step(bad):
    # the good row first, a second bad row last (1 ns, no bucket): the message names the first bad
    # one (rank 1, step 8, its 100 ns)
    with pytest.raises(InvariantViolation) as e:
        partition_mod.check_partition(_partition_rows(GOOD_PARTITION, bad, (2, 9, 1, 0, 0, 0, 0, 0, 0)), "x.json")
    assert e.value.message == "partition invariant violated for rank 1 step 8 (duration 100 ns): please report this input"
    assert e.value.path == "x.json"


IDLE, COMM, HOST = ["idle_a", "idle_b"], ["exposed_comm_dp", "exposed_comm_tp"], ["idle_host_p", "idle_host_q"]


def _cause_rows(*rows):
    # idle 30 = a 10 + b 20; exposed comm 50 = dp 50 + tp 0; host-bound (part of idle) 10 = p 0 + q 10
    cols = ["rank", "step", "idle_ns", "idle_a_ns", "idle_b_ns", "exposed_comm_ns", "exposed_comm_dp_ns", "exposed_comm_tp_ns",
            "idle_host_bound_ns", "idle_host_p_ns", "idle_host_q_ns"]
    return pl.DataFrame([dict(zip(cols, r)) for r in rows])


GOOD_CAUSES = (0, 7, 30, 10, 20, 50, 50, 0, 10, 0, 10)


def test_check_causes_accepts_exact_splits_with_zero_parts():
    partition_mod.check_causes(_cause_rows(GOOD_CAUSES), IDLE, COMM, "x.json", HOST)
    # without a host-bound split the host columns are not looked at (here: absent)
    no_host = _cause_rows(GOOD_CAUSES).drop("idle_host_bound_ns", "idle_host_p_ns", "idle_host_q_ns")
    partition_mod.check_causes(no_host, IDLE, COMM, "x.json")
    partition_mod.check_causes(no_host, IDLE, COMM, "x.json", [])


@pytest.mark.parametrize("bad", [
    (3, 9, 30, 10, 21, 50, 50, 0, 10, 0, 10),   # idle causes sum to 31, not 30
    (3, 9, 30, 10, 20, 50, 49, 0, 10, 0, 10),   # exposed comm by dimension sums to 49, not 50
    (3, 9, 30, 10, 20, 50, 50, 0, 10, 1, 10),   # host-bound split sums to 11, not 10
    (3, 9, 30, 31, -1, 50, 50, 0, 10, 0, 10),   # idle sums, but one cause negative
    (3, 9, 30, 10, 20, 50, 51, -1, 10, 0, 10),  # comm sums, but one dimension negative
    (3, 9, 30, 10, 20, 50, 50, 0, 10, -1, 11),  # host split sums, but one part negative
], ids=["idle-sum", "comm-sum", "host-sum", "negative-idle-cause", "negative-dimension", "negative-host-part"])
def test_check_causes_names_the_first_violating_rank_and_step(bad):
    with pytest.raises(InvariantViolation) as e:
        # a second bad row last (1 ns idle, no cause): the first is named
        partition_mod.check_causes(_cause_rows(GOOD_CAUSES, bad, (4, 10, 1, 0, 0, 0, 0, 0, 0, 0, 0)), IDLE, COMM, "x.json", HOST)
    assert e.value.message == "cause split invariant violated for rank 3 step 9: please report this input"
    assert e.value.path == "x.json"


def _frames(intervals, windows):
    labelled = pl.DataFrame(intervals, schema={"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64, "cls": pl.String}, orient="row")
    win = pl.DataFrame(windows, schema={"rank": pl.Int32, "step": pl.Int64, "wstart_ns": pl.Int64, "wend_ns": pl.Int64}, orient="row")
    return labelled, win


def test_partition_by_hand_rows_in_rank_and_time_order_with_microseconds():
    # rank 0: compute [0, 10), comm [5, 20), other [25, 30); rank 1 runs nothing
    labelled, win = _frames([(0, 0, 10, "compute"), (0, 5, 20, "comm"), (0, 25, 30, "other")],
                            # given out of order: the output is by rank, then start
                            [(1, 1, 0, 5), (0, 2, 15, 40), (0, 1, 0, 15)])
    got = partition_mod.partition(labelled, win)
    assert got.select("rank", "step").rows() == [(0, 1), (0, 2), (1, 1)]
    cols = ["start_ns", "duration_ns", "compute_ns", "recompute_ns", "exposed_comm_ns", "overlapped_comm_ns", "other_ns", "idle_ns"]
    # step 1 [0, 15): compute 0-10, comm alone 10-15 (5 exposed), comm under compute 5-10 (5 overlapped)
    # step 2 [15, 40): comm 15-20, nothing 20-25, other 25-30, nothing 30-40 (idle 5 + 10)
    # rank 1 [0, 5): idle
    assert got.select(cols).rows() == [(0, 15, 10, 0, 5, 5, 0, 0), (15, 25, 0, 0, 5, 0, 5, 15), (0, 5, 0, 0, 0, 0, 0, 5)]
    # every *_us column is its ns / 1000 (to one ulp: polars divides by a constant as a multiply)
    us = {c: pytest.approx(got[f"{c}_us"].to_list(), rel=4e-16, abs=0) for c in ["start", "duration", "compute", "recompute", "exposed_comm", "overlapped_comm", "other", "idle"]}
    assert us == {"start": [0.0, 0.015, 0.0], "duration": [0.015, 0.025, 0.005], "compute": [0.01, 0.0, 0.0], "recompute": [0.0] * 3,
                  "exposed_comm": [0.005, 0.005, 0.0], "overlapped_comm": [0.005, 0.0, 0.0], "other": [0.0, 0.005, 0.0],
                  "idle": [0.0, 0.015, 0.005]}


def test_a_partition_violation_names_the_source_else_trace(monkeypatch):
    real = partition_mod.segment_frame
    # lose every idle segment: the buckets no longer sum to the window
    monkeypatch.setattr(partition_mod, "segment_frame", lambda lab, win: real(lab, win).filter(pl.col("bucket") != "idle"))
    labelled, win = _frames([(0, 0, 10, "compute")], [(0, 1, 0, 15)])
    with pytest.raises(InvariantViolation) as e:
        partition_mod.partition(labelled, win)
    assert e.value.path == "trace"
    with pytest.raises(InvariantViolation) as e:
        partition_mod.partition(labelled, win, "rank3.json")
    assert e.value.path == "rank3.json" and "rank 0 step 1 (duration 15 ns)" in e.value.message
