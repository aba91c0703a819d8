"""What the training tests share: the metrics a training run's validations wrote, and the
check that demo/image_demo.py (the end of tools/demo.sh) draws a trained checkpoint's
predictions."""
import glob
import json
import os.path as osp
import re
import sys

from mmengine.config import Config
from tool_runs import run

from repo_paths import ROOT


def validation_metrics(work_dir):
    """The metrics of every validation of a tools/train.py run (its scalars.json), in
    order: with ``--val-before-train`` the first is the starting weights'."""
    files = sorted(glob.glob(osp.join(str(work_dir), '*', 'vis_data', 'scalars.json')))
    assert files, f'no scalars.json under {work_dir}'
    records = []
    with open(files[-1]) as f:
        for line in f:
            rec = json.loads(line)
            if not any(k.startswith('loss') or k == 'lr' for k in rec):
                records.append(rec)
    assert records, f'no validation metrics in {files[-1]}'
    return records


def _trained_classes(cfg):
    """The class names a run trained on: its dataset's ``metainfo`` (the demo and photo
    configs state them), else the dataset class's own."""
    metainfo = cfg.train_dataloader.dataset.get('metainfo')
    if metainfo and 'classes' in metainfo:
        return tuple(metainfo['classes'])
    from mmseg.registry import DATASETS
    from mmseg.utils import register_all_modules
    register_all_modules(init_default_scope=False)
    return DATASETS.get(cfg.train_dataloader.dataset.type).METAINFO['classes']


def check_image_demo(dumped_config, ckpt, out_dir, snippet=True):
    """demo/image_demo.py draws the checkpoint's predictions with the class names stored in
    it, and (``snippet``) the inferencer lines it prints run as they are: one run per
    inferencer (DetInferencer, MMSegInferencer) is enough for the printed lines, the drawing
    is checked for every head layout."""
    import cv2
    import numpy as np
    proc = run([sys.executable, 'demo/image_demo.py', str(dumped_config), ckpt,
                '--out-dir', str(out_dir), '--score-thr', '0'])
    classes = _trained_classes(Config.fromfile(str(dumped_config)))
    assert 'classes from the checkpoint: ' + ', '.join(classes) + '\n' in proc.stdout
    picture = re.search(r'predictions on (\S+): (\S+)', proc.stdout)
    assert picture, proc.stdout
    image, drawn = picture.groups()
    src, vis = cv2.imread(image), cv2.imread(drawn)
    assert vis is not None and vis.shape == src.shape
    assert not np.array_equal(vis, src), 'nothing drawn on the picture'
    # the two notices every mmdet / mmseg inferencer prints and a user cannot act on
    for notice in ('Failed to search registry', 'LocalVisBackend'):
        assert notice not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    lines = proc.stdout.split('Use the trained model from Python:')[1]
    if not snippet:
        assert 'Inferencer(' in lines, lines
        return image
    lines = lines.replace('your_image.jpg', image).replace(str(out_dir), str(out_dir) + '2')
    run([sys.executable, '-c', lines])
    assert glob.glob(osp.join(str(out_dir) + '2', 'vis', '*'))
    return image
