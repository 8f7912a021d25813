"""What-if and layout search: published pairs within 10 %, scaling rules checked by hand on a real
trace, the enumeration against a plain-Python one, the nccl-tests curve by scope, bad --set values."""

from __future__ import annotations

import json
from dataclasses import replace

import polars as pl
import pytest

from traceanalyzer.baselines import read_nccl_tests
from traceanalyzer.model import load_config
from traceanalyzer.model.config import (
    BatchConfig, HardwareConfig, ModelConfig, ParallelConfig, RecomputeConfig, Reported, RunConfig,
)
from traceanalyzer.model.flops import step_flops
from traceanalyzer.model.search import enumerate_layouts, search_layouts
from traceanalyzer.model.whatif import SetUsageError, anchor_from_config, apply_sets, project
from traceanalyzer.reconciliation.anchor import anchor_from_analysis, whatif
from traceanalyzer.errors import ConfigError

from conftest import FIXTURES, ROOT, SHARED, run_cli

EX = ROOT / "docs" / "examples"
ISSUE = EX / "issue1031-70b.toml"
README70 = EX / "megatron-readme-70b.toml"
MI300X = SHARED / "traces" / "kineto-public" / "tracelens-amd" / "mi300x_resnet_act_checkpoint_rank0.json.gz"
MI300X_CFG = EX / "traces" / "mi300x-resnet18-ckpt.toml"
BASE = FIXTURES / "baselines" / "all_reduce_perf_h100_2node.txt"


