"""Row batches of a job's table: a job of many ranks holds its tables one rank after another,
and a query run on zero-copy slices of whole ranks (or whole chunks) keeps its temporaries the
size of a few ranks' rows instead of the whole job's.
"""

from __future__ import annotations

import polars as pl

#: rows of a job's collective kernels that :func:`.comm.match_instances` and :func:`.comm.summary` take at
#: once (whole ranks: a batch ends at the first rank boundary past this many rows), so that a
#: job of many ranks never holds temporaries as long as all its kernels
BATCH_ROWS = 1 << 15
#: the same for the per-row matching (whole chunks) and the summary's group-by (whole ranks):
#: shorter, their temporaries are wider; a job of small ranks still takes a few queries, not one
#: per rank
RUN_ROWS = 1 << 12


def batches_of(runs: list[tuple[int, int]], rows: int) -> list[list[tuple[int, int]]]:
    """Consecutive ``(offset, length)`` runs in batches of whole runs, a batch ending at the
    first run that takes it to ``rows`` rows."""
    out: list[list[tuple[int, int]]] = []
    size = rows
    for run in runs:
        if size < rows:
            out[-1].append(run)
            size += run[1]
        else:
            out.append([run])
            size = run[1]
    return out


def batches(runs: list[tuple[int, int]], rows: int) -> list[tuple[int, int]]:
    """Consecutive runs joined into batches of about ``rows`` rows (whole runs)."""
    return [(b[0][0], sum(n for _, n in b)) for b in batches_of(runs, rows)]


def chunks(df: pl.DataFrame) -> list[tuple[int, int]]:
    """``(offset, length)`` of the frame's chunks when all its columns are cut alike (a job's
    table: one chunk per rank), else of the whole frame. Columns computed chunk by chunk and
    cut the same way sit beside the frame's without a copy (a frame whose columns are cut
    differently is copied whole by the next group-by)."""
    cuts = {tuple(s.chunk_lengths()) for s in df.get_columns()}
    if len(cuts) != 1 or df.height == 0:
        return [(0, df.height)]
    (lengths,) = cuts
    offsets = [0]
    for n in lengths[:-1]:
        offsets.append(offsets[-1] + n)
    return list(zip(offsets, lengths))


def rank_runs(df: pl.DataFrame) -> list[tuple[int, int]]:
    """``(offset, length)`` of each rank's rows when every rank's rows are contiguous (a job's
    table: the ranks' tables one after another), else of the whole frame. A per-rank query on
    each run (a zero-copy slice) gives what one query on the frame gives for anything computed
    per row or per group of one rank, with temporaries the size of one rank's rows."""
    if df.height == 0:
        return [(0, 0)]
    rank = pl.col("rank")
    starts = df.select(pl.arg_where(rank.ne_missing(rank.shift())).alias("at")).get_column("at").to_list()
    if len(starts) != df.get_column("rank").n_unique():  # a rank in several runs
        return [(0, df.height)]
    ends = [*starts[1:], df.height]
    return [(a, b - a) for a, b in zip(starts, ends)]
