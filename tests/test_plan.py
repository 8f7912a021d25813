"""``plan``: the arithmetic by hand, the published GPU-hours of public training runs reproduced
within the error their published throughput and token counts allow (the table in
docs/validation.md), measured margins from a trace, and bad inputs (exit 7, one line)."""

from __future__ import annotations

import math

import polars as pl
import pytest

import traceanalyzer as ta
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import load_config
from traceanalyzer.model.runplan import measure_trace, parse_count, parse_range, plan_run

from conftest import DEMO, FIXTURES, run_cli

END_TO_END = {"framework": 0, "jitter": 0, "data": 0}  # published throughputs are logged training throughputs


def test_parse_count_and_range():
    assert parse_count("15T") == 15e12 and parse_count("366B") == 366e9 and parse_count("1.5e13") == 1.5e13
    assert parse_count("2_000k") == 2e6 and parse_count("405 b") == 405e9 and parse_count(7) == 7.0
    assert parse_range("38-43%", "x", percent_ok=True) == (0.38, 0.43)
    assert parse_range("145-155", "x") == (145.0, 155.0) and parse_range("150", "x") == (150.0, 150.0)
    for bad in ("15X", "0", "-1T", "T", "nan", "1e999", ""):
        with pytest.raises(ConfigError):
            parse_count(bad)


def test_arithmetic_by_hand():
    p = plan_run("15.6T", params="405B", tflops=400, gpus=16384, gpu_power_w=700, price_per_gpu_hour=2.0,
                 margins={"framework": 0, "jitter": 0, "data": 0, "interruptions": 0})
    flops = 6 * 405e9 * 15.6e12  # 3.7908e25, the Llama 3 paper's "3.8 × 10^25"
    assert p["total_flops"] == pytest.approx(flops)
    hours = flops / 400e12 / 3600
    assert p["gpu_hours"]["expected"] == pytest.approx(hours)
    assert p["wall_clock_days"]["expected"] == pytest.approx(hours / 16384 / 24)
    assert p["energy_mwh"]["expected"] == pytest.approx(hours * 700 / 1e6)
    assert p["cost"]["expected"] == pytest.approx(hours * 2.0)
    # default margins (all assumed): low = 1.10 × 1.05, high = 1.15 × 1.10 × 1.05 × 1.11
    q = plan_run("15.6T", params="405B", tflops=400)
    assert q["margin_factor"]["low"] == pytest.approx(1.10 * 1.05)
    assert q["margin_factor"]["high"] == pytest.approx(1.15 * 1.10 * 1.05 * 1.11)
    assert all(m["source"].startswith("assumed") for m in q["margins"].values())
    assert q["wall_clock_days"] is None and any("wall-clock" in n for n in q["notes"])


# published: (label, plan kwargs, published GPU-hours, reproduced?)
RUNS = [
    # Llama 3.1 405B: model card 30.84M H100-hours; Llama 3 paper: 15.6T tokens, BF16 MFU 38-43 %
    ("llama3.1-405b", dict(tokens="15.6T", params="405B", mfu="38-43%", gpu="H100 SXM"), 30.84e6),
    # BLOOM-176B: 366B tokens, "about 150 TFLOP per GPU per second" (Megatron-DeepSpeed, with
    # activation checkpointing: hardware FLOPs), 1,082,880 A100-hours (LLaMA paper, Table 15)
    ("bloom-176b", dict(tokens="366B", cfg="bloom", convention="megatron2024", flops="hardware", tflops="145-155"), 1_082_880),
    # LLaMA-65B: 1.4T tokens at "around 380 tokens/sec/GPU", 1,022,362 A100-hours (LLaMA paper)
    ("llama-65b", dict(tokens="1.4T", params="65.2B", tflops=(6 * 65.2e9 * 375 / 1e12, 6 * 65.2e9 * 385 / 1e12)), 1_022_362),
]


@pytest.mark.parametrize("label, kw, published", RUNS, ids=[r[0] for r in RUNS])
def test_published_runs_reproduced(label, kw, published):
    kw = dict(kw)
    if kw.pop("cfg", None):
        kw["cfg"] = load_config(FIXTURES / "plan" / "bloom_176b.toml")
    p = plan_run(margins=END_TO_END, **kw)
    h = p["gpu_hours"]
    assert h["low"] <= published <= h["high"], (label, h, published)
    assert abs(h["expected"] / published - 1) < 0.11


