#!/usr/bin/env bash
# A torch release newer than the lanes' verified one, checked on one lane: a scratch environment
# with that torch and the lane's other pins (tools/setup.sh with MMLINATTN_TORCH), mmcv compiled
# against it, then the lane's tests (tests/lane_tests.txt).
#   bash dev/torch_next.sh LANE TORCH TORCHVISION [VENV]
#   e.g. bash dev/torch_next.sh onedl 2.15.0 0.29.2
# The machine's pip configuration may cap torch at the release on its disk: this script reads no
# pip configuration (PIP_CONFIG_FILE=/dev/null), so torch and everything else come from PyPI.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ $# -ge 3 ] || { sed -n '2,9p' "$0"; exit 2; }
LANE=$1 TORCH=$2 TORCHVISION=$3
VENV=${4:-/tmp/mmlinattn-torch-$TORCH-$LANE}
export PIP_CONFIG_FILE=/dev/null
start=$(date +%s)
MMLINATTN_VENV="$VENV" MMLINATTN_TORCH="$TORCH,$TORCHVISION" \
  bash tools/setup.sh --lane "$LANE" --with deploy
echo "[torch_next] set-up: $(( $(date +%s) - start )) s"
mapfile -t TESTS < <(sed 's/#.*//; /^[[:space:]]*$/d; s/[[:space:]]*$//' tests/lane_tests.txt)
MMLINATTN_TEST_DURATIONS="$ROOT/work_dirs/test_durations_${LANE}_torch$TORCH.json" \
  exec "$VENV/bin/python" -m pytest -q -ra -n 2 --dist worksteal "${TESTS[@]}"
