"""Replay one step's host -> GPU dependencies with some host time taken out.

The step is what the critical path sees of it: host threads that launch GPU work, the GPU
items on their streams, and the host's synchronisations. The replay moves every host time by
the host time removed before it and lets the GPU follow:

* the host timeline: a time ``t`` of the step maps to ``t' = a' + (t - a) - (R(t) - R(a))``,
  ``(a, a')`` the last anchor before ``t`` (the step's start, then the end of each
  synchronisation, old and new) and ``R(t)`` the host time removed before ``t``: point costs
  (the profiler's own work at the start of each recorded event) and whole intervals (a stall,
  a data-loader wait). The process's host threads are one timeline (autograd's worker runs
  while the main thread waits on it, so their work is serial);
* a GPU item starts at ``max(launch' + latency, end' of the item before it on its stream +
  queue gap)``: kernels on a stream run in order, and none before its launch. The latency is
  the item's own launch-to-start time, capped at the rank's launch latency (what it waited
  beyond that was the queue); the queue gap is its own gap behind the item before it, capped
  at :data:`QUEUE_GAP_NS` (more was a wait for the host). Work launched before the step keeps
  its times;
* a synchronisation (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``, ``.item()``) ends
  when the GPU work launched before it has ended (or at its own start, plus the time the call
  took after the GPU finished): it is the next anchor. A synchronisation dropped (priced as
  removed) is no anchor;
* the step ends at its host end or its last GPU item's end, whichever is later.

:func:`replay_step` returns that end on the replayed clock, relative to the step's start. The
callers compare two replays of one step (with and without the removed time) rather than a
replay with the trace, so what the replay does not model (waits between streams, the launch
queue's depth) cancels out of the difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: the largest queue gap between two items of one stream that is still the GPU's own (beyond it
#: the item waited for something else: its launch, another stream)
QUEUE_GAP_NS = 2_000
#: the launch latency assumed when no item of the rank waited on its launch
DEFAULT_LATENCY_NS = 5_000


@dataclass
class StepInput:
    """One step of one rank, as numpy int64 arrays (ns on the trace's clock)."""

    wstart: int
    wend: int
    #: GPU items launched in the step: start, end, stream (an integer code), launch (-1: unknown)
    start: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    launch: np.ndarray
    #: per stream code, when the work launched before the step ends on it (absent: idle)
    ready: dict[int, int] = field(default_factory=dict)
    #: the host's synchronisations in the step: start, end (sorted by start, not overlapping)
    sync_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sync_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: the launch latency of the rank (ns)
    latency: int = DEFAULT_LATENCY_NS


@dataclass
class Removal:
    """Host time to take out: ``cost`` ns at each of ``points`` (sorted), and the sorted,
    disjoint ``[lo, hi)`` intervals; ``drop_syncs``: the synchronisations are no anchors."""

    points: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cost: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    hi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    drop_syncs: bool = False

    def __post_init__(self) -> None:
        self._cum = np.concatenate([[0.0], np.cumsum(self.cost, dtype=np.float64)])
        lens = (self.hi - self.lo).astype(np.float64)
        self._before = np.concatenate([[0.0], np.cumsum(lens)])

    def removed(self, t: np.ndarray) -> np.ndarray:
        """R(t): the host time removed before each time of ``t``."""
        t = np.asarray(t, dtype=np.int64)
        out = self._cum[np.searchsorted(self.points, t, side="left")]
        if self.lo.size:
            i = np.searchsorted(self.lo, t, side="right") - 1  # the interval starting at or before t
            ok = i >= 0
            ic = np.where(ok, i, 0)
            inside = np.where(ok, np.minimum(t, self.hi[ic]) - self.lo[ic], 0)
            out = out + np.where(ok, self._before[ic] + np.maximum(inside, 0), 0.0)
        return out

    def plus(self, lo: np.ndarray, hi: np.ndarray, drop_syncs: bool = False) -> "Removal":
        """These costs with the intervals ``[lo, hi)`` removed too (merged with the own)."""
        lo2, hi2 = union(np.concatenate([self.lo, lo]), np.concatenate([self.hi, hi]))
        return Removal(self.points, self.cost, lo2, hi2, drop_syncs or self.drop_syncs)


def union(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[lo, hi)`` as sorted disjoint intervals."""
    keep = hi > lo
    lo, hi = np.asarray(lo, np.int64)[keep], np.asarray(hi, np.int64)[keep]
    if lo.size == 0:
        return lo, hi
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)
    opens = np.concatenate([[True], lo[1:] > reach[:-1]])
    idx = np.flatnonzero(opens)
    ends = np.concatenate([idx[1:] - 1, [lo.size - 1]])
    return lo[idx], reach[ends]


def replay_step(s: StepInput, rm: Removal) -> float:
    """The step's length (ns) replayed with ``rm`` taken out of its host time (module doc).

    Vectorised: between two synchronisations the host map is one shift, and on each stream the
    items' ends follow ``end_i = max(a_i + d_i, end_(i-1) + g_i + d_i)`` (``a_i`` the moved launch
    plus latency, ``d_i`` the duration, ``g_i`` the queue gap), whose solution is
    ``end_i = S_i + max(max_(j<=i) (a_j + d_j - S_j), ready)`` with ``S_i`` the running sum of
    ``g + d``: a running maximum per stream, no loop over items. Times are relative to the
    step's start (float64 holds them exactly to well below a nanosecond)."""
    w0 = s.wstart
    n_sync = 0 if rm.drop_syncs else int(s.sync_start.size)
    known = s.launch >= 0
    host_t = np.where(known, s.launch, s.start)
    seg = np.searchsorted(s.sync_start[:n_sync], host_t, side="right") if n_sync else np.zeros(host_t.size, np.int64)
    r_host = rm.removed(host_t)
    lat = np.where(known, np.minimum(np.maximum(s.start - s.launch, 0), s.latency), 0).astype(np.float64)
    dur = (s.end - s.start).astype(np.float64)
    # each item's own queue gap behind the item before it on its stream (in the trace), capped
    order = np.lexsort((s.start, s.stream))
    st_o = s.stream[order]
    first = np.concatenate([[True], st_o[1:] != st_o[:-1]]) if order.size else np.zeros(0, bool)
    prev_end = np.concatenate([[0], s.end[order][:-1]]) if order.size else np.zeros(0, np.int64)
    ready0 = np.array([s.ready.get(int(x), np.iinfo(np.int64).min) for x in st_o[first]], dtype=np.int64) if order.size else np.zeros(0, np.int64)
    prev_end[first] = ready0
    raw = s.start[order] - prev_end
    gap_o = np.where(first & (prev_end == np.iinfo(np.int64).min), QUEUE_GAP_NS, np.clip(raw, 0, QUEUE_GAP_NS))
    gap = np.empty(order.size, np.float64)
    gap[order] = gap_o
    ready = {int(k): float(v - w0) for k, v in s.ready.items()}
    new_end = np.empty(s.start.size, np.float64)
    anchor_old, anchor_new = 0.0, 0.0
    r_anchor = float(rm.removed(np.array([w0]))[0])
    done_old = float(max(s.ready.values(), default=w0) - w0)
    done_new = done_old
    rel_host = (host_t - w0).astype(np.float64)
    rel_end = (s.end - w0).astype(np.float64)
    for seg_i in range(n_sync + 1):
        idx = np.flatnonzero(seg == seg_i)
        if idx.size:
            a = anchor_new + (rel_host[idx] - anchor_old) - (r_host[idx] - r_anchor) + lat[idx]
            for stream in np.unique(s.stream[idx]):
                sub = idx[s.stream[idx] == stream]
                sub = sub[np.argsort(s.start[sub], kind="stable")]
                ai = a[np.searchsorted(idx, sub)]
                c = gap[sub] + dur[sub]
                S = np.cumsum(c)
                base = np.maximum.accumulate(ai + dur[sub] - S)
                prev = ready.get(int(stream))
                if prev is not None:
                    base = np.maximum(base, prev)
                ends = S + base
                new_end[sub] = ends
                ready[int(stream)] = float(ends[-1])
            done_new = max(done_new, float(new_end[idx].max()))
            done_old = max(done_old, float(rel_end[idx].max()))
        if seg_i == n_sync:
            break
        a0, b0 = int(s.sync_start[seg_i]), int(s.sync_end[seg_i])
        ra, rb = rm.removed(np.array([a0, b0]))
        a_rel, b_rel = float(a0 - w0), float(b0 - w0)
        a_new = anchor_new + (a_rel - anchor_old) - (ra - r_anchor)
        if done_old > b_rel:  # the call did not wait for all of it (another stream): not an anchor
            continue
        tail = b_rel - max(a_rel, done_old)  # what the call took after the GPU had finished
        anchor_old, anchor_new, r_anchor = b_rel, max(a_new, done_new) + tail, float(rb)
    r_end = float(rm.removed(np.array([s.wend]))[0])
    host_end = anchor_new + (float(s.wend - w0) - anchor_old) - (r_end - r_anchor)
    gpu_end = float(new_end.max()) if new_end.size else -np.inf
    return max(host_end, gpu_end)
