#!/usr/bin/env bash
# Distributed training through torchrun (PyTorch DDP); gloo on CPU, NCCL on GPUs.
#   bash tools/dist_train.sh CONFIG NUM_PROCS [train.py args...]
set -euo pipefail
if [ $# -lt 2 ]; then echo "usage: bash tools/dist_train.sh CONFIG NUM_PROCS [train.py args...]" >&2; exit 2; fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/dist_launch.sh" train.py "$2" "$1" "${@:3}"
