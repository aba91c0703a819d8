"""What the docs test checks on a page of README.md, CHANGELOG.md or docs/: every relative link
(and its #anchor), every repository path, every command-line flag of a repository tool, and
every figure against the records its block cites (figures.py).  Plain text in, a list of
problems out, so that the test can show each rule failing on a made-up page."""
import glob
import json
import os
import os.path as osp
import re
from typing import Iterable, List

from figures import check_figures

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
            token = re.sub(r'(\.py):\w+$', r'\1', token.split('#')[0])  # a key, a script's table
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


def pages(root: str) -> List[str]:
    found = [osp.join(root, 'README.md'), osp.join(root, 'CHANGELOG.md')]
    found += sorted(glob.glob(osp.join(root, 'docs', '**', '*.md'), recursive=True))
    return [p for p in found if osp.exists(p)]


def check_page(path: str, root: str, with_figures: bool = True) -> List[str]:
    text = open(path).read()
    problems = check_links(text, osp.dirname(path), root) + check_paths(text, root) \
        + check_flags(text, root)
    if with_figures:
        problems += check_figures(text, osp.dirname(path), root)
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
    for page in pages(here):
        for problem in check_page(page, here):
            print(f'{osp.relpath(page, here)}: {problem}')
    for problem in code_doc_references(here):
        print(problem)
    print(json.dumps({'pages': len(pages(here))}))
