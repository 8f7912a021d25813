"""The report's cross-rank part: what each straggler costs the job (the cross-rank replay,
:mod:`traceanalyzer.classify.stragglercost`), the ranks that made the others wait, and who waited
on whom per collective, as plain JSON-ready values."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.classify import Analysis
from traceanalyzer.classify.rankspread import RANK_SUMMARY_THRESHOLD


#: above this many ranks the report's wait matrix is left out (the API's wait_matrix has every
#: pair): the threshold above which the report summarises the ranks (a matrix grows as ranks²)
MATRIX_RANKS = RANK_SUMMARY_THRESHOLD


def straggler_costs(analysis: Analysis, top: int) -> dict[str, Any] | None:
    """What each straggler costs the job (the cross-rank replay), the ranks that made the others
    wait, and who waited on whom per collective (a rank x rank matrix, up to
    :data:`MATRIX_RANKS` ranks); None for one rank or no collective."""
    from traceanalyzer.classify.stragglercost import MADE_WAIT

    if analysis.steps.get_column("rank").n_unique() < 2 or analysis.collectives is None or analysis.collectives.height == 0:
        return None
    v = analysis.straggler_view()  # at the default tolerance
    rep = v["replay"]
    err = ((rep["replayed_ms"] - rep["measured_ms"]).abs() / rep["measured_ms"]).max() if rep.height else None
    ranks = sorted(analysis.steps.get_column("rank").unique().to_list())
    matrices = []
    m = v["wait_matrix"]
    if len(ranks) <= MATRIX_RANKS and m.height:
        pos = {r: i for i, r in enumerate(ranks)}
        for (coll, group), part in m.group_by(["collective", "group"], maintain_order=True):
            grid = [[0.0] * len(ranks) for _ in ranks]
            for r, on, w in part.select("rank", "on_rank", "wait_ms_per_step").iter_rows():  # at most ranks² rows
                grid[pos[r]][pos[on]] = w
            matrices.append({"collective": coll, "group": group, "ranks": ranks, "wait_ms": grid,
                             "total_ms": float(part.get_column("wait_ms_per_step").sum())})
        matrices.sort(key=lambda x: -x["total_ms"])
    made = v["ranks"].filter(pl.col("role") == MADE_WAIT).sort("made_wait_ms_per_step", descending=True)
    return {
        "total_cost_ms_per_step": v["total_cost_ms_per_step"],
        "replay_max_error_pct": None if err is None else 100 * float(err),
        "costs": v["costs"].filter(pl.col("cost_ms_per_step") > 0).head(top).to_dicts(),
        "made_wait": made.select("rank", "made_wait_ms_per_step", "waited_ms_per_step", "top_phase", "top_collective",
                                 "top_cost_ms_per_step").head(top).to_dicts(),
        "wait_matrix": matrices,
        "warnings": v["warnings"],
    }
