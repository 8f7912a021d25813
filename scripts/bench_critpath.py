#!/usr/bin/env python
"""Benchmark: the critical path of the largest real trace, ours vs HTA, each in a fresh process.

    python scripts/bench_critpath.py [TRACE] [--hta /path/to/hta-venv/bin/python]

Default trace: ``df_index_resolver`` (54 MB of JSON, 5 ProfilerSteps, 123k events), from the
shared traces beside the checkout. Measured (in-process seconds, imports excluded; peak RSS =
``ru_maxrss`` of the worker process):

* ``ours, one step``: ``load`` + ``analyze`` + ``critical_path(step=<second step>)``;
* ``ours, every step``: the same with every step in one graph;
* ``HTA, one step``: ``TraceAnalysis(trace_dir)`` + ``critical_path_analysis(rank, "ProfilerStep",
  instance_id=1)`` (HTA analyses one annotation instance per call), when an HTA interpreter is
  given (``--hta`` or ``$HTA_PYTHON``).

Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
REAL = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

OURS = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
from traceanalyzer.parsers import load
from traceanalyzer.api import analyze
from traceanalyzer.classify.critical_path import critical_path
t0 = time.perf_counter()
tr = load(sys.argv[1]); a = analyze(tr)
t1 = time.perf_counter()
steps = sorted(a.windows["step"].unique().to_list())
step = None if sys.argv[2] == "all" else steps[min(1, len(steps) - 1)]
cp = critical_path(tr, step, analysis=a)
t2 = time.perf_counter()
print(json.dumps({"load_analyze_s": t1 - t0, "cp_s": t2 - t1, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "steps": cp.summary.height, "rounds": int(cp.summary["rounds"][0]), "events": tr.events.height,
                  "path_ms": [round(v / 1e6, 3) for v in cp.summary["path_ns"].to_list()]}))
"""

HTA = r"""
import json, logging, resource, sys, time, warnings
logging.disable(logging.WARNING); warnings.filterwarnings("ignore")
from hta.trace_analysis import TraceAnalysis
t0 = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
rank = list(a.t.traces.keys())[0]
g, ok = a.critical_path_analysis(rank=rank, annotation="ProfilerStep", instance_id=1)
t2 = time.perf_counter()
total = g.get_critical_path_breakdown().duration.sum()
print(json.dumps({"load_s": t1 - t0, "cp_s": t2 - t1, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "path_ms": round(total / 1e3, 3)}))
"""


def run(cmd: list[str]) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?", default=str(REAL))
    ap.add_argument("--hta", default=os.environ.get("HTA_PYTHON", ""))
    args = ap.parse_args()
    rows = []
    for which in ("one", "all"):
        r = run([sys.executable, "-c", OURS, args.trace, which, str(SRC)])
        rows.append((f"ours, {'one step' if which == 'one' else 'every step'}", f"{r['load_analyze_s']:.2f}", f"{r['cp_s']:.2f}",
                     f"{r['rss_mb']:.0f}", f"{r['steps']} step(s), {r['rounds']} rounds, path ms {r['path_ms']}"))
    if args.hta:
        trace_dir = str(Path(args.trace).parent)
        r = run([args.hta, "-c", HTA, trace_dir])
        rows.append(("HTA, one step", f"{r['load_s']:.2f}", f"{r['cp_s']:.2f}", f"{r['rss_mb']:.0f}", f"path ms {r['path_ms']}"))
    print("| run | load (+analyze) s | critical path s | peak RSS MB | notes |")
    print("|---|---:|---:|---:|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
