"""The batch store as a transactional dataset: crashes, changed inputs, damaged files, bad
manifests, symlink loops and concurrent writers.

The crash tests kill ``traceanalyzer batch`` with SIGKILL at every step of a run's write (the
``TRACEANALYZER_FAULT=store:<point>`` hook), then check that every run the store shows has exactly
the rows of one complete analysis (compared with a store written without a crash), and that the
next batch completes the interrupted run and leaves no stray file behind.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyzer as ta
from traceanalyzer.store import Store, gate_check, run_batch, trend_frame
from traceanalyzer.store.database import FAULT_ENV, FAULT_POINTS, DamagedStoreFile, file_stem

from conftest import DEMO, DLRM, FIXTURES, PYTHONPATH, ROOT, run_cli

RANK0, RANK1 = sorted(DLRM.iterdir())[:2]
ROCM = FIXTURES / "kineto" / "mi250_rocm62_minitoy.json.gz"
VOLATILE = ["analysed_at", "seconds", "write_id"]  # when, how long, which write: may differ
WHERE = ["path", "file"]  # where the traces were: differs between a copy and the reference


def _put(dst_dir: Path, *files: Path) -> Path:
    dst_dir.mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, dst_dir / f.name)
    return dst_dir


def _manifest(run_dir: Path, date: str) -> None:
    (run_dir / "traceanalyzer-run.toml").write_text(f'run_id = "gamma"\njob = "gamma"\ndate = {date}\n')


def _tables(store: Path) -> dict[str, pl.DataFrame]:
    st = Store(store)
    out = {}
    for t in ("runs", "ranks", "steps"):
        frame = st.read(t).drop(*VOLATILE, *WHERE, strict=False)
        out[t] = frame.sort(pl.all())
    assert st.damaged == {}
    return out


def _rows_of(tables: dict[str, pl.DataFrame], run_id: str) -> dict[str, pl.DataFrame]:
    return {t: f.filter(pl.col("run_id") == run_id) for t, f in tables.items()}


def _batch_killed_at(point: str, root: Path, store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, FAULT_ENV: f"store:{point}"}
    r = subprocess.run([sys.executable, "-m", "traceanalyzer", "batch", str(root), "--store", str(store), "--workers", "1"],
                       capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == -signal.SIGKILL, (point, r.returncode, r.stderr)
    return r


def _files_on_disk(store: Path) -> list[Path]:
    return sorted(p for t in ("runs", "ranks", "steps") for p in (store / t).rglob("*") if p.is_file())


def _assert_clean(store: Path, n_runs: int) -> None:
    """Exactly one file per run and table, and nothing else (no temporary, no orphan)."""
    files = _files_on_disk(store)
    assert [p for p in files if p.name.startswith(".")] == []
    for t in ("runs", "ranks", "steps"):
        assert len([p for p in files if p.relative_to(store).parts[0] == t]) == n_runs, t


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("two-runs")
    _put(root / "alpha-2026-11-18", RANK0, RANK1)
    _put(root / "beta-2026-11-19", ROCM)
    ref = tmp_path_factory.mktemp("ref") / "store"
    summary = run_batch([root], ref, workers=1)
    assert summary.analysed == ["alpha-2026-11-18", "beta-2026-11-19"]
    return root, _tables(ref)


def test_fault_points_are_every_step_of_a_write():
    assert FAULT_POINTS == ("steps-tmp", "steps", "ranks-tmp", "ranks", "uncommit", "runs-tmp", "commit", "cleanup")


@pytest.mark.parametrize("point", [p for p in FAULT_POINTS if p != "cleanup"])
def test_kill_during_a_first_write(two_runs, tmp_path, point):
    root, ref = two_runs
    store = tmp_path / "store"
    _batch_killed_at(point, root, store)
    # the first run (by date) was being written: visible completely, or not at all
    seen = _tables(store)
    committed = seen["runs"]["run_id"].to_list()
    assert committed == (["alpha-2026-11-18"] if point == "commit" else [])
    for run_id in committed:
        for t, frame in _rows_of(seen, run_id).items():
            assert_frame_equal(frame, _rows_of(ref, run_id)[t])
    for t in ("ranks", "steps"):  # rows of an uncommitted write are on disk, but not visible
        assert seen[t].filter(~pl.col("run_id").is_in(committed)).height == 0
    if point in ("steps", "ranks", "uncommit", "runs-tmp"):
        assert any("alpha" in p.name for p in _files_on_disk(store) if p.relative_to(store).parts[0] == "steps")
    # gate and trend read only committed runs
    if committed:
        assert trend_frame(store)["run_id"].to_list() == committed
    # the next batch finishes the job: the store is the crash-free one, with no stray file
    again = run_batch([root], store, workers=1)
    assert again.analysed == sorted({"alpha-2026-11-18", "beta-2026-11-19"} - set(committed))
    assert again.skipped == committed
    for t, frame in _tables(store).items():
        assert_frame_equal(frame, ref[t])
    _assert_clean(store, 2)


@pytest.fixture(scope="module")
def replaced(tmp_path_factory):
    """Run `gamma`: stored with one rank on 2026-11-18; then its second rank lands and its
    manifest moves it to 2026-11-19. Reference stores of both versions."""
    base = tmp_path_factory.mktemp("gamma")
    v1, v2 = base / "v1" / "gamma", base / "v2" / "gamma"
    _put(v1, RANK0)
    _manifest(v1, "2026-11-18")
    _put(v2, RANK0, RANK1)
    _manifest(v2, "2026-11-19")
    refs = {}
    for name, d in (("v1", v1), ("v2", v2)):
        run_batch([d.parent], base / f"ref-{name}", workers=1)
        refs[name] = _tables(base / f"ref-{name}")
    assert refs["v1"]["ranks"].height == 1 and refs["v2"]["ranks"].height == 2
    return v1, v2, refs


@pytest.mark.parametrize("point", FAULT_POINTS)
def test_kill_while_replacing_a_stored_run(replaced, tmp_path, point):
    v1, v2, refs = replaced
    root = tmp_path / "root"
    shutil.copytree(v1, root / "gamma")
    store = tmp_path / "store"
    run_batch([root], store, workers=1)
    for f in root.joinpath("gamma").iterdir():  # the late rank lands, the manifest changes
        f.unlink()
    for f in v2.iterdir():
        shutil.copy(f, root / "gamma" / f.name)
    r = _batch_killed_at(point, root, store)
    assert "gamma: input changed since it was stored (1 trace file(s) then, 2 now)" in r.stderr
    seen = _tables(store)
    # before the commit: the old version, whole; after: the new one, whole; in between (the old
    # date's commit withdrawn, the new one not yet written): no version
    want = "v1" if FAULT_POINTS.index(point) < FAULT_POINTS.index("uncommit") else (
        None if point in ("uncommit", "runs-tmp") else "v2")
    for t, frame in seen.items():
        assert_frame_equal(frame, refs[want][t] if want else frame.clear())
    again = run_batch([root], store, workers=1)
    assert (again.analysed, again.skipped) == (([], ["gamma"]) if want == "v2" else (["gamma"], []))
    for t, frame in _tables(store).items():
        assert_frame_equal(frame, refs["v2"][t])
    _assert_clean(store, 1)


# ---------------------------------------------------------------------- changed inputs


def test_changed_input_is_analysed_again_and_said(tmp_path):
    root, store = tmp_path / "root", tmp_path / "store"
    run = _put(root / "delta-2026-11-20", RANK0)
    # night 1: rank 1 is still being written (cut mid-file)
    late = run / RANK1.name.replace(".json.gz", ".json")
    late.write_bytes(_gunzipped(RANK1)[: int(len(_gunzipped(RANK1)) * 0.97)])
    r = run_cli("batch", root, "--store", store, "--workers", "1")
    assert r.returncode == 0, r.stderr
    first = Store(store).runs().row(0, named=True)
    assert first["status"] == "ok" and any("truncated" in w for w in first["warnings"])
    # unchanged: skipped, nothing said
    r = run_cli("batch", root, "--store", store, "--workers", "1")
    assert "0 analysed" in r.stdout and "1 skipped" in r.stdout and "input changed" not in r.stderr
    # the profiler finished writing: same file name, other bytes
    late.write_bytes(_gunzipped(RANK1))
    r = run_cli("batch", root, "--store", store, "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert "batch: delta-2026-11-20: input changed since it was stored (its 2 trace file(s) or manifest hold other bytes)" in r.stderr
    assert "1 analysed (1 again: input changed)" in r.stdout
    st = Store(store)
    steps = st.read("steps").sort("rank", "start_ns")
    want = ta.breakdown(ta.load(run))
    want = want.select([c for c in want.columns if c in steps.columns])  # the store keeps no host-bound split
    assert_frame_equal(steps.select(want.columns), want, check_dtypes=False)
    assert st.runs().height == 1 and not [w for w in st.runs()["warnings"][0] if "truncated" in w]  # the cut is gone
    # a rank that lands later (a third file): analysed again, three ranks now
    shutil.copy(sorted(DLRM.iterdir())[2], run)
    s = run_batch([root], store, workers=1)
    assert s.reanalysed == ["delta-2026-11-20"] and Store(store).read("ranks")["rank"].to_list() == [0, 1, 2]
    # a rank file removed (disk cleanup): the stored rows are kept, and that is said
    late.unlink()
    s = run_batch([root], store, workers=1)
    assert s.skipped == ["delta-2026-11-20"] and "1 of its 3 trace file(s) are gone" in s.notices[0]
    assert Store(store).read("ranks")["rank"].to_list() == [0, 1, 2]


def _gunzipped(path: Path) -> bytes:
    import gzip

    return gzip.open(path).read()


# ---------------------------------------------------------------------- damaged store files


@pytest.fixture
def three_nights(tmp_path):
    root, store = tmp_path / "root", tmp_path / "store"
    for day in ("2026-11-18", "2026-11-19", "2026-11-20"):
        _put(root / f"eps-{day}", ROCM)
    run_batch([root], store, workers=1)
    return root, store


def _store_file(store: Path, table: str, run_id: str) -> Path:
    [f] = (store / table).glob(f"date=*/{file_stem(run_id)}*.parquet")
    return f


@pytest.mark.parametrize("damage", [b"", b"PAR1 not really parquet PAR1"], ids=["empty", "corrupt"])
def test_damaged_runs_file_is_skipped_by_trend_and_named(three_nights, damage):
    root, store = three_nights
    bad = _store_file(store, "runs", "eps-2026-11-19")
    bad.write_bytes(damage)
    r = run_cli("trend", "--store", store)
    assert r.returncode == 0, r.stderr
    assert "eps-2026-11-18" in r.stdout and "eps-2026-11-20" in r.stdout and "eps-2026-11-19" not in r.stdout
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"warning: {bad}: damaged store file (") and line.endswith("): skipped")
    # the gate: an older night damaged -> skipped with the warning; the latest is intact
    r = run_cli("gate", "--store", store)
    assert r.returncode == 0 and f"warning: {bad}: damaged store file" in r.stderr and "eps-2026-11-20" in r.stdout
    # the next batch re-stores the damaged run, says so, and the warning is gone
    s = run_batch([root], store, workers=1)
    assert s.analysed == ["eps-2026-11-19"] and any("its stored row is damaged" in n for n in s.notices)
    r = run_cli("trend", "--store", store)
    assert r.returncode == 0 and r.stderr == "" and "eps-2026-11-19" in r.stdout


def test_gate_refuses_when_a_damaged_file_may_be_the_latest_run(three_nights):
    _, store = three_nights
    bad = _store_file(store, "runs", "eps-2026-11-20")
    bad.write_bytes(b"")
    r = run_cli("gate", "--store", store)
    assert r.returncode == 4, r.stderr
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"traceanalyzer: error: {bad}: damaged store file (") and "latest run of job 'eps'" in line
    with pytest.raises(DamagedStoreFile):
        gate_check(store)


def test_store_with_nothing_readable_is_exit_4_naming_the_file(three_nights):
    _, store = three_nights
    files = sorted((store / "runs").rglob("*.parquet"))
    for f in files:
        f.write_bytes(b"")
    for cmd in ("trend", "gate"):
        r = run_cli(cmd, "--store", store)
        assert r.returncode == 4, r.stderr
        [line] = r.stderr.strip().splitlines()
        assert line.startswith(f"traceanalyzer: error: {files[0]}: damaged store file") and "2 more" in line


def test_damaged_ranks_and_steps_files_are_skipped_with_a_warning(three_nights, tmp_path):
    root, store = three_nights
    ranks = _store_file(store, "ranks", "eps-2026-11-19")
    steps = _store_file(store, "steps", "eps-2026-11-20")
    ranks.write_bytes(ranks.read_bytes()[:40])
    steps.write_bytes(b"")
    st = Store(store)
    assert st.read("ranks")["run_id"].to_list() == ["eps-2026-11-18", "eps-2026-11-20"]
    assert st.read("steps")["run_id"].unique().sort().to_list() == ["eps-2026-11-18", "eps-2026-11-19"]
    assert set(st.damaged) == {ranks, steps} and all(str(p) in " ".join(st.warnings) for p in (ranks, steps))
    # a batch over the same inputs leaves them (the runs are committed) and does not fail
    assert run_batch([root], store, workers=1).skipped == ["eps-2026-11-18", "eps-2026-11-19", "eps-2026-11-20"]
    # --force re-stores every run, the damaged files included
    run_batch([root], store, workers=1, force=True)
    st = Store(store)
    assert st.read("steps").height == 3 * Store(store).read("steps").filter(pl.col("run_id") == "eps-2026-11-18").height
    assert st.damaged == {}


def test_store_written_before_write_ids_reads_as_committed(three_nights):
    """Older stores: every table's file is `<run>.parquet`, and runs rows have no write_id."""
    root, store = three_nights
    before = _tables(store)
    for t in ("runs", "ranks", "steps"):
        for f in (store / t).rglob("*.parquet"):
            frame = pl.read_parquet(f).drop("write_id")
            f.unlink()
            frame.write_parquet(f.with_name(f.name.split(".w")[0] + ".parquet") if t != "runs" else f)
    for t, frame in _tables(store).items():
        assert_frame_equal(frame, before[t])
    assert run_batch([root], store, workers=1).skipped == ["eps-2026-11-18", "eps-2026-11-19", "eps-2026-11-20"]
    _assert_clean(store, 3)  # nothing of the old layout was taken for debris


