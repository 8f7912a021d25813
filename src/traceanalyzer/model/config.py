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
    convention = "megatron"        # FLOPs convention: megatron | megatron2024 | palm | torch

    [model]   layers, hidden, ffn, heads, kv_heads, head_dim, vocab, seq_length,
              activation = "gelu" | "swiglu", experts, top_k, moe_ffn, moe_layer_freq,
              fwd_flops_per_sample (non-transformer models: forward FLOPs of one sample),
              untie_embeddings, flash_attention (memory model),
              position_embedding = "rope" | "learned" | "none", bias (linear biases),
              norm = "layernorm" | "rmsnorm", dropout (memory model: dropout masks kept)
    [batch]   global_batch, micro_batch
    [parallel] tp, pp, dp, cp, ep, vp, sequence_parallel, distributed_optimizer,
              tp_comm_overlap, overlap_grad_reduce, overlap_param_gather, grad_reduce_dtype,
              zero_stage (0-3; FSDP full shard = 3), grad_allreduce
    [recompute] granularity = "none" | "selective" | "full" | "mlp", method = "uniform" | "block",
              num_layers
    [hardware] gpu, num_gpus, precision, gpus_per_node, peak_tflops, intra_node_gbps,
              inter_node_gbps, memory_gb (GiB)
    [reported] tflops_per_gpu, convention, step_time_s     # what the run itself logged
    [training] recipe = "megatron-mixed" | "pure-bf16" | "amp-fp32-master" | "fsdp2-mixed",
              param_dtype, grad_dtype, optimizer = "adamw" | "adam" | "sgd" | "adafactor",
              optimizer_state_dtype, master_weights   # a key given overrides its recipe's value

Values that are missing are only an error when something needs them:
:meth:`RunConfig.need` raises :class:`~traceanalyzer.errors.ConfigError` naming the missing value
and what it is needed for.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from traceanalyzer.errors import ConfigError, InputNotFound
from traceanalyzer.model.conventions import CONVENTIONS as CONVENTIONS  # re-exported


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
    # Memory model only: separate input embedding and output layer weights (Megatron
    # --untie-embeddings-and-output-weights; Llama-style models), and whether attention keeps
    # no s×s score matrix (flash / fused attention; false = Korthikanti et al.'s materialised softmax).
    untie_embeddings: bool = False
    flash_attention: bool = True
    # Parameter count and memory: position embeddings ("learned": seq_length × hidden weights;
    # "rope" and "none": no weights; None: as "rope"), biases on every linear layer but the output
    # layer, the norm (None: LayerNorm with bias for GeLU models, RMSNorm for SwiGLU models), and
    # whether the layers keep dropout masks (Megatron's default 0.1 dropout; false for most
    # PyTorch / Hugging Face pre-training recipes).
    position_embedding: str | None = None
    bias: bool = False
    norm: str | None = None
    dropout: bool = True

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
    # ZeRO stage of the data-parallel sharding (memory model): 0 none, 1 optimizer states
    # (= Megatron's distributed optimizer), 2 + gradients, 3 + weights (FSDP FULL_SHARD).
    # None: 1 with distributed_optimizer, else 0.
    zero_stage: int | None = None
    # Whether each step all-reduces the gradients (DDP / Megatron's DP reduction): None = when
    # dp > 1. A one-GPU PyTorch loop that still all-reduces (world size 1) pays the flattening
    # copies; the shape-aware what-if keeps or drops that per-step cost by this key.
    grad_allreduce: bool | None = None


@dataclass(frozen=True)
class RecomputeConfig:
    granularity: str = "none"  # none | selective | full | mlp (each layer's MLP under a checkpoint)
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
    memory_gb: float | None = None  # device memory in GiB (override of the table, memory model)


@dataclass(frozen=True)
class Reported:
    """Throughput the run itself reported (e.g. Megatron's logged TFLOP/s/GPU)."""

    tflops_per_gpu: float | None = None
    convention: str | None = None  # convention of that figure (default: the run's)
    step_time_s: float | None = None


