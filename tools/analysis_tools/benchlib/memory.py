"""Memory probes of the running process (Linux ``/proc``) and the CPU allocator settings of
the benchmarks.

Peak memory of a step: ``VmHWM`` (the resident high-water mark) reset to the current RSS
through ``/proc/self/clear_refs`` just before the step, read after it.  A step's allowance:
``RLIMIT_AS`` set to the current address space plus a cap, so that an allocation beyond it
fails with an error instead of the kernel's OOM killer ending the machine's other work.

glibc serves every allocation above its mmap threshold (at most 32 MiB) with fresh pages from
the kernel and hands them back on ``free``.  Each new 4 KiB page is zero-filled on its first
write, so a tensor of that size pays a page fault per 4 KiB every time it is created.  At
2048² most activations of a backbone are that large, and the page faults are a large share
of the CPU forward time of every backbone, ours and mmdet's Swin / PVT alike
(``docs/benchmarks.md``).  CUDA has a caching allocator; :func:`reuse_freed_cpu_memory`
gives CPU runs the same reuse.
"""
import ctypes
import ctypes.util
from typing import Optional

__all__ = ['reuse_freed_cpu_memory', 'GLIBC_TUNABLES_REUSE', 'apply_cpu_malloc',
           'return_freed_cpu_memory', 'is_oom',
           'proc_status_kb', 'reset_peak_rss', 'peak_rss_kb', 'current_rss_kb',
           'cap_address_space', 'mem_available_mb']

# glibc <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
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
    return _mallopt((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1))


def return_freed_cpu_memory(threshold: int = 128 * 1024) -> bool:
    """Make glibc serve every allocation of at least ``threshold`` bytes with ``mmap`` and
    hand it back on ``free``, for the rest of the process: the resident size then follows
    the live tensors, and its peak is theirs.

    glibc's default threshold starts at 128 KiB but rises to the size of each mmapped block
    freed (up to 32 MiB); tensors below it then come from the heap, whose freed holes stay
    resident, so the peak RSS also counts that fragmentation (``docs/benchmarks.md``).
    Setting the threshold fixes it (glibc stops adjusting it).  Affects later allocations only.

    Returns:
        True when applied; False where the C library is not glibc.
    """
    return _mallopt((_M_MMAP_THRESHOLD, threshold))


def _mallopt(*settings) -> bool:
    """glibc ``mallopt(param, value)`` for each pair; False if any fails or there is none."""
    name = ctypes.util.find_library('c')
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all([bool(mallopt(param, value)) for param, value in settings])


def apply_cpu_malloc(mode: str) -> str:
    """``'reuse'``: glibc keeps freed memory (:func:`reuse_freed_cpu_memory`); returns the
    mode in effect (``'system'`` where that is not glibc, or for any other ``mode``)."""
    if mode != 'reuse':
        return 'system'
    return 'reuse' if reuse_freed_cpu_memory() else 'system'


def is_oom(exc: BaseException) -> bool:
    """Allocation failure (CPU under RLIMIT_AS, CUDA, C++ bad_alloc)."""
    if isinstance(exc, MemoryError):
        return True
    msg = str(exc).lower()
    return any(s in msg for s in ('out of memory', "can't allocate memory", 'bad_alloc',
                                  'cannot allocate memory', 'not enough memory'))


def proc_status_kb(key: str) -> Optional[int]:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``, ``VmSize``), or None."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith(key + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if not possible."""
    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        return True
    except OSError:
        return False


def peak_rss_kb() -> int:
    hwm = proc_status_kb('VmHWM')
    if hwm is not None:
        return hwm
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def current_rss_kb() -> int:
    rss = proc_status_kb('VmRSS')
    return rss if rss is not None else peak_rss_kb()


def cap_address_space(cap_mb: float) -> Optional[int]:
    """RLIMIT_AS = current address-space size + ``cap_mb``; the limit in bytes or None."""
    import resource
    vm = proc_status_kb('VmSize')
    if vm is None:
        return None
    limit = vm * 1024 + int(cap_mb * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    return limit


def mem_available_mb() -> Optional[float]:
    """The machine's ``MemAvailable`` in MiB, or None off Linux."""
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None
