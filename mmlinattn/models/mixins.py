"""Classes made from one of ours in front of an mmdet / mmseg class, when first needed, so that
``import mmlinattn.models`` never imports mmdet or mmseg."""
from functools import lru_cache
from typing import Callable


@lru_cache(maxsize=None)
def mixed_class(mixin: type, base: str, name: str, module: str) -> type:
    """``type(name, (mixin, Base), ...)`` for the model ``base`` registered in mmdet / mmseg
    (``'mmdet.RetinaNet'``), found through mmengine's registry as a config's ``type`` is."""
    from mmengine.registry import MODELS
    scope = base.partition('.')[0]
    try:
        cls = MODELS.get(base)
    except (ImportError, KeyError):
        cls = None
    if cls is None:
        raise ImportError(f'{name} extends {base}: install {scope} (see docs/get_started.md)')
    return type(name, (mixin, cls), dict(__module__=module, __doc__=mixin.__doc__))


def lazy_attributes(module: str, **factories: Callable[[], type]) -> Callable[[str], type]:
    """A module ``__getattr__`` that makes ``module.Name`` (pickle, imports) from
    ``factories['Name']()`` on first use, once mmdet / mmseg are there."""
    def __getattr__(name: str) -> type:
        if name in factories:
            return factories[name]()
        raise AttributeError(f'module {module!r} has no attribute {name!r}')
    return __getattr__


def register_lazy(registry, **factories: Callable[[], type]) -> None:
    """Register ``factories['Name']()`` in ``registry`` as ``Name``: a config's
    ``type='mmlinattn.Name'`` makes the class (importing its mmdet / mmseg base) and builds
    it."""
    for name, factory in factories.items():
        def build(*args, _factory=factory, **kwargs):
            return _factory()(*args, **kwargs)
        build.__name__ = build.__qualname__ = f'build_{name}'
        build.__doc__ = f'Build a ``{name}`` ({factory.__doc__})'
        registry.register_module(name=name, module=build)
