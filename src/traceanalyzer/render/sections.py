"""Text cells of a report model, shared by the HTML and Markdown renderers.

Formatting only (fixed decimals, labels); every number is read from the report model. Each
numeric cell keeps the JSON path of the number it shows (``Cell.path``), so the HTML can carry it
(``data-path``) and tests can check every displayed number against ``--format json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceanalyzer.buckets import BUCKET_LABELS as LABELS
from traceanalyzer.buckets import BUCKETS as BUCKET_ORDER
from traceanalyzer.render.names import shorten
from traceanalyzer.render.units import byte_column

MS = "{:.3f}"
PCT = "{:.1f}"
US = "{:.1f}"
TFLOPS = "{:.1f}"


@dataclass
class Cell:
    text: str
    path: str | None = None  # JSON path of the number shown, e.g. "ranks.0.buckets.idle.ms"
    code: bool = False  # a kernel name or other identifier: monospace, escaped
    title: str | None = None  # full text when ``text`` is shortened
    indent: int = 0  # depth in a tree (a cause under its parent)


@dataclass
class Table:
    id: str
    title: str
    headers: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    note: str | None = None


def num(model: dict[str, Any], path: str, fmt: str) -> Cell:
    """A cell showing the number at ``path`` in ``model`` with ``fmt`` (a value that rounds to
    zero is shown without a sign: never "-0.0")."""
    v: Any = model
    for part in path.split("."):
        v = v[int(part)] if isinstance(v, list) else v[part]
    if v is None:  # not known: an empty cell, not a number
        return Cell("")
    text = fmt.format(v)
    if text.startswith("-") and not text.strip("-0.,"):
        text = text[1:]
    return Cell(text, path)


#: the characters a kernel or op name is shortened to in a table (the full name on hover)
NAME_WIDTH = 64


def name_cells(full: list[str], width: int = NAME_WIDTH) -> list[Cell]:
    """A column of kernel or op names, each in at most ``width`` characters, shortened together
    (:func:`traceanalyzer.render.names.shorten`) so that names that differ still read differently;
    a shortened cell carries the full name as its hover text (``title``)."""
    return [Cell(s, code=True, title=None if s == n else n) for s, n in zip(shorten(full, width), full)]


def headline_cells(model: dict[str, Any]) -> list[tuple[str, Cell]]:
    """The headline as (label, cell) pairs."""
    h = model["headline"]
    out = [("mean step time (ms)", num(model, "headline.step_ms", MS))]
    if h["ranks"] > 1:
        out.append((f"slowest rank ({h['slowest_rank']}) step time (ms)", num(model, "headline.slowest_rank_step_ms", MS)))
    out.append(("compute share of the step (%)", num(model, "headline.compute_pct", PCT)))
    first = h.get("finding")
    if first is not None:
        # the headline is finding 1, what the findings list first (a cause within a bucket)
        out.append((f"biggest loss (finding 1): {first['label']} (ms per step)", num(model, "headline.finding.ms_per_step", MS)))
        out.append((f"biggest loss (finding 1): {first['label']} (% of step)", num(model, "headline.finding.pct_of_step", PCT)))
    elif h["biggest_loss"]:
        out.append((f"biggest loss: {h['biggest_loss']['label']} (ms per step)", num(model, "headline.biggest_loss.ms", MS)))
        out.append((f"biggest loss: {h['biggest_loss']['label']} (% of step)", num(model, "headline.biggest_loss.pct", PCT)))
    if h["achieved_tflops"] is not None:
        out.append(("achieved TFLOP/s per GPU", num(model, "headline.achieved_tflops", TFLOPS)))
    if h["mfu"] is not None:
        out.append(("MFU (% of peak)", num(model, "headline.mfu_pct", PCT)))
    if h["hfu"] is not None:
        out.append(("HFU (% of peak)", num(model, "headline.hfu_pct", PCT)))
    return out


def ranks_table(model: dict[str, Any], limit: int | None = None) -> Table:
    headers = ["rank", "steps", "step ms", *[f"{LABELS[b]} ms" for b in BUCKET_ORDER], *[f"{LABELS[b]} %" for b in BUCKET_ORDER], "overlapped comm ms"]
    t = Table("ranks", "Partition per rank (mean per step)", headers)
    ranks = model["ranks"]
    shown = ranks if limit is None else ranks[:limit]
    for i, r in enumerate(shown):
        p = f"ranks.{i}"
        t.rows.append(
            [
                num(model, f"{p}.rank", "{}"),
                num(model, f"{p}.steps", "{}"),
                num(model, f"{p}.step_ms", MS),
                *[num(model, f"{p}.buckets.{b}.ms", MS) for b in BUCKET_ORDER],
                *[num(model, f"{p}.buckets.{b}.pct", PCT) for b in BUCKET_ORDER],
                num(model, f"{p}.overlapped_comm.ms", MS),
            ]
        )
    if len(shown) < len(ranks):
        t.note = f"{len(ranks) - len(shown)} more ranks in the HTML and JSON reports."
    return t


def timeline_table(model: dict[str, Any], limit: int | None = None, tl: dict[str, Any] | None = None) -> Table:
    """Per step of the timeline's rank (``tl``: one of ``more_timelines``; default ``timeline``)."""
    tl = model["timeline"] if tl is None else tl
    rank = tl["rank"]
    idx = [i for i, s in enumerate(model["steps"]) if s["rank"] == rank]
    headers = ["step", "step ms", *[f"{LABELS[b]} ms" for b in BUCKET_ORDER]]
    tid = "timeline-steps" if tl is model["timeline"] else f"timeline-steps-rank-{rank}"
    t = Table(tid, f"Rank {rank}, per step", headers)
    shown = idx if limit is None else idx[:limit]
    for i in shown:
        p = f"steps.{i}"
        t.rows.append([num(model, f"{p}.step", "{}"), num(model, f"{p}.duration_ms", MS), *[num(model, f"{p}.{b}_ms", MS) for b in BUCKET_ORDER]])
    if len(shown) < len(idx):
        t.note = f"{len(idx) - len(shown)} more steps in the HTML and JSON reports."
    return t


