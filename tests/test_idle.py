"""Idle split by cause: on every real trace the causes sum to the idle time counted
independently from the raw JSON (tests/data/hta_reference.json ``raw_steps``); DLRM checked against a
microsecond grid built from the raw JSON; bubble / sync / host-bound on a synthetic rank."""

from __future__ import annotations

import gzip
import re

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify import comm, idle
from traceanalyzer.schema import EVENT_SCHEMA, META_SCHEMA, Trace, conform

from conftest import DEMO, DLRM, independent_steps

SYNC = re.compile(r"^(cuda|hip)(Stream|Device|Event|Ctx)Synchronize")


def _split(a):
    c = comm.collectives(a.trace.events, a.gpu, a.windows, a.trace.meta)
    return idle.idle_split(a.trace.events, a.gpu, a.windows, c)


@pytest.mark.parametrize("path,ref", independent_steps())
def test_idle_causes_sum_to_the_independent_idle_on_every_real_trace(path, ref):
    a = ta.analyze(ta.load(path))
    s = _split(a)
    j = a.steps.select("rank", "step", "start_ns").join(s, on=["rank", "step"], how="left").sort("start_ns")
    parts = [f"idle_{c}_ns" for c in idle.CAUSES]
    assert j.height == len(ref) > 0
    assert j.select(pl.sum_horizontal(parts)).to_series().to_list() == [r["idle_ns"] for r in ref]
    assert all((j[p] >= 0).all() for p in parts)


