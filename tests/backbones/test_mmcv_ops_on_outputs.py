"""The backbones' maps through mmcv's extension ops: Mask R-CNN's ``RoIAlign`` indexes its
input as contiguous NCHW whatever its strides, so a channels-last map (the layout the
stages run in) would be pooled from scrambled positions."""
import pytest
import torch
from archs import FAMILIES, build


def _rois(h: int, w: int, count: int = 24) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    size = torch.rand(count, 2, generator=gen) * torch.tensor([w, h]) * 0.6 + 4
    corner = torch.rand(count, 2, generator=gen) * (torch.tensor([w, h]) - size)
    batch = torch.randint(0, 2, (count, 1), generator=gen).float()
    return torch.cat([batch, corner, corner + size], 1)


@pytest.mark.parametrize('family', FAMILIES)
def test_roi_align_of_mmcv_reads_the_maps_as_they_are(family):
    from mmcv.ops import RoIAlign
    from torchvision.ops import roi_align  # strided input handled by PyTorch's indexing
    model = build(family)
    h, w = 96, 128
    with torch.no_grad():
        outs = model(torch.randn(2, 3, h, w))
    rois = _rois(h, w)
    for out, stride in zip(outs, [model.strides[i] for i in model.out_indices]):
        pooled = RoIAlign((7, 7), 1.0 / stride, 0)(out, rois)
        torch.testing.assert_close(pooled, roi_align(out, rois, (7, 7), 1.0 / stride, 0, True),
                                   rtol=1e-5, atol=1e-6)
