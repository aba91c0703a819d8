"""Every backbone family learns a dense task on natural photos and generalises to held-out
images: a 2 x 2 mosaic of crops from four scikit-image sample photos (astronaut, coffee,
chelsea, rocket), labelled per pixel with the photo each tile came from.  The backbone's
last stage (stride 32, global mixing in every family) and a 1 x 1 classifier are trained
with AdamW on mosaics from the left 60 % of each photo and scored on mosaics from the
right 40 %, which no training crop touches.  A map that lost its positions, a stream that
does not train, or gradients that do not reach the early stages leave the score near
chance (0.25).

This is the backbone-level learning check; the whole-detector ones (RetinaNet,
Mask R-CNN through tools/train.py and tools/test.py) are in tests/tools/test_tools_e2e.py.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from archs import FAMILIES, build
from skimage import data as photos

from benchlib.health import normalise_photo

TILE = 64
STEPS = 40
BATCH = 8


def _photos():
    """Each photo normalised with its short side at 3 tiles, split into the training
    (left 60 %) and held-out (right 40 %) columns."""
    out = []
    for image in (photos.astronaut(), photos.coffee(), photos.chelsea(), photos.rocket()):
        h, w = image.shape[:2]
        scale = 3 * TILE / min(h, w)
        x = normalise_photo(image, (round(h * scale), round(w * scale)))[0]
        cut = int(x.shape[-1] * 0.6)
        out.append((x[..., :cut], x[..., cut:]))
    return out


def mosaics(sources, count, gen):
    """``count`` 2 x 2 mosaics of random tiles of random photos, and which photo each tile
    came from (a (count, 2, 2) long tensor)."""
    images, labels = [], []
    for _ in range(count):
        which = torch.randint(0, len(sources), (4, ), generator=gen)
        tiles = []
        for k in which.tolist():
            src = sources[k]
            top = int(torch.randint(0, src.shape[-2] - TILE + 1, (1, ), generator=gen))
            left = int(torch.randint(0, src.shape[-1] - TILE + 1, (1, ), generator=gen))
            tiles.append(src[:, top:top + TILE, left:left + TILE])
        images.append(torch.cat([torch.cat(tiles[:2], -1), torch.cat(tiles[2:], -1)], -2))
        labels.append(which.view(2, 2))
    return torch.stack(images), torch.stack(labels)


def logits_and_labels(backbone, head, x, tiles):
    """Per-position logits of the last returned map and the tile labels at its size."""
    logits = head(backbone(x)[-1])
    labels = F.interpolate(tiles[:, None].float(), size=logits.shape[-2:], mode='nearest')
    return logits, labels[:, 0].long()


def accuracy(backbone, head, x, tiles):
    backbone.eval()
    with torch.no_grad():
        logits, labels = logits_and_labels(backbone, head, x, tiles)
    return float((logits.argmax(1) == labels).float().mean())


@pytest.fixture(scope='module')
def data():
    split = _photos()
    gen = torch.Generator().manual_seed(0)
    train = mosaics([s[0] for s in split], STEPS * BATCH, gen)
    held_out = mosaics([s[1] for s in split], 64, gen)
    return train, held_out


@pytest.mark.parametrize('family', FAMILIES)
def test_backbone_learns_photo_mosaics_and_generalises(family, data):
    (x, y), (xt, yt) = data
    torch.manual_seed(0)
    backbone = build(family, drop_path_rate=0.0)
    backbone.init_weights()
    head = nn.Conv2d(backbone.embed_dims[backbone.out_indices[-1]], 4, 1)
    before = accuracy(backbone, head, xt, yt)
    params = list(backbone.parameters()) + list(head.parameters())
    optim = torch.optim.AdamW(params, lr=1e-3)
    backbone.train()
    losses = []
    for step in range(STEPS):
        sl = slice(step * BATCH, (step + 1) * BATCH)
        loss = F.cross_entropy(*logits_and_labels(backbone, head, x[sl], y[sl]))
        optim.zero_grad()
        loss.backward()
        optim.step()
        losses.append(loss.item())
    after = accuracy(backbone, head, xt, yt)
    # the best constant answer on the held-out tiles: what a map without positions reaches
    constant = float(torch.bincount(yt.flatten(), minlength=4).max() / yt.numel())
    assert after >= constant + 0.25 and after >= before + 0.1, (constant, before, after,
                                                                 losses[::8])
