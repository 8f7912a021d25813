"""Training steps: CPU windows from step annotations, GPU windows from the work they launched.

A step's CPU window is its ``ProfilerStep#N`` range (or a user-chosen range name). GPU work
belongs to the step whose CPU window contains its launch call (joined by correlation id, or by
External id when no launch call was recorded). GPU work with neither record is placed by time:
when the device timeline carries the GPU-side copies of the step ranges (``ProfilerStep#N``
as ``gpu_user_annotation``), it belongs to the last step marked at or before the work began
(before the first mark: only to a host step earlier than the first marked one); otherwise to
the last step whose CPU window began at or before the work began (the GPU runs behind the host,
never ahead of it); work that began before the first step began is in no step,
and so is work whose correlation id is below every recorded launch of its rank (ids grow with
launch order: it was launched before the profile began and is still running, e.g. warm-up).
Step N's GPU window starts at the first GPU activity it holds and ends where step N+1's starts;
the last step ends at the last end of its own work. Consecutive windows therefore tile the GPU
timeline exactly, with no gap and no double counting. With no step markers on a rank, its whole
GPU span is one step, numbered 0.

GPU work outside every window (warm-up before the first step, work launched after the last one)
is in no step: :func:`outside_steps` measures its busy time so that nothing is lost silently.
"""

from __future__ import annotations

import re

import polars as pl

from traceanalyzer.classify.idle import launch_times
from traceanalyzer.classify.intervals import segments
from traceanalyzer.queries import query_engine
from traceanalyzer.errors import InvalidTrace
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
        .with_columns(_number_unnumbered())
    )


def _number_unnumbered() -> pl.Expr:
    """Step numbers of the ranges written without one: in time order, from 0 when no range of
    the rank has a number (a custom ``--step-range``), else after the rank's highest number (a
    ``ProfilerStep`` among ``ProfilerStep#N``: its own step, never a number another range has;
    :func:`unnumbered_warnings` says so)."""
    k = pl.col("step").is_null().cum_sum().over("rank") - 1
    after = (pl.col("step").max().over("rank") + 1).fill_null(0)
    return pl.col("step").fill_null(after + k)


def unnumbered_warnings(cpu: pl.DataFrame, events: pl.LazyFrame, name: str) -> list[str]:
    """One warning per rank whose step ranges are partly written without a number."""
    pat = step_pattern(name)
    counts = (
        events.filter(pl.col("kind").is_in(["annotation", "cpu_op"]) & pl.col("name").str.contains(pat))
        .select("rank", "start_ns", pl.col("name").str.extract(pat, 1).is_null().alias("bare"))
        .unique(["rank", "start_ns"])
        .group_by("rank")
        .agg(pl.col("bare").sum().alias("bare"), pl.len().alias("n"))
        .filter((pl.col("bare") > 0) & (pl.col("bare") < pl.col("n")))
        .sort("rank")
        .collect(engine=query_engine())
    )
    out = []
    for r, bare, _n in counts.iter_rows():  # one row per rank
        nums = cpu.filter((pl.col("rank") == r)).sort("cpu_start_ns")
        given = events.filter(
            (pl.col("rank") == r) & pl.col("kind").is_in(["annotation", "cpu_op"]) & (pl.col("name") == name)
        ).select("start_ns").unique().collect(engine=query_engine()).get_column("start_ns")
        assigned = nums.filter(pl.col("cpu_start_ns").is_in(given.implode())).get_column("step").to_list()
        out.append(
            f"rank {r}: {bare} '{name}' range{'s' if bare != 1 else ''} without a step number among numbered ones: "
            f"analysed as {'their own steps' if bare != 1 else 'its own step'}, numbered "
            f"{', '.join(map(str, assigned))} (after the highest number)"
        )
    return out


def gpu_step_marks(events: pl.LazyFrame, name: str = DEFAULT_STEP) -> pl.LazyFrame:
    """``rank, step, mark_ns``: starts of the GPU-side copies of the step ranges (Kineto's
    ``gpu_user_annotation`` ``ProfilerStep#N`` on the device timeline), numbered like
    :func:`cpu_steps`."""
    pat = step_pattern(name)
    return (
        events.filter((pl.col("kind") == "gpu_annotation") & pl.col("name").str.contains(pat))
        .select("rank", pl.col("name").str.extract(pat, 1).cast(pl.Int64, strict=False).alias("step"), pl.col("start_ns").alias("mark_ns"))
        .unique(["rank", "mark_ns"])
        .sort("rank", "mark_ns")
        .with_columns(_number_unnumbered())
    )


