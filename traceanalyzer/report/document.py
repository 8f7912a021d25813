"""The report model: every number a report shows, computed here and nowhere else.

:func:`build` turns an :class:`~traceanalyzer.classify.Analysis` into a plain, JSON-ready ``dict``
(``schema_version`` :data:`SCHEMA_VERSION`, documented in ``docs/report-schema.md``). The HTML,
Markdown and plot renderers only format what is in it; ``--format json`` writes it as is.

All arithmetic starts from the classifier's integer nanoseconds; times in the model are
milliseconds (``*_ms``) or microseconds (``*_us``) as floats, shares are percentages (``pct``).
The optional ``waterfall`` section comes from the reconciler (``traceanalyzer.reconciliation``)
when it is installed and a run configuration is given: see :func:`waterfall_section`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer._version import __version__
from traceanalyzer.buckets import BUCKET_LABELS, BUCKETS, HOST_FIELDS, IDLE_FIELDS
from traceanalyzer.classify import Analysis
from traceanalyzer.classify.kernels import exposed_by_kernel as kernel_exposure
from traceanalyzer.classify.kernels import exposed_rows, in_windows, kernel_rows
from traceanalyzer.classify.partition import segment_frame
from traceanalyzer.classify.rankspread import rank_spread, summarise_ranks
from traceanalyzer.classify.stragglers import DEFAULT_TOLERANCE
from traceanalyzer.classify.stragglers import stragglers as stragglers_by_rank
from traceanalyzer.report.crossrank import straggler_costs
from traceanalyzer.errors import ConfigError, TraceAnalyzerError
from traceanalyzer.queries import query_engine
from traceanalyzer.report import timelines

SCHEMA_VERSION = 1
SCHEMA_NAME = "traceanalyzer.report"

LABELS = BUCKET_LABELS  # one source for every output
#: how the report names the idle causes
CAUSE_LABELS = {"idle_host_bound": "idle: host-bound", "idle_sync": "idle: sync wait", "idle_bubble": "idle: PP bubble", "idle_other": "idle: other"}
#: the buckets that are losses (everything but compute)
LOSSES = ["recompute", "exposed_comm", "other", "idle"]

_MS = 1e6  # ns per ms


# ---------------------------------------------------------------------------------------------
# frames shared with the annotated-trace writer


def segments(analysis: Analysis) -> pl.DataFrame:
    """Elementary segments of every step window (``rank, step, t0, t1, n_*, bucket, overlapped,
    len_ns``), sorted by rank and time: the cut the partition itself was computed on."""
    return segment_frame(analysis.gpu, analysis.windows).sort("rank", "t0").collect(engine=query_engine())


def bucket_runs(analysis: Analysis, seg: pl.DataFrame | None = None) -> pl.DataFrame:
    """Maximal runs of one bucket inside each step window.

    Returns ``rank, step, start_ns, end_ns, bucket, overlapped_comm_ns`` sorted by rank and time.
    Per (rank, step) the run lengths of a bucket sum exactly to that bucket in the partition.
    """
    seg = segments(analysis) if seg is None else seg
    prev_bucket = pl.col("bucket").shift(1).over("rank", "step")
    prev_end = pl.col("t1").shift(1).over("rank", "step")
    new = ((pl.col("bucket") != prev_bucket) | (pl.col("t0") != prev_end)).fill_null(True)
    return (
        seg.lazy()
        .with_columns(new.cum_sum().alias("__run"))
        .group_by("__run")
        .agg(
            pl.col("rank").first(),
            pl.col("step").first(),
            pl.col("t0").min().alias("start_ns"),
            pl.col("t1").max().alias("end_ns"),
            pl.col("bucket").first(),
            pl.col("len_ns").filter(pl.col("overlapped")).sum().alias("overlapped_comm_ns"),
        )
        .sort("rank", "start_ns")
        .drop("__run")
        .collect(engine=query_engine())
    )


def exposed_by_kernel(analysis: Analysis, seg: pl.DataFrame | None = None) -> pl.DataFrame:
    """Exposed communication time of every communication kernel.

    Each exposed-comm segment is shared equally among the communication kernels active in it
    (``len / n_comm``), so the kernels' exposed times sum exactly to the partition's
    ``exposed_comm``. A kernel covers a contiguous range of segments (segments are elementary:
    no event boundary falls inside one), found with two as-of joins on a per-rank prefix sum.

    Returns ``rank, name, start_ns, end_ns, exposed_ns`` (Float64) for every comm kernel.
    """
    return kernel_exposure(analysis.gpu, segments(analysis) if seg is None else seg)


# ---------------------------------------------------------------------------------------------
# the model


def build(
    analysis: Analysis,
    *,
    rank: int | None = None,
    config: str | os.PathLike[str] | None = None,
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
    ``config``: run configuration for the reconciler (TFLOP/s, MFU, waterfall), when available.
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
        raise TraceAnalyzerError(f"--rank {rank}: no such rank in the trace (ranks: {_ranges(known)})")

    wf, wf_notes = waterfall_section(analysis, config)
    notes.extend(wf_notes)
    from traceanalyzer.reconciliation.findings import findings, run_config  # noqa: PLC0415

    from traceanalyzer.reconciliation.integrity import integrity  # noqa: PLC0415

    checks = integrity(analysis)
    found = findings(analysis, run_config(config), checks=checks)
    headline = _headline(totals, ranks, slowest, wf)
    inputs = [_file_info(Path(s), "trace") for s in analysis.trace.sources]
    if config is not None:
        inputs.append(_file_info(Path(config), "config"))

    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceanalyzer", "version": __version__},
        "generated_utc": generated_utc or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reproduce": {
            "command": command,
            "cwd": os.getcwd(),
            "inputs": inputs,
        },
        "job": _job(analysis, step_range),
        "buckets": [{"key": b, "label": LABELS[b]} for b in BUCKETS],
        "headline": headline,
        "integrity": checks,
        "findings": found,
        "host_verdict": host_verdict(analysis),
        "ranks": ranks,
        "rank_summary": _rank_summary(steps, top) if summarise_ranks(len(ranks), ranks_mode) else None,
        "stragglers": _stragglers(steps, top),
        "straggler_costs": straggler_costs(analysis, top),
        "steps": _steps(steps),
        **_timelines(analysis, seg, ranks, rank),
        "waterfall": wf,
        "top_kernels": _top_kernels(analysis, totals, top),
        "top_exposed_collectives": _top_exposed(analysis, seg, totals, top),
        "kernels": _kernels(analysis, top),
        "causes": _causes(analysis, totals, top),
        "collective_efficiency": _collective_efficiency(analysis, baseline, top),
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


def _headline(totals: pl.DataFrame, ranks: list[dict], slowest: int, wf: dict | None) -> dict[str, Any]:
    n_rank_steps = int(totals.get_column("steps").sum())
    dur = int(totals.get_column("duration_ns").sum())
    losses = {b: int(totals.get_column(f"{b}_ns").sum()) for b in LOSSES}
    step_ms = dur / n_rank_steps / _MS
    biggest = max(LOSSES, key=lambda b: losses[b])
    big = None
    if losses[biggest] > 0:
        big = {
            "bucket": biggest,
            "label": LABELS[biggest],
            "ms": losses[biggest] / n_rank_steps / _MS,
            "pct": 100 * losses[biggest] / dur if dur else 0.0,
        }
    n_ranks = len(ranks)
    slow_ms = next(r["step_ms"] for r in ranks if r["rank"] == slowest)
    scope = f"{n_ranks} rank{'s' if n_ranks != 1 else ''}, {n_rank_steps} rank-step{'s' if n_rank_steps != 1 else ''}"
    sentence = f"Mean step time {step_ms:.3f} ms ({scope})"
    if n_ranks > 1:
        sentence += f", slowest rank {slowest} at {slow_ms:.3f} ms"
    if big:
        sentence += f"; the biggest loss is {big['label']}: {big['ms']:.3f} ms per step ({big['pct']:.1f}% of the step)."
    else:
        sentence += "; no loss: compute covers every step entirely."
    head = {
        "step_ms": step_ms,
        "ranks": n_ranks,
        "rank_steps": n_rank_steps,
        "slowest_rank": slowest,
        "slowest_rank_step_ms": slow_ms,
        "compute_pct": 100 * int(totals.get_column("compute_ns").sum()) / dur if dur else 0.0,
        "biggest_loss": big,
        "achieved_tflops": None,
        "mfu": None,
        "hfu": None,
        "mfu_pct": None,
        "hfu_pct": None,
        "peak_tflops": None,
        "achieved_tflops_unprofiled": None,
        "mfu_unprofiled_pct": None,
        "sentence": sentence,
    }
    if wf:
        for k in ("achieved_tflops", "mfu", "hfu", "peak_tflops"):
            head[k] = wf.get(k)
        for k in ("mfu", "hfu"):  # the same number as a percentage, as every renderer shows it
            head[f"{k}_pct"] = None if wf.get(k) is None else 100 * wf[k]
        un = wf.get("unprofiled") or {}
        head["achieved_tflops_unprofiled"] = un.get("achieved_tflops")
        head["mfu_unprofiled_pct"] = None if un.get("mfu") is None else 100 * un["mfu"]
        if wf.get("achieved_tflops") is not None:
            extra = f" Achieved {wf['achieved_tflops']:.1f} TFLOP/s per GPU"
            if wf.get("mfu") is not None:
                extra += f", MFU {100 * wf['mfu']:.1f}%"
            if un.get("achieved_tflops") is not None and wf.get("mfu") and abs(un["mfu"] / wf["mfu"] - 1) > 0.05:
                extra += (f" as measured in the trace; {un['achieved_tflops']:.1f} TFLOP/s, MFU {100 * un['mfu']:.1f}% "
                          "on the unprofiled estimate")
            head["sentence"] += extra + "."
    return head


def _rank_summary(steps: pl.DataFrame, top: int) -> list[dict[str, Any]]:
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


def _stragglers(steps: pl.DataFrame, top: int) -> dict[str, Any]:
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
    """``timeline`` (the chosen rank) and ``more_timelines`` (:mod:`traceanalyzer.report.timelines`)."""
    others = timelines.other_ranks(ranks, rank)
    runs = bucket_runs(analysis, seg.filter(pl.col("rank").is_in([rank, *others])))
    first = timelines.timeline(runs, analysis.windows, rank)
    more = timelines.more_timelines(runs, analysis.windows, others, len(first["runs"]["step"]))
    return {"timeline": first, "more_timelines": more}


def _top_kernels(analysis: Analysis, totals: pl.DataFrame, top: int) -> list[dict[str, Any]]:
    wall = int(totals.get_column("duration_ns").sum())
    rows = analysis.kernel_rows if analysis.kernel_rows is not None else kernel_rows(analysis.gpu, analysis.windows)
    agg = (
        rows.group_by("name", "cls")
        .agg(
            pl.col("kind").sort_by("first_ns").first().alias("kind"),
            pl.col("calls").sum().cast(pl.UInt32),
            pl.col("total_ns").sum(),
            pl.len().cast(pl.UInt32).alias("ranks"),
        )
        .sort(["total_ns", "name"], descending=[True, False])
        .head(top)
        .with_columns(
            (pl.col("total_ns") / _MS).alias("total_ms"),
            (pl.col("total_ns") / pl.col("calls") / 1000).alias("mean_us"),
            (100 * pl.col("total_ns") / wall if wall else pl.lit(0.0)).alias("pct_of_step_time"),
        )
    )
    return agg.select("name", pl.col("cls").alias("class"), "kind", "calls", "ranks", "total_ms", "mean_us", "pct_of_step_time").to_dicts()


def _top_exposed(analysis: Analysis, seg: pl.DataFrame, totals: pl.DataFrame, top: int) -> list[dict[str, Any]]:
    wall = int(totals.get_column("duration_ns").sum())
    exposed_total = int(totals.get_column("exposed_comm_ns").sum())
    k = analysis.exposed_kernels if analysis.exposed_kernels is not None else exposed_rows(analysis.gpu, analysis.windows, seg)
    agg = (
        k.group_by("name")
        .agg(
            pl.len().alias("calls"),
            pl.col("rank").n_unique().alias("ranks"),
            pl.col("exposed_ns").sum(),
            (pl.col("end_ns") - pl.col("start_ns")).sum().alias("total_ns"),
        )
        .filter(pl.col("exposed_ns") > 0)
        .sort(["exposed_ns", "name"], descending=[True, False])
        .head(top)
        .with_columns(
            (pl.col("exposed_ns") / _MS).alias("exposed_ms"),
            (pl.col("total_ns") / _MS).alias("total_ms"),
            (100 * pl.col("exposed_ns") / pl.col("total_ns")).alias("exposed_pct_of_kernel"),
            (100 * pl.col("exposed_ns") / exposed_total if exposed_total else pl.lit(0.0)).alias("pct_of_exposed_comm"),
            (100 * pl.col("exposed_ns") / wall if wall else pl.lit(0.0)).alias("pct_of_step_time"),
        )
    )
    return agg.select(
        "name", "calls", "ranks", "exposed_ms", "total_ms", "exposed_pct_of_kernel", "pct_of_exposed_comm", "pct_of_step_time"
    ).to_dicts()


def _kernels(analysis: Analysis, top: int) -> dict[str, Any] | None:
    """The kernel table's first ``top`` rows by total time (:func:`~traceanalyzer.classify.kernelstats.kernel_table`):
    bucket, exact share of the bucket, achieved TFLOP/s where the launching op's shapes are known."""
    if analysis.kernel_stats is None:
        return None
    from traceanalyzer.classify.kernelstats import kernel_table

    names = analysis.trace.meta.get_column("device_name").drop_nulls()
    t = kernel_table(analysis.kernel_stats, analysis.steps, names[0] if names.len() else None, top=top)
    rows = t.select(
        "name", "bucket", "kind", "streams", "ranks", "calls",
        (pl.col("total_ns") / _MS).alias("total_ms"), (pl.col("mean_ns") / 1000).alias("mean_us"),
        (pl.col("p50_ns") / 1000).alias("p50_us"), (pl.col("p99_ns") / 1000).alias("p99_us"),
        (pl.col("bucket_ns") / _MS).alias("bucket_ms"), "share_pct", "flops_calls", "tflops", "precision", "roofline_pct",
    ).to_dicts()
    return {"rows": rows, "wall_ms": int(analysis.steps.get_column("duration_ns").sum()) / _MS}


