"""ImageNet classifiers around the dense backbones: one model, two heads.

:class:`LinAttnClassifier` holds the registered dense backbone (``SOFT``, ``NaLaFormer``,
``InfViT``, ``InfViTPlain``, ``LDN``) unchanged as ``self.backbone`` and adds a classification
head as ``self.head``.  A classifier checkpoint therefore becomes a backbone checkpoint by
keeping the ``backbone.`` keys (prefix stripped) and dropping ``head.``
(:func:`mmlinattn.timm.convert.classifier_to_backbone`), and the classifier's
:meth:`~LinAttnClassifier.forward_stages` is exactly the dense backbone's ``forward``.

The model follows timm's classifier interface (``forward_features``, ``forward_head``,
``reset_classifier``, ``get_classifier``, ``set_grad_checkpointing``, ``no_weight_decay``,
``num_classes``, ``num_features``, ``head_hidden_size``), so timm's ``train.py`` can train it.

This module imports timm but never mmdet or mmseg.
"""
from typing import Optional, Set, Tuple

import torch
import torch.nn as nn
from timm.layers import SelectAdaptivePool2d, trunc_normal_

from ..models.layers import tokens_as_map
from ..registry import MODELS
from .features import PyramidFeaturesMixin

HEAD_TYPES = ('norm_linear', 'nala', 'token', 'cls_token')
MAP_POOLS = ('avg', 'max', 'avgmax')
TOKEN_POOLS = ('token', 'avg')
# Parameters that weight decay should not shrink (besides the biases and 1-D tensors timm
# already exempts): absolute position embeddings, class tokens, LDN diffusion-tap logits.
_NO_DECAY_SUFFIXES = ('pos_embed.weight', 'cls_token', 'tap_logits')


def _check_pool(global_pool: str, head_type: str) -> str:
    accepted = TOKEN_POOLS if head_type in ('token', 'cls_token') else MAP_POOLS
    if global_pool not in accepted:
        raise ValueError(f'global_pool must be one of {accepted} for the {head_type!r} head, '
                         f'got {global_pool!r}')
    return global_pool


def _check_num_classes(num_classes) -> int:
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 0:
        raise ValueError(f'num_classes must be an int >= 0 (0 = no classifier, features only), '
                         f'got {num_classes!r}')
    return num_classes


