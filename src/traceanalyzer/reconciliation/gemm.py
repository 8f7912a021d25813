"""The GEMM check: matmul FLOPs a trace executed (from its recorded shapes) against the config's.

Public surface: :func:`matmul_flops` (``Trace`` -> per rank/step FLOPs of ``aten::mm/addmm/bmm/
baddbmm`` from the recorded input shapes), :func:`attention_flops` (the same for scaled-dot-product
attention: SDPA, its flash / efficient / cuDNN forward and backward ops, flash-attn's own ops),
:func:`trace_flops` (both per step under the ``torch`` convention: what
``torch.utils.flop_counter.FlopCounterMode`` counts), :func:`gemm_check` (that against the
configuration's GEMM and attention FLOPs; a config whose FLOPs disagree with what the trace
executed is flagged), :data:`GEMM_TOLERANCE`.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import step_flops
from traceanalyzer.schema import Trace

LEAF_MATMULS = ["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"]
COMPOSITE_MATMULS = ["aten::matmul", "aten::linear"]
GEMM_TOLERANCE = 0.25


def _dims(i: int, j: int) -> pl.Expr:
    return pl.col("dims").list.get(i, null_on_oob=True).list.get(j, null_on_oob=True)


def _prod(i: int) -> pl.Expr:
    return pl.col("dims").list.get(i, null_on_oob=True).list.eval(pl.element().product()).list.first()


def matmul_flops(trace: Trace, step_name: str = "ProfilerStep") -> pl.DataFrame:
    """FLOPs of the matmuls a trace recorded shapes for, per rank and CPU step window.

    Counts the leaf ops ``aten::mm`` (2mkn), ``aten::addmm`` (bias, mat1, mat2), ``aten::bmm``
    (2bmkn) — forward, backward and recompute alike, since autograd's backward matmuls are
    recorded as the same ops. ``aten::matmul``/``aten::linear`` are composites that call those
    leaves; they are counted only on a rank that has no leaf op with shapes. On a rank whose
    kernels are linked to host ops, a leaf op counts only if it launched a kernel (an op the
    recomputation of a non-reentrant checkpoint stopped in ran no kernel). Returns rank, step,
    ops, flops (Float64); empty when the trace has no shapes (``record_shapes`` off).
    """
    ev = trace.events
    steps = _step_windows(trace, step_name)
    ops = ev.filter(pl.col("kind") == "cpu_op", pl.col("name").is_in(LEAF_MATMULS + COMPOSITE_MATMULS),
                    pl.col("input_dims").is_not_null())
    if not ops.height:
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "ops": pl.UInt32, "flops": pl.Float64})
    has_leaf = ops.filter(pl.col("name").is_in(LEAF_MATMULS)).select("rank").unique().with_columns(pl.lit(True).alias("leaf_rank"))
    ops = (
        ops.join(has_leaf, on="rank", how="left")
        .filter(pl.when(pl.col("leaf_rank").fill_null(False)).then(pl.col("name").is_in(LEAF_MATMULS)).otherwise(True))
        .with_columns(pl.col("input_dims").str.json_decode(pl.List(pl.List(pl.Int64))).alias("dims"))
    )
    name = pl.col("name")
    flops = (
        pl.when(name == "aten::mm").then(2 * _dims(0, 0) * _dims(0, 1) * _dims(1, 1))
        .when(name == "aten::addmm").then(2 * _dims(1, 0) * _dims(1, 1) * _dims(2, 1))
        .when(name == "aten::bmm").then(2 * _dims(0, 0) * _dims(0, 1) * _dims(0, 2) * _dims(1, 2))
        .when(name == "aten::baddbmm").then(2 * _dims(1, 0) * _dims(1, 1) * _dims(1, 2) * _dims(2, 2))
        .when(name == "aten::matmul").then(2 * _prod(0) * pl.col("dims").list.get(1).list.last())
        .when(name == "aten::linear").then(2 * _prod(0) * _dims(1, 0))
        .otherwise(None)
    )
    ops = ops.with_columns(flops.cast(pl.Float64).alias("flops")).sort("rank", "start_ns")
    return _per_step(_launched_only(trace, ops), steps)


def _launched_only(trace: Trace, ops: pl.DataFrame, key: str = "external_id") -> pl.DataFrame:
    """The rows of ``ops`` whose ``key`` (an external id) launched a kernel, on ranks whose kernels
    are linked to host ops at all (elsewhere every row: a CPU-only trace, or one without links).

    An op recorded on the host may launch nothing: non-reentrant activation checkpointing stops
    the recomputation early by raising inside the last op whose inputs it needs (that op is
    recorded, its kernel never runs), so counting recorded ops would overstate the work."""
    k = trace.events.filter(pl.col("kind") == "kernel", pl.col("external_id").is_not_null()).select("rank", pl.col("external_id").alias(key)).unique()
    if not k.height:
        return ops
    linked = k.select("rank").unique().with_columns(pl.lit(True).alias("__linked"))
    k = k.with_columns(pl.lit(True).alias("__launched"))
    return (
        ops.join(linked, on="rank", how="left").join(k, on=["rank", key], how="left")
        .filter(~pl.col("__linked").fill_null(False) | pl.col("__launched").fill_null(False))
        .drop("__linked", "__launched")
    )


def _step_windows(trace: Trace, step_name: str) -> pl.DataFrame:
    return (
        trace.events.filter(pl.col("kind").is_in(["annotation", "cpu_op"]), pl.col("name").str.starts_with(step_name + "#"))
        .select("rank", pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"),
                pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"))
        .sort("rank", "w0")
    )


def _per_step(ops: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """``ops`` (rank, start_ns, flops) summed per rank and step window (by the op's start)."""
    ops = ops.sort("rank", "start_ns")
    if steps.height:
        ops = ops.join_asof(steps, left_on="start_ns", right_on="w0", by="rank", strategy="backward",
                            check_sortedness=False).filter(
            pl.col("start_ns") < pl.col("w1")
        )
    else:
        ops = ops.with_columns(pl.lit(0, pl.Int64).alias("step"))
    return ops.group_by("rank", "step").agg(pl.len().alias("ops"), pl.col("flops").sum()).sort("rank", "step")


def attention_flops(trace: Trace, step_name: str = "ProfilerStep") -> pl.DataFrame:
    """FLOPs of the scaled-dot-product attention calls a trace recorded shapes for, per rank and
    CPU step window (rank, step, ops, flops), counted as ``torch.utils.flop_counter`` does
    (:mod:`traceanalyzer.classify.shapes`: non-causal, backward 2.5× forward).

    The attention ops nest (``aten::scaled_dot_product_attention`` calls
    ``aten::_scaled_dot_product_cudnn_attention``, which calls ``aten::_cudnn_attention_forward``;
    the backward likewise): each call is counted once, at the outermost attention op with a
    formula on its thread, and only if one of its ops launched a kernel (on a trace with
    kernels). A recomputed forward (activation checkpointing) is a call of its own and counts.
    Empty when the trace has no attention shapes."""
    from traceanalyzer.classify.shapes import ATTENTION_OPS, cost_frame  # noqa: PLC0415

    empty = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "ops": pl.UInt32, "flops": pl.Float64})
    ev = trace.events
    ops = ev.filter(pl.col("kind") == "cpu_op", pl.col("input_dims").is_not_null(),
                    pl.col("name").str.contains(ATTENTION_OPS))
    if not ops.height:
        return empty
    costs = cost_frame(ops.select("name", "input_dims")).filter(pl.col("flops").is_not_null())
    ops = ops.join(costs.select("name", "input_dims", "flops"), on=["name", "input_dims"])
    if not ops.height:
        return empty
    # a call = an outermost attention op on its thread (it starts after every earlier attention
    # op there has ended) with the attention ops nested in it; it counts if one of them launched
    # a kernel (an op that raised before running, as a checkpoint's early stop does, launched none)
    ops = (
        ops.sort("rank", "pid", "tid", "start_ns", pl.col("end_ns"), descending=[False, False, False, False, True])
        .with_columns(pl.col("end_ns").cum_max().shift(1).over("rank", "pid", "tid").alias("__open"))
        .with_columns((pl.col("__open").is_null() | (pl.col("start_ns") >= pl.col("__open"))).alias("__outer"))
        .with_columns(pl.col("__outer").cum_sum().over("rank", "pid", "tid").alias("__call"))
    )
    launched = _launched_only(trace, ops).select("rank", "pid", "tid", "__call").unique()
    ops = (
        ops.filter(pl.col("__outer")).join(launched, on=["rank", "pid", "tid", "__call"])
        .with_columns(pl.col("flops").cast(pl.Float64))
    )
    return _per_step(ops.select("rank", "start_ns", "flops"), _step_windows(trace, step_name))


