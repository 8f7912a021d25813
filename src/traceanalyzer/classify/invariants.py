"""Invariants checked inside the pipeline: a violation is a bug, never a result.

The loader validates the *input* (bad input: exit 4 or a warning, see ``parsers/clean.py``);
these checks validate what the pipeline *made* of it. Each raises
:class:`~traceanalyzer.errors.InvariantViolation` (exit 6) naming the input, so a wrong number is
never printed:

* :func:`check_ranks_aligned` — the ranks of one trace share one time base (every rank's median
  event time within :data:`SAME_JOB_NS` of the others'); the loader rejects inputs that are not,
  so a violation means the loader mis-aligned them;
* :func:`check_event_span` — every rank's events form one cluster in time (no gap between
  consecutive starts, and no event end, beyond :data:`MAX_GAP_NS`): the cleaner's postcondition;
* :func:`check_windows` — per rank, step windows have non-negative length, do not overlap, and
  lie within the rank's event span;
* the partition's own invariants (buckets >= 0, summing exactly to the step duration, overlapped
  comm <= compute + recompute) are in :func:`traceanalyzer.classify.partition.check_partition`.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.errors import InvariantViolation
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import MAX_GAP_NS, SAME_JOB_NS

_REPORT = "internal consistency check failed ({}): please report this input"


def check_ranks_aligned(events: pl.DataFrame, source: str) -> None:
    mids = events.group_by("rank").agg(pl.col("start_ns").median().alias("mid")).sort("rank")
    if mids.height < 2:
        return
    lo, hi = mids.row(int(mids["mid"].arg_min()), named=True), mids.row(int(mids["mid"].arg_max()), named=True)
    if hi["mid"] - lo["mid"] > SAME_JOB_NS:
        raise InvariantViolation(
            _REPORT.format(
                f"ranks not on one time base: rank {hi['rank']} is {(hi['mid'] - lo['mid']) / 3.6e12:,.1f} h "
                f"after rank {lo['rank']}"
            ),
            source,
        )


def check_event_span(events: pl.DataFrame, source: str) -> None:
    bad = (
        events.lazy()
        .group_by("rank")
        .agg(
            pl.col("start_ns").sort().diff().max().fill_null(0).alias("gap"),
            (pl.col("end_ns").max() - pl.col("start_ns").max()).alias("tail"),
            (pl.col("end_ns") < pl.col("start_ns")).sum().alias("negative"),
        )
        .filter((pl.col("gap") > MAX_GAP_NS) | (pl.col("tail") > MAX_GAP_NS) | (pl.col("negative") > 0))
        .sort("rank")
        .collect(engine=query_engine())
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise InvariantViolation(
            _REPORT.format(
                f"events outside the trace span on rank {r['rank']}: gap {r['gap'] / 1e9:,.1f} s, "
                f"tail {r['tail'] / 1e9:,.1f} s, {r['negative']} events ending before they start"
            ),
            source,
        )


def check_windows(windows: pl.DataFrame, events: pl.DataFrame, source: str) -> None:
    # the columns read first: a group-by over the events frame would copy all of it
    span = events.select("rank", "start_ns", "end_ns").group_by("rank").agg(pl.col("start_ns").min().alias("lo"), pl.col("end_ns").max().alias("hi"))
    bad = (
        windows.sort("rank", "wstart_ns")
        .with_columns(pl.col("wend_ns").shift(1).over("rank").alias("prev_end"), pl.col("step").shift(1).over("rank").alias("prev_step"))
        .join(span, on="rank", how="left")
        .with_columns(
            pl.when(pl.col("wend_ns") < pl.col("wstart_ns"))
            .then(pl.lit("ends before it starts"))
            .when(pl.col("prev_end").is_not_null() & (pl.col("prev_end") > pl.col("wstart_ns")))
            .then(pl.format("overlaps step {}", pl.col("prev_step")))
            .when(pl.col("lo").is_null() | (pl.col("wstart_ns") < pl.col("lo")) | (pl.col("wend_ns") > pl.col("hi")))
            .then(pl.lit("lies outside the rank's events"))
            .alias("problem")
        )
        .filter(pl.col("problem").is_not_null())
    )
    if bad.height:
        r = bad.row(0, named=True)
        raise InvariantViolation(
            _REPORT.format(
                f"step window of rank {r['rank']} step {r['step']} [{r['wstart_ns']}, {r['wend_ns']}] ns {r['problem']}"
            ),
            source,
        )
