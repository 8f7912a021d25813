"""A Chrome-trace (Perfetto) file rebuilt from the canonical event frame, with the classification
tracks: ``annotate --merge`` (every rank in one file) and ``annotate`` of Nsight Systems input
(which has no Chrome-trace document to annotate in place).

Layout: one process per rank (``pid`` = rank + 1, named ``rank R: <device>``, sorted by rank).
Inside it, the classification first (thread 1: buckets, thread 2: steps; the events
:func:`traceanalyzer.views.tracks.track_events` writes), then one thread per GPU stream
(``GPU <device> stream <S>``) and one per host thread (``host <pid> thread <tid>``), each event
an ``X`` slice named as in the trace with ``cat`` its canonical kind. Timestamps are microseconds
with 3 decimals relative to ``baseTimeNanoseconds`` (the earliest event of any rank), so every
nanosecond of every rank is kept exactly; ranks are put on one time axis as the trace's own
clocks give it (no clock alignment).

Everything is built with polars expressions: no Python loop over events.
"""

from __future__ import annotations

import gzip

import orjson
import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.views.tracks import CATEGORY, TID_BUCKETS, TID_STEPS, _span, track_events
from traceanalyzer.views.runs import bucket_runs, segments
from traceanalyzer.schema import GPU_WORK_KINDS

#: first thread id of the trace's own tracks (below: the classification's)
TID_FIRST = 16
_GPU_KINDS = [*GPU_WORK_KINDS, "gpu_sync", "gpu_annotation"]


def rank_pid(rank: int) -> int:
    return rank + 1  # Perfetto wants integer pids; 0 is the idle process on Linux traces


def _tracks(events: pl.DataFrame) -> pl.DataFrame:
    """One row per (rank, track): the thread id it gets in its rank's process and its name."""
    is_gpu = pl.col("kind").cast(pl.String).is_in(_GPU_KINDS)
    key = events.select(
        "rank",
        is_gpu.alias("gpu"),
        pl.col("pid").fill_null(""),
        pl.col("tid").fill_null(""),
        pl.when(is_gpu).then(pl.col("stream")).otherwise(None).alias("stream"),
    ).unique()
    key = key.sort("rank", pl.col("gpu").not_(), "pid", "stream", "tid", nulls_last=True)
    return key.with_columns(
        (pl.int_range(pl.len()).over("rank") + TID_FIRST).alias("new_tid"),
        pl.when(pl.col("gpu"))
        .then(pl.format("GPU {} stream {}", pl.col("pid"), pl.col("stream").cast(pl.String).fill_null("?")))
        .otherwise(pl.format("host {} thread {}", pl.col("pid"), pl.col("tid")))
        .alias("track"),
    )


def _trace_events(events: pl.DataFrame, tracks: pl.DataFrame, base_ns: int) -> list[dict]:
    is_gpu = pl.col("kind").cast(pl.String).is_in(_GPU_KINDS)
    ev = events.with_columns(
        is_gpu.alias("gpu"),
        pl.col("pid").fill_null(""),
        pl.col("tid").fill_null(""),
        pl.when(is_gpu).then(pl.col("stream")).otherwise(None).alias("stream"),
    ).join(tracks.select("rank", "gpu", "pid", "tid", "stream", "new_tid"), on=["rank", "gpu", "pid", "tid", "stream"],
           how="left", nulls_equal=True)
    out = ev.sort("rank", "new_tid", "start_ns", pl.col("end_ns"), descending=[False, False, False, True]).select(
        pl.lit("X").alias("ph"),
        pl.col("kind").cast(pl.String).alias("cat"),
        pl.col("name").fill_null(""),
        (pl.col("rank") + 1).cast(pl.Int64).alias("pid"),
        pl.col("new_tid").cast(pl.Int64).alias("tid"),
        *_span(pl.col("start_ns"), pl.max_horizontal("start_ns", "end_ns"), base_ns),
        pl.struct(
            pl.col("correlation"),
            pl.col("external_id"),
            pl.col("bytes"),
        ).alias("args"),
    )
    return out.to_dicts()


def _metadata(analysis: Analysis, tracks: pl.DataFrame, ranks: list[int]) -> list[dict]:
    """Process / thread names and sort order (one small record per rank and track)."""
    meta = analysis.trace.meta
    device = dict(zip(meta["rank"].to_list(), meta["device_name"].to_list())) if "device_name" in meta.columns else {}
    out: list[dict] = []
    for rank in ranks:  # one per rank
        pid = rank_pid(rank)
        name = f"rank {rank}" + (f": {device[rank]}" if device.get(rank) else "")
        out += [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": rank}},
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "traceanalyzer"}},
        ]
    names = tracks.filter(pl.col("rank").is_in(ranks)).select(
        pl.lit("M").alias("ph"), pl.lit("thread_name").alias("name"), (pl.col("rank") + 1).cast(pl.Int64).alias("pid"),
        pl.col("new_tid").cast(pl.Int64).alias("tid"), pl.struct(pl.col("track").alias("name")).alias("args"),
    ).to_dicts()
    order = tracks.filter(pl.col("rank").is_in(ranks)).select(
        pl.lit("M").alias("ph"), pl.lit("thread_sort_index").alias("name"), (pl.col("rank") + 1).cast(pl.Int64).alias("pid"),
        pl.col("new_tid").cast(pl.Int64).alias("tid"), pl.struct(pl.col("new_tid").cast(pl.Int64).alias("sort_index")).alias("args"),
    ).to_dicts()
    return out + names + order


def document(analysis: Analysis, ranks: list[int] | None = None) -> dict:
    """The rebuilt trace of ``ranks`` (default: every rank) as a Chrome-trace document."""
    ranks = sorted(analysis.trace.ranks) if ranks is None else sorted(ranks)
    events = analysis.trace.events.filter(pl.col("rank").is_in(ranks), pl.col("start_ns").is_not_null())
    base_ns = int(events["start_ns"].min() or 0)
    base_ns -= base_ns % 1000  # a whole microsecond: the viewer's clock display starts at a round value
    tracks = _tracks(events)
    runs = bucket_runs(analysis, segments(analysis))
    classification = []
    for rank in ranks:  # one per rank: the tracks of the partition, without their process metadata
        classification += [e for e in track_events(analysis, runs, rank, base_ns, rank_pid(rank))
                           if e["name"] not in ("process_name", "process_sort_index", "process_labels")]
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
        "otherData": {"generator": "traceanalyzer annotate", "ranks": ranks,
                      "sources": [str(s) for s in analysis.trace.sources],
                      "tracks": {"buckets_tid": TID_BUCKETS, "steps_tid": TID_STEPS, "category": CATEGORY}},
        "traceEvents": _metadata(analysis, tracks, ranks) + classification + _trace_events(events, tracks, base_ns),
    }


def dumps(doc: dict, gz: bool) -> bytes:
    data = orjson.dumps(doc)
    return gzip.compress(data, compresslevel=6, mtime=0) if gz else data
