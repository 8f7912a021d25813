#!/usr/bin/env python
"""Benchmark: what each view command costs on one real trace, as a user runs it.

    python scripts/bench_views.py [TRACE] [--repeat 3] [--commands breakdown,kernels,...]

Every command runs as a whole process (``python -m traceanalyzer CMD TRACE -f json -o /dev/null
-q``: interpreter start, imports, parse, classify, the view, the JSON written), each ``--repeat``
times, commands interleaved round by round so that a change in the machine's load touches them
alike. Reported per command: the median wall time, its min and max, the median CPU time (user +
system of the process and its children: rank workers included) and the largest peak RSS
(``ru_maxrss`` of the process or of any worker it started).

Default trace: ``df_index_resolver`` (HTA's public test trace: 3.0 MB gzip, 53.7 MB of JSON,
5 steps), from the shared traces beside the checkout. Prints a markdown table; ``--json FILE``
keeps every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

#: command -> its arguments after the trace (each writes JSON to /dev/null)
COMMANDS = {
    "breakdown": ["-f", "json"],
    "report": ["-f", "json"],
    "kernels": ["-f", "json"],
    "ops": ["-f", "json"],
    "annotations": ["-f", "json"],
    "launches": ["-f", "json"],
    "critical-path": ["-f", "json", "--step", "{step}"],
    "memory": ["-f", "json"],
}


def run_once(cmd: list[str]) -> dict:
    """One whole process: wall, CPU (it and its children) and peak RSS of the largest."""
    # a fresh wrapper per run, so that RUSAGE_CHILDREN holds this run's processes only
    wrapper = (
        "import resource, subprocess, sys, time, json\n"
        "t = time.perf_counter()\n"
        "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "w = time.perf_counter() - t\n"
        "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
        "print(json.dumps({'rc': r.returncode, 'wall_s': w, 'cpu_s': u.ru_utime + u.ru_stime, "
        "'rss_mb': u.ru_maxrss / 1024, 'stderr': r.stderr.decode()[-300:]}))\n"
    )
    out = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", type=Path, default=REAL)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--commands", default=",".join(COMMANDS), help="comma separated, from: " + ", ".join(COMMANDS))
    ap.add_argument("--step", default="2", help="the step critical-path analyses (default 2)")
    ap.add_argument("--json", type=Path, help="write every run here")
    args = ap.parse_args()
    names = [c for c in args.commands.split(",") if c]
    unknown = [c for c in names if c not in COMMANDS]
    if unknown:
        ap.error(f"unknown command(s) {unknown}")
    env_note = f"load average {os.getloadavg()[0]:.1f}"
    runs: dict[str, list[dict]] = {c: [] for c in names}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for _ in range(args.repeat):
        for c in names:
            extra = [a.format(step=args.step) for a in COMMANDS[c]]
            cmd = [sys.executable, "-m", "traceanalyzer", c, str(args.trace), *extra, "-o", os.devnull, "-q"]
            r = run_once(cmd)
            if r["rc"] != 0:
                sys.exit(f"{c} failed (exit {r['rc']}): {r['stderr']}")
            runs[c].append(r)
    env_note += f" → {os.getloadavg()[0]:.1f}"
    print(f"{args.trace.name}, {args.repeat} runs each, {started}, {env_note}\n")
    print("| command | wall s (median) | min–max | CPU s (median) | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    for c in names:
        walls = [r["wall_s"] for r in runs[c]]
        print(f"| `{c}` | {statistics.median(walls):.2f} | {min(walls):.2f}–{max(walls):.2f} | "
              f"{statistics.median(r['cpu_s'] for r in runs[c]):.2f} | {max(r['rss_mb'] for r in runs[c]):.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"trace": str(args.trace), "started": started, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
