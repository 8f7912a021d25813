"""One validation layer: every bad configuration is exit 7 with one line naming the key.

Table-driven, run in-process through the CLI entry point (``traceanalyzer.cli.main``), as a
user would: a base configuration that predicts fine, and one mutation per case.
"""

from __future__ import annotations

import math

import pytest

from traceanalyzer.cli import main
from traceanalyzer.model import load_config
from traceanalyzer.model.validate import LIMITS

BASE = {
    "model": {"layers": "8", "hidden": "1024", "heads": "16", "vocab": "32000", "seq_length": "2048"},
    "batch": {"global_batch": "64", "micro_batch": "1"},
    "parallel": {"tp": "2", "pp": "2", "dp": "2"},
    "hardware": {"gpu": '"H100 SXM"', "num_gpus": "8"},
    "reported": {"tflops_per_gpu": "300.0"},
}


def toml(changes: dict[str, str], top: str = "") -> str:
    doc = {sec: dict(vals) for sec, vals in BASE.items()}
    for key, value in changes.items():
        sec, k = key.split(".")
        doc.setdefault(sec, {})[k] = value
    out = [top] if top else []
    for sec, vals in doc.items():
        out.append(f"[{sec}]")
        out += [f"{k} = {v}" for k, v in vals.items() if v is not None]
    return "\n".join(out) + "\n"


