"""NaLaFormer backbone: norm-aware linear attention in a 4-stage pyramid.

Meng et al., "NaLaFormer: Norm-Aware Linear Attention for Transformer Models",
arXiv 2506.21137.  The paper specifies the attention (§3.2, Eqs. 8-17), the block (Fig. 2a)
and CPE (App. A.2) but no architecture; the arch table, the BN conv stem and the stride-2
conv down-samplers are those of the authors' public code, which reproduce the parameter
counts of the paper's Table 1.
"""
from typing import Dict, Optional, Sequence, Union

import torch
import torch.nn as nn

from ...registry import MODELS
from ..converters import check_checkpoint_depths, convert_nalaformer_checkpoint
from ..converters.nalaformer import checkpoint_depths
from ..layers import BlockStage, ConvStem, NaLaBlock, PatchConv, per_stage
from ..layers.nala_attention import ATTN_TYPES
from .base import BackboneBase, PyramidBackbone

OFFICIAL_ATTN_TYPES = ('nala', 'nala', 'softmax', 'softmax')
#: the arguments that make the model compute what the authors' public code computes (their
#: checkpoints then reproduce their outputs): softmax in stages 3-4, the ReLU-split kernel
#: with numerator-only RoPE, and raw stage maps (their head reads the unnormed stage 4)
OFFICIAL_PRESET = dict(attn_types='official', kernel='relu_split_rope', out_norm=False)


