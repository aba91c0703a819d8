"""Triton's interpreter for the tests: the kernels of :mod:`mmlinattn.kernels.triton_linear`
on the CPU (tests/conftest.py sets ``TRITON_INTERPRET=1`` before Triton is imported)."""
import contextlib

import pytest


@contextlib.contextmanager
def interpreted_kernels():
    """The kernels' module, its kernels interpreted, and the policy letting them run on CPU
    tensors while the context lasts."""
    import triton

    from mmlinattn.kernels import policy, triton_linear
    if not (triton_linear.INTERPRETED and triton.knobs.runtime.interpret):
        raise RuntimeError('Triton was imported before TRITON_INTERPRET=1 was set: the '
                           'kernels are compiled for a GPU; run the tests through pytest, '
                           'whose tests/conftest.py sets it first')
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(policy, 'TRITON_DEVICES', ('cuda', 'cpu'))
        yield triton_linear
