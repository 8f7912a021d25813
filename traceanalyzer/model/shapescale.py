"""Kernel time by what drives it: the anchor trace's compute split into families, each carried to a
new shape by its own driver.

Public surface: :func:`kernel_families` (an :class:`~traceanalyzer.classify.Analysis` -> seconds
per step of each family, and the shapes the anchor measured), :data:`FAMILY_DRIVERS`,
:func:`scale_families` (those seconds and the anchor / new configurations -> the new seconds,
with the rule of each).

Families (each kernel by the host op that launched it, :func:`~traceanalyzer.classify.opstats`'s
link; the window by the host ranges of the step):

``gemm``
    kernels of ``aten::mm/addmm/bmm/baddbmm`` (and ``linear`` / ``matmul`` where they launch
    themselves): time ∝ GEMM FLOPs of the model (tokens × per-token FLOPs). The GEMMs of a
    transformer at these sizes run at a throughput that does not depend on the micro-batch
    (measured on one H200: 10.4–11.2 µs per 1,000 tokens per GEMM-heavy layer of the 1.4 B
    model from micro-batch 1 to 16), so time per FLOP is kept.
``attention``
    kernels of the scaled-dot-product attention ops (cuDNN / flash / efficient, forward and
    backward): time ∝ attention FLOPs (``b·s²·heads·head_dim``): per token it grows with the
    sequence length.
``optimizer``
    kernels launched inside ``Optimizer.step`` (the foreach kernels of AdamW...): a fixed cost
    per step ∝ parameters, independent of the batch;
``grad_sync``
    kernels launched between the end of the backward and the optimizer step (flattening the
    gradients for an all-reduce): ∝ parameters, and none when the new configuration does not
    all-reduce its gradients (``[parallel] grad_allreduce = false``).
``elementwise``
    everything else under compute (norms, activations, residual adds, copies, the loss): time ∝
    tokens (× vocabulary for the loss, which is fixed per model).

Host-bound check: the host's time to launch one step (``cpu_ns``: the step's host range where the
GPU never waited for it, i.e. the per-step launch cost) is compared with the predicted GPU time;
a target shorter than it is host-bound.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import step_flops

FAMILIES = ("gemm", "attention", "optimizer", "grad_sync", "elementwise")
FAMILY_DRIVERS = {
    "gemm": "GEMM FLOPs (tokens × per-token matmul FLOPs)",
    "attention": "attention FLOPs (micro-batches × b·s²·heads·head_dim)",
    "optimizer": "parameters (fixed per step)",
    "grad_sync": "parameters (fixed per step), 0 without a gradient all-reduce",
    "elementwise": "tokens",
}
_MATMUL_OPS = ["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul", "aten::_scaled_mm"]


def kernel_families(analysis: Any, step_name: str = "ProfilerStep") -> dict[str, Any] | None:
    """Seconds per step (mean over rank-steps) of the compute and recompute kernels by family
    (:data:`FAMILIES`), the launches per step, the host's launch time per step, and the shapes
    the anchor measured (micro-batch × sequence of its attention calls). None when the trace
    links no kernel to a host op."""
    from traceanalyzer.classify.opstats import _launching_op  # noqa: PLC0415
    from traceanalyzer.classify.shapes import ATTENTION_OPS  # noqa: PLC0415

    ev = analysis.trace.events
    gpu = analysis.gpu
    if gpu is None or not gpu.height:
        return None
    k = _launching_op(ev, gpu).filter(pl.col("cls") == "compute", pl.col("kind") == "kernel").collect()
    if not k.height or k["external_id"].null_count() == k.height:
        return None
    ops = ev.filter(pl.col("kind") == "cpu_op", pl.col("external_id").is_not_null()).select(
        "rank", "external_id", pl.col("name").alias("op"), pl.col("start_ns").alias("op_start"), "input_dims"
    ).unique(["rank", "external_id"], keep="first")
    k = k.drop("input_dims", "input_type", strict=False).join(ops, on=["rank", "external_id"], how="left")
    # the step tail: from the end of the last backward op of each step window to its end
    # (gradient flattening, the all-reduce, the optimizer step)
    w = analysis.windows.select("rank", "step", "cpu_start_ns", "cpu_end_ns").sort("rank", "cpu_start_ns")
    bwd = ev.filter(pl.col("kind") == "cpu_op", pl.col("name").str.starts_with("autograd::engine::evaluate_function")).select(
        "rank", "start_ns", "end_ns").sort("rank", "start_ns")
    opt = ev.filter(pl.col("kind").is_in(["annotation", "cpu_op"]), pl.col("name").str.starts_with("Optimizer.step")).select(
        "rank", pl.col("start_ns").alias("o0"), pl.col("end_ns").alias("o1")).sort("rank", "o0")
    if bwd.height:
        tail = (bwd.join_asof(w, left_on="start_ns", right_on="cpu_start_ns", by="rank", strategy="backward",
                              check_sortedness=False)
                .filter(pl.col("start_ns") < pl.col("cpu_end_ns"))
                .group_by("rank", "step").agg(pl.col("end_ns").max().alias("tail0")))
    else:
        tail = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "tail0": pl.Int64})
    k = (k.filter(pl.col("op_start").is_not_null()).sort("rank", "op_start")
         .join_asof(w, left_on="op_start", right_on="cpu_start_ns", by="rank", strategy="backward", check_sortedness=False)
         .filter(pl.col("op_start") < pl.col("cpu_end_ns"))
         .join(tail, on=["rank", "step"], how="left"))
    if opt.height:
        k = k.sort("rank", "op_start").join_asof(opt, left_on="op_start", right_on="o0", by="rank", strategy="backward",
                                                 check_sortedness=False)
        in_opt = pl.col("o1").is_not_null() & (pl.col("op_start") < pl.col("o1"))
    else:
        in_opt = pl.lit(False)
    in_tail = pl.col("tail0").is_not_null() & (pl.col("op_start") >= pl.col("tail0"))
    fam = (
        pl.when(in_opt).then(pl.lit("optimizer"))
        .when(in_tail).then(pl.lit("grad_sync"))
        .when(pl.col("op").str.contains(ATTENTION_OPS)).then(pl.lit("attention"))
        .when(pl.col("op").is_in(_MATMUL_OPS)).then(pl.lit("gemm"))
        .otherwise(pl.lit("elementwise"))
    )
    k = k.with_columns(fam.alias("family"), (pl.col("end_ns") - pl.col("start_ns")).alias("dur"))
    n = analysis.steps.height or 1
    per = {f: float(k.filter(pl.col("family") == f)["dur"].sum()) / n / 1e9 for f in FAMILIES}
    launches = k.height / n
    from traceanalyzer.classify.shapes import op_cost  # noqa: PLC0415

    g = k.filter(pl.col("family") == "gemm").select("op", "input_dims").drop_nulls()
    costs = [c.flops for c in (op_cost(o, d) for o, d in g.iter_rows()) if c is not None]
    gemm_gflop = float(sorted(costs)[len(costs) // 2]) / 1e9 if costs else None
    # the attention shapes the anchor measured: [B, H, L, D] of its forward calls
    shapes = sorted({d for d in k.filter(pl.col("family") == "attention")["input_dims"].drop_nulls().to_list()})[:4]
    return {"seconds": per, "launches_per_step": launches, "attention_dims": shapes, "gemm_median_gflop": gemm_gflop,
            "host_launch_s": _host_launch_s(analysis)}


def _host_launch_s(analysis: Any) -> float | None:
    """Mean host time per step spent launching (the CUDA runtime / driver launch calls of the
    step's window, summed): what a step costs the host at least, whatever the GPU does."""
    ev = analysis.trace.events
    rt = ev.filter(pl.col("kind") == "runtime", pl.col("name").str.contains(r"(?i)launch|memcpy|memset"))
    if not rt.height:
        return None
    w = analysis.windows.select("rank", "step", "cpu_start_ns", "cpu_end_ns").sort("rank", "cpu_start_ns")
    r = (rt.select("rank", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("d")).sort("rank", "start_ns")
         .join_asof(w, left_on="start_ns", right_on="cpu_start_ns", by="rank", strategy="backward", check_sortedness=False)
         .filter(pl.col("start_ns") < pl.col("cpu_end_ns")))
    n = analysis.steps.height or 1
    # the median launch call stands for one launch: calls that waited on a full launch queue are
    # longer, and are the GPU's time, not the host's
    med = float(r["d"].median() or 0)
    return med * r.height / n / 1e9


def _drivers(cfg: RunConfig) -> dict[str, float]:
    fl = step_flops(cfg, "torch")
    g = cfg.num_gpus or 1
    tokens = fl.tokens / g
    try:
        params = float(cfg.param_count())
    except Exception:  # noqa: BLE001 - a model the count cannot size: parameters taken as unchanged
        params = 1.0
    sync = params if cfg.grad_allreduce else 0.0
    return {"gemm": (fl.attn_linear + fl.mlp + fl.logits) / g, "attention": fl.attn_core / g,
            "optimizer": params, "grad_sync": sync, "elementwise": tokens}


def scale_families(seconds: dict[str, float], old: RunConfig, new: RunConfig) -> dict[str, tuple[float, str]]:
    """Each family's seconds per step carried from ``old`` to ``new`` by its driver
    (:data:`FAMILY_DRIVERS`): {family: (seconds, rule)}."""
    do, dn = _drivers(old), _drivers(new)
    out = {}
    for f in FAMILIES:
        r = dn[f] / do[f] if do[f] else (1.0 if not dn[f] else 0.0)
        out[f] = (seconds.get(f, 0.0) * r, f"× {FAMILY_DRIVERS[f]} {r:.4g}×")
    return out


#: GEMMs below this many GFLOP per call do not reach the GPU's GEMM throughput (an H200 runs a
#: 5 GFLOP bf16 GEMM at ~470 TFLOP/s, 20 GFLOP at ~680, 300 GFLOP at ~800): per-token time then
#: falls as the micro-batch grows, which the flat per-token rule does not follow
SMALL_GEMM_GFLOP = 50.0


def extrapolation(anchor: RunConfig, new: RunConfig, kernels: dict[str, Any] | None = None) -> list[str]:
    """What the prediction extrapolates beyond the shapes the anchor measured."""
    out = []
    g = (kernels or {}).get("gemm_median_gflop")
    if g is not None and g < SMALL_GEMM_GFLOP and new.batch.micro_batch * (new.model.seq_length or 0) > \
            anchor.batch.micro_batch * (anchor.model.seq_length or 0):
        out.append(f"the anchor's GEMMs are small (median {g:.3g} GFLOP per call, below ~{SMALL_GEMM_GFLOP:.0f}): larger "
                   "ones run faster per FLOP, so the predicted GEMM time is an upper bound")
    a, n = anchor, new
    if n.model.hidden != a.model.hidden or n.ffn != a.ffn or n.parallel.tp != a.parallel.tp:
        out.append("hidden / FFN / TP differ from the anchor's: GEMM time is carried by FLOPs at the anchor's "
                   "throughput, without a model of the new GEMM shapes")
    if n.batch.micro_batch > a.batch.micro_batch:
        out.append(f"micro-batch {n.batch.micro_batch} is beyond the anchor's {a.batch.micro_batch}: GEMM and "
                   "elementwise time are extrapolated per token")
    if n.batch.micro_batch < a.batch.micro_batch and n.batch.micro_batch * (n.model.seq_length or 0) < 2048:
        out.append(f"micro-batch {n.batch.micro_batch} × sequence {n.model.seq_length} = "
                   f"{n.batch.micro_batch * (n.model.seq_length or 0)} tokens per micro-batch: small GEMMs may fill "
                   "the GPU's SMs less than the anchor's (time per token assumed flat)")
    if (n.model.seq_length or 0) != (a.model.seq_length or 0):
        out.append(f"sequence {n.model.seq_length} differs from the anchor's {a.model.seq_length}: attention time is "
                   "extrapolated by its FLOPs (∝ s²), at the anchor's attention throughput")
    return out
