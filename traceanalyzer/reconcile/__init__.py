"""The reconciler: measured time buckets of a trace, converted to TFLOP/s/GPU, beside the theory.

Public surface:

* :func:`waterfall` (``Analysis`` + ``RunConfig`` -> dict): achieved TFLOP/s/GPU, MFU and HFU
  from the measured mean step time, and ``peak = achieved + Σ losses`` with
  ``loss_i = peak × t_i / T`` for every measured bucket (recompute, exposed comm — per parallel
  dimension when the breakdown has ``exposed_comm_<dim>`` columns —, other, idle — per cause when
  it has ``idle_<cause>`` columns) and ``kernel efficiency = peak × t_compute / T − achieved``.
  The terms are computed as exact fractions of the integer-nanosecond buckets, so they sum to
  the peak exactly (``wf["exact"]``). Beside each loss, the analytic prediction.
* :func:`matmul_flops` (``Trace`` -> per rank/step FLOPs of ``aten::mm/addmm/bmm`` from the
  recorded input shapes) and the GEMM check inside :func:`waterfall`: a config whose matmul FLOPs
  disagree with what the trace executed is flagged.
* :func:`compare` (two waterfalls -> the gap in achieved TFLOP/s split exactly into the
  differences of the waterfall terms, biggest first).

Nothing here prints; renderers live in :mod:`traceanalyzer.render.model`.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import CONVENTION_NOTES, step_flops
from traceanalyzer.model.hardware import detect_gpu, peak_tflops
from traceanalyzer.model.parallel import bubble_fraction, comm_volumes
from traceanalyzer.schema import Trace

__all__ = ["waterfall", "compare", "compare_time", "matmul_flops", "gemm_check", "loss_columns", "attach_overlapped"]

LEAF_MATMULS = ["aten::mm", "aten::addmm", "aten::bmm"]
COMPOSITE_MATMULS = ["aten::matmul", "aten::linear"]
_CAUSE = {"exposed_comm": re.compile(r"^exposed_comm_(.+)_(ns|us)$"), "idle": re.compile(r"^idle_(.+)_(ns|us)$")}
GEMM_TOLERANCE = 0.25


# ------------------------------------------------------------------------------ measured buckets
def loss_columns(steps: pl.DataFrame) -> dict[str, int]:
    """Total integer ns of every waterfall bucket over all (rank, step) rows.

    ``exposed_comm`` and ``idle`` are replaced by their cause columns when the breakdown has
    them (``exposed_comm_<dim>_ns|_us``, ``idle_<cause>_ns|_us``); whatever the causes do not
    cover is kept as ``<bucket>_unattributed``.
    """
    out: dict[str, int] = {}
    for bucket in ("compute", "recompute", "exposed_comm", "other", "idle"):
        total = int(steps[f"{bucket}_ns"].sum())
        causes: dict[str, int] = {}
        if bucket in _CAUSE:
            for col in steps.columns:
                m = _CAUSE[bucket].match(col)
                if not m or (m.group(2) == "us" and f"{bucket}_{m.group(1)}_ns" in steps.columns):
                    continue
                v = steps[col].sum()
                causes[f"{bucket}_{m.group(1)}"] = int(v) if m.group(2) == "ns" else int(round(float(v) * 1000))
        if causes:
            rest = total - sum(causes.values())
            out.update(causes)
            if rest:
                out[f"{bucket}_unattributed"] = rest
        else:
            out[bucket] = total
    return out


# ------------------------------------------------------------------------------ GEMM shapes
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


# ------------------------------------------------------------------------------ waterfall
def _peak(cfg: RunConfig, trace: Trace) -> tuple[float, str, str]:
    hw = cfg.hardware
    if hw.peak_tflops is not None:
        return float(hw.peak_tflops), hw.gpu or "given", "config peak_tflops"
    if hw.gpu is not None:
        return peak_tflops(hw.gpu, hw.precision), detect_gpu(hw.gpu) or hw.gpu, "config"
    names = [n for n in trace.meta["device_name"].drop_nulls().unique().to_list() if detect_gpu(n)]
    if not names:
        raise ConfigError("[hardware] gpu is missing and the trace names no known GPU: it is needed for the peak FLOP/s "
                          "(MFU denominator); give [hardware] gpu or peak_tflops")
    return peak_tflops(names[0], hw.precision), detect_gpu(names[0]) or names[0], f"trace device name {names[0]!r}"


def _ms(ns: int | float, n: int) -> float:
    return ns / n / 1e6


def waterfall(analysis: Analysis, cfg: RunConfig, *, convention: str | None = None,
              step_name: str = "ProfilerStep") -> dict[str, Any]:
    """Waterfall of one trace with its run configuration (see the module docstring)."""
    conv = convention or cfg.convention
    steps = analysis.steps
    n = steps.height
    ranks = steps["rank"].n_unique()
    T = int(steps["duration_ns"].sum())
    if n == 0 or T <= 0:
        raise ConfigError("the trace has no measured step time to reconcile")
    buckets = loss_columns(steps)
    assert sum(buckets.values()) == T, "partition does not sum to the step time"
    gpus = cfg.num_gpus
    if gpus is None:
        ws = analysis.trace.meta["world_size"].drop_nulls()
        gpus = int(ws.max()) if ws.len() else None
    gpus = cfg.need(gpus, "[hardware] num_gpus", "the FLOPs per GPU (the trace does not give a world size either)")
    fl = step_flops(cfg, conv)
    conv = fl.convention
    peak, gpu, gpu_source = _peak(cfg, analysis.trace)

    P = Fraction(str(peak))
    F = Fraction(fl.model / gpus)  # exact value of the float
    H = Fraction(fl.hardware / gpus)
    achieved = F * n / (T * 1000)  # FLOPs / (T/n ns · 1e-9) / 1e12
    exact: dict[str, Fraction] = {"achieved": achieved, "kernel_efficiency": P * buckets["compute"] / T - achieved}
    for k, t in buckets.items():
        if k != "compute":
            exact[k] = P * t / T
    assert sum(exact.values()) == P

    step_s = T / n / 1e9
    warnings: list[str] = []
    preds = _predictions(cfg, convention or cfg.convention, buckets, n, warnings)
    terms = []
    for k, v in exact.items():
        t_ns = buckets.get(k) if k != "achieved" and k != "kernel_efficiency" else (buckets["compute"] if k == "kernel_efficiency" else None)
        terms.append({"term": k, "tflops": float(v), "time_ms": _ms(t_ns, n) if t_ns is not None else None,
                      **preds.get(k, {})})
    if exact["kernel_efficiency"] < 0:
        warnings.append("kernel efficiency is negative: the config claims more FLOPs than the peak allows in the measured "
                        "compute time — the model, batch or GPU count in the config is probably wrong")
    gemm = gemm_check(analysis.trace, cfg, convention, gpus, step_name)
    if gemm and not gemm["ok"]:
        warnings.append(gemm["verdict"])
    compute_s = buckets["compute"] / n / 1e9
    return {
        "trace": ", ".join(str(s) for s in analysis.trace.sources[:2]) or "trace",
        "config": cfg.name or cfg.source,
        "convention": conv,
        "convention_note": CONVENTION_NOTES[conv],
        "ranks": ranks,
        "steps": n // max(ranks, 1),
        "rank_steps": n,
        "gpu": gpu, "gpu_source": gpu_source, "precision": cfg.hardware.precision, "peak_tflops": peak,
        "num_gpus": gpus,
        "model_flops_per_gpu": fl.model / gpus, "hardware_flops_per_gpu": fl.hardware / gpus,
        "step_time_s": step_s,
        "buckets_ns": buckets,
        "achieved_tflops": float(achieved),
        "mfu": float(achieved / P),
        "hfu": float(H * n / (T * 1000) / P),
        # model FLOPs over the measured compute time: what the compute kernels achieved
        "compute_tflops": float(F * n / (buckets["compute"] * 1000)) if buckets["compute"] else None,
        "compute_s": compute_s,
        "terms": terms,
        "sum_tflops": float(sum(exact.values())),
        "exact": exact,
        "gemm_check": gemm,
        "warnings": warnings,
    }


def _predictions(cfg: RunConfig, conv: str, b: dict[str, int], n: int, warnings: list[str]) -> dict[str, dict[str, str]]:
    """Analytic prediction beside each measured loss (strings for the report, numbers in keys)."""
    out: dict[str, dict[str, Any]] = {}
    compute = b["compute"] / n / 1e6  # ms per step
    rec = b.get("recompute", 0) / n / 1e6
    try:
        fl = step_flops(cfg, conv)
        ratio = fl.recompute / fl.model
        out["recompute"] = {
            "predicted": f"{compute * ratio:.3f} ms (compute × {ratio:.3f}, {cfg.recompute.granularity} recompute)",
            "measured": f"{rec:.3f} ms ({rec / compute:.3f} × compute)" if compute else f"{rec:.3f} ms",
            "predicted_ms": compute * ratio,
        }
    except ConfigError as exc:
        warnings.append(f"no recompute prediction: {exc}")
    bubble_key = "idle_bubble" if "idle_bubble" in b else ("idle" if "idle" in b else None)
    try:
        m = cfg.need(cfg.microbatches, "[batch] global_batch", "the predicted pipeline bubble")
        frac = bubble_fraction(cfg.parallel.pp, m, cfg.parallel.vp)
        busy = (b["compute"] + b.get("recompute", 0)) / n / 1e6
        if bubble_key:
            meas = b[bubble_key] / n / 1e6
            out[bubble_key] = {
                "predicted": f"bubble {busy * frac:.3f} ms ((p−1)/(v·m) = {frac:.3f} × compute+recompute)",
                "measured": f"{meas:.3f} ms = {meas / busy:.3f} × compute+recompute" if busy else f"{meas:.3f} ms",
                "predicted_ms": busy * frac,
            }
    except ConfigError as exc:
        warnings.append(f"no bubble prediction: {exc}")
    if cfg.model.fwd_flops_per_sample is not None:
        return out  # no transformer shape: no communication model
    try:
        comms = comm_volumes(cfg)
        comm_keys = [k for k in b if k == "exposed_comm" or k.startswith("exposed_comm_")]
        meas_exp = sum(b[k] for k in comm_keys) / n / 1e6
        for k in comm_keys:
            dim = k[len("exposed_comm_"):] if k != "exposed_comm" else None
            sel = [c for c in comms if dim is None or c.dim == dim]
            out[k] = {
                "predicted": f"{sum(c.time_s for c in sel) * 1e3:.3f} ms at configured bandwidth, {sum(c.exposed_s for c in sel) * 1e3:.3f} exposed"
                if sel else ("no communication predicted" if dim else "0 ms (no parallelism)"),
                "predicted_ms": sum(c.time_s for c in sel) * 1e3,
            }
        first = comm_keys[0] if comm_keys else None
        if first:
            out[first]["measured"] = f"{meas_exp:.3f} ms exposed (overlapped: see breakdown)"
    except ConfigError as exc:
        warnings.append(f"no communication prediction: {exc}")
    return out


def attach_overlapped(wf: dict[str, Any], analysis: Analysis) -> None:
    """Put measured exposed + overlapped communication beside the predicted communication time."""
    n = analysis.steps.height
    ov = int(analysis.steps["overlapped_comm_ns"].sum()) / n / 1e6
    for t in wf["terms"]:
        if t["term"] == "exposed_comm" or t["term"].startswith("exposed_comm_"):
            exp = t["time_ms"] or 0.0
            t["measured"] = f"{exp:.3f} ms exposed + {ov:.3f} ms overlapped = {exp + ov:.3f} ms"
            break
    wf["overlapped_comm_ms"] = ov


# ------------------------------------------------------------------------------ compare
def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Split achieved(A) − achieved(B) into differences of the waterfall terms, exactly.

    achieved = peak − Σ losses, so the gap = (peak_A − peak_B) − Σ_k (loss_A,k − loss_B,k);
    each term's contribution is listed (biggest magnitude first) and they sum to the gap exactly.
    """
    if a["convention"] != b["convention"]:
        raise ConfigError(f"the two waterfalls use different FLOPs conventions ({a['convention']} vs {b['convention']}): "
                          "pass the same --convention")
    ea, eb = a["exact"], b["exact"]
    keys = [k for k in ea if k != "achieved"] + [k for k in eb if k not in ea]
    contrib: dict[str, Fraction] = {}
    pa, pb = Fraction(str(a["peak_tflops"])), Fraction(str(b["peak_tflops"]))
    if pa != pb:
        contrib["peak"] = pa - pb
    for k in keys:
        contrib[k] = eb.get(k, Fraction(0)) - ea.get(k, Fraction(0))
    gap = ea["achieved"] - eb["achieved"]
    assert sum(contrib.values()) == gap
    order = sorted(contrib, key=lambda k: -abs(contrib[k]))
    return {
        "a": a["trace"], "b": b["trace"], "convention": a["convention"],
        "achieved_a": float(ea["achieved"]), "achieved_b": float(eb["achieved"]), "gap": float(gap),
        "terms": [{"term": k, "a": float(ea.get(k, pa if k == "peak" else 0)), "b": float(eb.get(k, pb if k == "peak" else 0)),
                   "contribution": float(contrib[k])} for k in order],
        "sum_contributions": float(sum(contrib.values())),
        "exact": {"gap": gap, **contrib},
    }


