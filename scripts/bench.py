#!/usr/bin/env python
"""Benchmark: traceanalyzer breakdown vs HTA vs the JSON floor, side by side in one run.

    python scripts/bench.py                          # real trace + 50MB / 200MB / 1GB, 3 repeats
    python scripts/bench.py --sizes 50MB --repeat 1  # quick look
    python scripts/bench.py --ranks 8,64             # rank directories: parallel ranks, bounded memory

For every trace (the largest real one, ``df_index_resolver``, 54 MB of JSON, plus traces tiled from
it by ``scripts/make_big_trace.py``), each measurement runs in its own fresh process, ``--repeat``
times, and the median is reported:

* ``floor``   read + gunzip + ``orjson.loads`` of the whole file: the least any JSON tool pays;
* ``ours``    ``traceanalyzer.load`` + ``analyze`` (parse + classify, no cache);
* ``cli``     the whole ``traceanalyzer breakdown FILE -f json`` process, interpreter start included;
* ``cold``    ``load(cache=True)`` into an empty cache dir (parses, then writes the Parquet entry);
* ``warm``    the same again: served from the cache; then ``analyze``;
* ``hta``     HTA ``TraceAnalysis(trace_dir=...)`` + ``get_temporal_breakdown()`` (in the HTA venv).

Times are in-process seconds (imports excluded: each worker times only its work; ``cli`` is the
exception, wall time of the whole process); peak RSS is the worker's ``ru_maxrss``. Results go to
stdout as a markdown table and to ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
REAL = Path(os.environ.get("TRACEANALYZER_BENCH_REAL", "")) if os.environ.get("TRACEANALYZER_BENCH_REAL") else (
    ROOT.parent / "shared" / "traces" / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
)  # TRACEANALYZER_BENCH_REAL: the real trace where the shared traces are elsewhere
HTA_CANDIDATES = [os.environ.get("HTA_PYTHON", ""), str(ROOT / ".venv-hta" / "bin" / "python")]

FLOOR = r"""
import gzip, json, resource, sys, time
import orjson
t = time.perf_counter()
data = open(sys.argv[1], "rb").read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
doc = orjson.loads(data)
s = time.perf_counter() - t
print(json.dumps({"s": s, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

OURS = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import traceanalyzer as ta
import traceanalyzer.api, traceanalyzer.engine, traceanalyzer.parsers  # noqa: E401 (``import traceanalyzer`` alone imports no polars)
t1 = time.perf_counter()
r1 = resource.getrusage(resource.RUSAGE_SELF)
trace = ta.load(sys.argv[1], cache=sys.argv[2] == "cache")
t2 = time.perf_counter()
steps = ta.analyze(trace).steps
t3 = time.perf_counter()
r3 = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"s": t3 - t1, "load_s": t2 - t1, "analyze_s": t3 - t2, "import_s": t1 - t0,
                  "cpu_s": r3.ru_utime + r3.ru_stime - r1.ru_utime - r1.ru_stime,  # all threads: MB/s per core
                  "events": trace.events.height, "steps": steps.height,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

HTA = r"""
import json, logging, resource, sys, time
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
ta = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = ta.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"s": t3 - t1, "load_s": t2 - t1, "analyze_s": t3 - t2, "import_s": t1 - t0,
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def run_json(cmd: list[str], env: dict | None = None, timeout: float = 1800) -> dict:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1]
    out = json.loads(line)
    out["wall_s"] = wall
    return out


def run_cli(path: Path, env: dict) -> dict:
    cmd = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "traceanalyzer", "breakdown", str(path), "-f", "json", "-o", os.devnull]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"cli failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    rss = int(p.stderr.strip().splitlines()[-1])
    return {"s": wall, "wall_s": wall, "rss_kb": rss}


def hta_python() -> str | None:
    for c in HTA_CANDIDATES:
        if c and Path(c).exists():
            return c
    return None


def median(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def json_size(path: Path) -> int:
    import gzip

    if path.name.endswith(".gz"):
        with gzip.open(path) as fh:
            n = 0
            while chunk := fh.read(1 << 24):
                n += len(chunk)
            return n
    return path.stat().st_size


def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        info["cpu"] = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
        info["mem_gb"] = round(int(next(ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemTotal"))) / 2**20, 1)
        info["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
    except (OSError, StopIteration):
        pass
    import orjson
    import polars

    info["polars"] = polars.__version__
    info["orjson"] = orjson.__version__
    return info


def bench_one(name: str, path: Path, repeat: int, hta: str | None, work: Path, skip: set[str], hta_repeat: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res: dict = {"trace": name, "path": str(path), "json_mb": json_size(path) / 1e6, "runs": {}}
    hta_dir = work / f"hta_{name}"
    if hta and "hta" not in skip:
        hta_dir.mkdir(parents=True, exist_ok=True)
        link = hta_dir / path.name
        if not link.exists():
            link.symlink_to(path.resolve())
    for i in range(repeat):
        runs = res["runs"]
        print(f"  [{name}] repeat {i + 1}/{repeat}", file=sys.stderr, flush=True)
        if "floor" not in skip:
            runs.setdefault("floor", []).append(run_json([sys.executable, "-c", FLOOR, str(path)], env))
        if "ours" not in skip:
            runs.setdefault("ours", []).append(run_json([sys.executable, "-c", OURS, str(path), "nocache"], env))
        if "cli" not in skip:
            runs.setdefault("cli", []).append(run_cli(path, env))
        if "cache" not in skip:
            cdir = work / f"cache_{name}"
            shutil.rmtree(cdir, ignore_errors=True)
            cenv = {**env, "TRACEANALYZER_CACHE": str(cdir)}
            runs.setdefault("cold", []).append(run_json([sys.executable, "-c", OURS, str(path), "cache"], cenv))
            runs.setdefault("warm", []).append(run_json([sys.executable, "-c", OURS, str(path), "cache"], cenv))
            shutil.rmtree(cdir, ignore_errors=True)
        if hta and "hta" not in skip and i < hta_repeat:
            runs.setdefault("hta", []).append(run_json([hta, "-c", HTA, str(hta_dir)], env))
    res["median"] = {
        k: {m: median(v, m) for m in ("s", "load_s", "analyze_s", "import_s", "wall_s", "rss_kb")} for k, v in res["runs"].items()
    }
    return res


def fmt(x: float | None, spec: str = ".2f") -> str:
    return "–" if x is None else format(x, spec)


def table(results: list[dict]) -> str:
    rows = [
        "| trace | JSON MB | floor s | ours s (load+analyze) | cli s | cold s | warm s | HTA s | HTA/ours | ours/floor | cold/warm | ours RSS MB | RSS/JSON | HTA RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        m = r["median"]
        g = lambda k, f="s": (m.get(k) or {}).get(f)  # noqa: E731
        ours, floor, hta, cold, warm = g("ours"), g("floor"), g("hta"), g("cold"), g("warm")
        rss = g("ours", "rss_kb")
        hrss = g("hta", "rss_kb")
        rows.append(
            f"| {r['trace']} | {r['json_mb']:.0f} | {fmt(floor)} | {fmt(ours)} ({fmt(g('ours', 'load_s'))}+{fmt(g('ours', 'analyze_s'))}) "
            f"| {fmt(g('cli'))} | {fmt(cold)} | {fmt(warm)} | {fmt(hta)} "
            f"| {fmt(hta / ours if hta and ours else None, '.1f')}× | {fmt(ours / floor if ours and floor else None, '.2f')}× "
            f"| {fmt(cold / warm if cold and warm else None, '.1f')}× | {fmt(rss / 1024 if rss else None, '.0f')} "
            f"| {fmt(rss * 1024 / (r['json_mb'] * 1e6) if rss else None, '.2f')} | {fmt(hrss / 1024 if hrss else None, '.0f')} |"
        )
    return "\n".join(rows)


RANKS = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from traceanalyzer.engine import Options, analyse
from traceanalyzer.render import json as json_render
t1 = time.perf_counter()
workers = None if sys.argv[2] == "all" else int(sys.argv[2])
an = analyse(sys.argv[1], Options(), workers=workers, quiet=True)
doc = json_render.dumps(json_render.document(an))
t2 = time.perf_counter()
print(json.dumps({"s": t2 - t1, "import_s": t1 - t0, "ranks": len(an.trace.meta),
                  "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


#: HTA on a rank directory, with its worker processes' peak RSS too
HTA_RANKS = HTA.replace('"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}',
                        '"rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, '
                        '"worker_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}')


def make_rank_dir(work: Path, n: int) -> Path:
    """``n`` copies of the real trace as plain JSON, the rank in ``distributedInfo`` changed per copy."""
    import gzip

    out = work / f"ranks_{n}"
    if out.exists() and len(list(out.glob("*.json"))) == n:
        return out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    raw = gzip.decompress(REAL.read_bytes())
    key = b'"distributedInfo": {"backend": "nccl", "rank": 1,'
    assert raw.count(key) == 1, "the real trace's distributedInfo changed"
    for r in range(n):
        (out / f"rank{r:04d}.json").write_bytes(raw.replace(key, key.replace(b'"rank": 1,', f'"rank": {r},'.encode()), 1))
    return out


def bench_ranks(ns: list[int], workers: list[str], work: Path, keep: bool, hta: str | None = None,
                hta_max_ranks: int = 8) -> list[dict]:
    """The breakdown of an N-rank directory, per worker count: wall time, coordinator peak RSS
    (``RUSAGE_SELF``) and the largest worker's (``RUSAGE_CHILDREN``); with ``hta``, HTA's load +
    temporal breakdown of the same directory (its own process pool) on up to ``hta_max_ranks``."""
    rows = []
    for n in ns:
        d = make_rank_dir(work, n)
        gb = sum(f.stat().st_size for f in d.iterdir()) / 1e9
        for w in workers:
            print(f"benchmarking {n} ranks ({gb:.2f} GB), workers={w}", file=sys.stderr, flush=True)
            r = run_json([sys.executable, "-c", RANKS, str(d), w], env={**os.environ, "PYTHONPATH": str(SRC)})
            rows.append({"ranks": n, "gb": gb, "workers": w, **r})
        if hta and n <= hta_max_ranks:
            print(f"benchmarking {n} ranks with HTA", file=sys.stderr, flush=True)
            r = run_json([hta, "-c", HTA_RANKS, str(d)])
            rows.append({"ranks": n, "gb": gb, "workers": "HTA (its pool)", **r})
        if not keep:
            shutil.rmtree(d)
    return rows


def ranks_table(rows: list[dict]) -> str:
    out = ["| ranks | JSON | workers | wall (s) | MB/s | coordinator peak RSS | largest worker peak RSS |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['ranks']} | {r['gb']:.2f} GB | {r['workers']} | {r['s']:.1f} | {r['gb'] * 1e3 / r['s']:.0f} | "
                   f"{r['rss_kb'] / 1024:,.0f} MB | {r['worker_rss_kb'] / 1024:,.0f} MB |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="50MB,200MB,1GB", help="generated trace sizes (comma separated; '' for none)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "traceanalyzer-bench", help="generated traces and scratch")
    ap.add_argument("--json", type=Path, default=None, help="write all runs and medians here")
    ap.add_argument("--skip", default="", help="comma separated: floor,ours,cli,cache,hta")
    ap.add_argument("--hta-repeat", type=int, default=None, help="run HTA this many times (default: --repeat)")
    ap.add_argument("--hta-max-mb", type=float, default=1e9, help="skip HTA on traces larger than this (MB of JSON)")
    ap.add_argument("--no-real", action="store_true", help="skip the real trace")
    ap.add_argument("--ranks", default="", help="rank-directory mode: comma separated rank counts (e.g. 8,64): copies of the "
                    "real trace written to --work (54 MB each: check free space), deleted after unless --keep")
    ap.add_argument("--workers", default="all", help="rank-directory mode: comma separated worker counts ('all' = every core)")
    ap.add_argument("--keep", action="store_true", help="keep the generated rank directories")
    args = ap.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    if args.ranks:
        hta = None if "hta" in {x for x in args.skip.split(",") if x} else hta_python()
        rows = bench_ranks([int(x) for x in args.ranks.split(",")], args.workers.split(","), args.work, args.keep, hta)
        print(f"\nmachine: {json.dumps(machine())}\none run each, in a fresh process\n")
        print(ranks_table(rows))
        if args.json:
            args.json.write_text(json.dumps({"machine": machine(), "ranks": rows}, indent=1))
        return 0
    skip = {s for s in args.skip.split(",") if s}
    hta = hta_python()
    if hta is None and "hta" not in skip:
        print("note: no HTA interpreter found (set HTA_PYTHON or create .venv-hta, see the README): HTA column skipped", file=sys.stderr)
    traces: list[tuple[str, Path]] = []
    if not args.no_real:
        if not REAL.exists():
            print(f"error: {REAL}: no such file (the shared traces live in ../shared/traces)", file=sys.stderr)
            return 3
        traces.append(("real 54MB (df_index_resolver)", REAL))
    for size in [s for s in args.sizes.split(",") if s]:
        out = args.work / f"big_{size}.json"
        if not out.exists():
            print(f"generating {out} ...", file=sys.stderr, flush=True)
            subprocess.run([sys.executable, str(ROOT / "scripts" / "make_big_trace.py"), "--size", size, "-o", str(out)], check=True)
        traces.append((f"tiled {size}", out))
    info = machine()
    results = []
    for name, path in traces:
        print(f"benchmarking {name}: {path}", file=sys.stderr, flush=True)
        s = set(skip)
        if json_size(path) / 1e6 > args.hta_max_mb:
            s.add("hta")
        hta_repeat = args.repeat if args.hta_repeat is None else args.hta_repeat
        results.append(bench_one(name.split(" (")[0].replace(" ", "_"), path, args.repeat, hta, args.work, s, hta_repeat))
        results[-1]["trace"] = name
    info["loadavg_end"] = open("/proc/loadavg").read().split()[:3] if Path("/proc/loadavg").exists() else None
    print(f"\nmachine: {json.dumps(info)}\nmedian of {args.repeat} runs (HTA: {args.hta_repeat or args.repeat}), each in a fresh process\n")
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "repeat": args.repeat, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
