"""Annotated trace: the original Chrome-trace events plus the classification as timeline tracks.

For every rank the file gains one process row, ``traceanalyzer rank N`` (a numeric pid chosen not
to collide with the trace's own pids: Perfetto needs integer pids), with two threads:

* ``buckets``: one complete (``X``) event per maximal run of one bucket inside a step window,
  named after the bucket (compute / recompute / exposed comm / other / idle), with
  ``args = {bucket, step, length_us, overlapped_comm_us}`` (``length_us``: the exact length;
  ``dur`` is the length as a viewer reading ``ts`` to the nanosecond sees it, see :func:`_span`);
* ``steps``: one ``X`` event per step window with the step's partition in ``args`` (ms).

Every added event has ``cat: "traceanalyzer"``, which the Kineto parser maps to kind ``other``:
it is never counted as GPU work, so ``traceanalyzer breakdown`` reads the annotated file to the
same numbers. Timestamps follow the file's own convention: microseconds with 3 decimals,
relative to ``baseTimeNanoseconds`` when the file has it.
"""

from __future__ import annotations

import os
import gzip
from pathlib import Path

import orjson
import polars as pl

from traceanalyzer.classify import BUCKETS, Analysis
from traceanalyzer.errors import OutputError
from traceanalyzer.outputs import Outputs
from traceanalyzer.parsers import kineto
from traceanalyzer.report.document import LABELS, bucket_runs, segments

CATEGORY = "traceanalyzer"
PID_BASE = 0x7A000000  # far above Linux pids (<= 2**22) and device indices, below 2**31
TID_BUCKETS = 1
TID_STEPS = 2
#: chrome://tracing reserved colour names (Perfetto colours by name instead)
CNAME = {"compute": "good", "recompute": "olive", "exposed_comm": "terrible", "other": "yellow", "idle": "grey"}


