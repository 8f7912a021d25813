#!/usr/bin/env python
"""Benchmark one rank worker: peak RSS and CPU time of parse + classify of one rank file.

    python scripts/bench_worker.py                       # the real 54 MB trace (+ the 200 MB tiled one if present)
    python scripts/bench_worker.py /tmp/traceanalyzer-bench/big_200MB.json --repeat 3
    python scripts/bench_worker.py FILE --stages         # also where the RSS goes, stage by stage

Each run is a fresh process that does what a pool worker does with one task:
``engine.rank.analyse_rank_file(RankTask(...))`` with the default options (``breakdown``'s: the
compact rank result), in the pool workers' environment (``POLARS_MAX_THREADS`` as a pool of
``--workers`` processes on this machine's cores gives each, the allocator settings of
``engine.pool.malloc_env``). Build the tiled trace with ``scripts/make_big_trace.py --size 200MB -o ...``.
The code measured is this script's checkout (first on the worker's ``PYTHONPATH``, whatever
``PYTHONPATH`` says): to measure another version, run that version's copy of the script.

Printed per run and as the median: the peak RSS (``ru_maxrss``) in MiB, its ratio to the file's
JSON (inflated size for a ``.gz``), the process CPU time (``time.process_time``: every thread,
imports excluded), the wall time of the work and its minor page faults (``ru_minflt``: pages the
kernel handed out fresh, most of the system time).

``--stages``: the worker wraps the parse and classify steps (the functions ``classify_ranks``
calls, and the parse's decode / finish / clean) and, at every entry (``<name``) and exit
(``name>``), reads the current RSS and the peak since the previous mark (``VmHWM`` of
``/proc/self/status``, reset through ``/proc/self/clear_refs`` after each mark). A line is the
interval between two marks: what runs between ``host_tree>`` and ``<recompute_ops`` is the
call tree's ``collect``. The wrappers change no result; their own cost is a few ms.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
REAL = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
BIG = Path("/tmp/traceanalyzer-bench/big_200MB.json")

WORKER = r"""
import json, os, resource, sys, time

STAGES = sys.argv[2] == "stages"
marks = []


def _status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key):
                return int(line.split()[1]) // 1024
    return 0


def mark(name):
    rss, hwm = _status("VmRSS"), _status("VmHWM")
    marks.append((name, rss, hwm, time.process_time()))
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset VmHWM to the current RSS
    except OSError:
        pass


def wrap(module, attr):
    import functools

    fn = getattr(module, attr)

    @functools.wraps(fn)
    def traced(*a, **k):
        mark("<" + attr)
        try:
            return fn(*a, **k)
        finally:
            mark(attr + ">")

    setattr(module, attr, traced)


import polars as pl
from traceanalyzer.engine import rank as R
from traceanalyzer.engine.rank import Options, RankTask, analyse_rank_file

if STAGES:
    from traceanalyzer.classify import comm, idle, recompute
    from traceanalyzer.parsers import clean, kineto

    from traceanalyzer.classify import pipeline

    for name in ("_parse", "step_starts"):
        wrap(R, name)
    for name in ("check_event_span", "gpu_windows", "refuse_duplicate_steps", "check_windows", "label_gpu", "partition",
                 "outside_steps", "_with_causes", "check_causes", "_with_profiler_cost"):
        wrap(pipeline, name)
    for name in ("recompute_threads", "host_tree", "recompute_ops", "ops_by_name"):
        wrap(recompute, name)
    for name in ("linking_threads", "collective_instances", "exposure"):
        wrap(comm, name)
    wrap(idle, "idle_split")
    wrap(kineto, "parse_file")
    wrap(kineto, "_finish")
    wrap(clean, "clean_events")

if os.environ.get("BENCH_LARGE_EVENTS"):  # --engine: polars' engine forced for the classification
    from traceanalyzer import queries

    queries.LARGE_EVENTS = int(os.environ["BENCH_LARGE_EVENTS"])
