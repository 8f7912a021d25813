"""HTML renderer: one self-contained, interactive file (inline CSS, inline SVG plots, one small
inline script).

Nothing in the page refers to anything outside it: no external script, font, stylesheet or image,
so it opens offline and can be attached to a ticket as is. With JavaScript off every table and
plot is there, and every plot shows its values on hover (SVG ``<title>``); the script
(:mod:`traceanalyzer.render.page_assets`) adds sorting and filtering to the tables and a rank /
step selector where the report holds several. Formatting only: every number comes from the
report model; numeric cells carry ``data-path``, the JSON path of the number they show.

The page is the list :data:`SECTIONS`: functions ``model -> str | None`` (None: the section does
not apply). A new section formats its part of the model with the helpers here::

    def my_section(model):
        t = my_table(model)                          # a sections.Table (rows of Cells)
        if t is None:
            return None
        return section("my-id", "My title", figure(my_svg(model)), table(t))

:func:`table` makes every table sortable and filterable, :func:`figure` takes an SVG from
:mod:`traceanalyzer.render.svg` (``hbars``, ``heatmap``, ``columns``, ``spans``: a hover text per
mark), :func:`panels` puts several views (per rank, per step) behind one selector.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable

from traceanalyzer.render import figures
from traceanalyzer.render.page_assets import CSS, SCRIPT
from traceanalyzer.render.sections import (
    MS,
    Cell,
    Table,
    collectives_table,
    command_text,
    comm_dims_table,
    efficiency_table,
    findings_table,
    integrity_table,
    headline_cells,
    host_verdict_table,
    idle_causes_table,
    inputs_table,
    kernel_section_table,
    kernels_table,
    rank_summary_table,
    ranks_table,
    recomputed_table,
    step_ranks_table,
    step_stragglers_table,
    straggler_costs_table,
    stragglers_table,
    timeline_table,
    waterfall_table,
)

#: the partition section's step selector: at most this many steps, and as many as keep the
#: bars of all step views within MAX_STEP_BARS (rank-steps); the JSON report holds every step
MAX_STEP_PANELS = 16
MAX_STEP_BARS = 256
#: a code cell (kernel name, path, hash) longer than this many characters may break anywhere, so
#: that every table fits its page at 1,400 px: the page's tables wrap their long cells (and the
#: names are shortened, the full name on hover) before they ever scroll sideways
WRAP_CODE = 32


# ---------------------------------------------------------------------------------------------
# building blocks


def _cell(c: Cell) -> str:
    text = escape(c.text)
    if c.code:
        text = f"<code>{text}</code>"
    attrs = ""
    if c.path:
        attrs += f' class="n" data-path="{escape(c.path)}"'
    elif c.indent:
        attrs += f' class="i{min(c.indent, 3)}"'
    elif c.code and len(c.text) > WRAP_CODE:
        attrs += ' class="w"'
    if c.title:
        attrs += f' title="{escape(c.title)}"'
    return f"<td{attrs}>{text}</td>"


def table(t: Table | None) -> str:
    """A table, sortable and filterable in the browser (``class="data"``), and its note."""
    if t is None:
        return ""
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    if not t.rows:
        return note
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    return f'<div class="scroll"><table class="data" id="{escape(t.id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}'


def figure(svg_text: str | None) -> str:
    """An inline SVG plot (from :mod:`traceanalyzer.render.svg`)."""
    return svg_text or ""


def panels(label: str, items: list[tuple[str, str, str]]) -> str:
    """Several views behind one selector: ``items`` = (key, name, html), the first shown first.
    Without JavaScript every view is shown under its name; a single view is shown as is."""
    if len(items) == 1:
        return items[0][2]
    body = "".join(f'<div class="panel" data-key="{escape(k)}" data-name="{escape(n)}"><p class="panel-name">{escape(n)}</p>{h}</div>'
                   for k, n, h in items)
    return f'<div class="panels" data-label="{escape(label)}">{body}</div>'


def section(sid: str, title: str, *parts: str) -> str:
    return f'<h2 id="{escape(sid)}">{escape(title)}</h2>' + "".join(p for p in parts if p)


def subsection(title: str, *parts: str) -> str:
    return f"<h3>{escape(title)}</h3>" + "".join(p for p in parts if p)


def note(text_html: str) -> str:
    return f'<p class="note">{text_html}</p>'


# ---------------------------------------------------------------------------------------------
# the sections, in page order


def head_section(model: dict[str, Any]) -> str:
    job, h = model["job"], model["headline"]
    devices = ", ".join(job["devices"]) or "unknown device"
    n = len(job["ranks"])
    sub = (f"{n} rank{'s' if n != 1 else ''} · {escape(devices)} · step range <code>{escape(job['step_range'])}</code> · "
           f"traceanalyzer {escape(model['tool']['version'])} · {escape(model['generated_utc'])}")
    kpis = "".join(f'<span>{escape(label)}: <b data-path="{escape(c.path or "")}">{escape(c.text)}</b></span>' for label, c in headline_cells(model))
    out = (f"<h1>traceanalyzer report</h1><p class=\"sub\">{sub}</p>"
           f'<div class="headline" id="headline"><p class="title">{_title_tag(h)}<b id="headline-title">{escape(h["title"])}</b></p>'
           f'<div id="headline-context">{escape(h["context"])}</div><div class="kpis">{kpis}</div></div>')
    if model["notes"]:
        out += '<ul class="notes">' + "".join(f'<li class="note">{escape(x)}</li>' for x in model["notes"]) + "</ul>"
    return out


def _title_tag(h: dict[str, Any]) -> str:
    """The headline's first words: which finding it states (none without findings)."""
    return '<span class="tag">finding 1</span> ' if h.get("finding") else ""


