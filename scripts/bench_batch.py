#!/usr/bin/env python
"""Benchmark `traceanalyzer batch` on many real traces: local engine at 1 and 2 workers, and Ray.

    python scripts/bench_batch.py [--nights 4] [--workers 1 2] [--ray] [--tmp DIR]

Builds a tree of nightly runs from every real Kineto GPU trace in ../shared/traces (hta/,
kineto-public/; each single trace is one run, the 8-rank DLRM directory is one run), repeated over
``--nights`` dates, then times ``run_batch`` on it:

* cold, parse cache off (``cache=False``): the engines compared on the same work;
* warm: a second store re-analysed with ``force=True`` from a populated parse cache (a private
  one, in the temporary directory).

Every configuration runs in a fresh store and must produce the same rows (checked). Timings are
wall-clock seconds of one run each; on a shared machine treat them as proportions.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
sys.path.insert(0, str(SRC))

import polars as pl  # noqa: E402

from traceanalyzer.store import Store, run_batch  # noqa: E402
from traceanalyzer.store.engines import default_workers  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
VOLATILE = ["analysed_at", "seconds", "path", "write_id"]


def build(tree: Path, nights: int) -> tuple[int, int, int]:
    singles = sorted(p for d in ("hta", "kineto-public") for p in (TRACES / d).rglob("*.json.gz") if "param-dlrm" not in str(p))
    dlrm = TRACES / "kineto-public" / "param-dlrm-v100-8rank"
    runs = files = size = 0
    for n in range(nights):
        day = f"2026-11-{10 + n:02d}"
        for p in singles:
            d = tree / p.name.split(".")[0] / day  # one job per trace file
            d.mkdir(parents=True, exist_ok=True)
            shutil.copy(p, d / p.name)
            runs, files, size = runs + 1, files + 1, size + p.stat().st_size
        d = tree / "dlrm" / day
        d.mkdir(parents=True)
        for p in sorted(dlrm.glob("*.json.gz")):
            shutil.copy(p, d / p.name)
            files, size = files + 1, size + p.stat().st_size
        runs += 1
    return runs, files, size


def rows(store: Path) -> dict[str, pl.DataFrame]:
    st = Store(store)
    return {t: st.read(t).drop(VOLATILE, strict=False).sort(pl.all()) for t in ("runs", "ranks", "steps")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nights", type=int, default=4)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--ray", action="store_true", help="also time --engine ray (local Ray, --workers max CPUs)")
    ap.add_argument("--tmp", default=None)
    a = ap.parse_args()
    if not TRACES.exists():
        sys.exit(f"shared traces not found at {TRACES}")
    tmp = Path(tempfile.mkdtemp(prefix="bench_batch_", dir=a.tmp))
    os.environ["TRACEANALYZER_CACHE"] = str(tmp / "cache")  # a parse cache of its own, empty at the start
    try:
        runs, files, size = build(tmp / "tree", a.nights)
        print(f"# {runs} runs, {files} trace files, {size / 2**20:.1f} MiB gzipped; {platform.processor() or platform.machine()}, "
              f"{default_workers()} usable cores, load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}, polars {pl.__version__}")
        print("| engine | workers | cache | seconds | runs/s | ok | failed |")
        print("|---|---|---|---|---|---|---|")
        ref = None
        configs = [("local", w) for w in a.workers]
        if a.ray:
            configs.append(("ray", max(a.workers)))
        for engine, w in configs:
            store = tmp / f"store-{engine}-{w}"
            t = time.perf_counter()
            s = run_batch([tmp / "tree"], store, engine=engine, workers=w, cache=False)
            dt = time.perf_counter() - t
            print(f"| {engine} | {w} | off | {dt:.1f} | {runs / dt:.2f} | {len(s.analysed)} | {len(s.failed)} |", flush=True)
            got = rows(store)
            if ref is None:
                ref = got
            else:
                for k in ref:
                    assert ref[k].equals(got[k]), f"{engine} x{w}: {k} differs from the first configuration"
        # parse cache: populate, then re-analyse everything with --force
        store = tmp / "store-cache"
        w = max(a.workers)
        t = time.perf_counter()
        run_batch([tmp / "tree"], store, workers=w)
        cold = time.perf_counter() - t
        t = time.perf_counter()
        s = run_batch([tmp / "tree"], store, workers=w, force=True)
        warm = time.perf_counter() - t
        print(f"| local | {w} | cold (writes entries) | {cold:.1f} | {runs / cold:.2f} | | |")
        print(f"| local | {w} | warm (`--force`, {s.cache_hits} hits) | {warm:.1f} | {runs / warm:.2f} | {len(s.analysed)} | {len(s.failed)} |")
        t = time.perf_counter()
        s = run_batch([tmp / "tree"], store, workers=w)
        print(f"| local | {w} | nothing to do (all {len(s.skipped)} stored) | {time.perf_counter() - t:.2f} | | | |")
        entries = list((tmp / "cache" / "traces").glob("*.parquet"))
        print(f"# parse cache: {len(entries)} entries, {sum(p.stat().st_size for p in entries) / 2**20:.1f} MiB")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
