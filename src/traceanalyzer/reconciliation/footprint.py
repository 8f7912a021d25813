"""Predicted memory per GPU beside the memory a trace measured.

Public surface: :func:`memory` (the Python verb: a trace and/or a run configuration -> polars
frames), :class:`MemoryResult`, :func:`measured_memory` (loaded trace -> timeline, peaks,
copies), :func:`predicted_frames` (:class:`~traceanalyzer.model.memory.MemoryEstimate` ->
components and verdict frames).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from traceanalyzer.classify.allocations import (
    COPY_SCHEMA, PEAKS_SCHEMA, REBUILT, TIMELINE_SCHEMA, allocation_timeline, copy_bandwidth, memory_peaks,
)
from traceanalyzer.classify.steps import DEFAULT_STEP
from traceanalyzer.errors import ConfigError, NoGpuActivity
from traceanalyzer.model.config import RunConfig
from traceanalyzer.model.memory import COMPONENT_NOTES, COMPONENTS, DEFAULT_RESERVE_GIB, GIB, MemoryEstimate, estimate_memory

#: prediction vs the allocator's measured peak: beyond this, ``memory`` says so in one line
MEMORY_TOLERANCE = 0.05
COMPONENT_FRAME = {"component": pl.String, "bytes": pl.Float64, "gib": pl.Float64, "share": pl.Float64, "what": pl.String}
FIT_FRAME = {"stage": pl.Int64, "stages": pl.Int64, "total_bytes": pl.Float64, "capacity_bytes": pl.Int64,
             "reserve_bytes": pl.Float64, "headroom_bytes": pl.Float64, "fits": pl.Boolean,
             "measured_peak_allocated": pl.Int64, "measured_peak_reserved": pl.Int64}


@dataclass(frozen=True)
class MemoryResult:
    """What :func:`memory` returns. Frames are empty (with their schema) when their input was not given."""

    #: ``component, bytes, gib, share, what``: predicted bytes per GPU on the most loaded pipeline stage
    predicted: pl.DataFrame
    #: one row: ``stage, stages, total_bytes, capacity_bytes, reserve_bytes, headroom_bytes, fits``,
    #: and the largest measured peak allocated / reserved over the trace's ranks (null without a trace)
    fit: pl.DataFrame
    #: per rank and device: peak allocated / reserved bytes, when (ns, trace time base), in which step
    measured: pl.DataFrame
    #: allocated / reserved bytes after every allocator event, per rank and device
    timeline: pl.DataFrame
    #: memcpy / memset per rank and kind: count, bytes, busy ns, GB/s
    copies: pl.DataFrame
    #: the model's estimate itself (None without a configuration)
    estimate: MemoryEstimate | None = None
    warnings: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        total = self.fit.item(0, "total_bytes") if self.fit.height else None
        pred = f"predicted {total / GIB:.1f} GiB" if total is not None and total == total else "no prediction"
        return (f"MemoryResult({pred}, measured: {self.measured.height} rank/device peaks, "
                f"timeline: {self.timeline.height} events, copies: {self.copies.height} kinds)")


def predicted_frames(est: MemoryEstimate, reserve_bytes: float) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(components frame, one-row verdict frame without the measured columns filled)."""
    total = est.total_bytes
    comp = pl.DataFrame(
        [{"component": k, "bytes": float(est.components[k]), "gib": est.components[k] / GIB,
          "share": est.components[k] / total if total else 0.0, "what": COMPONENT_NOTES[k]} for k in COMPONENTS],
        schema=COMPONENT_FRAME,
    )
    head = est.headroom_bytes(None, reserve_bytes) if est.capacity_bytes is not None else None
    fit = pl.DataFrame([{
        "stage": est.stage, "stages": len(est.stages), "total_bytes": total, "capacity_bytes": est.capacity_bytes,
        "reserve_bytes": float(reserve_bytes), "headroom_bytes": head, "fits": None if head is None else head >= 0,
        "measured_peak_allocated": None, "measured_peak_reserved": None,
    }], schema=FIT_FRAME)
    return comp, fit


