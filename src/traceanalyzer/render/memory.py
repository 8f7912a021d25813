"""Renderers of the memory estimate and the measured memory: sections for tables / markdown,
a JSON document, a CSV table. Formatting only: every number comes from
:func:`traceanalyzer.reconciliation.footprint.memory`."""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.hardware import GIB
from traceanalyzer.render.predictions import Section, num, pct


def _gib(x: Any, digits: int = 2) -> str:
    return "—" if x is None else f"{x / GIB:,.{digits}f}"


def estimate_sections(est: Any, fit_row: dict[str, Any] | None = None, title: str = "Predicted memory per GPU") -> list[Section]:
    """Components of the most loaded stage, then total, device memory, reserve and verdict."""
    total = est.total_bytes
    p = len(est.stages)
    s = Section(f"{title} — pipeline stage {est.stage} of {p} (the most loaded)", ["component", "GiB", "share", "what"])
    for k, what in est.component_notes.items():
        v = est.components[k]
        if v == 0:
            continue
        s.rows.append([k.replace("_", " "), _gib(v), pct(v / total if total else 0.0), what])
    s.rows.append(["= total", _gib(total), pct(1.0), f"{num(est.params / 1e9, 3)} B parameters on this GPU, ZeRO stage {est.zero_stage}"])
    if fit_row is not None and est.capacity_bytes is not None:
        s.rows.append(["device memory", _gib(est.capacity_bytes), "", ""])
        s.rows.append(["reserve", _gib(fit_row["reserve_bytes"]), "", "context, NCCL/cuBLAS buffers, fragmentation"])
        head = fit_row["headroom_bytes"]
        s.rows.append(["headroom", _gib(head), "", "FITS" if head >= 0 else "DOES NOT FIT"])
    s.notes += list(est.notes)
    if p > 1:
        s.notes.append("stage totals (GiB): " + ", ".join(_gib(sum(c.values()), 1) for c in est.stages))
    return [s]


def measured_sections(measured: pl.DataFrame, copies: pl.DataFrame, predicted_total: float | None = None) -> list[Section]:
    out = []
    if measured.height:
        cols = ["rank", "device", "peak allocated GiB", "at (s from first event)", "step", "peak reserved GiB", "source"]
        # "at"/"step": of the peak allocated; of the peak reserved where allocated is unknown (nsys)
        if predicted_total:
            cols.insert(3, "vs predicted")
        s = Section("Measured memory (allocator record)", cols)
        for r in measured.iter_rows(named=True):  # one row per rank and device
            at = r["peak_allocated_ns"] if r["peak_allocated_ns"] is not None else r["peak_reserved_ns"]
            row = [str(r["rank"]), r["device"], _gib(r["peak_allocated"]),
                   num((at - r["first_ns"]) / 1e9, 3) if at is not None else "—",
                   "—" if r["peak_step"] is None else str(r["peak_step"]), _gib(r["peak_reserved"]), r["source"]]
            if predicted_total:
                row.insert(3, pct(r["peak_allocated"] / predicted_total) if r["peak_allocated"] is not None else "—")
            s.rows.append(row)
        out.append(s)
    if copies.height:
        s = Section("Copies (memcpy / memset)", ["rank", "kind", "name", "count", "MB", "busy ms", "GB/s"])
        for r in copies.iter_rows(named=True):  # one row per rank and copy kind
            s.rows.append([str(r["rank"]), r["kind"], r["name"], str(r["count"]), num(r["bytes"] / 1e6, 1),
                           num(r["busy_ns"] / 1e6, 3), num(r["gb_per_s"], 1)])
        out.append(s)
    return out


def document(result: Any, reserve_bytes: float, with_timeline: bool = True) -> dict[str, Any]:
    """The JSON document of the ``memory`` command (schema ``traceanalyzer.memory``)."""
    doc: dict[str, Any] = {
        "schema": "traceanalyzer.memory",
        "schema_version": 1,
        "predicted": None if result.estimate is None else result.estimate.as_dict(reserve_bytes),
        "fit": result.fit.to_dicts()[0] if result.fit.height else None,
        "measured": result.measured.to_dicts(),
        "copies": result.copies.to_dicts(),
    }
    if with_timeline:
        doc["timeline"] = result.timeline.to_dict(as_series=False)
    doc["warnings"] = result.warnings
    return doc


def sections(result: Any) -> list[Section]:
    """The sections of ``memory``'s table: the prediction (when a configuration was given) and
    the measured peaks beside it."""
    out: list[Section] = []
    total = None
    if result.estimate is not None:
        out += estimate_sections(result.estimate, result.fit.to_dicts()[0])
        total = result.estimate.total_bytes
    return out + measured_sections(result.measured, result.copies, total)


def csv_text(result: Any, measured: bool) -> str:
    """``memory``'s CSV: the allocator timeline when a trace was ``measured``, else the predicted
    components."""
    frame: pl.DataFrame = result.timeline if measured else result.predicted
    return frame.write_csv()
