"""The report's per-step timelines: for the chosen rank and a few others, the maximal runs of one
bucket in every step window, times in ms from the step's start (the ``timeline`` and
``more_timelines`` sections of the report model, see ``docs/report-schema.md``).

Which ranks: the chosen one (``timeline``), then (``more_timelines``) the fastest rank and the
others from the slowest mean step down, at most :data:`MAX_RANKS` ranks and :data:`MAX_RUNS`
runs in all, so that the HTML report of a large job keeps a bounded size.
"""

from __future__ import annotations

from typing import Any

import polars as pl

#: at most this many ranks get a timeline (the chosen rank included)
MAX_RANKS = 8
#: the other ranks' timelines stop before the runs of all timelines exceed this
MAX_RUNS = 40_000

_MS = 1e6  # ns per ms


def timeline(runs: pl.DataFrame, windows: pl.DataFrame, rank: int) -> dict[str, Any]:
    """One rank's timeline from ``runs`` (:func:`traceanalyzer.views.document.bucket_runs` of
    that rank at least) and the step ``windows``."""
    win = windows.filter(pl.col("rank") == rank).sort("wstart_ns")
    runs = runs.filter(pl.col("rank") == rank).join(win.select("step", "wstart_ns"), on="step", how="left").sort("start_ns")
    return {
        "rank": rank,
        "steps": [
            {"step": s, "start_ns": w0, "start_us": w0 / 1000, "duration_ms": (w1 - w0) / _MS}
            for s, w0, w1 in win.select("step", "wstart_ns", "wend_ns").iter_rows()  # one row per step
        ],
        "runs": {
            "step": runs.get_column("step").to_list(),
            "start_ms": ((runs.get_column("start_ns") - runs.get_column("wstart_ns")) / _MS).to_list(),
            "end_ms": ((runs.get_column("end_ns") - runs.get_column("wstart_ns")) / _MS).to_list(),
            "bucket": runs.get_column("bucket").to_list(),
        },
    }


def other_ranks(ranks: list[dict[str, Any]], chosen: int) -> list[int]:
    """The ranks after ``chosen`` whose timelines the report may hold, in the order shown: the
    fastest mean step, then the others from the slowest down (ties: lower rank first)."""
    rest = [r for r in ranks if r["rank"] != chosen]
    if not rest:
        return []
    fastest = min(rest, key=lambda r: (r["step_ms"], r["rank"]))
    slow_first = sorted((r for r in rest if r is not fastest), key=lambda r: (-r["step_ms"], r["rank"]))
    return [r["rank"] for r in [fastest, *slow_first]][: MAX_RANKS - 1]


def more_timelines(runs: pl.DataFrame, windows: pl.DataFrame, candidates: list[int], used: int) -> list[dict[str, Any]]:
    """The timelines of ``candidates`` (in that order) while the runs of all timelines, ``used``
    already, stay within :data:`MAX_RUNS`."""
    counts = dict(runs.group_by("rank").len().iter_rows())  # one row per rank
    out = []
    for rank in candidates:
        n = counts.get(rank, 0)
        if used + n > MAX_RUNS:
            break
        used += n
        out.append(timeline(runs, windows, rank))
    return out
