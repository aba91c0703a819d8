"""mmcv's compiled ops that our detectors call on a GPU, against a reference on the CPU:
``nms`` (RetinaNet's test), ``roi_align`` (Mask R-CNN's heads) against mmcv's CPU ops, and
``sigmoid_focal_loss`` (mmdet's FocalLoss on CUDA tensors; mmcv has no CPU kernel of it)
against its formula in torch.  Run by dev/gpu_end_to_end.sh after mmcv is compiled there.

    python dev/check_mmcv_cuda.py [--device cuda] [--json OUT]

Exit status 0 when every op ran on the device and agrees with its reference; 1 otherwise;
2 without the device.
"""
import argparse
import json
import sys

import torch

TOL = 1e-4


def _boxes(n: int, gen: torch.Generator) -> torch.Tensor:
    xy = torch.rand(n, 2, generator=gen) * 200
    wh = torch.rand(n, 2, generator=gen) * 60 + 4
    return torch.cat([xy, xy + wh], 1)


def check_nms(device: str) -> dict:
    from mmcv.ops import nms
    gen = torch.Generator().manual_seed(0)
    boxes, scores = _boxes(500, gen), torch.rand(500, generator=gen)
    _, keep_cpu = nms(boxes, scores, 0.5)
    _, keep_dev = nms(boxes.to(device), scores.to(device), 0.5)
    same = torch.equal(keep_cpu, keep_dev.cpu())
    return dict(op='nms', ok=same, kept=len(keep_cpu), kept_on_device=len(keep_dev))


def check_roi_align(device: str) -> dict:
    from mmcv.ops import roi_align
    gen = torch.Generator().manual_seed(1)
    feats = torch.randn(2, 16, 64, 64, generator=gen)
    rois = torch.cat([torch.randint(0, 2, (64, 1), generator=gen).float(),
                      _boxes(64, gen) / 4], 1)
    ref = roi_align(feats, rois, (7, 7), 0.25, 2, 'avg', True)
    out = roi_align(feats.to(device), rois.to(device), (7, 7), 0.25, 2, 'avg', True).cpu()
    err = (out - ref).abs().max().item()
    return dict(op='roi_align', ok=err < TOL, max_abs_diff=err)


def focal_loss_reference(logits: torch.Tensor, target: torch.Tensor, gamma: float,
                         alpha: float) -> torch.Tensor:
    """The sigmoid focal loss, summed (Lin et al., arXiv:1708.02002, Eq. 5, alpha-balanced)."""
    onehot = torch.nn.functional.one_hot(target, logits.shape[1]).to(logits)
    p = logits.sigmoid()
    pt = p * onehot + (1 - p) * (1 - onehot)
    weight = (alpha * onehot + (1 - alpha) * (1 - onehot)) * (1 - pt).pow(gamma)
    return (torch.nn.functional.binary_cross_entropy_with_logits(
        logits, onehot, reduction='none') * weight).sum()


def check_sigmoid_focal_loss(device: str) -> dict:
    from mmcv.ops import sigmoid_focal_loss
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(256, 7, generator=gen)
    target = torch.randint(0, 7, (256, ), generator=gen)
    ref = focal_loss_reference(logits, target, 2.0, 0.25)
    out = sigmoid_focal_loss(logits.to(device), target.to(device), 2.0, 0.25, None,
                             'sum').cpu()
    err = (abs(out - ref) / ref).item()
    return dict(op='sigmoid_focal_loss', ok=err < TOL, rel_diff=err)


CHECKS = {'nms': check_nms, 'roi_align': check_roi_align,
          'sigmoid_focal_loss': check_sigmoid_focal_loss}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--device', default='cuda')
    p.add_argument('--json', help='write the results here')
    args = p.parse_args(argv)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        print('check_mmcv_cuda.py needs a CUDA GPU; none found.')
        return 2
    rows = []
    for op, check in CHECKS.items():
        try:
            rows.append(check(args.device))
        except Exception as err:  # noqa: BLE001 (reported; the next op is checked)
            rows.append(dict(op=op, ok=False, error=str(err).strip()[:300]))
        print(rows[-1])
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(dict(device=args.device, rows=rows), f, indent=1)
    return 0 if all(r['ok'] for r in rows) else 1


if __name__ == '__main__':
    sys.exit(main())