def step_ranks_table(model: dict[str, Any], step: int) -> Table:
    """Every rank's partition of one step (the rows of ``steps`` with that step)."""
    headers = ["rank", "step ms", *[f"{LABELS[b]} ms" for b in BUCKET_ORDER], "overlapped comm ms"]
    t = Table(f"step-{step}-ranks", f"Step {step}, per rank", headers)
    for i, s in enumerate(model["steps"]):
        if s["step"] == step:
            p = f"steps.{i}"
            t.rows.append([num(model, f"{p}.rank", "{}"), num(model, f"{p}.duration_ms", MS), *[num(model, f"{p}.{b}_ms", MS) for b in BUCKET_ORDER],
                           num(model, f"{p}.overlapped_comm_ms", MS)])
    return t


def waterfall_table(model: dict[str, Any]) -> Table | None:
    wf = model.get("waterfall")
    if not wf:
        return None
    t = Table("waterfall", "Waterfall: peak to achieved TFLOP/s per GPU", ["term", "TFLOP/s per GPU"])
    t.rows.append([Cell("peak"), num(model, "waterfall.peak_tflops", TFLOPS)])
    for i, term in enumerate(wf["terms"]):
        if num(model, f"waterfall.terms.{i}.tflops", TFLOPS).text.strip("-0.") == "":
            continue  # a term that rounds to zero: no row
        t.rows.append([Cell(f"− {term['label']}"), num(model, f"waterfall.terms.{i}.tflops", TFLOPS)])
    t.rows.append([Cell("= achieved"), num(model, "waterfall.achieved_tflops", TFLOPS)])
    if wf.get("convention"):
        t.note = f"FLOPs convention: {wf['convention']}."
    return t


def kernels_table(model: dict[str, Any]) -> Table:
    t = Table("top-kernels", "Top kernels by total GPU time", ["kernel", "class", "calls", "total ms", "mean µs", "% of step time"])
    names = name_cells([k["name"] for k in model["top_kernels"]])
    for i, k in enumerate(model["top_kernels"]):
        p = f"top_kernels.{i}"
        t.rows.append([names[i], Cell(k["class"]), num(model, f"{p}.calls", "{}"), num(model, f"{p}.total_ms", MS),
                       num(model, f"{p}.mean_us", US), num(model, f"{p}.pct_of_step_time", PCT)])
    t.note = "GPU work starting inside a step window, summed over all ranks and steps; % of the summed step time."
    return t


