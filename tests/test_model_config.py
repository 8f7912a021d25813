"""Run configuration loading, hardware detection, bubble and communication volumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from traceanalyzer.errors import ConfigError
from traceanalyzer.model import bubble_fraction, comm_volumes, detect_gpu, load_config, parse_megatron_args, peak_tflops, predict
from traceanalyzer.model.config import BatchConfig, HardwareConfig, ModelConfig, ParallelConfig, RecomputeConfig, RunConfig

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.mark.parametrize(
    "name,key",
    [
        ("NVIDIA H100 80GB HBM3", "h100_sxm"),
        ("NVIDIA H100 PCIe", "h100_pcie"),
        ("Tesla V100-SXM2-32GB", "v100_sxm"),
        ("Tesla V100-SXM2-16GB", "v100_sxm"),
        ("Tesla V100-PCIE-16GB", "v100_pcie"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GB200", "gb200"),
        ("Quadro GP100", None),
    ],
)
def test_detect_gpu(name, key):
    assert detect_gpu(name) == key


def test_dense_peaks_never_sparse():
    # Dense tensor-core peaks from the data sheets (sparse figure = 2x these).
    assert peak_tflops("H100 SXM", "bf16") == 989.4
    assert peak_tflops("H100 SXM", "fp8") == 1978.9
    assert peak_tflops("B200", "bf16") == 2250.0  # torchtitan #1393 fixed a 4.5e15 slip
    assert peak_tflops("A100", "bf16") == 312.0
    assert peak_tflops("MI300X", "bf16") == 1307.4
    assert peak_tflops("V100", "fp16") == 125.0
    assert peak_tflops("V100", "fp16", override=100.0) == 100.0
    with pytest.raises(ConfigError, match="no bf16"):
        peak_tflops("Tesla V100-SXM2-32GB", "bf16")
    with pytest.raises(ConfigError, match="peak_tflops"):
        peak_tflops(None)


def test_bubble_examples():
    # analytic_model.md §2.1: p=2,m=8 -> 0.125; p=8,m=8 -> 0.875; p=8,m=32 -> 0.219; p=8,m=64 -> 0.109;
    # p=8,m=32,v=5 -> 0.044
    assert bubble_fraction(2, 8) == 0.125
    assert bubble_fraction(8, 8) == 0.875
    assert round(bubble_fraction(8, 32), 3) == 0.219
    assert round(bubble_fraction(8, 64), 3) == 0.109
    assert round(bubble_fraction(8, 32, 5), 3) == 0.044
    assert bubble_fraction(1, 4) == 0.0


def one_layer(sp=False, recompute="none"):
    return RunConfig(
        model=ModelConfig(layers=1, hidden=8192, heads=64, vocab=131072, seq_length=4096),
        batch=BatchConfig(global_batch=1, micro_batch=1),
        parallel=ParallelConfig(tp=8, pp=1, dp=1, sequence_parallel=sp),
        recompute=RecomputeConfig(granularity=recompute),
        hardware=HardwareConfig(gpu="H100 SXM", num_gpus=8),
    ).validate()


def test_tp_volume_per_layer_microbatch():
    # §3.1: t=8, b=1, S = 64 MiB at s=4096/h=8192: no-SP 470 MB (no recompute) / 705 MB (full
    # recompute) per layer-microbatch per GPU; SP moves 10·(t−1)/t·S (+4 with recompute).
    (tp,) = comm_volumes(one_layer())
    assert tp.bytes / 1e6 == pytest.approx(469.8, abs=0.1)
    (tp,) = comm_volumes(one_layer(recompute="full"))
    assert tp.bytes / 1e6 == pytest.approx(704.6, abs=0.1)
    assert tp.exposed_bytes / tp.bytes == pytest.approx(4 / 6)
    (tp,) = comm_volumes(one_layer(sp=True))
    assert tp.bytes == pytest.approx(10 * 7 / 8 * 64 * 2**20)
    assert tp.scope == "intra-node" and tp.gbps == pytest.approx(369, abs=1)  # ~370 GB/s NCCL busbw


def test_dp_volume_issue_1031():
    # §4.3 item 4: DP 2 with the distributed optimizer: RS of fp32 grads ~2.2 GB + AG of bf16
    # params ~1.1 GB per GPU per step (70B over TP8·PP8 = ~1.1e9 params per GPU).
    cfg = load_config(EXAMPLES / "issue1031-70b.toml")
    dp = {c.what: c for c in comm_volumes(cfg) if c.dim == "dp"}
    assert dp["reduce-scatter grads"].bytes / 1e9 == pytest.approx(2.2, rel=0.05)
    assert dp["all-gather params"].bytes / 1e9 == pytest.approx(1.1, rel=0.05)
    assert dp["reduce-scatter grads"].scope == "inter-node"  # DP stride 8 = one node each


def test_toml_example_loads():
    cfg = load_config(EXAMPLES / "megatron-readme-70b.toml")
    assert cfg.dp == 48 and cfg.microbatches == 8 and cfg.ffn == 32768 and cfg.kv_heads == 64
    assert cfg.reported.tflops_per_gpu == 419.7


def test_toml_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nlayers = 4\nhiden = 8\n")
    with pytest.raises(ConfigError, match="unknown key 'hiden' in \\[model\\]"):
        load_config(bad)
    bad.write_text("[parallel]\ntp = 8\npp = 2\ndp = 4\n[hardware]\nnum_gpus = 128\n")
    with pytest.raises(ConfigError, match="tp·pp·cp·dp .* = 64 but \\[hardware\\] num_gpus = 128"):
        load_config(bad)
    bad.write_text("[model]\nlayers = 4\nhidden = 64\nheads = 4\nseq_length = 128\n[hardware]\nnum_gpus = 1\ngpu='A100'\n")
    with pytest.raises(ConfigError, match=r"\[model\] vocab .* is missing in .*bad.toml: it is needed for the logits FLOPs"):
        predict(load_config(bad))
    bad.write_text("[model]\nlayers = 4\nhidden = 64\nheads = 4\nseq_length = 128\nvocab = 1000\n[hardware]\nnum_gpus = 1\ngpu='A100'\n")
    with pytest.raises(ConfigError, match=r"\[batch\] global_batch is missing.*FLOPs per step"):
        predict(load_config(bad))


MEGATRON_CLI = r"""
torchrun --nnodes 16 --nproc-per-node 8 pretrain_gpt.py \
    --num-layers 80 --hidden-size 8192 --num-attention-heads 64 \
    --group-query-attention --num-query-groups 8 --ffn-hidden-size 28672 --swiglu \
    --seq-length 4096 --max-position-embeddings 4096 \
    --micro-batch-size 1 --global-batch-size 128 \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 8 \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 5 \
    --distribute-saved-activations --use-distributed-optimizer \
    --overlap-grad-reduce --overlap-param-gather --bf16   # comment
