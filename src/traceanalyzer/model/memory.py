"""Memory of one GPU during training: weights, gradients, optimizer states and activations.

Public surface: :func:`estimate_memory` (RunConfig -> :class:`MemoryEstimate`),
:func:`layer_activation_bytes` (one transformer layer, one micro-batch, exact),
:func:`in_flight_chunks` (pipeline schedule), :data:`COMPONENTS`, :data:`DEFAULT_RESERVE_GIB`.

Everything is bytes per GPU. The estimate is for every pipeline stage; the *most loaded* stage
(largest total) is the one that decides whether the layout fits.

**Model states** (mixed precision with Adam; Rajbhandari et al. 2020, ZeRO, §3.1; Megatron-LM's
``theoretical_memory_usage.py``). Per parameter: weights in the compute dtype (2 bytes for
bf16/fp16/fp8, 4 for fp32/tf32), gradients in the reduction dtype (``[parallel]
grad_reduce_dtype``: 4 bytes, Megatron's default main-grad buffer, or 2), optimizer states 12
bytes (fp32 master weights + Adam's two moments; 8 when the weights are already fp32). ZeRO
stage ``z`` (``[parallel] zero_stage``; the distributed optimizer is stage 1) divides the
optimizer states (z ≥ 1), the gradients (z ≥ 2) and the weights (z = 3, FSDP full shard) by
the data-parallel group: dp·cp for dense weights (Megatron shards over data and context
parallel ranks together), dp·cp/ep for expert weights (expert data parallelism). Stage 3 adds
the unsharded weights of two layers (the one computing and the one prefetched) and the
unsharded gradients of one layer before its reduce-scatter.

**Weights held by a stage**: the layers of that stage (layer ``i`` belongs to model chunk
``i·p·v // L``, chunk ``c`` to stage ``c mod p``), each with attention ``h·(q + 2·g·d) + q·h``
(q = heads·head_dim, g = KV heads: GQA), MLP ``E·h·f`` (E = 2, or 3 with SwiGLU), both divided
by TP, and two norms (``2h`` parameters each for LayerNorm with GeLU models, ``h`` for RMSNorm
with SwiGLU models; replicated over TP). A mixture-of-experts layer holds ``experts/ep`` experts
of ``E·h·f_moe/tp`` and a router ``h·experts``. The first stage holds the input embedding
``V·h/tp``; the last the output layer ``V·h/tp`` and the final norm. With one stage, tied
embeddings are held once and untied twice (``[model] untie_embeddings``); with more, the last
stage holds its own copy of a tied embedding, as Megatron does.

**Activations of one layer for one micro-batch** (Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", arXiv:2205.05198, §4 and Table 2), written for GQA,
any FFN width, SwiGLU and context parallelism; ``s`` = sequence / cp, ``b`` micro-batch, ``a``
the activation bytes (2 in 16-bit training), ``t`` TP::

    replicated r = s·b·h·(4a + 2)            norm inputs 2·a, QKV and MLP inputs a each,
                                             two dropout masks 1 byte each (10·sbh at a = 2)
    sharded    k = a·s·b·(2q + 2·g·d + E·f)  Q, K, V, attention output, MLP activation input
                                             and output (24·sbh for MHA with f = 4h)
    scores     c = (2a + 1)·heads·s·S·b      softmax output, dropout mask and output, S the
                                             full sequence (5·a·s²·b); 0 with flash attention

    none:       r + k/t + c/t   (SP: (r + k)/t + c/t)
    selective:  r + k/t         (SP: (r + k)/t)         the scores are recomputed
    full:       a·s·b·h         (SP: a·s·b·h/t)         only the layer input is kept
    mlp:        (3a + 1)·sbh + a·s·b·(2q + 2·g·d)/t     the MLP keeps only its input

With MHA, f = 4h, a = 2 and no CP these are Table 2's ``sbh(10 + 24/t + 5as/ht)``,
``sbh(34/t + 5as/ht)``, ``sbh(10 + 24/t)``, ``sbh(34/t)`` and ``2sbh``. A MoE layer's MLP term
is ``a·s·b·k_top·(h + E·f_moe)`` (the dispatched tokens and their expert activations, balanced
routing) plus fp32 router probabilities ``4·s·b·experts``. ``[model] flash_attention`` (default
true) drops the score term: flash/fused attention recomputes it in its backward, which is what
Megatron runs today. Full recompute with ``method = "uniform"`` and ``num_layers = N`` keeps one
input per N layers; ``method = "block"`` recomputes N layers per chunk and keeps the others whole.
Full recompute also rebuilds N layers (one with ``block``) at a time during the backward: that
working set (``recompute_working_set``) is one micro-batch of those layers without recompute.

**Pipeline**: stage ``r`` of ``p`` holds the activations of the micro-batches it has run
forward but not yet backward. 1F1B: ``min(m, p − r)`` micro-batches (Narayanan et al. 2021).
Interleaved with ``v`` chunks: ``min(m·v, 2(p − r − 1) + (v − 1)·p + 1)`` chunk-micro-batches of
``1/v`` of the stage's layers each (Megatron's warm-up count plus the one in flight), which on
the first stage is Megatron's ``p·(1 + (p − 1)/(p·v))``. The first stage also keeps the token ids
(8 bytes per token) and the embedding dropout mask (1 byte per element) of its in-flight
micro-batches; the last stage the inputs of the final norm and the output layer (``2a·s·b·h``,
divided by t with SP) and the fp32 logits of the loss, ``4·s·b·V/t``, of one micro-batch.

Not counted: the CUDA context, NCCL and cuBLAS workspaces, allocator fragmentation and
temporary buffers; the ``reserve`` of :meth:`MemoryEstimate.fits` stands for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from traceanalyzer.errors import ConfigError
from traceanalyzer.hardware import GIB
from traceanalyzer.model.config import RunConfig, layer_params
from traceanalyzer.model.hardware import memory_bytes

#: Components of the estimate, in the order they are reported.
COMPONENTS = (
    "weights", "gradients", "optimizer_states", "zero3_gathered", "activations",
    "embedding_activations", "logits", "recompute_working_set", "autocast_copies", "optimizer_temporaries",
)
COMPONENT_NOTES = {
    "weights": "parameters in the recipe's parameter dtype",
    "gradients": "gradient buffer in the reduction dtype",
    "optimizer_states": "optimizer moments (+ fp32 master weights in mixed precision)",
    "zero3_gathered": "ZeRO-3/FSDP: unsharded weights of two layers + gradients of one",
    "activations": "transformer layers × micro-batches in flight",
    "embedding_activations": "first stage: token ids + embedding dropout mask, in flight",
    "logits": "last stage: final norm / output layer inputs + fp32 logits and cross-entropy, one micro-batch",
    "recompute_working_set": "full recompute: the layers being rebuilt in the backward",
    "autocast_copies": "bf16 copies of the fp32 weights the matmuls keep for the backward (autocast)",
    "optimizer_temporaries": "foreach Adam(W): one state-sized temporary (sqrt of the second moment)",
}
#: the moments of a step at which a PyTorch-loop recipe (not megatron-mixed) peaks
PHASES = {
    "backward_start": "end of forward / start of backward (activations, fp32 logits and cross-entropy alive; "
                      "gradients not yet allocated: zero_grad(set_to_none=True))",
    "optimizer_step": "optimizer step (gradients, optimizer states and their temporaries; activations freed)",
    "backward_recompute": "backward, while full recompute rebuilds a layer (its activations beside the kept inputs)",
}
#: Default headroom for what the model does not count (CUDA context, NCCL buffers, cuBLAS
#: workspace, allocator fragmentation), GiB.
DEFAULT_RESERVE_GIB = 4.0
GRANULARITIES = ("none", "selective", "full", "mlp")


def _act_bytes(precision: str) -> int:
    return 2 if precision in ("bf16", "fp16", "fp8") else 4


def layer_activation_bytes(
    seq: int, micro_batch: int, hidden: int, heads: int, tp: int = 1, *, sequence_parallel: bool = False,
    recompute: str = "none", kv_heads: int | None = None, head_dim: int | None = None, ffn: int | None = None,
    gated: bool = False, cp: int = 1, flash_attention: bool = False, act_bytes: int = 2,
    moe_experts: int = 0, moe_top_k: int = 1, moe_ffn: int | None = None, dropout: bool = True,
) -> Fraction:
    """Activation bytes one transformer layer keeps per GPU for one micro-batch (exact).

    ``recompute``: ``none`` | ``selective`` | ``full`` | ``mlp`` (the MLP under a checkpoint:
    the layer keeps the MLP's input only). Defaults (MHA, ``ffn = 4·hidden``,
    GeLU, no CP, stored scores, 2-byte activations) give Korthikanti et al. 2022 Table 2.
    ``moe_experts > 0`` makes it a mixture-of-experts layer (``moe_top_k`` experts per token of
    width ``moe_ffn``). ``dropout`` False: no dropout masks (``2·sbh`` less). See the module
    docstring for every term.
    """
    if recompute not in GRANULARITIES:
        raise ValueError(f"recompute {recompute!r} is not one of {GRANULARITIES}")
    d = head_dim if head_dim is not None else hidden // heads
    g = kv_heads if kv_heads is not None else heads
    f = ffn if ffn is not None else 4 * hidden
    E = 3 if gated else 2
    a = act_bytes
    s = Fraction(seq, cp)
    b, h, t = micro_batch, hidden, tp
    sbh = s * b * h
    if recompute == "full":
        return a * sbh / (t if sequence_parallel else 1)
    q = heads * d
    rep = sbh * (4 * a + (2 if dropout else 0))  # without dropout: no masks
    if moe_experts:
        fm = moe_ffn if moe_ffn is not None else f
        mlp = a * s * b * moe_top_k * (h + E * fm)
        rep += 4 * s * b * moe_experts  # fp32 router probabilities
    else:
        mlp = a * s * b * E * f
    shard = a * s * b * (2 * q + 2 * g * d) + mlp
    if recompute == "mlp":  # the MLP under a checkpoint keeps only its input: no norm / MLP inputs,
        # no MLP activations, one dropout mask
        rep = sbh * (3 * a + (1 if dropout else 0))
        shard = a * s * b * (2 * q + 2 * g * d)
    scores = 0 if (flash_attention or recompute == "selective") else (2 * a + 1) * heads * s * seq * b
    if sequence_parallel:
        return (rep + shard) / t + Fraction(scores) / t
    return rep + shard / t + Fraction(scores) / t


def in_flight_chunks(pp: int, vp: int, microbatches: int | None, stage: int) -> int:
    """Micro-batch chunks whose activations ``stage`` holds at its peak (each chunk: 1/vp of the
    stage's layers). 1F1B: ``min(m, p − r)``; interleaved: ``min(m·v, 2(p − r − 1) + (v − 1)p + 1)``.
    ``microbatches`` None: as many as the schedule can hold (m ≥ p)."""
    if pp <= 1:
        return 1
    if vp <= 1:
        n = pp - stage
        return n if microbatches is None else min(microbatches, n)
    n = 2 * (pp - stage - 1) + (vp - 1) * pp + 1
    return n if microbatches is None else min(microbatches * vp, n)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per GPU by component for the most loaded pipeline stage, and for every stage."""

    components: dict[str, float]  # bytes, in COMPONENTS order (most loaded stage)
    stage: int  # 0-based index of the most loaded pipeline stage
    stages: tuple[dict[str, float], ...]  # components of every stage
    capacity_bytes: int | None  # device memory of the GPU (None: unknown)
    params: float  # parameters held by one GPU of that stage (before ZeRO-3 sharding)
    in_flight: tuple[int, ...]  # micro-batch chunks in flight per stage
    zero_stage: int
    notes: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def total_bytes(self) -> float:
        return float(sum(self.components.values()))

    @property
    def component_notes(self) -> dict[str, str]:
        """What each component is (:data:`COMPONENT_NOTES`), in :data:`COMPONENTS` order."""
        return {k: COMPONENT_NOTES[k] for k in COMPONENTS}

    def _capacity(self, capacity_bytes: float | None) -> float:
        cap = capacity_bytes if capacity_bytes is not None else self.capacity_bytes
        if cap is None:
            raise ConfigError("[hardware] gpu is missing or unknown: it is needed for the device memory "
                              "(or give [hardware] memory_gb)")
        return float(cap)

    def headroom_bytes(self, capacity_bytes: float | None = None, reserve_bytes: float = DEFAULT_RESERVE_GIB * GIB) -> float:
        """Capacity − reserve − total (negative: does not fit)."""
        return self._capacity(capacity_bytes) - reserve_bytes - self.total_bytes

    def fits(self, capacity_bytes: float | None = None, reserve_bytes: float = DEFAULT_RESERVE_GIB * GIB) -> bool:
        """Whether the most loaded stage fits in ``capacity_bytes`` (default: the GPU's) less
        ``reserve_bytes`` (default :data:`DEFAULT_RESERVE_GIB`)."""
        return self.headroom_bytes(capacity_bytes, reserve_bytes) >= 0

    def as_dict(self, reserve_bytes: float = DEFAULT_RESERVE_GIB * GIB) -> dict[str, Any]:
        out: dict[str, Any] = {
            "stage": self.stage,
            "components_bytes": dict(self.components),
            "total_bytes": self.total_bytes,
            "capacity_bytes": self.capacity_bytes,
            "reserve_bytes": reserve_bytes,
            "fits": None, "headroom_bytes": None,
            "params_per_gpu": self.params,
            "zero_stage": self.zero_stage,
            "in_flight_chunks": list(self.in_flight),
            "stage_totals_bytes": [float(sum(c.values())) for c in self.stages],
            "notes": list(self.notes),
            **self.details,
        }
        if self.capacity_bytes is not None:
            out["headroom_bytes"] = self.headroom_bytes(None, reserve_bytes)
            out["fits"] = out["headroom_bytes"] >= 0
        return out


def _zero_stage(cfg: RunConfig) -> int:
    p = cfg.parallel
    if p.zero_stage is not None:
        return p.zero_stage
    return 1 if p.distributed_optimizer else 0




def _is_moe(cfg: RunConfig, i: int) -> bool:
    return bool(cfg.model.experts) and i % cfg.model.moe_layer_freq == 0


def _torch_loop_peak(comp: dict[str, float], cfg: RunConfig, rec, dense: float, expert: float, first: bool,
                     embedding: float, D: int, De: int, zero: int, ab: int) -> tuple[dict[str, float], str, dict[str, float]]:
    """The components alive at the peak of a PyTorch training loop (any recipe but megatron-mixed),
    the phase of that peak and both phases' totals. Two moments compete:

    * end of forward / start of backward: weights, optimizer states, activations, the loss's
      fp32 buffers, autocast's bf16 weight copies (fp32 parameters computed in 16 bits) — and no
      gradients (``zero_grad(set_to_none=True)``, PyTorch's default, freed them after the last step);
    * optimizer step: weights, gradients, optimizer states and the foreach implementation's
      temporaries (Adam(W): one state-sized tensor, the square root of the second moment).
    """
    sh = lambda n, stage: n / (D if zero >= stage else 1)  # noqa: E731
    matmul_weights = dense + expert - (embedding if first else 0.0) - \
        (cfg.model.seq_length * cfg.model.hidden if first and cfg.model.position_embedding == "learned" else 0.0)
    autocast = 2 * matmul_weights if rec.param_bytes > ab and rec.name != "fsdp2-mixed" else 0.0
    temps = 0.0
    if rec.optimizer in ("adam", "adamw"):
        from traceanalyzer.model.config import DTYPE_BYTES  # noqa: PLC0415

        temps = DTYPE_BYTES[rec.optimizer_state_dtype] * (sh(dense, 1) + expert / (De if zero >= 1 else 1))
    fwd = dict(comp, gradients=0.0, autocast_copies=autocast, optimizer_temporaries=0.0, recompute_working_set=0.0)
    opt = {k: 0.0 for k in comp} | {"weights": comp["weights"], "gradients": comp["gradients"],
                                    "optimizer_states": comp["optimizer_states"], "optimizer_temporaries": temps}
    phases = {"backward_start": fwd, "optimizer_step": opt}
    if comp["recompute_working_set"]:  # full recompute: a layer rebuilt in the backward (logits freed,
        # gradients counted whole: an upper bound)
        phases["backward_recompute"] = dict(fwd, logits=0.0, recompute_working_set=comp["recompute_working_set"],
                                            gradients=comp["gradients"])
    totals = {k: float(sum(v.values())) for k, v in phases.items()}
    worst = max(totals, key=lambda k: totals[k])
    return phases[worst], worst, totals


def estimate_memory(cfg: RunConfig) -> MemoryEstimate:
    """Bytes per GPU by component for every pipeline stage of ``cfg``; the most loaded one decides.

    Needs ``[model]`` layers, hidden, heads, vocab, seq_length and the parallel layout; the
    number of micro-batches (``[batch] global_batch`` with dp) only matters when it is smaller
    than the pipeline depth (unknown: assumed large enough to fill the pipeline). The device
    memory comes from ``[hardware] memory_gb`` or ``gpu`` (None when neither is known).
    See the module docstring for the formulas.
    """
    need = cfg.need
    what = "the memory estimate"
    if cfg.model.fwd_flops_per_sample is not None and cfg.model.layers is None:
        raise ConfigError("the memory model needs a transformer ([model] layers, hidden, heads, vocab, seq_length); "
                          "fwd_flops_per_sample alone does not describe the weights or activations")
    L = need(cfg.model.layers, "[model] layers", what)
    h = need(cfg.model.hidden, "[model] hidden", what)
    need(cfg.model.heads, "[model] heads", what)
    V = need(cfg.model.vocab, "[model] vocab (padded vocabulary size)", what)
    s = need(cfg.model.seq_length, "[model] seq_length", what)
    m, p, r, hw = cfg.model, cfg.parallel, cfg.recompute, cfg.hardware
    t, pp, vp, cp, ep = p.tp, p.pp, p.vp, p.cp, p.ep
    dp = cfg.dp if cfg.dp is not None else 1
    b = cfg.batch.micro_batch
    mb = cfg.microbatches
    zero = _zero_stage(cfg)
    notes: list[str] = []
    if cfg.dp is None:
        notes.append("data-parallel size unknown: taken as 1 (no ZeRO sharding gain)")
    if mb is None and pp > 1:
        notes.append("number of micro-batches unknown: assumed to fill the pipeline")

    rec = cfg.training_recipe()
    torch_loop = not rec.megatron  # a PyTorch training loop: gradients set to None between steps
    if rec.name == "fsdp2-mixed" and p.zero_stage is None:
        zero = 3  # fully_shard
    pb, gb, ob = rec.param_bytes, rec.grad_bytes, rec.optimizer_bytes
    ab = _act_bytes(hw.precision)
    D = dp * cp
    De = max(D // ep, 1)

    # which layers each stage holds
    chunks = pp * vp
    stage_layers: list[list[int]] = [[] for _ in range(pp)]
    for i in range(L):
        stage_layers[(i * chunks // L) % pp].append(i)
    per_chunk = L / chunks

    def layer_act(moe: bool, gran: str, sp: bool | None = None) -> float:
        return float(layer_activation_bytes(
            s, b, h, m.heads, t, sequence_parallel=p.sequence_parallel if sp is None else sp, recompute=gran,
            kv_heads=cfg.kv_heads, head_dim=cfg.head_dim, ffn=cfg.ffn, gated=m.swiglu, cp=cp,
            flash_attention=m.flash_attention, act_bytes=ab, dropout=m.dropout,
            moe_experts=m.experts if moe else 0, moe_top_k=m.top_k,
            moe_ffn=m.moe_ffn if m.moe_ffn is not None else cfg.ffn,
        ))

    gran = r.granularity
    N = r.num_layers or 1
    if gran == "full" and r.method == "block":
        kept_whole = max(per_chunk - min(N, per_chunk), 0.0) / per_chunk  # share of layers not recomputed
    else:
        kept_whole = 0.0

    def stored_per_layer(moe: bool) -> float:
        if gran != "full":
            return layer_act(moe, gran)
        if r.method == "block":
            return (1 - kept_whole) * layer_act(moe, "full") + kept_whole * layer_act(moe, "none")
        return layer_act(moe, "full") / N  # uniform: one input kept per N layers

    s_l = s / cp
    sp_div = t if p.sequence_parallel else 1
    # one dense and one MoE layer, computed once (layout searches call this many times)
    kinds = (False, True) if m.experts else (False,)
    per_kind = {moe: (layer_params(cfg, moe), stored_per_layer(moe),
                      layer_act(moe, "none") if gran == "full" else 0.0) for moe in kinds}
    stages: list[dict[str, float]] = []
    in_flight: list[int] = []
    params_of: list[float] = []
    phase_of: list[str] = []
    phase_totals: list[dict[str, float]] = []
    for st in range(pp):
        layers = stage_layers[st]
        n_moe = sum(1 for i in layers if _is_moe(cfg, i))
        counts = {False: len(layers) - n_moe, True: n_moe}
        dense = expert = acts = biggest = ws_layer = 0.0
        for moe, ((dn, ex), act_l, none_l) in per_kind.items():
            if counts[moe]:
                dense += counts[moe] * dn
                expert += counts[moe] * ex
                acts += counts[moe] * act_l
                biggest = max(biggest, dn + ex)
                ws_layer = max(ws_layer, none_l)
        first, last = st == 0, st == pp - 1
        if first:
            dense += V * h / t
            if m.position_embedding == "learned":
                dense += s * h
        if last:
            if pp > 1 or m.untie_embeddings:
                dense += V * h / t
            dense += cfg.norm_params
        params_of.append(dense + expert)
        w = pb * (dense / (D if zero >= 3 else 1) + expert / (De if zero >= 3 else 1))
        g_ = gb * (dense / (D if zero >= 2 else 1) + expert / (De if zero >= 2 else 1))
        o = ob * (dense / (D if zero >= 1 else 1) + expert / (De if zero >= 1 else 1))
        gathered = (2 * (ab if rec.name == "fsdp2-mixed" else pb) + gb) * biggest if zero >= 3 else 0.0
        n = in_flight_chunks(pp, vp, mb, st)
        in_flight.append(n)
        act = n * acts / vp
        emb = 0.0
        if first:
            mbs_in_flight = n / vp
            emb = mbs_in_flight * (8 * s_l * b + (s_l * b * h / sp_div if m.dropout else 0))
        # fp32 logits of the loss; a PyTorch loop (logits.float() + F.cross_entropy) holds three
        # of that size at the start of the backward: log_softmax's output, the NLL gradient and
        # log_softmax's gradient
        logits = (2 * ab * s_l * b * h / sp_div + (3 if torch_loop else 1) * 4 * s_l * b * V / t) if last else 0.0
        ws = 0.0
        if gran == "full" and layers:
            ws = (1 if r.method == "block" else min(N, len(layers))) * ws_layer
        comp = {"weights": w, "gradients": g_, "optimizer_states": o, "zero3_gathered": gathered,
                "activations": act, "embedding_activations": emb, "logits": logits,
                "recompute_working_set": ws, "autocast_copies": 0.0, "optimizer_temporaries": 0.0}
        if torch_loop:
            comp, ph, ph_tot = _torch_loop_peak(comp, cfg, rec, dense, expert, first, V * h / t, D, De, zero, ab)
            phase_of.append(ph)
            phase_totals.append(ph_tot)
        stages.append(comp)
    totals = [sum(c.values()) for c in stages]
    worst = max(range(pp), key=lambda i: (totals[i], -i))
    cap = None
    if hw.memory_gb is not None or hw.gpu is not None:
        try:
            cap = memory_bytes(hw.gpu, hw.memory_gb)
        except ConfigError:
            notes.append(f"device memory of {hw.gpu!r} unknown: give [hardware] memory_gb")
    if m.flash_attention:
        notes.append("flash attention: no s×s score matrix is stored ([model] flash_attention = false for "
                     "Korthikanti's materialised softmax)")
    details = {
        "recipe": rec.name,
        "bytes_per_param": {"weights": pb, "gradients": gb, "optimizer_states": ob},
        "sharding": {"dense": D, "expert": De},
        "layers_per_stage": [len(x) for x in stage_layers],
        "activation_bytes_per_layer": layer_act(False, gran if gran != "full" else "full"),
        "microbatches": mb,
    }
    if torch_loop:
        details["peak_phase"] = phase_of[worst]
        details["peak_phase_what"] = PHASES[phase_of[worst]]
        details["phase_totals_bytes"] = phase_totals[worst]
        notes.append(f"recipe {rec.name}: peak at the {PHASES[phase_of[worst]]}")
    return MemoryEstimate(components=stages[worst], stage=worst, stages=tuple(stages), capacity_bytes=cap,
                          params=params_of[worst], in_flight=tuple(in_flight), zero_stage=zero,
                          notes=tuple(notes), details=details)
