"""Per-family attention of one query over the token grid, and a figure of it.

For every mixer of a backbone, :func:`query_attention_maps` materialises the dense weights of
one query over all keys (O(N^2), analysis only), head-averaged, as an (h, w) map:

* SOFT++ (Softmax-free Linear Transformers, arXiv:2207.03341, Eq. 9 / 17): the row of the
  Nystrom matrix ``S^ = exp(Q - K~) N(A^+) exp(K~ - K)`` (kernel to landmarks, normalised
  pseudo-inverse, landmarks to keys); not normalised, entries may be negative.
* NaLaFormer (Norm-Aware Linear Attention, arXiv:2506.21137, Eq. 10-11 with the feature maps
  of Eq. 16): the row-normalised weights (softmax rows in softmax stages).
* LDN (Linear Diffusion Networks, §3.3 and §4): the diffusion kernel of the stage up to this
  block, i.e. the product of the blocks' ``I + δt (K - diag(K 1))`` steps: its support is the
  light cone of the query.
* InfViT (Infinite Self-Attention, arXiv:2603.00175, §4.6): the maps of
  :func:`mmlinattn.analysis.infsa.attention_maps` (Linear-InfSA's weights ``a`` are the
  same for every query).
"""
import re
from typing import Dict, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from ..models.layers import GridDiffusion, NaLaAttention, SoftAttention, TokenGrid
from ..models.layers.infsa_attention import LinearInfSA, PureInfSA
from .infsa import _to_hwc, attention_maps, capture_mixer_inputs

__all__ = ['CAPTIONS', 'family_of', 'query_token', 'query_attention_maps', 'attention_figure']

Key = Tuple[int, int]  # (stage, block), 0-based

_COLOUR = 'Colour: weight divided by the block\'s largest |weight| (1 = strongest key).'
CAPTIONS = {
    'soft': 'SOFT++: Nyström attention row of the marked query (kernel to landmarks x '
            'normalised pseudo-inverse x landmarks to keys, Eq. 9/17), mean over heads. '
            + _COLOUR,
    'nala': 'NaLaFormer: normalised attention weights of the marked query over all keys '
            '(Eq. 10-11, feature maps of Eq. 16; softmax in softmax stages), mean over '
            'heads; LePE not included. ' + _COLOUR,
    'ldn': 'LDN: diffusion kernel of the stage up to this block (product of the blocks\' '
           'diffusion steps) for the marked query: its light cone. Other branches not '
           'included. ' + _COLOUR,
    'infsa': 'InfViT: Linear-InfSA token weights a (Eq. 20; the same for every query), or '
             'for pure InfSA the column sums of the normalised ReLU attention, mean over '
             'heads. Colour: min-max scaled per block.',
}
_MIXERS = {'soft': SoftAttention, 'nala': NaLaAttention, 'ldn': GridDiffusion,
           'infsa': (LinearInfSA, PureInfSA)}


def family_of(model: nn.Module) -> str:
    """``'soft'``, ``'nala'``, ``'ldn'`` or ``'infsa'``: the kind of mixer ``model`` has."""
    for family, types in _MIXERS.items():
        if any(isinstance(m, types) for m in model.modules()):
            return family
    raise ValueError(f'{type(model).__name__} has no attention mixer this module knows')


def block_key(name: str) -> Key:
    """``'stages.2.blocks.1.attn'`` -> (2, 1); a plain ViT's ``'stages.5.attn'`` -> (0, 5)."""
    found = re.search(r'stages\.(\d+)\.blocks\.(\d+)\.', name)
    if found:
        return int(found.group(1)), int(found.group(2))
    found = re.search(r'stages\.(\d+)\.', name)
    if found:
        return 0, int(found.group(1))
    raise ValueError(f'cannot read a stage and block from module name {name!r}')


def query_token(query: Sequence[float], image_hw: Sequence[int], grid_hw: Sequence[int]) -> int:
    """Row-major index of the grid cell that holds image pixel ``query = (y, x)``."""
    y = min(int(query[0] * grid_hw[0] / image_hw[0]), grid_hw[0] - 1)
    x = min(int(query[1] * grid_hw[1] / image_hw[1]), grid_hw[1] - 1)
    return y * grid_hw[1] + x


def _identity_values(q: torch.Tensor) -> torch.Tensor:
    """(B, h, N, N) identity values: an attention's output with them is its weight matrix."""
    return torch.eye(q.shape[-2], dtype=q.dtype, device=q.device).expand(*q.shape[:2], -1, -1)


def _soft_row(mod: SoftAttention, x: torch.Tensor, grid: TokenGrid, idx: int) -> torch.Tensor:
    q, landmarks, landmark_valid = mod.kernel_tokens(x, grid)
    return mod.attend(q, landmarks, _identity_values(q), grid.valid_tokens(x),
                      landmark_valid)[:, :, idx]


