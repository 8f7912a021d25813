#!/bin/bash
#SBATCH --nodes=2
#SBATCH --gpus-per-node=4
#SBATCH --ntasks-per-node=1
#SBATCH --time=00:30:00
# Llama-3.1-8B, TP 4 x DP 2 over two 4-GPU nodes, after the ccl-bench Perlmutter run.sh:
# the variables and the torchrun command all live inside the single-quoted bash -c script.

export MASTER_ADDR=$(scontrol show hostname $SLURM_NODELIST | head -n 1)

srun --export=ALL shifter \
  bash -c '
    cd /scratch/megatron-lm
    NODES=2
    PER_NODE=4
    NODE_RANK=$SLURM_PROCID   # set by srun for each task
    TP=4
    CP=1
    MBS=1
    GBS=32
    LAYERS=32
    SEQ=1024

    torchrun \
        --nproc_per_node $PER_NODE \
        --nnodes $NODES \
        --node_rank $NODE_RANK \
        --master_addr $MASTER_ADDR \
        pretrain_gpt.py \
        --num-layers $LAYERS \
        --hidden-size 4096 \
        --ffn-hidden-size 14336 \
        --num-attention-heads 32 \
        --group-query-attention \
        --num-query-groups 8 \
        --kv-channels 128 \
        --seq-length $SEQ \
        --max-position-embeddings $SEQ \
        --swiglu \
        --micro-batch-size $MBS \
        --global-batch-size $GBS \
        --bf16 \
        --recompute-granularity full \
        --recompute-method uniform \
        --recompute-num-layers 32 \
        --use-distributed-optimizer \
        --tensor-model-parallel-size $TP \
        --context-parallel-size $CP \
        --split "100,0,0"
  '
