"""predict() and compare_predictions(): the 70B case of NVIDIA/Megatron-LM#1031."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from traceanalyzer.model import compare_predictions, load_config, predict

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
PUB = load_config(EXAMPLES / "megatron-readme-70b.toml")
USR = load_config(EXAMPLES / "issue1031-70b.toml")


def stage_imbalance(layers, pp, recompute_factor, s=4096, h=8192, V=131072):
    """Last pipeline stage / mean stage, by hand: per sequence, a GPT layer costs
    72·s·h²·(1 + s/6h) model FLOPs (2024 convention; × 4/3 under full recompute), the output
    layer 6·s·h·V (never recomputed), on the last stage only."""
    layer = 72 * s * h**2 * (1 + s / (6 * h)) * recompute_factor
    stage, logits = layer * layers / pp, 6 * s * h * V
    return (stage + logits) / (stage + logits / pp)


IMB_PUB = stage_imbalance(84, 2, 1.0)
IMB_USR = stage_imbalance(80, 8, 4 / 3)


def test_last_stage_imbalance_published_figures():
    # PP8 70B (80 layers, full recompute): the last stage does ~8 % more than the mean stage;
    # PP2 (84 layers, no recompute): ~1.4 %.
    assert round(100 * (IMB_USR - 1), 1) == 8.0
    assert round(100 * (IMB_PUB - 1), 1) == 1.4
    assert predict(USR)["pipeline_imbalance"] == pytest.approx(IMB_USR, rel=1e-12)
    assert predict(PUB)["pipeline_imbalance"] == pytest.approx(IMB_PUB, rel=1e-12)
    no_pp = replace(PUB, parallel=replace(PUB.parallel, pp=1, dp=96))
    assert predict(no_pp)["pipeline_imbalance"] == 1.0


def test_published_run_anchor():
    p = predict(PUB)
    # README H100 table: 419.7 TFLOP/s/GPU on 768 GPUs, batch 384, 2024 formula ->
    # iteration time 2.18 s (analytic_model.md §4.1, derived from the published row).
    assert p["reported"]["step_time_s"] == pytest.approx(2.18, abs=0.005)
    assert p["tflops_per_gpu"] == pytest.approx(419.7, rel=1e-12)
    assert p["bubble_fraction"] == 0.125  # PP 2, 8 microbatches: (p−1)/m
    # the waterfall terms sum to the peak
    assert sum(p["waterfall"].values()) == pytest.approx(989.4, rel=1e-12)
    # no recompute, TP/DP hidden: the losses are kernel efficiency and the bubble only
    assert p["waterfall"]["recompute"] == 0 and p["waterfall"]["exposed_comm_tp"] == 0
    assert p["waterfall"]["bubble"] == pytest.approx(989.4 / 9)  # bubble = 1/9 of the step


def test_ideal_is_peak():
    p = predict(replace(PUB, reported=replace(PUB.reported, tflops_per_gpu=None)))
    assert p["kernel_efficiency"] == 1.0
    # at peak with no bubble the step would take F/(GPUs·peak) = 0.923 s; with the bubble and the
    # last stage's extra logits, 1/((1+1/8)·imbalance) of peak
    assert p["ideal_step_time_s"] == pytest.approx(7.0172e17 / 768 / 989.4e12, rel=1e-4)
    assert p["mfu"] == pytest.approx(1 / (1.125 * IMB_PUB))
    assert sum(p["waterfall"].values()) == pytest.approx(989.4, rel=1e-12)


def _hfu_over_mfu(L=80, h=8192, s=4096, V=131072):
    """Full recompute's hardware / model FLOPs by hand (Narayanan et al. 2021 App. A, 2024
    convention): one more forward of the layers, 72·s·L·h²·(1 + s/6h) / 3, over the model FLOPs
    72·s·L·h²·(1 + s/6h) + 6·s·h·V (per sequence)."""
    layers, logits = 72 * s * L * h**2 * (1 + s / (6 * h)), 6 * s * h * V
    return 1 + layers / 3 / (layers + logits)


@pytest.mark.parametrize("gbs", [32, 64, 128, 256])
def test_issue_1031_sweep_reproduces_the_notes(gbs):
    """The first-order sketch, exactly: the published 419.7 TFLOP/s/GPU (PP2, bubble 1/8) carried
    to PP8 with m = gbs/2 micro-batches: × 1.125 / (1 + 7/m) (bubble (p−1)/m), / the HFU/MFU of
    full recompute (1.3283, by hand above; the sketch rounds it to 1.33), × the ratio of the two
    runs' last-stage imbalances (by hand above); TP communication hidden."""
    assert round(_hfu_over_mfu(), 4) == 1.3283
    eff = predict(PUB)["kernel_efficiency"]
    u = predict(USR, kernel_efficiency=eff, global_batch=gbs, exposed_comm={"tp": 0.0})
    m = gbs // 2
    want = 419.7 * 1.125 / (1 + 7 / m) / _hfu_over_mfu() * IMB_PUB / IMB_USR
    assert u["tflops_per_gpu"] == pytest.approx(want, rel=1e-9)


