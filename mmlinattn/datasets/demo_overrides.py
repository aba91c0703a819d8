"""Point any detection / segmentation config at the demo datasets
(``tools/dataset_converters/make_demo_data.py`` writes them).

One source for the demo settings used by ``tools/demo.sh``, ``tools/misc/demo_overrides.py``
(which prints them as ``--cfg-options``), the config tests and users.  What changes: data
roots and class names, smaller image scales and crops, batch size, worker count, and the
schedule shrunk to about N iterations (the config's own LR schedulers, with their
begin/end/milestones rescaled).  The model and optimizer stay as configured.  Every change
is a leaf edit, so the printed ``--cfg-options`` reproduce exactly what the tests run.
"""
import copy
import json
import math
import os.path as osp
from typing import Any, Dict, List, Tuple

from mmengine.config import Config

from .photos import is_photo_root

__all__ = ['DEMO_ROOT', 'NUM_TRAIN', 'demo_config', 'demo_options', 'rescale_schedule',
           'cfg_option_words', 'photo_train_images', 'reads_photo_set']

DEMO_ROOT = 'data/demo'
DET_SCALE = (320, 320)
SEG_SCALE = (320, 256)
SEG_CROP = (128, 128)
NUM_TRAIN = 64  # tools/dataset_converters/make_demo_data.py default
BATCH = 4


def _demo_classes():
    from mmlinattn.datasets.demo import DEMO_CLASSES
    return tuple(DEMO_CLASSES)


def _shrink_pipeline(pipeline, scale, crop=None) -> None:
    for t in pipeline:
        kind = t.get('type')
        if kind in ('Resize', 'RandomResize') and 'scale' in t:
            t['scale'] = scale
        elif kind == 'RandomChoiceResize':
            t['scales'] = [scale] * len(t['scales'])
        elif kind == 'RandomCrop' and crop is not None:
            t['crop_size'] = crop
        elif kind == 'TestTimeAug':
            for group in t['transforms']:
                for tt in group:
                    if tt.get('type') == 'Resize' and 'scale' in tt:
                        tt['scale'] = scale
                    elif tt.get('type') == 'Resize' and 'scale_factor' in tt:
                        pass


def _set_num_classes(model: dict, n: int) -> None:
    for key in ('bbox_head', 'decode_head', 'auxiliary_head'):
        heads = model.get(key)
        for head in (heads if isinstance(heads, list) else [heads]):
            if isinstance(head, dict) and 'num_classes' in head:
                head['num_classes'] = n
    roi = model.get('roi_head')
    if isinstance(roi, dict):
        for key in ('bbox_head', 'mask_head'):
            if isinstance(roi.get(key), dict):
                roi[key]['num_classes'] = n


#: mmengine's LinearLR reaches ``end_factor`` only on its step ``begin + 1``; with
#: ``end = begin + 1`` the LR stays at ``start_factor`` for the whole run.
MIN_WARMUP = 2


def rescale_schedule(schedulers, old_len: int, new_len: int, by_epoch_loop: bool) -> None:
    """Shrink begin/end/milestones of each scheduler from ``old_len`` to ``new_len`` units of
    the training loop; iteration-based warm-ups are capped at 30 iters and last at least
    :data:`MIN_WARMUP`, and a decay that started where a warm-up ended still does."""
    ratio = new_len / old_len
    warmup_ends = {}  # a warm-up's old end -> its new end
    for s in schedulers:
        s_by_epoch = s.get('by_epoch', True)
        if by_epoch_loop and not s_by_epoch:   # iteration warm-up in an epoch-based run
            s['end'] = max(s.get('begin', 0) + MIN_WARMUP, min(s.get('end', 30), 30))
            continue
        old = dict(s)
        for k in ('begin', 'end'):
            if k in s and s[k] is not None:
                s[k] = min(new_len, max(0, int(round(s[k] * ratio))))
        if s.get('type') == 'LinearLR' and not by_epoch_loop:
            s['end'] = max(s.get('begin', 0) + MIN_WARMUP, min(s.get('end', 30), 30))
            warmup_ends[old.get('end')] = s['end']
        if s.get('type') in ('PolyLR', 'CosineAnnealingLR') and not by_epoch_loop:
            s['begin'] = warmup_ends.get(old.get('begin'), min(s.get('begin', 0), 30))
            # a run shorter than the warm-up still needs end > begin (mmengine checks it)
            s['end'] = max(new_len, s['begin'] + 1)
        if 'milestones' in s:
            s['milestones'] = [max(1, min(new_len - 1, int(round(m * ratio))))
                               for m in s['milestones']]
        if 'T_max' in s:
            s['T_max'] = new_len