"""

MEGATRON_LOG = """
using world size: 128, data-parallel size: 2, context-parallel size: 1, tensor-model-parallel size: 8, pipeline-model-parallel size: 8
------------------------ arguments ------------------------
  bf16 ............................................ True
  context_parallel_size ........................... 1
  data_parallel_size .............................. 2
  ffn_hidden_size ................................. 28672
  global_batch_size ............................... 128
  group_query_attention ........................... True
  hidden_size ..................................... 8192
  micro_batch_size ................................ 1
  num_attention_heads ............................. 64
  num_layers ...................................... 80
  num_query_groups ................................ 8
  padded_vocab_size ............................... None
  pipeline_model_parallel_size .................... 8
  recompute_granularity ........................... full
  recompute_method ................................ uniform
  recompute_num_layers ............................ 5
  seq_length ...................................... 4096
  sequence_parallel ............................... False
  swiglu .......................................... True
  tensor_model_parallel_size ...................... 8
  use_distributed_optimizer ....................... True
  world_size ...................................... 128
-------------------- end of arguments ---------------------
 > padded vocab (size: 32000) with 0 dummy tokens (new size: 32000)
"""


@pytest.mark.parametrize("text", [MEGATRON_CLI, MEGATRON_LOG])
def test_megatron_args(text):
    cfg = parse_megatron_args(text)
    assert (cfg.model.layers, cfg.model.hidden, cfg.model.heads, cfg.kv_heads, cfg.ffn) == (80, 8192, 64, 8, 28672)
    assert cfg.model.swiglu and cfg.hardware.precision == "bf16"
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.dp, cfg.num_gpus, cfg.microbatches) == (8, 8, 2, 128, 64)
    assert cfg.recompute.granularity == "full" and cfg.recomputed_layers() == 80
    assert cfg.parallel.distributed_optimizer and not cfg.parallel.sequence_parallel


def test_megatron_log_vocab_and_toml_completion(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(MEGATRON_LOG)
    assert parse_megatron_args(MEGATRON_LOG).model.vocab == 32000
    extra = tmp_path / "hw.toml"
    extra.write_text('[hardware]\ngpu = "H100 SXM"\n[reported]\ntflops_per_gpu = 300.0\n')
    cfg = load_config(extra, megatron_args=log)
    assert cfg.hardware.gpu == "H100 SXM" and cfg.num_gpus == 128 and cfg.model.vocab == 32000
    # the CLI form has no vocabulary: the error says what is missing and why
    cli = parse_megatron_args(MEGATRON_CLI)
    with pytest.raises(ConfigError, match="vocab .*logits"):
        predict(cli)
    with pytest.raises(ConfigError, match="no Megatron-LM arguments"):
        parse_megatron_args("hello world")


def moe(ep: int, dist_opt: bool = False):
    # Mixtral-8x7B shape: 32 layers, h 4096, 32 heads / 8 KV heads, SwiGLU f 14336, 8 experts,
    # top-2, vocab 32000; 64 GPUs as TP 1, PP 1, DP 64.
    return RunConfig(
        model=ModelConfig(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=32000, seq_length=4096,
                          activation="swiglu", experts=8, top_k=2),
        batch=BatchConfig(global_batch=64),
        parallel=ParallelConfig(tp=1, pp=1, dp=64, ep=ep, distributed_optimizer=dist_opt),
        hardware=HardwareConfig(gpu="H100 SXM", num_gpus=64),
    ).validate()


def test_moe_gradient_volume_accounts_for_expert_parallelism():
    # By hand: attention 4096·(4096 + 2·1024) + 4096·4096 = 41.9M per layer; experts
    # 3·4096·14336·8 = 1409.3M per layer; output layer 4096·32000 = 131.1M. Dense grads are
    # all-reduced over DP 64; each GPU holds 8/ep experts, reduced over the 64/ep ranks that hold
    # the same ones: 2·(n−1)/n·4 bytes each.
    h, L = 4096, 32
    dense = (h * (h + 2 * 1024) + h * h) * L + h * 32000
    experts = 3 * h * 14336 * 8 * L

    def by_hand(ep):
        n_e = 64 // ep
        return 2 * 63 / 64 * 4 * dense + 2 * (n_e - 1) / n_e * 4 * experts / ep

    for ep in (1, 8):
        (dp,) = [c for c in comm_volumes(moe(ep)) if c.dim == "dp"]
        assert dp.bytes == pytest.approx(by_hand(ep), rel=1e-12)
    one, eight = ([c for c in comm_volumes(moe(ep)) if c.dim == "dp"][0].bytes for ep in (1, 8))
    assert one / 1e9 == pytest.approx(366.7, abs=0.1) and eight / 1e9 == pytest.approx(51.1, abs=0.1)  # 7.2x less
    # distributed optimizer: reduce-scatter of fp32 grads + all-gather of bf16 params, same split
    rs, ag = (c.bytes for c in comm_volumes(moe(8, dist_opt=True)) if c.dim == "dp")
    assert rs == pytest.approx(by_hand(8) / 2, rel=1e-12)
    assert ag == pytest.approx(by_hand(8) / 4, rel=1e-12)
