"""Size-dependent bandwidth for the analytic model: the cluster's nccl-tests curve instead of one figure.

Public surface: :func:`message_sizes` (the size of one NCCL call of each communication family of
:func:`traceanalyzer.model.parallel.comm_volumes`) and :func:`with_baseline` (the same
:class:`~traceanalyzer.model.parallel.Comm` list with each bandwidth read off a baseline at that
size, interpolated in log2(size) by :func:`traceanalyzer.baselines.busbw_at`).

Message sizes (nccl-tests' "size": the whole buffer of one call), with S = one activation
``[s/cp, b, h]`` in the activation dtype:

* TP: S per all-reduce (no SP), S per all-gather / reduce-scatter (SP; both curves, equal bytes);
* CP: the local K and V chunk, ``2·(s/cp)·b·n_kv·d/t`` elements (send/recv);
* EP: the local tokens × top_k × h per all-to-all;
* PP: S/t per send/recv;
* DP: one gradient bucket. Megatron-Core's default bucket is ``max(40000000, 1000000 · dp)``
  parameters when ``overlap_grad_reduce`` is on, and a single bucket of all the GPU's
  parameters when it is off (``DistributedDataParallelConfig.bucket_size``); gradients in the
  reduction dtype (fp32 by default), parameters gathered in bf16.

Scope: a group inside one node (TP within a node, CP/EP/DP groups that fit in a node) reads
only intra-node curves, a group across nodes (DP and PP across nodes) only inter-node ones;
curves of unknown scope (an nccl-tests output without its ``Rank`` lines) serve both, said in
the note.

Bytes per step and the exposed share are unchanged; only the bandwidth (and so the time) moves.
A family whose collective is missing from the baseline in its scope, or whose message size lies
outside the sizes the baseline measured (no extrapolation), keeps the hardware-table figure, and
its note says so.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.parallel import _ACT_BYTES, Comm, _matmul_params


def message_sizes(cfg: RunConfig, c: Comm) -> tuple[list[tuple[str, float]], int]:
    """([(collective, bytes of one call), ...], ranks in the group) for one communication family."""
    m, p, hw = cfg.model, cfg.parallel, cfg.hardware
    ab = _ACT_BYTES[hw.precision]
    s, b, h = m.seq_length, cfg.batch.micro_batch, m.hidden
    t, cp, ep, pp = p.tp, p.cp, p.ep, p.pp
    S = ab * (s / cp) * b * h
    if c.dim == "tp":
        calls = [("all_reduce", S)] if not p.sequence_parallel else [("all_gather", S), ("reduce_scatter", S)]
        return calls, t
    if c.dim == "cp":
        return [("send_recv", 2 * (s / cp) * b * (cfg.kv_heads or 1) * (cfg.head_dim or 0) * ab / t)], cp
    if c.dim == "ep":
        tokens = s / cp * b / (t if p.sequence_parallel else 1)
        return [("all_to_all", tokens * m.top_k * h * ab)], ep
    if c.dim == "pp":
        return [("send_recv", S / t)], 2
    dp = cfg.dp or 1
    layer_w, expert_w, out_w = _matmul_params(cfg)
    psi = (layer_w + expert_w / ep) / (t * pp) + out_w / t  # a GPU's gradients: dense + its experts
    bucket = min(psi, max(40_000_000, 1_000_000 * dp)) if p.overlap_grad_reduce else psi
    g = 4 if p.grad_reduce_dtype == "fp32" else 2
    if c.what.startswith("all-gather"):
        return [("all_gather", bucket * 2)], dp
    return [("reduce_scatter" if c.what.startswith("reduce-scatter") else "all_reduce", bucket * g)], dp


def with_baseline(comms: list[Comm], cfg: RunConfig, baseline: pl.DataFrame) -> list[Comm]:
    """``comms`` with each bandwidth taken from ``baseline`` (an nccl-tests frame) at the family's
    message size; equal bytes per call type (SP's all-gather and reduce-scatter) combine harmonically."""
    from traceanalyzer.baselines.curve import busbw_at

    out = []
    for c in comms:  # a handful of communication families
        calls, n = message_sizes(cfg, c)
        scope = "intra" if c.scope == "intra-node" else "inter"
        bws, labels = [], []
        for coll, size in calls:
            at = busbw_at(baseline, coll, [int(size)], nranks=n, scope=scope).row(0, named=True)
            if at["baseline_gbps"] is None or at["baseline_gbps"] <= 0:
                other = baseline.filter(pl.col("collective") == coll).height > 0
                why = (f"only {'inter' if scope == 'intra' else 'intra'}-node {coll} curves in the baseline, this group is "
                       f"{c.scope}" if other else f"no {coll} in the baseline")
                bws, labels = [], [f"{why}: hardware-table {c.gbps:g} GB/s kept"]
                break
            if at["extrapolated"]:
                bws, labels = [], [f"{coll} of {size / 2**20:.3g} MiB is outside the baseline's measured sizes: "
                                   f"hardware-table {c.gbps:g} GB/s kept"]
                break
            bws.append(at["baseline_gbps"])
            where = "" if at["baseline_scope"] == scope else " (curve of unknown scope)"
            labels.append(f"{coll} {at['baseline_gbps']:.1f} GB/s at {size / 2**20:.3g} MiB{where}")
        if not bws:
            out.append(replace(c, note=f"{c.note}; {labels[0]}"))
            continue
        gbps = len(bws) / sum(1 / x for x in bws)
        out.append(replace(c, gbps=gbps, note=f"{c.note}; nccl-tests baseline: {', '.join(labels)}"))
    return out
