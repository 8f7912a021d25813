"""The roofline of one GPU: what a kernel of known FLOPs and bytes could reach at best.

Public surface: :func:`precision_of` (a kernel name -> the precision it names, or None),
:func:`precision_of_type` (a recorded input element type -> its precision),
:data:`ELEMENT_BYTES`, :func:`device_roof` (a device name as written in a trace -> its dense
peak TFLOP/s per precision and HBM GB/s from :mod:`traceanalyzer.model.hardware`) and
:func:`with_roofline` (columns ``flops``, ``bytes``, ``time_ns``, ``precision`` -> achieved
TFLOP/s and GB/s, and the fraction of the roofline reached).

Roofline (Williams, Waterman, Patterson, CACM 2009): the attainable rate of a kernel with
arithmetic intensity ``I = FLOPs / bytes`` is ``min(peak, I × memory bandwidth)``; the fraction
reached is achieved / attainable (1.0: on the roof). Peaks are dense tensor-core figures.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.hardware import GPUS, detect_gpu

#: bytes per element of each precision
ELEMENT_BYTES = {"fp8": 1, "bf16": 2, "fp16": 2, "tf32": 4, "fp32": 4}

#: kernel-name fragments that name a precision (first match wins; CUTLASS / cuBLAS / hipBLASLt
#: names: ``..._bf16bf16_...``, ``s16816gemm_fp16``, ``ampere_sgemm_...`` = fp32, ``e4m3``)
_PRECISION = [
    (r"(?i)e4m3|e5m2|fp8|f8f8", "fp8"),
    (r"(?i)bf16|bfloat16", "bf16"),
    (r"(?i)fp16|f16f16|half|h884|h1688|h16816|_hgemm|hmma", "fp16"),
    (r"(?i)tf32|xf32", "tf32"),
    (r"(?i)_sgemm|sgemm_|fp32|f32f32", "fp32"),
]


def precision_of(name: pl.Expr) -> pl.Expr:
    """The precision a kernel name states (``bf16``, ``fp16``, ``fp8``, ``tf32``, ``fp32``), else null."""
    out = pl.lit(None, pl.String)
    for pattern, prec in reversed(_PRECISION):
        out = pl.when(name.str.contains(pattern)).then(pl.lit(prec)).otherwise(out)
    return out


#: Kineto ``Input type`` element types -> precision (``float`` = fp32: whether TF32 ran is in the
#: kernel's name, which takes precedence where it states a precision)
_TYPE_PRECISION = [
    (r"(?i)float8|fp8", "fp8"),
    (r"(?i)bfloat16", "bf16"),
    (r"(?i)^c10::half$|^half$", "fp16"),
    (r"^float$", "fp32"),
]


def precision_of_type(input_type: pl.Expr) -> pl.Expr:
    """The precision of a recorded input element type (``c10::BFloat16`` -> ``bf16``,
    ``c10::Half`` -> ``fp16``, ``float`` -> ``fp32``, ``c10::Float8_e4m3fn`` -> ``fp8``), else null."""
    out = pl.lit(None, pl.String)
    for pattern, prec in reversed(_TYPE_PRECISION):
        out = pl.when(input_type.str.contains(pattern)).then(pl.lit(prec)).otherwise(out)
    return out


def device_roof(device_name: str | None) -> tuple[str | None, dict[str, float], float | None]:
    """(hardware key, dense peak TFLOP/s per precision, HBM GB/s) of a device name; an unknown
    device gives ``(None, {}, None)`` and no roofline."""
    key = detect_gpu(device_name)
    if key is None:
        return None, {}, None
    spec = GPUS[key]
    return key, dict(spec.peak_tflops), float(spec.hbm_gbps)


def with_roofline(frame: pl.DataFrame, peaks: dict[str, float], hbm_gbps: float | None) -> pl.DataFrame:
    """``frame`` (columns ``flops``, ``bytes``, ``time_ns`` of the calls with known FLOPs, and
    ``precision``) with ``tflops`` (achieved TFLOP/s), ``gbps`` (achieved GB/s),
    ``peak_tflops`` (the device's dense peak at that precision), ``roofline_pct`` (achieved over
    the attainable rate, in percent). Null where an input is missing."""
    prec = pl.col("precision")
    peak = pl.lit(None, pl.Float64)
    for p, v in peaks.items():
        peak = pl.when(prec == p).then(pl.lit(v)).otherwise(peak)
    t = pl.col("time_ns").cast(pl.Float64)
    tflops = pl.when(t > 0).then(pl.col("flops") / t / 1e3)  # FLOP/ns = GFLOP/s; / 1e3 -> TFLOP/s
    gbps = pl.when(t > 0).then(pl.col("bytes") / t)  # B/ns = GB/s
    if hbm_gbps is None:
        attainable = peak
    else:
        intensity = pl.col("flops") / pl.col("bytes")  # FLOP/B
        attainable = pl.when(peak.is_not_null()).then(pl.min_horizontal(peak, intensity * hbm_gbps / 1e3))  # no bytes: the peak
    peak = pl.when(pl.col("flops").is_not_null()).then(peak)  # a peak only beside a known FLOPs count
    return frame.with_columns(tflops.alias("tflops"), gbps.alias("gbps"), peak.alias("peak_tflops")).with_columns(
        (100 * pl.col("tflops") / attainable).alias("roofline_pct")
    )
