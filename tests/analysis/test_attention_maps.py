"""Per-family query attention maps (mmlinattn.analysis.query_maps), the figure and the
tools/analysis_tools/attention_map.py CLI, on tiny models."""
import sys

import numpy as np
import pytest
import torch

from mmlinattn.analysis.query_maps import (CAPTIONS, attention_figure, family_of,
                                               query_attention_maps, query_token)
from mmlinattn.models.backbones import LDN, SOFT, InfViT, NaLaFormer
from mmlinattn.ops.nalaformer import nala_attention_matrix
from mmlinattn.ops.soft import gaussian_kernel
from tool_runs import tool as tool_process


DEPTHS = dict(depths=(1, 2, 1, 1))
TINY = {
    'soft': lambda: SOFT(arch=dict(embed_dims=(16, 32, 32, 32), num_heads=(1, 1, 1, 1),
                                   **DEPTHS)),
    'nala': lambda: NaLaFormer(arch=dict(embed_dims=(16, 32, 32, 32), num_heads=(1, 2, 2, 2),
                                         **DEPTHS)),
    'ldn': lambda: LDN(arch=dict(embed_dims=(16, 32, 32, 32), num_heads=(1, 2, 2, 2),
                                 **DEPTHS)),
    'infsa': lambda: InfViT(arch=dict(embed_dims=(16, 32, 48, 64), depths=(1, 2, 1, 1),
                                      mlp_ratios=(2, 2, 2, 2))),
}
KEYS = {(0, 0), (1, 0), (1, 1), (2, 0), (3, 0)}


def build(family):
    torch.manual_seed(0)
    model = TINY[family]()
    model.init_weights()
    return model.eval()


def test_query_token():
    assert query_token((0, 0), (64, 96), (16, 24)) == 0
    assert query_token((63.9, 95.9), (64, 96), (16, 24)) == 16 * 24 - 1
    assert query_token((8, 4), (64, 96), (16, 24)) == 2 * 24 + 1


