#!/usr/bin/env python
"""What the parse cache costs and saves, on one trace (default: the real 54 MB trace, gzipped
and as plain JSON).

    python scripts/bench_cache.py [TRACE] [--repeat 3] [--work DIR]

Each measurement runs in a fresh process (imports excluded from the time) with a private cache
directory, ``--repeat`` times, and the median is printed with the peak RSS of that process:

* ``sha256``    the file's SHA-256, streamed (what a cache miss and the batch's change check pay);
* ``memo``      the same digest asked again in a new process: a stat and a small file read;
* ``parse``     ``load(path)`` with no cache;
* ``cold``      ``load(path, cache=True)`` into an empty cache (hash, parse, write the entry);
* ``warm``      ``load(path, cache=True)`` again (hash from the memo, read the entry).
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
DEFAULT = ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import traceanalyzer as ta
from traceanalyzer import cache
what, path, cdir = sys.argv[2], sys.argv[3], sys.argv[4]
t = time.perf_counter()
if what == "sha256":
    cache._sha256_of(path)
elif what == "memo":
    cache.file_sha256(path, cdir)
elif what == "parse":
    ta.load(path)
else:
    ta.load(path, cache=cdir)
dt = time.perf_counter() - t
print(json.dumps({"s": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(what: str, path: Path, cdir: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(SRC), what, str(path), str(cdir)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_cache_", dir=a.work))
    try:
        src = Path(a.trace)
        paths = [src]
        if src.name.endswith(".gz"):
            plain = work / src.name[:-3]
            plain.write_bytes(gzip.open(src).read())
            paths.append(plain)
        print("| file | MB | step | seconds (median) | peak RSS MB |")
        print("|---|---|---|---|---|")
        for p in paths:
            res: dict[str, list[dict]] = {}
            for i in range(a.repeat):
                cdir = work / f"cache-{p.name}-{i}"
                for what in ("sha256", "memo", "parse", "cold", "warm"):
                    if what == "memo":
                        run("memo", p, cdir)  # first: hash and remember
                    res.setdefault(what, []).append(run(what, p, cdir))
                shutil.rmtree(cdir, ignore_errors=True)
            for what, rows in res.items():
                s = statistics.median(r["s"] for r in rows)
                rss = statistics.median(r["rss_mb"] for r in rows)
                print(f"| {p.name} | {p.stat().st_size / 1e6:.1f} | {what} | {s:.4f} | {rss:.0f} |", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
