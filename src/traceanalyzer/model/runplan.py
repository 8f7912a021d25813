"""Plan a training run: total FLOPs, GPU-hours, wall-clock days, energy and cost, with margins.

Public surface: :func:`plan_run` (-> dict), :func:`parse_count` (``"15T"`` -> 1.5e13),
:func:`parse_range` (``"38-43%"`` -> (0.38, 0.43)), :func:`measure_trace` (throughput and
step-time spread of a trace), :func:`count_params`, :data:`DEFAULT_MARGINS` and
:data:`PLAN_CONVENTIONS`.

Arithmetic (every figure carries a low / expected / high value):

* total FLOPs = FLOPs per token × tokens. ``6nt``: 6 × parameters × tokens (Kaplan et al. 2020;
  the Llama 3 paper's 3.8e25 for 405B × 15.6T). ``megatron`` / ``megatron2024`` / ``palm``: the
  per-token FLOPs of :func:`traceanalyzer.model.step_flops` for the run configuration (attention
  included); ``flops="hardware"`` adds what activation recompute executes again;
* GPU-seconds = total FLOPs / sustained FLOP/s per GPU (same convention as the FLOPs), then
  × (1 + margin) for each margin; wall-clock = GPU-hours / GPUs; energy = GPU-hours × board
  power × PUE (default PUE 1.0: the GPUs only, no host, network or cooling); cost = GPU-hours ×
  price.

Margins are fractions added to the time. Where a trace is given, they are **measured**: its step
time already holds framework overhead, data loading and host-bound idle (margin 0, measured),
and the spread of step times across its steps gives the jitter margin (mean / median − 1 as
low, p90 / median − 1 as high). The mean step times of runs in the batch store (one per night)
give the same two numbers across nights, and then set the jitter margin. Otherwise they are **assumed** (and the plan says so):
framework overhead 10–15 %, network jitter 5–10 %, data loading 0–5 %, interruptions
(failures, restarts, checkpoint writes) 0–11 % — the Llama 3 paper reports "higher than 90%
effective training time" on 16k H100s.
"""

from __future__ import annotations

import math
import re
from typing import Any

import polars as pl

from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import CONVENTIONS, RunConfig
from traceanalyzer.model.flops import step_flops
from traceanalyzer.model.hardware import GPUS, detect_gpu, peak_tflops

PLAN_CONVENTIONS = ("6nt", *CONVENTIONS)

#: name -> (low, high, why); fractions of the ideal time
DEFAULT_MARGINS: dict[str, tuple[float, float, str]] = {
    "framework": (0.10, 0.15, "assumed: framework overhead (optimizer, launches, host work) 10–15 %"),
    "jitter": (0.05, 0.10, "assumed: network jitter and step-time spread 5–10 %"),
    "data": (0.0, 0.05, "assumed: data loading 0–5 %"),
    "interruptions": (0.0, 0.11, "assumed: failures, restarts, checkpoints 0–11 % (Llama 3: >90 % effective training time)"),
}

_UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def parse_count(text: str | float | int, what: str = "`tokens`") -> float:
    """``"15T"``, ``"1.4e12"``, ``"300B"``, ``"2_000_000"`` -> float; ConfigError (exit 7) otherwise."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text).strip().replace("_", "").replace(",", "")
        m = re.fullmatch(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)", s)
        if not m:
            raise ConfigError(f"{what} {text!r}: not a number (e.g. 15T, 1.5e13, 300B)")
        unit = m.group(2).upper()
        if unit not in _UNITS:
            raise ConfigError(f"{what} {text!r}: unknown unit {m.group(2)!r} (use K, M, B or G, T, P)")
        value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{what} {text!r}: must be a positive number")
    return value


def parse_range(text: str | float | tuple | None, what: str, percent_ok: bool = False,
                allow_zero: bool = False) -> tuple[float, float] | None:
    """``"145-155"`` / ``"38-43%"`` / ``"40%"`` / ``150`` / ``(a, b)`` -> (low, high); None passes through."""
    if text is None:
        return None
    if isinstance(text, tuple):
        lo, hi = float(text[0]), float(text[1])
    elif isinstance(text, (int, float)):
        lo = hi = float(text)
    else:
        s = str(text).strip()
        pct = s.endswith("%")
        if pct and not percent_ok:
            raise ConfigError(f"{what} {text!r}: a percentage is not allowed here")
        s = s.rstrip("%").strip()
        m = re.fullmatch(r"(\d+\.?\d*|\.\d+)(?:\s*(?:-|–|\.\.)\s*(\d+\.?\d*|\.\d+))?", s)
        if not m:
            raise ConfigError(f"{what} {text!r}: expected a number or a range such as 145-155" + (" or 38-43%" if percent_ok else ""))
        lo = float(m.group(1))
        hi = float(m.group(2)) if m.group(2) else lo
        if pct:
            lo, hi = lo / 100, hi / 100
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < 0 or (lo == 0 and not allow_zero) or hi < lo:
        raise ConfigError(f"{what} {text!r}: must be {'zero or more' if allow_zero else 'positive'}, low ≤ high")
    return lo, hi


def count_params(cfg: RunConfig) -> float:
    """Parameters a token's matmuls go through: transformer layers (activated experts only) +
    the output projection (the PaLM count; a tied input embedding is not counted twice)."""
    m = cfg.model
    need = cfg.need
    what = "the parameter count (or give `params`)"
    L, h = need(m.layers, "[model] layers", what), need(m.hidden, "[model] hidden", what)
    need(m.heads, "[model] heads", what)
    V = need(m.vocab, "[model] vocab", what)
    d, n_h, n_kv = cfg.head_dim, m.heads, cfg.kv_heads
    E = 3 if m.swiglu else 2
    attn = h * (d * n_h + 2 * d * n_kv) + d * n_h * h
    if m.experts:
        n_moe = sum(1 for i in range(L) if i % m.moe_layer_freq == 0)
        f_moe = m.moe_ffn if m.moe_ffn is not None else cfg.ffn
        mlp = E * h * cfg.ffn * (L - n_moe) + E * h * f_moe * m.top_k * n_moe
    else:
        mlp = E * h * cfg.ffn * L
    return float(attn * L + mlp + h * V)


def measure_trace(steps: pl.DataFrame) -> dict[str, Any]:
    """Step-time statistics of a breakdown (``Analysis.steps``): a step lasts as long as its
    slowest rank. Returns count, median / mean / p90 / min / max seconds, host-bound idle share."""
    per = steps.group_by("step").agg(
        pl.col("duration_ns").max().alias("d"),
        (pl.col("idle_host_bound_ns").sum() / pl.col("duration_ns").sum()).alias("host") if "idle_host_bound_ns" in steps.columns else pl.lit(None).alias("host"),
    )
    d = per["d"].cast(pl.Float64) / 1e9
    host = steps.select(pl.col("idle_host_bound_ns").sum() / pl.col("duration_ns").sum()).item() if "idle_host_bound_ns" in steps.columns else None
    return {
        "steps": per.height, "median_s": d.median(), "mean_s": d.mean(), "p90_s": d.quantile(0.9, "linear"),
        "min_s": d.min(), "max_s": d.max(), "host_bound_idle_share": host,
    }


def trace_measurement(cfg: RunConfig, steps: pl.DataFrame, convention: str = "6nt", flops: str = "model",
                      params: float | str | None = None) -> dict[str, Any]:
    """:func:`measure_trace` plus the FLOPs of one step of the traced run (from ``cfg``: global
    batch, sequence length, model) and its GPU count, as :func:`plan_run` wants them."""
    m = measure_trace(steps)
    what = "the FLOPs of one traced step"
    if convention == "6nt":
        N = parse_count(params, "`params`") if params is not None else count_params(cfg)
        B = cfg.need(cfg.batch.global_batch, "[batch] global_batch", what)
        s = cfg.need(cfg.model.seq_length, "[model] seq_length", what)
        m["flops_per_step"] = 6.0 * N * B * s
    else:
        sf = step_flops(cfg, convention)
        m["flops_per_step"] = sf.hardware if flops == "hardware" else sf.model
    m["num_gpus"] = cfg.need(cfg.num_gpus, "[hardware] num_gpus (or [parallel] dp)", "the throughput per GPU of the traced run")
    return m


def _tri(lo: float, hi: float) -> dict[str, float]:
    return {"low": lo, "expected": (lo + hi) / 2, "high": hi}


def plan_run(
    tokens: float | str,
    cfg: RunConfig | None = None,
    *,
    params: float | str | None = None,
    gpus: int | None = None,
    convention: str = "6nt",
    flops: str = "model",
    tflops: float | str | tuple | None = None,
    mfu: float | str | tuple | None = None,
    gpu: str | None = None,
    precision: str | None = None,
    measured: dict[str, Any] | None = None,
    price_per_gpu_hour: float | None = None,
    gpu_power_w: float | None = None,
    pue: float = 1.0,
    margins: dict[str, tuple[float, float] | float | str] | None = None,
    run_step_times: list[float] | None = None,
) -> dict[str, Any]:
    """Time and cost of training on ``tokens`` tokens (see the module doc).

    Throughput, one of: ``tflops`` (sustained TFLOP/s per GPU under ``convention``, a number or
    a ``"low-high"`` range), ``mfu`` (fraction or ``"38-43%"`` of the GPU's dense peak),
    ``measured`` (from :func:`measure_trace` plus ``flops_per_step`` and ``num_gpus`` of the
    traced run). ``margins`` overrides :data:`DEFAULT_MARGINS` by name (a fraction or a range).
    """
    if not (math.isfinite(pue) and pue >= 1.0):
        raise ConfigError(f"`pue` {pue}: power usage effectiveness is 1.0 or more")
    if gpu_power_w is not None and not (math.isfinite(gpu_power_w) and gpu_power_w > 0):
        raise ConfigError(f"`gpu_power_w` {gpu_power_w}: must be positive")
    if price_per_gpu_hour is not None and not (math.isfinite(price_per_gpu_hour) and price_per_gpu_hour >= 0):
        raise ConfigError(f"`price_per_gpu_hour` {price_per_gpu_hour}: must be zero or more")
    if convention not in PLAN_CONVENTIONS:
        raise ConfigError(f"convention {convention!r}: one of {', '.join(PLAN_CONVENTIONS)}")
    if flops not in ("model", "hardware"):
        raise ConfigError(f"flops {flops!r}: model or hardware")
    T = parse_count(tokens, "`tokens`")
    notes: list[str] = []
    # ---- FLOPs per token
    if convention == "6nt":
        if params is not None:
            N = parse_count(params, "`params`")
            n_src = "given"
        elif cfg is not None:
            N = count_params(cfg)
            n_src = "from the run configuration (layer matmuls + output projection)"
        else:
            raise ConfigError("the 6·N·T convention needs the parameter count: give `params` or a run configuration")
        if flops == "hardware":
            raise ConfigError("flops=hardware needs a layer-level convention (megatron, megatron2024, palm), not 6nt")
        per_token = 6.0 * N
        conv_note = "6·N·T (N = parameters, T = tokens)"
    else:
        if cfg is None:
            raise ConfigError(f"the {convention} convention needs a run configuration (-c run.toml)")
        sf = step_flops(cfg, convention, global_batch=1)
        per_token = (sf.hardware if flops == "hardware" else sf.model) / sf.tokens
        N = float(params) if params is not None else count_params(cfg)
        n_src = "given" if params is not None else "from the run configuration"
        conv_note = f"{convention} per-token FLOPs ({flops} FLOPs{', recompute included' if flops == 'hardware' else ''})"
    total = per_token * T
    # ---- GPUs
    n_gpus = gpus if gpus is not None else (cfg.num_gpus if cfg is not None else None)
    if n_gpus is not None and n_gpus <= 0:
        raise ConfigError(f"`n_gpus` {n_gpus}: must be positive")
    # ---- throughput per GPU (TFLOP/s, same convention)
    given = [x is not None for x in (tflops, mfu, measured)]
    if sum(given) != 1:
        raise ConfigError("give exactly one throughput: `tflops`, `mfu` or `trace`")
    gpu_name = gpu or (cfg.hardware.gpu if cfg is not None else None)
    prec = precision or (cfg.hardware.precision if cfg is not None else "bf16")
    margin_spec = {k: (lo, hi, why) for k, (lo, hi, why) in DEFAULT_MARGINS.items()}
    if tflops is not None:
        lo, hi = parse_range(tflops, "`tflops`")
        thr_src = "given"
    elif mfu is not None:
        m_lo, m_hi = parse_range(mfu, "`mfu`", percent_ok=True)
        if m_hi > 1:
            raise ConfigError(f"`mfu` {mfu!r}: a fraction of the peak (≤ 1, or a percentage)")
        peak = peak_tflops(gpu_name, prec, cfg.hardware.peak_tflops if cfg is not None else None)
        lo, hi = m_lo * peak, m_hi * peak
        thr_src = f"MFU {m_lo:.0%}–{m_hi:.0%} of {peak:g} TFLOP/s dense {prec} peak"
    else:
        fps = measured["flops_per_step"]
        run_gpus = measured["num_gpus"]
        lo = hi = fps / (measured["median_s"] * run_gpus) / 1e12
        thr_src = (f"measured: {fps:.4g} FLOPs per step over the median step time {measured['median_s']:.4g} s "
                   f"({measured['steps']} steps) × {run_gpus} GPUs")
        margin_spec["framework"] = (0.0, 0.0, "measured: in the trace's step time")
        margin_spec["data"] = (0.0, 0.0, "measured: in the trace's step time (host-bound idle share "
                               + ("n/a" if measured.get("host_bound_idle_share") is None else f"{measured['host_bound_idle_share']:.1%}") + ")")
        if measured["steps"] >= 3:
            j_lo = max(0.0, measured["mean_s"] / measured["median_s"] - 1)
            j_hi = max(j_lo, measured["p90_s"] / measured["median_s"] - 1)
            margin_spec["jitter"] = (j_lo, j_hi, f"measured over {measured['steps']} steps: "
                                     f"mean/median − 1 = {j_lo:.1%}, p90/median − 1 = {j_hi:.1%}")
        else:
            notes.append(f"only {measured['steps']} step(s) in the trace: the jitter margin stays assumed")
        if gpus is not None and gpus != run_gpus:
            notes.append(f"the throughput per GPU measured on {run_gpus} GPUs is assumed to hold on {gpus}")
    if run_step_times is not None:
        st = pl.Series([float(x) for x in run_step_times if x is not None and x > 0], dtype=pl.Float64)
        if st.len() >= 3:
            med = st.median()
            j_lo = max(0.0, st.mean() / med - 1)
            j_hi = max(j_lo, st.quantile(0.9, "linear") / med - 1)
            margin_spec["jitter"] = (j_lo, j_hi, f"measured across {st.len()} stored runs (nights): "
                                     f"mean/median − 1 = {j_lo:.1%}, p90/median − 1 = {j_hi:.1%}")
        else:
            notes.append(f"only {st.len()} stored run(s) with a step time: the jitter margin is not taken from the store")
    for k, v in (margins or {}).items():
        if k not in margin_spec:
            raise ConfigError(f"`margins` {k}: one of {', '.join(margin_spec)}")
        r = parse_range(v, f"`margins` {k}", percent_ok=True, allow_zero=True)
        margin_spec[k] = (r[0], r[1], "given")
    m_lo = math.prod(1 + lo_ for lo_, _, _ in margin_spec.values())
    m_hi = math.prod(1 + hi_ for _, hi_, _ in margin_spec.values())
    m_mid = math.prod(1 + (a + b) / 2 for a, b, _ in margin_spec.values())
    thr = _tri(lo, hi)
    # lowest time: highest throughput and lowest margins
    ideal_h = {"low": total / (hi * 1e12) / 3600, "expected": total / (thr["expected"] * 1e12) / 3600, "high": total / (lo * 1e12) / 3600}
    gpu_h = {"low": ideal_h["low"] * m_lo, "expected": ideal_h["expected"] * m_mid, "high": ideal_h["high"] * m_hi}
    out: dict[str, Any] = {
        "tokens": T,
        "params": N,
        "params_source": n_src,
        "convention": convention,
        "convention_note": conv_note,
        "flops": flops,
        "flops_per_token": per_token,
        "total_flops": total,
        "gpu": GPUS[detect_gpu(gpu_name)].name if detect_gpu(gpu_name) else gpu_name,
        "gpus": n_gpus,
        "throughput_tflops_per_gpu": thr,
        "throughput_source": thr_src,
        "margins": {k: {"low": a, "high": b, "source": why} for k, (a, b, why) in margin_spec.items()},
        "margin_factor": {"low": m_lo, "expected": m_mid, "high": m_hi},
        "gpu_hours_ideal": ideal_h,
        "gpu_hours": gpu_h,
        "wall_clock_days": {k: v / n_gpus / 24 for k, v in gpu_h.items()} if n_gpus else None,
        "energy_mwh": {k: v * gpu_power_w * pue / 1e6 for k, v in gpu_h.items()} if gpu_power_w else None,
        "gpu_power_w": gpu_power_w,
        "pue": pue,
        "cost": {k: v * price_per_gpu_hour for k, v in gpu_h.items()} if price_per_gpu_hour is not None else None,
        "price_per_gpu_hour": price_per_gpu_hour,
        "notes": notes,
    }
    if n_gpus is None:
        notes.append("no GPU count (`gpus` or [hardware] num_gpus): wall-clock days left out")
    if gpu_power_w is None:
        notes.append("no `gpu_power_w`: energy left out")
    if price_per_gpu_hour is None:
        notes.append("no `price_per_gpu_hour`: cost left out")
    return out
