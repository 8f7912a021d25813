"""The what-if anchor of a trace: the measured per-GPU step of an analysis, split into the terms the
what-if model carries to another layout.

Public surface:

* :func:`anchor_from_analysis` — an :class:`~traceanalyzer.classify.Analysis` and its run
  configuration -> :class:`~traceanalyzer.model.whatif.Anchor` (the measured buckets of the exact
  partition, the compute split by kernel family, the GEMM check of the recorded shapes);
* :func:`kernel_families` — the compute kernels of an analysis by what drives their time
  (:data:`~traceanalyzer.model.shapescale.FAMILIES`), the launches and the host's launch time
  per step;
* :func:`whatif` — the Python verb: a run configuration, the changes and an optional analysis ->
  the two-row frame (the anchor, measured or analytic, and the predicted layout).

What reads the trace lives here; the model that carries an anchor to a new layout (the rules of
each term, :func:`~traceanalyzer.model.whatif.project`, and each kernel family's driver,
:func:`~traceanalyzer.model.shapescale.scale_families`) takes numbers and configurations only and
stays in :mod:`traceanalyzer.model`.

Families of the compute kernels (each kernel by the host op that launched it,
:func:`~traceanalyzer.classify.opstats.launching_op`; the window by the host ranges of the
step): kernels inside ``Optimizer.step`` are ``optimizer``; kernels launched between the end of
the backward and the optimizer step ``grad_sync``; kernels of the attention ops ``attention``;
of the matmul ops (:data:`MATMUL_OPS`) ``gemm``; everything else ``elementwise``. The host's
time to launch one step (the CUDA runtime launch calls in the step's window) bounds the step
from below: a target whose GPU work is shorter is host-bound.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.classify.opstats import launching_op
from traceanalyzer.classify.shapes import ATTENTION_OPS, op_cost
from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import step_flops
from traceanalyzer.model.predict import pipeline_imbalance
from traceanalyzer.model.shapescale import FAMILIES
from traceanalyzer.model.whatif import (
    DIMS, Anchor, anchor_from_config, apply_sets, is_transformer, peak_of, project, result_frame, split_compute,
)
from traceanalyzer.queries import query_engine
from traceanalyzer.reconciliation.buckets import loss_columns
from traceanalyzer.reconciliation.gemm import gemm_check

#: host ops whose kernels are the ``gemm`` family
MATMUL_OPS = ["aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul", "aten::_scaled_mm"]


# ------------------------------------------------------------------------------------ anchor
_IDLE_BUBBLE = "idle_bubble"


def anchor_from_analysis(analysis: Any, cfg: RunConfig, *, convention: str | None = None, baseline: Any = None) -> Anchor:
    """The measured per-GPU step of a trace (an :class:`~traceanalyzer.classify.Analysis`) as an anchor.

    Every bucket of the exact partition (:func:`traceanalyzer.reconciliation.loss_columns`) is
    divided by the number of (rank, step) rows: the mean per-GPU step. The compute bucket is split
    into GEMM families by the configuration's FLOPs of each (when the trace recorded shapes, its
    matmul FLOPs are checked against the configuration's first,
    :func:`traceanalyzer.reconciliation.gemm_check`, and a disagreement is noted); with a pipeline, the last stage's
    extra work (:func:`pipeline_imbalance`) is taken out of the bubble idle (the other stages
    wait for it there), at most all of it.
    """
    steps = analysis.steps
    n = steps.height
    if n == 0 or int(steps["duration_ns"].sum()) <= 0:
        raise ConfigError("the trace has no measured step to anchor a what-if on")
    b = {k: v / n / 1e9 for k, v in loss_columns(steps).items()}
    conv = convention or cfg.reported.convention or cfg.convention
    kernels = None
    if is_transformer(cfg):
        kernels = kernel_families(analysis)
        if kernels is not None and kernels["seconds"]["gemm"] <= 0:
            kernels = None
    if kernels is not None:  # the compute bucket split by the kernels' families, in their measured shares
        fam = kernels["seconds"]
        tot = sum(fam.values())
        compute = b.pop("compute", 0.0)
        terms = {f"compute_{f}": compute * v / tot for f, v in fam.items()}
    else:
        terms = split_compute(cfg, conv, b.pop("compute", 0.0))
    terms["recompute"] = b.pop("recompute", 0.0)
    bubble = b.pop(_IDLE_BUBBLE, 0.0)
    imb_t = 0.0
    notes: list[str] = []
    if is_transformer(cfg) and cfg.parallel.pp > 1:
        imb = pipeline_imbalance(step_flops(cfg, conv), cfg.parallel.pp)
        want = (sum(v for k, v in terms.items() if k.startswith("compute")) + terms["recompute"]) * (imb - 1)
        imb_t = min(want, bubble)
        bubble -= imb_t
        if imb_t < want:
            notes.append(f"the trace's bubble idle ({1e3 * (bubble + imb_t):.3f} ms) is less than the modelled last-stage "
                         f"imbalance ({1e3 * want:.3f} ms): all of it is counted as imbalance")
    terms["pipeline_imbalance"] = imb_t
    comm_other = 0.0
    for k in list(b):
        if k.startswith("exposed_comm"):
            d = k[len("exposed_comm_"):] if k != "exposed_comm" else ""
            if d in DIMS:
                terms[f"exposed_comm_{d}"] = b.pop(k)
            else:
                comm_other += b.pop(k)
    for d in DIMS:
        terms.setdefault(f"exposed_comm_{d}", 0.0)
    terms["exposed_comm_other"] = comm_other
    terms["bubble"] = bubble
    terms["other"] = b.pop("other", 0.0)
    for k, v in b.items():  # idle causes (or one "idle")
        terms[k if k.startswith("idle") else f"idle_{k}"] = v
    notes.extend(_unprofiled(terms, steps, analysis, kernels))
    gemm = None
    events = getattr(analysis.trace, "events", None)
    if events is not None and events.height:
        try:
            gemm = gemm_check(analysis.trace, cfg, conv)
        except ConfigError:
            gemm = None
    if gemm is not None and not gemm["ok"]:
        notes.append(f"{gemm['verdict']}: the compute split by GEMM family follows the configuration and may be wrong")
    src = ", ".join(str(s) for s in analysis.trace.sources[:2]) or "trace"
    ranks = steps["rank"].n_unique()
    peak = peak_of(cfg)
    shapes = f"; matmul FLOPs of its recorded shapes {gemm['ratio']:.2f}× the configuration's" if gemm else ""
    return Anchor(cfg, terms, "trace", f"measured: {src} ({ranks} rank(s), {n // max(ranks, 1)} step(s) each{shapes})", conv, peak,
                  tuple(notes), baseline, kernels)


def _unprofiled(terms: dict[str, float], steps: pl.DataFrame, analysis: Any, kernels: dict[str, Any] | None) -> list[str]:
    """Anchor on the step without the profiler: what the profiler added to the step (mean per
    rank-step, :mod:`traceanalyzer.classify.profiler_cost`) taken out of the host-bound idle
    (where the profiler's own host work shows), at most all of it. A note saying so.

    A step the host paced as recorded keeps its host's pace, without the profiler's own work:
    the host's dispatch and launch time per step (its recorded ops and runtime calls on the
    launching threads, :func:`traceanalyzer.classify.launches.host_time`) less the profiler's
    host time bounds the target's step from below (``kernels["host_launch_s"]``)."""
    if "profiler_overhead_ns" not in steps.columns or steps["profiler_overhead_ns"].is_null().all():
        return []
    added = float(steps["profiler_overhead_ns"].fill_null(0).clip(lower_bound=0).sum()) / steps.height / 1e9
    key = "idle_host_bound" if "idle_host_bound" in terms else ("idle" if "idle" in terms else None)
    if key is None or added <= 0:
        return []
    from traceanalyzer.model.whatif import HOST_BOUND_SHARE

    step_s = float(steps["duration_ns"].sum()) / steps.height / 1e9
    events = getattr(analysis.trace, "events", None)
    if kernels is not None and terms[key] > HOST_BOUND_SHARE * step_s and events is not None and events.height:
        from traceanalyzer.classify.launches import host_time

        host = host_time(events, analysis.windows).join(steps.select("rank", "step", "profiler_host_ns"), on=["rank", "step"], how="inner")
        if host.height:
            pace = float((host["host_ns"] - host["profiler_host_ns"].fill_null(0)).clip(lower_bound=0).mean()) / 1e9
            kernels["host_launch_s"] = max(kernels.get("host_launch_s") or 0.0, pace)
    cut = min(added, terms[key])
    terms[key] -= cut
    return [f"anchored on the unprofiled estimate: the profiler's own host work (~{1e3 * cut:.3f} ms per step) is taken out "
            "of the host-bound idle"]


