"""The backbone scaffold shared by every family.

:class:`BackboneBase` owns what every backbone shares: arch resolution and argument
validation, input checks, the drop-path schedule, per-output norms (only for returned stages,
so DDP needs no ``find_unused_parameters``), ``frozen_stages``, ``norm_eval``, pretrained
loading with a match report (``init_cfg=dict(type='Pretrained', ...)``, optional
``convert_weights``) and the default init.  Two layouts build on it:

* :class:`PyramidBackbone`, the 4-stage pyramids (strides 4/8/16/32).  A family declares
  ``arch_settings`` / ``arch_keys``, calls ``super().__init__`` with the common arguments,
  then builds two ``nn.ModuleList``s of equal length: ``self.patch_embeds[i]``
  (``(map, grid) -> (map, grid)``: the stem for ``i == 0``, the stride-2 down-sampler before
  stage ``i`` otherwise) and ``self.stages[i]`` (``(map, grid) -> map`` at constant
  resolution, e.g. a :class:`~mmlinattn.models.layers.BlockStage`).
* :class:`IsotropicBackbone`, a plain ViT: one patch embedding ``self.patch_embeds[0]``
  (``(image, grid) -> (tokens, grid)``) and ``num_layers`` blocks ``self.stages[i]`` at one
  stride, each block an output unit ("stage") of the scaffold.

The input's :class:`~mmlinattn.models.layers.token_grid.TokenGrid` (with each image's valid
size in a padded batch) is resolved once, at the start of :meth:`BackboneBase.forward`, and
handed down as an argument.
"""
import math
import warnings
from abc import ABCMeta
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.model import BaseModule
from torch.nn.modules.batchnorm import _BatchNorm

from ...kernels import decide_once, stage_forms
from ...ops.precision import autocast_enabled
from ...ops.tracing import traced
from ...utils.checkpoint_identity import build_arguments
from ...utils.pretrained import load_pretrained_backbone
from ..layers import LayerNorm2d, maybe_checkpoint
from ..layers.channels_last import tokens_as_map
from ..layers.token_grid import IMAGE_SIZES_ATTR, TokenGrid


def _autocast_on(x: torch.Tensor) -> bool:
    return autocast_enabled(x.device.type)


class _FreezeAfterInit(ABCMeta):
    """Applies ``frozen_stages`` as soon as the family's ``__init__`` has built the stages.

    Freezing only in ``train()`` is too late: mmengine wraps the model in DDP first, DDP then
    expects gradients for the frozen parameters and the second iteration fails.  Also keeps
    the arguments the model was built with (``build_args``), which loading compares with
    the model a converted checkpoint was made for (:mod:`mmlinattn.utils.checkpoint_identity`)."""

    def __call__(cls, *args, **kwargs):
        model = super().__call__(*args, **kwargs)
        model.build_args = build_arguments(cls, args, kwargs)
        model._freeze_stages()
        return model


