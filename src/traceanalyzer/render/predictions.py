"""Renderers of predictions (the analytic model) and reconciliations: terminal tables, markdown, JSON.

Formatting only: every number comes from :func:`traceanalyzer.model.predict` /
:func:`traceanalyzer.reconciliation.waterfall` / ``compare`` dicts. Each renderer builds a list of
:class:`Section` (title, column headers, rows of strings); :func:`render` turns them into rich
tables (``table``) or GitHub markdown (``markdown``); ``json`` dumps the dict itself;
:func:`emit` writes the result where the command was asked to. Warnings are not rendered here:
the commands print them on stderr (and the JSON keeps them under ``warnings``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from traceanalyzer.render.units import signed

if TYPE_CHECKING:
    from rich.console import Console


LABELS = {
    "achieved": "achieved (model FLOPs)",
    "kernel_efficiency": "kernel efficiency",
    "recompute": "recompute",
    "bubble": "pipeline bubble",
    "pipeline_imbalance": "pipeline imbalance (logits on the last stage)",
    "exposed_comm": "exposed communication",
    "exposed_comm_tp": "exposed comm: TP",
    "exposed_comm_pp": "exposed comm: PP",
    "exposed_comm_dp": "exposed comm: DP",
    "exposed_comm_cp": "exposed comm: CP",
    "exposed_comm_ep": "exposed comm: EP",
    "other": "other GPU work (memcpy/memset)",
    "idle": "idle",
    "peak": "peak",
    "unexplained": "unexplained (reported − predicted)",
}


def label(key: str) -> str:
    if key in LABELS:
        return LABELS[key]
    if key.startswith("exposed_comm_"):
        return "exposed comm: " + key[len("exposed_comm_"):]
    if key.startswith("idle_"):
        return "idle: " + key[len("idle_"):].replace("_", " ")
    return key.replace("_", " ")


@dataclass
class Section:
    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def num(x: Any, digits: int = 1) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    text = f"{x:,.{digits}f}"
    return text[1:] if text.startswith("-") and float(text.replace(",", "")) == 0 else text  # never -0.0


def sci(x: float | None) -> str:
    return "—" if x is None else f"{x:.4g}"


def pct(x: float | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{num(100 * x, digits).replace(',', '')} %"


def _zero(*values: Any) -> bool:
    """Whether a row's every number is exactly zero (or absent): a term that did not occur."""
    return all(v is None or v == 0 for v in values)


def _hidden(section: Section, labels: list[str]) -> None:
    """Say under ``section`` which rows at zero it leaves out, and how to see them."""
    if labels:
        section.notes.append(f"{len(labels)} term{'s' * (len(labels) != 1)} at zero not shown (--all shows them): "
                             + ", ".join(labels) + ".")


