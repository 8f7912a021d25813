"""The engine: rank files analysed in worker processes (map) and reduced to the job give exactly
what one process gives; workers, progress and failures behave as documented."""

from __future__ import annotations

import gzip
import io
import os
import shutil

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal
from rich.console import Console

import traceanalyzer as ta
from traceanalyzer.engine import Options, analyse, progress as engine_progress
from traceanalyzer.engine.pool import WorkerDied, run_tasks
from traceanalyzer.engine.rank import RankTask, analyse_rank_file
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.render import json as json_render

from conftest import DEMO, DLRM, TRACES, needs_shared, run_cli

MULTI_RANK = [
    DLRM,
    TRACES / "hta" / "trace_filter",
    TRACES / "kineto-public" / "param-dlrm-v100-8rank",
    TRACES / "kineto-public" / "kineto-tbplugin-resnet50-legacy",
    TRACES / "kineto-public" / "tracelens-amd",  # two jobs: the same error both ways
    [TRACES / "torch-cpu" / "cpu_gloo_ddp_rank0.pt.trace.json.gz", TRACES / "torch-cpu" / "cpu_gloo_ddp_rank1.pt.trace.json.gz"],
]


def _serial(path):
    """The single-process path: load every rank into one trace, then analyze it."""
    try:
        return ta.analyze(ta.load(path))
    except TraceAnalyzerError as exc:
        return exc


def _parallel(path, workers=2, **kw):
    try:
        return analyse(path, Options(), workers=workers, quiet=True, **kw)
    except TraceAnalyzerError as exc:
        return exc


def _doc(an) -> bytes:
    return json_render.dumps(json_render.document(an))


def _assert_same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b)
        return
    assert _doc(a) == _doc(b)
    for f in ("steps", "comm", "cross_rank", "recomputed_by_name", "collectives", "windows"):
        assert_frame_equal(getattr(a, f), getattr(b, f))
    assert a.warnings == b.warnings
    assert_frame_equal(a.trace.meta, b.trace.meta)


@needs_shared()
@pytest.mark.parametrize("path", MULTI_RANK, ids=lambda p: p.name if hasattr(p, "name") else "gloo-ranks")
def test_parallel_ranks_give_exactly_the_single_process_analysis(path):
    serial, parallel = _serial(path), _parallel(path)
    _assert_same(serial, parallel)
    if not isinstance(serial, Exception) and serial.steps["rank"].n_unique() > 1:
        # the cross-rank view really came from several ranks: its durations are the steps'
        row = parallel.cross_rank.row(0, named=True)
        durs = parallel.steps.filter(pl.col("step") == row["step"]).sort("rank")
        assert [d["duration_ns"] for d in row["durations"]] == durs["duration_ns"].to_list()
        assert row["max_ns"] == durs["duration_ns"].max()


def test_collectives_are_matched_across_ranks_in_the_parallel_path():
    """DLRM, 8 ranks: every all-to-all is aligned over the ranks (measured, not estimated), and
    transfer = end - last arrival over the ranks, checked here from the instances themselves."""
    an = _parallel(DLRM)
    coll = an.collectives
    assert coll.height and not coll["transfer_estimated"].any()
    last = coll.group_by("pg_name", "instance").agg(pl.col("start_ns").max().alias("arrival"), pl.col("rank").n_unique().alias("n"))
    j = coll.join(last, on=["pg_name", "instance"])
    assert (j["n"] == 8).all()
    want = (j["end_ns"] - pl.Series([max(a, s) for a, s in zip(j["arrival"], j["start_ns"])])).clip(0)
    assert j["transfer_ns"].to_list() == want.to_list()


def test_a_truncated_rank_borrows_the_job_base_time_in_both_paths(tmp_path):
    """Rank 1 cut at 99 % loses its trailing baseTimeNanoseconds: both paths shift it onto the
    job's clock (rank 0's base) and say so."""
    raw = gzip.decompress(DEMO.read_bytes())
    (tmp_path / "rank0.json").write_bytes(raw)
    r1 = raw.replace(b'"rank": 0, "world_size": 8', b'"rank": 1, "world_size": 8', 1)
    (tmp_path / "rank1.json").write_bytes(r1[: int(len(r1) * 0.99)])
    serial, parallel = _serial(tmp_path), _parallel(tmp_path)
    _assert_same(serial, parallel)
    assert any("rank1.json: no baseTimeNanoseconds (truncated?): used the job's base time" in w for w in parallel.warnings)
    starts = parallel.steps.group_by("rank").agg(pl.col("start_ns").min()).sort("rank")["start_ns"].to_list()
    assert starts[0] == starts[1]  # the same steps of the same trace, on one clock


