"""timm's ``features_only=True`` for the pyramid classifiers.

``timm.create_model('nalaformer_tiny', features_only=True, out_indices=(1, 2, 3))`` wraps
the classifier in timm's ``FeatureGetterNet``, which reads :attr:`feature_info` and calls
:meth:`forward_intermediates`; the maps are the dense backbone's outputs (each stage's
output norm applied), i.e. what an mmdet / mmseg neck receives.
"""
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
from timm.models._features import feature_take_indices

#: ``feature_cfg`` of ``build_model_with_cfg`` for the 4-stage pyramids
PYRAMID_FEATURE_CFG = dict(feature_cls='getter', out_indices=(0, 1, 2, 3))


class PyramidFeaturesMixin:
    """timm's feature-extraction interface for a classifier with a dense ``backbone``."""

    @property
    def feature_info(self) -> List[dict]:
        """Channels, stride and module of every stage, as timm describes features."""
        bb = self.backbone
        return [dict(num_chs=bb.embed_dims[i], reduction=bb.strides[i],
                     module=f'backbone.stages.{i}') for i in range(bb.num_stages)]

    def forward_intermediates(self, x: torch.Tensor,
                              indices: Optional[Union[int, List[int]]] = None,
                              norm: bool = False, stop_early: bool = False,
                              output_fmt: str = 'NCHW', intermediates_only: bool = False
                              ) -> Union[List[torch.Tensor], Tuple[torch.Tensor,
                                                                   List[torch.Tensor]]]:
        """The stage maps at ``indices`` (an int n: the last n stages), NCHW.  ``norm`` and
        ``stop_early`` change nothing: every returned map already has its output norm."""
        if output_fmt != 'NCHW':
            raise ValueError(f"output_fmt must be 'NCHW', got {output_fmt!r}")
        take, _ = feature_take_indices(self.backbone.num_stages, indices)
        maps = self.backbone(x)
        intermediates = [maps[self.backbone.out_indices.index(i)] for i in take]
        if intermediates_only:
            return intermediates
        return self.forward_features(x), intermediates

    def prune_intermediate_layers(self, indices: Union[int, List[int]] = 1,
                                  prune_norm: bool = False, prune_head: bool = True
                                  ) -> List[int]:
        """Drop the classifier head; every stage's output norm now feeds an output, so
        all of them train.  Returns the stage indices as a list."""
        take, _ = feature_take_indices(self.backbone.num_stages, indices)
        if prune_head:
            self.head = nn.Identity()
        self.backbone.out_norms.requires_grad_(True)
        return list(take)