# ------------------------------------------------------------------------------------ predict
def prediction_sections(pred: dict[str, Any], all_rows: bool = True) -> list[Section]:
    """The prediction, its waterfall and its communication; without ``all_rows`` the waterfall's
    terms that are zero are left out (a note names them)."""
    lay, hw, fl = pred["layout"], pred["hardware"], pred["flops"]
    conv = f"FLOPs convention: {pred['convention']} ({pred['convention_note']})"
    s1 = Section(f"Prediction — {pred['name']}", ["quantity", "value"], notes=[conv])
    rows = [
        ["GPUs / layout", f"{lay['gpus']} GPUs: TP{lay['tp']} PP{lay['pp']} DP{lay['dp']} CP{lay['cp']} EP{lay['ep']} VP{lay['vp']}"
                          + (" +SP" if lay["sequence_parallel"] else "")],
        ["batch", f"global {lay['global_batch']}, micro {lay['micro_batch']} → {lay['microbatches']} microbatches per pipeline"],
        ["recompute", f"{lay['recompute']} ({lay['recomputed_layers']} layers run forward twice)"],
        ["hardware", f"{hw['gpu']} {hw['precision']}, dense peak {num(hw['peak_tflops'])} TFLOP/s (MFU denominator: "
                     f"{hw.get('mfu_denominator', 'dense peak')})"],
        ["model FLOPs / step", f"{sci(fl['model'])} ({sci(fl['model_per_token'])} per token) [{pred['convention']}]"],
        ["hardware FLOPs / step", f"{sci(fl['hardware'])} (HFU/MFU = {fl['hfu_over_mfu']:.3f}) [{pred['convention']}; HFU: "
                                  f"{pred.get('hfu_convention', 'forward')}]"],
        ["ideal step time at peak", f"{num(pred['ideal_step_time_s'], 3)} s"],
        ["pipeline bubble (p−1)/(v·m)", f"{pred['bubble_fraction']:.3f} of busy time ({pct(pred['bubble_share_of_step'])} of the step)"],
        ["pipeline imbalance", f"last stage {pred.get('pipeline_imbalance', 1.0):.4f}× the mean stage's FLOPs (output layer)"],
        ["kernel efficiency", f"{pred['kernel_efficiency']:.3f} of peak — {pred['kernel_efficiency_source']}"],
        ["predicted step time", f"{num(pred['step_time_s'], 3)} s"],
        ["predicted throughput", f"{num(pred['tflops_per_gpu'])} TFLOP/s/GPU [{pred['convention']}], MFU {pct(pred['mfu'])}, HFU {pct(pred['hfu'])}"],
    ]
    if pred.get("mfu_vs_bf16_peak") is not None:
        rows.append(["MFU against the BF16 peak", f"{pct(pred['mfu_vs_bf16_peak'])} (BF16 dense peak "
                                                  f"{num(hw['bf16_peak_tflops'])} TFLOP/s; the FP8 peak above is the denominator of MFU)"])
    lc = pred.get("logged_convention")
    if lc:
        rows.append(["logged figure's convention", f"{lc['best']} FLOPs reproduce the logged {num(lc['logged_tflops_per_gpu'], 2)} "
                                                   f"TFLOP/s/GPU ({100 * lc['relative_error']:+.2f} %)"])
    rep = pred.get("reported")
    if rep:
        rows.append(["reported", f"{num(rep['tflops_per_gpu'])} TFLOP/s/GPU [{rep['convention']}] → step {num(rep['step_time_s'], 3)} s"
                                 f" = {num(rep['tflops_per_gpu_in_convention'])} [{pred['convention']}]"])
    s1.rows = rows
    peak = hw["peak_tflops"]
    s2 = Section(f"Predicted waterfall: peak = achieved + losses (TFLOP/s/GPU) [{pred['convention']}]",
                 ["term", "TFLOP/s/GPU", "% of peak"])
    hidden = []
    for k, v in pred["waterfall"].items():
        if not all_rows and k != "achieved" and _zero(v):
            hidden.append(label(k))
            continue
        s2.rows.append([label(k), num(v), pct(v / peak)])
    s2.rows.append(["= peak", num(sum(pred["waterfall"].values())), pct(1.0)])
    _hidden(s2, hidden)
    s3 = Section("Communication per GPU per step", ["dim", "collective", "GB", "GB/s", "time ms", "exposed ms", "assumption"])
    for c in pred["comm"]:
        s3.rows.append([c["dim"], c["what"], num(c["bytes"] / 1e9, 2), f"{num(c['gbps'], 0)} ({c['scope']})",
                        num(1e3 * c["time_s"]), num(1e3 * c["exposed_s"]), c["note"]])
    return [s1, s2, s3]


def comparison_sections(cmp: dict[str, Any]) -> list[Section]:
    s = Section(f"Predicted gap: A = {cmp['a']} (global batch {cmp['global_batch_a']}) vs B = {cmp['b']} [{cmp['convention']}]",
                ["cause", "TFLOP/s/GPU", "share of gap"])
    gap = cmp["predicted_gap"]
    s.rows.append(["predicted A", num(cmp["predicted_a"]), ""])
    s.rows.append(["predicted B", num(cmp["predicted_b"]), ""])
    for k, v in cmp["causes"].items():
        s.rows.append([label(k), f"{v:+,.1f}", pct(v / gap) if gap else "—"])
    s.rows.append(["= predicted gap A − B", f"{gap:+,.1f}", pct(1.0) if gap else "—"])
    if "reported_gap" in cmp:
        s.rows.append([label("unexplained"), f"{cmp['unexplained']:+,.1f}", ""])
        s.rows.append([f"= reported gap ({num(cmp['reported_a'])} − {num(cmp['reported_b'])})", f"{cmp['reported_gap']:+,.1f}", ""])
    s.notes.append("Shares: gap × Δln(factor)/Δln(throughput); throughput = peak × kernel efficiency ÷ (HFU/MFU) ÷ last-stage imbalance ÷ (1 + bubble) ÷ comm factor.")
    return [s]


