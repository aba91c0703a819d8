"""Checkpoints as users download or write them: the authors' training files, files with EMA
weights, the project's own training checkpoints, and untrusted files, through the loads
the project performs itself, whatever a config imported.

* An authors' training file (the model under ``model``, ``args`` as an argparse
  ``Namespace``, optimizer and scaler state) loads through ``init_cfg`` with
  ``convert_weights=True``.
* One EMA rule for every path: the EMA weights where present (``ema=False`` / ``--no-ema``
  the raw ones), and the load says which it took.
* ``safe_load_checkpoint`` reads a checkpoint with mmengine's runner state in a process that
  never imported ``mmlinattn.engine``; a backbone's ``init_cfg`` (local or ``http://``)
  refuses a code-running file there too, and the refusal names the object.
"""
import argparse
import json
import subprocess
import sys

import numpy as np
import torch
from archs import build
from official_layouts import nalaformer_official_state_dict, soft_norm_authors_state_dict
from test_checkpoint_loading import _Payload, log_lines  # noqa: F401  (fixture)
from tool_runs import convert

import mmlinattn.engine  # noqa: F401  (the writer side: tools/train.py imports it)
from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET, NaLaFormer
from mmlinattn.models.backbones.soft import SOFT
from repo_paths import ROOT

NALA_ARCH = dict(embed_dims=(8, 16, 32, 32), depths=(1, 2, 1, 1), num_heads=(1, 2, 2, 2),
                 mlp_ratios=4.0)


def _authors_file(path, model_sd, ema_sd=None):
    """What the authors' (DeiT-style) main.py saves: model, optimizer, lr_scheduler, epoch,
    scaler, args (an argparse Namespace), and model_ema with --model-ema."""
    param = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([param], lr=1e-3)
    param.grad = torch.ones(3)
    opt.step()
    ckpt = dict(model=model_sd, optimizer=opt.state_dict(),
                lr_scheduler=dict(base_lrs=[1e-3], last_epoch=299), epoch=299,
                scaler=dict(scale=65536.0, growth_factor=2.0), max_accuracy=79.3,
                args=argparse.Namespace(model='soft_tiny', lr=1e-3, input_size=224,
                                        model_ema=ema_sd is not None))
    if ema_sd is not None:
        ckpt['model_ema'] = ema_sd
    torch.save(ckpt, path)
    return str(path)


def _soft_model(path, **init):
    return SOFT(arch='tiny-norm', convert_weights=True,
                init_cfg=dict(type='Pretrained', checkpoint=path, **init))


def test_authors_training_files_load_through_init_cfg(tmp_path, log_lines):  # noqa: F811
    soft = _authors_file(tmp_path / 'soft.pth', soft_norm_authors_state_dict(
        SOFT.arch_settings['tiny-norm']))
    _soft_model(soft).init_weights()
    nala = _authors_file(tmp_path / 'nala.pth', nalaformer_official_state_dict(
        NALA_ARCH['embed_dims'], NALA_ARCH['depths'], NALA_ARCH['num_heads']))
    NaLaFormer(arch=NALA_ARCH, convert_weights=True, **OFFICIAL_PRESET,
               init_cfg=dict(type='Pretrained', checkpoint=nala)).init_weights()
    assert len([m for m in log_lines if '(100.0% of parameters)' in m]) == 2, log_lines


def _scaled(sd, factor):
    return {k: v * factor if v.is_floating_point() else v for k, v in sd.items()}