#: training recipes: what each one sets (a key given in [training] overrides its recipe's value)
RECIPES: dict[str, dict[str, Any]] = {
    # Megatron-LM's mixed precision: 16-bit weights, fp32 main gradients (grad_reduce_dtype),
    # fp32 master weights and Adam moments (18 B/param with bf16); the gradient buffer persists
    "megatron-mixed": dict(param_dtype=None, grad_dtype=None, optimizer="adam", optimizer_state_dtype="fp32",
                           master_weights=None),
    # everything in bf16, no master copy (model.to(torch.bfloat16) + torch.optim.AdamW): 8 B/param
    "pure-bf16": dict(param_dtype="bf16", grad_dtype="bf16", optimizer="adamw", optimizer_state_dtype="bf16",
                      master_weights=False),
    # fp32 parameters computed in bf16 under torch.autocast: 16 B/param + the bf16 weight copies
    # the matmuls save for the backward
    "amp-fp32-master": dict(param_dtype="fp32", grad_dtype="fp32", optimizer="adamw", optimizer_state_dtype="fp32",
                            master_weights=False),
    # FSDP2 fully_shard with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): fp32 sharded
    # parameters, gradients and AdamW states (ZeRO stage 3), bf16 compute
    "fsdp2-mixed": dict(param_dtype="fp32", grad_dtype="fp32", optimizer="adamw", optimizer_state_dtype="fp32",
                        master_weights=False),
}
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}


@dataclass(frozen=True)
class TrainingConfig:
    """The training recipe: dtypes of parameters, gradients and optimizer states, and the optimizer.

    Every key None means: the recipe's value (:data:`RECIPES`; the default recipe,
    ``megatron-mixed``, derives the weight and gradient dtypes from ``[hardware] precision`` and
    ``[parallel] grad_reduce_dtype`` as before)."""

    recipe: str | None = None
    param_dtype: str | None = None
    grad_dtype: str | None = None
    optimizer: str | None = None
    optimizer_state_dtype: str | None = None
    master_weights: bool | None = None


@dataclass(frozen=True)
class Recipe:
    """A training recipe resolved to concrete values (:meth:`RunConfig.training_recipe`)."""

    name: str
    param_dtype: str
    grad_dtype: str
    optimizer: str
    optimizer_state_dtype: str
    master_weights: bool

    @property
    def param_bytes(self) -> int:
        return DTYPE_BYTES[self.param_dtype]

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype]

    @property
    def optimizer_states(self) -> int:
        """Full-size optimizer states per parameter (Adam: two moments; SGD: momentum;
        Adafactor: factored second moment, counted as none)."""
        return {"adamw": 2, "adam": 2, "sgd": 1, "adafactor": 0}[self.optimizer]

    @property
    def optimizer_bytes(self) -> int:
        """Optimizer bytes per parameter: states + the fp32 master copy."""
        return self.optimizer_states * DTYPE_BYTES[self.optimizer_state_dtype] + (4 if self.master_weights else 0)

    @property
    def megatron(self) -> bool:
        return self.name == "megatron-mixed"


