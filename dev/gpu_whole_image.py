"""Whole-image segmentation on a GPU: time and peak GPU memory of one inference of a family's
UperNet (its shipped ``small`` config, random weights, float32, batch 1, a random image) at each
size, in mmseg's whole mode (``upernet``) and with mmlinattn's whole-image segmentor and
striped head (``upernet_whole``); the models are built as dev/whole_image_memory.py builds them.
Run by dev/gpu_end_to_end.sh.

    python dev/gpu_whole_image.py --families ldn soft:max_landmarks=49 \\
        --modes upernet upernet_whole --sizes 2048 4096 8192 --json whole_image.json

A run that exhausts the GPU's memory is recorded as ``oom`` and the larger sizes of that model
are skipped.  Exit status 0 when the whole-image segmentor ran at every size; 1 otherwise.
"""
import argparse
import json
import sys
import time

import torch

from whole_image_memory import build  # dev/, beside this file


def is_oom(err: Exception) -> bool:
    return isinstance(err, torch.cuda.OutOfMemoryError) or 'out of memory' in str(err)


def infer(model, scope: str, size: int, device: str) -> torch.Tensor:
    from mmengine.registry import DefaultScope
    from mmseg.structures import SegDataSample
    x = torch.randn(1, 3, size, size, device=device)
    sample = SegDataSample(metainfo=dict(img_shape=(size, size), ori_shape=(size, size)))
    with torch.no_grad(), DefaultScope.overwrite_default_scope(scope):
        return model.predict(x, [sample])[0].pred_sem_seg.data


def sync(device: str) -> None:
    if device.startswith('cuda'):
        torch.cuda.synchronize()


def measure(family: str, mode: str, sizes, device: str) -> list:
    model, scope = build(family, mode)
    model.to(device)
    infer(model, scope, 256, device)  # warm-up: kernels chosen, workspaces allocated
    rows = []
    for size in sizes:
        row = dict(family=family, mode=mode, size=size)
        if device.startswith('cuda'):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        sync(device)
        start = time.perf_counter()
        try:
            pred = infer(model, scope, size, device)
            sync(device)
            assert tuple(pred.shape) == (1, size, size), pred.shape
            row.update(status='ok', seconds=round(time.perf_counter() - start, 3))
        except Exception as err:  # noqa: BLE001 (recorded; the next model is measured)
            row.update(status='oom' if is_oom(err) else 'error', error=str(err)[:300])
        if device.startswith('cuda'):
            row['peak_gib'] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        print(row, flush=True)
        rows.append(row)
        if row['status'] != 'ok':
            break
    del model
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--families', nargs='+', default=['ldn', 'soft:max_landmarks=49',
                                                     'nalaformer', 'infvit'])
    p.add_argument('--modes', nargs='+', default=['upernet_whole', 'upernet'],
                   choices=['upernet', 'upernet_whole'])
    p.add_argument('--sizes', nargs='+', type=int, default=[2048, 4096, 8192])
    p.add_argument('--device', default='cuda')
    p.add_argument('--json', help='write the rows here')
    args = p.parse_args(argv)
    if args.device.startswith('cuda') and not torch.cuda.is_available():
        print('gpu_whole_image.py needs a CUDA GPU; none found.')
        return 2
    rows = []
    for family in args.families:
        for mode in args.modes:
            rows += measure(family, mode, args.sizes, args.device)
            if args.json:  # after each model: a run cut off by its time limit keeps its rows
                with open(args.json, 'w') as f:
                    json.dump(dict(device=torch.cuda.get_device_name()
                                   if args.device.startswith('cuda') else 'cpu',
                                   torch=torch.__version__, rows=rows), f, indent=1)
    whole = [r for r in rows if r['mode'] == 'upernet_whole']
    return 0 if whole and all(r['status'] == 'ok' for r in whole) else 1


if __name__ == '__main__':
    sys.exit(main())
