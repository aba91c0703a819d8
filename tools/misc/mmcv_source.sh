# Sourced by tools/setup.sh and dev/gpu_end_to_end.sh: mmcv's source distribution unpacked
# for a build against the torch of PYTHON.
#   unpack_mmcv_source PYTHON SDIST DIR   (the source lands in DIR/<SDIST's name>)
unpack_mmcv_source() {
  local py=$1 sdist=$2 dir=$3
  local src="$dir/$(basename "$sdist" .tar.gz)"
  rm -rf "$src"
  tar -xzf "$sdist" -C "$dir" || return 1
  # torch >= 2.13 headers refuse anything older than C++20 (onedl-mmcv's CPU branch
  # still says C++14 in places); older torch builds with the sdist's own C++17.
  if "$py" -c 'import sys, torch
sys.exit(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 13))'; then
    sed -i 's/-std=c++1[47]/-std=c++20/g' "$src/setup.py"
    grep -q -- '-std=c++20' "$src/setup.py" \
      || { echo "could not patch $src/setup.py to C++20" >&2; return 1; }
  fi
}

# mmcv_cuda_arch PYTHON: the compute capabilities to compile mmcv's CUDA ops for, printed
# (nothing: the CPU ops only).  MMLINATTN_MMCV_CUDA=0: never; =1: always, for
# $TORCH_CUDA_ARCH_LIST or else the GPUs torch sees; unset: where torch sees a GPU and nvcc
# is on PATH.  Exit status 1, with the reason, where =1 cannot be met.
mmcv_cuda_arch() {
  local py=$1 want=${MMLINATTN_MMCV_CUDA:-auto}
  [ "$want" = 0 ] && return 0
  if [ "$want" = auto ]; then
    command -v nvcc >/dev/null || return 0
    "$py" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null \
      || return 0
  fi
  if ! command -v nvcc >/dev/null; then
    echo "MMLINATTN_MMCV_CUDA=1: nvcc is not on PATH (install the CUDA toolkit)" >&2
    return 1
  fi
  if [ -n "${TORCH_CUDA_ARCH_LIST:-}" ]; then echo "$TORCH_CUDA_ARCH_LIST"; return 0; fi
  "$py" -c 'import sys, torch
caps = sorted({"%d.%d" % torch.cuda.get_device_capability(i)
               for i in range(torch.cuda.device_count())})
if not caps:
    sys.exit("MMLINATTN_MMCV_CUDA=1: torch sees no GPU; set TORCH_CUDA_ARCH_LIST, e.g. 9.0")
print(";".join(caps))'
}

# cuda_home: $CUDA_HOME, else the toolkit that nvcc runs from, as nvcc itself says.  torch's
# guess, the folder above the nvcc on PATH, is wrong where that nvcc is a wrapper script
# (/usr/local/bin/nvcc running /usr/local/cuda-13.0/bin/nvcc: the headers are not found).
cuda_home() {
  if [ -n "${CUDA_HOME:-}" ]; then echo "$CUDA_HOME"; return 0; fi
  local top
  top=$(nvcc --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p' | head -n1)
  if [ -n "$top" ] && [ -d "$top" ]; then (cd "$top" && pwd -P); fi
}

# build_mmcv_wheel PYTHON SRC OUT_DIR ARCH [PIP_ARGS...]: mmcv's wheel with its compiled
# ops: the CPU's where ARCH is empty, the CUDA ops too for the compute capabilities ARCH
build_mmcv_wheel() {
  local py=$1 src=$2 out=$3 arch=$4 cpath
  shift 4
  if [ -n "$arch" ]; then
    # the headers of the CUDA libraries (cusparse.h, ...) that torch's headers include come
    # with torch's nvidia wheels; a toolkit of nvcc alone lacks them
    cpath=$("$py" -c 'import glob, os, nvidia
print(":".join(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "include"))))' \
      2>/dev/null || true)
    env MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" FORCE_CUDA=1 \
      TORCH_CUDA_ARCH_LIST="$arch" CPATH="$cpath${CPATH:+:$CPATH}" CUDA_HOME="$(cuda_home)" \
      "$py" -m pip wheel --no-build-isolation --no-deps "$@" "$src" -w "$out"
  else
    # mmcv's setup.py compiles the CUDA ops wherever torch sees a GPU: it is hidden
    env MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" FORCE_CUDA=0 CUDA_VISIBLE_DEVICES= \
      "$py" -m pip wheel --no-build-isolation --no-deps "$@" "$src" -w "$out"
  fi
}
