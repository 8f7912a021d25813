"""The reconciler on real traces (shared/traces) with configs written for them."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.model import load_config
from traceanalyzer.model.config import BatchConfig, HardwareConfig, ModelConfig, ParallelConfig, RecomputeConfig, RunConfig
from traceanalyzer.reconciliation import compare, gemm_check, loss_columns, matmul_flops, waterfall

ROOT = Path(__file__).resolve().parents[1]
from conftest import SHARED  # noqa: E402
TRACES = SHARED / "traces"
CONFIGS = ROOT / "docs" / "examples" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}")

MI300X = "kineto-public/tracelens-amd/mi300x_resnet_act_checkpoint_rank0.json.gz"
RESNET50 = "kineto-public/kineto-tbplugin-resnet50-legacy/worker0.1623143089861.pt.trace.json.gz"
CONTROL = "hta/trace_diff/control/control.json.gz"
TEST = "hta/trace_diff/test/test.json.gz"
GPT_CPU = "torch-cpu/cpu_no_ckpt.pt.trace.json.gz"

_cache: dict[str, object] = {}


def analysis(rel):
    if rel not in _cache:
        _cache[rel] = ta.analyze(ta.load(TRACES / rel))
    return _cache[rel]


@pytest.mark.parametrize("rel,cfg", [(MI300X, "mi300x-resnet18-ckpt"), (RESNET50, "v100-resnet50"),
                                     (CONTROL, "a100-trace-diff-control"), (TEST, "v100-trace-diff-test")])
def test_waterfall_sums_to_peak_exactly_and_traces_back_to_buckets(rel, cfg):
    a = analysis(rel)
    c = load_config(CONFIGS / f"{cfg}.toml")
    wf = waterfall(a, c)
    peak = Fraction(str(wf["peak_tflops"]))
    assert sum(wf["exact"].values()) == peak  # exact, not approximately
    st = a.steps
    T = int(st["duration_ns"].sum())
    n = st.height
    # achieved = model FLOPs per GPU / measured mean step time
    assert wf["achieved_tflops"] == pytest.approx(c.model.fwd_flops_per_sample * 3 * c.batch.global_batch / c.num_gpus / (T / n / 1e9) / 1e12, rel=1e-12)
    # each loss is peak × bucket / total, from the integer-ns partition
    for bucket in ("recompute", "exposed_comm", "other", "idle"):
        # a bucket may be split by cause (idle_<cause>, exposed_comm_<dim>): its terms sum to it
        terms = sum(v for k, v in wf["exact"].items() if k == bucket or k.startswith(f"{bucket}_"))
        assert terms == peak * int(st[f"{bucket}_ns"].sum()) / T
    assert wf["exact"]["kernel_efficiency"] == peak * int(st["compute_ns"].sum()) / T - wf["exact"]["achieved"]
    assert wf["mfu"] == pytest.approx(wf["achieved_tflops"] / wf["peak_tflops"])


def test_resnet50_v100_numbers():
    # 3 × 7.6e9 FLOPs × 32 images per step over the measured mean step of 174.829 ms on one V100
    # (the mean of its six ProfilerStep ranges, 176078 173992 176918 181259 176468 164261 µs):
    # 4.17 TFLOP/s, 26.6 % of the 15.7 TFLOP/s fp32 peak; 44.0 % of the step is idle.
    wf = waterfall(analysis(RESNET50), load_config(CONFIGS / "v100-resnet50.toml"))
    step_ms = (176078 + 173992 + 176918 + 181259 + 176468 + 164261) / 6 / 1000
    assert wf["step_time_s"] * 1e3 == pytest.approx(step_ms, abs=1e-6)
    assert wf["achieved_tflops"] == pytest.approx(3 * 7.6e9 * 32 / (step_ms / 1e3) / 1e12, rel=1e-9)
    assert round(100 * wf["mfu"], 1) == 26.6
    idle = sum(t["tflops"] for t in wf["terms"] if t["term"] == "idle" or t["term"].startswith("idle_"))
    assert round(100 * idle / 15.7, 1) == 44.0


def test_recompute_measured_beside_predicted_on_mi300x():
    # this host runs ~25 ms ahead of its GPU: the three steps' host ranges hold GPU work of other
    # steps, some launched before the profile began (no host op: not recognisable as recompute),
    # so the whole trace is read as one step here
    wf = waterfall(ta.analyze(ta.load(TRACES / MI300X), None), load_config(CONFIGS / "mi300x-resnet18-ckpt.toml"))
    rec = next(t for t in wf["terms"] if t["term"] == "recompute")
    comp = next(t for t in wf["terms"] if t["term"] == "kernel_efficiency")
    # full recompute predicts +1 forward = 1/3 of the fwd+bwd compute; measured 0.19
    assert rec["predicted_ms"] == pytest.approx(comp["time_ms"] / 3)
    assert 0.15 < rec["time_ms"] / comp["time_ms"] < 0.34


def test_compare_splits_gap_exactly():
    wa = waterfall(analysis(CONTROL), load_config(CONFIGS / "a100-trace-diff-control.toml"))
    wb = waterfall(analysis(TEST), load_config(CONFIGS / "v100-trace-diff-test.toml"))
    c = compare(wa, wb)
    assert sum(v for k, v in c["exact"].items() if k != "gap") == c["exact"]["gap"]
    assert c["exact"]["gap"] == wa["exact"]["achieved"] - wb["exact"]["achieved"]
    assert c["exact"]["peak"] == Fraction("19.5") - Fraction("15.7")  # A100 vs V100 fp32 peaks
    mags = [abs(t["contribution"]) for t in c["terms"]]
    assert mags == sorted(mags, reverse=True)
    # and the comparison of a trace with itself is all zeros
    z = compare(wa, wa)
    assert z["exact"]["gap"] == 0 and all(v == 0 for v in z["exact"].values())


def test_cause_columns_replace_plain_buckets():
    st = analysis(CONTROL).steps
    plain = {"idle_ns", "idle_us", "exposed_comm_ns", "exposed_comm_us"}
    st = st.drop([c for c in st.columns if c.startswith(("idle_", "exposed_comm_")) and c not in plain])
    half = (pl.col("idle_ns") // 2)
    fake = st.with_columns(half.alias("idle_host_bound_ns"), (pl.col("idle_ns") - half - 1000).alias("idle_bubble_ns"),
                           pl.col("exposed_comm_ns").alias("exposed_comm_dp_ns"))
    b = loss_columns(fake)
    assert "idle" not in b and "exposed_comm" not in b
    assert b["idle_unattributed"] == 1000 * st.height
    assert b["exposed_comm_dp"] == int(st["exposed_comm_ns"].sum())
    assert sum(b.values()) == int(st["duration_ns"].sum())


def test_matmul_flops_from_shapes_hand_counted():
    # MI300X ResNet fc layer, batch 10, 512 -> 1000: forward addmm 2·10·512·1000 and two backward
    # mm of the same size per step = 3 × 10.24e6.
    mf = matmul_flops(analysis(MI300X).trace)
    assert mf["flops"].to_list() == [3 * 2 * 10 * 512 * 1000] * 3
    # ResNet-50 fc, batch 32, 2048 -> 1000, legacy trace whose ProfilerStep are cpu_ops
    mf = matmul_flops(analysis(RESNET50).trace)
    assert mf.height == 6 and set(mf["flops"].to_list()) == {3 * 2 * 32 * 2048 * 1000}


def tiny_gpt(hidden=64):
    # shared/traces/torch-cpu/make_traces.py: VOCAB 256, D_MODEL 64, N_HEAD 4, SEQ 32, BATCH 4, N_LAYER 4
    return RunConfig(model=ModelConfig(layers=4, hidden=hidden, heads=4, vocab=256, seq_length=32),
                     batch=BatchConfig(global_batch=4), hardware=HardwareConfig(num_gpus=1)).validate()


def test_gemm_check_catches_a_wrong_config():
    trace = ta.load(TRACES / GPT_CPU)
    # per token forward: 4 × (qkv 2·64·192 + proj 2·64·64 + fc1 2·64·256 + fc2 2·256·64) + head 2·64·256
    # = 425,984; × 128 tokens × 3 = 163,577,856 per step — exactly what the trace's mm/addmm add up to
    ok = gemm_check(trace, tiny_gpt())
    assert ok["trace_train_flops_per_step"] == 163_577_856 and ok["ratio"] == pytest.approx(1.0) and ok["ok"]
    wrong = gemm_check(trace, tiny_gpt(hidden=128))
    assert not wrong["ok"] and "WRONG CONFIG" in wrong["verdict"] and wrong["ratio"] < 0.5
    tiny = gemm_check(analysis(MI300X).trace, replace(load_config(CONFIGS / "mi300x-resnet18-ckpt.toml"),
                                                      model=ModelConfig(fwd_flops_per_sample=1e5)))
    assert not tiny["ok"] and tiny["ratio"] > 1.25


def test_config_gpu_other_than_the_trace_device_is_warned_on_stderr(tmp_path):
    from conftest import run_cli

    text = (CONFIGS / "mi300x-resnet18-ckpt.toml").read_text().replace('gpu = "AMD Instinct MI300X"', 'gpu = "H100 SXM"')
    cfg = tmp_path / "h100.toml"
    cfg.write_text(text)
    r = run_cli("reconcile", TRACES / MI300X, "--config", cfg, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "[hardware] gpu = 'H100 SXM' but the trace ran on" in r.stderr and "MI300X" in r.stderr
    import orjson

    doc = orjson.loads(r.stdout)
    assert doc["peak_tflops"] == 989.4  # the config's, as the warning says
    assert any("but the trace ran on" in w for w in doc["warnings"])
    # the right GPU: no such warning
    ok = waterfall(analysis(MI300X), load_config(CONFIGS / "mi300x-resnet18-ckpt.toml"))
    assert not any("but the trace ran on" in w for w in ok["warnings"])


def test_fp8_waterfall_states_both_peaks():
    base = load_config(CONFIGS / "mi300x-resnet18-ckpt.toml")
    fp8 = replace(base, hardware=replace(base.hardware, precision="fp8"))
    wf = waterfall(analysis(MI300X), fp8)
    assert wf["peak_tflops"] == 2614.9 and wf["mfu_denominator"] == "dense fp8 peak"
    assert wf["mfu_vs_bf16_peak"] == pytest.approx(wf["mfu"] * 2614.9 / 1307.4, rel=1e-12)
    assert sum(t["tflops"] for t in wf["terms"]) == pytest.approx(2614.9, rel=1e-12)


def test_korthikanti_hfu_in_the_waterfall():
    cfg = replace(load_config(CONFIGS / "mi300x-resnet18-ckpt.toml"))
    a = waterfall(analysis(MI300X), cfg)
    b = waterfall(analysis(MI300X), cfg, hfu="korthikanti2022")
    # full recompute counts the same under both conventions
    assert a["hfu"] == b["hfu"] and b["hfu_convention"] == "korthikanti2022"


def test_logged_step_time_is_cross_checked_with_the_trace():
    base = load_config(CONFIGS / "mi300x-resnet18-ckpt.toml")
    wf = waterfall(analysis(MI300X), replace(base, reported=replace(base.reported, step_time_s=10.0)))
    assert wf["reported_step_time_s"] == 10.0
    assert any("differs from the logged/reported 10 s" in w for w in wf["warnings"])
    same = waterfall(analysis(MI300X), replace(base, reported=replace(base.reported, step_time_s=wf["step_time_s"])))
    assert not any("differs from the logged" in w for w in same["warnings"])


def _recompute(granularity):
    return RunConfig(recompute=RecomputeConfig(granularity=granularity))


def test_recompute_contradiction_threshold_and_sentences():
    from traceanalyzer.reconciliation.waterfall import recompute_contradiction

    none = _recompute("none")
    # no recompute configured: 1 % of the step recomputed (100 of 10,000 ns) is the threshold, said
    # with one decimal; 99 ns (0.99 %) is below it
    assert recompute_contradiction(none, 100, 10_000) == [
        "the configuration has no recompute ([recompute] granularity = 'none') but the trace recomputes "
        "1.0 % of the step: the FLOPs, the HFU and any what-if from it are off; set [recompute] granularity"]
    assert recompute_contradiction(none, 99, 10_000) == []
    assert recompute_contradiction(none, 0, 10_000) == []
    # 1,250 of 10,000 ns = 12.5 %
    assert "recomputes 12.5 % of the step" in recompute_contradiction(none, 1_250, 10_000)[0]
    # recompute configured, none measured; any measured recompute, however little, is no contradiction
    assert recompute_contradiction(_recompute("full"), 0, 10_000) == [
        "the configuration recomputes ([recompute] granularity = 'full') but the trace shows no recomputed "
        "kernel: check the configuration, or name the recompute ranges (`recompute_range`)"]
    assert recompute_contradiction(_recompute("selective"), 1, 10_000) == []
    # the whole (1 ns) step recomputed: 100 %
    assert "recomputes 100.0 % of the step" in recompute_contradiction(none, 1, 1)[0]
    # no step time: nothing to compare
    assert recompute_contradiction(none, 100, 0) == []
    assert recompute_contradiction(_recompute("full"), 0, 0) == []


def test_predictions_beside_each_loss_by_hand():
    from traceanalyzer.reconciliation.waterfall import _predictions

    # 1e9 FLOPs per sample, full recompute: +1 forward on fwd + bwd = 3 forwards -> ratio 1/3.
    # pp = 2 on 2 GPUs: dp = 2 / 2 = 1, m = global batch 4 / (micro 1 · dp 1) = 4 microbatches,
    # bubble (p−1)/(v·m) = 1/4 of compute + recompute.
    cfg = RunConfig(model=ModelConfig(fwd_flops_per_sample=1e9), batch=BatchConfig(global_batch=4),
                    parallel=ParallelConfig(pp=2), recompute=RecomputeConfig(granularity="full"),
                    hardware=HardwareConfig(num_gpus=2)).validate()
    warnings = []
    # one step: compute 3 ms, recompute 1.5 ms, bubble 0.6 ms
    got = _predictions(cfg, cfg.convention, {"compute": 3_000_000, "recompute": 1_500_000, "idle_bubble": 600_000,
                                             "exposed_comm": 400_000}, 1, warnings)
    assert warnings == []
    assert got["recompute"] == {"predicted": "1.000 ms (compute × 0.333, full recompute)",  # 3 ms / 3
                                "measured": "1.500 ms (0.500 × compute)", "predicted_ms": pytest.approx(1.0, rel=1e-12)}
    # bubble: (3 + 1.5) ms / 4 = 1.125 ms; measured 0.6 / 4.5 = 0.133
    assert got["idle_bubble"] == {"predicted": "bubble 1.125 ms ((p−1)/(v·m) = 0.250 × compute+recompute)",
                                  "measured": "0.600 ms = 0.133 × compute+recompute", "predicted_ms": pytest.approx(1.125, rel=1e-12)}
    # two virtual stages: (p−1)/(v·m) = 1/(2·4) = 0.125; 187,500 ns = 0.1875 ms (exact in binary)
    # is printed to 3 decimals, half to even: 0.188; 0.1875 / 3 = 0.0625 -> 0.062;
    # bubble 3.1875 ms × 0.125 = 0.3984375 -> 0.398, measured 0.1875 / 3.1875 = 0.0588 -> 0.059
    vp = replace(cfg, parallel=replace(cfg.parallel, vp=2))
    got2 = _predictions(vp, vp.convention, {"compute": 3_000_000, "recompute": 187_500, "idle_bubble": 187_500}, 1, warnings)
    assert got2["recompute"]["measured"] == "0.188 ms (0.062 × compute)"
    assert got2["idle_bubble"] == {"predicted": "bubble 0.398 ms ((p−1)/(v·m) = 0.125 × compute+recompute)",
                                   "measured": "0.188 ms = 0.059 × compute+recompute", "predicted_ms": pytest.approx(0.3984375, rel=1e-12)}
    # the same over two steps: every time is per step
    two = _predictions(cfg, cfg.convention, {"compute": 6_000_000, "recompute": 3_000_000, "idle_bubble": 1_200_000}, 2, warnings)
    assert two == got
    # no transformer shape: no communication model, so nothing beside exposed comm
    assert set(got) == {"recompute", "idle_bubble"}
    # two steps, no compute measured, idle not split by cause: the bubble stands beside "idle";
    # 600,000 ns over 2 steps = 0.3 ms a step, no ratio to a zero compute
    got = _predictions(cfg, cfg.convention, {"compute": 0, "idle": 600_000}, 2, warnings)
    assert got["recompute"]["measured"] == "0.000 ms" and got["recompute"]["predicted_ms"] == 0
    assert got["idle"]["measured"] == "0.300 ms" and got["idle"]["predicted_ms"] == 0
    assert warnings == []
    # what cannot be predicted is said, with the reason
    bare = RunConfig(hardware=HardwareConfig(num_gpus=2)).validate()
    assert _predictions(bare, bare.convention, {"compute": 1, "idle": 1}, 1, warnings) == {}
    assert warnings == [
        "no recompute prediction: [model] layers is missing: it is needed for the model FLOPs per step",
        "no bubble prediction: [batch] global_batch is missing: it is needed for the predicted pipeline bubble",
        "no communication prediction: [model] layers is missing: it is needed for the communication volumes",
    ]


def test_resnet50_waterfall_from_the_independent_step_counts():
    # every number from the plain-Python count of the six steps in tests/data/hta_reference.json
    # (raw_steps: span, compute, other, idle per ProfilerStep, without the package) and the config
    # (3 × 7.6e9 FLOPs × 32 images per step on 1 GPU, V100 fp32 peak 15.7 TFLOP/s)
    import orjson

    ref = orjson.loads((ROOT / "tests" / "data" / "hta_reference.json").read_bytes())["jobs"][RESNET50]["per_file"]
    steps = next(iter(ref.values()))["raw_steps"]["steps"]
    n = len(steps)
    T, comp, other, idle = (sum(s[k] for s in steps) for k in ("span_ns", "compute_ns", "other_ns", "idle_ns"))
    flops = 3 * 7.6e9 * 32
    wf = waterfall(analysis(RESNET50), load_config(CONFIGS / "v100-resnet50.toml"))
    assert (n, wf["ranks"], wf["steps"], wf["rank_steps"], wf["num_gpus"]) == (6, 1, 6, 6, 1)
    assert (wf["gpu"], wf["gpu_source"], wf["precision"], wf["peak_tflops"]) == ("v100_sxm", "config", "fp32", 15.7)
    assert wf["logged_convention"] is None and wf["reported_step_time_s"] is None  # no training log given
    assert wf["model_flops_per_gpu"] == wf["hardware_flops_per_gpu"] == pytest.approx(flops, rel=1e-15)  # no recompute
    assert wf["step_time_s"] == pytest.approx(T / n / 1e9, rel=1e-12)
    assert wf["achieved_tflops"] == pytest.approx(flops / (T / n / 1e9) / 1e12, rel=1e-12)
    assert wf["mfu"] == wf["hfu"] == pytest.approx(flops / (T / n / 1e9) / 1e12 / 15.7, rel=1e-12)
    assert wf["compute_s"] == pytest.approx(comp / n / 1e9, rel=1e-12)
    assert wf["compute_tflops"] == pytest.approx(flops / (comp / n / 1e9) / 1e12, rel=1e-12)
    assert wf["sum_tflops"] == 15.7 and wf["warnings"] == [] and wf["mfu_vs_bf16_peak"] is None
    terms = {t["term"]: t for t in wf["terms"]}
    assert terms["achieved"]["time_ms"] is None
    # each term's time is its bucket per step, in ms; its TFLOP/s the peak's share of the step
    assert terms["kernel_efficiency"]["time_ms"] == pytest.approx(comp / n / 1e6, rel=1e-12)
    assert terms["kernel_efficiency"]["tflops"] == pytest.approx(15.7 * comp / T - flops / (T / n / 1e9) / 1e12, rel=1e-12)
    assert terms["other"]["time_ms"] == pytest.approx(other / n / 1e6, rel=1e-12)
    assert terms["other"]["tflops"] == pytest.approx(15.7 * other / T, rel=1e-12)
    idle_terms = [t for k, t in terms.items() if k.startswith("idle")]
    assert sum(t["time_ms"] for t in idle_terms) == pytest.approx(idle / n / 1e6, rel=1e-12)
    assert sum(t["tflops"] for t in idle_terms) == pytest.approx(15.7 * idle / T, rel=1e-12)
    assert sum(wf["buckets_ns"].values()) == T and wf["buckets_ns"]["compute"] == comp
    # the trace's own FLOPs, per ProfilerStep: the fc layer's forward addmm and two backward mm,
    # 3 × 2·32·2048·1000, in each of the six steps
    assert wf["trace_flops"]["steps"] == 6 and wf["trace_flops"]["matmul_per_step"] == 3 * 2 * 32 * 2048 * 1000


def test_attach_overlapped_puts_exposed_plus_overlapped_beside_the_first_comm_term():
    from types import SimpleNamespace

    from traceanalyzer.reconciliation.waterfall import attach_overlapped

    # two steps overlapping 1 ms and 3 ms of communication: 2 ms a step
    a = SimpleNamespace(steps=pl.DataFrame({"overlapped_comm_ns": [1_000_000, 3_000_000]}))
    wf = {"terms": [{"term": "achieved", "time_ms": None}, {"term": "exposed_comm_dp", "time_ms": 0.5},
                    {"term": "exposed_comm_tp", "time_ms": 0.25}]}
    attach_overlapped(wf, a)
    assert wf["overlapped_comm_ms"] == 2.0
    assert wf["terms"][1]["measured"] == "0.500 ms exposed + 2.000 ms overlapped = 2.500 ms"
    assert "measured" not in wf["terms"][0] and "measured" not in wf["terms"][2]
    # the undivided bucket, with no time: 0 exposed
    wf = {"terms": [{"term": "exposed_comm", "time_ms": None}]}
    attach_overlapped(wf, a)
    assert wf["terms"][0]["measured"] == "0.000 ms exposed + 2.000 ms overlapped = 2.000 ms"


DEMO_CFG = CONFIGS / "mi300x-resnet18-ckpt.toml"


def _demo():
    from conftest import DEMO

    if "demo" not in _cache:
        _cache["demo"] = ta.analyze(ta.load(DEMO))
    return _cache["demo"]


def test_the_peak_comes_from_the_config_else_from_the_trace_device():
    from types import SimpleNamespace

    from traceanalyzer.errors import ConfigError
    from traceanalyzer.reconciliation.waterfall import _peak

    base = load_config(DEMO_CFG)
    trace = _demo().trace  # one rank of 8 on an "AMD Instinct MI300X"
    no_gpu = replace(base, hardware=replace(base.hardware, gpu=None))
    w = []
    # a peak given wins over any GPU name, and says so
    assert _peak(replace(no_gpu, hardware=replace(no_gpu.hardware, peak_tflops=100)), trace, w) == (100.0, "given", "config peak_tflops")
    # no GPU configured: the trace's device, at its bf16 dense peak (AMD's MI300X data sheet: 1307.4 TFLOP/s)
    assert _peak(no_gpu, trace, w) == (1307.4, "mi300x", "trace device name 'AMD Instinct MI300X'")
    assert w == []
    # the configured GPU is used even when the trace ran on another, with a warning
    # (NVIDIA's H100 SXM data sheet: 989.4 TFLOP/s dense bf16)
    h100 = replace(base, hardware=replace(base.hardware, gpu="H100 SXM"))
    assert _peak(h100, trace, w) == (989.4, "h100_sxm", "config")
    assert w == ["[hardware] gpu = 'H100 SXM' but the trace ran on 'AMD Instinct MI300X': the peak (MFU denominator) "
                 "is the config's — check which is right"]
    w.clear()
    assert _peak(base, trace, w) == (1307.4, "mi300x", "config") and w == []
    # a job on two kinds of GPU, neither the configured one: both named
    two = SimpleNamespace(meta=pl.DataFrame({"device_name": ["NVIDIA A100-SXM4-80GB", "AMD Instinct MI300X", None]}))
    assert _peak(h100, two, w)[0] == 989.4
    assert w == ["[hardware] gpu = 'H100 SXM' but the trace ran on 'AMD Instinct MI300X', 'NVIDIA A100-SXM4-80GB': the peak "
                 "(MFU denominator) is the config's — check which is right"]
    w.clear()
    # neither: an error naming both ways to give it
    nameless = SimpleNamespace(meta=pl.DataFrame({"device_name": [None]}, schema={"device_name": pl.String}))
    with pytest.raises(ConfigError, match=r"^\[hardware\] gpu is missing and the trace names no known GPU: it is needed for the peak "
                                          r"FLOP/s \(MFU denominator\); give \[hardware\] gpu or peak_tflops$"):
        _peak(no_gpu, nameless, w)
    # a device name that is no known GPU counts as none; a trace without the column too
    with pytest.raises(ConfigError):
        _peak(no_gpu, SimpleNamespace(meta=pl.DataFrame({"device_name": ["Some CPU"]})), w)
    with pytest.raises(ConfigError):
        _peak(no_gpu, SimpleNamespace(meta=pl.DataFrame({"rank": [0]})), w)


def test_waterfall_gpu_count_from_the_trace_and_the_logged_convention():
    base = load_config(DEMO_CFG)
    # no [hardware] num_gpus: the trace's world size (its distributedInfo: world_size 8)
    wf = waterfall(_demo(), replace(base, hardware=replace(base.hardware, num_gpus=None)))
    assert wf["num_gpus"] == 8 and wf["model_flops_per_gpu"] == pytest.approx(3 * 3.6e9 * 80 / 8)
    # full recompute: the hardware FLOPs add one forward, 4 × 3.6e9 × 80 / 8 a GPU
    assert wf["hardware_flops_per_gpu"] == pytest.approx(4 * 3.6e9 * 80 / 8)
    # a log giving 12 TFLOP/s/GPU at 10.8 ms a step: model FLOPs 3 × 3.6e9 × 80 / 8 = 1.08e11 a GPU
    # -> 10 TFLOP/s; full recompute adds a forward: 1.44e11 -> 13.33, the nearer, +11.1 % off 12
    rep = replace(base.reported, step_time_s=0.0108, tflops_per_gpu=12.0)
    wf = waterfall(_demo(), replace(base, reported=rep))
    assert wf["logged_convention"]["best"] == "megatron hardware"
    assert wf["logged_convention"]["relative_error"] == pytest.approx(1.44e11 / 0.0108 / 1e12 / 12 - 1)
    assert ("the logged 12 TFLOP/s/GPU is reproduced by the megatron convention (hardware FLOPs, +11.1 %): "
            "the waterfall uses megatron") in wf["warnings"]
    # the trace's mean step, 16.2 ms (its three ProfilerStep ranges), is 50 % above the logged 10.8 ms
    assert any(w.startswith("the trace's mean step (0.01621 s) differs from the logged/reported 0.0108 s by +50 % ")
               for w in wf["warnings"])
    # a convention asked for: the log's is still said, not used
    wf = waterfall(_demo(), replace(base, reported=rep), convention="palm")
    assert ("the logged 12 TFLOP/s/GPU is reproduced by the megatron convention (hardware FLOPs, +11.1 %)") in wf["warnings"]


def test_waterfall_warns_when_the_config_claims_more_flops_than_the_peak_allows():
    base = load_config(DEMO_CFG)
    # 1e15 FLOPs a sample: 3e15 × 10 images a GPU in a 16 ms step is ~1.9e6 TFLOP/s, above the
    # 1307.4 peak: the kernel efficiency (peak × compute share − achieved) is negative
    wf = waterfall(_demo(), replace(base, model=replace(base.model, fwd_flops_per_sample=1e15)))
    assert wf["exact"]["kernel_efficiency"] < 0
    assert ("kernel efficiency is negative: the config claims more FLOPs than the peak allows in the measured compute "
            "time — the model, batch or GPU count in the config is probably wrong") in wf["warnings"]
    ok = waterfall(_demo(), base)
    assert not any("negative" in w for w in ok["warnings"])


def test_waterfall_without_step_time_is_a_config_error():
    from types import SimpleNamespace

    from traceanalyzer.errors import ConfigError

    cfg = load_config(DEMO_CFG)
    for steps in (pl.DataFrame(schema={"rank": pl.Int32, "duration_ns": pl.Int64}),  # no step
                  pl.DataFrame({"rank": [0], "duration_ns": [0]})):  # one step of 0 ns
        with pytest.raises(ConfigError, match="^the trace has no measured step time to reconcile$"):
            waterfall(SimpleNamespace(steps=steps), cfg)
    # no GPU count configured and none in the trace
    one_step = {"rank": [0], "duration_ns": [10], "compute_ns": [10], "recompute_ns": [0], "exposed_comm_ns": [0], "other_ns": [0], "idle_ns": [0]}
    a = SimpleNamespace(steps=pl.DataFrame(one_step),
                        trace=SimpleNamespace(meta=pl.DataFrame({"world_size": [None]}, schema={"world_size": pl.Int64})))
    with pytest.raises(ConfigError, match=r"^\[hardware\] num_gpus is missing: it is needed for the FLOPs per GPU "
                                          r"\(the trace does not give a world size either\)$"):
        waterfall(a, RunConfig(model=ModelConfig(fwd_flops_per_sample=1e9), batch=BatchConfig(global_batch=8)).validate())


def test_communication_predicted_beside_each_exposed_dimension_by_hand():
    from traceanalyzer.reconciliation.waterfall import _predictions

    # 2 layers, h 1024, s 1024, vocab 32000, 4 H100 SXM (tp 2 -> dp 2), global batch 8, micro 1:
    # m = 8 / (1 · 2) = 4 microbatches a step; 369 GB/s: the hardware table's intra-node bus bandwidth.
    # TP, no sequence parallelism: 4 all-reduces a layer (2 forward, 2 backward) of s·h·2 bytes
    # = 2 layers · 4 · 4 microbatches · 2 MiB = 64 MiB, bus factor 2(2−1)/2 = 1; the forward half exposed.
    # DP: one all-reduce of the fp32 gradients of this TP rank's half of the parameters,
    # (2 layers · 12h² + 32000·h) / 2 · 4 bytes = 115,867,648 bytes, bus factor 1, all exposed.
    cfg = RunConfig(model=ModelConfig(layers=2, hidden=1024, heads=8, vocab=32000, seq_length=1024),
                    batch=BatchConfig(global_batch=8), parallel=ParallelConfig(tp=2),
                    hardware=HardwareConfig(gpu="H100 SXM", num_gpus=4)).validate()
    tp_ms, dp_ms = 2 * 4 * 4 * 2**21 / 369e9 * 1e3, (2 * 12 * 1024**2 + 32000 * 1024) / 2 * 4 / 369e9 * 1e3
    assert (round(tp_ms, 3), round(dp_ms, 3)) == (0.182, 0.314)
    warnings = []
    # one step: 0.2 ms exposed TP, 0.3 ms DP, 0.1 ms of no known dimension
    got = _predictions(cfg, cfg.convention, {"compute": 1_000_000, "exposed_comm_tp": 200_000, "exposed_comm_dp": 300_000,
                                             "exposed_comm_unknown": 100_000}, 1, warnings)
    assert warnings == []
    assert got["exposed_comm_tp"] == {"predicted": "0.182 ms at configured bandwidth, 0.091 exposed", "predicted_ms": pytest.approx(tp_ms),
                                      # the measured exposed total (0.2 + 0.3 + 0.1 ms) stands beside the first
                                      "measured": "0.600 ms exposed (overlapped: see breakdown)"}
    assert got["exposed_comm_dp"] == {"predicted": "0.314 ms at configured bandwidth, 0.314 exposed", "predicted_ms": pytest.approx(dp_ms)}
    assert got["exposed_comm_unknown"] == {"predicted": "no communication predicted", "predicted_ms": 0}
    # no exposed communication bucket at all: nothing to stand beside
    assert set(_predictions(cfg, cfg.convention, {"compute": 1_000_000}, 1, warnings)) == {"recompute"}
    # one GPU: no communication at all; two steps of 0.2 ms exposed in all = 0.1 ms a step
    one = replace(cfg, parallel=ParallelConfig(), hardware=replace(cfg.hardware, num_gpus=1)).validate()
    got = _predictions(one, one.convention, {"compute": 1_000_000, "exposed_comm": 200_000}, 2, warnings)
    assert got["exposed_comm"] == {"predicted": "0 ms (no parallelism)", "predicted_ms": 0,
                                   "measured": "0.100 ms exposed (overlapped: see breakdown)"}
    assert warnings == []


def test_waterfall_over_eight_ranks_counts_steps_per_rank():
    import orjson

    from conftest import DLRM

    # the 8 DLRM ranks, one ProfilerStep each; their spans from the independent count
    # (tests/data/hta_reference.json raw_steps); 1e9 FLOPs a sample × 8 samples over 8 GPUs
    jobs = orjson.loads((ROOT / "tests" / "data" / "hta_reference.json").read_bytes())["jobs"]
    files = sorted(DLRM.glob("*.json.gz"))
    spans = [s["span_ns"] for f in files for s in jobs[f"kineto-public/param-dlrm-v100-8rank/{f.name}"]["per_file"][f.name]["raw_steps"]["steps"]]
    assert len(spans) == 8
    cfg = RunConfig(model=ModelConfig(fwd_flops_per_sample=1e9), batch=BatchConfig(global_batch=8),
                    hardware=HardwareConfig(precision="fp32"), source="dlrm.toml").validate()
    wf = waterfall(ta.analyze(ta.load(DLRM)), cfg)
    assert (wf["ranks"], wf["steps"], wf["rank_steps"], wf["num_gpus"]) == (8, 1, 8, 8)
    assert type(wf["steps"]) is int
    # the mean step is over all rank-steps
    assert wf["step_time_s"] == pytest.approx(sum(spans) / 8 / 1e9, rel=1e-12)
    assert wf["achieved_tflops"] == pytest.approx(3 * 1e9 * 8 / 8 / (sum(spans) / 8 / 1e9) / 1e12, rel=1e-12)
    # the first two files name the trace; an unnamed config is named by its file
    assert wf["trace"] == f"{files[0]}, {files[1]}"
    assert wf["config"] == "dlrm.toml"
    one = waterfall(ta.analyze(ta.load(files[0])), replace(cfg, name="one rank"))
    assert (one["trace"], one["config"]) == (str(files[0]), "one rank")


def test_recompute_prediction_is_in_the_convention_asked_for():
    from traceanalyzer.reconciliation.waterfall import _predictions

    # B 8, s 1024, h 1024, 2 layers, V 32000, full recompute, in units of 2^30 FLOPs: a layer's
    # forward is 24·B·s·h² + 4·B·s²·h = 224 (PaLM, non-causal attention) or 24·B·s·h² + 2·B·s²·h = 208
    # (Megatron, causal); logits 2·B·s·h·V = 500. Model = 3 × (2 layers + logits), recompute = the 2
    # layers' forward again: PaLM 448 / 2844, Megatron 416 / 2748.
    cfg = RunConfig(model=ModelConfig(layers=2, hidden=1024, heads=8, vocab=32000, seq_length=1024),
                    batch=BatchConfig(global_batch=8), recompute=RecomputeConfig(granularity="full"),
                    hardware=HardwareConfig(gpu="H100 SXM", num_gpus=1)).validate()
    assert cfg.convention == "megatron"
    b = {"compute": 2_844_000, "exposed_comm": 0}  # 2.844 ms a step
    palm = _predictions(cfg, "palm", b, 1, [])["recompute"]
    assert palm["predicted"] == "0.448 ms (compute × 0.158, full recompute)"
    assert palm["predicted_ms"] == pytest.approx(2.844 * 448 / 2844, rel=1e-12)
    assert _predictions(cfg, "megatron", b, 1, [])["recompute"]["predicted_ms"] == pytest.approx(2.844 * 416 / 2748, rel=1e-12)


def test_waterfall_flops_in_the_convention_asked_for_or_logged():
    # the 2-layer transformer of the test above (B 8, s 1024, h 1024, V 32000), no recompute, 8 GPUs:
    # model FLOPs a step, in 2^30: PaLM 3 × (2 · 224 + 500) = 2844, Megatron 3 × (2 · 208 + 500) = 2748
    base = load_config(DEMO_CFG)
    cfg = replace(base, model=ModelConfig(layers=2, hidden=1024, heads=8, vocab=32000, seq_length=1024),
                  batch=BatchConfig(global_batch=8), parallel=replace(base.parallel, dp=8),
                  recompute=RecomputeConfig()).validate()
    assert cfg.convention == "megatron"
    wf = waterfall(_demo(), cfg)
    assert wf["convention"] == "megatron" and wf["model_flops_per_gpu"] == 2748 * 2**30 / 8
    wf = waterfall(_demo(), cfg, convention="palm")
    assert wf["convention"] == "palm" and wf["model_flops_per_gpu"] == 2844 * 2**30 / 8
    from traceanalyzer.model.flops import CONVENTION_NOTES

    assert wf["convention_note"] == CONVENTION_NOTES["palm"]
    # torch (FlopCounterMode) counts attention backward as 2.5 forwards, not 2: + 2 layers × 0.5 ×
    # 4·B·s²·h (= 32) = 2876. A log whose figure is that over its step time: the waterfall uses torch
    rep = replace(cfg.reported, step_time_s=0.5, tflops_per_gpu=2876 * 2**30 / 8 / 0.5 / 1e12)
    wf = waterfall(_demo(), replace(cfg, reported=rep))
    assert wf["logged_convention"]["best"] == "torch model"
    assert wf["convention"] == "torch" and wf["model_flops_per_gpu"] == 2876 * 2**30 / 8


def test_a_failed_gemm_check_is_a_waterfall_warning():
    # 1e5 FLOPs a sample is far below what the trace's matmul shapes add up to
    # (test_gemm_check_catches_a_wrong_config): the check's verdict is among the warnings
    base = load_config(DEMO_CFG)
    wf = waterfall(_demo(), replace(base, model=ModelConfig(fwd_flops_per_sample=1e5)))
    assert not wf["gemm_check"]["ok"] and wf["gemm_check"]["verdict"] in wf["warnings"]
    ok = waterfall(_demo(), base)
    assert ok["gemm_check"]["ok"] and ok["gemm_check"]["verdict"] not in ok["warnings"]


def _curve_100gbps() -> pl.DataFrame:
    """An nccl-tests curve: 2-rank intra-node all-reduce at 100 GB/s bus bandwidth at every size
    from 1 KiB to 1 GiB."""
    from traceanalyzer.baselines.nccltests import NCCL_SCHEMA

    rows = [{"source": "x.txt", "test": 1, "collective": "all_reduce", "placement": "out_of_place", "size_bytes": s,
             "count": s // 2, "dtype": "bfloat16", "redop": "sum", "root": -1, "time_us": s / 100e3, "algbw_gbps": 100.0,
             "busbw_gbps": 100.0, "wrong": "0", "nranks": 2, "nranks_source": "given", "nhosts": 1, "gpus_per_host": 2,
             "scope": "intra", "device": "H100"} for s in (2**k for k in range(10, 31))]
    return pl.DataFrame(rows, schema=NCCL_SCHEMA)


def test_communication_predicted_at_an_nccl_tests_baseline():
    from traceanalyzer.reconciliation.waterfall import _predictions

    # the transformer of test_communication_predicted_beside_each_exposed_dimension_by_hand with an
    # nccl-tests curve of 2-rank intra-node all-reduce at 100 GB/s bus bandwidth at every size
    # (1 KiB to 1 GiB): TP 64 MiB -> 0.671 ms (half exposed: 0.336), DP 115,867,648 bytes -> 1.159 ms
    baseline = _curve_100gbps()
    cfg = RunConfig(model=ModelConfig(layers=2, hidden=1024, heads=8, vocab=32000, seq_length=1024),
                    batch=BatchConfig(global_batch=8), parallel=ParallelConfig(tp=2),
                    hardware=HardwareConfig(gpu="H100 SXM", num_gpus=4)).validate()
    tp_ms, dp_ms = 2**26 / 100e9 * 1e3, 115_867_648 / 100e9 * 1e3
    got = _predictions(cfg, cfg.convention, {"compute": 1_000_000, "exposed_comm_tp": 187_500, "exposed_comm_dp": 0}, 1, [], baseline)
    assert got["exposed_comm_tp"]["predicted"] == "0.671 ms at the nccl-tests baseline bandwidth, 0.336 exposed"
    assert got["exposed_comm_tp"]["predicted_ms"] == pytest.approx(tp_ms, rel=1e-9)
    assert got["exposed_comm_dp"]["predicted"] == "1.159 ms at the nccl-tests baseline bandwidth, 1.159 exposed"
    assert got["exposed_comm_dp"]["predicted_ms"] == pytest.approx(dp_ms, rel=1e-9)
    # the undivided bucket stands beside every dimension's prediction: 0.671 + 1.159 ms
    got = _predictions(cfg, cfg.convention, {"compute": 1_000_000, "exposed_comm": 187_500}, 1, [], baseline)
    assert got["exposed_comm"]["predicted_ms"] == pytest.approx(tp_ms + dp_ms, rel=1e-9)
    # measured: 187,500 ns = 0.1875 ms, exact in binary, printed to 3 decimals (half to even): 0.188
    assert got["exposed_comm"]["measured"] == "0.188 ms exposed (overlapped: see breakdown)"


def test_waterfall_step_name_and_hfu_note():
    from traceanalyzer.model.flops import HFU_NOTES

    cfg = load_config(DEMO_CFG)
    # the fc layer's forward addmm and two backward mm (2·10·512·1000 each) per ProfilerStep, 3 steps;
    # with a step name the trace does not have, the trace is one step holding all three
    wf = waterfall(_demo(), cfg)
    assert (wf["trace_flops"]["steps"], wf["trace_flops"]["matmul_per_step"]) == (3, 3 * 2 * 10 * 512 * 1000)
    # the GEMM check counts per step of the same name: forward 2·10·512·1000 per step, training 3×
    assert (wf["gemm_check"]["trace_fwd_flops_per_step"], wf["gemm_check"]["trace_train_flops_per_step"]) == (
        2 * 10 * 512 * 1000, 3 * 2 * 10 * 512 * 1000)
    wf = waterfall(_demo(), cfg, step_name="NoSuchStep", hfu="korthikanti2022")
    assert (wf["trace_flops"]["steps"], wf["trace_flops"]["matmul_per_step"]) == (1, 3 * 3 * 2 * 10 * 512 * 1000)
    assert (wf["gemm_check"]["ops_per_step"], wf["gemm_check"]["trace_fwd_flops_per_step"]) == (9, 3 * 2 * 10 * 512 * 1000)
    # the HFU is said with the note of its convention
    assert wf["hfu_convention"] == "korthikanti2022" and wf["hfu_note"] == HFU_NOTES["korthikanti2022"]


def test_waterfall_says_the_contradictions_between_config_and_trace():
    from types import SimpleNamespace

    base = load_config(DEMO_CFG)
    # the demo trace recomputes (activation checkpointing): a config without recompute is told so,
    # the config with full recompute is not
    none = waterfall(_demo(), replace(base, recompute=RecomputeConfig()))
    assert any(w.startswith("the configuration has no recompute ([recompute] granularity = 'none') but the trace recomputes ")
               for w in none["warnings"])
    full = waterfall(_demo(), base)
    assert not any("recompute" in w for w in full["warnings"])
    # a configured GPU other than the trace's: its peak, and the warning
    h100 = waterfall(_demo(), replace(base, hardware=replace(base.hardware, gpu="H100 SXM")))
    assert h100["peak_tflops"] == 989.4
    assert any(w.startswith("[hardware] gpu = 'H100 SXM' but the trace ran on 'AMD Instinct MI300X'") for w in h100["warnings"])
    # a step of 1 ns is a measured step time
    one_ns = SimpleNamespace(steps=pl.DataFrame({"rank": [0], "duration_ns": [1], "compute_ns": [1], "recompute_ns": [0],
                                                 "exposed_comm_ns": [0], "other_ns": [0], "idle_ns": [0]}),
                             trace=_demo().trace)
    assert waterfall(one_ns, base)["step_time_s"] == 1e-9


def test_kernel_efficiency_of_exactly_zero_is_no_warning_and_an_unnamed_trace_is_trace():
    import dataclasses
    from types import SimpleNamespace

    # one step of 1000 ns, all compute; 1e6 FLOPs a sample × 3 × 3 samples over 3 GPUs = 3e6 a GPU:
    # achieved 3e6 FLOPs / 1 µs = 3 TFLOP/s, the given peak: kernel efficiency 3 × 1000/1000 − 3 = 0
    cfg = RunConfig(model=ModelConfig(fwd_flops_per_sample=1e6), batch=BatchConfig(global_batch=3),
                    hardware=HardwareConfig(num_gpus=3, peak_tflops=3.0)).validate()
    a = SimpleNamespace(steps=pl.DataFrame({"rank": [0], "duration_ns": [1000], "compute_ns": [1000], "recompute_ns": [0],
                                            "exposed_comm_ns": [0], "other_ns": [0], "idle_ns": [0]}),
                        trace=dataclasses.replace(_demo().trace, sources=[]))
    wf = waterfall(a, cfg)
    assert wf["exact"]["kernel_efficiency"] == 0 and wf["achieved_tflops"] == 3.0
    assert not any("negative" in w for w in wf["warnings"])
    assert wf["trace"] == "trace"  # no file to name it by
    # no compute measured: no compute TFLOP/s (not a division by zero)
    idle = SimpleNamespace(steps=a.steps.with_columns(pl.col("compute_ns").alias("idle_ns"), pl.lit(0).alias("compute_ns")), trace=a.trace)
    assert waterfall(idle, cfg)["compute_tflops"] is None


def test_selective_recompute_counts_in_the_hfu_by_the_convention_asked_for():
    # the tiny GPT (L=4, h=64, s=32, global batch 4: T = 128 tokens, one GPU), selective recompute,
    # Megatron convention. Core attention per step = 6·h·s·L·T = 6·64·32·4·128 = 6,291,456 FLOPs.
    # "forward": recompute is one more forward of it (a third: 2,097,152); "korthikanti2022": all of
    # it again at fwd+bwd weight (6,291,456). Model FLOPs do not depend on the HFU convention.
    cfg = replace(tiny_gpt(), recompute=RecomputeConfig(granularity="selective"))
    fwd = waterfall(_demo(), cfg)
    kor = waterfall(_demo(), cfg, hfu="korthikanti2022")
    assert fwd["model_flops_per_gpu"] == kor["model_flops_per_gpu"]
    assert fwd["hardware_flops_per_gpu"] - fwd["model_flops_per_gpu"] == 6 * 64 * 32 * 4 * 128 / 3
    assert kor["hardware_flops_per_gpu"] - kor["model_flops_per_gpu"] == 6 * 64 * 32 * 4 * 128
    assert kor["hfu"] > fwd["hfu"] > fwd["mfu"]


def test_the_waterfall_hands_its_baseline_to_the_communication_predictions():
    # the transformer and nccl-tests curve of test_communication_predicted_at_an_nccl_tests_baseline,
    # now through waterfall(): TP 64 MiB at 100 GB/s = 0.671 ms (half exposed), DP 115,867,648 B =
    # 1.159 ms; without the baseline the configured bandwidth gives other numbers
    cfg = RunConfig(model=ModelConfig(layers=2, hidden=1024, heads=8, vocab=32000, seq_length=1024),
                    batch=BatchConfig(global_batch=8), parallel=ParallelConfig(tp=2),
                    hardware=HardwareConfig(gpu="H100 SXM", num_gpus=4)).validate()
    with_curve = {t["term"]: t.get("predicted") for t in waterfall(_demo(), cfg, baseline=_curve_100gbps())["terms"]}
    assert with_curve["exposed_comm_tp"] == "0.671 ms at the nccl-tests baseline bandwidth, 0.336 exposed"
    assert with_curve["exposed_comm_dp"] == "1.159 ms at the nccl-tests baseline bandwidth, 1.159 exposed"
    configured = {t["term"]: t.get("predicted") for t in waterfall(_demo(), cfg)["terms"]}
    assert "at configured bandwidth" in configured["exposed_comm_tp"]


def test_hardware_flops_are_per_gpu_in_the_hfu_and_the_recompute_prediction_in_the_convention_asked_for():
    # B 8, s 1024, h 1024, 2 layers on 4 GPUs (TP 2), selective recompute, Megatron convention:
    # the core attention per step is 6·h·s·L·T = 6·1024·1024·2·8192 FLOPs and selective recompute
    # ("forward") runs a third of it again: 34,359,738,368 FLOPs a step, 8,589,934,592 per GPU.
    # MFU and HFU share their time and peak, so HFU / MFU = hardware / model FLOPs per GPU.
    cfg = RunConfig(model=ModelConfig(layers=2, hidden=1024, heads=8, vocab=32000, seq_length=1024),
                    batch=BatchConfig(global_batch=8), parallel=ParallelConfig(tp=2),
                    recompute=RecomputeConfig(granularity="selective"),
                    hardware=HardwareConfig(gpu="H100 SXM", num_gpus=4)).validate()
    wf = waterfall(_demo(), cfg)
    assert wf["num_gpus"] == 4
    assert wf["hardware_flops_per_gpu"] - wf["model_flops_per_gpu"] == 6 * 1024 * 1024 * 2 * 8192 / 3 / 4
    assert wf["hfu"] / wf["mfu"] == pytest.approx(wf["hardware_flops_per_gpu"] / wf["model_flops_per_gpu"], rel=1e-12)
    # full recompute, the convention asked for reaches the recompute prediction (the hand counts of
    # test_recompute_prediction_is_in_the_convention_asked_for): PaLM 448/2844 of the compute,
    # Megatron 416/2748
    full = replace(cfg, recompute=RecomputeConfig(granularity="full"))
    ms = {conv: next(t for t in waterfall(_demo(), full, convention=conv)["terms"] if t["term"] == "recompute")["predicted_ms"]
          for conv in ("palm", "megatron")}
    assert ms["palm"] / ms["megatron"] == pytest.approx((448 / 2844) / (416 / 2748), rel=1e-12)