def integrity_section(model: dict[str, Any]) -> str | None:
    t = integrity_table(model)
    return None if t is None else section("integrity", "Trace integrity", table(t))


def findings_section(model: dict[str, Any]) -> str | None:
    t = findings_table(model)
    return None if t is None else section("findings", "Findings", table(t))


def _step_numbers(model: dict[str, Any]) -> list[int]:
    """The steps the partition section has a view of (in step order, see MAX_STEP_PANELS)."""
    per: dict[int, int] = {}
    for s in model["steps"]:
        per[s["step"]] = per.get(s["step"], 0) + 1
    out, bars = [], 0
    for step in sorted(per)[:MAX_STEP_PANELS]:
        if bars + per[step] > MAX_STEP_BARS:
            break
        bars += per[step]
        out.append(step)
    return out if len(per) > 1 else []


def partition_section(model: dict[str, Any]) -> str:
    summary = rank_summary_table(model)
    mean = figure(figures.partition(model)) + table(summary if summary is not None else ranks_table(model))
    steps = _step_numbers(model)
    views = [("mean", "mean over the steps", mean)]
    views += [(f"step-{s}", f"step {s}", figure(figures.partition(model, s)) + table(step_ranks_table(model, s))) for s in steps]
    more = len({s["step"] for s in model["steps"]}) - len(steps)
    return section(
        "partition", "Partition per rank", panels("step", views),
        note(f"{more} more steps in the JSON report.") if steps and more > 0 else "",
        note("Buckets partition each step exactly: compute, then recompute, then exposed communication, "
             "then other GPU work (memcpy, memset), else idle. Overlapped comm (communication under compute) is not part of the sum."),
    )


def timeline_section(model: dict[str, Any]) -> str:
    tls = [model["timeline"], *model.get("more_timelines", [])]
    step_ms = {r["rank"]: r["step_ms"] for r in model["ranks"]}
    views = []
    for tl in tls:
        r = tl["rank"]
        name = f"rank {r}" + (f" ({MS.format(step_ms[r])} ms per step)" if r in step_ms else "")
        views.append((str(r), name, figure(figures.timeline(model, tl)) + table(timeline_table(model, tl=tl))))
    title = f"Timeline of rank {tls[0]['rank']}, per step" if len(tls) == 1 else "Timeline per step, by rank"
    shown = note(f"Timelines of {len(tls)} of {len(model['ranks'])} ranks: the slowest, the fastest, then from the slowest down; "
                 "the JSON report holds the same.") if 1 < len(tls) < len(model["ranks"]) else ""
    return section("timeline", title, panels("rank", views), shown)


