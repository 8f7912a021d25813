"""One named test per documented rule, each failing when its rule is broken.

Each test was checked by planting the bug it guards against in the product code (the line named
in its docstring changed on purpose, the test run, the change reverted): see docs/testing.md.
The expected values are derived by hand in each test from the synthetic trace it writes (times
in whole µs, so every number is exact) or from a published formula.
"""

from __future__ import annotations

import gzip
import json
import re

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.api import critical_path
from traceanalyzer.classify.shapes import op_cost
from traceanalyzer.model import load_config
from traceanalyzer.model.flops import step_flops
from traceanalyzer.reconciliation import waterfall

from conftest import DEMO, ROOT

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]


def _write(tmp_path, events, name="t.json"):
    """A minimal Kineto trace: one ProfilerStep#1 over [0, 1000) µs on host thread 1, then
    ``events``."""
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, "pid": 1, "tid": 1,
            "args": {"External id": 1}}
    path = tmp_path / name
    path.write_text(json.dumps({"traceEvents": [step, *events], "deviceProperties": H100}))
    return path


def _op(name, ts, dur, ext):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1, "args": {"External id": ext}}


def _launch(corr, ts, dur, ext):
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": dur, "pid": 1, "tid": 1,
            "args": {"correlation": corr, "External id": ext}}


def _kernel(name, corr, ts, dur, ext, stream=7):
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": stream,
            "args": {"correlation": corr, "External id": ext, "stream": stream, "device": 0}}


def test_rule_kernel_launched_under_record_param_comms_is_communication(tmp_path):
    """Rule (classify/labels.py, docs/guide.md): a kernel launched by a ``record_param_comms``
    op is communication, whatever its name (renamed or generic NCCL kernels).

    Hand count: the renamed collective runs 10-110 µs alone (exposed comm 100 µs), a GEMM
    200-250 µs (compute 50 µs); the step is its ProfilerStep range 0-1000 µs, which leaves
    850 µs idle."""
    path = _write(tmp_path, [
        _op("record_param_comms", 1, 8, 7), _launch(100, 2, 2, 7), _kernel("my_renamed_all_reduce_kernel", 100, 10, 100, 7),
        _op("aten::mm", 150, 10, 8), _launch(101, 151, 2, 8), _kernel("sm90_gemm", 101, 200, 50, 8),
    ])
    row = ta.breakdown(ta.load(path)).row(0, named=True)
    assert (row["duration_ns"], row["exposed_comm_ns"], row["compute_ns"], row["idle_ns"]) == (1_000_000, 100_000, 50_000, 850_000)


def test_rule_record_param_comms_on_the_demo_trace_with_its_collectives_renamed(tmp_path):
    """The same rule on a real trace: the demo trace (MI300X, 8-rank DDP) with every NCCL/RCCL
    kernel renamed to a name no table knows keeps every nanosecond of its communication, since
    each collective kernel was launched under ``record_param_comms``. Only kernels whose launch
    call is in the trace are renamed: the host runs ~25 ms ahead of the GPU, so the first step's
    collectives were launched before the profile began, and their name is the only evidence."""
    doc = orjson.loads(gzip.open(DEMO).read())
    renamed = 0
    launched = {e["args"]["correlation"] for e in doc["traceEvents"]
                if e.get("cat") in ("cuda_runtime", "hip_runtime") and "correlation" in e.get("args", {})}
    for e in doc["traceEvents"]:
        if (e.get("cat") == "kernel" and re.match(r"(?i)(nccl|rccl)", e.get("name", ""))
                and e.get("args", {}).get("correlation") in launched):
            e["name"], renamed = f"collective_{renamed}", renamed + 1
    assert renamed > 0
    copy = tmp_path / "renamed.json.gz"
    copy.write_bytes(gzip.compress(orjson.dumps(doc)))
    cols = ["duration_ns", "compute_ns", "recompute_ns", "exposed_comm_ns", "overlapped_comm_ns", "other_ns", "idle_ns"]
    want = ta.breakdown(ta.load(DEMO)).select(cols)
    assert want["exposed_comm_ns"].sum() > 10_000_000  # 11.9 ms that must not become compute
    assert ta.breakdown(ta.load(copy)).select(cols).equals(want)