def test_workers_are_separate_processes_with_capped_polars_threads():
    files = sorted(DLRM.iterdir())
    tasks = [RankTask(i, str(f), Options(), "dlrm") for i, f in enumerate(files)]
    pids = {r.pid: r.threads for r in run_tasks(tasks, workers=2)}
    assert len(pids) == 2 and os.getpid() not in pids
    cores = len(os.sched_getaffinity(0))
    assert set(pids.values()) == {max(1, cores // 2)}
    inproc = list(run_tasks(tasks[:2], workers=1))
    assert {r.pid for r in inproc} == {os.getpid()}


def test_workers_get_one_jemalloc_arena_per_polars_thread_and_large_blocks_from_them_unless_told_otherwise():
    from traceanalyzer.engine.pool import malloc_env

    assert malloc_env(1, {}) == {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), "_RJEM_MALLOC_CONF": "narenas:1,oversize_threshold:0"}
    # polars' own settings (in this process's environment once it is imported) stay, before ours
    assert malloc_env(2, {"_RJEM_MALLOC_CONF": "dirty_decay_ms:500"})["_RJEM_MALLOC_CONF"] == "dirty_decay_ms:500,narenas:2,oversize_threshold:0"
    # what the user set wins
    mine = malloc_env(2, {"_RJEM_MALLOC_CONF": "narenas:4,oversize_threshold:1048576", "MALLOC_MMAP_THRESHOLD_": "0"})
    assert mine == {"MALLOC_MMAP_THRESHOLD_": "0", "_RJEM_MALLOC_CONF": "narenas:4,oversize_threshold:1048576"}
    # the coordinator's environment is given back after the pool
    before = {k: os.environ.get(k) for k in ("_RJEM_MALLOC_CONF", "MALLOC_MMAP_THRESHOLD_", "POLARS_MAX_THREADS")}
    files = sorted(DLRM.iterdir())[:2]
    list(run_tasks([RankTask(i, str(f), Options(), "dlrm") for i, f in enumerate(files)], workers=2))
    assert {k: os.environ.get(k) for k in before} == before


def test_the_command_line_gives_its_own_process_one_arena_per_polars_thread(monkeypatch):
    from traceanalyzer.__main__ import USER_RJEM, _arenas
    from traceanalyzer.engine.pool import malloc_env

    for name in ("_RJEM_MALLOC_CONF", USER_RJEM):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("POLARS_MAX_THREADS", "3")
    _arenas()
    assert os.environ["_RJEM_MALLOC_CONF"] == "narenas:3,oversize_threshold:0" and os.environ[USER_RJEM] == ""
    # its workers get theirs, not the command's
    assert malloc_env(1)["_RJEM_MALLOC_CONF"] == "narenas:1,oversize_threshold:0"
    # what the user set stays, for the command and its workers
    monkeypatch.delenv(USER_RJEM)
    monkeypatch.setenv("_RJEM_MALLOC_CONF", "narenas:4,dirty_decay_ms:100")
    _arenas()
    assert os.environ["_RJEM_MALLOC_CONF"] == "narenas:4,dirty_decay_ms:100,oversize_threshold:0"
    assert malloc_env(1)["_RJEM_MALLOC_CONF"] == "narenas:4,dirty_decay_ms:100,oversize_threshold:0"
    monkeypatch.delenv(USER_RJEM)
    monkeypatch.setenv("_RJEM_MALLOC_CONF", "dirty_decay_ms:100")
    _arenas()
    assert os.environ["_RJEM_MALLOC_CONF"] == "dirty_decay_ms:100,narenas:3,oversize_threshold:0"
    assert malloc_env(2)["_RJEM_MALLOC_CONF"] == "dirty_decay_ms:100,narenas:2,oversize_threshold:0"
    # no thread count to go by: the arenas are jemalloc's, the rest is added all the same
    monkeypatch.delenv(USER_RJEM)
    monkeypatch.setenv("_RJEM_MALLOC_CONF", "")
    monkeypatch.setenv("POLARS_MAX_THREADS", "many")
    _arenas()
    assert os.environ["_RJEM_MALLOC_CONF"] == "oversize_threshold:0"


class _Dying:
    """Options whose parse step kills the worker process (as the OOM killer would)."""

    step_name = "ProfilerStep"
    recompute_pattern = None
    keep = "compact"

    @property
    def cache(self):
        os._exit(9)


def test_a_worker_that_dies_is_an_error_naming_its_rank_file():
    files = sorted(DLRM.iterdir())
    tasks = [RankTask(0, str(files[0]), Options(), "dlrm"), RankTask(1, str(files[1]), _Dying(), "dlrm")]
    with pytest.raises(WorkerDied) as err:
        list(run_tasks(tasks, workers=2))
    assert str(files[1]) in str(err.value) and str(files[0]) not in str(err.value)


def test_progress_advances_within_one_gzip_file_to_its_size():
    seen = []
    analyse_rank_file(RankTask(0, str(DEMO), Options(), str(DEMO)), progress=seen.append)
    # 1.1 MB of gzip inflating to 16.8 MB: reported as it inflates, not in one jump at the end
    assert len(seen) >= 3 and sum(seen) == DEMO.stat().st_size


def test_one_line_per_rank_file_when_stderr_is_not_a_terminal_and_lines_are_asked_for(monkeypatch, capsys):
    monkeypatch.setattr(engine_progress, "SHOW_BYTES", 0)
    plain = Console(file=io.StringIO(), force_terminal=False)
    analyse(DLRM, workers=1, console=plain)
    assert capsys.readouterr().err == ""  # not a terminal, not asked: no progress
    monkeypatch.setenv("TRACEANALYZER_PROGRESS", "lines")
    analyse(DLRM, workers=1, console=plain)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 8 and all(" rank file " in line and " done: " in line for line in lines)
    assert [line.split(" rank file ")[1].split(" ")[0] for line in lines] == [f"{i}/8" for i in range(1, 9)]
    assert {line.split(" done: ")[1].split(" (")[0] for line in lines} == {str(f) for f in DLRM.iterdir()}
    analyse(DLRM, workers=1, console=plain, quiet=True)
    assert capsys.readouterr().err == ""


@needs_shared()
def test_cli_progress_lines_and_quiet_on_a_real_54mb_trace(tmp_path):
    """The 3 MB gzip that inflates to 54 MB takes over a second: one line when stderr is a
    pipe, none with --quiet (warnings still go to stderr); the JSON is the same either way."""
    big = TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
    plain = run_cli("breakdown", "-f", "json", big)
    quiet = run_cli("breakdown", "-f", "json", "--quiet", big)
    with pytest.MonkeyPatch.context() as mp:  # lines on a pipe only when asked for
        mp.setenv("TRACEANALYZER_PROGRESS", "lines")
        loud = run_cli("breakdown", "-f", "json", big)
    assert loud.returncode == quiet.returncode == plain.returncode == 0
    assert "rank file" not in quiet.stderr and plain.stderr == quiet.stderr
    assert loud.stderr.splitlines()[0].startswith(f"traceanalyzer: rank file 1/1 done: {big} (2.9 MB")
    assert loud.stderr.splitlines()[1:] == quiet.stderr.splitlines()  # the warnings, in both
    assert orjson.loads(loud.stdout) == orjson.loads(quiet.stdout)


def test_cli_workers_option_gives_the_same_json(tmp_path):
    one = run_cli("breakdown", "-f", "json", "--workers", "1", DLRM)
    two = run_cli("breakdown", "-f", "json", "--workers", "2", "-q", DLRM)
    assert one.returncode == two.returncode == 0, two.stderr
    assert one.stdout == two.stdout
    doc = orjson.loads(two.stdout)
    assert [r["rank"] for r in doc["ranks"]] == list(range(8))


def test_ray_engine_gives_byte_identical_json(tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'traceanalyzer[ray]')")
    local = _doc(_parallel(DLRM, workers=2))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = _doc(_parallel(DLRM, workers=None, engine="ray"))
    finally:
        ray.shutdown()
    assert remote == local


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_ray_address_is_refused_in_seconds():
    """Ray retries an unreachable head for minutes; we probe the address first."""
    import time

    from traceanalyzer.engine.pool import check_ray_address
    from traceanalyzer.errors import ConfigError

    port = _closed_port()
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=rf"cannot reach Ray at ray://127.0.0.1:{port}: "):
        check_ray_address(f"ray://127.0.0.1:{port}", timeout=2)
    assert time.monotonic() - t0 < 5  # a refused connection answers at once, not after retries
    with pytest.raises(ConfigError, match="expected ray://HOST:PORT"):
        check_ray_address("ray://head-without-port")
    check_ray_address("auto")  # Ray finds the cluster itself


