"""The committed model zoo (docs/model_zoo/, model-index.yml): the metafiles parse in mmdet's
schema and name existing configs and files, model-index.yml imports the four, every record a
page names exists, and the pages are what tools/analysis_tools/model_zoo.py writes from the
records today (so a number on a page is the record's)."""
import os.path as osp
import re
import subprocess
import sys

import pytest
import yaml

from repo_paths import ROOT

FAMILIES = ('soft', 'nalaformer', 'infvit', 'ldn')
PUBLISHED = 'Published results (not reproduced)'
ZOO = osp.join(ROOT, 'docs', 'model_zoo')


def _metafile(family):
    with open(osp.join(ZOO, family, 'metafile.yml')) as f:
        return yaml.safe_load(f)


def test_model_index_imports_the_four_metafiles():
    with open(osp.join(ROOT, 'model-index.yml')) as f:
        imports = yaml.safe_load(f)['Import']
    assert imports == [f'docs/model_zoo/{k}/metafile.yml' for k in FAMILIES]
    assert all(osp.isfile(osp.join(ROOT, p)) for p in imports)


@pytest.mark.parametrize('family', FAMILIES)
def test_metafile_schema(family):
    meta = _metafile(family)
    (coll, ) = meta['Collections']
    assert set(coll) == {'Name', 'Metadata', 'Paper', 'README', 'Code'}
    assert coll['Paper']['URL'].startswith('https://arxiv.org/abs/')
    assert coll['README'] == f'docs/model_zoo/{family}/README.md'
    assert osp.isfile(osp.join(ROOT, coll['Code']['URL']))
    assert meta['Models'], 'a family without configs'
    for m in meta['Models']:
        assert m['In Collection'] == coll['Name']
        assert m['Config'] == f"configs/{m['Name']}.py"
        assert osp.isfile(osp.join(ROOT, m['Config']))
        # no checkpoints exist: an entry must not pretend one, nor show the authors' numbers
        # as its own (mim lists Results as the config's results)
        assert 'Weights' not in m and 'Results' not in m
        md = m['Metadata']
        assert md['Training Data'] in ('COCO', 'ADE20K', 'Cityscapes')
        assert isinstance(md['Parameters'], int) and isinstance(md['FLOPs'], int)
        for t in md.get('inference time (ms/im)', []):
            assert osp.isfile(osp.join(ROOT, t['record'])) and t['value'] > 0
        for r in md.get(PUBLISHED, []):   # the authors' numbers, each with its source
            assert set(r) == {'Task', 'Dataset', 'Metrics', 'Source'}
            assert r['Dataset'] == md['Training Data']
            assert re.match(r"(SOFT\+\+|NaLaFormer) paper, Table \d$|SOFT authors' README",
                            r['Source']), r['Source']
            assert all(isinstance(v, float) for v in r['Metrics'].values())
    published = [m for m in meta['Models'] if PUBLISHED in m['Metadata']]
    # the NaLaFormer paper's numbers are for the authors' model: only its configs show them
    if family == 'nalaformer':
        assert published and all('-official_' in m['Name'] for m in published)


@pytest.mark.parametrize('page', ['README.md'] + [f'{k}/README.md' for k in FAMILIES])
def test_pages_name_existing_records_and_links(page):
    path = osp.join(ZOO, page)
    with open(path) as f:
        text = f.read()
    records = set(re.findall(r'records/[\w.]+\.json', text))
    assert 'records/model_zoo.json' in records
    assert any(r.startswith('records/benchmark_') for r in records)
    missing = [r for r in records if not osp.isfile(osp.join(ROOT, r))]
    assert not missing, missing
    for link in re.findall(r'\]\(([^)#]+)\)', text):
        if '://' in link or 'user_guides/' in link:  # pages the lead is moving in
            continue
        assert osp.exists(osp.normpath(osp.join(osp.dirname(path), link))), link


def test_pages_are_generated_from_the_records():
    """Every generated file equals what the tool writes from records/ now (loads every
    config; measures nothing)."""
    proc = subprocess.run([sys.executable, 'tools/analysis_tools/model_zoo.py', '--check'],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
