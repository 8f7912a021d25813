"""The training-loop handler (traceanalyzer.integrations.torch): a real torch.profiler run on CPU,
and real H200 traces handed over as a profiler would, into the store that trend and gate read."""

from __future__ import annotations

import json
import logging
import re
import shutil
import socket
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import TRACES, needs_extra, run_cli
from traceanalyzer.store.database import Store
from traceanalyzer.integrations.torch import STORE_DIR, on_trace_ready

try:
    import torch
except ImportError:  # the tests below skip (needs_extra)
    torch = None

SMALL = TRACES / "h200" / "small" / "rank0.pt.trace.json.gz"
BASE = TRACES / "h200" / "base" / "rank0.pt.trace.json.gz"
needs_h200 = pytest.mark.skipif(not SMALL.exists(), reason=f"shared H200 traces not found at {SMALL.parent}")


def _train(handler, steps: int = 4, cycles: int = 3) -> None:
    """A tiny model's training steps on CPU under torch.profiler: one trace per profiled step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    schedule = torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=cycles)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule, on_trace_ready=handler) as prof:
        for _ in range(steps):
            model(torch.randn(8, 16)).square().mean().backward()
            opt.step()
            opt.zero_grad()
            prof.step()


class RecordedProfiler:
    """What the handler needs of torch's profiler: ``export_chrome_trace(path)`` (here: a real
    trace recorded on an H200) and ``step_num``."""

    def __init__(self, source: Path, step_num: int):
        self.source, self.step_num = source, step_num

    def export_chrome_trace(self, path: str) -> None:
        assert path.endswith(".pt.trace.json.gz")  # gzip on, so the recording's bytes are the file
        shutil.copyfile(self.source, path)


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.is_file())


@needs_extra("torch")
def test_cpu_profiler_run_writes_tensorboard_files_and_a_status_row_per_profiled_step(tmp_path, caplog):
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    handler = on_trace_ready(ours, run_id="cpu-run", job="tiny")
    tb = torch.profiler.tensorboard_trace_handler(str(theirs), use_gzip=True)
    asked: list[str] = []

    class PathRecorder:  # where tensorboard_trace_handler would have written the same trace
        def export_chrome_trace(self, path, **kw):
            asked.append(path)
            Path(path).touch()

    def both(prof):
        handler(prof)
        tb(PathRecorder())

    with caplog.at_level(logging.WARNING, logger="traceanalyzer.integrations"):
        _train(both)
        handler.close()
    # the same names as tensorboard_trace_handler's (host_pid.<time_ns>.pt.trace.json.gz), same layout
    pattern = re.compile(rf"^{re.escape(socket.gethostname())}_\d+\.\d+\.pt\.trace\.json\.gz$")
    mine = _names(ours)
    assert len(mine) == len(_names(theirs)) == 3
    assert all(pattern.match(n) for n in mine + _names(theirs))
    assert [n.split(".")[0] for n in mine] == [n.split(".")[0] for n in _names(theirs)]
    assert [Path(a).parent for a in asked] == [theirs] * 3
    assert sorted(p.name for p in ours.iterdir() if p.is_dir()) == [STORE_DIR]
    # one status row per profiled step: a CPU-only trace has no GPU time (exit code 5, as breakdown)
    runs = Store(ours / STORE_DIR).runs()
    assert runs["run_id"].to_list() == ["cpu-run/step00000001", "cpu-run/step00000002", "cpu-run/step00000003"]
    assert runs["status"].unique().to_list() == ["failed"]
    assert runs["error_class"].unique().to_list() == ["NoGpuActivity"]
    assert runs["exit_code"].unique().to_list() == [5]
    assert runs["job"].unique().to_list() == ["tiny"]
    assert sorted(Path(e.split(": ")[0]).name for e in runs["error"]) == mine
    assert all(w == [f"rank 0 ({socket.gethostname()}): not analysed: {e}"] for w, e in zip(runs["warnings"].to_list(), runs["error"]))
    assert [r.getMessage().count("no GPU activity") for r in caplog.records] == [1, 1, 1]
    cli = run_cli("breakdown", ours / mine[0])
    assert cli.returncode == 5 and "no GPU activity" in cli.stderr


@needs_extra("torch")
def test_a_failing_analysis_does_not_stop_training(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TRACEANALYZER_FAULT", "loop:analysis")  # inherited by the analysis process
    handler = on_trace_ready(tmp_path, run_id="broken", job="tiny")
    with caplog.at_level(logging.WARNING, logger="traceanalyzer.integrations"):
        _train(handler, steps=3, cycles=2)  # returns: training went on
        handler.close()
    runs = Store(tmp_path / STORE_DIR).runs()
    assert runs.height == 2 and runs["status"].to_list() == ["failed", "failed"]
    assert runs["error_class"].to_list() == ["InternalError", "InternalError"]
    assert all("injected failure" in e for e in runs["error"])
    assert len([r for r in caplog.records if "injected failure" in r.getMessage()]) == 2
    assert handler.failures == 2


def _breakdown_json(trace: Path) -> dict:
    cli = run_cli("breakdown", trace, "-f", "json")
    assert cli.returncode == 0, cli.stderr
    return json.loads(cli.stdout)


@needs_h200
def test_real_h200_trace_stores_what_breakdown_json_prints(tmp_path):
    handler = on_trace_ready(tmp_path / "log", run_id="h200", job="gpt-small")
    handler(RecordedProfiler(SMALL, 7))
    handler.close()
    (trace,) = [p for p in (tmp_path / "log").iterdir() if p.is_file()]
    assert trace.read_bytes() == SMALL.read_bytes()
    doc = _breakdown_json(trace)
    (rank,) = doc["ranks"]
    st = Store(tmp_path / "log" / STORE_DIR)
    steps = st.read("steps").sort("step")
    assert steps.height == len(rank["steps"]) > 0
    for stored, printed in zip(steps.iter_rows(named=True), rank["steps"]):
        for key, value in printed.items():
            assert stored[key] == value, (key, stored["step"])
    run = st.runs().row(0, named=True)
    assert run["run_id"] == "h200/step00000007" and run["status"] == "ok" and run["n_ranks"] == 1
    assert run["step_time_us"] == pytest.approx(sum(s["duration_us"] for s in rank["steps"]) / len(rank["steps"]), rel=1e-12)
    assert run["device_name"] == rank["device"] == "NVIDIA H200"
    ranks = st.read("ranks").row(0, named=True)
    assert ranks["file"] == str(trace.resolve()) and ranks["host"] == socket.gethostname()
    assert ranks["profiler_step"] == 7 and ranks["trace_kept"] is True
    assert ranks["top_losses"] == [{k: f[k] for k in ("loss", "label", "ms_per_step", "share_of_step")} for f in doc["findings"][:3]]
    assert ranks["steps"] == rank["total"]["steps"] == 3
    for f in ("duration", "compute", "recompute", "exposed_comm", "overlapped_comm", "other", "idle"):
        assert ranks[f"{f}_ns"] / 1000 == rank["total"][f"{f}_us"]
    # the profiler-cost estimate: per step above (steps' profiler_*_us), and the rank's medians
    assert rank["unprofiled_estimate_median_us"] is not None
    for key in ("profiler_overhead", "unprofiled_estimate"):
        assert ranks[f"{key}_us"] == rank[f"{key}_median_us"]
    assert {"profiler_overhead_us", "unprofiled_estimate_us"} <= set(rank["steps"][0])


@needs_h200
def test_ranks_merge_into_one_run_and_trend_by_rank_and_gate_read_them(tmp_path, monkeypatch):
    log = tmp_path / "log"
    handler = on_trace_ready(log, run_id="job7", job="gpt", worker_name="w")
    monkeypatch.setenv("WORLD_SIZE", "2")
    # three profiling cycles; rank 1 runs the slower model (as a slow node would)
    for step in (10, 20, 30):
        for rank, source in ((0, SMALL), (1, BASE)):
            monkeypatch.setenv("RANK", str(rank))
            handler(RecordedProfiler(source, step))
    handler.close()
    st = Store(log / STORE_DIR)
    runs = st.runs()
    assert runs["run_id"].to_list() == [f"job7/step000000{s}" for s in (10, 20, 30)]
    assert runs["n_ranks"].to_list() == [2, 2, 2] and runs["world_size"].to_list() == [2, 2, 2]
    small, base = _breakdown_json(SMALL)["ranks"][0], _breakdown_json(BASE)["ranks"][0]
    every = [s["duration_us"] for s in small["steps"] + base["steps"]]
    assert runs["step_time_us"].to_list() == pytest.approx([sum(every) / len(every)] * 3, rel=1e-12)
    scores = pl.DataFrame(json.loads(run_cli("trend", "--store", log / STORE_DIR, "--by", "rank", "-f", "json").stdout)["rows"])
    assert scores.select("rank", "host", "runs", "slowest", "out_of").rows() == [
        (1, socket.gethostname(), 3, 3, 3), (0, socket.gethostname(), 3, 0, 3)]
    # late arriver: the rank with less exposed communication per step (both single-GPU traces
    # have none, so no run names one)
    comm = [r["total"]["exposed_comm_us"] for r in (small, base)]
    assert scores["late_arriver"].sum() == (3 if max(comm) > 0 else 0)
    gate = run_cli("gate", "--store", log / STORE_DIR)
    assert gate.returncode == 0 and "job gpt: run job7/step00000030" in gate.stdout, gate.stdout + gate.stderr


@needs_h200
def test_keep_anomalous_keeps_only_the_slow_trace_and_stores_every_row(tmp_path):
    log = tmp_path / "log"
    handler = on_trace_ready(log, run_id="anom", job="gpt", keep="anomalous", finding_share=None)
    sources = [SMALL, SMALL, SMALL, BASE, SMALL]
    for i, source in enumerate(sources):
        handler(RecordedProfiler(source, i + 1))
    handler.close()
    small, base = (max(s["duration_us"] for s in _breakdown_json(p)["ranks"][0]["steps"]) for p in (SMALL, BASE))
    assert base > 1.5 * small  # the recording: the base model's steps are well above 1.5 x the small one's
    kept = [r["kept"] for r in handler.results]
    assert kept == [False, False, False, True, False]
    assert "x the median" in handler.results[3]["keep_reason"]
    files = [p for p in log.iterdir() if p.is_file()]
    assert [Path(r["trace"]).exists() for r in handler.results] == kept and len(files) == 1
    ranks = Store(log / STORE_DIR).read("ranks").sort("profiler_step")
    assert ranks["trace_kept"].to_list() == kept and ranks.height == 5
    # a finding above the threshold keeps a trace too: every loss of at least 1 % of the step
    handler = on_trace_ready(tmp_path / "log2", run_id="f", keep="anomalous", finding_share=0.01)
    handler(RecordedProfiler(SMALL, 1))
    handler.close()
    assert handler.results[0]["kept"] and "of the step" in handler.results[0]["keep_reason"]


@needs_h200
def test_a_dying_analysis_process_is_a_warning_a_status_row_and_a_new_process(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TRACEANALYZER_FAULT", "loop:worker")  # the worker SIGKILLs itself on each trace
    handler = on_trace_ready(tmp_path, run_id="dies", job="gpt")
    with caplog.at_level(logging.WARNING, logger="traceanalyzer.integrations"):
        for step in (1, 2):
            handler(RecordedProfiler(SMALL, step))
        handler.close()
    runs = Store(tmp_path / STORE_DIR).runs()
    assert runs["run_id"].to_list() == ["dies/step00000001", "dies/step00000002"]
    assert runs["status"].to_list() == ["failed", "failed"] and runs["error_class"].to_list() == ["InternalError"] * 2
    assert all("the analysis process died on this trace" in e and "exit code -9" in e for e in runs["error"])
    assert handler.failures == 2 and len([r for r in caplog.records if "exit code -9" in r.getMessage()]) == 2
    assert len([p for p in tmp_path.iterdir() if p.is_file()]) == 2  # the traces are kept: the evidence


@needs_extra("torch")
def test_the_trace_prof_stop_writes_of_an_open_cycle_gets_a_run_of_its_own(tmp_path):
    handler = on_trace_ready(tmp_path, run_id="open", job="tiny")
    _train(handler, steps=2, cycles=0)  # every step a cycle, for ever: the exit writes the open one
    handler.close()
    assert [r["profiler_step"] for r in handler.results] == [1, 2, 2]
    assert Store(tmp_path / STORE_DIR).runs()["run_id"].to_list() == ["open/step00000001", "open/step00000002", "open/step00000002-2"]
