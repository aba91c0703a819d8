"""The package's model registry.

``MODELS`` is a child of mmengine's root ``MODELS`` with scope ``mmlinattn``.  mmdet and
mmseg registries are children of the same root, so a config inside either library can build
``type='mmlinattn.SOFT'``: the scope prefix makes the lookup walk to the root and down into
this registry, exactly as mmdet configs use ``mmpretrain.ConvNeXt``.
"""
try:
    import mmengine  # noqa: F401
except ImportError as err:  # mmengine is no declared dependency: two distributions provide it
    raise ImportError(
        'mmlinattn needs mmengine, from either OpenMMLab stack: `pip install mmengine` '
        '(official OpenMMLab) or `pip install onedl-mmengine` (the maintained onedl forks); '
        'install the one your mmdet / mmseg came with') from err
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

MODELS = Registry('model', parent=MMENGINE_MODELS, scope='mmlinattn',
                  locations=['mmlinattn.models'])
HOOKS = Registry('hook', parent=MMENGINE_HOOKS, scope='mmlinattn',
                 locations=['mmlinattn.engine'])
