"""Diagnostics of Infinite Self-Attention (Roffo, arXiv:2603.00175).

* Neumann kernel / Katz centrality of a Frobenius-normalised ``Â`` (§3.1-3.3, Eq. 7, 15):
  interpretation only, nothing in a forward pass builds them.
* Eigenvector alignment (§4.5, Eq. 25-27): cosine and Spearman between Linear-InfSA's
  weights ``a`` and the Perron vector ``v`` of ``Â = ReLU(QQᵀ)/‖ReLU(QQᵀ)‖_F`` (200-step
  ℓ1 power iteration from ``v⁰ ∝ 1``), always next to two baselines that need no model:
  the uniform vector and ``α ∝ ‖Q_i‖`` (with random ``Q`` the uniform vector alone already
  gives cos(1, v) ≈ 0.9, so the paper's alignment numbers need these baselines).
* Attention maps of a backbone for an image (§4.6) and a PNG overlay (matplotlib's Agg
  canvas; the global pyplot backend is left alone).

Everything here is O(N²) in the tokens of the inspected block and runs in float64.
"""
import math
import re
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..models.layers.branch import Branch
from ..models.layers.infsa_attention import LinearInfSA, PureInfSA
from ..ops.infsa import infsa_attention_matrix, linear_infsa_weights

__all__ = [
    'power_iteration', 'neumann_kernel', 'katz_centrality', 'eigenvector_alignment',
    'summarize_alignment', 'capture_mixer_inputs', 'model_eigenvector_alignment',
    'attention_maps', 'save_attention_overlay'
]


# ----------------------------------------------------------------------------- graph kernels
def power_iteration(a_hat: torch.Tensor, num_iters: int = 200) -> torch.Tensor:
    """ℓ1-normalised power iteration (Eq. 26): ``v ← Â v / ‖Â v‖₁`` from ``v⁰ = 1/T``.

    Args:
        a_hat: (..., T, T) non-negative.
    Returns:
        (..., T); NaN where ``Â v`` vanishes (e.g. ``Â = 0``).
    """
    t = a_hat.shape[-1]
    vs = []
    # one matrix at a time: batched matrix-vector products take a slow path on CPU
    for m in a_hat.reshape(-1, t, t):
        v = m.new_full((t, ), 1.0 / t)
        for _ in range(num_iters):
            v = torch.mv(m, v)
            v = v / v.abs().sum()
        vs.append(v)
    return torch.stack(vs).reshape(a_hat.shape[:-1])


def neumann_kernel(a_hat: torch.Tensor, gamma: float) -> torch.Tensor:
    """``Č = Σ_{t≥1} (γÂ)^t = (I − γÂ)⁻¹ − I`` (Eq. 7); converges for ``γ ρ(Â) < 1``,
    which any γ in (0, 1) guarantees for a Frobenius-normalised ``Â`` (ρ ≤ ‖Â‖_F = 1)."""
    eye = torch.eye(a_hat.shape[-1], dtype=a_hat.dtype, device=a_hat.device)
    return torch.linalg.solve(eye - gamma * a_hat, eye.expand_as(a_hat)) - eye


