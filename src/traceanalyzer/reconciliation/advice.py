"""Remedies that fit the run: what the run already does, who the others waited for, which sync
calls it makes, what kind of model it is. :mod:`.findings` reads these to word its causes and
remedies; nothing here measures a loss.

* :func:`run_applies`: what the trace shows the run already applies (CUDA / HIP graphs,
  ``torch.compile``, activation recompute) and whether it holds host events at all;
* :func:`late_arriver`: when exposed communication is mostly *wait*, the rank the others waited
  for (the last to start the most matched collectives' wait), the collective and the wait;
* :func:`world_only_dims`: the dimensions whose every collective was put there only because its
  group spans the world (no description, no layout says which dimension it is);
* :func:`sync_calls`: the host's synchronising calls, longest first;
* :func:`recompute_remedy`: selective (attention-only) recompute for a transformer, a coarser
  checkpoint placement otherwise.
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: exposed communication whose collectives spend at least this share of their time waiting is a straggler finding
WAIT_SHARE = 0.5
#: the description a world-sized group without one gets (not a parallelism dimension)
WORLD_UNKNOWN = "world (dimension unknown)"


def _facts(analysis) -> pl.DataFrame | None:
    f = getattr(analysis, "extras", {}).get("trace_facts")
    return f if f is not None and f.height else None


def run_applies(analysis) -> dict[str, bool | None]:
    """``graphs``, ``compiled``, ``recompute`` (the run already does it), ``host_events`` (the trace
    has host events); None where the trace facts were not computed."""
    f = _facts(analysis)
    st = analysis.steps
    recompute = bool(st.height and "recompute_ns" in st.columns and int(st["recompute_ns"].sum()) > 0)
    if f is None:
        graphs = None
        launches = getattr(analysis, "extras", {}).get("launches")
        if launches is not None and launches.height and "cuda_graphs" in launches.columns:
            graphs = bool(launches["cuda_graphs"].any())
        return {"graphs": graphs, "compiled": None, "recompute": recompute, "host_events": None}
    return {"graphs": int(f["graph_launches"].sum()) > 0,
            "compiled": int(f["compiled_regions"].sum()) > 0 or int(f["triton_kernels"].sum()) > 0,
            "recompute": recompute, "host_events": int(f["host_events"].min()) > 0}


def world_only_dims(analysis) -> set[str]:
    """Lower-case dimensions (``dp``) whose collectives all come from groups that span the world
    and carry no description naming a dimension: the trace does not show which dimension they are."""
    coll = analysis.collectives
    if coll is None or coll.height == 0:
        return set()
    world = analysis.steps["rank"].n_unique() if analysis.steps.height else 0
    meta = analysis.trace.meta
    if "world_size" in meta.columns and meta["world_size"].drop_nulls().len():
        world = max(world, int(meta["world_size"].drop_nulls().max()))
    desc = pl.col("pg_desc").cast(pl.String).fill_null("").str.to_lowercase()
    blind = desc.is_in(["", "undefined", "default_pg"]) & ((pl.col("group_size") == world) | pl.col("group_size").is_null())
    per = coll.group_by(pl.col("dim").cast(pl.String)).agg(blind.all().alias("blind"))
    return {d.lower() for d, b in per.iter_rows() if b and d == "DP"}


def comm_wait(analysis, dim: str | None = None) -> tuple[float, float]:
    """(wait, kernel time) in ns summed over the ranks' collectives of dimension ``dim`` (all when
    None), where the wait was measured or estimated."""
    coll = analysis.collectives
    if coll is None or coll.height == 0:
        return 0.0, 0.0
    c = coll if dim is None else coll.filter(pl.col("dim").cast(pl.String).str.to_lowercase() == dim)
    c = c.filter(pl.col("wait_ns").is_not_null() & pl.col("step").is_not_null())
    return float(c["wait_ns"].sum() or 0), float(c["dur_ns"].sum() or 0)


def late_arriver(analysis, dim: str | None = None) -> dict[str, Any] | None:
    """The rank the others waited for at the matched collectives (of ``dim`` when given): per
    instance the rank that started last; the one whose lateness made the others wait longest.

    A dict: ``rank``, ``waited_ns`` (the others' wait at the collectives it arrived last at, summed
    over ranks and steps), ``per_step_ns`` (that, per step of one rank: summed over the waiting
    ranks, divided by the steps), ``collective`` (the type with the most of that wait),
    ``collective_ns``, ``instances`` (how many it arrived last at) and ``of`` (matched instances);
    None without collectives matched across ranks."""
    coll = analysis.collectives
    if coll is None or coll.height == 0 or "last_arrival_ns" not in coll.columns:
        return None
    c = coll.filter(pl.col("last_arrival_ns").is_not_null() & ~pl.col("transfer_estimated") & pl.col("step").is_not_null())
    if dim is not None:
        c = c.filter(pl.col("dim").cast(pl.String).str.to_lowercase() == dim)
    if c.height == 0:
        return None
    key = [pl.col("pg_name").cast(pl.String).alias("g"), "instance"]
    late = (c.sort("start_ns", "rank", descending=[True, False]).group_by(key, maintain_order=True)
            .agg(pl.col("rank").first().alias("late"), pl.col("coll_type").cast(pl.String).first().alias("type"),
                 pl.col("wait_ns").sum().alias("waited")))
    by = late.group_by("late").agg(pl.col("waited").sum(), pl.len().alias("n")).sort("waited", "late", descending=[True, False])
    rank, waited, n = by.row(0)
    kind = late.filter(pl.col("late") == rank).group_by("type").agg(pl.col("waited").sum()).sort("waited", descending=True)
    steps = max(analysis.steps.select(pl.col("step").n_unique()).item(), 1)
    ranks = max(c["rank"].n_unique(), 1)
    return {"rank": int(rank), "waited_ns": int(waited), "per_step_ns": waited / steps / ranks, "collective": kind.item(0, "type"),
            "collective_ns": int(kind.item(0, "waited")), "instances": int(n), "of": late.height, "ranks": ranks}


def sync_calls(analysis, top: int = 3) -> list[dict[str, Any]]:
    """The host's synchronising calls over all ranks, longest first: ``name``, ``count``, ``ns``."""
    f = _facts(analysis)
    if f is None:
        return []
    rows = f.select(pl.col("sync_calls").explode()).unnest("sync_calls").drop_nulls("name")
    if rows.height == 0:
        return []
    return rows.group_by("name").agg(pl.col("count").sum(), pl.col("ns").sum()).sort("ns", "name", descending=[True, False]).head(top).to_dicts()


