"""Parameters and FLOPs of a whole detector or segmentor built from a config.

What is counted: the inference forward of backbone + neck + heads on one dummy image of
``H x W`` (:data:`STANDARD_SHAPES` by dataset) -- for a segmentor the backbone, neck and
decode head (the auxiliary head only trains); for a single-stage detector backbone, neck and
bbox head; for a two-stage detector also the RPN head and the RoI heads on
``test_cfg.rpn.max_per_img`` proposals (mmdet's ``_forward`` feeds the first 100 to the mask
head).  No data preprocessing, no post-processing (NMS).

How: :func:`~.flops.flop_counter` counts every matmul / einsum / convolution (2 FLOPs per
multiply-add; norms, softmax and element-wise ops are not counted); the part spent in
SOFT++'s Newton-Schulz iterations is also reported on its own.  By default the forward runs
on fake tensors (``torch._subclasses.FakeTensorMode``): every operator runs its shape logic
but computes nothing, so a Cityscapes-size count takes seconds and no memory; the count
equals a real run's.  The RoI heads always run for real on small feature maps (mmcv's
RoIAlign has no fake-tensor kernel; their cost does not depend on the image size, only on
the number of proposals).  Needs no weights (``init_cfg`` / ``pretrained`` are never loaded).
"""
import time
from contextlib import nullcontext
from typing import Dict, Optional, Sequence, Tuple

import torch

from .flops import flop_counter, newton_flops
from .isolation import time_limit
from .memory import is_oom

__all__ = ['STANDARD_SHAPES', 'MeasureError', 'dataset_type', 'standard_shape', 'count_params',
           'roi_flops', 'measure_model', 'format_report']

# The standard inputs of the model zoo (H, W).
STANDARD_SHAPES = {
    'CocoDataset': (800, 1280),
    'ADE20KDataset': (512, 512),
    'CityscapesDataset': (1024, 2048),
}


class MeasureError(RuntimeError):
    """A measurement that could not finish (out of memory, time limit, unsupported op)."""


def dataset_type(cfg) -> Optional[str]:
    """The type of a config's training dataset, through wrappers such as RepeatDataset."""
    ds = cfg.get('train_dataloader', {}).get('dataset', {})
    while isinstance(ds, dict) and 'dataset' in ds:  # RepeatDataset & co.
        ds = ds['dataset']
    return ds.get('type') if isinstance(ds, dict) else None


def standard_shape(cfg) -> Tuple[int, int]:
    """The model-zoo input (H, W) for a config's dataset."""
    kind = dataset_type(cfg)
    if kind not in STANDARD_SHAPES:
        raise ValueError(f'no standard input size for dataset type {kind!r}; pass --shape H W '
                         f'(known: {sorted(STANDARD_SHAPES)})')
    return STANDARD_SHAPES[kind]


def count_params(module: Optional[torch.nn.Module]) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def roi_flops(model, feats_channels: Sequence[int], num_levels: int, shape) -> int:
    """FLOPs of ``roi_head.forward`` on ``test_cfg.rpn.max_per_img`` random proposals, run
    for real on 8x8 maps (RoIAlign is not counted; the heads' cost is per RoI)."""
    from mmengine.structures import InstanceData
    h, w = shape
    num = int(model.test_cfg.rpn.get('max_per_img', 1000))
    gen = torch.Generator().manual_seed(0)
    xy = torch.rand(num, 2, generator=gen) * torch.tensor([w * 0.75, h * 0.75])
    wh = torch.rand(num, 2, generator=gen) * torch.tensor([w * 0.25, h * 0.25]) + 1
    proposals = InstanceData(bboxes=torch.cat([xy, xy + wh], 1))
    feats = tuple(torch.zeros(1, c, 8, 8) for c in feats_channels[:num_levels])
    counter = flop_counter()
    with counter, torch.no_grad():
        model.roi_head.forward(feats, [proposals])
    return counter.get_total_flops()


