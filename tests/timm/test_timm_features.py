"""``timm.create_model(..., features_only=True)`` on our pyramids, checked as timm's own
tests check its feature models: channels and reductions from ``feature_info`` match the
maps, ``out_indices`` selects them, and nothing of the classifier head is left."""
import pytest
import timm
import torch

import mmlinattn.timm  # noqa: F401  (registers the models)

PYRAMIDS = ['soft_tiny', 'nalaformer_tiny', 'infvit_tiny', 'ldn_tiny']
SIZE = (64, 96)


@pytest.mark.parametrize('name', PYRAMIDS)
def test_features_only_default(name):
    model = timm.create_model(name, features_only=True).eval()
    assert model.feature_info.reduction() == [4, 8, 16, 32]
    with torch.no_grad():
        feats = model(torch.randn(1, 3, *SIZE))
    assert len(feats) == 4
    for f, chs, red in zip(feats, model.feature_info.channels(), model.feature_info.reduction()):
        assert f.shape == (1, chs, SIZE[0] // red, SIZE[1] // red)
    assert not any('head' in n for n, _ in model.named_parameters())
    # the maps are the dense backbone's, what an mmdet / mmseg neck gets
    with torch.no_grad():
        dense = model.model.backbone(torch.ones(1, 3, *SIZE))
        assert all(torch.equal(a, b) for a, b in zip(model(torch.ones(1, 3, *SIZE)), dense))


def test_features_only_out_indices_and_training():
    model = timm.create_model('nalaformer_tiny', features_only=True, out_indices=(1, 3))
    assert model.feature_info.reduction() == [8, 32]
    assert model.feature_info.channels() == [
        model.model.backbone.embed_dims[1], model.model.backbone.embed_dims[3]]
    feats = model(torch.randn(2, 3, *SIZE))
    assert [f.shape[1] for f in feats] == model.feature_info.channels()
    sum(f.mean() for f in feats).backward()
    unused = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None
              and 'out_norms.0' not in n and 'out_norms.2' not in n]
    assert not unused, unused[:5]


def test_plain_vit_says_why_not():
    with pytest.raises(ValueError, match='features_only needs a pyramid'):
        timm.create_model('infvit_plain_linear_l4', features_only=True)
