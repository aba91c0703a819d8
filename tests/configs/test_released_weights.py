"""What the pages say about released weights is what :data:`RELEASED` holds and what the
configs load: the README's count of configs that run with weights that exist today, the
weights page's table of the authors' files, and each config's missing-file message."""
import os
import os.path as osp
import re
from functools import lru_cache

import pytest
from mmengine.config import Config

from mmlinattn.engine.runner import check_backbone_weights
from mmlinattn.models.backbones.nalaformer import OFFICIAL_PRESET
from mmlinattn.models.backbones.soft import OFFICIAL_PRESETS
from mmlinattn.utils.weights_hint import PRESETS, RELEASED, released_file
from repo_paths import ROOT

CONFIG_DIR = osp.join(ROOT, 'configs')
CONFIGS = sorted(f for f in os.listdir(CONFIG_DIR)
                 if f.endswith('.py') and osp.isfile(osp.join(CONFIG_DIR, f)))


@lru_cache(maxsize=None)
def backbone_of(name: str) -> dict:
    return Config.fromfile(osp.join(CONFIG_DIR, name)).model.backbone.to_dict()


def fits_a_released_file(name: str) -> bool:
    b = backbone_of(name)
    return released_file(b['type'], b['arch'], b) is not None


def page(path: str) -> str:
    with open(osp.join(ROOT, path)) as f:
        return ' '.join(f.read().replace('>', ' ').split())   # one line, quote marks gone


def test_presets_are_the_families_own():
    assert PRESETS['SOFT'] == OFFICIAL_PRESETS
    assert PRESETS['NaLaFormer'] == {'official': OFFICIAL_PRESET}


def test_readme_counts_the_configs_that_run_with_weights_that_exist():
    text = page('README.md')
    released = [n for n in CONFIGS if fits_a_released_file(n)]
    assert released and all('-norm_' in n for n in released), released
    found = re.search(r'(\d+) of the (\d+) shipped configs', text)
    assert found, 'README.md no longer says how many configs run with released weights'
    assert (int(found.group(1)), int(found.group(2))) == (len(released), len(CONFIGS))
    assert f'the other {len(CONFIGS) - len(released)} need' in text
    assert f'The repository ships {len(CONFIGS)} configs' in text
    weights = page('docs/user_guides/weights.md')
    official = [n for n in CONFIGS if '-official_' in n]
    assert f'The {len(released)} SOFT-Norm configs' in weights
    assert f'the {len(official)} NaLaFormer `*-official` configs' in weights


def test_weights_page_lists_exactly_the_released_files():
    text = page('docs/user_guides/weights.md')
    rows = re.findall(r'\| `(\w+)` \| \[download\]\((https://[^)]+)\) \|', text)
    assert sorted(rows) == sorted(RELEASED.values())
    assert re.search(r'\| NaLaFormer \|[^|]*\|[^|]*\| no: ', text), 'NaLaFormer must read: no'


@pytest.mark.parametrize('name', [n for n in CONFIGS
                                  if '-norm_' in n or '_nalaformer_' in n or n.endswith(
                                      ('soft_tiny_1x.py', 'ldn_tiny_1x.py'))])
def test_missing_file_message_says_what_exists(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # no checkpoints/ here
    cfg = Config.fromfile(osp.join(CONFIG_DIR, name))
    with pytest.raises(SystemExit) as err:
        check_backbone_weights(cfg)
    message = str(err.value)
    b = backbone_of(name)
    released = released_file(b['type'], b['arch'], b)
    if released:
        assert released[1] in message and f"--arch-check SOFT:{b['arch']}" in message
    else:
        assert 'drive.google.com' not in message
    if '_nalaformer_' in name:
        assert 'have not released' in message
    if '_ldn_' in name:   # from scratch needs the convolutional stem
        assert 'stem=conv' in message