def test_published_numbers_by_hand():
    # Llama 3.1 405B at MFU 38 % and 43 % of 989.4 TFLOP/s: 28.0M and 24.75M GPU-hours before interruptions
    p = plan_run("15.6T", params="405B", mfu="38-43%", gpu="H100 SXM", margins=END_TO_END)
    f = 6 * 405e9 * 15.6e12
    assert p["gpu_hours_ideal"]["high"] == pytest.approx(f / (0.38 * 989.4e12) / 3600)
    assert p["gpu_hours_ideal"]["low"] == pytest.approx(f / (0.43 * 989.4e12) / 3600)
    assert p["gpu_hours"]["high"] == pytest.approx(f / (0.38 * 989.4e12) / 3600 * 1.11)
    # BLOOM: Megatron-DeepSpeed's 96·B·s·l·h²·(1 + s/6h + V/16lh) per step (checkpointing factor 4)
    L, h, s, V = 70, 14336, 2048, 250880
    per_token = 96 * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    b = plan_run("366B", load_config(FIXTURES / "plan" / "bloom_176b.toml"), convention="megatron2024", flops="hardware",
                 tflops=150, margins=END_TO_END)
    assert b["flops_per_token"] == pytest.approx(per_token, rel=1e-12)
    assert b["gpu_hours_ideal"]["expected"] == pytest.approx(366e9 * per_token / 150e12 / 3600)  # 972,993


def test_opt_175b_is_not_reproduced_and_says_why():
    # OPT-175B: 180B tokens at "up to 147 TFLOP/s per GPU" on 992 A100s, 809,472 GPU-hours (LLaMA
    # paper, Table 15): 6·N·T / 147 TFLOP/s is 357k GPU-hours, 2.27× less; the published figure holds
    # the restarts and rollbacks of the OPT logbook and 147 is a peak, not an average.
    p = plan_run("180B", params="175B", tflops=147)
    assert p["gpu_hours_ideal"]["expected"] == pytest.approx(6 * 175e9 * 180e9 / 147e12 / 3600)
    assert 809_472 / p["gpu_hours_ideal"]["expected"] == pytest.approx(2.267, abs=0.001)
    assert 809_472 > p["gpu_hours"]["high"]


def test_measured_margins_from_a_trace():
    steps = ta.analyze(ta.load(DEMO)).steps
    m = measure_trace(steps)
    d = sorted(steps.group_by("step").agg(pl.col("duration_ns").max())["duration_ns"].to_list())
    assert m["steps"] == 3 and m["median_s"] == pytest.approx(d[1] / 1e9)
    assert m["mean_s"] == pytest.approx(sum(d) / 3 / 1e9)
    m.update(flops_per_step=1e15, num_gpus=8)
    p = plan_run("1T", params="1B", measured=m, gpus=64)
    assert p["throughput_tflops_per_gpu"]["expected"] == pytest.approx(1e15 / (d[1] / 1e9 * 8) / 1e12)
    mg = p["margins"]
    assert mg["framework"]["high"] == mg["data"]["high"] == 0.0 and mg["framework"]["source"].startswith("measured")
    lo = max(0.0, sum(d) / 3 / d[1] - 1)
    assert mg["jitter"]["low"] == pytest.approx(lo) and mg["jitter"]["source"].startswith("measured over 3 steps")
    assert any("8 GPUs is assumed to hold on 64" in n for n in p["notes"])


@pytest.mark.parametrize("args, msg, code", [
    # a bad value of one option: a usage error (exit 2) naming it
    (["--tokens", "15X", "--params", "405B", "--tflops", "400"], "--tokens '15X': unknown unit 'X'", 2),
    (["--tokens", "0", "--params", "405B", "--tflops", "400"], "--tokens '0': must be a positive number", 2),
    (["--tokens", "-3T", "--params", "405B", "--tflops", "400"], "must be a positive number", 2),
    (["--tokens", "15T", "--params", "405B", "--mfu", "150%", "--gpu", "H100"], "a fraction of the peak", 2),
    (["--tokens", "15T", "--params", "405B", "--tflops", "400", "--gpus", "0"], "'--gpus'", 2),
    # a run that cannot be planned from what was given: exit 7
    (["--tokens", "15T", "--params", "405B"], "give exactly one throughput", 7),
    (["--tokens", "15T", "--tflops", "400"], "needs the parameter count", 7),
    (["--tokens", "15T", "--params", "405B", "--tflops", "400", "--margin", "jitter"], "expected NAME=LOW-HIGH", 7),
    (["--tokens", "15T", "--params", "405B", "--tflops", "400", "--margin", "weather=5%"], "--margin weather", 7),
])
def test_bad_inputs_exit_in_one_line(args, msg, code):
    r = run_cli("plan", *args)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert r.stderr.count("\n") == 1 and msg in r.stderr, r.stderr


