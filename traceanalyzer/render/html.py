"""HTML renderer: one self-contained file (inline CSS, plots as base64 PNG data URIs).

Nothing in the page refers to anything outside it: no script, no font, no stylesheet, no image
from the network, so it opens offline and can be attached to a ticket as is. Formatting only:
every number comes from the report model; numeric cells carry ``data-path``, the JSON path of
the number they show.
"""

from __future__ import annotations

import base64
from html import escape
from typing import Any

from traceanalyzer.render import plots
from traceanalyzer.render.sections import findings_table, host_bound_table, host_verdict_table, rank_summary_table, stragglers_table
from traceanalyzer.render.sections import straggler_costs_table
from traceanalyzer.render.sections import (
    Cell,
    Table,
    collectives_table,
    command_text,
    comm_dims_table,
    efficiency_table,
    idle_causes_table,
    kernel_section_table,
    recomputed_table,
    step_stragglers_table,
    headline_cells,
    inputs_table,
    kernels_table,
    ranks_table,
    timeline_table,
    waterfall_table,
)

CSS = """
:root { color-scheme: light dark; --fg: #1f2328; --bg: #ffffff; --muted: #59636e; --line: #d1d9e0; --box: #f6f8fa; --warn: #9a6700; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6edf3; --bg: #0d1117; --muted: #9198a1; --line: #3d444d; --box: #151b23; --warn: #d29922; }
}
body { font: 14px/1.5 -apple-system, "Segoe UI", "Helvetica Neue", Arial, sans-serif; color: var(--fg); background: var(--bg);
       max-width: 1180px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
.sub { color: var(--muted); margin: 0 0 16px; }
.headline { background: var(--box); border: 1px solid var(--line); border-radius: 6px; padding: 12px 16px; font-size: 15px; }
.kpis { display: flex; flex-wrap: wrap; gap: 8px 24px; margin-top: 8px; font-size: 13px; color: var(--muted); }
.kpis b { color: var(--fg); font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 12.5px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid var(--line); padding: 3px 8px; }
th { background: var(--box); text-align: left; }
td.n { text-align: right; white-space: nowrap; }
td { vertical-align: top; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
pre { background: var(--box); border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; white-space: pre-wrap; word-break: break-all; }
img.plot { display: block; max-width: 100%; height: auto; background: #ffffff; border: 1px solid var(--line); border-radius: 6px; padding: 6px; margin: 8px 0; }
.note { color: var(--muted); font-size: 12.5px; }
ul.warnings li { color: var(--warn); }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin: 0 4px 0 12px; vertical-align: -1px; }
.scroll { overflow-x: auto; }
"""


def _cell(c: Cell, header: bool = False) -> str:
    tag = "th" if header else "td"
    text = escape(c.text)
    if c.code:
        text = f"<code>{text}</code>"
    attrs = ""
    if c.path:
        attrs += f' class="n" data-path="{escape(c.path)}"'
    if c.title:
        attrs += f' title="{escape(c.title)}"'
    return f"<{tag}{attrs}>{text}</{tag}>"


def _table(t: Table | None) -> str:
    if t is None:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    if not t.rows:
        return note
    return f'<div class="scroll"><table id="{escape(t.id)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{note}'


