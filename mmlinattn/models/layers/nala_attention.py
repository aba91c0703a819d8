"""NaLaFormer's gated attention mixer and block (NaLaFormer §3.2, Fig. 2a; App. A.2)."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath

from ...kernels import fast_linear, fast_nala, memory, seam
from ...ops.nalaformer import KERNELS
from ...ops.precision import compute_dtype
from .branch import Branch, Hidden
from .channels_last import conv_tokens
from .ffn import ConvFFN
from .rope import apply_rope, rope_2d_angles
from .token_grid import TokenGrid
from .utils import check_heads

ATTN_TYPES = ('nala', 'softmax')


class NaLaAttention(Branch):
    """Gated multi-head attention of a NaLaFormer block ("simplified GLA", Fig. 2a).

    ``q, k, v, g = Linear(C, 4C)(x)``; ``o = Attn(q, k, v) + LePE(v)``;
    ``out = Linear(C, C)(LayerNorm(o) * SiLU(g))``.  The LayerNorm, the activated gate and the
    output projection are the paper's (§3.2, last paragraph); the fused projection, the SiLU
    activation and LePE (depthwise 5x5 conv on V, added before the norm) follow the authors'
    code, which the paper leaves unspecified.

    Args:
        dim: channels C.
        num_heads: heads; ``C / num_heads`` is the head dim.
        attn_type: ``'nala'`` (norm-aware linear attention, O(N), Eqs. 8-17) or
            ``'softmax'`` (scaled dot-product attention with 2-D RoPE, O(N^2); the authors'
            code uses it in stages 3-4).
        kernel, lam, alpha, eps: NaLa feature-map options, see
            :func:`mmlinattn.ops.nala_attention`; ``kernel='relu_split_rope'`` computes the
            2-D RoPE angles from the current (H, W) on every call, as ``rope`` does.
        lepe: add the depthwise 5x5 conv of V.
        rope: rotary 2-D position embedding of q and k for ``attn_type='softmax'``, computed
            from the current (H, W) on every call.
        fuse: run NaLa's feature maps as compiled fused loops (with their backward under
            autograd; ``fuse`` of :func:`mmlinattn.ops.nala_attention`).
    """

    def __init__(self, dim: int, num_heads: int, attn_type: str = 'nala',
                 kernel: str = 'cos_sin', lam: float = 3.0, alpha: float = 20.0,
                 eps: float = 1e-6, lepe: bool = True, rope: bool = True,
                 fuse: bool = True):
        super().__init__()
        if attn_type not in ATTN_TYPES:
            raise ValueError(f'attn_type must be one of {ATTN_TYPES}, got {attn_type!r}')
        if kernel not in KERNELS:
            raise ValueError(f'kernel must be one of {KERNELS}, got {kernel!r}')
        self.head_dim = check_heads(dim, num_heads)
        if attn_type == 'nala' and kernel == 'relu_split_rope' and self.head_dim % 4:
            raise ValueError(f"kernel='relu_split_rope' needs head_dim % 4 == 0, got "
                             f'head_dim={self.head_dim} (dim={dim}, num_heads={num_heads})')
        if attn_type == 'softmax' and rope and self.head_dim % 4:
            raise ValueError(f'softmax attention with rope needs head_dim % 4 == 0, got '
                             f'head_dim={self.head_dim} (dim={dim}, num_heads={num_heads})')
        self.num_heads = num_heads
        self.attn_type = attn_type
        self.kernel, self.lam, self.alpha, self.eps = kernel, lam, alpha, eps
        self.fuse = fuse
        self.rope = rope and attn_type == 'softmax'
        self.qkvg = nn.Linear(dim, 4 * dim)
        self.lepe = nn.Conv2d(dim, dim, 5, 1, 2, groups=dim) if lepe else None
        self.norm = nn.LayerNorm(dim)
        self.act = nn.SiLU()
        self.proj = nn.Linear(dim, dim)
        # NaLa reads the other tokens only through the key sums: on a large map inference
        # runs it in two passes over row stripes (kernels/row_stripes.py), the second with
        # the LePE conv's halo
        if attn_type == 'nala' and kernel != 'relu_split_rope':
            self.summary_passes = 1
            self.row_halo = self.lepe.kernel_size[0] // 2 if lepe else 0

    def _angles(self, hw: Tuple[int, int], x: torch.Tensor) -> torch.Tensor:
        """RoPE angles of the current grid, float64 for float64 inputs, else float32."""
        return rope_2d_angles(hw[0], hw[1], self.head_dim, device=x.device,
                              dtype=compute_dtype(x))

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """``proj(LN(o) * SiLU(g))``, ``o = Attn(q, k, v) + LePE(v)``, ``q, k, v, g =
        qkvg(x)`` (§3.2, Fig. 2a)."""
        return self.proj(self._mix(x, grid))

    def hidden(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module] = None,
               summary=None) -> Hidden:
        """The output projection's input, ``LN(o) * SiLU(g)``, from ``norm(x)``; with
        ``summary`` (the key sums of the whole map, :meth:`finish_summary`), that of these
        rows' queries against all keys."""
        return Hidden(self._mix(x, grid, norm, summary))

    def summary_rows(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module] = None,
                     state=None) -> torch.Tensor:
        """The key sums of these rows' tokens (pass 1 of the two-pass form)."""
        k, v = self._project(x, norm, (1, 2))
        _, phi_k = self._inference_maps(k)
        return fast_nala.key_sums(self._heads(k), self._heads(v), phi_k, grid.valid_tokens(x))

    def _project(self, x: torch.Tensor, norm: Optional[nn.Module], which):
        """The projections ``which`` (0: q, 1: k, 2: v, 3: g) of ``norm(x)``, each from its
        own rows of the fused weight."""
        return fast_linear.blocks(x if norm is None else norm(x), self.qkvg.weight,
                                  self.qkvg.bias, 4, which)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)

    def _inference_maps(self, x: torch.Tensor):
        return fast_nala.inference_maps(self.kernel, self.lam, self.alpha, self.eps, self.fuse, x)

    def _mix(self, x: torch.Tensor, grid: TokenGrid, norm: Optional[nn.Module] = None,
             summary=None) -> torch.Tensor:
        """Everything before the output projection: ``LayerNorm(o) * SiLU(g)``; with
        ``summary``, the attention of these rows' queries from the whole map's key sums."""
        b, n, c = x.shape
        if summary is None:
            heads, v, g = self._projections(x, norm)
            valid = grid.valid_tokens(x)  # batch padding: not a key (None: no padding)
            o = self._attend(heads, grid.hw, valid)
        else:
            q, v, g = self._project(x, norm, (0, 2, 3))
            phi_q, _ = self._inference_maps(q)
            o = fast_nala.query_side_given_sums(self._heads(q), *summary, phi_q, self.eps)
        o = o.transpose(1, 2).reshape(b, n, c)
        if self.lepe is not None:
            o = o + conv_tokens(self.lepe, v, grid)
        # eager training keeps o and g and recomputes the norm and the gate in the backward:
        # two fewer token-sized tensors per block held until then
        return memory.recompute_in_eager_backward(self._gate, o, g)

    def _gate(self, o: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """``LayerNorm(o) * SiLU(g)``."""
        return self.norm(o) * self.act(g)

    def _projections(self, x: torch.Tensor, norm: Optional[nn.Module] = None):
        """``([q, k, v] as (B, h, N, d) heads, v, g)`` of ``norm(x)`` (or ``x``)."""
        b, n, c = x.shape
        # q, k, v and g from their own rows of the fused weight: contiguous outputs instead of
        # strided column blocks of one (B, N, 4C) product, which the SiLU, the LePE conv and
        # the per-head matmuls would otherwise read (or copy) with a stride of 4C
        q, k, v, g = seam.normed_linears(norm, x, self.qkvg, parts=4)
        heads = [t.view(b, n, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v)]
        return heads, v, g

    @torch.no_grad()
    def attention_weights(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """The (B, h, N, N) attention weights of :meth:`forward` (without the LePE term),
        from the forward's own path with identity values (analysis; O(N^2))."""
        (q, k, _), _, _ = self._projections(x)
        eye = torch.eye(q.shape[-2], dtype=q.dtype, device=q.device)
        return self._attend([q, k, eye.expand(*q.shape[:2], -1, -1)], grid.hw,
                            grid.valid_tokens(x))

    def _attend(self, heads, hw: Tuple[int, int], valid: Optional[torch.Tensor]):
        """Attention output (B, h, N, d_v) of ``heads = [q, k, v]``."""
        x = heads[0]
        if self.attn_type == 'nala':
            angles = (self._angles(hw, x) if self.kernel == 'relu_split_rope' else None)
            return fast_nala.attention(*heads, kernel=self.kernel, lam=self.lam,
                                       alpha=self.alpha, eps=self.eps, valid=valid,
                                       fuse=self.fuse, rope_angles=angles)
        q, k, v_ = heads
        if self.rope:
            angles = self._angles(hw, x)
            q, k = apply_rope(q, angles), apply_rope(k, angles)
        mask = None if valid is None else valid[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v_, attn_mask=mask)


class NaLaBlock(nn.Module):
    """A NaLaFormer block on (B, N, C) tokens (App. A.2 CPE; authors' code for the layout)::

        x = x + CPE1(x)                                   # depthwise 3x3
        x = x + DropPath(gamma1 * Attn(LN(x)))
        x = x + CPE2(x)                                   # depthwise 3x3
        x = x + DropPath(gamma2 * FFN(LN(x)))             # fc1-GELU-(dw3x3 + id)-fc2

    Args:
        dim, num_heads: channels and heads.
        mlp_ratio: FFN hidden channels = ``int(mlp_ratio * dim)``.
        drop_path: stochastic-depth rate of both residual branches.
        layer_scale_init_value: initial LayerScale ``gamma``; ``None`` disables LayerScale.
        cpe: use the two conditional position encodings.
        attn_cfg: keyword arguments of :class:`NaLaAttention` (``attn_type``, ``kernel``, ...).
    """

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0,
                 drop_path: float = 0.0, layer_scale_init_value: Optional[float] = 1.0,
                 cpe: bool = True, **attn_cfg):
        super().__init__()
        self.cpe1 = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim) if cpe else None
        self.cpe2 = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim) if cpe else None
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = NaLaAttention(dim, num_heads, **attn_cfg)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        # recompute='all': activations are what limit NaLa training sizes (docs/benchmarks.md)
        self.ffn = ConvFFN(dim, int(mlp_ratio * dim), dw_residual=True, act_before_dw=True,
                           recompute='all')
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        if layer_scale_init_value is None:
            self.gamma1 = self.gamma2 = None
        else:
            self.gamma1 = nn.Parameter(torch.full((dim, ), float(layer_scale_init_value)))
            self.gamma2 = nn.Parameter(torch.full((dim, ), float(layer_scale_init_value)))

    def forward(self, x: torch.Tensor, grid: TokenGrid) -> torch.Tensor:
        """(B, N, C) tokens on an H x W ``grid`` -> (B, N, C)."""
        # the channels-last conv views need contiguous tokens (a no-op for a stage's tokens)
        x = x.contiguous()
        if self.cpe1 is not None:
            x = conv_tokens(self.cpe1, x, grid, residual=True)
        x = seam.step(x, self.attn, grid, self.norm1, self.gamma1, self.drop_path,
                      owned=self.cpe1 is not None)
        if self.cpe2 is not None:
            x = conv_tokens(self.cpe2, x, grid, residual=True)
        return seam.step(x, self.ffn, grid, self.norm2, self.gamma2, self.drop_path,
                         owned=True)
