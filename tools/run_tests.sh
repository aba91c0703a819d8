#!/usr/bin/env bash
# Set up whatever is missing (tools/setup.sh), then run the whole test suite.
#   bash tools/run_tests.sh [--lane onedl|torch21] [--quick] [pytest args...]
# --quick: the tests not marked `slow` (every package area, a few minutes), for the
# edit-test loop; CI runs everything.
# --lane onedl: on the onedl-* forks' environment (.venv-onedl, set up first), the tests listed
# in tests/lane_tests.txt: a hand-picked part of the suite, where the two stacks' OpenMMLab code
# may differ, not every test that runs mmengine, mmcv, mmdet or mmseg (the backbones' own tests
# need only torch, the same on both).  --lane torch21: on
# torch 2.1 / numpy 1 / timm 0.9 (.venv-torch21), the tests of tests/lane_tests_torch21.txt
# (a lane's own list, tests/lane_tests_LANE.txt, where it has one).  CI runs the other lanes
# after the whole suite on the default lane.
# The run writes work_dirs/test_durations.json (test_durations_LANE.json for another lane: the
# 30 slowest tests, the total, the CPU type) and warns when the suite took longer than its
# budget for this machine type (tests/durations.py).
# The tests run in parallel processes (pytest-xdist), one per core up to 4, each with
# cores / processes torch threads: most tests are small enough that one process keeps only
# one core busy. MMLINATTN_TEST_WORKERS=N sets the count (0: all in this process).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=tools/misc/lanes.sh
source tools/misc/lanes.sh
LANE_ARG=""
if [ "${1:-}" = "--lane" ]; then
  [ $# -ge 2 ] || { echo "--lane needs a name, e.g. --lane onedl" >&2; exit 2; }
  LANE_ARG="$2"
  shift 2
fi
select_lane "$LANE_ARG"
# --with deploy: the export tests run the model in ONNX Runtime and OpenVINO (on the lanes
# that have the extra: torch 2.1 has no torch.export-based ONNX exporter).
DEPLOY=()
[ ! -f "$(dirname "$CONSTRAINTS_FILE")/deploy.txt" ] || DEPLOY=(--with deploy)
bash tools/setup.sh --lane "$LANE" ${DEPLOY[@]+"${DEPLOY[@]}"}
QUICK=()
if [ "${1:-}" = "--quick" ]; then
  shift
  QUICK=(-m "not slow")
fi
SELECTED=()
if [ "$LANE" != "$DEFAULT_LANE" ]; then
  export MMLINATTN_TEST_DURATIONS="$ROOT/work_dirs/test_durations_$LANE.json"
  LIST=tests/lane_tests.txt
  [ ! -f "tests/lane_tests_$LANE.txt" ] || LIST="tests/lane_tests_$LANE.txt"
  if [ $# -eq 0 ]; then
    mapfile -t SELECTED < <(sed 's/#.*//; /^[[:space:]]*$/d; s/[[:space:]]*$//' "$LIST")
  fi
fi
# The tests write about 2.5 GB of checkpoints and work dirs under the temporary folder (what
# passing tests wrote is removed at the end): a full disk otherwise fails a tool test half-way
# with "[Errno 28] No space left on device".
TEST_TMP="${TMPDIR:-/tmp}"
free_kb="$(df -Pk "$TEST_TMP" | awk 'NR==2 {print $4}')"
if [ "$free_kb" -lt $((3 * 1024 * 1024)) ]; then
  echo "[run_tests] the tests need about 3 GB free under $TEST_TMP and only $((free_kb / 1024)) MB" \
    "are free; free some space there (old pytest-of-$(id -un) folders, old clones' .venv" \
    "folders) or point TMPDIR at a disk with room" >&2
  exit 1
fi
CORES="$(nproc)"
WORKERS="${MMLINATTN_TEST_WORKERS:-$(( CORES < 4 ? CORES : 4 ))}"
[ "$WORKERS" -gt 1 ] || WORKERS=0
# --durations: the slowest tests at the end of the log, to keep CI within its time budget
exec "$VENV_DIR/bin/python" -m pytest -q -ra --durations=30 -n "$WORKERS" --dist worksteal \
  ${QUICK[@]+"${QUICK[@]}"} ${SELECTED[@]+"${SELECTED[@]}"} "$@"
