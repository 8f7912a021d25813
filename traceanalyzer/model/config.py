"""Run configuration: what the analytic model needs to know about a training run.

Public surface:

* :class:`RunConfig` (with :class:`ModelConfig`, :class:`BatchConfig`, :class:`ParallelConfig`,
  :class:`RecomputeConfig`, :class:`HardwareConfig`, :class:`Reported`) — frozen dataclasses.
* :func:`load_config` — a TOML file, a Megatron-LM argument file / training log, or both
  (the TOML then completes or overrides what the Megatron arguments say).
* :func:`parse_megatron_args` — Megatron-LM launch arguments (``--num-layers 80 ...``, with
  ``torchrun --nnodes/--nproc-per-node`` for the world size) or a training log that prints the
  ``------------------------ arguments ------------------------`` block.

TOML layout (every key optional unless a computation needs it; long Megatron-style names are
accepted as aliases of the short ones)::

    name = "my run"
    convention = "megatron"        # FLOPs convention: megatron | megatron2024 | palm

    [model]   layers, hidden, ffn, heads, kv_heads, head_dim, vocab, seq_length,
              activation = "gelu" | "swiglu", experts, top_k, moe_ffn, moe_layer_freq,
              fwd_flops_per_sample (non-transformer models: forward FLOPs of one sample)
    [batch]   global_batch, micro_batch
    [parallel] tp, pp, dp, cp, ep, vp, sequence_parallel, distributed_optimizer,
              tp_comm_overlap, overlap_grad_reduce, overlap_param_gather, grad_reduce_dtype
    [recompute] granularity = "none" | "selective" | "full", method = "uniform" | "block",
              num_layers
    [hardware] gpu, num_gpus, precision, gpus_per_node, peak_tflops, intra_node_gbps,
              inter_node_gbps
    [reported] tflops_per_gpu, convention, step_time_s     # what the run itself logged

Values that are missing are only an error when something needs them:
:meth:`RunConfig.need` raises :class:`~traceanalyzer.errors.ConfigError` naming the missing value
and what it is needed for.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from traceanalyzer.errors import ConfigError, InputNotFound

CONVENTIONS = ("megatron", "megatron2024", "palm")
PRECISIONS = ("bf16", "fp16", "fp8", "tf32", "fp32")


@dataclass(frozen=True)
class ModelConfig:
    layers: int | None = None
    hidden: int | None = None
    ffn: int | None = None  # default 4·hidden (GeLU) / Megatron's 8h/3 rounded to 64 (SwiGLU)
    heads: int | None = None
    kv_heads: int | None = None  # default = heads (MHA)
    head_dim: int | None = None  # default = hidden / heads
    vocab: int | None = None  # padded vocabulary size
    seq_length: int | None = None
    activation: str = "gelu"  # "gelu" (2 MLP matrices) or "swiglu" (3)
    experts: int = 0  # 0 = dense
    top_k: int = 1
    moe_ffn: int | None = None  # default = ffn
    moe_layer_freq: int = 1  # layer i is MoE iff i % freq == 0 (Megatron's integer form)
    # Non-transformer models (CNNs, DLRM): forward FLOPs of one sample (2 per multiply-add).
    # When set, model FLOPs per step = 3 × this × global_batch and the transformer keys are unused.
    fwd_flops_per_sample: float | None = None

    @property
    def swiglu(self) -> bool:
        return self.activation == "swiglu"


@dataclass(frozen=True)
class BatchConfig:
    global_batch: int | None = None  # sequences per optimizer step
    micro_batch: int = 1


@dataclass(frozen=True)
class ParallelConfig:
    tp: int = 1
    pp: int = 1
    dp: int | None = None  # default: num_gpus / (tp·pp·cp)
    cp: int = 1
    ep: int = 1
    vp: int = 1  # virtual pipeline stages (model chunks) per GPU
    sequence_parallel: bool = False
    distributed_optimizer: bool = False
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = False
    overlap_param_gather: bool = False
    grad_reduce_dtype: str = "fp32"  # Megatron reduces bf16 grads in fp32 unless --grad-reduce-in-bf16


@dataclass(frozen=True)
class RecomputeConfig:
    granularity: str = "none"  # none | selective | full
    method: str = "uniform"  # uniform: every layer; block: `num_layers` per pipeline stage
    num_layers: int | None = None


@dataclass(frozen=True)
class HardwareConfig:
    gpu: str | None = None  # a name detect_gpu() understands ("H100 SXM", "NVIDIA A100-SXM4-80GB")
    num_gpus: int | None = None
    precision: str = "bf16"
    gpus_per_node: int = 8
    peak_tflops: float | None = None  # override of the table's dense peak
    intra_node_gbps: float | None = None  # effective collective bus bandwidth, GB/s
    inter_node_gbps: float | None = None  # per GPU, per direction, GB/s


@dataclass(frozen=True)
class Reported:
    """Throughput the run itself reported (e.g. Megatron's logged TFLOP/s/GPU)."""

    tflops_per_gpu: float | None = None
    convention: str | None = None  # convention of that figure (default: the run's)
    step_time_s: float | None = None


@dataclass(frozen=True)
class RunConfig:
    name: str = ""
    convention: str = "megatron"
    model: ModelConfig = field(default_factory=ModelConfig)
    batch: BatchConfig = field(default_factory=BatchConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    recompute: RecomputeConfig = field(default_factory=RecomputeConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    reported: Reported = field(default_factory=Reported)
    source: str = ""

    # ----------------------------------------------------------------- derived values
    def need(self, value: Any, what: str, needed_for: str) -> Any:
        """Return ``value`` or raise a ConfigError naming ``what`` is missing and why."""
        if value is None:
            where = f" in {self.source}" if self.source else ""
            raise ConfigError(f"{what} is missing{where}: it is needed for {needed_for}")
        return value

    @property
    def num_gpus(self) -> int | None:
        if self.hardware.num_gpus is not None:
            return self.hardware.num_gpus
        p = self.parallel
        if p.dp is not None:
            return p.tp * p.pp * p.cp * p.dp
        return None

    @property
    def dp(self) -> int | None:
        p = self.parallel
        if p.dp is not None:
            return p.dp
        if self.hardware.num_gpus is not None:
            return self.hardware.num_gpus // (p.tp * p.pp * p.cp)
        return None

    @property
    def ffn(self) -> int | None:
        m = self.model
        if m.ffn is not None:
            return m.ffn
        if m.hidden is None:
            return None
        if m.swiglu:  # Megatron's default for --swiglu without --ffn-hidden-size
            return int((4 * m.hidden * 2 / 3) / 64) * 64
        return 4 * m.hidden

    @property
    def kv_heads(self) -> int | None:
        return self.model.kv_heads if self.model.kv_heads is not None else self.model.heads

    @property
    def head_dim(self) -> int | None:
        m = self.model
        if m.head_dim is not None:
            return m.head_dim
        if m.hidden is None or m.heads is None:
            return None
        return m.hidden // m.heads

    @property
    def microbatches(self) -> int | None:
        """Microbatches per pipeline per step: GBS / (DP · MBS)."""
        if self.batch.global_batch is None or self.dp is None:
            return None
        return self.batch.global_batch // (self.dp * self.batch.micro_batch)

    def recomputed_layers(self) -> int:
        """Transformer layers (whole model) whose forward runs twice under full recompute."""
        r = self.recompute
        if r.granularity != "full" or self.model.fwd_flops_per_sample is not None:
            return 0
        layers = self.need(self.model.layers, "[model] layers", "the recompute cost")
        if r.method == "block" and r.num_layers is not None:
            return min(layers, r.num_layers * self.parallel.pp * self.parallel.vp)
        return layers

    def validate(self) -> RunConfig:
        """Check the values that are present are consistent; return self."""
        where = f" in {self.source}" if self.source else ""
        if self.convention not in CONVENTIONS:
            raise ConfigError(f"convention {self.convention!r}{where} is not one of {', '.join(CONVENTIONS)}")
        if self.reported.convention is not None and self.reported.convention not in CONVENTIONS:
            raise ConfigError(f"[reported] convention {self.reported.convention!r}{where} is not one of {', '.join(CONVENTIONS)}")
        if self.model.activation not in ("gelu", "swiglu"):
            raise ConfigError(f"[model] activation {self.model.activation!r}{where} must be 'gelu' or 'swiglu'")
        if self.recompute.granularity not in ("none", "selective", "full"):
            raise ConfigError(f"[recompute] granularity {self.recompute.granularity!r}{where} must be none, selective or full")
        if self.recompute.method not in ("uniform", "block"):
            raise ConfigError(f"[recompute] method {self.recompute.method!r}{where} must be uniform or block")
        if self.hardware.precision not in PRECISIONS:
            raise ConfigError(f"[hardware] precision {self.hardware.precision!r}{where} is not one of {', '.join(PRECISIONS)}")
        p = self.parallel
        for name in ("tp", "pp", "cp", "ep", "vp"):
            if getattr(p, name) < 1:
                raise ConfigError(f"[parallel] {name} = {getattr(p, name)}{where} must be at least 1")
        if p.dp is not None and self.hardware.num_gpus is not None:
            if p.tp * p.pp * p.cp * p.dp != self.hardware.num_gpus:
                raise ConfigError(
                    f"[parallel] tp·pp·cp·dp = {p.tp}·{p.pp}·{p.cp}·{p.dp} = {p.tp * p.pp * p.cp * p.dp}"
                    f" but [hardware] num_gpus = {self.hardware.num_gpus}{where}"
                )
        if p.dp is None and self.hardware.num_gpus is not None and self.hardware.num_gpus % (p.tp * p.pp * p.cp):
            raise ConfigError(
                f"[hardware] num_gpus = {self.hardware.num_gpus}{where} is not a multiple of tp·pp·cp = {p.tp * p.pp * p.cp}"
            )
        gbs, dp, mbs = self.batch.global_batch, self.dp, self.batch.micro_batch
        if gbs is not None and dp is not None and gbs % (dp * mbs):
            raise ConfigError(
                f"[batch] global_batch = {gbs}{where} is not a multiple of dp·micro_batch = {dp}·{mbs}:"
                " the number of microbatches per pipeline must be whole"
            )
        m = self.model
        if m.hidden is not None and m.heads is not None and m.head_dim is None and m.hidden % m.heads:
            raise ConfigError(f"[model] hidden = {m.hidden} is not a multiple of heads = {m.heads}{where}; give head_dim")
        if m.experts and m.top_k > m.experts:
            raise ConfigError(f"[model] top_k = {m.top_k} exceeds experts = {m.experts}{where}")
        return self


# --------------------------------------------------------------------------- TOML
_ALIASES: dict[str, dict[str, str]] = {
    "model": {
        "num_layers": "layers", "hidden_size": "hidden", "ffn_hidden_size": "ffn",
        "num_attention_heads": "heads", "num_query_groups": "kv_heads", "kv_channels": "head_dim",
        "vocab_size": "vocab", "padded_vocab_size": "vocab", "seq_len": "seq_length",
        "num_experts": "experts", "moe_router_topk": "top_k", "moe_ffn_hidden_size": "moe_ffn",
    },
    "batch": {"global_batch_size": "global_batch", "micro_batch_size": "micro_batch"},
    "parallel": {
        "tensor": "tp", "pipeline": "pp", "data": "dp", "context": "cp", "expert": "ep",
        "virtual_stages": "vp", "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
        "data_parallel_size": "dp", "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
        "virtual_pipeline_model_parallel_size": "vp", "use_distributed_optimizer": "distributed_optimizer",
    },
    "recompute": {"recompute_granularity": "granularity", "recompute_method": "method",
                  "recompute_num_layers": "num_layers"},
    "hardware": {"count": "num_gpus", "world_size": "num_gpus", "dtype": "precision",
                 "nvlink_gbps": "intra_node_gbps", "network_gbps": "inter_node_gbps"},
    "reported": {"tflops": "tflops_per_gpu"},
}
_SECTIONS = {
    "model": ModelConfig, "batch": BatchConfig, "parallel": ParallelConfig,
    "recompute": RecomputeConfig, "hardware": HardwareConfig, "reported": Reported,
}


def _section(name: str, table: dict[str, Any], cls: type, source: str) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise ConfigError(f"[{name}] in {source} must be a table")
    known = {f.name: f for f in fields(cls)}
    out: dict[str, Any] = {}
    for key, value in table.items():
        k = _ALIASES.get(name, {}).get(key, key)
        if k not in known:
            raise ConfigError(f"unknown key {key!r} in [{name}] of {source}; known keys: {', '.join(known)}")
        if name == "model" and k == "activation" and isinstance(value, str):
            value = value.lower()
        out[k] = value
    return out


def config_from_dict(doc: dict[str, Any], source: str = "", base: RunConfig | None = None) -> RunConfig:
    """Build a RunConfig from a parsed TOML document, on top of ``base`` when given."""
    base = base or RunConfig()
    top: dict[str, Any] = {}
    sections: dict[str, Any] = {}
    for key, value in doc.items():
        if key in _SECTIONS:
            table = dict(value) if isinstance(value, dict) else value
            if key == "model" and isinstance(table, dict) and "swiglu" in table:
                table["activation"] = "swiglu" if table.pop("swiglu") else table.get("activation", "gelu")
            sections[key] = replace(getattr(base, key), **_section(key, table, _SECTIONS[key], source))
        elif key in ("name", "convention"):
            top[key] = value
        else:
            raise ConfigError(
                f"unknown top-level key {key!r} in {source}; expected name, convention or a table among "
                + ", ".join(f"[{s}]" for s in _SECTIONS)
            )
    try:
        return replace(base, **top, **sections, source=source or base.source).validate()
    except TypeError as exc:  # pragma: no cover - defensive
        raise ConfigError(f"{source}: {exc}") from exc


def load_config(path: str | Path | None = None, megatron_args: str | Path | None = None) -> RunConfig:
    """Load a run configuration from a TOML file and/or Megatron-LM arguments.

    With both, the Megatron arguments come first and the TOML completes or overrides them
    (typically ``[hardware]`` and ``[reported]``, which launch arguments do not carry).
    """
    if path is None and megatron_args is None:
        raise ConfigError("no run configuration given: pass --config run.toml and/or --megatron-args FILE")
    cfg: RunConfig | None = None
    if megatron_args is not None:
        margs = Path(megatron_args)
        if not margs.is_file():
            raise InputNotFound("Megatron argument file not found", margs)
        cfg = parse_megatron_args(margs.read_text(errors="replace"), source=str(margs))
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise InputNotFound("configuration file not found", p)
        try:
            doc = tomllib.loads(p.read_text())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
        source = str(p) if cfg is None else f"{cfg.source} + {p}"
        cfg = config_from_dict(doc, source=source, base=cfg)
    assert cfg is not None
    return cfg


# --------------------------------------------------------------------------- Megatron arguments
_ARG_LINE = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?([a-z_][a-z0-9_]*)\s\.{2,}\s(.*?)\s*$")
_PADDED_VOCAB = re.compile(r"padded vocab \(size: \d+\) with \d+ dummy tokens \(new size: (\d+)\)")


def _scalar(text: str) -> Any:
    t = text.strip()
    if t in ("True", "true"):
        return True
    if t in ("False", "false"):
        return False
    if t in ("None", "none", ""):
        return None
    try:
        return int(t)
    except ValueError:
        pass
    try:
        return float(t)
    except ValueError:
        return t


def _parse_cli(text: str) -> dict[str, Any]:
    # Drop comments and shell line continuations, then split like a shell would.
    lines = [ln.split("#", 1)[0] if ln.lstrip().startswith("#") else ln for ln in text.splitlines()]
    try:
        tokens = shlex.split(" ".join(ln.rstrip().rstrip("\\") for ln in lines), comments=True)
    except ValueError as exc:
        raise ConfigError(f"cannot split the Megatron arguments like a shell would: {exc}") from exc
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--"):
            key, _, inline = tok[2:].partition("=")
            key = key.replace("-", "_")
            if inline:
                out[key] = _scalar(inline)
                i += 1
                continue
            values = []
            j = i + 1
            while j < len(tokens) and not tokens[j].startswith("--"):
                values.append(tokens[j])
                j += 1
            out[key] = True if not values else _scalar(values[0]) if len(values) == 1 else values
            i = j
        else:
            i += 1
    return out


def parse_megatron_args(text: str, source: str = "megatron arguments") -> RunConfig:
    """Read Megatron-LM launch arguments or a training log into a RunConfig.

    Recognises the ``arguments`` block Megatron prints (``  num_layers ........ 80``), the
    ``padded vocab (size: ...) ... (new size: N)`` line, and command-line text (``--num-layers 80
    --swiglu ...`` with ``torchrun --nnodes N --nproc-per-node M`` giving the world size).
    """
    args: dict[str, Any] = {}
    block = [m for m in map(_ARG_LINE.match, text.splitlines()) if m]
    if len(block) >= 5:
        args = {m.group(1): _scalar(m.group(2)) for m in block}
    else:
        args = _parse_cli(text)
        nn, npn = (_scalar(v[0]) if isinstance(v, list) else v for v in (args.get("nnodes"), args.get("nproc_per_node")))
        if isinstance(nn, int) and isinstance(npn, int) and "world_size" not in args:
            args["world_size"] = nn * npn
    if not any(k in args for k in ("num_layers", "hidden_size")):
        raise ConfigError(f"{source}: no Megatron-LM arguments found (expected --num-layers/--hidden-size or an arguments block)")
    pv = _PADDED_VOCAB.search(text)
    if pv and args.get("padded_vocab_size") is None:
        args["padded_vocab_size"] = int(pv.group(1))

    def g(*names: str, default: Any = None) -> Any:
        for n in names:
            if args.get(n) is not None:
                return args[n]
        return default

    gqa = bool(g("group_query_attention", default=False))
    layers_per_vp = g("num_layers_per_virtual_pipeline_stage")
    pp = int(g("pipeline_model_parallel_size", default=1))
    vp = g("virtual_pipeline_model_parallel_size")
    if vp is None and layers_per_vp and g("num_layers"):
        vp = int(g("num_layers")) // (pp * int(layers_per_vp))
    if args.get("fp8") or args.get("fp8_format"):
        precision = "fp8"
    elif args.get("bf16"):
        precision = "bf16"
    elif args.get("fp16"):
        precision = "fp16"
    else:
        precision = "fp32"
    granularity = g("recompute_granularity", default="none") or "none"
    if args.get("checkpoint_activations") or args.get("activations_checkpoint_method"):
        granularity = "full"  # pre-2022 spelling
    model = ModelConfig(
        layers=g("num_layers"),
        hidden=g("hidden_size"),
        ffn=g("ffn_hidden_size"),
        heads=g("num_attention_heads"),
        kv_heads=g("num_query_groups") if gqa else None,
        head_dim=g("kv_channels"),
        vocab=g("padded_vocab_size", "vocab_size"),
        seq_length=g("seq_length", "encoder_seq_length"),
        activation="swiglu" if args.get("swiglu") else "gelu",
        experts=int(g("num_experts", default=0) or 0),
        top_k=int(g("moe_router_topk", default=1 if not g("num_experts") else 2)),
        moe_ffn=g("moe_ffn_hidden_size"),
        moe_layer_freq=g("moe_layer_freq", default=1) if isinstance(g("moe_layer_freq", default=1), int) else 1,
    )
    batch = BatchConfig(global_batch=g("global_batch_size"), micro_batch=int(g("micro_batch_size", default=1)))
    parallel = ParallelConfig(
        tp=int(g("tensor_model_parallel_size", default=1)),
        pp=pp,
        dp=g("data_parallel_size"),
        cp=int(g("context_parallel_size", default=1)),
        ep=int(g("expert_model_parallel_size", default=1)),
        vp=int(vp or 1),
        sequence_parallel=bool(g("sequence_parallel", default=False)),
        distributed_optimizer=bool(g("use_distributed_optimizer", default=False)),
        tp_comm_overlap=bool(g("tp_comm_overlap", default=False)),
        overlap_grad_reduce=bool(g("overlap_grad_reduce", default=False)),
        overlap_param_gather=bool(g("overlap_param_gather", default=False)),
        grad_reduce_dtype="bf16" if args.get("grad_reduce_in_bf16") else "fp32",
    )
    recompute = RecomputeConfig(
        granularity=str(granularity),
        method=str(g("recompute_method", default="uniform") or "uniform"),
        num_layers=g("recompute_num_layers"),
    )
    hardware = HardwareConfig(num_gpus=g("world_size"), precision=precision)
    cfg = RunConfig(name=Path(source).stem if source else "", convention="megatron", model=model, batch=batch,
                    parallel=parallel, recompute=recompute, hardware=hardware, source=source)
    if cfg.batch.global_batch is None and cfg.dp is not None:  # Megatron's default GBS = MBS · DP
        cfg = replace(cfg, batch=replace(cfg.batch, global_batch=cfg.batch.micro_batch * cfg.dp))
    return cfg.validate()
