"""Collective efficiency: achieved bus bandwidth per collective, checked by hand against the raw
trace JSON (bytes from ``In msg nelems`` × dtype size, time from the kernel's ``dur``, the
nccl-tests factor of the collective and group size) and against a baseline interpolated by hand.

Which shared traces carry byte counts: the DLRM 8-rank trace's ``record_param_comms`` have no
collective args (no ``In msg nelems``), so nothing there can be set against a baseline; HTA's
``nccl_parser_config`` trace (one A100 rank of a 2-rank group) has ``In msg nelems``, ``dtype``
and ``Group size`` on every NCCL kernel.
"""

from __future__ import annotations

import gzip
import json
import math

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.baselines import read_nccl_tests
from traceanalyzer.reconciliation.busbw import achieved_busbw, busbw_summary, exposed_split

from conftest import DLRM, FIXTURES, TRACES, needs_shared, run_cli

NCCL = TRACES / "hta" / "nccl_parser_config"
DTYPE = {"Float": 4, "Half": 2, "BFloat16": 2, "Double": 8, "Int": 4, "Long": 8, "Byte": 1}


def by_hand(path) -> list[dict]:
    """Every NCCL kernel of the raw JSON: type, bytes, duration (ns), group size -> busbw."""
    doc = json.load(gzip.open(next(path.glob("*.json.gz"))))
    out = []
    for e in doc["traceEvents"]:
        a = e.get("args", {})
        if e.get("cat") != "kernel" or "In msg nelems" not in a:
            continue
        n = a["Group size"]
        kind = {"allreduce": "all_reduce", "broadcast": "broadcast"}[a["Collective name"]]
        factor = 2 * (n - 1) / n if kind == "all_reduce" else 1.0
        nbytes = max(a["In msg nelems"], a["Out msg nelems"]) * DTYPE[a["dtype"]]
        dur_ns = round(e["dur"] * 1000)
        out.append({"ts": e["ts"], "type": kind, "bytes": nbytes, "dur_ns": dur_ns, "busbw": nbytes / dur_ns * factor, "n": n})
    return sorted(out, key=lambda r: r["ts"])


@needs_shared()
def test_achieved_busbw_by_hand_with_hardware_reference():
    trace = ta.load(NCCL)
    per = achieved_busbw(ta.analyze(trace).collectives, gpu=trace.meta["device_name"][0])
    hand = by_hand(NCCL)
    assert per.height == len(hand) == 21
    assert per["coll_type"].to_list() == [h["type"] for h in hand]
    assert per["bytes"].to_list() == [h["bytes"] for h in hand]
    assert per["time_ns"].to_list() == [h["dur_ns"] for h in hand]
    assert per["group_size"].unique().to_list() == [2] and per["bus_factor"].unique().to_list() == [1.0]
    for got, want in zip(per["busbw_gbps"].to_list(), [h["busbw"] for h in hand]):
        assert math.isclose(got, want, rel_tol=1e-12)
    # one all-reduce, written out (ts 4458677009853.422 in the JSON): 6 637 568 floats = 26 550 272 B in 2 636.669 µs = 10.0696 GB/s,
    # × 2(2−1)/2 = 1; one rank of the group loaded -> the kernel duration (wait included) is the time
    one = per.filter((pl.col("bytes") == 26_550_272) & (pl.col("time_ns") == 2_636_669))
    assert one.height == 1
    first = one.row(0, named=True)
    assert math.isclose(first["busbw_gbps"], 26_550_272 / 2_636_669) and first["time_basis"].startswith("kernel duration")
    # no baseline: the hardware table's A100 NVLink 300 GB/s × 0.82 = 246 GB/s, said as such
    assert first["reference_gbps"] == pytest.approx(246.0) and first["reference"].startswith("hardware table (no baseline given)")
    assert math.isclose(first["efficiency"], 26_550_272 / 2_636_669 / 246.0)


@needs_shared()
def test_achieved_busbw_against_an_interpolated_baseline():
    base = read_nccl_tests(FIXTURES / "baselines" / "all_reduce_perf_h100_2node.txt")
    per = achieved_busbw(ta.analyze(ta.load(NCCL)).collectives, baseline=base)
    first = per.filter(pl.col("bytes") == 26_550_272).row(0, named=True)
    # 26 550 272 B lies between 16 MiB (32.18 GB/s) and 32 MiB (59.36 GB/s) in the baseline
    want = 32.18 + (59.36 - 32.18) * (math.log2(26_550_272) - 24)
    assert math.isclose(first["reference_gbps"], want, rel_tol=1e-12) and not first["extrapolated"]
    assert "16 ranks inter" in first["reference"]
    bc = per.filter(pl.col("coll_type") == "broadcast")
    assert bc["reference_gbps"].null_count() == bc.height and bc["reference"].unique().to_list() == ["no broadcast in the baseline"]
    s = busbw_summary(per).filter(pl.col("coll_type") == "all_reduce").row(0, named=True)
    hand = [h for h in by_hand(NCCL) if h["type"] == "all_reduce"]
    assert s["count"] == len(hand) == 15
    assert math.isclose(s["busbw_gbps"], sum(h["bytes"] for h in hand) / sum(h["dur_ns"] for h in hand))


