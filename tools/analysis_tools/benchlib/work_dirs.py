"""What an mmengine run left in its work dir."""
import glob
import json
import os.path as osp


def last_metrics(work_dir: str) -> dict:
    """The metrics of the last run in ``work_dir`` (its ``<timestamp>/<timestamp>.json``,
    the lines merged).  FileNotFoundError when no run finished there."""
    files = sorted(glob.glob(osp.join(str(work_dir), '*', '[0-9]*_[0-9]*.json')))
    if not files:
        raise FileNotFoundError(f'no metrics json under {work_dir}: did the run finish?')
    merged = {}
    with open(files[-1]) as f:
        for line in f:
            if line.strip():
                merged.update(json.loads(line))
    return merged