def test_one_ema_rule_for_init_cfg_the_converter_and_timm(tmp_path, log_lines):  # noqa: F811
    """The EMA weights (a different copy) where present, the raw ones on request."""
    raw = soft_norm_authors_state_dict(SOFT.arch_settings['tiny-norm'])
    path = _authors_file(tmp_path / 'soft_ema.pth', raw, ema_sd=_scaled(raw, 0.5))
    key = 'stages.0.blocks.0.norm1.weight'
    want = {ema: SOFT(arch='tiny-norm').convert_checkpoint(_scaled(raw, 0.5 if ema else 1))[key]
            for ema in (True, False)}

    model = _soft_model(path)
    model.init_weights()
    torch.testing.assert_close(model.state_dict()[key], want[True])
    assert [m for m in log_lines if "the EMA weights ('model_ema'" in m], log_lines
    model = _soft_model(path, ema=False)
    model.init_weights()
    torch.testing.assert_close(model.state_dict()[key], want[False])
    assert [m for m in log_lines if "the raw weights ('model'" in m], log_lines

    # the converter: the same rule, --no-ema for the raw weights
    for flags, ema in (((), True), (('--no-ema', ), False)):
        dst = tmp_path / f'converted_{ema}.pth'
        proc = convert(path, str(dst), '--official', '--arch-check', 'SOFT:tiny-norm', *flags)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
        assert ('the EMA weights' if ema else 'the raw weights') in proc.stdout, proc.stdout
        out = torch.load(dst, weights_only=True)
        torch.testing.assert_close(out['state_dict'][key], want[ema])
        assert out['meta']['ema'] is ema

    # timm's own file loader (what pretrained_cfg_overlay=dict(file=...) calls)
    from timm.models import load_state_dict
    name = next(k for k, v in raw.items() if v.is_floating_point())
    assert torch.equal(load_state_dict(path)[name], raw[name] * 0.5)


# A fresh interpreter that imports only what its first argument lists: the test process
# has installed the safe loaders (mmlinattn.engine) and cannot show their absence.
PROBE = r'''
import json, os, shutil, sys
import torch.hub
modules, actions, src, marker = sys.argv[1:5]
for name in modules.split(','):
    __import__(name)
# an http:// checkpoint "downloads" the local file src (no network in the tests)
torch.hub.download_url_to_file = lambda url, dst, *a, **k: shutil.copy(src, dst)
torch.hub.set_dir(os.path.join(os.path.dirname(src), 'hub'))


def run(action):
    if action == 'load':
        from mmlinattn.utils.checkpoint import safe_load_checkpoint
        ckpt = safe_load_checkpoint(src)
        scalars = ckpt['message_hub']['log_scalars'].values()
        return dict(types=sorted({type(v).__name__ for v in scalars}),
                    seed=int(ckpt['meta']['seed']))
    from mmlinattn.registry import MODELS
    path = src if action == 'local' else 'http://example.com/ckpt/evil.pth'
    MODELS.build(dict(type='LDN', arch=dict(embed_dims=[16, 32, 64, 64], depths=[2, 1, 2, 1],
                                            num_heads=[1, 2, 2, 2]),
                      init_cfg=dict(type='Pretrained', checkpoint=path))).init_weights()
    return dict(loaded=True)


results = []
for action in actions.split(','):
    try:
        result = run(action)
    except Exception as err:
        result = dict(error=f'{type(err).__name__}: {err}')
    results.append(dict(result, marker=os.path.exists(marker)))
print(json.dumps(results))
'''


def _probe(modules, actions, src, marker):
    out = subprocess.run([sys.executable, '-c', PROBE, modules, actions, str(src), str(marker)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_own_training_checkpoint_loads_without_the_engine_imported(tmp_path):
    """mmengine's runner state as tools/train.py writes it (message hub buffers, numpy)."""
    from mmengine.logging import MessageHub
    hub = MessageHub.get_instance('training_files_probe')
    for step in range(3):
        hub.update_scalar('train/loss', 1.0 / (step + 1))
    path = tmp_path / 'epoch_1.pth'
    torch.save(dict(meta=dict(epoch=1, iter=3, seed=np.int64(7), mmengine_version='0.10'),
                    state_dict=build('LDN').state_dict(), message_hub=hub.state_dict()), path)
    (res, ) = _probe('mmlinattn', 'load', path, tmp_path / 'none')
    assert res.get('types') == ['HistoryBuffer'] and res['seed'] == 7, res


def test_init_cfg_refuses_code_without_the_engine_imported(tmp_path):
    """A local path and an http:// URL, in a process that imported mmlinattn.models only."""
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': build('LDN').state_dict(), 'meta': _Payload(str(marker))}, path)
    local, http = _probe('mmlinattn.models', 'local,http', path, marker)
    for res in (local, http):
        assert not res['marker'], (local, http)
        assert res.get('error', '').startswith('UnsafeCheckpointError: refused'), res
        assert 'it needs `io.open` to unpickle' in res['error'], res  # names what it refused
