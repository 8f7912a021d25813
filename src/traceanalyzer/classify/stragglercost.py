"""What each straggler costs the job: the replay (:mod:`.replay`) run again with one rank's work
made typical, and who made whom wait.

**The what-if.** For every rank and **phase**, the job's step time had that rank run that phase
like the median rank:

* ``compute``: the GPU busy time before each of its arrivals at a collective (and before its
  step's end) set to the median over the ranks of the same point (the same collective instance
  reached from the same anchor, or the same step's end), when it is longer;
* ``host_stall``: the same for the idle time in those leads (the GPU waiting for the host; before
  a rank's first collective it includes a late start of its step);
* ``transfer``: the transfer of its kernels of a collective set to the median over the
  instance's ranks, when longer.

Only what is longer than the median is shortened: a rank that is typical or fast costs nothing.
The **job's step time** is, per step, the longest replayed step over the ranks that take part in
a matched collective (a rank that waits on no one and that no one waits on does not hold the
job; all ranks when none does), averaged over the steps; ``cost = replayed step time − step time of the what-if`` (ms per step). Phases before
a collective are per collective (``collective``: its type, ``group``: its process group); those
before a step's end have no collective.

**Made others wait, waited.** In every matched instance, each rank's wait (its arrival to the
last arrival) is charged to the last arrival (shared equally between ranks that arrive last at
the same nanosecond: a tie, warned about). ``made_wait`` of a rank and collective is what it was
charged, ``waited`` its own wait, both summed over the instances and divided by the steps. The
same charge per pair of ranks is :func:`wait_matrix`.

Ranks with the same cost keep rank order; two ranks that tie as the last arrivals make each
other's what-if small (making one typical leaves the other late): ``total`` (every rank made
typical at once) says what the stragglers cost together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from traceanalyzer.classify import replay as rp

if TYPE_CHECKING:
    from traceanalyzer.classify import Analysis

PHASES = ("compute", "host_stall", "transfer")

COST_SCHEMA = {
    "rank": pl.Int32, "phase": pl.String, "collective": pl.String, "group": pl.String,
    "cost_ms_per_step": pl.Float64, "made_wait_ms_per_step": pl.Float64, "waited_ms_per_step": pl.Float64,
}
MATRIX_SCHEMA = {"collective": pl.String, "group": pl.String, "rank": pl.Int32, "on_rank": pl.Int32, "wait_ms_per_step": pl.Float64,
                 "instances": pl.UInt32}


def _job_ms(points: pl.DataFrame, times: np.ndarray, ranks: pl.Series | None = None) -> float:
    per = rp.step_times(points, times)
    if ranks is not None and ranks.len():
        per = per.filter(pl.col("rank").is_in(ranks.implode()))
    if per.height == 0:
        return 0.0
    return float(per.group_by("step").agg(pl.col("ns").max()).get_column("ns").mean()) / 1e6


def _medians(keys: list[np.ndarray], values: np.ndarray) -> np.ndarray:
    """Per element: the median of ``values`` over the elements with the same keys."""
    df = pl.DataFrame({**{f"k{i}": k for i, k in enumerate(keys)}, "v": values})
    return df.select(pl.col("v").median().over([f"k{i}" for i in range(len(keys))])).to_series().to_numpy()


def charges(kern: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Each matched kernel's wait charged to the last arrivals of its instance: ``rank`` (the one
    who waited), ``on_rank`` (the last arrival), ``collective``, ``group``, ``step``, ``wait_ns``
    (Float64: split equally on a tie), and the number of instances with a tie."""
    m = kern.filter(pl.col("last_arrival_ns").is_not_null()).with_columns(
        pl.col("coll_type").cast(pl.String).alias("collective"), pl.col("pg_name").cast(pl.String).alias("group"),
    )
    if m.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int32, "on_rank": pl.Int32, "collective": pl.String, "group": pl.String, "step": pl.Int64,
                                    "wait_ns": pl.Float64}), 0
    lasts = (
        m.filter(pl.col("start_ns") == pl.col("last_arrival_ns"))
        .group_by("group", "instance")
        .agg(pl.col("rank").alias("on_rank"))
        .with_columns(pl.col("on_rank").list.len().alias("__n"))
    )
    ties = int(lasts.filter(pl.col("__n") > 1).height)
    waits = (
        m.select("rank", "collective", "group", "instance", "step", (pl.col("last_arrival_ns") - pl.col("start_ns")).clip(0).alias("w"))
        .filter(pl.col("w") > 0)  # a rank that did not wait charges no one
        .join(lasts, on=["group", "instance"], how="inner")
        .explode("on_rank")
        .filter(pl.col("on_rank") != pl.col("rank"))
        .select("rank", pl.col("on_rank").cast(pl.Int32), "collective", "group", "step", (pl.col("w") / pl.col("__n")).alias("wait_ns"))
    )
    return waits, ties


