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

from traceanalyzer.classify.kernelstats import call_time_stats, finish_table, select_rows, selected_wall_ns, step_of
from traceanalyzer.classify.shapes import cost_frame
from traceanalyzer.queries import query_engine

ROW_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "name": pl.String, "input_dims": pl.String, "calls": pl.UInt32,
    "total_ns": pl.Int64, "durations": pl.List(pl.Int64), "gpu_ns": pl.Int64, "kernels": pl.UInt32,
    "compute_ns": pl.Int64, "recompute_ns": pl.Int64, "comm_ns": pl.Int64, "other_ns": pl.Int64,
    "gpu_precision": pl.String, "launched_calls": pl.UInt32, "input_precision": pl.String,
}


THREAD = ["rank", "pid", "tid"]


def launching_op(events: pl.DataFrame, gpu: pl.DataFrame) -> pl.LazyFrame:
    """``gpu`` with ``external_id`` naming the host op that launched each piece of work.

    Kineto gives a kernel the External id of the innermost op on the stack at launch, except in
    some PyTorch versions (e.g. the 2023 PARAM DLRM traces) where the kernel and its launch call
    carry the *correlation* id as External id, which matches no op. For those, the op is found
    on the host: the innermost ``cpu_op`` enclosing the launch call (joined by correlation) on
    its thread — in a per-thread pre-order of ops and runtime calls, the parent of a call is
    the last row before it one level up."""
    ev = events.lazy()
    op_ids = ev.filter(pl.col("kind") == "cpu_op").select("rank", "external_id").drop_nulls().unique()
    # each intermediate frame below is read more than once: materialised, so that the lazy
    # plan does not compute it again for every reader
    g = gpu.lazy().join(op_ids.with_columns(pl.lit(True).alias("__known")), on=["rank", "external_id"], how="left").collect(engine=query_engine()).lazy()
    # the launch calls of the work whose external id names no op: usually none, and then no
    # call tree is needed; else only their threads' trees
    unknown = g.filter(pl.col("__known").is_null() & pl.col("correlation").is_not_null()).select("rank", "correlation").unique().collect(engine=query_engine())
    if not unknown.height:
        return g.drop("__known")
    threads = (
        ev.filter(pl.col("kind") == "runtime")
        .join(unknown.lazy(), on=["rank", "correlation"], how="semi")
        .select(THREAD)
        .unique()
    )
    host = (
        ev.join(threads, on=THREAD, how="semi")
        .filter(pl.col("kind").is_in(["cpu_op", "runtime"]))
        .select(*THREAD, "kind", "start_ns", "end_ns", "external_id", "correlation")
        .sort([*THREAD, "start_ns", "end_ns"], descending=[False, False, False, False, True])
        .with_row_index("pos")
        .with_columns(pl.col("pos").cast(pl.Int64))
        .collect(engine=query_engine())
        .lazy()
    )
    # last descendant of every row: the last row of its thread that starts before it ends
    last = host.select(*THREAD, "start_ns", "pos").group_by(*THREAD, "start_ns").agg(pl.col("pos").max().alias("hi")).sort("start_ns")
    tree = (
        host.with_columns((pl.col("end_ns") - 1).alias("__q"))
        .sort("__q")
        .join_asof(last, left_on="__q", right_on="start_ns", by=THREAD, strategy="backward", check_sortedness=False, suffix="__r")
        .with_columns(pl.max_horizontal("pos", pl.col("hi").fill_null(pl.col("pos"))).alias("hi"))
        .drop("__q", "start_ns__r", strict=False)
        .collect(engine=query_engine())
        .lazy()
    )
    # depth = rows open at a row's position (its ancestors and itself)
    delta = pl.concat([tree.select(pl.col("pos").alias("p"), pl.lit(1, pl.Int64).alias("d")),
                       tree.select((pl.col("hi") + 1).alias("p"), pl.lit(-1, pl.Int64).alias("d"))])
    depth = delta.group_by("p").agg(pl.col("d").sum()).sort("p").with_columns(pl.col("d").cum_sum().alias("depth")).select("p", "depth")
    tree = tree.sort("pos").join_asof(depth, left_on="pos", right_on="p", strategy="backward", check_sortedness=False).drop("p").collect(engine=query_engine()).lazy()
    parents = tree.filter(pl.col("kind") == "cpu_op").select(*THREAD, "depth", pl.col("pos").alias("ppos"), pl.col("external_id").alias("__op")).sort("ppos")
    calls = (
        tree.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .with_columns((pl.col("depth") - 1).alias("depth"), (pl.col("pos") - 1).alias("__before"))
        .sort("__before")
        .join_asof(parents, left_on="__before", right_on="ppos", by=[*THREAD, "depth"], strategy="backward", check_sortedness=False)
        .group_by("rank", "correlation")
        .agg(pl.col("__op").first())
    )
    return (
        g.join(calls, on=["rank", "correlation"], how="left")
        .with_columns(pl.when(pl.col("__known")).then(pl.col("external_id")).otherwise(pl.coalesce("__op", "external_id")).alias("external_id"))
        .drop("__known", "__op")
    )


