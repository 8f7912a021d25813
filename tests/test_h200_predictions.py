"""Predictions and measurements against the real H200 runs' ground truth (``truth.json``: FLOPs
from ``torch.utils.flop_counter.FlopCounterMode``, unprofiled step times, the allocator's peak),
copied into ``tests/data/h200/truth.json``. The traces live in the shared folder: tests that read
them skip when it is absent."""

from __future__ import annotations

import json

import polars as pl
import pytest

from traceanalyzer.classify.shapes import op_cost

from conftest import ROOT, TRACES

H200 = TRACES / "h200"
TRUTH = json.loads((ROOT / "tests" / "data" / "h200" / "truth.json").read_text())
RUNS = sorted(TRUTH)
CONFIGS = ROOT / "fixtures" / "configs"


def trace_of(run: str):
    path = H200 / run / "rank0.pt.trace.json.gz"
    if not path.exists():
        pytest.skip(f"the shared H200 trace {run} is not at {path}")
    return path


def _load(run: str):
    from traceanalyzer import api  # noqa: PLC0415

    return api.load(trace_of(run))


# --------------------------------------------------------------------------- attention formulas
def test_attention_flops_follow_torch_flop_counter_by_hand():
    # torch.utils.flop_counter.sdpa_flop_count: bmm(q, kᵀ) + bmm(p, v) = 2·b·h·sq·sk·(d + dv)
    q = "[8, 16, 2048, 128]"
    fwd = op_cost("aten::_cudnn_attention_forward", f"[{q},{q},{q},[],[],[],[],[],[],[],[],[],[]]")
    assert fwd.flops == 2 * 8 * 16 * 2048 * 2048 * (128 + 128)
    # the backward: five bmm (scores again, dP, dV, dQ, dK) = 2·b·h·sq·sk·(3d + 2dv)
    bwd = op_cost("aten::_cudnn_attention_backward", f"[{q},{q},{q},{q},{q},[8,16,2048,1],[],[]]")
    assert bwd.flops == 2 * 8 * 16 * 2048 * 2048 * (3 * 128 + 2 * 128) == fwd.flops * 5 // 2
    # head sizes that differ (d 64, dv 128): 3d + 2dv, not 2.5 × (d + dv)
    b = op_cost("aten::_scaled_dot_product_flash_attention_backward",
                "[[1,2,16,128],[1,2,16,64],[1,2,32,64],[1,2,32,128]]")
    assert b.flops == 2 * 1 * 2 * 16 * 32 * (3 * 64 + 2 * 128)
    # flash-attn's own op takes [B, L, H, D]
    f = op_cost("flash_attn::_flash_attn_forward", "[[2,512,8,64],[2,512,8,64],[2,512,8,64],[],[]]")
    assert f.flops == 2 * 2 * 8 * 512 * 512 * 128


# --------------------------------------------------------------------------- executed FLOPs
@pytest.mark.parametrize("run", RUNS)
def test_trace_flops_equal_flop_counter(run):
    from traceanalyzer.reconciliation.gemm import trace_flops  # noqa: PLC0415

    t = TRUTH[run]
    tf = trace_flops(_load(run))
    by_op = t["flops_by_op"]
    assert tf["convention"] == "torch"
    assert tf["matmul_per_step"] == pytest.approx(by_op["aten.mm"] + by_op["aten.addmm"], rel=1e-9)
    attn = by_op["aten._scaled_dot_product_cudnn_attention"] + by_op["aten._scaled_dot_product_cudnn_attention_backward"]
    assert tf["attention_per_step"] == pytest.approx(attn, rel=1e-9)
    assert tf["executed_per_step"] == pytest.approx(t["measured_flops_per_step"], rel=0.01)


def test_recompute_early_stop_is_not_counted():
    """Non-reentrant checkpointing stops the recomputation inside fc2's addmm (recorded, no kernel):
    72 of the 144 fc2 addmm calls in the trace launched nothing, and FlopCounterMode did not count them."""
    from traceanalyzer.reconciliation.gemm import matmul_flops  # noqa: PLC0415

    mf = matmul_flops(_load("recompute"))
    t = TRUTH["recompute"]["flops_by_op"]
    assert float(mf["flops"].mean()) == pytest.approx(t["aten.mm"] + t["aten.addmm"], rel=1e-12)
    # 24 layers × (4 forward addmm + 3 recomputed + 2 backward mm for each of 4 linears) + 3 head mm
    assert mf["ops"].to_list() == [24 * (4 + 3 + 8) + 3] * 3


