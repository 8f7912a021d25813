"""``predict --baseline``: each communication family's bandwidth read off an nccl-tests curve at
its message size, the message sizes checked by hand."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import polars as pl
import pytest

from traceanalyzer.baselines import parse_nccl_tests, read_nccl_tests
from traceanalyzer.model import load_config, predict
from traceanalyzer.model.commcurve import message_sizes
from traceanalyzer.model.parallel import comm_volumes

from conftest import FIXTURES, ROOT, run_cli

CFG = ROOT / "docs" / "examples" / "issue1031-70b.toml"  # TP8 PP8 DP2, no SP, bf16, s 4096, b 1, h 8192
BASE = FIXTURES / "baselines" / "all_reduce_perf_h100_2node.txt"


def test_message_sizes_by_hand():
    cfg = load_config(CFG)
    comms = {c.what: c for c in comm_volumes(cfg)}
    S = 2 * 4096 * 1 * 8192  # bf16 activation [s, b, h] = 64 MiB
    assert message_sizes(cfg, comms["all-reduce (no SP)"]) == ([("all_reduce", S)], 8)
    assert message_sizes(cfg, comms["p2p send/recv"]) == ([("send_recv", S / 8)], 2)
    # --overlap-grad-reduce: Megatron-Core's default bucket max(40e6, 1e6 · dp) = 40e6 parameters
    assert message_sizes(cfg, comms["reduce-scatter grads"]) == ([("reduce_scatter", 40e6 * 4)], 2)
    assert message_sizes(cfg, comms["all-gather params"]) == ([("all_gather", 40e6 * 2)], 2)
    off = replace(cfg, parallel=replace(cfg.parallel, overlap_grad_reduce=False))
    (coll, size), = message_sizes(off, comms["reduce-scatter grads"])[0]
    h, L, V = 8192, 80, 131072
    psi = L * (4 * h * h + 2 * h * 32768) / (8 * 8) + h * V / 8  # one bucket: all the GPU's parameters
    assert (coll, size) == ("reduce_scatter", pytest.approx(psi * 4))


def intra(df):
    """The same measured curve labelled as taken inside one node (as an 8-GPU run's would be)."""
    return df.with_columns(pl.lit("intra").alias("scope"))


def test_predict_reads_bandwidth_off_the_baseline():
    cfg = load_config(CFG)
    plain = {c["what"]: c for c in predict(cfg)["comm"]}
    got = {c["what"]: c for c in predict(cfg, baseline=intra(read_nccl_tests(BASE)))["comm"]}
    tp = got["all-reduce (no SP)"]
    assert plain["all-reduce (no SP)"]["gbps"] == pytest.approx(450 * 0.82)
    assert tp["gbps"] == 99.74  # the baseline's all-reduce at exactly 64 MiB
    assert tp["time_s"] == pytest.approx(tp["bytes"] / 99.74e9) and tp["bytes"] == plain["all-reduce (no SP)"]["bytes"]
    assert "all_reduce 99.7 GB/s at 64 MiB" in tp["note"]
    for w in ("p2p send/recv", "reduce-scatter grads", "all-gather params"):
        assert got[w]["gbps"] == plain[w]["gbps"] and "in the baseline: hardware-table" in got[w]["note"]


def test_sizes_outside_the_baseline_keep_the_table():
    small = parse_nccl_tests((BASE).read_text().split("  67108864")[0], source="all_reduce_perf.txt")  # up to 32 MiB
    tp = {c["what"]: c for c in predict(load_config(CFG), baseline=intra(small))["comm"]}["all-reduce (no SP)"]
    assert tp["gbps"] == pytest.approx(369.0) and "outside the baseline's measured sizes" in tp["note"]


def test_baseline_curve_is_chosen_by_scope():
    # The fixture is a 2-node (inter-node) all-reduce: the TP8 group inside one node must not read
    # it, the DP group (TP8 x DP2 = 16 GPUs, two nodes) must.
    cfg = load_config(CFG)
    cfg = replace(cfg, parallel=replace(cfg.parallel, distributed_optimizer=False))  # DP: one all-reduce
    base = read_nccl_tests(BASE)
    got = {c["what"]: c for c in predict(cfg, baseline=base)["comm"]}
    tp, dp = got["all-reduce (no SP)"], got["all-reduce grads"]
    assert tp["gbps"] == pytest.approx(369.0) and "only inter-node all_reduce curves" in tp["note"]
    assert dp["scope"] == "inter-node"
    # by hand: bucket of 40e6 fp32 gradients = 160e6 B, between the measured 128 MiB and 256 MiB
    pts = dict(base.filter(pl.col("placement") == "out_of_place").select("size_bytes", "busbw_gbps").iter_rows())
    lo, hi = pts[2**27], pts[2**28]
    want = lo + (hi - lo) * (math.log2(160e6) - 27)
    assert dp["gbps"] == pytest.approx(want, rel=1e-9) and "all_reduce" in dp["note"]
    # an intra-node curve serves the TP group and not the DP group
    got = {c["what"]: c for c in predict(cfg, baseline=intra(base))["comm"]}
    assert got["all-reduce (no SP)"]["gbps"] == 99.74
    assert got["all-reduce grads"]["gbps"] == pytest.approx(50.0) and "only intra-node" in got["all-reduce grads"]["note"]


def test_cli_predict_with_baseline():
    r = run_cli("predict", "-c", CFG, "--baseline", BASE, "-f", "json")
    assert r.returncode == 0, r.stderr
    comm = {c["what"]: c for c in json.loads(r.stdout)["prediction"]["comm"]}
    assert comm["all-reduce (no SP)"]["gbps"] == pytest.approx(369.0)  # an inter-node curve does not serve TP
