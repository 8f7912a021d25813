"""JSON renderer: the breakdown as a versioned document (schema in docs/json-schema.md).

Field names are a contract: keys are only ever added, never renamed or removed, without a
``schema_version`` bump.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.buckets import COMM_DIM_FIELDS, FIELDS, HOST_FIELDS, IDLE_FIELDS

if TYPE_CHECKING:
    from traceanalyzer.results import Analysis

SCHEMA = "traceanalyzer.breakdown"  # traceanalyzer/schemas/breakdown.schema.json
SCHEMA_VERSION = 1
STEP_FIELDS = ["step", "start_ns", "start_us", *[f"{f}_us" for f in FIELDS]]
CAUSE_FIELDS = [f"{f}_us" for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS]]
#: host-bound idle by cause, in exact ns (summing to ``idle_host_bound_ns``) and µs
HOST_CAUSE_FIELDS = ["idle_host_bound_ns", *[f"{f}_ns" for f in HOST_FIELDS], *[f"{f}_us" for f in HOST_FIELDS]]
#: the profiler's own cost per step and the step's unprofiled estimate (null, with the rank's
#: ``profiler_note``, where the trace cannot give them)
PROFILER_FIELDS = ["profiler_host_us", "profiler_overhead_us", "unprofiled_estimate_us"]


def _us(v: float | None) -> float | None:
    return None if v is None else v / 1000


def _recompute_ops(analysis: Analysis, rank: int) -> list[dict[str, Any]]:
    if analysis.recomputed_by_name is None:
        return []
    rows = analysis.recomputed_by_name.filter(pl.col("rank") == rank)
    return [{"name": r["name"], "count": r["count"], "gpu_us": r["gpu_ns"] / 1000} for r in rows.iter_rows(named=True)]


def _collectives(analysis: Analysis, rank: int) -> dict[str, Any]:
    """Per rank, summed over steps: by type, by process group and by dimension."""
    out: dict[str, Any] = {"by_type": [], "by_group": [], "by_dimension": []}
    if analysis.comm is None or analysis.comm.height == 0:
        return out
    c = analysis.comm.filter(pl.col("rank") == rank)
    agg = c.group_by("by", "key").agg(
        pl.col("count").sum(),
        pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("bytes"),
        *[pl.when(pl.col(f"{x}_ns").is_not_null().any()).then(pl.col(f"{x}_ns").sum()).alias(f"{x}_ns") for x in ("time", "exposed", "overlapped", "wait", "transfer")],
        pl.col("transfer_estimated").any(),
        pl.col("pg_desc").drop_nulls().first(),
        pl.col("group_size").drop_nulls().first(),
        pl.col("pg_ranks").drop_nulls().first(),
        pl.col("dim").drop_nulls().first(),
    ).sort("by", "key")
    for r in agg.iter_rows(named=True):
        item = {
            "count": r["count"],
            "bytes": r["bytes"],
            # time: the sum of the kernels' durations, 0 for a row of none (``concurrent``: the
            # exposed time of collectives running at once, counted under no single type)
            "time_us": _us(r["time_ns"] if r["time_ns"] is not None or r["count"] else 0),
            **{f"{x}_us": _us(r[f"{x}_ns"]) for x in ("exposed", "overlapped", "wait", "transfer")},
            "transfer_estimated": bool(r["transfer_estimated"]),
        }
        if r["by"] == "type":
            out["by_type"].append({"type": r["key"], **item})
        elif r["by"] == "group":
            out["by_group"].append(
                {"group": r["key"], "desc": r["pg_desc"], "size": r["group_size"], "ranks": r["pg_ranks"], "dimension": r["dim"], **item}
            )
        else:
            out["by_dimension"].append({"dimension": r["key"], **item})
    return out


def _cross_rank(analysis: Analysis) -> list[dict[str, Any]]:
    if analysis.cross_rank is None:
        return []
    out = []
    for r in analysis.cross_rank.iter_rows(named=True):
        out.append(
            {
                "step": r["step"],
                "ranks": r["ranks"],
                "slowest_rank": r["slowest_rank"],
                "max_us": _us(r["max_ns"]),
                "median_us": _us(r["median_ns"]),
                "min_us": _us(r["min_ns"]),
                "skew_us": _us(r["skew_ns"]),
                "straggler_bucket": r["straggler_bucket"],
                "straggler_excess_us": _us(r["straggler_excess_ns"]),
                "waited_on_rank": r.get("waited_on_rank"),
                "waited_on_wait_us": _us(r.get("waited_on_wait_ns")),
                "durations": [{"rank": d["rank"], "duration_us": d["duration_ns"] / 1000} for d in r["durations"]],
            }
        )
    return out


def _profiler(analysis: Analysis) -> dict[int, dict[str, Any]]:
    """Per rank: the medians over its steps of the profiler's cost and of the unprofiled
    estimate, the options the trace was recorded with and why there is no estimate (if none)."""
    st = analysis.steps
    if "unprofiled_estimate_us" not in st.columns:
        return {}
    out = {}
    for r in st.group_by("rank").agg(
        pl.col("profiler_host_us").median(), pl.col("profiler_overhead_us").median(), pl.col("unprofiled_estimate_us").median(),
        pl.col("profiler_options").drop_nulls().first(), pl.col("profiler_note").drop_nulls().first(),
    ).iter_rows(named=True):
        out[r["rank"]] = {
            "profiler_host_median_us": r["profiler_host_us"],
            "profiler_overhead_median_us": r["profiler_overhead_us"],
            "unprofiled_estimate_median_us": r["unprofiled_estimate_us"],
            "profiler_options": [o for o in (r["profiler_options"] or "").split(",") if o],
            "profiler_note": r["profiler_note"],
        }
    return out


def document(analysis: Analysis, findings: list[dict[str, Any]] | None = None, integrity: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The breakdown document; ``findings``: :func:`traceanalyzer.reconciliation.findings.findings`
    of the same analysis, ``integrity``: :func:`traceanalyzer.reconciliation.integrity.integrity`,
    both computed by the caller (a renderer computes nothing); none when not given."""
    findings = findings or []
    meta = {r["rank"]: r for r in analysis.trace.meta.iter_rows(named=True)}
    cause_fields = [f for f in [*CAUSE_FIELDS, *HOST_CAUSE_FIELDS] if f in analysis.steps.columns]
    prof_fields = [f for f in PROFILER_FIELDS if f in analysis.steps.columns]
    steps = analysis.steps.select("rank", *STEP_FIELDS, *cause_fields, *prof_fields).partition_by("rank", as_dict=True, maintain_order=True)
    profiler = _profiler(analysis)
    totals = {r["rank"]: r for r in analysis.totals().iter_rows(named=True)}
    outside = {} if analysis.outside_steps is None else {r: ns for r, ns, _, _ in analysis.outside_steps.iter_rows()}
    ranks = []
    for (rank,), frame in sorted(steps.items()):
        m = meta.get(rank, {})
        total = totals[rank]
        ranks.append(
            {
                "rank": rank,
                "device": m.get("device_name"),
                "file": m.get("file"),
                "steps": frame.drop("rank").to_dicts(),
                "total": {"steps": total["steps"], **{f"{f}_us": total[f"{f}_us"] for f in FIELDS}, **{f: total[f] for f in cause_fields}},
                "recompute_ops": _recompute_ops(analysis, rank),
                "collectives": _collectives(analysis, rank),
                "outside_steps_ns": outside.get(rank, 0),
                "outside_steps_us": outside.get(rank, 0) / 1000,
                **profiler.get(rank, {}),
            }
        )
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceanalyzer", "version": __version__},
        "inputs": [str(s) for s in analysis.trace.sources],
        "integrity": list(integrity or []),
        "findings": findings,
        "ranks": ranks,
        "cross_rank": _cross_rank(analysis),
        "warnings": list(analysis.warnings),
    }


def dumps(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def steps_table(analysis: Analysis) -> pl.DataFrame:
    """The breakdown as one row per (rank, step): exact integer nanoseconds of every bucket and
    cause (``breakdown -f csv|parquet``); each row's buckets sum to ``duration_ns``."""
    cols = ["rank", "step", "start_ns", *[f"{f}_ns" for f in FIELDS]]
    cols += [f"{f}_ns" for f in [*IDLE_FIELDS, *COMM_DIM_FIELDS, *HOST_FIELDS] if f"{f}_ns" in analysis.steps.columns]
    return analysis.steps.select(cols).sort("rank", "step")


def steps_frame(doc: dict[str, Any]) -> pl.DataFrame:
    """Inverse view for tests and tools: one row per (rank, step) from a document."""
    return pl.DataFrame([{"rank": r["rank"], **s} for r in doc["ranks"] for s in r["steps"]])
