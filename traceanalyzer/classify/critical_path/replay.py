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
    """The step's length (ns) replayed with ``rm`` taken out of its host time (module doc)."""
    n_sync = 0 if rm.drop_syncs else int(s.sync_start.size)
    # the segment of host time each item's launch falls in (between two synchronisations)
    known = s.launch >= 0
    host_t = np.where(known, s.launch, s.start)
    seg = np.searchsorted(s.sync_start[:n_sync], host_t, side="right") if n_sync else np.zeros(host_t.size, np.int64)
    order = np.lexsort((s.start, seg))
    r_host = rm.removed(host_t)
    # the item's own latency (capped) and its own queue gap behind the item before it (capped)
    lat = np.minimum(np.maximum(s.start - s.launch, 0), s.latency)
    ready = dict(s.ready)
    ready_old = dict(s.ready)
    gap = np.zeros(s.start.size, np.int64)
    for i in np.argsort(s.start, kind="stable"):
        st = int(s.stream[i])
        prev = ready_old.get(st)
        gap[i] = QUEUE_GAP_NS if prev is None else min(max(int(s.start[i]) - prev, 0), QUEUE_GAP_NS)
        ready_old[st] = max(prev or 0, int(s.end[i]))
    new_end = np.empty(s.start.size, np.float64)
    anchor_old, anchor_new = float(s.wstart), float(s.wstart)
    r_anchor = float(rm.removed(np.array([s.wstart]))[0])
    done_old, done_new = float(max(s.ready.values(), default=s.wstart)), float(max(s.ready.values(), default=s.wstart))
    k = 0
    n = order.size
    for seg_i in range(n_sync + 1):
        # the items launched in this segment, in stream order
        while k < n and seg[order[k]] == seg_i:
            i = order[k]
            k += 1
            launch_new = anchor_new + (host_t[i] - anchor_old) - (r_host[i] - r_anchor)
            st = int(s.stream[i])
            t0 = launch_new + (lat[i] if known[i] else 0)
            prev = ready.get(st)
            if prev is not None:
                t0 = max(t0, prev + gap[i])
            t1 = t0 + float(s.end[i] - s.start[i])
            new_end[i] = t1
            ready[st] = t1
            done_new = max(done_new, t1)
            done_old = max(done_old, float(s.end[i]))
        if seg_i == n_sync:
            break
        a, b = int(s.sync_start[seg_i]), int(s.sync_end[seg_i])
        ra, rb = rm.removed(np.array([a, b]))
        a_new = anchor_new + (a - anchor_old) - (ra - r_anchor)
        if done_old > b:  # the call did not wait for all of it (another stream): not an anchor
            continue
        tail = b - max(a, done_old)  # what the call took after the GPU had finished
        anchor_old, anchor_new, r_anchor = float(b), max(a_new, done_new) + tail, float(rb)
    r_end = float(rm.removed(np.array([s.wend]))[0])
    host_end = anchor_new + (s.wend - anchor_old) - (r_end - r_anchor)
    gpu_end = float(new_end.max()) if new_end.size else -np.inf
    return max(host_end, gpu_end) - s.wstart