def wait_matrix(kern: pl.DataFrame, n_steps: int) -> pl.DataFrame:
    """Who waited on whom: per collective type and process group, one row per (``rank``: the
    rank that waited, ``on_rank``: the last arrival it waited for) with ``wait_ms_per_step`` and
    the ``instances`` in which it did."""
    ch, _ = charges(kern)
    if ch.height == 0:
        return pl.DataFrame(schema=MATRIX_SCHEMA)
    return (
        ch.group_by("collective", "group", "rank", "on_rank")
        .agg((pl.col("wait_ns").sum() / 1e6 / max(n_steps, 1)).round(6).alias("wait_ms_per_step"), pl.len().cast(pl.UInt32).alias("instances"))
        .sort("collective", "group", "rank", "on_rank")
        .cast(MATRIX_SCHEMA)
    )


def straggler_costs(points: pl.DataFrame, kern: pl.DataFrame, g: rp.Graph | None = None) -> tuple[pl.DataFrame, float, list[str]]:
    """(the costs table, the cost of every rank made typical at once in ms per step, warnings).

    Costs: one row per rank, phase and collective (:data:`COST_SCHEMA`), most costly first
    (ties: by rank, phase, collective)."""
    g = g or rp.replay_graph(points, kern)
    warnings: list[str] = []
    n_steps = max(points.get_column("step").drop_nulls().n_unique(), 1)
    # the job's step time: the longest step over the ranks that take part in a matched collective
    # (a rank that waits on no one and that no one waits on does not hold the job), all ranks if none does
    synced = kern.filter(pl.col("last_arrival_ns").is_not_null()).get_column("rank").unique()

    def job(times: np.ndarray) -> float:
        return _job_ms(points, times, synced)

    base = job(rp.run(g))
    # the points' identities for the medians: what they lead to and where from
    kinds = points.get_column("point").to_numpy().astype(str)
    # a point's identity: the node it arrives at (or its kind and step), and its anchor's node
    kind_code = np.where(kinds == rp.ARRIVE, 0, np.where(kinds == rp.END, 1, 2))
    steps = points.get_column("step").fill_null(-1).to_numpy().astype(np.int64)
    target = np.where(kinds == rp.ARRIVE, g.point_node, steps)
    a_node = np.where(g.anchor >= 0, g.kernel_node[np.clip(g.anchor, 0, None)] if g.kernel_node.size else -1, -1)
    pkey = [kind_code, target, a_node]
    busy = np.minimum(g.busy, np.maximum(g.lead, 0))
    idle = g.lead - busy
    med_busy = _medians(pkey, busy.astype(np.float64))
    med_idle = _medians(pkey, idle.astype(np.float64))
    # the kernels' median transfer over their instance
    tr_med = _medians([g.kernel_node], g.transfer.astype(np.float64)) if g.kernel_node.size else np.zeros(0)
    prank = points.get_column("rank").to_numpy()
    krank = kern.get_column("rank").to_numpy()
    ctype = kern.get_column("coll_type").cast(pl.String).fill_null("unknown").to_numpy().astype(str)
    cgroup = kern.get_column("pg_name").cast(pl.String).fill_null("").to_numpy().astype(str)
    pk = np.clip(g.point_kernel, 0, None)
    p_coll = np.where(g.point_kernel >= 0, ctype[pk] if ctype.size else "", "")
    p_group = np.where(g.point_kernel >= 0, cgroup[pk] if cgroup.size else "", "")
    whatif_points = kinds != rp.START  # a step's start is where its duration is measured from: kept
    rows = []
    for r in np.unique(prank).tolist():
        mine = (prank == r) & whatif_points
        for coll, grp in sorted({(c, gg) for c, gg in zip(p_coll[mine].tolist(), p_group[mine].tolist())}):
            sel = mine & (p_coll == coll) & (p_group == grp)
            for phase, cur, med in (("compute", busy, med_busy), ("host_stall", idle, med_idle)):
                cut = np.where(sel, np.maximum(cur - np.minimum(cur, med), 0), 0).astype(np.int64)
                if not cut.any():
                    rows.append((r, phase, coll or None, grp or None, 0.0))
                    continue
                rows.append((r, phase, coll or None, grp or None, base - job(rp.run(g, lead=g.lead - cut))))
        kmine = krank == r
        for coll, grp in sorted({(c, gg) for c, gg in zip(ctype[kmine].tolist(), cgroup[kmine].tolist())}):
            sel = kmine & (ctype == coll) & (cgroup == grp)
            cut = np.where(sel, np.maximum(g.transfer - np.minimum(g.transfer, tr_med), 0), 0).astype(np.int64)
            cost = base - job(rp.run(g, transfer=g.transfer - cut)) if cut.any() else 0.0
            rows.append((r, "transfer", coll, grp or None, cost))
    # every rank typical at once
    cut_all = (np.maximum(busy - np.minimum(busy, med_busy), 0) + np.maximum(idle - np.minimum(idle, med_idle), 0)).astype(np.int64)
    cut_all = np.where(whatif_points, cut_all, 0)
    tcut = np.maximum(g.transfer - np.minimum(g.transfer, tr_med), 0).astype(np.int64) if g.transfer.size else g.transfer
    total = base - job(rp.run(g, lead=g.lead - cut_all, transfer=g.transfer - tcut))
    costs = pl.DataFrame(rows, schema={k: COST_SCHEMA[k] for k in ("rank", "phase", "collective", "group", "cost_ms_per_step")}, orient="row")
    ch, ties = charges(kern)
    made = ch.group_by(pl.col("on_rank").alias("rank"), "collective", "group").agg((pl.col("wait_ns").sum() / 1e6 / n_steps).alias("made_wait_ms_per_step"))
    waited = (
        kern.filter(pl.col("last_arrival_ns").is_not_null())
        .group_by("rank", pl.col("coll_type").cast(pl.String).alias("collective"), pl.col("pg_name").cast(pl.String).alias("group"))
        .agg(((pl.col("last_arrival_ns") - pl.col("start_ns")).clip(0).sum() / 1e6 / n_steps).alias("waited_ms_per_step"))
    )
    costs = (
        costs.join(made, on=["rank", "collective", "group"], how="left", nulls_equal=False)
        .join(waited, on=["rank", "collective", "group"], how="left")
        .with_columns(
            pl.col("cost_ms_per_step").round(6),
            pl.when(pl.col("collective").is_not_null()).then(pl.col("made_wait_ms_per_step").fill_null(0.0).round(6)).alias("made_wait_ms_per_step"),
            pl.when(pl.col("collective").is_not_null()).then(pl.col("waited_ms_per_step").fill_null(0.0).round(6)).alias("waited_ms_per_step"),
        )
        .select(list(COST_SCHEMA))
        .cast(COST_SCHEMA)
        .sort(["cost_ms_per_step", "rank", "phase", "collective"], descending=[True, False, False, False], nulls_last=True)
    )
    if ties:
        warnings.append(
            f"straggler cost: {ties} collective instance(s) have two or more last arrivals at the same time: their wait is shared "
            "equally between them, and making one of them typical saves little while another stays late (see the total)"
        )
    if g.broken:
        warnings.append(
            f"replay: {g.broken} point(s) follow a collective that the trace shows ending after the next one began "
            "(rank clocks apart): their anchor keeps its measured time"
        )
    return costs, round(total, 6), warnings


