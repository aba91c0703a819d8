#!/usr/bin/env bash
# Set up whatever is missing (tools/setup.sh), then run the whole test suite.
#   bash tools/run_tests.sh [pytest args...]
# The tests run in parallel processes (pytest-xdist), one per core up to 4, each with
# cores / processes torch threads: most tests are small enough that one process keeps only
# one core busy. MMLINATTN_TEST_WORKERS=N sets the count (0: all in this process).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# --with deploy: the export tests run the model in ONNX Runtime and OpenVINO.
bash tools/setup.sh --with deploy
CORES="$(nproc)"
WORKERS="${MMLINATTN_TEST_WORKERS:-$(( CORES < 4 ? CORES : 4 ))}"
[ "$WORKERS" -gt 1 ] || WORKERS=0
# --durations: the slowest tests at the end of the log, to keep CI within its time budget
exec .venv/bin/python -m pytest -q -ra --durations=30 -n "$WORKERS" --dist worksteal "$@"
