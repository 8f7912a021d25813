"""Run every command of the command line on the bundled fixtures (and a few small shared
recordings) and record, or check, what each run printed and wrote.

    python scripts/command_outputs.py --record DIR [--root TREE]
    python scripts/command_outputs.py --check DIR [--root TREE]

``--root`` is the source tree whose package runs (default: this script's tree), so a baseline
can be recorded from a clean ``git archive`` export of another commit and a working tree
checked against it: a refactoring that changes no behaviour leaves every run byte-identical.

Each run executes ``python -m traceanalyzer ...`` in a fresh temporary directory holding two
links, ``fixtures`` (the tree's fixtures) and ``shared`` (the shared recordings), so every path
a command prints is the same relative path whatever the tree. For each run it keeps stdout,
stderr, the exit code and every file the run wrote in its directory. Parquet files are kept as
their rows (NDJSON), other binary files (PNG plots) as their bytes.

Masked, because they differ from one run to the next whatever the code (and only these):

* the run's temporary directory (``<TMP>``) and the parse cache's directory under it;
* wall-clock times: ISO-8601 timestamps and dates (``finished_at``, ``generated_at``, the
  date a stored run was analysed), and the seconds a batch run took (``(..., 0.3 s)`` on
  stderr, ``"seconds"`` in the store's rows);
* the order of the ``run N done`` progress lines of ``batch``, which finish in parallel
  (those lines are sorted, their numbers masked);
* the store's random write ids (``w`` and 16 hex digits, in its file names and rows) and the
  process id in its lock file (files whose names then coincide are told apart by their rows).

At most two runs execute at once.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SHARED = HERE.parent / "shared"

K = "fixtures/kineto"
MI300 = f"{K}/mi300x_resnet_act_checkpoint_rank0.json.gz"
DLRM = f"{K}/dlrm-v100-8rank"
MI250 = f"{K}/mi250_rocm62_minitoy.json.gz"
ALEX = f"{K}/a100_alexnet_nosteps.json.gz"
V100 = f"{K}/v100_resnet50_legacy2021.json.gz"
MTIA = f"{K}/mtia_inference_cut.json.gz"
CPU = f"{K}/cpu_only_gpt.pt.trace.json.gz"
NS = "fixtures/nsys"
SMALL = "shared/traces/h200/small/rank0.pt.trace.json.gz"
COMPILED = "shared/traces/h200/compiled/rank0.pt.trace.json.gz"
B4 = "shared/traces/h200/b4/rank0.pt.trace.json.gz"
CFG = "fixtures/configs"
BL = "fixtures/baselines"
AR = f"{BL}/all_reduce_perf_h100_2node.txt"
AG = f"{BL}/all_gather_perf_mi250x_16rank_2023.txt"
A2A = f"{BL}/alltoall_perf_v100_8node_2021.txt"
TOPO = f"{BL}/topo_h100_nv18_8gpu.txt"


def _runs() -> dict[str, list[list[str]]]:
    """name -> the commands of the run, executed in order in one directory."""
    r: dict[str, list[list[str]]] = {}

    def add(name: str, *cmds: list[str]) -> None:
        assert name not in r, name
        r[name] = list(cmds)

    traces = {"mi300": MI300, "dlrm": DLRM, "mi250": MI250, "alex": ALEX, "v100": V100, "mtia": MTIA,
              "nsys-sqlite": f"{NS}/mfu_2gpu_before_cut.sqlite", "nsys-jsonl": f"{NS}/mock_cut.jsonl",
              "nsys-json": f"{NS}/mock_cut.json", "nsys-pqt": f"{NS}/mfu_2gpu_before_cut_pqtdir",
              "nsys-arw": f"{NS}/mock_cut_arwdir", "small": SMALL}
    # breakdown: every trace as a table, the main ones in every format
    for t, p in traces.items():
        add(f"breakdown-{t}", ["breakdown", p, "-q"])
    for t in ("mi300", "dlrm", "small", "nsys-sqlite"):
        p = traces[t]
        add(f"breakdown-{t}-detail", ["breakdown", p, "--detail", "-q"])
        add(f"breakdown-{t}-json", ["breakdown", p, "-f", "json", "-q"])
        add(f"breakdown-{t}-csv", ["breakdown", p, "-f", "csv", "-o", "out/b.csv", "-q"])
        add(f"breakdown-{t}-parquet", ["breakdown", p, "-f", "parquet", "-o", "out/b.parquet", "-q"])
    add("breakdown-mi300-whole", ["breakdown", MI300, "--whole-trace", "-f", "json", "-q"])
    add("breakdown-dlrm-summary", ["breakdown", DLRM, "--ranks", "summary", "-q"])
    add("breakdown-dlrm-all", ["breakdown", DLRM, "--ranks", "all", "--detail", "-q"])
    add("breakdown-small-config", ["breakdown", SMALL, "-c", f"{CFG}/h200_small.toml", "-f", "json", "-q"])
    add("breakdown-small-recompute", ["breakdown", SMALL, "--recompute-range", "checkpoint", "--bus-bw", "100", "-q"])
    add("breakdown-dlrm-commkernel", ["breakdown", DLRM, "--comm-kernel", "nccl", "-q"])
    add("breakdown-bad-commkernel", ["breakdown", MI300, "--comm-kernel", "(", "-q"])
    add("breakdown-cpu-only", ["breakdown", CPU, "-q"])
    add("breakdown-missing", ["breakdown", "fixtures/nope.json", "-q"])
    add("breakdown-stepname-missing", ["breakdown", MI300, "--step-range", "NoSuchStep", "-q"])
    add("breakdown-progress", ["breakdown", MI250])
    add("breakdown-cached", ["breakdown", MI250, "-q"], ["breakdown", MI250, "-q", "-f", "json"])
    # the table commands
    for t in ("mi300", "dlrm", "small", "nsys-sqlite"):
        p = traces[t]
        add(f"kernels-{t}", ["kernels", p, "-q"])
        add(f"ops-{t}", ["ops", p, "-q"])
        add(f"launches-{t}", ["launches", p, "-q"])
        add(f"annotations-{t}", ["annotations", p, "-q"])
        add(f"critical-path-{t}", ["critical-path", p, "-q"])
    for fmt in ("json", "csv"):
        add(f"kernels-mi300-{fmt}", ["kernels", MI300, "-f", fmt, "-q"])
        add(f"ops-dlrm-{fmt}", ["ops", DLRM, "-f", fmt, "-q"])
        add(f"launches-small-{fmt}", ["launches", SMALL, "-f", fmt, "-q"])
        add(f"annotations-small-{fmt}", ["annotations", SMALL, "-f", fmt, "-q"])
        add(f"critical-path-small-{fmt}", ["critical-path", SMALL, "-f", fmt, "-q"])
    add("kernels-parquet", ["kernels", DLRM, "-f", "parquet", "-o", "out/k.parquet", "-q"])
    add("kernels-filters", ["kernels", DLRM, "--name", "gemm|nccl", "--rank", "1", "--sort", "calls", "--top", "5", "-q"])
    add("kernels-tflops", ["kernels", SMALL, "--sort", "tflops", "--precision", "bf16", "-c", f"{CFG}/h200_small.toml", "-q"])
    add("kernels-step", ["kernels", MI300, "--step", "16", "--sort", "p99", "-q"])
    add("kernels-bad-regex", ["kernels", MI300, "--name", "[", "-q"])
    add("ops-sort", ["ops", SMALL, "--sort", "mean", "--top", "7", "-q"])
    for view in ("steps", "queue", "kernels", "queue-series"):
        add(f"launches-view-{view}", ["launches", SMALL, "--view", view, "-q"])
    add("launches-threshold", ["launches", MI300, "--threshold", "0.2", "--top", "3", "-q"])
    add("launches-bad-threshold", ["launches", MI300, "--threshold", "2", "-q"])
    for by in ("step", "rank", "name"):
        add(f"annotations-by-{by}", ["annotations", DLRM, "--by", by, "-q"])
    add("annotations-level", ["annotations", SMALL, "--level", "0", "--source", "host", "-q"])
    add("annotations-config", ["annotations", SMALL, "-c", f"{CFG}/h200_small.toml", "--name", "Profiler", "-q"])
    add("critical-path-step", ["critical-path", DLRM, "--step", "10", "--rank", "0", "--top", "4", "-q"])
    add("critical-path-nogaps", ["critical-path", MI300, "--no-host-gaps", "--no-infer-waits", "-q"])
    add("critical-path-alex", ["critical-path", ALEX, "--whole-trace", "-q"])
    # report
    for t in ("mi300", "dlrm", "small"):
        add(f"report-{t}-html", ["report", traces[t], "-o", "out/r.html", "-q"])
        add(f"report-{t}-md", ["report", traces[t], "-f", "markdown", "-o", "out/r.md", "-q"])
        add(f"report-{t}-json", ["report", traces[t], "-f", "json", "-q"])
    add("report-small-config", ["report", SMALL, "-c", f"{CFG}/h200_small.toml", "-f", "json", "--top", "3", "-q"])
    add("report-md-embed", ["report", MI250, "-f", "markdown", "--embed", "-o", "out/r.md", "-q"])
    add("report-md-files", ["report", MI250, "-f", "markdown", "-o", "out/r.md", "-q"])
    add("report-dlrm-rank", ["report", DLRM, "--rank", "3", "--baseline", AR, "-f", "markdown", "-o", "out/r.md", "-q"])
    add("report-nsys", ["report", f"{NS}/mfu_2gpu_before_cut.sqlite", "-f", "json", "-q"])
    add("report-bad-rank", ["report", DLRM, "--rank", "99", "-f", "json", "-q"])
    # the model and the reconciler, on every run configuration
    for cfg in sorted(Path(HERE / "fixtures/configs").glob("*.toml")):
        c = f"{CFG}/{cfg.name}"
        add(f"predict-{cfg.stem}", ["predict", "-c", c])
        add(f"predict-{cfg.stem}-json", ["predict", "-c", c, "-f", "json"])
        add(f"memory-{cfg.stem}", ["memory", "-c", c])
        add(f"whatif-{cfg.stem}-search", ["whatif", "-c", c, "--search", "--top", "5"])
    add("predict-md", ["predict", "-c", f"{CFG}/h200_base.toml", "-f", "markdown", "--all"])
    add("predict-vs", ["predict", "-c", f"{CFG}/h200_b4.toml", "--vs", f"{CFG}/h200_base.toml"])
    add("predict-global-batch", ["predict", "-c", f"{CFG}/h200_base.toml", "--global-batch", "8", "--global-batch", "16"])
    add("predict-baseline", ["predict", "-c", f"{CFG}/h200_base.toml", "--baseline", AR, "--kernel-efficiency", "0.6"])
    add("predict-convention", ["predict", "-c", f"{CFG}/h200_base.toml", "--convention", "palm", "--hfu", "korthikanti2022"])
    add("predict-no-config", ["predict"])
    add("reconcile-small", ["reconcile", SMALL, "-c", f"{CFG}/h200_small.toml", "-q"])
    add("reconcile-small-json", ["reconcile", SMALL, "-c", f"{CFG}/h200_small.toml", "-f", "json", "-q"])
    add("reconcile-small-md", ["reconcile", SMALL, "-c", f"{CFG}/h200_small.toml", "-f", "markdown", "--all", "-q"])
    add("reconcile-compiled", ["reconcile", COMPILED, "-c", f"{CFG}/h200_compiled.toml", "-q"])
    add("reconcile-b4-baseline", ["reconcile", B4, "-c", f"{CFG}/h200_b4.toml", "--baseline", AR, "-q"])
    add("reconcile-bad-config", ["reconcile", SMALL, "-c", "fixtures/README.md", "-q"])
    add("compare-small-b4", ["compare", SMALL, B4, "-q"])
    add("compare-small-b4-configs", ["compare", SMALL, B4, "--config-a", f"{CFG}/h200_small.toml",
                                     "--config-b", f"{CFG}/h200_b4.toml", "-f", "json", "-q"])
    add("compare-small-compiled-md", ["compare", SMALL, COMPILED, "-f", "markdown", "--all", "-q"])
    add("compare-mi300-self", ["compare", MI300, MI300, "-q"])
    add("memory-small", ["memory", SMALL, "-q"])
    add("memory-small-config", ["memory", SMALL, "-c", f"{CFG}/h200_small.toml", "--reserve", "8", "-q"])
    add("memory-small-json", ["memory", SMALL, "-f", "json", "-q"])
    add("memory-small-csv", ["memory", SMALL, "-f", "csv", "-o", "out/m.csv", "-q"])
    add("memory-bad-reserve", ["memory", "-c", f"{CFG}/h200_small.toml", "--reserve", "-1"])
    add("whatif-small-set", ["whatif", SMALL, "-c", f"{CFG}/h200_small.toml", "--set", "micro_batch=2", "-q"])
    add("whatif-small-set-json", ["whatif", SMALL, "-c", f"{CFG}/h200_small.toml", "--set", "seq_length=2048",
                                  "-f", "json", "-q"])
    add("whatif-config-set", ["whatif", "-c", f"{CFG}/h200_base.toml", "--set", "recompute=selective", "-f", "markdown"])
    add("whatif-search-json", ["whatif", "-c", f"{CFG}/h200_base.toml", "--search", "-f", "json", "--top", "0"])
    add("whatif-bad-set", ["whatif", "-c", f"{CFG}/h200_base.toml", "--set", "nonsense=3"])
    add("whatif-bad-reserve", ["whatif", "-c", f"{CFG}/h200_base.toml", "--search", "--reserve-gb", "-2"])
    # the timeline
    add("annotate-mi300", ["annotate", MI300, "-o", "out/a.json.gz", "-q"])
    add("annotate-dlrm-dir", ["annotate", DLRM, "-o", "out/annotated/", "-q"])
    add("annotate-dlrm-merge", ["annotate", DLRM, "--merge", "-o", "out/job.json", "-q"])
    add("annotate-nsys", ["annotate", f"{NS}/mock_cut.sqlite", "-o", "out/n.json", "-q"])
    add("annotate-bad-output", ["annotate", MI300, "-o", "out/a.txt", "-q"])
    # baselines and the plan
    add("baseline-ar", ["baseline", AR])
    add("baseline-many", ["baseline", AR, AG, A2A, "-f", "json"])
    add("baseline-all-md", ["baseline", *[str(Path(BL) / p.name) for p in sorted((HERE / BL).glob("*_perf_*.txt"))],
                            "-f", "markdown", "--all-sizes"])
    add("baseline-topo", ["baseline", AR, "--topo", TOPO])
    for p in sorted((HERE / BL).glob("topo_*.txt")):
        add(f"baseline-{p.stem}", ["baseline", "--topo", f"{BL}/{p.name}"])
    add("baseline-trace", ["baseline", AR, "--trace", DLRM, "-q"])
    add("baseline-nranks", ["baseline", f"{BL}/all_reduce_perf_h100pcie_2gpu.txt", "--nranks", "2", "--scope", "intra"])
    add("baseline-none", ["baseline"])
    add("plan-bloom", ["plan", "-c", "fixtures/plan/bloom_176b.toml", "--tokens", "366B", "--mfu", "40%"])
    add("plan-bloom-json", ["plan", "-c", "fixtures/plan/bloom_176b.toml", "--tokens", "366B", "--tflops", "150",
                            "--gpus", "384", "--price-per-gpu-hour", "2", "--gpu-power-w", "400", "-f", "json"])
    add("plan-small-trace", ["plan", "-c", f"{CFG}/h200_small.toml", "--tokens", "1B", "--trace", SMALL, "-q"])
    add("plan-params", ["plan", "--params", "70B", "--tokens", "15T", "--mfu", "0.4", "--gpu", "H100",
                        "--gpus", "1024", "-f", "markdown"])
    add("plan-bad-tokens", ["plan", "--params", "7B", "--tokens", "many"])
    # the store: batch, then trend and gate over it
    store = [["batch", "runs", "--store", "out/store", "-f", "json", "--workers", "1"]]
    add("store", *store,
        ["batch", "runs", "--store", "out/store"],
        ["trend", "--store", "out/store", "-f", "json"],
        ["trend", "--store", "out/store", "--metric", "idle", "-f", "csv"],
        ["trend", "--store", "out/store", "--metric", "exposed_comm"],
        ["gate", "--store", "out/store", "-f", "json", "--junit", "out/gate.xml"],
        ["gate", "--store", "out/store", "--max-regression", "50%"],
        ["plan", "-c", f"{CFG}/h200_small.toml", "--tokens", "1B", "--mfu", "30%", "--store", "out/store"])
    add("store-force", *store, ["batch", "runs", "--store", "out/store", "--force", "-q"],
        ["batch", "runs", "--store", "out/store", "-c", f"{CFG}/h200_small.toml", "--force", "-q"])
    add("store-missing", ["trend", "--store", "out/none"], ["gate", "--store", "out/none"])
    # the command line itself
    add("help", ["--help"])
    for c in ("breakdown", "report", "kernels", "ops", "reconcile", "compare", "predict", "whatif", "memory",
              "annotate", "batch", "trend", "gate", "baseline", "plan", "launches", "annotations", "critical-path"):
        add(f"help-{c}", [c, "--help"])
    add("version", ["--version"])
    add("unknown-command", ["frobnicate"])
    return r


#: the runs whose directory gets a batch root: runs/<job>/<rank file> links
STORE_RUNS = {"small": SMALL, "compiled": COMPILED, "mi250": MI250}

_TIME = re.compile(r"\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?)?")
_SECONDS = re.compile(r", \d+(\.\d+)? s\)")
_DONE = re.compile(r"^traceanalyzer: run \d+ done: ", re.M)
_WRITE_ID = re.compile(r"\bw[0-9a-f]{16}\b")
_PID = re.compile(r"\bpid \d+")
_RUN_SECONDS = re.compile(r'"seconds": ?[0-9.e+-]+')


def mask(text: str, tmp: str) -> str:
    text = text.replace(os.path.realpath(tmp), "<TMP>").replace(tmp, "<TMP>")
    text = _TIME.sub("<TIME>", text)
    text = _SECONDS.sub(", <S> s)", text)
    text = _PID.sub("pid <PID>", _WRITE_ID.sub("w<ID>", text))
    text = _RUN_SECONDS.sub('"seconds":<S>', text)
    if _DONE.search(text):
        lines = text.split("\n")
        done = sorted(_DONE.sub("traceanalyzer: run <N> done: ", line) for line in lines if _DONE.match(line))
        rest = [line for line in lines if not _DONE.match(line)]
        i = next((k for k, line in enumerate(lines) if _DONE.match(line)), 0)
        text = "\n".join(rest[:i] + done + rest[i:])
    return text


def _file_record(path: Path, tmp: str) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".parquet" or data[:4] == b"PAR1":
        import polars as pl

        return mask(pl.read_parquet(path).write_ndjson(), tmp).encode()
    if path.suffix == ".gz":
        import gzip

        data = gzip.decompress(data)
    try:
        return mask(data.decode(), tmp).encode()
    except UnicodeDecodeError:
        return b"binary sha256 " + hashlib.sha256(data).hexdigest().encode() + b"\n"


def run_one(name: str, cmds: list[list[str]], root: Path) -> dict[str, bytes]:
    """Every output of one run: relative name -> bytes."""
    tmp = tempfile.mkdtemp(prefix="ta-outputs-")
    try:
        os.symlink(root / "fixtures", Path(tmp) / "fixtures")
        os.symlink(SHARED, Path(tmp) / "shared")
        (Path(tmp) / "out").mkdir()
        if name.startswith("store"):
            for job, src in STORE_RUNS.items():
                (Path(tmp) / "runs" / job).mkdir(parents=True)
                os.symlink(Path(tmp) / src, Path(tmp) / "runs" / job / Path(src).name)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEANALYZER", "NO_COLOR", "COLUMNS"))}
        env.update(PYTHONPATH=str(root / "src" if (root / "src" / "traceanalyzer").is_dir() else root),  # src layout or flat
                   TRACEANALYZER_CACHE=str(Path(tmp) / "cache"), COLUMNS="120",
                   PYTHONHASHSEED="0", TZ="UTC")
        rec: dict[str, bytes] = {}
        for i, argv in enumerate(cmds):
            p = subprocess.run([sys.executable, "-m", "traceanalyzer", *argv], cwd=tmp, env=env,
                               capture_output=True, timeout=600)
            pre = f"{i}." if len(cmds) > 1 else ""
            rec[f"{pre}argv"] = (" ".join(argv) + "\n").encode()
            rec[f"{pre}rc"] = f"{p.returncode}\n".encode()
            rec[f"{pre}stdout"] = mask(p.stdout.decode("utf-8", "replace"), tmp).encode()
            rec[f"{pre}stderr"] = mask(p.stderr.decode("utf-8", "replace"), tmp).encode()
        written = sorted((_WRITE_ID.sub("w<ID>", f.relative_to(Path(tmp, "out")).as_posix()), _file_record(f, tmp))
                         for f in Path(tmp, "out").rglob("*") if f.is_file())
        for name, data in written:
            key, k = "files/" + name, 1
            while key in rec:
                k += 1
                key = f"files/{name}#{k}"
            rec[key] = data
        return rec
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--record", type=Path, metavar="DIR")
    g.add_argument("--check", type=Path, metavar="DIR")
    ap.add_argument("--root", type=Path, default=HERE, help="source tree to run (default: this script's)")
    ap.add_argument("--only", default="", help="regex: only the runs whose name matches")
    ap.add_argument("--jobs", type=int, default=2, choices=(1, 2))
    a = ap.parse_args()
    root = a.root.resolve()
    runs = {k: v for k, v in _runs().items() if re.search(a.only, k)}
    with ThreadPoolExecutor(a.jobs) as ex:
        results = dict(zip(runs, ex.map(lambda kv: run_one(kv[0], kv[1], root), runs.items())))
    if a.record:
        if not a.only and a.record.exists():
            shutil.rmtree(a.record)
        for name, rec in results.items():
            d = a.record / name
            shutil.rmtree(d, ignore_errors=True)
            for rel, data in rec.items():
                (d / rel).parent.mkdir(parents=True, exist_ok=True)
                (d / rel).write_bytes(data)
        (a.record / "MANIFEST.json").write_text(json.dumps(sorted(_runs()), indent=0) + "\n")
        print(f"recorded {len(results)} runs into {a.record}")
        return 0
    bad = 0
    for name, rec in results.items():
        d = a.check / name
        old = {p.relative_to(d).as_posix(): p.read_bytes() for p in d.rglob("*") if p.is_file()} if d.is_dir() else None
        if old == rec:
            continue
        bad += 1
        print(f"DIFFERS: {name}")
        if old is None:
            print("  (not in the recording)")
            continue
        for rel in sorted(set(old) | set(rec)):
            if old.get(rel) != rec.get(rel):
                print(f"  {rel}")
                a_, b_ = old.get(rel, b"").decode("utf-8", "replace"), rec.get(rel, b"").decode("utf-8", "replace")
                diff = list(difflib.unified_diff(a_.splitlines(), b_.splitlines(), "recorded", "now", lineterm="", n=1))
                for line in diff[:12]:
                    print("    " + line[:200])
    print(f"{len(results) - bad} of {len(results)} runs identical")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
