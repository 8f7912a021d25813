"""NeMo (1.x, Hydra/OmegaConf YAML) training configurations -> a run configuration.

Public surface: :func:`is_nemo_yaml` (does a text look like one), :func:`read_nemo` (text ->
unvalidated :class:`~traceanalyzer.model.config.RunConfig`).

Only what the model needs is read: the scalars under ``trainer:`` (``devices``, ``num_nodes``,
``precision``) and under ``model:`` (sizes, parallelism, batch, activation checkpointing, FP8,
MoE), two levels deep. A small reader of that YAML subset (``key: value`` by indentation,
comments, quotes, ``${...}`` interpolations between those keys) rather than a YAML dependency;
lists, block scalars and deeper tables are skipped. An interpolation that points elsewhere
(``${oc.env:...}``, ``???``) is unresolved: an error naming the key and its line if a computation
needs it, unless ``--config`` gives it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import (
    BatchConfig, HardwareConfig, ModelConfig, ParallelConfig, RecomputeConfig, RunConfig,
)

_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.-]*)\s*:(?:\s+(.*?))?\s*$")
_INTERP = re.compile(r"^\$\{(\.?[\w.]+)\}$")
_INT = re.compile(r"^[+-]?\d+$")

# model.<key> -> (RunConfig field, kind)
_MODEL = {
    "num_layers": ("model.layers", "int"), "hidden_size": ("model.hidden", "int"),
    "ffn_hidden_size": ("model.ffn", "int"), "num_attention_heads": ("model.heads", "int"),
    "num_query_groups": ("model.kv_heads", "int"), "kv_channels": ("model.head_dim", "int"),
    "encoder_seq_length": ("model.seq_length", "int"), "seq_length": ("model.seq_length", "int"),
    "num_moe_experts": ("model.experts", "int"), "moe_router_topk": ("model.top_k", "int"),
    "global_batch_size": ("batch.global_batch", "int"), "micro_batch_size": ("batch.micro_batch", "int"),
    "tensor_model_parallel_size": ("parallel.tp", "int"), "pipeline_model_parallel_size": ("parallel.pp", "int"),
    "virtual_pipeline_model_parallel_size": ("parallel.vp", "int"), "context_parallel_size": ("parallel.cp", "int"),
    "expert_model_parallel_size": ("parallel.ep", "int"), "sequence_parallel": ("parallel.sequence_parallel", "bool"),
    "activations_checkpoint_granularity": ("recompute.granularity", "str"),
    "activations_checkpoint_method": ("recompute.method", "str"),
    "activations_checkpoint_num_layers": ("recompute.num_layers", "int"),
    "activation": ("model.activation", "str"), "fp8": ("hardware.precision", "bool"),
}
_TRAINER = {"devices": ("hardware.num_gpus", "int"), "num_nodes": ("hardware.num_gpus", "int"),
            "precision": ("hardware.precision", "str")}


def is_nemo_yaml(text: str) -> bool:
    return bool(re.search(r"(?m)^model:\s*(#.*)?$", text)) and bool(re.search(r"(?m)^trainer:\s*(#.*)?$", text))


def _scalar(raw: str) -> str:
    v = raw
    if v[:1] in "'\"":
        q = v[0]
        end = v.find(q, 1)
        return v[1:end] if end > 0 else v[1:]
    return re.split(r"\s+#", v, maxsplit=1)[0].strip()


def _flat(text: str) -> dict[str, tuple[str, int]]:
    """``section.key`` -> (raw scalar, line) for the top two levels of a YAML mapping."""
    out: dict[str, tuple[str, int]] = {}
    stack: list[tuple[int, str]] = []
    skip_deeper: int | None = None
    for n, ln in enumerate(text.splitlines(), 1):
        if not ln.strip() or ln.lstrip().startswith("#"):
            continue
        indent = len(ln) - len(ln.lstrip(" "))
        if skip_deeper is not None and indent > skip_deeper:
            continue  # inside a block scalar or a list under a key
        skip_deeper = None
        m = _KEY.match(ln)
        if not m:
            continue  # list items, flow continuations
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key, raw = m.group(2), (m.group(3) or "")
        raw = "" if raw.startswith("#") else raw
        path = ".".join([k for _, k in stack] + [key])
        if not raw:
            stack.append((indent, key))
            continue
        if raw[:1] in "|>":
            skip_deeper = indent
            continue
        if len(stack) <= 1:
            out[path] = (_scalar(raw), n)
    return out


def _resolve(flat: dict[str, tuple[str, int]], path: str, seen: int = 0) -> str | None:
    """The value of ``path`` with ``${model.x}`` / ``${.x}`` interpolations followed; None if it
    points outside (``${oc.env:...}``, missing keys) or is ``???``."""
    if path not in flat or seen > 10:
        return None
    v, _ = flat[path]
    m = _INTERP.match(v)
    if m:
        ref = m.group(1)
        if ref.startswith("."):
            ref = path.rsplit(".", 1)[0] + ref
        return _resolve(flat, ref, seen + 1)
    if v == "???" or v.startswith("${"):
        return None
    return v


def read_nemo(text: str, source: str = "NeMo configuration") -> RunConfig:
    flat = _flat(text)
    values: dict[str, Any] = {}
    unresolved: dict[str, str] = {}

    def take(section: str, table: dict[str, tuple[str, str]]) -> None:
        for key, (target, kind) in table.items():
            path = f"{section}.{key}"
            if path not in flat:
                continue
            raw, line = flat[path]
            v = _resolve(flat, path)
            where = f"{source}: {path} (line {line})"
            if v is None:
                unresolved[target] = f"{where} is {raw!r}, set outside the file: give the value in --config ({target})"
                continue
            if v in ("null", "~", "None"):
                continue
            if kind == "int":
                if not _INT.match(v):
                    raise ConfigError(f"{where} = {v!r} is not a whole number")
                values[path] = int(v)
            elif kind == "bool":
                if v not in ("True", "true", "False", "false"):
                    raise ConfigError(f"{where} = {v!r} must be true or false")
                values[path] = v in ("True", "true")
            else:
                values[path] = v

    take("model", _MODEL)
    take("trainer", _TRAINER)
    g = values.get
    if not any(k in values for k in ("model.num_layers", "model.hidden_size")):
        raise ConfigError(f"{source}: no model sizes found under model: (num_layers, hidden_size)")
    prec = str(g("trainer.precision", "32")).lower()
    precision = ("fp8" if g("model.fp8") else "bf16" if "bf16" in prec else "fp16" if prec in ("16", "16-mixed", "fp16")
                 else "fp32")
    act = str(g("model.activation", "gelu")).lower()
    gran = g("model.activations_checkpoint_granularity") or "none"
    num_gpus = None
    if "trainer.devices" in values:
        num_gpus = values["trainer.devices"] * values.get("trainer.num_nodes", 1)
    warnings: list[str] = []
    if act not in ("gelu", "swiglu", "fast-swiglu", "geglu", "fast-geglu"):
        warnings.append(f"{source}: model.activation = {act!r} is counted as a 2-matrix MLP (GeLU)")
    model = ModelConfig(layers=g("model.num_layers"), hidden=g("model.hidden_size"), ffn=g("model.ffn_hidden_size"),
                        heads=g("model.num_attention_heads"), kv_heads=g("model.num_query_groups"),
                        head_dim=g("model.kv_channels"), seq_length=g("model.encoder_seq_length", g("model.seq_length")),
                        activation="swiglu" if "glu" in act else "gelu", experts=g("model.num_moe_experts") or 0,
                        top_k=g("model.moe_router_topk", 2 if g("model.num_moe_experts") else 1))
    cfg = RunConfig(
        name=Path(source).stem if source else "", convention="megatron", model=model,
        batch=BatchConfig(global_batch=g("model.global_batch_size"), micro_batch=g("model.micro_batch_size", 1)),
        parallel=ParallelConfig(tp=g("model.tensor_model_parallel_size", 1), pp=g("model.pipeline_model_parallel_size", 1),
                                vp=g("model.virtual_pipeline_model_parallel_size") or 1,
                                cp=g("model.context_parallel_size", 1), ep=g("model.expert_model_parallel_size", 1),
                                sequence_parallel=bool(g("model.sequence_parallel", False))),
        recompute=RecomputeConfig(granularity=str(gran).lower(), method=str(g("model.activations_checkpoint_method") or "uniform"),
                                  num_layers=g("model.activations_checkpoint_num_layers")),
        hardware=HardwareConfig(num_gpus=num_gpus, precision=precision),
        source=source, warnings=tuple(warnings), unresolved=tuple(sorted(unresolved.items())),
    )
    return cfg
