"""One dispatch for every fast form, in the style of fla's ops: an entry wraps the plain
function and the fast one, picks per call and runs the choice, so no call site branches.

Each fast form's rule is a :class:`FastForm`, defined beside the form under its own name
(:func:`.onednn.onednn_allowed`, :func:`.compiled.compiled_allowed`, ...), in two parts:

* ``available(ctx)``: whether the form may run at all in the :class:`.policy.CallContext`
  (the mode, the switches, a special mode, the toolchain): None, or the reason why not.  It
  depends on nothing of the call, so it is asked once per context: once per backbone
  forward (:func:`.policy.decide_once`), and kept in the context;
* ``verify(*args)``: whether the form takes this call (dtype, device, autograd, sizes, hooks).

A rule is not called; it runs forms: ``rule.dispatch(plain)(fast)`` is a :class:`Dispatch`,
which calls ``fast(*args)`` where the rule allows the call and ``plain(*args)`` elsewhere (a
dispatch may verify with its own ``verify``).  Each availability answer is logged once per
process at debug level (``mmlinattn kernels: <form> ...``).  :data:`FORMS` lists every rule.
"""
import functools
import logging
from typing import Callable, Dict, Optional

from . import policy

__all__ = ['Dispatch', 'FastForm', 'FORMS', 'eager_only', 'fast_form', 'fast_ops',
           'module_unrolled']

#: every fast form's rule, by name
FORMS: Dict[str, 'FastForm'] = {}
#: (form, what was logged): each said once per process
_LOGGED = set()


class FastForm:
    """A fast form's rule: ``available(ctx) -> None | reason`` once per context, and
    ``verify(*args) -> bool`` per call (see the module docstring); it runs forms through
    :meth:`dispatch`."""

    def __init__(self, name: str, available: Callable[[policy.CallContext], Optional[str]],
                 verify: Callable[..., bool]):
        if name in FORMS:
            raise ValueError(f'a fast form named {name!r} exists already')
        self.name, self.available, self.verify = name, available, verify
        self.__doc__ = verify.__doc__
        FORMS[name] = self

    def unavailable(self, ctx: policy.CallContext) -> Optional[str]:
        """Why the form cannot run in ``ctx`` (None: it can), asked once per context."""
        forms = ctx.forms
        if self.name not in forms:
            forms[self.name] = self.available(ctx)
            if not ctx.traced:
                _log_once(self, forms[self.name] or 'available', ctx)
        return forms[self.name]

    def runs(self, *args, verify: Optional[Callable[..., bool]] = None, **kwargs) -> bool:
        """The form runs for this call: available in the running context, and ``verify``
        (the rule's own by default) takes the arguments."""
        if self.unavailable(policy.context()) is not None:
            return False
        return (self.verify if verify is None else verify)(*args, **kwargs)

    def dispatch(self, plain: Callable, verify: Optional[Callable[..., bool]] = None):
        """Decorator: the fast function it wraps and ``plain``, as one :class:`Dispatch`."""
        return lambda fast: Dispatch(self, fast, plain, verify)

    def __repr__(self) -> str:
        return f'FastForm({self.name!r})'


class Dispatch:
    """``fast(*args)`` where the rule ``form`` allows the call (its availability in the
    running context, then ``verify``, the rule's own by default), else ``plain(*args)``: the
    same value up to rounding."""

    def __init__(self, form: FastForm, fast: Callable, plain: Callable,
                 verify: Optional[Callable[..., bool]] = None):
        self.form, self.fast, self.plain, self.verify = form, fast, plain, verify
        functools.update_wrapper(self, fast, updated=())

    def __call__(self, *args, **kwargs):
        run = self.fast if self.form.runs(*args, verify=self.verify, **kwargs) else self.plain
        return run(*args, **kwargs)

    def __repr__(self) -> str:
        return f'Dispatch({self.form.name!r})'


def fast_form(name: str, available: Callable[[policy.CallContext], Optional[str]]):
    """Decorator: the verifier it wraps, with ``available``, as the :class:`FastForm`
    ``name``."""
    return lambda verify: FastForm(name, available, verify)


#: the rule of an op's fast entry as a whole (``fast_soft_attention``, ...): off under
#: ``MMLINATTN_KERNELS=plain``, where the op of :mod:`mmlinattn.ops` runs as written
fast_ops = FastForm('fast forms of the ops', policy.plain_unavailable, lambda *a, **k: True)
#: the rule of a module's forward run through its parameters (a fused linear, a fused
#: residual step) instead of called: not where a forward hook waits for the call
module_unrolled = FastForm('modules run through their parameters', policy.plain_unavailable,
                           lambda module, *a, **k: not policy.hooked(module))
#: the rule of a Python loop or branch over a size (chunks, segments), which a traced graph
#: would fix at the traced size: there one product of all tokens
eager_only = FastForm('loops and branches over sizes', policy.eager_unavailable,
                      lambda *a, **k: True)


def _log_once(form: FastForm, what: str, ctx: policy.CallContext) -> None:
    if (form.name, what) in _LOGGED:
        return
    _LOGGED.add((form.name, what))
    try:
        from mmengine.logging import MMLogger
        logger = MMLogger.get_current_instance()
    except ImportError:
        logger = logging.getLogger(__name__)
    logger.debug(f'mmlinattn kernels: {form.name}: {what} (device {ctx.device or "any"}; '
                 f'each call verified on its tensors)')
