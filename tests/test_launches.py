"""Kernel launches and the launch queue, against hand-computed cases and HTA.

Peer numbers: HTA 0.5 (HolisticTraceAnalysis from PyPI), run once, offline, on a folder holding
only ``hta/negative_queue_length_values_check/rank0.json.gz``:

* ``get_cuda_kernel_launch_stats(ranks=[0], visualize=False)[0]``: 5,224 rows (correlation ids
  824,980 to 914,404); sums over the rows: ``cpu_duration`` 684,500 us, ``gpu_duration``
  233,886 us, ``launch_delay`` 635,597,575 us (24 rows clipped to 0), max 198,353 us.
* ``get_queue_length_summary(ranks=[0])``, per stream (count, mean, std, min, 25%, 50%, 75%,
  max)::

      7    9680  656.679959  233.774855  0  477  757  847  946
      25     56    1.357143    1.242118  0    0    1    2    4
      27    592    3.570946    4.000639  0    1    2    5   17
      84     56    1.464286    0.893701  0    1    1    2    3
      285    32    2.750000    0.983739  0    2    3    3    4
      363    32    2.750000    0.983739  0    2    3    3    4

* ``get_queue_length_time_series(ranks=[0])[0]``, reduced per stream to the step function's
  integral (after keeping the last row of each timestamp: the value after every change at that
  instant; sum of value × time to the next timestamp, in item·us): 7: 621,634,988;
  25: 62,622; 27: 9,851,953; 84: 888,200; 285: 1,918,429; 363: 1,923,310.

HTA keeps only launch calls named ``cudaLaunchKernel``/``cudaLaunchKernelExC``/
``cudaMemcpyAsync``/``cudaMemsetAsync`` (``cudaGraphLaunch`` is not in its list) and drops the
last profiler step (it keeps CPU ops that start before the last ``ProfilerStep``): the tests
restrict ours the same way before comparing.
"""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import TRACES, cli_csv, cli_json, needs_shared, run_cli
from traceanalyzer.api import launches, queue_length
from traceanalyzer.classify.launches import launch_pairs, queue_series, queue_summary
from traceanalyzer.parsers import load

QUEUE = TRACES / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
HTA_QUEUE = {  # stream: count, mean, std, min, p25, p50, p75, max
    7: (9680, 656.679959, 233.774855, 0, 477, 757, 847, 946),
    25: (56, 1.357143, 1.242118, 0, 0, 1, 2, 4),
    27: (592, 3.570946, 4.000639, 0, 1, 2, 5, 17),
    84: (56, 1.464286, 0.893701, 0, 1, 1, 2, 3),
    285: (32, 2.75, 0.983739, 0, 2, 3, 3, 4),
    363: (32, 2.75, 0.983739, 0, 2, 3, 3, 4),
}
HTA_INTEGRAL_US = {7: 621_634_988, 25: 62_622, 27: 9_851_953, 84: 888_200, 285: 1_918_429, 363: 1_923_310}
HTA_LAUNCH_NAMES = ["cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"]


def _ev(rows):
    from traceanalyzer.schema import EVENT_SCHEMA, conform

    return conform(pl.DataFrame(rows), EVENT_SCHEMA)


def _toy():
    """Three kernels on stream 7 launched at 0, 10, 20 (calls 5 ns long), run 100-150, 150-200,
    200-250: queued 1,2,3 then 2,1,0 at the starts; outstanding drops at the ends."""
    rows = []
    for i, (l, s, e) in enumerate([(0, 100, 150), (10, 150, 200), (20, 200, 250)]):
        rows.append({"rank": 0, "kind": "runtime", "pid": "1", "tid": "1", "name": "cudaLaunchKernel", "start_ns": l, "end_ns": l + 5, "correlation": i + 1})
        rows.append({"rank": 0, "kind": "kernel", "pid": "0", "tid": "7", "stream": 7, "name": f"k{i}", "start_ns": s, "end_ns": e, "correlation": i + 1})
    return _ev(rows)


def test_pairs_and_queue_by_hand():
    ev = _toy()
    p = launch_pairs(ev.lazy(), ev.lazy()).collect().sort("correlation")
    assert p["launch_latency_ns"].to_list() == [100, 140, 180]
    assert p["launch_delay_ns"].to_list() == [95, 135, 175]
    assert p["cpu_ns"].to_list() == [5, 5, 5] and p["gpu_ns"].to_list() == [50, 50, 50]
    s = queue_series(p.lazy()).collect()
    assert s.select("t_ns", "queued", "outstanding").rows() == [
        (0, 1, 1), (10, 2, 2), (20, 3, 3), (100, 2, 3), (150, 1, 2), (200, 0, 1), (250, 0, 0),
    ]
    q = queue_summary(p.lazy()).collect().row(0, named=True)
    # time-weighted over [0, 250): queued 1·10 + 2·10 + 3·80 + 2·50 + 1·50 + 0·50 = 420
    assert q["queued_mean"] == pytest.approx(420 / 250) and q["queued_max"] == 3
    # outstanding 1·10 + 2·10 + 3·80 + 3·50 + 2·50 + 1·50 = 570
    assert q["outstanding_mean"] == pytest.approx(570 / 250) and q["outstanding_max"] == 3
    assert (q["hta_count"], q["hta_min"], q["hta_max"]) == (6, 0, 3)
    assert q["hta_mean"] == pytest.approx((1 + 2 + 3 + 2 + 1 + 0) / 6)


