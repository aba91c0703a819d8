#!/usr/bin/env bash
# Shared torchrun launcher of dist_train.sh and dist_test.sh (PyTorch DDP; gloo on CPU, NCCL
# on GPUs):  bash tools/dist_launch.sh SCRIPT NUM_PROCS [SCRIPT args...]
# Environment: NNODES, NODE_RANK, PORT, MASTER_ADDR, PYTHON (default: the activated virtual
# environment's python (VIRTUAL_ENV: .venv-onedl for the onedl lane), else the repository's
# .venv/bin/python when it exists, else python from PATH).
set -euo pipefail
SCRIPT=$1
NPROC=$2
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV_PYTHON="$DIR/../.venv/bin/python"
if [ -z "${PYTHON:-}" ]; then
    if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
        PYTHON="$VIRTUAL_ENV/bin/python"
    elif [ -x "$VENV_PYTHON" ]; then PYTHON=$VENV_PYTHON; else PYTHON=python; fi
fi
PYTHONPATH="$DIR/..:${PYTHONPATH:-}" exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$NPROC" --master_port="$PORT" \
    "$DIR/$SCRIPT" "${@:3}" --launcher pytorch
