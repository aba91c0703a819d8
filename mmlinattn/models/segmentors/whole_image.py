"""mmseg's ``EncoderDecoder`` with a whole-image inference whose memory does not grow with
``classes x H x W``.

The inference is a mixin; :func:`whole_image_encoder_decoder` puts it in front of mmseg's
``EncoderDecoder`` when the first model is built, so that nothing here imports mmseg at import
time (the package's rule: ``mmlinattn/`` runs with torch and mmengine alone).
"""
import importlib
from typing import List, Optional

import torch
import torch.nn.functional as F
from mmengine.structures import PixelData
from torch import Tensor

from ..mixins import lazy_attributes, mixed_class
from ..striped import head_runs_whole, log_once, stripe_rows_of, widest_channels
from .heads import StripedForward
from .stripes import Full, materialize, running_argmax, striped_modules


def whole_image_encoder_decoder() -> type:
    """The class ``WholeImageEncoderDecoder(WholeImageInference, mmseg EncoderDecoder)``."""
    return mixed_class(WholeImageInference, 'mmseg.EncoderDecoder',
                       'WholeImageEncoderDecoder', __name__)


__getattr__ = lazy_attributes(__name__, WholeImageEncoderDecoder=whole_image_encoder_decoder)


class WholeImageInference:
    """``EncoderDecoder`` whose ``mode='whole'`` inference keeps memory bounded at large images.

    The backbone (and with it every global token mixer) sees the whole image, as in mmseg's
    whole mode.  What differs is where the memory goes:

    * the decode head's logits are resized to the image and reduced to the class map a few
      classes at a time (``test_cfg.class_chunk``), with a running argmax, instead of as one
      ``classes x H x W`` float tensor (40 GB for 150 classes at 8192²);
    * a striped neck and decode head (:class:`~.heads.StripedForward`: mmlinattn's
      ``StripedUPerHead``, ``StripedFPN`` and ``StripedFPNHead``, chosen in the config)
      compute their stride-4 part ``test_cfg.stripe_rows`` rows at a time, each stripe with
      the halo rows its convolutions read, from the row graph the head describes; other
      necks and heads run whole, logged once.

    A module of that stride-4 part whose norm reads more than a row of the map (a group or
    instance norm, a batch norm in training mode or without running statistics, a layer norm
    over more than one dimension, any other norm: :func:`~mmlinattn.kernels.per_pixel`)
    would give other logits on a stripe than on the whole map.  Such a head runs whole, as
    mmseg runs it, with a warning logged once naming the module and its norm; where its
    widest stride-4 map whole would pass :data:`~mmlinattn.models.striped.WHOLE_HEAD_BYTES`
    (1 GiB), ``predict`` raises instead, naming the module and the fixes (a batch norm in
    eval mode or no norm in the head, or ``stripe_rows=None``).  The class map is mmseg's,
    or there is none.

    ``predict`` returns ``pred_sem_seg`` exactly as ``EncoderDecoder.predict`` does (padding
    removed, flip undone, resized to ``ori_shape``); ``seg_logits``, which would be the full-size
    map this class exists to avoid, is not stored.  With ``stripe_rows=None`` the result is
    bit-equal to mmseg's whole mode; with stripes the convolutions of a stripe may round their
    last bits differently (see :mod:`mmlinattn.models.segmentors.stripes`).  Training, ``slide``
    mode and ``_forward`` are mmseg's.

    Config (UperNet; Semantic FPN: ``neck=dict(type='mmlinattn.StripedFPN')`` and
    ``decode_head=dict(type='mmlinattn.StripedFPNHead')``)::

        model = dict(type='mmlinattn.WholeImageEncoderDecoder',
                     decode_head=dict(type='mmlinattn.StripedUPerHead'))
        # optional: test_cfg=dict(mode='whole', stripe_rows=64, class_chunk=8)
    """

    def predict(self, inputs: Tensor, data_samples: Optional[List] = None) -> List:
        if self.test_cfg.get('mode', 'whole') != 'whole':
            return super().predict(inputs, data_samples)
        if data_samples is not None:
            metas = [s.metainfo for s in data_samples]
        else:
            metas = [dict(ori_shape=inputs.shape[2:], img_shape=inputs.shape[2:],
                          pad_shape=inputs.shape[2:], padding_size=[0, 0, 0, 0])
                     ] * inputs.shape[0]
        logits = self.head_logits(inputs)
        return self.predict_from_logits(logits, metas, data_samples)

    def head_logits(self, inputs: Tensor) -> Tensor:
        """The decode head's output at its own resolution (stride 4), computed in stripes
        where the neck and the head are striped ones (:class:`~.heads.StripedForward`)."""
        stripe_rows = stripe_rows_of(self.test_cfg)
        levels = [Full(f) for f in self.backbone(inputs)]
        # bytes per channel of a stride-4 map (the finest level), for the check below
        finest = levels[0].tensor
        channel_bytes = finest[:, :1].numel() * finest.element_size()
        del finest
        if stripe_rows is not None:
            self._log_whole_parts()
        if self.with_neck:
            outs = _forward_rows(self.neck, levels)
            levels = outs if outs is not None else \
                [Full(t) for t in self.neck([m.whole() for m in levels])]
        graph = _forward_rows(self.decode_head, levels)
        if graph is None:  # a head laid out otherwise: whole, as mmseg runs it
            return self.decode_head.forward([m.whole() for m in levels])
        del levels
        modules = striped_modules(graph)
        striped = stripe_rows is not None and stripe_rows < graph.height
        if head_runs_whole(self, modules, channel_bytes * widest_channels(modules), striped):
            stripe_rows = None  # a norm that reads the whole map: whole, as mmseg runs it
        return materialize(graph, stripe_rows)

    def _log_whole_parts(self):
        parts = [f'{name} ({type(m).__name__})' for name, m in (
            ('neck', self.neck if self.with_neck else None), ('decode_head', self.decode_head))
            if m is not None and not isinstance(m, StripedForward)]
        if parts:
            log_once(f'{type(self).__name__}: {" and ".join(parts)} '
                     f'{"have" if len(parts) > 1 else "has"} no striped form, so the maps are '
                     "computed whole (mmseg's memory for them). "
                     "decode_head=dict(type='mmlinattn.StripedUPerHead') (UperNet), or "
                     "neck=dict(type='mmlinattn.StripedFPN') with "
                     "decode_head=dict(type='mmlinattn.StripedFPNHead') (Semantic FPN), "
                     'computes their stride-4 part in row stripes')

    def predict_from_logits(self, logits: Tensor, metas: List[dict],
                            data_samples: Optional[List]) -> List:
        """``decode_head.predict_by_feat`` + ``postprocess_result`` of mmseg, a chunk of classes
        at a time; the same resizes, crop and flip on each chunk, so the class map is the one
        mmseg computes."""
        chunk = self.test_cfg.get('class_chunk', 8)
        if not isinstance(chunk, int) or chunk < 1:
            raise ValueError(f'test_cfg.class_chunk must be a positive int, got {chunk!r}')
        meta0 = metas[0]  # predict_by_feat sizes the whole batch by the first image
        if isinstance(meta0['img_shape'], torch.Size):
            size = meta0['img_shape']
        elif 'pad_shape' in meta0:
            size = meta0['pad_shape'][:2]
        else:
            size = meta0['img_shape']
        only_prediction = data_samples is None
        if only_prediction:
            sample_type = importlib.import_module('mmseg.structures').SegDataSample
            data_samples = [sample_type() for _ in range(logits.shape[0])]
        classes = logits.shape[1]
        for i, sample in enumerate(data_samples):
            def chunks():
                for c0, c1 in class_chunks(classes, chunk):
                    part = logits[i:i + 1, c0:c1].contiguous(
                        memory_format=_format_of(logits))
                    part = F.interpolate(part, size, None, 'bilinear', self.align_corners)
                    if not only_prediction:
                        part = self._undo_padding_and_flip(part, sample.metainfo)
                    yield c0, part

            if classes > 1:
                pred = running_argmax(chunks(), None)[0]
            else:
                _, prob = next(chunks())
                prob = prob[0].sigmoid()
                pred = (prob > self.decode_head.threshold).to(prob)
            sample.set_data({'pred_sem_seg': PixelData(data=pred)})
        return data_samples

    def _undo_padding_and_flip(self, part: Tensor, meta: dict) -> Tensor:
        # EncoderDecoder.postprocess_result, on a chunk of classes
        pad = meta.get('img_padding_size', meta.get('padding_size', [0] * 4))
        left, right, top, bottom = pad
        h, w = part.shape[2:]
        part = part[:, :, top:h - bottom, left:w - right]
        if meta.get('flip', None):
            direction = meta.get('flip_direction', None)
            assert direction in ['horizontal', 'vertical']
            part = part.flip(dims=(3,) if direction == 'horizontal' else (2,))
        return F.interpolate(part, meta['ori_shape'], None, 'bilinear', self.align_corners)


def _forward_rows(module, inputs):
    """``module.forward_rows(inputs)`` for a striped neck or head, else None."""
    return module.forward_rows(inputs) if isinstance(module, StripedForward) else None


def class_chunks(classes: int, chunk: int):
    """``(c0, c1)`` ranges of at most ``chunk`` classes, none of 1-3 classes unless there are
    that few: PyTorch's resize picks another kernel for 3 channels or fewer."""
    chunk = max(chunk, 4)
    bounds = list(range(0, classes, chunk)) + [classes]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] < 4:
        bounds.pop(-2)
    return list(zip(bounds[:-1], bounds[1:]))


def _format_of(t: Tensor):
    return torch.channels_last if not t.is_contiguous() and \
        t.is_contiguous(memory_format=torch.channels_last) else torch.contiguous_format
