"""What the docs test checks on a page of README.md, CHANGELOG.md or docs/: every relative link
(and its #anchor), every repository path, every command-line flag of a repository tool, and
every accuracy figure (mAP, AP50, mIoU) that is not marked as a paper's, which must be found in
a file under records/.  Plain text in, a list of problems out, so that the test can show each
rule failing on a made-up page."""
import glob
import json
import os
import os.path as osp
import re
from typing import Iterable, List, Optional, Sequence

#: top-level folders whose paths a page may name
PATH_ROOTS = ('configs/', 'tools/', 'docs/', 'records/', 'mmlinattn/', 'data/photos/', 'dev/',
              'demo/', 'tests/', 'requirements/', '.ci/')
#: a token is a placeholder, not a path, when it holds any of these
PLACEHOLDER = re.compile(r'[<>*{}$\[\]]|\.\.\.|NAME|CONFIG|CKPT|/x/|WORK_DIR')
LINK = re.compile(r'!?\[[^\]]*\]\(([^)\s]+)\)')
CODE_SPAN = re.compile(r'`([^`\n]+)`')
PATH_TOKEN = re.compile(r'(?<![\w./-])((?:' + '|'.join(re.escape(r) for r in PATH_ROOTS)
                        + r')[^\s`\'"),|]*)')
TOOL_CALL = re.compile(r'(?:python3?|bash)\s+((?:tools|demo|dev)/[\w./-]+\.(?:py|sh))(.*)')
FLAG = re.compile(r'(?<![\w-])(--[a-z][\w-]*)')
METRIC_WORD = re.compile(r'\b(?:bbox mAP|mask mAP|box AP|mask AP|mAP|AP50|AP75|mIoU|AP)\b')
NUMBER = re.compile(r'(?<![\w.])(\d+\.\d+)(?![\w.])')
PAPER = re.compile(r'paper', re.I)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r'[`*_]', '', heading.strip().lower())
    text = re.sub(r'[^\w\- ]', '', text)
    return text.replace(' ', '-')


def anchors(text: str) -> set:
    return {slug(m.group(1)) for m in re.finditer(r'(?m)^#{1,6}\s+(.+?)\s*#*$', text)}


def _logical_lines(text: str) -> List[str]:
    """Lines with shell continuations (a trailing backslash) joined."""
    return text.replace('\\\n', ' ').splitlines()


def check_links(text: str, page_dir: str, root: str) -> List[str]:
    problems = []
    for target in LINK.findall(text):
        if re.match(r'[a-z]+:', target) or target.startswith('#') and not target[1:]:
            continue
        path, _, anchor = target.partition('#')
        full = osp.normpath(osp.join(page_dir, path)) if path else None
        if full is not None and not osp.exists(full):
            problems.append(f'link {target!r}: {osp.relpath(full, root)} does not exist')
            continue
        if anchor:
            doc = full if full else None
            if doc and not doc.endswith('.md'):
                continue
            body = open(doc).read() if doc else text
            if anchor not in anchors(body):
                problems.append(f'link {target!r}: no heading with anchor #{anchor}')
    return problems


def _code_texts(text: str) -> Iterable[str]:
    """The text of fenced code blocks and inline code spans."""
    for block in re.findall(r'(?ms)^```[^\n]*\n(.*?)^```', text):
        yield block
    outside = re.sub(r'(?ms)^```[^\n]*\n.*?^```', '', text)
    yield from CODE_SPAN.findall(outside)


def check_paths(text: str, root: str) -> List[str]:
    problems = []
    for code in _code_texts(text):
        for token in PATH_TOKEN.findall(code):
            token = token.rstrip('.,;:')
            if PLACEHOLDER.search(token) or token.endswith('/<'):
                continue
            if not osp.exists(osp.join(root, token)):
                problems.append(f'path {token!r} does not exist')
    return problems


def check_flags(text: str, root: str) -> List[str]:
    problems = []
    for code in _code_texts(text):
        for line in _logical_lines(code):
            line = line.split('#', 1)[0] if ' #' in line else line
            match = TOOL_CALL.search(line)
            if not match:
                continue
            script, rest = match.groups()
            rest = rest.split('|')[0].split('&&')[0].split(';')[0]
            path = osp.join(root, script)
            if not osp.exists(path):  # reported by check_paths
                continue
            source = open(path).read()
            for flag in FLAG.findall(rest):
                if (f"'{flag}'" not in source and f'"{flag}"' not in source
                        and not re.search(rf'(?<![\w-]){re.escape(flag)}(?![\w-])', source)):
                    problems.append(f'{script} has no flag {flag}')
    return problems


