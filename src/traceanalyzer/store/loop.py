"""Storing what a training loop's profiler hands over: one rank's trace at a time.

A store run written from a training loop is one *profiling cycle* of one training run (every
rank's trace of the same profiled steps), like a run ``batch`` writes from a directory of rank
traces. The ranks arrive one by one, each from its own process and at its own time, so
:func:`store_rank` merges a rank into its run: under the store's write lock it reads what the
run holds, replaces this rank's rows, recomputes the run's row from every rank's steps (the same
means ``batch`` computes) and writes the run again with :meth:`Store.write_run` (one
transaction). A rank whose analysis failed adds a line to the run's ``warnings``; a run where
no rank could be analysed is a ``failed`` run (the first failure's error), as in ``batch``.
"""

from __future__ import annotations

import polars as pl

from traceanalyzer.store.analyse import RunResult
from traceanalyzer.store.database import LOOP_RANK_FIELDS, RANK_SCHEMA, RUN_SCHEMA, STEP_SCHEMA, Store
from traceanalyzer.classify import FIELDS


def failure_line(rank: int, host: str | None, error: str | None) -> str:
    return f"rank {rank}{f' ({host})' if host else ''}: not analysed: {error}"


def store_rank(store: Store, result: RunResult, rank: int, extra: dict, *, path: str, world_size: int | None = None) -> pl.DataFrame:
    """Merge one rank's ``result`` (a one-rank :class:`RunResult` of the run) into its run in
    ``store``; ``extra``: the rank's :data:`LOOP_RANK_FIELDS` values; ``path``: the run's
    directory; ``world_size``: as the training process knows it (else the trace's). Returns the
    run's row as stored."""
    run_id = result.row["run_id"]
    with store.writer():
        prev = store.read("runs", [run_id])
        prev_row = prev.row(0, named=True) if prev.height else None
        keep_other = pl.col("rank") != rank
        ranks = store.read("ranks", [run_id]).filter(keep_other) if prev_row else pl.DataFrame(schema=RANK_SCHEMA)
        steps = store.read("steps", [run_id]).filter(keep_other) if prev_row else pl.DataFrame(schema=STEP_SCHEMA)
        # the rank as the training process knows it (torch.distributed), not as the trace says
        as_rank = pl.lit(rank, dtype=pl.Int32).alias("rank")
        new_steps = result.steps.with_columns(as_rank)
        new_ranks = result.ranks.with_columns(as_rank, *[pl.lit(extra.get(c), dtype=t).alias(c) for c, t in LOOP_RANK_FIELDS.items()])
        ranks = pl.concat([ranks.select(list(RANK_SCHEMA)), new_ranks.cast(RANK_SCHEMA).select(list(RANK_SCHEMA))]).sort("rank")
        steps = pl.concat([steps.select(list(STEP_SCHEMA)), new_steps.cast(STEP_SCHEMA).select(list(STEP_SCHEMA))]).sort("rank", "step")
        row = _run_row(result.row, prev_row, ranks, steps, rank, extra.get("host"), path, world_size)
        store.write_run(pl.DataFrame([row], schema=RUN_SCHEMA), ranks, steps)
    return pl.DataFrame([row], schema=RUN_SCHEMA)


def _run_row(new: dict, prev: dict | None, ranks: pl.DataFrame, steps: pl.DataFrame, rank: int, host: str | None,
             path: str, world_size: int | None) -> dict:
    warnings = [w for w in (prev or {}).get("warnings") or [] if not w.startswith(f"rank {rank} ")]
    if new["status"] != "ok":
        warnings.append(failure_line(rank, host, new["error"]))
    warnings += [f"rank {rank}: {w}" for w in new.get("warnings") or []]
    failed = {int(w.split(" ", 2)[1]) for w in warnings if ": not analysed: " in w}
    # n_files: the ranks that handed over a trace, analysed or not
    row = {**new, "path": path, "warnings": warnings, "n_files": len(failed | set(ranks["rank"].to_list()))}
    if world_size is not None:
        row["world_size"] = world_size
    if prev is not None:
        row["seconds"] = (prev.get("seconds") or 0.0) + (new.get("seconds") or 0.0)
    if steps.height:  # at least one rank analysed: the run is ok, its means over every (rank, step)
        means = steps.select(
            pl.len().alias("n_steps"),
            pl.col("rank").n_unique().alias("n_ranks"),
            *[pl.col(f"{f}_us").mean().alias("step_time_us" if f == "duration" else f"{f}_us") for f in FIELDS],
        ).row(0, named=True)
        devices = ranks.get_column("device_name").drop_nulls().unique().sort().to_list()
        worlds = [w for w in ((prev or {}).get("world_size"), row.get("world_size")) if w is not None]
        row.update(means, status="ok", error=None, exit_code=None, error_class=None, device_name=", ".join(devices) or None,
                   world_size=max(worlds) if worlds else None, mfu=new.get("mfu") if new["status"] == "ok" else (prev or {}).get("mfu"))
        if prev is not None and prev["status"] == "ok" and new["status"] != "ok":
            row["step_range"] = prev.get("step_range")
    elif prev is not None:  # no rank analysed yet: the run failed, with its first failure's error
        row.update({k: prev[k] for k in ("error", "exit_code", "error_class", "analysed_at")}, status="failed")
    return row
