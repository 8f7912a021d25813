"""What of an Nsight Systems export is usable: absurd timestamps and truncated text exports.

The nsys counterpart of :mod:`traceanalyzer.parsers.clean` (which judges Kineto files), working on
the canonical events :mod:`traceanalyzer.parsers.nsys` builds. Each function returns the events it
keeps and warnings that count what it dropped, or raises an error naming the file
(``docs/errors.md``):

* :func:`drop_absurd` — events ending before they start, at or before time 0 of the session clock,
  GPU work starting long before its launch; then the Kineto path's duplicate and far-away rules.
* :func:`trim_cut` — a legacy JSON export (written in time order) cut mid-line, cut back to the part
  whose GPU work is complete.

Everything is polars expressions over whole columns; no Python loop over events.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from traceanalyzer.errors import InvalidTrace
from traceanalyzer.parsers import clean
from traceanalyzer.schema import GPU_WORK_KINDS

I64 = pl.Int64

#: more unusable rows than this fraction (of a file's lines, or of its GPU activity) rejects the
#: file: the same threshold as for Kineto files
MAX_BAD_FRACTION = clean.MAX_BAD_FRACTION
#: GPU work recorded as starting more than this before the API call that launched it is absurd
#: (CUPTI GPU timestamps are on the host clock; no real export shows a start before its launch)
LAUNCH_SLACK_NS = 1_000_000_000

_STEP_RE = r"^ProfilerStep#\d+$"
_LAUNCH_RE = r"(?i)launch"
_NO_GPU_RECORD_RE = r"(?i)hostfunc"


@dataclass
class TextCut:
    """Where a line-oriented text export (JSON Lines, legacy JSON) was cut off."""

    size: int  # bytes in the file
    kept: int  # bytes of the complete lines before the cut
    line: int  # 1-based number of the incomplete last line
    t_ns: int | None = None  # legacy JSON: start of the last complete event (the file is in time order)

    @property
    def fraction(self) -> float:
        return self.kept / self.size if self.size else 0.0


def drop_absurd(ev: pl.DataFrame, path: Path) -> tuple[pl.DataFrame, list[str]]:
    """Drop events with impossible timestamps, one warning per reason with its count.

    * ending before they start;
    * starting at or before 0: the session clock starts before the profiled program, so a real
      event never sits at its origin (0 is what a tool writes for an unset time);
    * GPU work starting more than :data:`LAUNCH_SLACK_NS` before the CUDA API call that launched it.

    Then the checks the Kineto path makes (:func:`traceanalyzer.parsers.clean.clean_events`): exact
    duplicates, and events far from the rest of the trace in time. More than
    :data:`MAX_BAD_FRACTION` of the GPU activity dropped rejects the file (exit 4)."""
    is_gpu = pl.col("kind").is_in(GPU_WORK_KINDS)
    n_gpu = ev.filter(is_gpu).height
    reasons = [
        ("ending before they start", pl.col("end_ns") < pl.col("start_ns")),
        ("starting at or before time 0 of the session clock (an unset timestamp)", pl.col("start_ns") <= 0),
    ]
    flagged = ev.with_columns(
        pl.when(r).then(pl.lit(i)).otherwise(None).alias(f"_r{i}") for i, (_, r) in enumerate(reasons)
    ).with_columns(_why=pl.coalesce(*[f"_r{i}" for i in range(len(reasons))])).drop(
        [f"_r{i}" for i in range(len(reasons))])
    launches = (flagged.filter((pl.col("kind") == "runtime") & pl.col("_why").is_null()
                               & pl.col("correlation").is_not_null())
                .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("_launch")))
    flagged = flagged.join(launches, on=["rank", "correlation"], how="left", maintain_order="left").with_columns(
        _why=pl.when(pl.col("_why").is_null() & is_gpu
                     & (pl.col("start_ns") < pl.col("_launch") - LAUNCH_SLACK_NS)).then(pl.lit(len(reasons)))
        .otherwise(pl.col("_why"))
    ).drop("_launch")
    reasons.append((f"GPU work starting more than {LAUNCH_SLACK_NS / 1e9:g} s before the CUDA API call that "
                    "launched it", None))
    counts = dict(flagged.filter(pl.col("_why").is_not_null()).group_by("_why").agg(
        pl.len(), is_gpu.sum().alias("gpu")).select("_why", pl.struct("len", "gpu")).iter_rows())
    warnings, found = [], []
    for i, (what, _) in enumerate(reasons):
        if i in counts:
            n, g = counts[i]["len"], counts[i]["gpu"]
            warnings.append(f"{path}: dropped {n} events with absurd timestamps: {what} ({g} of them GPU activity)")
            found.append(f"{g} {what}")
    bad_gpu = sum(c["gpu"] for c in counts.values())
    if bad_gpu and bad_gpu > MAX_BAD_FRACTION * n_gpu:
        raise InvalidTrace(f"{bad_gpu} of {n_gpu} GPU activity rows have impossible timestamps (more than "
                           f"{MAX_BAD_FRACTION:.0%}: {'; '.join(found)}): timestamps are corrupt", path)
    ev = flagged.filter(pl.col("_why").is_null()).drop("_why")
    if ev.height == 0:
        raise InvalidTrace("no events with usable timestamps", path)
    ev, more = clean.clean_events(ev, path, launch_check=False)  # the launch check above is per process
    return ev, warnings + more


def trim_cut(ev: pl.DataFrame, cut: TextCut, path: Path) -> tuple[pl.DataFrame, str]:
    """Cut the events of a truncated legacy JSON export (written in time order) back to what is complete.

    The file holds every event that starts before ``cut.t_ns`` (the last complete line). GPU work
    launched before that but starting later is missing, so the earliest launch without its GPU
    record (on any rank) also marks where the GPU timeline stops being complete. Everything from
    the earlier of the two on, on every rank, is dropped (from the start of the ``ProfilerStep``
    holding it, on ranks with step markers): host events starting there or later and GPU work
    launched there or later."""
    is_gpu = pl.col("kind").is_in([*GPU_WORK_KINDS, "gpu_sync"])
    launches = ev.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null()
                         & pl.col("name").str.contains(_LAUNCH_RE) & ~pl.col("name").str.contains(_NO_GPU_RECORD_RE))
    recorded = ev.filter(is_gpu & pl.col("correlation").is_not_null()).select("rank", "correlation").unique()
    t_end = cut.t_ns if cut.t_ns is not None else int(ev.get_column("end_ns").max()) + 1
    ranks = ev.select("rank").unique()
    first_missing = (launches.join(recorded, on=["rank", "correlation"], how="anti")
                     .group_by("rank").agg(pl.col("start_ns").min().alias("_miss")))
    # one time for all ranks (they share the session clock): the earliest incomplete point of any
    miss = first_missing.get_column("_miss").min()
    t_at = min(t_end, int(miss)) if miss is not None else t_end
    at = ranks.with_columns(_at=pl.lit(t_at, I64))
    steps = ev.filter((pl.col("kind") == "annotation") & pl.col("name").str.contains(_STEP_RE)).select(
        "rank", "start_ns", "end_ns")
    holding = (steps.join(at.select("rank", "_at"), on="rank")
               .filter((pl.col("start_ns") <= pl.col("_at")) & (pl.col("end_ns") > pl.col("_at")))
               .group_by("rank").agg(pl.col("start_ns").min().alias("_step")))
    at = at.join(holding, on="rank", how="left").with_columns(_cut=pl.coalesce("_step", "_at"))
    n_steps = (steps.join(at.select("rank", "_cut"), on="rank").filter(pl.col("start_ns") >= pl.col("_cut"))
               .select("rank", "start_ns").unique().height)
    launch_of = (ev.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
                 .group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("_launch")))
    keep = pl.when(is_gpu).then(pl.col("_launch").fill_null(pl.col("start_ns")) < pl.col("_cut")).otherwise(
        pl.col("start_ns") < pl.col("_cut"))
    out = (ev.join(launch_of, on=["rank", "correlation"], how="left", maintain_order="left")
           .join(at.select("rank", "_cut"), on="rank", how="left", maintain_order="left")
           .filter(keep).drop("_launch", "_cut"))
    until = t_at
    what = f"{n_steps} incomplete steps and the tail" if n_steps else "the incomplete tail"
    when = f"{until // 10**9}.{until % 10**9:09d} s of the session clock"
    if holding.height:
        when = f"the start of the ProfilerStep running at {when}"
    warning = (f"{path}: truncated nsys JSON export: its last line (line {cut.line}, from byte {cut.kept:,} of "
               f"{cut.size:,}) is cut off: dropped {what} ({ev.height - out.height} events, everything from {when} "
               "on) so that nothing is undercounted")
    return out, warning
