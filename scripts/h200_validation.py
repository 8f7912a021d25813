"""The H200 validation tables of docs/validation.md: each recorded run, predicted vs measured.

    python scripts/h200_validation.py TRACES_DIR [MORE_DIR]

TRACES_DIR holds one folder per run (``base``, ``recompute``, ``stalls``, ``small``, ``compiled``,
``b4``, each with ``rank0.pt.trace.json.gz`` and ``truth.json``); MORE_DIR (optional) further
runs of the same recording with ``truth.jsonl`` and a folder per run. Configurations:
``fixtures/configs/h200_<run>.toml`` where one exists, else base's (or small's) moved by
``--set``. Prints Markdown.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
sys.path.insert(0, str(SRC))

from traceanalyzer import api  # noqa: E402
from traceanalyzer.model import load_config  # noqa: E402
from traceanalyzer.model.memory import estimate_memory  # noqa: E402
from traceanalyzer.model.whatif import apply_sets, project  # noqa: E402
from traceanalyzer.reconciliation import waterfall  # noqa: E402
from traceanalyzer.reconciliation.anchor import anchor_from_analysis  # noqa: E402

CFG = ROOT / "fixtures" / "configs"
PEAK = 989.4  # H200 dense bf16 TFLOP/s (the tool's table)
SETS = {  # run -> (configuration it is derived from, --set) for runs without a configuration file
    "b1": ("base", ["micro_batch=1", "global_batch=1", "grad_allreduce=false"]),
    "b2": ("base", ["micro_batch=2", "global_batch=2", "grad_allreduce=false"]),
    "b16": ("base", ["micro_batch=16", "global_batch=16", "grad_allreduce=false"]),
    "s1024": ("base", ["seq_length=1024", "grad_allreduce=false"]),
    "s4096": ("base", ["seq_length=4096", "micro_batch=4", "global_batch=4", "grad_allreduce=false"]),
    "small_b16": ("small", ["micro_batch=16", "global_batch=16"]),
    "mlprc": ("base", ["recompute=mlp", "grad_allreduce=false"]),
}


def config_of(run: str):
    path = CFG / f"h200_{run}.toml"
    if path.exists():
        return load_config(path)
    if run not in SETS:
        return None
    base, sets = SETS[run]
    return apply_sets(load_config(CFG / f"h200_{base}.toml"), sets)


def pct(a: float, b: float) -> str:
    return f"{100 * (a / b - 1):+.1f} %"


def main() -> None:
    traces = Path(sys.argv[1])
    more = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    truth = {d.name: json.loads((d / "truth.json").read_text()) for d in sorted(traces.iterdir()) if (d / "truth.json").exists()}
    where = {r: traces / r for r in truth}
    if more is not None:
        for line in (more / "truth.jsonl").read_text().splitlines():
            if line.strip():
                t = json.loads(line)
                truth[t["variant"]] = t
                where[t["variant"]] = more / t["variant"]
    print("| run | b × s | step measured (unprofiled) | step in the trace | MFU measured [torch] | MFU from the trace [torch] | "
          "FLOPs/step FlopCounterMode | trace FLOPs | memory measured | predicted | peak at |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run, t in truth.items():
        cfg = config_of(run)
        c = t["config"]
        mem = f"{t['peak_mem_bytes'] / 2**30:.2f} GiB" if t.get("peak_mem_bytes") else "—"
        trace = where[run] / "rank0.pt.trace.json.gz"
        if cfg is None:  # a recipe the configuration cannot describe (recompute of the MLP only)
            from traceanalyzer.reconciliation.gemm import trace_flops  # noqa: PLC0415

            tf = trace_flops(api.load(trace))["executed_per_step"] if trace.exists() else None
            print(f"| `{run}` | {c['b']} × {c['s']} | {t['step_s_median'] * 1e3:.1f} ms | — | — | — | "
                  f"{t['measured_flops_per_step']:.4e} | " + (f"{tf:.4e} ({pct(tf, t['measured_flops_per_step'])})" if tf else "—")
                  + f" | {mem} | not modelled | — |")
            continue
        est = estimate_memory(cfg)
        pred_mem = f"{est.total_bytes / 2**30:.2f} GiB ({pct(est.total_bytes, t['peak_mem_bytes'])})"
        from traceanalyzer.model.flops import step_flops  # noqa: PLC0415

        mfu_true = step_flops(cfg, "torch").model / t["step_s_median"] / 1e12 / PEAK
        if trace.exists():
            an = api.analyze(trace, workers=1)
            wf = waterfall(an, cfg, convention="torch")
            tf = wf["trace_flops"]["executed_per_step"]
            cols = [f"{wf['step_time_s'] * 1e3:.1f} ms", f"{100 * wf['mfu']:.1f} %",
                    f"{tf:.4e} ({pct(tf, t['measured_flops_per_step'])})"]
        else:
            cols = ["no trace", "—", "—"]
        print(f"| `{run}` | {c['b']} × {c['s']} | {t['step_s_median'] * 1e3:.1f} ms | {cols[0]} | {100 * mfu_true:.1f} % | "
              f"{cols[1]} | {t['measured_flops_per_step']:.4e} | {cols[2]} | {mem} | {pred_mem} | "
              f"{est.details.get('peak_phase', '—')} |")
    print()
    print("| anchor → target | --set | predicted step | measured (unprofiled) | error | notes |")
    print("|---|---|---|---|---|---|")
    anchors = {}
    for run, (base, sets) in list(SETS.items()) + [("recompute", ("base", ["recompute=full"])),
                                                   ("b4", ("base", ["micro_batch=4", "global_batch=4"])),
                                                   ("b4 ", ("base", ["micro_batch=4", "global_batch=4", "grad_allreduce=false"]))]:
        name = run.strip()
        if name not in truth:
            continue
        if base not in anchors:
            anchors[base] = anchor_from_analysis(api.analyze(where[base] / "rank0.pt.trace.json.gz", workers=1),
                                                 load_config(CFG / f"h200_{base}.toml"))
        res = project(anchors[base], apply_sets(anchors[base].cfg, sets))
        p = res["predicted"]["step_time_s"]
        m = truth[name]["step_s_median"]
        notes = "; ".join(n.replace("extrapolated: ", "").split(":")[0] for n in res["notes"]
                          if n.startswith(("extrapolated", "HOST")))
        print(f"| `{base}` → `{name}` | `{' '.join(sets)}` | {p * 1e3:.1f} ms | {m * 1e3:.1f} ms | {pct(p, m)} | {notes or '—'} |")


if __name__ == "__main__":
    main()
