"""Where the fast-path policy is asked: every call of a predicate of
``mmlinattn/kernels/policy.py`` (``policy.x(...)`` or an imported ``x(...)``), per file.

    python dev/policy_calls.py [ROOT] [--per-forward]

``--per-forward``: also run every family's tiny arch from ROOT (eval forward; train forward and
backward, float32, MMLINATTN_COMPILE=0) and count, per run, the rules of the fast forms asked
by a form or a layer (with a dispatch, ``kernels/dispatch.py``: the verifiers it runs and the
mode questions; ``--by-name`` lists them), the reads of the environment switches, and the
dispatch's calls, availability checks computed (once per form and context) and verifiers run.
"""
import ast
import sys
from collections import Counter
from pathlib import Path


#: the rules of the fast forms, wherever they live (the policy's 20 questions at f83f2f5, and
#: the rule of the recompute memory forms): what the per-forward count counts
RULES = {'mode', 'switched_off', 'plain', 'traced', 'needs_grad', 'eager_inference',
         'eager_training', 'special_mode',
         'compiled_allowed', 'hooked', 'onednn_allowed', 'triton_allowed',
         'custom_depthwise_backward', 'depthwise_slices', 'gemm_accumulates',
         'layer_scale_folded', 'norm_recomputed', 'plain_precision', 'recomputes'}
#: what the policy offers besides questions: the reading of the switches or the context at a
#: forward's start, and the context-level availability checks the dispatch asks once per
#: context (counted apart)
NOT_QUESTIONS = {'read_switches', 'decide_once', 'read_context', 'context', 'run_in',
                 'plain_unavailable', 'eager_unavailable', 'jit_unavailable'}
#: why a branch outside every verifier is not a fast form's choice: a graph-safe formulation in
#: the model code (``mmlinattn.ops.tracing.traced``: no branch on a size inside a traced graph)
#: or a log said once outside a graph
NOT_FORMS = {('mmlinattn/models/', 'traced'): 'graph-safe formulations',
             ('mmlinattn/kernels/soft.py', 'traced'): 'a log said once, not inside a graph'}


def not_form(site) -> str:
    """Why the site is not a fast form's choice ('' where it is one)."""
    return next((w for (f, n), w in NOT_FORMS.items() if site[0].startswith(f)
                 and site[2] == n), '')


def predicates(root: Path):
    """The functions that ``kernels/policy.py`` defines or re-exports (the questions it
    answers): its public functions and the lower-case names of its ``__all__``."""
    tree = ast.parse((root / 'mmlinattn/kernels/policy.py').read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
             and not n.name.startswith('_')}
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(getattr(t, 'id', '') == '__all__' for t in n.targets):
            names |= {e.value for e in n.value.elts if e.value.islower()}
    return names - NOT_QUESTIONS


def call_sites(root: Path):
    names = predicates(root)
    sites = []
    for path in sorted((root / 'mmlinattn').rglob('*.py')):
        rel = path.relative_to(root).as_posix()
        if rel == 'mmlinattn/kernels/policy.py':
            continue
        tree = ast.parse(path.read_text())
        imported = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    and (n.module or '').endswith('policy') for a in n.names}
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call):
                continue
            f = n.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                    f.value.id == 'policy' and f.attr in names:
                sites.append((rel, n.lineno, f.attr))
            elif isinstance(f, ast.Name) and f.id in imported and f.id in names:
                sites.append((rel, n.lineno, f.id))
    return sites


