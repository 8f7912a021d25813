"""The waterfall of one trace: measured time buckets converted to TFLOP/s/GPU, beside the theory.

Public surface: :func:`waterfall` (``Analysis`` + ``RunConfig`` -> dict): achieved TFLOP/s/GPU,
MFU and HFU from the measured mean step time, and ``peak = achieved + Σ losses`` with
``loss_i = peak × t_i / T`` for every measured bucket (recompute, exposed comm — per parallel
dimension when the breakdown has ``exposed_comm_<dim>`` columns —, other, idle — per cause when
it has ``idle_<cause>`` columns) and ``kernel efficiency = peak × t_compute / T − achieved``.
The terms are computed as exact fractions of the integer-nanosecond buckets, so they sum to the
peak exactly (``wf["exact"]``). Beside each loss, the analytic prediction.
:func:`attach_overlapped` puts the measured overlapped communication beside the prediction.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from traceanalyzer.classify import Analysis
from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import CONVENTION_NOTES, HFU_NOTES, step_flops
from traceanalyzer.model.hardware import detect_gpu, peak_tflops
from traceanalyzer.model.parallel import bubble_fraction, comm_volumes
from traceanalyzer.model.predict import logged_convention
from traceanalyzer.reconciliation.buckets import loss_columns
from traceanalyzer.reconciliation.gemm import gemm_check, trace_flops
from traceanalyzer.schema import Trace


def _trace_gpus(trace: Trace) -> list[str]:
    if "device_name" not in trace.meta.columns:
        return []
    return sorted(n for n in trace.meta["device_name"].drop_nulls().unique().to_list() if detect_gpu(n))


def _peak(cfg: RunConfig, trace: Trace, warnings: list[str]) -> tuple[float, str, str]:
    hw = cfg.hardware
    names = _trace_gpus(trace)
    if hw.gpu is not None and names:
        keys = {detect_gpu(n) for n in names}
        if detect_gpu(hw.gpu) not in keys:
            warnings.append(f"[hardware] gpu = {hw.gpu!r} but the trace ran on {', '.join(repr(n) for n in names)}: "
                            "the peak (MFU denominator) is the config's — check which is right")
    if hw.peak_tflops is not None:
        return float(hw.peak_tflops), hw.gpu or "given", "config peak_tflops"
    if hw.gpu is not None:
        return peak_tflops(hw.gpu, hw.precision), detect_gpu(hw.gpu) or hw.gpu, "config"
    if not names:
        raise ConfigError("[hardware] gpu is missing and the trace names no known GPU: it is needed for the peak FLOP/s "
                          "(MFU denominator); give [hardware] gpu or peak_tflops")
    return peak_tflops(names[0], hw.precision), detect_gpu(names[0]) or names[0], f"trace device name {names[0]!r}"


def recompute_contradiction(cfg: RunConfig, recompute_ns: int, total_ns: int) -> list[str]:
    """A sentence when the configuration's recompute contradicts the trace's: none configured but
    recompute measured (at least 1 % of the step), or recompute configured and none measured."""
    if total_ns <= 0:
        return []
    share = recompute_ns / total_ns
    g = cfg.recompute.granularity
    if g == "none" and share >= 0.01:
        return [f"the configuration has no recompute ([recompute] granularity = 'none') but the trace recomputes "
                f"{100 * share:.1f} % of the step: the FLOPs, the HFU and any what-if from it are off; set [recompute] granularity"]
    if g != "none" and recompute_ns == 0:
        return [f"the configuration recomputes ([recompute] granularity = {g!r}) but the trace shows no recomputed "
                "kernel: check the configuration, or name the recompute ranges (`recompute_range`)"]
    return []


def _unprofiled(steps, F: Fraction, H: Fraction, P: Fraction, n: int) -> dict[str, float] | None:
    """Step time, TFLOP/s, MFU and HFU on the unprofiled estimate of every step
    (:mod:`traceanalyzer.classify.profiler_cost`); None when a step has no estimate."""
    if "unprofiled_estimate_ns" not in steps.columns or steps["unprofiled_estimate_ns"].is_null().any():
        return None
    T = int(steps["unprofiled_estimate_ns"].sum())
    if T <= 0:
        return None
    achieved = F * n / (T * 1000)
    return {"step_time_s": T / n / 1e9, "achieved_tflops": float(achieved), "mfu": float(achieved / P),
            "hfu": float(H * n / (T * 1000) / P)}


def _ms(ns: int | float, n: int) -> float:
    return ns / n / 1e6


def waterfall(analysis: Analysis, cfg: RunConfig, *, convention: str | None = None,
              step_name: str = "ProfilerStep", hfu: str = "forward", baseline: Any = None) -> dict[str, Any]:
    """Waterfall of one trace with its run configuration (see the module docstring).

    ``hfu``: how recompute counts in the HFU (:data:`traceanalyzer.model.flops.HFU_CONVENTIONS`).
    ``baseline``: an nccl-tests frame; the predicted communication beside each measured term is
    then at the baseline's bandwidth for its message size and scope
    (:func:`traceanalyzer.model.commcurve.with_baseline`).
    FP8 runs: MFU is over the FP8 dense peak; ``mfu_vs_bf16_peak`` gives it over the BF16 one."""
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
    warnings: list[str] = list(cfg.warnings)
    rep = cfg.reported
    logged = None
    if rep.tflops_per_gpu is not None and rep.step_time_s is not None and rep.convention is None:
        # a training log gave both: say which convention its figure is in, and use it unless told
        logged = logged_convention(cfg, rep.step_time_s, rep.tflops_per_gpu, gpus)
        lconv, lkind = logged["best"].split()
        warnings.append(f"the logged {rep.tflops_per_gpu:g} TFLOP/s/GPU is reproduced by the {lconv} convention "
                        f"({lkind} FLOPs, {100 * logged['relative_error']:+.1f} %)"
                        + ("" if convention else f": the waterfall uses {lconv}"))
        convention = convention or lconv
    conv_in = convention or cfg.convention  # the convention asked for ("per-sample" models have their own)
    fl = step_flops(cfg, conv_in, hfu=hfu)
    conv = fl.convention
    peak, gpu, gpu_source = _peak(cfg, analysis.trace, warnings)
    warnings.extend(recompute_contradiction(cfg, buckets.get("recompute", 0), T))
    bf16_peak = None
    if cfg.hardware.precision == "fp8" and cfg.hardware.peak_tflops is None and detect_gpu(gpu):
        bf16_peak = peak_tflops(gpu, "bf16")

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
    if rep.step_time_s is not None and abs(step_s / rep.step_time_s - 1) > 0.10:
        warnings.append(f"the trace's mean step ({step_s:.4g} s) differs from the logged/reported {rep.step_time_s:.4g} s "
                        f"by {100 * (step_s / rep.step_time_s - 1):+.0f} % (profiler overhead? another run or batch?)")
    preds = _predictions(cfg, conv_in, buckets, n, warnings, baseline)
    terms = []
    for k, v in exact.items():
        t_ns = buckets.get(k) if k != "achieved" and k != "kernel_efficiency" else (buckets["compute"] if k == "kernel_efficiency" else None)
        terms.append({"term": k, "tflops": float(v), "time_ms": _ms(t_ns, n) if t_ns is not None else None,
                      **preds.get(k, {})})
    if exact["kernel_efficiency"] < 0:
        warnings.append("kernel efficiency is negative: the config claims more FLOPs than the peak allows in the measured "
                        "compute time — the model, batch or GPU count in the config is probably wrong")
    gemm = gemm_check(analysis.trace, cfg, conv_in, gpus, step_name)
    if gemm and not gemm["ok"]:
        warnings.append(gemm["verdict"])
    tflops = trace_flops(analysis.trace, step_name)
    graphs = _graph_launches(analysis.trace.events)
    if graphs:
        warnings.append(f"trace FLOPs and the GEMM check count only the ops recorded outside CUDA / HIP graphs: {graphs:,} "
                        "graph launches ran kernels that carry no op shapes (the integrity check cuda_graphs)")
    compute_s = buckets["compute"] / n / 1e9
    from traceanalyzer.reconciliation.commbytes import comm_bytes

    bytes_table, bytes_warnings = comm_bytes(analysis, cfg)
    warnings.extend(bytes_warnings)
    unprof = _unprofiled(steps, F, H, P, n)
    if unprof is not None and abs(unprof["mfu"] / float(achieved / P) - 1) > 0.05:
        warnings.append(f"the profiler's own host work lengthens the step: MFU {100 * float(achieved / P):.1f} % as measured in the trace, "
                        f"{100 * unprof['mfu']:.1f} % on the unprofiled estimate ({1e3 * unprof['step_time_s']:.3g} ms a step)")
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
        "hfu_convention": hfu, "hfu_note": HFU_NOTES[hfu],
        "mfu_denominator": f"dense {cfg.hardware.precision} peak",
        "mfu_vs_bf16_peak": float(achieved) / bf16_peak if bf16_peak else None,
        # model FLOPs over the measured compute time: what the compute kernels achieved
        "compute_tflops": float(F * n / (buckets["compute"] * 1000)) if buckets["compute"] else None,
        "compute_s": compute_s,
        "unprofiled": unprof,
        "terms": terms,
        "sum_tflops": float(sum(exact.values())),
        "exact": exact,
        "gemm_check": gemm,
        "trace_flops": tflops,
        "reported_step_time_s": rep.step_time_s,
        "logged_convention": logged,
        "comm_bytes": bytes_table.to_dicts(),  # bytes per dimension, measured beside predicted (reconciliation.commbytes)
        "warnings": list(dict.fromkeys(warnings)),
    }


def _graph_launches(events) -> int:
    """Graph launch calls among ``events`` (0 without host events)."""
    import polars as pl

    from traceanalyzer.classify.launches import GRAPH_LAUNCH

    if events.height == 0:
        return 0
    return events.filter((pl.col("kind") == "runtime") & pl.col("name").str.contains(GRAPH_LAUNCH)).height


def _predictions(cfg: RunConfig, conv: str, b: dict[str, int], n: int, warnings: list[str],
                 baseline: Any = None) -> dict[str, dict[str, str]]:
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
        if baseline is not None:
            from traceanalyzer.model.commcurve import with_baseline

            comms = with_baseline(comms, cfg, baseline)
        comm_keys = [k for k in b if k == "exposed_comm" or k.startswith("exposed_comm_")]
        meas_exp = sum(b[k] for k in comm_keys) / n / 1e6
        for k in comm_keys:
            dim = k[len("exposed_comm_"):] if k != "exposed_comm" else None
            sel = [c for c in comms if dim is None or c.dim == dim]
            out[k] = {
                "predicted": f"{sum(c.time_s for c in sel) * 1e3:.3f} ms at {'the nccl-tests baseline' if baseline is not None else 'configured'} bandwidth, {sum(c.exposed_s for c in sel) * 1e3:.3f} exposed"
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