class BackboneBase(BaseModule, metaclass=_FreezeAfterInit):
    """What every backbone shares (see the module docstring); a layout subclass adds
    ``strides`` and :meth:`forward_pyramid`.

    Args:
        arch: a name from ``arch_settings`` or a dict with every key in ``arch_keys``.
        in_channels: input image channels.
        out_indices: stages whose (normed) maps are returned, in that order.
        drop_path_rate: stochastic depth, linearly increasing over all blocks; None takes
            the arch's ``drop_path_rate`` entry, else :attr:`default_drop_path_rate`.
        frozen_stages: stages ``0..frozen_stages`` (and their embeddings) are frozen from
            construction on (no ``requires_grad``; eval mode under ``train()``); -1 freezes
            nothing.
        norm_eval: keep BatchNorm layers in eval mode while training.
        with_cp: activation checkpointing per block.
        convert_weights: map an official checkpoint's key names when loading
            ``init_cfg`` (see the family's ``convert_checkpoint``).
        pretrained: deprecated path, use ``init_cfg=dict(type='Pretrained', checkpoint=...)``.
        init_cfg: mmengine init config; ``type='Pretrained'`` loads through
            :func:`mmlinattn.utils.pretrained.load_pretrained_backbone`, which also accepts
            ``min_match`` (default 0.9) and ``allow_partial`` (default False).
    """

    arch_settings: Dict[str, dict] = {}
    arch_keys: Tuple[str, ...] = ('embed_dims', 'depths')
    strides: Tuple[int, ...] = ()
    min_input_size: int = 32
    #: the rate ``drop_path_rate=None`` takes where the arch has none
    default_drop_path_rate: float = 0.0

    def __init__(self,
                 arch: Union[str, dict],
                 in_channels: int = 3,
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 drop_path_rate: Optional[float] = 0.0,
                 frozen_stages: int = -1,
                 norm_eval: bool = False,
                 with_cp: bool = False,
                 convert_weights: bool = False,
                 pretrained: Optional[str] = None,
                 init_cfg: Optional[Union[dict, List[dict]]] = None):
        if pretrained is not None:
            if init_cfg is not None:
                raise ValueError('pass either `pretrained` or `init_cfg`, not both')
            if not isinstance(pretrained, str):
                raise TypeError(f'`pretrained` must be a checkpoint path (str) or None, got '
                                f'{type(pretrained).__name__}')
            warnings.warn('`pretrained` is deprecated, use '
                          "init_cfg=dict(type='Pretrained', checkpoint=...)", DeprecationWarning)
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        super().__init__(init_cfg=init_cfg)

        self.arch = self.resolve_arch(arch)
        if drop_path_rate is None:
            drop_path_rate = self.arch.get('drop_path_rate', self.default_drop_path_rate)
        self.embed_dims, self.depths = self.stage_layout(self.arch)
        self.num_stages = len(self.depths)
        if not isinstance(in_channels, int) or isinstance(in_channels, bool) or in_channels < 1:
            raise ValueError(f'in_channels must be a positive int, got {in_channels!r}')
        self.in_channels = in_channels

        if isinstance(out_indices, int):
            out_indices = (out_indices, )
        out_indices = tuple(out_indices)
        bad = [i for i in out_indices if not isinstance(i, int) or not
               -self.num_stages <= i < self.num_stages]
        if not out_indices or bad:
            raise ValueError(f'out_indices must be stage indices in [0, {self.num_stages - 1}] '
                             f'(negative counts from the end), got {out_indices!r}')
        self.out_indices = tuple(i % self.num_stages for i in out_indices)
        if len(set(self.out_indices)) != len(self.out_indices):
            raise ValueError(f'out_indices has duplicates: {out_indices!r}')
        if not isinstance(frozen_stages, int) or not -1 <= frozen_stages < self.num_stages:
            raise ValueError(f'frozen_stages must be an int in [-1, {self.num_stages - 1}] '
                             f'(-1 = nothing frozen), got {frozen_stages!r}')
        if not 0.0 <= float(drop_path_rate) < 1.0:
            raise ValueError(f'drop_path_rate must be in [0, 1), got {drop_path_rate!r}')
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp
        if convert_weights and not self.has_checkpoint_converter():
            raise ValueError(f'{type(self).__name__} has no official-checkpoint converter, so '
                             f'convert_weights must be False, got {convert_weights!r}; load '
                             "mmlinattn checkpoints with init_cfg=dict(type='Pretrained', ...) "
                             'directly')
        self.convert_weights = convert_weights
        self.drop_path_rate = float(drop_path_rate)

        self.out_norms = nn.ModuleDict(
            {str(i): self.build_out_norm(i, self.embed_dims[i]) for i in self.out_indices})

    # ----------------------------------------------------------------- arch handling
    @classmethod
    def resolve_arch(cls, arch: Union[str, dict]) -> dict:
        """The arch dict for a name in ``arch_settings`` or a user dict (validated)."""
        name = cls.__name__
        if isinstance(arch, str):
            key = arch.lower()
            if key not in cls.arch_settings:
                raise ValueError(f'{name}: unknown arch {arch!r}; valid names are '
                                 f'{sorted(cls.arch_settings)} or a dict with keys '
                                 f'{list(cls.arch_keys)}')
            return dict(cls.arch_settings[key])
        if isinstance(arch, dict):
            missing = [k for k in cls.arch_keys if k not in arch]
            if missing:
                raise ValueError(f'{name}: arch dict is missing {missing}; it needs every '
                                 f'key of {list(cls.arch_keys)}, got {sorted(arch)}')
            lengths = {k: len(arch[k]) for k in cls.arch_keys
                       if isinstance(arch[k], (list, tuple))}
            if len(set(lengths.values())) > 1:
                raise ValueError(f'{name}: the per-stage arch entries must all have one value '
                                 f'per stage (the same length), got lengths {lengths} in '
                                 f'arch={arch!r}')
            return dict(arch)
        raise TypeError(f'{name}: arch must be a str or dict, got {type(arch).__name__}')

    @classmethod
    def stage_layout(cls, arch: dict) -> Tuple[List[int], List[int]]:
        """``(embed_dims, depths)``, one entry per stage, of a resolved ``arch``."""
        return list(arch['embed_dims']), list(arch['depths'])

    @classmethod
    def out_channels_of(cls, arch: Union[str, dict],
                        out_indices: Union[int, Sequence[int]]) -> List[int]:
        """The channels of the maps a backbone built with ``arch`` and ``out_indices``
        returns, without building it (to check a neck's ``in_channels`` up front)."""
        dims = cls.stage_layout(cls.resolve_arch(arch))[0]
        indices = (out_indices, ) if isinstance(out_indices, int) else tuple(out_indices)
        return [dims[i % len(dims)] for i in indices]

    def stage_drop_path_rates(self) -> List[List[float]]:
        """Linearly increasing stochastic-depth rates, split per stage."""
        total = sum(self.depths)
        # Plain arithmetic (not torch.linspace) so models can be built on the meta device.
        step = self.drop_path_rate / (total - 1) if total > 1 else 0.0
        rates = [i * step for i in range(total)]
        out, start = [], 0
        for d in self.depths:
            out.append(rates[start:start + d])
            start += d
        return out

    def build_out_norm(self, index: int, dim: int) -> nn.Module:
        """Norm applied to a returned stage map (LayerNorm over channels by default)."""
        return LayerNorm2d(dim, eps=1e-6)

    # ----------------------------------------------------------------- forward
    #: Reject NaN / Inf inputs in :meth:`check_input` (one pass over the input; on a GPU
    #: also one host synchronisation).  Set ``backbone.check_finite = False`` to skip it.
    #: Skipped inside ``torch.compile`` / ``torch.export`` graphs (a data-dependent branch).
    check_finite: bool = True

    def check_input(self, x: torch.Tensor) -> None:
        """Raise a clear ``TypeError`` / ``ValueError`` for inputs the pyramid cannot
        process: not a tensor, not 4-D, not floating point, a dtype other than the
        parameters' outside autocast, a channel count other than ``in_channels``, H or W
        below ``min_input_size``, or (``check_finite``) NaN / Inf."""
        name = type(self).__name__
        if not torch.is_tensor(x):
            raise TypeError(f'{name}.forward: the input x must be a torch.Tensor of shape '
                            f'(B, C, H, W), got {type(x).__name__}')
        if x.dim() != 4:
            raise ValueError(f'{name}.forward: the input x must be a 4-D (B, C, H, W) tensor, '
                             f'got a {x.dim()}-D tensor of shape {tuple(x.shape)}')
        dtype = self._param_dtype()
        if not x.is_floating_point():
            raise TypeError(f'{name}.forward: the input x must have a floating-point dtype '
                            f'(that of the parameters, {dtype}), got {x.dtype}; convert the '
                            f'image with x.to({dtype}) (and normalise it)')
        if x.dtype != dtype and not _autocast_on(x):
            raise TypeError(f'{name}.forward: the input x is {x.dtype} but the parameters are '
                            f'{dtype}; cast the input (x.to({dtype})), cast the model '
                            f'(model.to({x.dtype})), or run the forward under torch.autocast '
                            f'for mixed precision')
        if x.shape[1] != self.in_channels:
            raise ValueError(f'{name} was built with in_channels={self.in_channels} but the '
                             f'input x has {x.shape[1]} channels (shape {tuple(x.shape)}); '
                             f'pass in_channels={x.shape[1]} or fix the data pipeline')
        h, w = x.shape[-2:]
        if min(h, w) < self.min_input_size:
            raise ValueError(f'{name}.forward: the input x must have H and W >= '
                             f'{self.min_input_size}, got H x W = {h} x {w} (shape '
                             f'{tuple(x.shape)}); resize or pad the image')
        # a traced graph (torch.compile, torch.export / ONNX) cannot branch on values
        if (self.check_finite and x.numel() and x.device.type != 'meta'
                and not traced() and not torch.isfinite(x).all()):
            bad = ~torch.isfinite(x)
            items = bad.flatten(1).any(1).nonzero().flatten().tolist()
            raise ValueError(f'{name}.forward: the input x must be finite, got '
                             f'{int(torch.isnan(x).sum())} NaN and {int(torch.isinf(x).sum())} '
                             f'Inf values (batch items {items[:10]}); check the data pipeline '
                             f'and normalisation, or set backbone.check_finite = False to skip '
                             f'this check')

    def _param_dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def output_shapes(self, h: int, w: int) -> List[Tuple[int, int, int]]:
        """(C, ceil(H/s), ceil(W/s)) of every returned map."""
        return [(self.embed_dims[i], math.ceil(h / self.strides[i]),
                 math.ceil(w / self.strides[i])) for i in self.out_indices]

    def forward(self, x: torch.Tensor,
                valid_hw: Optional[Sequence[Tuple[int, int]]] = None) -> Tuple[torch.Tensor, ...]:
        """One NCHW map per ``out_indices`` entry, contiguous (the stages run
        channels-last, but mmcv's extension ops, e.g. the ``RoIAlign`` of Mask R-CNN, index
        their input as contiguous NCHW whatever its strides).

        Args:
            x: (B, C, H, W) images.
            valid_hw: optional ``(h, w)`` per image: the image occupies the top-left
                ``h x w`` of ``x`` and the rest is padding.  Convolutions and token mixers
                then ignore the padding, so each image's features inside its ``h x w`` do
                not depend on the other images of the batch (``docs/advanced/batch_independence.md``).
                Without it, sizes attached to ``x`` by the data preprocessor hook of
                :func:`mmlinattn.engine.valid_region_hook.enable_valid_region` are used.
        """
        self.check_input(x)
        if x.shape[0] == 0:
            return self._empty_outputs(x)
        # which form of each op runs is decided from one reading of the switches
        outs = decide_once(self.forward_pyramid, x, self.input_grid(x, valid_hw))
        return tuple(o.contiguous() for o in outs)

    def _empty_outputs(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Empty maps for a batch of zero images, without running the stages.  With grad
        enabled they depend on the parameters (through a zero multiple of their sums), so a
        loss over an empty batch backpropagates zero gradients instead of failing with
        'element 0 of tensors does not require grad' (and DDP sees every parameter used)."""
        outs = tuple(x.new_zeros(0, *s) for s in self.output_shapes(*x.shape[-2:]))
        params = [p for p in self.parameters() if p.requires_grad]
        if not torch.is_grad_enabled() or not params:
            return outs
        tie = sum(p.sum() for p in params) * 0
        return tuple(o + tie.to(o.dtype) for o in outs)

    def input_grid(self, x: torch.Tensor,
                   valid_hw: Optional[Sequence[Tuple[int, int]]] = None) -> TokenGrid:
        """The :class:`TokenGrid` of the input ``x``: its (H, W) and the per-image sizes of
        ``valid_hw``, or else of the sizes the data preprocessor attached to ``x``.  The one
        place that reads that attribute: everything below gets the grid as an argument."""
        if valid_hw is None:
            valid_hw = getattr(x, IMAGE_SIZES_ATTR, None)
        return TokenGrid.of_input(x, valid_hw, type(self).__name__)

    def forward_pyramid(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, ...]:
        """The ``out_indices`` maps of a checked input on ``grid``, zero in the padding (so
        necks / heads read no padding features)."""
        raise NotImplementedError

    def forward_stages(self, x: torch.Tensor, grid: TokenGrid, last: int
                       ) -> Iterator[Tuple[int, torch.Tensor, TokenGrid]]:
        """The stage loop, written once: for ``i`` in ``0..last`` the embedding ``i`` (where
        there is one), then stage ``i`` (:meth:`run_stage`); yields ``(i, its output, its
        grid)``."""
        for i in range(last + 1):
            embedded = i < len(self.patch_embeds)
            if embedded:
                x, grid = self.patch_embeds[i](x, grid)
            x = self.run_stage(i, x, grid, owned=embedded)  # owned: the embedding's output
            yield i, x, grid

    def run_stage(self, i: int, x: torch.Tensor, grid: TokenGrid, owned: bool = False
                  ) -> torch.Tensor:
        """Stage ``i`` on ``x`` (a :class:`~mmlinattn.models.layers.BlockStage` checkpoints
        its own blocks with ``with_cp``); ``owned``: nothing reads ``x`` after the stage."""
        return self.stages[i](x, grid, owned=owned)

    # ----------------------------------------------------------------- training state
    def frozen_modules(self, index: int) -> List[nn.Module]:
        """The modules ``frozen_stages >= index`` freezes: stage ``index``, its embedding
        and its output norm."""
        mods = [self.patch_embeds[index], self.stages[index]]
        if str(index) in self.out_norms:
            mods.append(self.out_norms[str(index)])
        return mods

    def _freeze_stages(self) -> None:
        for i in range(self.frozen_stages + 1):
            for m in self.frozen_modules(i):
                m.eval()
                for p in m.parameters():
                    p.requires_grad = False

    def train(self, mode: bool = True):
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    # ----------------------------------------------------------------- weights
    def init_weights(self) -> None:
        if isinstance(self.init_cfg, dict) and self.init_cfg.get('type') == 'Pretrained':
            load_pretrained_backbone(self, self.init_cfg)
            self._is_init = True
            return
        if self.init_cfg:  # another mmengine initialiser (e.g. TruncNormal): let it run
            super().init_weights()
            return
        self.init_default_weights()

    def init_default_weights(self) -> None:
        """The from-scratch init (:meth:`_init_module` on every module), without mmengine's
        per-parameter "value unchanged" log dump.  mmengine's ``TruncNormalInit`` /
        ``KaimingInit`` / ``ConstantInit`` would each walk the whole model in turn and so
        draw the random numbers in another order: not the same weights for a seed."""
        self.apply(self._init_module)
        self._is_init = True

    @staticmethod
    def _init_module(m: nn.Module) -> None:
        """Default init: truncated normal (0.02) for linears, fan-out normal for convs."""
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Conv2d):
            fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
            nn.init.normal_(m.weight, 0, math.sqrt(2.0 / fan_out))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (nn.LayerNorm, nn.GroupNorm, _BatchNorm)):
            if m.weight is not None:
                nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    @classmethod
    def has_checkpoint_converter(cls) -> bool:
        """Whether the family overrides :meth:`convert_checkpoint` (``convert_weights``)."""
        return cls.convert_checkpoint is not BackboneBase.convert_checkpoint

    def convert_checkpoint(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Map an official checkpoint's keys to ours (``convert_weights=True``)."""
        raise NotImplementedError(f'{type(self).__name__} has no official-checkpoint converter')

    def adapt_state_dict(self, state_dict: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
        """Resize resolution-shaped tensors (e.g. position embeddings) to this model's
        shapes before loading. The default changes nothing."""
        return state_dict


class PyramidBackbone(BackboneBase):
    """Base class of the 4-stage feature pyramids (strides 4/8/16/32); arguments as
    :class:`BackboneBase`."""

    strides: Tuple[int, ...] = (4, 8, 16, 32)

    def forward_pyramid(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, ...]:
        """The stage loop on a checked input on ``grid``; the returned maps are zero in the
        padding, so necks / heads read no padding features."""
        outs = {}
        # channels-last from the start: oneDNN / cuDNN convs run faster on it, and the stages
        # take and give channels-last maps without a copy (the copy is bound in the stage
        # loop only, so it is freed once the stem has read it)
        stages = self.forward_stages(x.contiguous(memory_format=torch.channels_last), grid,
                                     max(self.out_indices))
        for i, x, grid in stages:
            if str(i) in self.out_norms:
                # contiguous as it is made (what forward returns), on a large map a few
                # rows at a time: no channels-last form held to the end beside its copy
                norm = self.out_norms[str(i)]
                outs[i] = stage_forms.per_pixel_rows(lambda t, g: g.zero_padding(norm(t)), x,
                                                     grid, [norm])
            del x  # the loop keeps no stage output alive into the next stage
        return tuple(outs[i] for i in self.out_indices)


class IsotropicBackbone(BackboneBase):
    """Base class of the plain (isotropic) ViTs: a patch embedding, then ``num_layers``
    blocks at the one stride ``patch_size``.

    Every block is an output unit ("stage") of the scaffold: ``out_indices`` select blocks,
    ``frozen_stages = k`` freezes the embedding and blocks ``0..k``, and each returned
    block's patch tokens (prefix tokens dropped) come out as an NCHW map of size
    ``ceil(H / patch_size) x ceil(W / patch_size)`` after its output LayerNorm.

    A family builds ``self.patch_embeds = nn.ModuleList([embed])`` (one entry: the key
    layout of the pyramids) with ``embed(image, grid) -> (tokens, grid)`` and a
    ``num_prefix_tokens`` attribute, and ``self.stages`` (one block each, called as
    ``block(tokens, grid)``).  The arch needs ``embed_dims`` (one int) and ``num_layers``.

    Args:
        patch_size: the patch (= output stride).
        Others: see :class:`BackboneBase`.
    """

    arch_keys: Tuple[str, ...] = ('embed_dims', 'num_layers')

    def __init__(self, arch: Union[str, dict], patch_size: int = 16, **kwargs):
        if not isinstance(patch_size, int) or patch_size < 1:
            raise ValueError(f'patch_size must be a positive int, got {patch_size!r}')
        self.patch_size = patch_size
        super().__init__(arch, **kwargs)

    @classmethod
    def stage_layout(cls, arch: dict) -> Tuple[List[int], List[int]]:
        """One "stage" of depth 1 per block, all ``embed_dims`` wide."""
        return [arch['embed_dims']] * arch['num_layers'], [1] * arch['num_layers']

    @property
    def strides(self) -> Tuple[int, ...]:
        return (self.patch_size, ) * self.num_stages

    def build_out_norm(self, index: int, dim: int) -> nn.Module:
        # Applied to the (B, N, C) tokens before they are laid out as a map.
        return nn.LayerNorm(dim, eps=1e-6)

    def frozen_modules(self, index: int) -> List[nn.Module]:
        """Block ``index`` and its output norm, and for 0 the patch embedding."""
        mods = [self.stages[index]]
        if index == 0:
            mods.append(self.patch_embeds[0])
        if str(index) in self.out_norms:
            mods.append(self.out_norms[str(index)])
        return mods

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patch tokens (1 for a class token)."""
        return self.patch_embeds[0].num_prefix_tokens

    def _run_blocks(self, x: torch.Tensor, grid: TokenGrid, last: int,
                    keep: Sequence[int] = ()) -> Tuple[torch.Tensor, TokenGrid, dict]:
        """The embedding and blocks ``0..last``: ``(tokens after block last, the patch
        grid, {i: tokens after block i} for i in keep)``."""
        kept = {}
        for i, tokens, grid in self.forward_stages(x, grid, last):
            if i in keep:
                kept[i] = tokens
        return tokens, grid, kept

    def run_stage(self, i: int, x: torch.Tensor, grid: TokenGrid, owned: bool = False
                  ) -> torch.Tensor:
        """Block ``i``, checkpointed with ``with_cp``."""
        return maybe_checkpoint(self.stages[i], x, grid, enabled=self.with_cp)

    def forward_pyramid(self, x: torch.Tensor, grid: TokenGrid) -> Tuple[torch.Tensor, ...]:
        """The returned blocks' patch tokens as NCHW maps (zero in the padding)."""
        _, grid, kept = self._run_blocks(x, grid, max(self.out_indices), self.out_indices)
        outs = []
        for i in self.out_indices:
            patches = self.out_norms[str(i)](kept[i][:, self.num_prefix_tokens:])
            outs.append(grid.zero_padding(tokens_as_map(patches, grid.hw)))
        return tuple(outs)

    def forward_tokens(self, x: torch.Tensor,
                       valid_hw: Optional[Sequence[Tuple[int, int]]] = None
                       ) -> Tuple[torch.Tensor, TokenGrid]:
        """Every block, then the last block's output norm: ``(tokens (B, prefix + h*w, C),
        the patch grid)``, prefix (class) tokens first, what a ViT classifier reads.  Needs
        the last block in ``out_indices``; ``x`` and ``valid_hw`` as in :meth:`forward`."""
        last = self.num_stages - 1
        if str(last) not in self.out_norms:
            raise ValueError(f'forward_tokens needs the last block ({last}) in out_indices, '
                             f'got out_indices {self.out_indices}')
        self.check_input(x)
        tokens, grid, _ = decide_once(self._run_blocks, x, self.input_grid(x, valid_hw), last)
        return self.out_norms[str(last)](tokens), grid
