"""Pipeline bubble and per-step communication volumes of a parallel layout.

Public surface: :func:`bubble_fraction`, :func:`comm_volumes` -> list of :class:`Comm`.

Bubble (Narayanan et al. 2021 §2.2, arXiv:2104.04473): with p stages, m microbatches per
pipeline and v model chunks per GPU (interleaved 1F1B), the bubble time is
``(p−1)/(v·m)`` of the ideal (bubble-free) time, i.e. ``x/(1+x)`` of the step.

Communication (ring algorithms, nccl-tests
PERFORMANCE.md: all-reduce moves 2(n−1)/n·S per GPU, all-gather / reduce-scatter / all-to-all
(n−1)/n·S). S = one activation [s/cp, b, h] in the activation dtype. Bytes are per GPU per
optimizer step; time = bytes / bus bandwidth. Which part is *exposed* (on the critical path) is
an assumption stated in each entry's ``note``:

* TP without SP: 2 all-reduces per layer forward (+2 per recomputed layer), exposed; 2 in
  backward, overlapped with the wgrad GEMM (Megatron's async TP all-reduce).
  TP with SP: forward 2 AG + 2 RS (+ the same per recomputed layer) and the backward AG of the
  row-parallel gradients exposed; backward RS and the AG re-gather for wgrad overlapped.
  ``tp_comm_overlap`` (userbuffers) hides all of it.
* PP: forward activation and backward gradient per microbatch per chunk boundary, S/t each
  (scatter/gather or SP), overlapped (Megatron's default p2p overlap).
* DP: gradient all-reduce 2(d−1)/d·g·Ψ (g = 4 bytes fp32 reduction, Megatron's default for bf16)
  or, with the distributed optimizer, reduce-scatter (d−1)/d·g·Ψ + all-gather of bf16 params
  (d−1)/d·2Ψ; overlapped iff ``overlap_grad_reduce`` / ``overlap_param_gather``. Ψ = the dense
  weights a GPU holds; MoE expert weights count separately: a GPU holds experts/e of them and
  reduces them over the d/e ranks that hold the same experts (2(d/e−1)/(d/e)·g·Ψ_experts).
* CP (ring attention): per attention layer per microbatch, forward (c−1) transfers of the local
  KV chunk, backward twice that (+1 forward per recomputed layer); overlapped with attention.
* EP: dispatch + combine all-to-all, forward and backward (+2 per recomputed MoE layer), each
  (e−1)/e of the local tokens × top_k × h; exposed.

Group placement follows Megatron's rank order (tp fastest, then cp, ep/dp, pp): a group whose
ranks span more than ``gpus_per_node`` uses the per-GPU network bandwidth.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.hardware import bandwidths

_ACT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "tf32": 4, "fp32": 4}


def bubble_fraction(pp: int, microbatches: int, vp: int = 1) -> float:
    """Pipeline bubble time over ideal time, (p−1)/(v·m) (Narayanan et al. 2021, §2.2)."""
    if pp <= 1:
        return 0.0
    if microbatches < 1:
        raise ValueError("microbatches must be at least 1")
    return (pp - 1) / (vp * microbatches)


@dataclass(frozen=True)
class Comm:
    dim: str  # "tp", "pp", "dp", "cp", "ep"
    what: str  # collective(s)
    bytes: float  # per GPU per step
    exposed_bytes: float  # part assumed on the critical path
    gbps: float  # bandwidth used
    scope: str  # "intra-node" | "inter-node"
    note: str

    @property
    def time_s(self) -> float:
        return self.bytes / (self.gbps * 1e9)

    @property
    def exposed_s(self) -> float:
        return self.exposed_bytes / (self.gbps * 1e9)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["time_s"] = self.time_s
        d["exposed_s"] = self.exposed_s
        return d


def _matmul_params(cfg: RunConfig) -> tuple[float, float, float]:
    """(dense matmul weights of all transformer layers, weights of all experts, output projection)."""
    m = cfg.model
    h, L = m.hidden, m.layers
    d, n_h, n_kv = cfg.head_dim, m.heads, cfg.kv_heads
    E = 3 if m.swiglu else 2
    attn = h * (d * n_h + 2 * d * n_kv) + d * n_h * h
    experts = 0
    if m.experts:
        n_moe = sum(1 for i in range(L) if i % m.moe_layer_freq == 0)
        f_moe = m.moe_ffn if m.moe_ffn is not None else cfg.ffn
        mlp = E * h * (cfg.ffn * (L - n_moe))
        experts = E * h * f_moe * m.experts * n_moe
    else:
        mlp = E * h * cfg.ffn * L
    return float(attn * L + mlp), float(experts), float(h * (m.vocab or 0))


def comm_volumes(cfg: RunConfig) -> list[Comm]:
    """Per-GPU communication of one optimizer step, one entry per collective family."""
    need = cfg.need
    what = "the communication volumes"
    p, hw = cfg.parallel, cfg.hardware
    L = need(cfg.model.layers, "[model] layers", what)
    h = need(cfg.model.hidden, "[model] hidden", what)
    s = need(cfg.model.seq_length, "[model] seq_length", what)
    m = need(cfg.microbatches, "[batch] global_batch (and dp or [hardware] num_gpus)",
             "the number of microbatches per step (communication volumes, pipeline bubble)")
    dp = need(cfg.dp, "[parallel] dp or [hardware] num_gpus", what)
    intra, inter = bandwidths(hw.gpu, hw.intra_node_gbps, hw.inter_node_gbps)
    gpn = hw.gpus_per_node
    b = cfg.batch.micro_batch
    ab = _ACT_BYTES[hw.precision]
    t, pp, cp, ep, v = p.tp, p.pp, p.cp, p.ep, p.vp
    S = ab * (s / cp) * b * h
    layers_gpu = L / pp
    rec_gpu = cfg.recomputed_layers() / pp

    def place(span: int) -> tuple[float, str]:
        return (intra, "intra-node") if span <= gpn else (inter, "inter-node")

    out: list[Comm] = []
    if t > 1:
        bw, scope = place(t)
        ring = (t - 1) / t * S
        if not p.sequence_parallel:
            fwd = m * (2 * layers_gpu + 2 * rec_gpu) * 2 * ring
            bwd = m * 2 * layers_gpu * 2 * ring
            what_ = "all-reduce (no SP)"
            note = "forward (and recompute) all-reduces exposed; backward all-reduces overlapped with wgrad"
        else:
            fwd = m * (4 * layers_gpu + 4 * rec_gpu + 2 * layers_gpu) * ring
            bwd = m * 4 * layers_gpu * ring
            what_ = "all-gather + reduce-scatter (SP)"
            note = "forward AG/RS (and recompute) + backward AG of row-parallel grads exposed; RS and wgrad re-gather overlapped"
        exposed = 0.0 if p.tp_comm_overlap else fwd
        if p.tp_comm_overlap:
            note = "hidden by --tp-comm-overlap (userbuffers GEMM/collective overlap)"
        out.append(Comm("tp", what_, fwd + bwd, exposed, bw, scope, note))
    if cp > 1:
        bw, scope = place(t * cp)
        kv = 2 * (s / cp) * b * (cfg.kv_heads or 1) * (cfg.head_dim or 0) * ab / t
        total = m * (3 * layers_gpu + rec_gpu) * (cp - 1) * kv
        out.append(Comm("cp", "ring attention KV p2p", total, 0.0, bw, scope, "overlapped with attention compute"))
    if ep > 1 and cfg.model.experts:
        bw, scope = place(t * cp * ep)
        moe_gpu = sum(1 for i in range(L) if i % cfg.model.moe_layer_freq == 0) / pp
        rec_frac = rec_gpu / layers_gpu if layers_gpu else 0.0
        tokens = s / cp * b / (t if p.sequence_parallel else 1)
        one = (ep - 1) / ep * tokens * cfg.model.top_k * h * ab
        total = m * moe_gpu * (4 + 2 * rec_frac) * one
        out.append(Comm("ep", "all-to-all dispatch/combine", total, total, bw, scope, "token all-to-all on the critical path"))
    if pp > 1:
        bw, scope = place(t * cp * dp * pp)
        total = 2 * v * m * S / t
        out.append(Comm("pp", "p2p send/recv", total, 0.0, bw, scope,
                        "activations fwd + gradients bwd, S/t per transfer; overlapped (Megatron default)"))
    if dp > 1:
        bw, scope = place(t * cp * dp)
        layer_w, expert_w, out_w = _matmul_params(cfg)
        # dense weights: reduced over the dp ranks; expert weights: each GPU holds experts/ep of
        # them, reduced over the dp/ep ranks that hold the same experts (expert data parallelism)
        psi = layer_w / (t * pp) + out_w / t  # the last stage also holds the output layer
        psi_e = expert_w / (t * pp * ep) if ep <= dp else 0.0
        dp_e = max(dp // ep, 1)
        g = 4 if p.grad_reduce_dtype == "fp32" else 2
        ring = (dp - 1) / dp
        ring_e = (dp_e - 1) / dp_e
        if p.distributed_optimizer:
            rs = ring * g * psi + ring_e * g * psi_e
            ag = ring * 2 * psi + ring_e * 2 * psi_e
            out.append(Comm("dp", "reduce-scatter grads", rs, 0.0 if p.overlap_grad_reduce else rs, bw, scope,
                            "overlapped with backward" if p.overlap_grad_reduce else "after backward, exposed"))
            out.append(Comm("dp", "all-gather params", ag, 0.0 if p.overlap_param_gather else ag, bw, scope,
                            "overlapped with next forward" if p.overlap_param_gather else "after optimizer step, exposed"))
        else:
            ar = 2 * ring * g * psi + 2 * ring_e * g * psi_e
            out.append(Comm("dp", "all-reduce grads", ar, 0.0 if p.overlap_grad_reduce else ar, bw, scope,
                            "overlapped with backward" if p.overlap_grad_reduce else "after backward, exposed"))
    return out