def kernel_section_table(model: dict[str, Any]) -> Table | None:
    """The kernels section: top kernels by total time, with bucket, exact share and TFLOP/s."""
    k = model.get("kernels")
    if not k:
        return None
    t = Table("kernels", "Top kernels by total GPU time",
              ["kernel", "bucket", "stream", "calls", "total ms", "mean µs", "p99 µs", "bucket ms", "% of step time", "TFLOP/s", "roofline %"])
    names = name_cells([r["name"] for r in k["rows"]])
    for i, r in enumerate(k["rows"]):
        p = f"kernels.rows.{i}"
        t.rows.append([names[i], Cell(r["bucket"]), Cell(r["streams"] or ""), num(model, f"{p}.calls", "{}"),
                       num(model, f"{p}.total_ms", MS), num(model, f"{p}.mean_us", US), num(model, f"{p}.p99_us", US),
                       num(model, f"{p}.bucket_ms", MS), num(model, f"{p}.share_pct", PCT), num(model, f"{p}.tflops", TFLOPS),
                       num(model, f"{p}.roofline_pct", PCT)])
    t.note = ("Summed over all ranks and steps. bucket ms: the kernel's exact share of its bucket (time it alone accounts for; "
              "the shares of a bucket sum to it); TFLOP/s where the launching op recorded shapes (GEMM, attention); "
              "roofline % where the kernel name states its precision. All kernels: traceanalyzer kernels.")
    return t


#: how the idle tree names the idle causes and what the host was doing in host-bound idle
IDLE_LABELS = {"host_bound": "host-bound", "sync": "sync wait", "bubble": "PP bubble", "other": "other"}
HOST_LABELS = {"dataloader": "the data loader (DataLoader __next__)", "optimizer": "the optimizer (Optimizer.step / zero_grad)",
               "ops": "other ops (dispatch, launch)", "untraced": "no recorded op (Python, sleep, I/O)"}


def idle_causes_table(model: dict[str, Any]) -> Table | None:
    """Idle by cause as a tree: idle (its share of the step), its causes indented under it (each
    a share of idle) and under host-bound what the host was doing (each a share of host-bound),
    so the children of a row sum to 100 % of it and no column adds shares of different parents."""
    c = model.get("causes") or {}
    rows = c.get("idle") or []
    if not rows:
        return None
    t = Table("idle-causes", "Idle by cause (mean per step): each cause a share of its parent", ["cause", "ms per step", "share %", "of"])
    if c.get("idle_total"):
        t.rows.append([Cell("idle"), num(model, "causes.idle_total.ms", MS), num(model, "causes.idle_total.pct_of_step", PCT), Cell("step")])
    for i, r in enumerate(rows):
        t.rows.append([Cell(IDLE_LABELS.get(r["cause"], r["cause"].replace("_", " ")), indent=1), num(model, f"causes.idle.{i}.ms", MS),
                       num(model, f"causes.idle.{i}.pct_of_idle", PCT), Cell("idle")])
        if r["cause"] == "host_bound":
            for j, h in enumerate(c.get("host_bound") or []):
                p = f"causes.host_bound.{j}"
                t.rows.append([Cell(HOST_LABELS.get(h["cause"], h["cause"]), indent=2), num(model, f"{p}.ms", MS),
                               num(model, f"{p}.pct_of_host_bound", PCT), Cell("host-bound")])
    if c.get("host_bound"):
        t.note = "Under host-bound: what the thread that launches the GPU's work was doing while the GPU waited for it."
    return t


