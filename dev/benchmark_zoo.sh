#!/usr/bin/env bash
# Inference latency of every backbone arch a shipped config uses, against mmdet's Swin-T and
# ResNet-50 in the same interleaved rounds (float32, batch 1). SOFT++ twice: the paper's
# landmark rule with pinv='cholesky', and max_landmarks=49. The model-zoo pages quote this
# record's ratios to Swin-T. Usage: bash dev/benchmark_zoo.sh [OUT.json] (run under the CPU lock).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-records/benchmark_zoo_1024_zen4.json}
models=()
for a in tiny small medium large; do
    models+=("SOFT:$a:pinv='cholesky'" "SOFT:$a:max_landmarks=49")
done
models+=(NaLaFormer:tiny NaLaFormer:small NaLaFormer:base InfViT:tiny InfViT:small InfViTPlain:l4
         LDN:tiny LDN:small Swin-T ResNet-50)
exec .venv/bin/python tools/analysis_tools/benchmark.py --models "${models[@]}" \
    --sizes 512 1024 --modes infer --repeats 1 --interleave 3 --timeout 300 --json "$OUT"
