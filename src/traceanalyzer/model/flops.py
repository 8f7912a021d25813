"""FLOPs per training step under an explicit convention.

Public surface: :func:`step_flops` -> :class:`StepFlops` (model and hardware FLOPs of one
optimizer step, split by term, with the convention name attached), :func:`tflops_per_gpu`,
:func:`utilization` and :data:`CONVENTION_NOTES`.

Conventions (Narayanan et al. 2021 App. A; Megatron-LM ``num_floating_point_operations``; PaLM App. B):

``megatron``
    Megatron-LM ``num_floating_point_operations`` since commit 8873b55d (2025-03-06): per token
    ``6·[h·(q + 2·d·n_kv) + q·h]`` per attention layer, ``6·h·E·f`` per dense MLP (E = 3 SwiGLU,
    2 GeLU), ``6·h·E·f_moe·k`` per MoE layer, ``6·h·V`` logits, and the causal core attention
    ``6·q·s`` per layer (QK^T and PV, halved for the mask).
``megatron2024``
    The same code before 2025-03-06 (Megatron README H100 table, NeMo 24.07 tables, issue #1031):
    core attention over the full s×s matrix, ``12·q·s`` per layer; every layer's MLP counted as
    ``f·top_k`` (no dense/MoE split).
``palm``
    Chowdhery et al. 2022, App. B: ``6·N + 12·L·H·Q·T`` with N the parameters that take part in
    matmuls (non-embedding weights + the output projection, i.e. PaLM's tied embedding counted
    once; for MoE the *activated* expert weights). For a dense model this equals
    ``megatron2024`` term by term.

Model FLOPs never count recompute (Megatron's logged TFLOP/s is model FLOPs, MFU-style).
Hardware FLOPs add what recompute executes again: ``full`` = one more forward of every
recomputed transformer layer (Narayanan et al. 2021's 96·B·s·l·h² form), ``selective`` = one
more forward of the core attention (QK^T, PV), ``mlp`` = one more forward of every MLP. A
PyTorch recipe (``[training] recipe`` other than ``megatron-mixed``) checkpoints with
``torch.utils.checkpoint(use_reentrant=False)``, whose recomputation stops before the region's
last matmul (the MLP's output projection): that one is not counted again. Korthikanti et al. 2022 App. A print
``72·B·s·l·h²·(1 + s/3h + V/12hl)`` for selective, i.e. they count the s² term a second time at
full fwd+bwd weight (3× one forward); we count the forward only — the published HFU of the
2022 README (e.g. 52.8 % for 175B) is therefore 0.9 point above ours.

HFU conventions (:data:`HFU_CONVENTIONS`), i.e. how recompute is counted in hardware FLOPs:

``forward`` (default)
    What recompute executes again: one more forward of what is recomputed.
``korthikanti2022``
    Korthikanti et al. 2022 App. A: selective recompute counted as ``72·B·s·l·h²·(1 + s/3h +
    V/12hl)``, i.e. the core attention once more at fwd+bwd weight; full recompute as ours.
    Reproduces the published HFU of their Table 5 / the 2022-2024 Megatron README.
"""

from __future__ import annotations

from dataclasses import dataclass

from traceanalyzer.model.config import CONVENTIONS, RunConfig

HFU_CONVENTIONS = ("forward", "korthikanti2022")
HFU_NOTES = {
    "forward": "recompute counted as the one extra forward it executes",
    "korthikanti2022": "Korthikanti et al. 2022 App. A: selective recompute counted as the s/3h form "
                       "(core attention again at fwd+bwd weight)",
}

