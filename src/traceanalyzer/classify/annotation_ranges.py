"""User-annotation breakdown: the GPU time under each NVTX / ``record_function`` range, split
into the partition's buckets.

Ranges come from two sources (column ``source``):

* ``gpu``: the GPU-side copies Kineto writes of ``record_function`` ranges
  (``gpu_user_annotation``): Kineto already projected them onto the device timeline (one per
  device and stream, from the first start to the last end of the GPU work launched inside the
  range). These are the ranges HTA's ``get_gpu_user_annotation_breakdown`` sums.
* ``host``: host ranges (``record_function`` / ``user_annotation``, NVTX push/pop and start/end
  ranges from Nsight Systems) projected onto the GPU here, as Nsight's "GPU projection" does: the
  GPU work whose launch call (runtime API call, joined by correlation id) began on the range's
  thread while the range was open; the range's GPU span runs from the first start to the last
  end of that work. A range that launched no GPU work has no GPU span and no row.

**Level** is the nesting depth among ranges of one source on one thread (host) or one device
stream (gpu): 0 for an outermost range, 1 for a range opened inside it, and so on (the number of
ranges still open when it opens). Ranges that overlap without nesting (NVTX start/end ranges
can) are counted by that same rule.

**Buckets**: a range's GPU span is cut by the step windows and by the partition's elementary
segments (:func:`~traceanalyzer.classify.partition.segment_frame`); each part of the span counts
in the bucket of the segment it covers (compute / recompute / exposed_comm / other / idle; and
``overlapped_comm`` beside them). So the buckets of a row sum exactly to its ``duration_ns``: the
wall time of the GPU timeline while the range's work was in flight, whatever else ran then
(work of other ranges on other streams included). Instances are summed (two instances of one name
that overlap count their common time twice, as HTA and ``nsys nvtx_sum`` do). The part of a
span outside every step window (warm-up, tail) is ``outside_ns``, in no bucket.

One row per (rank, step, source, name, level). ``count``, ``gpu_work`` (GPU work items under the
ranges) and ``gpu_work_ns`` (their summed durations) and ``outside_ns`` count each instance once,
in the first step its span reaches (``step`` null when the span lies in no step window).

Interval arithmetic only (as-of joins on cumulative sums over sorted segments), no Python loop
over events.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.launches import launch_calls
from traceanalyzer.classify.partition import BUCKETS, segment_frame
from traceanalyzer.errors import InvariantViolation
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS

#: the time columns of a row, in this order (``<name>_ns``); buckets sum to ``duration``
TIME_FIELDS = ["duration", *BUCKETS, "overlapped_comm", "outside"]
#: the columns of :func:`annotation_table`
COLUMNS = ["rank", "step", "source", "name", "level", "count", "gpu_work", "gpu_work_ns",
           *[f"{f}_ns" for f in TIME_FIELDS]]
SOURCES = ("auto", "gpu", "host")


def with_level(ranges: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """``ranges`` (``*by, start_ns, end_ns, ...``, non-empty intervals) with ``level``: how many
    ranges on the same ``by`` key were open when it opened (ends at the same instant close
    first; of ranges opening together, the longer one is the outer)."""
    r = ranges.with_row_index("__id")
    pts = pl.concat([
        r.select(*by, "__id", pl.col("start_ns").alias("__t"), pl.lit(1, pl.Int8).alias("__o"),
                 (-pl.col("end_ns")).alias("__k"), pl.lit(1, pl.Int64).alias("__d")),
        r.select(*by, "__id", pl.col("end_ns").alias("__t"), pl.lit(0, pl.Int8).alias("__o"),
                 pl.lit(0, pl.Int64).alias("__k"), pl.lit(-1, pl.Int64).alias("__d")),
    ])
    lv = (
        pts.sort([*by, "__t", "__o", "__k", "__id"])
        .with_columns(pl.col("__d").cum_sum().over(by).alias("__open"))
        .filter(pl.col("__d") == 1)
        .select("__id", (pl.col("__open") - 1).cast(pl.Int32).alias("level"))
    )
    return r.join(lv, on="__id", how="left", maintain_order="left").drop("__id")


def host_ranges(events: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """Host ranges projected onto the GPU: ``rank, source, name, level, start_ns, end_ns,
    gpu_work, gpu_work_ns`` (``start_ns``/``end_ns``: the GPU span)."""
    key = ["rank", "pid", "tid"]
    rng = with_level(
        events.filter((pl.col("kind") == "annotation") & (pl.col("end_ns") > pl.col("start_ns")))
        .select(*key, "name", "start_ns", "end_ns"),
        key,
    ).collect(engine=query_engine()).with_row_index("__r").lazy()  # collected once: the index is used three times
    work = (
        gpu.filter(pl.col("correlation").is_not_null())
        .select("rank", "correlation", pl.col("start_ns").alias("__g0"), pl.col("end_ns").alias("__g1"))
    )
    lw = launch_calls(events).join(work, on=["rank", "correlation"], how="inner")
    levels = rng.select(*key, "level").unique()
    under = (
        lw.join(levels, on=key, how="inner")
        .sort("launch_ns")
        .join_asof(
            rng.select(*key, "level", "__r", pl.col("start_ns").alias("__r0"), pl.col("end_ns").alias("__r1")).sort("__r0"),
            left_on="launch_ns", right_on="__r0", by=[*key, "level"], strategy="backward", check_sortedness=False,
        )
        .filter(pl.col("__r").is_not_null() & (pl.col("launch_ns") < pl.col("__r1")))
        .group_by("__r")
        .agg(
            pl.len().cast(pl.Int64).alias("gpu_work"),
            (pl.col("__g1") - pl.col("__g0")).sum().alias("gpu_work_ns"),
            pl.col("__g0").min().alias("__s0"),
            pl.col("__g1").max().alias("__s1"),
        )
    )
    return rng.join(under, on="__r", how="inner").select(
        "rank", pl.lit("host").alias("source"), "name", "level",
        pl.col("__s0").alias("start_ns"), pl.col("__s1").alias("end_ns"), "gpu_work", "gpu_work_ns",
    )


def gpu_ranges(events: pl.LazyFrame, gpu: pl.LazyFrame) -> pl.LazyFrame:
    """Kineto's GPU-side ranges: ``rank, source, name, level, start_ns, end_ns, gpu_work,
    gpu_work_ns`` (``gpu_work``: GPU work on the same device and stream that starts inside)."""
    key = ["rank", "pid", "stream"]
    rng = with_level(
        events.filter((pl.col("kind") == "gpu_annotation") & (pl.col("end_ns") > pl.col("start_ns")))
        .select(*key, "name", "start_ns", "end_ns"),
        key,
    )
    # work starting before t on the key: a running count and duration sum over start-sorted work
    cum = (
        gpu.select(*key, "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("__d"))
        .sort([*key, "start_ns"])
        .with_columns(
            (pl.int_range(pl.len()).over(key) + 1).cast(pl.Int64).alias("__n"),
            pl.col("__d").cum_sum().over(key).alias("__cd"),
        )
        .select(*key, pl.col("start_ns").alias("__t"), "__n", "__cd")
        .sort("__t")
    )

    out = rng
    for col, tag in (("start_ns", "0"), ("end_ns", "1")):
        out = out.sort(col).join_asof(
            cum.rename({"__n": f"__n{tag}", "__cd": f"__cd{tag}"}), left_on=col, right_on="__t", by=key,
            strategy="backward", allow_exact_matches=False, check_sortedness=False,
        ).drop("__t")
    return out.select(
        "rank", pl.lit("gpu").alias("source"), "name", "level", "start_ns", "end_ns",
        (pl.col("__n1").fill_null(0) - pl.col("__n0").fill_null(0)).alias("gpu_work"),
        (pl.col("__cd1").fill_null(0) - pl.col("__cd0").fill_null(0)).alias("gpu_work_ns"),
    )


def span_buckets(spans: pl.LazyFrame, windows: pl.DataFrame, seg: pl.LazyFrame) -> pl.LazyFrame:
    """Each span (``__i, rank, start_ns, end_ns``) cut by the step windows: ``__i, step,
    duration_ns, <bucket>_ns, overlapped_comm_ns, __first`` per non-empty piece (``__first``: the
    span's first piece). ``seg``: the partition's segments of the same windows."""
    win = (
        windows.lazy().select("rank", "step", "wstart_ns", "wend_ns").sort("rank", "wstart_ns")
        .with_columns(pl.int_range(pl.len()).over("rank").cast(pl.Int64).alias("__w"))
    )
    w_sorted = win.select("rank", "wstart_ns", "__w").sort("wstart_ns")
    idx = (
        spans.sort("start_ns")
        .join_asof(w_sorted.rename({"__w": "__i0"}), left_on="start_ns", right_on="wstart_ns", by="rank",
                   strategy="backward", check_sortedness=False).drop("wstart_ns")
        .sort("end_ns")
        .join_asof(w_sorted.rename({"__w": "__i1"}), left_on="end_ns", right_on="wstart_ns", by="rank",
                   strategy="backward", allow_exact_matches=False, check_sortedness=False).drop("wstart_ns")
        .with_columns(pl.col("__i0").fill_null(0), pl.col("__i1").fill_null(-1))
    )
    pieces = (
        idx.with_columns(pl.int_ranges("__i0", pl.max_horizontal("__i0", pl.col("__i1") + 1)).alias("__w"))
        .explode("__w")
        .filter(pl.col("__w").is_not_null())
        .join(win, on=["rank", "__w"], how="inner")
        .with_columns(
            pl.max_horizontal("start_ns", "wstart_ns").alias("__p0"),
            pl.min_horizontal("end_ns", "wend_ns").alias("__p1"),
        )
        .filter(pl.col("__p1") > pl.col("__p0"))
        .select("__i", "rank", "step", "__w", "__p0", "__p1")
    )
    # per rank, cumulative time of each bucket before each segment
    flags = {b: pl.col("bucket") == b for b in BUCKETS}
    flags["overlapped_comm"] = pl.col("overlapped")
    cum = (
        seg.select("rank", "t0", "t1", *[f.alias(f"__f_{k}") for k, f in flags.items()])
        .sort("rank", "t0")
        .with_columns(
            *[((pl.col("t1") - pl.col("t0")) * pl.col(f"__f_{k}").cast(pl.Int64)).cum_sum().over("rank").alias(f"__c_{k}")
              for k in flags]
        )
        .with_columns(
            *[(pl.col(f"__c_{k}") - (pl.col("t1") - pl.col("t0")) * pl.col(f"__f_{k}").cast(pl.Int64)).alias(f"__c_{k}") for k in flags]
        )
        .sort("t0")
    )

    def at(frame: pl.LazyFrame, col: str, tag: str) -> pl.LazyFrame:
        j = frame.sort(col).join_asof(cum, left_on=col, right_on="t0", by="rank", strategy="backward", check_sortedness=False)
        return j.with_columns(
            *[(pl.col(f"__c_{k}") + pl.col(f"__f_{k}").cast(pl.Int64) * (pl.min_horizontal(col, "t1") - pl.col("t0")))
              .fill_null(0).alias(f"{tag}{k}") for k in flags]
        ).drop("t0", "t1", *[f"__c_{k}" for k in flags], *[f"__f_{k}" for k in flags])

    both = at(at(pieces, "__p0", "__a_"), "__p1", "__b_")
    return both.select(
        "__i", "step",
        (pl.col("__p1") - pl.col("__p0")).alias("duration_ns"),
        *[(pl.col(f"__b_{k}") - pl.col(f"__a_{k}")).alias(f"{k}_ns") for k in flags],
        (pl.col("__w") == pl.col("__w").min().over("__i")).alias("__first"),
    )


def annotation_table(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame,
                     seg: pl.LazyFrame | None = None, source: str = "trace") -> pl.DataFrame:
    """Per (rank, step, source, name, level): ``count``, ``gpu_work``, ``gpu_work_ns``,
    ``duration_ns``, the five buckets and ``overlapped_comm_ns``, ``outside_ns`` (all integer
    ns; see the module docstring). ``gpu``: the labelled GPU work
    (:func:`~traceanalyzer.classify.labels.label_gpu`); ``windows``: the step windows."""
    ev = events.lazy()
    g = gpu.lazy().filter(pl.col("kind").is_in(GPU_WORK_KINDS))
    # collected once: the row index must be the same for every use below
    sp = pl.concat([gpu_ranges(ev, g), host_ranges(ev, g)], how="vertical_relaxed").collect(engine=query_engine()).with_row_index("__i")
    if seg is None:
        seg = segment_frame(gpu, windows)
    pieces = span_buckets(sp.lazy().select("__i", "rank", "start_ns", "end_ns"), windows, seg).collect(engine=query_engine())
    parts = [*BUCKETS, "overlapped_comm"]
    if pieces.height:
        bad = pieces.filter(pl.sum_horizontal([pl.col(f"{b}_ns") for b in BUCKETS]) != pl.col("duration_ns"))
        if bad.height or pieces.select(pl.any_horizontal([pl.col(f"{b}_ns") < 0 for b in parts]).any()).item():
            raise InvariantViolation("annotation bucket split does not sum to the range's GPU time: please report this input", source)
    inside = pieces.group_by("__i").agg(pl.col("duration_ns").sum().alias("__in"))
    per_span = sp.join(inside, on="__i", how="left").with_columns(
        (pl.col("end_ns") - pl.col("start_ns") - pl.col("__in").fill_null(0)).alias("outside_ns")
    )
    first = pieces.filter(pl.col("__first")).select("__i", pl.col("step").alias("__step0"))
    per_span = per_span.join(first, on="__i", how="left")
    key = ["rank", "step", "source", "name", "level"]
    timed = (
        pieces.join(sp.select("__i", "rank", "source", "name", "level"), on="__i", how="inner")
        .group_by(key)
        .agg(pl.col("duration_ns").sum(), *[pl.col(f"{b}_ns").sum() for b in parts])
    )
    counted = (
        per_span.rename({"__step0": "step"})
        .group_by(key)
        .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("gpu_work").sum(), pl.col("gpu_work_ns").sum(), pl.col("outside_ns").sum())
    )
    out = timed.join(counted, on=key, how="full", coalesce=True) if timed.height else counted
    zeros = ["count", "gpu_work", "gpu_work_ns", "duration_ns", *[f"{b}_ns" for b in parts], "outside_ns"]
    out = out.with_columns(*[pl.col(c).fill_null(0).cast(pl.Int64) if c in out.columns else pl.lit(0, pl.Int64).alias(c) for c in zeros])
    return out.select(
        pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64), pl.col("source").cast(pl.String), "name",
        pl.col("level").cast(pl.Int32), *COLUMNS[5:],
    ).sort("rank", "step", "source", "level", "name", nulls_last=True)


def empty_table() -> pl.DataFrame:
    """An annotation table with no rows (its schema)."""
    schema = {"rank": pl.Int32, "step": pl.Int64, "source": pl.String, "name": pl.String, "level": pl.Int32,
              **{c: pl.Int64 for c in COLUMNS[5:]}}
    return pl.DataFrame(schema=schema)


def rank_table(events: pl.DataFrame, gpu: pl.DataFrame, windows: pl.DataFrame, steps: pl.DataFrame, source: str) -> pl.DataFrame:
    """:func:`annotation_table` of the ranks in ``events`` (the engine's per-rank table)."""
    return annotation_table(events, gpu, windows, source=source)


# ---------------------------------------------------------------------------------------------
# the Python verb


def check_regex(pattern: str | None, what: str = "`name`") -> None:
    """Raise :class:`~traceanalyzer.errors.ConfigError` unless ``pattern`` is a regex polars can
    use (no look-around, no back-references)."""
    if pattern is None:
        return
    from traceanalyzer.errors import ConfigError

    try:
        pl.Series([""]).str.contains(pattern)
    except Exception as exc:  # polars raises ComputeError on a bad pattern
        why = [ln[len("error: "):] for ln in str(exc).splitlines() if ln.startswith("error: ")]
        raise ConfigError(f"{what} {pattern!r} is not a valid regex ({why[0] if why else 'parse error'})") from None


def select(table: pl.DataFrame, *, name: str | None = None, level: int | None = None, source: str = "auto",
           by: str = "step") -> pl.DataFrame:
    """Filter and group an annotation table (see :func:`annotations` for the parameters)."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
    if by not in ("step", "rank", "name"):
        raise ValueError(f"by must be 'step', 'rank' or 'name', got {by!r}")
    t = table
    if source == "auto":  # per rank: Kineto's GPU-side ranges where the rank has them
        gpu_ranks = t.filter(pl.col("source") == "gpu").select("rank").unique()
        t = pl.concat([
            t.join(gpu_ranks, on="rank", how="semi").filter(pl.col("source") == "gpu"),
            t.join(gpu_ranks, on="rank", how="anti").filter(pl.col("source") == "host"),
        ])
    else:
        t = t.filter(pl.col("source") == source)
    if name is not None:
        t = t.filter(pl.col("name").str.contains(name))
    if level is not None:
        t = t.filter(pl.col("level") == level)
    sums = [c for c in t.columns if c.endswith("_ns") or c in ("count", "gpu_work", "model_flops")]
    if by == "rank":
        t = t.group_by("rank", "source", "name", "level").agg(pl.col("step").drop_nulls().n_unique().alias("steps"), *[pl.col(c).sum() for c in sums])
    elif by == "name":
        t = t.group_by("source", "name", "level").agg(pl.col("rank").n_unique().alias("ranks"), *[pl.col(c).sum() for c in sums])
    return t.sort("duration_ns", "name", descending=[True, False])


def with_mfu(table: pl.DataFrame, steps: pl.DataFrame, model_flops_per_gpu: float, peak_tflops: float) -> pl.DataFrame:
    """``model_flops`` and ``mfu`` for every row of an annotation table (rows per step).

    A step's model FLOPs (per GPU) are spread over its compute time: a row gets
    ``model_flops_per_gpu × compute_ns / (the step's compute_ns)``, and
    ``mfu = model_flops / (duration_ns × 1e-9) / (peak_tflops × 1e12)``. For a range that covers
    whole steps this is the step's MFU; for part of a step it is the MFU the range would have
    if every ns of compute in the step did the same FLOPs (kernel efficiency is not told apart
    within a step), so it measures how much of the range's GPU time goes to compute. Recompute
    gets no model FLOPs (model FLOPs exclude recompute). Rows outside every step: null."""
    step_compute = steps.select("rank", "step", pl.col("compute_ns").alias("__sc"))
    out = table.join(step_compute, on=["rank", "step"], how="left").with_columns(
        pl.when(pl.col("__sc") > 0).then(pl.lit(model_flops_per_gpu) * pl.col("compute_ns") / pl.col("__sc"))
        .otherwise(0.0).alias("model_flops")
    ).drop("__sc")
    return add_mfu(out, peak_tflops)


def add_mfu(table: pl.DataFrame, peak_tflops: float) -> pl.DataFrame:
    """``mfu`` from ``model_flops`` and ``duration_ns`` (null where the duration is 0)."""
    return table.with_columns(
        pl.when(pl.col("duration_ns") > 0)
        .then(pl.col("model_flops") / (pl.col("duration_ns") * 1e-9) / (peak_tflops * 1e12))
        .alias("mfu")
    )


# ``traceanalyzer.annotations`` (the Python verb over :func:`rank_table`, :func:`select`,
# :func:`with_mfu`) is in :mod:`traceanalyzer.api`: classifiers take frames, never a path.
