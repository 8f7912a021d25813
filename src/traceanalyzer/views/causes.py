"""The report model's sections on why: the idle causes and the communication by dimension, the
recomputed ops, the slowest rank of each step, the stragglers, the ranks' distribution and the
per-rank host verdict (times in ms per step, shares in %)."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.buckets import BUCKET_LABELS, HOST_FIELDS, IDLE_FIELDS
from traceanalyzer.classify import Analysis
from traceanalyzer.classify.rankspread import rank_spread
from traceanalyzer.classify.stragglers import DEFAULT_TOLERANCE
from traceanalyzer.classify.stragglers import stragglers as stragglers_by_rank

LABELS = BUCKET_LABELS
#: how the report names the idle causes
CAUSE_LABELS = {"idle_host_bound": "idle: host-bound", "idle_sync": "idle: sync wait", "idle_bubble": "idle: PP bubble", "idle_other": "idle: other"}

_MS = 1e6  # ns per ms


def causes(analysis: Analysis, totals: pl.DataFrame, top: int) -> dict[str, Any]:
    """The causes behind the buckets, zero rows left out: idle by cause, exposed communication
    by parallelism dimension with its wait and transfer, the recomputed ops, the stragglers."""
    n = int(totals.get_column("steps").sum())
    idle_total = int(totals.get_column("idle_ns").sum())
    idle = []
    for f in IDLE_FIELDS:
        v = int(totals.get_column(f"{f}_ns").sum()) if f"{f}_ns" in totals.columns else 0
        if v:
            idle.append({"cause": f.removeprefix("idle_"), "ms": v / n / _MS, "pct_of_idle": 100 * v / idle_total})
    idle.sort(key=lambda r: -r["ms"])
    host_total = int(totals.get_column("idle_host_bound_ns").sum()) if "idle_host_bound_ns" in totals.columns else 0
    host_bound = []
    for f in HOST_FIELDS:  # host-bound idle by what the launching host thread was doing (sum = host_bound)
        v = int(totals.get_column(f"{f}_ns").sum()) if f"{f}_ns" in totals.columns else 0
        if v:
            host_bound.append({"cause": f.removeprefix("idle_host_"), "ms": v / n / _MS, "pct_of_host_bound": 100 * v / host_total})
    host_bound.sort(key=lambda r: -r["ms"])
    dims = []
    comm = analysis.comm
    if comm is not None and comm.height:
        d = (
            comm.filter(pl.col("by") == "dim")
            .group_by("key")
            .agg(
                pl.col("count").sum(),
                pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
                pl.col("time_ns").sum(), pl.col("exposed_ns").sum(), pl.col("overlapped_ns").sum(),
                pl.when(pl.col("wait_ns").is_not_null().any()).then(pl.col("wait_ns").sum()).alias("wait_ns"),
                pl.when(pl.col("transfer_ns").is_not_null().any()).then(pl.col("transfer_ns").sum()).alias("transfer_ns"),
                pl.col("transfer_estimated").any(),
            )
            .filter((pl.col("exposed_ns") > 0) | (pl.col("time_ns") > 0))
            .sort(["exposed_ns", "key"], descending=[True, False])
        )
        for r in d.iter_rows(named=True):  # one row per dimension
            dims.append({
                "dimension": r["key"], "count": r["count"], "bytes": r["bytes"],
                "exposed_ms": r["exposed_ns"] / n / _MS, "overlapped_ms": r["overlapped_ns"] / n / _MS,
                "kernel_ms": r["time_ns"] / n / _MS,
                "wait_ms": None if r["wait_ns"] is None else r["wait_ns"] / n / _MS,
                "transfer_ms": None if r["transfer_ns"] is None else r["transfer_ns"] / n / _MS,
                "transfer_estimated": bool(r["transfer_estimated"]),
            })
    recomputed = []
    if analysis.recomputed_by_name is not None and analysis.recomputed_by_name.height:
        rc = (
            analysis.recomputed_by_name.group_by("name")
            .agg(pl.col("count").sum(), pl.col("gpu_ns").sum(), pl.len().alias("ranks"))
            .filter(pl.col("gpu_ns") > 0)
            .sort(["gpu_ns", "name"], descending=[True, False])
            .head(top)
        )
        recomputed = [{"name": r["name"], "count": r["count"], "ranks": r["ranks"], "gpu_ms": r["gpu_ns"] / n / _MS}
                      for r in rc.iter_rows(named=True)]
    stragglers = []
    cr = analysis.cross_rank
    if cr is not None and cr.height:
        cols = [c for c in ("waited_on_rank", "waited_on_wait_ns") if c in cr.columns]
        worst = cr.filter(pl.col("skew_ns") > 0).sort(["skew_ns", "step"], descending=[True, False]).head(top)
        for r in worst.iter_rows(named=True):  # at most ``top`` steps
            stragglers.append({
                "step": r["step"], "ranks": r["ranks"], "slowest_rank": r["slowest_rank"],
                "step_ms": r["max_ns"] / _MS, "median_step_ms": r["median_ns"] / _MS, "skew_ms": r["skew_ns"] / _MS,
                "straggler_bucket": r["straggler_bucket"], "excess_ms": r["straggler_excess_ns"] / _MS,
                "waited_on_rank": r["waited_on_rank"] if "waited_on_rank" in cols else None,
                "waited_on_wait_ms": None if "waited_on_wait_ns" not in cols or r["waited_on_wait_ns"] is None else r["waited_on_wait_ns"] / _MS,
            })
    dur = int(totals.get_column("duration_ns").sum())
    idle_all = {"ms": idle_total / n / _MS, "pct_of_step": 100 * idle_total / dur if dur else 0.0}
    return {"idle_total": idle_all, "idle": idle, "host_bound": host_bound, "comm_by_dimension": dims, "recomputed_ops": recomputed, "stragglers": stragglers}


def rank_summary(steps: pl.DataFrame, top: int) -> list[dict[str, Any]]:
    """Each field's distribution over the ranks (mean per step, ms): min / p50 / mean / max, the
    rank at the max and the ``min(top, 5)`` ranks with the most time in it."""
    spread = rank_spread(steps, top=min(top, 5))
    return [
        {
            "field": r["field"],
            "label": "step time" if r["field"] == "duration" else _label(r["field"]),
            "ranks": r["ranks"],
            **{f"{k}_ms": r[f"{k}_ns"] / _MS for k in ("min", "p50", "mean", "max")},
            "max_rank": r["max_rank"],
            "top_ranks": r["top_ranks"],
            "top_ms": [v / _MS for v in r["top_ns"]],
        }
        for r in spread.iter_rows(named=True)  # one row per field
    ]


def _label(field: str) -> str:
    return LABELS.get(field) or CAUSE_LABELS.get(field) or field.replace("_", " ")


def stragglers(steps: pl.DataFrame, top: int) -> dict[str, Any]:
    """The ranks slow on the most steps (at most ``top``), with the bucket they were slow in."""
    per = stragglers_by_rank(steps, DEFAULT_TOLERANCE)
    slow = per.filter(pl.col("slow_steps") > 0)
    compared = steps.filter(pl.len().over("step") >= 2).get_column("step").n_unique()
    return {
        "tolerance_pct": 100 * DEFAULT_TOLERANCE,
        "steps_compared": compared,
        "slow_ranks": slow.height,
        "ranks": [
            {
                "rank": r["rank"], "steps": r["steps"], "slow_steps": r["slow_steps"], "slowest_steps": r["slowest_steps"],
                "excess_ms": r["excess_ns"] / _MS, "max_excess_ms": r["max_excess_ns"] / _MS,
                "bucket": r["bucket"], "bucket_label": _label(r["bucket"]),
                "bucket_steps": r["bucket_steps"], "bucket_excess_ms": r["bucket_excess_ns"] / _MS,
            }
            for r in slow.head(top).iter_rows(named=True)  # at most ``top`` rows
        ],
    }


def host_verdict(analysis: Analysis) -> list[dict[str, Any]]:
    """Per rank: is the step CPU-bound (:func:`traceanalyzer.classify.launches.verdict`); empty
    when the launch table was not computed. The report's ``host_verdict`` section, and the rows
    of the terminal's verdict table (:func:`traceanalyzer.render.table.verdict_table`)."""
    if "launches" not in analysis.extras:
        return []
    from traceanalyzer.classify.launches import verdict, with_launch_bound

    return verdict(with_launch_bound(analysis.extras["launches"])).to_dicts()
