"""The report's ``waterfall`` section: what the reconciler says, when it is installed and a run
configuration is given, mapped to the section ``docs/report-schema.md`` documents."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from traceanalyzer.classify import Analysis

if TYPE_CHECKING:
    from traceanalyzer.model.config import RunConfig


def waterfall_section(analysis: Analysis, config: RunConfig | None) -> tuple[dict[str, Any] | None, list[str]]:
    """The ``waterfall`` section, from the reconciler when it is installed and a run configuration
    (loaded by the API) is given.

    Calls ``traceanalyzer.reconciliation.waterfall(analysis, config)``; its dict holds
    ``achieved_tflops``, ``peak_tflops``, ``mfu``, ``hfu``, ``convention`` and ``terms`` (each
    ``{term, tflops, ...}``, ``achieved`` first; peak = achieved + sum of the loss terms).
    :func:`normalize_waterfall` maps that to the section documented in ``docs/report-schema.md``.
    """
    if config is None:
        return None, []
    from traceanalyzer.reconciliation import waterfall  # noqa: PLC0415 (the reconciler loads lazily)

    result = waterfall(analysis, config)
    wf = normalize_waterfall(result)
    if wf is None:
        return None, ["the reconciler returned no usable waterfall (need achieved_tflops and peak_tflops)"]
    # the one-line warning when MFU on the unprofiled estimate differs from the measured by > 5 %
    return wf, [w for w in result.get("warnings", []) if w.startswith("the profiler's own host work")]


def normalize_waterfall(result: Any) -> dict[str, Any] | None:
    """Map a reconciler result to the report's ``waterfall`` section (or None)."""
    if result is None:
        return None
    if hasattr(result, "to_dict"):
        result = result.to_dict()
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = dataclasses.asdict(result)
    if not isinstance(result, dict):
        return None
    src = result.get("waterfall", result) if isinstance(result.get("waterfall"), dict) else result
    achieved, peak = _num(src.get("achieved_tflops")), _num(src.get("peak_tflops"))
    if achieved is None or peak is None:
        return None
    terms = []
    for t in src.get("terms") or src.get("losses") or []:  # a handful of terms
        if not isinstance(t, dict):
            continue
        key = str(t.get("key") or t.get("term") or t.get("name") or t.get("label") or "loss")
        if key == "achieved":  # the reconciler lists achieved first; it is not a loss
            continue
        v = _num(t.get("tflops"))
        if v is None:
            continue
        terms.append({"key": key, "label": str(t.get("label") or key.replace("_", " ")), "tflops": v})
    return {
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": _num(src.get("mfu")),
        "hfu": _num(src.get("hfu")),
        "convention": src.get("convention"),
        "terms": terms,
        "residual_tflops": peak - achieved - sum(t["tflops"] for t in terms),
        # TFLOP/s, MFU and HFU on the step without the profiler (null without an estimate)
        "unprofiled": src.get("unprofiled") if isinstance(src.get("unprofiled"), dict) else None,
    }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
