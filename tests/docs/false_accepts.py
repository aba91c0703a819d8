"""How often a wrong figure would pass the docs test: every figure the pages state is replaced,
one at a time, by a random one-decimal number from 0.0 to 99.9 (with the figure's unit), and
checked as the test checks it.  The old rule (a figure passes when it equals any number in any
file under records/, or a hundredth of one) is measured on the same random numbers.

    python tests/docs/false_accepts.py [--trials N] [--seed S]
"""
import argparse
import glob
import os.path as osp
import random
import re

import docs_check as dc  # this folder is sys.path[0] when run as a script
import figures as fg

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def old_rule_numbers(root):
    """Every number in every record, as the old rule read them."""
    values = []
    for path in glob.glob(osp.join(root, 'records', '**', '*'), recursive=True):
        if path.endswith(('.json', '.csv', '.md', '.txt')) and osp.isfile(path):
            values.extend(float(x) for x in
                          re.findall(r'-?\d+\.\d+(?:[eE]-?\d+)?', open(path).read()))
    return values


def old_rule_accepts(value: str, numbers) -> bool:
    target = float(value)
    return any(abs(round(s, 1) - target) < 1e-4 for x in numbers for s in (x, x * 100))


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--trials', type=int, default=3, help='random numbers per figure')
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    old_numbers = old_rule_numbers(ROOT)
    counts = {'bound': [0, 0], 'table': [0, 0], 'unbound': [0, 0], 'old': [0, 0]}
    for page in dc.pages(ROOT):
        text = open(page).read()
        for block, scope, fig, refs in fg.bound_figures(text, osp.dirname(page), ROOT):
            if scope.table is not None:  # each cell's figures, changed in place
                script, name = scope.table
                for row, line in enumerate(block.lines[2:], 2):
                    for m in re.finditer(r'(?<![\w.])\d+\.\d+(?![\w.])', line):
                        for _ in range(args.trials):
                            new = f'{rng.randrange(1000) / 10:.1f}'
                            lines = list(block.lines)
                            lines[row] = line[:m.start()] + new + line[m.end():]
                            changed = fg.Block(block.kind, block.start, lines, block.section)
                            passed = not fg._table_problems(changed, script, name, ROOT)
                            counts['table'][0] += passed and new != m.group()
                            counts['table'][1] += 1
                continue
            if fig is None:
                continue
            numbers = [x for path, key in refs for x in fg.record_values(ROOT, path, key)]
            for _ in range(args.trials):
                new = f'{rng.randrange(1000) / 10:.1f}'
                if new == fig.value:
                    continue
                wrong = fg.Figure(new, fig.unit, fig.line, fig.needs_record)
                kind = 'bound' if refs else 'unbound'
                passed = fg.resolves(wrong, numbers) if refs else not fig.needs_record
                counts[kind][0] += passed
                counts[kind][1] += 1
                counts['old'][0] += old_rule_accepts(new, old_numbers)
                counts['old'][1] += 1
    total = [sum(counts[k][i] for k in ('bound', 'table', 'unbound')) for i in (0, 1)]
    for kind, (passed, tried) in list(counts.items()) + [('all, new rule', total)]:
        print(f'{kind:>14}: {passed} of {tried} random figures pass '
              f'({100 * passed / max(tried, 1):.1f} %)')


if __name__ == '__main__':
    main()
