"""Cross-rank view on the 8-rank DLRM step, against a hand computation from the raw JSON."""

from __future__ import annotations

import statistics

import polars as pl

import traceanalyzer as ta

from conftest import DLRM
from test_idle import hand_idle
from test_partition import _reference_for_single_step


def test_dlrm_straggler_table_equals_the_hand_computation():
    hand = {}
    for rank in range(8):
        ref, dur = _reference_for_single_step(sorted(DLRM.glob(f"worker{rank}_*"))[0])
        ref = {**ref, **{f"idle_{k}": v for k, v in hand_idle(rank).items()}}
        hand[rank] = (dur, ref)
    durs = {r: d for r, (d, _) in hand.items()}
    slow = max(durs, key=lambda r: (durs[r], -r))
    med = statistics.median(durs.values())
    fields = ["compute", "recompute", "exposed_comm", "other", "idle_host_bound", "idle_sync", "idle_bubble", "idle_other"]
    excess = {f: hand[slow][1][f] - statistics.median(h[1][f] for h in hand.values()) for f in fields}
    bucket = max(excess, key=excess.get)

    a = ta.analyze(ta.load(DLRM))
    row = a.cross_rank.row(0, named=True)
    assert row["ranks"] == 8 and row["step"] == a.steps["step"][0]
    assert row["slowest_rank"] == slow == 1
    assert row["max_ns"] == durs[slow] == 19_901_000
    assert row["median_ns"] == med
    assert row["skew_ns"] == durs[slow] - med
    assert row["straggler_bucket"] == bucket == "exposed_comm"
    assert row["straggler_excess_ns"] == excess[bucket]
    assert [d["duration_ns"] for d in row["durations"]] == [durs[r] for r in range(8)]


def test_dlrm_waited_on_rank_is_the_one_with_least_collective_wait():
    a = ta.analyze(ta.load(DLRM))
    waits = a.collectives.group_by("rank").agg(pl.col("wait_ns").sum()).sort("wait_ns")
    row = a.cross_rank.row(0, named=True)
    assert row["waited_on_rank"] == waits["rank"][0] == 7
    # the late arriver has the shortest step: the others' extra time is waiting for it
    assert a.steps.sort("duration_ns")["rank"][0] == 7


def test_single_rank_has_no_cross_rank_rows():
    a = ta.analyze(ta.load(sorted(DLRM.glob("worker0_*"))[0]))
    assert a.cross_rank.height == 0
