"""Layout search: every valid layout of the same model on the same GPUs and global batch, ranked.

Public surface: :func:`enumerate_layouts` (the valid layouts as a polars frame, built as one
cross join and filtered with expressions) and :func:`search_layouts` (each layout carried from
an anchor by :func:`traceanalyzer.model.whatif.project`, its memory per GPU set against the
GPU's, ranked by predicted TFLOP/s/GPU).

What is enumerated (the knobs Megatron-LM exposes):

* ``tp`` — powers of two up to the GPUs of one node, dividing the attention heads (and the KV
  heads dividing TP or TP dividing them);
* ``pp`` — divisors of the layer count up to 64; ``vp`` (interleaved stages) 1–8 with ``pp > 1``
  and ``pp·vp`` dividing the layers;
* ``cp`` — 1, 2, 4, 8 dividing the sequence; ``ep`` — divisors of the experts that divide DP
  (MoE models only);
* ``dp`` = GPUs / (tp·pp·cp), a whole number; ``micro_batch`` 1, 2, 4, 8 with the global batch a
  multiple of dp·micro_batch;
* ``recompute`` none / selective / full, ``sequence_parallel`` (only with tp > 1),
  ``distributed_optimizer``.

Constraints given with ``fixed`` (``--set`` beside ``--search``) pin a knob to one value.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import polars as pl

from traceanalyzer.errors import ConfigError
from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.whatif import Anchor, memory_summary, project
from traceanalyzer.queries import query_engine

KNOBS = ("tp", "pp", "vp", "cp", "ep", "micro_batch", "recompute", "sequence_parallel", "distributed_optimizer")
MICRO_BATCHES = (1, 2, 4, 8)
VPS = (1, 2, 3, 4, 5, 6, 8)
CPS = (1, 2, 4, 8)


def _col(name: str, values: list, dtype: pl.DataType) -> pl.LazyFrame:
    return pl.LazyFrame({name: pl.Series(values, dtype=dtype)})


def enumerate_layouts(cfg: RunConfig, fixed: dict[str, Any] | None = None) -> pl.DataFrame:
    """Every valid layout of ``cfg``'s model on its GPU count and global batch.

    ``fixed``: knob -> value (keys of :data:`KNOBS`) pinned to one value. Returns one row per
    layout: ``tp pp vp cp ep dp micro_batch microbatches recompute sequence_parallel
    distributed_optimizer`` (no prediction yet), sorted.
    """
    fixed = dict(fixed or {})
    m = cfg.model
    need = cfg.need
    what = "the layout search"
    N = need(cfg.num_gpus, "[hardware] num_gpus", what)
    L = need(m.layers, "[model] layers", what)
    H = need(m.heads, "[model] heads", what)
    s = need(m.seq_length, "[model] seq_length", what)
    G = need(cfg.batch.global_batch, "[batch] global_batch", what)
    kv = cfg.kv_heads or H
    gpn = cfg.hardware.gpus_per_node
    tps = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= max(gpn, 1)]
    pps = [p for p in range(1, min(L, 64) + 1) if L % p == 0]
    eps = [e for e in range(1, (m.experts or 1) + 1) if (m.experts or 1) % e == 0] if m.experts else [1]
    grid = {
        "tp": (tps, pl.Int64), "pp": (pps, pl.Int64), "vp": (list(VPS), pl.Int64), "cp": (list(CPS), pl.Int64),
        "ep": (eps, pl.Int64), "micro_batch": (list(MICRO_BATCHES), pl.Int64),
        "recompute": (["none", "selective", "full"], pl.String),
        "sequence_parallel": ([False, True], pl.Boolean), "distributed_optimizer": ([False, True], pl.Boolean),
    }
    for k, v in fixed.items():
        if k not in grid:
            raise ConfigError(f"`sets` {k} cannot be combined with `search` (the search varies {', '.join(KNOBS)}; "
                              "the model, GPU count and global batch stay)")
        grid[k] = ([v], grid[k][1])
    lf = None
    for name, (vals, dt) in grid.items():
        part = _col(name, vals, dt)
        lf = part if lf is None else lf.join(part, how="cross")
    assert lf is not None
    tp, pp, vp, cp, ep, mb = (pl.col(c) for c in ("tp", "pp", "vp", "cp", "ep", "micro_batch"))
    mp = tp * pp * cp
    out = (
        lf.filter(N % mp == 0)
        .with_columns((N // mp).alias("dp"))
        .filter(
            (H % tp == 0),
            (kv % tp == 0) | (tp % kv == 0),
            (L % (pp * vp) == 0),
            (vp == 1) | (pp > 1),
            (s % cp == 0),
            (pl.col("dp") % ep == 0),
            (G % (pl.col("dp") * mb) == 0),
            pl.col("sequence_parallel").not_() | (tp > 1),
        )
        .with_columns((G // (pl.col("dp") * mb)).alias("microbatches"))
        .select("tp", "pp", "vp", "cp", "ep", "dp", "micro_batch", "microbatches", "recompute", "sequence_parallel",
                "distributed_optimizer")
        .sort("tp", "pp", "vp", "cp", "ep", "micro_batch", "recompute", "sequence_parallel", "distributed_optimizer")
        .collect(engine=query_engine())
    )
    return out


def _layout_cfg(cfg: RunConfig, row: dict[str, Any]) -> RunConfig:
    p = replace(cfg.parallel, tp=row["tp"], pp=row["pp"], vp=row["vp"], cp=row["cp"], ep=row["ep"], dp=row["dp"],
                sequence_parallel=row["sequence_parallel"], distributed_optimizer=row["distributed_optimizer"],
                tp_comm_overlap=cfg.parallel.tp_comm_overlap and row["sequence_parallel"])
    r = replace(cfg.recompute, granularity=row["recompute"],
                num_layers=cfg.recompute.num_layers if row["recompute"] == "full" and cfg.recompute.method == "block" else None,
                method=cfg.recompute.method if row["recompute"] == "full" else "uniform")
    if r.method == "block" and r.num_layers is not None and r.num_layers > cfg.model.layers // (row["pp"] * row["vp"]):
        r = replace(r, num_layers=cfg.model.layers // (row["pp"] * row["vp"]))
    return replace(cfg, parallel=p, batch=replace(cfg.batch, micro_batch=row["micro_batch"]), recompute=r,
                   hardware=replace(cfg.hardware, num_gpus=cfg.num_gpus), reported=type(cfg.reported)(), logged=None,
                   warnings=())


def search_layouts(anchor: Anchor, *, base: RunConfig | None = None, fixed: dict[str, Any] | None = None,
                   capacity_gib: float | None = None, reserve_gib: float | None = None, top: int | None = None) -> pl.DataFrame:
    """Rank every valid layout of the anchor run's model by predicted TFLOP/s/GPU.

    Parameters
    ----------
    anchor:
        The run the predictions start from (:func:`traceanalyzer.reconciliation.anchor.anchor_from_analysis`
        for a trace, :func:`~traceanalyzer.model.whatif.anchor_from_config` without one). The GPU
        count, global batch and model stay those of ``anchor.cfg``.
    base:
        The configuration whose model, GPU count and global batch are searched (default:
        ``anchor.cfg``), e.g. the anchor with another global batch.
    fixed:
        Knobs pinned to one value, e.g. ``{"pp": 2}`` (keys: :data:`KNOBS` and ``dp``).
    capacity_gib, reserve_gib:
        Memory of one GPU in GiB (default: the GPU table's, or ``[hardware] memory_gb``) and the
        part kept free (CUDA context, NCCL buffers, fragmentation; default: the memory model's
        :data:`~traceanalyzer.model.memory.DEFAULT_RESERVE_GIB`).
    top:
        Size the memory of layouts in order of predicted TFLOP/s only until ``top`` of them fit
        (sizing one layout's memory costs about 25 times its time prediction); the others keep
        ``fits`` null (``memory_gib`` null: not sized). None or 0: size every layout.

    Returns
    -------
    polars.DataFrame
        One row per layout: the knobs, ``dp``, ``microbatches``, ``step_time_s``,
        ``tflops_per_gpu`` (model FLOPs, the anchor's convention), ``mfu``, ``bubble_ms``,
        ``recompute_ms``, ``exposed_comm_ms``, ``memory_gib`` (most loaded stage,
        :func:`traceanalyzer.model.memory.estimate_memory`), ``margin_gib`` (capacity − reserve −
        memory), ``fits`` (null when the memory was not sized, see ``top``, or cannot be),
        ``is_anchor`` and ``rank`` (1 = fastest among the layouts that fit; layouts whose memory
        was not sized rank after them, a layout that does not fit has none). Sorted by ``rank`` then predicted TFLOP/s.

    Example
    -------
    The layouts of the published 70B run of docs/examples (128 H100s, global batch 64) with
    TP8 and PP2 pinned (run from the repository root): 960 of them; the fastest that fits
    interleaves 8 virtual stages and needs no recompute:

    >>> import polars as pl
    >>> import traceanalyzer as ta
    >>> from traceanalyzer.model import load_config
    >>> from traceanalyzer.model.whatif import anchor_from_config
    >>> anchor = anchor_from_config(load_config("docs/examples/issue1031-70b.toml"))
    >>> s = ta.search_layouts(anchor, fixed={"tp": 8, "pp": 2}, top=3)
    >>> s.height
    960
    >>> s.head(2).select("rank", "tp", "pp", "vp", "dp", "micro_batch", "recompute", pl.col("tflops_per_gpu", "memory_gib").round(1), "fits").rows()
    [(1, 8, 2, 8, 8, 1, 'none', 529.0, 63.7, True), (2, 8, 2, 5, 8, 1, 'none', 524.1, 64.9, True)]
    """
    cfg = base or anchor.cfg
    fixed = dict(fixed or {})
    dp = fixed.pop("dp", None)
    layouts = enumerate_layouts(cfg, fixed)
    if dp is not None:
        layouts = layouts.filter(pl.col("dp") == dp)
    recs = []
    cfgs = []
    a, ac = anchor.cfg.parallel, anchor.cfg
    for row in layouts.iter_rows(named=True):  # one analytic projection per layout (not per event)
        new = _layout_cfg(cfg, row)
        res = project(anchor, new, memory=False)
        terms = {t["term"]: t["predicted_s"] for t in res["terms"]}
        cfgs.append(new)
        recs.append({
            **row,
            "step_time_s": res["predicted"]["step_time_s"], "tflops_per_gpu": res["predicted"]["tflops_per_gpu"],
            "mfu": res["predicted"]["mfu"], "bubble_ms": 1e3 * terms.get("bubble", 0.0),
            "recompute_ms": 1e3 * terms.get("recompute", 0.0),
            "exposed_comm_ms": 1e3 * sum(v for k, v in terms.items() if k.startswith("exposed_comm")),
            "memory_gib": None, "margin_gib": None, "fits": None,
            "is_anchor": (row["tp"], row["pp"], row["vp"], row["cp"], row["ep"], row["dp"], row["micro_batch"], row["recompute"],
                          row["sequence_parallel"], row["distributed_optimizer"])
            == (a.tp, a.pp, a.vp, a.cp, a.ep, ac.dp, ac.batch.micro_batch, ac.recompute.granularity, a.sequence_parallel,
                a.distributed_optimizer) and cfg.batch.global_batch == ac.batch.global_batch,
        })
    # memory, fastest first: all layouts, or (``top``) until ``top`` of them fit
    order = sorted(range(len(recs)), key=lambda i: -recs[i]["tflops_per_gpu"])
    fitting = 0
    for i in order:
        if top and fitting >= top and not recs[i]["is_anchor"]:
            continue
        mem = memory_summary(cfgs[i], capacity_gib, reserve_gib)
        if mem is None:
            continue
        recs[i].update(memory_gib=mem["total_gib"], margin_gib=mem["margin_gib"], fits=mem["fits"])
        fitting += bool(mem["fits"])
    schema = {**dict(layouts.schema), "step_time_s": pl.Float64, "tflops_per_gpu": pl.Float64, "mfu": pl.Float64,
              "bubble_ms": pl.Float64, "recompute_ms": pl.Float64, "exposed_comm_ms": pl.Float64, "memory_gib": pl.Float64,
              "margin_gib": pl.Float64, "fits": pl.Boolean, "is_anchor": pl.Boolean}
    df = pl.DataFrame(recs, schema=schema)
    # rank: the fitting layouts first, then the unsized ones, each by predicted TFLOP/s
    key = pl.when(pl.col("fits")).then(0).when(pl.col("fits").is_null()).then(1).otherwise(2)
    return (
        df.with_columns(key.alias("__k"))
        .sort(["__k", "tflops_per_gpu"], descending=[False, True])
        .with_columns(pl.when(pl.col("__k") < 2).then(pl.int_range(1, pl.len() + 1)).otherwise(None).cast(pl.Int64).alias("rank"))
        .drop("__k")
    )