@pytest.mark.parametrize("run", RUNS)
def test_reconcile_json_reports_trace_flops_and_checks_attention(run):
    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.model import load_config  # noqa: PLC0415
    from traceanalyzer.reconciliation import waterfall  # noqa: PLC0415

    cfg = load_config(CONFIGS / f"h200_{run}.toml")
    wf = waterfall(api.analyze(trace_of(run), workers=1), cfg)
    assert set(wf["trace_flops"]) >= {"matmul_per_step", "attention_per_step", "executed_per_step", "convention"}
    assert wf["trace_flops"]["executed_per_step"] == pytest.approx(TRUTH[run]["measured_flops_per_step"], rel=0.01)
    g = wf["gemm_check"]
    # the configuration's attention (torch convention, 14·q·s per token and layer + recomputed forward)
    assert g["attention_ratio"] == pytest.approx(1.0, rel=1e-9)
    assert g["ok"]


def test_attention_check_flags_a_wrong_sequence_length():
    from dataclasses import replace  # noqa: PLC0415

    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.model import load_config  # noqa: PLC0415
    from traceanalyzer.reconciliation.gemm import gemm_check  # noqa: PLC0415

    cfg = load_config(CONFIGS / "h200_base.toml")
    tr = _load("base")
    wrong = replace(cfg, model=replace(cfg.model, seq_length=1024), batch=replace(cfg.batch, global_batch=16, micro_batch=16))
    g = gemm_check(tr, wrong)
    # same tokens, so the matmuls agree; attention (∝ s² per sequence) is twice the config's
    assert g["ratio"] == pytest.approx(1.0, rel=1e-9)
    assert g["attention_ratio"] == pytest.approx(2.0, rel=1e-9)
    assert not g["ok"] and "attention" in g["verdict"]


# --------------------------------------------------------------------------- ops / kernels
@pytest.mark.parametrize("run", ["base", "recompute"])
def test_op_table_counts_flops_once_at_the_launching_op(run):
    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.api import ops
    from traceanalyzer.api.tables import analysis_with_tables  # noqa: PLC0415

    an = analysis_with_tables(api.analyze(trace_of(run), workers=1))
    t = ops(an)
    steps = 3
    # summed over the table: FlopCounterMode's total (wrappers such as aten::linear and SDPA, and the
    # addmm a checkpoint's early stop recorded without running it, count nothing)
    assert t["flops"].sum() / steps == pytest.approx(TRUTH[run]["measured_flops_per_step"], rel=1e-9)
    wrappers = t.filter(pl.col("name").is_in(["aten::linear", "aten::scaled_dot_product_attention",
                                              "aten::_scaled_dot_product_cudnn_attention"]))
    assert wrappers.height and wrappers["flops"].null_count() == wrappers.height
    fwd = t.filter(pl.col("name") == "aten::_cudnn_attention_forward").row(0, named=True)
    # its TFLOP/s by hand: FLOPs (non-causal, torch convention) over the GPU time of its kernels
    assert fwd["tflops"] == pytest.approx(fwd["flops"] / fwd["gpu_ns"] / 1e3, rel=1e-12)
    # precision from the recorded input types (c10::BFloat16), no --precision needed
    assert fwd["precision"] == "bf16" and fwd["roofline_pct"] is not None


