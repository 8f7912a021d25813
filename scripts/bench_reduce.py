#!/usr/bin/env python
"""Benchmark: the coordinator's memory and time for the reduce of an N-rank job, without workers.

    python scripts/bench_reduce.py                  # 8, 32, 64 ranks, median of 3
    python scripts/bench_reduce.py --ranks 8,64 --repeat 1

The real 54 MB trace (``df_index_resolver``) is analysed once, in this process, into the
compact rank result a worker sends back (``engine.rank.analyse_rank_file``), which is pickled
to ``--work``. Then, for each N, a fresh process unpickles it N times (as N results arriving
from workers would be: each copy its own memory), labels the copies ranks 0..N-1, and runs what
the coordinator runs after the workers: ``job_trace`` + ``reduce_job`` + the JSON document.

Reported per N (median of ``--repeat`` fresh processes): the process's peak RSS
(``ru_maxrss``), its RSS with the N results held before the reduce, the results' pickled size,
the reduce + document CPU time, and the size of ``Analysis.collectives``
(``estimated_size``). The JSON document's SHA-256 is printed so that two versions of the code
can be compared for byte-identical output (the rank files' paths are the same in every run).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import tempfile
from pathlib import Path

from benchkit import RSS_KB, run_json

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
REAL = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

PREPARE = r"""
import pickle, sys
from traceanalyzer.engine.rank import Options, RankTask, analyse_rank_file
res = analyse_rank_file(RankTask(0, sys.argv[1], Options(), sys.argv[1]))
assert res.error is None and res.deferred is None, (res.error, res.deferred)
open(sys.argv[2], "wb").write(pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL))
print("{}")
"""

REPLAY = r"""
import hashlib, json, pickle, resource, sys, time
from pathlib import Path
import polars as pl
from traceanalyzer.engine.job import job_trace, reduce_job
from traceanalyzer.engine.rank import Options
from traceanalyzer.render import json as json_render

""" + RSS_KB + r"""

blob = open(sys.argv[1], "rb").read()
n = int(sys.argv[2])
before_kb = rss_kb()
results = []
for i in range(n):
    r = pickle.loads(blob)  # each result its own copy, as from a worker
    r.index, r.file = i, f"rank{i:04d}.json"
    r.meta = {**r.meta, "rank": i, "file": r.file}
    r.relabel(i)  # as a worker reading rank i's file would have labelled it
    results.append(r)
del blob
held_kb = rss_kb()
c0 = time.process_time()
w0 = time.perf_counter()
trace = job_trace(results, [Path(r.file) for r in results])
an = reduce_job(results, trace, Options(), "bench")
doc = json_render.dumps(json_render.document(an))
cpu = time.process_time() - c0
wall = time.perf_counter() - w0
coll = an.collectives
print(json.dumps({
    "ranks": n, "cpu_s": cpu, "wall_s": wall,
    "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "start_rss_kb": before_kb, "held_rss_kb": held_kb,
    "collectives_rows": coll.height, "collectives_mb": coll.estimated_size() / 2**20,
    "doc_bytes": len(doc), "doc_sha256": hashlib.sha256(doc).hexdigest(),
}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,32,64", help="comma separated rank counts")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per rank count (median reported)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "traceanalyzer-bench-reduce")
    ap.add_argument("--trace", type=Path, default=REAL, help="the rank file replayed (default: the real 54 MB trace)")
    ap.add_argument("--fresh", action="store_true", help="analyse the trace again even if its result is in --work")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    args = ap.parse_args(argv)
    if not args.trace.exists():
        print(f"error: {args.trace}: no such file (the shared traces live in ../shared/traces)", file=sys.stderr)
        return 3
    args.work.mkdir(parents=True, exist_ok=True)
    # the rank result is analysed again when the trace or any module of the package changed (by
    # path and modification time): the pickled classes must match the code replaying them
    blob = args.work / f"rank_result_{os.getpid() if args.fresh else 'cached'}.pkl"
    stamp = args.work / "rank_result.source"
    source = str(args.trace) + str(sorted((p.stat().st_mtime_ns, str(p)) for p in (SRC / "traceanalyzer").rglob("*.py")))
    if args.fresh or not blob.exists() or not stamp.exists() or stamp.read_text() != source:
        print(f"analysing {args.trace.name} once ...", file=sys.stderr, flush=True)
        run_json([PREPARE, str(args.trace), str(blob)])
        stamp.write_text(source)
    size_mb = blob.stat().st_size / 2**20
    rows = []
    for n in [int(x) for x in args.ranks.split(",")]:
        runs = []
        for i in range(args.repeat):
            print(f"replaying {n} ranks ({i + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
            runs.append(run_json([REPLAY, str(blob), str(n)]))
        med = {k: statistics.median(r[k] for r in runs) for k in ("rss_kb", "held_rss_kb", "start_rss_kb", "cpu_s", "wall_s")}
        shas = {r["doc_sha256"] for r in runs}
        rows.append({**runs[0], **med, "runs": runs, "doc_sha256": ",".join(sorted(shas))})
    print(f"\none rank result: {size_mb:.2f} MiB pickled; median of {args.repeat} fresh processes\n")
    print("| ranks | peak RSS | RSS with results held | reduce + JSON CPU (s) | collectives rows | collectives MiB | JSON sha256 |")
    print("|---|---|---|---|---|---|---|")
    base = rows[0]["rss_kb"] if rows else 1
    for r in rows:
        print(f"| {r['ranks']} | {r['rss_kb'] / 1024:.0f} MiB ({r['rss_kb'] / base:.2f}x) | {r['held_rss_kb'] / 1024:.0f} MiB "
              f"| {r['cpu_s']:.2f} | {r['collectives_rows']:,} | {r['collectives_mb']:.1f} | {r['doc_sha256'][:12]} |")
    if args.json:
        args.json.write_text(json.dumps({"result_mib": size_mb, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