def sweep_section(preds: list[dict[str, Any]], title: str | None = None) -> Section:
    """One row per global batch: the spread of a prediction over an unknown or swept batch."""
    sweep = Section(title or f"Sweep over the global batch [{preds[0]['convention']}]",
                    ["global batch", "microbatches", "bubble", "step s", "TFLOP/s/GPU", "MFU"])
    for p in preds:
        sweep.rows.append([str(p["layout"]["global_batch"]), str(p["layout"]["microbatches"]), f"{p['bubble_fraction']:.3f}",
                           num(p["step_time_s"], 3), num(p["tflops_per_gpu"]), pct(p["mfu"])])
    return sweep


# ------------------------------------------------------------------------------------ reconcile
def waterfall_sections(wf: dict[str, Any], all_rows: bool = True) -> list[Section]:
    """The header, the waterfall and the GEMM check; without ``all_rows`` the terms that are zero
    measured and predicted are left out of the waterfall (a note names them)."""
    conv = wf["convention"]
    head = Section(f"Reconciliation — {wf['trace']} with {wf['config']}", ["quantity", "value"],
                   notes=[f"FLOPs convention: {conv} ({wf['convention_note']})"])
    head.rows = [
        ["ranks / steps", f"{wf['ranks']} ranks, {wf['steps']} steps (mean over them)"],
        ["mean step time (measured)", f"{num(wf['step_time_s'] * 1e3, 3)} ms"],
        ["hardware", f"{wf['gpu']} {wf['precision']}, dense peak {num(wf['peak_tflops'], 1)} TFLOP/s ({wf['gpu_source']})"],
        ["model FLOPs / step / GPU", f"{sci(wf['model_flops_per_gpu'])} [{conv}]"],
        ["achieved", f"{num(wf['achieved_tflops'], 2)} TFLOP/s/GPU, MFU {pct(wf['mfu'], 2)}, HFU {pct(wf['hfu'], 2)}"
                     f" [HFU: {wf.get('hfu_convention', 'forward')}]"],
    ]
    if wf.get("mfu_vs_bf16_peak") is not None:
        head.rows.append(["MFU against the BF16 peak", f"{pct(wf['mfu_vs_bf16_peak'], 2)} (the FP8 peak is the denominator above)"])
    peak = wf["peak_tflops"]
    body = Section(f"Waterfall: peak = achieved + losses (TFLOP/s/GPU) [{conv}]",
                   ["term", "TFLOP/s/GPU", "% of peak", "measured ms/step", "predicted", "measured"])
    hidden = []
    for t in wf["terms"]:
        if not all_rows and _zero(t["tflops"], t.get("time_ms"), t.get("predicted_ms")) and t["term"] != "achieved":
            hidden.append(label(t["term"]))
            continue
        body.rows.append([label(t["term"]), num(t["tflops"], 2), pct(t["tflops"] / peak, 2),
                          num(t["time_ms"], 3) if t.get("time_ms") is not None else "",
                          t.get("predicted", "") or "", t.get("measured", "") or ""])
    body.rows.append(["= peak", num(wf["sum_tflops"], 2), pct(wf["sum_tflops"] / peak, 2), num(wf["step_time_s"] * 1e3, 3), "", ""])
    _hidden(body, hidden)
    out = [head, body]
    gm = wf.get("gemm_check")
    if gm:
        g = Section("Matmul and attention FLOPs counted from the trace's shapes vs the config", ["quantity", "value"])
        g.rows = [
            ["matmul ops with shapes", f"{gm['ops']:,} ({gm['ops_per_step']:.1f} per step)"],
            ["forward matmul FLOPs / step / GPU (trace)", sci(gm["trace_fwd_flops_per_step"])],
            ["× 3 (fwd + wgrad + dgrad)", sci(gm["trace_train_flops_per_step"])],
            [gm['config_flops_what'] + ' / step / GPU', f"{sci(gm['config_flops_per_step'])} [{conv}]"],
            ["ratio trace / config", f"{gm['ratio']:.3f}"],
        ]
        if gm.get("trace_attention_flops_per_step") is not None:
            g.rows += [
                ["attention FLOPs / step / GPU (trace shapes) [torch]", sci(gm["trace_attention_flops_per_step"])],
                ["config attention FLOPs / step / GPU [torch]", sci(gm["config_attention_flops_per_step"])],
                ["ratio trace / config (attention)", f"{gm['attention_ratio']:.3f}"],
            ]
        g.rows.append(["verdict", gm["verdict"]])
        out.append(g)
    tf = wf.get("trace_flops")
    if tf:
        t = Section("Executed FLOPs from the trace's shapes [torch: as torch.utils.flop_counter]", ["quantity", "value"])
        t.rows = [["matmul FLOPs / step", sci(tf["matmul_per_step"])],
                  ["attention FLOPs / step", sci(tf["attention_per_step"])],
                  ["executed FLOPs / step", sci(tf["executed_per_step"])]]
        out.append(t)
    cb = [r for r in wf.get("comm_bytes") or [] if r["measured_bytes"] is not None or r["predicted_bytes"] is not None]
    if cb:
        s = Section("Bytes per dimension: measured (kernels with a size, bus bytes) beside the model, per rank and step",
                    ["dim", "measured MB", "kernels (sized)", "predicted MB", "measured / predicted", ""],
                    notes=["! : more than 20 % apart (a wrong layout in the configuration, or a collective the model does not expect)"]
                    if any(r["warning"] for r in cb) else [])
        for r in cb:
            s.rows.append([r["dim"], "" if r["measured_bytes"] is None else num(r["measured_bytes"] / 1e6, 3),
                           f"{num(r['kernels'], 1)} ({num(r['sized'], 1)})",
                           "" if r["predicted_bytes"] is None else num(r["predicted_bytes"] / 1e6, 3),
                           "" if r["ratio"] is None else f"{r['ratio']:.2f}x", "!" if r["warning"] else ""])
        out.append(s)
    return out


