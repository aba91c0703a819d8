"""SOFT++ backbone: softmax-free Gaussian-kernel Nystrom attention in a 4-stage pyramid.

Lu et al., "Softmax-free Linear Transformers" (IJCV 2024, arXiv 2207.03341; NeurIPS 2021 for
SOFT).  The paper archs follow Table 1 and Sec. 3.4; the ``*-norm`` archs are the
architectures of the authors' released ImageNet models (github.com/fudan-zvg/SOFT,
``soft_norm_*`` and the plain ``soft_*``), so that their checkpoints can be loaded with
``convert_weights=True`` and one of the :data:`OFFICIAL_PRESETS`.
"""
from functools import partial
from typing import Dict, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...kernels import decide_once
from ...ops.soft import NEWTON_INITS
from ...registry import MODELS
from ..converters import check_checkpoint_depths
from ..converters.soft import checkpoint_depths, convert_soft_checkpoint
from ..layers import (BilinearPosEmbed, BlockStage, ConvStem, LayerNorm2d, PatchConv,
                      SOFTBlock, SoftmaxBlock, check_heads, per_stage, resize_pos_embed)
from .base import PyramidBackbone

ATTN_TYPES = ('soft', 'softmax')


_PAPER = dict(sr_ratios=(8, 4, 2, 1), mlp_ratios=(4, 4, 4, 4), attn_types=('soft', ) * 4,
              cls_token=False, post_norm=False, v_conv_sizes=(0, 0, 0, 0), conv_bias=False,
              mlp_act='gelu', stem_hidden=32)
# The authors' released SOFT-Norm models (models/softmax_free_vision_transformer.py,
# soft_norm_*): SOFT blocks in stages 1-3 with hidden 4*dim (their mlp_ratios only reach the
# stage-4 block, where it is 4), post-norm, tanh-GELU, depthwise conv on V (9/5/3);
# a pre-LN softmax stage 4 with a class token; conv biases before every BN.
_NORM = dict(sr_ratios=(8, 4, 2, 1), mlp_ratios=(4, 4, 4, 4),
             attn_types=('soft', 'soft', 'soft', 'softmax'), cls_token=True, post_norm=True,
             v_conv_sizes=(9, 5, 3, 0), conv_bias=True, mlp_act='gelu_tanh', stem_hidden=32)
#: channels per head in every SOFT arch (d_h = 32, Sec. 3.4); num_heads = C / 32
HEAD_DIM = 32
#: the paper's archs (Table 1): name -> (embed_dims, depths)
_PAPER_SIZES = dict(tiny=((64, 128, 320, 512), (2, 2, 5, 2)),
                    small=((96, 192, 384, 768), (2, 2, 5, 2)),
                    medium=((96, 192, 384, 768), (2, 2, 18, 2)),
                    large=((128, 256, 512, 1024), (2, 2, 18, 2)))
#: the authors' released SOFT-Norm archs.  The public code's soft_norm_small says depths
#: (1, 3, 20, 4) (38.9 M params), which contradicts its README (24 M, 3.3 G FLOPs, 34 M as
#: RetinaNet); (1, 3, 7, 4) gives 24.1 M.  convert_checkpoint names the depths a checkpoint
#: really has.
_NORM_SIZES = {
    'tiny-norm': ((64, 128, 320, 512), (1, 2, 3, 2)),
    'small-norm': ((64, 128, 320, 512), (1, 3, 7, 4)),
    'medium-norm': ((64, 128, 288, 512), (1, 3, 29, 5)),
    'large-norm': ((64, 128, 320, 512), (1, 3, 40, 5)),
    'huge-norm': ((64, 128, 352, 512), (1, 5, 49, 5)),
}
_MLP_ACTS = {'gelu': dict(type='GELU'), 'gelu_tanh': dict(type='GELU', approximate='tanh')}