class MapHead(nn.Module):
    """Head on the last (B, C, H, W) stage map.

    * ``'norm_linear'``: global pool -> LayerNorm(C) -> dropout -> Linear (the standard head
      where a paper is silent, ConvNeXt/Swin-style);
    * ``'nala'``: NaLaFormer's head (the authors' public code, not in the paper): a per-token
      Linear(C -> hidden) (a 1x1 conv) -> BatchNorm -> Swish -> global pool -> dropout ->
      Linear(hidden -> classes) (their final 1x1 conv on the pooled vector).

    Args:
        in_features: C of the last stage.
        num_classes: classes (0 = identity, pre-logits features out).
        head_type: ``'norm_linear'`` or ``'nala'``.
        global_pool: ``'avg'``, ``'max'`` or ``'avgmax'``.
        drop_rate: dropout before the classifier.
        hidden_size: width of the NaLaFormer pre-logits projection.
    """

    def __init__(self, in_features: int, num_classes: int, head_type: str = 'norm_linear',
                 global_pool: str = 'avg', drop_rate: float = 0.0, hidden_size: int = 1024):
        super().__init__()
        self.head_type = head_type
        if head_type == 'nala':
            self.pre = nn.Sequential(nn.Conv2d(in_features, hidden_size, 1),
                                     nn.BatchNorm2d(hidden_size), nn.SiLU())
            self.norm = nn.Identity()
            self.hidden_size = hidden_size
        else:
            self.pre = nn.Identity()
            self.norm = nn.LayerNorm(in_features, eps=1e-6)
            self.hidden_size = in_features
        self.global_pool = SelectAdaptivePool2d(pool_type=global_pool, flatten=True)
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(self.hidden_size, num_classes) if num_classes else nn.Identity()

    def reset(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        if global_pool is not None:
            self.global_pool = SelectAdaptivePool2d(pool_type=global_pool, flatten=True)
        self.fc = nn.Linear(self.hidden_size, num_classes) if num_classes else nn.Identity()

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.norm(self.global_pool(self.pre(x)))
        x = self.drop(x)
        return x if pre_logits else self.fc(x)


class TokenHead(nn.Module):
    """Head on the normed token sequence of the plain ViT: the class token (``'token'``) or
    the mean of the patch tokens (``'avg'``) -> dropout -> Linear.  The LayerNorm of
    "class token + LN + linear" is the backbone's own output norm of the last block."""

    def __init__(self, in_features: int, num_classes: int, global_pool: str = 'token',
                 drop_rate: float = 0.0, num_prefix_tokens: int = 1):
        super().__init__()
        self.global_pool = global_pool
        self.num_prefix_tokens = num_prefix_tokens
        self.hidden_size = in_features
        self.drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(in_features, num_classes) if num_classes else nn.Identity()

    def reset(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        if global_pool is not None:
            self.global_pool = global_pool
        self.fc = nn.Linear(self.hidden_size, num_classes) if num_classes else nn.Identity()

    def forward(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if self.global_pool == 'token':
            x = x[:, 0]
        else:
            x = x[:, self.num_prefix_tokens:].mean(dim=1)
        x = self.drop(x)
        return x if pre_logits else self.fc(x)


class LinAttnClassifier(PyramidFeaturesMixin, nn.Module):
    """A dense mmlinattn backbone plus a classification head, in timm's interface.

    The backbone is built from the registry exactly as an mmdet / mmseg config would build
    it (``backbone_cfg`` holds that config), with ``out_indices`` covering every stage for
    the pyramids (so the checkpoint fills every output norm of the dense model) and the last
    block for the plain ViT.  Only the last stage's output norm feeds the head; the other
    stages' output norms get no gradient in classification, so they are frozen
    (``requires_grad=False``: DDP needs no ``find_unused_parameters``, optimisers skip them)
    and stay at their initial identity (weight 1, bias 0) — what a dense model would start
    them at anyway.

    Args:
        backbone: the backbone config, ``dict(type=<registered name>, arch=..., ...)``.
        head_type: ``'norm_linear'``, ``'nala'`` (NaLaFormer's head), ``'token'`` (class
            token, for :class:`~mmlinattn.models.backbones.InfViTPlain`) or ``'cls_token'``
            (a pyramid whose last stage carries a class token, e.g. SOFT's ``*-norm`` archs:
            the class token after the last output norm -> Linear, the authors' SOFT head).
        num_classes: classes; 0 gives pre-logits features from ``forward``.
        in_chans: input channels (timm's name for the backbone's ``in_channels``).
        global_pool: ``'avg'``/``'max'``/``'avgmax'`` for map heads, ``'token'``/``'avg'`` for
            the token head; ``None`` = ``'avg'`` / ``'token'``.
        drop_rate: dropout before the classifier (timm's ``--drop``).
        drop_path_rate: stochastic depth of the backbone (timm's ``--drop-path``); ``None``
            keeps the backbone's default.
        head_hidden_size: width of NaLaFormer's pre-logits projection (1024).
        **backbone_kwargs: more backbone arguments (e.g. ``attn_types='official'`` for
            NaLaFormer, ``with_cp=True``); they override ``backbone``'s entries.
    """

    def __init__(self, backbone: dict, head_type: str = 'norm_linear', num_classes: int = 1000,
                 in_chans: int = 3, global_pool: Optional[str] = None, drop_rate: float = 0.0,
                 drop_path_rate: Optional[float] = None, head_hidden_size: int = 1024,
                 **backbone_kwargs):
        super().__init__()
        if head_type not in HEAD_TYPES:
            raise ValueError(f'head_type must be one of {HEAD_TYPES}, got {head_type!r}')
        if not 0.0 <= float(drop_rate) < 1.0:
            raise ValueError(f'drop_rate must be in [0, 1), got {drop_rate!r}')
        cfg = dict(backbone, **backbone_kwargs)
        cfg['in_channels'] = in_chans
        if drop_path_rate is not None:
            cfg['drop_path_rate'] = drop_path_rate
        cls = MODELS.get(cfg['type'])
        if cls is None:
            raise ValueError(f'backbone type {cfg["type"]!r} is not registered in mmlinattn')
        self.is_plain = head_type == 'token'
        if 'arch' not in cfg:
            raise ValueError(f'the backbone config needs an `arch`, got {backbone!r}')
        if 'out_indices' not in cfg:
            num_stages = len(cls.stage_layout(cls.resolve_arch(cfg['arch']))[1])
            cfg['out_indices'] = (-1, ) if self.is_plain else tuple(range(num_stages))
        self.backbone = MODELS.build(cfg)
        # The dense model's from-scratch init (what its init_weights does without a
        # Pretrained init_cfg).
        self.backbone.init_default_weights()
        last = self.backbone.num_stages - 1
        if last not in self.backbone.out_indices:
            raise ValueError(f'out_indices must include the last stage ({last}) for '
                             f'classification, got {cfg["out_indices"]!r}')
        for key, norm in self.backbone.out_norms.items():
            if int(key) != last:
                norm.requires_grad_(False)
        # The dense config this classifier's backbone checkpoint belongs to.
        self.backbone_cfg = dict(cfg, type=f'mmlinattn.{cls.__name__}')

        self.num_classes = _check_num_classes(num_classes)
        self.head_type = head_type
        self.drop_rate = float(drop_rate)
        self.num_features = self.backbone.embed_dims[last]
        if global_pool is None:
            global_pool = 'token' if head_type in ('token', 'cls_token') else 'avg'
        self.global_pool = _check_pool(global_pool, head_type)
        if self.is_plain:
            prefix = self.backbone.num_prefix_tokens
            if global_pool == 'token' and not prefix:
                raise ValueError("global_pool='token' needs the class token; the backbone was "
                                 "built with with_cls_token=False, use global_pool='avg'")
            self.head = TokenHead(self.num_features, num_classes, global_pool, drop_rate,
                                  num_prefix_tokens=prefix)
        elif head_type == 'cls_token':
            if not hasattr(self.backbone, 'forward_tokens'):
                raise ValueError(f"head_type='cls_token' needs a backbone with forward_tokens "
                                 f"(SOFT), got {cls.__name__}")
            self.head = TokenHead(self.num_features, num_classes, global_pool, drop_rate)
        else:
            self.head = MapHead(self.num_features, num_classes, head_type, global_pool,
                                drop_rate, head_hidden_size)
        self.head_hidden_size = self.head.hidden_size
        self.head.apply(self._init_head)

    @staticmethod
    def _init_head(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    # ----------------------------------------------------------------- timm interface
    def get_classifier(self) -> nn.Module:
        return self.head.fc

    def reset_classifier(self, num_classes: int, global_pool: Optional[str] = None) -> None:
        self.num_classes = _check_num_classes(num_classes)
        if global_pool is not None:
            self.global_pool = _check_pool(global_pool, self.head_type)
        self.head.reset(num_classes, global_pool)
        if num_classes:
            self._init_head(self.head.fc)

    @torch.jit.ignore
    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Activation checkpointing per block (the backbones' ``with_cp``)."""
        for m in self.backbone.modules():
            if hasattr(m, 'with_cp'):
                m.with_cp = enable

    @torch.jit.ignore
    def no_weight_decay(self) -> Set[str]:
        """Full names of position embeddings, class tokens and LDN tap logits."""
        return {n for n, _ in self.named_parameters() if n.endswith(_NO_DECAY_SUFFIXES)}

    def forward_stages(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """Every stage map the dense backbone returns: exactly ``self.backbone(x)``."""
        return self.backbone(x)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage map (B, C, H/32, W/32) of the pyramids (= the dense backbone's
        last output); for the plain ViT and the ``'cls_token'`` head the normed tokens
        (B, 1 + h*w, C), class token first, as timm's ViTs return them."""
        if self.is_plain:
            return self.backbone.forward_tokens(x)[0]
        if self.head_type == 'cls_token':
            return self.backbone.forward_tokens(x)
        last = self.backbone.num_stages - 1
        return self.backbone(x)[self.backbone.out_indices.index(last)]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return self.head(x, pre_logits=pre_logits)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def plain_tokens_to_map(self, tokens: torch.Tensor, hw: Tuple[int, int]) -> torch.Tensor:
        """The patch tokens of :meth:`forward_features` (plain ViT) as an NCHW map."""
        return tokens_as_map(tokens[:, tokens.shape[1] - hw[0] * hw[1]:], hw)
