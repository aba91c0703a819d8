"""Infinite Self-Attention token mixers and their block (Roffo, arXiv:2603.00175, §3).

:class:`PureInfSA` (Eq. 11-12, O(N²)) and :class:`LinearInfSA` (Eq. 16-21, O(N)) on token
sequences (B, N, C).  Both scale their output by the discount γ of :class:`InfSAGamma`.
:class:`InfSABlock` is the Pre-LN block around either (Fig. 2a).
"""
import math
from typing import Optional, Tuple, Union

import torch
import torch.nn as nn
from timm.layers import DropPath

from ...kernels import fast_infsa, seam
from ...ops.infsa import (infsa_attention_matrix, linear_infsa, linear_infsa_pooled,
                          linear_infsa_weights)
from .branch import Branch
from .ffn import ConvFFN, Mlp
from .qkv import QKVMixer
from .token_grid import TokenGrid, valid_tokens_or_none
from .utils import check_heads

GAMMA_MODES = ('power', 'const')
MIXERS = ('linear', 'pure')


class InfSAGamma(nn.Module):
    """The discount γ of one block: ``γ^l`` (Eq. 23, ``mode='power'``, ``l`` the 1-based
    block index) or ``γ`` (``mode='const'``, one constant factor per block, as the
    authors' code does with its ρ).

    Args:
        num_heads: heads; a learned γ has one value per head.
        gamma: initial / fixed γ, in (0, 1) when learned, > 0 otherwise.
        mode: ``'power'`` or ``'const'``.
        layer_index: ``l`` (>= 1), used by ``'power'``.
        learnable: learn γ per head as ``sigmoid(logit)`` (paper §3.3: "constrained to
            (0, 1) via sigmoid ... per head"); the value stays a tensor in the graph.
    """

    def __init__(self, num_heads: int, gamma: float = 0.7, mode: str = 'const',
                 layer_index: int = 1, learnable: bool = False):
        super().__init__()
        if mode not in GAMMA_MODES:
            raise ValueError(f'gamma_mode must be one of {GAMMA_MODES}, got {mode!r}')
        if not isinstance(layer_index, int) or layer_index < 1:
            raise ValueError(f'layer_index must be an int >= 1, got {layer_index!r}')
        gamma = float(gamma)
        if learnable and not 0.0 < gamma < 1.0:
            raise ValueError(f'a learnable gamma must start in (0, 1), got {gamma}')
        if not gamma > 0.0:
            raise ValueError(f'gamma must be > 0, got {gamma}')
        self.mode = mode
        self.exponent = layer_index if mode == 'power' else 1
        self.learnable = learnable
        if learnable:
            self.logit = nn.Parameter(torch.full((num_heads, ), math.log(gamma / (1 - gamma))))
        else:
            self.value = gamma

    def forward(self) -> Union[float, torch.Tensor]:
        """The factor applied to the block's output: a float, or (H,) when learned."""
        if self.learnable:
            return torch.sigmoid(self.logit.float()) ** self.exponent
        return self.value ** self.exponent

    def extra_repr(self) -> str:
        init = '' if self.learnable else f'gamma={self.value}, '
        return f'{init}mode={self.mode}, exponent={self.exponent}, learnable={self.learnable}'


def _gamma_kwargs(num_heads, gamma, gamma_mode, layer_index, learn_gamma) -> dict:
    return dict(num_heads=num_heads, gamma=gamma, mode=gamma_mode, layer_index=layer_index,
                learnable=learn_gamma)


