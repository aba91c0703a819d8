"""Figures bound to the records a page cites (contributing.md, "Records").

A page is cut into blocks: paragraphs, list items and tables.  A figure in a block is resolved
against the records that block is bound to, and against nothing else:

- a ``<!-- figures: ... -->`` comment on the line before the block binds it: records with an
  optional key path (``records/a.json#runs[family=ldn].peak_mb``; ``#a.x/a.y``: the ratios of
  two key paths' numbers, item by item), tables a script makes from
  records (``dev/x.py:NAME``, for figures derived from them, such as ratios), ``table dev/x.py
  NAME`` (the table below is that script's table, compared line by line) or ``none: why`` (the
  block states no measurement: arithmetic, definitions);
- else the records the block links or names (a table row that links records: those; a table
  also takes those of the paragraphs just before and after it, where its caption is);
- else the records cited in its section (heading to next heading).

A figure is a number outside code: in prose, a decimal or a number with a unit (GiB, s,
0.85x, 330 tests, ...); in a bound table's cells (not the first column), every number.
Accuracy figures (mAP, mIoU) and decimals with a unit must be bound even where no record is
cited; other numbers are checked only in bound blocks.  Cells, rows, columns and sentences
that say "paper" (or name a paper's "Table N") hold the paper's figures and are skipped.  A
tolerance (``to 1e-12``) must be one the test files its block (or else the last block before
it in its section that names some) names assert.
"""
import csv
import io
import json
import os.path as osp
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

BIND = re.compile(r'^\s*<!--\s*figures:\s*(.*?)\s*-->\s*$')
LINK_TARGET = re.compile(r'\]\(([^)\s]+)\)')
RECORD_TOKEN = re.compile(r'(?<![\w./-])(records/[\w./-]+\.(?:json|csv|md|txt))')
TEST_TOKEN = re.compile(r'(?<![\w./-])(tests/[\w./-]+\.py)')
#: a tolerance: ``1e-N`` after "to", "within", "below", "<", "assert" ... (not ``lr 1e-3``)
TOLERANCE = re.compile(r'(?:\bto|within|below|under|<|≤|assert\w*|at most|\band|\bor)\s+'
                       r'(1e-\d+)(?![\w.])')
UNIT = r'(?:\s?(GiB|MiB|GB|MB|ms|min_s|s|min|%|tests)|(x))'
#: a figure: a number, with its unit when one follows (``6.3 GiB``, ``0.85x``, ``114 s``)
FIGURE = re.compile(r'(?<![\w.\-/^])(\d+(?:\.\d+)?)(?!\.\d)(?:' + UNIT + r')?(?![\w²/-]|\.\w)')
METRIC_WORD = re.compile(r'\b(?:bbox mAP|mask mAP|box AP|mask AP|mAP|AP50|AP75|mIoU|AP)\b')
PAPER = re.compile(r"paper(?!'s (?:rule|landmark|Newton))|Table \d", re.I)
#: a version, not a figure: ``Python 3.12``, ``torch 2.14``
VERSION_BEFORE = re.compile(r'(?:[Pp]ython|torch\w*|numpy|timm|mm\w+|CUDA|glibc|[<>=]=?)\s*$')
#: a duration in minutes and seconds, one figure in seconds
DURATION = re.compile(r'(?<![\w.])(\d+) min (\d+) s\b')
SCALES = {None: (1, 100), '%': (100,), 'GiB': (1, 1 / 1024, 1 / 1024 ** 3),
          'MiB': (1, 1 / 1024 ** 2), 'GB': (1, 1 / 1000, 1 / 1024), 'MB': (1,),
          's': (1, 1 / 1000), 'min_s': (1,), 'tests': (1,), 'ms': (1, 1000), 'min': (1, 1 / 60),
          'x': (1,)}


@dataclass
class Block:
    kind: str  # 'text' | 'table' | 'bind'
    start: int  # first line, 1-based
    lines: List[str]
    section: int
    binding: Optional[str] = None

    @property
    def text(self) -> str:
        return '\n'.join(self.lines)


@dataclass
class Figure:
    value: str
    unit: Optional[str]
    line: int
    needs_record: bool  # an accuracy figure or one with a unit: must resolve somewhere


@dataclass
class Scope:
    refs: List[Tuple[str, str]] = field(default_factory=list)  # (record path, key path)
    table: Optional[Tuple[str, str]] = None  # (script, name)
    none: Optional[str] = None