def replay_warnings(points: pl.DataFrame, kern: pl.DataFrame) -> list[str]:
    """What the replay cannot see: ranks with no collective, groups whose ranks were not all
    loaded, groups whose ranks disagree on the number of collectives."""
    out = []
    ranks = points.get_column("rank").unique().sort().to_list()
    if len(ranks) == 1:
        out.append(f"stragglers: only rank {ranks[0]} is loaded: nothing to compare across ranks (load every rank file of the job)")
    with_coll = set(kern.get_column("rank").unique().to_list()) if kern.height else set()
    alone = [r for r in ranks if r not in with_coll]
    if alone and len(ranks) > 1:
        out.append(
            f"replay: rank {', '.join(map(str, alone))} has no collective: it is replayed on its own (nothing waits on it, it waits "
            "on nothing), and its costs are those of its own steps only"
        )
    if kern.height:
        grp = kern.group_by(pl.col("pg_name").cast(pl.String).alias("g")).agg(
            pl.col("group_size").max().alias("size"), pl.col("rank").n_unique().alias("loaded"),
            pl.col("last_arrival_ns").is_null().all().alias("unmatched"),
        ).sort("g")
        for gname, size, loaded, unmatched in grp.iter_rows():
            if unmatched and loaded >= 2:
                counts = kern.filter(pl.col("pg_name").cast(pl.String) == gname).group_by("rank").len().sort("rank")
                shown = ", ".join(f"rank {r}: {n}" for r, n in counts.iter_rows())
                out.append(
                    f"replay: group {gname}: its ranks disagree on the number of collectives ({shown}): they are not matched, "
                    "and the replay treats them as each rank's own work (no rank waits on another there)"
                )
            elif size is not None and loaded >= 2 and loaded < size:
                out.append(
                    f"replay: group {gname} has {size} ranks, {loaded} loaded: its collectives wait only for the loaded ranks"
                )
    return out


