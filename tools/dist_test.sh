#!/usr/bin/env bash
# Distributed testing through torchrun (PyTorch DDP); gloo on CPU, NCCL on GPUs.
#   bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [test.py args...]
set -euo pipefail
if [ $# -lt 3 ]; then echo "usage: bash tools/dist_test.sh CONFIG CHECKPOINT NUM_PROCS [test.py args...]" >&2; exit 2; fi
exec bash "$(dirname "${BASH_SOURCE[0]}")/dist_launch.sh" test.py "$3" "$1" "$2" "${@:4}"
