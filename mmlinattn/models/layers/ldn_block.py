"""The Linear Diffusion Network layer (Fein-Ashley) on an image grid.

Paper, §3.3 (E4): ``H' = H + δt (K H − diag(K 1) H) + F(X, H) + A_lin(H)``: a diffusion step,
a local update and linear attention, all computed from the same H and summed in one residual
step.  :class:`GridDiffusion` is the first term on the 2-D token grid (our design; the paper
is 1-D only), :class:`LinearAttention` the third (E6-E7), and :class:`LDNBlock` the layer.
Equation labels E1-E9 are defined in :mod:`mmlinattn.models.backbones.ldn`.
"""
import math
from typing import Optional

import torch
import torch.nn as nn
from timm.layers import DropPath

try:
    from timm.layers import LayerScale
except ImportError:  # timm 0.9: in vision_transformer (the same class and parameter)
    from timm.models.vision_transformer import LayerScale

from ...kernels import fast_ldn, seam
from ...ops import grid_diffusion_implicit_dct, stencil_kernel, stencil_offsets
from ...ops.precision import compute_dtype
from .branch import Branch, Hidden
from .channels_last import map_as_tokens, tokens_as_map
from .ffn import Mlp
from .token_grid import TokenGrid, valid_tokens_or_none
from .qkv import QKVMixer

__all__ = ['GridDiffusion', 'LinearAttention', 'LDNBlock']


class GridDiffusion(nn.Module):
    """Learnable diffusion increment ``δt (K H − diag(K 1) H)`` on the H x W token grid.

    The kernel is a translation-invariant non-negative stencil, ``δt·K_{t,t+u} = a·p_u``
    (our design; the paper's 1-D ``K_ts = φ(t−s) g(|t−s|)``, E5, has no 2-D form):

    * ``p = softmax(tap_logits)`` is the tap shape (free, so it may be asymmetric: the paper's
      soft directional φ);
    * ``a = step_max · sigmoid(step_logit)`` is δt times the interior row sum.  With
      ``step_max < 1``, ``δt · max_t Σ_s K_ts = a < 1`` for *every* parameter value and grid
      size, so the stability condition E9 holds strictly and the step matrix has a positive
      diagonal (Theorem 1's Perron-Frobenius proof also needs the step matrix aperiodic,
      which a positive diagonal ensures);
    * borders use the exact row sums ``deg = conv(ones)`` (missing neighbours, no wrap).

    Args:
        groups: G independent (p, a) pairs, each for C / G consecutive channels (the paper
            shares K over all channels: G = 1).
        taps: ``'cross4'`` (4-neighbour graph Laplacian, default) or ``'kK'`` (odd K, e.g.
            ``'k3'``: every neighbour in the K x K window, logits initialised to a Gaussian
            ``−‖u‖² / 2``).
        integrator: ``'euler'`` (the paper's explicit step) or ``'implicit_dct'`` (backward
            Euler solved by a 2-D DCT; ``'cross4'`` only, uses the symmetrised
            taps ``κ_v = p_up + p_down``, ``κ_h = p_left + p_right`` and an unbounded step
            ``a = softplus(step_logit)``; cost O(N (H + W)), not linear in N).
        n_steps: sub-steps per layer with the same (p, a) (the paper: 1).
        step_init: initial ``a`` (in ``(0, step_max)`` for ``'euler'``, > 0 otherwise).
        step_max: the cap ``a_max < 1`` of the explicit step.
    """

    def __init__(self, groups: int = 1, taps: str = 'cross4', integrator: str = 'euler',
                 n_steps: int = 1, step_init: float = 0.5, step_max: float = 0.99):
        super().__init__()
        offsets = stencil_offsets(taps)
        if integrator not in ('euler', 'implicit_dct'):
            raise ValueError(f"integrator must be 'euler' or 'implicit_dct', got {integrator!r}")
        if integrator == 'implicit_dct' and taps != 'cross4':
            raise ValueError("integrator='implicit_dct' needs taps='cross4' (the DCT solves "
                             f'only the separable 4-neighbour operator), got taps={taps!r}')
        if not isinstance(n_steps, int) or n_steps < 1:
            raise ValueError(f'n_steps must be an int >= 1, got {n_steps!r}')
        if not isinstance(groups, int) or groups < 1:
            raise ValueError(f'groups must be an int >= 1, got {groups!r}')
        if integrator == 'euler':
            if not 0.0 < step_max < 1.0:
                raise ValueError(f'step_max must be in (0, 1) so that every explicit step is '
                                 f'a convex combination with a positive diagonal, got '
                                 f'{step_max!r}')
            if not 0.0 < step_init < step_max:
                raise ValueError(f'step_init must be in (0, step_max={step_max}), got '
                                 f'{step_init!r}')
            theta = math.log(step_init / (step_max - step_init))     # logit(step_init / max)
        else:
            if not step_init > 0.0:
                raise ValueError(f'step_init must be > 0, got {step_init!r}')
            theta = step_init + math.log(-math.expm1(-step_init))    # softplus^-1(step_init)
        self.taps = taps
        self.integrator = integrator
        self.n_steps = n_steps
        self.step_max = float(step_max)
        if taps == 'cross4':
            logits = torch.zeros(groups, len(offsets))
        else:
            logits = torch.tensor([-(i * i + j * j) / 2.0 for i, j in offsets]).repeat(groups, 1)
        self.tap_logits = nn.Parameter(logits)
        self.step_logit = nn.Parameter(torch.full((groups, ), theta))

    @property
    def groups(self) -> int:
        return self.step_logit.numel()

    def tap_probs(self) -> torch.Tensor:
        """(G, n_offsets) tap shape p, non-negative, rows summing to 1."""
        return self.tap_logits.to(compute_dtype(self.tap_logits)).softmax(dim=-1)

    def step(self) -> torch.Tensor:
        """(G,) step ``a`` = δt · interior row sum of K."""
        logit = self.step_logit.to(compute_dtype(self.step_logit))
        if self.integrator == 'euler':
            return self.step_max * torch.sigmoid(logit)
        return nn.functional.softplus(logit)

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None) -> torch.Tensor:
        """(B, C, H, W) state on ``grid`` (None: nothing padded) -> (B, C, H, W) diffusion
        increment (not the new state)."""
        p = self.tap_probs()
        if self.integrator == 'euler':
            # in a padded batch, each image diffuses on its own valid region only
            valid = None if grid is None else grid.map_mask(x.device, torch.float32)
            return fast_ldn.grid_diffusion(x, stencil_kernel(p, self.taps), self.step(),
                                           self.n_steps, valid)
        kappa = torch.stack([p[:, 0] + p[:, 1], p[:, 2] + p[:, 3]], dim=1)
        return grid_diffusion_implicit_dct(x, kappa, self.step(), self.n_steps)

    def extra_repr(self) -> str:
        return (f'groups={self.groups}, taps={self.taps!r}, integrator={self.integrator!r}, '
                f'n_steps={self.n_steps}, step_max={self.step_max}')


