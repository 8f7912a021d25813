"""Run directories as users have them: traces beside config.json, metrics.json, a ground truth,
logs and checkpoints; nightly trees laid out DATE/JOB/ or JOB/DATE/; stores too short to compare.
On copies of the shared H200 recordings (each with its ``truth.json`` beside it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.store import Store, discover_runs, run_batch

from conftest import TRACES, needs_shared, run_cli

H200 = TRACES / "h200"
pytestmark = needs_shared()


def _run_dir(dst: Path, variant: str = "stalls") -> Path:
    """A run folder as a training script leaves it: the trace and its truth.json, plus the usual."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in (H200 / variant).iterdir():
        shutil.copy(f, dst / f.name)
    (dst / "config.json").write_text(json.dumps({"lr": 3e-4, "layers": 12}))
    (dst / "metrics.json").write_text(json.dumps([{"step": 1, "loss": 2.5}]))
    (dst / "trainer_state.json").write_text(json.dumps({"global_step": 8, "log_history": []}))
    (dst / "train.log").write_text("step 1 loss 2.5\n")
    (dst / "checkpoint-8").mkdir()
    (dst / "checkpoint-8" / "model.safetensors").write_bytes(b"\x00" * 64)
    return dst


def _message(line: str, *paths: Path) -> str:
    """An error line without its prefix and with the (long, temporary) paths cut to one letter."""
    for p in paths:
        line = line.replace(str(p), "T")
    return line.split("error: ", 1)[-1]


def test_breakdown_of_the_shared_run_folder_skips_truth_json():
    r = run_cli("breakdown", H200 / "stalls", "-f", "json")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == f"warning: {H200 / 'stalls' / 'truth.json'}: a JSON document without 'traceEvents' (not a trace): skipped"
    assert json.loads(r.stdout)["warnings"][0].startswith(str(H200 / "stalls" / "truth.json"))


def test_a_run_directory_is_its_traces_and_each_other_file_is_named_once(tmp_path):
    run = _run_dir(tmp_path / "run")
    r = run_cli("breakdown", run, "-f", "json")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.strip().splitlines()
    skipped = sorted(line.split(": ", 2)[1].rsplit("/", 1)[-1] for line in lines)
    # one line each (the checkpoint folder is not followed: no line), nothing else said
    assert skipped == ["config.json", "metrics.json", "train.log", "trainer_state.json", "truth.json"]
    assert all(line.startswith(f"warning: {run}/") and line.endswith(": skipped") for line in lines)
    # the steps are the trace's: against the host's wall time of each profiled step (truth.json),
    # as for the trace file alone (each step but the last, within 0.5 %)
    truth = json.loads((H200 / "stalls" / "truth.json").read_text())
    doc = json.loads(r.stdout)
    [rank] = doc["ranks"]
    durs = [s["duration_us"] for s in sorted(rank["steps"], key=lambda s: s["start_ns"])]
    assert len(durs) == 3 and rank["file"] == str(run / "rank0.pt.trace.json.gz")
    for mine, theirs in zip(durs[:-1], truth["step_s_profiled"][-len(durs):][:-1], strict=True):
        assert mine / 1e6 == pytest.approx(theirs, rel=0.005)
    # the Python API says the same, in the trace's warnings
    trace = ta.load(run)
    assert [Path(s).name for s in trace.sources] == ["rank0.pt.trace.json.gz"]
    assert sum(": skipped" in w for w in trace.warnings) == 5


def test_only_a_directory_with_no_trace_left_fails(tmp_path):
    run = _run_dir(tmp_path / "run")
    (run / "rank0.pt.trace.json.gz").unlink()
    r = run_cli("breakdown", run)
    assert r.returncode == 3 and r.stdout == ""
    [line] = r.stderr.strip().splitlines()
    assert "directory holds no trace files" in line and "config.json" in line and "more" in line
    assert len(_message(line, run)) <= 300
    # a file named on the command line is read: one that is not a trace is an error naming it
    r = run_cli("breakdown", run / "truth.json")
    assert r.returncode == 4 and "no 'traceEvents'" in r.stderr


