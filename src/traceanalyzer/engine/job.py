"""The reduce step: every rank's :class:`~traceanalyzer.engine.rank.RankResult` -> one
:class:`~traceanalyzer.classify.Analysis`.

Only what needs all ranks at once happens here, on compact tables:

* the job: rank assignment (``distributedInfo``, else the file name, else the position; a rank
  twice is an error), the borrowed base time of a truncated file (see :func:`base_shifts`),
  the same-job and clock-skew checks (:func:`check_job`);
* clock alignment (:func:`check_ranks_aligned`);
* wait vs transfer of every collective kernel (instances matched across the ranks of a group,
  :func:`traceanalyzer.classify.comm.match_instances`), the per-type/group/dimension summary;
* the cross-rank view (slowest rank, skew, straggler bucket, the rank the others waited on);
* the cross-rank replay of the measured job (:mod:`traceanalyzer.classify.replay`), from each
  rank's points (a few per collective kernel and step), when its ranks wait on each other in at
  least one matched collective;
* the job's warnings, in the order a single process gives them.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from traceanalyzer.classify import IDLE_FIELDS, comm, crossrank, invariants
from traceanalyzer.classify.pipeline import EXTRAS
from traceanalyzer.classify.steps import outside_warnings
from traceanalyzer.engine.rank import Options, RankResult
from traceanalyzer.errors import InvalidTrace, NoGpuActivity
from traceanalyzer.parsers import kineto
from traceanalyzer.parsers.clean import RANGE_PROFILER_NOTE, judge_job
from traceanalyzer.schema import Trace, empty_events

def assign_ranks(results: list[RankResult]) -> list[str]:
    """Rank from distributedInfo, else from the file name, else the file's position; relabels
    the results' frames. Returns the warnings (files with no rank). Raises for a rank twice."""
    warnings = []
    ranks: list[int | None] = []
    for r in results:
        rank = r.meta["rank"]
        if rank is None:
            rank = kineto.rank_from_name(Path(r.file))
            if rank is None and len(results) > 1:
                warnings.append(f"{r.file}: no rank in distributedInfo or file name")
        ranks.append(rank)
    if any(x is None for x in ranks):
        taken = {x for x in ranks if x is not None}
        nxt = 0
        for i, x in enumerate(ranks):
            if x is None:
                while nxt in taken:
                    nxt += 1
                ranks[i] = nxt
                taken.add(nxt)
    seen: dict[int, str] = {}
    for r, x in zip(results, ranks):
        if x in seen:
            raise InvalidTrace(
                f"rank {x} appears twice (also in {seen[x]}): a directory must hold the rank traces of one job", r.file
            )
        seen[x] = r.file
    for r, x in zip(results, ranks):
        r.relabel(x)
        r.meta["rank"] = x
    return warnings


def base_shifts(results: list[RankResult]) -> dict[int, int]:
    """A truncated rank file loses its trailing ``baseTimeNanoseconds``: the files (by index)
    that must borrow the job's base, and that base (the worker re-runs them shifted)."""
    bases = {r.meta["base_time_ns"] for r in results if r.meta.get("base_time_ns")}
    if len(bases) != 1:
        return {}
    (base,) = bases
    return {
        r.index: base
        for r in results
        if not r.meta.get("base_time_ns") and r.first_ns is not None and r.first_ns < base // 2
    }


def check_job(results: list[RankResult], meta: pl.DataFrame) -> list[str]:
    """Reject ranks from different jobs (naming both files); warn about skewed rank clocks:
    :func:`traceanalyzer.parsers.clean.judge_job` on each rank's step starts and median event
    time instead of all events."""
    if meta.height < 2:
        return []
    step_frames = [r.step_starts for r in results if r.step_starts is not None and r.step_starts.height]
    schema = {"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64}
    starts = pl.concat(step_frames, how="vertical_relaxed") if step_frames else pl.DataFrame(schema=schema)
    return judge_job(meta, starts, _mids(results))


def _mids(results: list[RankResult]) -> pl.DataFrame:
    rows = [(r.rank, r.mid_ns) for r in results if r.mid_ns is not None]
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "mid": pl.Float64}, orient="row")


