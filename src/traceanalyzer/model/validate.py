"""One validation layer for every run configuration, whatever its source (TOML, Megatron
arguments, a training log, command-line options).

Public surface: :func:`check` (RunConfig -> the warnings it deserves; raises
:class:`~traceanalyzer.errors.ConfigError` on the first bad value), :func:`check_positive`
(command-line numbers), :data:`LIMITS`.

A bad value is an error naming the key, the value and what is allowed: wrong type (a string
where a number belongs, a float or a boolean where a whole number belongs), out of range (zero,
negative, not finite, beyond the :data:`LIMITS` that no real run reaches), inconsistent
(heads/KV heads, layers/(PP·VP), DP/EP, sequence/CP, GPUs = TP·PP·CP·DP, global batch /
(DP·micro batch)), implausible (a reported throughput above the GPU's dense peak). A suspicious
value is a warning. Every check is arithmetic on a few numbers: rejecting takes microseconds.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

from traceanalyzer.errors import ConfigError

#: Largest value accepted per integer key (a bound no real run reaches; guards the arithmetic).
LIMITS: dict[str, int] = {
    "layers": 100_000, "hidden": 1 << 22, "ffn": 1 << 24, "heads": 1 << 16, "kv_heads": 1 << 16,
    "head_dim": 1 << 16, "vocab": 1 << 27, "seq_length": 1 << 27, "experts": 1 << 16, "top_k": 1 << 16,
    "moe_ffn": 1 << 24, "moe_layer_freq": 100_000, "global_batch": 1 << 32, "micro_batch": 1 << 24,
    "tp": 1 << 20, "pp": 1 << 20, "dp": 1 << 24, "cp": 1 << 20, "ep": 1 << 20, "vp": 1 << 16,
    "num_layers": 100_000, "num_gpus": 1 << 24, "gpus_per_node": 1 << 10, "zero_stage": 3,
}
_FLOAT_LIMITS = {"peak_tflops": 1e6, "intra_node_gbps": 1e6, "inter_node_gbps": 1e6, "tflops_per_gpu": 1e6,
                 "step_time_s": 1e7, "fwd_flops_per_sample": 1e21, "memory_gb": 1e5}
_MIN = {"experts": 0, "zero_stage": 0}
_FLOAT_MIN = {"peak_tflops": 1e-3, "intra_node_gbps": 1e-3, "inter_node_gbps": 1e-3, "tflops_per_gpu": 1e-3,
              "step_time_s": 1e-6, "fwd_flops_per_sample": 1.0, "memory_gb": 1e-3}
_BOOLS = {"sequence_parallel", "distributed_optimizer", "tp_comm_overlap", "overlap_grad_reduce", "overlap_param_gather",
          "untie_embeddings", "flash_attention", "bias", "dropout", "master_weights", "grad_allreduce"}
_CHOICES = {
    "activation": ("gelu", "swiglu"), "granularity": ("none", "selective", "full", "mlp"), "method": ("uniform", "block"),
    "precision": ("bf16", "fp16", "fp8", "tf32", "fp32"), "grad_reduce_dtype": ("fp32", "bf16"),
    "position_embedding": ("rope", "learned", "none"), "norm": ("layernorm", "rmsnorm"),
    "recipe": ("megatron-mixed", "pure-bf16", "amp-fp32-master", "fsdp2-mixed"),
    "param_dtype": ("fp32", "bf16", "fp16", "fp8"), "grad_dtype": ("fp32", "bf16", "fp16"),
    "optimizer_state_dtype": ("fp32", "bf16", "fp16"), "optimizer": ("adamw", "adam", "sgd", "adafactor"),
}


def _where(cfg) -> str:
    return f" in {cfg.source}" if cfg.source else ""


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else str(v)


def _check_int(key: str, label: str, v: Any, where: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        kind = "a boolean" if isinstance(v, bool) else "a string" if isinstance(v, str) else \
            "a fraction" if isinstance(v, float) else type(v).__name__
        raise ConfigError(f"{label} = {_show(v)}{where} is {kind}: it must be a whole number")
    lo = _MIN.get(key, 1)
    if v < lo:
        raise ConfigError(f"{label} = {v}{where} must be at least {lo}")
    if v > LIMITS[key]:
        raise ConfigError(f"{label} = {v}{where} is beyond any real run (at most {LIMITS[key]})")


def _check_float(key: str, label: str, v: Any, where: str) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        kind = "a boolean" if isinstance(v, bool) else "a string" if isinstance(v, str) else type(v).__name__
        raise ConfigError(f"{label} = {_show(v)}{where} is {kind}: it must be a positive number")
    if not math.isfinite(v):
        raise ConfigError(f"{label} = {v}{where} must be a finite positive number")
    if v <= 0:
        raise ConfigError(f"{label} = {v}{where} must be positive")
    if v < _FLOAT_MIN[key]:
        raise ConfigError(f"{label} = {v}{where} is below any real run (at least {_FLOAT_MIN[key]:g})")
    if v > _FLOAT_LIMITS[key]:
        raise ConfigError(f"{label} = {v}{where} is beyond any real run (at most {_FLOAT_LIMITS[key]:g})")


def check_positive(option: str, v: float | None) -> None:
    """A quantity that must be finite and positive (``option``: its name, e.g. ``"`bus_bw_gbps`"``)."""
    if v is None:
        return
    if not math.isfinite(v) or v <= 0:
        raise ConfigError(f"{option} = {v} must be a finite positive number")


def check(cfg) -> list[str]:
    """Validate ``cfg`` (a RunConfig); return warnings; raise ConfigError on a bad value."""
    from traceanalyzer.model.conventions import CONVENTIONS  # noqa: PLC0415
    from traceanalyzer.model.hardware import GPUS, detect_gpu  # noqa: PLC0415

    where = _where(cfg)
    warnings: list[str] = []
    if not isinstance(cfg.name, str):
        raise ConfigError(f"name = {_show(cfg.name)}{where} must be a string")
    for label, v in (("convention", cfg.convention), ("[reported] convention", cfg.reported.convention)):
        if v is None and label != "convention":
            continue
        if not isinstance(v, str) or v not in CONVENTIONS:
            raise ConfigError(f"{label} = {_show(v)}{where} is not one of {', '.join(CONVENTIONS)}")
    for section in ("model", "batch", "parallel", "recompute", "hardware", "reported", "training"):
        obj = getattr(cfg, section)
        for f in fields(obj):
            v = getattr(obj, f.name)
            if v is None:
                continue
            label = f"[{section}] {f.name}"
            if f.name in LIMITS:
                _check_int(f.name, label, v, where)
            elif f.name in _FLOAT_LIMITS:
                _check_float(f.name, label, v, where)
            elif f.name in _BOOLS:
                if not isinstance(v, bool):
                    raise ConfigError(f"{label} = {_show(v)}{where} must be true or false (a TOML boolean, unquoted)")
            elif f.name in _CHOICES:
                if not isinstance(v, str) or v not in _CHOICES[f.name]:
                    raise ConfigError(f"{label} = {_show(v)}{where} must be one of {', '.join(_CHOICES[f.name])}")
            elif f.name == "gpu":
                if not isinstance(v, str):
                    raise ConfigError(f"{label} = {_show(v)}{where} must be a GPU name (a string), e.g. \"H100 SXM\"")
                if detect_gpu(v) is None and cfg.hardware.peak_tflops is None:
                    raise ConfigError(f"{label} = {v!r}{where} is not a GPU in the table ("
                                      + ", ".join(g.name for g in GPUS.values()) + "): give [hardware] peak_tflops")
            elif f.name == "convention":
                pass
    m, b, p, r, hw = cfg.model, cfg.batch, cfg.parallel, cfg.recompute, cfg.hardware
    # ---------------------------------------------------------------- divisibility / consistency
    if m.hidden is not None and m.heads is not None and m.head_dim is None and m.hidden % m.heads:
        raise ConfigError(f"[model] hidden = {m.hidden}{where} is not a multiple of heads = {m.heads}; give head_dim")
    if m.heads is not None and m.kv_heads is not None:
        if m.kv_heads > m.heads or m.heads % m.kv_heads:
            raise ConfigError(f"[model] kv_heads = {m.kv_heads}{where} must divide heads = {m.heads} "
                              "(each KV head serves a whole group of query heads)")
    if m.heads is not None and m.heads % p.tp:
        raise ConfigError(f"[parallel] tp = {p.tp}{where} must divide [model] heads = {m.heads} "
                          "(tensor parallelism splits the heads)")
    if m.kv_heads is not None and m.kv_heads % p.tp and p.tp % m.kv_heads:
        raise ConfigError(f"[parallel] tp = {p.tp}{where} and [model] kv_heads = {m.kv_heads}: one must divide the other")
    if m.layers is not None and m.fwd_flops_per_sample is None:
        if m.layers < p.pp * p.vp:
            raise ConfigError(f"[model] layers = {m.layers}{where} is fewer than pp·vp = {p.pp}·{p.vp} = {p.pp * p.vp}"
                              " pipeline (virtual) stages: every stage needs at least one layer")
        if m.layers % (p.pp * p.vp):
            warnings.append(f"[model] layers = {m.layers}{where} is not a multiple of pp·vp = {p.pp * p.vp}: the stages are "
                            "uneven (Megatron needs --decoder-first/last-pipeline-num-layers, DeepSpeed partitions by "
                            "parameters); the model assumes the mean stage")
    if m.seq_length is not None and m.seq_length % p.cp:
        raise ConfigError(f"[model] seq_length = {m.seq_length}{where} is not a multiple of cp = {p.cp}")
    if m.experts and m.top_k > m.experts:
        raise ConfigError(f"[model] top_k = {m.top_k} exceeds experts = {m.experts}{where}")
    if p.ep > 1:
        if not m.experts:
            raise ConfigError(f"[parallel] ep = {p.ep}{where} needs a mixture-of-experts model ([model] experts)")
        if m.experts % p.ep:
            raise ConfigError(f"[parallel] ep = {p.ep}{where} must divide [model] experts = {m.experts}")
    if p.dp is not None and hw.num_gpus is not None and p.tp * p.pp * p.cp * p.dp != hw.num_gpus:
        raise ConfigError(f"[parallel] tp·pp·cp·dp = {p.tp}·{p.pp}·{p.cp}·{p.dp} = {p.tp * p.pp * p.cp * p.dp}"
                          f" but [hardware] num_gpus = {hw.num_gpus}{where}")
    if p.dp is None and hw.num_gpus is not None and hw.num_gpus % (p.tp * p.pp * p.cp):
        raise ConfigError(f"[hardware] num_gpus = {hw.num_gpus}{where} is not a multiple of tp·pp·cp = "
                          f"{p.tp}·{p.pp}·{p.cp} = {p.tp * p.pp * p.cp}")
    dp = cfg.dp
    if p.ep > 1 and dp is not None and dp % p.ep:
        raise ConfigError(f"[parallel] ep = {p.ep}{where} must divide the data-parallel size {dp} "
                          "(experts are spread over data-parallel ranks)")
    if b.global_batch is not None and dp is not None and b.global_batch % (dp * b.micro_batch):
        raise ConfigError(f"[batch] global_batch = {b.global_batch}{where} is not a multiple of dp·micro_batch = "
                          f"{dp}·{b.micro_batch}: the number of microbatches per pipeline must be whole")
    if r.granularity == "full" and r.method == "block" and r.num_layers is not None and m.layers is not None \
            and r.num_layers > m.layers // (p.pp * p.vp):
        raise ConfigError(f"[recompute] num_layers = {r.num_layers}{where} exceeds the layers of one pipeline stage "
                          f"({m.layers}/(pp·vp) = {m.layers // (p.pp * p.vp)})")
    if p.zero_stage == 0 and p.distributed_optimizer:
        raise ConfigError(f"[parallel] zero_stage = 0{where} contradicts distributed_optimizer = true "
                          "(the distributed optimizer shards the optimizer states: ZeRO stage 1)")
    # ---------------------------------------------------------------- plausibility
    if p.sequence_parallel and p.tp == 1:
        warnings.append(f"[parallel] sequence_parallel{where} has no effect with tp = 1 (Megatron turns it off)")
    rep = cfg.reported.tflops_per_gpu
    if rep is not None:
        key = detect_gpu(hw.gpu) if isinstance(hw.gpu, str) else None
        peak = hw.peak_tflops
        if peak is None and key is not None:
            table = GPUS[key].peak_tflops
            peak = table.get(hw.precision) or max(table.values())
        if peak is not None:
            if rep > peak:
                raise ConfigError(f"[reported] tflops_per_gpu = {rep}{where} exceeds the GPU's dense {hw.precision} peak "
                                  f"of {peak:g} TFLOP/s: no run can (a sparse peak? another GPU?)")
            if rep > 0.8 * peak:
                warnings.append(f"[reported] tflops_per_gpu = {rep}{where} is {rep / peak:.0%} of the dense peak "
                                f"({peak:g}): above any published large-scale run — check it")
    return warnings
