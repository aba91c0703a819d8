"""Classes made from one of ours in front of an mmdet / mmseg class, when first needed, so that
``import mmlinattn.models`` never imports mmdet or mmseg."""
import importlib
from functools import lru_cache


@lru_cache(maxsize=None)
def mixed_class(mixin: type, base_path: str, name: str, module: str) -> type:
    """``type(name, (mixin, base), ...)`` for ``base_path = 'package.module.Class'``."""
    package, _, base_name = base_path.rpartition('.')
    base = getattr(importlib.import_module(package), base_name)
    return type(name, (mixin, base), dict(__module__=module, __doc__=mixin.__doc__))
