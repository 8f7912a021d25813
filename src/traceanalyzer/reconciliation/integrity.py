"""Trace integrity: can the numbers of this trace be trusted, before any of them is shown.

:func:`integrity` runs every check of :data:`CHECKS` on an
:class:`~traceanalyzer.classify.Analysis` and returns one dict per check: ``check`` (its name),
``ok`` (True: passed; False: failed; None: skipped, the trace or the analysis cannot tell),
``affects`` (the numbers a failed check makes unreliable; empty otherwise) and ``detail`` (one
sentence with the counts behind the verdict, or why the check was skipped).

The checks read the per-rank facts of :mod:`traceanalyzer.classify.tracefacts` (the optional
table ``trace_facts``), the partition, the matched collectives and the parsers' warnings; none of
them changes a number, they say which ones to doubt:

* ``cuda_graphs``: CUDA / HIP graph launches ran work of the trace (one launch runs many kernels:
  launch statistics, the CPU-bound verdict and the kernels' shapes and FLOPs do not see inside);
* ``graph_replays``: graph launches whose kernels were not recorded (the profiler traced only some
  replays: the GPU reads as idle where it ran unrecorded work);
* ``profiler_dilation``: the profiler's own host work lengthens the step by more than
  :data:`DILATION_SHARE` (read from the analysis' unprofiled estimate when it has one: per step
  ``profiler_overhead_us`` / ``unprofiled_estimate_us``; skipped without);
* ``gpu_work``: GPU activity starts in every step's window (a step with none, whatever the previous
  step's work still running in it, is a capture gap or a misplaced window);
* ``stream_order``: no kernel starts before the previous kernel of its stream ended (a stream runs
  in order: an overlap is a wrong timestamp, as ROCm's ``dur`` overruns);
* ``activity_buffers``: the profiler's log in the trace does not say it dropped activity records
  or ran out of buffers;
* ``rank_clocks``: no rank ends a collective before another rank of its group started it (their
  clocks disagree: cross-rank wait, skew and stragglers are then wrong);
* ``host_events``: the trace holds host events (a GPU-only capture shows no cause on the host).
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.schema import LOST_RECORDS

#: a profiled step longer than its unprofiled estimate by more than this share fails the dilation check
DILATION_SHARE = 0.05
#: a collective ending on one rank this long before another rank of its group started it: clocks disagree
CLOCK_TOLERANCE_NS = 20_000
#: the words of the parsers' warning where the profiler's own log (Kineto's ``WARNING`` / ``ERROR`` keys) says it lost records
BUFFER_WARNING = LOST_RECORDS

CHECKS = ["cuda_graphs", "graph_replays", "profiler_dilation", "gpu_work", "stream_order", "activity_buffers",
          "rank_clocks", "host_events"]
AFFECTS = {
    "cuda_graphs": ["launch statistics and the CPU-bound verdict (one launch per graph)",
                    "trace FLOPs and GEMM shapes (kernels inside a graph carry no op shapes)",
                    "memory (the graph pool is not in the allocator record)"],
    "graph_replays": ["idle (unrecorded replays read as idle GPU)", "every bucket's share of the step", "MFU / TFLOP/s"],
    "profiler_dilation": ["step time", "MFU / TFLOP/s", "the CPU-bound verdict and host-bound findings",
                          "what-ifs anchored on this trace"],
    "gpu_work": ["per-step means", "MFU / TFLOP/s", "the findings' share of the step"],
    "stream_order": ["the split of compute / exposed communication / idle", "kernel durations"],
    "activity_buffers": ["every GPU bucket (dropped kernels read as idle)", "kernel counts and durations"],
    "rank_clocks": ["collective wait / transfer", "cross-rank skew and the late arriver", "stragglers"],
    "host_events": ["idle by cause (no host-bound, sync or data-loader split)", "launch statistics",
                    "the critical path", "host-bound findings"],
}


def _row(check: str, ok: bool | None, detail: str) -> dict[str, Any]:
    return {"check": check, "ok": ok, "affects": AFFECTS[check] if ok is False else [], "detail": detail}


def _facts(analysis) -> pl.DataFrame | None:
    f = getattr(analysis, "extras", {}).get("trace_facts")
    return f if f is not None and f.height else None


def _ranks(df: pl.DataFrame, col: str) -> str:
    r = df.filter(pl.col(col) > 0)["rank"].to_list()
    return ", ".join(map(str, r[:8])) + (f" and {len(r) - 8} more" if len(r) > 8 else "")


def _graphs(facts: pl.DataFrame | None) -> list[dict[str, Any]]:
    if facts is None:
        why = "no trace facts in this analysis (the trace_facts table was not asked for)"
        return [_row("cuda_graphs", None, why), _row("graph_replays", None, why)]
    launches, kernels = int(facts["graph_launches"].sum()), int(facts["graph_kernels"].sum())
    lost = int(facts["graph_launches_unrecorded"].sum())
    if launches == 0:
        return [_row("cuda_graphs", True, "no CUDA / HIP graph launch in the trace"),
                _row("graph_replays", True, "no graph replay to record")]
    rows = [_row("cuda_graphs", False, f"{launches:,} graph launches ran {kernels:,} recorded GPU items "
                                       f"(ranks {_ranks(facts, 'graph_launches')})")]
    if lost or kernels < launches:
        rows.append(_row("graph_replays", False, f"{lost:,} of {launches:,} graph launches have no recorded GPU work "
                                                 f"({kernels:,} items recorded for {launches:,} launches): the profiler "
                                                 "did not record every replay"))
    else:
        rows.append(_row("graph_replays", True, f"every one of the {launches:,} graph launches has its GPU work recorded "
                                                f"({kernels / launches:.1f} items per launch)"))
    return rows


def _dilation_frame(analysis) -> pl.DataFrame | None:
    """The per-step profiler-overhead estimate, wherever the analysis holds it (the steps or an extra table)."""
    want = {"profiler_overhead_us", "unprofiled_estimate_us"}
    for df in [analysis.steps, *getattr(analysis, "extras", {}).values()]:
        if isinstance(df, pl.DataFrame) and want <= set(df.columns):
            return df
    return None


def _dilation(analysis) -> dict[str, Any]:
    df = _dilation_frame(analysis)
    if df is None:
        return _row("profiler_dilation", None, "no estimate of the profiler's own cost in this analysis: "
                                               "step time is as recorded, with the profiler's overhead in it")
    d = df.filter(pl.col("unprofiled_estimate_us") > 0)
    if d.height == 0:
        return _row("profiler_dilation", None, "no step with an unprofiled estimate")
    share = float(d.select((pl.col("profiler_overhead_us") / pl.col("unprofiled_estimate_us")).median()).item())
    over = float(d["profiler_overhead_us"].median()) / 1e3
    detail = f"the profiler adds {over:.3f} ms per step ({100 * share:.1f} % of the unprofiled estimate, median over steps)"
    return _row("profiler_dilation", share <= DILATION_SHARE, detail)


def _gpu_work(steps: pl.DataFrame, facts: pl.DataFrame | None) -> dict[str, Any]:
    if steps.height == 0:
        return _row("gpu_work", None, "no step")
    if facts is not None and "steps_without_gpu" in facts.columns:
        empty = facts.select("rank", pl.col("steps_without_gpu").alias("step")).explode("step").drop_nulls("step")
        how = "no GPU activity starts in its window"
    else:
        empty = steps.filter((pl.col("duration_ns") - pl.col("idle_ns")) <= 0).select("rank", "step")
        how = "its GPU is never busy"
    if empty.height == 0:
        return _row("gpu_work", True, f"all {steps.height} rank-steps ran GPU work")
    where = ", ".join(f"rank {r} step {s}" for r, s in empty.head(6).iter_rows())
    return _row("gpu_work", False, f"{empty.height} of {steps.height} rank-steps ran no GPU work ({how}: {where})")


def _stream_order(facts: pl.DataFrame | None) -> dict[str, Any]:
    if facts is None:
        return _row("stream_order", None, "no trace facts in this analysis")
    n = int(facts["stream_overlaps"].sum())
    if n == 0:
        return _row("stream_order", True, "no kernel starts before the previous kernel of its stream ended")
    total, worst = int(facts["stream_overlap_ns"].sum()), int(facts["stream_overlap_max_ns"].max())
    return _row("stream_order", False, f"{n:,} kernels start before the previous kernel of their stream ended "
                                       f"({total / 1e3:.1f} µs in all, at most {worst / 1e3:.1f} µs; ranks "
                                       f"{_ranks(facts, 'stream_overlaps')})")


def _buffers(analysis, facts: pl.DataFrame | None) -> dict[str, Any]:
    said = [w for w in analysis.warnings if BUFFER_WARNING in w]
    if said:
        return _row("activity_buffers", False, said[0] + (f" (and {len(said) - 1} more files)" if len(said) > 1 else ""))
    return _row("activity_buffers", True, "the profiler's log in the trace reports no dropped records or full buffers")


def _clocks(analysis) -> dict[str, Any]:
    coll = analysis.collectives
    ranks = analysis.steps["rank"].n_unique() if analysis.steps.height else 0
    if ranks < 2:
        return _row("rank_clocks", None, "one rank: no clocks to compare")
    if coll is None or coll.height == 0 or "last_arrival_ns" not in coll.columns:
        return _row("rank_clocks", None, "no collective matched across ranks: the clocks cannot be compared")
    sync = coll.filter(pl.col("last_arrival_ns").is_not_null()
                       & pl.col("coll_type").cast(pl.String).is_in(["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"]))
    if sync.height == 0:
        return _row("rank_clocks", None, "no collective matched across ranks: the clocks cannot be compared")
    inst = sync.group_by(pl.col("pg_name").cast(pl.String), "instance").agg(
        pl.col("last_arrival_ns").first(), pl.col("end_ns").min().alias("first_end"),
        pl.col("rank").sort_by("end_ns").first().alias("early"),
        pl.col("rank").sort_by("start_ns").last().alias("late"))
    gap = pl.col("last_arrival_ns") - pl.col("first_end")
    bad = inst.filter(gap > CLOCK_TOLERANCE_NS).sort(gap, descending=True)
    if bad.height == 0:
        return _row("rank_clocks", True, f"every one of {inst.height:,} matched collectives starts on all its ranks "
                                         "before it ends on any")
    w = bad.row(0, named=True)
    return _row("rank_clocks", False, f"{bad.height:,} of {inst.height:,} matched collectives end on one rank before "
                                      f"another rank started them (worst: rank {w['early']} ended "
                                      f"{(w['last_arrival_ns'] - w['first_end']) / 1e3:.1f} µs before rank {w['late']} "
                                      "started): the ranks' clocks disagree")


def _host(facts: pl.DataFrame | None) -> dict[str, Any]:
    if facts is None:
        return _row("host_events", None, "no trace facts in this analysis")
    none = facts.filter(pl.col("host_events") == 0)
    if none.height == 0:
        return _row("host_events", True, f"{int(facts['host_events'].sum()):,} host ops and runtime calls recorded")
    return _row("host_events", False, f"{none.height} of {facts.height} ranks have no host op or runtime call "
                                      f"(ranks {', '.join(map(str, none['rank'].to_list()[:8]))}): a GPU-only capture, "
                                      "the host's part in any idle time is unknown")


def integrity(analysis) -> list[dict[str, Any]]:
    """Every check of :data:`CHECKS` on ``analysis``, in that order (see the module docstring)."""
    facts = _facts(analysis)
    return [*_graphs(facts), _dilation(analysis), _gpu_work(analysis.steps, facts), _stream_order(facts),
            _buffers(analysis, facts), _clocks(analysis), _host(facts)]


def failed(checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The checks that failed (``ok`` is False)."""
    return [c for c in checks if c["ok"] is False]


def status(checks: list[dict[str, Any]], check: str) -> bool | None:
    """``ok`` of the check named ``check`` (None when skipped or absent)."""
    return next((c["ok"] for c in checks if c["check"] == check), None)