def reads_photo_set(cfg: Config) -> bool:
    """Whether the config trains on a shipped photo set (``data/photos/``): it keeps its
    data and only its schedule is fitted to the demo length."""
    return is_photo_root(cfg.train_dataloader.dataset.get('data_root') or '')


def photo_train_images(cfg: Config):
    """The number of training images of a detection config that reads a shipped photo
    set, or None (segmentation sets are iteration-based: the count is not needed)."""
    ds = cfg.train_dataloader.dataset
    if ds.get('type') == 'CocoDataset':
        ann = osp.join(ds.data_root, ds.ann_file)
        if not osp.isfile(ann):
            raise FileNotFoundError(f'{ann} is missing: the photo sets ship in data/photos/ '
                                    '(tools/dataset_converters/make_photo_data.py re-creates '
                                    'them)')
        with open(ann) as f:
            return len(json.load(f)['images'])
    return None


def _set_length(cfg: Config, length: int, old: int, by_epoch: bool) -> None:
    """Train for ``length`` epochs (``by_epoch``) or iterations instead of ``old``: the loop,
    its validation and checkpoint intervals and the LR schedulers (:func:`rescale_schedule`)."""
    cfg.train_cfg['max_epochs' if by_epoch else 'max_iters'] = length
    cfg.train_cfg['val_interval'] = length
    rescale_schedule(cfg.param_scheduler, old, length, by_epoch)
    cfg.default_hooks.checkpoint['interval'] = length


def _fit_photo_schedule(cfg: Config, iters: int, num_train) -> Config:
    """Only the schedule of a photo-set config changes, and only when about ``iters``
    iterations is another length than its own."""
    by_epoch = 'max_epochs' in cfg.train_cfg
    if by_epoch:
        length = max(1, math.ceil(iters * cfg.train_dataloader.batch_size / num_train))
        old = cfg.train_cfg.max_epochs
    else:
        length, old = iters, cfg.train_cfg.max_iters
    if length != old:
        _set_length(cfg, length, old, by_epoch)
    return cfg


