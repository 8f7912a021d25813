"""Longest path through a graph made of chains and edges between them, in numpy.

The graph (:mod:`.cpgraph`): nodes sorted by chain then time; the edge from a node to the next one
of its chain weighs ``w[i]`` (into node ``i``); ``src -> dst`` edges join chains. The graph is
acyclic (edges go forwards in time; between equal instants :mod:`.cpgraph` keeps only edges that
cannot close a cycle), weights are non-negative, and a path may start at any node (longest-path semantics of ``networkx.dag_longest_path``,
which HTA uses).

Along one chain the longest distance has a closed form. With ``P`` the running sum of the chain's
weights and ``E[j]`` the best distance arriving at node ``j`` over a cross edge (0: a path may
start there)::

    D[k] = P[k] + max over j <= k of (E[j] - P[j])

a running maximum, one ``np.maximum.accumulate`` over all chains at once (chains are separated by
an offset larger than any distance). Cross edges then raise ``E``; the two steps repeat, on the chains whose ``E`` rose, until
nothing changes. Each round costs at most O(nodes + edges) in numpy; the number of rounds is the
largest number of chain changes on a longest path (host -> GPU -> host through a
synchronisation, stream -> stream through a wait, rank -> rank through a collective), not the
number of events. The path is read back from the end by following, per chain piece, the node
where the running maximum was set and the cross edge that set it: a loop over the pieces of one
path.
"""

from __future__ import annotations

import numpy as np


class Solution:
    """Distances and back-pointers of every node."""

    def __init__(self, dist: np.ndarray, entry_at: np.ndarray, entry_edge: np.ndarray, rounds: int):
        self.dist = dist  # longest distance ending at each node (ns)
        self.entry_at = entry_at  # node of the same chain where that path joined the chain
        self.entry_edge = entry_edge  # cross edge index that reached that node (-1: the path starts there)
        self.rounds = rounds


def solve(chain: np.ndarray, w: np.ndarray, src: np.ndarray, dst: np.ndarray, cw: np.ndarray, max_rounds: int | None = None) -> Solution:
    """Longest distances. ``chain`` (sorted, dense ids), ``w`` (weight of the chain edge into each
    node; 0 at a chain's first node), cross edges ``src, dst, cw`` (acyclic with the chains;
    weights non-negative). All int64."""
    n = chain.shape[0]
    idx = np.arange(n, dtype=np.int64)
    first = np.ones(n, dtype=bool)
    first[1:] = chain[1:] != chain[:-1]
    w = np.where(first, 0, w)
    csum = np.cumsum(w, dtype=np.int64)
    prefix = csum - np.maximum.accumulate(np.where(first, csum, 0))  # P[k]: weights from the chain start to k
    # values never exceed the total weight: an offset per chain keeps the running max per chain
    span = int(w.sum()) + int(cw.sum()) + 1
    big = 2 * span + 1
    if big * (int(chain[-1]) + 2 if n else 1) >= 2**62:
        raise OverflowError("critical path: too many chains times too long a span for int64 arithmetic")
    offset = chain * big
    order = np.argsort(dst, kind="stable")
    s_src, s_dst, s_w = src[order], dst[order], cw[order]
    starts = np.flatnonzero(np.r_[True, s_dst[1:] != s_dst[:-1]]) if s_dst.size else np.zeros(0, dtype=np.int64)
    targets = s_dst[starts]
    entry = np.zeros(n, dtype=np.int64)
    lo = np.flatnonzero(first)
    length = np.diff(np.r_[lo, n])
    rounds = 0
    limit = max_rounds if max_rounds is not None else src.size + 2
    val = entry - prefix + offset
    run = np.maximum.accumulate(val)
    dist = run - offset + prefix
    while s_dst.size and rounds < limit:
        rounds += 1
        cand = dist[s_src] + s_w
        best = np.maximum.reduceat(cand, starts)
        better = best > entry[targets]
        if not better.any():
            break
        tgt = targets[better]  # ascending, so grouped by chain
        entry[tgt] = best[better]
        val[tgt] = entry[tgt] - prefix[tgt] + offset[tgt]
        # recompute each changed chain from its earliest changed node on (the running max
        # before it is kept), all chains in one accumulate
        ch = chain[tgt]
        head = np.r_[True, ch[1:] != ch[:-1]]
        p, c = tgt[head], ch[head]
        size = lo[c] + length[c] - p
        seg = np.cumsum(size) - size
        sel = np.arange(size.sum(), dtype=np.int64) - np.repeat(seg - p, size)
        v = val[sel]
        inner = p > lo[c]
        v[seg[inner]] = np.maximum(v[seg[inner]], run[p[inner] - 1])
        part = np.maximum.accumulate(v)
        run[sel] = part
        dist[sel] = part - offset[sel] + prefix[sel]
    # back-pointers from the final distances
    at = np.where(val == run, idx, -1)
    entry_at = np.maximum.accumulate(at)
    entry_edge = np.full(n, -1, dtype=np.int64)
    if s_dst.size:
        cand = dist[s_src] + s_w
        hit = cand == entry[s_dst]
        # the last edge achieving the entry of each node
        entry_edge[s_dst[hit]] = order[hit]
    return Solution(dist, entry_at, entry_edge, rounds)


def trace_back(sol: Solution, src: np.ndarray, end: int) -> tuple[list[tuple[int, int]], list[int]]:
    """The path ending at node ``end``: its chain pieces ``(first node, last node)`` and the cross
    edges between them (indexes into ``src``), both from the end backwards."""
    pieces: list[tuple[int, int]] = []
    edges: list[int] = []
    node = end
    seen = 0
    limit = sol.dist.shape[0] + 1
    while seen < limit:  # one turn per chain piece of the path
        seen += 1
        j = int(sol.entry_at[node])
        pieces.append((j, node))
        e = int(sol.entry_edge[j])
        if e < 0:
            break
        edges.append(e)
        node = int(src[e])
    return pieces, edges
