"""Training steps: CPU windows from step annotations, GPU windows from the work they launched.

A step's CPU window is its ``ProfilerStep#N`` range (or a user-chosen range name). GPU work
belongs to the step whose CPU window contains its launch call (joined by correlation id, or by
External id when no launch call was recorded). Step N's GPU window starts at the first GPU
activity it launched and ends where step N+1's starts; the last step ends at the last end of
its own work. Consecutive windows therefore tile the GPU timeline exactly, with no gap and no
double counting. With no step markers on a rank, its whole GPU span is one step, numbered 0.
"""

from __future__ import annotations

import re

import polars as pl

from traceanalyzer.schema import GPU_WORK_KINDS

DEFAULT_STEP = "ProfilerStep"


def step_pattern(name: str = DEFAULT_STEP) -> str:
    """Regex for a step range called ``name``, optionally followed by ``#N``."""
    return rf"^{re.escape(name)}(?:#(\d+))?$"


def cpu_steps(events: pl.LazyFrame, name: str = DEFAULT_STEP) -> pl.LazyFrame:
    """``rank, step, cpu_start_ns, cpu_end_ns`` for every step range on the host."""
    pat = step_pattern(name)
    return (
        events.filter(pl.col("kind").is_in(["annotation", "cpu_op"]) & pl.col("name").str.contains(pat))
        .select(
            "rank",
            pl.col("name").str.extract(pat, 1).cast(pl.Int64, strict=False).alias("step"),
            pl.col("start_ns").alias("cpu_start_ns"),
            pl.col("end_ns").alias("cpu_end_ns"),
        )
        .unique(["rank", "cpu_start_ns"])
        .sort("rank", "cpu_start_ns")
        # ranges without a number (a custom --step-range) are numbered in time order
        .with_columns(pl.col("step").fill_null(pl.int_range(pl.len()).over("rank")))
    )


def gpu_step_of(events: pl.LazyFrame, cpu: pl.LazyFrame) -> pl.LazyFrame:
    """GPU work with the step whose CPU window holds its launch (``step`` null if none)."""
    gpu = events.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("rank", "start_ns", "end_ns", "correlation", "external_id")
    launches = (
        events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .group_by("rank", "correlation")
        .agg(pl.col("start_ns").min().alias("launch_ns"))
    )
    ops = (
        events.filter(pl.col("kind").is_in(["cpu_op", "annotation"]) & pl.col("external_id").is_not_null())
        .group_by("rank", "external_id")
        .agg(pl.col("start_ns").min().alias("op_ns"))
    )
    g = (
        gpu.join(launches, on=["rank", "correlation"], how="left")
        .join(ops, on=["rank", "external_id"], how="left")
        .with_columns(pl.coalesce("launch_ns", "op_ns").alias("launch_ns"))
        .drop("op_ns")
    )
    with_launch = g.filter(pl.col("launch_ns").is_not_null()).sort("launch_ns")
    return (
        with_launch.join_asof(cpu.sort("cpu_start_ns"), left_on="launch_ns", right_on="cpu_start_ns", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("launch_ns") < pl.col("cpu_end_ns")).then(pl.col("step")).alias("step"))
        .select("rank", "step", "start_ns", "end_ns")
    )


def gpu_windows(events: pl.DataFrame, name: str | None = DEFAULT_STEP) -> tuple[pl.DataFrame, list[str]]:
    """Per rank and step: ``rank, step, wstart_ns, wend_ns, cpu_start_ns, cpu_end_ns``.

    ``name=None`` ignores step markers: each rank's whole GPU span is one step (step 0).
    """
    warnings: list[str] = []
    ev = events.lazy()
    cpu = cpu_steps(ev, name or DEFAULT_STEP)
    if name is None:
        cpu = cpu.filter(pl.lit(False))
    cpu = cpu.collect().lazy()  # a few rows, used three times: match names once
    assigned = (
        gpu_step_of(ev, cpu)
        .filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(pl.col("start_ns").min().alias("first_ns"), pl.col("end_ns").max().alias("last_ns"))
    )
    win = (
        cpu.join(assigned, on=["rank", "step"], how="inner")
        .sort("rank", "first_ns")
        .with_columns(pl.col("first_ns").shift(-1).over("rank").alias("next_ns"))
        .with_columns(
            pl.col("first_ns").alias("wstart_ns"),
            pl.coalesce("next_ns", "last_ns").alias("wend_ns"),
        )
        .select("rank", "step", "wstart_ns", "wend_ns", "cpu_start_ns", "cpu_end_ns")
        .collect()
    )
    gpu_ranks = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select(pl.col("rank").unique()).collect().get_column("rank")
    stepless = gpu_ranks.filter(~gpu_ranks.is_in(win.get_column("rank").unique().implode()))
    if stepless.len():
        whole = (
            events.lazy()
            .filter(pl.col("kind").is_in(GPU_WORK_KINDS) & pl.col("rank").is_in(stepless.implode()))
            .group_by("rank")
            .agg(
                pl.lit(0, pl.Int64).alias("step"),
                pl.col("start_ns").min().alias("wstart_ns"),
                pl.col("end_ns").max().alias("wend_ns"),
                pl.lit(None, pl.Int64).alias("cpu_start_ns"),
                pl.lit(None, pl.Int64).alias("cpu_end_ns"),
            )
            .collect()
        )
        win = pl.concat([win, whole.select(win.columns).cast(win.schema)])
        ranks = ", ".join(str(r) for r in sorted(stepless.to_list()))
        if name is not None:
            warnings.append(f"rank {ranks}: no '{name}' step markers: the whole GPU span is analysed as one step (step 0)")
    cpu_counts = cpu.group_by("rank").len().collect()
    dropped = cpu_counts.join(win.group_by("rank").len(), on="rank", how="left", suffix="_kept").filter(
        pl.col("len_kept").fill_null(0) < pl.col("len")
    )
    for r, n, k in dropped.iter_rows():  # one row per rank: a handful at most
        warnings.append(f"rank {r}: {n - (k or 0)} of {n} '{name}' steps launched no GPU work and are skipped")
    return win.sort("rank", "wstart_ns"), warnings


def refuse_duplicate_steps(windows: pl.DataFrame, meta: pl.DataFrame, name: str | None) -> None:
    """Two step ranges with the same number on one rank that both launched GPU work: which one
    is step N is ambiguous, so the input is refused (exit 4), naming the rank's file."""
    dup = windows.filter(pl.struct("rank", "step").is_duplicated()).sort("rank", "step")
    if dup.height:
        from traceanalyzer.errors import InvalidTrace

        rank, step = dup.row(0)[:2]
        files = meta.filter(pl.col("rank") == rank).get_column("file") if "file" in meta.columns else None
        where = files[0] if files is not None and files.len() else f"rank {rank}"
        raise InvalidTrace(
            f"step number {step} appears {dup.filter((pl.col('rank') == rank) & (pl.col('step') == step)).height} "
            f"times on rank {rank} ('{name or DEFAULT_STEP}#{step}' ranges that each launched GPU work): "
            "steps must be numbered uniquely",
            where,
        )