path = sys.argv[1]
rss0 = _status("VmRSS")
mark("start")
c0, t0, f0 = time.process_time(), time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
res = analyse_rank_file(RankTask(index=0, path=path, opts=Options(), source=path))
cpu, wall, faults = time.process_time() - c0, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
mark("end")
err = res.error or res.deferred
print(json.dumps({
    # the marks reset VmHWM, which also loses the earlier peak for ru_maxrss: take the marks' highest
    "cpu_s": cpu, "wall_s": wall, "faults": faults, "rss_mib": max([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024] + [m[2] for m in marks]),
    "base_mib": rss0, "threads": pl.thread_pool_size(), "code": os.path.dirname(os.path.dirname(R.__file__)), "steps": None if res.steps is None else res.steps.height,
    "error": None if err is None else str(err), "marks": marks if STAGES else [],
}))
"""


def json_bytes(path: Path) -> int:
    if path.name.endswith(".gz"):
        n = 0
        with gzip.open(path) as fh:
            while chunk := fh.read(1 << 24):
                n += len(chunk)
        return n
    return path.stat().st_size


def worker_env(workers: int) -> dict:
    sys.path.insert(0, str(SRC))
    from traceanalyzer.engine.pool import malloc_env
    from traceanalyzer.engine.rank import default_workers

    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    threads = max(1, default_workers() // max(1, workers))
    env["POLARS_MAX_THREADS"] = str(threads)
    env.update(malloc_env(threads, env))
    return env


def run_once(path: Path, stages: bool, env: dict) -> dict:
    p = subprocess.run([sys.executable, "-c", WORKER, str(path), "stages" if stages else "plain"],
                       capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0:
        raise SystemExit(f"worker failed on {path} ({p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def stage_table(marks: list) -> list[str]:
    """One line per interval between two marks: peak RSS in it, its rise over the RSS at the
    interval's start, the RSS at its end, CPU seconds."""
    rows = [f"  {'interval':<46} {'peak MiB':>9} {'+peak':>7} {'RSS end':>8} {'CPU s':>6}"]
    for (a, rss_a, _, cpu_a), (b, rss_b, hwm_b, cpu_b) in zip(marks, marks[1:]):
        rows.append(f"  {a + ' .. ' + b:<46} {hwm_b:>9} {hwm_b - rss_a:>+7} {rss_b:>8} {cpu_b - cpu_a:>6.2f}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path, help="rank files (default: the real 54 MB trace, and the 200 MB tiled one if built)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh-process runs per file (default 3)")
    ap.add_argument("--workers", type=int, default=0, help="size of the pool the worker belongs to, for its polars threads (default: one per core)")
    ap.add_argument("--stages", action="store_true", help="print the RSS stage by stage (of the last run)")
    ap.add_argument("--json", type=Path, help="write every run here")
    ap.add_argument("--engine", choices=["by-size", "streaming", "in-memory"], default="by-size",
                    help="polars' engine for the classification: traceanalyzer's choice by the rank's size (default), or one forced")
    args = ap.parse_args()
    files = args.files or [f for f in (REAL, BIG) if f.exists()]
    env = worker_env(args.workers or os.cpu_count() or 1)
    if args.engine != "by-size":
        env["BENCH_LARGE_EVENTS"] = "1" if args.engine == "streaming" else str(10**12)
    out = []
    for f in files:
        size = json_bytes(f)
        runs = []
        for i in range(args.repeat):
            r = run_once(f, args.stages and i == args.repeat - 1, env)
            runs.append(r)
            print(f"{f.name}: run {i + 1}: peak {r['rss_mib']:.0f} MiB ({r['rss_mib'] * 2**20 / size:.2f}x the JSON), "
                  f"CPU {r['cpu_s']:.2f} s, wall {r['wall_s']:.2f} s, {r['faults']:,} page faults, base {r['base_mib']} MiB, "
                  f"{r['threads']} polars threads{', ERROR ' + r['error'] if r['error'] else ''}", flush=True)
        med = {k: statistics.median(r[k] for r in runs) for k in ("rss_mib", "cpu_s", "wall_s", "faults")}
        print(f"{f.name}: measured the traceanalyzer package in {runs[-1]['code']} (this script's checkout: it comes "
              "first on the worker's PYTHONPATH; run the script of the checkout to measure)")
        print(f"{f.name}: JSON {size / 2**20:.0f} MiB; median of {len(runs)}: peak {med['rss_mib']:.0f} MiB = "
              f"{med['rss_mib'] * 2**20 / size:.2f}x the JSON, CPU {med['cpu_s']:.2f} s, wall {med['wall_s']:.2f} s, "
              f"{med['faults']:,.0f} page faults")
        if runs[-1]["marks"]:
            print("\n".join(stage_table(runs[-1]["marks"])))
        out.append({"file": str(f), "json_bytes": size, "runs": runs, "median": med})
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
