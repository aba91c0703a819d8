"""The suite's durations record (tests/durations.py): what it writes and when it warns."""
import json
import types

import pytest
from durations import BUDGET_S, DurationsRecord, budget_for, machine_type


@pytest.mark.parametrize('cpu, units, budget', [
    ('AMD EPYC (family 25 model 1, AVX2)', 'AVX2', 25 * 60),
    ('AMD EPYC (family 26 model 2, AVX-512)', 'AVX-512', 10 * 60),
    ('AMD EPYC (family 25 model 17, AVX-512)', 'AVX-512, family 25', 15 * 60),
    ('Intel Xeon (family 6 model 143, AVX-512, AMX)', 'AMX', 10 * 60),
])
def test_budget_per_machine_type(cpu, units, budget, monkeypatch):
    monkeypatch.delenv('MMLINATTN_TEST_BUDGET_S', raising=False)
    assert machine_type(cpu) == units and budget_for(cpu) == budget == BUDGET_S[units]
    monkeypatch.setenv('MMLINATTN_TEST_BUDGET_S', '7')
    assert budget_for(cpu) == 7


class Lines:
    def __init__(self):
        self.lines = []

    def write_line(self, line, **markup):
        self.lines.append(line)


def _record(tmp_path, monkeypatch, budget):
    path = tmp_path / 'durations.json'
    monkeypatch.setenv('MMLINATTN_TEST_DURATIONS', str(path))
    monkeypatch.setenv('MMLINATTN_TEST_BUDGET_S', str(budget))
    config = types.SimpleNamespace(option=types.SimpleNamespace(numprocesses=2),
                                   invocation_params=types.SimpleNamespace(args=('-q', )))
    rec = DurationsRecord(config)
    for i in range(40):  # set-up, call and tear-down of 40 tests
        for when, share in (('setup', 0.25), ('call', 0.5), ('teardown', 0.25)):
            rec.pytest_runtest_logreport(types.SimpleNamespace(
                nodeid=f'tests/{"ab"[i >= 20]}.py::test_{i}', duration=i * share, when=when,
                outcome='passed'))
    rec.pytest_sessionfinish(None, 0)
    out = Lines()
    rec.pytest_terminal_summary(out)
    return json.loads(path.read_text()), out.lines


def test_record_holds_the_slowest_the_total_and_the_machine(tmp_path, monkeypatch):
    data, lines = _record(tmp_path, monkeypatch, budget=3600)
    assert data['tests'] == 40 and data['summed_test_s'] == sum(range(40))
    assert [t['s'] for t in data['slowest']] == list(range(39, 9, -1))  # 30, slowest first
    assert data['slowest'][0]['test'] == 'tests/b.py::test_39'
    assert data['by_file'] == {'tests/b.py': sum(range(20, 40)), 'tests/a.py': sum(range(20))}
    assert list(data['by_file']) == ['tests/b.py', 'tests/a.py']  # slowest file first
    assert data['cpu'] and data['budget_s'] == 3600 and data['wall_s'] >= 0
    for probe in (data['speed_start'], data['speed_end']):   # the machine's speed then
        assert probe['gemm_gflops'] > 0 and probe['python_madds'] > 0
    assert len(lines) == 1 and 'WARNING' not in lines[0]


def test_a_run_past_its_budget_warns_naming_the_slowest(tmp_path, monkeypatch):
    data, lines = _record(tmp_path, monkeypatch, budget=0)
    assert data['budget_s'] == 0
    assert len(lines) == 2 and lines[1].startswith('WARNING: the tests took')
    assert 'tests/b.py::test_39 (39 s)' in lines[1] and 'tests/b.py::test_30' not in lines[1]
