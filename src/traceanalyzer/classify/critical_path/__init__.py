"""Critical path of a training step: the chain of host work, launches, GPU activity and waits
that sets the step's length, and the share of each bucket on it.

* :mod:`.cpgraph` builds the dependency graph (host threads, GPU streams, launches,
  synchronisations, waits between streams, collectives between ranks);
* :mod:`.longest` finds the longest path through it (numpy, no loop over events);
* :func:`critical_path` (here) runs both per step and returns polars frames.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from traceanalyzer.buckets import CP_BUCKETS
from traceanalyzer.classify.critical_path import cpgraph, longest
from traceanalyzer.results import CriticalPath

if TYPE_CHECKING:
    from traceanalyzer.results import Analysis
    from traceanalyzer.schema import Trace

__all__ = ["critical_path", "CriticalPath", "CP_BUCKETS", "WAIT_SLACK_NS"]

WAIT_SLACK_NS = cpgraph.WAIT_SLACK_NS
_IDLE = ["kernel_gap", "launch_delay", "wait_gap"]


def _empty_segments() -> pl.DataFrame:
    return pl.DataFrame(schema={
        "step": pl.Int64, "rank": pl.Int32, "seq": pl.Int64, "what": pl.String, "bucket": pl.String, "name": pl.String,
        "where": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64, "dur_ns": pl.Int64,
    })


def critical_path(
    trace: Trace,
    step: int | None = None,
    rank: int | None = None,
    *,
    analysis: Analysis | None = None,
    infer_waits: bool = True,
    wait_slack_ns: int = WAIT_SLACK_NS,
    host_gaps: bool = True,
) -> CriticalPath:
    """The critical path of every step (or of one) of a classified trace: what the step waited on,
    piece by piece (see ``traceanalyzer.critical_path``, the Python verb, for the parameters and
    the result; it loads and classifies a path first).

    ``trace`` is the loaded trace with its events, ``analysis`` its classification (GPU labels,
    step windows, matched collectives). Raises ValueError when ``step`` or ``rank`` is not in
    the trace (the message lists the ones that are)."""
    if analysis is None:
        raise ValueError("critical_path needs the trace's events and its analysis (traceanalyzer.critical_path loads and classifies)")
    events, gpu, windows, coll = trace.events, analysis.gpu, analysis.windows, analysis.collectives
    if rank is not None:
        if rank not in windows.get_column("rank").to_list():
            raise ValueError(f"no rank {rank} with GPU work in the trace (ranks: {_listing(windows['rank'])})")
        events, gpu, windows = (f.filter(pl.col("rank") == rank) for f in (events, gpu, windows))
    if step is not None:
        if step not in windows.get_column("step").to_list():
            raise ValueError(f"no step {step} in the trace (steps: {_listing(windows['step'])})")
        windows = windows.filter(pl.col("step") == step)
    joint = rank is None and windows.get_column("rank").n_unique() > 1
    ev, points, cross = cpgraph.build(events, gpu, windows, coll if joint else None, infer_waits=infer_waits, wait_slack_ns=wait_slack_ns,
                                      host_gaps=host_gaps)
    warnings: list[str] = list(dict.fromkeys(analysis.warnings))
    if not points.height:
        return CriticalPath(_summary(pl.DataFrame(), windows, joint, 0), _empty_segments(), [*warnings, "no events in the chosen steps"], host_gaps)
    chain = points.get_column("chain").to_numpy()
    w = points.get_column("w").to_numpy()
    src, dst, cw = (cross.get_column(c).to_numpy().astype(np.int64) for c in ("src", "dst", "w"))
    sol = longest.solve(chain, w, src, dst, cw)

    # one path per group: a step (ranks together) or a step of one rank
    keys = ["step"] if joint else ["step", "rank"]
    chains = ev.select("chain", "step", "rank").unique("chain")
    ends = (
        points.select("node", "chain", "t").with_columns(pl.Series("dist", sol.dist))
        .join(chains, on="chain")
        .sort([*keys, "dist", "t"], descending=[*([False] * len(keys)), True, True])
        .unique(keys, keep="first", maintain_order=True)
    )
    node_rows, edge_rows, group_rows = [], [], []
    for g, row in enumerate(ends.iter_rows(named=True)):  # one turn per step (and rank): a path each
        pieces, edges = longest.trace_back(sol, src, row["node"])
        for j, i in pieces:
            node_rows.append(np.arange(j + 1, i + 1, dtype=np.int64))
            group_rows.append(np.full(i - j, g, dtype=np.int64))
        edge_rows.append((np.asarray(edges, dtype=np.int64), g))
    span = (
        points.select("chain", "t").join(chains, on="chain")
        .group_by(keys).agg((pl.col("t").max() - pl.col("t").min()).alias("window_ns"))
    )
    # g: the path's number, in the order of ``ends`` (the loop above), before any join
    groups = ends.select(*keys, "dist").with_row_index("g").with_columns(pl.col("g").cast(pl.Int64)).join(span, on=keys, how="left")
    segments, hops = _segments(ev, points, cross, node_rows, group_rows, edge_rows, groups, keys)
    summary = _summary(segments, windows, joint, sol.rounds, groups, hops, keys)
    return CriticalPath(summary, segments.drop("g"), warnings, host_gaps)


def _listing(col: pl.Series) -> str:
    vals = sorted(set(col.to_list()))
    return ", ".join(map(str, vals[:20])) + (" ..." if len(vals) > 20 else "")


def _segments(ev, points, cross, node_rows, group_rows, edge_rows, groups, keys):
    t = points.get_column("t").to_numpy()
    nodes = np.concatenate(node_rows) if node_rows else np.zeros(0, dtype=np.int64)
    gidx = np.concatenate(group_rows) if group_rows else np.zeros(0, dtype=np.int64)
    on_chain = (
        points[nodes]
        .select(pl.col("chain"), pl.col("what"), pl.col("about"), pl.col("w"), pl.col("t").alias("end_ns"))
        .with_columns(pl.Series("start_ns", t[nodes - 1] if nodes.size else np.zeros(0, dtype=np.int64)), pl.Series("g", gidx))
    )
    eidx = np.concatenate([e for e, _ in edge_rows]) if edge_rows else np.zeros(0, dtype=np.int64)
    egrp = np.concatenate([np.full(e.size, g, dtype=np.int64) for e, g in edge_rows]) if edge_rows else np.zeros(0, dtype=np.int64)
    hop = cross[eidx].with_columns(pl.Series("g", egrp))
    hops = hop.group_by("g").agg(
        (pl.col("what") == "sync").sum().alias("syncs"),
        (pl.col("what") == "wait_gap").sum().alias("waits"),
        (pl.col("what") == "collective").sum().alias("collectives"),
    )
    src_t, dst_t = t[hop.get_column("src").to_numpy()], t[hop.get_column("dst").to_numpy()]
    hop = hop.select(
        pl.col("dst").alias("__dst"), pl.lit(None, pl.Int64).alias("chain"), "what", "about", "w",
        pl.Series("end_ns", dst_t), pl.Series("start_ns", src_t), "g",
    )
    # the chain a hop lands on names where it is
    hop = hop.with_columns(points.get_column("chain").gather(hop.get_column("__dst")).alias("chain")).drop("__dst")
    seg = pl.concat([on_chain.select(hop.columns), hop], how="vertical_relaxed").filter(pl.col("w") > 0)
    info = ev.select(
        pl.col("eid").alias("about"), pl.col("name"), pl.col("bucket").alias("ebucket"), "rank",
    )
    where = ev.select(
        "chain",
        pl.when(pl.col("host")).then(pl.format("thread {}/{}", "pid", "tid")).otherwise(pl.format("stream {}/{}", "pid", "stream")).alias("where"),
        pl.col("rank").alias("crank"), pl.col("step"),
    ).unique("chain")
    seg = (
        seg.join(info, on="about", how="left")
        .join(where, on="chain", how="left")
        .with_columns(
            pl.coalesce("rank", "crank").alias("rank"),
            pl.when(pl.col("what").is_in(_IDLE)).then(pl.lit("idle"))
            .when(pl.col("what").is_in(["host_op", "host_dispatch", "host_gap"])).then(pl.lit("host"))
            .otherwise(pl.col("ebucket")).alias("bucket"),
        )
        .sort("g", "end_ns", "start_ns")
    )
    # consecutive pieces of the same op on the same chain are one segment
    run = pl.struct("g", "chain", "what", "about").rle_id()
    seg = (
        seg.with_columns(run.alias("__run"))
        .group_by("__run", maintain_order=True)
        .agg(
            pl.col("g").first(), pl.col("step").first(), pl.col("rank").first(), pl.col("what").first(), pl.col("bucket").first(),
            pl.col("name").first(), pl.col("where").first(), pl.col("start_ns").min(), pl.col("end_ns").max(), pl.col("w").sum().alias("dur_ns"),
        )
        .with_columns(pl.int_range(pl.len()).over("g").cast(pl.Int64).alias("seq"))
        .select("g", "step", pl.col("rank").cast(pl.Int32), "seq", "what", "bucket", "name", "where", "start_ns", "end_ns", "dur_ns")
    )
    return seg, hops


def _summary(segments, windows, joint, rounds, groups=None, hops=None, keys=("step",)):
    keys = list(keys)
    if groups is None or not segments.height:
        cols = {"step": pl.Int64, "rank": pl.Int32, "ranks": pl.UInt32, "path_ns": pl.Int64, "window_ns": pl.Int64}
        return pl.DataFrame(schema=cols)
    per = segments.group_by("g").agg(
        pl.col("rank").n_unique().alias("ranks"),
        pl.col("dur_ns").sum().alias("path_ns"),
        *[pl.col("dur_ns").filter(pl.col("bucket") == b).sum().alias(f"{b}_ns") for b in CP_BUCKETS],
        pl.len().alias("segments"),
    )
    out = (
        groups.join(per, on="g", how="left")
        .join(hops, on="g", how="left")
        .with_columns(pl.col(c).fill_null(0) for c in ["path_ns", "segments", "syncs", "waits", "collectives", *[f"{b}_ns" for b in CP_BUCKETS]])
    )
    if joint:
        out = out.with_columns(pl.lit(None, pl.Int32).alias("rank"))
    return (
        out.with_columns(
            *[(pl.col(f"{b}_ns") / pl.col("path_ns")).fill_nan(0.0).alias(f"{b}_share") for b in CP_BUCKETS],
            pl.lit(rounds, pl.Int64).alias("rounds"),
        )
        .select(
            "step", pl.col("rank").cast(pl.Int32), "ranks", "path_ns", "window_ns",
            *[f"{b}_ns" for b in CP_BUCKETS], *[f"{b}_share" for b in CP_BUCKETS],
            pl.col("segments").cast(pl.Int64), pl.col("syncs").cast(pl.Int64), pl.col("waits").cast(pl.Int64),
            pl.col("collectives").cast(pl.Int64), "rounds",
        )
        .sort("step", "rank", nulls_last=True)
    )
