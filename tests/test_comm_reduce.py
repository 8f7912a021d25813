"""The job-level communication reduce on a small hand-made instance table, against plain Python.

``match_instances`` (wait / transfer across the ranks of a group) and ``summary`` (per rank,
step and type / group / dimension) run on narrow frames, a batch of ranks or one rank at a time;
here every value is recomputed row by row from the definitions in their docstrings, for the
text columns as strings and as categoricals (what the workers send), with the ranks' rows
interleaved and one rank after another (a job's table), and with batches of one rank.
"""

from __future__ import annotations

import orjson
import polars as pl
import pytest
from polars.testing import assert_frame_equal

import traceanalyzer as ta
from traceanalyzer.classify import comm, rowbatches
from traceanalyzer.reconciliation.busbw import achieved_busbw
from traceanalyzer.classify.comm import TEXT_COLS, match_instances, summary
from traceanalyzer.render import json as json_render
from traceanalyzer.views import document as report_document

from conftest import DLRM

BW_GBPS = 100.0


def _instances(layout: str = "interleaved") -> pl.DataFrame:
    """``interleaved``: rows group by group (each rank's rows in several runs); ``by_rank``:
    one rank's rows after another's (a job's table); ``categorical``: the same with the text
    columns categorical, as :func:`~traceanalyzer.classify.comm.collective_instances` makes them."""
    rows = []
    # group "g0": ranks 0 and 1 agree on 3 instances -> aligned
    for rank, starts in ((0, [100, 400, 900]), (1, [150, 380, 1000])):
        for i, t in enumerate(starts):
            rows.append((rank, 1 if i < 2 else None, f"ncclKernel_AllReduce_{i}", 7, t, t + 200, 200, "all_reduce", 4000,
                         "g0", "dp", 2, "[0, 1]", "DP", i, None))
    # group "g1": rank 0 has 2 instances, rank 1 has 1 -> not aligned, transfer estimated from bytes
    for rank, starts in ((0, [50, 600]), (1, [70])):
        for i, t in enumerate(starts):
            rows.append((rank, 2, "ncclKernel_AllGather", 9, t, t + 100, 100, "all_gather", 2_000_000, "g1", "tp", 2, None,
                         "TP", i, None))
    # group "g2": Seq args make the instance exact even with different counts; rank 1 alone in seq 5
    for rank, seqs in ((0, [4]), (1, [4, 5])):
        for s in seqs:
            rows.append((rank, 2, "ncclKernel_SendRecv", 3, 10 * s + rank, 10 * s + rank + 30, 30, "send_recv", None, "g2",
                         None, None, None, "PP", s, s))
    schema = {
        "rank": pl.Int32, "step": pl.Int64, "name": pl.String, "stream": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
        "dur_ns": pl.Int64, "coll_type": pl.String, "bytes": pl.Int64, "pg_name": pl.String, "pg_desc": pl.String,
        "group_size": pl.Int64, "pg_ranks": pl.String, "dim": pl.String, "instance": pl.Int64, "coll_seq": pl.Int64,
    }
    df = pl.DataFrame(rows, schema=schema, orient="row")
    if layout in ("by_rank", "categorical"):  # the ranks' tables one after another, a chunk each
        df = pl.concat([df.filter(pl.col("rank") == r).rechunk() for r in (0, 1)], rechunk=False)
    if layout == "categorical":
        df = df.with_columns(pl.col(c).cast(pl.Categorical) for c in TEXT_COLS)
    return df


LAYOUTS = ["interleaved", "by_rank", "categorical", "one_rank_batches"]


@pytest.fixture(params=LAYOUTS)
def layout(request, monkeypatch):
    if request.param == "one_rank_batches":  # every rank its own batch: the partial groups add up
        monkeypatch.setattr(comm, "BATCH_ROWS", 1)
        monkeypatch.setattr(comm, "RUN_ROWS", 1)
        return "categorical"
    return request.param


def _reference_match(inst: pl.DataFrame) -> list[tuple]:
    rows = inst.to_dicts()
    counts: dict[tuple, int] = {}
    for r in rows:
        counts[(r["pg_name"], r["rank"])] = counts.get((r["pg_name"], r["rank"]), 0) + 1
    out = []
    for r in rows:
        g = r["pg_name"]
        per_rank = {n for (gg, _), n in counts.items() if gg == g}
        ranks = {rk for (gg, rk) in counts if gg == g}
        same = [x for x in rows if x["pg_name"] == g and x["instance"] == r["instance"]]
        seen = len({x["rank"] for x in same})
        aligned = ((len(ranks) >= 2 and len(per_rank) == 1) or r["coll_seq"] is not None) and seen >= 2
        last = max(x["start_ns"] for x in same)
        est = None
        if r["bytes"] is not None:
            n = r["group_size"]
            factor = 2 * (n - 1) / n if r["coll_type"] == "all_reduce" else (n - 1) / n if r["coll_type"] == "all_gather" else 1.0
            est = round(r["bytes"] * factor / (BW_GBPS * 1e9) * 1e9)
        if aligned:
            transfer = max(0, r["end_ns"] - max(last, r["start_ns"]))
        elif est is not None:
            transfer = min(est, r["dur_ns"])
        else:
            transfer = None
        wait = None if transfer is None else r["dur_ns"] - transfer
        out.append((last if aligned else None, wait, transfer, (not aligned) and est is not None))
    return out


