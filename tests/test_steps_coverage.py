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

from conftest import DEMO, TRACES, interval_union, needs_shared


def _shared_traces():
    if not TRACES.exists():
        return []
    kineto = sorted(p for d in ("hta", "kineto-public", "torch-cpu") for p in (TRACES / d).rglob("*.json.gz"))
    return kineto + sorted((TRACES / "nsys").glob("*.sqlite"))


def _check(a) -> dict[int, int]:
    gpu = a.trace.events.filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    busy = a.steps.group_by("rank").agg((pl.col("duration_ns") - pl.col("idle_ns")).sum().alias("busy"))
    busy = dict(busy.iter_rows())
    out = {r: (o, b, t) for r, o, b, t in a.outside_steps.iter_rows()}
    for rank in gpu["rank"].unique().to_list():
        iv = gpu.filter(pl.col("rank") == rank).select("start_ns", "end_ns").rows()
        outside, before, after = out[rank]
        assert outside == before + after >= 0
        assert busy.get(rank, 0) + outside == interval_union(iv), rank
    return {r: o[0] for r, o in out.items()}


@needs_shared()
@pytest.mark.parametrize("path", _shared_traces(), ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_steps_plus_outside_equal_the_gpu_busyinterval_union(path):
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


def _host_steps(ev: pl.DataFrame) -> list[tuple[str, int, int]]:
    return ev.filter((pl.col("kind") == "annotation") & pl.col("name").str.starts_with("ProfilerStep#")).sort("start_ns").select(
        "name", "start_ns", "end_ns").rows()


def test_warm_up_launched_before_the_profile_is_outside_not_in_a_step():
    """MI300X demo: 968 GPU events carry correlation ids below every recorded launch (launched
    in the step before the profile began, still running at its start). The steps are the three
    host ProfilerStep ranges; the GPU busy time before the first one begins, between them and
    after the last one ends (the host runs ahead: work still queued) is reported outside."""
    a = ta.analyze(ta.load(DEMO))
    ev = a.trace.events
    launches = ev.filter(pl.col("kind") == "runtime")["correlation"].drop_nulls()
    gpu = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    early = gpu.filter(pl.col("correlation") < launches.min())
    assert early.height == 968
    host = _host_steps(ev)
    w = a.windows.sort("wstart_ns").select("wstart_ns", "wend_ns").rows()
    assert w == [(s0, s1) for _, s0, s1 in host]
    iv = gpu.select("start_ns", "end_ns").rows()
    first, last = host[0][1], host[-1][2]
    before = interval_union([(s, min(e, first)) for s, e in iv])
    after = interval_union([(max(s, last), e) for s, e in iv])
    gaps = sum(interval_union([(max(s, a1), min(e, b0)) for s, e in iv]) for (_, _, a1), (_, b0, _) in zip(host, host[1:]))
    o = a.outside_steps.row(0, named=True)
    assert o["before_ns"] == before and o["after_ns"] == after + gaps and o["outside_ns"] == before + after + gaps
    assert early["end_ns"].max() > first  # some warm-up work runs on into the first step: counted there
    assert (round(after / 1e6, 3), round(gaps / 1e6, 3)) == (37.718, 0.038)


@pytest.mark.parametrize("gpu_marks", [True, False], ids=["gpu-step-marks", "host-steps-only"])
def test_gpu_work_without_launch_records_is_placed_by_time(gpu_marks):
    """The demo with every runtime launch record and every GPU event's External id removed
    (a cut-down like one whose GPU events lost their launches): all busy GPU time stays
    accounted for, the three steps remain, each its host ProfilerStep range, with or without
    the GPU-side ProfilerStep marks (they only decide which steps hold GPU work)."""
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
    assert any("have no launch record" in w for w in a.warnings)
    host = _host_steps(ev)
    assert [n for n, _, _ in host] == ["ProfilerStep#15", "ProfilerStep#16", "ProfilerStep#17"]
    assert a.steps.sort("start_ns").select("start_ns", "duration_ns").rows() == [(s0, s1 - s0) for _, s0, s1 in host]
    # the same steps as with the launch records
    assert ta.analyze(t).steps.sort("start_ns")["duration_ns"].to_list() == a.steps.sort("start_ns")["duration_ns"].to_list()


MI250 = DEMO.parent / "mi250_rocm62_minitoy.json.gz"


def test_step_range_skip_counts_and_no_contradictory_warning():
    t = ta.load(MI250)
    # 4 'aten::empty' ranges, none launches GPU work: one warning, saying so, with the right count
    w = [x for x in ta.analyze(t, "aten::empty").warnings if "aten::empty" in x]
    assert w == ["rank 0: none of its 4 'aten::empty' ranges holds GPU work: the whole GPU span is analysed as one step (step 0)"]
    # ProfilerStep#1 launches all 16 GPU events, ProfilerStep#2 none (raw JSON): 1 of 2 skipped
    w = [x for x in ta.analyze(t).warnings if "ProfilerStep" in x]
    assert w == ["rank 0: 1 of 2 'ProfilerStep' steps launched no GPU work and are skipped"]
    # a range name the trace does not have at all is a mistake (exit 4), naming the ranges it has
    # (raw JSON: user_annotation ProfilerStep#1, #2 and Optimizer.step#SGD.step)
    from traceanalyzer.errors import InvalidTrace

    with pytest.raises(InvalidTrace) as err:
        ta.analyze(t, "no_such_range")
    # the API names its argument (the command line says --step-range / --whole-trace)
    assert str(err.value) == ("`step_range` 'no_such_range' matches no range of rank 0 (its ranges: ProfilerStep, "
                              "Optimizer.step#SGD.step); or give `step_range=None`")
