"""Annotated trace: the original Chrome-trace events plus the classification as timeline tracks.

For every rank the file gains one process row, ``traceanalyzer rank N`` (a numeric pid chosen not
to collide with the trace's own pids: Perfetto needs integer pids), with two threads:

* ``buckets``: one complete (``X``) event per maximal run of one bucket inside a step window,
  named after the bucket (compute / recompute / exposed comm / other / idle), with
  ``args = {bucket, step, length_us, overlapped_comm_us}`` (``length_us``: the exact length;
  ``dur`` is the length as a viewer reading ``ts`` to the nanosecond sees it, see
  :func:`traceanalyzer.views.tracks._span`);
* ``steps``: one ``X`` event per step window with the step's partition in ``args`` (ms).

Every added event has ``cat: "traceanalyzer"``, which the Kineto parser maps to kind ``other``:
it is never counted as GPU work, so ``traceanalyzer breakdown`` reads the annotated file to the
same numbers. Timestamps follow the file's own convention: microseconds with 3 decimals,
relative to ``baseTimeNanoseconds`` when the file has it.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.errors import OutputError
from traceanalyzer.outputs import Outputs
from traceanalyzer.views.runs import bucket_runs, segments
from traceanalyzer.views.tracks import PID_BASE, track_events

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
        raise OutputError("`merge` writes one file: give `output` NAME.json or NAME.json.gz (or an existing directory)", output)
    return output


def check_output(outputs: Outputs, output: Path, n_files: int, merge: bool = False) -> None:
    """Refuse an unusable ``-o`` before any work (exit 3 naming it): a file name (.json,
    .json.gz) for one rank file or with ``--merge``; otherwise a directory (existing, or to
    create inside an existing parent). Never an input."""
    if merge:
        outputs.check(merged_target(output))
    elif names_a_file(output):
        if n_files > 1:
            raise OutputError(f"{n_files} rank files need a directory, not a file name: give `output` DIR, or `merge` for "
                              "one multi-rank file", output)
        outputs.check(output)
    else:
        outputs.check_dir(output)


def annotate(analysis: Analysis, output: Path, outputs: Outputs | None = None,
             merge: bool = False) -> tuple[list[Path], list[tuple[int, Path, int, Path]]]:
    """Write what the analysis alone gives; returns (the files written, the Kineto rank files
    still to annotate).

    Kineto input: nothing is written here; each ``(rank, input file, base time, target)`` comes
    back for the API, which reads the file's own document and hands it to :func:`add_tracks`
    (the file's events unchanged and first, plus the classification tracks). Nsight Systems
    input, or ``merge``: a trace rebuilt from the canonical events
    (:mod:`traceanalyzer.views.rebuilt`), one process per rank, written here; ``merge`` puts
    every rank in one file. ``output``: see :func:`check_output` and :func:`targets`.
    ``outputs``: the command's inputs (no input is ever overwritten; each file is written whole
    or not at all). Every target is checked before anything is written.
    """
    meta = analysis.trace.meta
    kineto_input = not meta.height or bool((meta.get_column("format") == "kineto").all())
    outputs = outputs or Outputs()
    rows = meta.select("rank", "file", "base_time_ns").iter_rows()  # one row per rank
    files = [(r, Path(f), b or 0) for r, f, b in rows]
    for _r, f, _b in files:
        outputs.protect(f)
    if merge:
        from traceanalyzer.views import rebuilt

        target = merged_target(output)
        outputs.check(target)
        outputs.write_bytes(target, rebuilt.dumps(rebuilt.document(analysis), target.name.endswith(".gz")))
        return [target], []
    if not kineto_input:  # one output per input file (an Nsight Systems export may hold several ranks)
        from traceanalyzer.views import rebuilt

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
        return paths, []
    check_output(outputs, output, len(files))
    if not names_a_file(output):
        outputs.make_dir(output)
    paths = targets([(r, f) for r, f, _b in files], output)
    for t in paths:  # every target checked before anything is written
        outputs.check(t)
    return [], [(rank, path, base, target) for (rank, path, base), target in zip(files, paths)]


def track_runs(analysis: Analysis) -> pl.DataFrame:
    """The bucket runs of every rank's steps, computed once for all the files to annotate."""
    return bucket_runs(analysis, segments(analysis))


def add_tracks(doc: dict, analysis: Analysis, runs: pl.DataFrame, rank: int, base: int) -> None:
    """Append rank ``rank``'s classification tracks to ``doc``, the rank file's own decoded
    Chrome-trace document (``base``: its ``baseTimeNanoseconds``, 0 when it has none)."""
    doc["traceEvents"].extend(track_events(analysis, runs, rank, base, _free_pid(analysis, rank)))