def _nightly(root: Path, date_first: bool) -> None:
    for day in ("2026-11-19", "2026-11-20"):
        for job in ("small", "stalls"):
            _run_dir(root / day / job if date_first else root / job / day, job)


@pytest.mark.parametrize("date_first", [True, False], ids=["DATE-JOB", "JOB-DATE"])
def test_batch_finds_nightly_runs_without_manifests(tmp_path, date_first):
    root = tmp_path / "nightly"
    _nightly(root, date_first)
    specs = discover_runs([root])
    assert [(s.run_id, s.job, s.date, len(s.files)) for s in specs] == [
        ("small/2026-11-19", "small", "2026-11-19", 1), ("stalls/2026-11-19", "stalls", "2026-11-19", 1),
        ("small/2026-11-20", "small", "2026-11-20", 1), ("stalls/2026-11-20", "stalls", "2026-11-20", 1),
    ]
    summary = run_batch([root], tmp_path / "store", workers=1)
    assert not summary.failed
    runs = Store(tmp_path / "store").runs().sort("run_id")
    assert runs["status"].to_list() == ["ok"] * 4 and runs["n_files"].to_list() == [1] * 4
    # each night's mean step time is the trace's: against the host-timed profiled steps of truth.json
    for job in ("small", "stalls"):
        truth = json.loads((H200 / job / "truth.json").read_text())
        mine = runs.filter(pl.col("job") == job)["step_time_us"].to_list()
        first = ta.breakdown(H200 / job / "rank0.pt.trace.json.gz")
        assert mine == pytest.approx([first["duration_us"].mean()] * 2, rel=1e-12)
        assert first.sort("start_ns")["duration_ns"][0] / 1e9 == pytest.approx(truth["step_s_profiled"][-3], rel=0.005)


def test_batch_of_the_shared_h200_folder_stores_every_run(tmp_path):
    r = run_cli("batch", H200, "--store", tmp_path / "s")
    assert r.returncode == 0, r.stderr
    runs = Store(tmp_path / "s").runs()
    want = sorted(p.name for p in H200.iterdir() if (p / "truth.json").is_file())
    assert sorted(runs["run_id"].to_list()) == want and len(want) == 6
    assert runs["status"].to_list() == ["ok"] * 6


def test_trend_and_gate_on_an_empty_or_short_store(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for cmd in ("trend", "gate"):
        r = run_cli(cmd, "--store", empty)
        assert r.returncode == 3 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
        assert "holds no runs" in r.stderr
    # a store of failed runs only: trend has nothing to show (exit 3)
    root = tmp_path / "runs"
    for i in range(8):
        (root / f"job{i}-2026-11-19").mkdir(parents=True)
        (root / f"job{i}-2026-11-19" / "rank0.json").write_text("[1, 2")
    r = run_cli("batch", root, "--store", tmp_path / "failed")
    assert r.returncode == 9
    assert len(_message(r.stderr.strip().splitlines()[-1], tmp_path)) <= 300
    r = run_cli("trend", "--store", tmp_path / "failed")
    assert r.returncode == 3 and "no successful run (8 failed)" in r.stderr
    # ... and the gate fails every job (exit 8) in one short line, each job explained on stdout
    r = run_cli("gate", "--store", tmp_path / "failed")
    assert r.returncode == 8 and len(r.stdout.strip().splitlines()) == 8
    [line] = r.stderr.strip().splitlines()
    assert line.startswith("traceanalyzer: error: gate failed for 8 of 8 job(s): job0, job1") and len(line) <= 300
    # one run per job: nothing to compare yet, said once, exit 0
    one = tmp_path / "one"
    _nightly(one, True)
    shutil.rmtree(one / "2026-11-20")
    run_batch([one], tmp_path / "short", workers=1)
    r = run_cli("gate", "--store", tmp_path / "short")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines() == [
        "gate: no job has a baseline yet (2 job(s), each with one successful run): nothing to compare, passed."]
