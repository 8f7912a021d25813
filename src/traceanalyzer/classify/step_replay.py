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

The arrays are NumPy arrays (a polars Series, a list or an array is accepted): a step holds a
few thousand items and is replayed several times (each cause priced is one replay), so the
per-stream recurrences are running sums and maxima over each stream's slice of one sorted
array, without a query per replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

#: the largest queue gap between two items of one stream that is still the GPU's own (beyond it
#: the item waited for something else: its launch, another stream)
QUEUE_GAP_NS = 2_000
#: the launch latency assumed when no item of the rank waited on its launch
DEFAULT_LATENCY_NS = 5_000


def i64(x=()) -> pl.Series:
    """``x`` as an Int64 Series (a Series, a list, a NumPy array)."""
    return x.cast(pl.Int64) if isinstance(x, pl.Series) else pl.Series(values=x, dtype=pl.Int64)


def _ints(x=()) -> np.ndarray:
    """``x`` (a Series, a list, an array) as an int64 array."""
    if isinstance(x, pl.Series):
        return x.cast(pl.Int64).to_numpy()
    return np.asarray(x, dtype=np.int64).reshape(-1)


def _floats(x=()) -> np.ndarray:
    if isinstance(x, pl.Series):
        return x.cast(pl.Float64).to_numpy()
    return np.asarray(x, dtype=np.float64).reshape(-1)


@dataclass
class StepInput:
    """One step of one rank (ns on the trace's clock), its arrays as int64 NumPy arrays."""

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
    sync_start: np.ndarray = field(default_factory=_ints)
    sync_end: np.ndarray = field(default_factory=_ints)
    #: the launch latency of the rank (ns)
    latency: int = DEFAULT_LATENCY_NS

    def __post_init__(self) -> None:
        self.start, self.end, self.stream, self.launch = (_ints(x) for x in (self.start, self.end, self.stream, self.launch))
        self.sync_start, self.sync_end = _ints(self.sync_start), _ints(self.sync_end)
        self._items: _Items | None = None

    def items(self) -> _Items:
        """What every replay of the step shares: its items sorted by stream and start, with
        their durations, latencies and queue gaps (made once, on the first replay)."""
        if self._items is None:
            self._items = _Items(self)
        return self._items


