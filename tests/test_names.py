"""Name tests evaluated once per distinct name (classify.names), and the shared launch times:
the same answers as the per-row computation they replace."""

from __future__ import annotations

import re

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify import comm, idle
from traceanalyzer.classify.labels import GPU_WORK_KINDS, label_gpu
from traceanalyzer.classify.names import name_columns
from traceanalyzer.classify.steps import gpu_windows

from conftest import TRACES

HTA = TRACES / "hta" / "df_index_resolver" / "df_index_resolver.json.gz"
DLRM = TRACES / "kineto-public" / "param-dlrm-v100-8rank" / "worker1_step_12.1694128201556.pt.trace.json.gz"


def test_name_columns_per_distinct_name_keep_rows_and_order():
    names = ["nccl:all_reduce", "MoE_Dispatch", None, "aten::mm", "nccl:all_reduce", "moe_dispatcher", None]
    frame = pl.LazyFrame({"name": names, "i": range(len(names))})
    out = name_columns(
        frame,
        moe=pl.col("name").str.contains(comm.MOE_RANGE).fill_null(False),
        length=pl.col("name").str.len_chars(),
    ).collect(engine="in-memory")
    assert out.get_column("i").to_list() == list(range(len(names)))
    # by hand: the MoE words stand alone ('dispatcher' is another word); a null name is no match
    assert out.get_column("moe").to_list() == [False, True, False, False, False, False, False]
    assert out.get_column("length").to_list() == [15, 12, None, 8, 15, 14, None]


@pytest.mark.skipif(not DLRM.exists(), reason="shared traces not present")
def test_link_ranges_match_a_per_row_regex_on_a_real_trace():
    events = ta.load(DLRM).events
    link, moe = re.compile(comm.LINK_RANGE), re.compile(r"(^|[^a-z])(dispatch|combine)([^a-z]|$)", re.I)
    rows = events.select("kind", "name").with_row_index("i").to_dicts()
    want = [
        r["i"] for r in rows
        if r["kind"] in ("annotation", "cpu_op") and r["name"] is not None
        and (link.search(r["name"]) or (r["kind"] == "annotation" and moe.search(r["name"])))
    ]
    got = comm._link_ranges(events.lazy().with_row_index("i")).collect(engine="in-memory").get_column("i").to_list()
    assert want and sorted(got) == want  # the trace's nccl: ranges
    threads = comm.linking_threads(events.lazy()).collect(engine="in-memory").sort("rank", "pid", "tid")
    expected = {(r["rank"], r["pid"], r["tid"]) for r in events.filter(
        pl.col("kind").is_in(["annotation", "cpu_op"]) & ((pl.col("name") == "record_param_comms") | pl.col("name").str.starts_with("nccl:"))
    ).select("rank", "pid", "tid").to_dicts()}
    assert set(threads.iter_rows()) == expected


@pytest.mark.skipif(not HTA.exists(), reason="shared traces not present")
def test_launch_times_given_or_computed_give_the_same_windows_and_idle_split():
    trace = ta.load(HTA)  # 5 steps, host-bound idle between them
    events = trace.events
    launched = idle.launch_times(
        events.lazy(), events.lazy().filter(pl.col("kind").is_in(GPU_WORK_KINDS)).select("rank", "start_ns", "end_ns", "correlation", "external_id"),
        tid=True,
    ).collect(engine="in-memory")
    own, own_warn = gpu_windows(events)
    given, given_warn = gpu_windows(events, launched=launched)
    assert own.height > 1 and own.equals(given) and own_warn == given_warn
    gpu = label_gpu(events)
    split_own = idle.idle_split(events, gpu, own).sort("rank", "step")
    split_given = idle.idle_split(events, gpu, own, launched=launched).sort("rank", "step")
    assert split_own.equals(split_given)
    assert split_own.get_column("idle_host_bound_ns").sum() > 0


@pytest.mark.parametrize("with_k2", [True, False])
@pytest.mark.parametrize("tid", [True, False])
def test_launch_times_by_hand(tid, with_k2):
    # k1 launched by a runtime call (correlation 1, thread "7") under op X (external id 10,
    # thread "5"); k2 by no runtime call: its op Y (external id 20) started at 300 on thread "5";
    # k3 by a runtime call with no thread (the op's thread is taken, the call's time kept)
    host = pl.DataFrame({
        "rank": [0] * 5, "kind": ["cpu_op", "runtime", "cpu_op", "runtime", "cpu_op"],
        "start_ns": [100, 110, 300, 500, 490], "correlation": [None, 1, None, 3, None],
        "external_id": [10, 10, 20, 30, 30], "tid": ["5", "7", "5", None, "5"],
    }, schema_overrides={"rank": pl.Int32})
    gpu = pl.DataFrame({
        "rank": [0, 0, 0], "start_ns": [200, 400, 600], "end_ns": [250, 450, 650],
        "correlation": [1, None, 3], "external_id": [10, 20, 30],
    }, schema_overrides={"rank": pl.Int32})
    keep = [True, with_k2, True]  # without k2, only k3's thread needs the ops
    out = idle.launch_times(host.lazy(), gpu.filter(keep).lazy(), tid=tid).collect(engine="in-memory").sort("start_ns")
    assert out.get_column("launch_ns").to_list() == [x for x, k in zip([110, 300, 500], keep) if k]
    if tid:
        assert out.get_column("launch_tid").to_list() == [x for x, k in zip(["7", "5", "5"], keep) if k]
