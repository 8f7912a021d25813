"""The Python API's verbs and the many-rank tables, against hand computations on the 8-rank
DLRM fixture (one step per rank), a synthetic multi-step job, and the 2-rank x 2-step HTA trace.

Hand numbers for DLRM (per-rank step durations, ns: each rank's ``ProfilerStep#10`` range, read
from the JSON by :func:`_profiler_step_durations` below): 0: 14455000, 1: 19901000,
2: 13017000, 3: 19313000, 4: 17979000, 5: 17797000, 6: 13091000, 7: 12509000. Sorted:
12509000 13017000 13091000 14455000 | 17797000 17979000 19313000 19901000, so the median is
(14455000 + 17797000) / 2 = 16126000 and a rank is slow above 1.05 x 16126000 = 16932300: ranks
1, 3, 4, 5; rank 1 is the slowest.
"""

from __future__ import annotations

import statistics

import polars as pl
import pytest

import traceanalyzer as ta
from tests.conftest import DLRM, ROOT, TRACES, needs_shared, run_cli
from traceanalyzer.classify import rankspread
from traceanalyzer.classify.stragglers import straggler_steps, stragglers
from traceanalyzer.errors import InvalidArgument, TraceAnalyzerError

DURATIONS = {0: 14455000, 1: 19901000, 2: 13017000, 3: 19313000, 4: 17979000, 5: 17797000, 6: 13091000, 7: 12509000}