def katz_centrality(a_hat: torch.Tensor, gamma: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Out- and in-centrality of the absorbing chain ``M = γÂ`` (§3.3, Eq. 15):
    ``c_out_i = Σ_j N_ij`` and ``c_in_j = Σ_i N_ij`` with ``N = (I − γÂ)⁻¹``."""
    fundamental = neumann_kernel(a_hat, gamma) + torch.eye(
        a_hat.shape[-1], dtype=a_hat.dtype, device=a_hat.device)
    return fundamental.sum(-1), fundamental.sum(-2)


# ----------------------------------------------------------------------------- alignment
def _cosine(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x @ y) / (x.norm() * y.norm()))


def _spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    from scipy.stats import spearmanr  # ties (ReLU zeros) need average ranks
    return float(spearmanr(x.numpy(), y.numpy()).statistic)


def eigenvector_alignment(q: torch.Tensor, valid: Optional[torch.Tensor] = None,
                          num_iters: int = 200, eps: float = 1e-6) -> Dict[str, list]:
    """Alignment of Linear-InfSA's ``a`` with the Perron vector of ``Â`` (§4.5).

    Args:
        q: (B, H, T, d) per-head queries (= keys, the paper ties them); a block's
            ``LinearInfSA.queries(x)[0]``.
        valid: (B, T) bool; padded tokens are dropped before anything is computed.
        num_iters: power-iteration steps (paper: 200).
        eps: ε of Eq. 27.

    Returns:
        Per (sample, head) lists: ``cos_a``, ``spearman_a`` (a vs v), ``cos_uniform``
        (1 vs v), ``cos_alpha``, ``spearman_alpha`` (α vs v), and ``degenerate``, the
        number of pairs skipped because ``v`` or ``a`` is undefined or constant.
    """
    b, h, t, d = q.shape
    q = q.detach().to(torch.float64).cpu()
    valid = None if valid is None else valid.bool().cpu()
    out = {k: [] for k in ('cos_a', 'spearman_a', 'cos_uniform', 'cos_alpha',
                           'spearman_alpha')}
    out['degenerate'] = 0
    for i in range(b):
        qi = q[i] if valid is None else q[i][:, valid[i]]                # (H, T', d)
        a, alpha = linear_infsa_weights(qi[None], eps=eps, return_alpha=True)
        v = power_iteration(infsa_attention_matrix(qi[None], qi[None], eps=0.0)[0],
                            num_iters)
        for j in range(h):
            vj, aj, alj = v[j], a[0, j], alpha[0, j]
            if not torch.isfinite(vj).all() or aj.std() == 0 or vj.std() == 0:
                out['degenerate'] += 1
                continue
            out['cos_a'].append(_cosine(aj, vj))
            out['spearman_a'].append(_spearman(aj, vj))
            out['cos_uniform'].append(_cosine(torch.ones_like(vj), vj))
            out['cos_alpha'].append(_cosine(alj, vj))
            out['spearman_alpha'].append(_spearman(alj, vj))
    return out


def summarize_alignment(result: Dict[str, list]) -> Dict[str, Union[Tuple[float, float], int]]:
    """``{metric: (mean, std)}`` plus ``samples`` and ``degenerate`` counts."""
    summary = {}
    for key, vals in result.items():
        if key == 'degenerate':
            continue
        arr = np.asarray(vals, dtype=np.float64)
        summary[key] = (float(arr.mean()), float(arr.std())) if arr.size else (math.nan,
                                                                               math.nan)
    summary['samples'] = len(result['cos_a'])
    summary['degenerate'] = result['degenerate']
    return summary


# ----------------------------------------------------------------------------- model hooks
def capture_mixer_inputs(model: nn.Module, x: torch.Tensor,
                         types: Tuple[type, ...] = (LinearInfSA, PureInfSA),
                         method: str = 'forward') -> List[dict]:
    """Run ``model(x)`` (no grad) and return, in call order, one record per call of
    ``method`` of a mixer of ``types`` (default: InfSA; for ``'forward'`` of a branch whose
    residual the seam fuses, its ``hidden``, which the seam calls instead):
    ``name``, ``module``, its input ``x`` (tokens (B, N, C) or a map; after the ``norm`` it
    was handed, if any), its ``grid``
    (a :class:`~mmlinattn.models.layers.token_grid.TokenGrid`), the grid's ``hw`` and, for
    tokens, their (B, N) ``valid`` mask (None when not passed or nothing is padded)."""
    records, patched = [], []
    names = {m: n for n, m in model.named_modules()}

    def recorder(module, call):
        def wrapped(*args, **kwargs):
            x = args[0].detach()
            norm = kwargs.get('norm', args[2] if len(args) > 2 else None)
            if norm is not None:  # the residual seam hands the block's pre-norm to the mixer
                x = norm(x)
            grid = args[1] if len(args) > 1 else kwargs.get('grid')
            hw = None if grid is None else grid.hw
            valid = None if grid is None or x.dim() != 3 else grid.valid_tokens(x)
            records.append(dict(name=names[module], module=module, x=x, grid=grid, hw=hw,
                                valid=valid))
            return call(*args, **kwargs)
        return wrapped

    # an instance attribute shadows the method for this run only
    for m in model.modules():
        if isinstance(m, types):
            name = ('hidden' if method == 'forward' and isinstance(m, Branch)
                    and m.fused_residual else method)
            setattr(m, name, recorder(m, getattr(m, name)))
            patched.append((m, name))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for m, name in patched:
            delattr(m, name)
    return records


def model_eigenvector_alignment(model: nn.Module, x: torch.Tensor, num_iters: int = 200,
                                max_tokens: int = 4096) -> Dict[str, dict]:
    """:func:`eigenvector_alignment` for every Linear-InfSA block of ``model`` on input
    ``x``, summarised per block, plus ``'all'`` over every (sample, head) pair.  Blocks with
    more than ``max_tokens`` tokens are skipped (Â is T x T)."""
    total: Dict[str, list] = {}
    per_block = {}
    for rec in capture_mixer_inputs(model, x, (LinearInfSA, )):
        if rec['x'].shape[1] > max_tokens:
            continue
        q, _ = rec['module'].queries(rec['x'])
        res = eigenvector_alignment(q, rec['valid'], num_iters, rec['module'].eps)
        per_block[rec['name']] = summarize_alignment(res)
        for key, val in res.items():
            total[key] = total.get(key, 0 if key == 'degenerate' else []) + val
    if total:
        per_block['all'] = summarize_alignment(total)
    return per_block


def _normalise(m: torch.Tensor) -> torch.Tensor:
    lo = m.flatten(1).min(1).values.view(-1, 1, 1)
    hi = m.flatten(1).max(1).values.view(-1, 1, 1)
    return (m - lo) / (hi - lo).clamp_min(1e-12)


def attention_maps(model: nn.Module, x: torch.Tensor,
                   max_tokens: int = 4096) -> Dict[str, torch.Tensor]:
    """Head-averaged token-importance maps (B, h, w) in [0, 1] for every InfSA block.

    Linear-InfSA: the weights ``a`` (for a model with a class token this is what the
    paper's CLS -> patch map reduces to).  Pure InfSA: the class token's row of ``Â``
    when there is one (§4.2: final-layer CLS -> patch attention), else the column sums
    of ``Â`` (one-hop in-centrality).  Pure blocks above ``max_tokens`` are skipped.
    """
    maps = {}
    for rec in capture_mixer_inputs(model, x):
        mod, tokens, (h, w) = rec['module'], rec['x'], rec['hw']
        extra = tokens.shape[1] - h * w
        if isinstance(mod, LinearInfSA):
            score = mod.token_weights(tokens, rec['valid'])[0][..., extra:]
        else:
            if tokens.shape[1] > max_tokens:
                continue
            a_hat = mod.attention_matrix(tokens, rec['valid'])
            score = a_hat[..., 0, extra:] if extra else a_hat.sum(-2)
        maps[rec['name']] = _normalise(score.float().mean(1).reshape(-1, h, w))
    return maps


# ----------------------------------------------------------------------------- overlay
def _to_hwc(image: Union[np.ndarray, torch.Tensor]) -> np.ndarray:
    img = image.detach().cpu().numpy() if torch.is_tensor(image) else np.asarray(image)
    if img.ndim == 3 and img.shape[0] in (1, 3) and img.shape[-1] not in (1, 3):
        img = img.transpose(1, 2, 0)
    if img.ndim != 3 or img.shape[-1] not in (1, 3):
        raise ValueError(f'image must be (H, W, 3) or (3, H, W), got shape {img.shape}')
    scale = 255.0 if np.issubdtype(img.dtype, np.integer) else 1.0
    return np.clip(img.astype(np.float64) / scale, 0.0, 1.0)


def panel_title(name: str) -> str:
    """'stages.1.blocks.0.attn' -> 'stage 2, block 1'; 'stages.3.attn' (an isotropic
    model's blocks) -> 'block 4'; anything else unchanged."""
    m = re.match(r'(?:.*\.)?stages\.(\d+)\.blocks\.(\d+)\b', name)
    if m:
        return f'stage {int(m.group(1)) + 1}, block {int(m.group(2)) + 1}'
    m = re.match(r'(?:.*\.)?stages\.(\d+)\b', name)
    return f'block {int(m.group(1)) + 1}' if m else name


OVERLAY_CAPTION = ('Colour: the InfSA weight of each token (mean over heads), divided by the '
                   "map's largest value (1 = the most central token).")


def save_attention_overlay(image: Union[np.ndarray, torch.Tensor],
                           maps: Union[torch.Tensor, Dict[str, torch.Tensor]], path: str,
                           alpha: float = 0.5, cmap: str = 'viridis', columns: int = 4,
                           caption: str = OVERLAY_CAPTION) -> str:
    """Write a PNG: the image, then one overlay panel per attention map, in a grid of
    ``columns`` with "stage k, block j" titles, one colour bar and a caption.

    Args:
        image: (H, W, 3) or (3, H, W); integers in [0, 255] or floats in [0, 1].
        maps: one (h, w) map or ``{module name or title: (h, w) map}`` with values in
            [0, 1]; each is resized (bilinear) to the image and drawn with ``cmap`` at
            opacity ``alpha``.
        path: output file (.png).
        caption: what the colour means, printed under the grid.
    Returns:
        ``path``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    img = _to_hwc(image)
    if torch.is_tensor(maps):
        maps = {'attention': maps}
    panels = len(maps) + 1
    cols = min(columns, panels)
    rows = -(-panels // cols)
    aspect = img.shape[0] / img.shape[1]
    fig = Figure(figsize=(2.6 * cols + 1.0, 2.6 * rows * aspect + 0.9), layout='constrained')
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    axes[0].imshow(img)
    axes[0].set_title('image', fontsize=10)
    for ax, (name, m) in zip(axes[1:], maps.items()):
        m = torch.as_tensor(m, dtype=torch.float32).reshape(1, 1, *m.shape[-2:])
        m = F.interpolate(m, size=img.shape[:2], mode='bilinear', align_corners=False)[0, 0]
        ax.imshow(img)
        ax.imshow(m.numpy(), cmap=cmap, alpha=alpha, vmin=0.0, vmax=1.0)
        ax.set_title(panel_title(name), fontsize=10)
    for ax in axes:
        ax.axis('off')
    fig.colorbar(ScalarMappable(Normalize(0.0, 1.0), cmap), ax=list(axes), shrink=0.8,
                 label='relative attention weight')
    fig.text(0.5, 0.0, caption, ha='center', va='bottom', fontsize=9, wrap=True)
    fig.get_layout_engine().set(rect=(0, 0.06, 1, 0.94))
    fig.savefig(path, dpi=120)
    return path
