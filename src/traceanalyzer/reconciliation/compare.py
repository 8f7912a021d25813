"""Two runs side by side: the gap split exactly into its causes.

Public surface: :func:`compare` (two waterfalls -> the gap in achieved TFLOP/s split exactly into
the differences of the waterfall terms, biggest first), :func:`compare_time` (two analyses
without a run configuration -> the gap in mean step time split into the time buckets).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from traceanalyzer.classify import Analysis
from traceanalyzer.errors import ConfigError
from traceanalyzer.reconciliation.buckets import loss_columns


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Split achieved(A) − achieved(B) into differences of the waterfall terms, exactly.

    achieved = peak − Σ losses, so the gap = (peak_A − peak_B) − Σ_k (loss_A,k − loss_B,k);
    each term's contribution is listed (biggest magnitude first) and they sum to the gap exactly.
    """
    if a["convention"] != b["convention"]:
        raise ConfigError(f"the two waterfalls use different FLOPs conventions ({a['convention']} vs {b['convention']}): "
                          "pass the same --convention")
    ea, eb = a["exact"], b["exact"]
    keys = [k for k in ea if k != "achieved"] + [k for k in eb if k not in ea]
    contrib: dict[str, Fraction] = {}
    pa, pb = Fraction(str(a["peak_tflops"])), Fraction(str(b["peak_tflops"]))
    if pa != pb:
        contrib["peak"] = pa - pb
    for k in keys:
        contrib[k] = eb.get(k, Fraction(0)) - ea.get(k, Fraction(0))
    gap = ea["achieved"] - eb["achieved"]
    assert sum(contrib.values()) == gap
    order = sorted(contrib, key=lambda k: -abs(contrib[k]))
    return {
        "a": a["trace"], "b": b["trace"], "convention": a["convention"],
        "achieved_a": float(ea["achieved"]), "achieved_b": float(eb["achieved"]), "gap": float(gap),
        "terms": [{"term": k, "a": float(ea.get(k, pa if k == "peak" else 0)), "b": float(eb.get(k, pb if k == "peak" else 0)),
                   "contribution": float(contrib[k])} for k in order],
        "sum_contributions": float(sum(contrib.values())),
        "exact": {"gap": gap, **contrib},
    }


def compare_time(a: Analysis, b: Analysis) -> dict[str, Any]:
    """Without a run configuration: the gap in mean step time (B − A) split exactly into the
    differences of the mean time buckets (same buckets and causes as the waterfall).

    Each step is an exact partition, so mean step time = Σ mean buckets and the per-bucket
    differences sum to the step-time gap exactly (``exact`` holds them as fractions of ns).
    """
    def means(an: Analysis) -> tuple[dict[str, Fraction], Fraction]:
        n = an.steps.height
        cols = loss_columns(an.steps)
        return {k: Fraction(v, n) for k, v in cols.items()}, Fraction(int(an.steps["duration_ns"].sum()), n)

    ma, ta = means(a)
    mb, tb = means(b)
    keys = list(ma) + [k for k in mb if k not in ma]
    contrib = {k: mb.get(k, Fraction(0)) - ma.get(k, Fraction(0)) for k in keys}
    gap = tb - ta
    assert sum(contrib.values()) == gap
    order = sorted(contrib, key=lambda k: -abs(contrib[k]))
    src = lambda an: ", ".join(str(s) for s in an.trace.sources)  # noqa: E731
    return {
        "a": src(a), "b": src(b), "unit": "ms per step (mean over ranks and steps)",
        "step_ms_a": float(ta) / 1e6, "step_ms_b": float(tb) / 1e6, "gap_ms": float(gap) / 1e6,
        "terms": [{"term": k, "a_ms": float(ma.get(k, 0)) / 1e6, "b_ms": float(mb.get(k, 0)) / 1e6,
                   "contribution_ms": float(contrib[k]) / 1e6} for k in order],
        "sum_contributions_ms": float(sum(contrib.values())) / 1e6,
        "exact": {"gap_ns": gap, **{f"{k}_ns": v for k, v in contrib.items()}},
    }
