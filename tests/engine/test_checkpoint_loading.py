"""Pretrained loading through ``init_cfg``, for every family.

``init_cfg=dict(type='Pretrained', ...)`` logs loaded / missing / unexpected counts, raises
below 90 % of the parameters naming the likely cause (a ``backbone.`` prefix, another arch,
a missing ``convert_weights=True``) unless ``allow_partial=True``, resizes
resolution-shaped tensors with a log line, and never unpickles code.
"""
import logging

import pytest
import torch
from mmengine.logging import MMLogger
from official_layouts import soft_norm_authors_state_dict
from archs import FAMILIES, build

import mmlinattn.engine  # noqa: F401  (installs the safe loader)
from mmlinattn.utils import checkpoint as ckpt_utils
from mmlinattn.utils.checkpoint import UnsafeCheckpointError
from mmlinattn.utils.pretrained import load_pretrained_backbone

# A second, incompatible arch per family (other widths / depths): a "wrong-arch" checkpoint.
OTHER_ARCH = {
    'SOFT': dict(embed_dims=(64, 128, 192, 256), num_heads=(2, 4, 6, 8), depths=(1, 1, 2, 1)),
    'NaLaFormer': dict(embed_dims=(32, 64, 96, 128), depths=(1, 1, 2, 1),
                       num_heads=(1, 2, 3, 4), mlp_ratios=2.0),
    'InfViT': dict(embed_dims=(32, 64, 96, 128), depths=(1, 2, 1, 1), mlp_ratios=(2, 2, 2, 2)),
    'InfViTPlain': dict(embed_dims=64, num_layers=3, num_heads=4, mlp_ratio=2.0),
    'LDN': dict(embed_dims=[32, 64, 96, 128], depths=[2, 1, 2, 1], num_heads=[1, 2, 2, 2]),
}


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines():
    logger = MMLogger.get_current_instance()
    handler = _Capture()
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)


def _save(path, state_dict):
    torch.save({'state_dict': state_dict, 'meta': {'epoch': 3}}, path)
    return str(path)


def _pretrained(family, path, **kwargs):
    return build(family, init_cfg=dict(type='Pretrained', checkpoint=path, **kwargs))


def _assert_same_weights(model, state_dict):
    own = model.state_dict()
    for k, v in state_dict.items():
        torch.testing.assert_close(own[k], v, msg=k)


@pytest.mark.parametrize('family', FAMILIES)
def test_full_checkpoint_loads_and_logs_counts(family, tmp_path, log_lines):
    src = build(family)
    sd = {k: v + 0.5 if v.is_floating_point() else v for k, v in src.state_dict().items()}
    model = _pretrained(family, _save(tmp_path / 'bb.pth', sd))
    model.init_weights()
    _assert_same_weights(model, sd)
    summary = [m for m in log_lines if m.startswith(f'{family}: loaded')]
    assert summary, log_lines
    assert f'loaded {len(sd)} tensors' in summary[0] and '(100.0% of parameters)' in summary[0]
    assert 'missing 0, unexpected 0, shape mismatch 0' in summary[0]
    assert not [m for m in log_lines if 'resized' in m]


@pytest.mark.parametrize('family', FAMILIES)
def test_detector_checkpoint_needs_backbone_prefix(family, tmp_path, log_lines):
    weights = {k: v + 0.5 if v.is_floating_point() else v
               for k, v in build(family).state_dict().items()}
    sd = {f'backbone.{k}': v for k, v in weights.items()}
    sd.update({'neck.lateral_convs.0.conv.weight': torch.zeros(8, 8, 1, 1),
               'bbox_head.retina_cls.weight': torch.zeros(9, 8, 3, 3)})
    path = _save(tmp_path / 'detector.pth', sd)
    with pytest.raises(RuntimeError) as info:
        _pretrained(family, path).init_weights()
    msg = str(info.value)
    assert 'filled only 0.0% of the parameters' in msg
    assert "add prefix='backbone.' to init_cfg" in msg and 'allow_partial=True' in msg
    assert [m for m in log_lines if f'unexpected {len(sd)}' in m], log_lines
    model = _pretrained(family, path, prefix='backbone.')
    model.init_weights()
    _assert_same_weights(model, weights)


