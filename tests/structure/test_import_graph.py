"""The import graph of ``mmlinattn/`` (static, from the AST) has no circle and no import that
runs up the package layers; no script of tools/, dev/ or tests/ edits ``sys.path``.

``python tests/structure/test_import_graph.py [ROOT]`` prints the circles and upward imports
of another checkout.
"""
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The package layers, lowest first; a module imports only from its own layer or below.
#: ``datasets`` (the demo and photo sets' classes, the demo settings) and ``registry`` import
#: nothing of the package; ``utils`` (checkpoints, config checks) reads ``datasets``; ``ops`` is
#: the papers' plain maths, ``kernels`` its fast forms, ``models`` the layers and backbones over
#: both; ``timm``, ``engine`` and ``analysis`` use the models, and ``deployment`` everything
#: below it.  (The benchmark machinery and the data converters live in tools/, not here.)
LAYERS = ['datasets', 'registry', 'utils', 'ops', 'kernels', 'models', 'timm', 'engine',
          'analysis', 'deployment']


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def imports(root: Path, path: Path, top_level_only: bool, known=()):
    """The mmlinattn modules ``path`` imports (``top_level_only``: at import time, not in a
    function body)."""
    name = module_name(root, path)
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:  # imports under a module-level if / try run at import time too
        stack, nodes = list(tree.body), []
        while stack:
            n = stack.pop()
            nodes.append(n)
            if isinstance(n, (ast.If, ast.Try, ast.With)):
                stack.extend(ast.iter_child_nodes(n))
                for h in getattr(n, 'handlers', ()):
                    stack.extend(h.body)
    for n in nodes:
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name.startswith('mmlinattn'):
                    yield a.name
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = package.split('.')
                base = base[:len(base) - n.level + 1]
                mod = '.'.join(base + ([n.module] if n.module else []))
            else:
                mod = n.module or ''
            if mod.startswith('mmlinattn'):
                # ``from pkg import mod`` reads the module, not the package's other names
                subs = [f'{mod}.{a.name}' for a in n.names if f'{mod}.{a.name}' in known]
                yield from subs
                if len(subs) < len(n.names):
                    yield mod


def graph(root: Path, top_level_only: bool = True):
    root = Path(root)
    files = {module_name(root, p): p for p in (root / 'mmlinattn').rglob('*.py')}
    edges = {}
    for name, path in files.items():
        edges[name] = sorted({m for m in imports(root, path, top_level_only, files) if m in files
                              and m != name})
    return edges


def circles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def layer(module: str):
    parts = module.split('.')
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward(edges):
    """``(importer, imported)`` where the imported module sits in a higher layer."""
    return [(a, b) for a, bs in edges.items() for b in bs
            if layer(a) is not None and layer(b) is not None and layer(b) > layer(a)]


def test_no_import_circle():
    for top_level_only in (True, False):
        assert circles(graph(ROOT, top_level_only)) == []


def test_no_upward_import():
    edges = graph(ROOT, top_level_only=False)
    assert all(layer(m) is not None for m in edges if m.count('.') >= 2), \
        'a package of mmlinattn/ missing from LAYERS'
    assert upward(edges) == []


def test_the_checks_can_fail():
    edges = {'mmlinattn.ops.a': ['mmlinattn.models.b'], 'mmlinattn.models.b': ['mmlinattn.ops.a']}
    assert circles(edges) == [['mmlinattn.models.b', 'mmlinattn.ops.a']]
    assert upward(edges) == [('mmlinattn.ops.a', 'mmlinattn.models.b')]


#: The one script that may set ``sys.path``: the tests' tool server puts the tool script's own
#: folder first (``sys.path[0]``), as the interpreter does when it launches a script, so that
#: a tool run there imports what it would for a user.
SYS_PATH_ALLOWED = {'tests/tool_server.py'}


def sys_path_uses(root: Path):
    """``file:line`` of every ``sys.path`` in the scripts of tools/, dev/ and tests/."""
    found = []
    for folder in ('tools', 'dev', 'tests'):
        for path in sorted((root / folder).rglob('*.py')):
            name = path.relative_to(root).as_posix()
            if name in SYS_PATH_ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr == 'path' and \
                        isinstance(node.value, ast.Name) and node.value.id == 'sys':
                    found.append(f'{name}:{node.lineno}')
    return found


def test_no_script_edits_sys_path():
    """Tools import the installed package and their own folder only, as mmdet's do; the tests
    find tools/analysis_tools through pyproject's pytest ``pythonpath``, a dev script through
    the ``PYTHONPATH`` its docstring names."""
    assert sys_path_uses(ROOT) == []


if __name__ == '__main__':
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT
    for scope, top in (('import time', True), ('anywhere (function bodies too)', False)):
        e = graph(root, top)
        print(f'-- {scope}: circles {circles(e)}')
        print(f'   upward imports {upward(e)}')
