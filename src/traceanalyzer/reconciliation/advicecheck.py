"""The advice of run A checked against the next run B: did the predicted gain come?

The user applies a finding's remedy, profiles again and compares the two traces. For every
finding of A (:func:`.findings.findings`), :func:`check_advice` puts beside it what B measured:
``measured_gain_ms`` (A's mean step minus B's, per rank-step: positive when B is faster),
``b_ms_per_step`` (the same loss in B's partition) and ``loss_change_ms`` (A's loss minus B's),
and when the finding had a predicted gain, ``error`` ((predicted − measured) / measured) and a
``verdict``: ``came`` (within :data:`CAME_WITHIN` of the prediction), ``partly`` (the step got
shorter, by less), ``more`` (by more), ``none`` (not shorter).
"""

from __future__ import annotations

from typing import Any

#: a measured gain within this share of the predicted one: the gain came
CAME_WITHIN = 0.10


def _mean_ms(analysis, col: str) -> float | None:
    st = analysis.steps
    if st.height == 0 or col not in st.columns:
        return None
    return float(st[col].sum()) / st.height / 1e6


def _verdict(pred: float, measured: float) -> str:
    if measured <= 0:
        return "none"
    if abs(measured - pred) <= CAME_WITHIN * abs(pred):
        return "came"
    return "partly" if measured < pred else "more"


def check_advice(found: list[dict[str, Any]], a, b) -> list[dict[str, Any]]:
    """One row per finding of ``a`` (``found``), with what ``b`` measured beside it."""
    step_a, step_b = _mean_ms(a, "duration_ns"), _mean_ms(b, "duration_ns")
    measured = None if step_a is None or step_b is None else step_a - step_b
    rows = []
    for f in found:
        in_b = _mean_ms(b, f"{f['loss']}_ns")
        if in_b is None and f["loss"].startswith("exposed_comm_"):
            in_b = 0.0  # B has no exposed communication of that dimension at all
        pred = f.get("predicted_gain_ms")
        row = {"loss": f["loss"], "label": f["label"], "a_ms_per_step": f["ms_per_step"], "predicted_gain_ms": pred,
               "change": f.get("change"), "b_ms_per_step": None if in_b is None else round(in_b, 6),
               "loss_change_ms": None if in_b is None else round(f["ms_per_step"] - in_b, 6),
               "measured_gain_ms": None if measured is None else round(measured, 6), "error": None, "verdict": None}
        if pred is not None and measured is not None:
            row["error"] = round((pred - measured) / measured, 6) if measured else None
            row["verdict"] = _verdict(pred, measured)
        rows.append(row)
    return rows