def test_aligned_ranks_use_the_transfer_time():
    coll = pl.DataFrame({
        "rank": [0, 1], "step": [1, 1], "coll_type": ["all_reduce", "all_reduce"], "pg_name": ["0", "0"],
        "group_size": [8, 8], "bytes": [2**30, 2**30], "start_ns": [0, 500_000], "dur_ns": [6_000_000, 5_500_000],
        "transfer_ns": [5_000_000, 5_000_000], "transfer_estimated": [False, False],
    })
    per = achieved_busbw(coll, gpu="H100 SXM")
    # 1 GiB in 5 ms = 214.748 GB/s algbw, × 2·7/8 = 375.809 GB/s busbw; reference 450 × 0.82 = 369
    assert per["time_basis"].unique().to_list() == ["transfer (ranks aligned)"]
    assert per["busbw_gbps"].to_list() == pytest.approx([2**30 / 5e6 * 1.75] * 2)
    assert per["efficiency"].to_list() == pytest.approx([2**30 / 5e6 * 1.75 / 369.0] * 2)
    # exposed split: rank 0 waited 1 ms of its 6 ms kernel; the 5 ms transfer beats 369 GB/s
    # (2^30 × 1.75 / 369 = 5.09 ms > 5 ms), so nothing is below the reference
    comm = pl.DataFrame({"rank": [0, 1], "step": [1, 1], "by": ["type", "type"], "key": ["all_reduce"] * 2,
                         "exposed_ns": [3_000_000, 1_100_000]})
    split = exposed_split(per, comm)
    assert split.select("exposed_wait_ns", "exposed_link_speed_ns", "exposed_below_reference_ns").rows() == [
        (500_000, 2_500_000, 0), (100_000, 1_000_000, 0)]
    assert split["split_basis"].unique().to_list() == ["wait measured (ranks aligned)"]


@needs_shared()
def test_dlrm_collectives_carry_no_bytes():
    coll = ta.analyze(ta.load(DLRM)).collectives
    assert coll.height == 64 and coll["bytes"].null_count() == 64
    assert achieved_busbw(coll, gpu="V100").height == 0


@needs_shared()
def test_cli_baseline_with_trace():
    r = run_cli("baseline", FIXTURES / "baselines" / "all_reduce_perf_h100_2node.txt", "--trace", NCCL, "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["collectives"]["instances"]) == 21
    assert {s["coll_type"] for s in doc["collectives"]["summary"]} == {"all_reduce", "broadcast"}


@needs_shared()
def test_exposed_split_by_hand():
    an = ta.analyze(ta.load(NCCL))
    per = achieved_busbw(an.collectives, gpu="A100")
    split = exposed_split(per, an.comm)
    # the three parts add up exactly to the exposed time of every (rank, step, type)
    assert (split["exposed_wait_ns"] + split["exposed_link_speed_ns"] + split["exposed_below_reference_ns"] == split["exposed_ns"]).all()
    expo = an.comm.filter((pl.col("by") == "type") & (pl.col("key") == "all_reduce") & (pl.col("step") == 4))["exposed_ns"].item()
    # by hand: the step-4 all-reduces of the raw JSON at A100's 246 GB/s reference
    steps = per.filter((pl.col("coll_type") == "all_reduce") & (pl.col("step") == 4))
    hand = {(h["bytes"], h["dur_ns"]) for h in by_hand(NCCL) if h["type"] == "all_reduce"}
    pairs = list(zip(steps["bytes"].to_list(), steps["time_ns"].to_list()))
    assert set(pairs) <= hand and len(pairs) == 5
    at = sum(min(b * 1.0 / 246.0, d) for b, d in pairs)  # bytes × factor 1 / (246 bytes/ns)
    link = round(expo * at / sum(d for _, d in pairs))
    row = split.filter((pl.col("step") == 4) & (pl.col("coll_type") == "all_reduce")).row(0, named=True)
    assert row["exposed_ns"] == expo and row["exposed_wait_ns"] == 0 and row["exposed_link_speed_ns"] == link
    assert row["split_basis"].startswith("one rank of the group")


@needs_shared()
def test_cli_trace_without_baseline_uses_the_hardware_table():
    r = run_cli("baseline", "--trace", NCCL, "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    refs = {i["reference"] for i in doc["collectives"]["instances"]}
    assert refs == {"hardware table (no baseline given): NVIDIA A100 (SXM4/PCIe) NVLink 300 GB/s × 0.82"}
    assert sum(x["exposed_ns"] for x in doc["collectives"]["exposed_split"]) > 0
    r = run_cli("baseline")
    assert r.returncode == 7 and r.stderr.count("\n") == 1