def gpu_step_of(events: pl.LazyFrame, cpu: pl.LazyFrame, marks: pl.LazyFrame | None = None,
                launched: pl.DataFrame | None = None) -> pl.LazyFrame:
    """GPU work with the step whose CPU window holds its launch (``step`` null if none), and
    GPU work without a launch record placed by time (column ``by_time`` true): by the GPU-side
    step marks (``marks``, :func:`gpu_step_marks`) when the rank has them and the work began at
    or after the first, else by the host step windows. ``launched``: the GPU work with its
    ``launch_ns`` (:func:`.idle.launch_times`) when already computed."""
    if launched is None:
        gpu = events.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("rank", "start_ns", "end_ns", "correlation", "external_id")
        launched = launch_times(events, gpu)
    g = launched.lazy().select("rank", "start_ns", "end_ns", "correlation", "external_id", "launch_ns")
    cpu_sorted = cpu.sort("cpu_start_ns")
    with_launch = (
        g.filter(pl.col("launch_ns").is_not_null())
        .sort("launch_ns")
        .join_asof(cpu_sorted, left_on="launch_ns", right_on="cpu_start_ns", by="rank", strategy="backward", check_sortedness=False)
        .with_columns(pl.when(pl.col("launch_ns") < pl.col("cpu_end_ns")).then(pl.col("step")).alias("step"), pl.lit(False).alias("by_time"))
    )
    # correlation ids grow with launch order: GPU work whose id is below every recorded launch
    # of its rank was launched before the profile began (warm-up still running): no step
    runtime = events.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
    first_corr = runtime.group_by("rank").agg(pl.col("correlation").min().alias("__first_corr"))
    if marks is None:
        marks = pl.LazyFrame(schema={"rank": pl.Int32, "step": pl.Int64, "mark_ns": pl.Int64})
    by_time = (
        g.filter(pl.col("launch_ns").is_null())
        .join(first_corr, on="rank", how="left")
        .sort("start_ns")
        .join_asof(cpu_sorted, left_on="start_ns", right_on="cpu_start_ns", by="rank", strategy="backward", check_sortedness=False)
        .join_asof(marks.sort("mark_ns").rename({"step": "__mark_step"}), left_on="start_ns", right_on="mark_ns", by="rank", strategy="backward", check_sortedness=False)
        .join(marks.group_by("rank").agg(pl.col("step").sort_by("mark_ns").first().alias("__first_mark")), on="rank", how="left")
        # before the first mark: only a host step earlier than the first marked step can hold it
        .with_columns(
            pl.when(pl.col("__mark_step").is_not_null()).then(pl.col("__mark_step"))
            .when(pl.col("__first_mark").is_null() | (pl.col("step") < pl.col("__first_mark"))).then(pl.col("step"))
            .alias("step")
        )
        .with_columns(
            pl.when(pl.col("correlation").is_not_null() & (pl.col("correlation") < pl.col("__first_corr")))
            .then(pl.lit(None, pl.Int64))
            .otherwise(pl.col("step"))
            .alias("step"),
            pl.lit(True).alias("by_time"),
        )
    )
    cols = ["rank", "step", "start_ns", "end_ns", "by_time"]
    return pl.concat([with_launch.select(cols), by_time.select(cols)])