# The attention of the authors' released models, as their code computes it (with a
# ``*-norm`` arch and ``convert_weights=True``; the two share one checkpoint layout):
# * 'norm' (SOFT-Norm, ``soft_norm_*``): Eq. 17 normalisation, their halving rule for the
#   Newton step (per matrix here; theirs takes one alpha for the whole batch);
# * 'plain' (NeurIPS SOFT, ``soft_*``, e.g. SOFT_Tiny): no normalisation, the Newton step
#   ``0.9 * 2 / ||A||_inf^2`` per matrix on ``A + 0.01 I``.
# Both crop the landmark grid as their stride-r conv does.
# Solver: both run their 20 Newton steps (``pinv='newton'``), as their model does; the shipped
# ``*-norm`` configs add ``pinv='cholesky'``, a ridge-regularised solve in place of A^+, and
# then differ from their model.  Against their SOFT-Norm model run with an exact A^+, the
# Cholesky solve moved the stage outputs by up to 2.3e-3 (max |x| 4.7) at 224x224 and their 20
# Newton steps by up to 3.0; at 1344x800, with far worse conditioned A, by up to 2.5 and 5.1
# (max |x| 5.5): there neither is close (records/soft_pinv_float32_zen3.json, "official":
# tiny-norm with random weights in their layout, one photograph, float64 and float32).
OFFICIAL_PRESETS: Dict[str, dict] = {
    'norm': dict(newton_init='paper', landmark_grid='crop'),
    'plain': dict(sym_norm=False, newton_init='scaled', newton_ridge=0.01,
                  landmark_grid='crop'),
}


