"""The GEMM check: matmul FLOPs a trace executed (from its recorded shapes) against the config's.

Public surface: :func:`matmul_flops` (``Trace`` -> per rank/step FLOPs of ``aten::mm/addmm/bmm``
from the recorded input shapes), :func:`gemm_check` (that against the configuration's GEMM
FLOPs; a config whose matmul FLOPs disagree with what the trace executed is flagged),
:data:`GEMM_TOLERANCE`.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import step_flops
from traceanalyzer.schema import Trace

LEAF_MATMULS = ["aten::mm", "aten::addmm", "aten::bmm"]
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
    leaves; they are counted only on a rank that has no leaf op with shapes. Returns rank, step,
    ops, flops (Float64); empty when the trace has no shapes (``record_shapes`` off).
    """
    ev = trace.events
    steps = (
        ev.filter(pl.col("kind").is_in(["annotation", "cpu_op"]), pl.col("name").str.starts_with(step_name + "#"))
        .select("rank", pl.col("name").str.extract(r"#(\d+)$").cast(pl.Int64).alias("step"),
                pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"))
        .sort("rank", "w0")
    )
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
        .when(name == "aten::matmul").then(2 * _prod(0) * pl.col("dims").list.get(1).list.last())
        .when(name == "aten::linear").then(2 * _prod(0) * _dims(1, 0))
        .otherwise(None)
    )
    ops = ops.with_columns(flops.cast(pl.Float64).alias("flops")).sort("rank", "start_ns")
    if steps.height:
        ops = ops.join_asof(steps, left_on="start_ns", right_on="w0", by="rank", strategy="backward",
                            check_sortedness=False).filter(
            pl.col("start_ns") < pl.col("w1")
        )
    else:
        ops = ops.with_columns(pl.lit(0, pl.Int64).alias("step"))
    return ops.group_by("rank", "step").agg(pl.len().alias("ops"), pl.col("flops").sum()).sort("rank", "step")


def gemm_check(trace: Trace, cfg: RunConfig, convention: str | None = None, gpus: int | None = None,
               step_name: str = "ProfilerStep") -> dict[str, Any] | None:
    """Matmul FLOPs per step and GPU counted from the trace's shapes vs the config's; None without shapes."""
    conv = convention or cfg.convention
    gpus = gpus or cfg.need(cfg.num_gpus, "[hardware] num_gpus", "the FLOPs per GPU")
    mf = matmul_flops(trace, step_name)
    if not mf.height:
        return None
    per_step = float(mf["flops"].mean())
    fl = step_flops(cfg, conv)
    if fl.attn_linear or fl.logits:  # a transformer: compare the GEMM terms (attention core runs in SDPA/flash kernels)
        L = cfg.model.layers
        gemm = (fl.attn_linear + fl.mlp) * (1 + cfg.recomputed_layers() / (3 * L)) + fl.logits
        what = "config GEMM FLOPs (QKV/out-proj, MLP, logits; + recomputed forward)"
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
    return {
        "ops": int(mf["ops"].sum()), "ops_per_step": float(mf["ops"].mean()),
        "trace_train_flops_per_step": per_step, "trace_fwd_flops_per_step": per_step / 3,
        "config_flops_per_step": cfg_gpu, "config_flops_what": what, "ratio": ratio, "verdict": verdict,
        "ok": verdict.startswith("consistent"),
    }