def host_verdict_table(model: dict[str, Any]) -> Table | None:
    rows = model.get("host_verdict") or []
    if not rows:
        return None
    t = Table("host-verdict", "Host and launches: is the step CPU-bound?",
              ["rank", "CPU-bound", "steps CPU-bound", "GPU waits on host %", "host µs per item", "GPU µs per item", "CUDA graphs"])
    unprof = any(r.get("gpu_wait_share_unprofiled") is not None for r in rows)
    for r in rows:
        # without the profiler where the trace gives an estimate (the verdict is the rule on those)
        wait = r["gpu_wait_share"] if r.get("gpu_wait_share_unprofiled") is None else r["gpu_wait_share_unprofiled"]
        host = r["host_ns_per_kernel"] if r.get("gpu_wait_share_unprofiled") is None else r.get("host_ns_per_kernel_unprofiled")
        t.rows.append([Cell(str(r["rank"])), Cell("yes" if r["cpu_bound"] else "no"), Cell(f"{r['cpu_bound_steps']} of {r['steps']}"),
                       Cell(PCT.format(100 * wait)),  # shown scaled: no data-path (it names the JSON number as shown)
                       Cell("" if host is None else US.format(host / 1000)),
                       Cell("" if r["gpu_ns_per_kernel"] is None else US.format(r["gpu_ns_per_kernel"] / 1000)),
                       Cell("yes" if r["cuda_graphs"] else "no")])
    t.note = ("CPU-bound: the GPU waits on the host for at least 10 % of the step and the host's time per launched item "
              "(dispatch + launch, synchronisations excluded) exceeds the GPU's."
              + (" Both without the profiler's own host work (the unprofiled estimate); as recorded: "
                 + "; ".join(f"rank {r['rank']} {'CPU-bound' if r.get('cpu_bound_profiled') else 'not CPU-bound'}, GPU waits "
                             f"{100 * r['gpu_wait_share']:.1f} %" for r in rows[:4]) + "." if unprof else ""))
    return t


def integrity_table(model: dict[str, Any]) -> Table | None:
    """Every trace-integrity check: passed, failed or skipped, the counts behind it, and for a
    failed one the numbers it makes unreliable."""
    rows = model.get("integrity") or []
    if not rows:
        return None
    t = Table("integrity", "Trace integrity: can these numbers be trusted", ["check", "verdict", "detail", "unreliable"])
    for c in rows:
        verdict = "passed" if c["ok"] is True else "FAILED" if c["ok"] is False else "skipped"
        t.rows.append([Cell(c["check"], code=True), Cell(verdict), Cell(c["detail"]), Cell("; ".join(c["affects"]))])
    bad = sum(1 for c in rows if c["ok"] is False)
    t.note = (f"{bad} check{'s' if bad != 1 else ''} failed: doubt the numbers named in their row." if bad
              else "Every check passed or could not be made (skipped: the detail says why).")
    return t


def findings_table(model: dict[str, Any]) -> Table | None:
    rows = model.get("findings") or []
    if not rows:
        return None
    t = Table("findings", "Findings: the largest losses, largest first",
              ["#", "loss", "ms per step", "% of step", "cause", "remedy", "predicted gain ms"])
    for i, f in enumerate(rows):
        p = f"findings.{i}"
        gain = num(model, f"{p}.predicted_gain_ms", MS)
        if f["predicted_gain_ms"] is None:
            gain = Cell("-", title=f.get("gain_note"))
        t.rows.append([Cell(str(i + 1)), Cell(f["label"]), num(model, f"{p}.ms_per_step", MS),
                       Cell(PCT.format(100 * f["share_of_step"])), Cell(f["cause"]), Cell(f["remedy"]), gain])
    t.note = ("Predicted gain: the what-if model's (traceanalyzer whatif), with a run configuration; '-' where it "
              "cannot price the change (hover for why).")
    return t


def comm_dims_table(model: dict[str, Any]) -> Table | None:
    rows = model["causes"]["comm_by_dimension"] if model.get("causes") else []
    if not rows:
        return None
    t = Table("comm-dimensions", "Communication by parallelism dimension (mean per step)",
              ["dimension", "kernels", "exposed ms", "overlapped ms", "kernel ms", "wait ms", "transfer ms"])
    for i, r in enumerate(rows):
        p = f"causes.comm_by_dimension.{i}"
        t.rows.append([Cell(r["dimension"]), num(model, f"{p}.count", "{}"), num(model, f"{p}.exposed_ms", MS), num(model, f"{p}.overlapped_ms", MS),
                       num(model, f"{p}.kernel_ms", MS), num(model, f"{p}.wait_ms", MS), num(model, f"{p}.transfer_ms", MS)])
    if any(r["transfer_estimated"] for r in rows):
        t.note = "Wait and transfer are estimated (bytes over an assumed bus bandwidth) where not all ranks of a group are loaded."
    return t


def recomputed_table(model: dict[str, Any]) -> Table | None:
    rows = model["causes"]["recomputed_ops"] if model.get("causes") else []
    if not rows:
        return None
    t = Table("recomputed-ops", "Recomputed ops (GPU time, mean per step)", ["op", "calls", "ranks", "GPU ms per step"])
    names = name_cells([r["name"] for r in rows])
    for i, r in enumerate(rows):
        p = f"causes.recomputed_ops.{i}"
        t.rows.append([names[i], num(model, f"{p}.count", "{}"), num(model, f"{p}.ranks", "{}"), num(model, f"{p}.gpu_ms", MS)])
    return t


