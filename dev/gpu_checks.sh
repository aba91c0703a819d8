#!/usr/bin/env bash
# The checks that need a CUDA GPU, in the order that pays off when GPU time is short (about
# 10 minutes on an H100 before the bf16 training checks were added, most of it compiling
# kernels), each under its own time limit, with
# its log and JSON in OUT_DIR:
#   1. the linear-attention core's sums over tokens, one matmul against segments
#      (bench_token_sums.py, float32, the stages of a 2048^2 pyramid; seconds)
#   2. LDN's linear-attention core with and without its Triton kernels, float16 / bfloat16 /
#      float32, the stages of 2048^2 and 8192^2 pyramids, each against float64
#      (bench_triton_core.py; the kernels' first compilation, then seconds)
#   3. fp16 / bf16 autocast forward + backward of every family at 2048^2 (check_amp_gpu.py;
#      SOFT++ with 49 pooled landmarks: the paper's m = 4096 ran out of an H100's 80 GB; and
#      SOFT++ pinv='cholesky', the paper's rule)
#   4. inference latency and memory of every family's small arch, fp16, 2048^2 and 8192^2,
#      with the 15 kernels that took the most GPU time in one profiled step of each, and each
#      record's roofline bound; Swin-T and ResNet-50 beside them where mmdet imports
#   5. training steps under fp16 autocast of every family's small arch (and the peers):
#      1333x800 batch 2 (train_det) and 512^2 batch 8 (train_seg); then the same under
#      bf16 autocast (train_det_bf16, train_seg_bf16)
#   6. every family on the GPU against the CPU in float64 (check_amp_gpu.py, check 0)
# Usage: bash dev/gpu_checks.sh [OUT_DIR]  (the device tool brings back at most 8 files from
# $OUT: bash dev/gpu_checks.sh /tmp/checks; tar -czf $OUT/checks.tgz -C /tmp checks)
# Time limits in seconds: $TOKEN_SUMS_S (60), $TRITON_CORE_S (120), $AUTOCAST_S (240),
# $BENCHMARK_S (300), $TRAIN_DET_S (180), $TRAIN_SEG_S (180), $TRAIN_DET_BF16_S (180),
# $TRAIN_SEG_BF16_S (180), $PARITY_S (420: five of its
# six models took 280 s on an H200 with a cold compile cache); lower them when device time
# is short (a check cut off by its limit keeps its log); 0 skips a check: one call may take
# 10 min, so split them, e.g. AUTOCAST_S=0 TRAIN_DET_S=0 TRAIN_SEG_S=0 TRAIN_DET_BF16_S=0
# TRAIN_SEG_BF16_S=0 PARITY_S=0 first.
# The interpreter: $PYTHON, else .venv/bin/python where tools/setup.sh made it, else python3.
# On a machine without mmdet: the wheels of dev/device_wheels.sh in $WHEELS (default
# .whl, carried with the tree) are installed into $SITE (default /tmp/mmlinattn-site) first,
# and the benchmark then times mmdet's Swin-T and ResNet-50 beside our backbones.
set -u
cd "$(dirname "$0")/.."
OUT=${1:-work_dirs/gpu_checks}
# shellcheck source=dev/device_common.sh
source dev/device_common.sh
need_cuda gpu_checks.sh
install_wheels
PEERS=()
if "$PY" -c 'import mmdet.models' 2>/dev/null; then PEERS=(Swin-T ResNet-50); fi
run token_sums "${TOKEN_SUMS_S:-60}" "$PY" dev/bench_token_sums.py --device cuda \
    --size 2048 --json "$OUT/token_sums.json"
run triton_core "${TRITON_CORE_S:-120}" "$PY" dev/bench_triton_core.py \
    --sizes 2048 8192 --json "$OUT/triton_core.json"
run autocast "${AUTOCAST_S:-240}" "$PY" dev/check_amp_gpu.py --no-parity --size 2048 \
    --soft-max-landmarks 49 --json "$OUT/autocast.json"
run benchmark "${BENCHMARK_S:-300}" "$PY" tools/analysis_tools/benchmark.py \
    --device cuda --dtype float16 \
    --models SOFT:small:max_landmarks=49 NaLaFormer:small InfViT:small LDN:small InfViTPlain:l4 \
    ${PEERS[@]+"${PEERS[@]}"} --sizes 2048 8192 --repeats 3 --budget 5 --timeout 80 --profile 15 \
    --json "$OUT/benchmark.json" --plot "$OUT/benchmark.png"
# issue targets: training under fp16 and bf16 autocast at a detector's and a segmentor's
# size, every family's small arch beside the peers (same run: one card, minutes apart)
TRAIN_MODELS=(SOFT:small:max_landmarks=49 NaLaFormer:small InfViT:small LDN:small)
train_check() {  # train_check NAME LIMIT DTYPE SIZE BATCH
    run "$1" "$2" "$PY" tools/analysis_tools/benchmark.py \
        --device cuda --dtype "$3" --modes train --models "${TRAIN_MODELS[@]}" \
        ${PEERS[@]+"${PEERS[@]}"} --sizes "$4" --batch "$5" --repeats 3 --budget 5 --timeout 80 \
        --json "$OUT/$1.json"
}
train_check train_det "${TRAIN_DET_S:-180}" float16 1333x800 2
train_check train_seg "${TRAIN_SEG_S:-180}" float16 512 8
train_check train_det_bf16 "${TRAIN_DET_BF16_S:-180}" bfloat16 1333x800 2
train_check train_seg_bf16 "${TRAIN_SEG_BF16_S:-180}" bfloat16 512 8
run parity "${PARITY_S:-420}" "$PY" dev/check_amp_gpu.py --parity-only \
    --json "$OUT/parity.json"
exit $status
