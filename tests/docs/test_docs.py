"""The pages keep true: every path, config, link and command-line flag that README.md and
docs/ name exists, every accuracy figure a page states as ours is in a record under records/,
every docs page that code names exists, and the README stays a front door.  The checker
itself is shown failing on made-up pages (tests/docs/docs_check.py)."""
import os.path as osp
import re

import pytest

import docs_check as dc
from repo_paths import ROOT, load_tool

PAGES = dc.pages(ROOT)


def _id(path):
    return osp.relpath(path, ROOT)


@pytest.fixture(scope='module')
def record_numbers():
    return dc.record_numbers(ROOT)


@pytest.mark.parametrize('page', PAGES, ids=_id)
def test_every_link_path_and_flag_exists(page):
    problems = dc.check_page(page, ROOT)
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('page', PAGES, ids=_id)
def test_every_metric_comes_from_a_record(page, record_numbers):
    problems = dc.check_metrics(open(page).read(), record_numbers)
    assert not problems, '\n'.join(problems)


def test_the_docs_pages_that_code_names_exist():
    problems = dc.code_doc_references(ROOT)
    assert not problems, '\n'.join(problems)


def test_readme_is_a_front_door():
    lines = open(osp.join(ROOT, 'README.md')).read().splitlines()
    assert len(lines) <= 150, f'README.md has {len(lines)} lines (at most 150)'
    dated = [ln for ln in lines if re.search(r'\b20\d\d-\d\d-\d\d\b|EPYC|Xeon|\bmin \d+ s\b', ln)]
    assert not dated, 'README.md names dates, machines or timings:\n' + '\n'.join(dated)


def test_the_checker_finds_each_kind_of_problem(tmp_path):
    """A made-up page with one problem of each kind, next to a clean one: each is reported."""
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'tools').mkdir()
    (tmp_path / 'records').mkdir()
    (tmp_path / 'tools' / 'train.py').write_text("parser.add_argument('--work-dir')\n")
    (tmp_path / 'records' / 'run.json').write_text('{"bbox_mAP": 0.3691}')
    (tmp_path / 'docs' / 'other.md').write_text('# Other page\n\n## A section\n')
    good = ('See [other](other.md#a-section).\n\n```bash\npython tools/train.py cfg.py '
            '--work-dir w\n```\n\n| model | bbox mAP | paper AP |\n|---|---|---|\n'
            '| ours | 0.369 | 44.1 |\n')
    bad = ('See [gone](gone.md) and [other](other.md#no-such-section).\n\n'
           '```bash\npython tools/train.py cfg.py --no-such-flag\n'
           'python tools/missing.py\n```\n\nIt reached bbox mAP 0.412 on `records/none.json`.\n')
    numbers = dc.record_numbers(str(tmp_path))
    page_dir = str(tmp_path / 'docs')
    (tmp_path / 'docs' / 'good.md').write_text(good)
    (tmp_path / 'docs' / 'bad.md').write_text(bad)
    assert dc.check_page(osp.join(page_dir, 'good.md'), str(tmp_path), numbers) == []
    problems = dc.check_page(osp.join(page_dir, 'bad.md'), str(tmp_path), numbers)
    expected = ["link 'gone.md'", "link 'other.md#no-such-section'", 'has no flag --no-such-flag',
                "path 'tools/missing.py'", "path 'records/none.json'",
                'metric 0.412']
    for kind in expected:
        assert any(kind in p for p in problems), (kind, problems)
    assert len(problems) == len(expected), problems


def test_supported_stacks_table_states_each_lanes_verified_versions():
    """docs/get_started.md's table of the two stacks names, per lane column, the versions of
    that lane's constraints file (requirements/lanes.txt), for torch and the whole stack."""
    check_env = load_tool('tools/misc/check_env.py')
    lanes = check_env.read_lanes()
    text = open(osp.join(ROOT, 'docs', 'get_started.md')).read()
    section = text.split('## Supported stacks', 1)[1].split('\n## ', 1)[0]
    rows = [[c.strip() for c in line.strip().strip('|').split('|')]
            for line in section.splitlines() if line.startswith('|') and '---' not in line]
    assert rows and all(len(r) == 1 + len(lanes) for r in rows), rows
    for column, (lane, spec) in enumerate(lanes.items(), start=1):
        pins = check_env.pinned(spec['constraints'])
        stated = {}
        for row in rows:
            label, cell = row[0], row[column]
            names = [n.strip() for n in label.split('/')]
            versions = re.findall(r'(?:^|[\s/])(\d+\.\d+[\w.]*)', cell)
            named = re.findall(r'([a-z][\w-]*) (\d+\.\d+[\w.]*)', cell)
            if named:
                stated.update({n.lower(): v for n, v in named})
            elif len(names) == len(versions) and all(n in pins for n in names):
                stated.update(zip(names, versions))
        for dist in ['torch', 'torchvision', 'timm', 'numpy', *spec['dists'].values()]:
            assert stated.get(dist) == pins[dist], (lane, dist, stated.get(dist), pins[dist])
