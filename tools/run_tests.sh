#!/usr/bin/env bash
# Set up whatever is missing (tools/setup.sh), then run the whole test suite.
#   bash tools/run_tests.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# --with deploy: the export tests run the model in ONNX Runtime and OpenVINO.
bash tools/setup.sh --with deploy
# --durations: the slowest tests at the end of the log, to keep CI within its time budget
exec .venv/bin/python -m pytest -q -ra --durations=30 "$@"
