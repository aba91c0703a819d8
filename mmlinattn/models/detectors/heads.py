"""mmdet's ``RetinaHead`` with an inference whose memory does not grow with the image.

mmdet's RetinaNet runs its head on every pyramid level whole and keeps all of its outputs:
``anchors x classes`` score channels per position (720 for COCO), 4 GB at stride 8 of an
8192² image, copied again by the sigmoid and the flattening before the scores are filtered.
``bbox_head=dict(type='mmlinattn.StripedRetinaHead')`` runs each level's head a few rows at a
time, each stripe with the halo rows its convolutions read, and filters each stripe's scores at
once (score threshold, then the ``nms_pre`` best, as mmdet's ``filter_scores_and_topk``); the
best ``nms_pre`` of the level are then chosen from the stripes' candidates, which contain them.
Decoding and NMS are mmdet's own.  The class is made when the first one is built, so nothing
here imports mmdet at import time.
"""
import copy
from typing import List, Optional

import torch
import torch.nn as nn
from torch import Tensor

from ...kernels import Stripes
from ..mixins import lazy_attributes, mixed_class
from ..striped import conv_halo, head_runs_whole, stripe_rows_of, widest_channels


def striped_retina_head() -> type:
    """The class ``StripedRetinaHead(RetinaHeadStripes, mmdet RetinaHead)``."""
    return mixed_class(RetinaHeadStripes, 'mmdet.RetinaHead', 'StripedRetinaHead', __name__)


__getattr__ = lazy_attributes(__name__, StripedRetinaHead=striped_retina_head)


