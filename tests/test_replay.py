"""The step replay (classify.critical_path.replay) on hand-built steps whose answer is known by
hand: a host thread launching kernels with gaps of known size, a GPU-bound queue, a
synchronisation, and the profiler's cost on a trace built event by event."""

from __future__ import annotations

import numpy as np
import polars as pl

from traceanalyzer.classify.critical_path.replay import QUEUE_GAP_NS, Removal, StepInput, replay_step, union
from traceanalyzer.classify.profiler_cost import profiler_cost
from traceanalyzer.schema import EVENT_SCHEMA, conform

US = 1_000


def _arr(*xs):
    return np.array(xs, dtype=np.int64)


def _host_bound_step(n=5, every=100 * US, kernel=20 * US, lat=5 * US):
    """A host thread launching a ``kernel``-long kernel every ``every`` ns from t = 0: the GPU
    starts each ``lat`` after its launch; the step ends with the host at n x every."""
    launch = np.arange(n, dtype=np.int64) * every
    start = launch + lat
    return StepInput(0, n * every, start, start + kernel, np.zeros(n, np.int64), launch, latency=lat)


def test_a_host_bound_step_shrinks_by_the_host_time_taken_out():
    s = _host_bound_step()
    assert replay_step(s, Removal()) == 500 * US  # nothing removed: the host end
    # 10 µs taken out at the start of each 100 µs: every launch 10 µs earlier per launch before it,
    # the host's end 50 µs earlier
    rm = Removal(points=np.arange(5, dtype=np.int64) * 100 * US, cost=np.full(5, 10.0 * US))
    assert replay_step(s, rm) == 450 * US


def test_a_gap_taken_out_moves_the_rest_of_the_step():
    s = _host_bound_step()
    # a 60 µs stall between the 3rd and 4th launch (210..270 µs): removed, the step ends 60 µs sooner
    got = replay_step(s, Removal().plus(_arr(210 * US), _arr(270 * US)))
    assert got == 440 * US


def test_a_gpu_bound_queue_is_not_shortened_by_the_host():
    # five 100 µs kernels launched 1 µs apart from t = 0: the GPU runs them back to back
    launch = np.arange(5, dtype=np.int64) * US
    start = 5 * US + np.arange(5, dtype=np.int64) * 100 * US
    s = StepInput(0, 10 * US, start, start + 100 * US, np.zeros(5, np.int64), launch, latency=5 * US)
    full = replay_step(s, Removal())
    assert full == 505 * US  # the last kernel's end
    rm = Removal(points=launch, cost=np.full(5, 0.9 * US))
    assert replay_step(s, rm) == full


def test_a_synchronisation_waits_for_the_gpu_and_anchors_the_host():
    # launch at 0 a 300 µs kernel (starts 5 µs), sync 10..305 µs, then 100 µs of host work to the
    # step's end at 405 µs
    s = StepInput(0, 405 * US, _arr(5 * US), _arr(305 * US), _arr(0), _arr(0), sync_start=_arr(10 * US),
                  sync_end=_arr(305 * US), latency=5 * US)
    assert replay_step(s, Removal()) == 405 * US
    # host time before the sync taken out: the GPU still ends at 305 µs, the step does not move
    assert replay_step(s, Removal(points=_arr(1 * US), cost=np.array([5.0 * US]))) == 405 * US
    # host time after the sync taken out: it moves the end
    assert replay_step(s, Removal(points=_arr(350 * US), cost=np.array([40.0 * US]))) == 365 * US
    # the sync not waited for (no anchor, its wait taken out): the host's 100 µs run beside the
    # kernel, the step ends with the kernel
    assert replay_step(s, Removal().plus(_arr(10 * US), _arr(305 * US), drop_syncs=True)) == 305 * US


def test_items_of_one_stream_run_in_order_with_their_queue_gap():
    # two kernels queued behind each other with a 1 µs gap; the first one's launch moved earlier
    s = StepInput(0, 50 * US, _arr(10 * US, 31 * US), _arr(30 * US, 40 * US), _arr(0, 0), _arr(5 * US, 6 * US), latency=5 * US)
    rm = Removal(points=_arr(0), cost=np.array([4.0 * US]))
    # both launches 4 µs earlier: kernel 1 at 6..26, kernel 2 behind it at 27..36 (its own 1 µs gap, below the cap)
    assert 1 * US < QUEUE_GAP_NS
    assert replay_step(StepInput(0, 0, s.start, s.end, s.stream, s.launch, latency=s.latency), rm) == 36 * US


def test_union_merges_overlapping_intervals():
    lo, hi = union(_arr(0, 5, 20, 21), _arr(10, 8, 25, 22))
    assert lo.tolist() == [0, 20] and hi.tolist() == [10, 25]


def _trace_events(n=4, every=100_000, kernel=20_000, ops_per_launch=3):
    """One step [0, n x every) of a host thread: at each launch, ``ops_per_launch`` cpu_ops and
    one cudaLaunchKernel (correlation i), its kernel 5 µs after the call on stream 7."""
    rows = [dict(kind="annotation", name="ProfilerStep#1", start_ns=0, end_ns=n * every, tid="1", pid="1")]
    for i in range(n):
        t = i * every
        for j in range(ops_per_launch):
            rows.append(dict(kind="cpu_op", name=f"aten::op{j}", start_ns=t + j * 1000, end_ns=t + j * 1000 + 500, tid="1", pid="1"))
        rows.append(dict(kind="runtime", name="cudaLaunchKernel", start_ns=t + 4000, end_ns=t + 4500, correlation=i + 1, tid="1", pid="1"))
        rows.append(dict(kind="kernel", name="k", start_ns=t + 9000, end_ns=t + 9000 + kernel, correlation=i + 1, stream=7, tid="7", pid="0"))
    return conform(pl.DataFrame([{"rank": 0, **r} for r in rows]), EVENT_SCHEMA)


def test_profiler_cost_on_a_host_bound_trace_is_the_cost_per_event():
    ev = _trace_events()
    win = pl.DataFrame({"rank": [0], "step": [1], "wstart_ns": [0], "wend_ns": [400_000]}, schema_overrides={"rank": pl.Int32})
    costs = {"cpu_op": 1000.0, "annotation": 1000.0, "runtime": 2000.0, "python": 0.0}
    r = profiler_cost(ev, win, {0: []}, costs).row(0, named=True)
    # 12 cpu_ops x 1 µs + 4 launch calls x 2 µs + the step annotation's 1 µs = 21 µs of host time
    assert r["profiler_host_ns"] == 21_000
    # host-bound (the host's end, 400 µs, is after the last kernel's, 329 µs): all of it comes off the step
    assert r["unprofiled_estimate_ns"] == 400_000 - 21_000
    assert r["profiler_overhead_ns"] == 21_000
    assert r["profiler_note"] is None


def test_no_host_events_gives_no_estimate_and_says_why():
    ev = _trace_events().filter(pl.col("kind") == "kernel")
    win = pl.DataFrame({"rank": [0], "step": [1], "wstart_ns": [0], "wend_ns": [400_000]}, schema_overrides={"rank": pl.Int32})
    r = profiler_cost(ev, win, {0: []}).row(0, named=True)
    assert r["unprofiled_estimate_ns"] is None and "no host events" in r["profiler_note"]