class LinearAttention(Branch, QKVMixer):
    """Multi-head normalised linear attention with an output projection (LDN E6-E7).

    ``Q, K, V = x W_Q, x W_K, x W_V`` (one fused linear), per head
    ``φ(Q)(φ(K)^T V) / (φ(Q) φ(K)^T 1)`` by :func:`mmlinattn.ops.linear_attention`
    (float32, means over tokens), then heads concatenated and projected; every output token
    depends on every input token (of its image's valid region when the grid is padded).  The
    paper has one head and no projection; several heads and a projection are our choice, E6
    allows ``d' ≠ d``.

    Args:
        dim: channels C (= d' here).
        num_heads: heads; ``dim`` must be divisible by it.
        qkv_bias: bias of the Q/K/V projection.
        feature_map: ``'elu'`` (ELU+1, default) or ``'relu'`` (the paper's example).
        eps: added to the normaliser.
        proj_drop: dropout after the output projection.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True,
                 feature_map: str = 'elu', eps: float = 1e-6, proj_drop: float = 0.0):
        super().__init__(dim, num_heads, qkv_bias, eps, proj_drop)
        self.feature_map = feature_map

    out_drop_name = 'proj_drop'
    # every output token reads the others only through the key sums phi(K)^T [V | 1]: on a
    # large map inference runs it in two passes over row stripes (kernels/row_stripes.py)
    summary_passes, row_halo = 1, 0

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None) -> torch.Tensor:
        """``proj(concat_heads(phi(Q) (phi(K)^T V) / (phi(Q) phi(K)^T 1)))`` (E6-E7)."""
        return self.project(self.attend(x, grid))

    def hidden(self, x: torch.Tensor, grid: Optional[TokenGrid] = None,
               norm: Optional[nn.Module] = None, summary=None) -> Hidden:
        """The merged heads of ``norm(x)``, the output projection's input; with ``summary``
        (the whole map's key sums, :meth:`finish_summary`), of these rows' queries."""
        x = x if norm is None else norm(x)
        if summary is None:
            return Hidden(self.merge_heads(self.attend(x, grid)))
        (q, ) = self.part_heads(x, 0, 1)
        features = fast_ldn.features(self.feature_map)
        return Hidden(self.merge_heads(
            fast_ldn.query_side_given_sums(q, *summary, features, self.eps)))

    def summary_rows(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module] = None,
                     state=None) -> torch.Tensor:
        """The key sums of these rows' tokens (pass 1 of the two-pass form)."""
        k, v = self.part_heads(x if norm is None else norm(x), 1, 2)
        return fast_ldn.key_sums(k, v, fast_ldn.features(self.feature_map),
                                 valid_tokens_or_none(grid, x))

    def attend(self, x: torch.Tensor, grid: Optional[TokenGrid] = None) -> torch.Tensor:
        """(B, N, C) -> (B, H, N, d): the attention output per head, before the projection."""
        q, k, v = self.qkv_heads(x)
        return fast_ldn.linear_attention(q, k, v, self.feature_map, self.eps,
                                         valid_tokens_or_none(grid, x))


class LDNBlock(nn.Module):
    """One LDN layer (paper E2-E4): ``h + δt(K h − diag(K 1) h) + F(h) + A_lin(h)``.

    All branches read the same state h and are summed in one residual step (the paper's
    parallel update).  The diffusion acts on the raw h so the stability and light-cone
    results of §4 hold for it exactly; the local update and the attention read pre-LN inputs
    and carry LayerScale and drop-path (our choices).  The local update is a
    per-token MLP ``C -> r·C -> C`` on ``LN(h)``; the paper's ``F(x_t, h_t)`` also names the
    raw input x_t, which (as in the authors' code) it does not use.

    Args:
        dim: channels C.
        num_heads: heads of the linear attention.
        mlp_ratio: hidden ratio r of the local MLP.
        qkv_bias: bias of the Q/K/V projection.
        feature_map: φ of the linear attention (``'elu'`` = ELU+1 or ``'relu'``).
        drop_path: stochastic-depth rate of the local and attention branches (independent
            masks per branch).
        layer_scale_init_value: initial LayerScale of those branches; ``None`` or 0 disables.
        use_diffusion, use_local, use_attn: build and apply each branch (paper Table 4
            ablations); at least one must be on.
        diffusion_cfg: keyword arguments of :class:`GridDiffusion` (``step_init`` etc.).
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qkv_bias: bool = True,
                 feature_map: str = 'elu', drop_path: float = 0.0,
                 layer_scale_init_value: Optional[float] = 1e-5, use_diffusion: bool = True,
                 use_local: bool = True, use_attn: bool = True,
                 diffusion_cfg: Optional[dict] = None):
        super().__init__()
        if not (use_diffusion or use_local or use_attn):
            raise ValueError('an LDN block needs at least one of use_diffusion, use_local, '
                             'use_attn (with none it is the identity)')
        self.use_diffusion, self.use_local, self.use_attn = use_diffusion, use_local, use_attn
        if use_diffusion:
            self.diffusion = GridDiffusion(**(diffusion_cfg or {}))
            if dim % self.diffusion.groups:
                raise ValueError(f'diffusion groups={self.diffusion.groups} must divide the '
                                 f'block width dim={dim}')
        if use_local:
            self.norm1 = nn.LayerNorm(dim, eps=1e-6)
            self.local = Mlp(dim, int(dim * mlp_ratio), act_layer=nn.GELU, recompute='last')
            self.ls1 = self._layer_scale(dim, layer_scale_init_value)
        if use_attn:
            self.norm2 = nn.LayerNorm(dim, eps=1e-6)
            self.attn = LinearAttention(dim, num_heads, qkv_bias=qkv_bias,
                                        feature_map=feature_map)
            self.ls2 = self._layer_scale(dim, layer_scale_init_value)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    @staticmethod
    def _layer_scale(dim: int, init_value: Optional[float]) -> nn.Module:
        return LayerScale(dim, init_value) if init_value else nn.Identity()

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """(B, H*W, C) tokens of an H x W ``grid`` (row-major) -> same shape."""
        steps = []
        if self.use_local:
            steps.append((self.local, self.norm1, self._gamma(1)))
        if self.use_attn:
            steps.append((self.attn, self.norm2, self._gamma(2)))
        if not self.use_diffusion:
            return seam.parallel(x, steps, grid, drop_path=self.drop_path)
        return seam.parallel(x, steps, grid, lambda: self._diffuse(x, grid),
                             list(self.diffusion.parameters()), self.drop_path)

    def _diffuse(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """The diffusion increment as (B, N, C) tokens."""
        # channels-last view: the stencil conv reads the tokens in place, no copies
        return map_as_tokens(self.diffusion(tokens_as_map(x, grid.hw), grid))

    def _gamma(self, branch: int) -> Optional[torch.Tensor]:
        """The LayerScale vector of a branch (1: local, 2: attention), None without one."""
        return getattr(getattr(self, f'ls{branch}'), 'gamma', None)
