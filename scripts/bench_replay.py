#!/usr/bin/env python
"""Benchmark: the cross-rank replay and the straggler what-if on N synthetic ranks, and the
coordinator's memory for the reduce that runs the replay.

    python scripts/bench_replay.py                       # 8, 24, 64, 256 ranks, median of 3
    python scripts/bench_replay.py --ranks 8,64 --repeat 1

The 8 rank files of the DLRM job (``fixtures/kineto/dlrm-v100-8rank``) are analysed once, in
this process, into the compact rank results workers send back, pickled to ``--work``. For each N,
a fresh process unpickles rank ``i mod 8`` for every rank ``i < N`` (each copy its own memory, as
from a worker), labels it rank ``i`` of an N-rank world, and runs what the coordinator runs:
``job_trace`` + ``reduce_job`` (which runs the replay of the measured job), then the what-if of
every rank and phase (``straggler_view``). The tiled ranks all share the job's one process
group: every collective instance waits for all N ranks.

Reported per N (median of ``--repeat`` fresh processes): peak RSS (``ru_maxrss``), the RSS with
the results held, the reduce's CPU time, the what-if's CPU time (every rank and phase replayed),
the replay's worst relative difference from the measured steps, the top cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchkit import RSS_KB, run_json

ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT / "fixtures" / "kineto" / "dlrm-v100-8rank"

PREPARE = r"""
import pickle, sys
from pathlib import Path
from traceanalyzer.engine.rank import Options, RankTask, analyse_rank_file
files = sorted(Path(sys.argv[1]).glob("*.json.gz"))
res = [analyse_rank_file(RankTask(i, str(f), Options(), str(f))) for i, f in enumerate(files)]
for r in res:
    assert r.error is None and r.deferred is None, (r.error, r.deferred)
open(sys.argv[2], "wb").write(pickle.dumps([pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in res]))
print("{}")
"""

REPLAY = r"""
import json, pickle, resource, sys, time
from pathlib import Path
from traceanalyzer.engine.job import job_trace, reduce_job
from traceanalyzer.engine.rank import Options

""" + RSS_KB + r"""

blobs = pickle.loads(open(sys.argv[1], "rb").read())
n = int(sys.argv[2])
results = []
for i in range(n):
    r = pickle.loads(blobs[i % len(blobs)])
    r.index, r.file = i, f"rank{i:04d}.json"
    r.meta = {**r.meta, "rank": i, "file": r.file, "world_size": n}
    r.relabel(i)
    results.append(r)
del blobs
held_kb = rss_kb()
c0 = time.process_time()
trace = job_trace(results, [Path(r.file) for r in results])
an = reduce_job(results, trace, Options(), "bench")
reduce_cpu = time.process_time() - c0
reduce_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
from traceanalyzer.api import straggler_view
c1 = time.process_time()
v = straggler_view(an)
whatif_cpu = time.process_time() - c1
rep = an.replay
err = float(((rep["replayed_ms"] - rep["measured_ms"]).abs() / rep["measured_ms"]).max())
top = v.costs.row(0, named=True)
print(json.dumps({
    "ranks": n, "held_rss_kb": held_kb, "reduce_rss_kb": reduce_kb, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "reduce_cpu_s": reduce_cpu, "whatif_cpu_s": whatif_cpu, "replay_max_rel_err": err,
    "points": an.replay_points.height, "kernels": an.collectives.height, "cost_rows": v.costs.height,
    "top": [top["rank"], top["phase"], top["collective"], top["cost_ms_per_step"]], "total_ms": v.total_cost_ms_per_step,
}))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="8,24,64,256", help="comma separated rank counts")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per rank count (median reported)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "traceanalyzer-bench-replay")
    ap.add_argument("--json", type=Path, default=None, help="write every run here")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    blob = args.work / f"dlrm_results_{os.getpid()}.pkl"
    print("analysing the 8 DLRM rank files once ...", file=sys.stderr, flush=True)
    run_json([PREPARE, str(DLRM), str(blob)])
    rows = []
    try:
        for n in [int(x) for x in args.ranks.split(",")]:
            runs = []
            for i in range(args.repeat):
                print(f"{n} ranks ({i + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
                runs.append(run_json([REPLAY, str(blob), str(n)]))
            keys = ("rss_kb", "reduce_rss_kb", "held_rss_kb", "reduce_cpu_s", "whatif_cpu_s")
            rows.append({**runs[0], **{k: statistics.median(r[k] for r in runs) for k in keys}, "runs": runs})
    finally:
        blob.unlink(missing_ok=True)
    print(f"\nmedian of {args.repeat} fresh processes\n")
    print("| ranks | kernels | points | peak RSS after reduce | peak RSS after what-if | reduce CPU (s) | what-if CPU (s) "
          "| cost rows | replay max error | top cost | all ranks typical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    base = rows[0]["reduce_rss_kb"] if rows else 1
    for r in rows:
        t = r["top"]
        print(f"| {r['ranks']} | {r['kernels']:,} | {r['points']:,} | {r['reduce_rss_kb'] / 1024:.0f} MiB ({r['reduce_rss_kb'] / base:.2f}x) "
              f"| {r['rss_kb'] / 1024:.0f} MiB | {r['reduce_cpu_s']:.2f} | {r['whatif_cpu_s']:.2f} | {r['cost_rows']:,} "
              f"| {100 * r['replay_max_rel_err']:.4f} % | rank {t[0]} {t[1]} {t[2]} {t[3]:.3f} ms | {r['total_ms']:.3f} ms |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
