"""A named, read-only set of the wing's entries, one per concern: a model layer names the
concern, then its entry (``seam.step(...)``, ``fast_soft.value_sums(...)``), looked up at call
time.  One narrow seam: ``models/`` takes a dozen names from the wing, not each function."""


class Entries:
    """``Entries(name, doc, **entries)``: ``entries.<key>`` is the entry; nothing is set later."""

    def __init__(self, name: str, doc: str, **entries):
        vars(self).update(entries, __name__=name, __doc__=doc)

    def __setattr__(self, key, value=None):
        raise AttributeError(f'{self.__name__} is read-only: declare {key!r} with it, in '
                             'mmlinattn/kernels/__init__.py')

    __delattr__ = __setattr__

    def __dir__(self):
        return sorted(k for k in vars(self) if not k.startswith('__'))

    def __repr__(self):
        return f'<entries {self.__name__}: {", ".join(dir(self))}>'