@MODELS.register_module()
class SOFT(PyramidBackbone):
    """SOFT++ pyramid backbone (strides 4/8/16/32), Table 1 of the paper.

    Stem C33-BN-ReLU (3x3 convs, strides 2/1/2, hidden width ``stem_hidden`` = 32 as in the
    authors' code, which fits the FLOPs better than Table 1's "64-d"); C31-BN-ReLU (3x3,
    stride 2) before stages 2-4; a learned position embedding per stage stored at the
    ``pretrain_img_size`` grid and resized bilinearly to the current grid; pre-LN SOFT
    layers with ``d_h = 32``, MLP ratio 4 and landmark ratios r = 8/4/2/1 (stage 4 is SOFT
    with r = 1, i.e. m = n; the class token of Table 1 is a classification device and is
    dropped here); a LayerNorm on each returned map.

    Archs (``embed_dims`` / ``num_heads`` / ``depths``):

    * ``tiny``: 64-128-320-512 / 2-4-10-16 / 2-2-5-2, implemented as printed in Table 1.
      These depths give about 15 M parameters (with a 1000-class head), not the 13 M of
      Table 3; the 13 M model is the NeurIPS depth 1-2-3-2 (MLP ratios 8-8-4-4).
    * ``small``: 96-192-384-768 / 3-6-12-24 / 2-2-5-2 (27 M in the paper).
    * ``medium``: as small with depths 2-2-18-2 (48 M).
    * ``large``: 128-256-512-1024 / 4-8-16-32 / 2-2-18-2 (85 M).
    * ``tiny-norm``, ``small-norm``, ``medium-norm``, ``large-norm``, ``huge-norm``: the
      authors' released SOFT-Norm architectures (different depths and widths, post-norm SOFT
      blocks with a depthwise conv on V, a softmax stage 4 with a class token), loadable
      from their ImageNet checkpoints with ``convert_weights=True``.  Their stage 1-3 blocks
      end in a LayerNorm, so those returned maps get no extra norm; stage 4's is the
      checkpoint's final ``norm``.  ``small-norm`` uses depths 1-3-7-4, which reproduce the
      authors' README (24 M); their code says 1-3-20-4 (38.9 M).  The converter reports the
      depths a checkpoint actually has.  Their plain SOFT models (e.g. ``SOFT_Tiny``) have
      the same architectures and keys: select the attention with :data:`OFFICIAL_PRESETS`
      (``'norm'`` or ``'plain'``).  Their Newton iteration's backward (through the loop for
      SOFT-Norm) is replaced by Eq. 12.

    An arch dict needs ``embed_dims``, ``num_heads`` and ``depths``; optional per-stage
    entries ``sr_ratios``, ``mlp_ratios``, ``attn_types`` (``'soft'``/``'softmax'``),
    ``v_conv_sizes``, and scalars ``cls_token``, ``post_norm``, ``conv_bias``, ``mlp_act``
    (``'gelu'``/``'gelu_tanh'``), ``stem_hidden`` default to the paper's values.

    Args:
        arch: an arch name above or a dict.
        newton_iters: Newton-Schulz iterations T (Eq. 10); 20 (Fig. 5).
        newton_init: ``'safe'`` (``alpha = 1/||A||_1^2`` per matrix), ``'paper'`` (the
            authors' SOFT-Norm halving rule, per matrix) or ``'scaled'`` (their plain-SOFT
            ``0.9 * 2 / ||A||_inf^2``), see :func:`mmlinattn.ops.soft.newton_init_alpha`.
        newton_ridge: invert ``A + newton_ridge I`` (0 = paper; 0.01 in the authors' plain
            SOFT); the Newton step is that of ``A + newton_ridge I``.
        pinv: how ``A^+`` is applied: ``'newton'`` (Eq. 10, default, the paper) or
            ``'cholesky'`` (a ridge-regularised solve with ``(A + lambda I)^{-1}`` in place
            of ``A^+``, by a Cholesky factorisation: m^3 / 3 instead of 40 m^3 flops per head
            and layer, for large inputs), see :func:`mmlinattn.ops.soft.cholesky_pinv_solve`.
        sym_norm: SOFT++ normalisation (Eq. 17); ``False`` = plain SOFT (ablations only: the
            paper reports it does not converge on dense tasks).
        landmark_ln_gelu: LayerNorm + GELU on sampled landmarks (authors' code; default on).
        max_landmarks: cap on landmarks per attention by adaptive pooling (None = paper: m
            grows with the image, as ``(H/32)(W/32)``).
        landmark_grid: ``'pad'`` (default: a grid side that is not a multiple of the landmark
            ratio r is zero-padded, every token reaches a landmark) or ``'crop'`` (the
            authors' conv: the last rows / columns are dropped), see :class:`LandmarkSampler`.
            Equal for inputs that are multiples of 32.
        pretrain_img_size: input size whose stage grids the position embeddings are stored
            at (224: 56/28/14/7).
        norm_cfg: the norm of the stem and the down-samplers
            (:func:`~mmlinattn.models.layers.build_norm`), BatchNorm by default (e.g.
            ``dict(type='SyncBN')`` or ``dict(type='GN', num_groups=8)``).
        act_cfg: their activation (:func:`~mmlinattn.models.layers.build_act`), ReLU.
        kwargs: ``in_channels``, ``out_indices``, ``drop_path_rate``, ``frozen_stages``,
            ``norm_eval``, ``with_cp``, ``convert_weights``, ``pretrained``, ``init_cfg``:
            see :class:`~mmlinattn.models.backbones.base.BackboneBase`.
    """

    arch_settings: Dict[str, dict] = {
        name: dict(base, embed_dims=dims, num_heads=tuple(d // HEAD_DIM for d in dims),
                   depths=depths)
        for base, table in ((_PAPER, _PAPER_SIZES), (_NORM, _NORM_SIZES))
        for name, (dims, depths) in table.items()
    }
    arch_keys = ('embed_dims', 'num_heads', 'depths')

    def __init__(self,
                 arch: Union[str, dict] = 'small',
                 newton_iters: int = 20,
                 newton_init: str = 'safe',
                 newton_ridge: float = 0.0,
                 pinv: str = 'newton',
                 sym_norm: bool = True,
                 landmark_ln_gelu: bool = True,
                 max_landmarks: Optional[int] = None,
                 landmark_grid: str = 'pad',
                 pretrain_img_size: int = 224,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='ReLU'),
                 **kwargs):
        super().__init__(arch, **kwargs)
        if newton_init not in NEWTON_INITS:
            raise ValueError(f'newton_init must be one of {NEWTON_INITS}, got {newton_init!r}')
        if not isinstance(pretrain_img_size, int) or pretrain_img_size < 32:
            raise ValueError(f'pretrain_img_size must be an int >= 32, got '
                             f'{pretrain_img_size!r}')
        a, dims = self.arch, self.embed_dims
        bias = a['conv_bias']
        hid = a['stem_hidden']
        stem = ConvStem(self.in_channels, (hid, hid, dims[0]), (2, 1, 2), (act_cfg, ) * 3,
                        norm_cfg=norm_cfg, bias=bias)
        self.patch_embeds = nn.ModuleList(
            [stem] + [PatchConv(dims[i - 1], dims[i], 3, 2, norm_cfg, act_cfg, bias)
                      for i in range(1, self.num_stages)])

        soft_kwargs = dict(num_iters=newton_iters, newton_init=newton_init, sym_norm=sym_norm,
                           landmark_ln_gelu=landmark_ln_gelu, max_landmarks=max_landmarks,
                           ridge=newton_ridge, landmark_grid=landmark_grid, pinv=pinv)
        self.stages = nn.ModuleList()
        size = pretrain_img_size
        for i, dprs in enumerate(self.stage_drop_path_rates()):
            size = -(-size // (4 if i == 0 else 2))
            blocks = [self._build_block(i, dpr, soft_kwargs) for dpr in dprs]
            cls_token = a['cls_token'] and i == self.num_stages - 1
            self.stages.append(
                BlockStage(blocks, BilinearPosEmbed(dims[i], (size, size)),
                           cls_token_dim=dims[i] if cls_token else None, with_cp=self.with_cp))

    # ----------------------------------------------------------------- construction
    def _build_block(self, i: int, dpr: float, soft_kwargs: dict) -> nn.Module:
        a = self.arch
        dim, heads, ratio = self.embed_dims[i], a['num_heads'][i], a['mlp_ratios'][i]
        if a['attn_types'][i] == 'softmax':
            return SoftmaxBlock(dim, heads, mlp_ratio=ratio, qkv_bias=True, drop_path=dpr,
                                norm_layer=partial(nn.LayerNorm, eps=1e-6))
        return SOFTBlock(dim, heads, a['sr_ratios'][i], mlp_ratio=ratio, drop_path=dpr,
                         post_norm=a['post_norm'], act_cfg=_MLP_ACTS[a['mlp_act']],
                         v_conv_size=a['v_conv_sizes'][i], **soft_kwargs)

    @classmethod
    def resolve_arch(cls, arch: Union[str, dict]) -> dict:
        """The arch dict with the paper's defaults filled in and every entry checked."""
        a = dict(_PAPER)
        a.update(super().resolve_arch(arch))
        n = len(a['depths'])
        for key in ('embed_dims', 'num_heads', 'depths', 'sr_ratios', 'mlp_ratios',
                    'attn_types', 'v_conv_sizes'):
            choices = ATTN_TYPES if key == 'attn_types' else None
            a[key] = tuple(per_stage(a[key], n, f'SOFT: arch[{key!r}]', choices))
        for dim, heads in zip(a['embed_dims'], a['num_heads']):
            check_heads(dim, heads)
        if a['mlp_act'] not in _MLP_ACTS:
            raise ValueError(f'SOFT: arch mlp_act must be one of {sorted(_MLP_ACTS)}, got '
                             f'{a["mlp_act"]!r}')
        return a

    def build_out_norm(self, index: int, dim: int) -> nn.Module:
        """Post-norm SOFT stages already end in a LayerNorm: no second one."""
        if self.arch['post_norm'] and self.arch['attn_types'][index] == 'soft':
            return nn.Identity()
        return LayerNorm2d(dim, eps=1e-6)

    # ----------------------------------------------------------------- weights
    def adapt_state_dict(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Resize stored position embeddings of another grid (e.g. a model built with another
        ``pretrain_img_size``) to this model's, bilinearly as in the forward."""
        out = dict(state_dict)
        for i, stage in enumerate(self.stages):
            key = f'stages.{i}.pos_embed.weight'
            if key in out and out[key].dim() == 4:
                out[key] = resize_pos_embed(out[key], stage.pos_embed.grid,
                                            stage.pos_embed.mode)
        return out

    def convert_checkpoint(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Map an authors' SOFT-Norm or plain SOFT checkpoint to this model's keys (the head
        dropped); see :func:`mmlinattn.models.converters.convert_soft_checkpoint`.  Needs one
        of the ``*-norm`` archs (and :data:`OFFICIAL_PRESETS` to compute as theirs)."""
        a = self.arch
        if not (self.num_stages == 4 and a['cls_token'] and a['post_norm']
                and a['attn_types'][-1] == 'softmax'):
            raise ValueError(f"convert_weights maps the authors' SOFT / SOFT-Norm checkpoints and "
                             f"needs one of the '*-norm' archs, got arch {self.arch!r}")
        found = checkpoint_depths(state_dict)
        check_checkpoint_depths('SOFT-Norm', found, self.depths,
                                f"pass arch=dict(SOFT.arch_settings['<name>-norm'], "
                                f'depths={found})')
        return convert_soft_checkpoint(state_dict, keep_final_norm='3' in self.out_norms)[0]

    def forward_tokens(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's tokens (B, 1 + h*w, C), class token first, after the last output
        norm: what the authors' classifier reads its class token from (Table 1, "stage 4 w.
        cls token").  Needs an arch with ``cls_token``."""
        last = self.num_stages - 1
        if self.stages[last].cls_token is None or str(last) not in self.out_norms:
            raise ValueError(f'forward_tokens needs an arch with cls_token=True and the last '
                             f'stage in out_indices, got arch {self.arch!r}, out_indices '
                             f'{self.out_indices}')
        self.check_input(x)
        grid = self.input_grid(x)

        def last_tokens(x: torch.Tensor, grid) -> torch.Tensor:
            for _, x, grid in self.forward_stages(x, grid, last - 1):
                pass
            return self.stages[last].forward_tokens(*self.patch_embeds[last](x, grid), owned=True)
        t = decide_once(last_tokens, x.contiguous(memory_format=torch.channels_last), grid)
        norm = self.out_norms[str(last)]
        return F.layer_norm(t, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
