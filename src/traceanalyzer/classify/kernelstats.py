"""The kernel table: every GPU kernel (and memcpy / memset) by name, with its exact share of the
partition, its time statistics and, where its launching op recorded shapes, its FLOPs.

Two halves, as the engine runs them:

* **map** (:func:`kernel_stat_rows`, in the rank worker): per rank, step, kernel name, class and
  stream: the calls and their durations (a list, so that percentiles over any selection of
  ranks and steps are exact), and ``bucket_ns``: the kernel's exact integer share of the
  partition (see below). No raw event leaves the worker.
* **reduce** (:func:`kernel_table`): the rows of the selected ranks and steps summed per kernel
  name and class, with percentiles, shares and the roofline.

``bucket_ns`` — every elementary segment of a step (:func:`~traceanalyzer.classify.partition.segment_frame`)
falls in one bucket; its length is shared among the kernels of that bucket's class running in
it (compute kernels share compute segments, communication kernels share exposed-communication
segments, memcpy/memset share "other" segments), ``len // n`` each and one more nanosecond to
the first ``len % n`` of them by start time. So the ``bucket_ns`` of a class sum, per rank and
step, exactly to that bucket of the breakdown (compute, recompute, exposed_comm, other), and
a kernel's ``bucket_ns`` is the time it alone accounts for: its duration less what overlaps
work of a higher priority or is shared with kernels of its own class.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.shapes import cost_frame
from traceanalyzer.queries import query_engine

#: the partition bucket each kernel class accounts for
CLASS_BUCKET = {"compute": "compute", "recompute": "recompute", "comm": "exposed_comm", "other": "other"}

#: the per-rank rows a worker returns (:func:`kernel_stat_rows`)
ROW_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "name": pl.String, "cls": pl.String, "kind": pl.String, "stream": pl.Int64,
    "calls": pl.UInt32, "total_ns": pl.Int64, "durations": pl.List(pl.Int64), "bucket_ns": pl.Int64,
    "flops": pl.Int64, "elements": pl.Int64, "flops_ns": pl.Int64, "flops_calls": pl.UInt32,
    "input_precision": pl.String,
}


def step_of(frame: pl.LazyFrame, windows: pl.DataFrame, cpu: bool = False) -> pl.LazyFrame:
    """``frame`` (``rank, start_ns, ...``) with ``step``: the step window its start lies in (GPU
    windows; ``cpu``: the step's host range, and every row for a rank without step markers),
    rows in no step dropped."""
    if cpu:
        lo, hi = pl.Int64.min(), pl.Int64.max()
        win = windows.select(
            "rank", "step",
            pl.col("cpu_start_ns").fill_null(lo).alias("__w0"), pl.col("cpu_end_ns").fill_null(hi).alias("__w1"),
        )
    else:
        win = windows.select("rank", "step", pl.col("wstart_ns").alias("__w0"), pl.col("wend_ns").alias("__w1"))
    return (
        frame.sort("start_ns")
        .join_asof(win.lazy().sort("__w0"), left_on="start_ns", right_on="__w0", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("start_ns") < pl.col("__w1")))
        .drop("__w0", "__w1")
    )


def bucket_shares(gpu: pl.DataFrame, seg: pl.DataFrame) -> pl.DataFrame:
    """``__kid, step, bucket_ns``: each GPU work event's (``__kid``: its row in ``gpu``) exact
    integer share of the bucket of its class, per step (see the module docstring).

    ``seg``: the segments of the step windows sorted by rank and start (the partition's cut).
    Each event is matched to the range of segments it spans (two as-of joins; segment
    boundaries include every event boundary), the range exploded (rows: the segments times
    the events active in them, i.e. segments × concurrency) and each segment's length divided."""
    segi = seg.lazy().with_row_index("__si").with_columns(pl.col("__si").cast(pl.Int64))
    first = segi.select("rank", "t0", pl.col("__si").alias("__i0")).sort("t0")
    last = segi.select("rank", "t1", pl.col("__si").alias("__i1")).sort("t1")
    target = pl.col("cls").replace_strict(CLASS_BUCKET, default=None, return_dtype=pl.String)
    ev = (
        gpu.lazy()
        .with_row_index("__kid")
        .filter(pl.col("end_ns") > pl.col("start_ns"))
        .select("__kid", "rank", "start_ns", "end_ns", target.alias("__target"))
        .sort("start_ns")
        .join_asof(first, left_on="start_ns", right_on="t0", by="rank", strategy="forward", check_sortedness=False)
        .sort("end_ns")
        .join_asof(last, left_on="end_ns", right_on="t1", by="rank", strategy="backward", check_sortedness=False)
        .filter(pl.col("__i0").is_not_null() & pl.col("__i1").is_not_null() & (pl.col("__i0") <= pl.col("__i1")))
        .select("__kid", "start_ns", "__target", pl.int_ranges("__i0", pl.col("__i1") + 1).alias("__si"))
        .explode("__si")
    )
    parts = (
        ev.join(segi.select("__si", "step", "bucket", "len_ns"), on="__si")
        .filter(pl.col("bucket") == pl.col("__target"))
        .sort("__si", "start_ns", "__kid")
        .with_columns(pl.len().over("__si").alias("__n"), pl.int_range(pl.len()).over("__si").alias("__j"))
        .with_columns(
            (pl.col("len_ns") // pl.col("__n") + (pl.col("__j") < pl.col("len_ns") % pl.col("__n")).cast(pl.Int64)).alias("bucket_ns")
        )
        .group_by("__kid", "step")
        .agg(pl.col("bucket_ns").sum())
    )
    return parts.collect(engine=query_engine())


#: kernel names that do an op's matmul / attention math (cuBLAS / cuBLASLt / nvjet / CUTLASS GEMMs,
#: cuDNN / flash / xformers attention): an op that launched several kernels gives its FLOPs to the
#: one of them whose name matches, when exactly one does
MATH_KERNELS = r"(?i)gemm|nvjet|cutlass|wgmma|xmma|sdpa|fmha|flash|attention|attn"


def launch_costs(events: pl.DataFrame, gpu: pl.DataFrame) -> pl.LazyFrame:
    """``__kid, flops, elements`` of the GPU work events whose launching op (the host op with the
    same external id: the innermost op on the stack when the kernel was launched) recorded
    shapes with a FLOPs formula (:mod:`.shapes`) and launched that one kernel only, or several of
    which exactly one is a matmul / attention kernel by name (:data:`MATH_KERNELS`: cuDNN's
    attention backward launches a preprocessing kernel, its flash kernel and a conversion; the
    FLOPs go to the flash kernel). Other ops that launched several kernels keep their FLOPs in
    the op table: which kernel did which part of the work is not in the trace."""
    ops = events.lazy().filter((pl.col("kind") == "cpu_op") & pl.col("input_dims").is_not_null() & pl.col("external_id").is_not_null())
    from traceanalyzer.classify.roofline import precision_of_type  # noqa: PLC0415

    ops = ops.select("rank", "external_id", "name", "input_dims",
                     precision_of_type(pl.col("input_type")).alias("input_precision")).collect(engine=query_engine())
    if not ops.height:
        return pl.LazyFrame(schema={"__kid": pl.UInt32, "flops": pl.Int64, "elements": pl.Int64, "input_precision": pl.String})
    costs = cost_frame(ops).filter(pl.col("flops").is_not_null())
    op_cost = ops.lazy().join(costs.lazy(), on=["name", "input_dims"]).select("rank", "external_id", "flops", "elements", "input_precision")
    # memsets / memcpys an op issues beside its kernel (a GEMM's workspace, cuDNN's scratch) are not
    # the kernel that does the math; of several kernels, the one whose name says matmul / attention
    k = gpu.lazy().with_row_index("__kid").filter(pl.col("external_id").is_not_null(), pl.col("kind") == "kernel")
    main = pl.col("name").str.contains(MATH_KERNELS)
    k = k.with_columns(pl.len().over("rank", "external_id").alias("__nk"),
                       main.sum().over("rank", "external_id").alias("__nm"))
    single = k.filter((pl.col("__nk") == 1) | ((pl.col("__nm") == 1) & main))
    return single.join(op_cost.unique(["rank", "external_id"], keep="first"), on=["rank", "external_id"]).select("__kid", "flops", "elements", "input_precision")


def kernel_stat_rows(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, seg: pl.DataFrame) -> pl.DataFrame:
    """The worker's rows (:data:`ROW_SCHEMA`): per ``rank, step, name, cls, stream``. Calls and
    durations count the events that start inside the step window; ``bucket_ns`` is the share of
    the step's bucket (an event that starts before a window and runs into it has ``calls`` 0
    there and its share). ``kind``: the event kind (kernel, memcpy, memset, gpu_other)."""
    k = gpu.lazy().with_row_index("__kid").select(
        "__kid", "rank", "name", "cls", pl.col("kind").cast(pl.String), "stream", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur")
    )
    keys = ["rank", "step", "name", "cls", "kind", "stream"]
    costs = launch_costs(events, gpu)
    counted = (
        step_of(k, windows)
        .join(costs, on="__kid", how="left")
        .group_by(keys)
        .agg(
            pl.len().alias("calls"),
            pl.col("dur").sum().alias("total_ns"),
            pl.col("dur").sort().alias("durations"),
            pl.col("flops").sum().alias("flops"),
            pl.col("elements").sum().alias("elements"),
            pl.col("dur").filter(pl.col("flops").is_not_null()).sum().alias("flops_ns"),
            pl.col("flops").is_not_null().sum().alias("flops_calls"),
            pl.col("input_precision").drop_nulls().first(),
        )
    )
    shares = bucket_shares(gpu, seg).lazy().join(k.select("__kid", "rank", "name", "cls", "kind", "stream"), on="__kid")
    shared = shares.group_by(keys).agg(pl.col("bucket_ns").sum())
    out = counted.join(shared, on=keys, how="full", coalesce=True, nulls_equal=True).with_columns(
        pl.col("calls").fill_null(0), pl.col("total_ns").fill_null(0), pl.col("durations").fill_null([]),
        pl.col("bucket_ns").fill_null(0), pl.col("flops_ns").fill_null(0), pl.col("flops_calls").fill_null(0),
    )
    return out.collect(engine=query_engine()).select([pl.col(c).cast(t) for c, t in ROW_SCHEMA.items()]).sort("rank", "step", "name", "stream", "cls", "kind", nulls_last=True)


# ---------------------------------------------------------------------------------------------
# reduce: the table a user sees

#: the columns :func:`kernel_table` sorts by (``--sort``)
SORT_KEYS = ("total", "bucket", "gpu", "calls", "mean", "p50", "p99", "max", "tflops", "name")


def nearest_rank(d: pl.Expr, pct: int) -> pl.Expr:
    """The ``pct``-th percentile of the sorted list expression ``d`` by the nearest-rank method
    (the smallest value with at least ``pct`` % of the values at or below it): an exact integer,
    one of the durations (integer arithmetic: ``ceil(pct·n/100)``-th value)."""
    n = d.list.len()
    return d.list.get(((n * pct + 99) // 100 - 1).clip(0, None), null_on_oob=True)


def call_time_stats() -> list[pl.Expr]:
    """``mean_ns`` (Float64; ``total_ns`` over ``calls``), ``p50_ns``, ``p99_ns``, ``min_ns`` and
    ``max_ns`` of the sorted durations list ``__d``."""
    return [
        pl.when(pl.col("calls") > 0).then(pl.col("total_ns") / pl.col("calls")).alias("mean_ns"),
        nearest_rank(pl.col("__d"), 50).alias("p50_ns"),
        nearest_rank(pl.col("__d"), 99).alias("p99_ns"),
        pl.col("__d").list.first().alias("min_ns"),
        pl.col("__d").list.last().alias("max_ns"),
    ]


def finish_table(t: pl.DataFrame, device: str | None, sort: str, top: int | None, columns: tuple[str, ...]) -> pl.DataFrame:
    """A kernel or op table from its aggregated rows: the roofline columns for ``device``, the
    ``columns`` in that order, sorted by ``sort`` (:func:`sort_table`), the first ``top`` rows."""
    from traceanalyzer.classify.roofline import device_roof, with_roofline

    _key, peaks, hbm = device_roof(device)
    t = sort_table(with_roofline(t, peaks, hbm).select(columns), sort)
    return t.head(top) if top else t


def select_rows(rows: pl.DataFrame, *, name: str | None = None, rank: list[int] | None = None,
                step: list[int] | None = None) -> pl.DataFrame:
    """The rows of the given ranks and steps whose name matches the regex ``name``."""
    if name is not None:
        rows = rows.filter(pl.col("name").str.contains(name))
    if rank:
        rows = rows.filter(pl.col("rank").is_in(rank))
    if step:
        rows = rows.filter(pl.col("step").is_in(step))
    return rows


def selected_wall_ns(steps: pl.DataFrame, rank: list[int] | None = None, step: list[int] | None = None) -> int:
    """The summed duration (ns) of the selected rank-steps: the denominator of ``share_pct``."""
    if rank:
        steps = steps.filter(pl.col("rank").is_in(rank))
    if step:
        steps = steps.filter(pl.col("step").is_in(step))
    return int(steps.get_column("duration_ns").sum())


#: the columns that tell two rows of a kernel or op table apart, in the order they break ties
_ROW_KEYS = ("name", "input_dims", "bucket", "kind")


def sort_table(table: pl.DataFrame, sort: str, time_col: str = "total_ns") -> pl.DataFrame:
    """Biggest first by ``sort`` (one of :data:`SORT_KEYS`; ``name``: alphabetical), then by name
    and the row's other keys (input shapes, bucket, kind; missing ones last), so that rows which
    tie keep one order whatever the engine that computed them."""
    col = {"total": time_col, "bucket": "bucket_ns", "calls": "calls", "mean": "mean_ns", "p50": "p50_ns", "p99": "p99_ns",
           "max": "max_ns", "tflops": "tflops", "gpu": "gpu_ns", "name": "name"}[sort]
    if col not in table.columns:
        col = time_col
    keys = [c for c in _ROW_KEYS if c in table.columns]
    if col == "name":
        return table.sort(keys, nulls_last=True)
    return table.sort([col, *keys], descending=[True] + [False] * len(keys), nulls_last=True)


def kernel_table(rows: pl.DataFrame, steps: pl.DataFrame, device: str | None = None, *, name: str | None = None,
                 rank: list[int] | None = None, step: list[int] | None = None, precision: str | None = None,
                 sort: str = "total", top: int | None = None) -> pl.DataFrame:
    """The kernel table from the workers' rows (:func:`kernel_stat_rows`) of the selected ranks
    and steps: one row per kernel name and class. Columns (times in integer ns unless said):

    ``name, bucket`` (compute / recompute / comm / other), ``kind``, ``streams`` (the streams it
    ran on, e.g. ``"7"`` or ``"7,20"``), ``ranks`` (how many ranks ran it), ``calls``,
    ``total_ns``, ``mean_ns`` (Float64), ``p50_ns``, ``p99_ns``, ``min_ns``, ``max_ns``,
    ``bucket_ns`` (its exact share of the breakdown's bucket: over all kernels of a class these
    sum to that bucket), ``share_pct`` (``bucket_ns`` over the wall time of the selected
    rank-steps, percent), ``precision``, ``flops`` and ``bytes`` (of the calls whose FLOPs are
    known; ``flops_calls`` of them), ``tflops`` and ``gbps`` (achieved, over those calls' time),
    ``peak_tflops``, ``roofline_pct`` (see :mod:`.roofline`).

    ``precision``: the precision of kernels whose name states none and whose launching op
    recorded no input types (e.g. ``"bf16"``); without it such kernels get no bytes and no
    roofline."""
    from traceanalyzer.classify.roofline import ELEMENT_BYTES, precision_of

    sel = select_rows(rows, name=name, rank=rank, step=step)
    wall = selected_wall_ns(steps, rank, step)
    d = pl.col("durations").explode().drop_nulls().sort()
    t = (
        sel.group_by("name", "cls")
        .agg(
            pl.col("kind").first(),
            pl.col("stream").drop_nulls().unique().sort().cast(pl.String).str.join(",").alias("streams"),
            pl.col("rank").filter(pl.col("calls") > 0).n_unique().alias("ranks"),
            pl.col("calls").sum().cast(pl.Int64),
            pl.col("total_ns").sum(),
            d.alias("__d"),
            pl.col("bucket_ns").sum(),
            pl.col("flops").sum(),
            pl.col("elements").sum(),
            pl.col("flops_ns").sum(),
            pl.col("flops_calls").sum().cast(pl.Int64),
            pl.col("input_precision").drop_nulls().first(),
        )
        .with_columns(
            pl.col("cls").alias("bucket"),
            *call_time_stats(),
            (100 * pl.col("bucket_ns") / wall if wall else pl.lit(None, pl.Float64)).alias("share_pct"),
            pl.coalesce(precision_of(pl.col("name")), "input_precision", pl.lit(precision, pl.String)).alias("precision"),
        )
    )
    has = pl.col("flops_calls") > 0
    size = pl.col("precision").replace_strict(ELEMENT_BYTES, default=None, return_dtype=pl.Int64)
    t = t.with_columns(
        pl.when(has).then(pl.col("flops")).alias("flops"),
        pl.when(has).then(pl.col("elements") * size).alias("bytes"),
        pl.when(has).then(pl.col("flops_ns")).alias("time_ns"),
    )
    return finish_table(t, device, sort, top, (
        "name", "bucket", "kind", "streams", "ranks", "calls", "total_ns", "mean_ns", "p50_ns", "p99_ns", "min_ns", "max_ns",
        "bucket_ns", "share_pct", "precision", "flops_calls", "flops", "bytes", "tflops", "gbps", "peak_tflops", "roofline_pct",
    ))
