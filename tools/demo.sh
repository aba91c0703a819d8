#!/usr/bin/env bash
# The main job on a fresh machine: set up whatever is missing, train a RetinaNet with a
# SOFT++ backbone on the blood-cell photos that ship in data/photos/bccd/ (205 microscope
# images, three classes), evaluate it on the 72 held-out photos with the real CocoMetric,
# print the result next to an untrained model's and draw the trained model's predictions on
# a held-out photo.
#   bash tools/demo.sh [CONFIG] [ITERS]
# CONFIG: any detection / segmentation config; one under configs/photos/ keeps its photo set,
# any other runs on the drawn demo datasets (written here by make_demo_data.py).  ITERS:
# about how many training iterations (default 400, the photo and demo configs' own length).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CONFIG=${1:-configs/photos/retinanet_soft_pico_bccd.py}
ITERS=${2:-${DEMO_ITERS:-400}}
WORK_DIR=${WORK_DIR:-work_dirs/demo}
# MMLINATTN_LANE=onedl: on the onedl-* forks' environment (requirements/lanes.txt)
# shellcheck source=tools/misc/lanes.sh
source tools/misc/lanes.sh
select_lane "${MMLINATTN_LANE:-}"
PY="$VENV_DIR/bin/python"
start=$(date +%s)

bash tools/setup.sh
$PY tools/dataset_converters/make_demo_data.py --out data/demo
# The photo and demo configs carry their data and a 400-iteration schedule; OPTS is empty for
# them at 400 iterations, fits a photo config's schedule to another length, and points any
# other config at the demo data.
OPTS=$($PY tools/misc/demo_overrides.py "$CONFIG" --iters "$ITERS")
rm -rf "$WORK_DIR"
# shellcheck disable=SC2086  # OPTS is a list of key=value words
$PY tools/train.py "$CONFIG" --work-dir "$WORK_DIR" --cfg-options $OPTS randomness.seed=0
CKPT=$(cat "$WORK_DIR/last_checkpoint")
# shellcheck disable=SC2086
$PY tools/test.py "$CONFIG" "$CKPT" --work-dir "$WORK_DIR/test" ${OPTS:+--cfg-options $OPTS} \
    | tee "$WORK_DIR/test.log"
$PY tools/analysis_tools/summarize_demo.py "$WORK_DIR" --seconds $(( $(date +%s) - start ))
# A real inference with the trained checkpoint (its class names are in meta['dataset_meta']):
# a picture of its predictions on the first test image, and the inferencer lines that reuse it.
$PY demo/image_demo.py "$WORK_DIR/$(basename "$CONFIG")" "$CKPT" --out-dir "$WORK_DIR/inference"