def test_rank_runs_are_each_ranks_rows_or_the_whole_frame():
    assert rowbatches.rank_runs(_instances("by_rank")) == [(0, 6), (6, 6)]
    assert rowbatches.rank_runs(_instances("interleaved")) == [(0, 12)]  # rank 0's rows in three runs
    assert rowbatches.batches([(0, 6), (6, 4), (10, 3)], 8) == [(0, 10), (10, 3)]
    assert rowbatches.chunks(_instances("by_rank")) == [(0, 6), (6, 6)]
    assert rowbatches.chunks(_instances("interleaved")) == [(0, 12)]


def test_match_instances_equals_the_row_by_row_definition(layout):
    inst = _instances(layout)
    got = match_instances(inst, BW_GBPS)
    assert got.columns[-4:] == ["last_arrival_ns", "wait_ns", "transfer_ns", "transfer_estimated"]
    assert got.select(inst.columns[:-1]).equals(inst.drop("coll_seq"))  # rows in load order, untouched
    # the four new columns are cut like the instances (so that later group-bys copy nothing)
    assert {tuple(c.chunk_lengths()) for c in got.get_columns()} == {tuple(inst.get_column("rank").chunk_lengths())}
    assert list(got.select("last_arrival_ns", "wait_ns", "transfer_ns", "transfer_estimated").iter_rows()) == _reference_match(inst)
    # spot checks by hand: g0 instance 0 ends at 300 on rank 0, last arrival 150 -> transfer 150, wait 50
    assert got.filter((pl.col("pg_name") == "g0") & (pl.col("rank") == 0) & (pl.col("instance") == 0)).select(
        "transfer_ns", "wait_ns").row(0) == (150, 50)
    # g1 is not aligned: 2 MB all_gather over 2 ranks at 100 GB/s = 10,000 ns, capped by the 100 ns kernel
    assert got.filter(pl.col("pg_name") == "g1").get_column("transfer_ns").to_list() == [100, 100, 100]
    # g2 seq 5 was seen by one rank only: no transfer
    assert got.filter((pl.col("pg_name") == "g2") & (pl.col("instance") == 5)).get_column("transfer_ns").to_list() == [None]


def test_summary_equals_a_group_by_per_view(layout):
    coll = match_instances(_instances(layout), BW_GBPS)
    expo = pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "by": pl.String, "key": pl.String,
                                "exposed_ns": pl.Int64, "overlapped_ns": pl.Int64})
    got = summary(coll, expo)
    rows = [r for r in coll.to_dicts() if r["step"] is not None]
    expected = []
    for by, col in (("type", "coll_type"), ("group", "pg_name"), ("dim", "dim")):
        keys = []
        for r in rows:
            k = (r["rank"], r["step"], r[col])
            if k not in keys:
                keys.append(k)
        for k in keys:
            grp = [r for r in rows if (r["rank"], r["step"], r[col]) == k]

            def total(c):
                vals = [r[c] for r in grp if r[c] is not None]
                return sum(vals) if vals else None

            expected.append({
                "rank": k[0], "step": k[1], "by": by, "key": k[2], "count": len(grp), "bytes": total("bytes"),
                "time_ns": sum(r["dur_ns"] for r in grp), "wait_ns": total("wait_ns"), "transfer_ns": total("transfer_ns"),
                "transfer_estimated": any(r["transfer_estimated"] for r in grp), "pg_desc": grp[0]["pg_desc"],
                "group_size": grp[0]["group_size"], "pg_ranks": grp[0]["pg_ranks"], "dim": grp[0]["dim"],
            })
    key = lambda d: (d["rank"], d["step"], d["by"], d["key"])  # noqa: E731
    got_rows = sorted(got.select(list(expected[0])).to_dicts(), key=key)
    assert got_rows == sorted(expected, key=key)
    assert got.height == len(expected)
    # its text columns are strings whatever the collectives' are (``key`` joins the exposure)
    assert {c: got.schema[c] for c in ("key", "pg_desc", "pg_ranks", "dim")} == dict.fromkeys(("key", "pg_desc", "pg_ranks", "dim"), pl.String)


def _analysis_docs(an) -> tuple[bytes, bytes]:
    report = report_document.build(an, generated_utc="2026-01-01T00:00:00Z", command=["x"])
    return json_render.dumps(json_render.document(an)), orjson.dumps(report, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)


def test_categorical_text_columns_never_reach_an_output(monkeypatch):
    """DLRM, 8 ranks: the analysis with the collectives' text columns categorical (as made) and
    with them as plain strings (TEXT_COLS emptied) give byte-identical breakdown JSON and report
    model, the same comm summary and bus-bandwidth table, and the same collectives once cast."""
    trace = ta.load(DLRM)
    coded = ta.analyze(trace)
    assert all(coded.collectives.schema[c] == pl.Categorical for c in TEXT_COLS)
    monkeypatch.setattr(comm, "TEXT_COLS", [])
    plain = ta.analyze(trace)
    assert all(plain.collectives.schema[c] == pl.String for c in TEXT_COLS)
    assert coded.collectives.height == plain.collectives.height > 0
    assert_frame_equal(coded.collectives.with_columns(pl.col(c).cast(pl.String) for c in TEXT_COLS), plain.collectives)
    assert_frame_equal(coded.comm, plain.comm)
    assert_frame_equal(coded.cross_rank, plain.cross_rank)
    assert_frame_equal(achieved_busbw(coded.collectives, gpu="V100"), achieved_busbw(plain.collectives, gpu="V100"))
    assert _analysis_docs(coded) == _analysis_docs(plain)
