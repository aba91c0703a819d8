#!/usr/bin/env bash
# Sets up everything mmlinattn needs on a fresh machine, unattended and idempotent:
#   .venv/ (git-ignored) with the verified OpenMMLab stack, mmcv compiled with its ops,
#   and mmlinattn itself in editable mode.  A second run only re-checks (seconds).
#   bash tools/setup.sh [--lane onedl|torch21] [--with EXTRA ...]
#   --lane onedl    the maintained onedl-* forks instead of official OpenMMLab, in .venv-onedl/
#   --lane torch21  official OpenMMLab on torch 2.1 / numpy 1 / timm 0.9 (the environment most
#                   mmdet 3.3 users already have; the declared floors), in .venv-torch21/
#                   (requirements/lanes.txt lists the lanes and their verified versions)
#   --with deploy   also installs requirements/deploy.txt (ONNX export, ONNX Runtime, OpenVINO)
# mmcv's CUDA ops are compiled too where torch sees a GPU and nvcc is on PATH
# (MMLINATTN_MMCV_CUDA=0 / =1 with TORCH_CUDA_ARCH_LIST decide otherwise).  The compiled mmcv
# wheel is kept outside the clone in $MMLINATTN_WHEELHOUSE (default
# ~/.cache/mmlinattn/wheelhouse), keyed by the torch version, so later clones
# on the same machine (and CI) install it in seconds instead of recompiling.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
LANE="${MMLINATTN_LANE:-}"
STEP="start"
EXTRAS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --lane) [ $# -ge 2 ] || { echo "[setup] --lane needs a name, e.g. --lane onedl" >&2; exit 2; }
            LANE="$2"; shift 2 ;;
    --lane=*) LANE="${1#--lane=}"; shift ;;
    --with) [ $# -ge 2 ] || { echo "[setup] --with needs a name, e.g. --with deploy" >&2; exit 2; }
            EXTRAS+=("$2"); shift 2 ;;
    --with=*) EXTRAS+=("${1#--with=}"); shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "[setup] unknown argument '$1' (usage: tools/setup.sh [--lane onedl|torch21] [--with deploy])" >&2; exit 2 ;;
  esac
done
# shellcheck source=tools/misc/lanes.sh
source "$ROOT/tools/misc/lanes.sh"
# shellcheck source=tools/misc/mmcv_source.sh
source "$ROOT/tools/misc/mmcv_source.sh"
select_lane "$LANE"
VENV="${MMLINATTN_VENV:-$ROOT/$VENV_DIR}"
PY="$VENV/bin/python"
CONSTRAINTS="$ROOT/$CONSTRAINTS_FILE"
REQS="$(dirname "$CONSTRAINTS")"  # the lane's runtime.txt and extras
TORCH_VERSION="$(sed -n 's/^torch==//p' "$CONSTRAINTS")"
TORCHVISION=torchvision
# MMLINATTN_TORCH=TORCH,TORCHVISION (with MMLINATTN_VENV): a torch release other than the lane's
# verified one, to check a new release (dev/torch_next.sh); the lane's other pins are kept.
if [ -n "${MMLINATTN_TORCH:-}" ]; then
  TORCH_VERSION="${MMLINATTN_TORCH%%,*}"
  TORCHVISION="torchvision==${MMLINATTN_TORCH#*,}"
  mkdir -p "$VENV"
  grep -v -i -E '^(torch|torchvision|triton|nvidia-[a-z0-9-]*|cuda-[a-z-]*)==' "$CONSTRAINTS" \
    > "$VENV/.constraints-torch-$TORCH_VERSION"
  CONSTRAINTS="$VENV/.constraints-torch-$TORCH_VERSION"
fi
# check_env.py --strict: every version the lane's (none but torch's otherwise)
STRICT=--strict
[ -z "${MMLINATTN_TORCH:-}" ] || STRICT=
MMCV_VERSION="$(sed -n "s/^$MMCV_DIST==//p" "$CONSTRAINTS")"
MMCV_WHEEL_NAME="${MMCV_DIST//-/_}-$MMCV_VERSION"
WHEELHOUSE="${MMLINATTN_WHEELHOUSE:-$HOME/.cache/mmlinattn/wheelhouse}/torch-$TORCH_VERSION"
STAMP="$VENV/.mmlinattn-setup"
for extra in "${EXTRAS[@]}"; do
  [ -f "$REQS/$extra.txt" ] || {
    echo "[setup] unknown extra '$extra': there is no ${REQS#"$ROOT"/}/$extra.txt (known: $(ls "$REQS" | sed -n 's/\.txt$//p' | grep -v -e constraints -e runtime -e -nodeps -e lanes | tr '\n' ' '))" >&2
    exit 2; }