MADE_WAIT, WAITED = "made others wait", "waited"


def roles(per_rank: pl.DataFrame, costs: pl.DataFrame) -> pl.DataFrame:
    """The per-rank stragglers table (:func:`.stragglers.stragglers`) with what each rank made
    the others wait and waited itself (ms per step, over its collectives), its ``role``
    (:data:`MADE_WAIT` when it made the others wait longer than it waited, :data:`WAITED` when
    it waited longer, null when neither) and its most costly phase (``top_phase``,
    ``top_collective``, ``top_cost_ms_per_step``; the first in the costs' order; null when no
    phase of it costs anything). Sorted by
    that cost (most first), then as the stragglers table."""
    waits = (
        costs.filter(pl.col("collective").is_not_null())
        .unique(["rank", "collective", "group"])
        .group_by("rank")
        .agg(pl.col("made_wait_ms_per_step").sum(), pl.col("waited_ms_per_step").sum())
    )
    top = costs.filter(pl.col("cost_ms_per_step") > 0).group_by("rank", maintain_order=True).first().select(
        "rank", pl.col("phase").alias("top_phase"), pl.col("collective").alias("top_collective"),
        pl.col("cost_ms_per_step").alias("top_cost_ms_per_step"),
    )
    made, waited = pl.col("made_wait_ms_per_step"), pl.col("waited_ms_per_step")
    out = (
        per_rank.with_row_index("__o")
        .join(waits, on="rank", how="left")
        .join(top, on="rank", how="left")
        .with_columns(made.fill_null(0.0), waited.fill_null(0.0))
        .with_columns(
            pl.when(made > waited).then(pl.lit(MADE_WAIT)).when(waited > made).then(pl.lit(WAITED)).otherwise(pl.lit(None, pl.String)).alias("role")
        )
        .with_columns(made.round(6), waited.round(6))
        .sort(["top_cost_ms_per_step", "__o"], descending=[True, False], nulls_last=True)
        .drop("__o")
    )
    return out