@pytest.mark.parametrize('family', FAMILIES)
def test_wrong_arch_checkpoint_raises_unless_partial(family, tmp_path, log_lines):
    other = build(family, arch=OTHER_ARCH[family])
    path = _save(tmp_path / 'other.pth', other.state_dict())
    with pytest.raises(RuntimeError) as info:
        _pretrained(family, path).init_weights()
    msg = str(info.value)
    assert 'is for another arch; check `arch`' in msg and '(< 90%)' in msg, msg
    model = _pretrained(family, path, allow_partial=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = load_pretrained_backbone(model, model.init_cfg)
    assert report['fraction'] < 0.9 and report['shape_mismatch']
    # exactly the tensors whose shapes agree were loaded, the rest kept
    own = model.state_dict()
    for k in report['shape_mismatch']:
        torch.testing.assert_close(own[k], before[k])
    assert [m for m in log_lines if 'shape_mismatch keys' in m]


@pytest.mark.parametrize('family', FAMILIES)
def test_shallower_checkpoint_names_missing_blocks(family, tmp_path):
    src = build(family)
    # drop the last stage's tensors: what a checkpoint of a shallower arch lacks
    last = src.num_stages - 1
    sd = {k: v for k, v in src.state_dict().items()
          if not k.startswith((f'stages.{last}.', f'patch_embeds.{last}.',
                               f'out_norms.{last}.', f'stages.{last - 1}.'))}
    path = _save(tmp_path / 'partial.pth', sd)
    model = _pretrained(family, path, min_match=0.99)
    with pytest.raises(RuntimeError, match='lacks .* it is for a shallower arch'):
        model.init_weights()
    report = load_pretrained_backbone(
        model, dict(model.init_cfg, min_match=0.0))       # a lower threshold is honoured
    assert 0 < report['fraction'] < 0.99


def _soft_authors_checkpoint():
    """The SOFT-Norm key layout of the authors' model (see official_layouts)."""
    from mmlinattn.models.backbones.soft import SOFT
    return soft_norm_authors_state_dict(SOFT.arch_settings['tiny-norm'])


def test_official_checkpoint_needs_convert_weights(tmp_path, log_lines):
    from mmlinattn.models.backbones.soft import SOFT
    path = _save(tmp_path / 'soft_norm_tiny.pth', _soft_authors_checkpoint())
    cfg = dict(type='Pretrained', checkpoint=path)
    with pytest.raises(RuntimeError, match='official .* needs convert_weights=True'):
        SOFT(arch='tiny-norm', init_cfg=cfg).init_weights()
    model = SOFT(arch='tiny-norm', convert_weights=True, init_cfg=cfg)
    model.init_weights()
    assert [m for m in log_lines if '(100.0% of parameters)' in m], log_lines


@pytest.mark.parametrize('family', ['InfViT', 'InfViTPlain', 'LDN'])
def test_foreign_checkpoint_without_converter(family, tmp_path):
    """Families without an official converter never suggest convert_weights."""
    src = build(family)
    sd = {f'encoder.layer_{i}.weight': v for i, v in enumerate(src.state_dict().values())}
    path = _save(tmp_path / 'foreign.pth', dict(sd, head=torch.zeros(1)))
    with pytest.raises(RuntimeError) as info:
        _pretrained(family, path).init_weights()
    assert 'does not belong to this backbone' in str(info.value)
    assert 'convert_weights' not in str(info.value)


@pytest.mark.parametrize('family, kwargs, key', [
    ('SOFT', 'pretrain_img_size', 'stages.0.pos_embed.weight'),
    ('InfViTPlain', 'img_size', 'patch_embeds.0.pos_embed.weight'),
])
def test_position_embeddings_resized_on_load_with_log(family, kwargs, key, tmp_path,
                                                      log_lines):
    src = build(family, **{kwargs: 64})
    path = _save(tmp_path / 'pe.pth', src.state_dict())
    model = build(family, **{kwargs: 224}, init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    old, new = tuple(src.state_dict()[key].shape), tuple(model.state_dict()[key].shape)
    assert old != new
    assert [m for m in log_lines if f'resized {key} from {old} to {new}' in m], log_lines
    assert [m for m in log_lines if '(100.0% of parameters)' in m]
    # the resized table is the interpolation of the stored one
    ref = model.adapt_state_dict({key: src.state_dict()[key]})[key]
    torch.testing.assert_close(model.state_dict()[key], ref)


class _Payload:
    """Unpickling this would create a file: a stand-in for arbitrary code execution."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def _malicious(tmp_path, family):
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': build(family).state_dict(), 'meta': _Payload(str(marker))},
               path)
    return str(path), marker


@pytest.mark.parametrize('family', FAMILIES)
def test_code_running_checkpoint_refused_through_init_cfg(family, tmp_path):
    path, marker = _malicious(tmp_path, family)
    with pytest.raises(UnsafeCheckpointError, match='refused to load checkpoint'):
        _pretrained(family, path).init_weights()
    assert not marker.exists()


def test_http_checkpoints_load_with_weights_only(tmp_path, monkeypatch):
    """A URL in init_cfg is downloaded, then loaded by the same safe loader."""
    family = 'LDN'
    path, marker = _malicious(tmp_path, family)
    weights = {k: v + 0.5 if v.is_floating_point() else v
               for k, v in build(family).state_dict().items()}
    good = _save(tmp_path / 'good.pth', weights)
    sources = {'https://example.com/evil.pth': path, 'https://example.com/good.pth': good}

    def fake_download(url, dst, progress=True):
        with open(sources[url], 'rb') as src, open(dst, 'wb') as out:
            out.write(src.read())

    monkeypatch.setattr(torch.hub, 'download_url_to_file', fake_download)
    monkeypatch.setattr(torch.hub, 'get_dir', lambda: str(tmp_path / 'hub'))
    with pytest.raises(UnsafeCheckpointError):
        _pretrained(family, 'https://example.com/evil.pth').init_weights()
    assert not marker.exists()
    model = _pretrained(family, 'https://example.com/good.pth')
    model.init_weights()
    _assert_same_weights(model, weights)


# ----------------------------------------------------------------- bad checkpoint files
@pytest.mark.parametrize('content, problem', [
    (b'', 'is empty (0 bytes)'),
    (b'model weights, see README\nepoch 3\n', 'not a readable PyTorch checkpoint'),
    (None, 'not a readable PyTorch checkpoint'),  # a torch.save file cut in half
])
def test_unreadable_checkpoint_names_file_and_problem(content, problem, tmp_path):
    path = tmp_path / 'broken.pth'
    if content is None:
        _save(path, build('SOFT').state_dict())
        content = path.read_bytes()[:path.stat().st_size // 2]
    path.write_bytes(content)
    with pytest.raises(ckpt_utils.CorruptCheckpointError) as info:
        _pretrained('SOFT', str(path)).init_weights()
    assert str(path) in str(info.value) and problem in str(info.value)


@pytest.mark.parametrize('family', FAMILIES)
def test_non_finite_weights_are_named(family, tmp_path):
    sd = build(family).state_dict()
    bad = [k for k, v in sd.items() if v.is_floating_point()][:2]
    sd[bad[0]] = sd[bad[0]].clone().fill_(float('nan'))
    sd[bad[1]] = sd[bad[1]].clone().fill_(float('inf'))
    path = _save(tmp_path / 'diverged.pth', sd)
    with pytest.raises(ckpt_utils.CheckpointMismatchError) as info:
        _pretrained(family, path).init_weights()
    msg = str(info.value)
    assert 'NaN / Inf' in msg and bad[0] in msg and bad[1] in msg and path in msg


OTHER_FAMILY = [('NaLaFormer', 'SOFT')] + list(zip(FAMILIES, FAMILIES[1:] + FAMILIES[:1]))


@pytest.mark.parametrize('source, target', OTHER_FAMILY)
def test_other_family_checkpoint_names_that_family(source, target, tmp_path):
    """E.g. a NaLaFormer checkpoint loaded into SOFT names NaLaFormer, not
    convert_weights=True."""
    path = _save(tmp_path / f'{source}.pth', build(source).state_dict())
    with pytest.raises(RuntimeError) as info:
        _pretrained(target, path).init_weights()
    msg = str(info.value)
    assert f'key layout of a {source} backbone' in msg, msg
    assert f"type='mmlinattn.{source}'" in msg and 'convert_weights' not in msg, msg
