"""The critical path across host threads, on the small H200 run: the backward pass runs on
autograd's worker thread while the main thread waits outside every op, so the path follows into
the worker and spends under 15 % of itself in host gaps. Checked against a plain-Python walk over
the raw JSON: the time in each step when no host thread is inside an op bounds the path's gaps."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pytest

from traceanalyzer.api import critical_path

from conftest import TRACES

SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"
pytestmark = pytest.mark.skipif(not SMALL.exists(), reason=f"H200 traces not found at {SMALL}")


def _raw():
    """(steps as (n, start, end) in ns, every thread's ops as (tid, start, end) in ns) from the JSON."""
    ev = json.loads(gzip.decompress(SMALL.read_bytes()))["traceEvents"]
    steps = sorted((int(e["name"].split("#")[1]), round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3))
                   for e in ev if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#"))
    ops = [(str(e["tid"]), round(e["ts"] * 1e3), round((e["ts"] + e["dur"]) * 1e3))
           for e in ev if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver") and e["dur"] > 0]
    return steps, ops


def _free(ops, lo: int, hi: int) -> int:
    """ns of [lo, hi] when no thread is inside an op."""
    cur, free = lo, 0
    for _, s, e in sorted(o for o in ops if o[2] > lo and o[1] < hi):
        if s > cur:
            free += s - cur
        cur = max(cur, e)
    return free + max(0, hi - cur)


def test_the_path_follows_backward_into_the_worker_thread():
    steps, ops = _raw()
    threads = Counter(t for t, _, _ in ops)
    main, worker = threads.most_common(2)[1][0], threads.most_common(1)[0][0]  # the worker runs most ops (backward)
    cp = critical_path(SMALL)
    seg = cp.segments
    for n, lo, hi in steps:
        row = cp.summary.filter(cp.summary["step"] == n).row(0, named=True)
        mine = seg.filter(seg["step"] == n)
        gaps = int(mine.filter(mine["what"] == "host_gap")["dur_ns"].sum())
        on_worker = int(mine.filter((mine["what"] == "host_op") & mine["where"].str.ends_with(f"/{worker}"))["dur_ns"].sum())
        # under 15 % of the path in host gaps (95 % before the path crossed threads)
        assert gaps < 0.15 * row["path_ns"], (n, gaps, row["path_ns"])
        # never more gap than the time no thread of the process is in an op (the raw JSON's union)
        assert gaps <= _free(ops, lo, hi), (n, gaps, _free(ops, lo, hi))
        # the backward's ops on the worker thread are on the path: more than a third of it
        assert on_worker > row["path_ns"] / 3, (n, on_worker)
        assert row["path_ns"] <= row["window_ns"]
    assert threads[worker] > threads[main]