def test_kernel_table_gives_attention_kernels_their_tflops():
    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.api import kernels
    from traceanalyzer.api.tables import analysis_with_tables  # noqa: PLC0415

    an = analysis_with_tables(api.analyze(trace_of("base"), workers=1))
    k = kernels(an)
    bprop = k.filter(pl.col("name").str.contains("flash_bprop")).row(0, named=True)
    # cuDNN's backward launches three kernels; its FLOPs (2·b·h·s²·(3d + 2dv) per call) go to the flash one
    per_call = 2 * 8 * 16 * 2048 * 2048 * (3 * 128 + 2 * 128)
    assert (bprop["flops_calls"], bprop["flops"]) == (72, 72 * per_call)
    assert bprop["tflops"] == pytest.approx(72 * per_call / bprop["total_ns"] / 1e3, rel=1e-12)
    assert bprop["precision"] == "bf16"
    gemm = k.filter(pl.col("name").str.starts_with("nvjet")).sort("total_ns", descending=True).row(0, named=True)
    # a GEMM whose op also issued a workspace memset: the kernel still gets its FLOPs
    assert gemm["flops_calls"] == gemm["calls"] and gemm["precision"] == "bf16"


# --------------------------------------------------------------------------- recipes, parameters
def _cfg(run: str):
    from traceanalyzer.model import load_config  # noqa: PLC0415

    return load_config(CONFIGS / f"h200_{run}.toml")


@pytest.mark.parametrize("run", RUNS)
def test_parameter_count_is_exact(run):
    # by hand for base (capture.py): per block 12h² weights + 3h+h+4h+h biases + two LayerNorms 4h;
    # embedding and untied head V·h each, learned positions s·h, final LayerNorm 2h
    L, h, V, s = 24, 2048, 50304, 2048
    base = L * (12 * h * h + 9 * h + 4 * h) + 2 * V * h + s * h + 2 * h
    assert base == 1_418_842_112
    assert _cfg(run).param_count() == TRUTH[run]["params"]


def test_recipes_set_the_bytes_per_parameter():
    from dataclasses import replace  # noqa: PLC0415

    from traceanalyzer.model.config import TrainingConfig  # noqa: PLC0415

    cfg = _cfg("base")
    r = cfg.training_recipe()
    assert (r.name, r.param_bytes, r.grad_bytes, r.optimizer_bytes) == ("pure-bf16", 2, 2, 4)
    for recipe, want in (("megatron-mixed", (2, 4, 12)), ("amp-fp32-master", (4, 4, 8)), ("fsdp2-mixed", (4, 4, 8))):
        r = replace(cfg, training=TrainingConfig(recipe=recipe)).training_recipe()
        assert (r.param_bytes, r.grad_bytes, r.optimizer_bytes) == want, recipe
    # a key given overrides the recipe's: SGD with momentum keeps one state
    r = replace(cfg, training=TrainingConfig(recipe="pure-bf16", optimizer="sgd")).training_recipe()
    assert r.optimizer_bytes == 2
    # no [training]: megatron-mixed, today's 18 B/param with bf16 and fp32 gradient reduction
    r = replace(cfg, training=TrainingConfig()).training_recipe()
    assert (r.name, r.param_bytes + r.grad_bytes + r.optimizer_bytes) == ("megatron-mixed", 18)


def test_bad_recipe_key_is_one_clear_error(tmp_path):
    from traceanalyzer.errors import ConfigError  # noqa: PLC0415
    from traceanalyzer.model import load_config  # noqa: PLC0415

    p = tmp_path / "c.toml"
    p.write_text('[model]\nlayers = 2\nhidden = 64\nheads = 4\n[training]\noptimizer = "lamb"\n')
    with pytest.raises(ConfigError, match=r"\[training\] optimizer = 'lamb'.*adamw, adam, sgd, adafactor"):
        load_config(p)
    p.write_text('[model]\nposition_embedding = "alibi"\n')
    with pytest.raises(ConfigError, match=r"\[model\] position_embedding = 'alibi'.*rope, learned, none"):
        load_config(p)


def test_megatron_arguments_map_onto_the_same_keys(tmp_path):
    from traceanalyzer.model import load_config  # noqa: PLC0415

    p = tmp_path / "run.sh"
    p.write_text("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 64 --num-attention-heads 4 "
                 "--seq-length 128 --padded-vocab-size 256 --micro-batch-size 1 --global-batch-size 8 --bf16 "
                 "--position-embedding-type rope --normalization RMSNorm --disable-bias-linear --optimizer sgd\n")
    cfg = load_config(megatron_args=p)
    assert (cfg.model.position_embedding, cfg.model.norm, cfg.model.bias) == ("rope", "rmsnorm", False)
    r = cfg.training_recipe()
    assert (r.name, r.optimizer, r.master_weights) == ("megatron-mixed", "sgd", True)
    # 2 layers × (4·64² + 2·4·64² + 2·64) + 256·64 + 64 (RMSNorm: h per norm)
    assert cfg.param_count() == 2 * (12 * 64 * 64 + 2 * 64) + 256 * 64 + 64