def rule_sites(root: Path, verifiers: bool = False):
    """Calls of a fast form's rule (:data:`RULES`, wherever it is defined) from a form or a
    layer: not from inside another rule's definition, nor from the policy's own questions
    (``verifiers``: nor from a verifier, a rule's or a dispatch's, which answers for its
    dispatch: the call sites left are the branches outside the dispatch)."""
    sites = []
    for path in sorted((root / 'mmlinattn').rglob('*.py')):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        inside = set()
        for fn in ast.walk(tree):   # a name called inside a function or lambda is its parameter
            if isinstance(fn, (ast.FunctionDef, ast.Lambda)):
                params = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
                inside |= {id(n) for n in ast.walk(fn) if isinstance(n, ast.Call)
                           and getattr(n.func, 'id', None) in params}
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name in RULES:
                inside |= {id(n) for n in ast.walk(fn)}
            if verifiers and isinstance(fn, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, 'id', '') == 'fast_form'
                    for d in fn.decorator_list):   # a rule's verifier
                inside |= {id(n) for n in ast.walk(fn)}
            if verifiers and isinstance(fn, ast.Call) and \
                    getattr(fn.func, 'attr', '') == 'dispatch':  # a dispatch's own verifier
                inside |= {id(n) for k in fn.keywords if k.arg == 'verify'
                           for n in ast.walk(k.value)}
            if verifiers and isinstance(fn, ast.Call) and \
                    getattr(fn.func, 'id', '') == 'FastForm' and len(fn.args) == 3:
                inside |= {id(n) for n in ast.walk(fn.args[2])}  # a rule's verifier
        if verifiers:
            inside |= _helpers_of(tree, inside)
        for n in ast.walk(tree):
            if not isinstance(n, ast.Call) or id(n) in inside:
                continue
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, 'id', '')
            if name in RULES and rel != 'mmlinattn/kernels/policy.py':
                sites.append((rel, n.lineno, name))
    return sites


def _helpers_of(tree, inside: set) -> set:
    """The nodes of the module's functions that only verifiers call (a verifier's helper)."""
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and getattr(n.func, 'id', None) in defs]
    grown = set(inside)
    while True:
        helpers = {name for name, fn in defs.items() if id(fn) not in grown and any(
            c.func.id == name for c in calls) and all(
            id(c) in grown for c in calls if c.func.id == name)}
        if not helpers:
            return grown
        for name in helpers:
            grown |= {id(n) for n in ast.walk(defs[name])}


PER_FORWARD = r'''
import json, os, sys, torch
import mmlinattn.models  # noqa: F401
from mmlinattn.kernels import policy
from mmlinattn.registry import MODELS
QUESTIONS = set(json.loads(sys.argv[1]))
ARCHS = {
    'SOFT': dict(embed_dims=(32, 64, 96, 128), num_heads=(1, 2, 3, 4), depths=(1, 1, 2, 1)),
    'NaLaFormer': dict(embed_dims=(16, 32, 48, 64), depths=(1, 1, 2, 1), num_heads=(1, 2, 3, 4),
                       mlp_ratios=2.0),
    'InfViT': dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 1, 1), mlp_ratios=(2, 2, 2, 2)),
    'LDN': dict(embed_dims=[16, 32, 64, 64], depths=[2, 1, 2, 1], num_heads=[1, 2, 2, 2]),
}
counts = {'questions': 0, 'switch_reads': 0, 'dispatches': 0, 'availability': 0,
          'verifiers': 0}
class Environ(dict):
    def get(self, key, default=None):
        if key in policy.SWITCHES:
            counts['switch_reads'] += 1
        return super().get(key, default)
def profile(frame, event, arg):
    # a question asked by a form or a layer (not by a rule answering its own)
    if event != 'call':
        return
    code = frame.f_code
    back = frame.f_back
    caller = back.f_code.co_name if back is not None else ''
    if back is not None and back.f_code.co_filename.endswith('kernels/dispatch.py'):
        # the dispatch (kernels/dispatch.py): an availability check computed for a context,
        # or a verifier run for a call
        if caller == 'unavailable' and code.co_name not in ('context', '_log_once'):
            counts['availability'] += 1
            names['available:' + code.co_name] = names.get('available:' + code.co_name, 0) + 1
        elif caller == 'runs' and code.co_name not in ('unavailable', 'context'):
            counts['verifiers'] += 1
    if code.co_name == '__call__' and code.co_filename.endswith('kernels/dispatch.py'):
        counts['dispatches'] += 1
    reading = caller in ('context', 'read_context', 'decide_once', 'run_in', 'unavailable') or \
        caller.endswith('unavailable')
    if code.co_name in QUESTIONS and caller not in QUESTIONS and not reading \
            and 'mmlinattn' in code.co_filename and code.co_name != '<lambda>':
        counts['questions'] += 1
        names[code.co_name] = names.get(code.co_name, 0) + 1
names = {}
out = {}
for fam, arch in ARCHS.items():
    torch.manual_seed(0)
    m = MODELS.build(dict(type=fam, arch=arch))
    x = torch.randn(1, 3, 64, 64)
    for run in ('eval', 'train'):
        os.environ = Environ(os.environ)
        counts.update(questions=0, switch_reads=0, dispatches=0, availability=0, verifiers=0)
        names.clear()
        sys.setprofile(profile)
        if run == 'eval':
            with torch.no_grad():
                m.eval()(x)
        else:
            sum(o.mean() for o in m.train()(x)).backward()
        sys.setprofile(None)
        out[f'{fam} {run}'] = dict(counts, names=dict(names))
print(json.dumps(out))
'''