def demo_config(cfg: Config, iters: int = 300, data_root: str = DEMO_ROOT,
                num_train: int = NUM_TRAIN, det_scale: Tuple[int, int] = DET_SCALE) -> Config:
    """A copy of ``cfg`` pointed at the demo data under ``data_root`` (written by
    tools/dataset_converters/make_demo_data.py with ``--num-train num_train``), with a
    schedule of about ``iters`` iterations (whole epochs for epoch-based detection
    configs); detection images are resized to ``det_scale`` (the demo's 320 x 320 images
    keep their size by default).  A config that trains on a shipped photo set
    (``data/photos/``) keeps its data: only its schedule is fitted to ``iters``."""
    cfg = copy.deepcopy(cfg)
    if reads_photo_set(cfg):
        return _fit_photo_schedule(cfg, iters, photo_train_images(cfg))
    scope = cfg.get('default_scope')
    ds_type = cfg.train_dataloader.dataset.get('type')
    loaders = [k for k in ('train_dataloader', 'val_dataloader', 'test_dataloader') if k in cfg]
    for key in loaders:
        cfg[key]['num_workers'] = 0
        cfg[key]['persistent_workers'] = False
    cfg.train_dataloader['batch_size'] = BATCH
    if scope == 'mmdet':
        if ds_type != 'CocoDataset':
            raise ValueError(f'demo data exists for CocoDataset configs, not {ds_type}')
        root = f'{data_root}/coco/'
        classes = _demo_classes()
        for key in loaders:
            ds = cfg[key].dataset
            ds['data_root'] = root
            ds['metainfo'] = dict(classes=classes)
            _shrink_pipeline(ds.pipeline, tuple(det_scale))
        if 'filter_cfg' in cfg.train_dataloader.dataset:
            cfg.train_dataloader.dataset.filter_cfg['min_size'] = 4
        for key in ('val_evaluator', 'test_evaluator'):
            if key in cfg and 'ann_file' in cfg[key]:
                cfg[key]['ann_file'] = root + 'annotations/instances_val2017.json'
        _set_num_classes(cfg.model, len(classes))
        _set_length(cfg, max(1, math.ceil(iters * BATCH / num_train)),
                    cfg.train_cfg.get('max_epochs', 12), True)
    elif scope == 'mmseg':
        # Demo labels are a subset of the stock ADE20K / Cityscapes label ids, so the
        # configs' own classes and heads stay as they are.
        if ds_type == 'ADE20KDataset':
            root = f'{data_root}/ade/ADEChallengeData2016'
        elif ds_type == 'CityscapesDataset':
            root = f'{data_root}/cityscapes/'
        else:
            raise ValueError(f'demo data exists for ADE20KDataset and CityscapesDataset, '
                             f'not {ds_type}')
        for key in loaders:
            cfg[key].dataset['data_root'] = root
            _shrink_pipeline(cfg[key].dataset.pipeline, SEG_SCALE, SEG_CROP)
        if 'size' in cfg.model.get('data_preprocessor', {}):
            cfg.model.data_preprocessor['size'] = SEG_CROP
        if cfg.model.get('test_cfg', {}).get('mode') == 'slide':
            cfg.model.test_cfg['crop_size'] = SEG_CROP
            cfg.model.test_cfg['stride'] = (96, 96)
        _set_length(cfg, iters, cfg.train_cfg.get('max_iters', 160000), False)
    else:
        raise ValueError(f'unsupported default_scope {scope!r}')
    _from_scratch_without_weights(cfg)
    cfg.default_hooks.logger['interval'] = 10
    return cfg


def _from_scratch_without_weights(cfg: Config) -> None:
    """The drawn data trains from scratch when the ImageNet file a config fine-tunes is not
    there (the shipped configs name ``checkpoints/<family>_<arch>_in1k.pth``)."""
    backbone = cfg.model.get('backbone') or {}
    init_cfg = backbone.get('init_cfg') or {}
    path = init_cfg.get('checkpoint', '') if init_cfg.get('type') == 'Pretrained' else ''
    if path and '://' not in path and not osp.isfile(path):
        backbone['init_cfg'] = None


def _diff(old: Any, new: Any, prefix: str, out: Dict[str, Any]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k, v in new.items():
            if k not in old:
                out[f'{prefix}{k}'] = v
            else:
                _diff(old[k], v, f'{prefix}{k}.', out)
    elif (isinstance(old, list) and isinstance(new, list) and len(old) == len(new)
          and any(isinstance(v, dict) for v in new)):
        for i, (a, b) in enumerate(zip(old, new)):
            _diff(a, b, f'{prefix}{i}.', out)
    elif old != new:
        out[prefix[:-1]] = new


def demo_options(cfg: Config, iters: int = 300, **kwargs) -> Dict[str, Any]:
    """The leaf edits that turn ``cfg`` into :func:`demo_config` (``--cfg-options`` form)."""
    out: Dict[str, Any] = {}
    _diff(cfg.to_dict(), demo_config(cfg, iters, **kwargs).to_dict(), '', out)
    return out


def format_option(v: Any) -> str:
    """A value as mmengine's ``DictAction`` parses it back."""
    if isinstance(v, dict):  # a new sub-dict: only flat dicts of scalars/tuples occur here
        raise TypeError('nested dict cannot be written as a cfg-option')
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        inner = ','.join(format_option(x) for x in v)
        return f'[{inner}]' if isinstance(v, list) else f'({inner},)' if len(v) == 1 \
            else f'({inner})'
    return repr(v)


def cfg_option_words(options: Dict[str, Any]) -> List[str]:
    """``key=value`` words for ``--cfg-options`` (a new sub-dict becomes one word per key)."""
    words = []
    for k, v in options.items():
        for kk, vv in (v.items() if isinstance(v, dict) else [(None, v)]):
            words.append(f'{k if kk is None else f"{k}.{kk}"}={format_option(vv)}')
    return words