def gpt(layers, hidden, heads, *, gbs, gpus, recompute, tp, pp, sp=False, step=None):
    """GPT-3-style model of Narayanan 2021 / Korthikanti 2022 (seq 2048, vocab 51200, A100)."""
    return RunConfig(
        convention="megatron2024",
        model=ModelConfig(layers=layers, hidden=hidden, heads=heads, vocab=51200, seq_length=2048),
        batch=BatchConfig(global_batch=gbs),
        parallel=ParallelConfig(tp=tp, pp=pp, dp=gpus // (tp * pp), sequence_parallel=sp),
        recompute=RecomputeConfig(granularity=recompute),
        hardware=HardwareConfig(gpu="A100", num_gpus=gpus),
        reported=Reported(step_time_s=step, convention="megatron2024"),
    ).validate()


# ------------------------------------------------------------------------------------------------
# Published pairs. Korthikanti et al. 2022 (arXiv:2205.05198) Table 5: iteration time with full
# recompute and with selective recompute + sequence parallelism, same model and GPUs (Table 3
# layouts, TP 8). Published TFLOP/s/GPU = model FLOPs / (time · GPUs).
KORTHIKANTI = [  # name, layers, hidden, heads, gpus, pp, global batch, selective+SP s, full s
    ("22B", 48, 6144, 64, 8, 1, 4, 1.10, 1.42),
    ("175B", 96, 12288, 96, 64, 8, 64, 13.75, 18.13),
    ("530B", 105, 20480, 128, 280, 35, 280, 37.83, 49.05),
    ("1T", 128, 25600, 160, 512, 64, 512, 71.49, 94.42),
]
# Narayanan et al. 2021 (arXiv:2104.04473) Table 2, "PTD Parallelism" rows: the same model, global
# batch and (t, p) on 2x and 4x the GPUs, micro-batch 1, hardware TFLOP/s/GPU (full recompute).
NARAYANAN = [  # name, layers, hidden, heads, pp, global batch, [(gpus, TFLOP/s)]
    ("175B", 96, 12288, 96, 12, 1536, [(384, 153), (768, 149), (1536, 141)]),
    ("530B", 105, 20480, 128, 35, 2240, [(560, 171), (1120, 167), (2240, 159)]),
]
#: the pairs in the order of docs/validation.md's table
PAIRS = [
    *(f"Korthikanti {n} selective+SP -> full" for n in ("22B", "175B", "530B", "1T")),
    *(f"Korthikanti {n} full -> selective+SP" for n in ("22B", "175B", "530B", "1T")),
    "Narayanan 175B 384 -> 768 GPUs", "Narayanan 175B 384 -> 1536 GPUs",
    "Narayanan 530B 560 -> 1120 GPUs", "Narayanan 530B 560 -> 2240 GPUs",
]


def _docs_rows() -> list[tuple[float, float]]:
    """(published, predicted) of each row of docs/validation.md's table of published pairs."""
    lines = (ROOT / "docs" / "validation.md").read_text().splitlines()
    i = lines.index("| anchor (published) | predicted layout | published TFLOP/s/GPU | predicted | error | source |")
    rows = []
    for line in lines[i + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((float(cells[2]), float(cells[3])))
    return rows


def published_pairs():
    out = {}
    for name, L, h, a, g, pp, gbs, t_sel, t_full in KORTHIKANTI:
        sel = gpt(L, h, a, gbs=gbs, gpus=g, recompute="selective", tp=8, pp=pp, sp=True, step=t_sel)
        full = gpt(L, h, a, gbs=gbs, gpus=g, recompute="full", tp=8, pp=pp, step=t_full)
        model = step_flops(sel).model / g / 1e12
        res = project(anchor_from_config(sel), apply_sets(sel, ["recompute=full", "sequence_parallel=false"]), memory=False)
        out[f"Korthikanti {name} selective+SP -> full"] = (res["predicted"]["tflops_per_gpu"], model / t_full)
        res = project(anchor_from_config(full), apply_sets(full, ["recompute=selective", "sequence_parallel=true"]), memory=False)
        out[f"Korthikanti {name} full -> selective+SP"] = (res["predicted"]["tflops_per_gpu"], model / t_sel)
    for name, L, h, a, pp, gbs, rows in NARAYANAN:
        g0, tf0 = rows[0]
        c = gpt(L, h, a, gbs=gbs, gpus=g0, recompute="full", tp=8, pp=pp)
        c = replace(c, reported=Reported(step_time_s=step_flops(c).hardware / g0 / (tf0 * 1e12), convention="megatron2024"))
        anchor = anchor_from_config(c)
        for g, tf in rows[1:]:
            res = project(anchor, apply_sets(c, [f"dp={g // (8 * pp)}"]), memory=False)
            assert res["predicted"]["layout"]["gpus"] == g
            out[f"Narayanan {name} {g0} -> {g} GPUs"] = (res["predicted"]["hw_tflops_per_gpu"], tf)
    return out


def test_published_pairs_within_ten_percent():
    got = published_pairs()
    assert len(got) >= 5 and set(got) == set(PAIRS)
    for pair, (pred, pub) in got.items():
        assert abs(pred / pub - 1) < 0.10, pair


def test_docs_table_of_published_pairs_is_current():
    """docs/validation.md prints what the what-if computes (to the 0.1 it rounds to); the
    published column is checked against the publications in test_published_column_by_hand."""
    got = published_pairs()
    for pair, (pub, pred) in zip(PAIRS, _docs_rows(), strict=True):
        assert (round(got[pair][1], 1), round(got[pair][0], 1)) == (pub, pred), pair


@pytest.mark.parametrize("name,L,h,a,g,pp,gbs,t_sel,t_full", KORTHIKANTI)
def test_published_column_by_hand(name, L, h, a, g, pp, gbs, t_sel, t_full):
    """The published TFLOP/s/GPU of each Korthikanti pair: model FLOPs (Narayanan et al. 2021,
    App. A without recompute: 72·B·s·l·h²·(1 + s/6h + V/12lh)) over the published time and GPUs."""
    flops = 72 * gbs * 2048 * L * h**2 * (1 + 2048 / (6 * h) + 51200 / (12 * L * h))
    got = published_pairs()
    assert got[f"Korthikanti {name} selective+SP -> full"][1] == pytest.approx(flops / (t_full * g) / 1e12, rel=1e-12)
    assert got[f"Korthikanti {name} full -> selective+SP"][1] == pytest.approx(flops / (t_sel * g) / 1e12, rel=1e-12)


def test_published_anchor_reproduces_itself():
    cfg = load_config(README70)
    res = project(anchor_from_config(cfg), apply_sets(cfg, ["micro_batch=1"]), memory=False)
    assert res["anchor_summary"]["tflops_per_gpu"] == pytest.approx(419.7)
    assert res["predicted"]["tflops_per_gpu"] == pytest.approx(419.7)
    assert all(abs(t["delta_s"]) < 1e-12 for t in res["terms"])


# ------------------------------------------------------------------------------------------------
# Trace anchor: MI300X ResNet-18 with activation checkpointing (one rank of 8, 3 steps).

@pytest.fixture(scope="module")
def mi300x():
    from traceanalyzer.engine import Options, analyse

    return analyse([MI300X], Options(), workers=1, quiet=True), load_config(MI300X_CFG)


def test_trace_anchor_is_the_measured_partition(mi300x):
    analysis, cfg = mi300x
    anchor = anchor_from_analysis(analysis, cfg)
    steps = analysis.steps
    # mean step per GPU, straight from the integer-ns step durations
    assert anchor.step_s == pytest.approx(int(steps["duration_ns"].sum()) / steps.height / 1e9, rel=1e-12)
    assert anchor.terms["compute"] == pytest.approx(int(steps["compute_ns"].sum()) / steps.height / 1e9)
    assert anchor.terms["recompute"] == pytest.approx(int(steps["recompute_ns"].sum()) / steps.height / 1e9)
    same = whatif(cfg, ["dp=8"], analysis=analysis)
    a, p = same.row(0, named=True), same.row(1, named=True)
    # model FLOPs per GPU (3 × 3.6e9 FLOPs per image × 80 images over 8 GPUs) per mean step
    assert a["step_time_s"] == p["step_time_s"]
    assert a["tflops_per_gpu"] == pytest.approx(3 * 3.6e9 * 80 / 8 / anchor.step_s / 1e12, rel=1e-12)


def test_trace_scaling_rules_by_hand(mi300x):
    analysis, cfg = mi300x
    t = anchor_from_analysis(analysis, cfg).terms
    res = project(anchor_from_analysis(analysis, cfg), apply_sets(cfg, ["dp=16", "recompute=none"]), memory=False)
    got = {r["term"]: r["predicted_s"] for r in res["terms"]}
    assert res["predicted"]["layout"]["gpus"] == 16
    assert got["compute"] == pytest.approx(t["compute"] / 2)  # same global batch on twice the GPUs
    assert got["recompute"] == 0.0
    # DP gradient all-reduce: ring factor 15/16 over 7/8, and 16 GPUs span two nodes of 8: MI300X
    # Infinity Fabric 448 GB/s x 0.82 inside the node -> 50 GB/s network
    assert got["exposed_comm_dp"] == pytest.approx(t["exposed_comm_dp"] * (15 / 16) / (7 / 8) * (448 * 0.82 / 50))
    # launches: 10 -> 5 microbatches of 1 image per GPU
    for k in ("other", "idle_sync", "idle_other"):
        assert got[k] == pytest.approx(t[k] / 2)
    step = sum(got.values())
    assert res["predicted"]["step_time_s"] == pytest.approx(step)
    assert res["predicted"]["tflops_per_gpu"] == pytest.approx(3 * 3.6e9 * 80 / 16 / step / 1e12)
    # the change in TFLOP/s/GPU is split exactly into its terms
    assert sum(w["tflops"] for w in res["waterfall"]) == pytest.approx(
        res["predicted"]["tflops_per_gpu"] - res["anchor_summary"]["tflops_per_gpu"], abs=1e-9)


# ------------------------------------------------------------------------------------------------
# --set

def test_set_rederives_dp_and_keeps_the_gpus():
    cfg = load_config(ISSUE)
    new = apply_sets(cfg, ["pp=2", "recompute=selective", "sp=true", "micro_batch=2"])
    assert (new.num_gpus, new.dp, new.parallel.pp, new.microbatches) == (128, 8, 2, 4)
    assert new.recompute.granularity == "selective" and new.recompute.num_layers is None
    assert new.reported.tflops_per_gpu is None  # the reported figure belongs to the anchor only


@pytest.mark.parametrize("item,exc,words", [
    ("pp", SetUsageError, "expected KEY=VALUE"),
    ("pipe_stages=2", SetUsageError, "unknown key"),
    ("pp=two", ConfigError, "pp must be a whole number"),
    ("pp=0", ConfigError, "pp must be at least 1"),
    ("pp=3", ConfigError, "pp=3"),
    ("recompute=partial", ConfigError, "recompute must be one of none, selective, full"),
    ("sequence_parallel=maybe", ConfigError, "must be true or false"),
    ("micro_batch=128", ConfigError, "micro_batch=128"),
])
def test_bad_set_values(item, exc, words):
    with pytest.raises(exc) as e:
        apply_sets(load_config(ISSUE), [item])
    assert words in str(e.value)


@pytest.mark.parametrize("item,code,key", [("pp", 2, "pp"), ("bogus=1", 2, "bogus"), ("pp=3", 7, "pp"),
                                           ("recompute=sometimes", 7, "recompute"), ("tp=3", 7, "tp")])
def test_cli_bad_set_exits_with_one_line(item, code, key):
    r = run_cli("whatif", "-c", ISSUE, "--set", item)
    assert r.returncode == code
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0] and "Traceback" not in r.stderr


def test_cli_whatif_json_without_trace_says_so():
    r = run_cli("whatif", "-c", ISSUE, "--set", "pp=2", "--set", "recompute=selective", "--set", "sequence_parallel=true",
                "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["anchor_source"] == "reported" and "no trace given" in r.stderr
    assert doc["anchor_summary"]["tflops_per_gpu"] == pytest.approx(296.5)
    p = doc["predicted"]
    assert p["layout"]["pp"] == 2 and p["layout"]["dp"] == 8
    assert p["step_time_s"] == pytest.approx(sum(t["predicted_s"] for t in doc["terms"]))
    assert p["memory"]["fits"] is True and p["memory"]["capacity_gib"] == 80.0


# ------------------------------------------------------------------------------------------------
# search

def _plain_enumeration(L, H, kv, s, G, N, gpn):
    out = set()
    for tp in (1, 2, 4, 8, 16, 32, 64):
        if tp > gpn or H % tp or (kv % tp and tp % kv):
            continue
        for pp in range(1, min(L, 64) + 1):
            if L % pp:
                continue
            for vp in (1, 2, 3, 4, 5, 6, 8):
                if L % (pp * vp) or (vp > 1 and pp == 1):
                    continue
                for cp in (1, 2, 4, 8):
                    if s % cp or N % (tp * pp * cp):
                        continue
                    dp = N // (tp * pp * cp)
                    for mb in (1, 2, 4, 8):
                        if G % (dp * mb):
                            continue
                        for rc in ("none", "selective", "full"):
                            for sp in ((False, True) if tp > 1 else (False,)):
                                for do in (False, True):
                                    out.add((tp, pp, vp, cp, 1, dp, mb, G // (dp * mb), rc, sp, do))
    return out


def test_enumeration_matches_plain_python():
    cfg = load_config(ISSUE)
    got = enumerate_layouts(cfg)
    want = _plain_enumeration(80, 64, 64, 4096, 64, 128, 8)
    assert set(got.iter_rows()) == want and got.height == len(want) == 8142


def test_search_ranks_fitting_layouts_and_explains_pp2():
    anchor = anchor_from_config(load_config(ISSUE))
    df = search_layouts(anchor, fixed={"pp": 2, "tp": 8}, top=0)
    assert df["pp"].unique().to_list() == [2] and df["tp"].unique().to_list() == [8]
    assert df["fits"].null_count() == 0
    fit = df.filter(pl.col("fits"))
    assert fit["rank"].to_list() == list(range(1, fit.height + 1))
    assert fit["tflops_per_gpu"].is_sorted(descending=True)
    assert df.filter(~pl.col("fits"))["rank"].null_count() == df.filter(~pl.col("fits")).height
    assert (fit["margin_gib"] >= 0).all() and (df.filter(~pl.col("fits"))["margin_gib"] < 0).all()
    # the plain TP8 PP2 layout of the question: full recompute fits, no recompute without SP does not
    one = df.filter(pl.col("vp") == 1, pl.col("micro_batch") == 1, pl.col("cp") == 1, pl.col("distributed_optimizer"))
    by = {(r["recompute"], r["sequence_parallel"]): r for r in one.iter_rows(named=True)}
    assert by[("full", False)]["fits"] and by[("selective", True)]["fits"]
    assert by[("selective", True)]["tflops_per_gpu"] > by[("full", False)]["tflops_per_gpu"]


def test_search_lazily_sizes_memory_and_keeps_the_anchor():
    anchor = anchor_from_config(load_config(ISSUE))
    df = search_layouts(anchor, top=5)
    assert df.filter(pl.col("fits")).height >= 5
    assert df.head(5)["fits"].all() and df.head(5)["rank"].to_list() == [1, 2, 3, 4, 5]
    me = df.filter(pl.col("is_anchor"))
    assert me.height == 1 and me["tflops_per_gpu"][0] == pytest.approx(296.5) and me["fits"][0] is not None


def test_cli_search_json():
    r = run_cli("whatif", "-c", ISSUE, "--search", "--set", "pp=2", "--top", "3", "-f", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["pinned"] == {"pp": 2} and len(doc["layouts"]) == 3 and doc["valid_layouts"] > 3
    assert all(row["pp"] == 2 and row["fits"] for row in doc["layouts"])


# ------------------------------------------------------------------------------------------------
# nccl-tests curve in the what-if

def test_whatif_reads_the_baseline_curve_by_scope():
    cfg = load_config(ISSUE)
    intra = read_nccl_tests(BASE).with_columns(pl.lit("intra").alias("scope"))
    res = project(anchor_from_config(cfg, baseline=intra), apply_sets(cfg, ["pp=4"]), memory=False)
    tp = next(t for t in res["terms"] if t["term"] == "exposed_comm_tp")
    # by hand: TP8 without SP, full recompute, pp 4 -> 20 layers per GPU, dp 4 -> 16 microbatches:
    # 4 forward all-reduces (2 + 2 recomputed) of S = 64 MiB per layer per microbatch exposed,
    # each 2·(7/8)·S on the ring, at the baseline's 99.74 GB/s at 64 MiB
    S = 2 * 4096 * 8192
    exposed = 16 * 4 * 20 * 2 * (7 / 8) * S
    assert tp["predicted_s"] == pytest.approx(exposed / 99.74e9, rel=1e-9)
    # the inter-node curve does not serve the TP group: the hardware table's 369 GB/s stays
    res = project(anchor_from_config(cfg, baseline=read_nccl_tests(BASE)), apply_sets(cfg, ["pp=4"]), memory=False)
    tp = next(t for t in res["terms"] if t["term"] == "exposed_comm_tp")
    assert tp["predicted_s"] == pytest.approx(exposed / 369e9, rel=1e-9)


def test_reconcile_predictions_use_the_baseline(mi300x):
    from traceanalyzer.model.commcurve import with_baseline
    from traceanalyzer.model.parallel import comm_volumes
    from traceanalyzer.reconciliation import waterfall

    analysis, _ = mi300x
    cfg = load_config(ISSUE)
    cfg = replace(cfg, parallel=replace(cfg.parallel, distributed_optimizer=False, overlap_param_gather=False))
    base = read_nccl_tests(BASE)
    wf = waterfall(analysis, cfg, baseline=base)
    dp = next(t for t in wf["terms"] if t["term"] == "exposed_comm_dp")
    want = sum(c.time_s for c in with_baseline(comm_volumes(cfg), cfg, base) if c.dim == "dp") * 1e3
    plain = sum(c.time_s for c in comm_volumes(cfg) if c.dim == "dp") * 1e3
    assert dp["predicted_ms"] == pytest.approx(want) and want != pytest.approx(plain)
    assert "nccl-tests baseline" in dp["predicted"]
