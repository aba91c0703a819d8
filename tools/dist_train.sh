#!/usr/bin/env bash
# Distributed training through torchrun (PyTorch DDP); gloo on CPU, NCCL on GPUs.
#   bash tools/dist_train.sh CONFIG NUM_PROCS [train.py args...]
set -euo pipefail
CONFIG=$1
NPROC=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON=${PYTHON:-python}
PYTHONPATH="$DIR/..:${PYTHONPATH:-}" exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$DIR/train.py" "$CONFIG" --launcher pytorch "${@:3}"
