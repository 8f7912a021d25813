"""Renderers of a what-if (:func:`traceanalyzer.model.whatif.project`) and a layout search
(:func:`traceanalyzer.model.search.search_layouts`): sections for tables and markdown.

Formatting only; every number comes from those results.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from traceanalyzer.render.predictions import Section, _hidden, label, num, pct
from traceanalyzer.render import units


def _layout(lay: dict[str, Any]) -> str:
    s = f"TP{lay['tp']} PP{lay['pp']}"
    if lay.get("vp", 1) > 1:
        s += f" VP{lay['vp']}"
    s += f" DP{lay['dp']}"
    if lay.get("cp", 1) > 1:
        s += f" CP{lay['cp']}"
    if lay.get("ep", 1) > 1:
        s += f" EP{lay['ep']}"
    if lay.get("sequence_parallel"):
        s += " +SP"
    return s


def _mem(m: dict[str, Any] | None) -> str:
    if not m:
        return "— (not modelled for this configuration)"
    s = f"{num(m['total_gib'], 1)} GiB"
    if m.get("margin_gib") is not None:
        s += (f" of {num(m['capacity_gib'], 0)} − {num(m['reserve_gib'], 0)} reserve: "
              f"{'fits' if m['fits'] else 'does NOT fit'}, margin {num(m['margin_gib'], 1)} GiB")
    return s


def whatif_sections(res: dict[str, Any], all_rows: bool = False) -> list[Section]:
    """The layouts side by side, the step by term, what changed; the terms zero in both runs are
    left out unless ``all_rows`` (a note names them)."""
    a, p = res["anchor_summary"], res["predicted"]
    conv = res["convention"]
    head = Section(f"What-if [{conv}]", ["quantity", "anchor run", "predicted run"],
                   notes=[f"anchor: {res['anchor']}"]
                   + (["no trace: this is the analytic model, not a measured step"] if res["anchor_source"] != "trace" else [])
                   + [n for n in res.get("notes", []) if n.startswith(("extrapolated", "HOST-BOUND"))])
    la, lp = a["layout"], p["layout"]
    head.rows = [
        ["layout", f"{la['gpus']} GPUs: {_layout(la)}", f"{lp['gpus']} GPUs: {_layout(lp)}"],
        ["batch", f"global {la['global_batch']}, micro {la['micro_batch']} ({la['microbatches']} microbatches)",
         f"global {lp['global_batch']}, micro {lp['micro_batch']} ({lp['microbatches']} microbatches)"],
        ["recompute", la["recompute"], lp["recompute"]],
        ["step time", f"{a['step_time_s']:.4g} s",
         f"{p['step_time_s']:.4g} s" + (" (HOST-BOUND: the host's pace)" if res.get("host_bound") else "")],
        ["TFLOP/s/GPU (model FLOPs)", num(a["tflops_per_gpu"]), num(p["tflops_per_gpu"])],
        ["TFLOP/s/GPU (hardware FLOPs)", num(a["hw_tflops_per_gpu"]), num(p["hw_tflops_per_gpu"])],
        ["MFU / HFU", f"{pct(a['mfu'])} / {pct(a['hfu'])}", f"{pct(p['mfu'])} / {pct(p['hfu'])}"],
        ["memory per GPU", _mem(a.get("memory")), _mem(p.get("memory"))],
    ]
    terms = Section("Step per GPU by term (ms)", ["term", "anchor ms", "predicted ms", "change ms", "rule"])
    hidden = []
    for t in res["terms"]:
        if t["anchor_s"] == 0 and t["predicted_s"] == 0 and not all_rows:
            hidden.append(label(t["term"]))
            continue
        terms.rows.append([label(t["term"]), num(1e3 * t["anchor_s"], 3), num(1e3 * t["predicted_s"], 3),
                           units.signed(1e3 * t["delta_s"], 3), t["rule"]])
    terms.rows.append(["= step", num(1e3 * a["step_time_s"], 3), num(1e3 * p["step_time_s"], 3),
                       units.signed(1e3 * (p["step_time_s"] - a["step_time_s"]), 3), ""])
    _hidden(terms, hidden)
    wf = Section(f"What changed: TFLOP/s/GPU {num(a['tflops_per_gpu'])} → {num(p['tflops_per_gpu'])} [{conv}]",
                 ["term", "TFLOP/s/GPU"])
    for w in sorted(res["waterfall"], key=lambda w: -abs(w["tflops"])):
        wf.rows.append([label(w["term"]), units.signed(w["tflops"], 1)])
    wf.rows.append(["= change", units.signed(p["tflops_per_gpu"] - a["tflops_per_gpu"], 1)])
    return [head, terms, wf]


def search_sections(df: pl.DataFrame, top: int, title: str, notes: list[str], bound: bool = False) -> list[Section]:
    """The ranked layouts; ``bound``: the anchor is the analytic model at the peak (no trace, no
    reported throughput), so TFLOP/s/GPU and MFU are upper bounds, not predictions: the headers
    and a note say so."""
    fits = df["fits"]
    sized = df.height - fits.null_count()
    n_fit = int(fits.sum() or 0)
    tflops, mfu = ("TFLOP/s/GPU at most", "MFU at most") if bound else ("TFLOP/s/GPU", "MFU")
    s = Section(title, ["rank", "layout", "micro", "m", "recompute", "dist. opt.", tflops, mfu, "step s",
                        "memory GiB", "margin GiB", "fits"], notes=list(notes))
    if bound:
        s.notes.insert(0, "No measured anchor (no trace, no [reported] throughput): every layout computes at the peak, so "
                          "TFLOP/s/GPU and MFU are analytic upper bounds that rank the layouts' bubble and communication, "
                          "not a prediction of what a run reaches. Give a trace or [reported] to anchor them.")
    line = f"{df.height} valid layouts; memory sized for {sized} (fastest first): {n_fit} fit, {sized - n_fit} do not"
    if sized < df.height:
        line += f"; {df.height - sized} slower ones not sized (--top 0 sizes all)"
    s.notes.insert(0, line)
    for r in df.head(top).iter_rows(named=True):
        s.rows.append([
            "—" if r["rank"] is None else str(r["rank"]), _layout(r) + (" (anchor)" if r["is_anchor"] else ""),
            str(r["micro_batch"]), str(r["microbatches"]), r["recompute"], "yes" if r["distributed_optimizer"] else "no",
            num(r["tflops_per_gpu"]), pct(r["mfu"]), num(r["step_time_s"], 3), num(r["memory_gib"], 1),
            num(r["margin_gib"], 1), "—" if r["fits"] is None else ("yes" if r["fits"] else "no"),
        ])
    return [s]