# (id, mutation of BASE, text the one-line message must contain)
BAD_TOML = [
    ("layers-zero", {"model.layers": "0"}, "[model] layers = 0"),
    ("layers-negative", {"model.layers": "-4"}, "[model] layers = -4"),
    ("layers-string", {"model.layers": '"8"'}, "[model] layers = '8'"),
    ("layers-bool", {"model.layers": "true"}, "[model] layers = True"),
    ("layers-fraction", {"model.layers": "80.5"}, "[model] layers = 80.5"),
    ("layers-float", {"model.layers": "8.0"}, "[model] layers = 8.0"),
    ("hidden-zero", {"model.hidden": "0"}, "[model] hidden = 0"),
    ("hidden-negative", {"model.hidden": "-1024"}, "[model] hidden = -1024"),
    ("heads-zero", {"model.heads": "0"}, "[model] heads = 0"),
    ("heads-not-dividing-hidden", {"model.heads": "7"}, "heads = 7"),
    ("kv-heads-not-dividing", {"model.kv_heads": "3"}, "[model] kv_heads = 3"),
    ("kv-heads-above-heads", {"model.kv_heads": "32"}, "[model] kv_heads = 32"),
    ("vocab-zero", {"model.vocab": "0"}, "[model] vocab = 0"),
    ("vocab-1e18", {"model.vocab": "1e18"}, "[model] vocab = 1e+18"),
    ("seq-zero", {"model.seq_length": "0"}, "[model] seq_length = 0"),
    ("seq-nan", {"model.seq_length": "nan"}, "[model] seq_length = nan"),
    ("seq-inf", {"model.seq_length": "inf"}, "[model] seq_length = inf"),
    ("activation-unknown", {"model.activation": '"relu"'}, "[model] activation = 'relu'"),
    ("swiglu-string", {"model.swiglu": '"false"'}, "[model] swiglu = 'false'"),
    ("experts-negative", {"model.experts": "-1"}, "[model] experts = -1"),
    ("top-k-above-experts", {"model.experts": "4", "model.top_k": "8", "parallel.ep": "1"}, "[model] top_k = 8"),
    ("gbs-zero", {"batch.global_batch": "0"}, "[batch] global_batch = 0"),
    ("gbs-1e18", {"batch.global_batch": "1e18"}, "[batch] global_batch = 1e+18"),
    ("gbs-beyond-64-bits", {"batch.global_batch": "99999999999999999999"}, "[batch] global_batch = 99999999999999999999"),
    ("gbs-not-whole-microbatches", {"batch.global_batch": "63"}, "[batch] global_batch = 63"),
    ("mbs-zero", {"batch.micro_batch": "0"}, "[batch] micro_batch = 0"),
    ("mbs-string", {"batch.micro_batch": '"one"'}, "[batch] micro_batch = 'one'"),
    ("tp-zero", {"parallel.tp": "0"}, "[parallel] tp = 0"),
    ("tp-not-dividing-heads", {"parallel.tp": "3", "hardware.num_gpus": "12"}, "[parallel] tp = 3"),
    ("pp-1000", {"parallel.pp": "1000"}, "pp·vp = 1000·1"),
    ("vp-1e9", {"parallel.vp": "1000000000"}, "[parallel] vp = 1000000000"),
    ("world-mismatch", {"parallel.dp": "3"}, "[parallel] tp·pp·cp·dp = 2·2·1·3 = 12 but [hardware] num_gpus = 8"),
    ("seq-not-divisible-by-cp", {"parallel.cp": "3", "parallel.dp": "1", "hardware.num_gpus": "12"}, "[model] seq_length = 2048"),
    ("ep-without-experts", {"parallel.ep": "2"}, "[parallel] ep = 2"),
    ("ep-not-dividing-dp", {"model.experts": "8", "parallel.ep": "4"}, "[parallel] ep = 4"),
    ("sp-string", {"parallel.sequence_parallel": '"false"'}, "[parallel] sequence_parallel = 'false'"),
    ("dist-opt-int", {"parallel.distributed_optimizer": "1"}, "[parallel] distributed_optimizer = 1"),
    ("gpus-zero", {"hardware.num_gpus": "0"}, "[hardware] num_gpus = 0"),
    ("gpus-not-tp-pp-dp", {"hardware.num_gpus": "12"}, "[hardware] num_gpus = 12"),
    ("gpu-number", {"hardware.gpu": "100"}, "[hardware] gpu = 100"),
    ("gpu-unknown", {"hardware.gpu": '"Quadro GP100"'}, "[hardware] gpu = 'Quadro GP100'"),
    ("peak-zero", {"hardware.peak_tflops": "0"}, "[hardware] peak_tflops = 0"),
    ("peak-negative", {"hardware.peak_tflops": "-1.0"}, "[hardware] peak_tflops = -1.0"),
    ("peak-nan", {"hardware.peak_tflops": "nan"}, "[hardware] peak_tflops = nan"),
    ("precision-unknown", {"hardware.precision": '"int4"'}, "[hardware] precision = 'int4'"),
    ("nvlink-zero", {"hardware.intra_node_gbps": "0"}, "[hardware] intra_node_gbps = 0"),
    ("reported-above-peak", {"reported.tflops_per_gpu": "5000"}, "[reported] tflops_per_gpu = 5000"),
    ("reported-nan", {"reported.tflops_per_gpu": "nan"}, "[reported] tflops_per_gpu = nan"),
    ("reported-negative", {"reported.tflops_per_gpu": "-1"}, "[reported] tflops_per_gpu = -1"),
    ("reported-tiny", {"reported.tflops_per_gpu": "1e-300"}, "[reported] tflops_per_gpu = 1e-300"),
    ("step-time-zero", {"reported.step_time_s": "0"}, "[reported] step_time_s = 0"),
    ("reported-convention", {"reported.convention": '"flops2000"'}, "[reported] convention = 'flops2000'"),
    ("granularity", {"recompute.granularity": '"partial"'}, "[recompute] granularity = 'partial'"),
    ("method", {"recompute.method": '"none"'}, "[recompute] method = 'none'"),
    ("recompute-layers-beyond-stage", {"recompute.granularity": '"full"', "recompute.method": '"block"',
                                       "recompute.num_layers": "5"}, "[recompute] num_layers = 5"),
    ("unknown-key", {"model.hiden": "8"}, "unknown key 'hiden' in [model]"),
    ("section-not-table", {}, "[model] in"),
]


def cli(capsys, *args) -> tuple[int, str]:
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    return code, err


def test_base_configuration_is_fine(tmp_path, capsys):
    f = tmp_path / "base.toml"
    f.write_text(toml({}))
    code, err = cli(capsys, "predict", "--config", f, "--format", "json")
    assert code == 0, err


@pytest.mark.parametrize("case,changes,needle", BAD_TOML, ids=[c[0] for c in BAD_TOML])
def test_bad_configuration_is_exit_7_naming_the_key(tmp_path, capsys, case, changes, needle):
    f = tmp_path / f"{case}.toml"
    text = toml(changes) if case != "section-not-table" else 'model = "gpt"\n'
    f.write_text(text)
    code, err = cli(capsys, "predict", "--config", f)
    assert code == 7, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]
    assert "internal error" not in err