# --------------------------------------------------------------------------- memory
@pytest.mark.parametrize("run", RUNS)
def test_memory_prediction_against_the_allocator(run):
    from traceanalyzer.model.memory import estimate_memory  # noqa: PLC0415

    est = estimate_memory(_cfg(run))
    truth = TRUTH[run]["peak_mem_bytes"]
    if run == "recompute":
        # truth's max_memory_allocated (26.89 GiB) covers the whole script: its peak is the
        # FlopCounterMode step's. The plain training steps' peak, measured phase by phase on the
        # same H200 (tests/data/h200/phase_peaks.jsonl), is 20,217,668,608 B: the trace's own
        # allocator peak, 18.83 GiB
        phases = {r["variant"]: r for r in map(json.loads, (ROOT / "tests" / "data" / "h200" / "phase_peaks.jsonl").read_text().splitlines())}
        assert phases["recompute"]["plain_steps"] == round(18.829171180725098 * 2**30)
        assert phases["recompute"]["flopcounter_step"] > phases["recompute"]["plain_steps"]
        assert est.total_bytes == pytest.approx(phases["recompute"]["plain_steps"], rel=0.05)
    else:
        assert est.total_bytes == pytest.approx(truth, rel=0.05)
    assert est.details["peak_phase"] == "backward_start"
    # alive at that moment: no gradients yet (set_to_none), three fp32 [tokens, V] buffers of the loss
    c = est.components
    tokens, V, h = TRUTH[run]["tokens_per_step"], 50304, TRUTH[run]["config"]["h"]
    assert c["gradients"] == 0
    assert c["logits"] == 3 * 4 * tokens * V + 2 * 2 * tokens * h
    assert c["weights"] == 2 * TRUTH[run]["params"] and c["optimizer_states"] == 4 * TRUTH[run]["params"]


@pytest.mark.parametrize("run", ["base", "recompute"])
def test_memory_command_compares_with_the_trace(run):
    from traceanalyzer.api import memory  # noqa: PLC0415

    r = memory(trace_of(run), CONFIGS / f"h200_{run}.toml", workers=1)
    measured = r.fit.item(0, "measured_peak_allocated")
    assert r.estimate.total_bytes == pytest.approx(measured, rel=0.05)
    assert not [w for w in r.warnings if "vs measured peak" in w]
    # a configuration that is off: one line with both numbers
    from dataclasses import replace  # noqa: PLC0415

    cfg = _cfg(run)
    wrong = replace(cfg, model=replace(cfg.model, layers=12))
    r = memory(trace_of(run), wrong, workers=1)
    line = [w for w in r.warnings if "vs measured peak" in w]
    assert len(line) == 1 and f"{measured / 2**30:.2f} GiB" in line[0]


# --------------------------------------------------------------------------- shape-aware what-if
MORE = {json.loads(line)["variant"]: json.loads(line)
        for line in (ROOT / "tests" / "data" / "h200" / "more_truth.jsonl").read_text().splitlines() if line.strip()}


@pytest.fixture(scope="module")
def base_anchor():
    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis  # noqa: PLC0415

    return anchor_from_analysis(api.analyze(trace_of("base"), workers=1), _cfg("base"))


def _predict(anchor, sets):
    from traceanalyzer.model.whatif import apply_sets, project  # noqa: PLC0415

    return project(anchor, apply_sets(anchor.cfg, sets))


def test_anchor_splits_compute_by_kernel_family(base_anchor):
    t = base_anchor.terms
    fams = [k for k in t if k.startswith("compute_")]
    assert fams == ["compute_gemm", "compute_attention", "compute_optimizer", "compute_grad_sync", "compute_elementwise"]
    # the families' time is the compute bucket (the partition), split in the kernels' measured shares
    assert sum(t[k] for k in fams) > 0.28 and t["compute_gemm"] > t["compute_elementwise"] > t["compute_attention"]
    # the optimizer: AdamW's foreach kernels, a fixed ~18 ms per step on this GPU and model
    assert 0.015 < t["compute_optimizer"] < 0.022