def waterfall_section(model: dict[str, Any]) -> str:
    if model.get("waterfall"):
        return section("waterfall", "Waterfall", figure(figures.waterfall(model)), table(waterfall_table(model)))
    why = "see the note at the top" if model["notes"] else "run the report with <code>--config run.toml</code>"
    return section("waterfall", "Waterfall",
                   note(f"No waterfall (peak to achieved TFLOP/s): it needs a run configuration and the reconciler; {why}."))


def heatmap_section(model: dict[str, Any]) -> str:
    return section("heatmap", "Cross-rank heatmap", figure(figures.heatmap(model)))


def stragglers_section(model: dict[str, Any]) -> str | None:
    t = stragglers_table(model)
    return None if t is None else section("stragglers", "Stragglers", table(t))


def straggler_costs_section(model: dict[str, Any]) -> str | None:
    """What each straggler costs the job, and who waited on whom (one matrix per collective)."""
    t = straggler_costs_table(model)
    if t is None:
        return None
    mats = (model.get("straggler_costs") or {}).get("wait_matrix") or []
    return section("straggler-costs", "What each straggler costs, and who waited on whom", table(t),
                   *[figure(figures.wait_matrix(model, m)) for m in mats[:2]])


def kernels_section(model: dict[str, Any]) -> str:
    return section("kernels", "Top kernels", table(kernel_section_table(model) or kernels_table(model)))


def causes_section(model: dict[str, Any]) -> str | None:
    parts = [subsection(title, table(t)) for title, t in (
        ("Idle by cause", idle_causes_table(model)),
        ("Host and launches", host_verdict_table(model)), ("Communication by dimension", comm_dims_table(model)),
        ("Recomputed ops", recomputed_table(model)), ("Slowest rank per step", step_stragglers_table(model))) if t is not None]
    return section("causes", "Causes", *parts) if parts else None


def collectives_section(model: dict[str, Any]) -> str:
    return section("collectives", "Top exposed collectives", table(collectives_table(model)))


def efficiency_section(model: dict[str, Any]) -> str | None:
    t = efficiency_table(model)
    return None if t is None else section("collective-efficiency", "Collective efficiency", table(t))


def warnings_section(model: dict[str, Any]) -> str:
    if model["warnings"]:
        return section("warnings", "Warnings", '<ul class="warnings">' + "".join(f"<li>{escape(w)}</li>" for w in model["warnings"]) + "</ul>")
    return section("warnings", "Warnings", note("None."))


def reproduce_section(model: dict[str, Any]) -> str:
    return section(
        "reproduce", "Reproduce", f'<pre id="command">{escape(command_text(model))}</pre>',
        note(f'Working directory: <code>{escape(model["reproduce"]["cwd"])}</code>; tool version {escape(model["tool"]["version"])}; '
             f'report schema {escape(model["schema"])} v{model["schema_version"]}.'),
        table(inputs_table(model)),
    )


#: the page, top to bottom: add a section by adding its function here
SECTIONS: list[Callable[[dict[str, Any]], str | None]] = [
    head_section, integrity_section, findings_section, partition_section, timeline_section, waterfall_section, heatmap_section,
    stragglers_section, straggler_costs_section, kernels_section, causes_section, collectives_section, efficiency_section,
    warnings_section, reproduce_section,
]


def render(model: dict[str, Any]) -> str:
    """The report as one HTML document (str)."""
    parts = [s(model) for s in SECTIONS]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>traceanalyzer report</title>",
        f"<style>{CSS}</style></head><body>",
        *[p for p in parts if p],
        f"<script>{SCRIPT}</script>",
        "</body></html>",
    ]) + "\n"
