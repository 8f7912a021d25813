"""Kernel-level diff of two runs: which kernels appeared, disappeared or changed time / count,
in the same units as :func:`~traceanalyzer.reconciliation.compare.compare_time`.

Public surface: :func:`kernel_diff`.

Each kernel's contribution is the change of its exact share of its bucket
(``bucket_ns``, :mod:`traceanalyzer.classify.kernelstats`) per mean step: ``B_k / n_B − A_k / n_A``
(``n``: the run's rank-steps). The shares of a class sum exactly to that bucket in every step,
so the contributions of the kernels of a class sum exactly to the bucket's difference that
``compare_time`` reports (compute, recompute, exposed comm — the sum of its dimensions —, other);
idle has no kernel. The arithmetic is on integers (``B_k·n_A − A_k·n_B`` over ``n_A·n_B``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.classify.kernelstats import CLASS_BUCKET


def _per_kernel(an: Analysis) -> pl.DataFrame:
    if an.kernel_stats is None:
        raise ValueError("the analysis has no per-kernel rows (classify.tables.analysis_with_tables)")
    return an.kernel_stats.group_by("name", "cls").agg(
        pl.col("calls").sum().cast(pl.Int64), pl.col("total_ns").sum(), pl.col("bucket_ns").sum()
    )


def kernel_diff(a: Analysis, b: Analysis) -> dict[str, Any]:
    """The kernel diff of runs A and B (both analysed with the per-kernel rows).

    Returns ``{"rows": [...], "by_bucket": {...}, "counts": {...}, "exact": {...}}``. A row per
    kernel name and class, biggest ``|contribution|`` first: ``name``, ``bucket`` (compute /
    recompute / comm / other), ``status`` (appeared / disappeared / changed / same),
    ``calls_a``, ``calls_b`` (per mean step, floats), ``total_ms_a``, ``total_ms_b`` (summed
    duration per mean step), ``bucket_ms_a``, ``bucket_ms_b`` (share of the bucket per mean
    step) and ``contribution_ms`` (``bucket_ms_b − bucket_ms_a``). ``by_bucket``: the sum of the
    contributions per bucket (ms; equal to the bucket differences of ``compare_time``);
    ``exact``: the same as fractions of ns."""
    na, nb = a.steps.height, b.steps.height
    ka, kb = _per_kernel(a), _per_kernel(b)
    j = ka.join(kb, on=["name", "cls"], how="full", coalesce=True, suffix="_b").with_columns(
        pl.col(c).fill_null(0) for c in ("calls", "total_ns", "bucket_ns", "calls_b", "total_ns_b", "bucket_ns_b")
    )
    present_a = pl.col("calls") > 0
    present_b = pl.col("calls_b") > 0
    j = j.with_columns(
        (pl.col("bucket_ns_b") * na - pl.col("bucket_ns") * nb).alias("__num"),  # contribution × na·nb, exact
        pl.when(~present_a & present_b).then(pl.lit("appeared"))
        .when(present_a & ~present_b).then(pl.lit("disappeared"))
        .when((pl.col("calls") * nb != pl.col("calls_b") * na) | (pl.col("bucket_ns_b") * na != pl.col("bucket_ns") * nb)
              | (pl.col("total_ns_b") * na != pl.col("total_ns") * nb))
        .then(pl.lit("changed"))
        .otherwise(pl.lit("same"))
        .alias("status"),
    )
    den = na * nb
    j = j.with_columns(
        (pl.col("calls") / na).alias("calls_a"), (pl.col("calls_b") / nb).alias("calls_b"),
        (pl.col("total_ns") / na / 1e6).alias("total_ms_a"), (pl.col("total_ns_b") / nb / 1e6).alias("total_ms_b"),
        (pl.col("bucket_ns") / na / 1e6).alias("bucket_ms_a"), (pl.col("bucket_ns_b") / nb / 1e6).alias("bucket_ms_b"),
        (pl.col("__num") / den / 1e6).alias("contribution_ms"),
        pl.col("cls").alias("bucket"),
    ).sort([pl.col("__num").abs(), pl.col("name")], descending=[True, False])
    sums = dict(j.group_by("cls").agg(pl.col("__num").sum()).iter_rows())
    exact = {CLASS_BUCKET[c]: Fraction(int(sums.get(c, 0)), den) for c in CLASS_BUCKET}
    counts = dict(j.group_by("status").len().iter_rows())
    rows = j.select("name", "bucket", "status", "calls_a", "calls_b", "total_ms_a", "total_ms_b", "bucket_ms_a", "bucket_ms_b",
                    "contribution_ms")
    return {
        "unit": "ms per step (mean over ranks and steps)",
        "rows": rows.to_dicts(),
        "by_bucket": {k: float(v) / 1e6 for k, v in exact.items()},
        "counts": {s: int(counts.get(s, 0)) for s in ("appeared", "disappeared", "changed", "same")},
        "exact": {f"{k}_ns": v for k, v in exact.items()},
    }


def bucket_gaps(cmp_time: dict[str, Any]) -> dict[str, Fraction]:
    """The bucket differences of a ``compare_time`` result (exact ns), its cause terms summed
    into their bucket (``exposed_comm_tp`` -> ``exposed_comm``)."""
    out = {b: Fraction(0) for b in CLASS_BUCKET.values()}
    for key, v in cmp_time["exact"].items():
        if key == "gap_ns":
            continue
        term = key.removesuffix("_ns")
        for b in out:
            if term == b or term.startswith(b + "_"):
                out[b] += v
    return out
