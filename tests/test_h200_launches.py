"""One host/launch verdict that agrees with its numbers: on the real H200 traces ``small``
(163 M parameters, 13 µs median kernel) is CPU-bound as recorded and not without the profiler's
own host work (``truth.json``: ``small`` runs 17.6 ms a step unprofiled against 26.7 ms
profiled), ``base`` / ``recompute`` are not either way; a CUDA graph launch counts one launch
latency, not one per kernel."""

from __future__ import annotations

import json

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify.launches import LAUNCH_BOUND_SHARE
from traceanalyzer.api import launches
from traceanalyzer.schema import EVENT_SCHEMA, META_SCHEMA, Trace, conform

from conftest import TRACES, run_cli

H200 = TRACES / "h200"
needs_h200 = pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")


def _trace(name: str):
    return H200 / name / "rank0.pt.trace.json.gz"


@needs_h200
@pytest.mark.parametrize("variant,profiled", [("small", True), ("base", False), ("recompute", False)])
def test_cpu_bound_verdict_on_the_h200_traces(variant, profiled):
    df = launches(_trace(variant))
    assert df.height >= 2
    for r in df.iter_rows(named=True):
        # the verdict is its own rule applied to the numbers it prints: as recorded, and without the profiler
        assert r["cpu_bound_profiled"] == (r["gpu_wait_share"] >= LAUNCH_BOUND_SHARE and r["host_ns_per_kernel"] > r["gpu_ns_per_kernel"])
        assert r["cpu_bound"] == (r["gpu_wait_share_unprofiled"] >= LAUNCH_BOUND_SHARE
                                  and r["host_ns_per_kernel_unprofiled"] > r["gpu_ns_per_kernel"])
        assert r["cpu_bound_profiled"] is profiled
        assert r["cpu_bound"] is False
        assert r["cuda_graphs"] is False
        assert r["gpu_ns_per_kernel"] == (r["duration_ns"] - r["idle_ns"]) // r["launched"]
        assert 0 < r["host_ns"] <= r["duration_ns"]


@needs_h200
def test_launches_json_says_the_profiler_options_may_inflate_host_time():
    truth = json.loads((H200 / "small" / "truth.json").read_text())
    # the profiled steps are longer than the unprofiled ones: the profiler's own host work
    assert min(truth["step_s_profiled"][2:]) > 1.3 * truth["step_s_median"]
    res = run_cli("launches", _trace("small"), "-f", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert {"cpu_bound", "gpu_wait_share", "host_ns_per_kernel", "gpu_ns_per_kernel", "cuda_graphs"} <= set(doc["steps"][0])
    (p,) = doc["profiler"]
    assert p["options"][:2] == ["record_shapes", "profile_memory"] and p["may_inflate_host_time"]
    assert "record_shapes" in p["note"]
    table = run_cli("launches", _trace("small"))
    assert "note: rank 0: the trace was recorded with record_shapes, profile_memory" in " ".join(table.stdout.split())


def _graph_trace():
    """One step [0, 10000): a cudaGraphLaunch at 100..110 (correlation 1) whose three kernels run
    1000..1100, 1100..1200, 1200..1300; a plain launch at 2000..2005 (correlation 2), its kernel
    at 2100..2200."""
    rows = [
        ("annotation", "ProfilerStep#1", 0, 10000, None, "1"),
        ("runtime", "cudaGraphLaunch", 100, 110, 1, "1"),
        ("kernel", "g1", 1000, 1100, 1, "7"),
        ("kernel", "g2", 1100, 1200, 1, "7"),
        ("kernel", "g3", 1200, 1300, 1, "7"),
        ("runtime", "cudaLaunchKernel", 2000, 2005, 2, "1"),
        ("kernel", "k", 2100, 2200, 2, "7"),
    ]
    recs = [{"rank": 0, "kind": k, "name": n, "start_ns": s + 10_000, "end_ns": e + 10_000, "correlation": c,
             "pid": "0" if k == "kernel" else "1", "tid": t, **({"stream": 7} if k == "kernel" else {})}
            for k, n, s, e, c, t in rows]
    return Trace(events=conform(pl.DataFrame(recs), EVENT_SCHEMA),
                 meta=conform(pl.DataFrame({"rank": [0], "world_size": [1], "file": ["synthetic"]}), META_SCHEMA))


def test_a_graph_launch_counts_one_latency_to_its_first_kernel():
    r = launches(ta.analyze(_graph_trace())).row(0, named=True)
    assert r["cuda_graphs"] is True
    assert r["launched"] == 4
    # latencies: graph 1000 - 100 = 900 (once, not 900/1000/1100), plain 2100 - 2000 = 100
    assert r["launch_latency_mean_ns"] == (900 + 100) / 2
    assert r["launch_latency_max_ns"] == 900


@needs_h200
def test_breakdown_detail_and_report_show_the_verdict(tmp_path):
    res = run_cli("breakdown", _trace("small"), "--detail", "-q")
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("│    0 │        no │"))
    assert "0 of 3" in line
    assert "as recorded: rank 0 CPU-bound" in " ".join(res.stdout.split())
    out = tmp_path / "r.json"
    assert run_cli("report", _trace("small"), "-f", "json", "-o", out, "-q").returncode == 0
    (v,) = json.loads(out.read_text())["host_verdict"]
    assert v["cpu_bound_profiled"] is True and v["host_ns_per_kernel"] > v["gpu_ns_per_kernel"]
    assert v["cpu_bound"] is False and v["cpu_bound_steps"] == 0 and v["host_ns_per_kernel_unprofiled"] < v["gpu_ns_per_kernel"]
    out_b = tmp_path / "b.json"
    assert run_cli("report", _trace("base"), "-f", "json", "-o", out_b, "-q").returncode == 0
    assert json.loads(out_b.read_text())["host_verdict"][0]["cpu_bound"] is False
