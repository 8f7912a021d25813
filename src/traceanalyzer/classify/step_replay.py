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

The arrays are polars Series (anything ``pl.Series`` takes is accepted): the per-stream
recurrences are running sums and maxima over the stream (``cum_sum().over``), so the replay
needs no other array library.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: the largest queue gap between two items of one stream that is still the GPU's own (beyond it
#: the item waited for something else: its launch, another stream)
QUEUE_GAP_NS = 2_000
#: the launch latency assumed when no item of the rank waited on its launch
DEFAULT_LATENCY_NS = 5_000


def i64(x=()) -> pl.Series:
    """``x`` as an Int64 Series (a Series, a list, a NumPy array)."""
    return x.cast(pl.Int64) if isinstance(x, pl.Series) else pl.Series(values=x, dtype=pl.Int64)


def f64(x=()) -> pl.Series:
    return x.cast(pl.Float64) if isinstance(x, pl.Series) else pl.Series(values=x, dtype=pl.Float64)


@dataclass
class StepInput:
    """One step of one rank, as Int64 Series (ns on the trace's clock)."""

    wstart: int
    wend: int
    #: GPU items launched in the step: start, end, stream (an integer code), launch (-1: unknown)
    start: pl.Series
    end: pl.Series
    stream: pl.Series
    launch: pl.Series
    #: per stream code, when the work launched before the step ends on it (absent: idle)
    ready: dict[int, int] = field(default_factory=dict)
    #: the host's synchronisations in the step: start, end (sorted by start, not overlapping)
    sync_start: pl.Series = field(default_factory=i64)
    sync_end: pl.Series = field(default_factory=i64)
    #: the launch latency of the rank (ns)
    latency: int = DEFAULT_LATENCY_NS

    def __post_init__(self) -> None:
        self.start, self.end, self.stream, self.launch = (i64(x) for x in (self.start, self.end, self.stream, self.launch))
        self.sync_start, self.sync_end = i64(self.sync_start), i64(self.sync_end)


@dataclass
class Removal:
    """Host time to take out: ``cost`` ns at each of ``points`` (sorted), and the sorted,
    disjoint ``[lo, hi)`` intervals; ``drop_syncs``: the synchronisations are no anchors."""

    points: pl.Series = field(default_factory=i64)
    cost: pl.Series = field(default_factory=f64)
    lo: pl.Series = field(default_factory=i64)
    hi: pl.Series = field(default_factory=i64)
    drop_syncs: bool = False

    def __post_init__(self) -> None:
        self.points, self.cost, self.lo, self.hi = i64(self.points), f64(self.cost), i64(self.lo), i64(self.hi)
        self._cum = pl.concat([f64([0.0]), self.cost.cum_sum()])
        self._before = pl.concat([f64([0.0]), (self.hi - self.lo).cast(pl.Float64).cum_sum()])

    def removed(self, t) -> pl.Series:
        """R(t): the host time removed before each time of ``t``."""
        t = i64(t)
        out = self._cum.gather(self.points.search_sorted(t, side="left"))
        if self.lo.len():
            i = self.lo.search_sorted(t, side="right").cast(pl.Int64) - 1  # the interval starting at or before t
            ic = i.clip(lower_bound=0)
            d = pl.DataFrame({"t": t, "ok": i >= 0, "lo": self.lo.gather(ic), "hi": self.hi.gather(ic), "b": self._before.gather(ic), "out": out})
            inside = pl.when(pl.col("ok")).then(pl.min_horizontal("t", "hi") - pl.col("lo")).otherwise(0)
            out = d.select(pl.col("out") + pl.when(pl.col("ok")).then(pl.col("b") + pl.max_horizontal(inside, 0)).otherwise(0.0)).to_series()
        return out

    def plus(self, lo, hi, drop_syncs: bool = False) -> "Removal":
        """These costs with the intervals ``[lo, hi)`` removed too (merged with the own)."""
        lo2, hi2 = union(pl.concat([self.lo, i64(lo)]), pl.concat([self.hi, i64(hi)]))
        return Removal(self.points, self.cost, lo2, hi2, drop_syncs or self.drop_syncs)


def union(lo, hi) -> tuple[pl.Series, pl.Series]:
    """The union of intervals ``[lo, hi)`` as sorted disjoint intervals."""
    d = pl.DataFrame({"lo": i64(lo), "hi": i64(hi)}).filter(pl.col("hi") > pl.col("lo")).sort("lo", maintain_order=True)
    reach = pl.col("hi").cum_max()
    d = d.with_columns(reach.alias("reach"), (pl.col("lo") > reach.shift(1)).fill_null(True).alias("opens"))
    return d.filter("opens").get_column("lo"), d.filter(pl.col("opens").shift(-1, fill_value=True)).get_column("reach")