def _us(ns: pl.Expr) -> pl.Expr:
    """Integer ns -> µs with (at most) 3 decimals, as Kineto writes them.

    Built as the decimal text ``<µs>.<ns:03>`` and parsed (correctly rounded) to the float
    nearest to it: ``ns / 1000`` would go through float64 first, and an epoch in ns (~1.7e18)
    is far past float64's exact integers. So the value read back is the one the original
    file's own timestamps could hold.
    """
    a = ns.abs()
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    return pl.format("{}{}.{}", sign, a // 1000, (a % 1000).cast(pl.String).str.zfill(3)).cast(pl.Float64)


def _viewer_ns(ns: pl.Expr) -> pl.Expr:
    """The integer ns a viewer computes from the ``ts`` we write: ``llround(µs * 1000)``
    (Perfetto's JSON importer). Equal to ``ns`` wherever float64 can hold the file's timestamps
    to the nanosecond (``baseTimeNanoseconds``-relative files); in files with absolute epoch µs
    (~1.7e15, float64 steps of 0.25 µs) it is ``ns`` rounded to that grid."""
    return (_us(ns) * 1000).round(0, mode="half_away_from_zero").cast(pl.Int64)


def _span(start_ns: pl.Expr, end_ns: pl.Expr, base_ns: int) -> list[pl.Expr]:
    """``ts`` and ``dur`` of a slice: ``dur`` is taken between the viewer's own readings of the
    two ends, so slices that touch in our nanoseconds touch in the viewer too (never overlap,
    which Perfetto would reject as improper nesting)."""
    t0, t1 = start_ns - base_ns, end_ns - base_ns
    return [_us(t0).alias("ts"), _us(_viewer_ns(t1) - _viewer_ns(t0)).alias("dur")]


def track_events(analysis: Analysis, runs: pl.DataFrame, rank: int, base_ns: int, pid: int) -> list[dict]:
    """The added events of one rank (metadata first), ready to append to ``traceEvents``.
    ``runs``: :func:`~traceanalyzer.report.document.bucket_runs` of the analysis."""
    runs = runs.filter(pl.col("rank") == rank)
    steps = analysis.steps.filter(pl.col("rank") == rank)
    label = pl.col("bucket").replace_strict(LABELS, return_dtype=pl.String)
    run_events = runs.select(
        pl.lit("X").alias("ph"),
        pl.lit(CATEGORY).alias("cat"),
        label.alias("name"),
        pl.lit(pid).alias("pid"),
        pl.lit(TID_BUCKETS).alias("tid"),
        *_span(pl.col("start_ns"), pl.col("end_ns"), base_ns),
        pl.col("bucket").replace_strict(CNAME, return_dtype=pl.String).alias("cname"),
        pl.struct(
            pl.col("bucket"),
            pl.col("step"),
            _us(pl.col("end_ns") - pl.col("start_ns")).alias("length_us"),
            _us(pl.col("overlapped_comm_ns")).alias("overlapped_comm_us"),
        ).alias("args"),
    )
    step_events = steps.select(
        pl.lit("X").alias("ph"),
        pl.lit(CATEGORY).alias("cat"),
        pl.format("step {}", pl.col("step")).alias("name"),
        pl.lit(pid).alias("pid"),
        pl.lit(TID_STEPS).alias("tid"),
        *_span(pl.col("start_ns"), pl.col("start_ns") + pl.col("duration_ns"), base_ns),
        pl.struct(
            pl.col("step"),
            _us(pl.col("duration_ns")).alias("length_us"),
            *[(pl.col(f"{b}_ns") / 1e6).alias(f"{b}_ms") for b in [*BUCKETS, "overlapped_comm"]],
        ).alias("args"),
    )
    meta = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"traceanalyzer rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": -1}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": "GPU time classification"}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_BUCKETS,
         "args": {"name": "buckets: compute / recompute / exposed comm / other / idle"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": TID_BUCKETS, "args": {"sort_index": 0}},
        {"ph": "M", "name": "thread_name", "pid": pid, "tid": TID_STEPS, "args": {"name": "steps (GPU windows)"}},
        {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": TID_STEPS, "args": {"sort_index": 1}},
    ]
    return meta + step_events.to_dicts() + run_events.to_dicts()


def _free_pid(analysis: Analysis, rank: int) -> int:
    used = set(analysis.trace.events.filter(pl.col("rank") == rank).get_column("pid").unique().to_list())
    pid = PID_BASE + rank
    while str(pid) in used:
        pid += 1 << 16
    return pid


FILE_SUFFIXES = (".json", ".json.gz", ".gz")


def names_a_file(output: Path) -> bool:
    """``-o`` names a file when it ends in .json / .json.gz (and is not an existing directory);
    any other name is a directory (existing, or created inside an existing parent)."""
    return output.name.lower().endswith(FILE_SUFFIXES) and not os.path.isdir(output)


def _out_name(f: Path, kineto_input: bool) -> str:
    """The name of a rank's annotated trace in an output directory: the input's own name for a
    Kineto trace; ``<stem>.json.gz`` for an Nsight Systems export (.sqlite / .nsys-rep / ...)."""
    if kineto_input:
        return f.name
    stem = f.name.split(".")[0] or f.name
    return f"{stem}.json.gz"


def targets(files: list[tuple[int, Path]], output: Path, kineto_input: bool = True) -> list[Path]:
    """Where each rank's annotated trace goes: ``output`` itself when it names a file (one rank
    file only), else into the directory ``output``, each under its input's name (see
    :func:`_out_name`), prefixed ``rank<R>_`` where two ranks' files share a name."""
    if names_a_file(output):
        return [output]
    names = [_out_name(f, kineto_input) for _r, f in files]
    return [output / (f"rank{r}_{n}" if names.count(n) > 1 else n) for (r, _f), n in zip(files, names)]


def merged_target(output: Path) -> Path:
    """``--merge``: the one file to write (``output``, or ``merged.json.gz`` in an existing directory)."""
    if os.path.isdir(output):
        return output / "merged.json.gz"
    if not names_a_file(output):
        raise OutputError("--merge writes one file: give -o NAME.json or NAME.json.gz (or an existing directory)", output)
    return output


def check_output(outputs: Outputs, output: Path, n_files: int, merge: bool = False) -> None:
    """Refuse an unusable ``-o`` before any work (exit 3 naming it): a file name (.json,
    .json.gz) for one rank file or with ``--merge``; otherwise a directory (existing, or to
    create inside an existing parent). Never an input."""
    if merge:
        outputs.check(merged_target(output))
    elif names_a_file(output):
        if n_files > 1:
            raise OutputError(f"{n_files} rank files need a directory, not a file name: give -o DIR, or --merge for "
                              "one multi-rank file", output)
        outputs.check(output)
    else:
        outputs.check_dir(output)


def annotate(analysis: Analysis, output: Path, outputs: Outputs | None = None, merge: bool = False) -> list[Path]:
    """Write the annotated trace(s); returns the files written.

    Kineto input: each rank file's own events, unchanged and first, plus the classification
    tracks. Nsight Systems input, or ``merge``: a trace rebuilt from the canonical events
    (:mod:`traceanalyzer.report.rebuilt`), one process per rank; ``merge`` puts every rank in
    one file. ``output``: see :func:`check_output` and :func:`targets`. ``outputs``: the
    command's inputs (no input is ever overwritten; each file is written whole or not at all).
    """
    meta = analysis.trace.meta
    kineto_input = not meta.height or bool((meta.get_column("format") == "kineto").all())
    outputs = outputs or Outputs()
    rows = meta.select("rank", "file", "base_time_ns").iter_rows()  # one row per rank
    files = [(r, Path(f), b or 0) for r, f, b in rows]
    for _r, f, _b in files:
        outputs.protect(f)
    if merge:
        from traceanalyzer.report import rebuilt

        target = merged_target(output)
        outputs.check(target)
        outputs.write_bytes(target, rebuilt.dumps(rebuilt.document(analysis), target.name.endswith(".gz")))
        return [target]
    if not kineto_input:  # one output per input file (an Nsight Systems export may hold several ranks)
        from traceanalyzer.report import rebuilt

        by_file: dict[Path, list[int]] = {}
        for r, f, _b in files:
            by_file.setdefault(f, []).append(r)
        check_output(outputs, output, len(by_file))
        if not names_a_file(output):
            outputs.make_dir(output)
        paths = targets([(ranks[0], f) for f, ranks in by_file.items()], output, kineto_input=False)
        for t in paths:
            outputs.check(t)
        for (f, ranks), target in zip(by_file.items(), paths):
            outputs.write_bytes(target, rebuilt.dumps(rebuilt.document(analysis, ranks), target.name.endswith(".gz")))
        return paths
    check_output(outputs, output, len(files))
    if not names_a_file(output):
        outputs.make_dir(output)
    paths = targets([(r, f) for r, f, _b in files], output)
    for t in paths:  # every target checked before anything is written
        outputs.check(t)
    written = []
    runs = bucket_runs(analysis, segments(analysis))
    for (rank, path, base), target in zip(files, paths):
        raw, cut = kineto.read_bytes(path)
        doc, _kept = kineto.decode_document(raw, path, cut)
        del raw
        doc["traceEvents"].extend(track_events(analysis, runs, rank, base, _free_pid(analysis, rank)))
        data = orjson.dumps(doc)
        del doc
        if target.name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=6, mtime=0)
        outputs.write_bytes(target, data)
        written.append(target)
    return written
