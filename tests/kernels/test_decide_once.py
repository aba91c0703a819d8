"""The path is chosen from one reading of the switches per backbone forward
(:func:`mmlinattn.kernels.policy.decide_once`), and the model files ask the policy nothing
(each fast form's rule lives with the form in :mod:`mmlinattn.kernels`)."""
import ast
import os
from pathlib import Path

import pytest
import torch
from archs import build

from mmlinattn.kernels import policy

ROOT = Path(__file__).resolve().parents[2]


class _CountingEnviron(dict):
    """``os.environ`` that counts the reads of mmlinattn's switches."""
    reads = 0

    def get(self, key, default=None):
        if key in policy.SWITCHES:
            type(self).reads += 1
        return super().get(key, default)


@pytest.mark.parametrize('family', ['SOFT', 'NaLaFormer', 'LDN'])
def test_a_forward_reads_the_switches_once(family, monkeypatch):
    model = build(family)
    x = torch.randn(1, 3, 48, 64)
    monkeypatch.setattr(os, 'environ', _CountingEnviron(os.environ))
    _CountingEnviron.reads = 0
    with torch.no_grad():
        model(x)
    assert _CountingEnviron.reads == len(policy.SWITCHES)
    assert policy._CONTEXT.get() is None              # nothing left behind
    # an op called outside a forward reads them at call time
    _CountingEnviron.reads = 0
    policy.plain()
    assert _CountingEnviron.reads == 1


def test_the_reading_holds_for_the_whole_forward(monkeypatch):
    """Switched mid-forward, the switch takes effect at the next forward, not inside one."""
    model = build('LDN')
    seen = []
    real = model.forward_pyramid

    def forward_pyramid(*args):
        monkeypatch.setenv(policy.KERNELS_ENV, 'plain')
        seen.append(policy.plain())
        return real(*args)
    monkeypatch.setattr(model, 'forward_pyramid', forward_pyramid)
    monkeypatch.delenv(policy.KERNELS_ENV, raising=False)
    with torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
        model(torch.randn(1, 3, 32, 32))
    assert seen == [False, True]


def test_model_files_ask_the_policy_nothing():
    asking = {}
    for path in sorted((ROOT / 'mmlinattn/models').rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or '').endswith('policy'):
                asking.setdefault(path.relative_to(ROOT).as_posix(), set()).update(
                    a.name for a in node.names)
            if isinstance(node, ast.ImportFrom) and (node.module or '').endswith('kernels'):
                assert 'policy' not in {a.name for a in node.names}, path
    assert asking == {}


def test_the_context_is_the_running_threads_own():
    """A forward's context is a context variable: another thread running meanwhile (a data
    loader's, a backward's) reads its own, not the forward's."""
    import threading
    ctx = policy.read_context('cpu')
    seen = {}

    def other_thread():
        seen['other'] = policy.context()

    def forward():
        seen['own'] = policy.context()
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()

    policy.run_in(ctx, forward)
    assert seen['own'] is ctx and seen['other'] is not ctx
    assert policy._CONTEXT.get() is None
