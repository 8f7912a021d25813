"""Markdown renderer: GitHub-flavoured, short enough to paste into a ticket.

Plots are referenced as images: PNG files written beside the Markdown (the command writes them)
or ``data:`` URIs with ``--embed``. Long tables are capped (ranks, steps); the HTML and JSON
reports hold everything. Formatting only: every number comes from the report model.
"""

from __future__ import annotations

import base64
from typing import Any

from traceanalyzer.buckets import BUCKET_LABELS, BUCKETS
from traceanalyzer.render import plots
from traceanalyzer.render.sections import (
    Cell, Table, collectives_table, comm_dims_table, command_text, efficiency_table, findings_table, headline_cells,
    host_verdict_table, idle_causes_table, inputs_table, integrity_table, kernel_section_table,
    kernels_table, rank_summary_table, ranks_table, recomputed_table, step_stragglers_table, straggler_costs_table,
    stragglers_table, timeline_table, waterfall_table,
)

MAX_RANKS = 16
MAX_STEPS = 12


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _cell(c: Cell) -> str:
    if c.indent:  # a cause under its parent: indented (no-break spaces survive GitHub's table cells)
        return "\u00a0" * (4 * c.indent) + _esc(c.text)
    if c.code:
        tick = "``" if "`" in c.text else "`"
        body = c.text.replace("|", "\\|")
        return f"{tick}{body}{tick}" if c.text else ""
    return _esc(c.text)


def _table(t: Table | None) -> list[str]:
    if t is None:
        return []
    out = []
    if t.rows:
        out.append("| " + " | ".join(_esc(h) for h in t.headers) + " |")
        out.append("|" + "|".join("---:" if i and t.rows and t.rows[0][i].path else "---" for i in range(len(t.headers))) + "|")
        for row in t.rows:
            out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    if t.note:
        out += ["", f"_{_esc(t.note)}_"]
    return out + [""]


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render(model: dict[str, Any], image_refs: dict[str, str]) -> str:
    """The report as Markdown. ``image_refs``: plot stem -> relative file name or data URI."""
    job = model["job"]
    h = model["headline"]
    devices = ", ".join(job["devices"]) or "unknown device"
    out = [
        "## traceanalyzer report",
        "",
        f"{len(job['ranks'])} rank(s) · {devices} · step range `{job['step_range']}` · traceanalyzer {model['tool']['version']}",
        "",
        f"**{'Finding 1: ' if h.get('finding') else ''}{_esc(h['title'])}**",
        "",
        _esc(h["context"]),
        "",
        "| headline | value |",
        "|---|---:|",
        *[f"| {_esc(label)} | {c.text} |" for label, c in headline_cells(model)],
        "",
    ]
    for n in model["notes"]:
        out.append(f"> {_esc(n)}")
    if model["notes"]:
        out.append("")

    def img(stem: str, alt: str) -> None:
        if stem in image_refs:
            out.extend([f"![{alt}]({image_refs[stem]})", ""])

    def section(title: str, table: Table | None) -> bool:
        """The table under its heading, when the report has it."""
        if table is not None:
            out.extend([f"### {title}", "", *_table(table)])
        return table is not None

    section("Trace integrity", integrity_table(model))
    section("Findings", findings_table(model))
    out += ["### Partition per rank", ""]
    img("partition", "partition per rank")
    summary = rank_summary_table(model)
    out += _table(summary if summary is not None else ranks_table(model, MAX_RANKS))
    out += [f"### Timeline of rank {model['timeline']['rank']}", ""]
    img("timeline", "timeline")
    legend = " · ".join(f"{BUCKET_LABELS[b]} `{plots.COLORS[b]}`" for b in BUCKETS)
    out += [f"_Colours: {legend}_", ""]
    out += _table(timeline_table(model, MAX_STEPS))
    if model.get("waterfall"):
        out += ["### Waterfall", ""]
        img("waterfall", "waterfall")
        out += _table(waterfall_table(model))
    out += ["### Cross-rank heatmap (% of step)", ""]
    img("heatmap", "heatmap")
    section("Stragglers", stragglers_table(model))
    if section("What each straggler costs, and who waited on whom", straggler_costs_table(model)):
        img("waits", "who waited on whom")
    out += ["### Top kernels", ""] + _table(kernel_section_table(model) or kernels_table(model))
    for title, t in (("Idle by cause", idle_causes_table(model)),
                     ("Host and launches", host_verdict_table(model)),
                     ("Communication by dimension", comm_dims_table(model)),
                     ("Recomputed ops", recomputed_table(model)), ("Slowest rank per step", step_stragglers_table(model))):
        section(title, t)
    out += ["### Top exposed collectives", ""] + _table(collectives_table(model))
    section("Collective efficiency", efficiency_table(model))
    out += ["### Warnings", ""]
    out += [f"- {_esc(w)}" for w in model["warnings"]] or ["None."]
    out += ["", "<details><summary>Reproduce</summary>", "", "```sh", command_text(model), "```", ""]
    out += _table(inputs_table(model))
    out += ["</details>", ""]
    return "\n".join(out)