def _profiler_step_durations() -> dict[int, int]:
    """Each DLRM rank's ``ProfilerStep#N`` duration (ns), straight from its JSON (integer µs)."""
    import gzip
    import json

    out = {}
    for rank in range(8):
        doc = json.loads(gzip.open(sorted(DLRM.glob(f"worker{rank}_*"))[0]).read())
        (dur,) = [e["dur"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
        out[rank] = dur * 1000
    return out


def test_hand_durations_are_the_profiler_step_ranges():
    assert _profiler_step_durations() == DURATIONS


@pytest.fixture(scope="module")
def dlrm():
    return ta.analyze(DLRM)


def test_breakdown_by_step_and_rank(dlrm):
    df = ta.breakdown(dlrm)
    assert dict(zip(df["rank"].to_list(), df["duration_ns"].to_list())) == DURATIONS
    buckets = df.select(pl.sum_horizontal("compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns")).to_series()
    assert buckets.to_list() == df["duration_ns"].to_list()
    per_rank = ta.breakdown(dlrm, per="rank")
    assert per_rank["steps"].to_list() == [1] * 8 and per_rank["duration_ns"].to_list() == [DURATIONS[r] for r in range(8)]
    # a path gives the same frame as the analysis of its loaded trace
    assert ta.breakdown(DLRM).equals(ta.breakdown(ta.load(DLRM)))


def test_rank_summary_against_hand_and_plain_python(dlrm):
    s = ta.rank_summary(dlrm, top=3)
    assert s["field"].to_list()[:7] == ["duration", "compute", "recompute", "exposed_comm", "other", "idle", "overlapped_comm"]
    d = s.filter(field="duration").row(0, named=True)
    assert (d["ranks"], d["min_ns"], d["p50_ns"], d["max_ns"], d["max_rank"]) == (8, 12509000, 16126000, 19901000, 1)
    assert d["top_ranks"] == [1, 3, 4] and d["top_ns"] == [19901000, 19313000, 17979000]
    assert d["mean_ns"] == sum(DURATIONS.values()) / 8
    # every field: plain Python over the per-rank values
    rows = ta.breakdown(dlrm).rows(named=True)
    for r in s.iter_rows(named=True):
        vals = {row["rank"]: row[f"{r['field']}_ns"] for row in rows}
        ordered = sorted(vals.items(), key=lambda kv: (-kv[1], kv[0]))
        assert r["min_ns"] == min(vals.values()) and r["max_ns"] == max(vals.values())
        assert r["p50_ns"] == statistics.median(vals.values())
        assert r["max_rank"] == ordered[0][0] and r["top_ranks"] == [k for k, _ in ordered[:3]]


def test_rank_summary_means_per_step():
    """Two ranks, one with two steps: the distribution is over each rank's mean per step."""
    steps = pl.DataFrame({"rank": [0, 0, 1], "step": [1, 2, 1], "duration_ns": [10, 30, 50], "compute_ns": [4, 6, 50]})
    s = rankspread.rank_spread(steps, fields=["duration", "compute"])
    assert s.rows() == [("duration", 2, 20.0, 35.0, 35.0, 50.0, 1, [1, 0], [50.0, 20.0]),
                        ("compute", 2, 5.0, 27.5, 27.5, 50.0, 1, [1, 0], [50.0, 5.0])]


def test_summary_threshold():
    assert not rankspread.summarise_ranks(16) and rankspread.summarise_ranks(17)
    assert rankspread.summarise_ranks(2, "summary") and not rankspread.summarise_ranks(1000, "all")
    assert rankspread.summarise_ranks(8, threshold=4)


def test_stragglers_dlrm_by_hand(dlrm):
    s = ta.stragglers(dlrm)
    slow = s.filter(pl.col("slow_steps") > 0)
    assert slow["rank"].to_list() == [1, 3, 4, 5]  # 1 first: also the slowest
    r1 = slow.row(0, named=True)
    assert (r1["slowest_steps"], r1["excess_ns"]) == (1, 19901000 - 16126000)
    # rank 1's exposed comm 11056000 against the median over ranks of exposed comm
    med_comm = statistics.median(ta.breakdown(dlrm)["exposed_comm_ns"].to_list())
    assert r1["bucket"] == "exposed_comm" and r1["bucket_excess_ns"] == 11056000 - med_comm
    assert s.filter(pl.col("slow_steps") == 0)["bucket"].null_count() == 4
    assert s["slowest_steps"].sum() == 1
    # a larger tolerance: only rank 1 (3775000 / 16126000 = 23.4 %) stays slow (rank 3: 19.8 %)
    assert ta.stragglers(dlrm, tolerance=0.2).filter(pl.col("slow_steps") > 0)["rank"].to_list() == [1]
    per_step = ta.stragglers(dlrm, per="step").row(0, named=True)
    assert (per_step["slowest_rank"], per_step["median_ns"]) == (1, 16126000)


def _job() -> pl.DataFrame:
    """3 ranks x 3 steps (+ a step only rank 0 has): by hand below."""
    rows = [  # rank, step, compute, exposed_comm, idle_host_bound, idle_other
        (0, 1, 100, 0, 0, 0), (1, 1, 100, 30, 0, 0), (2, 1, 100, 0, 0, 0),
        (0, 2, 100, 0, 0, 0), (1, 2, 100, 0, 40, 0), (2, 2, 100, 2, 0, 0),
        (0, 3, 100, 0, 0, 0), (1, 3, 100, 50, 0, 0), (2, 3, 103, 0, 0, 0),
        (0, 4, 500, 0, 0, 0),
    ]
    df = pl.DataFrame(rows, schema=["rank", "step", "compute_ns", "exposed_comm_ns", "idle_host_bound_ns", "idle_other_ns"], orient="row")
    zero = pl.lit(0, dtype=pl.Int64)
    return df.with_columns(
        pl.col("rank").cast(pl.Int32), zero.alias("recompute_ns"), zero.alias("other_ns"),
        (pl.col("idle_host_bound_ns") + pl.col("idle_other_ns")).alias("idle_ns"),
        zero.alias("idle_sync_ns"), zero.alias("idle_bubble_ns"),
    ).with_columns(
        pl.sum_horizontal("compute_ns", "recompute_ns", "exposed_comm_ns", "other_ns", "idle_ns").alias("duration_ns")
    )


def test_stragglers_multi_step_by_hand():
    """Durations: step 1: 100 130 100 (median 100: rank 1 +30 slow, exposed comm);
    step 2: 100 140 102 (median 102: rank 1 +38 slow, idle host-bound; rank 2 +0);
    step 3: 100 150 103 (median 103: rank 1 +47 slow, exposed comm; rank 2 +0);
    step 4 is on rank 0 only: not compared. With tolerance 5 %: rank 1 slow on 3 of 3 steps,
    mostly in exposed comm (2 steps, excess 30 + 50), excess 30 + 38 + 47 = 115."""
    per = straggler_steps(_job())
    assert per.height == 9 and 4 not in per["step"].to_list()
    assert per.filter(pl.col("slow"))["rank"].to_list() == [1, 1, 1]
    assert per.filter(rank=1)["excess_ns"].to_list() == [30.0, 38.0, 47.0]
    assert per.filter(rank=1)["bucket"].to_list() == ["exposed_comm", "idle_host_bound", "exposed_comm"]
    s = stragglers(_job())
    assert s.row(0) == (1, 3, 3, 3, 115.0, 47.0, "exposed_comm", 2, 80.0)
    assert s["rank"].to_list()[1:] == [0, 2] and s["slow_steps"].to_list()[1:] == [0, 0]
    # at 35 %: only steps 2 (38 / 102 = 37 %) and 3 (47 / 103 = 46 %); one step in each bucket,
    # the tie goes to the larger excess: exposed comm (50 on step 3) over idle host-bound (40)
    assert stragglers(_job(), tolerance=0.35).row(0) == (1, 3, 2, 3, 85.0, 47.0, "exposed_comm", 1, 50.0)


@needs_shared()
def test_stragglers_two_ranks_two_steps_hta():
    """HTA's sampled 2-rank job: durations (the ProfilerStep ranges) 607312000 / 607904000
    (step 551) and 622928000 / 630639000 (552): the median of two is their mean, rank 1 is the
    slowest twice and above the median by 296000 and 3855500 ns, i.e. 0.05 % and 0.6 %: never
    slow at 5 %."""
    a = ta.analyze(TRACES / "hta" / "trace_filter")
    per = ta.stragglers(a, per="rank_step")
    assert per.filter(rank=1)["excess_ns"].to_list() == [296000.0, 3855500.0]
    s = ta.stragglers(a)
    assert s.filter(rank=1).select("slow_steps", "slowest_steps").row(0) == (0, 2)
    assert ta.stragglers(a, tolerance=0.005).filter(rank=1)["slow_steps"].item() == 1


def test_select_and_compare(dlrm):
    one, seven = ta.select(dlrm, ranks=[1]), ta.select(dlrm, ranks=[7])
    assert one.trace.ranks == [1] and one.steps.height == 1 and one.cross_rank.height == 0
    d = ta.compare(seven, one)
    assert d["diff_ms"].sum() == pytest.approx((19901000 - 12509000) / 1e6)
    assert d.row(0) == ("exposed_comm_dp", 1.58, 11.056, pytest.approx(9.476))
    with pytest.raises(InvalidArgument, match="no step"):
        ta.select(dlrm, steps=[99])


def test_comm_and_idle_sum_to_the_partition(dlrm):
    exposed = dict(ta.breakdown(dlrm).select("rank", "exposed_comm_ns").iter_rows())
    for by in ("type", "group", "dim"):
        c = ta.comm(dlrm, by=by).group_by("rank").agg(pl.col("exposed_ns").sum())
        assert dict(c.iter_rows()) == exposed, by
    per_step = ta.comm(dlrm, per="step")
    assert per_step["step"].unique().to_list() == [10]
    i = ta.idle(dlrm)
    assert (i.select(pl.sum_horizontal("idle_host_bound_ns", "idle_sync_ns", "idle_bubble_ns", "idle_other_ns")).to_series() == i["idle_ns"]).all()
    assert i.filter(rank=7)["idle_pct"].item() == pytest.approx(100 * 9850000 / 12509000)


def test_report_model_with_low_threshold(dlrm, monkeypatch):
    assert ta.report(dlrm).rank_summary is None
    monkeypatch.setattr(rankspread, "RANK_SUMMARY_THRESHOLD", 4)
    m = ta.report(dlrm)
    assert m.rank_summary is not None
    rows = {r["field"]: r for r in m.rank_summary}
    assert (rows["duration"]["p50_ms"], rows["duration"]["max_rank"]) == (16.126, 1)
    assert rows["exposed_comm"]["top_ranks"][:2] == [1, 3]
    assert len(m.ranks) == 8  # the JSON keeps every rank
    assert ta.report(dlrm, show_ranks="all").rank_summary is None
    st = m.stragglers
    assert (st["slow_ranks"], [r["rank"] for r in st["ranks"]]) == (4, [1, 3, 4, 5])


def test_report_writes_files(dlrm, tmp_path):
    m = ta.report(dlrm, tmp_path / "r.md", show_ranks="summary")
    text = (tmp_path / "r.md").read_text()
    assert "| step time | 12.509 | 16.126 | 16.008 | 19.901 | 1 |" in text
    assert "### Stragglers" in text and "| 1 | 1 | 1 | 3.775 |" in text
    ta.report(dlrm, tmp_path / "r.html")
    assert 'id="rank-summary"' not in (tmp_path / "r.html").read_text() and m.headline["slowest_rank"] == 1
    ta.report(dlrm, tmp_path / "r.json")
    assert b'"rank_summary"' in (tmp_path / "r.json").read_bytes()


def test_cli_ranks_option():
    r = run_cli("breakdown", DLRM, "--ranks", "summary", "--detail", "-q")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("│") and "step time" in x)
    assert line.split("│")[2:7] == [" 12.509 ", " 16.126 ", " 16.008 ", " 19.901 ", "       1 "]
    assert "Stragglers" in r.stdout and "exposed comm" in r.stdout
    full = run_cli("breakdown", DLRM, "--ranks", "all", "-q")
    assert "GPU time per rank" in full.stdout and "distribution" not in full.stdout
    assert run_cli("breakdown", DLRM, "-q").stdout == full.stdout  # 8 ranks: every rank by default
    bad = run_cli("breakdown", DLRM, "--ranks", "some")
    assert bad.returncode == 2


def test_bad_arguments_are_typed_errors(dlrm):
    for call in (lambda: ta.breakdown(dlrm, per="kernel"), lambda: ta.comm(dlrm, by="x"), lambda: ta.idle(dlrm, per="job"),
                 lambda: ta.stragglers(dlrm, tolerance=-1), lambda: ta.rank_summary(dlrm, top=0),
                 lambda: ta.report(dlrm, show_ranks="some"), lambda: ta.analyze(42), lambda: ta.analyze(DLRM, workers=0)):
        with pytest.raises(InvalidArgument) as exc:
            call()
        assert isinstance(exc.value, (TraceAnalyzerError, ValueError)) and exc.value.exit_code == 2


def test_reprs_are_short(dlrm):
    t, a = repr(dlrm.trace), repr(dlrm)
    assert t == "<Trace 8 ranks (0-7), 19,789 events, span 21.019 ms, kineto, 2 warnings>" or t.startswith("<Trace 8 ranks (0-7), 19,789 events")
    assert a.splitlines()[0].startswith("<Analysis 8 ranks x 1 step (8 rank-steps), 19,789 events")
    assert "mean step 16.008 ms" in a and len(a.splitlines()) <= 3 and len(a) < 400


def test_scan_equals_load(tmp_path):
    """The lazy scan of the parse cache holds exactly the events load gives (ranks included)."""
    ev = ta.load(DLRM).events
    lf = ta.scan(DLRM, cache=tmp_path)
    assert isinstance(lf, pl.LazyFrame) and lf.collect_schema() == ev.schema
    key = ["rank", "start_ns", "end_ns", "kind", "name", "tid", "correlation"]
    assert lf.collect().sort(key).equals(ev.sort(key))
    assert ta.scan([DLRM], cache=tmp_path).filter(pl.col("rank") == 3).select(pl.len()).collect().item() == ev.filter(rank=3).height
    with pytest.raises(InvalidArgument, match="parse cache"):
        ta.scan(DLRM, cache=False)


def test_parallel_workers_give_the_same_analysis(dlrm):
    """A path analysed by worker processes gives the frames of the in-process analysis, events kept."""
    par = ta.analyze(DLRM, workers=2)
    assert par.steps.equals(dlrm.steps) and par.trace.events.height == dlrm.trace.events.height == 19789
    assert ta.stragglers(par).equals(ta.stragglers(dlrm))


def test_comm_spread_by_hand(dlrm):
    """All-to-all exposed ms per rank (breakdown --detail): 3.882 9.389 1.690 7.893 6.320 6.020
    1.719 0.335; sorted, the middle two are 3.882 and 6.020: median 4.951; max 9.389 on rank 1."""
    s = rankspread.comm_spread(dlrm.comm)
    a2a = s.filter(key="all_to_all").row(0, named=True)
    assert (a2a["ranks"], a2a["count"], a2a["exposed_min_ns"], a2a["exposed_p50_ns"], a2a["exposed_max_ns"], a2a["exposed_max_rank"]) == (
        8, 40, 335000.0, 4951000.0, 9389000.0, 1)
    assert s.filter(by="dim")["key"].to_list() == ["DP"]
    r = run_cli("breakdown", DLRM, "--ranks", "summary", "--detail", "-q")
    line = next(x for x in r.stdout.splitlines() if x.startswith("│") and "all_to_all" in x)
    assert [c.strip() for c in line.split("│")[3:9]] == ["8", "40", "0.335", "4.951", "9.389", "1"]


def test_one_name_for_the_rows_of_a_table_per_and_its_older_name_by(dlrm):
    # comm, idle and stragglers took per=; breakdown, launches and annotations took by= for the
    # same idea (what one row is). per= everywhere now; by= still works and gives the same table
    per_rank = ta.breakdown(dlrm, per="rank")
    assert per_rank["steps"].to_list() == [1] * 8  # the fixture: 8 ranks of one step each
    with pytest.warns(DeprecationWarning, match="breakdown: the argument 'by' was renamed 'per' in traceanalyzer 0.1.0"):
        assert ta.breakdown(dlrm, by="rank").equals(per_rank)
    with pytest.warns(DeprecationWarning):
        assert ta.breakdown(dlrm, per="rank", by="rank").equals(per_rank)
    with pytest.raises(InvalidArgument, match="by is the older name of per"):
        ta.breakdown(dlrm, per="rank", by="step")
    with pytest.warns(DeprecationWarning, match="launches: the argument 'by'"):
        assert ta.launches(dlrm, by="kernel").equals(ta.launches(dlrm, per="kernel"))
    with pytest.raises(InvalidArgument, match="per"):
        ta.launches(dlrm, per="rank")


def test_memory_kept_free_is_named_in_the_unit_it_is_reserve_gib():
    # the value was always GiB (2^30 B); reserve_gb stays as its older name
    cfg = ROOT / "docs" / "examples" / "issue1031-70b.toml"
    new = ta.memory(config=cfg, reserve_gib=6)
    with pytest.warns(DeprecationWarning, match="memory: the argument 'reserve_gb' was renamed 'reserve_gib'"):
        old = ta.memory(config=cfg, reserve_gb=6)
    assert new.fit.equals(old.fit)
    four = ta.memory(config=cfg)
    # 2 GiB more kept free: the headroom shrinks by exactly 2 GiB
    assert four.fit["headroom_bytes"].item() - new.fit["headroom_bytes"].item() == 2 * 2**30
    with pytest.raises(InvalidArgument, match="reserve_gb is the older name of reserve_gib"):
        ta.memory(config=cfg, reserve_gib=6, reserve_gb=8)