def _img(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    data = base64.b64encode(png).decode("ascii")
    return f'<img class="plot" alt="{escape(alt)}" src="data:image/png;base64,{data}">'


def render(model: dict[str, Any], images: dict[str, bytes] | None = None) -> str:
    """The report as one HTML document (str). ``images``: pre-rendered plots (else rendered here)."""
    images = plots.render_all(model) if images is None else images
    job = model["job"]
    h = model["headline"]
    title = "traceanalyzer report"
    devices = ", ".join(job["devices"]) or "unknown device"
    sub = (f"{len(job['ranks'])} rank{'s' if len(job['ranks']) != 1 else ''} · {devices} · step range "
           f"<code>{escape(job['step_range'])}</code> · traceanalyzer {escape(model['tool']['version'])} · {escape(model['generated_utc'])}")
    kpis = "".join(f'<span>{escape(label)}: <b data-path="{escape(c.path or "")}">{escape(c.text)}</b></span>' for label, c in headline_cells(model))
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="sub">{sub}</p>',
        f'<div class="headline" id="headline"><div>{escape(h["sentence"])}</div><div class="kpis">{kpis}</div></div>',
    ]
    if model["notes"]:
        out.append('<ul class="notes">' + "".join(f'<li class="note">{escape(n)}</li>' for n in model["notes"]) + "</ul>")

    found = findings_table(model)
    if found is not None:
        out.append('<h2 id="findings">Findings</h2>')
        out.append(_table(found))

    out.append('<h2 id="partition">Partition per rank</h2>')
    out.append(_img(images.get("partition"), "GPU time per rank, stacked by bucket"))
    summary = rank_summary_table(model)
    out.append(_table(summary if summary is not None else ranks_table(model)))
    out.append('<p class="note">Buckets partition each step exactly: compute, then recompute, then exposed communication, '
               "then other GPU work (memcpy, memset), else idle. Overlapped comm (communication under compute) is not part of the sum.</p>")

    tl = model["timeline"]
    out.append(f'<h2 id="timeline">Timeline of rank {tl["rank"]}, per step</h2>')
    out.append(_img(images.get("timeline"), f"bucket of every moment of rank {tl['rank']}, one row per step"))
    out.append(_table(timeline_table(model)))

    out.append('<h2 id="waterfall">Waterfall</h2>')
    if model.get("waterfall"):
        out.append(_img(images.get("waterfall"), "peak to achieved TFLOP/s per GPU"))
        out.append(_table(waterfall_table(model)))
    else:
        why = "see the note at the top" if model["notes"] else "run the report with <code>--config run.toml</code>"
        out.append(f'<p class="note">No waterfall (peak to achieved TFLOP/s): it needs a run configuration and the reconciler; {why}.</p>')

    out.append('<h2 id="heatmap">Cross-rank heatmap</h2>')
    out.append(_img(images.get("heatmap"), "share of the step per rank and bucket"))
    strag = stragglers_table(model)
    if strag is not None:
        out.append('<h2 id="stragglers">Stragglers</h2>')
        out.append(_table(strag))
    costs = straggler_costs_table(model)
    if costs is not None:
        out.append('<h2 id="straggler-costs">What each straggler costs, and who waited on whom</h2>')
        out.append(_table(costs))
        if images.get("waits"):
            out.append(_img(images.get("waits"), "wait per rank that waited and rank it waited on, per collective"))

    out.append('<h2 id="kernels">Top kernels</h2>')
    out.append(_table(kernel_section_table(model) or kernels_table(model)))
    causes = [(title, t) for title, t in (("Idle by cause", idle_causes_table(model)),
                                          ("Host-bound idle by what the host was doing", host_bound_table(model)),
                                          ("Host and launches", host_verdict_table(model)),
                                          ("Communication by dimension", comm_dims_table(model)),
                                          ("Recomputed ops", recomputed_table(model)), ("Slowest rank per step", step_stragglers_table(model))) if t is not None]
    if causes:
        out.append('<h2 id="causes">Causes</h2>')
        for title, t in causes:
            out.append(f"<h3>{escape(title)}</h3>")
            out.append(_table(t))
    out.append('<h2 id="collectives">Top exposed collectives</h2>')
    out.append(_table(collectives_table(model)))
    eff = efficiency_table(model)
    if eff is not None:
        out.append('<h2 id="collective-efficiency">Collective efficiency</h2>')
        out.append(_table(eff))

    out.append('<h2 id="warnings">Warnings</h2>')
    if model["warnings"]:
        out.append('<ul class="warnings">' + "".join(f"<li>{escape(w)}</li>" for w in model["warnings"]) + "</ul>")
    else:
        out.append('<p class="note">None.</p>')

    out.append('<h2 id="reproduce">Reproduce</h2>')
    out.append(f"<pre id=\"command\">{escape(command_text(model))}</pre>")
    out.append(f'<p class="note">Working directory: <code>{escape(model["reproduce"]["cwd"])}</code>; '
               f'tool version {escape(model["tool"]["version"])}; report schema {escape(model["schema"])} v{model["schema_version"]}.</p>')
    out.append(_table(inputs_table(model)))
    out.append("</body></html>")
    return "\n".join(x for x in out if x) + "\n"