def test_cli_plan_table_and_json():
    r = run_cli("plan", "-c", FIXTURES / "plan" / "bloom_176b.toml", "--tokens", "366B", "--convention", "megatron2024",
                "--hardware-flops", "--tflops", "150", "--price-per-gpu-hour", "1.5", "--gpu-power-w", "400", "-f", "json")
    assert r.returncode == 0, r.stderr
    import json

    p = json.loads(r.stdout)["plan"]
    assert p["gpus"] == 384 and p["gpu"] == "NVIDIA A100 (SXM4/PCIe)"
    assert p["cost"]["expected"] == pytest.approx(p["gpu_hours"]["expected"] * 1.5)
    r = run_cli("plan", "--tokens", "15T", "--params", "70B", "--mfu", "0.4", "--gpu", "H100 SXM", "--gpus", "8192")
    assert r.returncode == 0 and "wall-clock days" in r.stdout
    assert math.isfinite(ta.plan("15T", params="70B", mfu=0.4, gpu="H100 SXM").total_flops)


def test_cli_plan_from_a_trace(tmp_path):
    # plumbing only: a 6·N·T plan whose throughput is measured on the MI300X demo trace (3 steps)
    cfg = tmp_path / "run.toml"
    cfg.write_text('[model]\nseq_length = 1\n[batch]\nglobal_batch = 256\n[hardware]\ngpu = "MI300X"\nnum_gpus = 8\n')
    r = run_cli("plan", "-c", cfg, "--tokens", "1B", "--params", "25.6M", "--trace", DEMO, "-f", "json")
    assert r.returncode == 0, r.stderr
    import json

    p = json.loads(r.stdout)["plan"]
    steps = ta.analyze(ta.load(DEMO)).steps
    med = steps.group_by("step").agg(pl.col("duration_ns").max())["duration_ns"].median() / 1e9
    assert p["throughput_tflops_per_gpu"]["expected"] == pytest.approx(6 * 25.6e6 * 256 / (med * 8) / 1e12)
    assert p["throughput_source"].startswith("measured") and p["margins"]["jitter"]["source"].startswith("measured over 3 steps")
    r = run_cli("plan", "--tokens", "1B", "--params", "25.6M", "--trace", DEMO)
    assert r.returncode == 7 and "--trace needs the run configuration" in r.stderr


def test_jitter_across_stored_runs():
    # five nights: 10.0, 10.2, 9.9, 10.1, 11.0 s -> median 10.1, mean 10.24, p90 10.68 (linear)
    p = plan_run("1T", params="1B", tflops=100, run_step_times=[10.0, 10.2, 9.9, 10.1, 11.0])
    j = p["margins"]["jitter"]
    assert j["low"] == pytest.approx(10.24 / 10.1 - 1) and j["high"] == pytest.approx(10.68 / 10.1 - 1)
    assert j["source"].startswith("measured across 5 stored runs")
    q = plan_run("1T", params="1B", tflops=100, run_step_times=[10.0])
    assert q["margins"]["jitter"]["source"].startswith("assumed") and any("only 1 stored run" in n for n in q["notes"])
    r = run_cli("plan", "--tokens", "1T", "--params", "1B", "--tflops", "100", "--store", "/nonexistent/store")
    assert r.returncode == 3 and r.stderr.count("\n") == 1


def test_notes_name_python_arguments_and_the_command_line_names_its_flags():
    """What the plan leaves out is said in the caller's words: the Python API names its
    arguments (``gpu_power_w``), the command line its flags (``--gpu-power-w``), in the table and
    in the JSON it writes alike."""
    p = ta.plan("15T", params="70B", mfu=0.4, gpu="H100 SXM")
    assert "no `gpu_power_w`: energy left out" in p.notes
    assert "no `price_per_gpu_hour`: cost left out" in p.notes
    assert "no GPU count (`gpus` or [hardware] num_gpus): wall-clock days left out" in p.notes
    assert not any("--" in n for n in p.notes)
    cli = run_cli("plan", "--params", "70B", "--tokens", "15T", "--mfu", "0.4", "--gpu", "H100 SXM", "-f", "json")
    assert cli.returncode == 0, cli.stderr
    import json

    notes = json.loads(cli.stdout)["plan"]["notes"]
    assert "no --gpu-power-w: energy left out" in notes and "no --price-per-gpu-hour: cost left out" in notes
    assert "no GPU count (--gpus or [hardware] num_gpus): wall-clock days left out" in notes
    assert not any("`" in n for n in notes)
    table = run_cli("plan", "--params", "70B", "--tokens", "15T", "--mfu", "0.4", "--gpu", "H100 SXM")
    assert "no --gpu-power-w: energy left out" in table.stdout and "`" not in table.stdout