def gpu_windows(events: pl.DataFrame, name: str | None = DEFAULT_STEP, launched: pl.DataFrame | None = None) -> tuple[pl.DataFrame, list[str]]:
    """Per rank and step: ``rank, step, wstart_ns, wend_ns, cpu_start_ns, cpu_end_ns``.

    ``name=None`` ignores step markers: each rank's whole GPU span is one step (step 0).
    ``launched``: the GPU work with its launch time (:func:`.idle.launch_times`) when already
    computed.
    """
    warnings: list[str] = []
    ev = events.lazy()
    cpu = cpu_steps(ev, name or DEFAULT_STEP)
    if name is None:
        cpu = cpu.filter(pl.lit(False))
    cpu = cpu.collect(engine=query_engine()).lazy()  # a few rows, used three times: match names once
    if name is not None:
        warnings.extend(unnumbered_warnings(cpu.collect(engine=query_engine()), ev, name))
    marks = gpu_step_marks(ev, name or DEFAULT_STEP).join(cpu.select("rank", "step"), on=["rank", "step"], how="semi")
    placed = gpu_step_of(ev, cpu, marks, launched).filter(pl.col("step").is_not_null()).collect(engine=query_engine())
    assigned = placed.lazy().group_by("rank", "step").agg(pl.col("start_ns").min().alias("first_ns"), pl.col("end_ns").max().alias("last_ns"))
    # a step is its host range [start, end), every one of them (the last included); ranges that
    # overlap (a custom --step-range nested in itself) are cut where the next one starts
    win = (
        cpu.join(assigned.select("rank", "step"), on=["rank", "step"], how="inner")
        .sort("rank", "cpu_start_ns")
        .with_columns(pl.col("cpu_start_ns").shift(-1).over("rank").alias("next_ns"))
        .with_columns(
            pl.col("cpu_start_ns").alias("wstart_ns"),
            pl.min_horizontal("cpu_end_ns", pl.coalesce("next_ns", "cpu_end_ns")).alias("wend_ns"),
        )
        .select("rank", "step", "wstart_ns", "wend_ns", "cpu_start_ns", "cpu_end_ns")
        .collect(engine=query_engine())
    )
    cut = win.filter(pl.col("wend_ns") < pl.col("cpu_end_ns")).group_by("rank").len().sort("rank")
    for r, n in cut.iter_rows():  # one row per rank
        warnings.append(f"rank {r}: {n} '{name}' ranges overlap the next one; each was cut where the next begins")
    cpu_counts = cpu.group_by("rank").len().collect(engine=query_engine())
    kept = win.group_by("rank").len()
    by_time = placed.filter(pl.col("by_time")).group_by("rank").len().sort("rank")
    for r, n in by_time.iter_rows():  # one row per rank
        warnings.append(
            f"rank {r}: {n} GPU events have no launch record; each was placed in the last step that began "
            f"before it ran"
        )
    gpu_ranks = ev.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select(pl.col("rank").unique()).collect(engine=query_engine()).get_column("rank")
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
            .collect(engine=query_engine())
        )
        win = pl.concat([win, whole.select(win.columns).cast(win.schema)])
        if name is not None:
            marked = dict(cpu_counts.iter_rows())
            bare = sorted(r for r in stepless.to_list() if r not in marked)
            if bare and name != DEFAULT_STEP:  # a range named by the user that is not there: a mistake
                raise no_such_range(events, name, bare)
            if bare:
                warnings.append(
                    f"rank {', '.join(map(str, bare))}: no '{name}' step markers: the whole GPU span is analysed as one step (step 0)"
                )
            for r in sorted(r for r in stepless.to_list() if r in marked):
                warnings.append(
                    f"rank {r}: none of its {marked[r]} '{name}' ranges holds GPU work: "
                    "the whole GPU span is analysed as one step (step 0)"
                )
    dropped = cpu_counts.join(kept, on="rank", how="inner", suffix="_kept").filter(pl.col("len_kept") < pl.col("len"))
    for r, n, k in dropped.sort("rank").iter_rows():  # one row per rank: a handful at most
        warnings.append(f"rank {r}: {n - k} of {n} '{name}' steps launched no GPU work and are skipped")
    return win.sort("rank", "wstart_ns"), warnings


def range_names(events: pl.DataFrame) -> list[str]:
    """The host range names of a trace (``record_function`` / NVTX ranges, ``ProfilerStep``), a
    trailing ``#N`` dropped, the most frequent first."""
    return (
        events.lazy()
        .filter(pl.col("kind") == "annotation")
        .select(pl.col("name").str.replace(r"#\d+$", ""))
        .group_by("name")
        .len()
        .sort(["len", "name"], descending=[True, False])
        .collect(engine=query_engine())
        .get_column("name")
        .to_list()
    )


def no_such_range(events: pl.DataFrame, name: str, ranks: list[int]) -> InvalidTrace:
    """The error for a ``--step-range`` that matches no range of some ranks (exit 4): the names
    the trace has, the closest first ("did you mean")."""
    import difflib

    from traceanalyzer.errors import few

    names = range_names(events.filter(pl.col("rank").is_in(ranks)))
    close = difflib.get_close_matches(name, names, n=2, cutoff=0.5)
    close += [n for n in names if name.lower() in n.lower() and n not in close][:2 - len(close)]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    who, its = (f"rank {ranks[0]}", "its") if len(ranks) == 1 else (f"ranks {few(ranks, 30)}", "their")
    budget = max(40, 200 - len(name) - len(hint) - len(who))
    present = f"{its} ranges: {few(names, budget)}" if names else f"{its} trace has no named ranges"
    return InvalidTrace(f"`step_range` {name!r} matches no range of {who} ({present}{hint}); or give `step_range=None`")