@pytest.mark.parametrize('family', list(TINY))
def test_maps_every_block_on_its_grid(family):
    model = build(family)
    assert family_of(model) == family
    maps = query_attention_maps(model, torch.randn(1, 3, 64, 96), (20, 30))
    assert set(maps) == KEYS
    for (stage, _), m in maps.items():
        s = 4 * 2 ** stage
        assert m.shape == (64 // s, 96 // s) and torch.isfinite(m).all()
    if family in ('nala', 'ldn'):  # normalised rows (NaLa: up to the eps of its normaliser)
        for m in maps.values():
            assert 0.99 < m.sum() < 1 + 1e-4 and m.min() >= -1e-6


def capture(model, x, family):
    from mmlinattn.analysis.infsa import capture_mixer_inputs
    from mmlinattn.analysis.query_maps import _MIXERS
    return capture_mixer_inputs(model, x, _MIXERS[family], 'forward')


def test_nala_row_is_row_of_dense_reference():
    model = build('nala').double()
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    query = (20, 30)
    maps = query_attention_maps(model, x, query)
    rec = capture(model, x, 'nala')[0]
    mod, hw = rec['module'], rec['hw']
    assert mod.attn_type == 'nala' and mod.kernel != 'relu_split_rope'
    (q, k, _), _, _ = mod._projections(rec['x'])
    dense = nala_attention_matrix(q, k, mod.kernel, mod.lam, mod.alpha)   # (1, h, N, N)
    row = dense[0, :, query_token(query, (64, 96), hw)].mean(0)
    got = maps[(0, 0)].double().flatten()
    # the forward's normaliser has an eps the dense reference lacks
    torch.testing.assert_close(got / got.sum(), row, rtol=1e-4, atol=1e-7)
    assert 0.99 < got.sum() <= 1


def test_soft_row_is_row_of_dense_nystrom():
    model = build('soft').double()
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    query = (40, 70)
    maps = query_attention_maps(model, x, query)
    rec = capture(model, x, 'soft')[0]
    mod, hw = rec['module'], rec['hw']
    q, lm, lm_valid = mod.kernel_tokens(rec['x'], rec['grid'])
    assert lm_valid is None
    # dense S^ = P D^-1/2 A^+ D^-1/2 P^T (Eq. 9, 17) with an exact pseudo-inverse
    p, a = gaussian_kernel(q, lm, denom=2.0), gaussian_kernel(lm, lm, denom=2.0)
    dinv = a.sum(-1).rsqrt()
    s = p @ (dinv[..., :, None] * torch.linalg.pinv(a) * dinv[..., None, :]) @ p.transpose(-1, -2)
    row = s[0, :, query_token(query, (64, 96), hw)].mean(0)
    torch.testing.assert_close(maps[(0, 0)].double().flatten(), row, rtol=1e-3, atol=1e-3)


def test_ldn_kernel_is_row_of_dense_step_products():
    model = build('ldn').double()
    x = torch.randn(1, 3, 64, 96, dtype=torch.float64)
    query = (32, 48)
    maps = query_attention_maps(model, x, query)
    recs = [r for r in capture(model, x, 'ldn') if r['name'].startswith('stages.1.')]
    h, w = recs[0]['x'].shape[-2:]
    groups = recs[0]['module'].groups
    # dense step matrices from basis images, one group at a time
    basis = torch.eye(h * w, dtype=torch.float64).view(h * w, 1, h, w).expand(-1, groups, -1, -1)
    total = torch.eye(h * w, dtype=torch.float64).expand(groups, -1, -1)
    for rec in recs:
        with torch.no_grad():
            cols = basis + rec['module'](basis.contiguous())              # (N, G, h, w)
        step = cols.flatten(2).permute(1, 2, 0)                            # (G, N_out, N_in)
        total = step @ total
    row = total[:, query_token(query, (64, 96), (h, w))].mean(0)
    torch.testing.assert_close(maps[(1, 1)].double().flatten(), row)
    # a light cone: nothing outside the stencil's reach of two blocks
    assert (maps[(1, 0)] > 1e-12).sum() < (maps[(1, 1)] > 1e-12).sum() < h * w


@pytest.mark.parametrize('family', list(TINY))
def test_figure_layout_titles_colorbar_caption(family):
    model = build(family)
    image = (np.random.default_rng(0).random((64, 96, 3)) * 255).astype(np.uint8)
    from benchlib.health import normalise_photo
    maps = query_attention_maps(model, normalise_photo(image, (64, 96)), (20, 30))
    fig = attention_figure(image, maps, (20, 30), CAPTIONS[family], title='t')
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert sorted(ax.get_title() for ax in panels) == sorted(
        f'stage {k + 1}, block {j + 1}' for k, j in KEYS)
    assert all(ax.title.get_fontsize() >= 9 for ax in panels)
    bars = [ax for ax in fig.axes if ax.get_label() == '<colorbar>']
    assert len(bars) == 1 and 'weight' in bars[0].get_ylabel()
    texts = [t.get_text() for t in fig.texts]
    assert any(CAPTIONS[family] in t and 'Colour' in t for t in texts)
    # grid: 4 stages x 2 blocks; the query is drawn on every panel
    assert len(fig.axes) == 4 * 2 + 1
    for ax in panels:
        assert any(line.get_xdata()[0] == 30 and line.get_ydata()[0] == 20
                   for line in ax.get_lines())
    # nothing clipped: every title inside the canvas once drawn
    fig.canvas.draw()
    box = fig.bbox
    for ax in panels:
        ext = ax.title.get_window_extent()
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1 and ext.y1 <= box.y1


@pytest.mark.parametrize('family', ['SOFT', 'LDN'])
def test_cli_writes_png_grid(tmp_path, family):
    """The tool's PNG, read back: the figure's size, one panel per block, and in every panel
    the block's map over the image (on a grey photo, the colours left after removing the
    grey at the figure's opacity 0.6 are viridis colours) peaking at 1 and not constant."""
    from PIL import Image
    from png_checks import heat_under_overlay, panels, read_rgb
    grey = tmp_path / 'grey.png'
    Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(grey)
    out = tmp_path / 'map.png'
    proc = tool_process(
        [sys.executable, 'tools/analysis_tools/attention_map.py', family, '--arch', 'tiny',
         '--size', '64', '--image', str(grey), '--query', '10', '50', '--dpi', '60', '--out',
         str(out)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    blocks = int(proc.stdout.split('(')[-1].split()[0])
    pixels = read_rgb(out)
    h, w = pixels.shape[:2]
    # figsize (2 * columns + 1.2, 2 * 4 stages + 1.4) inches at 60 dpi
    assert h == round((2 * 4 + 1.4) * 60)
    columns = (w / 60 - 1.2) / 2
    assert columns == int(columns) and 4 * columns >= blocks and columns >= 5
    found = [p for p in panels(pixels) if p[3] - p[2] > 60]
    assert len(found) == blocks
    for y0, y1, x0, x1 in found:
        assert abs((y1 - y0) - (x1 - x0)) <= 2     # a square image per panel
        panel = pixels[y0:y1, x0:x1]
        value, dist = heat_under_overlay(panel, np.full(3, 128.0), 0.6)
        assert np.percentile(dist, 90) < 25       # the red query mark aside: viridis
        assert value.max() > 0.95 and value.std() > 0.01
        high = value > 0.9
        assert np.abs(panel[high] - 128).sum(-1).mean() > 100   # yellow where it peaks
    # the colour bar: in the right-hand part, a column with a long run of saturated pixels
    # growing darker downwards (viridis: yellow at 1 on top, purple at 0 below)
    assert longest_colour_bar_run(pixels[:, int(w * 0.8):].astype(int)) > h // 4


def longest_colour_bar_run(pixels: np.ndarray) -> int:
    best = 0
    for c in range(pixels.shape[1]):
        strip = pixels[:, c]
        lum = strip.sum(-1)
        saturated = strip.max(-1) - strip.min(-1) > 20
        run = 0
        for r in range(1, len(strip)):
            ok = saturated[r] and saturated[r - 1] and lum[r] <= lum[r - 1] + 1
            run = run + 1 if ok else 0
            best = max(best, run)
    return best