def compare_time(a: Analysis, b: Analysis) -> dict[str, Any]:
    """Without a run configuration: the gap in mean step time (B − A) split exactly into the
    differences of the mean time buckets (same buckets and causes as the waterfall).

    Each step is an exact partition, so mean step time = Σ mean buckets and the per-bucket
    differences sum to the step-time gap exactly (``exact`` holds them as fractions of ns).
    """
    def means(an: Analysis) -> tuple[dict[str, Fraction], Fraction]:
        n = an.steps.height
        cols = loss_columns(an.steps)
        return {k: Fraction(v, n) for k, v in cols.items()}, Fraction(int(an.steps["duration_ns"].sum()), n)

    ma, ta = means(a)
    mb, tb = means(b)
    keys = list(ma) + [k for k in mb if k not in ma]
    contrib = {k: mb.get(k, Fraction(0)) - ma.get(k, Fraction(0)) for k in keys}
    gap = tb - ta
    assert sum(contrib.values()) == gap
    order = sorted(contrib, key=lambda k: -abs(contrib[k]))
    src = lambda an: ", ".join(str(s) for s in an.trace.sources)  # noqa: E731
    return {
        "a": src(a), "b": src(b), "unit": "ms per step (mean over ranks and steps)",
        "step_ms_a": float(ta) / 1e6, "step_ms_b": float(tb) / 1e6, "gap_ms": float(gap) / 1e6,
        "terms": [{"term": k, "a_ms": float(ma.get(k, 0)) / 1e6, "b_ms": float(mb.get(k, 0)) / 1e6,
                   "contribution_ms": float(contrib[k]) / 1e6} for k in order],
        "sum_contributions_ms": float(sum(contrib.values())) / 1e6,
        "exact": {"gap_ns": gap, **{f"{k}_ns": v for k, v in contrib.items()}},
    }
