"""The HTML report's plots as inline SVG (:mod:`traceanalyzer.render.svg`), a hover text on
every mark. Formatting only: each value and each hover number is read from the report model
(:mod:`traceanalyzer.views.document`), in the tables' formats; the Markdown report keeps the
PNG plots of :mod:`traceanalyzer.render.plots` (same colours, same layout).
"""

from __future__ import annotations

from typing import Any

from traceanalyzer.buckets import BUCKET_COLORS, BUCKET_LABELS as LABELS
from traceanalyzer.buckets import BUCKETS as BUCKET_ORDER
from traceanalyzer.render import svg
from traceanalyzer.render.sections import MS, PCT, TFLOPS

#: the waterfall's bars that are not buckets (as in :mod:`traceanalyzer.render.plots`)
PEAK, ACHIEVED, KERNEL_EFFICIENCY, OTHER_LOSS = "#555555", "#009E73", "#E69F00", "#BBBBBB"
LEGEND = [(LABELS[b], BUCKET_COLORS[b]) for b in BUCKET_ORDER]


def _f(fmt: str, v: float) -> str:
    text = fmt.format(v)
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def partition(model: dict[str, Any], step: int | None = None) -> str:
    """Per rank, the mean step (``step`` None) or that step, as stacked bars of the buckets."""
    rows = []
    if step is None:
        for r in model["ranks"]:
            marks = [svg.Mark(r["buckets"][b]["ms"], BUCKET_COLORS[b], f"rank {r['rank']} · {LABELS[b]}: {_f(MS, r['buckets'][b]['ms'])} ms "
                              f"per step ({_f(PCT, r['buckets'][b]['pct'])}% of the step)", b) for b in BUCKET_ORDER]
            rows.append((f"rank {r['rank']}", f"rank {r['rank']}: {_f(MS, r['step_ms'])} ms per step, {r['steps']} step(s)", marks))
        title, plot_id = "GPU time per rank: partition of the mean step", "plot-partition"
    else:
        for s in model["steps"]:
            if s["step"] != step:
                continue
            marks = [svg.Mark(s[f"{b}_ms"], BUCKET_COLORS[b], f"rank {s['rank']} · step {step} · {LABELS[b]}: {_f(MS, s[f'{b}_ms'])} ms "
                              f"of {_f(MS, s['duration_ms'])} ms", b) for b in BUCKET_ORDER]
            rows.append((f"rank {s['rank']}", f"rank {s['rank']}, step {step}: {_f(MS, s['duration_ms'])} ms", marks))
        title, plot_id = f"GPU time per rank: partition of step {step}", f"plot-partition-step-{step}"
    axis = "mean time per step (ms)" if step is None else "time in the step (ms)"
    return svg.hbars(plot_id, title, rows, axis, LEGEND)


def timeline(model: dict[str, Any], tl: dict[str, Any]) -> str:
    """One rank's steps, one row each: the bucket of every moment, from the step's start."""
    rank = tl["rank"]
    totals = {s["step"]: s for s in model["steps"] if s["rank"] == rank}
    rows: dict[int, svg.Row] = {}
    for s in tl["steps"]:
        tot = totals.get(s["step"])
        groups = {b: f"step {s['step']} · {LABELS[b]}: {_f(MS, tot[f'{b}_ms'])} ms of {_f(MS, tot['duration_ms'])} ms"
                  for b in BUCKET_ORDER} if tot else {}
        rows[s["step"]] = svg.Row(f"step {s['step']}", {}, groups)
    runs = tl["runs"]
    for step, start, end, b in zip(runs["step"], runs["start_ms"], runs["end_ms"], runs["bucket"]):
        rows[step].spans.setdefault(b, []).append((start, end, f"step {step} · {LABELS[b]} from {_f(MS, start)} to {_f(MS, end)} ms"))
    longest = max((s["duration_ms"] for s in tl["steps"]), default=1.0) or 1.0
    return svg.spans(f"plot-timeline-rank-{rank}", f"Rank {rank}: bucket of every moment, per step", list(rows.values()),
                     BUCKET_COLORS, longest, "time since the step's first GPU activity (ms)", LEGEND)