REPLAY_SCHEMA = {"rank": pl.Int32, "step": pl.Int64, "measured_ms": pl.Float64, "replayed_ms": pl.Float64}
_KERNEL_SCHEMA = {
    "rank": pl.Int32, "step": pl.Int64, "coll_type": pl.String, "pg_name": pl.String, "instance": pl.Int64, "start_ns": pl.Int64,
    "end_ns": pl.Int64, "dur_ns": pl.Int64, "last_arrival_ns": pl.Int64, "wait_ns": pl.Int64, "group_size": pl.Int64,
}


def inputs(a: Analysis) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(points, kernels, steps) of the ranks the analysis holds (a selection keeps only its own)."""
    points = a.replay_points if a.replay_points is not None else pl.DataFrame(schema=rp.POINT_SCHEMA)
    ranks = a.steps.get_column("rank").unique().implode()
    points = points.filter(pl.col("rank").is_in(ranks))
    coll = a.collectives
    if coll is None or coll.height == 0:
        coll = pl.DataFrame(schema=_KERNEL_SCHEMA)
    kern = rp.job_kernels(coll.filter(pl.col("rank").is_in(ranks)))
    if a.steps.height < points.filter(pl.col("point") == rp.START).height or kern.height < points.filter(pl.col("point") == rp.ARRIVE).height:
        # a selection of steps: the points of its steps and of its collectives only, the kernels
        # found again by their times (their positions among the rank's kernels changed); an anchor
        # left out keeps its measured end
        by_start = kern.select("rank", pl.col("start_ns").alias("t_ns"), pl.col("kernel").alias("__k")).unique(["rank", "t_ns"], keep="first")
        by_end = kern.select("rank", pl.col("end_ns").alias("anchor_end_ns"), pl.col("kernel").alias("__a")).unique(["rank", "anchor_end_ns"], keep="first")
        idx = points.with_row_index("__o").join(by_start, on=["rank", "t_ns"], how="left").join(by_end, on=["rank", "anchor_end_ns"], how="left")
        arrivals = idx.filter((pl.col("point") == rp.ARRIVE) & pl.col("__k").is_not_null())
        bounds = idx.filter(pl.col("point") != rp.ARRIVE).join(a.steps.select("rank", "step"), on=["rank", "step"], how="semi")
        points = (
            pl.concat([arrivals, bounds]).sort("__o")
            .with_columns(pl.when(pl.col("point") == rp.ARRIVE).then(pl.col("__k")).alias("kernel"), pl.col("__a").alias("anchor"))
            .select(points.columns)
        )
    # the last arrival over the ranks held (a selection of ranks waits only for its own: the
    # whole job's is what the collectives table holds)
    matched = pl.col("last_arrival_ns").is_not_null()
    kern = kern.with_columns(
        pl.when(matched).then(pl.when(matched).then(pl.col("start_ns")).max().over("pg_name", "instance")).alias("last_arrival_ns")
    )
    return points, kern, a.steps


def job_view(a: Analysis, tolerance: float) -> dict[str, Any]:
    """Everything the stragglers view shows (see :func:`traceanalyzer.api.straggler_view`)."""
    from traceanalyzer.classify.stragglers import stragglers

    points, kern, steps = inputs(a)
    per_rank = stragglers(steps, tolerance)
    if points.height == 0:
        costs, total, warnings = pl.DataFrame(schema=COST_SCHEMA), 0.0, []
        rep = pl.DataFrame(schema=REPLAY_SCHEMA)
    else:
        g = rp.replay_graph(points, kern)
        costs, total, warnings = straggler_costs(points, kern, g)
        warnings = [*replay_warnings(points, kern), *warnings]
        rep = rp.replay_table(steps, points, g)
    n_steps = max(points.get_column("step").drop_nulls().n_unique(), 1)
    return {
        "ranks": roles(per_rank, costs),
        "costs": costs,
        "total_cost_ms_per_step": total,
        "replay": rep,
        "wait_matrix": wait_matrix(kern, n_steps),
        "warnings": warnings,
    }
