"""The annotation breakdown: GPU time under NVTX / record_function ranges, by bucket.

Peer numbers: HTA 0.5 (HolisticTraceAnalysis, the version installed from PyPI beside this
project), ``TraceAnalysis(trace_dir=D).get_gpu_user_annotation_breakdown(visualize=False)`` run
once, offline, on a folder holding only ``hta/with_gpu_user_annotation/step_based_trace_2543932
.json.gz`` (renamed ``rank-0.json.gz``). It printed::

    name                               sum (us)  max (us)  min (us)  mean (us)  rank
    Optimizer.step#SGD.step            321.0     67.0      60.0      64.2       0
    Optimizer.zero_grad#SGD.zero_grad  310.0     66.0      59.0      62.0       0

and with ``use_gpu_annotation=False`` (the host ranges' own CPU durations) 669.0 and 594.0 us.
"""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import DEMO, TRACES, cli_csv, cli_json, needs_shared, run_cli
from traceanalyzer.api import annotations
from traceanalyzer.classify.annotation_ranges import annotation_table, with_level
from traceanalyzer.classify.labels import label_gpu
from traceanalyzer.classify.partition import BUCKETS
from traceanalyzer.classify.steps import gpu_windows
from traceanalyzer.parsers import load

ANNOT = TRACES / "hta" / "with_gpu_user_annotation" / "step_based_trace_2543932.json.gz"
QUEUE = TRACES / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
HTA_GPU_SUM_US = {"Optimizer.step#SGD.step": 321.0, "Optimizer.zero_grad#SGD.zero_grad": 310.0}


def _ev(rows):
    from traceanalyzer.schema import EVENT_SCHEMA, conform

    return conform(pl.DataFrame(rows), EVENT_SCHEMA)


def test_nesting_level_by_hand():
    # one thread: A [0,100) holds B [10,50) which holds C [20,30); D [50,60) opens as B closes
    r = pl.DataFrame({"k": [1] * 4, "name": list("ABCD"), "start_ns": [0, 10, 20, 50], "end_ns": [100, 50, 30, 60]})
    got = dict(with_level(r.lazy(), ["k"]).collect().select("name", "level").iter_rows())
    assert got == {"A": 0, "B": 1, "C": 2, "D": 1}


def test_host_projection_and_buckets_by_hand():
    """Two kernels launched inside range R (thread 1), one outside; a memcpy during R's span
    launched by another thread. R's GPU span is [100, 400): compute 100-200 and 300-400,
    the memcpy 200-250 is 'other', 250-300 idle."""
    ev = _ev([
        {"rank": 0, "kind": "annotation", "pid": "1", "tid": "1", "name": "R", "start_ns": 0, "end_ns": 50},
        {"rank": 0, "kind": "annotation", "pid": "1", "tid": "1", "name": "ProfilerStep#1", "start_ns": 0, "end_ns": 600},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 10, "end_ns": 15, "correlation": 1},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 20, "end_ns": 25, "correlation": 2},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 60, "end_ns": 65, "correlation": 3},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "2", "name": "cudaMemcpyAsync", "start_ns": 30, "end_ns": 35, "correlation": 4},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "k1", "start_ns": 100, "end_ns": 200, "correlation": 1},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "k2", "start_ns": 300, "end_ns": 400, "correlation": 2},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "k3", "start_ns": 400, "end_ns": 500, "correlation": 3},
        {"rank": 0, "kind": "memcpy", "pid": "0", "tid": "8", "stream": 8, "name": "Memcpy HtoD", "start_ns": 200, "end_ns": 250, "correlation": 4},
    ])
    gpu = label_gpu(ev)
    win, _ = gpu_windows(ev)
    t = annotation_table(ev, gpu, win)
    r = t.filter(pl.col("name") == "R").row(0, named=True)
    assert (r["source"], r["level"], r["step"], r["count"], r["gpu_work"], r["gpu_work_ns"]) == ("host", 1, 1, 1, 2, 200)
    assert (r["duration_ns"], r["compute_ns"], r["other_ns"], r["idle_ns"], r["exposed_comm_ns"], r["outside_ns"]) == (300, 200, 50, 50, 0, 0)
    s = t.filter(pl.col("name") == "ProfilerStep#1").row(0, named=True)
    assert (s["level"], s["gpu_work"], s["duration_ns"], s["compute_ns"], s["other_ns"], s["idle_ns"]) == (0, 3, 400, 300, 50, 50)