def outside_steps(gpu: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Per rank, GPU busy time in no step window: ``rank, outside_ns, before_ns, after_ns``.

    Busy = the union of the rank's GPU work intervals (kernels, memcpy, memset, other GPU work),
    clipped to the time before the rank's first window (``before_ns``: warm-up) and after its
    last (``after_ns``: tail), plus any gap between windows (none: windows tile); ``outside_ns``
    is their sum. Every rank with GPU work has a row (zeros when nothing is outside)."""
    g = gpu.lazy().filter(pl.col("kind").is_in(GPU_WORK_KINDS) & (pl.col("end_ns") > pl.col("start_ns")))
    w = windows.lazy()
    span = g.group_by("rank").agg(pl.col("start_ns").min().alias("lo"), pl.col("end_ns").max().alias("hi"))
    edges = w.group_by("rank").agg(pl.col("wstart_ns").min().alias("first"), pl.col("wend_ns").max().alias("last"))
    # gaps between consecutive windows (tiling makes them empty; measured anyway)
    gaps = (
        w.sort("rank", "wstart_ns")
        .with_columns(pl.col("wstart_ns").shift(-1).over("rank").alias("next"))
        .filter(pl.col("next") > pl.col("wend_ns"))
        .select("rank", pl.lit("gap").alias("part"), pl.col("wend_ns").alias("t0"), pl.col("next").alias("t1"))
    )
    out_iv = pl.concat(
        [
            span.join(edges, on="rank", how="left").select(
                "rank", pl.lit("before").alias("part"), pl.col("lo").alias("t0"), pl.coalesce("first", "hi").alias("t1")
            ),
            span.join(edges, on="rank", how="inner").select("rank", pl.lit("after").alias("part"), pl.col("last").alias("t0"), pl.col("hi").alias("t1")),
            gaps,
        ]
    ).filter(pl.col("t1") > pl.col("t0")).with_row_index("__w").with_columns(pl.col("__w").cast(pl.Int64))
    # only the work that reaches outside the windows can be busy there: the rest adds no segment
    # boundary inside an outside interval (tiling windows usually leave a few rows)
    gapped = gaps.select("rank").unique().with_columns(pl.lit(True).alias("__gapped"))
    near = (
        g.join(edges, on="rank", how="left")
        .join(gapped, on="rank", how="left")
        .filter(
            pl.col("first").is_null() | (pl.col("start_ns") < pl.col("first")) | (pl.col("end_ns") > pl.col("last"))
            | pl.col("__gapped").fill_null(False)
        )
    )
    seg = segments(
        near.select("rank", "start_ns", "end_ns", pl.lit("busy").alias("cls")),
        out_iv.select("rank", pl.col("__w").alias("step"), pl.col("t0").alias("wstart_ns"), pl.col("t1").alias("wend_ns")),
        ["busy"],
    )
    busy = (
        seg.filter(pl.col("n_busy") > 0)
        .join(out_iv.select(pl.col("__w").alias("step"), "part"), on="step", how="left")
        .group_by("rank")
        .agg(*[(pl.col("t1") - pl.col("t0")).filter(pl.col("part") == p).sum().alias(f"{p}_ns") for p in ("before", "after", "gap")])
    )
    return (
        span.select("rank")
        .join(busy, on="rank", how="left")
        .with_columns(pl.col(c).fill_null(0).cast(pl.Int64) for c in ("before_ns", "after_ns", "gap_ns"))
        .select("rank", (pl.col("before_ns") + pl.col("after_ns") + pl.col("gap_ns")).alias("outside_ns"), "before_ns", pl.col("after_ns") + pl.col("gap_ns"))
        .sort("rank")
        .collect(engine=query_engine())
    )


def outside_warnings(outside: pl.DataFrame) -> list[str]:
    """One warning per rank whose GPU busy time is partly in no step."""
    out = []
    for r, total, before, after in outside.filter(pl.col("outside_ns") > 0).iter_rows():  # one row per rank
        out.append(
            f"rank {r}: {total / 1e6:.3f} ms of GPU busy time lies in no step window "
            f"({before / 1e6:.3f} ms before the first step, {after / 1e6:.3f} ms after the last); "
            "it is counted in no step (JSON: outside_steps_ns)"
        )
    return out


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
