"""Times every family's ``small`` from two checkouts of this repository side by side: one
worker process per tree (model built, warmed up), stepped alternately in a shuffled order,
medians compared.  For "no slower than before" checks of a refactor on one machine: the two
trees share every drift of the machine's speed.

    python dev/ab_trees.py --before /tmp/old-checkout --after . --rounds 5 \\
        --json ab.json

Prints one row per case: median ms of each tree and after / before.  CPU, float32; batch 1
for inference (1024², 2048²), batch 2 for training (800x1333); SOFT++ with
``max_landmarks=49``.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

WORKER = r'''
import sys, time, torch
torch.set_num_threads(int(sys.argv[6]))
import mmlinattn.models  # noqa: F401
from benchlib.memory import reuse_freed_cpu_memory
from mmlinattn.registry import MODELS
reuse_freed_cpu_memory()
fam, mode, h, w, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.manual_seed(0)
m = MODELS.build(dict(type=fam, arch='small', **(dict(max_landmarks=49) if fam == 'SOFT' else {})))
x = torch.randn(b, 3, h, w)
def step():
    if mode == 'infer':
        with torch.no_grad():
            m.eval()(x)
    else:
        out = m.train()(x)
        sum(o.float().mean() for o in out).backward()
        for p in m.parameters():
            p.grad = None
step()
print('ready', flush=True)
for _ in sys.stdin:
    t = time.perf_counter(); step(); print((time.perf_counter() - t) * 1000, flush=True)
'''
BENCHLIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tools',
                        'analysis_tools')
FAMILIES = ('SOFT', 'NaLaFormer', 'InfViT', 'LDN')
CASES = ([(f, 'infer', 1024, 1024, 1) for f in FAMILIES]
         + [(f, 'infer', 2048, 2048, 1) for f in FAMILIES]
         + [(f, 'train', 800, 1333, 2) for f in FAMILIES])


def run_case(case, trees, rounds, threads):
    procs = {}
    for name, tree in trees.items():
        # the tree's package, this checkout's measuring library (the same for both trees)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(tree), BENCHLIB]))
        procs[name] = subprocess.Popen(
            [sys.executable, '-c', WORKER, *map(str, case), str(threads)], cwd=tree, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if procs[name].stdout.readline().strip() != 'ready':
            raise RuntimeError(f'the {name} worker for {case} did not start (see its error)')
    times = {name: [] for name in trees}
    for _ in range(rounds):
        for name in random.sample(list(trees), len(trees)):
            procs[name].stdin.write('go\n')
            procs[name].stdin.flush()
            times[name].append(float(procs[name].stdout.readline()))
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    median = {name: statistics.median(v) for name, v in times.items()}
    # each round's pair ran back to back: their ratio is free of the machine's drift between
    # rounds, so its median is the steadier figure
    paired = [a / b for a, b in zip(times['after'], times['before'])]
    return dict(case=case, rounds=rounds, ms=times, median=median,
                after_over_before=median['after'] / median['before'],
                paired_median=statistics.median(paired),
                paired_range=[min(paired), max(paired)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--before', required=True, help='checkout of the old code')
    parser.add_argument('--after', default='.', help='checkout of the new code')
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--threads', type=int, default=os.cpu_count() or 1)
    parser.add_argument('--families', nargs='+', default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument('--modes', nargs='+', default=['infer', 'train'],
                        choices=['infer', 'train'])
    parser.add_argument('--json', help='write the rows here')
    args = parser.parse_args()
    random.seed(0)
    trees = {'before': args.before, 'after': args.after}
    rows = []
    for case in CASES:
        if case[0] not in args.families or case[1] not in args.modes:
            continue
        row = run_case(case, trees, args.rounds, args.threads)
        rows.append(row)
        m = row['median']
        print(f'{case[0]:11s} {case[1]} {case[2]}x{case[3]} b{case[4]}: before '
              f"{m['before']:.0f} ms, after {m['after']:.0f} ms, after / before "
              f"{row['after_over_before']:.3f}; paired {row['paired_median']:.3f} "
              f"({row['paired_range'][0]:.3f}-{row['paired_range'][1]:.3f})", flush=True)
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)


if __name__ == '__main__':
    main()
