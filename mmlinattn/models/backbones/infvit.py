"""InfViT backbones: Infinite Self-Attention (Roffo, arXiv:2603.00175) for dense prediction.

* :class:`InfViT` -- a 4-stage pyramid (strides 4/8/16/32) of Pre-LN Linear-InfSA blocks with
  a Mix-FFN (depthwise 3x3 conv, the local mixing Linear-InfSA lacks) and overlapping conv
  patch embeddings; Pure InfSA optional per stage.  Not in the paper, which stops at
  classification: our dense design, a PVTv2-like pyramid.
* :class:`InfViTPlain` -- the paper's model: a Pre-LN ViT/16 with a class token and a learned
  position embedding, Linear or Pure InfSA in every block.  Isotropic (stride 16); pair it
  with :class:`mmlinattn.models.necks.SimpleFeaturePyramid` for detection / segmentation.
"""
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from ...registry import MODELS
from ..layers import (STEMS, BlockStage, InfSABlock, PatchConv, PlainEmbed, check_heads,
                      early_conv_stem, per_stage, resize_pos_embed)
from ..layers.infsa_attention import MIXERS
from .base import IsotropicBackbone, PyramidBackbone

LN2D = dict(type='LN2d', eps=1e-6)


@MODELS.register_module()
class InfViT(PyramidBackbone):
    """InfViT pyramid: Linear-InfSA + Mix-FFN blocks at strides 4/8/16/32 (our dense design).

    Stage ``i`` starts with an overlapping conv patch embedding (7x7 stride 4 for the stem,
    3x3 stride 2 after; each followed by a channel LayerNorm) and stacks Pre-LN blocks of
    ``mixer + Mix-FFN``.  There is no absolute position embedding (the depthwise conv in
    the FFN supplies position and local mixing), so any input size >= 32 works and a model
    reloads strictly at any resolution.

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'`` or a dict with ``embed_dims``, ``depths``
            and ``mlp_ratios`` (one entry per stage).
        stage_mixers: ``'linear'`` / ``'pure'`` per stage (or one string for all), e.g.
            ``('linear', 'linear', 'linear', 'pure')``: Pure InfSA is O(N²) in tokens,
            affordable at stride 32.
        head_dim: channels per head (heads = C / head_dim).
        gamma: the discount γ (paper default 0.7).
        gamma_mode: ``'const'`` (γ in every block, the default here: γ^l would be ~1e-3
            by block 20) or ``'power'`` (γ^l, Eq. 23, l counted over all blocks).
        learn_gamma: learn γ per head through a sigmoid.
        qkv_bias: bias of the Q/K/V projections.
        tie_qk: Linear-InfSA with K = Q (paper); False as in the authors' code.
        pool_then_project: exact pooled evaluation of Linear-InfSA's values.
        use_dwconv: Mix-FFN (True) or a plain MLP (False, the ablation without local
            mixing).
        pure_chunk_size: query chunk for Pure InfSA stages (exact; None = dense N x N).
        ffn_recompute: what each FFN recomputes in the backward of eager training instead
            of keeping: ``'all'`` (its activation and depthwise conv), ``'last'`` (the
            activation only) or ``'none'`` (``docs/benchmarks.md`` has the memory and time).
        stem: ``'patch'`` (the 7x7/4 overlapping patch conv with LN, default) or ``'conv'``
            (the early-convolution stem, :func:`~mmlinattn.models.layers.early_conv_stem`),
            with which the pyramid learns a detector from scratch as fast as SOFT++ and
            NaLaFormer do (docs/user_guides/photos.md).
        norm_cfg: the norm after each patch embedding (:func:`~mmlinattn.models.layers.
            build_norm`), a channel LayerNorm by default.
        kwargs: ``in_channels``, ``out_indices``, ``drop_path_rate``, ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``convert_weights``, ``pretrained``, ``init_cfg``:
            see :class:`~mmlinattn.models.backbones.base.BackboneBase`.
    """

    arch_settings = {
        'tiny': dict(embed_dims=(64, 128, 320, 512), depths=(2, 2, 2, 2),
                     mlp_ratios=(8, 8, 4, 4)),
        'small': dict(embed_dims=(64, 128, 320, 512), depths=(3, 4, 6, 3),
                      mlp_ratios=(8, 8, 4, 4)),
        'base': dict(embed_dims=(64, 128, 320, 512), depths=(3, 4, 18, 3),
                     mlp_ratios=(8, 8, 4, 4)),
    }
    arch_keys = ('embed_dims', 'depths', 'mlp_ratios')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 stage_mixers: Union[str, Sequence[str]] = 'linear',
                 head_dim: int = 16,
                 gamma: float = 0.7,
                 gamma_mode: str = 'const',
                 learn_gamma: bool = False,
                 qkv_bias: bool = True,
                 tie_qk: bool = True,
                 pool_then_project: bool = True,
                 use_dwconv: bool = True,
                 pure_chunk_size: Optional[int] = None,
                 ffn_recompute: str = 'all',
                 stem: str = 'patch',
                 norm_cfg: dict = LN2D,
                 **kwargs):
        super().__init__(arch, **kwargs)
        if stem not in STEMS:
            raise ValueError(f'stem must be one of {STEMS}, got {stem!r}')
        self.stage_mixers = tuple(
            per_stage(stage_mixers, self.num_stages, 'stage_mixers', MIXERS))
        bad = [c for c in self.embed_dims if c % head_dim]
        if head_dim < 1 or bad:
            raise ValueError(f'head_dim ({head_dim}) must divide every embed_dims entry '
                             f'{self.embed_dims}')
        self.num_heads = [c // head_dim for c in self.embed_dims]
        mlp_ratios = list(self.arch['mlp_ratios'])
        dpr = self.stage_drop_path_rates()

        self.patch_embeds = nn.ModuleList()
        self.stages = nn.ModuleList()
        c_in, first = self.in_channels, 1
        for i, (dim, depth) in enumerate(zip(self.embed_dims, self.depths)):
            kernel, stride = (7, 4) if i == 0 else (3, 2)
            if i == 0 and stem == 'conv':
                self.patch_embeds.append(early_conv_stem(c_in, dim))
            else:
                self.patch_embeds.append(PatchConv(c_in, dim, kernel, stride, norm_cfg))
            blocks = [
                InfSABlock(dim, self.num_heads[i], mixer=self.stage_mixers[i],
                           mlp_ratio=mlp_ratios[i], dwconv=use_dwconv, drop_path=dpr[i][j],
                           layer_index=first + j, gamma=gamma, gamma_mode=gamma_mode,
                           learn_gamma=learn_gamma, qkv_bias=qkv_bias, tie_qk=tie_qk,
                           pool_then_project=pool_then_project,
                           pure_chunk_size=pure_chunk_size, ffn_recompute=ffn_recompute)
                for j in range(depth)
            ]
            self.stages.append(BlockStage(blocks, with_cp=self.with_cp))
            c_in, first = dim, first + depth


@MODELS.register_module()
class InfViTPlain(IsotropicBackbone):
    """The paper's InfViT: a Pre-LN ViT with Linear-InfSA or Pure InfSA in every block.

    Isotropic (:class:`IsotropicBackbone`): every block is one "stage" of the scaffold
    (stride ``patch_size``), so ``out_indices`` select blocks and each returned block's
    patch tokens (class token dropped) come out as an NCHW map of size
    ``ceil(H / 16) x ceil(W / 16)`` after a LayerNorm; :meth:`forward_tokens` gives the
    normed tokens of the last block, class token first.  ``frozen_stages = k`` freezes the
    embedding and blocks ``0..k``.

    Archs (heads and d_h from §4 and Tables 2-3; the paper does not state the width, and
    its parameter counts imply 1024 rather than the 768 its d_h values give):

    ============ ===== ====== ===== ==========================================
    name         C     blocks heads note
    ============ ===== ====== ===== ==========================================
    ``l4``       768   4      64    the text: 64 heads, d_h = 12
    ``l24``      768   24     16    the text: 16 heads, d_h = 48
    ``l4-wide``  1024  4      64    the width the paper's parameter counts imply
    ``l24-wide`` 1024  24     16    (ViT-L width; d_h = 16 / 64)
    ============ ===== ====== ===== ==========================================

    MLP ratio 4 throughout.  The paper's Pure-4L used 16 heads (§4); pass an arch dict to
    change ``num_heads``.

    Args:
        arch: a name above or a dict with ``embed_dims`` (int), ``num_layers``,
            ``num_heads`` and ``mlp_ratio``.
        mixer: ``'linear'`` or ``'pure'`` in every block.
        patch_size: patch (= output stride).
        img_size: the training size; the position embedding is stored at its grid
            ``img_size // patch_size`` and interpolated to any other grid.
        with_cls_token: prepend a class token (it takes part in the mixers' pools / norms).
        out_indices: blocks whose maps are returned (default: the last).
        gamma, gamma_mode, learn_gamma, qkv_bias, tie_qk, pool_then_project,
            pure_chunk_size, ffn_recompute: see :class:`InfViT`; ``gamma_mode`` defaults to
            ``'power'`` (γ^l, Eq. 23) for this paper-faithful model.
        kwargs: ``in_channels``, ``drop_path_rate``, ``frozen_stages``, ``norm_eval``,
            ``with_cp``, ``convert_weights``, ``pretrained``, ``init_cfg``: see
            :class:`~mmlinattn.models.backbones.base.BackboneBase`.
    """

    arch_settings = {
        'l4': dict(embed_dims=768, num_layers=4, num_heads=64, mlp_ratio=4.0),
        'l24': dict(embed_dims=768, num_layers=24, num_heads=16, mlp_ratio=4.0),
        'l4-wide': dict(embed_dims=1024, num_layers=4, num_heads=64, mlp_ratio=4.0),
        'l24-wide': dict(embed_dims=1024, num_layers=24, num_heads=16, mlp_ratio=4.0),
    }
    arch_keys = ('embed_dims', 'num_layers', 'num_heads', 'mlp_ratio')

    @classmethod
    def resolve_arch(cls, arch: Union[str, dict]) -> dict:
        """As the scaffold's, with the width, depth and heads checked."""
        arch = super().resolve_arch(arch)
        for key in ('embed_dims', 'num_layers', 'num_heads'):
            val = arch[key]
            if not isinstance(val, int) or isinstance(val, bool) or val < 1:
                raise ValueError(f'{cls.__name__}: arch {key} must be a positive int, got '
                                 f'{val!r}')
        check_heads(arch['embed_dims'], arch['num_heads'])
        return arch

    def __init__(self,
                 arch: Union[str, dict] = 'l4',
                 mixer: str = 'linear',
                 patch_size: int = 16,
                 img_size: Union[int, Tuple[int, int]] = 224,
                 with_cls_token: bool = True,
                 out_indices: Sequence[int] = (-1, ),
                 gamma: float = 0.7,
                 gamma_mode: str = 'power',
                 learn_gamma: bool = False,
                 qkv_bias: bool = True,
                 tie_qk: bool = True,
                 pool_then_project: bool = True,
                 pure_chunk_size: Optional[int] = None,
                 ffn_recompute: str = 'all',
                 **kwargs):
        super().__init__(arch, patch_size, out_indices=out_indices, **kwargs)
        self.mixer = per_stage(mixer, 1, 'mixer', MIXERS)[0]
        img_size = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
        if len(img_size) != 2 or min(img_size) < patch_size:
            raise ValueError(f'img_size must be an int or (h, w) >= patch_size ({patch_size}), '
                             f'got {img_size!r}')
        self.pos_grid = (img_size[0] // patch_size, img_size[1] // patch_size)
        dim, heads = self.arch['embed_dims'], self.arch['num_heads']
        dpr = self.stage_drop_path_rates()

        self.patch_embeds = nn.ModuleList(
            [PlainEmbed(self.in_channels, dim, patch_size, self.pos_grid, with_cls_token)])
        self.stages = nn.ModuleList([
            InfSABlock(dim, heads, mixer=self.mixer, mlp_ratio=self.arch['mlp_ratio'],
                       dwconv=False, drop_path=dpr[i][0], layer_index=i + 1, gamma=gamma,
                       gamma_mode=gamma_mode, learn_gamma=learn_gamma, qkv_bias=qkv_bias,
                       tie_qk=tie_qk, pool_then_project=pool_then_project,
                       pure_chunk_size=pure_chunk_size, ffn_recompute=ffn_recompute)
            for i in range(self.num_stages)
        ])

    def adapt_state_dict(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Resize a position embedding stored at another grid to ``self.pos_grid``."""
        key = 'patch_embeds.0.pos_embed.weight'
        if key in state_dict and tuple(state_dict[key].shape[-2:]) != self.pos_grid:
            state_dict = dict(state_dict)
            state_dict[key] = resize_pos_embed(state_dict[key], self.pos_grid)
        return state_dict
