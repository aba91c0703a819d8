"""Parameters and GMACs at 224x224 of the mmlinattn timm classifiers, next to the papers.

    python tools/analysis_tools/timm_model_stats.py            # every registered model
    python tools/analysis_tools/timm_model_stats.py soft_small ldn_tiny --size 224
    python tools/analysis_tools/timm_model_stats.py nalaformer_tiny \\
        --model-kwargs attn_types=official
    python tools/analysis_tools/timm_model_stats.py --json records/timm_model_stats_224.json

GMACs are ``torch.utils.flop_counter.FlopCounterMode`` totals / 2 (it counts a multiply-add
as 2 FLOPs; matmuls, convolutions and attention only, no element-wise ops), batch 1, eval
mode, 1000-class head included; papers' "FLOPs" are MACs by convention.  For SOFT the
Newton-Schulz iterations are also reported separately: the total is affine in the iteration
count T, so ``2 f(1) - f(2)`` is the cost without the loop, which is how the paper counts
(its reported FLOPs match Swin's only without the loop).
"""
import argparse
import ast
import json
import platform
import sys
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

# (params M, GFLOPs) from each paper's ImageNet table, 1000-class head included.
PAPER = {
    'soft_tiny': (13, 1.9), 'soft_small': (27, 4.5), 'soft_medium': (48, 8.7),
    'soft_large': (85, 15.4),
    'nalaformer_tiny': (15, 2.7), 'nalaformer_small': (26, 5.1),
    'nalaformer_base': (52, 11.8), 'nalaformer_large': (95, 17.7),
    'infvit_plain_linear_l4': (53.5, 59.0), 'infvit_plain_pure_l4': (57.7, 59.0),
    'infvit_plain_linear_l24': (305.4, None), 'infvit_plain_pure_l24': (330.6, None),
    'infvit_plain_linear_l4_wide': (53.5, 59.0), 'infvit_plain_pure_l4_wide': (57.7, 59.0),
    'infvit_plain_linear_l24_wide': (305.4, None), 'infvit_plain_pure_l24_wide': (330.6, None),
}


def gmacs(model: torch.nn.Module, size: int) -> float:
    model.eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.randn(1, 3, size, size))
    return counter.get_total_flops() / 2e9


def stats(name: str, size: int, **kwargs) -> dict:
    import timm
    model = timm.create_model(name, **kwargs)
    params = sum(p.numel() for p in model.parameters())
    backbone = sum(p.numel() for p in model.backbone.parameters())
    row = dict(name=name, params=params / 1e6, backbone=backbone / 1e6,
               gmacs=gmacs(model, size))
    if name.startswith('soft_'):
        f1, f2 = (gmacs(timm.create_model(name, **dict(kwargs, newton_iters=t)), size)
                  for t in (1, 2))
        row['gmacs_no_newton'] = 2 * f1 - f2
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('models', nargs='*', help='model names (default: all registered)')
    parser.add_argument('--size', type=int, default=224, help='input side (default 224)')
    parser.add_argument('--model-kwargs', nargs='*', default=[], metavar='KEY=VALUE',
                        help='extra model arguments (Python literals), as timm train.py')
    parser.add_argument('--json', metavar='PATH',
                        help='also write the rows, the papers\' figures and the command to PATH')
    args = parser.parse_args()
    kwargs = {}
    for item in args.model_kwargs:
        key, _, value = item.partition('=')
        try:
            kwargs[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            kwargs[key] = value
    import timm

    import mmlinattn.timm  # noqa: F401  (registers the models)
    names = args.models or timm.list_models(module='linattn_models')
    torch.set_grad_enabled(False)
    print(f'| model | params M (backbone M) | paper params M | GMACs @{args.size} | paper '
          f'GFLOPs |')
    print('|---|---|---|---|---|')
    rows = []
    for name in names:
        t = time.time()
        r = stats(name, args.size, **kwargs)
        paper = PAPER.get(name, (None, None))
        rows.append(dict(r, paper_params=paper[0], paper_gflops=paper[1]))
        g = f'{r["gmacs"]:.2f}'
        if 'gmacs_no_newton' in r:
            g += f' ({r["gmacs_no_newton"]:.2f} w/o Newton)'
        fmt = (lambda v: '–' if v is None else str(v))
        print(f'| {name} | {r["params"]:.2f} ({r["backbone"]:.2f}) | {fmt(paper[0])} | {g} | '
              f'{fmt(paper[1])} |', flush=True)
        print(f'  ({time.time() - t:.0f} s)', file=sys.stderr)
    if args.json:
        record = dict(what=__doc__.split('\n')[0], size=args.size, model_kwargs=kwargs,
                      command='python ' + ' '.join(sys.argv), date=time.strftime('%Y-%m-%d'),
                      torch=torch.__version__, timm=timm.__version__,
                      python=platform.python_version(), rows=rows)
        with open(args.json, 'w') as f:
            json.dump(record, f, indent=1)
            f.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
