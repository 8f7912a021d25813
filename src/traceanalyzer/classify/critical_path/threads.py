"""The critical path across the host threads of one process.

A process runs its step on several host threads: the main thread's ``loss.backward()`` hands the
backward pass to autograd's worker thread (one per device) and waits, recording no op meanwhile.
On the main thread's chain that wait is time outside every op (a ``host_gap``); it is no host
stall while another thread of the same process runs ops. So:

* :func:`uncovered` weighs a host gap only by the part of it during which **no** thread of the
  process (rank, pid) is inside a recorded op or runtime call: the union of every thread's ops is
  taken once per process and step, and the covered time of any interval is read from its running
  length (two as-of joins, no loop);
* :func:`thread_edges` lets the path follow the work into the other thread: for every host gap
  (longer than ``min_gap_ns``) during which another thread of the same process starts and ends
  ops, an edge from the gap's start to that thread's first op start in it, and one from its last
  op end in it back to the gap's end (both weightless: the time is carried by the other thread's
  ops and gaps).
"""

from __future__ import annotations

import polars as pl

#: host kinds whose time is "inside an op" (``record_function`` ranges are not: their own time is the gap)
OP_KINDS = ["cpu_op", "runtime"]
#: a gap shorter than this gets no edges to other threads (the path could gain at most this)
MIN_GAP_NS = 10_000


def union_runs(ev: pl.DataFrame) -> pl.DataFrame:
    """Per (step, rank, pid): the union of every host thread's op and runtime-call intervals, as
    disjoint runs ``s, e`` with ``before`` (the union's length before ``s``)."""
    ops = ev.filter(pl.col("host") & pl.col("kind").is_in(OP_KINDS)).select("step", "rank", "pid", "start_ns", "end_ns")
    key = ["step", "rank", "pid"]
    return (
        ops.sort(*key, "start_ns")
        .with_columns(pl.col("end_ns").cum_max().shift(1).over(key).alias("__reach"))
        .with_columns((pl.col("__reach").is_null() | (pl.col("start_ns") > pl.col("__reach"))).cum_sum().over(key).alias("__run"))
        .group_by(*key, "__run")
        .agg(pl.col("start_ns").min().alias("s"), pl.col("end_ns").max().alias("e"))
        .sort(*key, "s")
        .with_columns((pl.col("e") - pl.col("s")).cum_sum().shift(1, fill_value=0).over(key).alias("before"))
        .select(*key, "s", "e", "before")
    )


def _covered_at(frame: pl.DataFrame, col: str, runs: pl.DataFrame, alias: str) -> pl.DataFrame:
    """``frame`` with ``alias``: the union's length up to the time in ``col``."""
    key = ["step", "rank", "pid"]
    j = frame.sort(col).join_asof(runs.sort("s"), left_on=col, right_on="s", by=key, strategy="backward", check_sortedness=False)
    return j.with_columns(
        pl.when(pl.col("s").is_null()).then(0)
        .otherwise(pl.col("before") + pl.min_horizontal(pl.col(col), pl.col("e")) - pl.col("s")).alias(alias)
    ).drop("s", "e", "before")


def uncovered(gaps: pl.DataFrame, runs: pl.DataFrame) -> pl.DataFrame:
    """``gaps`` (``node, step, rank, pid, t0, t1``) with ``free``: the part of ``[t0, t1]`` when no
    thread of the process is inside an op."""
    g = _covered_at(_covered_at(gaps, "t0", runs, "__c0"), "t1", runs, "__c1")
    return g.with_columns(((pl.col("t1") - pl.col("t0")) - (pl.col("__c1") - pl.col("__c0"))).clip(0).alias("free")).drop("__c0", "__c1")


def thread_edges(gaps: pl.DataFrame, points: pl.DataFrame, chains: pl.DataFrame, min_gap_ns: int = MIN_GAP_NS) -> pl.DataFrame:
    """Edges ``src, dst, w, what, about`` from each host gap (``node`` = the gap's end point, the
    node before it its start; ``chain``, ``t0``, ``t1``) into the other host threads of its
    process that run ops inside it, and back (see the module docstring)."""
    schema = {"src": pl.Int64, "dst": pl.Int64, "w": pl.Int64, "what": pl.String, "about": pl.Int64}
    long = gaps.filter((pl.col("t1") - pl.col("t0")) >= min_gap_ns)
    if long.height == 0:
        return pl.DataFrame(schema=schema)
    host = chains.filter(pl.col("host")).select(pl.col("chain").alias("other"), "step", "rank", "pid")
    pairs = long.join(host, on=["step", "rank", "pid"]).filter(pl.col("other") != pl.col("chain"))
    if pairs.height == 0:
        return pl.DataFrame(schema=schema)
    starts = points.filter(pl.col("ptype") == 2).select(pl.col("chain").alias("other"), pl.col("t").alias("ts"), pl.col("node").alias("sn"))
    ends = points.filter(pl.col("ptype") == 0).select(pl.col("chain").alias("other"), pl.col("t").alias("te"), pl.col("node").alias("en"))
    into = (pairs.sort("t0").join_asof(starts.sort("ts"), left_on="t0", right_on="ts", by="other", strategy="forward", check_sortedness=False)
            .filter(pl.col("ts").is_not_null() & (pl.col("ts") < pl.col("t1"))))
    back = (into.sort("t1").join_asof(ends.sort("te"), left_on="t1", right_on="te", by="other", strategy="backward", check_sortedness=False)
            .filter(pl.col("te").is_not_null() & (pl.col("te") > pl.col("ts"))))
    out = pl.concat([
        back.select((pl.col("node") - 1).alias("src"), pl.col("sn").alias("dst")),
        back.select(pl.col("en").alias("src"), pl.col("node").alias("dst")),
    ])
    return out.select(pl.col("src").cast(pl.Int64), pl.col("dst").cast(pl.Int64), pl.lit(0, pl.Int64).alias("w"),
                      pl.lit("thread").alias("what"), pl.lit(None, pl.Int64).alias("about"))
