#!/usr/bin/env bash
# Set up whatever is missing (tools/setup.sh), then run the whole test suite.
#   bash tools/run_tests.sh [--quick] [pytest args...]
# --quick: the tests not marked `slow` (every package area, a few minutes), for the
# edit-test loop; CI runs everything.  The run writes work_dirs/test_durations.json (the
# 30 slowest tests, the total, the CPU type) and warns when the suite took longer than its
# budget for this machine type (tests/durations.py).
# The tests run in parallel processes (pytest-xdist), one per core up to 4, each with
# cores / processes torch threads: most tests are small enough that one process keeps only
# one core busy. MMLINATTN_TEST_WORKERS=N sets the count (0: all in this process).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# --with deploy: the export tests run the model in ONNX Runtime and OpenVINO.
bash tools/setup.sh --with deploy
QUICK=()
if [ "${1:-}" = "--quick" ]; then
  shift
  QUICK=(-m "not slow")
fi
CORES="$(nproc)"
WORKERS="${MMLINATTN_TEST_WORKERS:-$(( CORES < 4 ? CORES : 4 ))}"
[ "$WORKERS" -gt 1 ] || WORKERS=0
# --durations: the slowest tests at the end of the log, to keep CI within its time budget
exec .venv/bin/python -m pytest -q -ra --durations=30 -n "$WORKERS" --dist worksteal \
  ${QUICK[@]+"${QUICK[@]}"} "$@"