def replay_step(s: StepInput, rm: Removal) -> float:
    """The step's length (ns) replayed with ``rm`` taken out of its host time (module doc).

    Vectorised: between two synchronisations the host map is one shift, and on each stream the
    items' ends follow ``end_i = max(a_i + d_i, end_(i-1) + g_i + d_i)`` (``a_i`` the moved launch
    plus latency, ``d_i`` the duration, ``g_i`` the queue gap), whose solution is
    ``end_i = S_i + max(max_(j<=i) (a_j + d_j - S_j), ready)`` with ``S_i`` the running sum of
    ``g + d``: a running maximum per stream, no loop over items. Times are relative to the
    step's start (float64 holds them exactly to well below a nanosecond)."""
    w0 = s.wstart
    n_sync = 0 if rm.drop_syncs else s.sync_start.len()
    known = s.launch >= 0
    host_t = pl.select(pl.when(pl.lit(known)).then(pl.lit(s.launch)).otherwise(pl.lit(s.start))).to_series()
    seg = s.sync_start.head(n_sync).search_sorted(host_t, side="right") if n_sync else pl.repeat(0, host_t.len(), dtype=pl.UInt32, eager=True)
    start, end, launch, stream = pl.col("start"), pl.col("end"), pl.col("launch"), pl.col("stream")
    first = stream != stream.shift(1)
    prev_end = pl.when(first.fill_null(True)).then(stream.replace_strict(s.ready, default=None, return_dtype=pl.Int64)).otherwise(end.shift(1))
    items = pl.DataFrame({
        "start": s.start, "end": s.end, "stream": s.stream, "launch": s.launch, "seg": seg,
        "rel_host": (host_t - w0).cast(pl.Float64), "r_host": rm.removed(host_t),
    }).with_columns(
        pl.when(launch >= 0).then(pl.min_horizontal(pl.max_horizontal(start - launch, 0), s.latency)).otherwise(0).cast(pl.Float64).alias("lat"),
        (end - start).cast(pl.Float64).alias("dur"),
        (end - w0).cast(pl.Float64).alias("rel_end"),
    ).sort("stream", "start", maintain_order=True).with_columns(
        # each item's own queue gap behind the item before it on its stream (in the trace), capped
        prev_end.alias("prev_end"),
    ).with_columns(
        pl.when(pl.col("prev_end").is_null()).then(QUEUE_GAP_NS).otherwise((start - pl.col("prev_end")).clip(0, QUEUE_GAP_NS))
        .cast(pl.Float64).alias("gap"),
    )
    by_seg = items.partition_by("seg", as_dict=True, maintain_order=True) if n_sync else {(0,): items}
    ready = {int(k): float(v - w0) for k, v in s.ready.items()}
    gpu_end = float("-inf")
    anchor_old, anchor_new = 0.0, 0.0
    r_anchor = rm.removed([w0]).item()
    done_old = float(max(s.ready.values(), default=w0) - w0)
    done_new = done_old
    for seg_i in range(n_sync + 1):
        part = by_seg.get((seg_i,))
        if part is not None and part.height:
            S = (pl.col("gap") + pl.col("dur")).cum_sum().over("stream")
            a = pl.lit(anchor_new) + (pl.col("rel_host") - anchor_old) - (pl.col("r_host") - r_anchor) + pl.col("lat")
            out = part.with_columns(S.alias("S")).select(  # S first: a window inside a window is refused by polars < 1.34
                "stream", "rel_end", "S", (a + pl.col("dur") - pl.col("S")).cum_max().over("stream").alias("base")).with_columns(
                (pl.col("S") + pl.max_horizontal("base", stream.replace_strict(ready, default=None, return_dtype=pl.Float64))).alias("ends"))
            for k, v in out.group_by("stream").agg(pl.col("ends").last()).iter_rows():
                ready[int(k)] = float(v)
            hi_new, hi_old = out.select(pl.col("ends").max(), pl.col("rel_end").max()).row(0)
            gpu_end = max(gpu_end, hi_new)
            done_new, done_old = max(done_new, hi_new), max(done_old, hi_old)
        if seg_i == n_sync:
            break
        a0, b0 = s.sync_start[seg_i], s.sync_end[seg_i]
        ra, rb = rm.removed([a0, b0]).to_list()
        a_rel, b_rel = float(a0 - w0), float(b0 - w0)
        a_new = anchor_new + (a_rel - anchor_old) - (ra - r_anchor)
        if done_old > b_rel:  # the call did not wait for all of it (another stream): not an anchor
            continue
        tail = b_rel - max(a_rel, done_old)  # what the call took after the GPU had finished
        anchor_old, anchor_new, r_anchor = b_rel, max(a_new, done_new) + tail, float(rb)
    r_end = rm.removed([s.wend]).item()
    host_end = anchor_new + (float(s.wend - w0) - anchor_old) - (r_end - r_anchor)
    return max(host_end, gpu_end)
