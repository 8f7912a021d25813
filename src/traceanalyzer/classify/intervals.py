"""Interval algebra in polars: boundary sweeps and containment, no Python loop over events.

:func:`segments` cuts a timeline into maximal elementary segments between consecutive event
boundaries and counts, for each segment, how many intervals of each class are active. Every
later aggregation (the partition, overlap, causes) is a group-by over these segments, so they
all agree on the same exact integer-nanosecond cut.

:func:`first_active` labels a segment by the first of its active classes in an order of
precedence.

:func:`contained_in` marks the intervals that lie inside an interval of another set on the same
key (thread): the nesting test behind "this op runs under that op".
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from traceanalyzer.queries import query_engine


def segments(
    intervals: pl.LazyFrame,
    windows: pl.LazyFrame,
    classes: Sequence[str],
    key: str = "rank",
) -> pl.LazyFrame:
    """Elementary segments of each window with the active count of each class.

    ``intervals``: columns ``key, start_ns, end_ns, cls`` (``cls`` one of ``classes``).
    ``windows``: columns ``key, step, wstart_ns, wend_ns``; windows of one key must not overlap.

    Returns ``key, step, t0, t1, n_<class>...`` for every segment ``[t0, t1)`` inside a window
    (segments of zero length are dropped). Idle segments (all counts 0) are included, so the
    segment lengths of a window sum exactly to its duration.
    """
    # the deltas as one byte each and the running counts as int32 while sorted and summed (the
    # boundaries are most of the sweep's memory: 14 bytes a row of deltas instead of 8 per class),
    # int64 again in the result
    deltas = [
        pl.when(pl.col("cls") == c).then(pl.col("d")).otherwise(0).cast(pl.Int8).alias(f"n_{c}")
        for c in classes
    ]
    iv = intervals.filter(pl.col("end_ns") > pl.col("start_ns")).select(key, "start_ns", "end_ns", "cls")
    points = pl.concat(
        [
            iv.select(key, pl.col("start_ns").alias("t"), "cls", pl.lit(1, pl.Int8).alias("d")),
            iv.select(key, pl.col("end_ns").alias("t"), "cls", pl.lit(-1, pl.Int8).alias("d")),
        ]
    ).select(key, "t", *deltas)
    edges = pl.concat(
        [
            windows.select(key, pl.col("wstart_ns").alias("t")),
            windows.select(key, pl.col("wend_ns").alias("t")),
        ]
    ).with_columns(*[pl.lit(0, pl.Int8).alias(f"n_{c}") for c in classes])
    counts = [f"n_{c}" for c in classes]
    # sorted by (key, t) as two single-column sorts (a stable one on ``key`` after one on ``t``),
    # materialised in between: polars would fuse them into one multi-column sort, which costs more
    # CPU than both together. Coincident boundaries stay separate rows; the running sum at the last row of
    # each (key, t) run is the sum through that point, so only those rows are kept.
    both = pl.concat([points, edges]).sort("t").collect(engine=query_engine())
    # one key (a rank analysed alone, as the workers do): already in (key, t) order
    keys = both.get_column(key)
    single = not keys.null_count() and keys.min() == keys.max()
    both = both.lazy() if single else both.lazy().sort(key, maintain_order=True)
    last = pl.col(key).shift(-1).ne_missing(pl.col(key)) | pl.col("t").shift(-1).ne_missing(pl.col("t"))
    seg = (
        both
        # each interval opens and closes on its own key, so every key's deltas sum to zero and
        # the running sum over the sorted keys restarts at zero on each: no window over ``key``
        .with_columns(pl.col(counts).cast(pl.Int32).cum_sum())
        .filter(last)
        .with_columns(pl.when(pl.col(key).shift(-1).eq_missing(pl.col(key))).then(pl.col("t").shift(-1)).alias("t1"))
        .rename({"t": "t0"})
        .filter(pl.col("t1").is_not_null() & (pl.col("t1") > pl.col("t0")))
    )
    win = windows.select(key, "step", "wstart_ns", "wend_ns").sort(key, "wstart_ns")
    return (
        (seg if single else seg.sort("t0"))
        .join_asof(win.sort("wstart_ns"), left_on="t0", right_on="wstart_ns", by=key, strategy="backward", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("t0") < pl.col("wend_ns")))
        .select(key, "step", "t0", "t1", pl.col(counts).cast(pl.Int64))
    )


def first_active(order: Sequence[tuple[str, str]], otherwise: str) -> pl.Expr:
    """A segment's label by precedence: of ``order``'s ``(class, label)`` pairs, the label of the
    first class active on the segment (``n_<class> > 0``, :func:`segments`), else ``otherwise``."""
    (cls, label), *rest = order
    expr = pl.when(pl.col(f"n_{cls}") > 0).then(pl.lit(label))
    for cls, label in rest:
        expr = expr.when(pl.col(f"n_{cls}") > 0).then(pl.lit(label))
    return expr.otherwise(pl.lit(otherwise))


def contained_in(
    members: pl.LazyFrame,
    containers: pl.LazyFrame,
    by: Sequence[str],
    flag: str,
) -> pl.LazyFrame:
    """Add boolean ``flag`` to ``members``: true where some container on the same ``by`` key
    starts at or before the member and ends at or after it.

    Containers on one key must nest properly (as host ops on one thread do): then "some earlier
    container reaches past my end" is exactly containment, computed with a running max of
    container ends over the start-sorted union.
    """
    by = list(by)
    m = members.with_row_index("__row").with_columns(pl.lit(False).alias("__is_c"))
    c = containers.select(*by, "start_ns", "end_ns").with_columns(
        pl.lit(None, pl.UInt32).alias("__row"), pl.lit(True).alias("__is_c")
    )
    both = pl.concat([m.select(*by, "start_ns", "end_ns", "__row", "__is_c"), c], how="vertical_relaxed")
    marked = (
        both.sort([*by, "start_ns", "__is_c", "end_ns"], descending=[False] * len(by) + [False, True, True])
        .with_columns(
            pl.when(pl.col("__is_c")).then(pl.col("end_ns")).otherwise(None).cum_max().over(by).alias("__reach")
        )
        .with_columns(pl.col("__reach").forward_fill().over(by))
        .filter(~pl.col("__is_c"))
        .select("__row", (pl.col("__reach").fill_null(-1) >= pl.col("end_ns")).alias(flag))
    )
    # maintain_order: polars 2 left joins may reorder; members keep their order (and row count)
    return m.join(marked, on="__row", how="left", maintain_order="left").drop("__row", "__is_c").with_columns(pl.col(flag).fill_null(False))