def check_ranks_aligned(results: list[RankResult], source: str) -> None:
    """The ranks share one time base (:func:`~traceanalyzer.classify.invariants.check_ranks_aligned`
    on each rank's median event time)."""
    mids = _mids(results)
    invariants.check_ranks_aligned(mids.rename({"mid": "start_ns"}), source)


def job_trace(results: list[RankResult], sources: list[Path]) -> Trace:
    """The job-level part of loading, from the rank results (in file order, borrowed base times
    already applied by the workers): the first file's parse error, rank assignment, job checks.
    The trace's events are empty unless the workers kept them."""
    for r in results:
        if r.error is not None:
            raise r.error
    warnings = [w for r in results for w in r.warnings]
    warnings += assign_ranks(results)
    for r in results:
        if r.shift_borrowed:
            r.meta["base_time_ns"] = r.shift_borrowed
            warnings.append(f"{r.meta['file']}: no baseTimeNanoseconds (truncated?): used the job's base time")
    kineto.single_process([r.meta for r in results])
    meta = kineto.meta_frame([r.meta for r in results])
    warnings += check_job(results, meta)
    kept = [r.events for r in results if r.events is not None]
    events = pl.concat(kept, how="vertical") if kept else empty_events()
    return Trace(events=events, meta=meta, warnings=warnings, sources=list(sources))


def _concat(frames: list[pl.DataFrame | None]) -> pl.DataFrame | None:
    frames = [f for f in frames if f is not None]
    if not frames:
        return None
    return pl.concat(frames, how="vertical_relaxed") if len(frames) > 1 else frames[0]


def _exact_us(steps: pl.DataFrame) -> pl.DataFrame:
    """Every ``*_us`` column again as the correctly rounded ``*_ns / 1000``.

    polars divides a column by a constant chunk by chunk, by the reciprocal in its vector
    kernel and exactly in the tail, so the last digit of ``ns / 1000`` would depend on how the
    frame was cut into chunks, which differs between a worker's frames and one process's
    (11955460 / 1000 gave 11955.460000000001). Python's division is exact; the steps table has
    one row per rank and step, not per event."""
    us = [c for c in steps.columns if c.endswith("_us") and f"{c[:-3]}_ns" in steps.columns]
    return steps.with_columns(
        *[pl.Series(c, [None if v is None else v / 1000 for v in steps.get_column(f"{c[:-3]}_ns").to_list()], dtype=pl.Float64)
          for c in us]
    )


def _profiler_options(results: list[RankResult], meta: pl.DataFrame) -> dict[str, list[str]]:
    """Per file of the job (as ``meta``'s ``file`` column names it): the profiler options its
    header lists, as the rank workers read them (a file no worker read: its header, here)."""
    from traceanalyzer.parsers.kineto_header import profiler_options

    if "file" not in meta.columns:
        return {}
    known = {str(r.file): r.profiler_options for r in results if r.profiler_options is not None}
    return {f: known[f] if f in known else profiler_options(f) for f in meta.get_column("file").drop_nulls().unique(maintain_order=True).to_list()}


