"""Whole-network health of every backbone family on natural photos (the scikit-image
sample photos): a residual stream that stays bounded at init and after training, finite
float16, training and inference paths that agree, BatchNorm running statistics that
describe the data, and deep features that survive a change of resolution."""
import pytest
import torch
from archs import build as tiny_arch
from skimage import data as photos

from benchlib.health import (block_activation_max, brief_training, centred_similarity,
                             half_precision_finite, normalise_photo, photo_crops, train_eval_gap)
from mmlinattn.models.backbones import LDN, SOFT, InfViT, InfViTPlain, NaLaFormer

FAMILIES = {
    'SOFT': (SOFT, dict(max_landmarks=49)),
    'NaLaFormer': (NaLaFormer, {}),
    'InfViT': (InfViT, {}),
    'InfViTPlain': (InfViTPlain, {}),
    'LDN': (LDN, {}),
}
ALL_ARCHS = [(family, arch) for family, (cls, _) in FAMILIES.items()
             for arch in cls.arch_settings]
PYRAMIDS = ['SOFT', 'NaLaFormer', 'InfViT', 'LDN']
# A healthy stream stays within a few units at init (every arch <= 11 with these inputs) and
# grows at most additively with depth: a 24-block pre-LN ViT after 3 steps at lr 1e-3 adds
# about 3.5 per block (first block 5.7, last 82).  So the largest value may be at most
# 2 x (number of blocks) times the first block's.  NaLaFormer's stream used to grow about 3x
# per block: 2e4 times the first block's after 12 blocks (1e5 on a 64 x 96 input).
MAX_ACTIVATION = 1000.0


def build(family: str, arch: str = None, **kwargs):
    """The family's ``arch`` (default: its smallest) with the default init."""
    cls, defaults = FAMILIES[family]
    torch.manual_seed(0)
    model = cls(arch=arch or next(iter(cls.arch_settings)), **{**defaults, **kwargs})
    model.init_weights()  # the default init, as the Runner applies it
    return model


def natural_photos():
    return [photos.astronaut(), photos.coffee(), photos.chelsea(), photos.rocket()]


def training_batches(count=8, size=64):
    gen = torch.Generator().manual_seed(0)
    return [photo_crops(natural_photos(), size, 2, gen) for _ in range(count)]


def assert_bounded(model, x, when):
    record = block_activation_max(model.eval(), x)
    values = list(record.values())
    worst = max(record, key=record.get)
    growth = record[worst] / values[0]
    detail = (f'{when}: the residual stream reaches {record[worst]:.3g} after {worst}, '
              f'{growth:.3g}x the first block (per block: '
              f'{ {k: round(v, 2) for k, v in record.items()} })')
    assert record[worst] < MAX_ACTIVATION and growth <= 2 * len(values), detail


@pytest.mark.parametrize('family,arch', ALL_ARCHS)
def test_stream_bounded_at_default_init(family, arch):
    model = build(family, arch)
    assert_bounded(model, normalise_photo(photos.astronaut(), (64, 96)), 'at init')


# After training steps: the deepest arch of each family and block variant (SOFT++'s
# paper and authors' ``-norm`` models).  A stream that grows with training grows most
# over the most blocks; the shallower archs have the same blocks (each arch is still
# checked at init above), and the 1024-wide InfViTPlain adds width, not depth.
DEEPEST = [('SOFT', 'large'), ('SOFT', 'huge-norm'), ('NaLaFormer', 'large'),
           ('InfViT', 'base'), ('InfViTPlain', 'l24'), ('LDN', 'base')]


def test_deepest_archs_are_the_deepest():
    def blocks(family, arch):
        s = FAMILIES[family][0].arch_settings[arch]
        return s.get('num_layers') or sum(s['depths'])
    for family, arch in DEEPEST:
        same_variant = [a for f, a in ALL_ARCHS
                        if f == family and a.endswith('-norm') == arch.endswith('-norm')]
        assert blocks(family, arch) == max(blocks(family, a) for a in same_variant)