#: the two ways ``compare`` splits a gap: title (formatted with the comparison's fields),
#: columns, the total row's (label, A, B, gap) fields, the terms' (A, B, contribution) fields,
#: the field of the contributions' sum, decimals, the note under the table
_GAPS = {
    "tflops": (
        "Gap in achieved TFLOP/s/GPU: A = {a}, B = {b} [{convention}]",
        ["term", "A", "B", "A − B (contribution to the gap)"],
        ("achieved", "achieved_a", "achieved_b", "gap"), ("a", "b", "contribution"), "sum_contributions", 2,
        "achieved = peak − Σ losses, so a loss contributes (loss in B − loss in A) and the peak (peak A − peak B);"
        " the contributions sum to the gap exactly.",
    ),
    "time": (
        "Step time, B − A: A = {a}, B = {b} ({unit})",
        ["term", "A ms", "B ms", "B − A ms (contribution to the gap)"],
        ("step time", "step_ms_a", "step_ms_b", "gap_ms"), ("a_ms", "b_ms", "contribution_ms"), "sum_contributions_ms", 3,
        "No run configuration given, so the comparison is in time: each step is an exact partition, "
        "so the bucket differences sum to the step-time gap exactly. Pass --config (or --config-a/-b) "
        "for the same split in TFLOP/s/GPU.",
    ),
}


def _gap_section(cmp: dict[str, Any], how: str, all_rows: bool) -> Section:
    """A comparison's gap split into terms (:data:`_GAPS`): the total row, a row per term (its
    label, A, B and signed contribution), the sum of the contributions; without ``all_rows`` the
    terms zero in both runs are left out (a note names them)."""
    title, columns, (total, total_a, total_b, gap), (a, b, contribution), sum_key, digits, note = _GAPS[how]
    s = Section(title.format(**cmp), columns)
    s.rows.append([total, num(cmp[total_a], digits), num(cmp[total_b], digits), f"{cmp[gap]:+,.{digits}f}"])
    hidden = []
    for t in cmp["terms"]:
        if not all_rows and _zero(t[a], t[b], t[contribution]):
            hidden.append(label(t["term"]))
            continue
        s.rows.append([label(t["term"]), num(t[a], digits), num(t[b], digits), f"{t[contribution]:+,.{digits}f}"])
    s.rows.append(["= gap (sum of contributions)", "", "", f"{cmp[sum_key]:+,.{digits}f}"])
    s.notes.append(note)
    _hidden(s, hidden)
    return s


def trace_comparison_sections(cmp: dict[str, Any], all_rows: bool = True) -> list[Section]:
    """The gap in achieved TFLOP/s/GPU split into waterfall terms; without ``all_rows`` the terms
    zero in both runs are left out (a note names them)."""
    return [_gap_section(cmp, "tflops", all_rows)]