def blocks(text: str) -> List[Block]:
    """Paragraphs, list items and tables, outside fenced code; headings start sections."""
    out: List[Block] = []
    section, in_code, current = 0, False, None
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith('```'):
            in_code, current = not in_code, None
            continue
        if in_code:
            continue
        if re.match(r'#{1,6}\s', line):
            section, current = section + 1, None
            continue
        bind = BIND.match(line)
        if bind:
            out.append(Block('bind', n, [line], section, bind.group(1)))
            current = None
            continue
        if not line.strip():
            current = None
            continue
        kind = 'table' if line.lstrip().startswith('|') else 'text'
        new_item = kind == 'text' and re.match(r'\s*(?:[-*]|\d+\.)\s', line)
        if current is None or current.kind != kind or new_item:
            current = Block(kind, n, [], section)
            out.append(current)
        current.lines.append(line)
    return out


def _plain(line: str) -> str:
    """Prose without code spans, link targets and HTML comments."""
    line = re.sub(r'`[^`]*`', ' ', line)
    line = LINK_TARGET.sub('] ', line)
    line = re.sub(r'(\d)[-–](?=\d)', r'\1 – ', line)  # a range: both ends are figures
    line = re.sub(r'(?<![\d.])(\d{1,3})((?: \d{3})+)(?![\d.])',  # 65 536: one number
                  lambda m: m.group(1) + m.group(2).replace(' ', ''), line)
    return re.sub(r'<!--.*?-->', ' ', line)


def _figures_in(text: str, line: int, all_numbers: bool) -> List[Figure]:
    found = []
    text = DURATION.sub(lambda m: f'{int(m.group(1)) * 60 + int(m.group(2))} min_s', text)
    for sentence in re.split(r'(?<=[.;:])\s', text):
        if PAPER.search(sentence):
            continue
        metric = bool(METRIC_WORD.search(sentence))
        for m in FIGURE.finditer(sentence):
            value, unit = m.group(1), m.group(2) or m.group(3)
            if VERSION_BEFORE.search(sentence[:m.start()]) \
                    or re.fullmatch(r'\d{4}\.\d{4,5}', value):  # a version, an arXiv id
                continue
            if not (all_numbers or unit or '.' in value):
                continue
            near_metric = metric and any(abs(w.start() - m.start()) < 30
                                         for w in METRIC_WORD.finditer(sentence))
            found.append(Figure(value, unit, line, near_metric or bool(unit) and '.' in value))
    return found


def figures(block: Block, bound: bool) -> List[Figure]:
    """The figures a block states (see the module's docstring)."""
    if block.kind == 'bind':
        return []
    if block.kind == 'text':
        out = []
        for i, line in enumerate(block.lines):
            out += _figures_in(_plain(line), block.start + i, False)
        return out
    rows = [[c.strip() for c in ln.strip().strip('|').split('|')] for ln in block.lines]
    if len(rows) < 2 or not re.match(r'^[\s:|-]+$', block.lines[1]):
        return []
    header, out = rows[0], []
    metric_cols = {i for i, c in enumerate(header) if METRIC_WORD.search(c)}
    for r, row in enumerate(rows[2:], 2):
        if PAPER.search(row[0] if row else ''):
            continue
        for c, cell in enumerate(row[1:], 1):
            if c < len(header) and PAPER.search(header[c]) or PAPER.search(cell):
                continue
            for f in _figures_in(_plain(cell), block.start + r, bound):
                f.needs_record = f.needs_record or c in metric_cols
                out.append(f)
    return out


def _cited(text: str, page_dir: str, root: str) -> List[Tuple[str, str]]:
    refs = []
    for target in LINK_TARGET.findall(text):
        path, _, anchor = target.partition('#')
        full = osp.normpath(osp.join(page_dir, path))
        rel = osp.relpath(full, root)
        if rel.startswith('records' + osp.sep) and osp.isfile(full):
            refs.append((rel, ''))
    refs += [(tok, '') for tok in RECORD_TOKEN.findall(text)
             if osp.isfile(osp.join(root, tok))]
    return list(dict.fromkeys(refs))


def parse_binding(spec: str) -> Scope:
    spec = spec.strip()
    if spec.startswith('none'):
        return Scope(none=spec.partition(':')[2].strip() or '(no reason given)')
    if spec.startswith('table '):
        script, name = spec.split()[1:3]
        return Scope(table=(script, name))
    refs = []
    for item in spec.split():
        path, _, key = item.partition('#')
        refs.append((path, key))
    return Scope(refs=refs)


