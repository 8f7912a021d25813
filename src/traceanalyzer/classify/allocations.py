"""Device memory over time from the allocator's record, and memcpy/memset bandwidth.

Public surface: :func:`allocation_timeline` (memory events -> allocated / reserved after every
allocation and free, per rank and device), :func:`memory_peaks` (peak allocated and reserved per
rank and device, when, and in which step), :func:`copy_bandwidth` (memcpy / memset volume, busy
time and achieved GB/s per rank and kind).

Input frame of the first two (one row per allocator event, a ``rank`` column added to
:data:`traceanalyzer.parsers.kineto_memory.MEMORY_SCHEMA`): Kineto ``[memory]`` events recorded
with ``profile_memory=True``. Events are put in time order (stable: file order among equal
times); a PyTorch allocator writes ``Total Allocated`` / ``Total Reserved`` after each event, and
in time order ``allocated[i] = allocated[i−1] + bytes[i]`` holds exactly. Traces from before
those counters existed (PyTorch ≤ 1.9) carry only ``Bytes``: allocated is then rebuilt as the
running sum of ``Bytes``, raised so that it never goes below zero — a *lower bound*, because
what was allocated before the profiler started is not in the trace (``source`` says which).
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.classify.steps import DEFAULT_STEP, cpu_steps
from traceanalyzer.queries import query_engine

RECORDED = "allocator counters"
REBUILT = "running sum of Bytes (lower bound)"
DRIVER = "CUDA driver allocations (nsys)"

TIMELINE_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32, "device": pl.String, "ts_ns": pl.Int64, "bytes": pl.Int64,
    "allocated": pl.Int64, "reserved": pl.Int64, "source": pl.String,
}


def _device() -> pl.Expr:
    dt = pl.col("device_type")
    return (
        pl.when(dt == 1).then(pl.lit("cuda:") + pl.col("device_id").cast(pl.String))
        .when(dt == 0).then(pl.lit("cpu"))
        .otherwise(pl.lit("type ") + dt.cast(pl.String) + pl.lit(":") + pl.col("device_id").cast(pl.String))
    )


def allocation_timeline(mem: pl.DataFrame, gpu_only: bool = True) -> pl.DataFrame:
    """Allocated and reserved bytes after every allocator event (:data:`TIMELINE_SCHEMA`).

    ``mem``: memory events with a ``rank`` column. ``gpu_only``: keep CUDA/HIP devices only
    (device type 1), not the host allocator. Sorted by rank, device, time.
    """
    if gpu_only:
        mem = mem.filter(pl.col("device_type") == 1)
    if mem.height == 0:
        return pl.DataFrame(schema=TIMELINE_SCHEMA)
    key = ["rank", "device"]
    df = mem.with_columns(_device().alias("device")).sort([*key, "ts_ns"], maintain_order=True)
    recorded = pl.col("total_allocated").is_not_null().all().over(key)
    df = df.with_columns(pl.col("bytes").fill_null(0).cum_sum().over(key).alias("_run"))  # no window in a window
    rebuilt = pl.col("_run") - pl.min_horizontal(pl.col("_run").min().over(key), pl.lit(0))
    return df.select(
        pl.col("rank").cast(pl.Int32),
        "device",
        "ts_ns",
        "bytes",
        pl.when(recorded).then(pl.col("total_allocated")).otherwise(rebuilt).alias("allocated"),
        pl.col("total_reserved").alias("reserved"),
        pl.when(recorded).then(pl.lit(RECORDED)).otherwise(pl.lit(REBUILT)).alias("source"),
    )


def driver_timeline(mem: pl.DataFrame) -> pl.DataFrame:
    """Device memory obtained from the CUDA driver after every allocation and free (Nsight
    Systems ``CUDA_GPU_MEMORY_USAGE_EVENTS``; columns ``rank, device_id, ts_ns, bytes``, bytes
    negative for a free), as :data:`TIMELINE_SCHEMA`: the running sum goes to ``reserved`` (what
    a caching allocator holds from the driver, plus the libraries' own buffers), raised so that
    it never goes below zero; ``allocated`` (the tensors themselves) is unknown."""
    if mem.height == 0:
        return pl.DataFrame(schema=TIMELINE_SCHEMA)
    key = ["rank", "device"]
    df = mem.with_columns((pl.lit("cuda:") + pl.col("device_id").cast(pl.String)).alias("device")).sort(
        [*key, "ts_ns"], maintain_order=True)
    df = df.with_columns(pl.col("bytes").cum_sum().over(key).alias("_run"))
    return df.select(
        pl.col("rank").cast(pl.Int32), "device", "ts_ns", "bytes", pl.lit(None, dtype=pl.Int64).alias("allocated"),
        (pl.col("_run") - pl.min_horizontal(pl.col("_run").min().over(key), pl.lit(0))).alias("reserved"),
        pl.lit(DRIVER).alias("source"),
    )


PEAKS_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32, "device": pl.String, "events": pl.UInt32, "first_ns": pl.Int64, "last_ns": pl.Int64,
    "peak_allocated": pl.Int64, "peak_allocated_ns": pl.Int64, "peak_step": pl.Int64,
    "peak_reserved": pl.Int64, "peak_reserved_ns": pl.Int64, "source": pl.String,
}


def memory_peaks(timeline: pl.DataFrame, events: pl.DataFrame | None = None, step_range: str = DEFAULT_STEP) -> pl.DataFrame:
    """Per rank and device: the peak allocated and reserved bytes and when (the first time the
    peak was reached), and the training step whose host range (``ProfilerStep#N``) holds the
    peak allocation — the peak reserved when allocated is unknown (null outside every step, or
    without ``events``). :data:`PEAKS_SCHEMA`."""
    if timeline.height == 0:
        return pl.DataFrame(schema=PEAKS_SCHEMA)
    key = ["rank", "device"]
    first_at = lambda col: pl.col("ts_ns").filter(pl.col(col) == pl.col(col).max()).min()  # noqa: E731
    peaks = (
        timeline.group_by(key, maintain_order=True)
        .agg(
            pl.len().alias("events"),
            pl.col("ts_ns").min().alias("first_ns"),
            pl.col("ts_ns").max().alias("last_ns"),
            pl.col("allocated").max().alias("peak_allocated"),
            first_at("allocated").alias("peak_allocated_ns"),
            pl.col("reserved").max().alias("peak_reserved"),
            first_at("reserved").alias("peak_reserved_ns"),
            pl.col("source").first(),
        )
        .sort(key)
    )
    step = pl.lit(None, dtype=pl.Int64).alias("peak_step")
    if events is not None and events.height:
        steps = cpu_steps(events.lazy(), step_range).collect(engine=query_engine()).with_columns(pl.col("rank").cast(pl.Int32))
        if steps.height:
            hit = (
                peaks.select("rank", "device", pl.coalesce("peak_allocated_ns", "peak_reserved_ns").alias("_at"))
                .drop_nulls("_at").sort("_at")
                .join_asof(steps.sort("cpu_start_ns"), left_on="_at", right_on="cpu_start_ns", by="rank",
                           check_sortedness=False, strategy="backward")
                .select("rank", "device", pl.when(pl.col("_at") < pl.col("cpu_end_ns")).then(pl.col("step")).alias("peak_step"))
            )
            peaks = peaks.join(hit, on=key, how="left")
            return peaks.select(list(PEAKS_SCHEMA)).cast(PEAKS_SCHEMA)
    return peaks.with_columns(step).select(list(PEAKS_SCHEMA)).cast(PEAKS_SCHEMA)


COPY_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32, "kind": pl.String, "name": pl.String, "count": pl.UInt32, "bytes": pl.Int64,
    "busy_ns": pl.Int64, "gb_per_s": pl.Float64,
}


def copy_bandwidth(events: pl.DataFrame) -> pl.DataFrame:
    """memcpy and memset per rank, kind and name (``Memcpy HtoD (Pinned -> Device)``...): count,
    bytes, summed duration and the achieved bandwidth ``bytes / duration`` in GB/s (10^9 B/s;
    null when no bytes were recorded). :data:`COPY_SCHEMA`, largest volume first."""
    ops = events.filter(pl.col("kind").is_in(["memcpy", "memset"]))
    if ops.height == 0:
        return pl.DataFrame(schema=COPY_SCHEMA)
    out = (
        ops.group_by("rank", pl.col("kind").cast(pl.String), "name")
        .agg(pl.len().alias("count"), pl.col("bytes").sum().alias("bytes"),
             (pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns"))
        .with_columns(
            pl.when((pl.col("busy_ns") > 0) & (pl.col("bytes") > 0))
            .then(pl.col("bytes") / pl.col("busy_ns")).alias("gb_per_s")  # bytes/ns = GB/s
        )
        .sort(["rank", "bytes", "name"], descending=[False, True, False])
    )
    return out.select(list(COPY_SCHEMA)).cast(COPY_SCHEMA)
