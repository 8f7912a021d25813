"""Validation and cleaning of parsed traces: every bad input gets a clear answer.

The parsers turn bytes into frames; this module decides what is usable. Each function either
returns the cleaned frame with warnings that *count* what was dropped, or raises an error from
:mod:`traceanalyzer.errors` naming the file and the problem (see ``docs/errors.md``):

* :func:`sniff_foreign` — files that are not JSON traces at all (SQLite that the Nsight parser
  did not claim, ``.nsys-rep`` reports, other binaries): exit 4 with what the file is.
* :func:`flag_raw` and :func:`judge` — the raw event rows of one Kineto file: events with no ``ph``, complete
  events with missing / non-numeric / negative / NaN / infinite ``ts`` or ``dur``, timestamps
  beyond what int64 nanoseconds hold, unknown categories. A few are dropped with a warning; when
  more than :data:`MAX_BAD_FRACTION` of the events are bad the file is rejected (exit 4) — a
  breakdown built from what is left would be silently wrong.
* :func:`clean_events` — the canonical events of one file: exact duplicates are removed (a
  duplicated kernel is harmless for the union of busy time but wrong for counts), events far
  outside the trace's own time span (absurd timestamps: year 2100, negative, 1970 in an epoch
  trace, an 11-day kernel; more than :data:`MAX_GAP_NS` from the cluster of the other events)
  and GPU events that start before the runtime call that launched them (a kernel at t=0 a
  minute before the rest) are dropped, each with a warning counting them.
* :func:`check_job` — the ranks of one load: files that come from different jobs (different
  world size or PyTorch version, or recorded hours apart) are rejected naming both files; rank
  clocks skewed by more than :data:`SKEW_WARN_NS` are reported naming the ranks and the skew.

Everything is polars expressions over whole columns; no Python loop over events.
"""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from traceanalyzer.errors import InvalidTrace
from traceanalyzer.parsers.categories import GPU_WORK_CATS, KIND_OF_CAT, KNOWN_OTHER_CATS
from traceanalyzer.queries import query_engine
from traceanalyzer.schema import GPU_WORK_KINDS, MAX_GAP_NS, SAME_JOB_NS

#: more bad events than this fraction of a file's events (or of its GPU work) rejects the file
MAX_BAD_FRACTION = 0.10
#: |ts| + dur beyond this (µs; year 2128) cannot be an epoch timestamp and would overflow ns
MAX_ABS_TS_US = 5e15
#: a GPU event cannot start before the runtime call that launched it: one starting more than
#: this before its launch (same correlation id) has an absurd timestamp (real traces: >= +2 µs)
MAX_EARLY_NS = 1_000_000
#: rank clocks further apart than this (median over the steps they share) are reported
SKEW_WARN_NS = 1_000_000_000
# MAX_GAP_NS (one cluster of events in time) and SAME_JOB_NS (ranks of one job) are in
# traceanalyzer.schema: the classifiers' invariants read them too

#: the loader's note on CUPTI range-profiler traces (analyze() quotes it when there is no GPU work)
RANGE_PROFILER_NOTE = "CUPTI range-profiler trace"

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


# ---------------------------------------------------------------------------------------------
# whole files


def sniff_foreign(path: Path) -> None:
    """Reject files the Kineto parser cannot read, saying what they are (exit 4)."""
    p = Path(path)
    if not p.is_file():
        return
    try:
        with open(p, "rb") as fh:
            head = fh.read(16)
    except OSError:
        return  # read_bytes reports unreadable files with the right code
    name = p.name.lower()
    if name.endswith(".nsys-rep") or name.endswith(".qdrep"):
        raise InvalidTrace(
            "Nsight Systems report (.nsys-rep) is a binary format: export it first with "
            "'nsys export --type sqlite' and analyse the .sqlite",
            p,
        )
    if head.startswith(b"SQLite format 3\x00"):
        raise InvalidTrace(
            "SQLite database that is not an Nsight Systems export (no nsys tables such as "
            "CUPTI_ACTIVITY_KIND_KERNEL / StringIds found)",
            p,
        )
    if name.endswith((".sqlite", ".sqlite3")) and head:
        raise InvalidTrace("not an SQLite database (bad header): not an Nsight Systems export", p)