@pytest.mark.parametrize("run,sets", [
    ("b4", ["micro_batch=4", "global_batch=4"]),
    ("b1", ["micro_batch=1", "global_batch=1"]),
    ("b2", ["micro_batch=2", "global_batch=2"]),
    ("b16", ["micro_batch=16", "global_batch=16"]),
    ("s1024", ["seq_length=1024"]),
    ("s4096", ["seq_length=4096", "micro_batch=4", "global_batch=4"]),
    ("mlprc", ["recompute=mlp"]),
])
def test_whatif_from_base_predicts_the_measured_step(base_anchor, run, sets):
    truth = (TRUTH.get(run) or MORE[run])["step_s_median"]
    # those runs did not all-reduce their gradients (nccl off); base did
    res = _predict(base_anchor, [*sets, "grad_allreduce=false"])
    assert res["predicted"]["step_time_s"] == pytest.approx(truth, rel=0.05)
    assert not res["host_bound"]
    if run == "b4":  # as the plain what-if of base too (its gradient flattening kept)
        assert _predict(base_anchor, sets)["predicted"]["step_time_s"] == pytest.approx(truth, rel=0.05)


def test_seq_length_moves_attention_by_its_flops_and_memory(base_anchor):
    res = _predict(base_anchor, ["seq_length=4096", "micro_batch=4", "global_batch=4"])
    rows = {r["term"]: r for r in res["terms"]}
    # same tokens (4 × 4096 = 8 × 2048): GEMM and elementwise unchanged; attention ∝ b·s² = 2×
    assert rows["compute_gemm"]["predicted_s"] == pytest.approx(rows["compute_gemm"]["anchor_s"], rel=1e-3)
    assert rows["compute_attention"]["predicted_s"] == pytest.approx(2 * rows["compute_attention"]["anchor_s"], rel=1e-12)
    assert any("sequence 4096" in n for n in res["notes"])
    # memory of the new shape, against the allocator of the s4096 run
    assert res["predicted"]["memory"]["total_gib"] * 2**30 == pytest.approx(MORE["s4096"]["peak_mem_bytes"], rel=0.05)


def test_host_bound_target_is_said():
    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis  # noqa: PLC0415

    anchor = anchor_from_analysis(api.analyze(trace_of("small"), workers=1), _cfg("small"))
    res = _predict(anchor, ["micro_batch=1", "global_batch=1"])
    assert res["host_bound"] and any(n.startswith("HOST-BOUND") for n in res["notes"])
    # at micro-batch 16 the GPU's work covers the host's pace again
    res = _predict(anchor, ["micro_batch=16", "global_batch=16"])
    assert not res["host_bound"]


@pytest.mark.parametrize("run,sets,phase", [
    ("b1", ["micro_batch=1", "global_batch=1"], "optimizer_step"),
    ("b2", ["micro_batch=2", "global_batch=2"], "backward_start"),
    ("b16", ["micro_batch=16", "global_batch=16"], "backward_start"),
    ("s1024", ["seq_length=1024"], "backward_start"),
    ("s4096", ["seq_length=4096", "micro_batch=4", "global_batch=4"], "backward_start"),
])
def test_memory_of_the_other_shapes_against_their_allocator(run, sets, phase):
    """No trace needed: base's configuration moved by --set, against the recorded runs' peaks. At
    micro-batch 1 the activations are small and the optimizer step's foreach temporary decides."""
    from traceanalyzer.model.memory import estimate_memory  # noqa: PLC0415
    from traceanalyzer.model.whatif import apply_sets  # noqa: PLC0415

    new = apply_sets(_cfg("base"), [*sets, "grad_allreduce=false"])
    assert new.param_count() == MORE[run]["params"]  # learned positions follow the sequence
    est = estimate_memory(new)
    assert est.total_bytes == pytest.approx(MORE[run]["peak_mem_bytes"], rel=0.05)
    assert est.details["peak_phase"] == phase


