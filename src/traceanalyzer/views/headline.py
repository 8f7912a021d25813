"""The report's headline: finding 1 (the loss ``breakdown`` lists first, a cause within a bucket),
then the mean step time, the slowest rank and the compute share, with achieved TFLOP/s and MFU
where the reconciler gave them.

The headline's ``title`` is finding 1 worded as ``breakdown`` prints it (``label: X ms per step
(Y% of the step)``), so that the report and the terminal lead with the same loss; ``biggest_loss``
(the largest bucket) stays in the model for the partition's sake, never as the headline.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.buckets import BUCKET_LABELS as LABELS

#: the buckets that are losses (everything but compute)
LOSSES = ["recompute", "exposed_comm", "other", "idle"]

_MS = 1e6  # ns per ms


def finding_title(f: dict[str, Any]) -> str:
    """A finding in one line, as ``breakdown``'s findings list words it (without its number)."""
    return f"{f['label']}: {f['ms_per_step']:.3f} ms per step ({100 * f['share_of_step']:.1f}% of the step)"


#: the title when no cause reaches a finding's threshold
NO_FINDING = "No single loss of 1% of the step or more"


def headline(totals: pl.DataFrame, ranks: list[dict], slowest: int, wf: dict | None,
             found: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline of the model; ``found``: the findings, largest first (the model's ``findings``)."""
    n_rank_steps = int(totals.get_column("steps").sum())
    dur = int(totals.get_column("duration_ns").sum())
    losses = {b: int(totals.get_column(f"{b}_ns").sum()) for b in LOSSES}
    step_ms = dur / n_rank_steps / _MS
    biggest = max(LOSSES, key=lambda b: losses[b])
    big = None
    if losses[biggest] > 0:
        big = {
            "bucket": biggest,
            "label": LABELS[biggest],
            "ms": losses[biggest] / n_rank_steps / _MS,
            "pct": 100 * losses[biggest] / dur if dur else 0.0,
        }
    n_ranks = len(ranks)
    slow_ms = next(r["step_ms"] for r in ranks if r["rank"] == slowest)
    scope = f"{n_ranks} rank{'s' if n_ranks != 1 else ''}, {n_rank_steps} rank-step{'s' if n_rank_steps != 1 else ''}"
    context = f"Mean step time {step_ms:.3f} ms ({scope})"
    if n_ranks > 1:
        context += f", slowest rank {slowest} at {slow_ms:.3f} ms"
    context += "."
    first = None
    if found:
        first = {**found[0], "pct_of_step": 100 * found[0]["share_of_step"]}
        title = finding_title(found[0])
    else:
        title = NO_FINDING if big else "No loss: compute covers every step entirely"
    head = {
        "step_ms": step_ms,
        "ranks": n_ranks,
        "rank_steps": n_rank_steps,
        "slowest_rank": slowest,
        "slowest_rank_step_ms": slow_ms,
        "compute_pct": 100 * int(totals.get_column("compute_ns").sum()) / dur if dur else 0.0,
        "biggest_loss": big,
        "finding": first,
        "achieved_tflops": None,
        "mfu": None,
        "hfu": None,
        "mfu_pct": None,
        "hfu_pct": None,
        "peak_tflops": None,
        "achieved_tflops_unprofiled": None,
        "mfu_unprofiled_pct": None,
        "title": title,
        "context": context,
        "sentence": "",
    }
    if wf:
        for k in ("achieved_tflops", "mfu", "hfu", "peak_tflops"):
            head[k] = wf.get(k)
        for k in ("mfu", "hfu"):  # the same number as a percentage, as every renderer shows it
            head[f"{k}_pct"] = None if wf.get(k) is None else 100 * wf[k]
        un = wf.get("unprofiled") or {}
        head["achieved_tflops_unprofiled"] = un.get("achieved_tflops")
        head["mfu_unprofiled_pct"] = None if un.get("mfu") is None else 100 * un["mfu"]
        if wf.get("achieved_tflops") is not None:
            extra = f" Achieved {wf['achieved_tflops']:.1f} TFLOP/s per GPU"
            if wf.get("mfu") is not None:
                extra += f", MFU {100 * wf['mfu']:.1f}%"
            if un.get("achieved_tflops") is not None and wf.get("mfu") and abs(un["mfu"] / wf["mfu"] - 1) > 0.05:
                extra += (f" as measured in the trace; {un['achieved_tflops']:.1f} TFLOP/s, MFU {100 * un['mfu']:.1f}% "
                          "on the unprofiled estimate")
            head["context"] += extra + "."
    head["sentence"] = f"Finding 1: {title}. {head['context']}" if first else f"{title}. {head['context']}"
    return head