def _nala_row(mod: NaLaAttention, x: torch.Tensor, grid: TokenGrid, idx: int) -> torch.Tensor:
    return mod.attention_weights(x, grid)[:, :, idx]


def _diffusion_rows(records, image_hw, query) -> Dict[Key, torch.Tensor]:
    """Row of the stage's composed diffusion up to each block, by autograd through the
    (linear) diffusion of a zero map: d out[query] / d input."""
    rows = {}
    for i, rec in enumerate(records):
        stage, block = block_key(rec['name'])
        chain = [r['module'] for r in records[:i + 1] if block_key(r['name'])[0] == stage]
        h, w = rec['x'].shape[-2:]
        idx = query_token(query, image_hw, (h, w))
        groups = rec['module'].groups
        with torch.enable_grad():
            z = rec['x'].new_zeros(1, groups, h, w, requires_grad=True)
            out = z
            for mod in chain:
                out = out + mod(out)
            out.flatten(2)[..., idx].sum().backward()
        rows[(stage, block)] = z.grad.flatten(2).mean(1)  # (1, h*w), mean over groups
    return rows


def query_attention_maps(model: nn.Module, x: torch.Tensor, query: Sequence[float],
                         family: Optional[str] = None) -> Dict[Key, torch.Tensor]:
    """``{(stage, block): (h, w) map}`` of the first image of ``x`` for the query pixel
    ``query = (y, x)`` (input pixels), in float32; see the module docstring per family."""
    family = family or family_of(model)
    image_hw = x.shape[-2:]
    if family == 'infsa':
        return {block_key(k): v[0] for k, v in attention_maps(model, x[:1]).items()}
    records = capture_mixer_inputs(model, x[:1], _MIXERS[family], 'forward')
    if family == 'ldn':
        rows = _diffusion_rows(records, image_hw, query)
        grids = {block_key(r['name']): r['x'].shape[-2:] for r in records}
    else:
        row_fn = _soft_row if family == 'soft' else _nala_row
        rows, grids = {}, {}
        for rec in records:
            key, hw = block_key(rec['name']), tuple(rec['hw'])
            with torch.no_grad():
                rows[key] = row_fn(rec['module'], rec['x'], rec['grid'],
                                   query_token(query, image_hw, hw)).mean(1)
            grids[key] = hw
    return {k: rows[k][0].float().reshape(*grids[k]) for k in rows}


def attention_figure(image, maps: Dict[Key, torch.Tensor], query: Sequence[float],
                     caption: str, title: Optional[str] = None, panel_size: float = 2.0,
                     alpha: float = 0.6, cmap: str = 'viridis'):
    """A matplotlib Figure (Agg canvas; pyplot is left alone): one panel per block, rows =
    stages, columns = blocks, titled "stage k, block j" (1-based), each map over the image
    with the query marked, one labelled colour bar and ``caption`` under the grid.

    Maps are divided by their largest absolute value, so one colour bar fits all blocks.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    img = _to_hwc(image)
    ih, iw = img.shape[:2]
    stages = sorted({k[0] for k in maps})
    cols = max(sum(1 for k in maps if k[0] == s) for s in stages)
    signed = any(float(m.min()) < 0 for m in maps.values())
    vmin = -1.0 if signed else 0.0
    fig = Figure(figsize=(panel_size * cols + 1.2, panel_size * ih / iw * len(stages) + 1.4),
                 layout='constrained')
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(stages), cols, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    for (stage, block), m in sorted(maps.items()):
        ax = axes[stages.index(stage)][sorted(k[1] for k in maps if k[0] == stage).index(block)]
        m = m.float() / m.abs().max().clamp_min(1e-12)
        ax.imshow(img)
        ax.imshow(m.numpy(), cmap=cmap, alpha=alpha, vmin=vmin, vmax=1.0,
                          extent=(-0.5, iw - 0.5, ih - 0.5, -0.5), interpolation='nearest')
        ax.plot(query[1], query[0], marker='x', color='red', markersize=9, mew=2.5)
        ax.set_title(f'stage {stage + 1}, block {block + 1}', fontsize=10)
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    # an opaque bar: the panels' alpha would wash it out
    bar = fig.colorbar(ScalarMappable(Normalize(vmin, 1.0), cmap), ax=axes, shrink=0.6,
                       fraction=0.05)
    bar.set_label('weight / largest |weight| of the block', fontsize=9)
    if title:
        fig.suptitle(title, fontsize=12)
    fig.supxlabel(caption + '  Red x: the query.', fontsize=9, wrap=True)
    return fig