def op_stat_rows(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The worker's rows (:data:`ROW_SCHEMA`) per ``rank, step, name, input_dims``: host time of
    the calls that start inside the step's host range, and the GPU time (kernel durations, by
    class: ``compute_ns``...) of the kernels they launched; ``gpu_precision``: the precision the
    first such kernel's name states (:func:`~traceanalyzer.classify.roofline.precision_of`)."""
    from traceanalyzer.classify.roofline import precision_of, precision_of_type

    ops = events.lazy().filter(pl.col("kind") == "cpu_op").select(
        "rank", "name", "input_dims", "external_id", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur"),
        precision_of_type(pl.col("input_type")).alias("input_precision"),
    )
    k = (
        launching_op(events, gpu)
        .filter(pl.col("external_id").is_not_null())
        .select("rank", "external_id", "cls", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("kdur"), "name")
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
            (pl.col("kernels").fill_null(0) > 0).sum().alias("launched_calls"),
            pl.col("input_precision").drop_nulls().first(),
        )
        .collect(engine=query_engine())
    )
    return out.select([pl.col(c).cast(t) for c, t in ROW_SCHEMA.items()]).sort("rank", "step", "name", "input_dims", nulls_last=True)


def op_table(rows: pl.DataFrame, steps: pl.DataFrame, device: str | None = None, *, name: str | None = None,
             rank: list[int] | None = None, step: list[int] | None = None, precision: str | None = None,
             sort: str = "total", top: int | None = None) -> pl.DataFrame:
    """One row per op name and input shapes over the selected ranks and steps (times in integer
    ns unless said): ``name, input_dims, bucket`` (the class with most of its kernels' GPU time:
    compute / recompute / comm / other; null when it launched none), ``ranks, calls, total_ns``
    (host time), ``mean_ns`` (Float64), ``p50_ns, p99_ns, min_ns, max_ns`` (host), ``kernels``
    (GPU work it launched itself), ``gpu_ns`` (their summed durations), ``gpu_share_pct``
    (``gpu_ns`` over the selected rank-steps' wall time, percent), ``op_kind`` (gemm /
    attention / null), ``precision``, ``flops``, ``bytes`` (all calls), ``tflops``, ``gbps``
    (achieved: over ``gpu_ns``), ``peak_tflops``, ``roofline_pct``.

    ``precision``: the precision of the kernels' names where they state one, else of the
    recorded input types (``Input type``), else ``precision`` (e.g. ``"bf16"``). FLOPs are
    counted once, for the calls that launched kernels themselves (``aten::linear`` over
    ``aten::addmm``, SDPA over its cuDNN / flash op get none)."""
    from traceanalyzer.classify.roofline import ELEMENT_BYTES

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
            pl.col("launched_calls").sum().cast(pl.Int64),
            pl.col("input_precision").drop_nulls().first(),
        )
        .with_columns(
            pl.when(pl.col("gpu_ns") > 0)
            .then(pl.concat_list([pl.col(f"{c}_ns") for c in cls]).list.arg_max().replace_strict(dict(enumerate(cls)), return_dtype=pl.String))
            .alias("bucket"),
            *call_time_stats(),
            (100 * pl.col("gpu_ns") / wall if wall else pl.lit(None, pl.Float64)).alias("gpu_share_pct"),
            pl.coalesce("gpu_precision", "input_precision", pl.lit(precision, pl.String)).alias("precision"),
        )
    )
    costs = cost_frame(t.select("name", "input_dims"))
    size = pl.col("precision").replace_strict(ELEMENT_BYTES, default=None, return_dtype=pl.Int64)
    # FLOPs once, at the op that launched the kernels: wrappers (aten::linear over aten::addmm,
    # SDPA over its cuDNN/flash op) and ops that raised before running (a checkpoint's early stop)
    # launched none. A selection with no kernels at all (CPU-only trace) keeps every formula.
    counted = pl.col("launched_calls") if int(t["kernels"].fill_null(0).sum()) else pl.col("calls")
    t = t.join(costs, on=["name", "input_dims"], how="left", nulls_equal=True).with_columns(
        pl.when(counted > 0).then(pl.col("op_kind")).alias("op_kind"),
        pl.when(counted > 0).then(pl.col("flops")).alias("flops"),
    ).with_columns(
        (pl.col("flops") * counted).alias("flops"),
        (pl.col("elements") * counted * size).alias("bytes"),
        pl.when(pl.col("gpu_ns") > 0).then(pl.col("gpu_ns")).alias("time_ns"),
    )
    return finish_table(t, device, sort, top, (
        "name", "input_dims", "bucket", "ranks", "calls", "total_ns", "mean_ns", "p50_ns", "p99_ns", "min_ns", "max_ns",
        "kernels", "gpu_ns", "gpu_share_pct", "op_kind", "precision", "flops", "bytes", "tflops", "gbps", "peak_tflops", "roofline_pct",
    ))