@needs_shared()
def test_gpu_ranges_match_hta_user_annotation_breakdown():
    df = annotations(load(ANNOT), per="name")
    assert set(df["source"]) == {"gpu"}
    got = {r["name"]: r for r in df.iter_rows(named=True)}
    for name, us in HTA_GPU_SUM_US.items():
        assert got[name]["duration_ns"] == int(us * 1000)  # HTA's sum, exactly
        assert got[name]["count"] == 5
    # the same table split by bucket, exactly
    for r in df.iter_rows(named=True):
        assert sum(r[f"{b}_ns"] for b in BUCKETS) == r["duration_ns"]


@needs_shared()
def test_host_projection_equals_kineto_gpu_copies_but_for_the_widened_start():
    """Kineto's GPU-side copy of a range spans the work launched inside it, with its start
    widened by one tick: every host projection ends where the GPU copy ends and starts one
    microsecond (this trace's tick) later. The last Optimizer.step host range was cut at the end
    of the profile (zero length), so only its GPU copy has a span."""
    from traceanalyzer.classify.annotation_ranges import gpu_ranges, host_ranges

    t = load(ANNOT)
    g = label_gpu(t.events).lazy()
    host = host_ranges(t.events.lazy(), g).collect().sort("end_ns")
    dev = gpu_ranges(t.events.lazy(), g).collect().sort("end_ns")
    assert host.height == 9 and dev.height == 10
    both = host.join(dev, on=["name", "end_ns"], how="inner", suffix="_gpu")
    assert both.height == 9
    assert (both["start_ns"] - both["start_ns_gpu"]).to_list() == [1000] * 9
    assert (both["gpu_work"] == both["gpu_work_gpu"]).all() and (both["gpu_work_ns"] == both["gpu_work_ns_gpu"]).all()


@needs_shared()
@pytest.mark.skipif(not (TRACES / "h200").exists(), reason="H200 traces not found")
def test_profiler_step_range_equals_its_window_when_it_covers_it():
    """On the H200 base trace (the host waits for the GPU at the end of every step) the host
    ProfilerStep#N's GPU projection is the work launched from the main thread; its bucket time
    inside its own step never exceeds that step's."""
    from traceanalyzer.api import analyze

    tr = load(TRACES / "h200" / "base" / "rank0.pt.trace.json.gz")
    a = analyze(tr)
    t = annotations(tr, side="host", name=r"^ProfilerStep#\d+$")
    own = t.filter(pl.col("name") == pl.format("ProfilerStep#{}", pl.col("step")))
    assert own.height == a.steps.height
    j = own.join(a.steps, on=["rank", "step"], suffix="_step")
    for b in BUCKETS:
        assert (j[f"{b}_ns"] <= j[f"{b}_ns_step"]).all()


@needs_shared()
def test_mfu_of_a_whole_step_range_is_the_step_mfu(tmp_path):
    """A range that is exactly a step window gets the step's MFU; here checked with --whole-trace
    (the step is the whole GPU span) against model FLOPs / step time / peak by hand."""
    cfg = tmp_path / "run.toml"
    cfg.write_text('[model]\nfwd_flops_per_sample = 1e9\n[batch]\nglobal_batch = 8\n[hardware]\npeak_tflops = 100\nnum_gpus = 2\n')
    tr = load(ANNOT)
    from traceanalyzer.api import analyze

    step = analyze(tr, None).steps.row(0, named=True)
    df = annotations(tr, step_range=None, config=cfg)
    r = df.filter(pl.col("name") == "Optimizer.step#SGD.step").row(0, named=True)
    flops = 3 * 1e9 * 8 / 2  # per GPU per step
    assert r["model_flops"] == pytest.approx(flops * r["compute_ns"] / step["compute_ns"], rel=1e-12)
    assert r["mfu"] == pytest.approx(r["model_flops"] / (r["duration_ns"] * 1e-9) / 100e12, rel=1e-12)


_SQL_NVTX_WORK = """
SELECT g.deviceId, COUNT(*), COUNT(DISTINCT n.rowid) FROM NVTX_EVENTS n
JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n.end
JOIN (SELECT correlationId, deviceId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL
      SELECT correlationId, deviceId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL
      SELECT correlationId, deviceId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) g
  ON g.correlationId = r.correlationId AND g.globalPid = (r.globalTid / 16777216) * 16777216
WHERE n.end IS NOT NULL GROUP BY g.deviceId ORDER BY g.deviceId"""


