"""The seam between the model layers and the fast-path wing: a branch is a
:class:`~mmlinattn.models.layers.branch.Branch` with a forward of its own, the wing runs it
through that declared interface without probing, and the models take the wing's names from
its ``__init__`` only, a dozen names at most: eight read-only entry sets, one per concern, and
four plain names."""
import ast
from pathlib import Path

import pytest

import mmlinattn.kernels as kernels
from mmlinattn.models.layers import (ConvFFN, LinearAttention, LinearInfSA, NaLaAttention,
                                     PureInfSA, SoftAttention)
from mmlinattn.models.layers.branch import Branch
from mmlinattn.models.layers.ffn import Mlp
from repo_paths import load_tool

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


#: each entry set of the wing: its entries and the wing's functions they must be
ENTRY_SETS = {
    'fast_soft': dict(attention='fast_soft_attention', value_sums='soft_value_sums',
                      middle='soft_middle', output='soft_output'),
    'fast_nala': dict(attention='fast_nala_attention', inference_maps='nala_inference_maps',
                      key_sums='key_sums', query_side_given_sums='query_side_given_sums'),
    'fast_ldn': dict(linear_attention='fast_linear_attention',
                     features='linear_attention_features', key_sums='key_sums',
                     query_side_given_sums='query_side_given_sums',
                     grid_diffusion='fast_grid_diffusion'),
    'fast_infsa': dict(pure='fast_pure_infsa', query_sums='infsa_query_sums',
                       mean_query='infsa_mean_query', pool_sums='infsa_pool_sums',
                       context='infsa_context'),
    'seam': dict(step='residual_step', parallel='parallel_residual',
                 branch_output='branch_output', hidden_chain='hidden_chain', Step='Step',
                 normed_linears='normed_linears'),
    'fast_linear': dict(apply='apply_linear', blocks='linear_blocks', conv_same='conv_same'),
    'memory': dict(checkpoint='checkpoint', recompute_in_backward='recompute_in_backward',
                   recompute_in_eager_backward='recompute_in_eager_backward',
                   recompute_stretch='recompute_stretch'),
    'stage_forms': dict(add_position='add_position', stage_home='stage_home',
                        run_stem='run_stem', per_pixel_rows='per_pixel_rows'),
}


def test_models_take_at_most_a_dozen_names_from_the_wing():
    names = {name for path in (PACKAGE / 'models').rglob('*.py')
             for _, name in kernel_imports(path)}
    assert len(names) <= 12, f'{len(names)} names from the wing: {sorted(names)}'


@pytest.mark.parametrize('name', sorted(ENTRY_SETS))
def test_each_entry_set_is_the_wings_own_functions(name):
    entries = getattr(kernels, name)
    assert name in kernels.__all__ and isinstance(entries, kernels.Entries)
    # a set named as a submodule would hide it as the package's attribute
    assert not (PACKAGE / 'kernels' / f'{name}.py').exists()
    assert dir(entries) == sorted(ENTRY_SETS[name])
    for entry, function in ENTRY_SETS[name].items():
        assert getattr(entries, entry) is getattr(kernels, function), (name, entry, function)
    with pytest.raises(AttributeError, match='read-only'):
        entries.step = None


def test_the_wing_does_not_probe():
    found = {str(p.relative_to(ROOT)): probes(p) for p in sorted((PACKAGE / 'kernels').rglob('*.py'))}
    assert {k: v for k, v in found.items() if v} == {}


def test_the_checks_can_fail(tmp_path):
    bad = tmp_path / 'm.py'
    bad.write_text('from ...kernels.residual import residual_step\n'
                   'x = getattr(object, "row_halo", None)\n')
    assert kernel_imports(bad) == [('kernels.residual', 'residual_step')]
    assert probes(bad) == [2]


def test_no_fast_form_is_chosen_beside_a_dispatch(tmp_path):
    """Every policy question in the wing and the layers is asked by a rule's or a dispatch's
    verifier (or a verifier's helper); the rest are graph-safe formulations and one log."""
    calls = load_tool('dev/policy_calls.py')
    sites = [s for s in calls.rule_sites(ROOT, verifiers=True)
             if s[0].startswith(('mmlinattn/kernels/', 'mmlinattn/models/'))]
    assert [s for s in sites if not calls.not_form(s)] == []
    assert {s[2] for s in sites} <= {'traced'}
    # a branch on a rule beside a dispatch is found
    (tmp_path / 'mmlinattn/kernels').mkdir(parents=True)
    (tmp_path / 'mmlinattn/kernels/m.py').write_text(
        'def f(x, fn):\n    return fn(x) if needs_grad(x) else x\n')
    assert calls.rule_sites(tmp_path, verifiers=True) == [
        ('mmlinattn/kernels/m.py', 2, 'needs_grad')]


@pytest.mark.parametrize('branch', [ConvFFN, Mlp, NaLaAttention, SoftAttention, LinearAttention,
                                    PureInfSA, LinearInfSA])
def test_every_branch_is_a_branch_with_its_own_forward(branch):
    assert issubclass(branch, Branch)
    assert 'forward' in vars(branch), f'{branch.__name__} has no forward of its own'
