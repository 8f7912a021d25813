"""Batch analysis into a Parquet store, trends and the regression gate, on a tree of real traces."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyzer as ta
from traceanalyzer.store import Store, discover_runs, gate_check, run_batch, trend_frame
from traceanalyzer import cache as parse_cache
from traceanalyzer.cache import cache_key, file_sha256
from traceanalyzer.parsers import load_cached
from traceanalyzer.store.discover import parse_date
from traceanalyzer.classify import FIELDS

from conftest import DEMO, DLRM, FIXTURES, ROOT, TRACES, run_cli

_spec = importlib.util.spec_from_file_location("stretch_trace", ROOT / "scripts" / "stretch_trace.py")
stretch_trace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stretch_trace)

ALEXNET = TRACES / "hta" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
SAMPLED = [TRACES / "hta" / "trace_filter" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]


def _copy(src: Path, dst_dir: Path, name: str | None = None) -> None:
    dst_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dst_dir / (name or src.name))


def build_tree(root: Path) -> dict[str, Path]:
    """Nightly runs of real traces; returns run id -> the path a user would give `breakdown`."""
    runs = {}
    # job "resnet": one rank per night, directory names carry job and date
    for day in ("2026-11-18", "2026-11-19"):
        _copy(DEMO, root / "nightly" / f"resnet-{day}")
        runs[f"resnet-{day}"] = root / "nightly" / f"resnet-{day}"
    # job "dlrm": 8 rank files per night, the date alone names the directory (job = parent)
    for f in sorted(DLRM.iterdir()):
        _copy(f, root / "dlrm" / "20261119")
    runs["dlrm/20261119"] = root / "dlrm" / "20261119"
    # a manifest overrides id, job and date
    for f in sorted(DLRM.iterdir()):
        _copy(f, root / "dlrm" / "second-night")
    (root / "dlrm" / "second-night" / "traceanalyzer-run.toml").write_text('run_id = "dlrm-n2"\njob = "dlrm"\ndate = 2026-11-20\n')
    runs["dlrm-n2"] = root / "dlrm" / "second-night"
    if TRACES.exists():
        # single-file runs: a directory of dated files, one run per file
        for day in ("2026-11-19", "2026-11-20"):
            _copy(ALEXNET, root / "alexnet", f"alexnet_{day}.json.gz")
            runs[f"alexnet_{day}"] = root / "alexnet" / f"alexnet_{day}.json.gz"
        for f in SAMPLED:  # a 2-rank job from shared/traces
            _copy(f, root / "sampled" / "2026-11-20")
        runs["sampled/2026-11-20"] = root / "sampled" / "2026-11-20"
    # deliberately corrupted: a gzip header, then garbage
    broken = root / "broken" / "2026-11-20"
    broken.mkdir(parents=True)
    (broken / "rank0.json.gz").write_bytes(DEMO.read_bytes()[:10] + b"\x00garbage" * 64)
    return runs


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    return root, build_tree(root)


@pytest.fixture(scope="module")
def stored(tree, tmp_path_factory):
    root, runs = tree
    store = tmp_path_factory.mktemp("store")
    summary = run_batch([root], store, workers=2)  # the process pool
    return store, runs, summary


def test_names_give_date_job_and_run_id(tmp_path):
    assert parse_date("nightly-2026-11-20") == ("2026-11-20", "nightly")
    assert parse_date("20261120") == ("2026-11-20", "")
    assert parse_date("llama_2026_11_20_run3") == ("2026-11-20", "llama-run3")
    assert parse_date("worker0_step_12.1694128201545.pt.trace") == (None, "worker0_step_12.1694128201545.pt.trace")
    assert parse_date("run-20261340")[0] is None  # month 13: not a date
    root, runs = tmp_path, build_tree(tmp_path)
    specs = {s.run_id: s for s in discover_runs([root])}
    assert set(specs) == {*runs, "broken/2026-11-20"}
    assert (specs["dlrm/20261119"].job, specs["dlrm/20261119"].date, len(specs["dlrm/20261119"].files)) == ("dlrm", "2026-11-19", 8)
    assert (specs["dlrm-n2"].job, specs["dlrm-n2"].date) == ("dlrm", "2026-11-20")
    assert (specs["resnet-2026-11-18"].job, specs["resnet-2026-11-18"].date) == ("resnet", "2026-11-18")
    # the same run id whichever root is given
    assert [s.run_id for s in discover_runs([root / "dlrm" / "20261119"])] == ["dlrm/20261119"]


@pytest.mark.skipif(not TRACES.exists(), reason=f"shared traces not found at {TRACES}: the tree lacks its single-file and 2-rank runs")
def test_dated_single_files_and_a_two_rank_job_are_runs(tmp_path):
    """The runs the tree holds only with the shared traces: one run per dated file, and a
    directory of two rank files as one run."""
    runs = build_tree(tmp_path)
    specs = {s.run_id: s for s in discover_runs([tmp_path])}
    for day in ("2026-11-19", "2026-11-20"):
        assert specs[f"alexnet_{day}"].files == (str(runs[f"alexnet_{day}"]),)
        assert (specs[f"alexnet_{day}"].job, specs[f"alexnet_{day}"].date) == ("alexnet", day)
    assert len(specs["sampled/2026-11-20"].files) == 2


def test_stored_rows_match_single_trace_breakdown(stored):
    store, runs, summary = stored
    st = Store(store)
    assert sorted(summary.analysed) == sorted(runs)
    assert [f["run_id"] for f in summary.failed] == ["broken/2026-11-20"]
    steps, ranks, table = st.read("steps"), st.read("ranks"), st.runs()
    assert table.filter(pl.col("status") == "ok").height == len(runs)
    for run_id, path in runs.items():
        analysis = ta.analyze(ta.load(path))
        # the store keeps the partition and its causes (not the host-bound split by what the host did)
        want = analysis.steps.select([c for c in analysis.steps.columns if c in steps.columns])
        got = steps.filter(pl.col("run_id") == run_id).sort("rank", "start_ns")
        assert_frame_equal(got.select(want.columns), want, check_dtypes=False)
        row = table.filter(pl.col("run_id") == run_id).row(0, named=True)
        # per-run figures: means over every (rank, step) of the breakdown
        assert row["step_time_us"] == pytest.approx(want["duration_us"].mean(), rel=1e-12)
        assert row["idle_us"] == pytest.approx(want["idle_us"].mean(), rel=1e-12)
        assert (row["n_ranks"], row["n_steps"]) == (want["rank"].n_unique(), want.height)
        totals = analysis.totals()
        r = ranks.filter(pl.col("run_id") == run_id).sort("rank")
        for f in FIELDS:
            assert r[f"{f}_ns"].to_list() == totals[f"{f}_ns"].to_list()
        assert r["step_time_us"].to_list() == pytest.approx((totals["duration_ns"] / totals["steps"] / 1000).to_list())
    assert table.filter(pl.col("run_id") == "dlrm-n2")["date"].to_list()[0].isoformat() == "2026-11-20"
    # every row sits in its run's date partition
    for t in ("runs", "ranks", "steps"):
        frame = st.read(t)
        joined = frame.join(table.select("run_id", pl.col("date").alias("run_date")), on="run_id")
        assert joined.height == frame.height and (joined["date"] == joined["run_date"]).all()
    files = sorted(p.relative_to(store).parts[:2] for p in (store / "runs").rglob("*.parquet"))
    assert ("runs", "date=2026-11-19") in files and ("runs", "date=2026-11-20") in files


def test_a_corrupted_trace_fails_its_run_only(stored):
    store, runs, _ = stored
    bad = Store(store).runs().filter(pl.col("run_id") == "broken/2026-11-20").row(0, named=True)
    assert bad["status"] == "failed" and bad["exit_code"] == 4 and bad["error_class"] == "InvalidTrace"
    assert "rank0.json.gz" in bad["error"]
    assert bad["step_time_us"] is None and bad["input_sha256"]
    assert Store(store).read("steps").filter(pl.col("run_id") == "broken/2026-11-20").height == 0
    # the same message and exit code `breakdown` gives for that file
    r = run_cli("breakdown", Path(bad["path"]))
    assert r.returncode == 4 and bad["error"] in r.stderr


def test_rerun_is_idempotent_and_force_replaces(stored, tree):
    store, runs, _ = stored
    root, _ = tree
    st = Store(store)
    before = {t: st.read(t) for t in ("runs", "ranks", "steps")}
    again = run_batch([root], store, workers=1)
    assert again.analysed == [] and again.failed == [] and len(again.skipped) == len(runs) + 1
    for t, frame in before.items():
        assert_frame_equal(st.read(t).sort("run_id", *(["rank"] if t != "runs" else [])), frame.sort("run_id", *(["rank"] if t != "runs" else [])))
    forced = run_batch([root / "nightly"], store, force=True, workers=1)
    assert sorted(forced.analysed) == ["resnet-2026-11-18", "resnet-2026-11-19"] and forced.cache_hits == 2
    for t, frame in before.items():
        assert st.read(t).height == frame.height  # replaced, not appended
    new = st.runs().filter(pl.col("run_id") == "resnet-2026-11-18").row(0, named=True)
    old = before["runs"].filter(pl.col("run_id") == "resnet-2026-11-18").row(0, named=True)
    assert new["analysed_at"] > old["analysed_at"] and new["step_time_us"] == old["step_time_us"]


def test_failed_run_is_retried_when_its_files_change(tmp_path):
    run = tmp_path / "runs" / "2026-11-21"
    run.mkdir(parents=True)
    (run / "rank0.json").write_text("{not json")
    s1 = run_batch([tmp_path / "runs"], tmp_path / "store", workers=1)
    assert [f["exit_code"] for f in s1.failed] == [4]
    assert run_batch([tmp_path / "runs"], tmp_path / "store", workers=1).skipped == ["runs/2026-11-21"]
    (run / "rank0.json").unlink()
    _copy(DEMO, run)  # the night's trace arrives
    s3 = run_batch([tmp_path / "runs"], tmp_path / "store", workers=1)
    assert s3.analysed == ["runs/2026-11-21"]
    assert Store(tmp_path / "store").runs()["status"].to_list() == ["ok"]


def test_cache_roundtrip_is_exact(tmp_path):
    trace, key, hit = load_cached(DLRM, tmp_path)
    assert not hit and len(list((tmp_path / "traces").glob("*.parquet"))) == 8  # one entry per rank file
    again, key2, hit2 = load_cached(sorted(DLRM.iterdir()), tmp_path)
    ref = ta.load(DLRM)
    assert hit2 and key2 == key
    assert_frame_equal(again.events, ref.events)
    assert_frame_equal(again.meta, ref.meta)
    assert again.warnings == ref.warnings
    # the same files elsewhere: a hit, with meta.file pointing at the new place
    moved = tmp_path / "moved"
    shutil.copytree(DLRM, moved)
    there, _, hit3 = load_cached(moved, tmp_path)
    assert hit3 and there.meta["file"].to_list() == [str(moved / Path(f).name) for f in ref.meta["file"].to_list()]
    # same bytes under another name: another run key (the name can carry the rank), the same entry
    other = tmp_path / "copy.json.gz"
    shutil.copy(DEMO, other)
    assert cache_key([other]) != cache_key([DEMO])
    assert not load_cached(DEMO, tmp_path)[2] and load_cached(other, tmp_path)[2]
    entry = parse_cache._entry(file_sha256(DEMO), tmp_path)
    entry.write_bytes(b"damaged")
    assert not load_cached(DEMO, tmp_path)[2]  # a damaged entry is a miss, and is rewritten
    assert load_cached(DEMO, tmp_path)[2]
    # the run key is the SHA-256 over the sorted (name, SHA-256 of the bytes) pairs and the version
    import hashlib

    h = hashlib.sha256(f"traceanalyzer {ta.__version__}\n".encode())
    h.update(f"{DEMO.name}\0{hashlib.sha256(DEMO.read_bytes()).hexdigest()}\n".encode())
    assert cache_key([DEMO]) == h.hexdigest()


def _gate_cli(store: Path, *args: str):
    return run_cli("gate", "--store", store, *args)


def test_gate_fails_on_a_slower_run_and_passes_otherwise(tmp_path):
    root, store = tmp_path / "runs", tmp_path / "store"
    for day in ("2026-11-18", "2026-11-19"):
        _copy(DEMO, root / f"resnet-{day}")
    _copy(FIXTURES / "kineto" / "dlrm-v100-8rank" / "worker0_step_12.1694128201545.pt.trace.json.gz", root / "dlrmone-2026-11-19")
    run_batch([root], store, workers=1)
    r = _gate_cli(store, "--max-regression", "3%")
    assert r.returncode == 0, r.stderr
    assert "resnet-2026-11-19" in r.stdout and "+0.0%" in r.stdout
    # night 3: every timestamp of the trace stretched by 10% (each step, its host range, gets 10%
    # longer; stretching only the part after the first steps began would leave them partly as they were)
    slow = root / "resnet-2026-11-20"
    slow.mkdir()
    stretch_trace.stretch(DEMO, slow / DEMO.name, factor=1.10, after=0.0)
    run_batch([root], store, workers=1)
    runs = Store(store).runs().filter(pl.col("job") == "resnet").sort("date")
    base, latest = runs.row(1, named=True), runs.row(2, named=True)
    change = latest["step_time_us"] / base["step_time_us"] - 1
    assert change == pytest.approx(0.10, abs=1e-4)
    r = _gate_cli(store, "--max-regression", "3%", "--job", "resnet")
    assert r.returncode == 8, r.stderr
    # the explanation is the verdict's line on stdout; the error line says it in short
    msg = r.stdout
    [err] = r.stderr.strip().splitlines()
    assert err == (f"traceanalyzer: error: gate failed: run resnet-2026-11-20 (job resnet) regressed {change:+.1%} "
                   "against baseline resnet-2026-11-19, above the 3.0% limit (explained above)")
    assert f"{change:+.1%}" in msg and "resnet-2026-11-20" in msg and "baseline resnet-2026-11-19" in msg
    deltas = {b: latest[f"{b}_us"] - base[f"{b}_us"] for b in ("compute", "recompute", "exposed_comm", "other", "idle")}
    top = max(deltas, key=deltas.get)
    assert f"moved most is {top.replace('_', ' ')}: {deltas[top] / 1000:+.3f} ms per step" in msg
    assert "rank 0" in msg and len(msg.strip().splitlines()) == 1 and "Traceback" not in msg
    # a looser limit, or the regressed run itself as baseline, passes
    assert _gate_cli(store, "--max-regression", "12%", "--job", "resnet").returncode == 0
    assert _gate_cli(store, "--baseline", "resnet-2026-11-20").returncode == 0
    # the other job did not regress: gating it alone passes, gating all jobs fails
    assert _gate_cli(store, "--job", "dlrmone").returncode == 0
    assert _gate_cli(store).returncode == 8
    # night 4 is back to normal: last-good skips the regressed night and compares with night 2
    _copy(DEMO, root / "resnet-2026-11-21")
    run_batch([root], store, workers=1)
    [res] = gate_check(store, "last-good", 0.03, job="resnet")
    assert res.passed and res.baseline == "resnet-2026-11-19" and res.change == 0.0
    # night 5 as slow as night 3: still fails (a regressed run never becomes the baseline)
    night5 = root / "resnet-2026-11-22"
    night5.mkdir()
    shutil.copy(slow / DEMO.name, night5 / DEMO.name)
    run_batch([root], store, workers=1)
    [res] = gate_check(store, "last-good", 0.03, job="resnet")
    assert not res.passed and res.baseline == "resnet-2026-11-21"
    # errors are one line with documented exit codes
    assert _gate_cli(store, "--baseline", "nope").returncode == 3
    assert _gate_cli(store, "--max-regression", "lots").returncode == 2  # a usage error
    assert _gate_cli(tmp_path / "nostore").returncode == 3


def test_gate_fails_when_the_latest_run_could_not_be_analysed(tmp_path):
    root, store = tmp_path / "runs", tmp_path / "store"
    _copy(DEMO, root / "job-2026-11-18")
    (root / "job-2026-11-19").mkdir()
    (root / "job-2026-11-19" / "rank0.json").write_text("[1, 2")
    run_batch([root], store, workers=1)
    [res] = gate_check(store, job="job")
    assert not res.passed and "failed to analyse" in res.message and "exit code 4" in res.message


def test_trend_table_and_plot(stored, tmp_path):
    store, runs, _ = stored
    frame = trend_frame(store, "idle", job="dlrm")
    assert frame["run_id"].to_list() == ["dlrm/20261119", "dlrm-n2"]
    want = ta.breakdown(ta.load(runs["dlrm/20261119"]))["idle_us"].mean() / 1000
    assert frame["value"].to_list() == pytest.approx([want, want])
    assert frame["change"].to_list() == [None, 0.0]
    assert trend_frame(store, "step_time", since="2026-11-20")["date"].min().isoformat() == "2026-11-20"
    png = tmp_path / "trend.png"
    r = run_cli("trend", "--store", store, "--metric", "exposed_comm", "-o", png)
    assert r.returncode == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert "resnet-2026-11-19" in r.stdout and "dlrm-n2" in r.stdout
    r = run_cli("trend", "--store", store, "--metric", "nope")
    assert r.returncode == 2 and "step_time" in r.stderr  # a usage error, the choices named
    r = run_cli("trend", "--store", store, "--metric", "mfu")
    assert r.returncode == 7 and "--config" in r.stderr


def test_batch_cli_summary(tree, tmp_path):
    root, runs = tree
    r = run_cli("batch", root / "nightly", root / "broken", "--store", tmp_path / "s", "--workers", "1")
    # a failed run: exit 9 (documented) after the summary, the other runs stored
    assert r.returncode == 9, r.stderr
    assert "3 run(s): 2 analysed" in r.stdout and "1 failed" in r.stdout
    assert "failed: broken/2026-11-20:" in r.stdout and "exit code 4, InvalidTrace" in r.stdout
    line = r.stderr.strip().splitlines()[-1]  # after the per-run progress lines
    assert line == f"traceanalyzer: error: 1 of 3 run(s) failed (the others are stored in {tmp_path / 's'}): broken/2026-11-20"
    r = run_cli("batch", root / "nightly", "--store", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    assert "0 analysed" in r.stdout and "2 skipped" in r.stdout
    r = run_cli("batch", tmp_path / "missing", "--store", tmp_path / "s")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1
    r = run_cli("batch", root / "nightly", "--store", tmp_path / "s", "--engine", "spark")
    assert r.returncode == 2


def test_mfu_of_every_stored_run_from_the_config(tree, tmp_path):
    """MFU = model FLOPs per GPU / mean step time / peak: 3 × 3.6e9 FLOPs × 80 images (the
    config's forward FLOPs per sample and batch: fwd + 2 × bwd) over 8 MI300X, dense bf16 peak
    1307.4 TFLOP/s (AMD's data sheet)."""
    root, runs = tree
    cfg = tmp_path / "run.toml"
    cfg.write_text('[model]\nfwd_flops_per_sample = 3.6e9\n[batch]\nglobal_batch = 80\n[hardware]\ngpu = "AMD Instinct MI300X"\nnum_gpus = 8\n')
    run_batch([root / "nightly"], tmp_path / "s", config=cfg, workers=1)
    rows = list(Store(tmp_path / "s").runs().iter_rows(named=True))
    nightly = [k for k in runs if k.startswith("resnet-")]
    assert sorted(r["run_id"] for r in rows) == sorted(nightly) and len(rows) > 0
    for row in rows:
        want = 3 * 3.6e9 * 80 / (row["step_time_us"] / 1e6 * 8) / 1e12 / 1307.4
        assert row["mfu"] == pytest.approx(want, rel=1e-12)


def _doc_blocks(lang: str) -> list[str]:
    import re

    return re.findall(rf"```{lang}\n(.*?)```", (ROOT / "docs" / "store.md").read_text(), re.S)


def test_store_doc_polars_query_runs_as_written(stored, monkeypatch):
    store, runs, _ = stored
    monkeypatch.chdir(store.parent)
    if not (store.parent / "STORE").exists():
        (store.parent / "STORE").symlink_to(store)
    scope: dict = {}
    exec(_doc_blocks("python")[0], scope)
    got = scope["per_night"]
    want = ta.breakdown(ta.load(runs["dlrm/20261119"]))
    row = got.filter((pl.col("job") == "dlrm") & (pl.col("date").cast(pl.String) == "2026-11-19")).row(0, named=True)
    assert row["step_time_ms"] == pytest.approx(want["duration_us"].mean() / 1000)
    assert row["idle_ms"] == pytest.approx(want["idle_us"].mean() / 1000)
    assert got.height == Store(store).runs().filter(pl.col("status") == "ok").select("job", "date").n_unique()


def _store_link(stored, monkeypatch):
    store, runs, _ = stored
    monkeypatch.chdir(store.parent)
    if not (store.parent / "STORE").exists():
        (store.parent / "STORE").symlink_to(store)
    return store


def test_store_doc_duckdb_query(stored, monkeypatch):
    duckdb = pytest.importorskip("duckdb", reason="duckdb is in the test extra: pip install '.[test]'")
    store = _store_link(stored, monkeypatch)
    res = duckdb.sql(_doc_blocks("sql")[0]).pl()
    want = Store(store).read("ranks").group_by("run_id").agg(pl.col("step_time_us").max() / 1000)
    assert res.height == want.height > 0
    assert_frame_equal(res.select("run_id", pl.col("step_ms").alias("step_time_us")).sort("run_id"), want.sort("run_id"))


def test_store_doc_pandas_query(stored, monkeypatch):
    pytest.importorskip("pandas", reason="pandas is in the test extra: pip install '.[test]'")
    _store_link(stored, monkeypatch)
    scope: dict = {}
    exec(_doc_blocks("python")[1], scope)
    assert scope["runs"].loc[scope["runs"]["status"] == "failed", "run_id"].tolist() == ["broken/2026-11-20"]


def test_store_reads_files_written_with_fewer_columns(tmp_path):
    """A later version adds columns: rows stored by an older one read back with nulls there."""
    run_batch([DEMO], tmp_path / "s", workers=1)
    [f] = (tmp_path / "s" / "runs").rglob("*.parquet")
    pl.read_parquet(f).drop("mfu", "warnings").write_parquet(f)
    runs = Store(tmp_path / "s").runs()
    assert runs["mfu"].to_list() == [None] and runs["status"].to_list() == ["ok"]
    assert runs["date"].dtype == pl.Date and runs.columns == list(Store(tmp_path / "s").scan("runs").collect_schema())