def step_stragglers_table(model: dict[str, Any]) -> Table | None:
    rows = model["causes"]["stragglers"] if model.get("causes") else []
    if not rows:
        return None
    t = Table("step-stragglers", "The slowest rank of each step, and the rank the others waited on",
              ["step", "slowest rank", "step ms", "median ms", "skew ms", "why (bucket)", "excess ms", "waited on rank", "its wait ms"])
    for i, r in enumerate(rows):
        p = f"causes.stragglers.{i}"
        t.rows.append([num(model, f"{p}.step", "{}"), num(model, f"{p}.slowest_rank", "{}"), num(model, f"{p}.step_ms", MS),
                       num(model, f"{p}.median_step_ms", MS), num(model, f"{p}.skew_ms", MS), Cell((r["straggler_bucket"] or "").replace("_", " ")),
                       num(model, f"{p}.excess_ms", MS), num(model, f"{p}.waited_on_rank", "{}"), num(model, f"{p}.waited_on_wait_ms", MS)])
    t.note = ("Skew: slowest minus median step time. Waited on: the rank with the least collective wait in the step, "
              "i.e. the late arriver the others waited for.")
    return t


def efficiency_table(model: dict[str, Any]) -> Table | None:
    ce = model.get("collective_efficiency")
    if not ce:
        return None
    unit, sizes = byte_column([r["bytes"] for r in ce["rows"]])  # one unit for the column
    t = Table("collective-efficiency", "Collective efficiency: achieved bus bandwidth against the reference",
              ["collective", "group", "ranks", "count", f"size {unit}", "time ms", "busbw GB/s", "reference GB/s", "efficiency"])
    for i, r in enumerate(ce["rows"]):
        p = f"collective_efficiency.rows.{i}"
        t.rows.append([Cell(r["collective"]), Cell(r["group"] or "", code=True), num(model, f"{p}.group_size", "{}"), num(model, f"{p}.count", "{}"),
                       Cell(sizes[i]), num(model, f"{p}.time_ms", MS), num(model, f"{p}.busbw_gbps", TFLOPS),
                       num(model, f"{p}.reference_gbps", TFLOPS), num(model, f"{p}.efficiency", "{:.2f}")])
    refs = sorted({r["reference"] for r in ce["rows"] if r["reference"]})
    note = "Summed over all ranks and steps (bus bandwidth: total bus bytes over total time; efficiency: median over the kernels). "
    note += "Reference: " + "; ".join(refs) + "." if refs else ""
    ex = ce.get("exposed_split")
    if ex:
        note += (f" Exposed communication {ex['exposed_ms']:.3f} ms in all = wait for peers {ex['wait_ms']:.3f} + link speed "
                 f"{ex['link_speed_ms']:.3f} + below the reference {ex['below_reference_ms']:.3f} ms.")
    t.note = note.strip() or None
    return t


def collectives_table(model: dict[str, Any]) -> Table:
    t = Table("top-exposed-collectives", "Top exposed collectives",
              ["collective kernel", "calls", "exposed ms", "kernel ms", "exposed % of kernel", "% of exposed comm"])
    names = name_cells([k["name"] for k in model["top_exposed_collectives"]])
    for i, k in enumerate(model["top_exposed_collectives"]):
        p = f"top_exposed_collectives.{i}"
        t.rows.append([names[i], num(model, f"{p}.calls", "{}"), num(model, f"{p}.exposed_ms", MS), num(model, f"{p}.total_ms", MS),
                       num(model, f"{p}.exposed_pct_of_kernel", PCT), num(model, f"{p}.pct_of_exposed_comm", PCT)])
    t.note = ("Exposed time: communication not hidden under compute or recompute, summed over all ranks and steps; "
              "a moment with several collectives in flight is shared equally among them.")
    if not model["top_exposed_collectives"]:
        t.note = "No exposed communication."
    return t


def inputs_table(model: dict[str, Any]) -> Table:
    unit, sizes = byte_column([f["size_bytes"] for f in model["reproduce"]["inputs"]])  # one unit for the column
    t = Table("inputs", "Input files", ["role", "file", f"size {unit}", "bytes", "sha256"])
    for i, f in enumerate(model["reproduce"]["inputs"]):
        t.rows.append([Cell(f["role"]), Cell(f["path"], code=True), Cell(sizes[i]),
                       num(model, f"reproduce.inputs.{i}.size_bytes", "{}"), Cell(f["sha256"] or "", code=True)])
    return t


