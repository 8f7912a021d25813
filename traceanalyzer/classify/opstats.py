"""The op table: every host (CPU) op by name and input shapes, with its host time, the GPU time
of the kernels it launched, and FLOPs / achieved TFLOP/s where its shapes have a formula.

* **map** (:func:`op_stat_rows`, in the rank worker): per rank, step (the step's host range),
  op name and ``Input Dims`` (null without ``record_shapes``, and for ops whose shapes the
  parser does not keep): calls, host durations (a list, for exact percentiles), and the GPU
  time of the kernels each call launched itself (kernels link to the innermost op on the stack
  at launch, through the Kineto external id; a parent op such as ``aten::linear`` shows the GPU
  time of its child ``aten::addmm`` there, not here).
* **reduce** (:func:`op_table`): one row per op name and shapes over the selected ranks and steps.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.kernelstats import nearest_rank, select_rows, selected_wall_ns, sort_table, step_of
from traceanalyzer.classify.shapes import cost_frame

ROW_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "name": pl.String, "input_dims": pl.String, "calls": pl.UInt32,
    "total_ns": pl.Int64, "durations": pl.List(pl.Int64), "gpu_ns": pl.Int64, "kernels": pl.UInt32,
    "compute_ns": pl.Int64, "recompute_ns": pl.Int64, "comm_ns": pl.Int64, "other_ns": pl.Int64,
    "gpu_precision": pl.String,
}


def op_stat_rows(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The worker's rows (:data:`ROW_SCHEMA`) per ``rank, step, name, input_dims``: host time of
    the calls that start inside the step's host range, and the GPU time (kernel durations, by
    class: ``compute_ns``...) of the kernels they launched; ``gpu_precision``: the precision the
    first such kernel's name states (:func:`~traceanalyzer.classify.roofline.precision_of`)."""
    from traceanalyzer.classify.roofline import precision_of

    ops = events.lazy().filter(pl.col("kind") == "cpu_op").select(
        "rank", "name", "input_dims", "external_id", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur")
    )
    k = gpu.lazy().filter(pl.col("external_id").is_not_null()).select(
        "rank", "external_id", "cls", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("kdur"), "name"
    )
    per_op = k.group_by("rank", "external_id").agg(
        pl.col("kdur").sum().alias("gpu_ns"),
        pl.len().alias("kernels"),
        *[pl.col("kdur").filter(pl.col("cls") == c).sum().alias(f"{c}_ns") for c in ("compute", "recompute", "comm", "other")],
        precision_of(pl.col("name")).sort_by("start_ns").drop_nulls().first().alias("gpu_precision"),
    )
    # an external id shared by several host ops (rare): the GPU work goes to the first of them
    first = ops.filter(pl.col("external_id").is_not_null()).sort("start_ns").unique(["rank", "external_id"], keep="first")
    firsts = first.select("rank", "external_id", "start_ns", pl.lit(True).alias("__first"))
    linked = (
        ops.join(firsts, on=["rank", "external_id", "start_ns"], how="left")
        .join(per_op, on=["rank", "external_id"], how="left")
        .with_columns(
            *[pl.when(pl.col("__first")).then(pl.col(c)).alias(c) for c in ("gpu_ns", "kernels", "compute_ns", "recompute_ns", "comm_ns", "other_ns", "gpu_precision")]
        )
    )
    out = (
        step_of(linked, windows, cpu=True)
        .group_by("rank", "step", "name", "input_dims")
        .agg(
            pl.len().alias("calls"),
            pl.col("dur").sum().alias("total_ns"),
            pl.col("dur").sort().alias("durations"),
            pl.col("gpu_ns").sum(),
            pl.col("kernels").sum(),
            *[pl.col(f"{c}_ns").sum() for c in ("compute", "recompute", "comm", "other")],
            pl.col("gpu_precision").drop_nulls().first(),
        )
        .collect()
    )
    return out.select([pl.col(c).cast(t) for c, t in ROW_SCHEMA.items()]).sort("rank", "step", "name", "input_dims", nulls_last=True)