class RetinaHeadStripes:
    """mmdet's ``RetinaHead`` whose ``predict`` runs in row stripes and filters as it goes.

    The backbone and the neck see the whole image, as in mmdet.  The head (convolution stacks,
    then the classifier and the box regressor) runs ``test_cfg.stripe_rows`` rows of a level at
    a time (the detector's ``test_cfg``, which mmdet hands to its head); a stripe's scores are
    thresholded (``score_thr``) and its best ``nms_pre`` kept, and the level's best ``nms_pre``
    are picked from those, in mmdet's order (scores descending).  Boxes are then decoded,
    rescaled and suppressed by mmdet's own ``bbox_coder.decode`` and ``_bbox_post_process``.

    With ``stripe_rows=None`` each level runs whole and the detections are bit-equal to
    ``RetinaHead.predict``; with stripes a stripe's convolutions may round their last bits
    differently, so scores agree to rounding (and two anchors whose scores tie within rounding
    may trade places at the ``nms_pre`` cut).  Weights, ``forward``, ``loss`` and training are
    mmdet's; so is the whole ``predict`` of a head with a custom score activation
    (``loss_cls.custom_cls_channels``).

    A head whose convolution stacks hold a norm that reads more than a row of the level (mmdet's
    ``norm_cfg=dict(type='GN', ...)``, a batch norm in training mode, any other norm:
    :func:`~mmlinattn.kernels.per_pixel`) would score other anchors on a stripe than on the
    whole level: it runs as mmdet runs it (all levels whole, the batch together), with a warning
    logged once naming the module and its norm where stripes would have applied; where its
    widest map (the finest level at the head's widest convolution) whole would pass
    :data:`~mmlinattn.models.striped.WHOLE_HEAD_BYTES` (1 GiB), ``predict`` raises instead,
    naming the module and the fixes.  The detections are mmdet's, or there are none.

    Config::

        model = dict(bbox_head=dict(type='mmlinattn.StripedRetinaHead'))
        # optional: test_cfg=dict(stripe_rows=64, nms_pre=1000, ...)
    """

    def predict(self, x: List[Tensor], batch_data_samples: List, rescale: bool = False):
        """mmdet's ``predict``: the detections of each image from the pyramid ``x``."""
        metas = [s.metainfo for s in batch_data_samples]
        return self.predict_by_stripes(x, metas, rescale=rescale)

    def predict_by_stripes(self, x: List[Tensor], batch_img_metas: List[dict],
                           rescale: bool = False, with_nms: bool = True):
        """What ``predict_by_feat(*self(x), ...)`` returns, the head run in row stripes."""
        stripe_rows = stripe_rows_of(self.test_cfg)
        modules = [*self.cls_convs, *self.reg_convs, self.retina_cls, self.retina_reg]
        sizes = [f.shape[-2:] for f in x]
        striped = stripe_rows is not None and stripe_rows < max(s[0] for s in sizes)
        widest = x[0][:, :1].numel() * x[0].element_size() * widest_channels(modules)
        if getattr(self.loss_cls, 'custom_cls_channels', False) or \
                head_runs_whole(self, modules, widest, striped):
            # a custom score activation, or a norm that reads the whole level: mmdet's, as is
            return self.predict_by_feat(*self(x), batch_img_metas=batch_img_metas,
                                        rescale=rescale, with_nms=with_nms)
        priors = self.prior_generator.grid_priors(sizes, dtype=x[0].dtype, device=x[0].device)
        return [self._predict_by_stripes_single([f[i:i + 1] for f in x], priors, meta,
                                                rescale, with_nms, stripe_rows)
                for i, meta in enumerate(batch_img_metas)]

    def _predict_by_stripes_single(self, feats: List[Tensor], priors: List[Tensor],
                                   img_meta: dict, rescale: bool, with_nms: bool,
                                   stripe_rows: Optional[int]):
        """mmdet's ``_predict_by_feat_single`` for one image's pyramid ``feats`` (batch 1) and
        the levels' ``priors``, level by level, stripe by stripe."""
        from mmengine.structures import InstanceData
        cfg = copy.deepcopy(self.test_cfg)
        nms_pre = cfg.get('nms_pre', -1)
        bbox_preds, valid_priors, scores, labels = [], [], [], []
        for feat, level_priors in zip(feats, priors):
            level = self._level_candidates(feat, level_priors, cfg, stripe_rows)
            # mmdet's filter_scores_and_topk on the whole level: the valid scores sorted in
            # descending order, the first min(nms_pre, count) kept
            level_scores, order = level[0].sort(descending=True)
            order = order[:min(nms_pre, len(order))]
            scores.append(level_scores[:len(order)])
            labels.append(level[1][order])
            bbox_preds.append(level[2][order])
            valid_priors.append(level[3][order])
        # priors are tensors, or mmdet's box type (use_box_type) with its own cat
        priors = torch.cat(valid_priors) if torch.is_tensor(valid_priors[0]) else \
            type(valid_priors[0]).cat(valid_priors)
        bboxes = self.bbox_coder.decode(priors, torch.cat(bbox_preds),
                                        max_shape=img_meta['img_shape'])
        results = InstanceData(bboxes=bboxes, scores=torch.cat(scores),
                               labels=torch.cat(labels))
        return self._bbox_post_process(results=results, cfg=cfg, rescale=rescale,
                                       with_nms=with_nms, img_meta=img_meta)

    def _level_candidates(self, feat: Tensor, priors: Tensor, cfg, stripe_rows):
        """Every anchor and class of one level that could be among the level's ``nms_pre``
        best: ``(scores, labels, bbox_preds, priors)``, the stripes' filtered sets joined."""
        height, width = feat.shape[-2:]
        stripes = Stripes(height if stripe_rows is None else stripe_rows, self._halo())
        anchors, dim = self.num_base_priors, self.bbox_coder.encode_size
        nms_pre, score_thr = cfg.get('nms_pre', -1), cfg.get('score_thr', 0)
        parts = []
        for stripe in stripes.over(height):
            cls_score, bbox_pred = self.forward_single(
                feat[:, :, stripe.read_start:stripe.read_stop])
            cls_score = cls_score[0, :, stripe.keep].permute(1, 2, 0)
            cls_score = cls_score.reshape(-1, self.cls_out_channels)
            bbox_pred = bbox_pred[0, :, stripe.keep].permute(1, 2, 0).reshape(-1, dim)
            stripe_scores = cls_score.sigmoid() if self.use_sigmoid_cls else \
                cls_score.softmax(-1)[:, :-1]
            del cls_score
            keep = nms_pre if nms_pre > 0 else stripe_scores.numel()
            got, got_labels, idx = _best_scores(stripe_scores, score_thr, keep)
            first = stripe.start * width * anchors  # the stripe's first anchor in level order
            parts.append((got, got_labels, bbox_pred[idx], priors[first + idx]))
        return [torch.cat(t) for t in zip(*parts)]

    def _halo(self) -> int:
        """Rows either side of a stripe that the two convolution stacks read."""
        return max(conv_halo(nn.ModuleList([*self.cls_convs, self.retina_cls])),
                   conv_halo(nn.ModuleList([*self.reg_convs, self.retina_reg])))


def _best_scores(scores: Tensor, score_thr: float, keep: int):
    """mmdet's ``filter_scores_and_topk`` on an ``(anchors, classes)`` score matrix: the scores
    above ``score_thr``, sorted in descending order, the first ``keep`` of them, with their
    labels and anchors."""
    valid = scores > score_thr
    kept, order = scores[valid].sort(descending=True)
    anchor, label = valid.nonzero()[order[:keep]].unbind(dim=1)
    return kept[:keep], label, anchor
