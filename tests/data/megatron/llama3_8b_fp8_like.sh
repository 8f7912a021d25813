#!/bin/bash
# Llama-3-8B in FP8 on one 8-GPU node, written after Megatron-LM's examples/llama FP8 launcher:
# sizes in variables, precision flags added by a condition, data flags chosen by positional arguments.

CKPT=${1:-"ckpt/llama3_8b"}
TOKENIZER=${2:-"MOCK"}
CORPUS=${3:-"MOCK"}

PRECISION="fp8"
LAYERS=32
SEQ=8192
TP=1
CP=1
PP=1
MBS=1
GBS=128
GPUS=8
NODES=1
WORLD=$(($GPUS*$NODES))

LAUNCH=(
    --nproc_per_node $GPUS
    --nnodes $NODES
    --master_addr ${MASTER_ADDR:-localhost}
)

MODEL=(
    --num-layers $LAYERS
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --kv-channels 128
    --seq-length $SEQ
    --max-position-embeddings $SEQ
    --swiglu
)

TRAIN=(
    --micro-batch-size $MBS
    --global-batch-size $GBS
    --bf16
    --grad-reduce-in-bf16
    --lr 0.00015   # peak; cosine decay follows
)

PREC=()
if [[ "$PRECISION" == "fp8" ]]; then
    PREC+=(
        "--fp8-format hybrid"
        "--fp8-amax-history-len 1024"
    )
fi

PARALLEL=(
    --tensor-model-parallel-size $TP
    --context-parallel-size $CP
    # --pipeline-model-parallel-size $PP
    --sequence-parallel  # on even at TP 1
)

OVERLAP=(
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
TRAIN+=("${OVERLAP[@]}")

DATA=()
if [[ "$TOKENIZER" == "MOCK" ]] || [[ -z "$CORPUS" ]]; then
    DATA+=(
        "--mock-data"
        "--tokenizer-type NullTokenizer"
        "--vocab-size 128256"
    )
else
    DATA+=(
        "--data-path $CORPUS"
        "--tokenizer-model $TOKENIZER"
        "--vocab-size 128256"
    )
fi

torchrun ${LAUNCH[@]} pretrain_gpt.py \
    ${MODEL[@]} \
    ${TRAIN[@]} \
    ${PREC[@]} \
    ${PARALLEL[@]} \
    ${DATA[@]} \
    --save "$CKPT"
