"""The causes in the JSON document, the steps frame and the terminal (--detail)."""

from __future__ import annotations

import orjson
import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.classify import COMM_DIM_FIELDS, IDLE_FIELDS
from traceanalyzer.render import json as json_render

from conftest import DEMO, DLRM, independent_steps, run_cli


def test_steps_frame_has_the_cause_columns_the_waterfall_reads():
    steps = ta.analyze(ta.load(DEMO)).steps
    for c in ["idle_host_bound_us", "idle_sync_us", "idle_bubble_us", "idle_other_us", "exposed_comm_dp_us", "exposed_comm_tp_us", "exposed_comm_pp_us", "exposed_comm_unknown_us"]:
        assert c in steps.columns
    assert (steps["exposed_comm_dp_ns"] == steps["exposed_comm_ns"]).all()  # one default_pg of 8 ranks


@pytest.mark.parametrize("path,ref", independent_steps())
def test_cause_columns_sum_to_the_independent_bucket_on_every_real_trace(path, ref):
    """The idle causes and the exposed-comm dimensions of the steps frame sum to the idle and
    exposed comm counted independently from the raw JSON (tests/data/hta_reference.json)."""
    s = ta.analyze(ta.load(path)).steps.sort("start_ns")
    assert s.height == len(ref) > 0
    assert s.select(pl.sum_horizontal([f"{f}_ns" for f in IDLE_FIELDS])).to_series().to_list() == [r["idle_ns"] for r in ref]
    assert s.select(pl.sum_horizontal([f"{f}_ns" for f in COMM_DIM_FIELDS])).to_series().to_list() == [r["exposed_comm_ns"] for r in ref]


def test_json_document_keeps_old_keys_and_adds_causes():
    doc = orjson.loads(json_render.dumps(json_render.document(ta.analyze(ta.load(DLRM)))))
    assert doc["schema_version"] == 1
    r0 = doc["ranks"][0]
    step = r0["steps"][0]
    for k in ["step", "start_us", "duration_us", "compute_us", "recompute_us", "exposed_comm_us", "overlapped_comm_us", "other_us", "idle_us"]:
        assert k in step
    assert step["idle_host_bound_us"] + step["idle_sync_us"] + step["idle_bubble_us"] + step["idle_other_us"] == pytest.approx(step["idle_us"], abs=1e-6)
    # rank 0, hand-derived (tests/test_comm.py, test_idle.py): wait of the 5 all-to-alls and 3 all-reduces
    by_type = {t["type"]: t for t in r0["collectives"]["by_type"]}
    assert by_type["all_to_all"]["count"] == 5 and by_type["all_reduce"]["count"] == 3
    assert by_type["all_to_all"]["wait_us"] + by_type["all_reduce"]["wait_us"] == 5580.0
    assert by_type["all_to_all"]["exposed_us"] + by_type["all_reduce"]["exposed_us"] == step["exposed_comm_us"]
    assert not by_type["all_reduce"]["transfer_estimated"]
    assert r0["collectives"]["by_group"][0]["dimension"] == "DP"
    assert r0["recompute_ops"] == []
    cr = doc["cross_rank"]
    assert len(cr) == 1 and cr[0]["slowest_rank"] == 1 and cr[0]["waited_on_rank"] == 7
    assert cr[0]["skew_us"] == cr[0]["max_us"] - cr[0]["median_us"]


def test_json_recompute_ops_on_the_checkpointing_trace():
    doc = json_render.document(ta.analyze(ta.load(DEMO)))
    ops = {o["name"]: o for o in doc["ranks"][0]["recompute_ops"]}
    assert ops["aten::conv2d"]["count"] == 57
    assert sum(o["gpu_us"] for o in ops.values()) == pytest.approx(4122.223)
    assert doc["cross_rank"] == []


def test_cli_detail_prints_the_cause_tables():
    r = run_cli("breakdown", DLRM, "--detail")
    assert r.returncode == 0, r.stderr
    for title in ("Idle by cause", "Communication per rank", "Across ranks"):
        assert title in r.stdout
    r = run_cli("breakdown", DEMO, "--detail")
    assert "Recomputed ops" in r.stdout and "aten::conv2d" in r.stdout
    assert "is an estimate" in r.stderr


def test_cli_rejects_bad_cause_options():
    r = run_cli("breakdown", DEMO, "--recompute-range", "(")
    assert r.returncode == 2 and "--recompute-range" in r.stderr  # usage errors
    r = run_cli("breakdown", DEMO, "--bus-bw", "-1")
    assert r.returncode == 2 and "--bus-bw" in r.stderr
