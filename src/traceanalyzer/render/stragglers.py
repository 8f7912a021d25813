"""The ``stragglers`` view: who made the others wait, what each rank's phases cost the job, the
replay against the measured steps, who waited on whom. Formatting only: every number comes from
:func:`traceanalyzer.api.straggler_view`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
import polars as pl

from traceanalyzer._version import __version__

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA = "traceanalyzer.stragglers"  # traceanalyzer/schemas/stragglers.schema.json
SCHEMA_VERSION = 1

#: the per-rank columns of the document (ns columns of the step rule in ms)
RANK_COLUMNS = ["rank", "role", "made_wait_ms_per_step", "waited_ms_per_step", "top_phase", "top_collective", "top_cost_ms_per_step",
                "steps", "slow_steps", "slowest_steps", "excess_ms", "bucket"]


def rank_rows(ranks: pl.DataFrame) -> pl.DataFrame:
    return ranks.with_columns((pl.col("excess_ns") / 1e6).alias("excess_ms")).select(RANK_COLUMNS)


def document(view: dict[str, Any], tolerance: float) -> dict[str, Any]:
    """The JSON document (schema ``traceanalyzer.stragglers``)."""
    return {
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION, "version": __version__,
        "tolerance_pct": 100 * tolerance,
        "total_cost_ms_per_step": view["total_cost_ms_per_step"],
        "ranks": rank_rows(view["ranks"]).to_dicts(),
        "costs": view["costs"].to_dicts(),
        "replay": view["replay"].to_dicts(),
        "wait_matrix": view["wait_matrix"].to_dicts(),
        "warnings": list(view["warnings"]),
    }


def json_bytes(view: dict[str, Any], tolerance: float) -> bytes:
    return orjson.dumps(document(view, tolerance), option=orjson.OPT_INDENT_2) + b"\n"


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def print_view(view: dict[str, Any], console: Console, top: int = 10) -> None:
    from rich.table import Table

    ranks = view["ranks"]
    for role, title in (("made others wait", "Made others wait: ranks the others waited for (they arrived last)"),
                        ("waited", "Waited: ranks that waited for the others")):
        rows = ranks.filter(pl.col("role") == role)
        if role == "made others wait":
            rows = rows.sort(["top_cost_ms_per_step", "made_wait_ms_per_step"], descending=True, nulls_last=True)
        else:
            rows = rows.sort("waited_ms_per_step", descending=True)
        if rows.height == 0:
            continue
        t = Table(title=title, title_justify="left")
        for col in ("rank", "made wait ms/step", "waited ms/step", "costs the job ms/step", "in phase", "before / of",
                    "slow steps", "slow in"):
            t.add_column(col, justify="left" if col in ("in phase", "before / of", "slow in") else "right")
        for r in rows.head(top).iter_rows(named=True):  # at most ``top`` rows
            t.add_row(str(r["rank"]), _ms(r["made_wait_ms_per_step"]), _ms(r["waited_ms_per_step"]), _ms(r["top_cost_ms_per_step"]),
                      (r["top_phase"] or "-").replace("_", " "), r["top_collective"] or ("step end" if r["top_phase"] else "-"),
                      f"{r['slow_steps']} of {r['steps']}", (r["bucket"] or "-").replace("_", " "))
        console.print(t)
    costs = view["costs"].filter(pl.col("cost_ms_per_step") > 0)
    if costs.height == 0:
        console.print("No rank costs the job anything: no rank's phase is longer than the median rank's where it holds the others.")
    t = Table(title=f"What each straggler costs the job: step time saved had the rank run that phase like the median rank (top {top})",
              title_justify="left",
              caption=f"every rank made typical at once: {view['total_cost_ms_per_step']:.3f} ms per step", caption_justify="left")
    for col in ("rank", "phase", "collective", "group", "cost ms/step", "made wait ms/step", "waited ms/step"):
        t.add_column(col, justify="left" if col in ("phase", "collective", "group") else "right")
    for r in costs.head(top).iter_rows(named=True):  # at most ``top`` rows
        t.add_row(str(r["rank"]), r["phase"].replace("_", " "), r["collective"] or "step end", r["group"] or "-", _ms(r["cost_ms_per_step"]),
                  _ms(r["made_wait_ms_per_step"]), _ms(r["waited_ms_per_step"]))
    if costs.height:
        console.print(t)
    rep = view["replay"]
    if rep.height:
        err = ((rep["replayed_ms"] - rep["measured_ms"]).abs() / rep["measured_ms"]).max()
        console.print(f"replay of the measured job: {rep.height} rank steps, largest difference from the measured step "
                      f"{100 * (err or 0):.3f} %")
