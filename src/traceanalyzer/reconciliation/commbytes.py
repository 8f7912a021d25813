"""Bytes each parallel dimension moved per step, measured beside the analytic model's prediction.

**Measured**: every collective kernel that carries a size (``bytes``: the nccl-tests "size", the
full buffer; :mod:`traceanalyzer.classify.comm`) counts its *bus* bytes, the bytes a GPU sends
on a ring: ``2(n−1)/n`` of the size for an all-reduce, ``(n−1)/n`` for an all-gather,
reduce-scatter or all-to-all, the size itself otherwise (nccl-tests' bus-bandwidth factors, with
``n`` the group size). Summed per rank, dimension and step, then the mean over the rank-steps.

**Predicted**: :func:`traceanalyzer.model.parallel.comm_volumes` for the run configuration (bytes
per GPU per optimizer step, the same ring factors), summed per dimension.

``ratio = measured / predicted``; ``warning`` when they differ by more than :data:`TOLERANCE`
(a wrong layout in the configuration, or a collective the model does not expect). A dimension
measured but with no kernel carrying a size has ``measured_bytes`` null (no ratio, no warning).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer.errors import ConfigError

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis
    from traceanalyzer.model.config import RunConfig

#: measured and predicted differ by more than this fraction of the prediction: a warning
TOLERANCE = 0.20

SCHEMA = {"dim": pl.String, "measured_bytes": pl.Float64, "kernels": pl.Float64, "sized": pl.Float64, "predicted_bytes": pl.Float64,
          "ratio": pl.Float64, "warning": pl.Boolean}


def bus_factor() -> pl.Expr:
    n = pl.col("group_size").cast(pl.Float64)
    return (
        pl.when(pl.col("coll_type") == "all_reduce").then(2 * (n - 1) / n)
        .when(pl.col("coll_type").is_in(["all_gather", "reduce_scatter", "all_to_all"])).then((n - 1) / n)
        .otherwise(1.0)
        .fill_null(1.0)
    )


def measured(analysis: Analysis) -> pl.DataFrame:
    """Per dimension: ``measured_bytes`` (bus bytes per rank and step; null when no kernel of it
    carries a size), ``kernels`` and ``sized`` (kernels per rank and step, all and with a size)."""
    coll = getattr(analysis, "collectives", None)  # an analysis of the partition only has none
    rank_steps = max(analysis.steps.height, 1)
    if coll is None or coll.height == 0:
        return pl.DataFrame(schema={k: SCHEMA[k] for k in ("dim", "measured_bytes", "kernels", "sized")})
    return (
        coll.filter(pl.col("step").is_not_null())
        .with_columns(pl.col("coll_type").cast(pl.String), pl.col("dim").cast(pl.String))
        .group_by("dim")
        .agg(
            pl.when(pl.col("bytes").is_not_null().any()).then((pl.col("bytes") * bus_factor()).sum() / rank_steps).alias("measured_bytes"),
            (pl.len() / rank_steps).alias("kernels"),
            (pl.col("bytes").is_not_null().sum() / rank_steps).alias("sized"),
        )
        .cast({"measured_bytes": pl.Float64, "kernels": pl.Float64, "sized": pl.Float64})
    )


def predicted(cfg: RunConfig) -> tuple[pl.DataFrame, str | None]:
    """(per dimension the predicted bytes per GPU and step, why there is no prediction)."""
    from traceanalyzer.model.parallel import comm_volumes

    empty = pl.DataFrame(schema={"dim": pl.String, "predicted_bytes": pl.Float64})
    if cfg.model.fwd_flops_per_sample is not None:
        return empty, "the configuration gives no transformer shape ([model] fwd_flops_per_sample): no communication model"
    try:
        comms = comm_volumes(cfg)
    except ConfigError as exc:
        return empty, str(exc)
    rows: dict[str, float] = {}
    for c in comms:
        rows[c.dim.upper()] = rows.get(c.dim.upper(), 0.0) + c.bytes
    return pl.DataFrame({"dim": list(rows), "predicted_bytes": list(rows.values())}, schema=empty.schema), None


def comm_bytes_table(analysis: Analysis, cfg: RunConfig) -> pl.DataFrame:
    """One row per dimension measured or predicted (see the module docstring), sorted by dimension."""
    return comm_bytes(analysis, cfg)[0]


def comm_bytes(analysis: Analysis, cfg: RunConfig) -> tuple[pl.DataFrame, list[str]]:
    """(the table of :func:`comm_bytes_table`, its warnings)."""
    pred, why = predicted(cfg)
    meas = measured(analysis)
    out = meas.join(pred, on="dim", how="full", coalesce=True)
    ratio = pl.when(pl.col("predicted_bytes") > 0).then(pl.col("measured_bytes") / pl.col("predicted_bytes"))
    out = (
        out.with_columns(ratio.alias("ratio"))
        .with_columns(
            pl.when(pl.col("measured_bytes").is_not_null() & pl.col("predicted_bytes").is_not_null())
            .then(((pl.col("measured_bytes") - pl.col("predicted_bytes")).abs() > TOLERANCE * pl.col("predicted_bytes")))
            .otherwise(False)
            .alias("warning"),
            pl.col("kernels").fill_null(0.0),
            pl.col("sized").fill_null(0.0),
        )
        .select(list(SCHEMA))
        .cast(SCHEMA)
        .sort("dim")
    )
    warnings = []
    if why and meas.height:
        warnings.append(f"bytes per dimension: no prediction to compare with: {why}")
    for r in out.filter(pl.col("warning")).iter_rows(named=True):
        warnings.append(
            f"bytes per dimension: {r['dim']} moved {r['measured_bytes'] / 1e6:.3f} MB per rank and step, the model predicts "
            f"{r['predicted_bytes'] / 1e6:.3f} MB ({r['ratio']:.2f}x): more than {100 * TOLERANCE:.0f} % apart (a wrong layout "
            "in the configuration, or a collective the model does not expect)"
        )
    for r in out.filter(pl.col("measured_bytes").is_null() & pl.col("predicted_bytes").is_not_null() & (pl.col("kernels") == 0)).iter_rows(named=True):
        if meas.height:
            warnings.append(f"bytes per dimension: the model predicts {r['predicted_bytes'] / 1e6:.3f} MB per step over {r['dim']}, "
                            "the trace holds no collective of that dimension")
    return out, warnings


def rows(table: pl.DataFrame) -> list[dict[str, Any]]:
    """The table as the reconcile document holds it (``comm_bytes``)."""
    return table.to_dicts()