BAD_OPTIONS = [  # a bad command-line value is a usage error (exit 2) naming the option
    ("kernel-efficiency-zero", ["--kernel-efficiency", "0"], "'--kernel-efficiency': 0.0 is not in (0, 1]"),
    ("kernel-efficiency-five", ["--kernel-efficiency", "5"], "'--kernel-efficiency': 5.0 is not in (0, 1]"),
    ("kernel-efficiency-negative", ["--kernel-efficiency", "-1"], "'--kernel-efficiency': -1.0 is not in (0, 1]"),
    ("kernel-efficiency-nan", ["--kernel-efficiency", "nan"], "'--kernel-efficiency': nan is not in (0, 1]"),
    ("global-batch-zero", ["--global-batch", "0"], "'--global-batch'"),
    ("hfu-unknown", ["--hfu", "double"], "'--hfu'"),
    ("convention-unknown", ["--convention", "flops2000"], "'--convention'"),
]


@pytest.mark.parametrize("case,opts,needle", BAD_OPTIONS, ids=[c[0] for c in BAD_OPTIONS])
def test_bad_predict_option_is_exit_2(tmp_path, capsys, case, opts, needle):
    f = tmp_path / "base.toml"
    f.write_text(toml({}))
    code, err = cli(capsys, "predict", "--config", f, *opts)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_bad_reconcile_and_breakdown_options(tmp_path, capsys):
    from conftest import DEMO

    f = tmp_path / "base.toml"
    f.write_text(toml({}))
    code, err = cli(capsys, "reconcile", DEMO, "--config", f, "--hfu", "double")
    assert code == 2 and "'--hfu'" in err and "forward" in err  # the choices named
    code, err = cli(capsys, "breakdown", DEMO, "--bus-bw", "nan")
    assert code == 2 and "--bus-bw" in err and len(err.strip().splitlines()) == 1
    peak_nan = tmp_path / "nan.toml"
    peak_nan.write_text(toml({"hardware.peak_tflops": "nan"}))
    code, err = cli(capsys, "reconcile", DEMO, "--config", peak_nan)
    assert code == 7 and "[hardware] peak_tflops = nan" in err


def test_non_utf8_configuration_names_the_file(tmp_path, capsys):
    f = tmp_path / "latin1.toml"
    f.write_bytes(toml({}).encode() + b'name = "r\xe9seau"\n')
    code, err = cli(capsys, "predict", "--config", f)
    assert code == 7 and str(f) in err and "not UTF-8" in err
    g = tmp_path / "args.sh"
    g.write_bytes(b"--num-layers 8 \xff\xfe\n")
    code, err = cli(capsys, "predict", "--megatron-args", g)
    assert code == 7 and str(g) in err and "not UTF-8" in err


def test_megatron_words_where_numbers_belong(tmp_path, capsys):
    f = tmp_path / "args.sh"
    f.write_text("torchrun pretrain_gpt.py --num-layers 8 --hidden-size 1024 --pipeline-model-parallel-size two\n")
    code, err = cli(capsys, "predict", "--megatron-args", f)
    assert code == 7 and "--pipeline-model-parallel-size (line 1) = 'two' is not a whole number" in err


def test_suspicious_values_warn_on_stderr(tmp_path, capsys):
    f = tmp_path / "sus.toml"
    f.write_text(toml({"reported.tflops_per_gpu": "900.0"}))  # 91 % of the H100's dense peak
    code, err = cli(capsys, "predict", "--config", f, "--format", "json")
    out = capsys.readouterr().out
    assert code == 0
    assert "warning:" in err and "91% of the dense peak" in err
    assert "warning" not in out.split('"warnings"')[0]


def test_limits_cover_every_integer_key():
    from dataclasses import fields

    from traceanalyzer.model.config import BatchConfig, HardwareConfig, ModelConfig, ParallelConfig, RecomputeConfig

    ints = {f.name for cls in (ModelConfig, BatchConfig, ParallelConfig, RecomputeConfig, HardwareConfig)
            for f in fields(cls) if "int" in str(f.type) and "float" not in str(f.type)}
    assert ints <= set(LIMITS), ints - set(LIMITS)
    # tokens per step (global batch × sequence length) stay inside 64-bit integers
    assert LIMITS["global_batch"] * LIMITS["seq_length"] < 2**63
    assert math.log2(LIMITS["global_batch"]) == 32


def test_valid_configuration_round_trip(tmp_path):
    f = tmp_path / "ok.toml"
    f.write_text(toml({"model.kv_heads": "4", "parallel.sequence_parallel": "true"}))
    cfg = load_config(f)
    assert cfg.kv_heads == 4 and cfg.microbatches == 32