@MODELS.register_module()
class NaLaFormer(PyramidBackbone):
    """NaLaFormer pyramid backbone (strides 4/8/16/32).

    Stem: conv3x3 s2 (C/2) - BN - GELU - [conv3x3 - BN - GELU] x 2 - conv3x3 s2 (C) - BN.
    Before stages 2-4: conv3x3 s2 - BN.  ``norm_cfg`` replaces the BNs (e.g. SyncBN or GN),
    ``act_cfg`` the stem's GELUs.  Each stage is a chain of :class:`NaLaBlock`; the
    outputs are the stage maps before the next down-sampling, each with a LayerNorm.

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'``, ``'large'`` or a dict with ``embed_dims``,
            ``depths``, ``num_heads`` and optionally ``mlp_ratios`` (default 4),
            ``layer_scale_init_values`` (default 1; ``None`` = no LayerScale) and
            ``drop_path_rate`` (default 0.1); the optional entries are scalars or per-stage.
        attn_types: attention per stage, ``'nala'`` or ``'softmax'``: one string for all
            stages, a sequence with one per stage, or ``'official'`` for the authors' code's
            ``('nala', 'nala', 'softmax', 'softmax')``.  The default, NaLa everywhere, keeps
            the cost linear in the token count (the paper's Table 1 labels every model
            "Linear"); softmax stages cost O(N^2) at high resolution.
        kernel: NaLa feature map, ``'cos_sin'`` (paper, Eq. 16), ``'relu_split'``
            (authors' code without its RoPE) or ``'relu_split_rope'`` (authors' code: RoPE
            in the numerator only; needed to reproduce their checkpoints' outputs, see
            :data:`OFFICIAL_PRESET`).
        lam: lambda of the query-norm-aware power (Eq. 8) and of the key power (Eq. 9).
        alpha: angle scale of the cosine inhibit, ``theta = (pi/4) tanh(alpha d(x))``.
        cpe: the two depthwise 3x3 conditional position encodings per block.
        lepe: the depthwise 5x5 conv on V inside each attention.
        softmax_rope: 2-D RoPE in the softmax stages.
        eps: added to NaLa's mean denominator (Eqs. 10-11); 1e-6 as in the authors' code.
            It is not negligible at head dim 64, where the denominators are ~1e-3 (see
            ``docs/user_guides/weights.md``); ``eps=0`` gives the exact Eq. 10-11 (a query with no
            positive similarity then yields NaN).
        out_norm: a LayerNorm on every returned map (the project's dense default).
            ``False`` returns the raw stage maps, as the authors' classifier head reads them.
        fuse_feature_maps: evaluate the NaLa feature maps as ``torch.compile``-d fused loops
            (same values up to float rounding; in training compiled with their backward,
            saving about the input instead of every intermediate; compiles once per
            process; ``docs/benchmarks.md``).  Skipped, with the
            eager maps used instead, where no compiler is available or
            ``MMLINATTN_COMPILE=0``.
        drop_path_rate: stochastic depth; ``None`` takes the arch's value.
        norm_cfg: the norm of the stem and the down-samplers
            (:func:`~mmlinattn.models.layers.build_norm`), BatchNorm by default.
        act_cfg: the activation of the stem (:func:`~mmlinattn.models.layers.build_act`).
        kwargs: ``in_channels``, ``out_indices``, ``frozen_stages``, ``norm_eval``,
            ``with_cp``, ``convert_weights``, ``pretrained``, ``init_cfg``: see
            :class:`~mmlinattn.models.backbones.base.BackboneBase`.
    """
    #: the stage types attn_types='official' stands for (the checkpoint identity check
    #: compares a file's record with a model through them)
    official_attn_types = OFFICIAL_ATTN_TYPES


    arch_settings = {
        'tiny': dict(embed_dims=(64, 128, 256, 512), depths=(2, 2, 6, 2),
                     num_heads=(1, 2, 4, 8), mlp_ratios=4.0, drop_path_rate=0.1,
                     layer_scale_init_values=1.0),
        'small': dict(embed_dims=(64, 128, 320, 512), depths=(3, 5, 9, 3),
                      num_heads=(1, 2, 5, 8), mlp_ratios=3.5, drop_path_rate=0.15,
                      layer_scale_init_values=1.0),
        'base': dict(embed_dims=(96, 192, 384, 512), depths=(4, 6, 12, 6),
                     num_heads=(1, 2, 6, 8), mlp_ratios=4.0, drop_path_rate=0.4,
                     layer_scale_init_values=(1.0, 1.0, 1e-6, 1e-6)),
        'large': dict(embed_dims=(96, 192, 448, 640), depths=(4, 7, 19, 8),
                      num_heads=(1, 2, 7, 10), mlp_ratios=3.5, drop_path_rate=0.55,
                      layer_scale_init_values=1e-6),
    }
    arch_keys = ('embed_dims', 'depths', 'num_heads')
    default_drop_path_rate = 0.1

    def __init__(self,
                 arch: Union[str, dict] = 'tiny',
                 attn_types: Union[str, Sequence[str]] = 'nala',
                 kernel: str = 'cos_sin',
                 lam: float = 3.0,
                 alpha: float = 20.0,
                 cpe: bool = True,
                 lepe: bool = True,
                 softmax_rope: bool = True,
                 eps: float = 1e-6,
                 out_norm: bool = True,
                 fuse_feature_maps: bool = True,
                 norm_cfg: dict = dict(type='BN'),
                 act_cfg: dict = dict(type='GELU'),
                 drop_path_rate: Optional[float] = None,
                 **kwargs):
        self.out_norm = bool(out_norm)  # read by build_out_norm inside super().__init__
        super().__init__(arch, drop_path_rate=drop_path_rate, **kwargs)
        num_heads, mlp_ratios, ls_values = (
            per_stage(self.arch.get(key, default), self.num_stages, f'arch[{key!r}]')
            for key, default in (('num_heads', None), ('mlp_ratios', 4.0),
                                 ('layer_scale_init_values', 1.0)))
        if attn_types == 'official':
            if self.num_stages != len(OFFICIAL_ATTN_TYPES):
                raise ValueError(f"attn_types='official' needs 4 stages, the arch has "
                                 f'{self.num_stages}')
            attn_types = OFFICIAL_ATTN_TYPES
        self.attn_types = tuple(per_stage(attn_types, self.num_stages, 'attn_types',
                                          ATTN_TYPES))

        dims = self.embed_dims
        half = dims[0] // 2
        self.patch_embeds = nn.ModuleList([
            ConvStem(self.in_channels, (half, half, half, dims[0]), (2, 1, 1, 2),
                     (act_cfg, act_cfg, act_cfg, None), norm_cfg=norm_cfg, recompute_act=True)
        ] + [PatchConv(dims[i - 1], dims[i], 3, 2, norm_cfg) for i in range(1, self.num_stages)])

        dprs = self.stage_drop_path_rates()
        self.stages = nn.ModuleList()
        for i in range(self.num_stages):
            blocks = [
                NaLaBlock(dims[i], num_heads[i], mlp_ratio=mlp_ratios[i], drop_path=dpr,
                          layer_scale_init_value=ls_values[i], cpe=cpe,
                          attn_type=self.attn_types[i], kernel=kernel, lam=lam, alpha=alpha,
                          eps=eps, lepe=lepe, rope=softmax_rope, fuse=fuse_feature_maps)
                for dpr in dprs[i]
            ]
            self.stages.append(BlockStage(blocks, with_cp=self.with_cp))

    @staticmethod
    def _init_module(m: nn.Module) -> None:
        """Depthwise convs: truncated normal (0.02), as in the authors' code; the rest as in
        the scaffold.

        The paper gives no init.  The conditional position encodings act on the residual
        stream itself (``x + DWConv3x3(x)``, twice per block), so their scale compounds: with
        the scaffold's fan-out normal init (std sqrt(2/9) = 0.47 for a depthwise 3x3) each
        CPE multiplies the stream by about sqrt(3), about 3x per block; the stream reached
        1e5 at stage 4 of the tiny arch, float16 overflowed, and the deep features no longer
        matched between two resolutions of one photo.  The authors' code initialises every
        ``nn.Conv2d`` with trunc_normal(std=0.02), which keeps each CPE (and LePE, and the
        FFN's depthwise conv) close to the identity.

        The dense convs of the stem and the down-samplers keep the fan-out init: each feeds
        a BatchNorm, which cancels their scale in training, and fan-out keeps their output
        variance near BatchNorm's initial running variance (1) where std 0.02 puts it near
        0.01, so eval-mode outputs agree with train-mode outputs after tens of steps instead
        of hundreds.
        """
        if isinstance(m, nn.Conv2d) and m.groups == m.in_channels == m.out_channels:
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        else:
            BackboneBase._init_module(m)

    def build_out_norm(self, index: int, dim: int) -> nn.Module:
        """LayerNorm on a returned map, or nothing with ``out_norm=False``."""
        return super().build_out_norm(index, dim) if self.out_norm else nn.Identity()

    def convert_checkpoint(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """The authors' NaLaFormer checkpoint in our key names (head dropped); see
        :func:`mmlinattn.models.converters.convert_nalaformer_checkpoint`.  Checks that the
        checkpoint's depths are this arch's."""
        found = checkpoint_depths(state_dict)
        check_checkpoint_depths('NaLaFormer', found, self.depths,
                                f'pick the matching arch (tiny / small / base / large) or pass '
                                f'arch=dict(..., depths={found})')
        return convert_nalaformer_checkpoint(state_dict)[0]