def scopes(page_blocks: List[Block], page_dir: str, root: str) -> Dict[int, Scope]:
    """Each block's scope, by its index."""
    cited = [_cited(b.text, page_dir, root) for b in page_blocks]
    by_section: Dict[int, list] = {}
    for b, refs in zip(page_blocks, cited):
        by_section.setdefault(b.section, []).extend(refs)
    out = {}
    for i, b in enumerate(page_blocks):
        prev = page_blocks[i - 1] if i else None
        if prev is not None and prev.kind == 'bind' and prev.start == b.start - 1:
            out[i] = parse_binding(prev.binding)
            continue
        refs = list(cited[i])
        if b.kind == 'table' and not refs:
            for j in (i - 1, i + 1):
                if 0 <= j < len(page_blocks) and page_blocks[j].kind == 'text' \
                        and page_blocks[j].section == b.section:
                    refs += cited[j]
        out[i] = Scope(refs=refs or list(dict.fromkeys(by_section.get(b.section, []))))
    return out


def _walk(node, key_path: str):
    """The part of a parsed JSON record a key path names: ``a.b[k=v].c``; ``[k=v]`` keeps the
    items whose ``k`` is ``v``, ``*`` every item, a number one item of a list."""
    nodes = [node]
    for part in re.findall(r'[^.\[\]]+|\[[^\]]*\]', key_path):
        nxt = []
        for n in nodes:
            if part.startswith('['):
                conds = [c.split('=', 1) for c in part[1:-1].split(',')]
                items = n if isinstance(n, list) else \
                    list(n.values()) if isinstance(n, dict) else []
                nxt += [it for it in items if isinstance(it, dict)
                        and all(str(it.get(k)) == v for k, v in conds)]
            elif part == '*':
                nxt += list(n.values()) if isinstance(n, dict) else list(n) \
                    if isinstance(n, list) else []
            elif isinstance(n, dict) and part in n:
                nxt.append(n[part])
            elif isinstance(n, list) and part.isdigit() and int(part) < len(n):
                nxt.append(n[int(part)])
        nodes = nxt
    return nodes


def _numbers_of(node, out: List[float]):
    if isinstance(node, bool):
        return
    if isinstance(node, (int, float)):
        out.append(float(node))
    elif isinstance(node, dict):
        for v in node.values():
            _numbers_of(v, out)
    elif isinstance(node, list):
        for v in node:
            _numbers_of(v, out)
    elif isinstance(node, str):
        out.extend(float(x) for x in re.findall(r'-?\d+(?:\.\d+)?(?:[eE]-?\d+)?', node))


@lru_cache(maxsize=None)
def record_values(root: str, path: str, key: str = '') -> Tuple[float, ...]:
    """The numbers of one record, or of the part of it that ``key`` names: a JSON key path, a
    CSV column, a markdown record's line range ``L3-L9`` or the sections whose heading starts
    with the key (``records/README.md#Training``)."""
    out: List[float] = []
    if '.py:' in path:  # a table a script makes from its records
        script, name = path.split(':', 1)
        _numbers_of('\n'.join(generated_table(root, script, name)), out)
        return tuple(out)
    full = osp.join(root, path)
    if not osp.isfile(full):
        raise FileNotFoundError(path)
    text = open(full).read()
    if path.endswith('.json'):
        data = json.loads(text.replace('Infinity', '1e999').replace('NaN', 'null'))
        if '/' in key:  # a ratio: item by item, of two key paths' numbers in the same order
            over, under = ([], [])
            for part, into in zip(key.split('/', 1), (over, under)):
                for node in _walk(data, part):
                    _numbers_of(node, into)
            return tuple(a / b for a, b in zip(over, under) if b)
        for node in (_walk(data, key) if key else [data]):
            _numbers_of(node, out)
    elif path.endswith('.csv') and key:
        for row in csv.DictReader(io.StringIO(text)):
            _numbers_of(row.get(key, ''), out)
    else:
        lines = text.splitlines()
        m = re.match(r'L(\d+)(?:-L?(\d+))?$', key)
        if m:
            lines = lines[int(m.group(1)) - 1:int(m.group(2) or m.group(1))]
        elif key:  # the sections whose heading starts with the key
            keep, kept = False, []
            for line in lines:
                if line.startswith('#'):
                    keep = line.lstrip('#').strip().startswith(key)
                elif keep:
                    kept.append(line)
            lines = kept
        _numbers_of('\n'.join(lines), out)
    return tuple(out)