def test_worked_example_tables_match_predict():
    """docs/worked-example-70b.md: the sweep rows are what predict() computes."""
    doc = (EXAMPLES.parent / "worked-example-70b.md").read_text()
    eff = predict(PUB)["kernel_efficiency"]
    for gbs in (32, 64, 128, 256, 512):
        u = predict(USR, kernel_efficiency=eff, global_batch=gbs)
        h = predict(USR, kernel_efficiency=eff, global_batch=gbs, exposed_comm={"tp": 0.0})
        row = f"| {gbs} | {gbs // 2} | {u['bubble_fraction']:.3f} | {u['tflops_per_gpu']:.1f} | {h['tflops_per_gpu']:.1f} |"
        assert row in doc, row
        c = compare_predictions(u, PUB_PRED)
        cs = c["causes"]
        row = (f"| {gbs} | {cs['recompute']:+.1f} | {cs['bubble']:+.1f} | {cs['exposed_comm']:+.1f} | "
               f"{cs['pipeline_imbalance']:+.1f} | {c['predicted_gap']:+.1f} | {c['unexplained']:+.1f} | "
               f"{c['reported_gap']:+.1f} |").replace("-", "−")
        assert row in doc, row


PUB_PRED = predict(PUB)


def test_unknown_global_batch_shows_the_spread(tmp_path):
    """predict with no global batch: a warning on stderr and one row per batch, not one verdict."""
    import orjson

    from conftest import run_cli

    text = (EXAMPLES / "issue1031-70b.toml").read_text().replace("global_batch = 64\n", "")
    cfg = tmp_path / "nogbs.toml"
    cfg.write_text(text)
    r = run_cli("predict", "--config", cfg, "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["global_batch_known"] is False
    assert [p["layout"]["global_batch"] for p in doc["sweep"]] == [2, 4, 8, 16, 32, 64]  # DP 2 × m
    assert "global batch is unknown" in r.stderr and "global batch is unknown" in doc["warnings"][0]
    assert "warning" not in r.stdout.lower().split('"warnings"')[0]


def test_fp8_mfu_against_both_peaks():
    fp8 = replace(PUB, hardware=replace(PUB.hardware, precision="fp8"), reported=replace(PUB.reported, tflops_per_gpu=None))
    p = predict(fp8)
    assert p["hardware"]["peak_tflops"] == 1978.9 and p["hardware"]["bf16_peak_tflops"] == 989.4
    assert p["hardware"]["mfu_denominator"] == "dense fp8 peak"
    assert p["mfu_vs_bf16_peak"] == pytest.approx(p["mfu"] * 1978.9 / 989.4, rel=1e-12)


def test_worked_example_prose_numbers():
    """The numbers quoted in the prose of docs/worked-example-70b.md, re-derived."""
    doc = (EXAMPLES.parent / "worked-example-70b.md").read_text()
    eff = PUB_PRED["kernel_efficiency"]
    assert f"= 0.{round(1000 * eff)}\nof peak" in doc or f"{eff:.3f}" in doc
    for gbs in (64, 128, 256):
        h = predict(USR, kernel_efficiency=eff, global_batch=gbs, exposed_comm={"tp": 0.0})
        c = compare_predictions(h, PUB_PRED)
        cs = c["causes"]
        row = (f"| {gbs} | {cs['recompute']:+.1f} | {cs['bubble']:+.1f} | {cs['pipeline_imbalance']:+.1f} | "
               f"{c['predicted_gap']:+.1f} | {c['unexplained']:+.1f} |").replace("-", "−")
        assert row in doc, row
    own = predict(USR)
    assert f"implies 0.{round(1000 * own['kernel_efficiency'])} of" in doc
    pp = next(c for c in own["comm"] if c["dim"] == "pp")
    assert f"PP p2p ({pp['bytes'] / 1e9:.2f} GB per GPU per step" in doc  # both directions: 0.54 GB
    llama = replace(USR, model=replace(USR.model, kv_heads=8, ffn=28672, activation="swiglu", vocab=32000)).validate()
    a = predict(llama, kernel_efficiency=eff)
    b = predict(llama, kernel_efficiency=eff, exposed_comm={"tp": 0.0})
    assert f"GBS 64 predicts {a['tflops_per_gpu']:.1f} (TP exposed) to {b['tflops_per_gpu']:.1f} (TP hidden)" in doc
    assert f"({100 * (a['pipeline_imbalance'] - 1):.1f} % instead of" in doc
