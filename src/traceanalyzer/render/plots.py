"""Plots of a report model, as PNG bytes (matplotlib, Agg canvas: no display needed).

Formatting only: every number comes from the report model (:mod:`traceanalyzer.views.document`).
Colours: the Okabe–Ito colour-blind-safe palette, one fixed colour per bucket in every plot and
in the HTML/Markdown legends. Figures have a white background with mid-tone colours and dark
text, so they stay legible when pasted into a light or a dark ticket theme.
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Patch

# the buckets' order, labels and colours: one source for the classifiers and every output
from traceanalyzer.buckets import BUCKET_COLORS, BUCKET_LABELS as LABELS
from traceanalyzer.buckets import BUCKETS as BUCKET_ORDER
from traceanalyzer.render import units

#: the buckets' colours and those of the waterfall's other bars (Okabe & Ito (2008), "Color
#: Universal Design": distinguishable with every common colour-vision deficiency)
COLORS = {
    **BUCKET_COLORS,
    "achieved": "#009E73",
    "peak": "#555555",
    "kernel_efficiency": "#E69F00",  # orange
    "loss": "#D9D9D9",  # other waterfall terms: light grey, hatched
}
TEXT = "#222222"
GRID = "#DDDDDD"
DPI = 110
HEATMAP_CMAP = "cividis"  # perceptually uniform and colour-blind safe


def _fig(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, facecolor="white", layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(ax: Axes) -> None:
    ax.set_facecolor("white")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#888888")
    ax.tick_params(colors=TEXT, labelsize=9)
    ax.xaxis.label.set_color(TEXT)
    ax.yaxis.label.set_color(TEXT)
    ax.title.set_color(TEXT)


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", facecolor="white", metadata={"Software": None})
    return buf.getvalue()


def _legend(ax_or_fig: Axes | Figure, keys: list[str], **kw: Any) -> Legend:
    handles = [Patch(facecolor=COLORS[k], edgecolor="none", label=LABELS.get(k, k)) for k in keys]
    leg: Legend = ax_or_fig.legend(handles=handles, frameon=False, fontsize=9, labelcolor=TEXT, **kw)
    return leg


def partition_bars(model: dict[str, Any]) -> bytes:
    """Mean step per rank as horizontal stacked bars of the buckets (ms)."""
    ranks = model["ranks"]
    n = len(ranks)
    fig = _fig(8.0, min(1.6 + 0.32 * n, 14.0))
    ax = fig.add_subplot()
    _style(ax)
    ys = list(range(n))
    left = [0.0] * n
    for b in BUCKET_ORDER:
        widths = [r["buckets"][b]["ms"] for r in ranks]
        ax.barh(ys, widths, left=left, color=COLORS[b], height=0.72, edgecolor="white", linewidth=0.4, label=LABELS[b])
        left = [x + w for x, w in zip(left, widths)]
    ax.set_yticks(ys, [f"rank {r['rank']}" for r in ranks] if n <= 64 else [""] * n)
    ax.invert_yaxis()
    ax.set_xlabel("mean time per step (ms)")
    ax.set_title("GPU time per rank: partition of the mean step", loc="left", fontsize=11)
    ax.grid(axis="x", color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_xlim(0, max(left) * 1.02 if max(left) > 0 else 1)
    _legend(fig, BUCKET_ORDER, loc="outside lower center", ncols=5)
    return _png(fig)


def timeline(model: dict[str, Any]) -> bytes:
    """The chosen rank's steps, one row each: the bucket of every moment, from the step start."""
    tl = model["timeline"]
    steps = tl["steps"]
    n = len(steps)
    row_of = {s["step"]: i for i, s in enumerate(steps)}
    fig = _fig(9.0, min(1.7 + 0.42 * n, 16.0))
    ax = fig.add_subplot()
    _style(ax)
    runs = tl["runs"]
    per_bucket: dict[str, dict[int, list[tuple[float, float]]]] = {b: {} for b in BUCKET_ORDER}
    for step, s, e, b in zip(runs["step"], runs["start_ms"], runs["end_ms"], runs["bucket"]):
        per_bucket[b].setdefault(row_of[step], []).append((s, e - s))
    for b in BUCKET_ORDER:
        for row, spans in per_bucket[b].items():
            ax.broken_barh(spans, (row - 0.38, 0.76), facecolors=COLORS[b], edgecolor="none", linewidth=0)
    ax.set_yticks(list(range(n)), [f"step {s['step']}" for s in steps] if n <= 64 else [""] * n)
    ax.set_ylim(n - 0.5, -0.5)
    longest = max((s["duration_ms"] for s in steps), default=1.0) or 1.0
    ax.set_xlim(0, longest * 1.01)
    ax.set_xlabel("time since the step's first GPU activity (ms)")
    ax.set_title(f"Rank {tl['rank']}: bucket of every moment, per step", loc="left", fontsize=11)
    ax.grid(axis="x", color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)
    _legend(fig, BUCKET_ORDER, loc="outside lower center", ncols=5)
    return _png(fig)


def heatmap(model: dict[str, Any]) -> bytes:
    """Ranks x buckets, % of the step, numbers in the cells when they fit."""
    ranks = model["ranks"]
    n = len(ranks)
    data = [[r["buckets"][b]["pct"] for b in BUCKET_ORDER] for r in ranks]
    fig = _fig(6.8, min(1.8 + 0.3 * n, 16.0))
    ax = fig.add_subplot()
    _style(ax)
    im = ax.imshow(data, cmap=HEATMAP_CMAP, vmin=0, vmax=100, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(BUCKET_ORDER)), [LABELS[b] for b in BUCKET_ORDER])
    ax.set_yticks(range(n), [f"rank {r['rank']}" for r in ranks] if n <= 64 else [""] * n)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    if n <= 40:
        for i, row in enumerate(data):
            for j, v in enumerate(row):
                ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=8.5,
                        color="white" if v < 55 else "#111111")
    ax.set_title("Share of the step per rank and bucket (%)", loc="left", fontsize=11)
    cb = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.02)
    cb.ax.tick_params(labelsize=8, colors=TEXT)
    cb.outline.set_visible(False)
    cb.set_label("% of step", color=TEXT, fontsize=9)
    return _png(fig)