def resolves(fig: Figure, numbers) -> bool:
    decimals = len(fig.value.split('.')[1]) if '.' in fig.value else 0
    target = float(fig.value)
    tol = 10 ** -(decimals + 3) if decimals else 1e-9
    if fig.unit == 'min_s':  # stated to the second, truncated or rounded
        tol = 1
    for x in numbers:
        for s in SCALES.get(fig.unit, (1,)):
            if abs((x * s if fig.unit == 'min_s' else round(x * s, decimals)) - target) < tol:
                return True
    return False


def _tests_named(text: str, root: str) -> List[str]:
    return [t for t in TEST_TOKEN.findall(text) if osp.isfile(osp.join(root, t))]


def check_tolerances(block: Block, root: str, lead_in=()) -> List[str]:
    """Each ``1e-N`` of a block is a tolerance one of the test files it names asserts (where it
    names none, as a list item under its lead-in, those the last block before it named)."""
    text = block.text
    tests = _tests_named(text, root) or list(lead_in)
    if not tests:
        return []
    sources = ''.join(open(osp.join(root, t)).read() for t in tests)
    return [f'line {block.start}: tolerance {tol} is asserted in none of {", ".join(tests)}'
            for tol in sorted(set(TOLERANCE.findall(_plain(text))))
            if not re.search(rf'(?<![\w.]){re.escape(tol)}(?![\d])', sources)]


@lru_cache(maxsize=None)
def generated_table(root: str, script: str, name: str) -> Tuple[str, ...]:
    import importlib.util
    if not osp.isfile(osp.join(root, script)):
        raise FileNotFoundError(script)
    spec = importlib.util.spec_from_file_location(osp.basename(script)[:-3], osp.join(root, script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.markdown(name).splitlines())


def _table_problems(block: Block, script: str, name: str, root: str) -> List[str]:
    want = list(generated_table(root, script, name))
    for n, (a, b) in enumerate(zip(block.lines, want)):
        if a.strip() != b.strip():
            return [f'line {block.start + n}: table differs from {script} {name}:\n'
                    f'  page:    {a}\n  records: {b}']
    if len(block.lines) != len(want):
        return [f'line {block.start}: table has {len(block.lines)} lines, {script} {name} '
                f'gives {len(want)}']
    return []


def bound_figures(text: str, page_dir: str, root: str):
    """``(block, scope, figure, refs)`` for each figure of a page that is not in a generated
    table (``figure`` is None for a block bound to a table or to nothing)."""
    page_blocks = blocks(text)
    for i, scope in scopes(page_blocks, page_dir, root).items():
        block = page_blocks[i]
        if scope.none is not None or scope.table is not None:
            yield block, scope, None, []
            continue
        prev = page_blocks[i - 1] if i else None
        by_comment = prev is not None and prev.kind == 'bind' and prev.start == block.start - 1
        for fig in figures(block, bool(scope.refs)):
            refs = scope.refs
            if block.kind == 'table' and not by_comment:  # a row that cites records: its own
                refs = _cited(block.lines[fig.line - block.start], page_dir, root) or refs
            yield block, scope, fig, refs


def check_figures(text: str, page_dir: str, root: str) -> List[str]:
    """Every figure of a page against the records its block is bound to."""
    problems = []
    page_blocks = blocks(text)
    lead_in: List[str] = []  # the test files of the last block that named some, this section
    for i, scope in scopes(page_blocks, page_dir, root).items():
        block = page_blocks[i]
        if i and block.section != page_blocks[i - 1].section:
            lead_in = []
        problems += check_tolerances(block, root, lead_in)
        lead_in = _tests_named(block.text, root) or lead_in
        if scope.table is not None:
            problems += _table_problems(page_blocks[i], *scope.table, root)
    for block, scope, fig, refs in bound_figures(text, page_dir, root):
        if fig is None:
            continue
        try:
            numbers = [x for path, key in refs for x in record_values(root, path, key)]
        except FileNotFoundError as e:
            problems.append(f'line {block.start}: bound to {e.args[0]}, which does not exist')
            continue
        stated = fig.value + (f' {fig.unit}' if fig.unit else '')
        if fig.unit == 'min_s':
            stated = f'{int(fig.value) // 60} min {int(fig.value) % 60} s'
        if not refs and fig.needs_record:
            problems.append(f'line {fig.line}: figure {stated} cites no record (link the '
                            'record or add <!-- figures: records/... --> before the block)')
        elif refs and not resolves(fig, numbers):
            where = ', '.join(p + (f'#{k}' if k else '') for p, k in refs)
            problems.append(f'line {fig.line}: figure {stated} is not in {where}')
    return list(dict.fromkeys(problems))