def test_rule_compute_wins_over_recompute(tmp_path):
    """Rule (classify/partition.py, docs/guide.md): where compute and recompute kernels run at
    once, the time is compute; recompute is only the time when recompute runs without compute.

    Hand count: a recomputed GEMM (launched inside ``CheckpointFunctionBackward``) runs 10-110 µs
    on stream 7, a compute GEMM 60-160 µs on stream 8: compute 100 µs (60-160), recompute
    50 µs (10-60); the step is its ProfilerStep range 0-1000 µs: 850 µs idle."""
    path = _write(tmp_path, [
        _op("CheckpointFunctionBackward", 1, 20, 5), _op("aten::mm", 2, 5, 20), _launch(100, 3, 2, 20),
        _kernel("recomputed_gemm", 100, 10, 100, 20, stream=7),
        _op("aten::mm", 30, 5, 21), _launch(101, 31, 2, 21), _kernel("gemm", 101, 60, 100, 21, stream=8),
    ])
    row = ta.breakdown(ta.load(path)).row(0, named=True)
    assert (row["duration_ns"], row["compute_ns"], row["recompute_ns"], row["idle_ns"]) == (1_000_000, 100_000, 50_000, 850_000)


def test_rule_mfu_is_from_model_flops_not_hardware_flops():
    """Rule (reconcile/waterfall.py, model/flops.py: "Model FLOPs never count recompute"): MFU
    divides the *model* FLOPs (3 × forward per sample, Narayanan et al. 2021) by the measured step
    and the peak; the recompute's extra forward goes into the HFU only.

    The demo trace with its config (ResNet-18, 3.6e9 forward FLOPs per image, 80 images per step
    over 8 MI300X, full recompute): model FLOPs per GPU 3 × 3.6e9 × 80 / 8, hardware 4 × 3.6e9 × 80
    / 8; MI300X dense bf16 peak 1307.4 TFLOP/s (AMD's data sheet)."""
    cfg = load_config(ROOT / "docs" / "examples" / "traces" / "mi300x-resnet18-ckpt.toml")
    a = ta.analyze(ta.load(DEMO))
    wf = waterfall(a, cfg)
    step_s = int(a.steps["duration_ns"].sum()) / a.steps.height / 1e9
    assert wf["peak_tflops"] == 1307.4
    assert wf["mfu"] == pytest.approx(3 * 3.6e9 * 80 / 8 / step_s / 1e12 / 1307.4, rel=1e-12)
    assert wf["hfu"] == pytest.approx(4 * 3.6e9 * 80 / 8 / step_s / 1e12 / 1307.4, rel=1e-12)


def test_rule_model_flops_exclude_recompute_in_the_transformer_formula():
    """Rule (model/flops.py): recompute changes the hardware FLOPs, never the model FLOPs; full
    recompute of every layer adds one forward of the layers (1/3 of their fwd+bwd FLOPs)."""
    from dataclasses import replace

    from traceanalyzer.model.config import BatchConfig, ModelConfig, RecomputeConfig, RunConfig

    base = RunConfig(model=ModelConfig(layers=2, hidden=64, heads=4, seq_length=32, vocab=100),
                     batch=BatchConfig(global_batch=2))
    none, full = step_flops(base), step_flops(replace(base, recompute=RecomputeConfig(granularity="full")))
    assert full.model == none.model
    assert full.hardware - full.model == pytest.approx((none.attn_linear + none.attn_core + none.mlp) / 3, rel=1e-15)


def test_rule_attention_backward_is_two_and_a_half_forwards():
    """Rule (classify/shapes.py, docs/kernels.md): attention backward counts 2.5 × the forward's
    FLOPs (five matmuls of the forward's size, FlashAttention, Dao et al. 2022); the forward
    ``2·B·H·Lq·Lk·(D + Dv)``.

    Hand count: B=2, H=4, L=128, D=64: forward 2·2·4·128·128·128 = 33 554 432; backward
    83 886 080; elements read + written: forward 4·2·4·128·64 = 262 144, backward twice that."""
    q = "[2,4,128,64]"
    fwd = op_cost("aten::_scaled_dot_product_flash_attention", f"[{q},{q},{q}]")
    bwd = op_cost("aten::_scaled_dot_product_flash_attention_backward", f"[{q},{q},{q},{q}]")
    assert (fwd.flops, fwd.elements) == (33_554_432, 262_144)
    assert (bwd.flops, bwd.elements) == (83_886_080, 524_288)
    # [B, L, H, D] layout of the flash/efficient ops: the same counts
    t = "[2,128,4,64]"
    assert op_cost("aten::_efficient_attention_backward", f"[{t},{t},{t},{t}]").flops == 83_886_080


