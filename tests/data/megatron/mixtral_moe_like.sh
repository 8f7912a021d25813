#!/bin/bash
# A two-layer, two-expert MoE test model on 2 GPUs, after Megatron-LM's examples/mixtral launcher:
# several flags are switched off by commenting them out inside the arrays (bf16 among them).

GPUS=2
NNODES=${SLURM_NNODES:-"1"}
RANK0=${RANK:-"0"}

LAUNCH=(
    --nproc_per_node $GPUS
    --nnodes $NNODES
    --node_rank $RANK0
)

MODEL=(
    --num-layers 2
    --hidden-size 256
    --ffn-hidden-size 896
    --num-attention-heads 2
    --group-query-attention
    --num-query-groups 2
    --seq-length 256
    --swiglu
)

MOE=(
    --num-experts 2
    --moe-router-topk 2
#    --moe-grouped-gemm
    --moe-token-dispatcher-type alltoall
    --overlap-grad-reduce
    --overlap-param-gather
)

TRAIN=(
    --micro-batch-size 1
    --global-batch-size 4
    # --lr-decay-style cosine
    --train-iters 7
    # --bf16
)

PARALLEL=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --expert-model-parallel-size 2
    --sequence-parallel
    --use-distributed-optimizer
)

LOG=(
   # --log-interval 1 \
    --eval-iters 10 \
    #--tensorboard-dir "${HOME}/tb" \
    --no-load-rng
)

if [ -n "${WANDB_API_KEY}" ]; then
    LOG+=(
        --wandb-project ${WANDB_PROJECT:-"moe-test"}
    )
fi

torchrun ${LAUNCH[@]} pretrain_gpt.py \
    ${MODEL[@]} \
    ${MOE[@]} \
    ${TRAIN[@]} \
    ${PARALLEL[@]} \
    ${LOG[@]}