def trace_flops(trace: Trace, step_name: str = "ProfilerStep") -> dict[str, Any] | None:
    """Executed FLOPs per step from the trace's recorded shapes, convention ``torch`` (what
    ``torch.utils.flop_counter.FlopCounterMode`` counts: matmuls ``aten::mm/addmm/bmm/baddbmm``,
    attention non-causal with its backward 2.5× its forward): ``matmul_per_step``,
    ``attention_per_step``, ``executed_per_step`` (their sum; means over the rank-steps that
    have them), ``convention``. None without shapes (``record_shapes`` off)."""
    mm = matmul_flops(trace, step_name)
    at = attention_flops(trace, step_name)
    if not mm.height and not at.height:
        return None
    both = mm.select("rank", "step", pl.col("flops").alias("mm")).join(
        at.select("rank", "step", pl.col("flops").alias("at")), on=["rank", "step"], how="full", coalesce=True
    ).fill_null(0.0)
    m, a = float(both["mm"].mean()), float(both["at"].mean())
    return {"matmul_per_step": m, "attention_per_step": a, "executed_per_step": m + a, "convention": "torch",
            "steps": both.height}


def gemm_check(trace: Trace, cfg: RunConfig, convention: str | None = None, gpus: int | None = None,
               step_name: str = "ProfilerStep") -> dict[str, Any] | None:
    """Matmul FLOPs per step and GPU counted from the trace's shapes vs the config's, and the same
    for the core attention when the trace recorded its shapes (``attention_*`` keys, convention
    ``torch``: non-causal, backward 2.5× forward, on both sides); None without shapes."""
    conv = convention or cfg.convention
    gpus = gpus or cfg.need(cfg.num_gpus, "[hardware] num_gpus", "the FLOPs per GPU")
    mf = matmul_flops(trace, step_name)
    if not mf.height:
        return None
    per_step = float(mf["flops"].mean())
    fl = step_flops(cfg, conv)
    attn_cfg = None
    if fl.attn_linear or fl.logits:  # a transformer: compare the GEMM terms (attention core runs in SDPA/flash kernels)
        L = cfg.model.layers
        gran = cfg.recompute.granularity
        ft = step_flops(cfg, "torch")
        core_again = {"full": ft.attn_core * 4 / 14 * cfg.recomputed_layers() / L,
                      "selective": ft.attn_core * 4 / 14}.get(gran, 0.0)
        # the recomputed matmuls: what recompute executes beyond the core attention
        gemm = fl.attn_linear + fl.mlp + fl.logits + (ft.recompute - core_again if gran in ("full", "mlp") else 0.0)
        what = "config GEMM FLOPs (QKV/out-proj, MLP, logits; + recomputed forward)"
        attn_cfg = (ft.attn_core + core_again) / gpus
    else:
        gemm = fl.hardware
        what = "config FLOPs (given per sample)"
    cfg_gpu = gemm / gpus
    ratio = per_step / cfg_gpu if cfg_gpu else float("inf")
    if ratio > 1 + GEMM_TOLERANCE:
        verdict = (f"WRONG CONFIG? the trace executed {ratio:.2f}× the matmul FLOPs the config accounts for: "
                   "the model in the config is too small (or the batch, or the GPU count too large)")
    elif ratio < 1 - GEMM_TOLERANCE and (fl.attn_linear or fl.logits):
        verdict = (f"WRONG CONFIG? the trace executed only {ratio:.2f}× the matmul FLOPs of the config: "
                   "the model in the config is too large (or shapes were recorded for part of the work only)")
    elif ratio < 1 - GEMM_TOLERANCE:
        verdict = "consistent: matmuls are a lower bound here (convolutions and other ops are not counted)"
    else:
        verdict = f"consistent (within ±{GEMM_TOLERANCE:.0%})"
    out = {
        "ops": int(mf["ops"].sum()), "ops_per_step": float(mf["ops"].mean()),
        "trace_train_flops_per_step": per_step, "trace_fwd_flops_per_step": per_step / 3,
        "config_flops_per_step": cfg_gpu, "config_flops_what": what, "ratio": ratio, "verdict": verdict,
        "ok": verdict.startswith("consistent"),
    }
    at = attention_flops(trace, step_name)
    if at.height and attn_cfg:
        a = float(at["flops"].mean())
        ar = a / attn_cfg
        out.update({"attention_ops_per_step": float(at["ops"].mean()), "trace_attention_flops_per_step": a,
                    "config_attention_flops_per_step": attn_cfg, "attention_ratio": ar,
                    "attention_convention": "torch"})
        if abs(ar - 1) > GEMM_TOLERANCE:
            s_cfg = cfg.model.seq_length
            out["attention_verdict"] = (f"WRONG CONFIG? the trace's attention executed {ar:.2f}× the config's "
                                        f"(sequence length {s_cfg}, heads × head size, batch or recompute in the config?)")
            out["ok"] = False
            if out["verdict"].startswith("consistent"):
                out["verdict"] = out["attention_verdict"]
        else:
            out["attention_verdict"] = f"consistent (within ±{GEMM_TOLERANCE:.0%})"
    return out
