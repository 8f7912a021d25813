"""Per-rank scores across stored runs: which rank (and host) keeps being the slow one.

For each job's last ``last`` successful runs of at least two ranks (in date, then run id order),
from the ``ranks`` table:

* the run's **slowest** rank has the longest mean step (``step_time_us``; the lowest rank on a
  tie);
* its **late arriver** is the rank with the least exposed communication per step, among runs
  where some rank has exposed communication: the others waited for it at the collectives
  (the store keeps no per-collective waits; this is the same reading as ``waited_on_rank`` of
  the cross-rank view, from the per-step totals).

:func:`rank_scores` counts, per job, rank and host, in how many of those runs each rank was
present, the slowest, the late arriver, and either.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from traceanalyzer.store.database import Store
from traceanalyzer.errors import ConfigError, InputNotFound

DEFAULT_LAST = 10

SCORE_SCHEMA = {
    "job": pl.String, "rank": pl.Int32, "host": pl.String, "runs": pl.UInt32, "slowest": pl.UInt32, "late_arriver": pl.UInt32,
    "either": pl.UInt32, "mean_step_time_ms": pl.Float64, "out_of": pl.UInt32,
}


def rank_scores(store: str | Path | Store, last: int = DEFAULT_LAST, job: str | None = None) -> pl.DataFrame:
    """One row per job, rank and host (columns :data:`SCORE_SCHEMA`): ``runs`` the runs of the
    last ``last`` (``out_of`` of them had two ranks or more) the rank is in, ``slowest``,
    ``late_arriver`` and ``either`` how many of them it was that, ``mean_step_time_ms`` its mean
    step over them. Sorted by job, then ``either`` (most first), then rank."""
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise ConfigError(f"`last` {last!r} must be a whole number of runs, at least 1")
    st = store if isinstance(store, Store) else Store(store)
    runs = st.require_runs().filter((pl.col("status") == "ok") & (pl.col("n_ranks") >= 2))
    if job is not None:
        if job not in st.runs().get_column("job").to_list():
            raise InputNotFound(f"no run of job {job!r} in the store", st.root)
        runs = runs.filter(pl.col("job") == job)
    chosen = runs.sort("job", "date", "run_id").group_by("job", maintain_order=True).tail(last)
    if not chosen.height:
        return pl.DataFrame(schema=SCORE_SCHEMA)
    out_of = chosen.group_by("job").agg(pl.len().cast(pl.UInt32).alias("out_of"))
    ranks = st.read("ranks", chosen.get_column("run_id").to_list())
    ranks = ranks.with_columns((pl.col("exposed_comm_ns") / pl.col("steps")).alias("__comm"))
    first_by = lambda key, desc: pl.col("rank").sort_by([key, "rank"], descending=[desc, False]).first().over("run_id")  # noqa: E731
    scored = ranks.with_columns(
        (pl.col("rank") == first_by("step_time_us", True)).alias("__slowest"),
        ((pl.col("rank") == first_by("__comm", False)) & (pl.col("__comm").max().over("run_id") > 0)).alias("__late"),
    )
    return (
        scored.group_by("job", "rank", "host")
        .agg(
            pl.len().cast(pl.UInt32).alias("runs"),
            pl.col("__slowest").sum().cast(pl.UInt32).alias("slowest"),
            pl.col("__late").sum().cast(pl.UInt32).alias("late_arriver"),
            (pl.col("__slowest") | pl.col("__late")).sum().cast(pl.UInt32).alias("either"),
            (pl.col("step_time_us").mean() / 1000).alias("mean_step_time_ms"),
        )
        .join(out_of, on="job")
        .cast(SCORE_SCHEMA)
        .select(list(SCORE_SCHEMA))
        .sort(["job", "either", "rank"], descending=[False, True, False])
    )
