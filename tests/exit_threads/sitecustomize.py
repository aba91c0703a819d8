"""Put on PYTHONPATH by tests/tools/test_tools_e2e.py: each process prints the names of its
threads just before interpreter finalization, so the test can check that the distributed
tools stopped gloo's threads themselves (left to finalization, they sometimes abort)."""
import atexit
import os
import sys


def _report_threads():
    names = []
    for tid in sorted(os.listdir('/proc/self/task')):
        try:
            with open(f'/proc/self/task/{tid}/comm') as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    sys.stderr.write(f'[threads-at-exit rank={os.environ.get("RANK")}] {" ".join(names)}\n')


atexit.register(_report_threads)  # registered first, so it runs after the others