def record_numbers(root: str) -> List[float]:
    """Every number in every record (JSON, CSV, markdown) under records/."""
    values = []
    for path in glob.glob(osp.join(root, 'records', '**', '*'), recursive=True):
        if not path.endswith(('.json', '.csv', '.md', '.txt')) or not osp.isfile(path):
            continue
        values.extend(float(x) for x in re.findall(r'-?\d+\.\d+(?:[eE]-?\d+)?', open(path).read()))
    return values


def _in_records(value: str, numbers: Sequence[float]) -> bool:
    decimals = len(value.split('.')[1])
    target = float(value)
    for x in numbers:
        for scaled in (x, x * 100):
            if abs(round(scaled, decimals) - target) < 10 ** -(decimals + 3):
                return True
    return False


def _table_metric_columns(header: List[str]) -> List[int]:
    return [i for i, cell in enumerate(header)
            if METRIC_WORD.search(cell) and not PAPER.search(cell)]


def metric_figures(text: str) -> List[str]:
    """Accuracy figures the page states as its own (not a paper's): numbers in a table column
    whose header names a metric, and numbers next to a metric word in prose."""
    figures = []
    lines = text.splitlines()
    in_code = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith('```'):
            in_code = not in_code
        elif not in_code and line.startswith('|') and i + 1 < len(lines) \
                and re.match(r'^\|[\s:|-]+\|\s*$', lines[i + 1]):
            header = [c.strip() for c in line.strip('|').split('|')]
            cols = _table_metric_columns(header)
            i += 2
            while i < len(lines) and lines[i].startswith('|'):
                cells = [c.strip() for c in lines[i].strip('|').split('|')]
                if not PAPER.search(cells[0] if cells else ''):
                    for c in cols:
                        if c < len(cells) and not PAPER.search(cells[c]):
                            figures.extend(NUMBER.findall(cells[c]))
                i += 1
            continue
        elif not in_code and not PAPER.search(line):
            for sentence in re.split(r'(?<=[.;])\s', line):
                if not METRIC_WORD.search(sentence):
                    continue
                for m in re.finditer(METRIC_WORD, sentence):
                    window = sentence[max(0, m.start() - 25):m.end() + 25]
                    figures.extend(n for n in NUMBER.findall(window)
                                   if float(n) <= 100)
        i += 1
    return sorted(set(figures))


def check_metrics(text: str, numbers: Sequence[float]) -> List[str]:
    return [f'metric {value} is in no file under records/'
            for value in metric_figures(text) if not _in_records(value, numbers)]


def pages(root: str) -> List[str]:
    found = [osp.join(root, 'README.md'), osp.join(root, 'CHANGELOG.md')]
    found += sorted(glob.glob(osp.join(root, 'docs', '**', '*.md'), recursive=True))
    return [p for p in found if osp.exists(p)]


def check_page(path: str, root: str, numbers: Optional[Sequence[float]] = None) -> List[str]:
    text = open(path).read()
    problems = check_links(text, osp.dirname(path), root) + check_paths(text, root) \
        + check_flags(text, root)
    if numbers is not None:
        problems += check_metrics(text, numbers)
    return problems


def code_doc_references(root: str) -> List[str]:
    """``docs/...`` pages named by code, configs and tools (their hints must lead somewhere)."""
    problems = []
    for folder in ('mmlinattn', 'tools', 'configs', 'demo', 'dev'):
        for path in glob.glob(osp.join(root, folder, '**', '*.*'), recursive=True):
            if not path.endswith(('.py', '.sh')):
                continue
            for ref in re.findall(r'docs/[\w/.-]*\.md', open(path).read()):
                if not osp.exists(osp.join(root, ref)):
                    problems.append(f'{osp.relpath(path, root)} names {ref}, which does not exist')
    return problems


if __name__ == '__main__':  # python tests/docs/docs_check.py: every problem on every page
    here = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
    nums = record_numbers(here)
    for page in pages(here):
        for problem in check_page(page, here, nums):
            print(f'{osp.relpath(page, here)}: {problem}')
    for problem in code_doc_references(here):
        print(problem)
    print(json.dumps({'pages': len(pages(here))}))