done

log() { printf '[setup %s %s] %s\n' "$LANE" "$(date +%H:%M:%S)" "$*"; }
fail() { printf '[setup] FAILED at step "%s": %s\n' "$STEP" "$*" >&2; exit 1; }
trap 'fail "command exited with status $? (see the output above)"' ERR

# A digest of everything that decides the environment's content: change any of them and
# the next run re-installs.
digest() {
  { cat "$LANES_FILE" "$CONSTRAINTS" "$REQS/runtime.txt" "$ROOT/pyproject.toml" "$ROOT/tools/setup.sh" \
      "$ROOT/tools/misc/mmcv_source.sh"
    # which of mmcv's ops are compiled (MMLINATTN_MMCV_CUDA, a GPU and nvcc decide)
    echo "mmcv CUDA ops: $(mmcv_cuda_arch "$PY" 2>/dev/null || true)"
  } | sha256sum | cut -c1-16
}

# pip warns about every index location of the machine's pip config that does not exist;
# keep the log readable (pipefail keeps pip's exit status).
quiet() { "$@" 2>&1 | { grep -v "^WARNING: Location '.*' is ignored" || true; }; }
pipi() { quiet "$PY" -m pip install --disable-pip-version-check -q -c "$CONSTRAINTS" "$@"; }

STEP="check system tools"
command -v python3 >/dev/null || fail "python3 not found; install Python 3.9-3.12 (3.11 is the verified one)"
python3 -c 'import sys; assert (3, 9) <= sys.version_info[:2] <= (3, 12), sys.version' \
  || fail "Python 3.9-3.12 is required (found $(python3 --version))"
if [ "$LANE" = onedl ]; then
  python3 -c 'import sys; assert sys.version_info[:2] >= (3, 10)' \
    || fail "the onedl lane needs Python 3.10-3.12: its packages declare Python >= 3.10 (found $(python3 --version))"
fi
case "$TORCH_VERSION" in
  2.0.*|2.1.*)  # no wheels of these torch releases for Python 3.12
    python3 -c 'import sys; assert sys.version_info[:2] <= (3, 11)' \
      || fail "torch $TORCH_VERSION (lane $LANE) has wheels for Python 3.8-3.11 only (found $(python3 --version)); put a Python 3.11 first on PATH as python3" ;;
esac
if ! command -v g++ >/dev/null; then
  log "installing a C++ compiler (needed to build mmcv's ops)"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq g++ >/dev/null
  else
    fail "g++ is missing; install it (e.g. 'sudo apt-get install g++') and re-run"
  fi
fi

