"""Megatron-LM launch scripts and logs (tests/data/megatron/SOURCE.md).

Each real input is pinned to the configuration a person reading it would write down; what a
script takes from outside it is an error naming the argument and its line (exit 7), never a
silent default.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from conftest import ROOT, run_cli
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import load_config, parse_megatron_args, predict
from traceanalyzer.model.megatron import parse_iterations, read_megatron
from traceanalyzer.model.shell import run_script

DATA = ROOT / "tests" / "data" / "megatron"
EX = ROOT / "docs" / "examples"


def read(name: str):
    path = DATA / name
    return read_megatron(path.read_text(), str(path))


def shape(cfg):
    m, b, p, r, hw = cfg.model, cfg.batch, cfg.parallel, cfg.recompute, cfg.hardware
    return {
        "layers": m.layers, "hidden": m.hidden, "ffn": cfg.ffn, "heads": m.heads, "kv_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim, "vocab": m.vocab, "seq": m.seq_length, "act": m.activation, "experts": m.experts,
        "top_k": m.top_k, "gbs": b.global_batch, "mbs": b.micro_batch, "tp": p.tp, "pp": p.pp, "cp": p.cp, "ep": p.ep,
        "vp": p.vp, "sp": p.sequence_parallel, "dist_opt": p.distributed_optimizer, "gpus": cfg.num_gpus,
        "precision": hw.precision, "recompute": r.granularity,
    }


# --------------------------------------------------------------------------- launch scripts
def test_gpt3_175b_script_arrays_inline_comment():
    # after Megatron-LM's examples/gpt3 175B launcher: bash arrays, an inline `# comment` inside
    # MODEL, tab-indented PARALLEL, positional parameters for paths, NODES=1.
    cfg = read("gpt3_175b_like.sh")
    assert shape(cfg) == {
        "layers": 96, "hidden": 12288, "ffn": 49152, "heads": 96, "kv_heads": 96, "head_dim": 128, "vocab": None,
        "seq": 2048, "act": "gelu", "experts": 0, "top_k": 1, "gbs": 1536, "mbs": 1, "tp": 8, "pp": 16, "cp": 1,
        "ep": 1, "vp": 1, "sp": False, "dist_opt": False, "gpus": 8, "precision": "fp16", "recompute": "none",
    }
    assert any("--rampup-batch-size 16 16 5859375" in w for w in cfg.warnings)
    assert cfg.unresolved == ()  # the positional parameters feed only paths (--save, --data-path ...)


def test_gpt3_175b_as_written_is_refused_and_a_config_completes_it(tmp_path):
    script = DATA / "gpt3_175b_like.sh"
    # one node of 8 GPUs cannot hold TP 8 × PP 16: Megatron would refuse, so do we (exit 7)
    r = run_cli("predict", "--megatron-args", script)
    assert r.returncode == 7, r.stderr
    assert "num_gpus = 8" in r.stderr and "tp·pp·cp = 8·16·1 = 128" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # the README's 175B run: 1024 A100 (DP 8); the vocabulary (GPT-2, padded to 51200) is not in it
    extra = tmp_path / "a100.toml"
    extra.write_text('[hardware]\ngpu = "A100"\nnum_gpus = 1024\n[model]\nvocab = 51200\n')
    cfg = load_config(extra, megatron_args=script)
    assert (cfg.dp, cfg.microbatches, cfg.hardware.precision) == (8, 192, "fp16")
    p = predict(cfg)
    assert p["hardware"]["peak_tflops"] == 312.0  # fp16 on A100, not the fp32 19.5


def test_llama3_8b_fp8_script_variables_conditionals_quoted_elements():
    # after Megatron-LM's examples/llama FP8 launcher: TP=1 ... then $TP, PRECISION="fp8" and an
    # `if [[ "$PRECISION" == "fp8" ]]` that appends "--fp8-format hybrid" (one quoted element, split
    # into two words because the array is expanded unquoted), `TRAIN+=("${OVERLAP[@]}")`,
    # `${1:-"ckpt/..."}`, a commented-out --pipeline-model-parallel-size.
    cfg = read("llama3_8b_fp8_like.sh")
    assert shape(cfg) == {
        "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": 128256,
        "seq": 8192, "act": "swiglu", "experts": 0, "top_k": 1, "gbs": 128, "mbs": 1, "tp": 1, "pp": 1, "cp": 1,
        "ep": 1, "vp": 1, "sp": True, "dist_opt": True, "gpus": 8, "precision": "fp8", "recompute": "none",
    }
    assert cfg.parallel.overlap_grad_reduce and cfg.parallel.overlap_param_gather
    assert cfg.parallel.grad_reduce_dtype == "bf16"
    assert cfg.unresolved == ()


def test_mixtral_script_commented_lines_in_arrays_and_environment_condition():
    # after Megatron-LM's examples/mixtral launcher: "#    --moe-grouped-gemm" and
    # "# --bf16" inside arrays (so: fp32), NNODES=${SLURM_NNODES:-"1"}, and an
    # `if [ -n "${WANDB_API_KEY}" ]` that reads the environment.
    cfg = read("mixtral_moe_like.sh")
    assert shape(cfg) == {
        "layers": 2, "hidden": 256, "ffn": 896, "heads": 2, "kv_heads": 2, "head_dim": 128, "vocab": None,
        "seq": 256, "act": "swiglu", "experts": 2, "top_k": 2, "gbs": 4, "mbs": 1, "tp": 1, "pp": 1, "cp": 1,
        "ep": 2, "vp": 1, "sp": True, "dist_opt": True, "gpus": 2, "precision": "fp32", "recompute": "none",
    }
    w = "\n".join(cfg.warnings)
    assert "line 58: the condition depends on WANDB_API_KEY" in w
    assert "the script's own defaults are used for values it takes from outside it" in w
    assert "--nnodes 1 ($SLURM_NNODES, line 64)" in w
    assert "no --bf16/--fp16/--fp8-format" in w


def test_dlperf_script_positional_defaults_string_args_checkpoint_activations():
    # after Oneflow-Inc/DLPerf's Megatron-LM GPT script: TP=${1:-1} ...,
    # LAUNCHER_OPTS="--nproc_per_node $GPUS ..." word-split into
    # `python -m torch.distributed.launch`, --checkpoint-activations (full recompute), `2>&1 | tee`.
    cfg = read("dlperf_gpt_like.sh")
    assert shape(cfg) == {
        "layers": 16, "hidden": 1536, "ffn": 6144, "heads": 16, "kv_heads": 16, "head_dim": 96, "vocab": None,
        "seq": 2048, "act": "gelu", "experts": 0, "top_k": 1, "gbs": 16, "mbs": 8, "tp": 1, "pp": 1, "cp": 1,
        "ep": 1, "vp": 1, "sp": False, "dist_opt": False, "gpus": 8, "precision": "fp16", "recompute": "full",
    }
    (w,) = [w for w in cfg.warnings if "own defaults" in w]  # one line for all of them
    for used in ("--tensor-model-parallel-size 1 ($1, line 26)", "--global-batch-size 16 ($4, line 32)",
                 "--num-layers 16 ($10, line 28)", "--nproc-per-node 8 ($6, line 25)"):
        assert used in w
    # run with its defaults, the script cannot start (GBS 16 < MBS 8 × DP 8): exit 7, and the
    # defaults it relied on are on stderr
    r = run_cli("predict", "--megatron-args", DATA / "dlperf_gpt_like.sh")
    assert r.returncode == 7
    assert "global_batch = 16" in r.stderr and "dp·micro_batch = 8·8" in r.stderr
    assert "the script's defaults were used for" in r.stderr and "--global-batch-size 16 ($4, line 32)" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_ccl_bench_script_training_command_inside_bash_c():
    # after ccl-bench's Llama-3.1-8B Perlmutter run.sh: SBATCH header, `srun ... shifter bash -c '...'`
    # with the variables and the torchrun command inside the single-quoted script;
    # NODE_RANK=$SLURM_PROCID (outside, but only feeds --node_rank).
    cfg = read("ccl_bench_llama31_like.sh")
    assert shape(cfg) == {
        "layers": 32, "hidden": 4096, "ffn": 14336, "heads": 32, "kv_heads": 8, "head_dim": 128, "vocab": None,
        "seq": 1024, "act": "swiglu", "experts": 0, "top_k": 1, "gbs": 32, "mbs": 1, "tp": 4, "pp": 1, "cp": 1,
        "ep": 1, "vp": 1, "sp": False, "dist_opt": True, "gpus": 8, "precision": "bf16", "recompute": "full",
    }
    assert cfg.dp == 2 and cfg.microbatches == 16 and cfg.recomputed_layers() == 32
    assert cfg.unresolved == ()


# --------------------------------------------------------------------------- real logs
ONEFLOW_SHAPE = {
    "layers": 24, "hidden": 2304, "ffn": 9216, "heads": 24, "kv_heads": 24, "head_dim": 96, "vocab": 50688,
    "seq": 2048, "act": "gelu", "experts": 0, "top_k": 1, "gbs": 512, "mbs": 8, "tp": 4, "pp": 4, "cp": 1,
    "ep": 1, "vp": 1, "sp": False, "dist_opt": False, "gpus": 32, "precision": "fp16", "recompute": "full",
}


@pytest.mark.parametrize("prefix", ["", "[default0]:", "0: ", "[2021-06-01 12:00:00] ", "[rank0]: ", "  3: [default3]:"])
def test_arguments_block_with_launcher_prefixes(prefix):
    # OneFlow GPT's printed arguments block (Megatron's format, pre-2022 checkpoint_activations),
    # as is and with the prefixes torchrun (--tee), srun -l and loggers put on every line.
    text = (DATA / "oneflow_gpt_2d_pp_arguments.log").read_text()
    text = "\n".join(prefix + ln for ln in text.splitlines())
    cfg = parse_megatron_args(text, "oneflow.log")
    assert shape(cfg) == ONEFLOW_SHAPE
    assert cfg.dp == 2 and cfg.microbatches == 32  # num_accumulation_steps 32 in the same block


def test_bloom_iteration_line_and_the_convention_it_was_logged_in():
    # BigScience BLOOM-176B, chronicles 2022-03-18: " [default7]: iteration 12695/ 115311 | ...
    # elapsed time per iteration (s): 105.22 | ... global batch size: 2048 | ... TFLOPs: 149.02 |"
    text = (DATA / "bloom_tr11_176b_iteration.log").read_text()
    it = parse_iterations(text)
    assert it == {"iterations": [12695], "step_time_s": 105.22, "tflops_per_gpu": 149.02, "global_batch": 2048}
    # with the published shape: Megatron-DeepSpeed's TFLOPs count the recompute forward
    # (96·B·s·l·h²·(1 + s/6h + V/16lh)): our hardware FLOPs, 2024 convention, within 0.01 %
    r = run_cli("predict", "--megatron-args", DATA / "bloom_tr11_176b_iteration.log",
                "--config", EX / "bloom-176b.toml", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    lc = doc["prediction"]["logged_convention"]
    assert lc["best"] == "megatron2024 hardware"
    assert lc["candidates"]["megatron2024 hardware"] == pytest.approx(149.02, rel=1e-4)
    # by hand: 96·B·s·l·h²·(1 + s/6h + V/16lh) / (step · GPUs)
    B, s, l, h, V = 2048, 2048, 70, 14336, 250880
    hand = 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h)) / (105.22 * 384) / 1e12
    assert lc["candidates"]["megatron2024 hardware"] == pytest.approx(hand, rel=1e-12)
    assert "reproduced by the megatron2024 convention (hardware FLOPs" in r.stderr
    assert "layers = 70" in r.stderr and "uneven" in r.stderr  # 70 layers on 12 stages


def test_megatron_log_lines_with_throughput_median_and_rampup():
    # Megatron-LM's training_log format (megatron/training/training.py): one line per logged
    # iteration; the first is warm-up, ramp-up lines at another batch are left out.
    lines = [
        " [2024-08-21 10:15:00] iteration        1/   25000 | consumed samples:          512 | elapsed time per iteration (ms): 9000.0 | throughput per GPU (TFLOP/s/GPU): 100.0 | learning rate: 1.0E-08 | global batch size:   512 |",
        " [2024-08-21 10:16:00] iteration        2/   25000 | consumed samples:         1536 | elapsed time per iteration (ms): 5000.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | learning rate: 2.0E-08 | global batch size:  1024 |",
        " [2024-08-21 10:17:00] iteration        3/   25000 | consumed samples:         2560 | elapsed time per iteration (ms): 5100.0 | throughput per GPU (TFLOP/s/GPU): 390.0 | learning rate: 3.0E-08 | global batch size:  1024 |",
        " [2024-08-21 10:18:00] iteration        4/   25000 | consumed samples:         3584 | elapsed time per iteration (ms): 4900.0 | throughput per GPU (TFLOP/s/GPU): 410.0 | learning rate: 4.0E-08 | global batch size:  1024 |",
        " [2024-08-21 10:19:00] iteration        5/   25000 | consumed samples:         4608 | elapsed time per iteration (ms): 5000.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | learning rate: 5.0E-08 | global batch size:  1024 |",
    ]
    text = "\n".join(f"{r}: {ln}" for ln in lines for r in (0, 1))  # two ranks print the same lines
    it = parse_iterations(text)
    assert it["iterations"] == [3, 4, 5] and it["global_batch"] == 1024
    assert it["step_time_s"] == 5.0 and it["tflops_per_gpu"] == 400.0


# --------------------------------------------------------------------------- what cannot be read
def test_variable_from_the_environment_is_exit_7_naming_argument_and_line(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("#!/bin/bash\nTP=8\nPP=${PP_FROM_ENV}\ntorchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py \\\n"
                      "  --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \\\n"
                      "  --tensor-model-parallel-size ${TP} --pipeline-model-parallel-size $PP \\\n"
                      "  --seq-length 4096 --global-batch-size 64 --bf16\n")
    r = run_cli("predict", "--megatron-args", script)
    assert r.returncode == 7
    assert r.stderr.strip().count("\n") == 0
    assert "--pipeline-model-parallel-size (line 6) is $PP_FROM_ENV, set outside the script" in r.stderr
    # a --config that gives the value resolves it
    extra = tmp_path / "pp.toml"
    extra.write_text("[parallel]\npp = 2\n")
    cfg = load_config(extra, megatron_args=script)
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.dp, cfg.microbatches) == (8, 2, 1, 64)


@pytest.mark.parametrize("text,needle", [
    ("--num-layers 80 --hidden-size 8192 --pipeline-model-parallel-size two", "--pipeline-model-parallel-size (line 1) = 'two' is not a whole number"),
    ("--num-layers 80 96 --hidden-size 8192", "--num-layers (line 1) is given 2 values"),
    ("--num-layers 80 --hidden-size 8192 --global-batch-size 99999999999999999999999", "--global-batch-size (line 1) = 99999999999999999999999 is beyond 64 bits"),
    ("--num-layers 80 --hidden-size 'unbalanced", "line 1: cannot read it as a shell script: unbalanced single quote"),
    ("--num-layers $(python get_layers.py) --hidden-size 8192", "--num-layers (line 1) is $(python get_layers.py)"),
    ("--num-layers 80 --hidden-size 8192 --tensor-model-parallel-size", "--tensor-model-parallel-size (line 1) has no value"),
    ("hello world", "no Megatron-LM arguments found"),
])
def test_unreadable_arguments_name_the_file_and_the_argument(tmp_path, text, needle):
    f = tmp_path / "args.sh"
    f.write_text(text + "\n")
    with pytest.raises(ConfigError) as exc:
        load_config(megatron_args=f)
    assert needle in str(exc.value) and str(f) in str(exc.value)


def test_recompute_activations_is_selective():
    cfg = parse_megatron_args("--num-layers 4 --hidden-size 64 --num-attention-heads 4 --recompute-activations --bf16")
    assert cfg.recompute.granularity == "selective"


def test_shell_reader_semantics():
    # the subset of bash that launch scripts use, against what bash itself does
    r = run_script('A=(--x 1 "--y 2")\nB=3\nB+=4\nexport C="${B}5"\nD=$((C * 2 - 1))\nif [ "$D" -eq 689 ]; then E=yes; else E=no; fi\n'
                   'cmd ${A[@]} "${A[@]}" $D $E ${UNSET:-dflt} 2>&1 | tee log # trailing\n')
    words = r.commands[0][0]
    assert words[:6] == ["cmd", "--x", "1", "--y", "2", "--x"]
    assert words[6:9] == ["1", "--y 2", "689"]  # B="34", C="345", D=345·2−1
    assert words[9] == "yes"
    assert words[10] == "\x01UNSET\x02dflt\x03" and words[-1] != "2"
    assert r.commands[1][0] == ["tee", "log"]


def test_gpu_count_decided_at_run_time_and_two_training_commands(tmp_path):
    script = tmp_path / "two.sh"
    script.write_text("torchrun --nproc-per-node gpu --nnodes 1 pretrain_gpt.py --num-layers 8 --hidden-size 1024 \\\n"
                      "  --num-attention-heads 16 --seq-length 2048 --global-batch-size 64 --bf16\n"
                      "torchrun pretrain_gpt.py --num-layers 8\n")
    with pytest.raises(ConfigError, match=r"--nproc-per-node \(line 1\) = 'gpu': the GPU count is decided when the job runs"):
        load_config(megatron_args=script)
    extra = tmp_path / "n.toml"
    extra.write_text("[hardware]\nnum_gpus = 8\n")
    cfg = load_config(extra, megatron_args=script)
    assert cfg.num_gpus == 8 and cfg.model.heads == 16
    assert any("2 training commands in the script; the one at line 1" in w for w in cfg.warnings)


def test_log_that_echoes_its_launch_command():
    # a job log: prose with apostrophes (not a shell script) and the set -x echo of the command;
    # torchrun's default is one node
    text = ("don't panic\n"
            "+ torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --bf16\n")
    cfg = read_megatron(text, "job.log")
    assert (cfg.model.layers, cfg.model.heads, cfg.num_gpus, cfg.hardware.precision) == (8, 16, 8, "bf16")
    assert "(line 1: unbalanced single quote); only the lines with Megatron options were read" in cfg.warnings[0]


# --------------------------------------------------------------------------- NeMo YAML
def test_nemo_megatron_gpt_config():
    # NVIDIA/NeMo examples/nlp/language_modeling/conf/megatron_gpt_config.yaml: trainer devices /
    # num_nodes / precision 16, model sizes, `max_position_embeddings: ${.encoder_seq_length}`,
    # nested tokenizer/data/optim tables and lists that are not read.
    cfg = read("nemo_megatron_gpt_config.yaml")
    assert shape(cfg) == {
        "layers": 12, "hidden": 768, "ffn": 3072, "heads": 12, "kv_heads": 12, "head_dim": 64, "vocab": None,
        "seq": 512, "act": "gelu", "experts": 0, "top_k": 1, "gbs": 8, "mbs": 4, "tp": 1, "pp": 1, "cp": 1,
        "ep": 1, "vp": 1, "sp": False, "dist_opt": False, "gpus": 1, "precision": "fp16", "recompute": "none",
    }
    assert parse_megatron_args((DATA / "nemo_megatron_gpt_config.yaml").read_text()).microbatches == 2


def test_nemo_variants_interpolation_precision_and_unresolved(tmp_path):
    text = (DATA / "nemo_megatron_gpt_config.yaml").read_text()
    v = (text.replace("  devices: 1\n", "  devices: 8\n").replace("precision: 16", "precision: bf16-mixed")
         .replace("activations_checkpoint_granularity: null", "activations_checkpoint_granularity: selective")
         .replace("  num_layers: 12\n", "  num_layers: ${.num_attention_heads}\n")
         .replace("global_batch_size: 8 ", "global_batch_size: 64 "))
    cfg = parse_megatron_args(v, "v.yaml")
    assert (cfg.model.layers, cfg.num_gpus, cfg.hardware.precision, cfg.recompute.granularity, cfg.microbatches) == \
        (12, 8, "bf16", "selective", 2)
    f = tmp_path / "env.yaml"
    f.write_text(text.replace("encoder_seq_length: 512", "encoder_seq_length: ${oc.env:SEQ_LEN}"))
    with pytest.raises(ConfigError, match=r"model.encoder_seq_length \(line 53\) is '\$\{oc.env:SEQ_LEN\}', set outside the file"):
        load_config(megatron_args=f)
    extra = tmp_path / "seq.toml"
    extra.write_text("[model]\nseq_length = 2048\n")
    assert load_config(extra, megatron_args=f).model.seq_length == 2048
    f.write_text(text.replace("  num_layers: 12\n", "  num_layers: twelve\n"))
    with pytest.raises(ConfigError, match=r"model.num_layers \(line 55\) = 'twelve' is not a whole number"):
        load_config(megatron_args=f)
