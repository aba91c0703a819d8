"""LDN: Linear Diffusion Networks as a 4-stage vision pyramid.

J. Fein-Ashley, "Linear Diffusion Networks: Harnessing Diffusion Processes for Global
Interactions" (not the Ladder-DenseNet "LDN" of segmentation work).

The paper's equations are unnumbered; the LDN code labels them E1-E9 in order of appearance:
E1 input encoding ``h_t = Embed(x_t) + PosEnc(t)`` (§3.2); E2 the residual update
``h_t^(l) = h_t^(l-1) + Δh_t``, E3 its per-token increment (diffusion + local + linear
attention), E4 the compact matrix form ``H + δt (K H − diag(K 1) H) + F(X, H) + A_lin(H)``,
E5 the kernel ``K_ts = φ(t−s) g(|t−s|)``, E6 the projections ``Q, K, V = H W_Q, H W_K, H W_V``
and E7 the normalised linear attention (all §3.3); E8 the pure-diffusion step
``A = I + δt (K − diag(K 1))`` (§4.1); E9 the stability condition
``δt ≤ min_t 1 / Σ_s K_ts`` (§4.4).
"""
from typing import List, Optional, Sequence, Union

import torch.nn as nn

from ...registry import MODELS
from ..layers import (STEMS, BlockStage, LDNBlock, PatchConv, SinCosPosEmbed2d,
                      early_conv_stem)
from .base import PyramidBackbone


def stage_step_inits(depth: int, step_range: Sequence[float]) -> List[float]:
    """Initial diffusion steps of a stage's layers, spread evenly over ``step_range``
    (multi-scale diffusion, paper §3.4); a one-layer stage takes the midpoint."""
    lo, hi = float(step_range[0]), float(step_range[1])
    if depth == 1:
        return [(lo + hi) / 2]
    # plain arithmetic (not torch.linspace) so the model can be built on the meta device
    return [lo + (hi - lo) * i / (depth - 1) for i in range(depth)]