def hand_idle(rank):
    """Idle causes (ns) of DLRM rank ``rank`` from a microsecond grid over the raw JSON."""
    ev = [e for e in orjson.loads(gzip.open(sorted(DLRM.glob(f"worker{rank}_*"))[0]).read())["traceEvents"] if e.get("ph") == "X"]
    step = [e for e in ev if re.fullmatch(r"ProfilerStep#\d+", e.get("name", ""))][0]
    launch = {e["args"]["correlation"]: e["ts"] for e in ev if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    gpu = [e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    # the step is its host range; a gap that reaches past its end ends at the next GPU start
    w0, w1 = step["ts"], step["ts"] + step["dur"]
    busy = bytearray(w1 - w0)
    for e in gpu:
        for t in range(max(e["ts"], w0), min(e["ts"] + e["dur"], w1)):
            busy[t - w0] = 1
    sync = bytearray(w1 - w0)
    for e in ev:
        if e.get("cat") == "cuda_runtime" and SYNC.match(e["name"]) or e.get("name") in ("aten::item", "aten::_local_scalar_dense"):
            for t in range(max(e["ts"], w0), min(e["ts"] + e["dur"], w1)):
                sync[t - w0] = 1
    first_launch = {}  # GPU start time -> earliest launch of work starting then
    for e in gpu:
        L = launch.get(e["args"].get("correlation"))
        if L is not None:
            first_launch[e["ts"]] = min(first_launch.get(e["ts"], L), L)
    want = dict.fromkeys(idle.CAUSES, 0)
    t = 0
    while t < w1 - w0:
        if busy[t]:
            t += 1
            continue
        end = t
        while end < w1 - w0 and not busy[end]:
            end += 1
        nxt = w0 + end if end < w1 - w0 else min((e["ts"] for e in gpu if e["ts"] >= w1), default=None)
        # no GPU work after the gap at all: the GPU waited on the host to the end
        L = float("inf") if nxt is None else first_launch.get(nxt)
        for u in range(t, end):
            if sync[u]:
                want["sync"] += 1000
            elif L is not None and L > w0 + u:
                want["host_bound"] += 1000
            else:
                want["other"] += 1000
        t = end
    return want


@pytest.mark.parametrize("rank", [0, 4])
def test_dlrm_idle_split_equals_a_microsecond_grid(rank):
    want = hand_idle(rank)
    a = ta.analyze(ta.load(sorted(DLRM.glob(f"worker{rank}_*"))[0]))
    got = _split(a).row(0, named=True)
    assert {c: got[f"idle_{c}_ns"] for c in idle.CAUSES} == want
    assert want["host_bound"] > 0 and want["sync"] > 0


def _synthetic():
    """One rank, one step. GPU: kernel A [0,100), p2p recv kernel R [300,400) in a PP group,
    kernel B [600,700), kernel C [900,1000). Host: launch of R at 150 (recv outstanding
    150..400), cudaStreamSynchronize 420..520, launch of B at 560, launch of C at 650."""
    rows = [
        # kind, name, start, end, correlation, pid, tid, extra
        ("annotation", "ProfilerStep#1", -50, 2000, None, "1", "1", {}),
        ("runtime", "cudaLaunchKernel", -40, -35, 1, "1", "1", {}),
        ("kernel", "gemm_A", 0, 100, 1, "0", "7", {"stream": 7}),
        ("runtime", "cudaLaunchKernel", 150, 155, 2, "1", "1", {}),
        ("kernel", "ncclDevKernel_SendRecv(x)", 300, 400, 2, "0", "9",
         {"stream": 9, "coll_name": "recv", "pg_name": "5", "pg_desc": "pipeline", "group_size": 2}),
        ("runtime", "cudaStreamSynchronize", 420, 520, None, "1", "1", {}),
        ("runtime", "cudaLaunchKernel", 560, 565, 3, "1", "1", {}),
        ("kernel", "gemm_B", 600, 700, 3, "0", "7", {"stream": 7}),
        ("runtime", "cudaLaunchKernel", 650, 655, 4, "1", "1", {}),
        ("kernel", "gemm_C", 900, 1000, 4, "0", "7", {"stream": 7}),
    ]
    recs = []
    for kind, name, s, e, corr, pid, tid, extra in rows:
        recs.append({"rank": 0, "kind": kind, "name": name, "start_ns": s + 10_000, "end_ns": e + 10_000, "correlation": corr, "pid": pid, "tid": tid, **extra})
    events = conform(pl.DataFrame(recs), EVENT_SCHEMA)
    meta = conform(pl.DataFrame({"rank": [0], "world_size": [2], "file": ["synthetic"]}), META_SCHEMA)
    return Trace(events=events, meta=meta)


def test_synthetic_bubble_sync_and_host_bound():
    a = ta.analyze(_synthetic())
    c = comm.collectives(a.trace.events, a.gpu, a.windows, a.trace.meta)
    assert c["dim"].to_list() == ["PP"] and c["coll_type"].to_list() == ["send_recv"]
    got = idle.idle_split(a.trace.events, a.gpu, a.windows, c).row(0, named=True)
    # the step is its host range [-50, 2000); gaps: [-50,0) [100,300) [400,600) [700,900) [1000,2000)
    # [-50,-40): A not launched yet -> host_bound 10; [-40,0): launched, not started -> other 40
    # [100,150): next work (R) not launched yet -> host_bound 50; [150,300): recv outstanding -> bubble 150
    # [400,420): host_bound (B launched at 560) 20; [420,520) sync 100; [520,560) host_bound 40; [560,600) other 40
    # [700,900): C launched at 650 < 700 -> other 200
    # [1000,2000): nothing launched after C: host_bound 1000
    assert got["idle_bubble_ns"] == 150
    assert got["idle_sync_ns"] == 100
    assert got["idle_host_bound_ns"] == 10 + 50 + 20 + 40 + 1000
    assert got["idle_other_ns"] == 40 + 40 + 200
    assert a.steps["idle_ns"].item() == 1650
    # thread 1 is in no recorded op during any of it (its launch calls lie outside): all untraced
    assert got["idle_host_untraced_ns"] == got["idle_host_bound_ns"]


def _synthetic_host():
    """One rank, one step [0, 1000) on host thread 1; GPU kernels K1 [0,100), K2 [500,600),
    K3 [900,950). Host: a DataLoader __next__ range 100..250, an op 250..300 inside nothing,
    launch of K2 at 350; an Optimizer.step range 600..800 holding an op 700..800 and the launch of
    K3 at 820; nothing after. Thread 2 (another thread) runs an op 100..900 that must not count."""
    rows = [
        ("annotation", "ProfilerStep#3", 0, 1000, None, "1"),
        ("runtime", "cudaLaunchKernel", -20, -10, 1, "1"),
        ("kernel", "k1", 0, 100, 1, "7"),
        ("annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 100, 250, None, "1"),
        ("cpu_op", "aten::copy_", 250, 300, None, "1"),
        ("runtime", "cudaLaunchKernel", 350, 360, 2, "1"),
        ("kernel", "k2", 500, 600, 2, "7"),
        ("annotation", "Optimizer.step#AdamW.step", 600, 800, None, "1"),
        ("cpu_op", "aten::_foreach_add_", 700, 800, None, "1"),
        ("runtime", "cudaLaunchKernel", 820, 830, 3, "1"),
        ("kernel", "k3", 900, 950, 3, "7"),
        ("cpu_op", "aten::mm", 100, 900, None, "2"),
    ]
    recs = [{"rank": 0, "kind": k, "name": n, "start_ns": s + 10_000, "end_ns": e + 10_000, "correlation": c,
             "pid": "0" if k == "kernel" else "1", "tid": t, **({"stream": 7} if k == "kernel" else {})}
            for k, n, s, e, c, t in rows]
    events = conform(pl.DataFrame(recs), EVENT_SCHEMA)
    meta = conform(pl.DataFrame({"rank": [0], "world_size": [1], "file": ["synthetic"]}), META_SCHEMA)
    return Trace(events=events, meta=meta)


@pytest.mark.parametrize("few", [16, 0])
def test_host_bound_idle_split_by_what_the_launching_thread_did(few, monkeypatch):
    monkeypatch.setattr(idle, "FEW_THREADS", few)  # 0: the threads' ranges picked by a join
    a = ta.analyze(_synthetic_host())
    r = a.steps.row(0, named=True)
    # gaps [100,500) (K2 launched at 350) and [600,900) (K3 launched at 820), [950,1000) (none after)
    # host-bound: [100,350) and [600,820) and [950,1000)
    # [100,250) data loader; [250,300) op; [300,350) untraced;
    # [600,820): optimizer range to 800 -> 200, [800,820) untraced; [950,1000) untraced
    assert r["idle_host_bound_ns"] == 250 + 220 + 50
    assert r["idle_host_dataloader_ns"] == 150
    assert r["idle_host_optimizer_ns"] == 200
    assert r["idle_host_ops_ns"] == 50
    assert r["idle_host_untraced_ns"] == 50 + 20 + 50
    assert r["idle_ns"] == 400 + 300 + 50