def _sync_word(name: str) -> str:
    return ".item()" if name == "aten::item" else name


def sync_text(analysis) -> tuple[str, str]:
    """(cause, remedy) of sync-wait idle naming the sync calls the trace holds."""
    calls = sync_calls(analysis)
    if not calls:
        return ("the host waited in a synchronisation while the GPU ran dry",
                "remove the synchronisation from the loop (log every N steps; no .item() / .cpu() / torch.cuda.synchronize() each step)")
    found = ", ".join(f"{_sync_word(c['name'])} ({c['count']:,} calls, {c['ns'] / 1e6:.1f} ms)" for c in calls)
    top = calls[0]["name"]
    if top == "aten::item" or "StreamSynchronize" in top or "EventSynchronize" in top:
        remedy = "keep the value on the GPU: no .item() / .cpu() each step (log every N steps)"
    elif "DeviceSynchronize" in top:
        remedy = f"remove the {top} calls from the loop (torch.cuda.synchronize(), a timer or a benchmark around each step)"
    else:
        remedy = f"remove the {top} calls from the loop"
    return f"the host waited in a synchronisation while the GPU ran dry; sync calls in the trace: {found}", remedy


def is_transformer(analysis) -> bool | None:
    """True when the trace runs attention ops, False when it runs convolutions and no attention,
    None when it cannot tell."""
    f = _facts(analysis)
    if f is None:
        return None
    att, conv = int(f["attention_ops"].sum()), int(f["conv_ops"].sum())
    if att:
        return True
    return False if conv else None


def recompute_remedy(analysis) -> str:
    """The recompute remedy for this kind of model."""
    kind = is_transformer(analysis)
    if kind is True:
        return "selective recompute (attention only), or none where memory allows"
    if kind is False:
        return ("checkpoint fewer blocks (e.g. every other stage, or only the blocks with the largest activations), "
                "or none where memory allows")
    return "recompute fewer layers (checkpoint only the blocks whose activations are largest), or none where memory allows"
