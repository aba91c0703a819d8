"""Reuse in users' own configs: the two example configs of ``docs/user_guides/configs.md`` are written into
a temporary directory outside the repository, loaded with ``Config.fromfile`` (which runs
``custom_imports``), built with mmdet's / mmseg's registries through the
``type='mmlinattn.<Family>'`` scope prefix, given a saved backbone checkpoint through
``init_cfg`` (``model.init_weights()``, as the Runner does), checked for ``frozen_stages``,
and run forward."""
import os.path as osp
import re

import pytest
import torch
from mmengine.config import Config

from dense_helpers import (build_model, det_batch, num_classes_of, predict, seg_batch,
                           shrink_seg_model_cfg, small_input_env, train_step)
from repo_paths import ROOT

DOC = osp.join(ROOT, 'docs', 'user_guides', 'configs.md')


@pytest.fixture(scope='module', autouse=True)
def _fast_config_loading():
    with small_input_env():
        yield


def doc_config(kind: str) -> str:
    """The python block under ``<!-- user-config: kind -->`` in docs/user_guides/configs.md."""
    text = open(DOC).read()
    match = re.search(rf'<!-- user-config: {kind} -->\n```python\n(.*?)```', text, re.S)
    assert match, f'docs/user_guides/configs.md has no user-config block for {kind}'
    return match.group(1)


def _frozen_ok(backbone, k: int) -> None:
    for i in range(backbone.num_stages):
        mods = [backbone.patch_embeds[i], backbone.stages[i]]
        params = [p for m in mods for p in m.parameters()]
        assert params, i
        if i <= k:
            assert not any(p.requires_grad for p in params), f'stage {i} should be frozen'
            assert not any(m.training for m in mods for m in m.modules()), i
        else:
            assert all(p.requires_grad for p in params), f'stage {i} should train'


@pytest.mark.parametrize('scope', ['mmdet', 'mmseg'])
def test_user_config_outside_repo_builds_loads_and_runs(scope, tmp_path):
    text = doc_config(scope)
    assert "custom_imports = dict(imports=['mmlinattn.models', 'mmlinattn.engine']" in text
    assert "custom_hooks = [dict(type='mmlinattn.ValidRegionHook')]" in text
    ckpt_in_doc = re.search(r"checkpoint='([^']+)'", text).group(1)
    user_dir = tmp_path / 'my_project'
    user_dir.mkdir()
    assert not str(user_dir).startswith(ROOT)

    # A "pretrained" backbone checkpoint: a backbone of the same arch, saved as mmengine does.
    cfg = Config.fromfile(_write(user_dir, text.replace(ckpt_in_doc, 'unused.pth')))
    bb_cfg = cfg.model.backbone.copy()
    assert bb_cfg.type.startswith('mmlinattn.')
    bb_cfg.pop('init_cfg')
    bb_cfg.pop('frozen_stages')
    torch.manual_seed(123)
    from mmlinattn.registry import MODELS
    source = MODELS.build(dict(bb_cfg, type=bb_cfg.type.split('.', 1)[1]))
    ckpt = tmp_path / 'backbone.pth'
    torch.save({'state_dict': source.state_dict(), 'meta': {'epoch': 300}}, ckpt)

    path = _write(user_dir, text.replace(ckpt_in_doc, str(ckpt)))
    cfg = Config.fromfile(path)
    model_cfg = cfg.model
    if scope == 'mmseg':
        model_cfg = shrink_seg_model_cfg(model_cfg, (64, 64))
    torch.manual_seed(0)
    model = build_model(model_cfg, scope)
    backbone = model.backbone
    assert type(backbone).__module__.startswith('mmlinattn.')
    # the hook resolves from the library's scope, as the Runner builds it
    from mmengine.registry import HOOKS, DefaultScope
    with DefaultScope.overwrite_default_scope(scope):
        hook = HOOKS.build(cfg.custom_hooks[0])
    assert type(hook).__name__ == 'ValidRegionHook'
    model.init_weights()
    loaded = backbone.state_dict()
    for k, v in source.state_dict().items():
        torch.testing.assert_close(loaded[k], v, rtol=0, atol=0, msg=k)

    model.train()
    k = cfg.model.backbone.frozen_stages
    assert k >= 0
    _frozen_ok(backbone, k)
    if scope == 'mmdet':
        data = det_batch(64, 64, with_mask=False)
    else:
        data = seg_batch(64, 64, num_classes_of(model_cfg))
    before = {n: p.detach().clone() for n, p in backbone.named_parameters()}
    loss = train_step(model, data, scope)
    assert torch.isfinite(loss)
    for n, p in backbone.named_parameters():
        assert (p.grad is None) == (not p.requires_grad), n
    preds = predict(model, data, scope)
    assert len(preds) == len(data['inputs'])
    for n, p in backbone.named_parameters():  # nothing stepped, weights intact
        torch.testing.assert_close(p.detach(), before[n], rtol=0, atol=0)


def _write(directory, text: str) -> str:
    path = directory / 'user_config.py'
    path.write_text(text)
    return str(path)