def _two_kernels(tmp_path, name, launch2_ts):
    """k1 runs 10-100 µs (launched at 1 µs), k2 160-200 µs on the same stream, launched at
    ``launch2_ts``; the host runs an op over 0-150 µs."""
    return _write(tmp_path, [
        _op("aten::busy", 0, 150, 99),
        _launch(100, 1, 2, 10), _kernel("k1", 100, 10, 90, 10),
        _launch(101, launch2_ts, 3, 11), _kernel("k2", 101, 160, 40, 11),
    ], name)


def test_rule_critical_path_launch_binding(tmp_path):
    """Rule (classify/critical_path/cpgraph.py, HTA's kernel-launch vs kernel-kernel delay): of a
    kernel's stream predecessor and its launch call, the later one held it back, and only that
    edge weighs the delay before its start.

    Launched late (150 µs, after k1 ended at 100 µs): the path is the host op up to the launch,
    then the 10 µs launch delay, then k2; the 60 µs gap after k1 is not on it. Launched early
    (5 µs): the stream binds, and the path is k1 then the 60 µs kernel gap then k2. Host time
    outside every op is left off (``host_gaps=False``, as HTA) so the path shows the binding edge
    alone."""
    cols = ["what", "start_ns", "end_ns", "dur_ns", "name"]
    late = critical_path(ta.load(_two_kernels(tmp_path, "late.json", 150)), host_gaps=False).segments.select(cols).rows()
    assert late == [
        ("host_op", 0, 1_000, 1_000, "aten::busy"),
        ("host_op", 1_000, 3_000, 2_000, "cudaLaunchKernel"),
        ("host_op", 3_000, 150_000, 147_000, "aten::busy"),
        ("launch_delay", 150_000, 160_000, 10_000, "k2"),
        ("kernel", 160_000, 200_000, 40_000, "k2"),
    ]
    early = critical_path(ta.load(_two_kernels(tmp_path, "early.json", 5)), host_gaps=False).segments.select(cols).rows()
    assert early == [
        ("host_op", 0, 1_000, 1_000, "aten::busy"),
        ("launch_delay", 1_000, 10_000, 9_000, "k1"),
        ("kernel", 10_000, 100_000, 90_000, "k1"),
        ("kernel_gap", 100_000, 160_000, 60_000, "k2"),
        ("kernel", 160_000, 200_000, 40_000, "k2"),
    ]


def test_rule_comm_kernel_names_and_user_patterns():
    """Rule (classify/labels.py, docs/guide.md): a kernel is communication by name when a row of
    the library table or a user's ``--comm-kernel`` regex matches it anywhere, case-insensitively;
    a bad regex is refused in one line naming it."""
    from traceanalyzer.classify.labels import COMM_KERNEL, check_comm_pattern, comm_kernel_pattern, user_pattern
    from traceanalyzer.errors import ConfigError

    assert comm_kernel_pattern() == COMM_KERNEL
    names = pl.Series(["ncclDevKernel_Generic_4(x)", "void MY_AllReduce_kernel<8>()", "sm90_gemm", "my_allreduce"])
    assert names.str.contains(comm_kernel_pattern(["my_allreduce"])).to_list() == [True, True, False, True]
    assert names.str.contains(comm_kernel_pattern()).to_list() == [True, False, False, False]
    assert names.str.contains(user_pattern(["gemm", "^my_"])).to_list() == [False, False, True, True]
    check_comm_pattern("my_.*reduce")  # a valid regex: no error
    with pytest.raises(ConfigError) as e:
        check_comm_pattern("(?=x)")
    assert str(e.value).startswith("`comm_kernels` '(?=x)' is not a valid regex (") and "\n" not in str(e.value)