def test_launch_bound_step_by_hand():
    """A step whose GPU waits on the host for half of it, with 1 ns kernels behind 5 ns launch
    calls, is launch-bound; the same step with 1 µs kernels is not."""
    from traceanalyzer.classify.launches import with_launch_bound

    base = {"rank": [0, 0], "step": [1, 2], "duration_ns": [100, 100], "idle_host_bound_ns": [50, 50],
            "gpu_work_p50_ns": [1, 1000], "launch_cpu_p50_ns": [5, 5]}
    got = with_launch_bound(pl.DataFrame(base))
    assert got["launch_bound"].to_list() == [True, False]
    assert with_launch_bound(pl.DataFrame(base), threshold=0.6)["launch_bound"].to_list() == [False, False]


@pytest.fixture(scope="module")
def queue_trace():
    if not QUEUE.exists():
        pytest.skip(f"shared traces not found at {TRACES}")
    return load(QUEUE)


def _hta_like(trace):
    """Our launch pairs restricted as HTA restricts them (see the module docstring)."""
    from traceanalyzer.classify.labels import label_gpu
    from traceanalyzer.classify.steps import cpu_steps

    last = cpu_steps(trace.events.lazy()).collect()["cpu_start_ns"].max()
    p = launch_pairs(trace.events.lazy(), label_gpu(trace.events).lazy()).collect()
    return p.filter(pl.col("launch_name").is_in(HTA_LAUNCH_NAMES) & (pl.col("launch_ns") < last))


@needs_shared()
def test_launch_stats_match_hta(queue_trace):
    p = _hta_like(queue_trace)
    assert p.height == 5224
    assert (p["correlation"].min(), p["correlation"].max()) == (824980, 914404)
    assert p["cpu_ns"].sum() == 684_500_000 and p["gpu_ns"].sum() == 233_886_000
    clipped = p["launch_delay_ns"].clip(lower_bound=0)
    assert clipped.sum() == 635_597_575_000 and clipped.max() == 198_353_000 and (clipped == 0).sum() == 24


@needs_shared()
def test_queue_length_matches_hta(queue_trace):
    p = _hta_like(queue_trace)
    summ = queue_summary(p.lazy()).collect()
    for r in summ.iter_rows(named=True):
        count, mean, std, lo, p25, p50, p75, hi = HTA_QUEUE[r["stream"]]
        assert (r["hta_count"], r["hta_min"], r["hta_p25"], r["hta_p50"], r["hta_p75"], r["hta_max"]) == (count, lo, p25, p50, p75, hi)
        # HTA orders equal timestamps by an unstable sort; ours puts a launch before a start:
        # the per-event mean differs by under 0.2 %, the step function itself does not (below)
        assert r["hta_mean"] == pytest.approx(mean, rel=2e-3) and r["hta_std"] == pytest.approx(std, rel=2e-3)
    s = queue_series(p.lazy()).collect().with_columns(
        (pl.col("t_ns").shift(-1).over("stream") - pl.col("t_ns")).fill_null(0).alias("dt")
    )
    integral = dict(s.group_by("stream").agg((pl.col("queued") * pl.col("dt")).sum()).iter_rows())
    assert integral == {k: v * 1000 for k, v in HTA_INTEGRAL_US.items()}
    assert s["queued"].min() == 0  # never negative: work without a launch record takes no part


@needs_shared()
def test_step_table_counts_and_engine_path(queue_trace):
    from traceanalyzer.api import analyze

    a = analyze(queue_trace)
    df = launches(queue_trace)
    assert df["step"].to_list() == a.steps["step"].to_list()
    g = a.gpu.filter(pl.col("kind") == "kernel")
    from traceanalyzer.classify.kernels import in_windows

    per_step = dict(in_windows(g.select("rank", "start_ns"), a.windows).group_by("step").len().iter_rows())
    assert dict(zip(df["step"], df["kernels"])) == per_step
    assert (df["launch_latency_p50_ns"] >= df["launch_delay_p50_ns"]).all()
    rows = launches(queue_trace, per="kernel")
    assert rows.height == 6875  # every GPU item with a launch record (graph launches included)
    assert rows.filter(pl.col("step").is_not_null()).group_by("step").len().sort("step")["len"].to_list() == df["launched"].to_list()
    q = queue_length(queue_trace)
    assert set(q["stream"]) == set(HTA_QUEUE)


@needs_shared()
def test_cli_launches_views(tmp_path):
    got = cli_csv(tmp_path / "q.csv", "launches", QUEUE, "-q", "--view", "queue")
    assert sorted(got["stream"].to_list()) == sorted(HTA_QUEUE)
    doc = cli_json("launches", QUEUE, "-q")
    assert [s["step"] for s in doc["steps"]] == [550, 551, 552, 553, 554] and len(doc["queue"]) == 6
    r = run_cli("launches", QUEUE, "-q", "--threshold", "2")
    assert r.returncode == 2 and "--threshold" in r.stderr


def test_docstring_examples_run(monkeypatch):
    """The verbs' examples (annotations, launches, queue_length) run on the bundled trace and
    print what their docstrings say."""
    import doctest

    import traceanalyzer.api as api
    from tests.conftest import ROOT

    monkeypatch.chdir(ROOT)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for verb in (api.annotations, api.launches, api.queue_length):
        for test in doctest.DocTestFinder().find(verb, verb.__name__, globs={}):
            runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.attempted >= 4 and res.failed == 0


def test_extras_cost_nothing_unless_asked():
    """A plain analysis computes none of the optional tables."""
    from tests.conftest import DEMO
    from traceanalyzer.api import analyze
    from traceanalyzer.engine import Options

    assert Options().tables == frozenset()
    assert analyze(load(DEMO)).extras == {}