def _causes(analysis: Analysis, totals: pl.DataFrame, top: int) -> dict[str, Any]:
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
    return {"idle": idle, "host_bound": host_bound, "comm_by_dimension": dims, "recomputed_ops": recomputed, "stragglers": stragglers}


def _collective_efficiency(analysis: Analysis, baseline: pl.DataFrame | None, top: int) -> dict[str, Any] | None:
    """Achieved bus bandwidth per collective type and group against the cluster's nccl-tests
    baseline (or the hardware table), and the exposed communication split into wait, link speed
    and below the reference (:mod:`traceanalyzer.reconciliation.busbw`). None without a collective
    that carries a byte count."""
    if analysis.collectives is None or not analysis.collectives.height:
        return None
    from traceanalyzer.reconciliation.busbw import achieved_busbw, busbw_summary, exposed_split

    names = analysis.trace.meta.get_column("device_name").drop_nulls()
    per = achieved_busbw(analysis.collectives, baseline=baseline, gpu=names[0] if names.len() else None)
    if not per.height:
        return None
    summ = busbw_summary(per).head(top)
    rows = [{
        "collective": r["coll_type"], "group": r["pg_name"], "group_size": r["group_size"], "count": r["count"], "bytes": r["bytes"],
        "time_ms": r["time_ns"] / _MS, "busbw_gbps": r["busbw_gbps"], "reference_gbps": r["reference_gbps_median"],
        "efficiency": r["efficiency_median"], "reference": r["reference"], "time_basis": r["time_basis"],
    } for r in summ.iter_rows(named=True)]
    split = exposed_split(per, analysis.comm) if analysis.comm is not None else None
    exposed = None
    if split is not None and split.height:
        s = split.select(pl.col("exposed_ns", "exposed_wait_ns", "exposed_link_speed_ns", "exposed_below_reference_ns").sum()).row(0, named=True)
        exposed = {"exposed_ms": s["exposed_ns"] / _MS, "wait_ms": s["exposed_wait_ns"] / _MS,
                   "link_speed_ms": s["exposed_link_speed_ns"] / _MS, "below_reference_ms": s["exposed_below_reference_ns"] / _MS,
                   "basis": split.get_column("split_basis").unique().sort().to_list()}
    return {"baseline": baseline is not None, "rows": rows, "exposed_split": exposed}


