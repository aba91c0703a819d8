"""Each byte threshold that switches a backbone's row stripes on, at its boundary: a map of
exactly the threshold's size runs whole, one a byte larger (the threshold a byte lower) in
stripes (every rule compares with ``>``).  The rows per stripe are set small, so that the
size is the only reason for either answer.  The whole-image heads' thresholds are tested in
tests/segmentors/test_whole_image.py and tests/detectors/test_whole_image_retinanet.py."""
import pytest
import torch

from mmlinattn.kernels import policy, row_stripes
from mmlinattn.models.layers import ConvFFN, LayerNorm2d, PatchConv
from mmlinattn.models.layers.ldn_block import LinearAttention
from mmlinattn.models.layers.token_grid import TokenGrid

f64 = torch.float64


class UnknownNorm(torch.nn.Module):
    """A norm the rule does not know."""


def _at_boundary(monkeypatch, threshold: str, size: int, rule) -> None:
    """``rule()`` is False with the threshold at ``size`` bytes, True a byte below."""
    monkeypatch.setattr(policy, threshold, size)
    assert not rule()
    monkeypatch.setattr(policy, threshold, size - 1)
    assert rule()


def test_ffn_stripes_above_stripe_hidden_bytes(monkeypatch):
    """The FFN's hidden tensor: 63 tokens x 24 channels, float64."""
    ffn = ConvFFN(6, 24).to(f64).eval()
    x, grid = torch.randn(1, 63, 6, dtype=f64), TokenGrid((9, 7))
    monkeypatch.setattr(policy, 'STRIPE_TARGET_BYTES', 7 * 24 * 8)  # one row per stripe
    with torch.no_grad():
        _at_boundary(monkeypatch, 'STRIPE_HIDDEN_BYTES', 63 * 24 * 8,
                     lambda: row_stripes.ffn_stripes.runs(ffn, x, grid))


def test_mixer_stripes_above_stripe_map_bytes(monkeypatch):
    """A global mixer's token map: 63 tokens x 6 channels, float64."""
    mixer = LinearAttention(6, 2).to(f64).eval()
    x, grid = torch.randn(1, 63, 6, dtype=f64), TokenGrid((9, 7))
    monkeypatch.setattr(policy, 'STRIPE_TARGET_BYTES', 1)
    with torch.no_grad():
        _at_boundary(monkeypatch, 'STRIPE_MAP_BYTES', 63 * 6 * 8,
                     lambda: row_stripes.mixer_stripes.runs(mixer, x, grid))


def test_stem_stripes_above_stripe_hidden_bytes(monkeypatch):
    """A 3x3 stride-2 unit's output: 16 channels x 31 x 23 (61 x 45 halved, rounded up)."""
    unit = PatchConv(8, 16, 3, 2, dict(type='BN')).to(f64).eval()
    x, grid = torch.randn(1, 8, 61, 45, dtype=f64), TokenGrid((61, 45))
    monkeypatch.setattr(policy, 'STRIPE_TARGET_BYTES', 1)
    with torch.no_grad():
        _at_boundary(monkeypatch, 'STRIPE_HIDDEN_BYTES', 16 * 31 * 23 * 8,
                     lambda: row_stripes.stem_stripes.runs((unit, ), x, grid))


def test_per_pixel_stripes_above_stripe_map_bytes(monkeypatch):
    """A stage output's norm on an 8 x 11 x 5 map."""
    norm = LayerNorm2d(8).to(f64).eval()
    x = torch.randn(1, 8, 11, 5, dtype=f64)
    with torch.no_grad():
        _at_boundary(monkeypatch, 'STRIPE_MAP_BYTES', 8 * 11 * 5 * 8,
                     lambda: row_stripes.per_pixel_stripes.runs(None, x, None, [norm]))


def test_stage_input_reused_above_stripe_map_bytes(monkeypatch):
    """A stage's tokens, a view of the map its caller hands over: 20 tokens x 4 channels."""
    stage = torch.nn.Module()
    stage.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
    owned = torch.randn(1, 20, 4, dtype=f64)
    with torch.no_grad():
        _at_boundary(monkeypatch, 'STRIPE_MAP_BYTES', 20 * 4 * 8,
                     lambda: row_stripes.stage_home(stage, owned[:], True) is not None)


@pytest.mark.parametrize('norm, alone', [
    (torch.nn.BatchNorm2d(4).eval(), True), (torch.nn.SyncBatchNorm(4).eval(), True),
    (LayerNorm2d(4), True), (torch.nn.LayerNorm(4), True),
    (torch.nn.BatchNorm2d(4), False), (torch.nn.BatchNorm2d(4, track_running_stats=False).eval(),
                                       False),
    (torch.nn.GroupNorm(2, 4), False), (torch.nn.InstanceNorm2d(4), False),
    (torch.nn.LayerNorm((4, 5, 5)), False), (UnknownNorm(), False),
    (torch.nn.ReLU(), True), (torch.nn.Conv2d(4, 4, 3), True)],
    ids=lambda v: type(v).__name__ if isinstance(v, torch.nn.Module) else str(v))
def test_per_pixel_knows_the_norms_that_read_one_row(norm, alone):
    """A batch norm in eval mode with running statistics (SyncBN included) and a layer norm
    over the channels alone read one pixel; batch statistics, group, instance and wider
    layer norms read the whole map; a norm it does not know counts as reading the whole map."""
    assert row_stripes.per_pixel(norm) is alone
