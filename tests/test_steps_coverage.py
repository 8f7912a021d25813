"""No GPU work is lost by the step cut: on every shared trace, per rank, the busy time inside
the step windows plus the reported busy time outside them (``outside_steps``) equals the union
of the rank's GPU work intervals, computed here with a plain-Python interval merge."""

from __future__ import annotations

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.errors import NoGpuActivity
from traceanalyzer.render import json as json_render
from traceanalyzer.schema import GPU_WORK_KINDS, Trace

from conftest import DEMO, TRACES, needs_shared


def _shared_traces():
    if not TRACES.exists():
        return []
    kineto = sorted(p for d in ("hta", "kineto-public", "torch-cpu") for p in (TRACES / d).rglob("*.json.gz"))
    return kineto + sorted((TRACES / "nsys").glob("*.sqlite"))


def _union(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if end is None or s >= end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _check(a) -> dict[int, int]:
    gpu = a.trace.events.filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    busy = a.steps.group_by("rank").agg((pl.col("duration_ns") - pl.col("idle_ns")).sum().alias("busy"))
    busy = dict(busy.iter_rows())
    out = {r: (o, b, t) for r, o, b, t in a.outside_steps.iter_rows()}
    for rank in gpu["rank"].unique().to_list():
        iv = gpu.filter(pl.col("rank") == rank).select("start_ns", "end_ns").rows()
        outside, before, after = out[rank]
        assert outside == before + after >= 0
        assert busy.get(rank, 0) + outside == _union(iv), rank
    return {r: o[0] for r, o in out.items()}


@needs_shared()
@pytest.mark.parametrize("path", _shared_traces(), ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_steps_plus_outside_equal_the_gpu_busy_union(path):
    try:
        trace = ta.load(path)
        a = ta.analyze(trace)
    except NoGpuActivity:
        assert "cupti_profiler" in str(path) or "torch-cpu" in str(path)  # the CPU-only / counter-only ones
        return
    outside = _check(a)
    # whole-trace mode: one window per rank over all GPU work, nothing outside
    assert set(_check(ta.analyze(trace, None)).values()) == {0}
    doc = json_render.document(a)
    for r in doc["ranks"]:
        assert r["outside_steps_ns"] == outside[r["rank"]]
        if outside[r["rank"]]:
            assert any(w.startswith(f"rank {r['rank']}: ") and "in no step window" in w for w in a.warnings)


def test_warm_up_launched_before_the_profile_is_outside_not_in_a_step():
    """MI300X demo: 968 GPU events carry correlation ids below every recorded launch (launched
    in the step before the profile began, still running at its start): they are reported as
    busy time before the first step, and the three step windows are those of the launched work."""
    a = ta.analyze(ta.load(DEMO))
    ev = a.trace.events
    launches = ev.filter(pl.col("kind") == "runtime")["correlation"].drop_nulls()
    gpu = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    early = gpu.filter(pl.col("correlation") < launches.min())
    assert early.height == 968
    first = a.windows["wstart_ns"].min()
    # every early event ends at or before the first window starts: all of it is "before"
    assert early["end_ns"].max() <= first
    want = _union([(s, min(e, first)) for s, e in gpu.filter(pl.col("start_ns") < first).select("start_ns", "end_ns").rows()])
    o = a.outside_steps.row(0, named=True)
    assert o["before_ns"] == want == o["outside_ns"] and o["after_ns"] == 0
    assert round(want / 1e6, 3) == 27.768


@pytest.mark.parametrize("gpu_marks", [True, False], ids=["gpu-step-marks", "host-steps-only"])
def test_gpu_work_without_launch_records_is_placed_by_time(gpu_marks):
    """The demo with every runtime launch record and every GPU event's External id removed
    (a cut-down like one whose GPU events lost their launches): all busy GPU time stays
    accounted for, three steps remain, and exactly the work that began before the first
    ProfilerStep began on the host is outside. With the GPU-side ProfilerStep marks the windows
    start at the marks; without them, at the first GPU work after each host step began."""
    t = ta.load(DEMO)
    ev = t.events
    if not gpu_marks:
        ev = ev.filter(pl.col("kind") != "gpu_annotation")
    ev = ev.filter(pl.col("kind") != "runtime").with_columns(
        pl.when(pl.col("kind").is_in(GPU_WORK_KINDS)).then(None).otherwise(pl.col("external_id")).alias("external_id")
    )
    a = ta.analyze(Trace(events=ev, meta=t.meta, sources=t.sources))
    assert a.steps["step"].to_list() == [15, 16, 17]
    _check(a)
    # outside: what began before the host's first step, or with the marks, before the first mark
    kind = "gpu_annotation" if gpu_marks else "annotation"
    cpu0 = ev.filter((pl.col("kind") == kind) & pl.col("name").str.starts_with("ProfilerStep#"))["start_ns"].min()
    gpu = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    want = _union([(s, min(e, cpu0)) for s, e in gpu.filter(pl.col("start_ns") < cpu0).select("start_ns", "end_ns").rows()])
    o = a.outside_steps.row(0, named=True)
    assert o["before_ns"] == want and o["after_ns"] == 0
    assert any("have no launch record" in w for w in a.warnings)
    host = ev.filter((pl.col("kind") == "annotation") & pl.col("name").str.starts_with("ProfilerStep#")).sort("start_ns")
    marks = ev.filter((pl.col("kind") == "gpu_annotation") & pl.col("name").str.starts_with("ProfilerStep#")).sort("start_ns")
    starts = a.steps.sort("start_ns")["start_ns"].to_list()
    ref = marks if gpu_marks else host
    assert ref["name"].to_list() == ["ProfilerStep#15", "ProfilerStep#16", "ProfilerStep#17"]
    for c, s in zip(ref["start_ns"].to_list(), starts):
        assert s == gpu.filter(pl.col("start_ns") >= c)["start_ns"].min()
    if gpu_marks:  # the launched truth: every step starts within 2.3 ms of it
        truth = ta.analyze(t).steps.sort("start_ns")["start_ns"].to_list()
        assert all(0 < s - w < 2_300_000 for s, w in zip(starts, truth))


MI250 = DEMO.parent / "mi250_rocm62_minitoy.json.gz"


def test_step_range_skip_counts_and_no_contradictory_warning():
    t = ta.load(MI250)
    # 4 'aten::empty' ranges, none launches GPU work: one warning, saying so, with the right count
    w = [x for x in ta.analyze(t, "aten::empty").warnings if "aten::empty" in x]
    assert w == ["rank 0: none of its 4 'aten::empty' ranges holds GPU work: the whole GPU span is analysed as one step (step 0)"]
    # ProfilerStep#1 launches all 16 GPU events, ProfilerStep#2 none (raw JSON): 1 of 2 skipped
    w = [x for x in ta.analyze(t).warnings if "ProfilerStep" in x]
    assert w == ["rank 0: 1 of 2 'ProfilerStep' steps launched no GPU work and are skipped"]
    w = [x for x in ta.analyze(t, "no_such_range").warnings if "no_such_range" in x]
    assert w == ["rank 0: no 'no_such_range' step markers: the whole GPU span is analysed as one step (step 0)"]
