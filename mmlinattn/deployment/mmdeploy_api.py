"""What both mmdeploy tools (``tools/deployment/mmdeploy_deploy.py`` and ``mmdeploy_test.py``)
share: the check that mmdeploy is there and the loading of its two configs.

Importing this module registers :mod:`.mmdeploy_rewriters` (the path that needs them).
"""
import os.path as osp

from . import mmdeploy_rewriters

__all__ = ['require_mmdeploy', 'load_configs']


def require_mmdeploy() -> None:
    """Exit with the set-up command when mmdeploy is not installed."""
    if not mmdeploy_rewriters.REGISTERED:
        raise SystemExit('mmdeploy is not installed; run `bash tools/setup.sh --with deploy`')


def load_configs(deploy_cfg: str, model_cfg: str, cfg_options=None):
    """mmdeploy's ``load_config`` of both files, ``cfg_options`` merged into the model's."""
    from mmdeploy.utils import load_config
    for path in (deploy_cfg, model_cfg):
        if not osp.isfile(path):
            raise SystemExit(f'config file {path!r} does not exist')
    deploy, model = load_config(deploy_cfg, model_cfg)
    if cfg_options:
        model.merge_from_dict(cfg_options)
    return deploy, model
