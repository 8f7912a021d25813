"""The batch store under injected faults: a kill before a numbered I/O step, a full disk
(RLIMIT_FSIZE), and batches run at once. scripts/crash_store.py runs these at every step and at
random moments; here one of each, the defects it found included."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer.store import Store
from traceanalyzer.store.database import FAULT_ENV, FAULT_LOG_ENV

from conftest import FIXTURES, PYTHONPATH, ROOT

ROCM = FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz"


def _batch(root: Path, store: Path, tmp: Path, env: dict | None = None, fsize: int | None = None):
    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    full = {**os.environ, "PYTHONPATH": PYTHONPATH, "TRACEANALYZER_CACHE": str(tmp / "cache"), **(env or {})}
    for k in (FAULT_ENV, FAULT_LOG_ENV):
        if k not in (env or {}):
            full.pop(k, None)
    return subprocess.run([sys.executable, "-m", "traceanalyzer", "batch", str(root), "--store", str(store), "--workers", "1"],
                          capture_output=True, text=True, cwd=ROOT, env=full, preexec_fn=limit)


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    (root / "kappa-2026-11-18").mkdir()
    shutil.copy(ROCM, root / "kappa-2026-11-18" / ROCM.name)
    return root


def _visible(store: Path) -> dict[str, int]:
    st = Store(store)
    out = {t: st.read(t).height for t in ("runs", "ranks", "steps")}
    assert st.damaged == {}
    return out


def test_the_step_log_numbers_every_write_and_a_kill_before_the_commit_rename_leaves_nothing(one_run, tmp_path):
    log = tmp_path / "steps.log"
    r = _batch(one_run, tmp_path / "ref", tmp_path, {FAULT_LOG_ENV: str(log)})
    assert r.returncode == 0, r.stderr
    steps = [line.split(" ", 2) for line in log.read_text().splitlines()]
    assert [int(k) for k, _, _ in steps] == list(range(1, len(steps) + 1))
    # three files (steps, ranks, runs), each created, written, flushed and renamed into place
    assert [s for _, s, _ in steps].count("rename") == 3 and [s for _, s, _ in steps].count("fsync") == 3
    commit = next(int(k) for k, s, p in steps if s == "rename" and "/runs/" in p)
    for k, runs in ((commit, 0), (commit + 1, 1)):  # before the runs file's rename: no run; after: the whole run
        store = tmp_path / f"store{k}"
        r = _batch(one_run, store, tmp_path, {FAULT_ENV: f"store:step:{k}"})
        assert r.returncode == -signal.SIGKILL, r.stderr
        seen = _visible(store)
        ref = _visible(tmp_path / "ref")
        assert seen == ({t: 0 for t in ref} if runs == 0 else ref)
        again = _batch(one_run, store, tmp_path)
        assert again.returncode == 0 and _visible(store) == ref


@pytest.mark.parametrize("fsize", [0, 2000])  # 0: not even the lock file's line fits; 2000: a Parquet file of the run is larger
def test_a_full_disk_is_exit_3_naming_the_file_and_the_next_batch_completes(one_run, tmp_path, fsize):
    store = tmp_path / "store"
    r = _batch(one_run, store, tmp_path, fsize=fsize)
    assert r.returncode == 3, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("traceanalyzer: error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr
    assert "cannot write the store: File too large" in errors[0] and f"{store}/steps/date=2026-11-18/" in errors[0]
    assert _visible(store) == {"runs": 0, "ranks": 0, "steps": 0}
    assert not [p for p in store.rglob(".*.tmp")]  # the temporary file was removed
    again = _batch(one_run, store, tmp_path)
    assert again.returncode == 0, again.stderr
    runs = Store(store).runs()
    assert runs["run_id"].to_list() == ["kappa-2026-11-18"] and runs["status"].to_list() == ["ok"]


def test_four_batches_at_once_store_each_run_once(tmp_path):
    root = tmp_path / "root"
    for name in ("lam-2026-11-18", "lam-2026-11-19", "mu-2026-11-18"):
        (root / name).mkdir(parents=True)
        shutil.copy(ROCM, root / name / ROCM.name)
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "TRACEANALYZER_CACHE": str(tmp_path / "cache")}
    procs = [subprocess.Popen([sys.executable, "-m", "traceanalyzer", "batch", str(r), "--store", str(store), "--workers", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
             for r in (root, root, root / "lam-2026-11-19", root / "mu-2026-11-18")]
    for p in procs:
        p.communicate(timeout=300)
        assert p.returncode == 0
    st = Store(store)
    runs = st.read("runs")
    assert sorted(runs["run_id"].to_list()) == ["lam-2026-11-18", "lam-2026-11-19", "mu-2026-11-18"]
    # one rank per run (one trace file each), and one file per run and table on disk
    assert st.read("ranks").group_by("run_id").len()["len"].to_list() == [1, 1, 1]
    for t in ("runs", "ranks", "steps"):
        assert len(list((store / t).rglob("*.parquet"))) == 3
    steps = st.read("steps")
    assert steps.height == 3 * steps.filter(pl.col("run_id") == "mu-2026-11-18").height