@pytest.mark.parametrize('family,arch', DEEPEST)
def test_stream_bounded_after_training_steps(family, arch):
    model = build(family, arch, drop_path_rate=0.0)
    losses = brief_training(model, training_batches(count=3), steps=3, lr=1e-3)
    assert losses[-1] < losses[0], losses  # the steps really trained
    assert_bounded(model, normalise_photo(photos.coffee(), (64, 96)), 'after 3 AdamW steps')


@pytest.mark.parametrize('family', list(FAMILIES))
def test_float16_finite(family):
    """``model.half()`` and float16 autocast at a realistic detection-crop size."""
    model = build(family).eval()
    x = normalise_photo(photos.astronaut(), (256, 384))
    assert half_precision_finite(model, x) == {'autocast': True, 'half': True}


@pytest.fixture(scope='module')
def briefly_trained():
    """family -> (the family's tiny test arch after 40 AdamW steps on photo crops, the
    crops).  What the two tests below compare, code paths and BatchNorm's running average,
    does not depend on the widths: the smallest real archs gave the same results (path gaps
    2-3e-7, running-statistics gaps 0.14-0.25 against 0.14-0.22 here) at 5x the time.
    A module fixture is set up before a test's ``compile_on``, so it trains on the suite's
    eager ops whichever test asks first."""
    batches = training_batches()
    out = {}
    for family in PYRAMIDS:
        model = tiny_arch(family, drop_path_rate=0.0)
        model.init_weights()
        brief_training(model, batches, steps=40, lr=1e-3)
        out[family] = model
    return out, torch.cat(batches)


@pytest.mark.parametrize('family', PYRAMIDS)
def test_training_path_equals_inference_path(family, briefly_trained, compile_on):
    """With BatchNorm on its running statistics in both, train mode (the training code
    path) and eval mode (the inference fast paths: fused residual GEMMs, compiled feature
    maps and kernels) compute the same maps."""
    models, crops = briefly_trained
    gaps = train_eval_gap(models[family], crops, batch_stats=False)
    assert max(gaps) < 1e-5, gaps


@pytest.mark.parametrize('family', PYRAMIDS)
def test_running_statistics_describe_the_training_data(family, briefly_trained):
    """Train mode on all training crops (batch statistics) against eval mode (running
    statistics).  Families without BatchNorm agree exactly; with BatchNorm the gap is the
    lag of a 0.1-momentum average behind weights that moved for 40 steps (measured
    0.02-0.26 for SOFT and NaLaFormer)."""
    models, crops = briefly_trained
    gaps = train_eval_gap(models[family], crops)
    assert max(gaps) < 0.35, gaps


@pytest.fixture(scope='module')
def resolution_features():
    """family -> stage maps of (astronaut 512², astronaut 1024², coffee 512²)."""
    inputs = [normalise_photo(photos.astronaut(), (512, 512)),
              normalise_photo(photos.astronaut(), (1024, 1024)),
              normalise_photo(photos.coffee(), (512, 512))]
    out = {}
    for family in PYRAMIDS:
        model = build(family).eval()
        with torch.no_grad():
            out[family] = [model(x) for x in inputs]
    return out


@pytest.mark.parametrize('family', PYRAMIDS)
def test_deep_features_survive_a_change_of_resolution(family, resolution_features):
    """Centred cosine similarity of the stage-3 and stage-4 maps: the same photo at 512²
    and 1024² against two different photos at 512².  Before NaLaFormer's init was fixed
    its stage-3/4 scores were 0.05/0.03 for the same photo, no better than for two
    photos."""
    small, large, other = resolution_features[family]
    for stage in (2, 3):
        same = centred_similarity(small[stage], large[stage])
        different = centred_similarity(small[stage], other[stage])
        assert same > 0.4 and same - different > 0.2, (stage, same, different)
