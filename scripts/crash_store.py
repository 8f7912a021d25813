#!/usr/bin/env python
"""Fault injection on the batch store: kill ``traceanalyzer batch`` and check what is left.

    python scripts/crash_store.py --kills 200 [--seed 1] [--jobs 2]

A small nightly (three runs of bundled traces, two jobs) is stored into a fresh store, and then
replaced (one run gains a rank and moves date). Trials, seeded:

* **every write step**: ``TRACEANALYZER_FAULT=store:step:<k>`` kills the batch (SIGKILL) just
  before its k-th I/O step (mkdir, lock write, file write, fsync, rename, unlink), for every k of
  a clean run of both scenarios;
* **random moments**: SIGKILL after a random delay within the length of a clean run;
* **a full disk**: ``RLIMIT_FSIZE`` set to a random size up to 1.2 times the largest store file (the
  limit is per file: the batch's writes past it fail with EFBIG).

After each trial: the store opens with no damaged file; every run in it is wholly one stored
version (its ``runs``, ``ranks`` and ``steps`` rows equal a crash-free store's) and no row of a
run outside it is visible; ``trend`` and ``gate`` give what they give on a fresh store holding
just the runs that made it; a full-disk batch failed with one line and an exit code (no
traceback); the next batch completes the store (equal to the crash-free one, one file per run
and table, no temporary left) and (every third trial) the one after it stores nothing and
changes no file.
Then two and four batches run at once on one store: no row lost, none twice.

Prints one line per kind of trial and the totals; exits 1 on any failure (each one described).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# ---- where things are (one place: the package layout may move) -------------------------------
ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"  # the package's source tree (src layout)
STORE_MODULE = "traceanalyzer.store.database"  # Store, FAULT_ENV, FAULT_LOG_ENV, file_stem
STORE_PACKAGE = "traceanalyzer.store"  # trend_frame, gate_check
CLI = [sys.executable, "-m", "traceanalyzer"]
FIXTURES = ROOT / "fixtures" / "kineto"
DLRM = sorted((FIXTURES / "dlrm-v100-8rank").iterdir())
ROCM = FIXTURES / "mi250_rocm62_minitoy.json.gz"
# -------------------------------------------------------------------------------------------------

sys.path.insert(0, str(SRC))
import importlib  # noqa: E402

import polars as pl  # noqa: E402

store_mod = importlib.import_module(STORE_MODULE)
batch_mod = importlib.import_module(STORE_PACKAGE)
Store = store_mod.Store
VOLATILE = ["analysed_at", "seconds", "write_id", "path", "file"]  # when, how long, which write, where


def _put(d: Path, *files: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, d / f.name)


def make_roots(base: Path) -> tuple[Path, Path]:
    """Scenario A (a first write) and B (A stored; then alpha-2026-11-19 gains a rank and its
    manifest moves it to 2026-11-21): the same paths, so that only the inputs differ."""
    a = base / "A"
    _put(a / "alpha-2026-11-18", DLRM[0], DLRM[1])
    _put(a / "alpha-2026-11-19", DLRM[2], DLRM[3])
    _put(a / "beta-2026-11-19", ROCM)
    b = base / "B"
    shutil.copytree(a, b)
    _put(b / "alpha-2026-11-19", DLRM[4])
    (b / "alpha-2026-11-19" / "traceanalyzer-run.toml").write_text(
        'run_id = "alpha-2026-11-19"\njob = "alpha"\ndate = 2026-11-21\n')
    return a, b


class Env:
    def __init__(self, work: Path):
        self.work = work
        self.cache = work / "cache"
        self.base = {**os.environ, "PYTHONPATH": str(SRC), "TRACEANALYZER_CACHE": str(self.cache)}
        for k in (store_mod.FAULT_ENV, store_mod.FAULT_LOG_ENV):
            self.base.pop(k, None)

    def batch(self, root: Path, store: Path, extra_env: dict | None = None, fsize: int | None = None,
              kill_after: float | None = None) -> tuple[int, str, str]:
        cmd = [*CLI, "batch", str(root), "--store", str(store), "--workers", "1", "--quiet", "--format", "json"]

        def limit() -> None:
            if fsize is not None:
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

        p = subprocess.Popen(cmd, env={**self.base, **(extra_env or {})}, cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=limit)
        if kill_after is not None:
            timer = threading.Timer(kill_after, lambda: p.poll() is None and p.send_signal(signal.SIGKILL))
            timer.start()
        out, err = p.communicate()
        if kill_after is not None:
            timer.cancel()
        return p.returncode, out, err


def tables(store: Path) -> dict[str, pl.DataFrame]:
    st = Store(store)
    out = {t: st.read(t).drop(*VOLATILE, strict=False).sort(pl.all()) for t in ("runs", "ranks", "steps")}
    if st.damaged:
        raise Failure(f"damaged store files: {st.damaged}")
    return out


class Failure(Exception):
    pass


def run_rows(t: dict[str, pl.DataFrame], run_id: str) -> dict[str, pl.DataFrame]:
    return {k: f.filter(pl.col("run_id") == run_id) for k, f in t.items()}


def same(a: dict[str, pl.DataFrame], b: dict[str, pl.DataFrame]) -> bool:
    return all(a[k].equals(b[k]) for k in a)


def files(store: Path) -> dict[str, int]:
    return {str(p.relative_to(store)): p.stat().st_mtime_ns for t in ("runs", "ranks", "steps")
            for p in sorted((store / t).rglob("*")) if p.is_file()}


def run_files(ref: Path, run_id: str) -> list[Path]:
    stem = store_mod.file_stem(run_id)
    return [p for t in ("runs", "ranks", "steps") for p in (ref / t).glob("date=*/*.parquet")
            if p.name == f"{stem}.parquet" or p.name.startswith(f"{stem}.w")]


def verdicts(store: Path):
    """What trend and gate say of a store (their values, or the error's class)."""
    out = []
    for fn in (lambda: batch_mod.trend_frame(store).rows(), lambda: batch_mod.gate_check(store)):
        try:
            out.append(fn())
        except Exception as exc:  # noqa: BLE001 - the class is the answer (no runs: InputNotFound)
            out.append(type(exc).__name__)
    return out


class Harness:
    def __init__(self, work: Path):
        self.work = work
        self.env = Env(work)
        self.roots = make_roots(work / "roots")
        self.refs: dict[str, Path] = {}
        self.ref_tables: dict[str, dict] = {}
        self.steps: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self.sizes: dict[str, int] = {}
        self.lock = threading.Lock()
        self.counter = 0
        self.exits: dict[str, list[int]] = {"step": [], "time": [], "fsize": []}  # the trials' batch exits

    # ---------------------------------------------------------------- references
    def prepare(self) -> None:
        a, b = self.roots
        for name, root, start in (("A", a, None), ("B", b, "A")):
            ref = self.work / f"ref-{name}"
            if start:
                shutil.copytree(self.refs[start], ref)
            log = self.work / f"steps-{name}.log"
            rc, out, err = self.env.batch(root, ref, {store_mod.FAULT_LOG_ENV: str(log)})
            if rc:
                raise Failure(f"the clean batch of scenario {name} failed ({rc}): {err}")
            self.steps[name] = len(log.read_text().splitlines())
            # how long a clean batch takes, cache warm (what a trial takes)
            trial = self.work / f"time-{name}"
            if start:
                shutil.copytree(self.refs[start], trial)
            t0 = time.time()
            self.env.batch(root, trial)
            self.seconds[name] = time.time() - t0
            self.sizes[name] = max(p.stat().st_size for p in trial.rglob("*.parquet"))  # the limit is per file
            shutil.rmtree(trial)
            self.refs[name] = ref
            self.ref_tables[name] = tables(ref)

    def versions(self, scenario: str) -> dict[str, list[tuple[str, dict]]]:
        """run id -> the versions a store of this scenario may hold of it ((reference, rows))."""
        names = ["A"] if scenario == "A" else ["A", "B"]
        out: dict[str, list] = {}
        for n in names:
            t = self.ref_tables[n]
            for run_id in t["runs"]["run_id"].to_list():
                rows = run_rows(t, run_id)
                if not any(same(rows, r) for _, r in out.get(run_id, [])):
                    out.setdefault(run_id, []).append((n, rows))
        return out

    # ---------------------------------------------------------------- one trial
    def trial(self, scenario: str, kind: str, value) -> str | None:
        """Run one trial; None when every check holds, else what failed."""
        with self.lock:
            self.counter += 1
            n = self.counter
        d = self.work / f"t{n}"
        store = d / "store"
        d.mkdir()
        root = self.roots[0 if scenario == "A" else 1]
        if scenario == "B":
            shutil.copytree(self.refs["A"], store)
        try:
            if kind == "step":
                rc, out, err = self.env.batch(root, store, {store_mod.FAULT_ENV: f"store:step:{value}"})
                if rc != -signal.SIGKILL:
                    return f"not killed at step {value}: exit {rc}: {err[-300:]}"
            elif kind == "time":
                rc, out, err = self.env.batch(root, store, kill_after=value)
            else:  # fsize
                rc, out, err = self.env.batch(root, store, fsize=value)
            with self.lock:
                self.exits[kind].append(rc)
            if kind == "fsize":
                if rc not in (0, 3) or "Traceback" in err:
                    return f"full disk (RLIMIT_FSIZE {value}): exit {rc}, want 0 or 3 and one line: {err[-600:]}"
                if rc == 3 and len([ln for ln in err.splitlines() if ln.startswith("traceanalyzer: error")]) != 1:
                    return f"full disk (RLIMIT_FSIZE {value}): not one error line: {err[-600:]}"
            return self.check(scenario, store, d, second_rerun=n % 3 == 0)
        except Failure as exc:
            return str(exc)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def check(self, scenario: str, store: Path, d: Path, second_rerun: bool = True) -> str | None:
        if not store.exists():
            store.mkdir(parents=True)
        try:
            seen = tables(store)
        except Failure as exc:
            return f"the store does not open cleanly: {exc}"
        committed = seen["runs"]["run_id"].to_list()
        versions = self.versions(scenario)
        fresh = d / "fresh"
        fresh.mkdir()
        for run_id in committed:
            rows = run_rows(seen, run_id)
            match = [n for n, r in versions.get(run_id, []) if same(rows, r)]
            if not match:
                return f"run {run_id} is not wholly one stored version: {rows}"
            for f in run_files(self.refs[match[0]], run_id):
                dst = fresh / f.relative_to(self.refs[match[0]])
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(f, dst)
        for t in ("ranks", "steps"):
            stray = seen[t].filter(~pl.col("run_id").is_in(committed))
            if stray.height:
                return f"{t}: rows of uncommitted runs are visible: {stray['run_id'].unique().to_list()}"
        got, want = verdicts(store), verdicts(fresh)
        if got != want:
            return f"trend/gate differ from a fresh store of {committed}: {got} vs {want}"
        rc, out, err = self.env.batch(self.roots[0 if scenario == "A" else 1], store)
        if rc:
            return f"the rerun failed ({rc}): {err[-600:]}"
        final = tables(store)
        if not same(final, self.ref_tables[scenario]):
            return "after the rerun the store is not the crash-free one"
        on_disk = files(store)
        n_runs = final["runs"].height
        for t in ("runs", "ranks", "steps"):
            if len([f for f in on_disk if f.startswith(t + "/")]) != n_runs:
                return f"after the rerun {t} holds other than one file per run: {sorted(on_disk)}"
        if not second_rerun:
            return None
        rc, out, err = self.env.batch(self.roots[0 if scenario == "A" else 1], store)
        doc = json.loads(out) if not rc else {}
        if rc or doc.get("analysed") or files(store) != on_disk:
            return f"a second rerun was not a no-op ({rc}): {out[-400:]} {err[-400:]}"
        return None

    # ---------------------------------------------------------------- concurrency
    def concurrent(self, n: int) -> str | None:
        """``n`` batches at once on one store: the first over scenario A, the others too, or over
        single runs of it (disjoint roots): every run once, with the crash-free rows."""
        d = self.work / f"conc{n}"
        store = d / "store"
        d.mkdir()
        a = self.roots[0]
        roots = [a] * (n // 2) + sorted(a.iterdir())[: n - n // 2]
        procs = [subprocess.Popen([*CLI, "batch", str(r), "--store", str(store), "--workers", "1", "--quiet",
                                   "--format", "json"], env=self.env.base, cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in roots]
        outs = [p.communicate() for p in procs]
        try:
            if any(p.returncode for p in procs):
                return f"{n} concurrent batches: exits {[p.returncode for p in procs]}: {[e[-300:] for _, e in outs]}"
            analysed = [r for o, _ in outs for r in json.loads(o)["analysed"]]
            if sorted(analysed) != sorted(set(analysed)):
                return f"{n} concurrent batches: a run analysed twice: {sorted(analysed)}"
            if not same(tables(store), self.ref_tables["A"]):
                return f"{n} concurrent batches: the store is not the crash-free one"
            on_disk = files(store)
            for t in ("runs", "ranks", "steps"):
                if len([f for f in on_disk if f.startswith(t + "/")]) != 3:
                    return f"{n} concurrent batches: {t} holds other than one file per run"
            return None
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=200, help="trials (default 200): every write step first, then random")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2, help="trials run at once (default 2)")
    ap.add_argument("--work", type=Path, help="scratch folder (default: a temporary one, removed)")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="crash-store-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    h = Harness(work)
    h.prepare()
    print(f"seed {args.seed}; clean batches: scenario A (first write) {h.steps['A']} I/O steps, {h.seconds['A']:.1f} s; "
          f"B (replace, date moved) {h.steps['B']} steps, {h.seconds['B']:.1f} s", flush=True)
    rng = random.Random(args.seed)
    steps = [(s, "step", k) for s in ("A", "B") for k in range(1, h.steps[s] + 1)]
    if args.kills < len(steps):  # a short run: a seeded sample of the steps, then random trials
        steps = sorted(rng.sample(steps, args.kills * 2 // 3))
    trials = list(steps)
    while len(trials) < args.kills:
        s = rng.choice("AB")
        if rng.random() < 0.7:
            trials.append((s, "time", round(rng.uniform(0.2, h.seconds[s] * 1.1), 3)))
        else:
            trials.append((s, "fsize", rng.randint(0, int(h.sizes[s] * 1.2))))
    failures: list[str] = []
    done = [0]

    def one(t):
        r = h.trial(*t)
        with h.lock:
            done[0] += 1
            if r:
                print(f"FAILED: {t}: {r}", flush=True)
            if done[0] % 25 == 0:
                print(f"... {done[0]} of {len(trials)} trials ({time.time() - t0:.0f} s)", flush=True)
        return t, r

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        results = list(pool.map(one, trials))
    for kind in ("step", "time", "fsize"):
        mine = [(t, r) for t, r in results if t[1] == kind]
        bad = [(t, r) for t, r in mine if r]
        label = {"step": "killed at a write step", "time": "killed at a random moment", "fsize": "under RLIMIT_FSIZE"}[kind]
        ex = h.exits[kind]
        how = {"step": "", "time": f" ({ex.count(-signal.SIGKILL)} killed mid-batch, {ex.count(0)} finished first)",
               "fsize": f" ({ex.count(3)} stopped by the limit, exit 3; {ex.count(0)} fitted)"}[kind]
        print(f"{label}: {len(mine)} trials{how}, {len(bad)} failed")
        failures += [f"{t}: {r}" for t, r in bad]
    for n in (2, 4):
        r = h.concurrent(n)
        print(f"{n} concurrent batches on one store: {'ok' if r is None else 'FAILED: ' + r}")
        if r:
            failures.append(r)
    print(f"total: {len(results)} trials in {time.time() - t0:.0f} s, {len(failures)} failure(s)")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
