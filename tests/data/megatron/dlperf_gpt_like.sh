#! /bin/bash
# GPT throughput sweep after Oneflow-Inc/DLPerf's Megatron-LM script: every size is a
# positional argument with a default, the launcher options are one string.
# usage: dlperf_gpt_like.sh TP PP MBS GBS NODES GPUS ADDR RANK ITERS LAYERS HIDDEN HEADS

TP=${1:-1}
PP=${2:-1}
MBS=${3:-8}
GBS=${4:-16}
NODES=${5:-1}
GPUS=${6:-8}
ADDR=${7:-127.0.0.1}
RANK=${8:-0}
ITERS=${9:-520}
LAYERS=${10:-16}
HIDDEN=${11:-1536}
HEADS=${12:-16}
SEQ=2048

DP=$(($GPUS*$NODES/$TP/$PP))
OUT=./gpt_${NODES}n${GPUS}g_dp${DP}_tp${TP}_pp${PP}_mbs${MBS}_gbs${GBS}.log
echo rank $RANK writes $OUT
LAUNCHER_OPTS="--nproc_per_node $GPUS --nnodes $NODES --node_rank ${RANK} --master_addr ${ADDR} --master_port 29500"

python -m torch.distributed.launch $LAUNCHER_OPTS pretrain_gpt.py \
       --tensor-model-parallel-size $TP \
       --pipeline-model-parallel-size $PP \
       --num-layers $LAYERS \
       --hidden-size $HIDDEN \
       --num-attention-heads $HEADS \
       --micro-batch-size $MBS \
       --global-batch-size $GBS \
       --seq-length $SEQ \
       --max-position-embeddings $SEQ \
       --train-iters $ITERS \
       --checkpoint-activations \
       --fp16 2>&1 | tee ${OUT}
