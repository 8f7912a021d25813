"""The classification's second thread (``classify.pipeline.Beside``): the profiler's cost, the
trace facts and the launch statistics, which need only the events, the GPU work and the step
windows, run there while the main thread partitions the steps and splits their causes. Every
table, every warning and every error must be what the same work gives run in turn."""

from __future__ import annotations

import threading
import time

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from traceanalyzer.classify import pipeline, profiler_cost, tracefacts
from traceanalyzer.engine import Options, analyse
from traceanalyzer.engine.rank import RankTask, analyse_rank_file
from traceanalyzer.errors import TraceAnalyzerError

from conftest import DEMO, DLRM, TRACES

TABLES = frozenset({"launches", "trace_facts", "gpu"})
FRAMES = ("steps", "windows", "instances", "exposure", "points", "recompute_ops", "recomputed_by_name", "outside_steps", "gpu")


def _shared(*parts: str) -> list:
    path = TRACES.joinpath(*parts)
    return [pytest.param(path, marks=pytest.mark.skipif(not path.exists(), reason=f"shared traces not found: {path}"))]


KINETO = [
    pytest.param(DEMO, id="demo"),
    pytest.param(sorted(DLRM.iterdir())[0], id="dlrm-rank0"),
    *_shared("h200", "base", "rank0.pt.trace.json.gz"),
    *_shared("h200", "compiled", "rank0.pt.trace.json.gz"),
    *_shared("hta", "trace_diff", "control", "control.json.gz"),
    *_shared("torch-cpu", "cpu_ckpt_mixed.pt.trace.json.gz"),  # no GPU work: nothing classified
]


@pytest.fixture
def two_threads(monkeypatch):
    """polars with two threads, as in a command's own process on any machine of two cores or
    more (pool workers run one): the second thread is used."""
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 2)


def _result(path, concurrent: bool, monkeypatch, tables=TABLES):
    monkeypatch.setattr(pipeline, "CONCURRENT", concurrent)
    return analyse_rank_file(RankTask(0, str(path), Options(tables=tables), str(path)))


@pytest.mark.parametrize("path", KINETO)
def test_the_second_thread_gives_every_table_the_work_in_turn_gives(path, two_threads, monkeypatch):
    where: list[str] = []
    cost = profiler_cost.profiler_cost
    monkeypatch.setattr(profiler_cost, "profiler_cost", lambda *a, **k: where.append(threading.current_thread().name) or cost(*a, **k))
    beside = _result(path, True, monkeypatch)
    ran = list(where)
    in_turn = _result(path, False, monkeypatch)
    assert in_turn.error is None and beside.error is None
    assert (beside.deferred is None) == (in_turn.deferred is None)
    assert beside.window_warnings == in_turn.window_warnings and beside.warnings == in_turn.warnings
    if in_turn.steps is None:  # no GPU work: nothing classified, nothing started
        assert beside.steps is None and ran == [] and where == []
        return
    # the profiler's cost ran in the second thread, then (in turn) in this one
    assert ran == ["traceanalyzer-beside_0"] and where[1:] == [threading.current_thread().name]
    for name in FRAMES:
        assert_frame_equal(getattr(beside, name), getattr(in_turn, name), check_exact=True)
    assert beside.extras.keys() == in_turn.extras.keys() == {"launches", "trace_facts"}
    for name in beside.extras:
        assert_frame_equal(beside.extras[name], in_turn.extras[name], check_exact=True)
    assert beside.stepless == in_turn.stepless
    assert beside.extras["launches"].height == in_turn.steps.height > 0
    assert not [t for t in threading.enumerate() if t.name.startswith("traceanalyzer-beside")]


def test_a_pool_worker_of_one_polars_thread_starts_no_second_thread(monkeypatch):
    monkeypatch.setattr(pl, "thread_pool_size", lambda: 1)
    names: list[str] = []
    facts = tracefacts.trace_facts
    monkeypatch.setitem(pipeline.BESIDE, "trace_facts", (
        lambda events, gpu, windows: names.append(threading.current_thread().name) or facts(events, windows), lambda f, steps: f))
    res = _result(DEMO, True, monkeypatch)
    assert res.extras["trace_facts"].height == 1 and names == [threading.current_thread().name]


