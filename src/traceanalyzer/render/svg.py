"""Plots as inline SVG: stacked horizontal bars, a heatmap, floating columns and spans on rows.

Every mark (bar, cell, column, span) carries a ``<title>``: the browser shows it on hover, with
JavaScript on or off, and a screen reader reads it. The primitives draw what they are given:
the values, their labels and the hover texts come from the caller (formatted from the report
model); the only arithmetic here is the layout (pixels, ticks, colour scale). Nothing refers to
anything outside the SVG, so a page that inlines it stays self-contained.

A new plot in the HTML report: build the rows (labels, values, hover texts) from the model in
the section function and call :func:`hbars`, :func:`heatmap`, :func:`columns` or :func:`spans`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

TEXT = "#222222"
MUTED = "#666666"
GRID = "#DDDDDD"
FONT = 'font-family="-apple-system,Segoe UI,Helvetica Neue,Arial,sans-serif"'
#: matplotlib's cividis (perceptually uniform, colour-blind safe) at 0, 0.1, ... 1
CIVIDIS = ["#00224e", "#083370", "#35456c", "#4f576c", "#666970", "#7d7c78", "#948e77", "#aea371", "#c8b866", "#e5cf52", "#fee838"]


@dataclass
class Mark:
    """One bar segment, heatmap cell or column: its value (in the plot's unit), colour and hover text."""

    value: float
    color: str
    title: str
    key: str = ""  # e.g. the bucket: written as ``data-key`` for tests and styling


def _n(x: float) -> str:
    """A coordinate with at most one decimal, no trailing zero."""
    s = f"{x:.1f}"
    return s[:-2] if s.endswith(".0") else s


def _t(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def ticks(vmax: float, n: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``vmax`` (1, 2 or 5 times a power of ten apart)."""
    if not vmax > 0 or math.isinf(vmax):
        return [0.0, 1.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(math.ceil(vmax / step - 1e-9)) + 1)]


def _tick_label(v: float) -> str:
    return f"{v:g}" if abs(v) < 1e6 else f"{v:.3g}"


def cividis(frac: float) -> str:
    """The colour of ``frac`` (0..1, clipped) on the cividis scale (linear between 11 stops)."""
    f = min(max(frac, 0.0), 1.0) * (len(CIVIDIS) - 1)
    i = min(int(f), len(CIVIDIS) - 2)
    a, b = CIVIDIS[i], CIVIDIS[i + 1]
    w = f - i
    rgb = [round(int(a[k : k + 2], 16) * (1 - w) + int(b[k : k + 2], 16) * w) for k in (1, 3, 5)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _open(width: float, height: float, label: str, plot_id: str) -> list[str]:
    return [
        f'<svg class="plot" id="{escape(plot_id)}" role="img" aria-label="{escape(label)}" viewBox="0 0 {_n(width)} {_n(height)}" '
        f'width="{_n(width)}" height="{_n(height)}" xmlns="http://www.w3.org/2000/svg" {FONT} font-size="11">',
        '<rect width="100%" height="100%" fill="#ffffff"/>',
    ]


def _heading(title: str, x: float = 8) -> str:
    return f'<text x="{_n(x)}" y="16" font-size="13" fill="{TEXT}">{escape(title)}</text>'


def legend(items: list[tuple[str, str]], x: float, y: float, width: float) -> tuple[list[str], float]:
    """(SVG elements, height): colour swatches with labels, wrapped to ``width``."""
    out, cx, cy = [], x, y
    for label, color in items:
        w = 18 + 6.5 * len(label) + 14
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 16
        out.append(f'<rect x="{_n(cx)}" y="{_n(cy)}" width="11" height="11" rx="2" fill="{color}"/>'
                   f'<text x="{_n(cx + 16)}" y="{_n(cy + 10)}" fill="{TEXT}">{escape(label)}</text>')
        cx += w
    return out, cy - y + 16


def _x_axis(out: list[str], x0: float, y0: float, y1: float, plot_w: float, vmax: float, label: str) -> None:
    tv = ticks(vmax)
    scale = plot_w / (tv[-1] or 1)
    for v in tv:
        x = x0 + v * scale
        out.append(f'<line x1="{_n(x)}" y1="{_n(y0)}" x2="{_n(x)}" y2="{_n(y1)}" stroke="{GRID}" stroke-width="0.6"/>'
                   f'<text x="{_n(x)}" y="{_n(y1 + 13)}" text-anchor="middle" fill="{TEXT}">{_tick_label(v)}</text>')
    out.append(f'<text x="{_n(x0 + plot_w / 2)}" y="{_n(y1 + 28)}" text-anchor="middle" fill="{TEXT}">{escape(label)}</text>')


def hbars(plot_id: str, title: str, rows: list[tuple[str, str, list[Mark]]], axis: str,
          legend_items: list[tuple[str, str]], width: float = 880) -> str:
    """Stacked horizontal bars: ``rows`` = (label, label hover text, segments left to right)."""
    left, right, top = 90, 16, 26
    bar_h = 20 if len(rows) <= 16 else (12 if len(rows) <= 64 else 5)
    plot_w = width - left - right
    vmax = max((sum(m.value for m in ms) for _l, _lt, ms in rows), default=0.0)
    scale = plot_w / (ticks(vmax)[-1] or 1)
    y1 = top + len(rows) * (bar_h + 4)
    out = [_heading(title)]
    _x_axis(out, left, top, y1, plot_w, vmax, axis)
    for i, (label, label_title, marks) in enumerate(rows):
        y = top + 2 + i * (bar_h + 4)
        if bar_h >= 12:
            out.append(f'<text x="{left - 6}" y="{_n(y + bar_h / 2 + 4)}" text-anchor="end" fill="{TEXT}">{_t(label_title)}{escape(label)}</text>')
        x: float = left
        for m in marks:
            w = m.value * scale
            out.append(f'<rect data-key="{escape(m.key)}" x="{_n(x)}" y="{_n(y)}" width="{_n(max(w, 0))}" height="{bar_h}" '
                       f'fill="{m.color}">{_t(m.title)}</rect>')
            x += w
    leg, leg_h = legend(legend_items, left, y1 + 38, plot_w)
    out += leg
    return "".join(_open(width, y1 + 42 + leg_h, title, plot_id) + out) + "</svg>"


def heatmap(plot_id: str, title: str, row_labels: list[str], col_labels: list[str], cells: list[list[Mark | None]],
            texts: list[list[str]] | None, vmax: float, scale_label: str, width: float = 700) -> str:
    """A grid of cells coloured by value on the cividis scale from 0 to ``vmax``; ``texts``: the
    numbers written in the cells (None: none, e.g. when the cells are too small)."""
    left, top, right = 90, 44, 90
    cell_h = 22 if len(row_labels) <= 40 else max(3, 880 // max(len(row_labels), 1))
    cell_w = (width - left - right) / max(len(col_labels), 1)
    out = [_heading(title)]
    for j, c in enumerate(col_labels):
        out.append(f'<text x="{_n(left + (j + 0.5) * cell_w)}" y="{top - 8}" text-anchor="middle" fill="{TEXT}">{escape(c)}</text>')
    for i, label in enumerate(row_labels):
        y = top + i * cell_h
        if cell_h >= 12:
            out.append(f'<text x="{left - 6}" y="{_n(y + cell_h / 2 + 4)}" text-anchor="end" fill="{TEXT}">{escape(label)}</text>')
        for j, m in enumerate(cells[i]):
            if m is None:
                continue
            frac = m.value / vmax if vmax else 0.0
            out.append(f'<rect data-key="{escape(m.key)}" x="{_n(left + j * cell_w)}" y="{_n(y)}" width="{_n(cell_w)}" height="{cell_h}" '
                       f'fill="{cividis(frac)}">{_t(m.title)}</rect>')
            if texts is not None and cell_h >= 12:
                fg = "#ffffff" if frac < 0.55 else "#111111"
                out.append(f'<text x="{_n(left + (j + 0.5) * cell_w)}" y="{_n(y + cell_h / 2 + 4)}" text-anchor="middle" '
                           f'fill="{fg}" pointer-events="none">{escape(texts[i][j])}</text>')
    bottom = top + len(row_labels) * cell_h
    # the colour scale: 11 stops, 0 at the bottom
    sx, sh = width - right + 20, min(max(bottom - top, 110), 220)
    for k in range(10):
        out.append(f'<rect x="{_n(sx)}" y="{_n(top + sh * (9 - k) / 10)}" width="12" height="{_n(sh / 10 + 0.5)}" fill="{cividis((k + 0.5) / 10)}"/>')
    for frac in (0.0, 0.5, 1.0):
        out.append(f'<text x="{_n(sx + 16)}" y="{_n(top + sh * (1 - frac) + 4)}" fill="{TEXT}">{_tick_label(vmax * frac)}</text>')
    out.append(f'<text x="{_n(sx)}" y="{_n(top + sh + 16)}" fill="{MUTED}">{escape(scale_label)}</text>')
    return "".join(_open(width, max(bottom, top + sh + 16) + 12, title, plot_id) + out) + "</svg>"


def columns(plot_id: str, title: str, cols: list[tuple[str, float, Mark, str]], axis: str, width: float = 700) -> str:
    """Floating vertical columns: (label, bottom, mark with the column's height, text above it)."""
    left, top, bottom_pad, right = 56, 30, 64, 12
    height = 300
    vmax = max((b + m.value for _l, b, m, _tx in cols), default=0.0)
    tv = ticks(vmax)
    plot_h = height - top - bottom_pad
    scale = plot_h / (tv[-1] or 1)

    def y_of(v: float) -> float:
        return top + plot_h - v * scale

    out = [_heading(title)]
    for v in tv:
        out.append(f'<line x1="{left}" y1="{_n(y_of(v))}" x2="{width - right}" y2="{_n(y_of(v))}" stroke="{GRID}" stroke-width="0.6"/>'
                   f'<text x="{left - 4}" y="{_n(y_of(v) + 4)}" text-anchor="end" fill="{TEXT}">{_tick_label(v)}</text>')
    out.append(f'<text transform="translate(12 {_n(top + plot_h / 2)}) rotate(-90)" text-anchor="middle" fill="{TEXT}">{escape(axis)}</text>')
    slot = (width - left - right) / max(len(cols), 1)
    for i, (label, base, m, above) in enumerate(cols):
        x = left + i * slot + slot * 0.15
        out.append(f'<rect data-key="{escape(m.key)}" x="{_n(x)}" y="{_n(y_of(base + m.value))}" width="{_n(slot * 0.7)}" '
                   f'height="{_n(max(m.value * scale, 0.5))}" fill="{m.color}">{_t(m.title)}</rect>')
        out.append(f'<text x="{_n(x + slot * 0.35)}" y="{_n(y_of(base + m.value) - 3)}" text-anchor="middle" fill="{TEXT}">{escape(above)}</text>')
        out.append(f'<text transform="translate({_n(x + slot * 0.35)} {_n(top + plot_h + 12)}) rotate(20)" fill="{TEXT}">{escape(label)}</text>')
    return "".join(_open(width, height, title, plot_id) + out) + "</svg>"


@dataclass
class Row:
    """One row of :func:`spans`: its label, and per colour key the spans ``(start, end)`` with a
    hover text for the key's spans in the row (``group_title``) and one per span (``span_title``,
    shown for spans wide enough to point at)."""

    label: str
    spans: dict[str, list[tuple[float, float, str]]]  # key -> [(start, end, span hover text)]
    group_titles: dict[str, str]


def spans(plot_id: str, title: str, rows: list[Row], colors: dict[str, str], xmax: float, axis: str,
          legend_items: list[tuple[str, str]], width: float = 880, min_px: float = 3.0) -> str:
    """Rows of coloured spans on a shared axis from 0 to ``xmax``: each key's spans in a row are one
    path (hover: the group text), spans at least ``min_px`` wide also get a rectangle of their own
    (hover: the span text), so the file grows with the rows' width, not with the span count."""
    left, right, top = 90, 16, 26
    row_h = 22 if len(rows) <= 16 else (12 if len(rows) <= 64 else 5)
    plot_w = width - left - right
    scale = plot_w / (ticks(xmax)[-1] or 1)
    y1 = top + len(rows) * (row_h + 4)
    out = [_heading(title)]
    _x_axis(out, left, top, y1, plot_w, xmax, axis)
    for i, row in enumerate(rows):
        y = top + 2 + i * (row_h + 4)
        if row_h >= 12:
            out.append(f'<text x="{left - 6}" y="{_n(y + row_h / 2 + 4)}" text-anchor="end" fill="{TEXT}">{escape(row.label)}</text>')
        for key, sp in row.spans.items():
            narrow = "".join(f"M{_n(left + s * scale)} {_n(y + row_h / 2)}h{max(round((e - s) * scale, 2), 0.05):g}"
                             for s, e, _st in sp if (e - s) * scale < min_px)
            wide = "".join(f'<rect x="{_n(left + s * scale)}" y="{_n(y)}" width="{_n((e - s) * scale)}" height="{row_h}">{_t(st)}</rect>'
                           for s, e, st in sp if (e - s) * scale >= min_px)
            out.append(f'<g data-key="{escape(key)}" fill="{colors[key]}">{_t(row.group_titles.get(key, key))}'
                       + (f'<path d="{narrow}" stroke="{colors[key]}" stroke-width="{row_h}" fill="none"/>' if narrow else "")
                       + wide + "</g>")
    leg, leg_h = legend(legend_items, left, y1 + 38, plot_w)
    out += leg
    return "".join(_open(width, y1 + 42 + leg_h, title, plot_id) + out) + "</svg>"
