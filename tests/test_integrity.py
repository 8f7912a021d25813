"""Trace integrity: every check fails on a real trace that has the problem and passes on one that
has not. Where no recording at hand has the problem, the real trace is edited the way the problem
looks in a file (a rank's clock shifted, the profiler's log line about dropped records, the host
events of a GPU-only capture missing, a step's GPU records lost, graph replays unrecorded), and the
counts are checked against the raw JSON, read here by hand."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.engine import analyse
from traceanalyzer.engine.rank import Options
from traceanalyzer.reconciliation.integrity import CHECKS, DILATION_SHARE, integrity

from conftest import ROOT, TRACES, run_cli

FIX = ROOT / "fixtures" / "kineto"
ALEXNET = FIX / "a100_alexnet_nosteps.json.gz"
RESNET = FIX / "v100_resnet50_legacy2021.json.gz"
DLRM = FIX / "dlrm-v100-8rank"
H200 = TRACES / "h200"
AMD = TRACES / "kineto-public" / "tracelens-amd"
VLLM = AMD / "vllm_piecewise_graph_execution.json.gz"
B200 = AMD / "b200_eager_trace_rank0.json.gz"
shared = pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")


def _analyse(path: Path):
    return analyse([path], Options(tables=frozenset({"trace_facts"})), workers=1, quiet=True)


def _check(path_or_analysis, name: str) -> dict:
    an = path_or_analysis if not isinstance(path_or_analysis, Path) else _analyse(path_or_analysis)
    checks = integrity(an)
    assert [c["check"] for c in checks] == CHECKS
    c = next(c for c in checks if c["check"] == name)
    assert (c["affects"] != []) == (c["ok"] is False)  # a failed check names what it makes unreliable
    return c


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _write(doc: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@shared
def test_cuda_graphs_fail_on_a_graph_replay_and_pass_on_eager():
    doc = _doc(VLLM)
    launches = [e for e in doc["traceEvents"] if e.get("name") == "hipGraphLaunch"]
    c = _check(VLLM, "cuda_graphs")
    assert c["ok"] is False and f"{len(launches)} graph launches" in c["detail"] and len(launches) == 25
    assert _check(ALEXNET, "cuda_graphs")["ok"] is True


@shared
def test_graph_replays_fail_when_the_replays_kernels_were_not_recorded(tmp_path):
    ok = _check(VLLM, "graph_replays")
    assert ok["ok"] is True
    doc = _doc(VLLM)
    corr = [e["args"]["correlation"] for e in doc["traceEvents"] if e.get("name") == "hipGraphLaunch"]
    lost = set(corr[:20])  # the profiler recorded only 5 of the 25 replays
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not (e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("args", {}).get("correlation") in lost)]
    c = _check(_write(doc, tmp_path / "replays.json.gz"), "graph_replays")
    assert c["ok"] is False and c["detail"].startswith("20 of 25 graph launches have no recorded GPU work")


@pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")
@pytest.mark.parametrize("run", ["small", "compiled", "base", "b4"])
def test_profiler_dilation_reads_the_unprofiled_estimate(run):
    """The verdict on the analysis' unprofiled estimate is the one truth.json gives (the profiled
    and the unprofiled step medians, timed outside the trace): small's profiler adds half the step,
    compiled's 8 %, base's and b4's nothing. Without an estimate the check is skipped, saying why."""
    import dataclasses

    an = _analyse(H200 / run / "rank0.pt.trace.json.gz")
    truth = json.loads((H200 / run / "truth.json").read_text())
    prof = sorted(truth["step_s_profiled"])[len(truth["step_s_profiled"]) // 2]
    dilated = (prof - truth["step_s_median"]) / truth["step_s_median"] > DILATION_SHARE
    c = _check(an, "profiler_dilation")
    assert c["ok"] is (not dilated), (run, c["detail"], prof, truth["step_s_median"])
    bare = dataclasses.replace(an, steps=an.steps.drop("profiler_overhead_us", "unprofiled_estimate_us", strict=False))
    assert _check(bare, "profiler_dilation")["ok"] is None


def test_gpu_work_fails_on_a_step_whose_gpu_records_were_lost(tmp_path):
    assert _check(RESNET, "gpu_work")["ok"] is True
    doc = _doc(RESNET)
    s7 = next(e for e in doc["traceEvents"] if e.get("name") == "ProfilerStep#7")
    doc["traceEvents"] = [e for e in doc["traceEvents"]
                          if not (e.get("cat") in ("Kernel", "Memcpy", "Memset") and s7["ts"] <= e["ts"] < s7["ts"] + s7["dur"])]
    c = _check(_write(doc, tmp_path / "lost7.json.gz"), "gpu_work")
    assert c["ok"] is False and "1 of 6 rank-steps" in c["detail"] and "step 7" in c["detail"]


def _hand_overlaps(path: Path) -> int:
    """Kernels starting over 1 µs before the latest end of their stream so far, from the raw JSON."""
    ks = [e for e in _doc(path)["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    n, reach = 0, {}
    for e in sorted(ks, key=lambda e: (e["pid"], e["tid"], e["ts"])):
        key = (e["pid"], e["tid"])
        if key in reach and reach[key] - e["ts"] > 1.0:
            n += 1
        reach[key] = max(reach.get(key, e["ts"] + e["dur"]), e["ts"] + e["dur"])
    return n


@shared
def test_stream_order_fails_where_kernels_of_one_stream_overlap():
    n = _hand_overlaps(B200)
    c = _check(B200, "stream_order")
    assert n == 10 and c["ok"] is False and c["detail"].startswith(f"{n:,} kernels start before")
    assert _hand_overlaps(ALEXNET) == 0 and _check(ALEXNET, "stream_order")["ok"] is True


def test_activity_buffers_fail_where_the_profilers_log_says_records_were_dropped(tmp_path):
    assert _check(ALEXNET, "activity_buffers")["ok"] is True
    doc = _doc(ALEXNET)
    doc["WARNING"] = ["WARNING:2023-09-27 10:05:35 2869224:2869224 CuptiActivityApi.cpp:294] Dropped 2048 activity records"]
    path = _write(doc, tmp_path / "dropped.json.gz")
    c = _check(path, "activity_buffers")
    assert c["ok"] is False and "Dropped 2048 activity records" in c["detail"]
    doc["WARNING"] = ["WARNING:2023-09-27 10:05:35 2869224:2869224 init.cpp:155] function cbapi->getCuptiStatus() failed"]
    assert _check(_write(doc, tmp_path / "other.json.gz"), "activity_buffers")["ok"] is True  # another warning says nothing of it


def test_rank_clocks_fail_when_one_rank_is_shifted(tmp_path):
    c = _check(DLRM, "rank_clocks")
    assert c["ok"] is True and "matched collectives" in c["detail"]
    job = tmp_path / "dlrm"
    shutil.copytree(DLRM, job)
    f = next(job.glob("worker3_*"))
    doc = _doc(f)
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += 5000  # rank 3's clock 5 ms ahead
    _write(doc, f)
    bad = _check(job, "rank_clocks")
    assert bad["ok"] is False and "rank 3 started" in bad["detail"]


def test_host_events_fail_on_a_gpu_only_capture(tmp_path):
    doc = _doc(ALEXNET)
    host = sum(1 for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver"))
    c = _check(ALEXNET, "host_events")
    assert c["ok"] is True and c["detail"].startswith(f"{host:,} host ops")
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") == "M"]
    bad = _check(_write(doc, tmp_path / "gpu_only.json.gz"), "host_events")
    assert bad["ok"] is False and "GPU-only capture" in bad["detail"]


def test_breakdown_prints_the_failed_checks_and_strict_exits_6(tmp_path):
    doc = _doc(ALEXNET)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") or e.get("ph") == "M"]
    path = _write(doc, tmp_path / "gpu_only.json.gz")
    res = run_cli("breakdown", path, "-q")
    assert res.returncode == 0 and "Trace integrity: 1 check failed" in res.stdout and "host_events" in res.stdout
    strict = run_cli("breakdown", path, "-q", "--strict")
    assert strict.returncode == 6 and "--strict: 1 trace-integrity check failed: host_events" in strict.stderr
    assert "Trace integrity" in strict.stdout  # the result is printed first
    clean = run_cli("breakdown", ALEXNET, "-q", "--strict")
    assert clean.returncode == 0 and "Trace integrity" not in clean.stdout
    js = json.loads(run_cli("breakdown", path, "-q", "-f", "json").stdout)
    assert [c["check"] for c in js["integrity"]] == CHECKS
    assert next(c for c in js["integrity"] if c["check"] == "host_events")["ok"] is False
    out = tmp_path / "report.json"
    assert run_cli("report", path, "-f", "json", "-o", out, "-q").returncode == 0
    rep = json.loads(out.read_text())
    assert [c["check"] for c in rep["integrity"] if c["ok"] is False] == ["host_events"]
    md = tmp_path / "report.md"
    assert run_cli("report", path, "-f", "markdown", "-o", md, "-q").returncode == 0
    assert "### Trace integrity" in md.read_text() and "| `host_events` | FAILED |" in md.read_text()


@shared
def test_reconcile_says_when_graphs_hide_the_shapes():
    cfg = ROOT / "fixtures" / "configs" / "h200_small.toml"
    res = run_cli("reconcile", VLLM, "-c", cfg, "-q")
    assert res.returncode == 0 and "25 graph launches ran kernels that carry no op shapes" in res.stderr
    if H200.exists():
        plain = run_cli("reconcile", H200 / "small" / "rank0.pt.trace.json.gz", "-c", cfg, "-q")
        assert plain.returncode == 0 and "graph launches" not in plain.stderr


def test_activity_buffers_read_nsight_systems_diagnostics(tmp_path):
    """Nsight Systems logs into its DIAGNOSTIC_EVENT table; a line there about lost records fails the check."""
    import sqlite3

    src = ROOT / "fixtures" / "nsys" / "mfu_2gpu_before_cut.sqlite"
    assert _check(src, "activity_buffers")["ok"] is True
    dst = tmp_path / "dropped.sqlite"
    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    cols = [r[1] for r in con.execute("PRAGMA table_info(DIAGNOSTIC_EVENT)")]
    if not cols:
        con.execute("CREATE TABLE DIAGNOSTIC_EVENT (timestamp INTEGER, timestampType INTEGER, source INTEGER, severity INTEGER, "
                    "text TEXT, globalPid INTEGER)")
    con.execute("INSERT INTO DIAGNOSTIC_EVENT (timestamp, timestampType, source, severity, text, globalPid) "
                "VALUES (0, 1, 2, 2, 'CUPTI dropped 512 activity records: the buffers were full', 0)")
    con.commit()
    con.close()
    c = _check(dst, "activity_buffers")
    assert c["ok"] is False and "dropped 512 activity records" in c["detail"]
