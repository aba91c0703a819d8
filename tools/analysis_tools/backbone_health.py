"""Whole-network health of the backbones on natural photos (scikit-image's sample photos).

    python tools/analysis_tools/backbone_health.py [--families SOFT NaLaFormer ...]
        [--arch tiny] [--steps 40] [--out report.md]

Per family, at the default init (``init_weights()``, as the Runner applies it):
* the largest activation of the residual stream in each stage (64 x 96 photo);
* whether float16 autocast and ``model.half()`` give finite maps (256 x 384 photo);
* the centred cosine similarity of each stage's map between one photo at 512² and 1024²,
  and between two photos at 512²;
and after ``--steps`` AdamW steps (lr 1e-3) on 64² photo crops:
* the largest activation again, and the relative train-mode / eval-mode output gap (BatchNorm
  on batch statistics, and with the inference fast paths against the training path).
"""
import argparse
from typing import Dict, List

import torch
from mmengine.logging import print_log

from benchlib.health import (block_activation_max, brief_training, centred_similarity,
                             half_precision_finite, normalise_photo, photo_crops, train_eval_gap)
from mmlinattn.registry import MODELS

DEFAULT_FAMILIES = ('SOFT', 'NaLaFormer', 'InfViT', 'LDN')
FAMILY_ARGS = {'SOFT': dict(max_landmarks=49)}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--families', nargs='+', default=list(DEFAULT_FAMILIES))
    parser.add_argument('--arch', default='tiny', help='arch name used for every family')
    parser.add_argument('--steps', type=int, default=40, help='AdamW steps before the '
                        'train/eval comparison')
    parser.add_argument('--out', help='also write the Markdown report to this file')
    return parser.parse_args()


def photos() -> List:
    try:
        from skimage import data
    except ImportError as err:
        raise SystemExit('this tool needs scikit-image for its sample photos: '
                         'pip install scikit-image') from err
    return [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]


def build(family: str, arch: str, **kwargs):
    torch.manual_seed(0)
    model = MODELS.build(dict(type=f'mmlinattn.{family}', arch=arch,
                              **FAMILY_ARGS.get(family, {}), **kwargs))
    model.init_weights()
    return model


def per_stage(record: Dict[str, float]) -> List[float]:
    """Max over the blocks of each stage ('stage i, block j' keys)."""
    stages: Dict[str, float] = {}
    for name, value in record.items():
        stage = name.split(',')[0]
        stages[stage] = max(stages.get(stage, 0.0), value)
    return list(stages.values())


def fmt(values, spec='.3g') -> str:
    return ' / '.join(format(v, spec) for v in values)


def report(family: str, arch: str, steps: int, images) -> Dict[str, str]:
    small_photo = normalise_photo(images[0], (64, 96))
    model = build(family, arch).eval()
    row = {'family': f'{family} {arch}',
           'max activation per stage, init': fmt(per_stage(
               block_activation_max(model, small_photo)))}
    half = half_precision_finite(model, normalise_photo(images[0], (256, 384)))
    row['float16 finite (autocast, half)'] = f"{half['autocast']}, {half['half']}"
    with torch.no_grad():
        a, b, c = (model(normalise_photo(img, size)) for img, size in
                   ((images[0], (512, 512)), (images[0], (1024, 1024)),
                    (images[1], (512, 512))))
    row['same photo 512²/1024²'] = fmt([centred_similarity(x, y) for x, y in zip(a, b)], '.2f')
    row['two photos'] = fmt([centred_similarity(x, y) for x, y in zip(a, c)], '.2f')

    gen = torch.Generator().manual_seed(0)
    batches = [photo_crops(images, 64, 2, gen) for _ in range(8)]
    model = build(family, arch, drop_path_rate=0.0)
    brief_training(model, batches, steps=steps, lr=1e-3)
    crops = torch.cat(batches)
    row[f'max per stage, {steps} steps'] = fmt(per_stage(
        block_activation_max(model.eval(), small_photo)))
    row['train/eval gap (BN batch stats)'] = fmt(train_eval_gap(model, crops), '.2f')
    row['train/eval gap (paths)'] = fmt(train_eval_gap(model, crops, batch_stats=False), '.0e')
    return row


def main():
    args = parse_args()
    images = photos()
    rows = []
    for family in args.families:
        rows.append(report(family, args.arch, args.steps, images))
        print_log(f'{family}: {rows[-1]}', logger='current')
    keys = list(rows[0])
    lines = ['| ' + ' | '.join(keys) + ' |', '|' + '---|' * len(keys)]
    lines += ['| ' + ' | '.join(row[k] for k in keys) + ' |' for row in rows]
    text = '\n'.join(lines)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text + '\n')


if __name__ == '__main__':
    main()