def per_forward(root: Path):
    import json
    import os
    import subprocess
    env = dict(os.environ, PYTHONPATH=str(root.resolve()), MMLINATTN_COMPILE='0')
    rules = sorted(predicates(root) | RULES)
    res = subprocess.run([sys.executable, '-c', PER_FORWARD, json.dumps(rules)],
                         cwd=root, env=env, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


if __name__ == '__main__':
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    root = Path(args[0] if args else '.')
    sites = call_sites(root)
    per_file = Counter(s[0] for s in sites)
    kernels = {f: c for f, c in per_file.items() if f.startswith('mmlinattn/kernels/')}
    models = {f: c for f, c in per_file.items() if f.startswith('mmlinattn/models/')}
    print(f'predicates defined: {len(predicates(root))}')
    print(f'call sites: {len(sites)}; kernels: {sum(kernels.values())} in {len(kernels)} files; '
          f'models: {sum(models.values())} in {len(models)} files')
    for f, c in sorted(per_file.items()):
        print(f'  {c:3d}  {f}  ' + ', '.join(f'{n}:{l}' for g, l, n in sites if g == f))
    rs = rule_sites(root)
    print(f'rule call sites from forms and layers (RULES wherever defined): {len(rs)}; '
          f"kernels: {sum(f.startswith('mmlinattn/kernels/') for f, _, _ in rs)}, "
          f"models: {sum(f.startswith('mmlinattn/models/') for f, _, _ in rs)}")
    rs = [s for s in rule_sites(root, verifiers=True) if s[0].startswith('mmlinattn/kernels/')
          or s[0].startswith('mmlinattn/models/')]
    print(f'of which outside every verifier (a branch beside the dispatch): {len(rs)}')
    for f in sorted({f for f, _, _ in rs}):
        print(f'  {f}  ' + ', '.join(f'{n}:{l}' + (f' ({not_form((g, l, n))})'
                                                   if not_form((g, l, n)) else '')
                                     for g, l, n in sorted(rs) if g == f))
    print(f'fast-form choices outside a dispatch: {sum(not not_form(s) for s in rs)}')
    if '--per-forward' in sys.argv:
        print('per run: rule calls from a form or a layer / switch reads / fast-form '
              'dispatches / availability checks computed / verifiers run:')
        for run, c in per_forward(root).items():
            print(f"  {run:18s} {c['questions']:5d} {c['switch_reads']:5d} "
                  f"{c.get('dispatches', 0):5d} {c.get('availability', 0):5d} "
                  f"{c.get('verifiers', 0):5d}")
            if '--by-name' in sys.argv:
                print('      ' + ', '.join(f'{n}:{k}' for n, k in sorted(c['names'].items())))
