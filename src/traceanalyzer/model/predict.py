"""Analytic prediction of one run, and the attribution of a gap between two runs.

Public surface: :func:`predict` (config -> plain dict, pure), :func:`compare_predictions`
(two predictions -> the throughput gap split into causes, exactly), :data:`CAUSES`.

Time model of one GPU's step (all times per optimizer step)::

    t_compute  = hardware FLOPs per GPU / (peak · kernel_efficiency)    (includes recompute)
    t_stage    = t_compute · imbalance       (the last pipeline stage also computes the logits)
    t_step     = (t_stage + t_tp_exposed) · (1 + bubble) + t_other_exposed
    bubble     = (p − 1) / (v · m)
    imbalance  = last stage's FLOPs / mean stage's FLOPs = (S + logits) / (S + logits/p),
                 S = hardware FLOPs of one stage's layers (1 without pipeline parallelism)

A pipeline runs at the pace of its slowest stage; the last one holds the output layer (the
first holds the embedding, whose lookup costs no matmul FLOPs).

``kernel_efficiency`` is the fraction of the dense peak the compute kernels reach. It is 1.0
(the ideal, "at peak") unless given, or implied by the ``[reported]`` throughput of the run
(solving the equation above for it), or borrowed from a reference run (``--vs``).

The prediction is also given as a waterfall in the same terms the reconciler uses for a trace:
``peak = achieved + kernel efficiency + recompute + exposed comm (per dim) + pipeline imbalance +
bubble``, each loss ``peak × t_i / t_step``; the terms sum to the peak.

FP8 runs: the denominator of MFU/HFU is the FP8 dense peak (``hardware.peak_tflops``); the MFU
against the BF16 peak is given beside it (``mfu_vs_bf16_peak``), as many publications use it.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.config import CONVENTIONS
from traceanalyzer.model.flops import CONVENTION_NOTES, HFU_NOTES, StepFlops, step_flops
from traceanalyzer.model.hardware import detect_gpu, peak_tflops
from traceanalyzer.model.parallel import bubble_fraction, comm_volumes

#: Causes of a throughput gap between two predictions, in the order they are reported.
CAUSES = ("peak", "kernel_efficiency", "recompute", "pipeline_imbalance", "bubble", "exposed_comm")


def pipeline_imbalance(fl: StepFlops, pp: int) -> float:
    """Last stage's FLOPs over the mean stage's: the logits sit on the last stage only."""
    if pp <= 1:
        return 1.0
    stage = (fl.hardware - fl.logits) / pp
    return (stage + fl.logits) / (stage + fl.logits / pp) if stage + fl.logits > 0 else 1.0


def logged_convention(cfg: RunConfig, step_time_s: float, logged_tflops: float, gpus: int) -> dict[str, Any]:
    """Which FLOPs convention (and model vs hardware FLOPs) reproduces a logged TFLOP/s/GPU.

    Every convention's model FLOPs and hardware FLOPs (full recompute counted, as
    Megatron-DeepSpeed's 'TFLOPs' does) over the logged step time; the nearest names the
    convention the run logged in.
    """
    cands: dict[str, float] = {}
    for conv in CONVENTIONS:
        fl = step_flops(cfg, conv)
        cands[f"{conv} model"] = fl.model / gpus / step_time_s / 1e12
        if fl.recompute:
            cands[f"{conv} hardware"] = fl.hardware / gpus / step_time_s / 1e12
    best = min(cands, key=lambda k: abs(cands[k] - logged_tflops))
    return {"logged_tflops_per_gpu": logged_tflops, "step_time_s": step_time_s, "candidates": cands,
            "best": best, "relative_error": cands[best] / logged_tflops - 1}


def predict(cfg: RunConfig, *, convention: str | None = None, kernel_efficiency: float | None = None,
            global_batch: int | None = None, exposed_comm: dict[str, float] | None = None,
            hfu: str = "forward", baseline: Any = None) -> dict[str, Any]:
    """Analytic prediction for ``cfg`` (pure; plain dict of numbers and labels).

    ``convention``: FLOPs convention of every figure (default: the reported figure's, else the
    run's). ``kernel_efficiency``: fraction of peak reached by compute kernels (default: implied
    by ``[reported]``, else 1.0). ``global_batch`` overrides ``[batch]`` (sweeps).
    ``exposed_comm``: per-dimension fraction of the communication time that is exposed,
    replacing the defaults of :mod:`traceanalyzer.model.parallel` (e.g. ``{"tp": 0.0}``).
    ``baseline``: an nccl-tests frame (:func:`traceanalyzer.baselines.read_nccl_tests`): each
    communication family's bandwidth is read off it at its message size
    (:func:`traceanalyzer.model.commcurve.with_baseline`) instead of the hardware table's.
    """
    if global_batch is not None:
        cfg = replace(cfg, batch=replace(cfg.batch, global_batch=global_batch)).validate()
    conv = convention or cfg.reported.convention or cfg.convention
    hw = cfg.hardware
    gpus = cfg.need(cfg.num_gpus, "[hardware] num_gpus (or [parallel] dp)", "FLOPs per GPU")
    warnings: list[str] = list(cfg.warnings)
    logged = None
    if cfg.reported.tflops_per_gpu is not None and cfg.reported.step_time_s is not None and cfg.reported.convention is None:
        # a training log gave both: say which convention its figure is in, and use that one
        logged = logged_convention(cfg, cfg.reported.step_time_s, cfg.reported.tflops_per_gpu, gpus)
        rconv, rkind = logged["best"].split()
        warnings.append(f"the logged {cfg.reported.tflops_per_gpu:g} TFLOP/s/GPU is reproduced by the {rconv} convention "
                        f"({rkind} FLOPs, {100 * logged['relative_error']:+.1f} %)")
        cfg = replace(cfg, reported=replace(cfg.reported, convention=rconv,
                                            tflops_per_gpu=cfg.reported.tflops_per_gpu if rkind == "model" else None))
        conv = convention or rconv
    fl = step_flops(cfg, conv, hfu=hfu)
    peak = peak_tflops(hw.gpu, hw.precision, hw.peak_tflops)
    m = cfg.need(cfg.microbatches, "[batch] global_batch", "the number of microbatches (pipeline bubble)")
    bub = bubble_fraction(cfg.parallel.pp, m, cfg.parallel.vp)
    comms = comm_volumes(cfg)
    if baseline is not None:
        from traceanalyzer.model.commcurve import with_baseline

        comms = with_baseline(comms, cfg, baseline)

    def exposed_s(c) -> float:
        if exposed_comm is not None and c.dim in exposed_comm:
            return c.time_s * exposed_comm[c.dim]
        return c.exposed_s

    t_tp = sum(exposed_s(c) for c in comms if c.dim == "tp")
    t_other = {dim: sum(exposed_s(c) for c in comms if c.dim == dim) for dim in ("cp", "ep", "pp", "dp")}
    t_o = sum(t_other.values())
    P = peak * 1e12
    f_model_gpu = fl.model / gpus
    f_hw_gpu = fl.hardware / gpus

    imb = pipeline_imbalance(fl, cfg.parallel.pp)

    reported = cfg.reported.tflops_per_gpu
    implied_eff = None
    reported_step = None
    if reported is not None or cfg.reported.step_time_s is not None:
        if reported is not None:
            rep_conv = cfg.reported.convention or cfg.convention
            rep_model = step_flops(cfg, rep_conv).model / gpus
            reported_step = cfg.reported.step_time_s or rep_model / (reported * 1e12)
        else:
            reported_step = cfg.reported.step_time_s
        t_c = ((reported_step - t_o) / (1 + bub) - t_tp) / imb
        implied_eff = f_hw_gpu / (P * t_c) if t_c > 0 else float("nan")
        if not (t_c > 0):
            warnings.append(f"the reported step time ({reported_step:.3f} s) is shorter than the modelled communication "
                            "and bubble alone: no kernel efficiency explains it — check the configuration")
        elif implied_eff > 1:
            warnings.append(f"the reported throughput implies compute kernels at {implied_eff:.0%} of the peak (more than "
                            "100 %): the model, batch, GPU count or peak in the configuration is probably wrong")
    if kernel_efficiency is not None:
        eff, eff_source = kernel_efficiency, "given"
    elif implied_eff is not None and math.isfinite(implied_eff) and implied_eff > 0:
        eff, eff_source = implied_eff, "implied by [reported]"
    else:
        eff, eff_source = 1.0, "ideal (1.0)"

    t_c = f_hw_gpu / (P * eff)
    t_cm = f_model_gpu / (P * eff)
    t_r = t_c - t_cm
    t_imb = t_c * (imb - 1)
    t_bubble = (t_c + t_imb + t_tp) * bub
    t_step = t_c + t_imb + t_tp + t_bubble + t_o
    achieved = f_model_gpu / t_step / 1e12
    losses = {
        "kernel_efficiency": peak * t_cm / t_step - achieved,
        "recompute": peak * t_r / t_step,
        "exposed_comm_tp": peak * t_tp / t_step,
        **{f"exposed_comm_{d}": peak * t / t_step for d, t in t_other.items() if t > 0},
        "pipeline_imbalance": peak * t_imb / t_step,
        "bubble": peak * t_bubble / t_step,
    }
    for k, v in losses.items():
        if v < -1e-9:
            warnings.append(f"the {k.replace('_', ' ')} term is {v:.1f} TFLOP/s (negative): the kernel efficiency "
                            f"({eff:.3f}, {eff_source}) exceeds 1 — the configuration does not describe this run")
    bf16_peak = None
    if hw.precision == "fp8" and hw.peak_tflops is None and hw.gpu is not None:
        bf16_peak = peak_tflops(hw.gpu, "bf16")
    p = cfg.parallel
    out: dict[str, Any] = {
        "name": cfg.name or cfg.source,
        "convention": conv,
        "convention_note": CONVENTION_NOTES[conv],
        "layout": {
            "gpus": gpus, "tp": p.tp, "pp": p.pp, "dp": cfg.dp, "cp": p.cp, "ep": p.ep, "vp": p.vp,
            "sequence_parallel": p.sequence_parallel, "global_batch": cfg.batch.global_batch,
            "micro_batch": cfg.batch.micro_batch, "microbatches": m,
            "recompute": cfg.recompute.granularity, "recomputed_layers": cfg.recomputed_layers(),
        },
        "hardware": {"gpu": detect_gpu(hw.gpu) or hw.gpu, "precision": hw.precision, "peak_tflops": peak,
                     "mfu_denominator": f"dense {hw.precision} peak" + (" (given)" if hw.peak_tflops is not None else ""),
                     "bf16_peak_tflops": bf16_peak},
        "hfu_convention": hfu,
        "hfu_note": HFU_NOTES[hfu],
        "flops": {**fl.as_dict(), "model_per_gpu": f_model_gpu, "hardware_per_gpu": f_hw_gpu,
                  "model_per_token": fl.per_token, "hfu_over_mfu": fl.hardware / fl.model},
        "pipeline_imbalance": imb,
        "ideal_step_time_s": f_hw_gpu / P,
        "bubble_fraction": bub,
        "bubble_share_of_step": t_bubble / t_step,
        "comm": [c.as_dict() | {"exposed_s": exposed_s(c)} for c in comms],
        "kernel_efficiency": eff,
        "kernel_efficiency_source": eff_source,
        "times_s": {"compute_model": t_cm, "recompute": t_r, "exposed_comm_tp": t_tp,
                    **{f"exposed_comm_{d}": t for d, t in t_other.items()}, "pipeline_imbalance": t_imb,
                    "bubble": t_bubble},
        "step_time_s": t_step,
        "tflops_per_gpu": achieved,
        "mfu": achieved / peak,
        "hfu": f_hw_gpu / t_step / 1e12 / peak,
        "mfu_vs_bf16_peak": achieved / bf16_peak if bf16_peak else None,
        "waterfall": {"achieved": achieved, **losses},
        "reported": None,
        "logged_convention": logged,
        "warnings": list(dict.fromkeys(warnings)),
    }
    if reported is not None or reported_step is not None:
        out["reported"] = {
            "tflops_per_gpu": reported,
            "convention": cfg.reported.convention or cfg.convention,
            "step_time_s": reported_step,
            "tflops_per_gpu_in_convention": f_model_gpu / reported_step / 1e12,
            "implied_kernel_efficiency": implied_eff,
        }
    return out


def _factors(pred: dict[str, Any]) -> dict[str, float]:
    """achieved = peak · eff / (hfu/mfu) / imbalance / (1 + bubble) / comm_factor."""
    t = pred["times_s"]
    t_c = t["compute_model"] + t["recompute"]
    t_o = sum(v for k, v in t.items() if k.startswith("exposed_comm_") and k != "exposed_comm_tp")
    b = pred["bubble_fraction"]
    imb = pred.get("pipeline_imbalance", 1.0)
    comm = 1 + (t["exposed_comm_tp"] / t_c + t_o / (t_c * (1 + b))) / imb
    return {
        "peak": pred["hardware"]["peak_tflops"],
        "kernel_efficiency": pred["kernel_efficiency"],
        "recompute": 1 / pred["flops"]["hfu_over_mfu"],
        "pipeline_imbalance": 1 / imb,
        "bubble": 1 / (1 + b),
        "exposed_comm": 1 / comm,
    }


def compare_predictions(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Split the predicted throughput gap (a − b, TFLOP/s/GPU) into causes, exactly.

    achieved is a product of factors (peak, kernel efficiency, 1/(HFU/MFU), 1/imbalance, 1/(1+bubble),
    1/comm); each cause gets ``gap × Δln(factor) / Δln(achieved)``, which sums to the gap and
    does not depend on an order of application. When both runs report a throughput, the
    difference between the reported gap and the predicted one is listed as ``unexplained``.
    """
    if a["convention"] != b["convention"]:
        raise ValueError(f"predictions in different FLOPs conventions: {a['convention']} vs {b['convention']}")
    fa, fb = _factors(a), _factors(b)
    ya, yb = a["tflops_per_gpu"], b["tflops_per_gpu"]
    gap = ya - yb
    total = math.log(ya / yb) if ya > 0 and yb > 0 else 0.0
    shares = {}
    for k in fa:
        d = math.log(fa[k] / fb[k])
        shares[k] = gap * d / total if abs(total) > 1e-15 else 0.0
    # Force exact closure against floating-point residue: the largest share absorbs it.
    if shares:
        big = max(shares, key=lambda k: abs(shares[k]))
        shares[big] += gap - sum(shares.values())
    out = {
        "a": a["name"], "b": b["name"], "convention": a["convention"],
        "global_batch_a": a["layout"]["global_batch"], "global_batch_b": b["layout"]["global_batch"],
        "predicted_a": ya, "predicted_b": yb, "predicted_gap": gap,
        "causes": dict(sorted(shares.items(), key=lambda kv: -abs(kv[1]))),
        "factors_a": fa, "factors_b": fb,
    }
    ra = (a.get("reported") or {}).get("tflops_per_gpu_in_convention")
    rb = (b.get("reported") or {}).get("tflops_per_gpu_in_convention")
    if ra is not None and rb is not None:
        out["reported_a"], out["reported_b"] = ra, rb
        out["reported_gap"] = ra - rb
        out["unexplained"] = (ra - rb) - gap
    return out