def _file_info(path: Path, role: str) -> dict[str, Any]:
    info: dict[str, Any] = {"path": str(path), "role": role, "size_bytes": None, "sha256": None}
    try:
        if path.is_file():
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 22), b""):
                    h.update(chunk)
            info["size_bytes"] = path.stat().st_size
            info["sha256"] = h.hexdigest()
        elif path.is_dir():  # an nsys parquet/arrow export directory
            info["size_bytes"] = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    except OSError:
        pass
    return info


# ---------------------------------------------------------------------------------------------
# the reconciler


def waterfall_section(analysis: Analysis, config: str | os.PathLike[str] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The ``waterfall`` section, from the reconciler when it is installed and a config is given.

    Calls ``traceanalyzer.reconciliation.waterfall(analysis, load_config(config))``; its dict holds
    ``achieved_tflops``, ``peak_tflops``, ``mfu``, ``hfu``, ``convention`` and ``terms`` (each
    ``{term, tflops, ...}``, ``achieved`` first; peak = achieved + sum of the loss terms).
    :func:`normalize_waterfall` maps that to the section documented in ``docs/report-schema.md``.
    """
    if config is None:
        return None, []
    config = Path(config)
    if not config.is_file():
        raise ConfigError("no such run configuration file", config)
    from traceanalyzer.model import load_config  # noqa: PLC0415 (model and reconciler load lazily)
    from traceanalyzer.reconciliation import waterfall  # noqa: PLC0415

    result = waterfall(analysis, load_config(config, None))
    wf = normalize_waterfall(result)
    if wf is None:
        return None, ["the reconciler returned no usable waterfall (need achieved_tflops and peak_tflops)"]
    # the one-line warning when MFU on the unprofiled estimate differs from the measured by > 5 %
    return wf, [w for w in result.get("warnings", []) if w.startswith("the profiler's own host work")]


def normalize_waterfall(result: Any) -> dict[str, Any] | None:
    """Map a reconciler result to the report's ``waterfall`` section (or None)."""
    if result is None:
        return None
    if hasattr(result, "to_dict"):
        result = result.to_dict()
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    if not isinstance(result, dict):
        return None
    src = result.get("waterfall", result) if isinstance(result.get("waterfall"), dict) else result
    achieved, peak = _num(src.get("achieved_tflops")), _num(src.get("peak_tflops"))
    if achieved is None or peak is None:
        return None
    terms = []
    for t in src.get("terms") or src.get("losses") or []:  # a handful of terms
        if not isinstance(t, dict):
            continue
        key = str(t.get("key") or t.get("term") or t.get("name") or t.get("label") or "loss")
        if key == "achieved":  # the reconciler lists achieved first; it is not a loss
            continue
        v = _num(t.get("tflops"))
        if v is None:
            continue
        terms.append({"key": key, "label": str(t.get("label") or key.replace("_", " ")), "tflops": v})
    return {
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": _num(src.get("mfu")),
        "hfu": _num(src.get("hfu")),
        "convention": src.get("convention"),
        "terms": terms,
        "residual_tflops": peak - achieved - sum(t["tflops"] for t in terms),
        # TFLOP/s, MFU and HFU on the step without the profiler (null without an estimate)
        "unprofiled": src.get("unprofiled") if isinstance(src.get("unprofiled"), dict) else None,
    }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
