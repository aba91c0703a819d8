"""One config idiom (mmdet's): a shipped config composes bases of ``configs/_base_/`` (models,
datasets with top-level keys, schedules, runtime) and overrides what differs; no config copies
fields out of a dict that a base defines (``_base_.some_set.train_dataloader``)."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NESTED_BASE_READ = re.compile(r'_base_\.\w+\.\w+')


def test_no_config_copies_fields_from_a_base_dict():
    offenders = [f'{p.relative_to(ROOT)}: {m.group()}' for p in sorted(ROOT.glob('configs/**/*.py'))
                 for m in NESTED_BASE_READ.finditer(p.read_text())]
    assert offenders == []
    assert NESTED_BASE_READ.search('train_dataloader = _base_.demo.train_dataloader')


def test_every_base_lives_under_configs_base():
    """Dataset, model and schedule bases sit in configs/_base_/ (and the deploy configs' own
    configs/deploy/_base_/), not beside the leaves of configs/demo/ or configs/photos/."""
    stray = [str(p.relative_to(ROOT)) for p in ROOT.glob('configs/*/_base_')
             if p.parent.name != 'deploy']
    assert stray == []