def test_small_gemms_are_said_to_be_extrapolated():
    from traceanalyzer import api  # noqa: PLC0415
    from traceanalyzer.reconciliation.anchor import anchor_from_analysis  # noqa: PLC0415

    anchor = anchor_from_analysis(api.analyze(trace_of("small"), workers=1), _cfg("small"))
    # the median GEMM of the small model: fc1 / fc2 at 4096 tokens, 2·4096·768·3072 FLOPs
    assert anchor.kernels["gemm_median_gflop"] == pytest.approx(2 * 4096 * 768 * 3072 / 1e9, rel=1e-12)
    res = _predict(anchor, ["micro_batch=16", "global_batch=16"])
    assert any("GEMMs are small" in n for n in res["notes"])
    # an upper bound indeed: the recorded run at micro-batch 16 was faster
    assert res["predicted"]["step_time_s"] > MORE["small_b16"]["step_s_median"]


def test_full_recompute_from_base(base_anchor):
    res = _predict(base_anchor, ["recompute=full"])  # the recompute run all-reduced too
    assert res["predicted"]["step_time_s"] == pytest.approx(TRUTH["recompute"]["step_s_median"], rel=0.05)


@pytest.mark.parametrize("run,sets", [("recompute", ["recompute=full"]), ("mlprc", ["recompute=mlp", "grad_allreduce=false"])])
def test_recompute_flops_follow_the_checkpoints_early_stop(run, sets):
    """torch.utils.checkpoint(use_reentrant=False) does not run the region's last matmul again: the
    configuration's executed FLOPs (convention torch) equal FlopCounterMode's exactly."""
    from traceanalyzer.model.flops import step_flops  # noqa: PLC0415
    from traceanalyzer.model.whatif import apply_sets  # noqa: PLC0415

    truth = (TRUTH.get(run) or MORE[run])["measured_flops_per_step"]
    assert step_flops(apply_sets(_cfg("base"), sets), "torch").hardware == truth


def test_mlp_recompute_memory():
    from traceanalyzer.model.memory import estimate_memory  # noqa: PLC0415
    from traceanalyzer.model.whatif import apply_sets  # noqa: PLC0415

    est = estimate_memory(apply_sets(_cfg("base"), ["recompute=mlp", "grad_allreduce=false"]))
    # per layer: LayerNorm-1 input, QKV input, Q/K/V, attention output and the MLP's input = 14·sbh bytes
    assert est.components["activations"] == 24 * 14 * 8 * 2048 * 2048
    assert est.total_bytes == pytest.approx(MORE["mlprc"]["peak_mem_bytes"], rel=0.05)


def test_other_recipes_by_hand():
    """amp-fp32-master and fsdp2-mixed on base's model, component by component (no measurement:
    the arithmetic of the recipes' bytes per parameter)."""
    from dataclasses import replace  # noqa: PLC0415

    from traceanalyzer.model.config import TrainingConfig  # noqa: PLC0415
    from traceanalyzer.model.memory import estimate_memory  # noqa: PLC0415

    cfg = _cfg("base")
    P = 1_418_842_112
    emb, pos = 50304 * 2048, 2048 * 2048
    amp = estimate_memory(replace(cfg, training=TrainingConfig(recipe="amp-fp32-master")))
    c = amp.components
    assert (c["weights"], c["optimizer_states"], c["gradients"]) == (4 * P, 8 * P, 0)
    # bf16 copies of every weight but the embeddings (the matmuls' weights, norms and biases included)
    assert c["autocast_copies"] == 2 * (P - emb - pos)
    assert amp.details["peak_phase"] == "backward_start"
    fsdp = estimate_memory(replace(cfg, training=TrainingConfig(recipe="fsdp2-mixed"),
                                   parallel=replace(cfg.parallel, dp=8), hardware=replace(cfg.hardware, num_gpus=8)))
    c = fsdp.components
    assert fsdp.zero_stage == 3
    assert c["weights"] == pytest.approx(4 * P / 8) and c["optimizer_states"] == pytest.approx(8 * P / 8)
    # two layers' bf16 parameters gathered + one layer's fp32 gradients
    layer = 12 * 2048 * 2048 + 13 * 2048
    assert c["zero3_gathered"] == pytest.approx((2 * 2 + 4) * layer)