# ---------------------------------------------------------------------- discovery


def test_broken_manifest_is_a_failed_run_and_the_others_are_stored(tmp_path):
    root, store = tmp_path / "root", tmp_path / "store"
    _put(root / "zeta-2026-11-18", ROCM)
    bad = _put(root / "zeta-2026-11-19", ROCM)
    (bad / "traceanalyzer-run.toml").write_text('run_id = "zeta-n2\n')
    missing_cfg = _put(root / "zeta-2026-11-20", ROCM)
    (missing_cfg / "traceanalyzer-run.toml").write_text('config = "nowhere.toml"\n')
    r = run_cli("batch", root, "--store", store, "--workers", "1")
    assert r.returncode == 9, r.stderr  # runs failed: exit 9 after storing the others
    assert "3 run(s): 1 analysed" in r.stdout and "2 failed" in r.stdout
    runs = Store(store).runs()
    assert runs.filter(pl.col("status") == "ok")["run_id"].to_list() == ["zeta-2026-11-18"]
    failed = {row["run_id"]: row for row in runs.filter(pl.col("status") == "failed").iter_rows(named=True)}
    assert set(failed) == {"zeta-2026-11-19", "zeta-2026-11-20"}
    for run_id, row in failed.items():
        assert (row["exit_code"], row["error_class"]) == (7, "ConfigError")
        assert row["error"].startswith(str(root / run_id / "traceanalyzer-run.toml") + ": ")
    assert "not a valid run manifest" in failed["zeta-2026-11-19"]["error"]
    assert "'nowhere.toml' is not a file" in failed["zeta-2026-11-20"]["error"]
    assert str(failed["zeta-2026-11-19"]["date"]) == "2026-11-19"
    # the same failures are not recorded again; a repaired manifest is analysed
    assert run_batch([root], store, workers=1).skipped == ["zeta-2026-11-18", "zeta-2026-11-19", "zeta-2026-11-20"]
    (bad / "traceanalyzer-run.toml").write_text('job = "zeta"\n')
    s = run_batch([root], store, workers=1)
    assert s.analysed == ["zeta-2026-11-19"] and s.reanalysed == ["zeta-2026-11-19"]
    assert Store(store).runs().filter(pl.col("status") == "ok").height == 2


