#!/bin/bash
# GPT-3 175B on one node: the shape of Megatron-LM's examples/gpt3 launcher, arguments in arrays.

SAVE_DIR=$1
TB_DIR=$2
VOCAB=$3
MERGES=$4
CORPUS=$5

NODES=1
GPUS=8
WORLD=$(($GPUS*$NODES))

LAUNCH=(
    --nproc_per_node $GPUS
    --nnodes $NODES
    --master_addr localhost
    --master_port 6000
)

MODEL=(
    --num-layers 96
    --hidden-size 12288
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --attention-backend auto # kernel choice; not part of the shape
)

PARALLEL=(
	--tensor-model-parallel-size 8
	--pipeline-model-parallel-size 16
)

OPTIM=(
    --micro-batch-size 1
    --global-batch-size 1536
    --rampup-batch-size 16 16 5859375
    --fp16
    --lr 6.0e-5
)

IO=(
    --data-path $CORPUS
    --vocab-file $VOCAB
    --merge-file $MERGES
    --save $SAVE_DIR
    --tensorboard-dir $TB_DIR
)

torchrun ${LAUNCH[@]} pretrain_gpt.py \
    ${MODEL[@]} \
    ${PARALLEL[@]} \
    ${OPTIM[@]} \
    ${IO[@]}