def _nsys_ranks(trace, mem: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Give nsys memory rows (``pid``, ``device_id``) the trace's rank: the one rank of their
    process (its CUDA API events' pid), else the rank of that process whose device is theirs.
    Returns the rows that found a rank, and how many did not."""
    ev = trace.events
    procs = (ev.filter(pl.col("kind") == "runtime").select("rank", pl.col("pid").cast(pl.Int64, strict=False))
             .drop_nulls().unique())
    devs = (ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
            .select("rank", pl.col("pid").cast(pl.Int32, strict=False).alias("device_id")).drop_nulls().unique())
    cand = mem.with_row_index("_row").join(procs, on="pid", how="inner")
    n_ranks = pl.len().over("_row")
    one = cand.filter(n_ranks == 1)
    many = cand.filter(n_ranks > 1).join(devs, on=["rank", "device_id"], how="semi")
    got = pl.concat([one, many.filter(pl.len().over("_row") == 1)]).sort("_row").drop("_row")
    return got, mem.height - got.height


def measured_memory(trace, step_range: str = DEFAULT_STEP, gpu_only: bool = True,
                    memory_events: pl.DataFrame | None = None,
                    driver_memory: dict[str, pl.DataFrame] | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[str]]:
    """(timeline, peaks, copies, warnings) of a loaded :class:`~traceanalyzer.schema.Trace` and
    the memory events the API read beside it.

    ``memory_events``: the Kineto rank files' allocator ``[memory]`` events
    (:func:`~traceanalyzer.parsers.kineto_memory.read_memory_events`, with the ``rank`` the
    trace's parser gave each file, on its time base); None: none. ``driver_memory``: per Nsight
    Systems SQLite export of the trace (its ``file`` in ``trace.meta``), the driver's device
    allocations (:func:`~traceanalyzer.parsers.nsys_memory.read_nsys_memory`) on the session
    clock, each given here the rank of its process and device; an export missing: none."""
    from traceanalyzer.classify.allocations import driver_timeline

    warnings: list[str] = []
    timelines = [allocation_timeline(memory_events, gpu_only=gpu_only)] if memory_events is not None else []
    sqlite_files = trace.meta.filter(pl.col("format") == "nsys-sqlite").get_column("file").unique().to_list()
    for f in sqlite_files:  # one per export
        nv = (driver_memory or {}).get(f)
        if nv is not None and nv.height:
            ranked, lost = _nsys_ranks(trace, nv)
            if lost:
                warnings.append(f"{f}: {lost} CUDA memory events belong to no analysed process and device: left out")
            timelines.append(driver_timeline(ranked))
    timeline = pl.concat(timelines, how="vertical") if timelines else pl.DataFrame(schema=TIMELINE_SCHEMA)
    peaks = memory_peaks(timeline, trace.events, step_range)
    copies = copy_bandwidth(trace.events)
    if timeline.height == 0:
        warnings.append("the trace has no GPU memory events: record with torch.profiler.profile(profile_memory=True)"
                        + (" or nsys profile --cuda-memory-usage=true" if sqlite_files else ""))
    elif (peaks.get_column("source") == REBUILT).any():
        warnings.append("the trace's memory events carry no allocator totals (PyTorch ≤ 1.9): allocated is the running "
                        "sum of the recorded allocations, a lower bound; reserved is unknown")
    return timeline, peaks, copies, warnings


def memory(
    trace: object | None = None,
    config: RunConfig | None = None,
    *,
    reserve_gb: float = DEFAULT_RESERVE_GIB,
    step_range: str | None = DEFAULT_STEP,
    gpu_only: bool = True,
    memory_events: pl.DataFrame | None = None,
    driver_memory: dict[str, pl.DataFrame] | None = None,
    estimate: MemoryEstimate | None = None,
) -> MemoryResult:
    """Memory per GPU: the analytic prediction for a run configuration, and what a trace
    measured. :func:`traceanalyzer.api.memory` is the public verb and documents the arguments,
    the result (:class:`MemoryResult`) and an example; it loads what this reads: ``trace`` a
    loaded :class:`~traceanalyzer.schema.Trace`, ``config`` a
    :class:`~traceanalyzer.model.config.RunConfig`, ``memory_events`` and ``driver_memory`` as
    in :func:`measured_memory`, ``estimate`` the model's estimate of ``config`` when the caller
    made it already (:func:`~traceanalyzer.model.memory.estimate_memory`). A bad ``reserve_gb``
    or nothing to do is a
    :class:`~traceanalyzer.errors.ConfigError`.
    """
    if not isinstance(reserve_gb, (int, float)) or isinstance(reserve_gb, bool) or not math.isfinite(reserve_gb) \
            or reserve_gb < 0:
        raise ConfigError(f"`reserve_gib` = {reserve_gb} must be a finite number of GiB, zero or more")
    if trace is None and config is None:
        raise ConfigError("nothing to do: give a trace, a run configuration (--config) or both")
    reserve = reserve_gb * GIB
    warnings: list[str] = []
    est = None
    comp = pl.DataFrame(schema=COMPONENT_FRAME)
    fit = pl.DataFrame(schema=FIT_FRAME)
    if config is not None:
        cfg = config
        warnings += list(cfg.warnings)
        est = estimate if estimate is not None else estimate_memory(cfg)
        warnings += [f"memory model: {n}" for n in est.notes if not n.startswith("flash attention")]
        comp, fit = predicted_frames(est, reserve)
        if est.capacity_bytes is None:
            warnings.append("the device memory is unknown: give [hardware] gpu or memory_gb for the verdict")
    timeline = pl.DataFrame(schema=TIMELINE_SCHEMA)
    peaks = pl.DataFrame(schema=PEAKS_SCHEMA)
    copies = pl.DataFrame(schema=COPY_SCHEMA)
    if trace is not None:
        loaded = trace
        warnings += list(loaded.warnings)
        timeline, peaks, copies, more = measured_memory(loaded, step_range, gpu_only, memory_events, driver_memory)
        if est is None and timeline.height == 0 and copies.height == 0:
            files = loaded.meta.get_column("file").to_list()
            raise NoGpuActivity("no GPU memory events and no memcpy/memset: nothing to measure (record with "
                                "torch.profiler.profile(profile_memory=True), or give a run configuration)",
                                files[0] if len(files) == 1 else None)
        warnings += more
        if fit.height == 0:
            fit = pl.DataFrame([{k: None for k in FIT_FRAME}], schema=FIT_FRAME)
        if peaks.height:
            fit = fit.with_columns(
                pl.lit(peaks.get_column("peak_allocated").max(), dtype=pl.Int64).alias("measured_peak_allocated"),
                pl.lit(peaks.get_column("peak_reserved").max(), dtype=pl.Int64).alias("measured_peak_reserved"),
            )
            measured_peak = peaks.get_column("peak_allocated").max()
            if est is not None and measured_peak:
                rel = est.total_bytes / measured_peak - 1
                if abs(rel) > MEMORY_TOLERANCE:
                    warnings.append(f"predicted peak {est.total_bytes / GIB:.2f} GiB vs measured peak allocated "
                                    f"{measured_peak / GIB:.2f} GiB ({100 * rel:+.1f} %: beyond ±{MEMORY_TOLERANCE:.0%})")
    return MemoryResult(predicted=comp, fit=fit, measured=peaks, timeline=timeline, copies=copies, estimate=est,
                        warnings=list(dict.fromkeys(warnings)))