def command_text(model: dict[str, Any]) -> str:
    import shlex

    cmd = model["reproduce"]["command"]
    return shlex.join(cmd) if cmd else "(not recorded: report built through the Python API)"


def rank_summary_table(model: dict[str, Any]) -> Table | None:
    """The ranks' distribution per bucket (shown instead of one row per rank), or None."""
    rows = model.get("rank_summary")
    if not rows:
        return None
    t = Table("rank-summary", "Ranks at a glance: mean per step over the ranks (ms)",
              ["", "min", "p50", "mean", "max", "slowest rank", "top ranks"])
    for i, r in enumerate(rows):
        p = f"rank_summary.{i}"
        top = ", ".join(f"{k} ({v:.3f})" for k, v in zip(r["top_ranks"], r["top_ms"]))
        t.rows.append([Cell(r["label"]), *[num(model, f"{p}.{k}_ms", MS) for k in ("min", "p50", "mean", "max")],
                       num(model, f"{p}.max_rank", "{}"), Cell(top)])
    n = rows[0]["ranks"]
    t.note = (f"{n} ranks summarised: each rank's mean per step, then min / median / mean / max over the ranks; "
              "slowest rank: the one with the most time in that row. Every rank: report --ranks all (and the JSON report).")
    return t


def stragglers_table(model: dict[str, Any]) -> Table | None:
    """Ranks slow on several steps and the bucket they were slow in, or None when none was."""
    s = model.get("stragglers")
    if not s or not s["ranks"]:
        return None
    t = Table("stragglers", "Stragglers: ranks slower than the median step on the most steps",
              ["rank", "slow steps", "slowest on", "excess ms", "max excess ms", "slow in", "on steps", "bucket excess ms"])
    for i, r in enumerate(s["ranks"]):
        p = f"stragglers.ranks.{i}"
        t.rows.append([num(model, f"{p}.rank", "{}"), num(model, f"{p}.slow_steps", "{}"),
                       num(model, f"{p}.slowest_steps", "{}"), num(model, f"{p}.excess_ms", MS), num(model, f"{p}.max_excess_ms", MS),
                       Cell(r["bucket_label"]), num(model, f"{p}.bucket_steps", "{}"), num(model, f"{p}.bucket_excess_ms", MS)])
    more = s["slow_ranks"] - len(s["ranks"])
    t.note = (f"A rank is slow on a step when its step time exceeds the median over the ranks by more than {s['tolerance_pct']:g}%; "
              f"excess: its time above the median, summed over its slow steps; slow in: the bucket whose time exceeds its own median "
              f"by the most, on the most of those steps. {s['steps_compared']} step(s) compared"
              + (f"; {more} more slow rank(s) in the JSON report." if more > 0 else "."))
    return t


def straggler_costs_table(model: dict[str, Any]) -> Table | None:
    """What each straggler costs the job, phase by phase (the cross-rank replay), or None."""
    sc = model.get("straggler_costs")
    if not sc or not sc["costs"]:
        return None
    t = Table("straggler-costs", "What each straggler costs the job: step time saved had the rank run that phase like the median rank",
              ["rank", "phase", "before / of", "costs ms/step", "made others wait ms/step", "waited ms/step"])
    for i, r in enumerate(sc["costs"]):
        p = f"straggler_costs.costs.{i}"
        t.rows.append([num(model, f"{p}.rank", "{}"), Cell(r["phase"].replace("_", " ")), Cell(r["collective"] or "step end"),
                       num(model, f"{p}.cost_ms_per_step", MS), num(model, f"{p}.made_wait_ms_per_step", MS),
                       num(model, f"{p}.waited_ms_per_step", MS)])
    made = ", ".join(str(r["rank"]) for r in sc["made_wait"]) or "none"
    err = sc["replay_max_error_pct"]
    t.note = (f"Made the others wait (arrived last more than it waited): rank {made}. Every rank made typical at once saves "
              f"{sc['total_cost_ms_per_step']:.3f} ms per step. The replay of the measured job is within "
              f"{0 if err is None else err:.3f} % of every rank's step.")
    return t