class PureInfSA(Branch, QKVMixer):
    """Pure InfSA (Eq. 11-12): ``Z = γ · [QKᵀ]₊ / (‖[QKᵀ]₊‖_F + ε) · V`` per head, then an
    output projection.  Replaces ``softmax(QKᵀ/√d) V`` in a Pre-LN block.

    Args:
        dim: channels C.
        num_heads: heads H (C divisible by H).
        gamma, gamma_mode, layer_index, learn_gamma: see :class:`InfSAGamma`.
        qkv_bias: bias of the Q/K/V projection.
        eps: ε of Eq. 11.
        chunk_size: exact query-chunked evaluation (O(chunk_size · N) memory), see
            :func:`mmlinattn.ops.pure_infsa`; None evaluates the N x N matrix at once.
        proj_drop: dropout after the output projection.
    """
    # its output is scaled by gamma after the mixing: the seam calls it whole
    fused_residual = False

    def __init__(self, dim: int, num_heads: int, gamma: float = 0.7, gamma_mode: str = 'const',
                 layer_index: int = 1, learn_gamma: bool = False, qkv_bias: bool = True,
                 eps: float = 1e-6, chunk_size: Optional[int] = None, proj_drop: float = 0.0):
        super().__init__(dim, num_heads, qkv_bias, eps, proj_drop)
        self.chunk_size = chunk_size
        self.gamma = InfSAGamma(**_gamma_kwargs(num_heads, gamma, gamma_mode, layer_index,
                                                learn_gamma))

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None) -> torch.Tensor:
        """x: (B, N, C), the last H*W tokens on ``grid`` (any before are prefix tokens);
        a padded grid leaves its padding out of the norm and the keys (None: no padding)."""
        q, k, v = self.qkv_heads(x)
        z = fast_infsa.pure(q, k, v, gamma=self.gamma(), valid=valid_tokens_or_none(grid, x),
                            eps=self.eps, chunk_size=self.chunk_size)
        return self.project(z)

    @torch.no_grad()
    def attention_matrix(self, x: torch.Tensor,
                         valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The dense ``Â`` (B, H, N, N) for the input ``x`` of :meth:`forward` (analysis)."""
        q, k, _ = self.qkv_heads(x)
        return infsa_attention_matrix(q, k, valid, self.eps)


class LinearInfSA(Branch):
    """Linear-InfSA (Eq. 16-21): per head one token-weight vector ``a`` (a single
    power-iteration-like step from ``α ∝ ‖Q_i‖``) pools the values into a context
    ``h = Σ γ a_t V_t`` that is broadcast to every token, then projected.

    The output is therefore identical for all tokens of an image (a rank-1 token mixer); a dense
    backbone must get its spatial mixing elsewhere (e.g. a depthwise conv in the FFN).

    Args:
        dim: channels C.
        num_heads: heads H (C divisible by H).
        gamma, gamma_mode, layer_index, learn_gamma: see :class:`InfSAGamma`.
        qkv_bias: bias of the Q (and K) / V projections.
        eps: ε of Eq. 17 and 20 (paper: 1e-6).
        tie_qk: K = Q (the paper, §3.4).  False adds a separate key projection, as in the
            authors' code.
        pool_then_project: compute ``h = W_V (Σ w_t x_t) + b_V Σ w_t`` (exact, V never
            computed for the N tokens).  False computes V for all tokens first (the
            authors' cost, for timing comparisons).
        proj_drop: dropout after the output projection.
    """

    def __init__(self, dim: int, num_heads: int, gamma: float = 0.7, gamma_mode: str = 'const',
                 layer_index: int = 1, learn_gamma: bool = False, qkv_bias: bool = True,
                 eps: float = 1e-6, tie_qk: bool = True, pool_then_project: bool = True,
                 proj_drop: float = 0.0):
        super().__init__()
        self.head_dim = check_heads(dim, num_heads)
        self.num_heads = num_heads
        self.eps = eps
        self.pool_then_project = pool_then_project
        # the output reads the tokens only through two pooled sums: on a large map inference
        # computes them in two passes over row stripes (kernels/row_stripes.py) and never
        # holds the normalised tokens or the queries whole (pool then project only)
        if pool_then_project:
            self.summary_passes, self.row_halo = 2, 0
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.k = None if tie_qk else nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)
        self.gamma = InfSAGamma(**_gamma_kwargs(num_heads, gamma, gamma_mode, layer_index,
                                                learn_gamma))

    # one output vector per image, expanded over the tokens: the seam calls it whole
    fused_residual = False

    @property
    def stripe_width(self) -> int:
        return self.v.in_features

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def summary_rows(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module],
                     state: Optional[torch.Tensor]) -> torch.Tensor:
        """These rows' part of pass 1 (``state`` None: the norm-weighted query sums) or of
        pass 2 (``state`` = q̄: the pooled tokens)."""
        x_norm = x if norm is None else norm(x)
        q, k = self.queries(x_norm)
        valid = valid_tokens_or_none(grid, x)
        if state is None:
            return fast_infsa.query_sums(q, valid)
        return fast_infsa.pool_sums(q if k is None else k, x_norm, state, valid)

    def finish_summary(self, total: torch.Tensor, x: torch.Tensor, grid: TokenGrid,
                       state: Optional[torch.Tensor]) -> torch.Tensor:
        """After pass 1, q̄; after pass 2, the context ``h`` (B, H, d)."""
        if state is None:
            return fast_infsa.mean_query(total, self.eps)
        return fast_infsa.context(total, self.v.weight, self.v.bias, self.gamma(), self.eps)

    def from_summary(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The output from the context ``h`` (B, H, d) (:meth:`finish_summary`, or the
        whole map's in :meth:`forward`): ``proj(h)``, one vector per image, over the tokens."""
        b, n, c = x.shape
        return self.proj_drop(self.proj(h.to(x.dtype).reshape(b, 1, c))).expand(b, n, c)

    def queries(self, x: torch.Tensor) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(B, N, C) -> q (B, H, N, d) and k (same, or None when tied to q)."""
        q = self._heads(self.q(x))
        return q, None if self.k is None else self._heads(self.k(x))

    def forward(self, x: torch.Tensor, grid: Optional[TokenGrid] = None) -> torch.Tensor:
        """x: (B, N, C), the last H*W tokens on ``grid`` (any before are prefix tokens);
        a padded grid leaves its padding out of the pools (None: no padding).
        Returns (B, N, C): ``proj(h)``, ``h = sum_t gamma a_t V_t`` (Eq. 16-21), one vector
        per image, expanded over the tokens."""
        q, k = self.queries(x)
        gamma = self.gamma()
        valid = valid_tokens_or_none(grid, x)
        if self.pool_then_project:
            h = linear_infsa_pooled(q, x, self.v.weight, self.v.bias, gamma, k, valid,
                                    self.eps)
        else:
            h = linear_infsa(q, self._heads(self.v(x)), gamma, k, valid, self.eps)
        return self.from_summary(h, x)

    @torch.no_grad()
    def token_weights(self, x: torch.Tensor, valid: Optional[torch.Tensor] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(a, α)``, each (B, H, N), for the input ``x`` of :meth:`forward` (analysis)."""
        q, k = self.queries(x)
        return linear_infsa_weights(q, k, valid, self.eps, return_alpha=True)


class InfSABlock(nn.Module):
    """Pre-LN Transformer block with an InfSA token mixer (paper Fig. 2a):
    ``x = x + DropPath(mixer(LN(x)))``, ``x = x + DropPath(FFN(LN(x)))``.

    Args:
        dim: channels C.
        num_heads: heads of the mixer.
        mixer: ``'linear'`` (:class:`LinearInfSA`) or ``'pure'`` (:class:`PureInfSA`).
        mlp_ratio: FFN hidden channels / C.
        dwconv: Mix-FFN with a depthwise 3x3 conv on the H x W grid (needs every token on
            the grid, i.e. no class token); False gives the plain ViT MLP.
        drop_path: stochastic-depth rate.
        layer_index: 1-based block index ``l`` (for γ^l).
        gamma, gamma_mode, learn_gamma, qkv_bias, eps: passed to the mixer.
        tie_qk, pool_then_project: Linear-InfSA options.
        pure_chunk_size: Pure InfSA query chunk (exact, O(chunk·N) memory).
        ffn_recompute: what the FFN recomputes in the backward of eager training instead of
            keeping (``recompute`` of :class:`.ffn.ConvFFN` / :class:`.ffn.Mlp`).
    """

    def __init__(self, dim: int, num_heads: int, mixer: str = 'linear', mlp_ratio: float = 4.0,
                 dwconv: bool = True, drop_path: float = 0.0, layer_index: int = 1,
                 gamma: float = 0.7, gamma_mode: str = 'const', learn_gamma: bool = False,
                 qkv_bias: bool = True, eps: float = 1e-6, tie_qk: bool = True,
                 pool_then_project: bool = True, pure_chunk_size: Optional[int] = None,
                 ffn_recompute: str = 'all'):
        super().__init__()
        common = dict(gamma=gamma, gamma_mode=gamma_mode, layer_index=layer_index,
                      learn_gamma=learn_gamma, qkv_bias=qkv_bias, eps=eps)
        if mixer == 'linear':
            attn = LinearInfSA(dim, num_heads, tie_qk=tie_qk,
                               pool_then_project=pool_then_project, **common)
        elif mixer == 'pure':
            attn = PureInfSA(dim, num_heads, chunk_size=pure_chunk_size, **common)
        else:
            raise ValueError(f'mixer must be one of {MIXERS}, got {mixer!r}')
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = attn
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.dwconv = dwconv
        self.ffn = (ConvFFN(dim, hidden, recompute=ffn_recompute) if dwconv
                    else Mlp(dim, hidden, recompute=ffn_recompute))
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """x: (B, N, C) tokens, the last H*W on ``grid`` (any before are prefix tokens such
        as a class token, always valid); the grid's padding stays out of the mixer's norms
        and pools."""
        x = seam.step(x, self.attn, grid, self.norm1, drop_path=self.drop_path)
        return seam.step(x, self.ffn, grid, self.norm2, drop_path=self.drop_path, owned=True)