_NONFINITE = re.compile(rb"(?<=[:\[,])(\s*)(?:-?Infinity|NaN)(?=\s*[,\]}])")


def repair_json(raw: bytes) -> bytes | None:
    """Repair the two harmless ways tools write almost-JSON, or return None if neither applies:
    a UTF-8 byte-order mark (dropped), and ``NaN`` / ``Infinity`` literals (Python's ``json``
    writes them), which become ``null`` and are then dropped and counted like missing values."""
    fixed = raw[3:] if raw.startswith(b"\xef\xbb\xbf") else raw
    if b"NaN" in fixed or b"Infinity" in fixed:
        fixed = _NONFINITE.sub(rb"\1null", fixed)
    return None if fixed is raw or fixed == raw else fixed


# ---------------------------------------------------------------------------------------------
# raw rows of one Kineto file


def _finite(c: str) -> pl.Expr:
    return pl.col(c).is_not_null() & pl.col(c).is_finite()


def flag_raw(raw: pl.DataFrame, n: int | None = None, no_ph: int | None = None) -> tuple[pl.DataFrame, dict]:
    """The usable complete events of a chunk of one file's raw rows (columns ph, cat, ts, dur...)
    and the counts :func:`judge` needs. Usable: ``ph == "X"`` with a finite, in-range ``ts`` and a
    finite, non-negative ``dur``. Chunks of one file are flagged one by one (the parser streams)
    and judged together, so thresholds apply to the whole file. ``n`` / ``no_ph``: the chunk's
    number of events and of events without ``ph`` when ``raw`` holds only some of its rows (the
    parser keeps the rows of complete and begin/end events only); default: counted in ``raw``."""
    usable, counts, _lower = flag_raw_cats(raw, n, no_ph)
    return usable, counts


def flag_raw_cats(raw: pl.DataFrame, n: int | None = None, no_ph: int | None = None) -> tuple[pl.DataFrame, dict, dict]:
    """:func:`flag_raw`, and the lower-case spelling of every ``cat`` of the complete events as
    written (``{cat: cat.lower()}``, polars' lower-casing), for the canonical frame's kinds.

    One query: the flags are summed per category as written (a handful of groups), and the
    counts per lower-case category are added up from those few rows, so no column of the
    chunk is lower-cased or copied. When every row is usable (the common case) the mask of
    usable rows is not built at all."""
    is_x = pl.col("ph") == "X"
    ok_ts = _finite("ts")
    ok_dur = _finite("dur") & (pl.col("dur") >= 0)
    in_range = (pl.col("ts").abs() + pl.col("dur")) <= MAX_ABS_TS_US
    by_cat = (
        raw.lazy()
        .filter(is_x)
        .group_by("cat")
        .agg(
            pl.len().alias("x"),
            (~ok_ts | ~ok_dur).sum().alias("bad"),
            (ok_ts & ok_dur & ~in_range).sum().alias("range"),
            # fractional epoch microseconds: beyond 2**43 µs a float64 no longer holds the nanoseconds
            (ok_ts & (pl.col("ts").abs() >= 2.0**43) & (pl.col("ts") != pl.col("ts").floor())).sum().alias("coarse"),
        )
        .with_columns(pl.col("cat").str.to_lowercase().alias("lower"))
        .collect(engine=query_engine())
    )
    gpu_cats = set(GPU_WORK_CATS)
    known = set(KIND_OF_CAT) | set(KNOWN_OTHER_CATS)
    x = bad = rng = coarse = gpu = bad_gpu = ranges = 0
    unknown: dict[str, int] = {}
    lower: dict[str, str] = {}
    for cat, nx, nbad, nrange, ncoarse, low in by_cat.iter_rows():
        x += nx
        bad += nbad
        rng += nrange
        coarse += ncoarse
        if cat is None:
            continue
        lower[cat] = low
        if low in gpu_cats:
            gpu += nx
            bad_gpu += nbad
        if low == "cuda_profiler_range":
            ranges += nx
        if low not in known:
            unknown[low] = unknown.get(low, 0) + nx
    counts = {
        "n": raw.height if n is None else n,
        "no_ph": int(raw.get_column("ph").is_null().sum()) if no_ph is None else no_ph,
        "x": x,
        "bad": bad,
        "range": rng,
        "coarse": coarse,
        "gpu": gpu,
        "bad_gpu": bad_gpu,
        "profiler_ranges": ranges,
        "unknown": unknown,
    }
    if x == raw.height and not bad and not rng:  # every row is a usable complete event
        return raw, counts, lower
    keep = raw.select((is_x & ok_ts & ok_dur & in_range).fill_null(False)).to_series()
    return (raw if keep.all() else raw.filter(keep)), counts, lower


