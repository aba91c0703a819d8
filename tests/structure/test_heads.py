"""The seams of the striped heads: the detectors take nothing from the segmentors (what both
use lives in ``mmlinattn/models/striped.py``), and no module of ``mmlinattn/`` calls
PyTorch's private ``torch._C`` bindings beyond the known torch-version guards below.

``python tests/structure/test_heads.py [ROOT]`` prints what another checkout breaks.
"""
import ast
import sys
from pathlib import Path

from test_import_graph import ROOT, graph

#: ``torch._C`` uses kept, each with its reason (paths relative to the checkout)
KNOWN_TORCH_C = {
    'mmlinattn/kernels/chunked.py': 'torch-version guard: torch._C._functorch.'
    'is_legacy_batchedtensor (no public name) exists on newer torch only; torch 2.1 gets a '
    'stand-in',
}


def imports_between(edges, importer: str, imported: str):
    """``(a, b)`` for each module ``a`` under ``importer`` that imports ``b`` under
    ``imported`` (packages as dotted prefixes)."""
    def under(module, package):
        return module == package or module.startswith(package + '.')
    return [(a, b) for a, bs in sorted(edges.items()) if under(a, importer)
            for b in bs if under(b, imported)]


def torch_c_uses(root: Path):
    """``path:line`` of every ``torch._C`` attribute and ``torch._C`` import under
    ``root/mmlinattn``, with the path relative to ``root``."""
    found = []
    for path in sorted((Path(root) / 'mmlinattn').rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text())):
            attribute = isinstance(node, ast.Attribute) and node.attr == '_C' and \
                isinstance(node.value, ast.Name) and node.value.id == 'torch'
            imported = isinstance(node, ast.ImportFrom) and (node.module or '').startswith(
                'torch._C') or isinstance(node, ast.Import) and any(
                    a.name.startswith('torch._C') for a in node.names)
            if attribute or imported:
                found.append(f'{path.relative_to(root).as_posix()}:{node.lineno}')
    return found


def unknown_torch_c(root: Path):
    return [use for use in torch_c_uses(root) if use.rpartition(':')[0] not in KNOWN_TORCH_C]


def test_detectors_import_nothing_of_the_segmentors():
    edges = graph(ROOT, top_level_only=False)
    assert imports_between(edges, 'mmlinattn.models.detectors',
                           'mmlinattn.models.segmentors') == []


def test_no_private_torch_bindings_but_the_known_guards():
    assert unknown_torch_c(ROOT) == []


def test_the_checks_can_fail(tmp_path):
    edges = {'mmlinattn.models.detectors.x': ['mmlinattn.models.segmentors.y',
                                              'mmlinattn.models.striped'],
             'mmlinattn.models.segmentors.y': ['mmlinattn.models.striped']}
    assert imports_between(edges, 'mmlinattn.models.detectors', 'mmlinattn.models.segmentors') \
        == [('mmlinattn.models.detectors.x', 'mmlinattn.models.segmentors.y')]
    (tmp_path / 'mmlinattn').mkdir()
    (tmp_path / 'mmlinattn' / 'a.py').write_text(
        'import torch\nfrom torch._C import _nn\ny = torch._C._nn.gelu\n')
    assert unknown_torch_c(tmp_path) == ['mmlinattn/a.py:2', 'mmlinattn/a.py:3']


if __name__ == '__main__':
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    print('detectors -> segmentors:', imports_between(
        graph(root, top_level_only=False), 'mmlinattn.models.detectors',
        'mmlinattn.models.segmentors'))
    print('torch._C beyond the known guards:', unknown_torch_c(root))
