#!/usr/bin/env bash
# The wheels a bare GPU machine lacks for dev/gpu_checks.sh with the OpenMMLab peers
# (mmdet's Swin-T and ResNet-50 beside our backbones) and for dev/gpu_end_to_end.sh:
# mmengine, mmdet, mmseg and their pure-Python or manylinux dependencies at the versions of
# requirements/constraints.txt, for that machine's Python (default 3.12), mmcv built here
# without its compiled ops (pure Python; the scripts add dev/mmcv_ext_stub.py as its
# mmcv._ext, so that mmdet's imports of mmcv.ops succeed: the backbones call none of them),
# and mmcv's source, from which gpu_end_to_end.sh compiles its CUDA ops there.  About 11 MB,
# into DIR (default .whl, git-ignored), which both scripts install when they find it:
#   bash dev/device_wheels.sh [DIR] [PYTHON_VERSION]
# Needs network access to the package index (run it here, carry DIR to the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.whl}
PYV=${2:-3.12}
CONSTRAINTS=requirements/constraints.txt
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x .venv/bin/python ]; then PY=.venv/bin/python
else PY=python3
fi
pin() { sed -n "s/^$1==//p" "$CONSTRAINTS"; }
mkdir -p "$DIR"
PKGS=()
# setuptools at the lanes' pin: mmcv's setup.py and mmengine import pkg_resources, which the
# GPU machine's own setuptools may no longer ship (82 and newer)
for name in mmengine mmdet mmsegmentation addict yapf platformdirs termcolor terminaltables \
        pycocotools shapely ftfy wcwidth prettytable setuptools; do
    PKGS+=("$name==$(pin "$name")")
done
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$PYV" --implementation cp --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DIR" "${PKGS[@]}"
MMCV=$(pin mmcv)
# mmcv's source: dev/gpu_end_to_end.sh compiles its CUDA ops from it on the GPU machine
[ -e "$DIR/mmcv-$MMCV.tar.gz" ] || "$PY" -m pip download -q --disable-pip-version-check \
    --no-deps --no-binary=:all: --no-build-isolation "mmcv==$MMCV" -d "$DIR"
if ! ls "$DIR"/mmcv_lite-"$MMCV"-*.whl >/dev/null 2>&1; then
    BUILD=$(mktemp -d)
    tar -xzf "$DIR/mmcv-$MMCV.tar.gz" -C "$BUILD"
    MMCV_WITH_OPS=0 "$PY" -m pip wheel -q --disable-pip-version-check --no-deps \
        --no-build-isolation "$BUILD/mmcv-$MMCV" -w "$DIR" > "$BUILD/build.log" 2>&1 \
        || { cat "$BUILD/build.log" >&2; exit 1; }
    rm -rf "$BUILD"
fi
ls "$DIR"
du -sh "$DIR"
