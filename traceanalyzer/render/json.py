"""JSON renderer: the breakdown as a versioned document (schema in docs/json-schema.md).

Field names are a contract: keys are only ever added, never renamed or removed, without a
``schema_version`` bump.
"""

from __future__ import annotations

import orjson
import polars as pl

from traceanalyzer import __version__
from traceanalyzer.classify import FIELDS, Analysis

SCHEMA_VERSION = 1
STEP_FIELDS = ["step", "start_us", *[f"{f}_us" for f in FIELDS]]


def document(analysis: Analysis) -> dict:
    meta = {r["rank"]: r for r in analysis.trace.meta.iter_rows(named=True)}
    steps = analysis.steps.select("rank", *STEP_FIELDS).partition_by("rank", as_dict=True, maintain_order=True)
    totals = {r["rank"]: r for r in analysis.totals().iter_rows(named=True)}
    ranks = []
    for (rank,), frame in sorted(steps.items()):
        m = meta.get(rank, {})
        total = totals[rank]
        ranks.append(
            {
                "rank": rank,
                "device": m.get("device_name"),
                "file": m.get("file"),
                "steps": frame.drop("rank").to_dicts(),
                "total": {"steps": total["steps"], **{f"{f}_us": total[f"{f}_us"] for f in FIELDS}},
            }
        )
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceanalyzer", "version": __version__},
        "inputs": [str(s) for s in analysis.trace.sources],
        "ranks": ranks,
        "warnings": list(analysis.warnings),
    }


def dumps(doc: dict) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def steps_frame(doc: dict) -> pl.DataFrame:
    """Inverse view for tests and tools: one row per (rank, step) from a document."""
    return pl.DataFrame([{"rank": r["rank"], **s} for r in doc["ranks"] for s in r["steps"]])