def merge_counts(counts: list[dict]) -> dict:
    """Add up the counts of a file's chunks."""
    out: dict = {"unknown": {}}
    for c in counts:
        for k, v in c.items():
            if k == "unknown":
                for cat, n in v.items():
                    out["unknown"][cat] = out["unknown"].get(cat, 0) + n
            else:
                out[k] = out.get(k, 0) + v
    return out


def judge(c: dict, path: Path) -> list[str]:
    """Warnings counting what a file lost, or an error when too much of it is unusable."""
    warnings: list[str] = []
    if c["x"] == 0:
        if c["no_ph"] == c["n"]:
            raise InvalidTrace("no event has a 'ph' (phase) field: not a Chrome/Kineto trace", path)
        raise InvalidTrace("no complete ('ph': 'X') events: not a PyTorch profiler (Kineto) trace", path)
    dropped = c["bad"] + c["range"] + c["no_ph"]
    if c["no_ph"]:
        warnings.append(f"{path}: ignored {c['no_ph']} events with no 'ph' (phase) field")
    if c["bad"]:
        warnings.append(f"{path}: dropped {c['bad']} complete events with missing, non-numeric, negative or NaN ts/dur")
    if c["range"]:
        warnings.append(f"{path}: dropped {c['range']} events with timestamps out of range (|ts| + dur beyond year 2128)")
    if dropped and dropped > MAX_BAD_FRACTION * (c["x"] + c["no_ph"]):
        raise InvalidTrace(
            f"{dropped} of {c['x'] + c['no_ph']} events are malformed (missing 'ph', bad ts/dur "
            f"or out-of-range timestamps; more than {MAX_BAD_FRACTION:.0%}): refusing to analyse what is left",
            path,
        )
    if c["bad_gpu"] and c["bad_gpu"] > MAX_BAD_FRACTION * c["gpu"]:
        raise InvalidTrace(
            f"{c['bad_gpu']} of {c['gpu']} GPU events (kernels, memcpy, memset) have missing, non-numeric, negative "
            f"or NaN ts/dur (more than {MAX_BAD_FRACTION:.0%}): refusing to analyse what is left",
            path,
        )
    if c["gpu"] == 0 and c["profiler_ranges"]:  # loads (host events are fine); analyze() turns this into exit 5
        warnings.append(
            f"{path}: {RANGE_PROFILER_NOTE}: {c['profiler_ranges']} 'cuda_profiler_range' counter events and no kernel "
            "timeline (kernels are replayed to collect counters, so their times are not a timeline); "
            "profile without the CUPTI range profiler"
        )
    unknown = sorted(c["unknown"].items(), key=lambda kv: -kv[1])
    if unknown:
        shown = ", ".join(f"'{cat}' ({n})" for cat, n in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        total = sum(n for _, n in unknown)
        if c["gpu"] == 0:
            raise InvalidTrace(
                f"no GPU events in any known category, but {total} events in unknown "
                f"categories {shown}{more}: unsupported trace format or a tool renamed the categories",
                path,
            )
        warnings.append(f"{path}: ignored {total} events in unknown categories {shown}{more} (not counted as GPU work)")
    return warnings


# ---------------------------------------------------------------------------------------------
# canonical events of one file


def main_span(starts: pl.Series) -> tuple[int, int]:
    """First and last start of the cluster of start times (gaps <= MAX_GAP_NS) holding the median."""
    if starts.len() and not starts.null_count():
        lo, hi = starts.min(), starts.max()
        if hi - lo <= MAX_GAP_NS:  # no gap can exceed the whole span: one cluster, no sort
            return int(lo), int(hi)
    t = starts.sort().to_frame("t").with_columns(
        (pl.col("t").diff().fill_null(0) > MAX_GAP_NS).cum_sum().alias("cluster")
    )
    cluster = t.item(t.height // 2, "cluster")
    span = t.filter(pl.col("cluster") == cluster).select(pl.col("t").min().alias("lo"), pl.col("t").max().alias("hi"))
    return int(span.item(0, "lo")), int(span.item(0, "hi"))


def _unique_rows(df: pl.DataFrame, key: str | None = None) -> pl.DataFrame:
    """``df.unique(maintain_order=True)`` (first of each set of identical rows, in order) without
    its row-encoded copy of the whole frame: only rows that share a value of a cheap key with
    another row are compared in full. The key is column ``key`` (``start_ns`` for events:
    identical rows start together, and a sort of the starts, already in order for the most
    part, costs a fraction of hashing every row), else a hash of each row (8 bytes). The shared
    values are found by sorting the key (a hash table over them, ``is_duplicated``, peaks at
    ~60 MiB for 500k rows; the sort at ~15)."""
    k = df.get_column(key) if key is not None else None
    if k is None or k.null_count():
        k = df.hash_rows()
    srt = k.sort().to_frame("h")
    repeated = srt.filter(pl.col("h") == pl.col("h").shift(1)).get_column("h")
    if repeated.len() == 0:
        return df
    shared = k.is_in(repeated.unique().implode())
    idx = shared.arg_true()
    candidates = df[idx]
    first = candidates.select(pl.struct(pl.all()).is_first_distinct()).to_series()
    drop = idx.filter(~first)
    if drop.len() == 0:
        return df
    return df.with_row_index("__i").filter(~pl.col("__i").is_in(drop.implode())).drop("__i")


def _drop_before_launch(df: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Drop GPU events that start more than :data:`MAX_EARLY_NS` before their launch (the
    earliest runtime event with the same correlation id). Catches a stray timestamp (a kernel at
    t=0...) that is still within :data:`MAX_GAP_NS` of the other events, in any time base."""
    gpu = pl.col("kind").is_in(GPU_WORK_KINDS) & pl.col("correlation").is_not_null()
    early = _early_by_lookup(df, gpu)
    if early is None:
        early = _early_by_join(df, gpu)
    if early.len() == 0:
        return df, 0
    keep = df.with_row_index("__i").filter(~pl.col("__i").is_in(early.implode())).drop("__i")
    return keep, early.len()


def _early_by_lookup(df: pl.DataFrame, gpu: pl.Expr) -> pl.Series | None:
    """The rows (indices) of :func:`_drop_before_launch` when every correlation id has one
    runtime event (every real trace): the launches sorted by correlation (mostly in order
    already) and each GPU event's looked up by binary search, instead of a group-by and a hash
    join; None when some id has several runtime events (:func:`_early_by_join` then)."""
    runtime = (
        df.lazy()
        .filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .select("correlation", "start_ns")
        .sort("correlation")
        .collect(engine=query_engine())
    )
    work = df.lazy().with_row_index("__i").filter(gpu).select("__i", "correlation", "start_ns").collect(engine=query_engine())
    if runtime.height == 0 or work.height == 0:
        return work.get_column("__i").clear()
    corr = runtime.get_column("correlation")
    if (corr.diff().slice(1) == 0).any():
        return None
    at = corr.search_sorted(work.get_column("correlation"), side="left")
    at = at.clip(upper_bound=runtime.height - 1)
    found = corr.gather(at) == work.get_column("correlation")
    launch = runtime.get_column("start_ns").gather(at)
    return work.get_column("__i").filter(found & (work.get_column("start_ns") < launch - MAX_EARLY_NS))


def _early_by_join(df: pl.DataFrame, gpu: pl.Expr) -> pl.Series:
    launches = (
        df.lazy()
        .filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("start_ns").min().alias("__launch"))
    )
    early = (
        df.lazy()
        .with_row_index("__i")
        .filter(gpu)
        .select("__i", "correlation", "start_ns")
        .join(launches, on="correlation", how="inner")
        .filter(pl.col("start_ns") < pl.col("__launch") - MAX_EARLY_NS)
        .select("__i")
        .collect(engine=query_engine())
        .to_series()
    )
    return early


def _count(df: pl.DataFrame, cond: pl.Expr) -> int:
    """Rows of ``df`` where ``cond`` holds (null: not counted)."""
    return int(df.select(cond.fill_null(False).sum()).item())


def clean_events(df: pl.DataFrame, path: Path, launch_check: bool = True) -> tuple[pl.DataFrame, list[str]]:
    """De-duplicate and drop events far outside the file's time span; warnings count both.

    ``launch_check``: also drop GPU events that start before their launch, matched by
    correlation id alone (one process per Kineto file; Nsight Systems exports, where correlation
    ids repeat across processes, make that check per process themselves)."""
    warnings: list[str] = []
    if df.height == 0:
        raise InvalidTrace("no usable events after dropping malformed ones", path)
    n0 = df.height
    gpu0 = _count(df, pl.col("kind").is_in(GPU_WORK_KINDS))  # counted, not filtered: no copy of the rows
    df = _unique_rows(df, "start_ns")
    n_dup = n0 - df.height
    if n_dup:
        warnings.append(f"{path}: removed {n_dup} duplicated events (identical in every field)")
    lo, hi = main_span(df.get_column("start_ns"))
    inside = (pl.col("start_ns") >= lo) & (pl.col("start_ns") <= hi) & (pl.col("end_ns") <= hi + MAX_GAP_NS)
    n_out = df.height - _count(df, inside)
    if n_out:
        df = df.filter(inside)
        warnings.append(
            f"{path}: dropped {n_out} events far outside the trace's time span (absurd timestamps or "
            f"durations: more than {MAX_GAP_NS / 60e9:.0f} min away from the other events)"
        )
    df, n_early = _drop_before_launch(df) if launch_check else (df, 0)
    if n_early:
        warnings.append(
            f"{path}: dropped {n_early} GPU events that start before the runtime call that launched them "
            f"(more than {MAX_EARLY_NS / 1e6:g} ms earlier: absurd timestamps)"
        )
    n_out += n_early
    if n_out > MAX_BAD_FRACTION * n0:
        raise InvalidTrace(
            f"{n_out} of {n0} events lie far outside the trace's time span (more than "
            f"{MAX_BAD_FRACTION:.0%}): timestamps are corrupt",
            path,
        )
    gpu1 = _count(df, pl.col("kind").is_in(GPU_WORK_KINDS))
    if gpu0 and gpu1 == 0:
        raise InvalidTrace(f"all {gpu0} GPU events were dropped as malformed", path)
    return df, warnings


_LAUNCH = r"(?i)launch"  # cudaLaunchKernel, hipLaunchKernel, cuLaunchKernel, hipExtModuleLaunchKernel...
_NO_GPU_RECORD = r"(?i)hostfunc"  # cudaLaunchHostFunc runs on the host: no GPU record


def trim_truncated(df: pl.DataFrame, path: Path) -> tuple[pl.DataFrame, list[str]]:
    """Cut a truncated trace back to its complete part.

    Kineto writes host events first and GPU events last, so a file cut short loses the GPU
    records of the latest launches: the steps they belong to would be silently undercounted.
    Every kernel launch of a complete trace has its GPU record (checked on all real traces in
    shared/traces), so the earliest launch without one marks where the GPU timeline stops being
    complete. Everything from the start of the ``ProfilerStep`` holding it (or from the launch
    itself, without step markers) is dropped: host events that start there or later, and GPU
    work launched there or later. The warning counts the launches and steps lost.
    """
    if not df.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).height:
        return df, []  # no GPU work at all: analyze says so
    gpu_corr = df.filter(pl.col("kind").is_in(GPU_WORK_KINDS) & pl.col("correlation").is_not_null()).select("correlation").unique()
    launches = df.filter(
        (pl.col("kind") == "runtime")
        & pl.col("correlation").is_not_null()
        & pl.col("name").str.contains(_LAUNCH)
        & ~pl.col("name").str.contains(_NO_GPU_RECORD)
    )
    missing = launches.join(gpu_corr, on="correlation", how="anti")
    if missing.height == 0:
        return df, []
    t = int(missing.get_column("start_ns").min())
    steps = df.filter(pl.col("kind").is_in(["annotation", "cpu_op"]) & pl.col("name").str.contains(_STEP.pattern))
    holding = steps.filter((pl.col("start_ns") <= t) & (pl.col("end_ns") > t))
    cut = int(holding.get_column("start_ns").min()) if holding.height else t
    n_steps = steps.filter(pl.col("start_ns") >= cut).select(pl.col("start_ns").n_unique()).item()
    launch_of = (
        df.filter((pl.col("kind") == "runtime") & pl.col("correlation").is_not_null())
        .group_by("correlation")
        .agg(pl.col("start_ns").min().alias("__launch"))
    )
    is_gpu = pl.col("kind").is_in([*GPU_WORK_KINDS, "gpu_sync", "gpu_annotation"])
    keep = pl.when(is_gpu).then(pl.col("__launch").fill_null(pl.col("start_ns")) < cut).otherwise(pl.col("start_ns") < cut)
    out = df.join(launch_of, on="correlation", how="left", maintain_order="left").filter(keep).drop("__launch")
    where = f"ProfilerStep at {cut / 1e9:.6f} s" if holding.height else f"{cut / 1e9:.6f} s"
    what = f"{n_steps} incomplete steps" if holding.height else "the incomplete tail"
    warning = (
        f"{path}: truncated trace: the GPU records of {missing.height} kernel launches were cut off: "
        f"dropped {what} (everything from the {where} on, {df.height - out.height} events) so that "
        "no step is undercounted"
    )
    if not out.filter(pl.col("kind").is_in(GPU_WORK_KINDS)).height:
        from traceanalyzer.errors import NoGpuActivity

        raise NoGpuActivity(
            "no complete GPU activity in what was recovered of a truncated trace: the GPU records of "
            f"{missing.height} kernel launches were cut off, and no step before them is complete",
            path,
        )
    return out, [warning]


# ---------------------------------------------------------------------------------------------
# the ranks of one job


def check_job(events: pl.DataFrame, meta: pl.DataFrame) -> list[str]:
    """Reject ranks from different jobs (naming both files); warn about skewed rank clocks.

    ``events``: all ranks' canonical events; ``meta``: one row per rank (rank, file, ...).
    """
    if meta.height < 2:
        return []
    mids = events.select("rank", "start_ns").group_by("rank").agg(pl.col("start_ns").median().alias("mid"))
    return judge_job(meta, step_starts(events), mids)


def step_starts(events: pl.DataFrame) -> pl.DataFrame:
    """``rank, step, start_ns``: the start of each rank's ``ProfilerStep#N`` ranges."""
    return (
        events.lazy()
        .filter(pl.col("kind").is_in(["annotation", "cpu_op"]))
        .select("rank", pl.col("name").str.extract(_STEP.pattern, 1).cast(pl.Int64, strict=False).alias("step"), "start_ns")
        .filter(pl.col("step").is_not_null())
        .group_by("rank", "step")
        .agg(pl.col("start_ns").min())
        .sort("rank", "step")
        .collect(engine=query_engine())
    )


def judge_job(meta: pl.DataFrame, starts: pl.DataFrame, mids: pl.DataFrame) -> list[str]:
    """The job checks from compact tables: ``meta`` (one row per rank), ``starts``
    (:func:`step_starts` of every rank) and ``mids`` (``rank, mid``: each rank's median event
    start). Raises for ranks of different jobs; returns the clock-skew warning, if any."""
    if meta.height < 2:
        return []
    files = dict(zip(meta.get_column("rank").to_list(), meta.get_column("file").to_list()))
    for col, what in (("world_size", "world size"), ("pytorch_version", "PyTorch version")):
        vals = meta.filter(pl.col(col).is_not_null()).unique(col, keep="first", maintain_order=True)
        if vals.height > 1:
            a, b = vals.row(0, named=True), vals.row(1, named=True)
            raise InvalidTrace(
                f"comes from a different job than {a['file']} ({what} {b[col]} vs {a[col]}): "
                "a directory must hold the rank traces of one job",
                b["file"],
            )
    # each rank's clock offset: median over shared ProfilerSteps of (its step start - the median
    # start of that step over ranks); ranks with no shared step: the middle of its events
    starts = (
        starts.lazy()
        .with_columns(pl.len().over("step").alias("n_ranks"))
        .filter(pl.col("n_ranks") > 1)
        .with_columns((pl.col("start_ns") - pl.col("start_ns").quantile(0.5, "lower").over("step")).alias("off"))
        .group_by("rank")
        .agg(pl.col("off").median().alias("off"), pl.len().alias("steps"))
    )
    span = mids.lazy().with_columns((pl.col("mid") - pl.col("mid").quantile(0.5, "lower")).alias("span_off"))
    off = (
        span.join(starts, on="rank", how="left")
        .with_columns(pl.coalesce("off", "span_off").cast(pl.Int64).alias("off"), pl.col("steps").fill_null(0))
        .sort("rank")
        .collect(engine=query_engine())
    )
    far = off.filter(pl.col("span_off").abs() > SAME_JOB_NS)
    if far.height:
        r = far.row(0, named=True)
        ref = off.filter(pl.col("span_off").abs() <= SAME_JOB_NS)
        other = ref.row(0, named=True) if ref.height else off.filter(pl.col("rank") != r["rank"]).row(0, named=True)
        hours = abs(r["mid"] - other["mid"]) / 3.6e12
        raise InvalidTrace(
            f"was recorded {hours:,.1f} h apart from {files[other['rank']]}: they come from different "
            "runs, not one job",
            files[r["rank"]],
        )
    skewed = off.filter(pl.col("off").abs() > SKEW_WARN_NS)
    warnings = []
    if skewed.height:  # one row per skewed rank: a handful
        parts = []
        for r in skewed.iter_rows(named=True):
            basis = f"median over {r['steps']} shared steps" if r["steps"] else "by the middle of its events"
            parts.append(f"rank {r['rank']} {abs(r['off']) / 1e9:.3f} s {'ahead' if r['off'] > 0 else 'behind'} ({basis})")
        warnings.append(
            "rank clocks are skewed: " + "; ".join(parts) + " relative to the other ranks: per-rank "
            "breakdowns are unaffected, cross-rank comparisons (stragglers, timelines) are not reliable"
        )
    return warnings