def test_symlinked_directories_are_not_followed(tmp_path):
    root, store = tmp_path / "root", tmp_path / "store"
    _put(root / "eta-2026-11-18", ROCM)
    (root / "loop").symlink_to("..")
    (root / "latest").symlink_to("eta-2026-11-18")
    (root / "self").symlink_to(".")
    s = run_batch([root], store, workers=1)
    assert s.analysed == ["eta-2026-11-18"] and s.failed == []
    # a root named on the command line may itself be a link
    (tmp_path / "link-root").symlink_to(root)
    assert run_batch([tmp_path / "link-root"], store, workers=1).skipped == ["eta-2026-11-18"]


def test_dangling_rank_link_fails_its_run_naming_it(tmp_path):
    root, store = tmp_path / "root", tmp_path / "store"
    run = _put(root / "theta-2026-11-18", RANK0)
    (run / "rank1.json.gz").symlink_to(tmp_path / "gone.json.gz")
    s = run_batch([root], store, workers=1)
    [f] = s.failed
    assert f["exit_code"] == 3 and str(run / "rank1.json.gz") in f["error"]


# ---------------------------------------------------------------------- one writer at a time


def test_second_batch_waits_for_the_first(tmp_path):
    root, store = tmp_path / "root", tmp_path / "store"
    _put(root / "iota-2026-11-18", ROCM)
    store.mkdir()
    with open(store / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a running batch holds it
        held.write("pid 4242 since 2026-11-20T02:00:00\n")
        held.flush()
        proc = subprocess.Popen([sys.executable, "-m", "traceanalyzer", "batch", str(root), "--store", str(store), "--workers", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": PYTHONPATH})
        line = proc.stderr.readline()
        assert line.strip() == f"batch: {store}: another batch is writing this store (pid 4242 since 2026-11-20T02:00:00); waiting for it to finish"
        time.sleep(0.5)
        assert proc.poll() is None and not (store / "runs").exists()  # still waiting, nothing written
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "1 analysed" in out and Store(store).runs()["run_id"].to_list() == ["iota-2026-11-18"]


def test_a_reader_racing_a_commit_lists_again(three_nights, monkeypatch):
    """A reader that listed `runs` just before a batch replaced a run finds the old write's files
    gone: it reads `runs` again instead of returning the run without rows."""
    root, store = three_nights
    st = Store(store)
    stale = st.committed()
    run_batch([root / "eps-2026-11-19"], store, workers=1, force=True)
    real, calls = Store.committed, []
    monkeypatch.setattr(Store, "committed", lambda self: calls.append(1) and None or (stale if len(calls) == 1 else real(self)))
    ranks = st.read("ranks")
    assert len(calls) == 2 and ranks["run_id"].to_list() == ["eps-2026-11-18", "eps-2026-11-19", "eps-2026-11-20"]
    assert st.damaged == {}
    # a committed run's file that is really gone is named, not silently dropped
    monkeypatch.setattr(Store, "committed", real)
    gone = _store_file(store, "ranks", "eps-2026-11-18")
    gone.unlink()
    assert st.read("ranks")["run_id"].to_list() == ["eps-2026-11-19", "eps-2026-11-20"]
    assert st.warnings == [f"{gone}: damaged store file (missing: the run's rows in this table are gone): skipped"]
