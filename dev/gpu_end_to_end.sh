#!/usr/bin/env bash
# A detector and a segmentor of ours end to end on a CUDA GPU, through the tools users run,
# each step under its own time limit, with its log (and JSON) in OUT_DIR:
#   1. mmcv_cuda: mmcv compiled with its CUDA ops for this GPU's compute capability (or
#      $TORCH_CUDA_ARCH_LIST) as tools/setup.sh compiles them on a GPU machine
#      (tools/misc/mmcv_source.sh), from the mmcv source that dev/device_wheels.sh put in
#      $WHEELS, installed into $SITE over the wheels' mmcv without ops; skipped where $PY's
#      mmcv has them already (a later call on the same machine).  Then mmcv's NMS, RoIAlign
#      and sigmoid focal loss on the GPU against the CPU (dev/check_mmcv_cuda.py).
#   2. retinanet: $DET_CONFIG trained for about $ITERS iterations on the drawn demo data
#      (tools/misc/demo_overrides.py) with tools/train.py, then evaluated with tools/test.py
#   3. upernet: the same for $SEG_CONFIG
#   4. whole_image: the whole-image segmentor (mmlinattn.WholeImageEncoderDecoder with the
#      striped head) and mmseg's whole mode of each family's UperNet at 2048^2-8192^2: time
#      and peak GPU memory (dev/gpu_whole_image.py)
# Usage: bash dev/gpu_end_to_end.sh [OUT_DIR]
# Time limits in seconds: $MMCV_CUDA_S (480), $RETINANET_S (180), $UPERNET_S (180),
# $WHOLE_IMAGE_S (240); 0 skips a step.  The work directories (checkpoints) go to $WORK
# (default /tmp/mmlinattn-e2e), not to OUT_DIR.  The device tool brings back at most 8 files
# from $OUT: run it as  bash dev/gpu_end_to_end.sh /tmp/e2e; tar -czf $OUT/e2e.tgz -C /tmp e2e
# MMLINATTN_E2E_ON_CPU=1 runs steps 2-4 on the CPU (mmcv's CPU ops, no build), small, to
# check the script where no GPU is.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-work_dirs/gpu_end_to_end}
# shellcheck source=dev/device_common.sh
source dev/device_common.sh
ON_CPU=${MMLINATTN_E2E_ON_CPU:-}
[ -n "$ON_CPU" ] || need_cuda gpu_end_to_end.sh
install_wheels
WORK=${WORK:-/tmp/mmlinattn-e2e}
ITERS=${ITERS:-40}
DET_CONFIG=${DET_CONFIG:-configs/retinanet_soft_small_1x.py}
SEG_CONFIG=${SEG_CONFIG:-configs/upernet_ldn_small_ade20k_160k.py}

has_cuda_ops() {
    "$PY" -c 'import sys; from mmcv.ops import get_compiling_cuda_version as v
sys.exit(v() in ("", "not available"))' 2>/dev/null
}

build_mmcv_cuda() {  # mmcv with its CUDA ops, compiled here as tools/setup.sh does, into $SITE
    local sdist build arch name
    sdist=$(ls "$WHEELS"/mmcv-*.tar.gz 2>/dev/null | head -n1)
    [ -n "$sdist" ] || { echo "no mmcv source in $WHEELS: run dev/device_wheels.sh" >&2; return 1; }
    name=$(basename "$sdist" .tar.gz)
    build=$(mktemp -d)
    # shellcheck source=tools/misc/mmcv_source.sh
    source tools/misc/mmcv_source.sh
    arch=$(MMLINATTN_MMCV_CUDA=1 mmcv_cuda_arch "$PY") || return 1
    unpack_mmcv_source "$PY" "$sdist" "$build" || return 1
    echo "compiling $name with its CUDA ops for compute capability $arch"
    build_mmcv_wheel "$PY" "$build/$name" "$build/out" "$arch" -q --no-index || return 1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" \
        "$build"/out/mmcv-*.whl || return 1
    rm -rf "$build"
    has_cuda_ops || { echo "mmcv was built but its CUDA ops do not load" >&2; return 1; }
}

mmcv_cuda() {
    if has_cuda_ops; then echo "mmcv's CUDA ops are there already"
    else build_mmcv_cuda || return 1
    fi
    "$PY" dev/check_mmcv_cuda.py --json "$OUT/mmcv_cuda.json"
}

train_and_test() {  # train_and_test NAME CONFIG: tools/train.py, then tools/test.py
    local name=$1 config=$2 opts
    "$PY" tools/dataset_converters/make_demo_data.py --out data/demo || return 1
    opts=$("$PY" tools/misc/demo_overrides.py "$config" --iters "$ITERS") || return 1
    rm -rf "${WORK:?}/$name"
    # shellcheck disable=SC2086  # opts is a list of key=value words
    "$PY" tools/train.py "$config" --work-dir "$WORK/$name" \
        --cfg-options $opts randomness.seed=0 || return 1
    # shellcheck disable=SC2086
    "$PY" tools/test.py "$config" "$(cat "$WORK/$name/last_checkpoint")" \
        --work-dir "$WORK/$name/test" --cfg-options $opts || return 1
    # the logs and metrics (not the checkpoints) into OUT_DIR
    mkdir -p "$OUT/$name"
    (cd "$WORK/$name" && find . \( -name '*.log' -o -name '*.json' \) -print0 \
        | xargs -0 -r cp --parents -t "$OUT/$name")
}
# run() runs a command under timeout: the steps above run in a bash of their own
export -f has_cuda_ops build_mmcv_cuda mmcv_cuda train_and_test
export PY OUT WHEELS SITE WORK ITERS

if [ -n "$ON_CPU" ]; then
    export CUDA_VISIBLE_DEVICES=''
    WHOLE=(--device cpu --families ldn --sizes 256)
else
    run mmcv_cuda "${MMCV_CUDA_S:-480}" bash -c mmcv_cuda
    WHOLE=()
fi
run retinanet "${RETINANET_S:-180}" bash -c 'train_and_test "$@"' - retinanet "$DET_CONFIG"
run upernet "${UPERNET_S:-180}" bash -c 'train_and_test "$@"' - upernet "$SEG_CONFIG"
run whole_image "${WHOLE_IMAGE_S:-240}" "$PY" dev/gpu_whole_image.py \
    ${WHOLE[@]+"${WHOLE[@]}"} --json "$OUT/whole_image.json"
exit $status
