"""A cross-rank replay of the job: every rank's step rebuilt from its own work and the collectives
it shares with the other ranks, with durations that can be changed.

**The points of a rank** (:func:`.replaypoints.rank_points`, per rank, in the rank worker): each
step's start and end, and the *arrival* (the start) of each of its collective kernels. Every
point has an **anchor**: the rank's collective kernel that ended last at or before it (none: the
job's origin, the earliest step start over the ranks), and a **lead**, the time from the anchor's
end to the point, split into the GPU's **busy** time in it (``busy_ns``: any kernel, memcpy or
memset on any stream of the rank: the work before the point) and the rest, **idle** (the GPU
waited for the host).

**The replay** (:func:`replay_graph`, :func:`run`, in the reduce step): a collective ends on a
rank when its *last* participant arrives plus that rank's transfer (``transfer = end − last
arrival``, :func:`traceanalyzer.classify.comm.match_instances`); a point is its anchor's replayed
end plus its lead. A collective whose ranks could not be matched (one rank loaded, or ranks that
disagree on the count) is the rank's own work: it ends at its arrival plus its duration. With the
measured leads and transfers the replay gives back every point, so every rank's step, as measured
(:func:`replay_table`): the check that the dependencies are the ones the trace shows. A point
whose anchor ended, in the trace, after the collective it leads to (clocks of two ranks a little
apart) keeps its measured anchor time: the graph has no cycle, and the count is warned about.

Changing a lead (less busy or less idle time before a collective) or a transfer and running the
replay again gives the job's step time had that work taken that long: the straggler what-if of
:mod:`traceanalyzer.classify.stragglercost`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

# the points, computed per rank by the worker
from traceanalyzer.classify.replaypoints import ARRIVE, END, POINT_SCHEMA, START, rank_points  # noqa: F401


@dataclass
class Graph:
    """The replay's dependency graph, as arrays (see :func:`replay_graph`).

    Kernels (one per collective kernel row of the job, in the collectives' order) belong to a
    node (a matched instance, or the kernel alone); points belong to a rank and, for arrivals, to
    the kernel's node. ``levels``: the arrival points in evaluation order, cut per level."""

    origin: int
    kernel_node: np.ndarray  # node of each kernel
    transfer: np.ndarray  # end − node's measured last arrival, per kernel
    point_node: np.ndarray  # per point: its kernel's node (-1: a step start or end)
    point_kernel: np.ndarray  # per point: its kernel (-1: none)
    anchor: np.ndarray  # per point: the anchoring kernel (-1: the origin, or a fixed anchor time)
    fixed_anchor: np.ndarray  # per point: the anchor time when not replayed (the origin, or a cycle broken)
    lead: np.ndarray  # per point: measured lead
    busy: np.ndarray  # per point: measured GPU busy time in the lead
    levels: list[np.ndarray]  # arrival point indices, level by level
    n_nodes: int
    broken: int  # anchors kept at their measured time to break a cycle


def job_kernels(coll: pl.DataFrame) -> pl.DataFrame:
    """The job's collective kernels with their position among their rank's kernels (``kernel``,
    as :func:`rank_points` numbers them) and the columns the replay reads."""
    return coll.select(
        "rank", "step", "coll_type", "pg_name", "instance", "start_ns", "end_ns", "dur_ns", "last_arrival_ns", "wait_ns", "group_size",
        pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("kernel"),
    )


def replay_graph(points: pl.DataFrame, kern: pl.DataFrame) -> Graph:
    """The graph of the job from its points (:func:`rank_points` of every rank) and its kernels
    (:func:`job_kernels`)."""
    n_k = kern.height
    origin = int(points.filter(pl.col("point") == START).get_column("t_ns").min() or points.get_column("t_ns").min() or 0)
    matched = kern.get_column("last_arrival_ns").is_not_null().to_numpy()
    # nodes: a matched kernel shares its node with the kernels of its group's instance; any other
    # kernel is a node of its own (integer keys: no text per kernel)
    nodes = kern.select(
        pl.when(pl.col("last_arrival_ns").is_not_null())
        .then(pl.struct(pl.col("pg_name").cast(pl.String).fill_null(""), pl.col("instance").fill_null(-1)).rank("dense").cast(pl.Int64) - 1)
        .alias("m"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("i"),
    )
    n_matched = int(nodes.get_column("m").max() + 1) if matched.any() else 0
    kernel_node = nodes.select(pl.coalesce("m", pl.col("i") + n_matched)).to_series().to_numpy().astype(np.int64) if n_k else np.zeros(0, np.int64)
    if n_k:  # dense numbering
        _, kernel_node = np.unique(kernel_node, return_inverse=True)
        kernel_node = kernel_node.astype(np.int64)
    n_nodes = int(kernel_node.max()) + 1 if n_k else 0
    starts = kern.get_column("start_ns").to_numpy().astype(np.int64)
    ends = kern.get_column("end_ns").to_numpy().astype(np.int64)
    last = np.where(matched, kern.get_column("last_arrival_ns").fill_null(0).to_numpy().astype(np.int64), starts)
    node_e = np.zeros(n_nodes, np.int64)
    if n_k:
        np.maximum.at(node_e, kernel_node, last)
    transfer = ends - last
    # points -> the job's kernel index: (rank, position among the rank's kernels)
    idx = kern.select("rank", "kernel").with_row_index("__g")
    look = points.select("rank", "kernel", "anchor").with_row_index("__p")
    pk = look.join(idx, on=["rank", "kernel"], how="left").sort("__p").get_column("__g")
    pa = look.join(idx.rename({"kernel": "anchor"}), on=["rank", "anchor"], how="left").sort("__p").get_column("__g")
    point_kernel = pk.cast(pl.Int64).fill_null(-1).to_numpy()
    anchor = pa.cast(pl.Int64).fill_null(-1).to_numpy()
    t = points.get_column("t_ns").to_numpy().astype(np.int64)
    point_node = np.where(point_kernel >= 0, kernel_node[np.clip(point_kernel, 0, None)] if n_k else -1, -1)
    fixed = np.where(anchor >= 0, points.get_column("anchor_end_ns").fill_null(origin).to_numpy().astype(np.int64), origin)
    lead = t - fixed
    busy = points.get_column("busy_ns").to_numpy().astype(np.int64)
    # break cycles: an anchor node measured no earlier than the node the point leads to
    a_node = np.where(anchor >= 0, kernel_node[np.clip(anchor, 0, None)] if n_k else -1, -1)
    order = np.empty(n_nodes, np.int64)
    if n_nodes:
        order[np.lexsort((np.arange(n_nodes), node_e))] = np.arange(n_nodes)
    bad = (anchor >= 0) & (point_node >= 0) & (order[np.clip(a_node, 0, None)] >= order[np.clip(point_node, 0, None)]) if n_nodes else np.zeros(t.size, bool)
    broken = int(bad.sum())
    anchor = np.where(bad, -1, anchor)
    a_node = np.where(bad, -1, a_node)
    # levels: a node's level is one more than the highest level of its arrivals' anchor nodes
    node_level = np.zeros(n_nodes, np.int64)
    arr = np.flatnonzero(point_node >= 0)
    if arr.size:
        an = a_node[arr]
        pn = point_node[arr]
        by_order = np.argsort(order[pn], kind="stable")  # nodes in measured order: anchors first
        arr, an, pn = arr[by_order], an[by_order], pn[by_order]
        # one pass in measured order suffices (every kept anchor node comes earlier in that order)
        lvl = np.zeros(n_nodes, np.int64)
        for a, p in zip(an.tolist(), pn.tolist()):
            v = lvl[a] + 1 if a >= 0 else 1
            if v > lvl[p]:
                lvl[p] = v
        node_level = lvl
        pl_level = node_level[pn]
        cut = np.argsort(pl_level, kind="stable")
        arr, pl_level = arr[cut], pl_level[cut]
        bounds = np.flatnonzero(np.diff(pl_level)) + 1
        levels = np.split(arr, bounds)
    else:
        levels = []
    return Graph(origin, kernel_node, transfer, point_node, point_kernel, anchor, fixed, lead, busy, levels, n_nodes, broken)


def run(g: Graph, lead: np.ndarray | None = None, transfer: np.ndarray | None = None) -> np.ndarray:
    """Every point's replayed time with these leads (per point) and transfers (per kernel);
    the measured ones where not given."""
    lead = g.lead if lead is None else lead
    transfer = g.transfer if transfer is None else transfer
    node_e = np.full(g.n_nodes, np.iinfo(np.int64).min, np.int64)

    def anchor_time(idx: np.ndarray) -> np.ndarray:
        a = g.anchor[idx]
        has = a >= 0
        ac = np.clip(a, 0, None)
        return np.where(has, node_e[g.kernel_node[ac]] + transfer[ac] if g.kernel_node.size else 0, g.fixed_anchor[idx])

    for idx in g.levels:
        t = anchor_time(idx) + lead[idx]
        np.maximum.at(node_e, g.point_node[idx], t)
    every = np.arange(g.lead.size)
    return anchor_time(every) + lead


def step_times(points: pl.DataFrame, times: np.ndarray) -> pl.DataFrame:
    """Per rank and step: the replayed step duration (end − start) from the points' times."""
    df = points.select("rank", "step", "point").with_columns(pl.Series("t", times))
    return (
        df.filter(pl.col("point").is_in([START, END]))
        .group_by("rank", "step")
        .agg((pl.col("t").filter(pl.col("point") == END).max() - pl.col("t").filter(pl.col("point") == START).min()).alias("ns"))
    )


def replay_table(steps: pl.DataFrame, points: pl.DataFrame, g: Graph) -> pl.DataFrame:
    """Per rank and step: ``measured_ms`` (the step's duration) and ``replayed_ms`` (the replay's,
    measured durations given), sorted by rank and step."""
    rep = step_times(points, run(g))
    return (
        steps.select("rank", "step", "duration_ns")
        .join(rep, on=["rank", "step"], how="left")
        .select("rank", "step", (pl.col("duration_ns") / 1e6).round(6).alias("measured_ms"), (pl.col("ns") / 1e6).round(6).alias("replayed_ms"))
        .sort("rank", "step")
    )
