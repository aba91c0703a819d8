"""What an inference allocates: every tensor an aten op creates with storage of its own (views
and in-place results are not allocations), recorded by a ``TorchDispatchMode``."""
from typing import List, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class Allocations(TorchDispatchMode):
    """``with Allocations() as a: ...`` records ``a.shapes``: the shape of every tensor created
    inside, in order.  (A Python dispatch mode also turns the backbones' fast forms off:
    :func:`mmlinattn.kernels.policy.special_mode`.)"""

    def __init__(self):
        super().__init__()
        self.shapes: List[Tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.shapes.append(tuple(t.shape))
        return out

    def largest(self) -> int:
        """The most elements of one tensor created."""
        return max((torch.Size(s).numel() for s in self.shapes), default=0)


def group_norm_named(model, message):
    """The module a whole-image "cannot run in row stripes" message names, checked to be a
    group norm of ``model``."""
    import torch
    name = message.split(': ', 1)[1].split(' (GroupNorm)', 1)[0]
    assert isinstance(model.get_submodule(name), torch.nn.GroupNorm), message
    return name
