"""The report model: every number a report shows, computed here and nowhere else.

:func:`build` turns an :class:`~traceanalyzer.classify.Analysis` into a plain, JSON-ready ``dict``
(``schema_version`` :data:`SCHEMA_VERSION`, documented in ``docs/report-schema.md``). The HTML,
Markdown and plot renderers only format what is in it; ``--format json`` writes it as is.

All arithmetic starts from the classifier's integer nanoseconds; times in the model are
milliseconds (``*_ms``) or microseconds (``*_us``) as floats, shares are percentages (``pct``).
The optional ``waterfall`` section comes from the reconciler (``traceanalyzer.reconciliation``)
when it is installed and a run configuration is given: see :func:`waterfall_section`.

The model is assembled here from one module per idea: :mod:`.runs` (the segments and bucket runs
the annotated-trace writer shares), :mod:`.headline`, :mod:`.causes` (why: idle causes,
communication by dimension, stragglers, the ranks' distribution, the host verdict),
:mod:`.kernelrows` (the kernel and collective tables), :mod:`.reconciled` (the waterfall),
:mod:`.timelines` and :mod:`.crossrank`.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.buckets import BUCKET_LABELS, BUCKETS, HOST_FIELDS
from traceanalyzer.classify import Analysis
from traceanalyzer.classify.rankspread import summarise_ranks
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.views import timelines
from traceanalyzer.views.causes import CAUSE_LABELS, causes, host_verdict, rank_summary, stragglers
from traceanalyzer.views.crossrank import straggler_costs
from traceanalyzer.views.headline import LOSSES, headline
from traceanalyzer.views.kernelrows import collective_efficiency, kernels, top_exposed, top_kernels
from traceanalyzer.views.reconciled import normalize_waterfall, waterfall_section
from traceanalyzer.views.runs import bucket_runs, exposed_by_kernel, segments

if TYPE_CHECKING:
    from traceanalyzer.model.config import RunConfig

SCHEMA_VERSION = 1
SCHEMA_NAME = "traceanalyzer.report"

LABELS = BUCKET_LABELS  # one source for every output

#: the names the model's sections are made of, importable from here as before the split
__all__ = [
    "CAUSE_LABELS", "LABELS", "LOSSES", "SCHEMA_NAME", "SCHEMA_VERSION", "bucket_runs", "build", "default_rank",
    "exposed_by_kernel", "host_verdict", "normalize_waterfall", "segments", "waterfall_section",
]

_MS = 1e6  # ns per ms


# ---------------------------------------------------------------------------------------------
# the model


def build(
    analysis: Analysis,
    *,
    rank: int | None = None,
    config: RunConfig | None = None,
    inputs: list[dict[str, Any]] | None = None,
    command: list[str] | None = None,
    step_range: str = "ProfilerStep",
    top: int = 10,
    generated_utc: str | None = None,
    baseline: pl.DataFrame | None = None,
    ranks: str = "auto",
) -> dict[str, Any]:
    """The report model of ``analysis`` (see ``docs/report-schema.md``).

    ``rank``: the rank whose per-step timeline is shown (default: the slowest rank).
    ``ranks``: ``auto`` / ``all`` / ``summary``: whether ``rank_summary`` (the ranks'
    distribution, shown instead of one row per rank) is filled (see
    :func:`traceanalyzer.classify.rankspread.summarise_ranks`); ``ranks`` always lists every rank.
    ``config``: the run configuration, loaded by the API, for the reconciler (TFLOP/s, MFU,
    waterfall) and the findings' prices, when available.
    ``inputs``: the input files' fingerprints the API took (``path``, ``role``, ``size_bytes``,
    ``sha256``), recorded in ``reproduce.inputs`` (none: an empty list).
    ``command``: the command line that produced the report (recorded for reproduction).
    ``baseline``: the cluster's nccl-tests frame (:func:`traceanalyzer.baselines.read_nccl_tests`)
    for the collective-efficiency section (without it: the hardware table's figure).
    """
    ranks_mode = ranks
    notes: list[str] = []
    totals = analysis.totals()
    steps = analysis.steps
    seg = segments(analysis)

    ranks = _ranks(analysis, totals)
    if not ranks:  # analyze() raises before this on a trace without GPU work; keep it total
        raise TraceAnalyzerError("no step with GPU activity to report")
    slowest = max(ranks, key=lambda r: (r["step_ms"], -r["rank"]))["rank"]  # a handful of rows
    known = [r["rank"] for r in ranks]
    if rank is None:
        rank = slowest
    elif rank not in known:
        raise TraceAnalyzerError(f"`rank` {rank}: no such rank in the trace (ranks: {_ranges(known)})")

    wf, wf_notes = waterfall_section(analysis, config)
    notes.extend(wf_notes)
    from traceanalyzer.reconciliation.findings import findings, pricing_config  # noqa: PLC0415

    from traceanalyzer.reconciliation.integrity import integrity  # noqa: PLC0415

    checks = integrity(analysis)
    found = findings(analysis, pricing_config(config), checks=checks)
    head = headline(totals, ranks, slowest, wf, found)

    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceanalyzer", "version": __version__},
        "generated_utc": generated_utc or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reproduce": {
            "command": command,
            "cwd": os.getcwd(),
            "inputs": list(inputs or []),
        },
        "job": _job(analysis, step_range),
        "buckets": [{"key": b, "label": LABELS[b]} for b in BUCKETS],
        "headline": head,
        "integrity": checks,
        "findings": found,
        "host_verdict": host_verdict(analysis),
        "ranks": ranks,
        "rank_summary": rank_summary(steps, top) if summarise_ranks(len(ranks), ranks_mode) else None,
        "stragglers": stragglers(steps, top),
        "straggler_costs": straggler_costs(analysis, top),
        "steps": _steps(steps),
        **_timelines(analysis, seg, ranks, rank),
        "waterfall": wf,
        "top_kernels": top_kernels(analysis, totals, top),
        "top_exposed_collectives": top_exposed(analysis, seg, totals, top),
        "kernels": kernels(analysis, top),
        "causes": causes(analysis, totals, top),
        "collective_efficiency": collective_efficiency(analysis, baseline, top),
        "warnings": list(analysis.warnings),
        "notes": notes,
    }


def default_rank(analysis: Analysis) -> int | None:
    """The rank whose timeline a report shows by default: the slowest (mean step time)."""
    ranks = _ranks(analysis, analysis.totals())
    return max(ranks, key=lambda r: (r["step_ms"], -r["rank"]))["rank"] if ranks else None


def _ranges(xs: list[int]) -> str:
    xs = sorted(xs)
    return ", ".join(str(x) for x in xs[:16]) + (", ..." if len(xs) > 16 else "")


def _job(analysis: Analysis, step_range: str) -> dict[str, Any]:
    meta = analysis.trace.meta
    col = lambda c: sorted({str(v) for v in meta.get_column(c).drop_nulls().to_list()})  # noqa: E731
    ws = meta.get_column("world_size").drop_nulls()
    return {
        "ranks": meta.get_column("rank").sort().to_list(),
        "world_size": int(ws.max()) if ws.len() else None,
        "devices": col("device_name"),
        "formats": col("format"),
        "pytorch_versions": col("pytorch_version"),
        "step_range": step_range,
    }


#: the steps' profiler cost columns the report carries (classify.profiler_cost)
_PROFILER = ["profiler_host_us", "profiler_overhead_us", "unprofiled_estimate_us"]


def _profiler_medians(steps: pl.DataFrame) -> dict[int, dict[str, Any]]:
    """Per rank: the medians over its steps of the profiler's cost and of the unprofiled
    estimate, and why there is none (``profiler_note``)."""
    if "unprofiled_estimate_us" not in steps.columns:
        return {}
    agg = steps.group_by("rank").agg(*[pl.col(f).median() for f in _PROFILER], pl.col("profiler_note").drop_nulls().first())
    return {r["rank"]: {"profiler_host_median_us": r["profiler_host_us"], "profiler_overhead_median_us": r["profiler_overhead_us"],
                        "unprofiled_estimate_median_us": r["unprofiled_estimate_us"], "profiler_note": r["profiler_note"]}
            for r in agg.iter_rows(named=True)}


def _ranks(analysis: Analysis, totals: pl.DataFrame) -> list[dict[str, Any]]:
    prof = _profiler_medians(analysis.steps)
    meta = analysis.trace.meta.select("rank", "device_name")
    fields = [*BUCKETS, "overlapped_comm"]
    t = totals.join(meta, on="rank", how="left").with_columns(
        (pl.col("duration_ns") / pl.col("steps") / _MS).alias("step_ms"),
        *[(pl.col(f"{f}_ns") / pl.col("steps") / _MS).alias(f"{f}_ms") for f in fields],
        *[
            pl.when(pl.col("duration_ns") > 0).then(100 * pl.col(f"{f}_ns") / pl.col("duration_ns")).otherwise(0.0).alias(f"{f}_pct")
            for f in fields
        ],
    ).sort("rank")
    out = []
    for r in t.iter_rows(named=True):  # one row per rank
        out.append(
            {
                "rank": r["rank"],
                "device": r["device_name"],
                "steps": r["steps"],
                "step_ms": r["step_ms"],
                "total_ms": r["duration_ns"] / _MS,
                "buckets": {b: {"ms": r[f"{b}_ms"], "pct": r[f"{b}_pct"]} for b in BUCKETS},
                "overlapped_comm": {"ms": r["overlapped_comm_ms"], "pct": r["overlapped_comm_pct"]},
                **prof.get(r["rank"], {}),
            }
        )
    return out


def _steps(steps: pl.DataFrame) -> list[dict[str, Any]]:
    cols = [*BUCKETS, "overlapped_comm"]
    host = [f for f in ["idle_host_bound", *HOST_FIELDS] if f"{f}_ns" in steps.columns]
    return (
        steps.sort("rank", "start_ns")
        .select(
            "rank",
            "step",
            "start_ns",
            "start_us",
            (pl.col("duration_ns") / _MS).alias("duration_ms"),
            *[(pl.col(f"{c}_ns") / _MS).alias(f"{c}_ms") for c in cols],
            # host-bound idle by what the host did: exact ns (the four sum to idle_host_bound_ns) and µs
            *[pl.col(f"{f}_ns") for f in host], *[(pl.col(f"{f}_ns") / 1000).alias(f"{f}_us") for f in host],
            # the profiler's own cost and the step without it (null where the trace cannot give them)
            *[pl.col(f) for f in _PROFILER if f in steps.columns],
        )
        .to_dicts()
    )


def _timelines(analysis: Analysis, seg: pl.DataFrame, ranks: list[dict[str, Any]], rank: int) -> dict[str, Any]:
    """``timeline`` (the chosen rank) and ``more_timelines`` (:mod:`traceanalyzer.views.timelines`)."""
    others = timelines.other_ranks(ranks, rank)
    runs = bucket_runs(analysis, seg.filter(pl.col("rank").is_in([rank, *others])))
    first = timelines.timeline(runs, analysis.windows, rank)
    more = timelines.more_timelines(runs, analysis.windows, others, len(first["runs"]["step"]))
    return {"timeline": first, "more_timelines": more}