def wait_matrix(model: dict[str, Any]) -> bytes | None:
    """Who waited on whom: one rank x rank heatmap per collective (the two with the most wait),
    ms per step; None without a matrix."""
    sc = model.get("straggler_costs") or {}
    mats = (sc.get("wait_matrix") or [])[:2]
    if not mats:
        return None
    n = len(mats[0]["ranks"])
    side = min(2.2 + 0.32 * n, 9.0)
    fig = _fig(side * len(mats) + 1.2, side)
    axes = fig.subplots(1, len(mats), squeeze=False)[0]
    top = max((max(row) for m in mats for row in m["wait_ms"]), default=1.0) or 1.0
    for ax, m in zip(axes, mats):
        _style(ax)
        im = ax.imshow(m["wait_ms"], cmap=HEATMAP_CMAP, vmin=0, vmax=top, aspect="equal", interpolation="nearest")
        ticks = [str(r) for r in m["ranks"]] if n <= 32 else [""] * n
        ax.set_xticks(range(n), ticks)
        ax.set_yticks(range(n), ticks)
        ax.set_xlabel("waited on rank (the last arrival)")
        ax.set_ylabel("rank that waited")
        ax.tick_params(length=0)
        for sp in ax.spines.values():
            sp.set_visible(False)
        if n <= 12:
            for i, row in enumerate(m["wait_ms"]):
                for j, v in enumerate(row):
                    if v:
                        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7.5, color="white" if v < 0.55 * top else "#111111")
        ax.set_title(f"{m['collective'].replace('_', '-')} ({m['group']}): wait, ms/step", loc="left", fontsize=10)
    cb = fig.colorbar(im, ax=list(axes), fraction=0.04, pad=0.02)
    cb.ax.tick_params(labelsize=8, colors=TEXT)
    cb.outline.set_visible(False)
    return _png(fig)


def _term_style(key: str) -> tuple[str, str | None]:
    """A waterfall term's colour: its bucket's (``exposed_comm_tp`` is exposed comm), orange for
    kernel efficiency, else hatched light grey (never a bucket's colour)."""
    for b in BUCKET_ORDER:
        if key == b or key.startswith(b + "_"):
            return COLORS[b], None
    if key.startswith("kernel"):
        return COLORS["kernel_efficiency"], None
    return COLORS["loss"], "//"


def waterfall(model: dict[str, Any]) -> bytes | None:
    """Peak TFLOP/s per GPU down to achieved: one bar per loss term (None without a waterfall)."""
    wf = model.get("waterfall")
    if not wf:
        return None
    terms = wf["terms"]
    labels = ["peak", *[t["label"] for t in terms], "achieved"]
    fig = _fig(max(6.0, 1.1 * len(labels) + 1.5), 4.2)
    ax = fig.add_subplot()
    _style(ax)
    ax.bar(0, wf["peak_tflops"], color=COLORS["peak"], width=0.7)
    level = wf["peak_tflops"]
    for i, t in enumerate(terms, start=1):
        color, hatch = _term_style(t["key"])
        ax.bar(i, t["tflops"], bottom=level - t["tflops"], color=color, width=0.7, hatch=hatch, edgecolor="#555555" if hatch else None,
               linewidth=0.6 if hatch else 0)
        ax.text(i, level + 0.01 * wf["peak_tflops"], units.signed(-t["tflops"], 1), ha="center", va="bottom", fontsize=8.5, color=TEXT)
        level -= t["tflops"]
    last = len(labels) - 1
    ax.bar(last, wf["achieved_tflops"], color=COLORS["achieved"], width=0.7)
    ax.text(0, wf["peak_tflops"] * 1.01, f"{wf['peak_tflops']:.1f}", ha="center", va="bottom", fontsize=8.5, color=TEXT)
    ax.text(last, wf["achieved_tflops"] * 1.01, f"{wf['achieved_tflops']:.1f}", ha="center", va="bottom", fontsize=8.5, color=TEXT)
    ax.set_xticks(range(len(labels)), labels, rotation=20, ha="right")
    ax.set_ylabel("TFLOP/s per GPU")
    ax.set_ylim(0, wf["peak_tflops"] * 1.1)
    title = "From peak to achieved TFLOP/s per GPU"
    if wf.get("convention"):
        title += f" ({wf['convention']})"
    ax.set_title(title, loc="left", fontsize=11)
    ax.grid(axis="y", color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)
    return _png(fig)


#: (file stem, title, function) in report order
PLOTS = [
    ("partition", "Partition per rank", partition_bars),
    ("timeline", "Per-step timeline", timeline),
    ("waterfall", "Waterfall", waterfall),
    ("heatmap", "Cross-rank heatmap", heatmap),
    ("waits", "Who waited on whom", wait_matrix),
]


def render_all(model: dict[str, Any]) -> dict[str, bytes]:
    """Every plot that applies to ``model``: ``{stem: png bytes}`` in report order."""
    out = {}
    for stem, _title, fn in PLOTS:
        png = fn(model)
        if png is not None:
            out[stem] = png
    return out