def heatmap(model: dict[str, Any]) -> str:
    """Ranks x buckets, % of the step, the numbers in the cells when they fit."""
    ranks = model["ranks"]
    cells: list[list[svg.Mark | None]] = [[svg.Mark(r["buckets"][b]["pct"], "", f"rank {r['rank']} · {LABELS[b]}: {_f(PCT, r['buckets'][b]['pct'])}% of the step "
                       f"({_f(MS, r['buckets'][b]['ms'])} ms per step)", b) for b in BUCKET_ORDER] for r in ranks]
    texts = [[_f(PCT, r["buckets"][b]["pct"]) for b in BUCKET_ORDER] for r in ranks] if len(ranks) <= 40 else None
    return svg.heatmap("plot-heatmap", "Share of the step per rank and bucket (%)", [f"rank {r['rank']}" for r in ranks],
                       [LABELS[b] for b in BUCKET_ORDER], cells, texts, 100.0, "% of step")


def wait_matrix(model: dict[str, Any], m: dict[str, Any]) -> str:
    """Who waited on whom in one collective: rank that waited (rows) x rank waited on (columns),
    ms per step; the numbers in the cells when they fit."""
    ranks, grid = m["ranks"], m["wait_ms"]
    top = max((max(row) for row in grid), default=0.0) or 1.0
    # a pair with no wait has no cell (most pairs: the page stays small)
    cells = [[svg.Mark(v, "", f"rank {ranks[i]} waited {_f(MS, v)} ms per step on rank {ranks[j]} in {m['collective']} ({m['group']})",
                       f"{ranks[i]}-{ranks[j]}") if v else None for j, v in enumerate(row)] for i, row in enumerate(grid)]
    texts = [[_f("{:.2f}", v) if v else "" for v in row] for row in grid] if len(ranks) <= 12 else None
    return svg.heatmap(f"plot-waits-{m['collective']}-{m['group']}", f"{m['collective'].replace('_', '-')} ({m['group']}): "
                       "rank that waited (rows) on the rank that arrived last (columns), ms per step",
                       [f"rank {r}" for r in ranks], [str(r) for r in ranks], cells, texts, top, "ms per step")


def _term_color(key: str) -> str:
    for b in BUCKET_ORDER:
        if key == b or key.startswith(b + "_"):
            return BUCKET_COLORS[b]
    return KERNEL_EFFICIENCY if key.startswith("kernel") else OTHER_LOSS


def waterfall(model: dict[str, Any]) -> str | None:
    """Peak TFLOP/s per GPU down to achieved: one floating column per loss term (None without one).
    A term's column starts at the level the terms before it left (the peak minus those terms),
    in the model's order, as the table lists them; terms that round to zero have no column."""
    wf = model.get("waterfall")
    if not wf:
        return None
    cols = [("peak", 0.0, svg.Mark(wf["peak_tflops"], PEAK, f"peak: {_f(TFLOPS, wf['peak_tflops'])} TFLOP/s per GPU", "peak"),
             _f(TFLOPS, wf["peak_tflops"]))]
    level = wf["peak_tflops"]
    for t in wf["terms"]:
        level -= t["tflops"]  # layout: where the column floats
        if not _f(TFLOPS, t["tflops"]).strip("-0."):
            continue  # a term that rounds to zero: no column (nor a row in the table)
        cols.append((t["label"], level, svg.Mark(t["tflops"], _term_color(t["key"]), f"{t['label']}: −{_f(TFLOPS, t['tflops'])} TFLOP/s per GPU",
                                                 t["key"]), f"−{_f(TFLOPS, t['tflops'])}"))
    cols.append(("achieved", 0.0, svg.Mark(wf["achieved_tflops"], ACHIEVED, f"achieved: {_f(TFLOPS, wf['achieved_tflops'])} TFLOP/s per GPU",
                                           "achieved"), _f(TFLOPS, wf["achieved_tflops"])))
    title = "From peak to achieved TFLOP/s per GPU" + (f" ({wf['convention']})" if wf.get("convention") else "")
    return svg.columns("plot-waterfall", title, cols, "TFLOP/s per GPU", width=max(520.0, 90.0 * len(cols) + 80))