class _Items:
    """A step's GPU items in stream order (by stream, then start, ties in the trace's order)."""

    def __init__(self, s: StepInput) -> None:
        w0 = s.wstart
        order = np.lexsort((s.start, s.stream))  # stable: ties keep their order
        start, end, stream, launch = s.start[order], s.end[order], s.stream[order], s.launch[order]
        known = launch >= 0
        self.host_t = np.where(known, launch, start)  # when the host launched it (its start if unknown)
        self.rel_host = (self.host_t - w0).astype(np.float64)
        self.lat = np.where(known, np.minimum(np.maximum(start - launch, 0), s.latency), 0).astype(np.float64)
        self.dur = (end - start).astype(np.float64)
        self.rel_end = (end - w0).astype(np.float64)
        # each item's own queue gap behind the item before it on its stream (in the trace), capped;
        # the first of a stream: behind the work launched before the step, when there is some
        first = np.ones(len(stream), dtype=bool)
        first[1:] = stream[1:] != stream[:-1]
        prev_end = np.empty(len(end), dtype=np.int64)
        prev_end[1:] = end[:-1]
        has_prev = ~first
        for i in np.flatnonzero(first):
            r = s.ready.get(int(stream[i]))
            if r is not None:
                prev_end[i], has_prev[i] = r, True
        gap = np.full(len(start), QUEUE_GAP_NS, dtype=np.int64)
        gap[has_prev] = np.clip(start[has_prev] - prev_end[has_prev], 0, QUEUE_GAP_NS)
        self.gap = gap.astype(np.float64)
        self.stream = stream
        self.n_sync = len(s.sync_start)
        self.seg = np.searchsorted(s.sync_start, self.host_t, side="right") if self.n_sync else np.zeros(len(start), dtype=np.int64)
        self._segments: dict[bool, list[tuple[np.ndarray, list[tuple[int, int, int]]]]] = {}

    def segments(self, use_syncs: bool) -> list[tuple[np.ndarray, list[tuple[int, int, int]]]]:
        """Per host segment (between two synchronisations; one segment without them): the
        indices of its items, in stream order, and its streams as ``(code, first, stop)`` runs
        of those indices."""
        if use_syncs not in self._segments:
            n = self.n_sync if use_syncs else 0
            out = []
            for seg_i in range(n + 1):
                idx = np.flatnonzero(self.seg == seg_i) if n else np.arange(len(self.stream))
                st = self.stream[idx]
                cuts = np.flatnonzero(st[1:] != st[:-1]) + 1
                bounds = np.concatenate(([0], cuts, [len(idx)]))
                out.append((idx, [(int(st[a]), int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]))
            self._segments[use_syncs] = out
        return self._segments[use_syncs]


@dataclass
class Removal:
    """Host time to take out: ``cost`` ns at each of ``points`` (sorted), and the sorted,
    disjoint ``[lo, hi)`` intervals; ``drop_syncs``: the synchronisations are no anchors."""

    points: np.ndarray = field(default_factory=_ints)
    cost: np.ndarray = field(default_factory=_floats)
    lo: np.ndarray = field(default_factory=_ints)
    hi: np.ndarray = field(default_factory=_ints)
    drop_syncs: bool = False

    def __post_init__(self) -> None:
        self.points, self.cost, self.lo, self.hi = _ints(self.points), _floats(self.cost), _ints(self.lo), _ints(self.hi)
        self._cum = np.concatenate(([0.0], np.cumsum(self.cost)))
        self._before = np.concatenate(([0.0], np.cumsum((self.hi - self.lo).astype(np.float64))))

    def removed(self, t) -> np.ndarray:
        """R(t): the host time removed before each time of ``t``."""
        t = _ints(t)
        out = self._cum[np.searchsorted(self.points, t, side="left")]
        if len(self.lo):
            i = np.searchsorted(self.lo, t, side="right") - 1  # the interval starting at or before t
            ok = i >= 0
            ic = np.maximum(i, 0)
            inside = np.maximum(np.minimum(t, self.hi[ic]) - self.lo[ic], 0)
            out = out + np.where(ok, self._before[ic] + inside, 0.0)
        return out

    def plus(self, lo, hi, drop_syncs: bool = False) -> Removal:
        """These costs with the intervals ``[lo, hi)`` removed too (merged with the own)."""
        lo2, hi2 = union(np.concatenate((self.lo, _ints(lo))), np.concatenate((self.hi, _ints(hi))))
        return Removal(self.points, self.cost, lo2, hi2, drop_syncs or self.drop_syncs)


def union(lo, hi) -> tuple[pl.Series, pl.Series]:
    """The union of intervals ``[lo, hi)`` as sorted disjoint intervals (Int64 Series)."""
    lo, hi = _ints(lo), _ints(hi)
    keep = hi > lo
    order = np.argsort(lo[keep], kind="stable")
    lo, hi = lo[keep][order], hi[keep][order]
    reach = np.maximum.accumulate(hi) if len(hi) else hi  # how far the intervals so far reach
    opens = np.ones(len(lo), dtype=bool)
    opens[1:] = lo[1:] > reach[:-1]  # an interval past every earlier one opens a new piece
    closes = np.ones(len(lo), dtype=bool)
    closes[:-1] = opens[1:]  # the last interval before one that opens closes its piece
    return pl.Series(lo[opens], dtype=pl.Int64), pl.Series(reach[closes], dtype=pl.Int64)


def replay_step(s: StepInput, rm: Removal) -> float:
    """The step's length (ns) replayed with ``rm`` taken out of its host time (module doc).

    Between two synchronisations the host map is one shift, and on each stream the items' ends
    follow ``end_i = max(a_i + d_i, end_(i-1) + g_i + d_i)`` (``a_i`` the moved launch plus
    latency, ``d_i`` the duration, ``g_i`` the queue gap), whose solution is
    ``end_i = S_i + max(max_(j<=i) (a_j + d_j - S_j), ready)`` with ``S_i`` the running sum of
    ``g + d``: a running maximum per stream, no loop over items. Times are relative to the
    step's start (float64 holds them exactly to well below a nanosecond)."""
    w0 = s.wstart
    it = s.items()
    n_sync = 0 if rm.drop_syncs else it.n_sync
    r_host = rm.removed(it.host_t)
    ready = {int(k): float(v - w0) for k, v in s.ready.items()}
    gpu_end = float("-inf")
    anchor_old, anchor_new = 0.0, 0.0
    r_anchor = float(rm.removed([w0])[0])
    done_old = float(max(s.ready.values(), default=w0) - w0)
    done_new = done_old
    segments = it.segments(not rm.drop_syncs)
    for seg_i in range(n_sync + 1):
        idx, runs = segments[seg_i]
        if len(idx):
            a = anchor_new + (it.rel_host[idx] - anchor_old) - (r_host[idx] - r_anchor) + it.lat[idx]
            gd, dur = it.gap[idx] + it.dur[idx], it.dur[idx]
            hi_new = float("-inf")
            for code, lo_i, hi_i in runs:
                S = np.cumsum(gd[lo_i:hi_i])
                base = np.maximum.accumulate(a[lo_i:hi_i] + dur[lo_i:hi_i] - S)
                r = ready.get(code)
                ends = S + (base if r is None else np.maximum(base, r))
                ready[code] = float(ends[-1])
                hi_new = max(hi_new, float(ends.max()))
            hi_old = float(it.rel_end[idx].max())
            gpu_end = max(gpu_end, hi_new)
            done_new, done_old = max(done_new, hi_new), max(done_old, hi_old)
        if seg_i == n_sync:
            break
        a0, b0 = int(s.sync_start[seg_i]), int(s.sync_end[seg_i])
        ra, rb = (float(x) for x in rm.removed([a0, b0]))
        a_rel, b_rel = float(a0 - w0), float(b0 - w0)
        a_new = anchor_new + (a_rel - anchor_old) - (ra - r_anchor)
        if done_old > b_rel:  # the call did not wait for all of it (another stream): not an anchor
            continue
        tail = b_rel - max(a_rel, done_old)  # what the call took after the GPU had finished
        anchor_old, anchor_new, r_anchor = b_rel, max(a_new, done_new) + tail, rb
    r_end = float(rm.removed([s.wend])[0])
    host_end = anchor_new + (float(s.wend - w0) - anchor_old) - (r_end - r_anchor)
    return max(host_end, gpu_end)