@MODELS.register_module()
class LDN(PyramidBackbone):
    """Linear Diffusion Network backbone (feature pyramid at strides 4/8/16/32).

    **From the paper** (§3.2-§3.4, §4): every layer is
    ``H' = H + δt (K H − diag(K 1) H) + F(X, H) + A_lin(H)`` with all three terms computed
    from the same H (E4); K is non-negative and the explicit step satisfies
    ``δt · max_t Σ_s K_ts ≤ 1`` (E9), so the diffusion is a convex combination and repeated
    steps reach every token (Theorem 1); ``A_lin`` is row-normalised linear attention with a
    positive feature map (E7); each layer has its own diffusion parameters (§3.4); a position
    encoding is added to the embedded input (E1).  The per-branch switches reproduce the
    paper's Table 4 ablations.

    **Our 2-D design** (the paper is a 1-D sequence model with no image layout, no pyramid
    and no architecture hyper-parameters): K is a translation-invariant
    4-neighbour stencil on the H x W token grid (softmax taps, step
    ``a = step_max · sigmoid(θ)`` with ``step_max < 1``, exact border row sums), so nothing
    depends on the image size and E9 holds for every parameter value; multi-head ELU+1
    attention with an output projection and float32 means; a per-token MLP as the local
    update ``F``; pre-LN, LayerScale and drop-path on the local and attention branches only
    (the diffusion acts on the raw state); a fixed 2-D sin-cos encoding of the current grid
    at the stem; a 4x4/4 patch stem and 2x2/2 down-samplers (both pad, never crop) with LN;
    the ``tiny`` / ``small`` / ``base`` widths and depths; initial steps spread over
    ``step_init`` within each stage.  The author's public code (a dense N x N or 1-D kernel on
    a row-major sequence) has no compatible checkpoint, so there is no weight converter.

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'`` or a dict with ``embed_dims``, ``depths``,
            ``num_heads``.
        mlp_ratio: hidden ratio of the local MLP.
        qkv_bias: bias of the Q/K/V projections.
        feature_map: φ of the linear attention, ``'elu'`` (ELU+1) or ``'relu'``.
        layer_scale_init_value: LayerScale init of the local and attention branches
            (``None``/0 disables).
        use_diffusion, use_local, use_attn: branch switches (Table 4 ablations).
        taps: diffusion stencil, ``'cross4'`` or ``'k3'`` (any odd ``'kK'``).
        integrator: ``'euler'`` (paper) or ``'implicit_dct'``.
        n_steps: diffusion sub-steps per layer (paper: 1).
        diffusion_groups: independent stencils per layer, each for C / G channels (paper: 1).
        step_init: (lo, hi) range of the initial steps ``a`` of each stage's layers.
        step_max: cap of the explicit step ``a`` (< 1).
        pos_enc: ``'sincos'`` (2-D sin-cos at the stem) or ``None``.
        stem: ``'patch'`` (the 4x4/4 patch conv with LN, default) or ``'conv'`` (the
            early-convolution stem, :func:`~mmlinattn.models.layers.early_conv_stem`).
        overlap_downsample: 3x3/2 down-samplers (overlapping, as PVTv2's) in place of
            2x2/2.  With ``stem='conv'`` this is the pyramid that learns from scratch as
            fast as SOFT++ and NaLaFormer do; the patchify default barely learns a detector
            in a short schedule (docs/user_guides/photos.md).
        norm_cfg: the norm after each patch embedding (:func:`~mmlinattn.models.layers.
            build_norm`), a channel LayerNorm by default.
        drop_path_rate: stochastic depth (see :class:`~mmlinattn.models.backbones.base.
            BackboneBase`); 0.1 here.
        kwargs: ``in_channels``, ``out_indices``, ``frozen_stages``, ``norm_eval``,
            ``with_cp``, ``convert_weights``, ``pretrained``, ``init_cfg``: see
            :class:`~mmlinattn.models.backbones.base.BackboneBase`.

    Diffusion parameters (``tap_logits``, ``step_logit``) should be excluded from weight
    decay, e.g. ``paramwise_cfg=dict(custom_keys={'tap_logits': dict(decay_mult=0.),
    'step_logit': dict(decay_mult=0.)})``.
    """

    arch_settings = {
        'tiny': dict(embed_dims=[64, 128, 320, 512], depths=[2, 2, 6, 2],
                     num_heads=[2, 4, 10, 16]),
        'small': dict(embed_dims=[64, 128, 320, 512], depths=[3, 4, 6, 3],
                      num_heads=[2, 4, 10, 16]),
        'base': dict(embed_dims=[64, 128, 320, 512], depths=[3, 4, 18, 3],
                     num_heads=[2, 4, 10, 16]),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 mlp_ratio: float = 4.0,
                 qkv_bias: bool = True,
                 feature_map: str = 'elu',
                 layer_scale_init_value: Optional[float] = 1e-5,
                 use_diffusion: bool = True,
                 use_local: bool = True,
                 use_attn: bool = True,
                 taps: str = 'cross4',
                 integrator: str = 'euler',
                 n_steps: int = 1,
                 diffusion_groups: int = 1,
                 step_init: Sequence[float] = (0.2, 0.8),
                 step_max: float = 0.99,
                 pos_enc: Optional[str] = 'sincos',
                 stem: str = 'patch',
                 overlap_downsample: bool = False,
                 norm_cfg: dict = dict(type='LN2d', eps=1e-6),
                 drop_path_rate: float = 0.1,
                 **kwargs):
        super().__init__(arch, drop_path_rate=drop_path_rate, **kwargs)
        if pos_enc not in ('sincos', None):
            raise ValueError(f"pos_enc must be 'sincos' or None, got {pos_enc!r}")
        if len(step_init) != 2 or not step_init[0] <= step_init[1]:
            raise ValueError(f'step_init must be a (lo, hi) pair with lo <= hi, got '
                             f'{step_init!r}')
        self.num_heads = list(self.arch['num_heads'])
        dims = self.embed_dims
        dpr = self.stage_drop_path_rates()
        self.patch_embeds = nn.ModuleList()
        self.stages = nn.ModuleList()
        if stem not in STEMS:
            raise ValueError(f'stem must be one of {STEMS}, got {stem!r}')
        for i in range(self.num_stages):
            c_in, patch = (self.in_channels, 4) if i == 0 else (dims[i - 1], 2)
            if i == 0 and stem == 'conv':
                self.patch_embeds.append(early_conv_stem(c_in, dims[0]))
            else:
                kernel = patch + 1 if i > 0 and overlap_downsample else patch
                self.patch_embeds.append(PatchConv(c_in, dims[i], kernel, patch, norm_cfg))
            blocks = [
                LDNBlock(dims[i], self.num_heads[i], mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                         feature_map=feature_map, drop_path=dpr[i][j],
                         layer_scale_init_value=layer_scale_init_value,
                         use_diffusion=use_diffusion, use_local=use_local, use_attn=use_attn,
                         diffusion_cfg=dict(groups=diffusion_groups, taps=taps,
                                            integrator=integrator, n_steps=n_steps,
                                            step_init=a, step_max=step_max))
                for j, a in enumerate(stage_step_inits(self.depths[i], step_init))
            ]
            pos = SinCosPosEmbed2d(dims[0]) if i == 0 and pos_enc == 'sincos' else None
            self.stages.append(BlockStage(blocks, pos_embed=pos, with_cp=self.with_cp))
