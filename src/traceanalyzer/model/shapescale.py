"""Kernel time by what drives it: the anchor trace's compute, split into families, each carried to a
new shape by its own driver.

Public surface: :data:`FAMILIES`, :data:`FAMILY_DRIVERS`, :func:`scale_families` (the seconds
per step of each family and the anchor / new configurations -> the new seconds, with the rule
of each), :func:`extrapolation` (what a prediction extrapolates beyond the anchor's shapes).
The seconds of each family are measured on a trace by
:func:`traceanalyzer.reconciliation.anchor.kernel_families`; this module takes numbers and
configurations only.

Families (each kernel by the host op that launched it; the window by the host ranges of the step):

``gemm``
    kernels of ``aten::mm/addmm/bmm/baddbmm`` (and ``linear`` / ``matmul`` where they launch
    themselves): time ∝ GEMM FLOPs of the model (tokens × per-token FLOPs). The GEMMs of a
    transformer at these sizes run at a throughput that does not depend on the micro-batch
    (measured on one H200: 10.4–11.2 µs per 1,000 tokens per GEMM-heavy layer of the 1.4 B
    model from micro-batch 1 to 16), so time per FLOP is kept.
``attention``
    kernels of the scaled-dot-product attention ops (cuDNN / flash / efficient, forward and
    backward): time ∝ attention FLOPs (``b·s²·heads·head_dim``): per token it grows with the
    sequence length.
``optimizer``
    kernels launched inside ``Optimizer.step`` (the foreach kernels of AdamW...): a fixed cost
    per step ∝ parameters, independent of the batch;
``grad_sync``
    kernels launched between the end of the backward and the optimizer step (flattening the
    gradients for an all-reduce): ∝ parameters, and none when the new configuration does not
    all-reduce its gradients (``[parallel] grad_allreduce = false``).
``elementwise``
    everything else under compute (norms, activations, residual adds, copies, the loss): time ∝
    tokens (× vocabulary for the loss, which is fixed per model).

Host-bound check: the host's time to launch one step (measured with the families) is compared
with the predicted GPU time (:func:`traceanalyzer.model.whatif.project`); a target shorter than
it is host-bound.
"""

from __future__ import annotations

from typing import Any

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.flops import step_flops

FAMILIES = ("gemm", "attention", "optimizer", "grad_sync", "elementwise")
FAMILY_DRIVERS = {
    "gemm": "GEMM FLOPs (tokens × per-token matmul FLOPs)",
    "attention": "attention FLOPs (micro-batches × b·s²·heads·head_dim)",
    "optimizer": "parameters (fixed per step)",
    "grad_sync": "parameters (fixed per step), 0 without a gradient all-reduce",
    "elementwise": "tokens",
}


def _drivers(cfg: RunConfig) -> dict[str, float]:
    fl = step_flops(cfg, "torch")
    g = cfg.num_gpus or 1
    tokens = fl.tokens / g
    try:
        params = float(cfg.param_count())
    except Exception:  # noqa: BLE001 - a model the count cannot size: parameters taken as unchanged
        params = 1.0
    sync = params if cfg.grad_allreduce else 0.0
    return {"gemm": (fl.attn_linear + fl.mlp + fl.logits) / g, "attention": fl.attn_core / g,
            "optimizer": params, "grad_sync": sync, "elementwise": tokens}


def scale_families(seconds: dict[str, float], old: RunConfig, new: RunConfig) -> dict[str, tuple[float, str]]:
    """Each family's seconds per step carried from ``old`` to ``new`` by its driver
    (:data:`FAMILY_DRIVERS`): {family: (seconds, rule)}."""
    do, dn = _drivers(old), _drivers(new)
    out = {}
    for f in FAMILIES:
        r = dn[f] / do[f] if do[f] else (1.0 if not dn[f] else 0.0)
        out[f] = (seconds.get(f, 0.0) * r, f"× {FAMILY_DRIVERS[f]} {r:.4g}×")
    return out


#: GEMMs below this many GFLOP per call do not reach the GPU's GEMM throughput (an H200 runs a
#: 5 GFLOP bf16 GEMM at ~470 TFLOP/s, 20 GFLOP at ~680, 300 GFLOP at ~800): per-token time then
#: falls as the micro-batch grows, which the flat per-token rule does not follow
SMALL_GEMM_GFLOP = 50.0


def extrapolation(anchor: RunConfig, new: RunConfig, kernels: dict[str, Any] | None = None) -> list[str]:
    """What the prediction extrapolates beyond the shapes the anchor measured."""
    out = []
    g = (kernels or {}).get("gemm_median_gflop")
    if g is not None and g < SMALL_GEMM_GFLOP and new.batch.micro_batch * (new.model.seq_length or 0) > \
            anchor.batch.micro_batch * (anchor.model.seq_length or 0):
        out.append(f"the anchor's GEMMs are small (median {g:.3g} GFLOP per call, below ~{SMALL_GEMM_GFLOP:.0f}): larger "
                   "ones run faster per FLOP, so the predicted GEMM time is an upper bound")
    a, n = anchor, new
    if n.model.hidden != a.model.hidden or n.ffn != a.ffn or n.parallel.tp != a.parallel.tp:
        out.append("hidden / FFN / TP differ from the anchor's: GEMM time is carried by FLOPs at the anchor's "
                   "throughput, without a model of the new GEMM shapes")
    if n.batch.micro_batch > a.batch.micro_batch:
        out.append(f"micro-batch {n.batch.micro_batch} is beyond the anchor's {a.batch.micro_batch}: GEMM and "
                   "elementwise time are extrapolated per token")
    if n.batch.micro_batch < a.batch.micro_batch and n.batch.micro_batch * (n.model.seq_length or 0) < 2048:
        out.append(f"micro-batch {n.batch.micro_batch} × sequence {n.model.seq_length} = "
                   f"{n.batch.micro_batch * (n.model.seq_length or 0)} tokens per micro-batch: small GEMMs may fill "
                   "the GPU's SMs less than the anchor's (time per token assumed flat)")
    if (n.model.seq_length or 0) != (a.model.seq_length or 0):
        out.append(f"sequence {n.model.seq_length} differs from the anchor's {a.model.seq_length}: attention time is "
                   "extrapolated by its FLOPs (∝ s²), at the anchor's attention throughput")
    return out
