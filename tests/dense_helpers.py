"""Helpers for the config, resolution-transfer and user-config tests: build detectors and
segmentors from configs with the real mmdet / mmseg registries, make tiny synthetic batches
(``mmdet.testing.demo_mm_inputs``; ``SegDataSample`` + ``PixelData``), run one training step
and one prediction.  Nothing here is mocked."""
import contextlib
import importlib
import copy
from typing import List, Tuple

import torch
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import DefaultScope

import mmlinattn.models  # noqa: F401  (registers the backbones)


@contextlib.contextmanager
def cached_metafile_parsing():
    """Parse each installed package's model-index YAML once.

    mmengine resolves every ``mmdet::`` / ``mmseg::`` base path by loading all of the
    package's ~200 ``metafile.yml`` files (about a second per base file, four base files per
    config); the files do not change during a test run, so their parsed content is reused.
    Only the YAML parsing is cached, mmengine's lookup logic runs unchanged."""
    import pytest
    from mmengine.config import utils as cfg_utils
    original = cfg_utils.load
    memo = {}

    def load(path, *args, **kwargs):
        if isinstance(path, str) and path.endswith(('.yml', '.yaml')) and not args \
                and not kwargs:
            if path not in memo:
                memo[path] = original(path)
            return memo[path]
        return original(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cfg_utils, 'load', load)
        yield


@contextlib.contextmanager
def small_input_env():
    """What the tiny-input model tests run under: cached metafile parsing and one intra-op
    thread.  On 64x64 inputs every op is tiny, so extra threads only add synchronisation
    (and, on a shared machine, spin-waiting: 2 threads cost ~3x the CPU time of 1 here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with cached_metafile_parsing():
            yield
    finally:
        torch.set_num_threads(threads)


def registry(scope: str):
    """The ``MODELS`` registry of mmdet or mmseg, with all their modules registered."""
    if scope == 'mmdet':
        from mmdet.registry import MODELS
        from mmdet.utils import register_all_modules
    elif scope == 'mmseg':
        from mmseg.registry import MODELS
        from mmseg.utils import register_all_modules
    else:
        raise ValueError(f"scope must be 'mmdet' or 'mmseg', got {scope!r}")
    register_all_modules(init_default_scope=False)
    return MODELS


def build_model(model_cfg, scope: str) -> torch.nn.Module:
    """Build ``model_cfg`` (a config's ``model``) through ``scope``'s registry; SyncBN -> BN
    so it runs on one CPU process."""
    models = registry(scope)
    with DefaultScope.overwrite_default_scope(scope):
        model = models.build(copy.deepcopy(model_cfg))
    return revert_sync_batchnorm(model)


def shrink_seg_model_cfg(model_cfg, crop: Tuple[int, int], stride: Tuple[int, int] = None):
    """Point a segmentor's crop-size settings (pad size, sliding window) at small crops."""
    model_cfg = copy.deepcopy(model_cfg)
    if 'size' in model_cfg.get('data_preprocessor', {}):
        model_cfg.data_preprocessor['size'] = crop
    if model_cfg.get('test_cfg', {}).get('mode') == 'slide':
        model_cfg.test_cfg['crop_size'] = crop
        model_cfg.test_cfg['stride'] = stride or tuple(max(1, c * 3 // 4) for c in crop)
    return model_cfg


def det_batch(h: int, w: int, with_mask: bool, batch: int = 1) -> dict:
    """A detection batch of ``batch`` random ``h x w`` images with 3 boxes each."""
    from mmdet.testing import demo_mm_inputs
    data = demo_mm_inputs(batch, [(3, h, w)] * batch, num_items=[3] * batch,
                          num_classes=5, with_mask=with_mask)
    for s in data['data_samples']:
        s.set_metainfo(dict(scale_factor=(1.0, 1.0)))
    return data


def seg_batch(h: int, w: int, num_classes: int, batch: int = 2) -> dict:
    """A segmentation batch: ``batch`` random uint8 images with random label maps."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    gen = torch.Generator().manual_seed(0)
    inputs, samples = [], []
    for _ in range(batch):
        inputs.append(torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen))
        s = SegDataSample(metainfo=dict(img_shape=(h, w), ori_shape=(h, w), pad_shape=(h, w)))
        s.gt_sem_seg = PixelData(
            data=torch.randint(0, num_classes, (1, h, w), generator=gen))
        samples.append(s)
    return dict(inputs=inputs, data_samples=samples)


def num_classes_of(model_cfg) -> int:
    head = model_cfg.get('decode_head') or model_cfg.get('bbox_head')
    if head is None:
        head = model_cfg.roi_head.bbox_head
    return head['num_classes']


def train_step(model: torch.nn.Module, data: dict, scope: str) -> torch.Tensor:
    """One forward in ``loss`` mode and ``backward``; returns the total loss."""
    model.train()
    with DefaultScope.overwrite_default_scope(scope):
        batch = model.data_preprocessor(data, True)
        losses = model(**batch, mode='loss')
        loss, _ = model.parse_losses(losses)
    loss.backward()
    return loss.detach()


def predict(model: torch.nn.Module, data: dict, scope: str) -> List:
    """Inference through the model's own ``predict`` (mmdet post-processing / mmseg
    whole or sliding-window inference as its ``test_cfg`` says)."""
    model.eval()
    with DefaultScope.overwrite_default_scope(scope), torch.no_grad():
        batch = model.data_preprocessor(data, False)
        return model(**batch, mode='predict')


def build_dense(scope, cfg):
    """A backbone (or model) ``cfg`` built in ``scope`` (mmdet / mmseg) with that package's
    registry, initialised (its ``init_cfg`` applied), in eval mode."""
    importlib.import_module(f'{scope}.utils').register_all_modules(init_default_scope=False)
    registry = importlib.import_module(f'{scope}.registry').MODELS
    with DefaultScope.overwrite_default_scope(scope):
        dense = registry.build(cfg)
    dense.init_weights()
    return dense.eval()
