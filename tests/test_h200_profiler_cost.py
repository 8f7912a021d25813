"""The profiler's own cost on the real H200 recordings, against what was measured outside the
trace (``truth.json``: ``step_s_unprofiled``, 8 steps timed without the profiler, and their
median ``step_s_median``; ``step_s_profiled``; ``config``: the 40 ms sleep of ``stalls``)."""

from __future__ import annotations

import json
import statistics

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.api import launches
from traceanalyzer.reconciliation.findings import findings

from conftest import ROOT, TRACES, run_cli

H200 = TRACES / "h200"
RUNS = ["small", "compiled", "stalls", "base", "b4", "recompute"]
GPU_BOUND = ["base", "b4", "recompute"]
pytestmark = pytest.mark.skipif(not H200.exists(), reason=f"H200 traces not found at {H200}")


def _trace(name: str):
    return H200 / name / "rank0.pt.trace.json.gz"


def _truth(name: str) -> dict:
    return json.loads((H200 / name / "truth.json").read_text())


_CACHE: dict[str, object] = {}


def _analysis(name: str):
    if name not in _CACHE:
        _CACHE[name] = ta.analyze(ta.load(_trace(name)))
    return _CACHE[name]


@pytest.mark.parametrize("name", RUNS)
def test_the_unprofiled_estimate_is_within_5_percent_of_the_unprofiled_steps(name):
    st = _analysis(name).steps
    est = statistics.median(st["unprofiled_estimate_ns"].to_list()) / 1e9
    truth = _truth(name)
    assert truth["step_s_median"] == statistics.median(truth["step_s_unprofiled"])
    assert abs(est / truth["step_s_median"] - 1) <= 0.05, (name, est, truth["step_s_median"])


@pytest.mark.parametrize("name", GPU_BOUND)
def test_a_gpu_bound_step_is_corrected_by_at_most_2_percent(name):
    st = _analysis(name).steps
    for dur, est in st.select("duration_ns", "unprofiled_estimate_ns").iter_rows():
        assert 0 <= dur - est <= 0.02 * dur
    # and the truth agrees that the profiler barely moved these steps: profiled and unprofiled medians within 6 %
    t = _truth(name)
    assert abs(statistics.median(t["step_s_profiled"]) / t["step_s_median"] - 1) <= 0.06


def test_small_host_bound_steps_lose_what_the_profiler_added():
    # the trace holds the last three profiled steps; the profiler added their excess over the unprofiled median
    t = _truth("small")
    added_ms = 1e3 * (statistics.mean(t["step_s_profiled"][-3:]) - t["step_s_median"])
    st = _analysis("small").steps
    got_ms = st["profiler_overhead_ns"].mean() / 1e6
    assert abs(got_ms / added_ms - 1) <= 0.10, (got_ms, added_ms)
    # the profiler's host work is at least what it added to the step (some of it hides behind the GPU)
    assert (st["profiler_host_ns"] >= st["profiler_overhead_ns"]).all()


def test_the_profiler_finding_says_how_much_of_the_step_is_the_profiler():
    f = findings(_analysis("small"))
    t = _truth("small")
    top = f[0]
    assert top["loss"] == "profiler"
    # "the profiler added ~X ms of Y ms per step; unprofiled estimate Z ms", Z within 5 % of the truth
    assert "the profiler added ~" in top["cause"] and "unprofiled estimate" in top["cause"]
    z = float(top["cause"].split("unprofiled estimate ")[1].split(" ms")[0])
    assert abs(z / (1e3 * t["step_s_median"]) - 1) <= 0.05
    # without the profiler the GPU is busy most of the step (truth: median 17.6 ms against the trace's
    # GPU busy time): the host findings together claim no more than the idle that exists then
    st = _analysis("small").steps
    busy_ms = (st["duration_ns"] - st["idle_ns"]).mean() / 1e6
    idle_unprofiled = 1e3 * t["step_s_median"] - busy_ms
    host = [x for x in f if x["loss"].startswith("idle_host") or x["loss"] == "idle_sync"]
    assert sum(x["ms_per_step"] for x in host) <= idle_unprofiled + 0.1


def test_the_stall_is_priced_at_the_sleep_by_the_replay():
    f = findings(_analysis("stalls"))
    stall = next(x for x in f if x["loss"] == "idle_host_untraced")
    sleep_ms = 1e3 * _truth("stalls")["config"]["stall"]
    assert abs(stall["predicted_gain_ms"] - sleep_ms) <= 0.05 * sleep_ms
    assert "replay" in stall["gain_note"]