@dataclass(frozen=True)
class TraceConfig:
    """How to read this run's traces (not part of the analytic model)."""

    #: extra kernel-name regexes (case-insensitive) that are communication, like ``--comm-kernel``
    comm_kernels: tuple[str, ...] = ()


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
    trace: TraceConfig = field(default_factory=TraceConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    source: str = ""
    #: what a reader of the inputs should know (on stderr, and in the JSON's ``warnings``)
    warnings: tuple[str, ...] = ()
    #: ("section.field", message) of values a launch script takes from outside it
    unresolved: tuple[tuple[str, str], ...] = ()
    #: what a training log measured (:func:`traceanalyzer.model.megatron.parse_iterations`)
    logged: dict | None = field(default=None, compare=False)

    # ----------------------------------------------------------------- derived values
    def need(self, value: Any, what: str, needed_for: str) -> Any:
        """Return ``value`` or raise a ConfigError naming ``what`` is missing and why."""
        if value is None:
            where = f" in {self.source}" if self.source else ""
            raise ConfigError(f"{what} is missing{where}: it is needed for {needed_for}")
        return value

    @property
    def num_gpus(self) -> int | None:
        """The GPUs of the run: as given, else the product of the parallel sizes when DP is given."""
        p = self.parallel
        if self.hardware.num_gpus is None and p.dp is not None:
            return p.tp * p.pp * p.cp * p.dp
        return self.hardware.num_gpus

    @property
    def dp(self) -> int | None:
        """The data-parallel size: as given, else what the GPUs leave over TP, PP and CP."""
        p = self.parallel
        return p.dp if p.dp is not None or self.hardware.num_gpus is None else self.hardware.num_gpus // (p.tp * p.pp * p.cp)

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
    def grad_allreduce(self) -> bool:
        """Whether each step all-reduces the gradients (``[parallel] grad_allreduce``, else dp > 1)."""
        g = self.parallel.grad_allreduce
        return g if g is not None else (self.dp or 1) > 1

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

    def training_recipe(self) -> Recipe:
        """The training recipe with every value resolved (the keys given over the recipe's)."""
        t = self.training
        name = t.recipe or "megatron-mixed"
        base = dict(RECIPES[name])
        if name == "megatron-mixed":
            pb = "bf16" if self.hardware.precision in ("bf16", "fp8") else "fp16" if self.hardware.precision == "fp16" else "fp32"
            base["param_dtype"] = pb
            base["grad_dtype"] = "fp32" if (pb == "fp32" or self.parallel.grad_reduce_dtype == "fp32") else "bf16"
            base["master_weights"] = pb != "fp32"
        given = {k: getattr(t, k) for k in ("param_dtype", "grad_dtype", "optimizer", "optimizer_state_dtype",
                                           "master_weights") if getattr(t, k) is not None}
        return Recipe(name=name, **{**base, **given})

    def param_count(self) -> int:
        """Parameters of the whole model (every stage, no sharding): exact from the [model] keys.

        Per layer: attention ``h·(q + 2·g·d) + q·h``, MLP ``E·h·f`` (E = 3 SwiGLU, 2 GeLU), with
        ``bias``: ``q + 2·g·d + h`` and ``(E − 1)·f + h``; two norms (LayerNorm ``2h``, RMSNorm
        ``h``); a mixture-of-experts layer ``experts`` MLPs and a router ``h·experts``. The input
        embedding ``V·h``, an untied output layer ``V·h``, learned positions ``s·h``, the final
        norm."""
        m = self.model
        what = "the parameter count"
        L = self.need(m.layers, "[model] layers", what)
        h = self.need(m.hidden, "[model] hidden", what)
        V = self.need(m.vocab, "[model] vocab", what)
        one = replace(self, parallel=ParallelConfig())
        total = 0.0
        for i in range(L):
            moe = bool(m.experts) and i % m.moe_layer_freq == 0
            dn, ex = layer_params(one, moe)
            total += dn + ex
        total += V * h * (2 if m.untie_embeddings else 1) + self.norm_params
        if m.position_embedding == "learned":
            total += self.need(m.seq_length, "[model] seq_length", "the learned position embeddings") * h
        return int(round(total))

    @property
    def norm_params(self) -> int:
        """Parameters of one norm: LayerNorm ``2h`` (weight and bias), RMSNorm ``h``."""
        m = self.model
        norm = m.norm or ("rmsnorm" if m.swiglu else "layernorm")
        return (2 if norm == "layernorm" else 1) * (m.hidden or 0)

    @property
    def unresolved_keys(self) -> set[str]:
        return {k for k, _ in self.unresolved}

    def validate(self) -> RunConfig:
        """Check every value (types, ranges, divisibility, plausibility: :mod:`.validate`).

        Returns the config with the warnings the check raised added to :attr:`warnings`."""
        from traceanalyzer.model.validate import check  # noqa: PLC0415

        new = [w for w in check(self) if w not in self.warnings]
        return replace(self, warnings=self.warnings + tuple(new)) if new else self


# --------------------------------------------------------------------------- TOML
_ALIASES: dict[str, dict[str, str]] = {
    "model": {
        "num_layers": "layers", "hidden_size": "hidden", "ffn_hidden_size": "ffn",
        "num_attention_heads": "heads", "num_query_groups": "kv_heads", "kv_channels": "head_dim",
        "vocab_size": "vocab", "padded_vocab_size": "vocab", "seq_len": "seq_length",
        "num_experts": "experts", "moe_router_topk": "top_k", "moe_ffn_hidden_size": "moe_ffn",
        "untie_embeddings_and_output_weights": "untie_embeddings",
    },
    "batch": {"global_batch_size": "global_batch", "micro_batch_size": "micro_batch"},
    "parallel": {
        "tensor": "tp", "pipeline": "pp", "data": "dp", "context": "cp", "expert": "ep",
        "virtual_stages": "vp", "tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
        "data_parallel_size": "dp", "context_parallel_size": "cp", "expert_model_parallel_size": "ep",
        "virtual_pipeline_model_parallel_size": "vp", "use_distributed_optimizer": "distributed_optimizer",
        "zero": "zero_stage",
    },
    "recompute": {"recompute_granularity": "granularity", "recompute_method": "method",
                  "recompute_num_layers": "num_layers"},
    "hardware": {"count": "num_gpus", "world_size": "num_gpus", "dtype": "precision",
                 "nvlink_gbps": "intra_node_gbps", "network_gbps": "inter_node_gbps"},
    "reported": {"tflops": "tflops_per_gpu"},
    "training": {"optimizer_dtype": "optimizer_state_dtype", "state_dtype": "optimizer_state_dtype"},
}
_SECTIONS = {
    "model": ModelConfig, "batch": BatchConfig, "parallel": ParallelConfig,
    "recompute": RecomputeConfig, "hardware": HardwareConfig, "reported": Reported, "trace": TraceConfig,
    "training": TrainingConfig,
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
        if (name == "model" and k in ("activation", "position_embedding", "norm")) or \
                (name == "training" and k != "master_weights"):
            if isinstance(value, str):
                value = value.lower()
        if name == "trace" and k == "comm_kernels":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise ConfigError(f"[trace] comm_kernels = {value!r} in {source} must be a list of regular expressions (strings)")
            value = tuple(value)
        out[k] = value
    return out


def config_from_dict(doc: dict[str, Any], source: str = "", base: RunConfig | None = None,
                     validate: bool = True) -> RunConfig:
    """Build a RunConfig from a parsed TOML document, on top of ``base`` when given."""
    base = base or RunConfig()
    top: dict[str, Any] = {}
    sections: dict[str, Any] = {}
    for key, value in doc.items():
        if key in _SECTIONS:
            table = dict(value) if isinstance(value, dict) else value
            if key == "model" and isinstance(table, dict) and "swiglu" in table:
                sw = table.pop("swiglu")
                if not isinstance(sw, bool):
                    raise ConfigError(f"[model] swiglu = {sw!r} in {source} must be true or false (a TOML boolean, unquoted)")
                table["activation"] = "swiglu" if sw else table.get("activation", "gelu")
            sections[key] = replace(getattr(base, key), **_section(key, table, _SECTIONS[key], source))
        elif key in ("name", "convention"):
            top[key] = value
        else:
            raise ConfigError(
                f"unknown top-level key {key!r} in {source}; expected name, convention or a table among "
                + ", ".join(f"[{s}]" for s in _SECTIONS)
            )
    cfg = replace(base, **top, **sections, source=source or base.source)
    return cfg.validate() if validate else cfg


def _read_text(path: Path, what: str) -> str:
    if not path.is_file():
        raise InputNotFound(f"{what} not found", path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputNotFound(f"cannot read the {what}: {exc.strerror or exc}", path) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}): a {what} must be a text file") from None


# --------------------------------------------------------------------------- Megatron arguments
# load_config and parse_megatron_args live in :mod:`.loader`: they read Megatron arguments
# (:mod:`.megatron`, :mod:`.nemo`), which build on the dataclasses here.


def layer_params(cfg: RunConfig, moe: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one transformer layer held by one GPU (after TP and EP): the one
    definition shared by the exact parameter count (:meth:`RunConfig.param_count`) and the memory model."""
    m, p = cfg.model, cfg.parallel
    h, t = m.hidden, p.tp
    d, n_h, n_kv = cfg.head_dim, m.heads, cfg.kv_heads
    E = 3 if m.swiglu else 2
    norm = cfg.norm_params  # LayerNorm with bias 2h / RMSNorm h (default: by the activation)
    attn = (h * (d * n_h + 2 * d * n_kv) + d * n_h * h) / t
    if m.bias:  # column-parallel biases are split by TP, row-parallel ones (out-proj, fc2) replicated
        attn += (d * n_h + 2 * d * n_kv) / t + h
    if moe:
        f_moe = m.moe_ffn if m.moe_ffn is not None else cfg.ffn
        ex_bias = ((E - 1) * f_moe / t + h) if m.bias else 0
        return attn + 2 * norm + h * m.experts, (E * h * f_moe / t + ex_bias) * (m.experts / p.ep)
    mlp_bias = ((E - 1) * cfg.ffn / t + h) if m.bias else 0
    return attn + 2 * norm + E * h * cfg.ffn / t + mlp_bias, 0.0
