"""Sections for ``traceanalyzer plan`` (formatting only: numbers come from :func:`traceanalyzer.model.runplan.plan_run`)."""

from __future__ import annotations

from typing import Any

from traceanalyzer.render.predictions import Section, num, sci


def _row(label: str, d: dict[str, float] | None, digits: int = 1, scale: float = 1.0, unit: str = "") -> list[str]:
    if d is None:
        return [label, "—", "—", "—"]
    return [label + unit, *[num(d[k] * scale, digits) for k in ("low", "expected", "high")]]


def plan_sections(p: dict[str, Any]) -> list[Section]:
    head = Section("Training-run plan", ["quantity", "value"])
    head.rows += [
        ["tokens", sci(p["tokens"])],
        ["parameters", f"{sci(p['params'])} ({p['params_source']})"],
        ["FLOPs convention", p["convention_note"]],
        ["FLOPs per token", sci(p["flops_per_token"])],
        ["total FLOPs", sci(p["total_flops"])],
        ["GPU", p["gpu"] or "—"],
        ["GPUs", "—" if p["gpus"] is None else f"{p['gpus']:,}"],
        ["throughput", p["throughput_source"]],
    ]
    res = Section("Time, energy and cost", ["", "low", "expected", "high"])
    res.rows += [
        _row("throughput, TFLOP/s per GPU", p["throughput_tflops_per_gpu"]),
        _row("GPU-hours without margins", p["gpu_hours_ideal"], 0),
        _row("margin factor", p["margin_factor"], 3),
        _row("GPU-hours", p["gpu_hours"], 0),
        _row("wall-clock days", p["wall_clock_days"], 2),
        _row(f"energy, MWh (GPUs at {p['gpu_power_w']:g} W, PUE {p['pue']:g})" if p["gpu_power_w"] else "energy, MWh", p["energy_mwh"], 1),
        _row(f"cost (at {p['price_per_gpu_hour']} per GPU-hour)" if p["price_per_gpu_hour"] is not None else "cost", p["cost"], 0),
    ]
    res.notes += p["notes"]
    mar = Section("Margins (fraction of the ideal time)", ["margin", "low", "high", "source"])
    for k, v in p["margins"].items():
        mar.rows.append([k, f"{100 * v['low']:.1f} %", f"{100 * v['high']:.1f} %", v["source"]])
    return [head, res, mar]