def op_table(
    rows: pl.DataFrame,
    steps: pl.DataFrame,
    device: str | None = None,
    *,
    name: str | None = None,
    rank: list[int] | None = None,
    step: list[int] | None = None,
    precision: str | None = None,
    sort: str = "total",
    top: int | None = None,
) -> pl.DataFrame:
    """One row per op name and input shapes over the selected ranks and steps (times in integer
    ns unless said): ``name, input_dims, bucket`` (the class with most of its kernels' GPU time:
    compute / recompute / comm / other; null when it launched none), ``ranks, calls, total_ns``
    (host time), ``mean_ns`` (Float64), ``p50_ns, p99_ns, min_ns, max_ns`` (host), ``kernels``
    (GPU work it launched itself), ``gpu_ns`` (their summed durations), ``gpu_share_pct``
    (``gpu_ns`` over the selected rank-steps' wall time, percent), ``op_kind`` (gemm /
    attention / null), ``precision``, ``flops``, ``bytes`` (all calls), ``tflops``, ``gbps``
    (achieved: over ``gpu_ns``), ``peak_tflops``, ``roofline_pct``.

    ``precision``: the precision of ops whose kernels' names state none (e.g. ``"bf16"``)."""
    from traceanalyzer.classify.roofline import ELEMENT_BYTES, device_roof, with_roofline

    sel = select_rows(rows, name=name, rank=rank, step=step)
    wall = selected_wall_ns(steps, rank, step)
    d = pl.col("durations").explode().drop_nulls().sort()
    cls = ["compute", "recompute", "comm", "other"]
    t = (
        sel.group_by("name", "input_dims")
        .agg(
            pl.col("rank").n_unique().alias("ranks"),
            pl.col("calls").sum().cast(pl.Int64),
            pl.col("total_ns").sum(),
            d.alias("__d"),
            pl.col("kernels").sum().cast(pl.Int64),
            pl.col("gpu_ns").sum(),
            *[pl.col(f"{c}_ns").sum() for c in cls],
            pl.col("gpu_precision").drop_nulls().first(),
        )
        .with_columns(
            pl.when(pl.col("gpu_ns") > 0)
            .then(pl.concat_list([pl.col(f"{c}_ns") for c in cls]).list.arg_max().replace_strict(dict(enumerate(cls)), return_dtype=pl.String))
            .alias("bucket"),
            pl.when(pl.col("calls") > 0).then(pl.col("total_ns") / pl.col("calls")).alias("mean_ns"),
            nearest_rank(pl.col("__d"), 50).alias("p50_ns"),
            nearest_rank(pl.col("__d"), 99).alias("p99_ns"),
            pl.col("__d").list.first().alias("min_ns"),
            pl.col("__d").list.last().alias("max_ns"),
            (100 * pl.col("gpu_ns") / wall if wall else pl.lit(None, pl.Float64)).alias("gpu_share_pct"),
            pl.coalesce("gpu_precision", pl.lit(precision, pl.String)).alias("precision"),
        )
    )
    costs = cost_frame(t.select("name", "input_dims"))
    size = pl.col("precision").replace_strict(ELEMENT_BYTES, default=None, return_dtype=pl.Int64)
    t = t.join(costs, on=["name", "input_dims"], how="left", nulls_equal=True).with_columns(
        (pl.col("flops") * pl.col("calls")).alias("flops"),
        (pl.col("elements") * pl.col("calls") * size).alias("bytes"),
        pl.when(pl.col("gpu_ns") > 0).then(pl.col("gpu_ns")).alias("time_ns"),
    )
    _key, peaks, hbm = device_roof(device)
    t = with_roofline(t, peaks, hbm)
    t = t.select(
        "name", "input_dims", "bucket", "ranks", "calls", "total_ns", "mean_ns", "p50_ns", "p99_ns", "min_ns", "max_ns",
        "kernels", "gpu_ns", "gpu_share_pct", "op_kind", "precision", "flops", "bytes", "tflops", "gbps", "peak_tflops", "roofline_pct",
    )
    t = sort_table(t, sort)
    return t.head(top) if top else t
