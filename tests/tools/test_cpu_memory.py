"""glibc keeps freed memory after ``reuse_freed_cpu_memory`` (no page faults per tensor)."""
import os
import platform
import subprocess
import sys
import textwrap

from benchlib.memory import GLIBC_TUNABLES_REUSE, reuse_freed_cpu_memory
from repo_paths import ROOT

# a 64 MiB input and two 64 MiB temporaries per step, the pattern of a backbone at 2048².
# The fewest faults of 8 steps: with reuse, glibc takes a few steps to settle where the two
# temporaries go (measured: 16384 / 32768 faults for 0-4 steps, then 0); by default every
# step faults in both (32770).
SCRIPT = textwrap.dedent("""
    import resource, sys, torch
    from benchlib.memory import GLIBC_TUNABLES_REUSE, reuse_freed_cpu_memory
    applied = reuse_freed_cpu_memory() if sys.argv[1] == 'reuse' else False
    faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    x = torch.ones(64 << 18)
    step = lambda: ((x + 1) * 2).sum()
    step()
    counts = []
    for _ in range(8):
        start = faults()
        step()
        counts.append(faults() - start)
    print(applied, min(counts))
""")


def _child_env():
    """This environment without GLIBC_TUNABLES; the child imports benchlib as the tools'
    folder on its path."""
    env = {k: v for k, v in os.environ.items() if k != 'GLIBC_TUNABLES'}
    env['PYTHONPATH'] = os.path.join(ROOT, 'tools', 'analysis_tools')
    return env


def _fewest_faults_per_step(mode: str, tunables: str = ''):
    env = _child_env()
    if tunables:
        env['GLIBC_TUNABLES'] = tunables
    out = subprocess.run([sys.executable, '-c', SCRIPT, mode], capture_output=True, text=True,
                         check=True, env=env).stdout.split()
    return out[0] == 'True', float(out[1])


def test_reuse_removes_most_page_faults_on_glibc():
    if platform.libc_ver()[0] != 'glibc':
        assert reuse_freed_cpu_memory() is False   # documented no-op elsewhere
        return
    applied, reuse = _fewest_faults_per_step('reuse')
    _, system = _fewest_faults_per_step('system')
    assert applied
    # glibc's default: every 64 MiB temporary is fresh pages (16384 faults of 4 KiB each)
    assert system >= 16384, system
    assert reuse < system / 2, (reuse, system)
    # the documented environment variable does the same for a process not yet started
    _, tuned = _fewest_faults_per_step('system', GLIBC_TUNABLES_REUSE)
    assert tuned < system / 2, (tuned, system)


# A freed 24 MiB block raises glibc's default mmap threshold to 24 MiB; two 16 MiB tensors
# then come from the heap, and freeing the lower one leaves a resident hole.  With the
# threshold fixed, both are mmapped and the freed one leaves nothing behind.
FRAGMENT = textwrap.dedent("""
    import sys, torch
    from benchlib.memory import current_rss_kb, return_freed_cpu_memory
    applied = return_freed_cpu_memory() if sys.argv[1] == 'fixed' else False
    big = torch.ones(24 << 18)
    del big
    start = current_rss_kb()
    a, b = torch.ones(16 << 18), torch.ones(16 << 18)
    del a
    print(applied, (current_rss_kb() - start) / 1024)
""")


def _resident_after_free(mode: str):
    out = subprocess.run([sys.executable, '-c', FRAGMENT, mode], capture_output=True,
                         text=True, check=True, env=_child_env()).stdout.split()
    return out[0] == 'True', float(out[1])


def test_fixed_mmap_threshold_makes_rss_follow_the_live_tensors():
    """What the benchmark's peak-memory step relies on (``return_freed_cpu_memory``)."""
    if platform.libc_ver()[0] != 'glibc':
        from benchlib.memory import return_freed_cpu_memory
        assert return_freed_cpu_memory() is False
        return
    applied, fixed = _resident_after_free('fixed')
    _, default = _resident_after_free('default')
    assert applied
    assert default >= 30, default           # both 16 MiB tensors stay resident
    assert 14 <= fixed <= 20, fixed         # only the live one
