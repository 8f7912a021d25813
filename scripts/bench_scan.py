#!/usr/bin/env python
"""``ta.scan`` against ``ta.load`` for one question about some events: time and peak RSS.

The question: kernel time per kernel name (the ``kernel`` rows and three columns of them).
``load`` materialises every event of every rank file; ``scan`` reads the Parquet parse cache
lazily, so polars reads only the needed columns. Each variant runs in a fresh process (peak RSS
is per process), after one warm-up run that fills the parse cache:

    python scripts/bench_scan.py ../shared/traces/hta/df_index_resolver/df_index_resolver.json.gz
    python scripts/bench_scan.py fixtures/kineto/dlrm-v100-8rank --cache /tmp/ta-cache
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)

QUERY = """
import polars as pl
q = lambda lf: (lf.filter(pl.col("kind") == "kernel").group_by("name")
                .agg(pl.len(), (pl.col("end_ns") - pl.col("start_ns")).sum().alias("ns")).sort("ns", descending=True))
"""


def child(variant: str, path: str, cache: str) -> None:
    sys.path.insert(0, str(SRC))
    t0 = time.perf_counter()
    import traceanalyzer as ta

    ns: dict = {}
    exec(QUERY, ns)
    if variant == "load":
        out = ns["q"](ta.load(path, cache=cache).events.lazy()).collect()
    else:
        out = ns["q"](ta.scan(path, cache=cache)).collect()
    seconds = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"variant": variant, "seconds": round(seconds, 3), "peak_rss_mb": round(rss_mb, 1),
                      "kernels": int(out["len"].sum()), "kernel_ns": int(out["ns"].sum())}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--cache", help="parse cache directory (default: a new temporary one)")
    ap.add_argument("--child", choices=["load", "scan"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.path, args.cache)
        return 0
    cache = args.cache or tempfile.mkdtemp(prefix="ta-bench-scan-")
    run = lambda v: json.loads(subprocess.run(  # noqa: E731
        [sys.executable, __file__, args.path, "--cache", cache, "--child", v], check=True, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)}).stdout)
    run("scan")  # warm-up: fills the parse cache
    results = [run("load"), run("scan")]
    assert results[0]["kernel_ns"] == results[1]["kernel_ns"] and results[0]["kernels"] == results[1]["kernels"]
    for r in results:
        print(f"{r['variant']:5} {r['seconds']:7.3f} s  peak RSS {r['peak_rss_mb']:7.1f} MB  ({r['kernels']} kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
