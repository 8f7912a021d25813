#!/usr/bin/env python
"""Benchmark: polars' two engines on the classification, and the engine traceanalyzer picks.

    python scripts/bench_engine.py                 # the shared traces below, 5 runs each
    python scripts/bench_engine.py FILE ... --repeat 3

For every trace and every choice, a fresh process loads the trace, runs ``analyze`` once to warm
up, then times one more ``analyze`` (CPU time of every thread, ``time.process_time``) and reports
the process's peak RSS (``ru_maxrss``, the load included). The choices, alternated run by run:

* ``streaming``  every classification query on polars' streaming engine (polars 2's default);
* ``in-memory``  every classification query on the in-memory engine;
* ``by size``    what traceanalyzer does (``traceanalyzer.queries``: in-memory below
  ``LARGE_EVENTS`` events, streaming from there).

Printed: a markdown table of medians (min–max in brackets).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
TRACES = ROOT.parent / "shared" / "traces"
DEFAULT = [
    TRACES / "kineto-public" / "param-dlrm-v100-8rank" / "worker1_step_12.1694128201556.pt.trace.json.gz",
    TRACES / "h200" / "base" / "rank0.pt.trace.json.gz",
    TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz",
]
CHOICES = {"streaming": 1, "in-memory": 10**12, "by size": None}

WORKER = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])
import traceanalyzer as ta
from traceanalyzer import queries
if sys.argv[2] != "None":
    queries.LARGE_EVENTS = int(sys.argv[2])
trace = ta.load(sys.argv[1])
ta.analyze(trace)
t = time.process_time()
ta.analyze(trace)
print(json.dumps({"cpu_s": time.process_time() - t, "events": trace.events.height,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(path: Path, threshold) -> dict:
    p = subprocess.run([sys.executable, "-c", WORKER, str(path), str(threshold), str(SRC)], capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def spread(xs: list[float], fmt: str) -> str:
    return f"{statistics.median(xs):{fmt}} ({min(xs):{fmt}}–{max(xs):{fmt}})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print("| trace | events | choice | `analyze` CPU ms | peak RSS MiB |")
    print("|---|---:|---|---:|---:|")
    for path in args.files:
        runs: dict[str, list[dict]] = {c: [] for c in CHOICES}
        for _ in range(args.repeat):
            for choice, threshold in CHOICES.items():
                runs[choice].append(run(path, threshold))
        for choice, rs in runs.items():
            print(f"| {path.name[:40]} | {rs[0]['events']:,} | {choice} | {spread([r['cpu_s'] * 1000 for r in rs], '.0f')} "
                  f"| {spread([r['rss_mib'] for r in rs], '.0f')} |", flush=True)


if __name__ == "__main__":
    main()
