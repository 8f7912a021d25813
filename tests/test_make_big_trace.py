"""scripts/make_big_trace.py: tiled copies must be exact copies of the source, shifted in time."""

from __future__ import annotations

import importlib.util

import polars as pl
from polars.testing import assert_frame_equal

import traceanalyzer as ta

from conftest import DLRM, ROOT

_spec = importlib.util.spec_from_file_location("make_big_trace", ROOT / "scripts" / "make_big_trace.py")
make_big_trace = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_big_trace)

SOURCE = sorted(DLRM.glob("worker0_*.json.gz"))[0]  # one rank, one step (ProfilerStep#10)
WORK = ["compute_ns", "recompute_ns", "exposed_comm_ns", "overlapped_comm_ns", "other_ns"]


def test_three_copies_have_three_steps_with_the_source_s_work(tmp_path):
    out = tmp_path / "tiled.json"
    info = make_big_trace.build(SOURCE, out, copies=3)
    assert info["copies"] == 3
    src = ta.load(SOURCE)
    big = ta.load(out)
    # every timed event three times (metadata events once), ids never collide across copies
    n = src.events.height
    assert big.events.height == 3 * n
    for col in ("correlation", "external_id"):
        s = src.events.get_column(col).drop_nulls()
        b = big.events.get_column(col).drop_nulls()
        assert b.len() == 3 * s.len() and b.n_unique() == 3 * s.n_unique()
    # copy k is the source shifted by k * shift_us, event for event
    shift_ns = info["shift_us"] * 1000
    key = ["kind", "name", "start_ns", "end_ns"]
    for k in range(3):
        copy = big.events.filter(pl.col("start_ns") >= src.events["start_ns"].min() + k * shift_ns).filter(
            pl.col("start_ns") < src.events["start_ns"].min() + (k + 1) * shift_ns
        )
        want = src.events.with_columns(
            pl.col("start_ns") + k * shift_ns,
            pl.col("end_ns") + k * shift_ns,
            pl.col("name").str.replace(r"^ProfilerStep#10$", f"ProfilerStep#{10 + k}"),
        )
        assert_frame_equal(copy.select(key).sort(key), want.select(key).sort(key))
    # the partition: same work in every step; steps renumbered 10, 11, 12; each step is its copy's
    # ProfilerStep range, so every copy's step is exactly the source's (the gap up to the next
    # copy lies between two steps' ranges: in no step)
    s = ta.breakdown(src)
    b = ta.breakdown(big)
    assert s["step"].to_list() == [10] and b["step"].to_list() == [10, 11, 12]
    for col in WORK:
        assert b[col].to_list() == [s[col][0]] * 3
    for k in range(3):
        assert_frame_equal(b[k].select(WORK + ["duration_ns", "idle_ns"]), s.select(WORK + ["duration_ns", "idle_ns"]))
    assert (b["start_ns"] - s["start_ns"][0]).to_list() == [k * shift_ns for k in range(3)]


def test_size_target_is_met_within_one_event(tmp_path):
    out = tmp_path / "sized.json.gz"
    info = make_big_trace.build(SOURCE, out, size=2_500_000)
    assert 2_500_000 - 200 <= info["json_bytes"] < 2_500_000 + 20_000
    assert ta.load(out).events.height > 0
