"""SOFT / SOFT++ attention module: Gaussian-kernel Nystrom attention with learned landmarks.

Lu et al., "Softmax-free Linear Transformers" (IJCV 2024), Sec. 3.1-3.3, Alg. 1.  The
mathematics lives in :mod:`mmlinattn.ops.soft`; this module holds the parameters.
"""
import math
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath

from ...kernels import fast_linear, fast_soft, seam
from ...ops.soft import NEWTON_INITS, PINV_SOLVERS
from ...ops.tracing import traced
from .branch import Branch, Hidden
from .embed import pad_to_multiple
from .ffn import Mlp
from .norm import build_act
from .token_grid import TokenGrid
from .utils import adaptive_window_matrix, check_heads, split_heads

LANDMARK_GRIDS = ('pad', 'crop')


def capped_grid(h: int, w: int, max_tokens: int) -> Tuple[int, int]:
    """A grid (h', w') <= (h, w) with ``h' w' <= max_tokens``, close to h:w in aspect;
    (h, w) itself when it already fits.  ``h'`` is the largest g with ``g^2 w <= h *
    max_tokens`` (integer arithmetic, so :func:`capped_grid_slots` can repeat it in tensors)."""
    if h * w <= max_tokens:
        return h, w
    gh = min(h, max_tokens, max(1, math.isqrt(h * max_tokens // w)))
    return gh, min(w, max_tokens // gh)


def capped_grid_slots(h, w, max_tokens: int, like: torch.Tensor):
    """:func:`capped_grid` and the adaptive average pooling onto it, as tensor arithmetic on
    a (possibly symbolic) ``h x w`` size: ``(pool_h (M, h), pool_w (M, w), used (M,))`` for
    ``M = max_tokens`` slots, slot ``j`` being cell ``(j // w', j % w')`` of the ``h' x w'``
    grid, so that ``pooled[j] = sum_rs pool_h[j, r] pool_w[j, s] x[r, s]`` and only the
    first ``h' w'`` slots are ``used``.  A Python branch on the size (pool or not, and to
    what) would fix, in a traced graph, the branch taken at the traced size; this serves
    every size.  When ``h w <= M`` the windows are single cells: ``x`` itself."""
    dev = like.device
    ht = torch.ones(h, dtype=torch.int64, device=dev).sum()
    wt = torch.ones(w, dtype=torch.int64, device=dev).sum()
    k = torch.arange(1, max_tokens + 1, device=dev)
    gh = (k * k * wt <= ht * max_tokens).sum().clamp(min=1)   # = isqrt(h M // w), <= M
    gh = torch.minimum(gh, ht)
    gw = torch.minimum(wt, torch.full_like(gh, max_tokens) // gh)
    slot = torch.arange(max_tokens, device=dev)
    return (adaptive_window_matrix(slot // gw, ht, gh, h, like),
            adaptive_window_matrix(slot % gw, wt, gw, w, like), slot < gh * gw)


class LandmarkSampler(nn.Module):
    """Bottleneck ("landmark") tokens ``Q~ = f_s(Q)`` (Sec. 3.2 "Sampling", Sec. 4.4).

    An ``r x r`` convolution with stride ``r``, no bias, on each head's ``d_h``-channel map;
    the weights are shared across heads (this reproduces the parameter counts of the paper's
    Table 1).

    A side that is not a multiple of ``r`` is zero-padded up to one by default (``'pad'``:
    every token reaches a landmark, and the landmark grid is ``ceil(H / r) x ceil(W / r)``,
    the same rounding as the backbone's strides).  The paper is silent; the authors'
    stride-``r`` conv drops the last ``H mod r`` rows and ``W mod r`` columns instead
    (``'crop'``, grid ``floor(H / r) x floor(W / r)``), offered for their checkpoints.
    The two agree whenever ``r`` divides the grid (any input that is a multiple of 32).

    Args:
        head_dim: channels per head ``d_h``.
        ratio: ``r = sqrt(sp)``; 8/4/2/1 in stages 1-4 (Table 1).
        ln_gelu: LayerNorm(d_h) + GELU on the sampled tokens.  Not in the paper; the
            authors' code has it and it sets the landmark scale, hence the conditioning of
            A.  On by default.
        max_landmarks: if set, adaptively average-pool the sampled grid so that
            ``m <= max_landmarks`` (keeps the cost linear in n at detection resolutions;
            the fixed ratio makes m = n / sp and the Newton-Raphson cost O(m^3) per head,
            Sec. 3.2 "Complexity").  ``None`` is the paper's fixed ratio, where m grows
            with the image.
        grid: ``'pad'`` (default) or ``'crop'`` (authors' code), see above.
    """

    def __init__(self, head_dim: int, ratio: int, ln_gelu: bool = True,
                 max_landmarks: Optional[int] = None, grid: str = 'pad'):
        super().__init__()
        if grid not in LANDMARK_GRIDS:
            raise ValueError(f'landmark grid must be one of {LANDMARK_GRIDS}, got {grid!r}')
        if not isinstance(ratio, int) or ratio < 1:
            raise ValueError(f'landmark ratio must be a positive int, got {ratio!r}')
        if max_landmarks is not None and (not isinstance(max_landmarks, int)
                                          or max_landmarks < 1):
            raise ValueError(f'max_landmarks must be None or a positive int, got '
                             f'{max_landmarks!r}')
        self.ratio = ratio
        self.max_landmarks = max_landmarks
        self.grid = grid
        self.conv = nn.Conv2d(head_dim, head_dim, ratio, stride=ratio, bias=False)
        self.norm = nn.LayerNorm(head_dim) if ln_gelu else nn.Identity()
        self.act = nn.GELU() if ln_gelu else nn.Identity()

    def forward(self, q: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        """(B, h, H*W, d_h) tokens on an ``hw`` grid -> (B, h, m, d_h) landmarks."""
        return self.from_grid(self._conv(q, hw), *q.shape[:2])

    def from_grid(self, x: torch.Tensor, b: int, nh: int) -> torch.Tensor:
        """The sampled (B*h, d_h, H', W') grid -> (B, h, m, d_h) landmarks: pooled to
        ``max_landmarks`` if set, then the LayerNorm and GELU."""
        if self.max_landmarks is not None:
            pooled = capped_grid(x.shape[-2], x.shape[-1], self.max_landmarks)
            if pooled != tuple(x.shape[-2:]):
                x = F.adaptive_avg_pool2d(x, pooled)
        return self._norm_act(x.flatten(2), b, nh)

    def grid_rows(self, q: torch.Tensor, hw: Tuple[int, int]) -> Optional[torch.Tensor]:
        """The sampled grid's rows from a stripe of ``hw`` token rows that starts at a
        multiple of ``r`` (each sampled row reads its own ``r`` token rows): the stripes' rows
        in order are the whole grid.  None for a last stripe of fewer than ``r`` rows, which
        ``'crop'`` drops."""
        if self.grid == 'crop' and hw[0] < self.ratio:
            return None
        return self._conv(q, hw)

    def sample(self, q: torch.Tensor, grid: TokenGrid
               ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The landmarks of ``q`` (B, h, n, d) on ``grid`` and their (B, m) mask (None: all
        used).  Traced (``torch.compile``, ``torch.export``) with ``max_landmarks`` and no
        padding, the same landmarks sit in ``max_landmarks`` slots, the unused ones masked
        (:func:`capped_grid_slots`): one graph for every size, pooled or not."""
        if (self.max_landmarks is None or not traced()
                or grid.padded):
            return self(q, grid.hw), self.valid_landmarks(grid, q.device)
        x = self._conv(q, grid.hw)
        pool_h, pool_w, used = capped_grid_slots(x.shape[-2], x.shape[-1],
                                                 self.max_landmarks, x)
        x = (x @ pool_w.transpose(0, 1) * pool_h.transpose(0, 1)).sum(-2)  # (B*h, d, M)
        return self._norm_act(x, *q.shape[:2]), used.expand(q.shape[0], -1)

    def _conv(self, q: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        """(B, h, H*W, d_h) -> the sampled (B*h, d_h, H', W') grid."""
        b, nh, n, d = q.shape
        h, w = hw
        x = q.reshape(b * nh, h, w, d).permute(0, 3, 1, 2)
        if self.grid == 'pad':
            x = pad_to_multiple(x, self.ratio)
        elif min(h, w) < self.ratio:
            raise ValueError(f"landmark grid 'crop' needs a token grid of at least "
                             f'{self.ratio} x {self.ratio}, got {h} x {w}')
        return self.conv(x)

    def _norm_act(self, x: torch.Tensor, b: int, nh: int) -> torch.Tensor:
        """(B*h, d_h, m) sampled tokens -> (B, h, m, d_h) landmarks."""
        x = self.act(self.norm(x.transpose(1, 2)))
        return x.reshape(b, nh, -1, x.shape[-1])

    def landmark_grid(self, hw: Tuple[int, int]) -> Tuple[int, int]:
        """The conv's output grid for an ``hw`` token grid (before ``max_landmarks``)."""
        if self.grid == 'crop':
            return hw[0] // self.ratio, hw[1] // self.ratio
        return math.ceil(hw[0] / self.ratio), math.ceil(hw[1] / self.ratio)

    def valid_landmarks(self, grid: TokenGrid, device) -> Optional[torch.Tensor]:
        """(B, m) bool mask of the landmarks whose window holds a real token, for a padded
        ``grid``; None when nothing is padded.  With ``max_landmarks`` pooling a landmark
        mixes windows, so no mask is made (the padding then reaches the pooled landmarks;
        see docs/advanced/batch_independence.md)."""
        if not grid.padded:
            return None
        landmarks = grid.downsample(self.ratio, crop=self.grid == 'crop')
        if (self.max_landmarks is not None
                and capped_grid(*landmarks.hw, self.max_landmarks) != landmarks.hw):
            return None
        return landmarks.token_mask(device)


class SoftAttention(Branch):
    """One SOFT block's attention (Fig. 2): ``proj(S^ V)`` with ``S^`` from Eq. 9 / Eq. 17.

    ``W_q = W_k`` (one ``qk`` projection, Sec. 3.1) so the kernel is symmetric; tokens are
    scaled by ``d_h^{-1/4}`` so ``exp(-||.||^2/2)`` equals Eq. 5 with ``d_e = d_h``.

    Args:
        dim: channels ``d = d_e``.
        num_heads: heads ``h`` (``d_h = dim / h``, 32 in the paper).
        sr_ratio: landmark sampling ratio ``r`` (:class:`LandmarkSampler`).
        qkv_bias: bias of the ``qk`` and ``v`` projections.
        num_iters: Newton-Schulz iterations T (Eq. 10), 20 by default (Fig. 5).
        newton_init: ``'safe'``, ``'paper'`` or ``'scaled'``
            (see :func:`mmlinattn.ops.soft.newton_init_alpha`).
        sym_norm: SOFT++ symmetric normalisation (Eq. 17); ``False`` = plain SOFT.
        landmark_ln_gelu, max_landmarks, landmark_grid: see :class:`LandmarkSampler`
            (``ln_gelu``, ``max_landmarks``, ``grid``).
        v_conv_size: kernel of the authors' per-head depthwise conv on V added to the
            attention output (their "SOFT-Norm" models: 9/5/3); 0 = none (paper).
        ridge: invert ``A + ridge I`` (0 = paper; 0.01 in the authors' plain-SOFT code), with
            the Newton step of ``A + ridge I``.
        pinv: ``'newton'`` (Eq. 10, default) or ``'cholesky'`` (a ridge-regularised solve
            with ``(A + lambda I)^{-1}`` in place of ``A^+``, by a Cholesky factorisation:
            m^3 / 3 flops instead of 40 m^3), see :func:`mmlinattn.ops.soft.soft_attention`.
    """

    def __init__(self, dim: int, num_heads: int, sr_ratio: int, qkv_bias: bool = True,
                 num_iters: int = 20, newton_init: str = 'safe', sym_norm: bool = True,
                 landmark_ln_gelu: bool = True, max_landmarks: Optional[int] = None,
                 v_conv_size: int = 0, ridge: float = 0.0, landmark_grid: str = 'pad',
                 pinv: str = 'newton'):
        super().__init__()
        if newton_init not in NEWTON_INITS:
            raise ValueError(f'newton_init must be one of {NEWTON_INITS}, got {newton_init!r}')
        if pinv not in PINV_SOLVERS:
            raise ValueError(f'pinv must be one of {PINV_SOLVERS}, got {pinv!r}')
        if not isinstance(num_iters, int) or num_iters < 0:
            raise ValueError(f'num_iters must be a non-negative int, got {num_iters!r}')
        if v_conv_size < 0 or (v_conv_size and v_conv_size % 2 == 0):
            raise ValueError(f'v_conv_size must be 0 (off) or an odd kernel size, got '
                             f'{v_conv_size!r}')
        self.num_heads = num_heads
        self.head_dim = check_heads(dim, num_heads)
        self.num_iters = num_iters
        self.newton_init = newton_init
        self.sym_norm = sym_norm
        self.ridge = ridge
        self.pinv = pinv
        self.qk = nn.Linear(dim, dim, bias=qkv_bias)
        self.v = nn.Linear(dim, dim, bias=qkv_bias)
        self.sampler = LandmarkSampler(self.head_dim, sr_ratio, landmark_ln_gelu, max_landmarks,
                                       landmark_grid)
        self.v_conv = (nn.Conv2d(num_heads, num_heads, v_conv_size, padding=v_conv_size // 2,
                                 groups=num_heads, bias=False) if v_conv_size else None)
        self.proj = nn.Linear(dim, dim)
        self.row_halo = v_conv_size // 2

    # In inference on a large map the attention runs in passes over row stripes
    # (:mod:`mmlinattn.kernels.row_stripes`): the landmarks from the sampler's rows, then
    # ``P^T V`` summed over the stripes, then each stripe's ``P N(A^+) P^T V``.
    summary_passes = 2

    @property
    def row_align(self) -> int:
        """Stripes start at multiples of the sampler's stride."""
        return self.sampler.ratio

    @property
    def stripe_width(self) -> int:
        """The widest per-token tensor: a channel map, or P's heads x landmarks."""
        return max(self.proj.in_features, self.num_heads * (self.sampler.max_landmarks or 0))

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """``proj(S^ V)`` (+ the authors' conv of V), ``S^`` the Nystrom approximation of
        the Gaussian kernel on ``Q = K = qk(x)`` (Eq. 9 / Eq. 17)."""
        return self.proj(self.mix(x, grid))

    def hidden(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module] = None,
               summary=None) -> Hidden:
        """The output projection's input from ``norm(x)``; with ``summary``
        (:meth:`finish_summary`), that of these rows against the whole map's landmarks."""
        return Hidden(self.mix(x if norm is None else norm(x), grid, summary))

    def mix(self, x: torch.Tensor, grid: TokenGrid, summary=None) -> torch.Tensor:
        """Everything before the output projection: the merged heads, (B, H*W, C)."""
        b, n, c = x.shape
        if summary is None:
            q, landmarks, landmark_valid = self.kernel_tokens(x, grid)
        else:
            q, (landmarks, landmark_valid, middle) = self.queries(x, grid), summary
        v = split_heads(fast_linear.apply(x, self.v), self.num_heads)
        if summary is None:
            out = self.attend(q, landmarks, v, grid.valid_tokens(x), landmark_valid)
        else:
            out = fast_soft.output(q, landmarks, middle, grid.valid_tokens(x), landmark_valid)
        if self.v_conv is not None:
            out = out + self._conv_v(v, grid)
        return out.transpose(1, 2).reshape(b, n, c)

    def summary_rows(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module],
                     state) -> Union[List[torch.Tensor], torch.Tensor]:
        """These rows' part of pass 1 (``state`` None: their rows of the sampled grid, a list
        the passes concatenate) or of pass 2 (``state`` = the landmarks: ``P^T V``)."""
        x = x if norm is None else norm(x)
        q = self.queries(x, grid)
        if state is None:
            rows = self.sampler.grid_rows(q, grid.hw)
            return [] if rows is None else [rows]
        landmarks, landmark_valid = state
        v = split_heads(fast_linear.apply(x, self.v), self.num_heads)
        return fast_soft.value_sums(q, landmarks, v, grid.valid_tokens(x), landmark_valid)

    def finish_summary(self, total, x: torch.Tensor, grid: TokenGrid, state):
        """After pass 1, ``(landmarks, their mask)`` from the whole sampled grid; after pass
        2, ``(landmarks, their mask, N(A^+) P^T V)``."""
        if state is None:
            landmarks = self.sampler.from_grid(torch.cat(total, dim=2), x.shape[0],
                                               self.num_heads)
            return landmarks, self.sampler.valid_landmarks(grid, x.device)
        return (*state, fast_soft.middle(state[0], total, self.num_iters, self.newton_init,
                                         self.sym_norm, self.ridge, state[1], self.pinv))

    def queries(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """Queries (= keys) in kernel space (B, h, n, d); a padded batch's padded queries
        zeroed, so that they neither feed the landmarks nor P^T V."""
        q = split_heads(fast_linear.apply(x, self.qk), self.num_heads)
        q = q * self.head_dim ** -0.25
        valid = grid.valid_tokens(x)
        if valid is not None:
            q = q * valid[:, None, :, None].to(q.dtype)
        return q

    def kernel_tokens(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, ...]:
        """Queries (= keys) in kernel space (B, h, n, d), their landmarks (B, h, m, d) and
        the landmarks' (B, m) mask (or None)."""
        q = self.queries(x, grid)
        return (q, *self.sampler.sample(q, grid))

    def attend(self, q: torch.Tensor, landmarks: torch.Tensor, v: torch.Tensor,
               valid: Optional[torch.Tensor] = None,
               landmark_valid: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``S^ V`` with this block's Newton-Schulz and normalisation settings."""
        return fast_soft.attention(q, landmarks, v, self.num_iters, self.newton_init,
                                   self.sym_norm, self.ridge, valid, landmark_valid, self.pinv)

    def _conv_v(self, v: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """The authors' depthwise conv: one k x k filter per head, shared by its channels."""
        b, nh, n, d = v.shape
        hw = grid.hw
        y = v.transpose(2, 3).reshape(b, nh, d, hw[0], hw[1]).transpose(1, 2)
        y = self.v_conv(grid.zero_padding(y.reshape(b * d, nh, hw[0], hw[1])))
        return y.reshape(b, d, nh, n).permute(0, 2, 3, 1)


class SOFTBlock(nn.Module):
    """A SOFT layer (Sec. 3.4): SOFT attention block + 2-layer MLP, each residual.

    Pre-LN by default (the paper cites the ViT FFN, Sec. 3.4); ``post_norm=True``
    is the authors' released layout ``x = LN(x + f(x))``.

    Args:
        dim, num_heads, sr_ratio: see :class:`SoftAttention`.
        mlp_ratio: MLP expansion e (4 in every stage, Sec. 3.4).
        drop_path: stochastic depth rate.
        post_norm: norm placement (see above).
        act_cfg: the MLP activation (:func:`.norm.build_act`).
        attn_kwargs: the remaining :class:`SoftAttention` arguments.
    """

    def __init__(self, dim: int, num_heads: int, sr_ratio: int, mlp_ratio: float = 4.0,
                 drop_path: float = 0.0, post_norm: bool = False,
                 act_cfg: dict = dict(type='GELU'), **attn_kwargs):
        super().__init__()
        self.post_norm = post_norm
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SoftAttention(dim, num_heads, sr_ratio, **attn_kwargs)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), act_layer=lambda: build_act(act_cfg),
                       recompute='last')
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        if self.post_norm:  # the branches through their fast forms, then the sums normed
            x = self.norm1(x + self.drop_path(seam.branch_output(self.attn, x, grid)))
            return self.norm2(x + self.drop_path(seam.branch_output(self.mlp, x, grid)))
        x = seam.step(x, self.attn, grid, self.norm1, drop_path=self.drop_path)
        return seam.step(x, self.mlp, grid, self.norm2, drop_path=self.drop_path, owned=True)