@pytest.mark.parametrize("name", RUNS)
def test_every_host_bound_finding_has_a_gain_or_says_why_not(name):
    for x in findings(_analysis(name)):
        if x["loss"].startswith("idle_host") or x["loss"] == "idle_sync":
            assert x["predicted_gain_ms"] is not None or x["gain_note"], x


def test_small_is_cpu_bound_as_recorded_and_not_without_the_profiler():
    df = launches(_trace("small"))
    t = _truth("small")
    for r in df.iter_rows(named=True):
        assert r["cpu_bound_profiled"] is True and r["cpu_bound"] is False
        # the GPU's wait on the host without the profiler is bounded by the idle the truth leaves:
        # unprofiled step less the GPU's busy time in the trace
        busy = r["duration_ns"] - r["idle_ns"]
        bound = (t["step_s_median"] * 1e9 - busy) / (t["step_s_median"] * 1e9)
        assert 0 <= r["gpu_wait_share_unprofiled"] <= bound
        assert r["host_ns_per_kernel_unprofiled"] < r["host_ns_per_kernel"]


def test_breakdown_json_has_the_estimate_per_step_and_its_median_per_rank():
    res = run_cli("breakdown", _trace("compiled"), "-f", "json", "-q")
    assert res.returncode == 0, res.stderr
    (r,) = json.loads(res.stdout)["ranks"]
    ests = [s["unprofiled_estimate_us"] for s in r["steps"]]
    assert r["unprofiled_estimate_median_us"] == statistics.median(ests)
    assert r["profiler_overhead_median_us"] == statistics.median(s["profiler_overhead_us"] for s in r["steps"])
    for s in r["steps"]:
        assert s["duration_us"] - s["unprofiled_estimate_us"] == pytest.approx(s["profiler_overhead_us"], abs=1e-3)
    assert abs(r["unprofiled_estimate_median_us"] / (1e6 * _truth("compiled")["step_s_median"]) - 1) <= 0.05
    assert r["profiler_options"] == ["profile_memory", "record_shapes", "with_flops"] and r["profiler_note"] is None


def _small_config(tmp_path):
    cfg = tmp_path / "small.toml"
    c = _truth("small")["config"]
    base = (ROOT / "docs" / "examples" / "h200-gpt1.4b-recompute.toml").read_text()
    # the same GPT, at the shape of "small" and without recompute
    for a, b in (("layers = 24", f"layers = {c['L']}"), ("hidden = 2048", f"hidden = {c['h']}"), ("heads = 16", f"heads = {c['a']}"),
                 ("seq_length = 2048", f"seq_length = {c['s']}"), ("global_batch = 8", f"global_batch = {c['b']}"),
                 ("micro_batch = 8", f"micro_batch = {c['b']}"), ('granularity = "full"', 'granularity = "none"')):
        assert a in base
        base = base.replace(a, b)
    cfg.write_text(base)
    return cfg


def test_the_what_if_anchor_is_the_step_without_the_profiler(tmp_path):
    from traceanalyzer.model import load_config
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis

    anchor = anchor_from_analysis(_analysis("small"), load_config(_small_config(tmp_path)))
    assert abs(anchor.step_s / _truth("small")["step_s_median"] - 1) <= 0.05
    assert any(n.startswith("anchored on the unprofiled estimate") for n in anchor.notes)


def test_mfu_is_given_both_ways_with_a_warning(tmp_path):
    cfg = _small_config(tmp_path)
    res = run_cli("reconcile", _trace("small"), "-c", cfg, "-f", "json", "-q")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    un = doc["unprofiled"]
    # the same FLOPs over the two step times
    assert un["achieved_tflops"] / doc["achieved_tflops"] == pytest.approx(doc["step_time_s"] / un["step_time_s"], rel=1e-9)
    assert abs(un["step_time_s"] / _truth("small")["step_s_median"] - 1) <= 0.05
    assert any(w.startswith("the profiler's own host work lengthens the step: MFU") for w in doc["warnings"])


def test_no_gpu_or_no_host_events_gives_no_estimate_with_a_reason():
    cpu = sorted((TRACES / "torch-cpu").rglob("*.json*"))
    if cpu:
        from traceanalyzer.errors import NoGpuActivity

        with pytest.raises(NoGpuActivity):
            ta.analyze(ta.load(cpu[0]))
    ev = ta.load(_trace("small")).events.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset", "annotation", "gpu_annotation"]))
    from traceanalyzer.classify.profiler_cost import profiler_cost
    from traceanalyzer.classify.steps import gpu_windows

    win, _ = gpu_windows(ev)
    got = profiler_cost(ev.filter(pl.col("kind") != "annotation"), win)
    assert got.height == win.height and got["unprofiled_estimate_ns"].is_null().all()
    assert got["profiler_note"].str.contains("no host events").all()
