"""The suite's durations record and its time budget (a pytest plugin, loaded by conftest).

At the end of a run the controlling process (the only one under pytest-xdist) writes
``work_dirs/test_durations.json`` (``MMLINATTN_TEST_DURATIONS`` overrides the path): the
wall time of the tests, the summed time of every test (set-up, call and tear-down), the
30 slowest tests and test files, the test count, the machine's CPU type and its speed at
the start and the end of the run (:func:`speed_probe`: these VMs drift by tens of percent
within an hour, so two runs compare only together with their probes).  README.md's
figures are taken from it.  When the wall time of a run passes the budget of its CPU type,
it prints a warning naming the slowest tests: a warning, not a failure, since timings are
noisy.
"""
import json
import os
import os.path as osp
import time
from collections import defaultdict

from repo_paths import ROOT

#: Budget for the whole suite's wall time, per machine type (:func:`machine_type`): CI's
#: slowest type, the AVX2-only EPYC, gets 25 minutes of its 90; the fastest, the AVX-512
#: EPYC of family 26, 10, and so does the Xeon with AMX; the AVX-512 EPYC of family 25
#: (Zen 4), which took 1.48x family 26's time for the same suite from a clean clone
#: (2026-12-04: 773 s against 523 s), 15.  ``MMLINATTN_TEST_BUDGET_S`` overrides.
BUDGET_S = {'AVX2': 25 * 60, 'AVX-512': 10 * 60, 'AVX-512, family 25': 15 * 60,
            'AMX': 10 * 60}
DEFAULT_BUDGET_S = 25 * 60
SLOWEST = 30


def speed_probe(seconds: float = 0.25) -> dict:
    """One core's speed now: a float32 256 x 256 GEMM (GFLOP/s) and a plain Python loop
    (million additions per second), each timed for ``seconds``."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(256, 256), torch.randn(256, 256)
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            count += 1
        gemm = 2 * 256 ** 3 * count / (time.perf_counter() - start) / 1e9
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            sum(range(10000))
            count += 10000
        python = count / (time.perf_counter() - start) / 1e6
    finally:
        torch.set_num_threads(threads)
    return dict(gemm_gflops=round(gemm, 1), python_madds=round(python, 1))


def _is_controller(config) -> bool:
    return not hasattr(config, 'workerinput')


def machine_type(cpu: str) -> str:
    """The key of :data:`BUDGET_S` for a :func:`mmlinattn.utils.machine.cpu_name`: its
    widest vector units, and for AMD's AVX-512 generations the family too."""
    from mmlinattn.utils.machine import vector_units
    units = vector_units(cpu)
    if units == 'AVX-512' and '(family 25 ' in cpu:
        return 'AVX-512, family 25'
    return units


def budget_for(cpu: str) -> float:
    if os.environ.get('MMLINATTN_TEST_BUDGET_S'):
        return float(os.environ['MMLINATTN_TEST_BUDGET_S'])
    return BUDGET_S.get(machine_type(cpu), DEFAULT_BUDGET_S)


class DurationsRecord:
    def __init__(self, config):
        self.config = config
        self.start = time.time()
        self.times = defaultdict(float)
        self.record = None
        self.speed_start = speed_probe()

    def pytest_runtest_logreport(self, report):
        self.times[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session, exitstatus):
        from mmlinattn.utils.machine import cpu_name
        if not self.times:
            return
        cpu = cpu_name()
        wall = self.wall = time.time() - self.start
        slowest = sorted(self.times.items(), key=lambda kv: -kv[1])[:SLOWEST]
        by_file = defaultdict(float)
        for nodeid, s in self.times.items():
            by_file[nodeid.split('::')[0]] += s
        self.record = dict(
            wall_s=round(wall, 1), summed_test_s=round(sum(self.times.values()), 1),
            tests=len(self.times),
            workers=getattr(self.config.option, 'numprocesses', None),  # -n as given
            cpu=cpu, cpu_count=os.cpu_count(), budget_s=budget_for(cpu),
            speed_start=self.speed_start, speed_end=speed_probe(),
            args=list(self.config.invocation_params.args),
            date=time.strftime('%Y-%m-%d %H:%M', time.gmtime()),
            slowest=[dict(test=k, s=round(v, 2)) for k, v in slowest],
            by_file={k: round(v, 1) for k, v in
                     sorted(by_file.items(), key=lambda kv: -kv[1])[:SLOWEST]})
        path = os.environ.get('MMLINATTN_TEST_DURATIONS',
                              osp.join(ROOT, 'work_dirs', 'test_durations.json'))
        os.makedirs(osp.dirname(path) or '.', exist_ok=True)
        with open(path, 'w') as f:
            json.dump(self.record, f, indent=1)
        self.path = path

    def pytest_terminal_summary(self, terminalreporter):
        rec = self.record
        if rec is None:
            return
        tr = terminalreporter
        tr.write_line(f'durations record: {self.path} ({rec["tests"]} tests, '
                      f'{rec["wall_s"] / 60:.1f} min wall, {rec["cpu"]})')
        if self.wall > rec['budget_s']:
            names = ', '.join(f'{t["test"]} ({t["s"]:.0f} s)' for t in rec['slowest'][:5])
            tr.write_line(
                f'WARNING: the tests took {rec["wall_s"] / 60:.1f} min, past the '
                f'{rec["budget_s"] / 60:.0f}-minute budget for this machine type '
                f'({rec["cpu"]}); the slowest: {names}. Make the slowest tests cheaper '
                f'before adding more (README, the test command).', yellow=True, bold=True)


def pytest_configure(config):
    if _is_controller(config):
        config.pluginmanager.register(DurationsRecord(config), 'mmlinattn-durations')