def time_comparison_sections(cmp: dict[str, Any], all_rows: bool = True) -> list[Section]:
    """The step-time gap split into the time buckets; without ``all_rows`` the buckets zero in
    both runs are left out (a note names them)."""
    return [_gap_section(cmp, "time", all_rows)]


# ------------------------------------------------------------------------------------ output
def advice_check_sections(rows: list[dict[str, Any]]) -> list[Section]:
    """``compare``'s check of A's findings against B: each finding, its predicted gain, what B measured."""
    if not rows:
        return []
    s = Section("A's findings checked against B: predicted gain beside the measured change (ms per step)",
                ["finding of A", "A ms", "predicted gain", "measured gain (A − B step)", "same loss in B", "loss A − B", "verdict"])
    for r in rows:
        s.rows.append([r["label"], num(r["a_ms_per_step"], 3), "-" if r["predicted_gain_ms"] is None else num(r["predicted_gain_ms"], 3),
                       signed(r["measured_gain_ms"]),
                       "-" if r["b_ms_per_step"] is None else num(r["b_ms_per_step"], 3),
                       signed(r["loss_change_ms"]), r["verdict"] or "-"])
    s.notes.append("measured gain: A's mean step minus B's (positive: B is faster); verdict: came (within 10 % of the prediction), "
                   "partly (less), more, none (B is not faster); '-' where the finding had no predicted gain (-c prices them).")
    return [s]


def _markdown(sections: list[Section]) -> str:
    out = []
    for s in sections:
        out.append(f"### {s.title}\n")
        out.append("| " + " | ".join(s.columns) + " |")
        out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(s.columns))) + "|")
        for r in s.rows:
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
        for n in s.notes:
            out.append(f"\n{n}")
        out.append("")
    return "\n".join(out) + "\n"


#: columns of words, left-justified whatever their cells
_TEXT_COLUMNS = ("assumption", "collective", "value", "predicted", "measured", "what", "name", "source", "rule", "layout")
#: a cell that is a number, with a sign, a unit or a share at most: the column is right-justified
_NUMBER = re.compile(r"^(?:[-+−~≈×]?\s?[\d.,]+(?:e[-+]?\d+)?\s?(?:%|[A-Za-zµ/×]{1,8})?|—|-|n/a)$")


def render(sections: list[Section], fmt: str, doc: dict[str, Any] | None = None, console: Console | None = None) -> str | None:
    """Return markdown / JSON text, or print rich tables to ``console`` (``table``)."""
    if fmt == "json":
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
    if fmt == "markdown":
        return _markdown(sections)
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    assert console is not None, "fmt='table' prints to a console"
    for s in sections:
        t = Table(title=escape(s.title), title_justify="left", caption=escape("\n".join(s.notes)) or None, caption_justify="left")
        # a column with no text in any row (e.g. "predicted" once the zero rows are hidden) is not shown
        shown = [i for i in range(len(s.columns)) if i == 0 or not s.rows or any(r[i] for r in s.rows)]
        for i in shown:
            c = s.columns[i]
            text = i == 0 or c in _TEXT_COLUMNS or not all(_NUMBER.match(r[i]) for r in s.rows if r[i])
            t.add_column(c, justify="left" if text else "right")
        for r in s.rows:
            t.add_row(*[escape(r[i]) for i in shown])
        # a table with a header and nothing under it reads as a bug: say so
        console.print(t if s.rows else Text.assemble((s.title, "italic"), ": none", *[f"\n{n}" for n in s.notes]))
    return None


def emit(sections: list[Section], fmt: Any, doc: dict[str, Any], output: Path | None, outputs: Any = None) -> None:
    """Write sections as a rich table / markdown, or ``doc`` as JSON (``fmt``: one of those
    :class:`~traceanalyzer.render.formats.Format`), to stdout or ``output`` (through ``outputs``, a
    :class:`traceanalyzer.outputs.Outputs` that knows the command's inputs: never over one of them,
    never a partial file)."""
    from traceanalyzer.render.formats import Format, write

    if Format(fmt) is Format.table:  # render() escapes user text: markup stays on
        def table(console: Any) -> None:
            render(sections, "table", console=console)

        write(table, output, outputs, width=140, file_width=160, markup=True)
    else:
        write(cast(str, render(sections, Format(fmt).value, doc=doc)), output, outputs)  # markdown, JSON: text