def measure_model(model, shape: Tuple[int, int], real: bool = False, device: str = 'cpu',
                  timeout: Optional[float] = None) -> Dict[str, float]:
    """Params and FLOPs (2 per multiply-add, as the flop counter counts) of ``model``'s
    inference forward on a ``1 x 3 x H x W`` input, split into backbone / neck / heads.

    Raises:
        MeasureError: out of memory, over ``timeout`` seconds, or an operator that fake
            tensors cannot run (then try ``real=True``).
    """
    from torch._subclasses.fake_tensor import DataDependentOutputException, FakeTensorMode

    h, w = shape
    if real:
        model = model.to(device)
    fake = None if real else FakeTensorMode(allow_non_fake_inputs=True)
    # The backbones' NaN/Inf input check reads values, which fake tensors do not have; the
    # dummy input is zeros, so the check is skipped (it does no matmul or convolution).
    checked = [(m, vars(m).get('check_finite')) for m in model.modules()
               if getattr(m, 'check_finite', False) is True and not real]
    counters = {k: flop_counter() for k in ('backbone', 'neck', 'head')}
    newton: Dict[str, int] = {}     # SOFT++'s Newton-Schulz iterations (Eq. 10), nested count
    start = time.perf_counter()
    for m, _ in checked:
        m.check_finite = False
    try:
        with time_limit(timeout), torch.no_grad(), (fake or nullcontext()), \
                newton_flops(newton):
            x = torch.zeros(1, 3, h, w, device=device if real else 'cpu')
            with counters['backbone']:
                feats = model.backbone(x)
            if getattr(model, 'with_neck', False):
                with counters['neck']:
                    feats = model.neck(feats)
            feats = tuple(feats) if isinstance(feats, (list, tuple)) else (feats, )
            channels = [f.shape[1] for f in feats]
            with counters['head']:
                if hasattr(model, 'decode_head'):
                    model.decode_head.forward(feats)
                elif hasattr(model, 'roi_head'):
                    model.rpn_head.forward(feats)
                elif hasattr(model, 'bbox_head'):
                    model.bbox_head.forward(feats)
                else:
                    raise MeasureError(f'{type(model).__name__}: unknown head layout')
        head_extra = 0
        if hasattr(model, 'roi_head'):
            with time_limit(timeout):
                head_extra = roi_flops(model.cpu(), channels,
                                       model.roi_head.bbox_roi_extractor.num_inputs, shape)
    except TimeoutError:
        raise MeasureError(f'not measured: over the {timeout:.0f} s time limit at {h}x{w}')
    except (NotImplementedError, DataDependentOutputException) as err:
        raise MeasureError(f'fake tensors cannot run an operator of this model ({err!r}: it '
                           'needs tensor values); rerun with --real') from err
    except (RuntimeError, MemoryError) as err:
        if is_oom(err):
            raise MeasureError(f'not measured: out of memory at {h}x{w} ({err})') from err
        raise
    finally:
        for m, own in checked:
            if own is None:
                del m.check_finite  # back to the class default
            else:
                m.check_finite = own
    flops = {k: c.get_total_flops() for k, c in counters.items()}
    flops['head'] += head_extra
    return dict(
        height=h, width=w,
        params=count_params(model),
        params_backbone=count_params(model.backbone),
        params_neck=count_params(getattr(model, 'neck', None)),
        flops=sum(flops.values()),
        flops_backbone=flops['backbone'],
        flops_neck=flops['neck'],
        flops_head=flops['head'],
        flops_newton=newton.get('newton', 0),
        seconds=round(time.perf_counter() - start, 2),
        mode='real' if real else 'fake')


def format_report(config: str, r: Dict[str, float]) -> str:
    """The printed report of :func:`measure_model`'s numbers, in MACs (FLOPs / 2)."""
    def share(part, whole):
        return f'{100.0 * part / whole:.1f} %' if whole else 'n/a'

    macs = r['flops'] / 2e9
    bb = r['flops_backbone'] / 2e9
    newton = r.get('flops_newton', 0) / 2e9
    lines = [
        f'config:  {config}',
        f"input:   1 x 3 x {r['height']} x {r['width']} ({r['mode']} tensors)",
        f"params:  {r['params'] / 1e6:.2f} M  (backbone {r['params_backbone'] / 1e6:.2f} M, "
        f"{share(r['params_backbone'], r['params'])})",
        f'FLOPs:   {macs:.1f} G  (backbone {bb:.1f} G, {share(bb, macs)}; neck '
        f"{r['flops_neck'] / 2e9:.1f} G; heads {r['flops_head'] / 2e9:.1f} G)",
    ]
    if newton:
        lines.append(f'         of the backbone: SOFT++ Newton-Schulz iterations {newton:.1f} G '
                     f'({share(newton, macs)} of the total)')
    lines += [
        'FLOPs are multiply-accumulates (GMACs, the papers\' "FLOPs"): the '
        'torch.utils.flop_counter count divided by 2; matmul / conv / einsum only.',
    ]
    return '\n'.join(lines)
