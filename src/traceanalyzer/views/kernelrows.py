"""The report model's kernel sections: the top kernels by GPU time, the top exposed collectives,
the kernel table's first rows (bucket, exact share, TFLOP/s) and the collectives' bus bandwidth
against a reference."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.classify.kernels import exposed_rows, kernel_rows

_MS = 1e6  # ns per ms


def top_kernels(analysis: Analysis, totals: pl.DataFrame, top: int) -> list[dict[str, Any]]:
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


def top_exposed(analysis: Analysis, seg: pl.DataFrame, totals: pl.DataFrame, top: int) -> list[dict[str, Any]]:
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


def kernels(analysis: Analysis, top: int) -> dict[str, Any] | None:
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


def collective_efficiency(analysis: Analysis, baseline: pl.DataFrame | None, top: int) -> dict[str, Any] | None:
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