def test_cli_unreachable_ray_address_is_one_line_exit_7():
    pytest.importorskip("ray", reason="Ray is not installed (optional extra: pip install 'traceanalyzer[ray]')")
    import subprocess
    import sys

    port = _closed_port()
    done = subprocess.run([sys.executable, "-m", "traceanalyzer", "breakdown", str(DLRM), "--engine", "ray",
                           "--address", f"ray://127.0.0.1:{port}", "-q"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 7
    lines = [l for l in done.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and f"cannot reach Ray at ray://127.0.0.1:{port}" in lines[0], done.stderr


def test_a_client_timeout_names_token_authentication_unless_the_mode_is_set():
    # Ray 2.60: a head started where ~/.ray/auth_token exists requires the token; a client without
    # RAY_AUTH_MODE=token times out (seen with ray start --head and ray.init("ray://...")). The
    # line says what to set; other failures and a client already in token mode get Ray's reason only
    from traceanalyzer.engine.pool import ray_failure

    timeout = ConnectionError("ray client connection timeout")
    hint = "set RAY_AUTH_MODE=token and give the cluster's token in RAY_AUTH_TOKEN or ~/.ray/auth_token"
    line = ray_failure("ray://head:10001", timeout, {})
    assert line.startswith("cannot start or reach Ray at ray://head:10001: ray client connection timeout (")
    assert hint in line and "\n" not in line
    assert ray_failure("ray://head:10001", timeout, {"RAY_AUTH_MODE": "token"}) == (
        "cannot start or reach Ray at ray://head:10001: ray client connection timeout")
    assert ray_failure(None, RuntimeError("no room"), {}) == "cannot start or reach Ray: no room"
    assert hint not in ray_failure("ray://head:10001", ValueError("bad runtime_env"), {})
