"""The pages keep true: every path, config, link and command-line flag that README.md and
docs/ name exists, every figure a page states is in the record (or key) its block cites, a
generated table equals its script's output, a quoted tolerance is one the cited tests assert,
every docs page that code names exists, and the README stays a front door.  The checker itself
is shown failing on made-up pages (tests/docs/docs_check.py, tests/docs/figures.py)."""
import json
import os.path as osp
import re

import pytest

import docs_check as dc
import figures as fg
from repo_paths import ROOT, load_tool

PAGES = dc.pages(ROOT)


def _id(path):
    return osp.relpath(path, ROOT)


@pytest.mark.parametrize('page', PAGES, ids=_id)
def test_every_link_path_and_flag_exists(page):
    problems = dc.check_page(page, ROOT, with_figures=False)
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('page', PAGES, ids=_id)
def test_every_figure_is_in_the_records_it_cites(page):
    problems = fg.check_figures(open(page).read(), osp.dirname(page), ROOT)
    assert not problems, '\n'.join(problems)


def test_the_lane_record_ran_the_listed_tests():
    """get_started.md quotes the onedl lane's test count from its record: that record must
    have run exactly the entries of tests/lane_tests.txt, so that the count is of this list."""
    lines = open(osp.join(ROOT, 'tests', 'lane_tests.txt')).read().splitlines()
    listed = [e for e in (line.split('#', 1)[0].strip() for line in lines) if e]
    record = json.load(open(osp.join(ROOT, 'records', 'lanes', 'test_durations_onedl_zen3.json')))
    ran = [a for a in record['args'] if a.startswith('tests/')]
    assert ran == listed, ('tests/lane_tests.txt changed since its recorded run: run the lane '
                           'again and replace the record', ran, listed)


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
            '| ours | 0.369 | 44.1 |\n\n[`records/run.json`](../records/run.json)\n')
    bad = ('See [gone](gone.md) and [other](other.md#no-such-section).\n\n'
           '```bash\npython tools/train.py cfg.py --no-such-flag\n'
           'python tools/missing.py\n```\n\nIt reached bbox mAP 0.412 on `records/none.json`.\n')
    page_dir = str(tmp_path / 'docs')
    (tmp_path / 'docs' / 'good.md').write_text(good)
    (tmp_path / 'docs' / 'bad.md').write_text(bad)
    assert dc.check_page(osp.join(page_dir, 'good.md'), str(tmp_path)) == []
    problems = dc.check_page(osp.join(page_dir, 'bad.md'), str(tmp_path))
    expected = ["link 'gone.md'", "link 'other.md#no-such-section'", 'has no flag --no-such-flag',
                "path 'tools/missing.py'", "path 'records/none.json'",
                'figure 0.412 cites no record']
    for kind in expected:
        assert any(kind in p for p in problems), (kind, problems)
    assert len(problems) == len(expected), problems


def _figure_problems(tmp_path, page: str):
    (tmp_path / 'docs').mkdir(exist_ok=True)
    return fg.check_figures(page, str(tmp_path / 'docs'), str(tmp_path))


def test_a_figure_is_checked_against_only_the_records_its_block_cites(tmp_path):
    """6.3 GiB is in a.json (as MiB) but the second paragraph cites b.json: only the first
    passes; a key path narrows a record to one field; a row that links a record uses it."""
    (tmp_path / 'records').mkdir()
    (tmp_path / 'records' / 'a.json').write_text(
        '{"runs": [{"family": "ldn", "peak_mb": 6451, "seconds": 114.2}], "other": 7.5}')
    (tmp_path / 'records' / 'b.json').write_text('{"x": 1.25}')
    link_a, link_b = '[a](../records/a.json)', '[b](../records/b.json)'
    assert _figure_problems(tmp_path, f'It peaks at 6.3 GiB in 114 s ({link_a}).\n') == []
    problems = _figure_problems(tmp_path, f'It peaks at 6.3 GiB in 114 s ({link_b}).\n')
    assert [p.split(': ', 1)[1] for p in problems] == [
        'figure 6.3 GiB is not in records/b.json', 'figure 114 s is not in records/b.json']
    keyed = '<!-- figures: records/a.json#runs[family=ldn].seconds -->\nIt took 7.5 s.\n'
    assert 'figure 7.5 s is not in records/a.json#runs[family=ldn].seconds' in \
        _figure_problems(tmp_path, keyed)[0]
    table = (f'Runs: {link_b}.\n\n| model | peak | record |\n|---|---|---|\n'
             f'| LDN | 6.3 GiB | {link_a} |\n| SOFT | 1.3 | {link_a} |\n')
    assert [p.split(': ', 1)[1] for p in _figure_problems(tmp_path, table)] == [
        'figure 1.3 is not in records/a.json']
    assert 'figure 2.5 GiB cites no record' in _figure_problems(tmp_path, 'It needs 2.5 GiB.\n')[0]
    ratio = '<!-- figures: records/a.json#runs.*.peak_mb/runs.*.seconds -->\nThat is 56.49x.\n'
    assert _figure_problems(tmp_path, ratio) == []


def test_a_generated_table_and_a_tolerance_are_checked(tmp_path):
    """A table bound to a script must equal its output; a tolerance must be one of the cited
    tests' assertions."""
    (tmp_path / 'dev').mkdir()
    (tmp_path / 'tests').mkdir()
    (tmp_path / 'dev' / 't.py').write_text(
        "def markdown(name):\n    return '| a | b |\\n|---|---|\\n| x | 1.5 |'\n")
    (tmp_path / 'tests' / 'test_x.py').write_text('assert_close(a, b, rtol=0, atol=1e-12)\n')
    table = '<!-- figures: table dev/t.py one -->\n| a | b |\n|---|---|\n| x | {} |\n'
    assert _figure_problems(tmp_path, table.format('1.5')) == []
    problems = _figure_problems(tmp_path, table.format('1.6'))
    assert len(problems) == 1 and 'table differs from dev/t.py one' in problems[0], problems
    said = '`tests/test_x.py` checks them to {} in float64.\n'
    assert _figure_problems(tmp_path, said.format('1e-12')) == []
    assert 'tolerance 1e-14 is asserted in none of tests/test_x.py' in \
        _figure_problems(tmp_path, said.format('1e-14'))[0]


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