# Optional extras, each with its own stamp so that asking for one does not redo the base.
install_extras() {
  for extra in "${EXTRAS[@]}"; do
    STEP="install the '$extra' extra"
    local stamp="$VENV/.mmlinattn-extra-$extra"
    local want
    # requirements/EXTRA-nodeps.txt: packages whose declared pins the stack cannot meet,
    # installed without their dependencies (which EXTRA.txt lists)
    local nodeps="$REQS/$extra-nodeps.txt"
    want="$(cat "$CONSTRAINTS" "$REQS/$extra.txt" \
      $( [ -f "$nodeps" ] && echo "$nodeps" ) | sha256sum | cut -c1-16)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
      log "extra '$extra' up to date"
    else
      log "$STEP (${REQS#"$ROOT"/}/$extra.txt)"
      pipi -r "$REQS/$extra.txt"
      if [ -f "$nodeps" ]; then
        pipi --no-deps -r "$nodeps"
      fi
      echo "$want" > "$stamp"
    fi
  done
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(digest)" ]; then
  STEP="verify existing environment"
  "$PY" "$ROOT/tools/misc/check_env.py" --quiet $STRICT \
    || fail "the environment in $VENV_DIR is broken; remove $VENV_DIR and run tools/setup.sh again"
  log "environment up to date ($VENV)"
  install_extras
  exit 0
fi

STEP="check free disk space"
# A full disk otherwise shows up as pip's "[Errno 28] No space left on device" half-way
# through torch.  The finished .venv takes about 6.5 GB (5.5 GB of it torch's CUDA wheels,
# which its import needs even on a CPU-only machine).
if ! ls -d "$VENV"/lib/python3*/site-packages/torch >/dev/null 2>&1; then
  mkdir -p "$VENV"
  free_kb="$(df -Pk "$VENV" | awk 'NR==2 {print $4}')"
  need_kb=$((7 * 1024 * 1024))
  [ "$free_kb" -ge "$need_kb" ] || fail "the environment needs about 7 GB free on the disk \
that holds $VENV, and only $((free_kb / 1024)) MB are free; free some space there (pip's \
cache: ~/.cache/pip; old clones' .venv folders) and run tools/setup.sh again"
fi

STEP="create virtual environment"
[ -x "$PY" ] || { log "creating $VENV"; python3 -m venv "$VENV"; }
quiet "$PY" -m pip install --disable-pip-version-check -q --upgrade "pip>=24"

STEP="install torch $TORCH_VERSION and torchvision"
log "$STEP (first time: ~5.5 GB with the CUDA runtime wheels, a few minutes)"
pipi "torch==$TORCH_VERSION" "$TORCHVISION"

STEP="install build tools"
pipi setuptools ninja wheel

STEP="install mmengine"
pipi "$MMENGINE_DIST"

STEP="decide which of mmcv's ops to compile"
MMCV_CUDA_ARCH="$(mmcv_cuda_arch "$PY")" || fail "see the line above"
# a wheel with CUDA ops has the CPU one's name: a folder of its own
MMCV_HOUSE="$WHEELHOUSE${MMCV_CUDA_ARCH:+-cuda-${MMCV_CUDA_ARCH//[^0-9.]/-}}"
STEP="build or reuse $MMCV_DIST $MMCV_VERSION with compiled ops"
mkdir -p "$MMCV_HOUSE"
WHEEL="$(ls "$MMCV_HOUSE"/"$MMCV_WHEEL_NAME"-*.whl 2>/dev/null | head -n1 || true)"
if [ -z "$WHEEL" ]; then
  BUILD="$(mktemp -d)"
  quiet "$PY" -m pip download --disable-pip-version-check -q --no-deps --no-binary=:all: --no-build-isolation \
    "$MMCV_DIST==$MMCV_VERSION" -d "$BUILD"
  SRC="$BUILD/$MMCV_WHEEL_NAME"
  unpack_mmcv() {
    unpack_mmcv_source "$PY" "$BUILD/$MMCV_WHEEL_NAME.tar.gz" "$BUILD" \
      || fail "could not unpack $MMCV_DIST's source or patch its setup.py"
  }
  build_mmcv() {
    quiet build_mmcv_wheel "$PY" "$SRC" "$BUILD/out" "$MMCV_CUDA_ARCH" \
      --disable-pip-version-check -q
  }
  unpack_mmcv
  if [ -n "$MMCV_CUDA_ARCH" ]; then
    log "compiling $MMCV_DIST $MMCV_VERSION with its CUDA ops for compute capability $MMCV_CUDA_ARCH against torch $TORCH_VERSION (about 36 min on 2 cores, minutes on many; once per machine)"
    build_mmcv || fail "compiling mmcv's CUDA ops failed (output above): nvcc's CUDA must be \
the one torch was built with ($("$PY" -c 'import torch; print(torch.version.cuda)')); \
MMLINATTN_MMCV_CUDA=0 bash tools/setup.sh compiles the CPU ops only"
  else
    log "compiling $MMCV_DIST $MMCV_VERSION against torch $TORCH_VERSION (2-4 min on 2 cores, once per machine)"
    # Five translation units instead of 77: torch's headers are parsed 5 times, not 77
    # (about 4 instead of 15-20 minutes); the usual per-file build if that fails.
    if "$PY" "$ROOT/tools/misc/mmcv_unity_build.py" "$SRC" >/dev/null \
        && build_mmcv >"$BUILD/unity.log" 2>&1; then
      :
    else
      log "unity build of mmcv failed (last lines below); compiling file by file (15-20 min on 2 cores)"
      tail -n 20 "$BUILD/unity.log" 2>/dev/null || true
      rm -rf "$BUILD/out"
      unpack_mmcv
      build_mmcv
    fi
  fi
  mv "$BUILD"/out/"$MMCV_WHEEL_NAME"-*.whl "$MMCV_HOUSE"/
  rm -rf "$BUILD"
  WHEEL="$(ls "$MMCV_HOUSE"/"$MMCV_WHEEL_NAME"-*.whl | head -n1)"
else
  log "reusing $WHEEL"
fi
pipi --no-deps --force-reinstall "$WHEEL"
# mmcv's own runtime dependencies (installed without --no-deps resolution above).
pipi addict packaging Pillow pyyaml yapf opencv-python

STEP="install mmdet, mmseg, timm and the project's runtime dependencies"
pipi -r "$REQS/runtime.txt"

STEP="install mmlinattn (editable)"
pipi --no-deps --no-build-isolation -e "$ROOT"

STEP="check the installed stack"
"$PY" "$ROOT/tools/misc/check_env.py" --quiet $STRICT \
  || fail "tools/misc/check_env.py reported problems (see above)"
digest > "$STAMP"
install_extras
log "done: $VENV is ready"