@needs_shared()
def test_nsys_nvtx_ranges_hold_the_gpu_work_launched_inside_them():
    """Per rank (= CUDA device), the GPU activities launched inside NVTX ranges and the ranges that
    launched any, against plain SQL over the export (a runtime call starting inside a push/pop
    range of its thread; its activity by correlation id within the process)."""
    import sqlite3

    nsys = TRACES / "nsys" / "nsys-ai__h100_2gpu_1s.sqlite"
    df = annotations(nsys, per="rank")
    assert set(df["source"]) == {"host"}
    with sqlite3.connect(nsys) as db:
        want = db.execute(_SQL_NVTX_WORK).fetchall()
    got = df.group_by("rank").agg(pl.col("gpu_work").sum(), pl.col("count").sum()).sort("rank").rows()
    assert got == want == [(0, 2009, 1621), (1, 2009, 1621)]


@needs_shared()
def test_cli_annotations_json_csv_and_bad_regex(tmp_path):
    got = cli_csv(tmp_path / "a.csv", "annotations", ANNOT, "-q", "--by", "name")
    assert dict(zip(got["name"], got["duration_ns"])) == {k: int(v * 1000) for k, v in HTA_GPU_SUM_US.items()}
    doc = cli_json("annotations", ANNOT, "-q", "--source", "host", "--name", "zero_grad")
    assert [row["duration_ns"] for row in doc["rows"]] == [305000]
    r = run_cli("annotations", ANNOT, "-q", "--name", "(?=x)")
    assert r.returncode == 7 and r.stderr.count("\n") == 1 and "--name" in r.stderr


def test_span_outside_and_across_steps_by_hand():
    """W launches work at 10-20 (before the first step, whose host range opens at 30): a row
    with no step and 10 ns outside. Outer holds both steps; its work a, b, c runs 100-140,
    150-250, 250-320 across step 1 [30, 250) and step 2 [250, 320): 150 ns in step 1 (10 idle),
    70 in step 2, the instance and its 3 items counted once (in step 1)."""
    rows = [
        {"rank": 0, "kind": "annotation", "pid": "1", "tid": "1", "name": "W", "start_ns": 0, "end_ns": 8},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 1, "end_ns": 2, "correlation": 1},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "w", "start_ns": 10, "end_ns": 20, "correlation": 1},
        {"rank": 0, "kind": "annotation", "pid": "1", "tid": "1", "name": "Outer", "start_ns": 25, "end_ns": 320},
        {"rank": 0, "kind": "annotation", "pid": "1", "tid": "1", "name": "ProfilerStep#1", "start_ns": 30, "end_ns": 250},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 41, "end_ns": 42, "correlation": 2},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "a", "start_ns": 100, "end_ns": 140, "correlation": 2},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 43, "end_ns": 44, "correlation": 3},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "b", "start_ns": 150, "end_ns": 250, "correlation": 3},
        {"rank": 0, "kind": "annotation", "pid": "1", "tid": "1", "name": "ProfilerStep#2", "start_ns": 250, "end_ns": 320},
        {"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": 250, "end_ns": 251, "correlation": 4},
        {"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": "c", "start_ns": 250, "end_ns": 320, "correlation": 4},
    ]
    ev = _ev(rows)
    t = annotation_table(ev, label_gpu(ev), gpu_windows(ev)[0])
    w = t.filter(pl.col("name") == "W").row(0, named=True)
    assert (w["step"], w["count"], w["duration_ns"], w["outside_ns"], w["level"]) == (None, 1, 0, 10, 0)
    x = {r["step"]: r for r in t.filter(pl.col("name") == "Outer").iter_rows(named=True)}
    assert set(x) == {1, 2} and x[1]["level"] == 0
    assert (x[1]["duration_ns"], x[1]["compute_ns"], x[1]["idle_ns"], x[1]["count"], x[1]["gpu_work"], x[1]["gpu_work_ns"]) == (150, 140, 10, 1, 3, 210)
    assert (x[2]["duration_ns"], x[2]["compute_ns"], x[2]["count"], x[2]["gpu_work"]) == (70, 70, 0, 0)
    s1 = t.filter(pl.col("name") == "ProfilerStep#1").row(0, named=True)
    assert (s1["step"], s1["duration_ns"], s1["level"]) == (1, 150, 1)
