"""tools/analysis_tools/seed_study.py: its table from a results record (the runs themselves
are tools/train.py and tools/test.py, exercised end to end elsewhere)."""
import pytest
from tool_runs import tool_module


def _tool():
    return tool_module('tools/analysis_tools/seed_study.py')


def test_table_gives_mean_spread_and_kept_fraction():
    tool = _tool()
    args = tool.parse_args(['a.py', '--seeds', '0', '1', '--eval-scales', '100x50',
                            '150x75', '--untrained'])
    results = {'configs/a.py': {'0': {'100x50': 40.0, '150x75': 30.0},
                                '1': {'100x50': 50.0, '150x75': 15.0},
                                'untrained': {'100x50': 2.0}}}
    lines = tool.table(results, args).splitlines()
    assert lines[0].split(' | ')[-1] == 'untrained |'
    cells = [c.strip() for c in lines[2].strip('|').split('|')]
    # mean 45, sd of (40, 50) = 7.071; at 1.5x mean 22.5 = 0.50x of 45
    assert cells == ['a.py', '40.000', '50.000', '45.000 ± 7.071', '22.500 (0.50x)', '2.000']
    assert tool._scale('576x432') == '(576,432)'
    with pytest.raises(ValueError):
        tool._scale('576')
