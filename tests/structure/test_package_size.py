"""The installed package holds what users import: at most ``PACKAGE_LINES`` lines of Python.
The measuring machinery (tools/analysis_tools/benchlib) and the data converters
(tools/dataset_converters) live beside the scripts that use them, as mmdet keeps its tools."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_LINES = 15000


def package_lines(root: Path) -> int:
    """What ``find mmlinattn -name '*.py' | xargs cat | wc -l`` prints."""
    return sum(p.read_bytes().count(b'\n') for p in (root / 'mmlinattn').rglob('*.py'))


def test_package_holds_at_most_15k_lines():
    lines = package_lines(ROOT)
    assert lines <= PACKAGE_LINES, (
        f'mmlinattn/ has {lines} lines of Python, over {PACKAGE_LINES}: code that only the tools '
        'use belongs beside them in tools/ (as tools/analysis_tools/benchlib does)')
