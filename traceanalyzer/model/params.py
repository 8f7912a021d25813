"""The parameters of one transformer layer, as one GPU holds them: shared by the configuration's
exact parameter count and the memory model (their one definition)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceanalyzer.model.config import RunConfig

def layer_params(cfg: RunConfig, moe: bool) -> tuple[float, float]:
    """(dense, expert) parameters of one layer held by one GPU (after TP and EP)."""
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