CONVENTION_NOTES = {
    "megatron": "Megatron-LM since 2025-03-06: causal attention (s² term halved), model FLOPs only",
    "megatron2024": "Megatron-LM before 2025-03-06 / NeMo 24.07: non-causal attention, model FLOPs only",
    "palm": "PaLM App. B: 6N + 12·L·H·Q·T (non-causal), model FLOPs only",
    "torch": "torch.utils.flop_counter: non-causal attention, its backward 2.5x its forward, model FLOPs only",
    "per-sample": "3 × the configured forward FLOPs per sample × samples per step (fwd, wgrad, dgrad)",
}


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one optimizer step (whole job, all GPUs), fwd + bwd, by term."""

    convention: str
    tokens: int  # tokens per step (global batch × sequence length)
    attn_linear: float  # QKV and output projections
    attn_core: float  # QK^T and PV
    mlp: float  # dense MLP and MoE experts
    logits: float  # output projection to the vocabulary
    recompute: float  # extra FLOPs executed by activation recompute (hardware only)

    @property
    def model(self) -> float:
        return self.attn_linear + self.attn_core + self.mlp + self.logits

    @property
    def hardware(self) -> float:
        return self.model + self.recompute

    @property
    def per_token(self) -> float:
        return self.model / self.tokens

    def as_dict(self) -> dict[str, float | str]:
        return {
            "convention": self.convention,
            "tokens": self.tokens,
            "model": self.model,
            "hardware": self.hardware,
            "attn_linear": self.attn_linear,
            "attn_core": self.attn_core,
            "mlp": self.mlp,
            "logits": self.logits,
            "recompute": self.recompute,
        }


def _moe_layers(cfg: RunConfig, layers: int) -> int:
    m = cfg.model
    if not m.experts:
        return 0
    return sum(1 for i in range(layers) if i % m.moe_layer_freq == 0)


def step_flops(cfg: RunConfig, convention: str | None = None, global_batch: int | None = None,
               hfu: str = "forward") -> StepFlops:
    """Model and hardware FLOPs of one optimizer step for ``cfg`` under ``convention``.

    ``global_batch`` overrides ``[batch] global_batch`` (used by sweeps and by the reconciler
    when the trace tells the batch). ``hfu``: how recompute counts (:data:`HFU_CONVENTIONS`).
    """
    if hfu not in HFU_CONVENTIONS:
        raise ValueError(f"unknown HFU convention {hfu!r}; one of {HFU_CONVENTIONS}")
    conv = convention or cfg.convention
    if conv not in CONVENTIONS:
        raise ValueError(f"unknown FLOPs convention {conv!r}; one of {CONVENTIONS}")
    need = cfg.need
    what = "the model FLOPs per step"
    if cfg.model.fwd_flops_per_sample is not None:  # non-transformer: 3 × forward (fwd, wgrad, dgrad)
        B = need(global_batch if global_batch is not None else cfg.batch.global_batch,
                 "[batch] global_batch", "the FLOPs per step (samples per optimizer step)")
        fwd = float(cfg.model.fwd_flops_per_sample) * B
        rec = fwd if cfg.recompute.granularity == "full" else 0.0
        return StepFlops("per-sample", B, 0.0, 0.0, 3 * fwd, 0.0, rec)
    L = need(cfg.model.layers, "[model] layers", what)
    h = need(cfg.model.hidden, "[model] hidden", what)
    need(cfg.model.heads, "[model] heads", what)
    s = need(cfg.model.seq_length, "[model] seq_length", what)
    V = need(cfg.model.vocab, "[model] vocab (padded vocabulary size)", "the logits FLOPs")
    B = need(global_batch if global_batch is not None else cfg.batch.global_batch,
             "[batch] global_batch", "the FLOPs per step (sequences per optimizer step)")
    f = cfg.ffn
    d = cfg.head_dim
    n_h, n_kv = cfg.model.heads, cfg.kv_heads
    q = d * n_h
    E = 3 if cfg.model.swiglu else 2
    k = cfg.model.top_k if cfg.model.experts else 1
    f_moe = cfg.model.moe_ffn if cfg.model.moe_ffn is not None else f
    T = B * s

    attn_linear_tok = 6 * (h * (q + 2 * d * n_kv) + q * h) * L
    if conv in ("megatron", "torch"):
        n_moe = _moe_layers(cfg, L)
        mlp_tok = 6 * h * E * (f * (L - n_moe) + f_moe * k * n_moe)
        core_tok = 6 * q * s * L  # causal: half of the s×s scores
        if conv == "torch":  # FlopCounterMode: non-causal, forward 2·s·(q + q), backward 2.5× that
            core_tok = 14 * q * s * L
    elif conv == "megatron2024":
        mlp_tok = 6 * h * E * f * k * L  # 2024 code: every layer f·top_k, experts sized by ffn_hidden_size
        core_tok = 12 * q * s * L
    else:  # palm: 6N with N the matmul weights a token goes through, + 12·L·H·Q·T
        n_moe = _moe_layers(cfg, L)
        mlp_tok = 6 * h * E * (f * (L - n_moe) + f_moe * k * n_moe)
        core_tok = 12 * q * s * L
    logits_tok = 6 * h * V

    attn_linear, attn_core, mlp, logits = (float(x) * T for x in (attn_linear_tok, core_tok, mlp_tok, logits_tok))
    gran = cfg.recompute.granularity
    core_fwd = attn_core * (4 / 14 if conv == "torch" else 1 / 3)  # one forward of the core attention
    # PyTorch's non-reentrant checkpoint stops recomputing once the last tensor the backward needs
    # exists: the region's last matmul (fc2, whose output nobody saved) does not run again.
    # Megatron's own checkpoint recomputes the whole region.
    early_stop = cfg.training.recipe not in (None, "megatron-mixed")
    mlp_again = mlp * ((E - 1) / E if early_stop else 1.0)
    if gran == "full":
        recompute = ((attn_linear + mlp_again) / 3 + core_fwd) * cfg.recomputed_layers() / L
    elif gran == "selective":
        recompute = attn_core if hfu == "korthikanti2022" else core_fwd
    elif gran == "mlp":
        recompute = mlp_again / 3
    else:
        recompute = 0.0
    return StepFlops(conv, T, attn_linear, attn_core, mlp, logits, recompute)


def tflops_per_gpu(flops_per_step: float, step_time_s: float, num_gpus: int) -> float:
    """Achieved TFLOP/s per GPU: FLOPs of one step over (step time × GPUs)."""
    return flops_per_step / (step_time_s * num_gpus) / 1e12


def utilization(flops_per_step: float, step_time_s: float, num_gpus: int, peak_tflops: float) -> float:
    """MFU (model FLOPs) or HFU (hardware FLOPs) as a fraction of the dense peak."""
    return tflops_per_gpu(flops_per_step, step_time_s, num_gpus) / peak_tflops
