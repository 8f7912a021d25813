"""The baseline's bus bandwidth at any message size: linear interpolation in log2(size).

Public surface: :func:`busbw_at` and :func:`pick_curve`.

nccl-tests measures at sizes a factor apart (``-f 2``); a collective in a trace has any size.
Between two measured sizes the bus bandwidth is interpolated linearly in log2(size) (the curves
are smooth in that axis); outside the measured range the nearest end is used and the row says
``extrapolated``. Sizes of 0 bytes are dropped (they time the launch only).

Which curve: the same collective, out-of-place (what frameworks call); when a ``scope`` is asked
for (``intra``: a group inside one node, ``inter``: a group across nodes) only curves measured in
that scope, or of unknown scope, are used — an intra-node group never reads an inter-node curve,
nor the reverse; then — when several tests remain — the one whose rank count equals the trace
group's, else the one with the most ranks (the result names the curve's rank count and scope),
preferring a curve of the asked scope over one of unknown scope.
"""

from __future__ import annotations

import polars as pl


def pick_curve(baseline: pl.DataFrame, collective: str, nranks: int | None = None, scope: str | None = None) -> pl.DataFrame:
    """The measured points (size_bytes, busbw_gbps, nranks, scope, source) used for ``collective``
    (``scope``: ``intra`` / ``inter``, see the module docstring; empty when no curve qualifies)."""
    b = baseline.filter(
        (pl.col("collective") == collective) & (pl.col("placement") == "out_of_place") & (pl.col("size_bytes") > 0)
    )
    if scope is not None:
        b = b.filter(pl.col("scope").is_in([scope, "unknown"]) | pl.col("scope").is_null())
    if not b.height:
        return b.select("size_bytes", "busbw_gbps", "nranks", "scope", "source", "test")
    keys = b.select("source", "test", "nranks", "scope").unique().with_columns(
        (pl.col("scope") == (scope or "")).fill_null(False).alias("__same_scope")
    ).sort(["__same_scope", "source", "test"], descending=[True, False, False])
    chosen = None
    if nranks is not None:
        same = keys.filter(pl.col("nranks") == nranks)
        if same.height:
            chosen = same.row(0, named=True)
    if chosen is None:
        chosen = keys.sort([pl.col("__same_scope"), pl.col("nranks").fill_null(-1)], descending=True).row(0, named=True)
    return (
        b.filter((pl.col("source") == chosen["source"]) & (pl.col("test") == chosen["test"]))
        .group_by("size_bytes").agg(pl.col("busbw_gbps").mean(), pl.col("nranks").first(), pl.col("scope").first(),
                                    pl.col("source").first(), pl.col("test").first())
        .sort("size_bytes")
    )


def busbw_at(baseline: pl.DataFrame, collective: str, sizes: pl.Series | list[int], nranks: int | None = None,
             scope: str | None = None) -> pl.DataFrame:
    """Interpolated baseline bus bandwidth at ``sizes`` (bytes) for ``collective`` (a curve of
    ``scope`` when given: ``intra`` or ``inter``).

    Returns ``size_bytes``, ``baseline_gbps`` (null if the baseline has no such collective),
    ``extrapolated`` (bool), ``baseline_nranks``, ``baseline_scope``; one row per input size, in order.
    """
    q = pl.DataFrame({"size_bytes": pl.Series(list(sizes), dtype=pl.Int64)}).with_row_index("__i")
    curve = pick_curve(baseline, collective, nranks, scope)
    if not curve.height:
        return q.drop("__i").with_columns(
            pl.lit(None, pl.Float64).alias("baseline_gbps"), pl.lit(None, pl.Boolean).alias("extrapolated"),
            pl.lit(None, pl.Int32).alias("baseline_nranks"), pl.lit(None, pl.String).alias("baseline_scope"),
        )
    c = curve.with_columns(pl.col("size_bytes").cast(pl.Float64).log(2).alias("x"))
    lo_end, hi_end = c.row(0, named=True), c.row(-1, named=True)
    qq = q.with_columns(pl.col("size_bytes").cast(pl.Float64).clip(lower_bound=1).log(2).alias("x")).sort("x")
    lo = qq.join_asof(c.select(pl.col("x").alias("x0"), pl.col("busbw_gbps").alias("y0"), pl.col("x").alias("x")),
                      on="x", strategy="backward")
    both = lo.join_asof(c.select(pl.col("x").alias("x1"), pl.col("busbw_gbps").alias("y1"), pl.col("x").alias("x")),
                        on="x", strategy="forward")
    out = both.with_columns(
        pl.when(pl.col("x0").is_null()).then(pl.lit(lo_end["busbw_gbps"]))
        .when(pl.col("x1").is_null()).then(pl.lit(hi_end["busbw_gbps"]))
        .when(pl.col("x1") == pl.col("x0")).then(pl.col("y0"))
        .otherwise(pl.col("y0") + (pl.col("y1") - pl.col("y0")) * (pl.col("x") - pl.col("x0")) / (pl.col("x1") - pl.col("x0")))
        .alias("baseline_gbps"),
        (pl.col("x0").is_null() | pl.col("x1").is_null()).alias("extrapolated"),
        pl.lit(lo_end["nranks"], pl.Int32).alias("baseline_nranks"),
        pl.lit(lo_end["scope"], pl.String).alias("baseline_scope"),
    )
    return out.sort("__i").select("size_bytes", "baseline_gbps", "extrapolated", "baseline_nranks", "baseline_scope")