def test_an_error_of_the_work_beside_is_raised_where_the_work_in_turn_raises_it(two_threads, monkeypatch):
    def refuse(events, gpu, windows):
        raise TraceAnalyzerError("the facts refuse")

    monkeypatch.setitem(pipeline.BESIDE, "trace_facts", (refuse, lambda f, steps: f))
    outcomes = []
    for concurrent in (True, False):
        res = _result(DEMO, concurrent, monkeypatch)
        # the tables before the extras are kept, the error deferred to the job
        outcomes.append((str(res.deferred), res.steps is not None, sorted(res.extras), res.stepless))
    assert outcomes[0] == outcomes[1] == ("the facts refuse", True, [], False)


def test_an_error_in_the_main_thread_comes_first_and_waits_for_the_work_beside(two_threads, monkeypatch):
    """The check that fails first in turn fails first beside; the second thread's work, still
    running then, is waited for (nothing is left running into the next file's analysis)."""
    finished: list[float] = []
    cost = pipeline._profiler_cost

    def slow_cost(*args):
        time.sleep(0.3)
        out = cost(*args)
        finished.append(time.perf_counter())
        return out

    def refuse(*args, **kwargs):
        raise TraceAnalyzerError("the exposure refuses")

    monkeypatch.setattr(pipeline, "_profiler_cost", slow_cost)
    monkeypatch.setattr(pipeline.comm, "exposure", refuse)
    for concurrent in (True, False):
        finished.clear()
        res = _result(DEMO, concurrent, monkeypatch)
        returned = time.perf_counter()
        assert str(res.deferred) == "the exposure refuses" and res.steps is None
        if concurrent:  # it had started, and had ended before the rank's analysis returned
            assert len(finished) == 1 and finished[0] <= returned
        else:  # in turn, the cost comes after the exposure: never reached
            assert finished == []
        assert not [t for t in threading.enumerate() if t.name.startswith("traceanalyzer-beside")]


def test_several_ranks_in_one_frame_give_the_same_tables_both_ways(two_threads, monkeypatch):
    """An Nsight Systems export holds several ranks in one frame, classified together in this
    process."""
    path = TRACES / "nsys" / "nsys-ai__h100_2gpu_1s.sqlite"
    if not path.exists():
        pytest.skip(f"shared traces not found: {path}")
    out = []
    for concurrent in (True, False):
        monkeypatch.setattr(pipeline, "CONCURRENT", concurrent)
        out.append(analyse([path], Options(tables=frozenset({"launches", "trace_facts"})), quiet=True))
    assert out[0].steps["rank"].n_unique() == 2
    assert_frame_equal(out[0].steps, out[1].steps, check_exact=True)
    for name in ("launches", "trace_facts"):
        assert_frame_equal(out[0].extras[name], out[1].extras[name], check_exact=True)


def test_a_large_rank_runs_the_work_in_turn(two_threads, monkeypatch):
    """From queries.LARGE_EVENTS on (the streaming engine's frames), the second thread would only
    raise the peak memory: the work runs in turn, in this thread."""
    from traceanalyzer import queries

    where: list[str] = []
    cost = profiler_cost.profiler_cost
    monkeypatch.setattr(profiler_cost, "profiler_cost", lambda *a, **k: where.append(threading.current_thread().name) or cost(*a, **k))
    small = _result(DEMO, True, monkeypatch)
    monkeypatch.setattr(queries, "LARGE_EVENTS", 1000)  # the demo rank holds some 49,000 events
    large = _result(DEMO, True, monkeypatch)
    assert where == ["traceanalyzer-beside_0", threading.current_thread().name]
    assert_frame_equal(small.steps, large.steps, check_exact=True)
