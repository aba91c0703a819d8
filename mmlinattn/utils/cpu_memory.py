"""Keep freed CPU memory in the process for reuse (glibc malloc settings).

glibc serves every allocation above its mmap threshold (at most 32 MiB) with fresh pages from
the kernel and hands them back on ``free``.  Each new 4 KiB page is zero-filled on its first
write, so a tensor of that size pays a page fault per 4 KiB every time it is created.  At
2048² most activations of a backbone are that large: on the project's 2-core CI machine this
was ~40 % of the CPU forward time of every backbone, ours and mmdet's Swin / PVT alike
(``docs/benchmarks.md``).  CUDA has a caching allocator; this gives CPU runs the same reuse.
"""
import ctypes
import ctypes.util

__all__ = ['reuse_freed_cpu_memory', 'GLIBC_TUNABLES_REUSE']

# glibc <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4

#: the same settings for a process that has not started yet (e.g. ``tools/train.py``)
GLIBC_TUNABLES_REUSE = 'glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647'


def reuse_freed_cpu_memory() -> bool:
    """Make glibc malloc keep freed memory instead of returning it to the kernel.

    No allocation is served by ``mmap`` any more (it falls back to it only when the heap
    cannot grow), and the heap is trimmed only above 2 GiB of free space at its top.  The
    resident size then stays at the process's peak instead of following it down, which is
    what a benchmark or an inference server wants.  Affects later allocations only.

    Returns:
        True when both settings were applied; False where the C library is not glibc
        (macOS, musl), which is left unchanged.
    """
    name = ctypes.util.find_library('c')
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))