def reduce_job(results: list[RankResult], trace: Trace, opts: Options, source: str):
    """The :class:`~traceanalyzer.classify.Analysis` of a job from its ranks' results (file
    order) and its :class:`~traceanalyzer.schema.Trace` (meta, warnings, sources)."""
    from traceanalyzer.classify import Analysis

    if not any(r.has_gpu for r in results):
        truncated = trace.meta.filter(pl.col("truncated"))
        if truncated.height:
            raise NoGpuActivity(
                "no GPU activity in what was recovered of a truncated trace "
                "(Kineto writes GPU events last, so they were cut off)",
                source,
            )
        notes = [w.split(": ", 1)[-1] for w in trace.warnings if RANGE_PROFILER_NOTE in w]
        if notes:
            raise NoGpuActivity(f"no GPU activity to break down: {notes[0]}", source)
        raise NoGpuActivity(
            "no GPU activity (no kernel, memcpy or memset events): a CPU-only profile has nothing to break down",
            source,
        )
    check_ranks_aligned(results, source)
    deferred = sorted((r for r in results if r.deferred is not None), key=lambda r: r.rank)
    if deferred:
        raise deferred[0].deferred
    gpu_ranks = [r for r in results if r.has_gpu]
    steps = _exact_us(_concat([r.steps for r in gpu_ranks]).sort("rank", "start_ns"))
    windows = _concat([r.windows for r in gpu_ranks]).sort("rank", "wstart_ns")
    warnings: list[str] = []
    # ranks without step markers (a rank whose markers hold no GPU work says so itself)
    stepless = sorted(r.rank for r in gpu_ranks if r.stepless and not any("ranges holds GPU work" in w for w in r.window_warnings))
    if stepless and opts.step_name is not None:
        ranks = ", ".join(str(x) for x in stepless)
        warnings.append(f"rank {ranks}: no '{opts.step_name}' step markers: the whole GPU span is analysed as one step (step 0)")
    warnings += [w for r in sorted(gpu_ranks, key=lambda r: r.rank) for w in r.window_warnings]
    coll = comm.match_instances(_concat([r.instances for r in gpu_ranks]), opts.bus_bw_gbps)
    expo = _concat([r.exposure for r in gpu_ranks]).sort("rank", "step", "by", "key")
    outside = _concat([r.outside_steps for r in gpu_ranks]).sort("rank")
    warnings += [*outside_warnings(outside), *comm.comm_warnings(coll, trace.meta)]
    if trace.meta["truncated"].any():
        warnings.append(
            "the trace was truncated: host runtime records (launch and synchronisation calls) after the cut "
            "are lost, so the idle split by cause may be incomplete; the partition of the kept steps is exact"
        )
    if coll.height and coll["transfer_estimated"].any():
        warnings.append(
            f"{comm.TRANSFER_WARNING} {coll['transfer_estimated'].sum()} of {coll.height} kernels is an estimate "
            f"(bytes over an assumed {opts.bus_bw_gbps:g} GB/s bus bandwidth; load all ranks of a group to measure it)"
        )
    by_name = _concat([r.recomputed_by_name for r in gpu_ranks]).sort(
        ["rank", "gpu_ns", "count", "name"], descending=[False, True, True, False]
    )
    gpu = _concat([r.gpu for r in gpu_ranks])
    points = _concat([r.points for r in gpu_ranks])
    replayed = None
    if points is not None and points.height and coll.height and coll.get_column("last_arrival_ns").is_not_null().any():
        # ranks that wait on each other: the replay of the measured job. It reads only the points
        # and the kernels' narrow columns (one row per collective kernel and per step boundary):
        # the coordinator's memory does not grow with the events. (NumPy, loaded here only.)
        from traceanalyzer.classify import replay

        replayed = replay.replay_table(steps, points, replay.replay_graph(points, replay.job_kernels(coll)))
    return Analysis(
        trace=trace,
        steps=steps,
        gpu=gpu if gpu is not None else pl.DataFrame(),
        windows=windows,
        warnings=[*trace.warnings, *warnings],
        recompute_ops=_concat([r.recompute_ops for r in gpu_ranks]),
        recomputed_by_name=by_name,
        collectives=coll,
        comm=comm.summary(coll, expo),
        cross_rank=crossrank.cross_rank(steps, IDLE_FIELDS, coll),
        replay_points=points,
        replay=replayed,
        kernel_rows=_concat([r.kernel_rows for r in gpu_ranks]),
        exposed_kernels=_concat([r.exposed_kernels for r in gpu_ranks]),
        kernel_stats=_concat([r.kernel_stats for r in gpu_ranks]),
        op_stats=_concat([r.op_stats for r in gpu_ranks]),
        outside_steps=outside,
        extras={name: _concat([r.extras.get(name) for r in gpu_ranks]) for name in sorted(opts.tables) if name in EXTRAS},
        profiler_options=_profiler_options(results, trace.meta),
        options=opts,
    )
