"""FLOPs and bytes of one op from its name and recorded input shapes (``record_shapes=True``).

Public surface: :func:`op_cost` (one op name and its ``Input Dims`` as JSON text -> FLOPs and
the elements it reads and writes, or ``None`` when the op has no formula or the shapes do not
fit it) and :func:`cost_frame` (a frame of distinct ``name, input_dims`` -> the same as columns).

Formulas (a multiply-add is 2 FLOPs; the usual convention of MLPerf and TraceLens):

* ``aten::mm`` ``[M,K] x [K,N]``: ``2·M·K·N``; elements ``M·K + K·N + M·N``;
* ``aten::addmm`` ``(bias, [M,K], [K,N])``: ``2·M·K·N`` (the bias add is not counted);
  elements as mm plus the bias;
* ``aten::bmm`` ``[B,M,K] x [B,K,N]`` and ``aten::baddbmm`` ``(bias, ...)``: ``2·B·M·K·N``;
* ``aten::linear`` ``(x[..., K], W[N, K], bias?)``: ``2·prod(x[:-1])·K·N``;
* ``aten::matmul``: 2-D as mm; N-D × 2-D as linear without bias; N-D × N-D as bmm
  (broadcast batch);
* scaled-dot-product attention, forward (``aten::_scaled_dot_product_*attention``,
  ``aten::scaled_dot_product_attention``, ``*flash_attention*`` forward ops) with
  ``q [B,H,Lq,D]``, ``k [B,H,Lk,D]``, ``v [B,H,Lk,Dv]``: ``2·B·H·Lq·Lk·(D + Dv)`` (``Q·Kᵀ`` and
  ``P·V``); the causal mask is not in the recorded shapes, so a causal kernel does half this
  work (this is ``torch.utils.flop_counter``'s count: non-causal). The backward ops
  (``grad_out, q, k, v, ...``): ``2·B·H·Lq·Lk·(3·D + 2·Dv)`` (five matmuls, as
  ``torch.utils.flop_counter``: 2.5 × the forward when ``D = Dv``). The same formulas cover
  cuDNN's ``aten::_cudnn_attention_forward/backward`` and flash-attn's own
  ``flash_attn::_flash_attn_forward/backward`` (``[B, L, H, D]``). These ops nest (SDPA calls
  ``_scaled_dot_product_cudnn_attention``, which calls ``_cudnn_attention_forward``): a caller
  counts one op per call (:func:`traceanalyzer.reconciliation.gemm.attention_flops` the outermost,
  the op table the one that launched the kernels);
* convolutions: the output size depends on stride and padding, which Kineto records as
  scalars without values, so they get no formula (``None``), and neither do elementwise or
  normalisation ops (the parser keeps shapes only of GEMM / convolution / attention ops).

Bytes are elements × the element size of the precision (2 for bf16/fp16, 4 for fp32/tf32, 1 for
fp8): Kineto's ``Input type`` is not kept, so the precision is the caller's (see
:mod:`.roofline`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import orjson
import polars as pl

#: the ops with a formula (a name matching one of these)
_GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::linear", "aten::matmul"}
_ATTN_FWD = re.compile(
    r"(?i)^(aten::(_?scaled_dot_product(_flash|_efficient|_cudnn)?_attention(_for_cpu)?|_flash_attention_forward"
    r"|_efficient_attention_forward|_cudnn_attention_forward)|flash_attn::_flash_attn_forward)$"
)
_ATTN_BWD = re.compile(
    r"(?i)^(aten::(_scaled_dot_product(_flash|_efficient|_cudnn)?_attention(_for_cpu)?_backward|_flash_attention_backward"
    r"|_efficient_attention_backward|_cudnn_attention_backward)|flash_attn::_flash_attn_backward)$"
)
#: a regular expression (polars / ``re``) of every attention op name with a formula
ATTENTION_OPS = f"(?i)({_ATTN_FWD.pattern[4:]})|({_ATTN_BWD.pattern[4:]})"
#: attention ops that take ``[B, L, H, D]`` (the others ``[B, H, L, D]``)
_BLHD = re.compile(r"(?i)^(aten::_flash_attention_|aten::_efficient_attention_|flash_attn::)")


@dataclass(frozen=True)
class OpCost:
    """FLOPs and elements read + written by one call of an op."""

    kind: str  # "gemm" or "attention"
    flops: int
    elements: int


def _dims(text: str | None) -> list | None:
    if not text:
        return None
    try:
        v = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return v if isinstance(v, list) else None


def _shape(x) -> list[int] | None:
    """A tensor shape (a list of ints), else None (a scalar, a tensor list, a missing tensor)."""
    if isinstance(x, list) and x and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in x):
        return x
    return None


def _gemm(name: str, dims: list) -> OpCost | None:
    shapes = [_shape(d) for d in dims]
    if name == "aten::mm" and len(shapes) >= 2 and shapes[0] and shapes[1] and len(shapes[0]) == len(shapes[1]) == 2:
        (m, k), (k2, n) = shapes[0], shapes[1]
        if k != k2:
            return None
        return OpCost("gemm", 2 * m * k * n, m * k + k * n + m * n)
    if name == "aten::addmm" and len(shapes) >= 3 and shapes[1] and shapes[2] and len(shapes[1]) == len(shapes[2]) == 2:
        (m, k), (k2, n) = shapes[1], shapes[2]
        if k != k2:
            return None
        bias = math.prod(shapes[0]) if shapes[0] else 0
        return OpCost("gemm", 2 * m * k * n, m * k + k * n + m * n + bias)
    if name in ("aten::bmm", "aten::baddbmm"):
        a, b = (shapes[0], shapes[1]) if name == "aten::bmm" else (shapes[1] if len(shapes) > 1 else None, shapes[2] if len(shapes) > 2 else None)
        if not (a and b) or len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
            return None
        bsz, m, k = a
        n = b[2]
        bias = math.prod(shapes[0]) if name == "aten::baddbmm" and shapes[0] else 0
        return OpCost("gemm", 2 * bsz * m * k * n, bsz * (m * k + k * n + m * n) + bias)
    if name == "aten::linear" and len(shapes) >= 2 and shapes[0] and shapes[1] and len(shapes[1]) == 2:
        x, w = shapes[0], shapes[1]
        n, k = w
        if x[-1] != k:
            return None
        rows = math.prod(x[:-1])
        bias = math.prod(shapes[2]) if len(shapes) > 2 and shapes[2] else 0
        return OpCost("gemm", 2 * rows * k * n, rows * k + n * k + rows * n + bias)
    if name == "aten::matmul" and len(shapes) >= 2 and shapes[0] and shapes[1]:
        a, b = shapes[0], shapes[1]
        if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
            return None
        m, k, n = a[-2], a[-1], b[-1]
        batch_a, batch_b = a[:-2], b[:-2]
        if not batch_b:  # N-D x 2-D: one GEMM over the flattened rows
            rows = math.prod(a[:-1])
            return OpCost("gemm", 2 * rows * k * n, rows * k + k * n + rows * n)
        if len(batch_a) != len(batch_b):
            return None
        batch = [max(x, y) if 1 in (x, y) else (x if x == y else -1) for x, y in zip(batch_a, batch_b)]
        if -1 in batch:
            return None
        bsz = math.prod(batch)
        return OpCost("gemm", 2 * bsz * m * k * n, math.prod(batch_a) * m * k + math.prod(batch_b) * k * n + bsz * m * n)
    return None


def _attention(name: str, dims: list) -> OpCost | None:
    bwd = bool(_ATTN_BWD.match(name))
    shapes = [_shape(d) for d in dims]
    # forward: q, k, v first; backward: grad_out, q, k, v
    qkv = shapes[1:4] if bwd else shapes[:3]
    if len(qkv) < 3 or not all(s and len(s) == 4 for s in qkv):
        return None
    q, k, v = qkv
    if _BLHD.match(name):
        q, k, v = ([s[0], s[2], s[1], s[3]] for s in (q, k, v))
    b, h, lq, d = q
    lk, dv = k[2], v[3]
    if k[3] != d or v[2] != lk:
        return None
    fwd = 2 * b * h * lq * lk * (d + dv)
    elements = b * h * (lq * d + lk * d + lk * dv + lq * dv)
    if bwd:  # torch.utils.flop_counter: QKᵀ again, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q
        return OpCost("attention", 2 * b * h * lq * lk * (3 * d + 2 * dv), 2 * elements)
    return OpCost("attention", fwd, elements)


def op_cost(name: str, input_dims: str | None) -> OpCost | None:
    """FLOPs and elements of one call of ``name`` with ``input_dims`` (Kineto ``Input Dims`` as
    compact JSON text), or None when there is no formula for the op or the shapes do not fit it.

    >>> op_cost("aten::mm", "[[128,256],[256,64]]")
    OpCost(kind='gemm', flops=4194304, elements=57344)
    """
    dims = _dims(input_dims)
    if dims is None:
        return None
    if name in _GEMM:
        return _gemm(name, dims)
    if _ATTN_FWD.match(name) or _ATTN_BWD.match(name):
        return _attention(name, dims)
    return None


def cost_frame(ops: pl.DataFrame) -> pl.DataFrame:
    """``name, input_dims`` (distinct pairs) -> with ``op_kind`` (gemm / attention / null),
    ``flops`` and ``elements`` (Int64, null without a formula). A loop over distinct shapes, not
    over events: a training step has a few hundred distinct (op, shape) pairs."""
    rows = ops.select("name", "input_dims").unique()
    costs = [op_cost(n, d) for n, d in rows.iter_rows()]
    return rows.with_columns(
        pl.Series("op_kind", [c.kind if c else None for c in costs], dtype=pl.String),
        pl.Series("flops", [c.flops if c else None for c in costs], dtype=pl.Int64),
        pl.Series("elements", [c.elements if c else None for c in costs], dtype=pl.Int64),
    )
