"""Classes made from one of ours in front of an mmdet / mmseg class, when first needed, so that
``import mmlinattn.models`` never imports mmdet or mmseg."""
import importlib
from functools import lru_cache
from typing import Callable


@lru_cache(maxsize=None)
def mixed_class(mixin: type, base_path: str, name: str, module: str) -> type:
    """``type(name, (mixin, base), ...)`` for ``base_path = 'package.module.Class'``."""
    package, _, base_name = base_path.rpartition('.')
    base = getattr(importlib.import_module(package), base_name)
    return type(name, (mixin, base), dict(__module__=module, __doc__=mixin.__doc__))


def lazy_attributes(module: str, **factories: Callable[[], type]) -> Callable[[str], type]:
    """A module ``__getattr__`` that makes ``module.Name`` (pickle, imports) from
    ``factories['Name']()`` on first use, once mmdet / mmseg are there."""
    def __getattr__(name: str) -> type:
        if name in factories:
            return factories[name]()
        raise AttributeError(f'module {module!r} has no attribute {name!r}')
    return __getattr__