# ------------------------------------------------------------------------------------ kernel families
def kernel_families(analysis: Any, step_name: str = "ProfilerStep") -> dict[str, Any] | None:
    """Seconds per step (mean over rank-steps) of the compute and recompute kernels by family
    (:data:`FAMILIES`), the launches per step, the host's launch time per step, and the shapes
    the anchor measured (micro-batch × sequence of its attention calls). None when the trace
    links no kernel to a host op."""
    ev = analysis.trace.events
    gpu = analysis.gpu
    if gpu is None or not gpu.height:
        return None
    k = launching_op(ev, gpu).filter(pl.col("cls") == "compute", pl.col("kind") == "kernel").collect(engine=query_engine())
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
        .when(pl.col("op").is_in(MATMUL_OPS)).then(pl.lit("gemm"))
        .otherwise(pl.lit("elementwise"))
    )
    k = k.with_columns(fam.alias("family"), (pl.col("end_ns") - pl.col("start_ns")).alias("dur"))
    n = analysis.steps.height or 1
    per = {f: float(k.filter(pl.col("family") == f)["dur"].sum()) / n / 1e9 for f in FAMILIES}
    launches = k.height / n
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


# ------------------------------------------------------------------------------------ Python verb
def whatif(cfg: RunConfig, sets: list[str] | dict[str, Any] | RunConfig, *, analysis: Any = None,
           baseline: pl.DataFrame | None = None, convention: str | None = None) -> pl.DataFrame:
    """Predict another layout of a run from its measured (or published) step.

    The parameters, the result and an example are documented once, on the Python verb
    :func:`traceanalyzer.whatif`; the rules that move each term are in :func:`project`."""
    new = sets if isinstance(sets, RunConfig) else apply_sets(cfg, sets)
    anchor = (anchor_from_analysis(analysis, cfg, convention=convention, baseline=baseline) if analysis is not None
              else anchor_from_config(cfg, convention=convention, baseline=baseline))
    return result_frame(project(anchor, new))
