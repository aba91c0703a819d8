"""The seam between the model layers and the fast-path wing: a branch is a
:class:`~mmlinattn.models.layers.branch.Branch` with a forward of its own, the wing runs it
through that declared interface without probing, and the models take the wing's names from
its ``__init__`` only."""
import ast
from pathlib import Path

import pytest

import mmlinattn.kernels as kernels
from mmlinattn.models.layers import (ConvFFN, LinearAttention, LinearInfSA, NaLaAttention,
                                     PureInfSA, SoftAttention)
from mmlinattn.models.layers.branch import Branch
from mmlinattn.models.layers.ffn import Mlp

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / 'mmlinattn'


def kernel_imports(path: Path):
    """``(module, name)`` of every import from the kernels wing in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and \
                'kernels' in node.module.split('.'):
            found += [(node.module.lstrip('.'), a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if 'kernels' in a.name.split('.')]
    return found


def probes(path: Path):
    """Lines of ``path`` that call ``getattr`` or ``hasattr``."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ('getattr', 'hasattr')]


def test_models_take_the_wings_names_from_its_init():
    bad, names = [], set()
    for path in sorted((PACKAGE / 'models').rglob('*.py')):
        for module, name in kernel_imports(path):
            if module not in ('kernels', 'mmlinattn.kernels') or name is None:
                bad.append(f'{path.relative_to(ROOT)}: {module} {name or ""}')
            else:
                names.add(name)
    assert not bad, 'import from the wing itself, not a submodule:\n' + '\n'.join(bad)
    assert names <= set(kernels.__all__), names - set(kernels.__all__)


def test_the_wing_does_not_probe():
    found = {str(p.relative_to(ROOT)): probes(p) for p in sorted((PACKAGE / 'kernels').rglob('*.py'))}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_checks_can_fail(tmp_path):
    bad = tmp_path / 'm.py'
    bad.write_text('from ...kernels.residual import residual_step\n'
                   'x = getattr(object, "row_halo", None)\n')
    assert kernel_imports(bad) == [('kernels.residual', 'residual_step')]
    assert probes(bad) == [2]


@pytest.mark.parametrize('branch', [ConvFFN, Mlp, NaLaAttention, SoftAttention, LinearAttention,
                                    PureInfSA, LinearInfSA])
def test_every_branch_is_a_branch_with_its_own_forward(branch):
    assert issubclass(branch, Branch)
    assert 'forward' in vars(branch), f'{branch.__name__} has no forward of its own'
