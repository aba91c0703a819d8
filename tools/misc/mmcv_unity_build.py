"""Prepare an mmcv source tree for a CPU-only "unity" build (used by tools/setup.sh).

mmcv's CPU extension is 77 small C++ files, and each one parses torch's headers again
(~20 s per file on one core): that parsing is most of the 15-20 minutes the build takes on
2 cores.  Compiled as five translation units that #include the original files, the headers
are parsed five times; the build took about 2 minutes on 2 idle cores (4 under load) and its ops give
bitwise-identical results (nms, RoIAlign, RoIAlignRotated, PSAMask checked).

    python tools/misc/mmcv_unity_build.py MMCV_SOURCE_DIR

Writes ``mmcv/ops/csrc/unity/unity_*.cpp`` and points setup.py's CPU-only source list at
them.  Exits 1, changing nothing in setup.py, when the tree is not laid out as expected; the
caller then builds the usual way.
"""
import glob
import os
import os.path as osp
import sys

CPU_SOURCES = """print(f'Compiling {ext_name} only with CPU')
            op_files = glob.glob('./mmcv/ops/csrc/pytorch/*.cpp') + \\
                glob.glob('./mmcv/ops/csrc/pytorch/cpu/*.cpp')"""
UNITY_SOURCES = """print(f'Compiling {ext_name} only with CPU (unity build)')
            op_files = glob.glob('./mmcv/ops/csrc/unity/*.cpp')"""
# CPU kernels that define file-local helpers under the same names as roi_align.cpp
# (PreCalc, bilinear_interpolate_gradient, add): each needs a unit of its own.
OWN_UNIT = ('roi_align_rotated.cpp', 'rotated_feature_align.cpp', 'bezier_align.cpp')
# Defines min / max macros that break any torch header parsed after it: last in its unit.
LAST = 'psamask.cpp'


def units(csrc: str) -> list:
    """Lists of source paths (relative to ``csrc``), one list per translation unit."""
    def rel(paths):
        return sorted(osp.relpath(p, csrc) for p in paths)
    dispatch = rel(glob.glob(osp.join(csrc, 'pytorch', '*.cpp')))
    cpu = rel(glob.glob(osp.join(csrc, 'pytorch', 'cpu', '*.cpp')))
    own = [p for p in cpu if osp.basename(p) in OWN_UNIT]
    last = [p for p in cpu if osp.basename(p) == LAST]
    rest = [p for p in cpu if p not in own and p not in last]
    return [dispatch, rest + last] + [[p] for p in own]


def main(src: str) -> int:
    setup_py = osp.join(src, 'setup.py')
    csrc = osp.join(src, 'mmcv', 'ops', 'csrc')
    with open(setup_py) as f:
        text = f.read()
    if text.count(CPU_SOURCES) != 1 or not glob.glob(osp.join(csrc, 'pytorch', '*.cpp')):
        print(f'{src}: not the expected mmcv layout; building without unity files')
        return 1
    out = osp.join(csrc, 'unity')
    os.makedirs(out, exist_ok=True)
    for k, files in enumerate(units(csrc)):
        with open(osp.join(out, f'unity_{k}.cpp'), 'w') as f:
            f.writelines(f'#include "../{p}"\n' for p in files)
    with open(setup_py, 'w') as f:
        f.write(text.replace(CPU_SOURCES, UNITY_SOURCES))
    return 0


if __name__ == '__main__':
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
