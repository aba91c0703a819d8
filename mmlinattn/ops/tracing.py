"""Whether a call runs inside a graph being traced: a fact about the call, not a choice of path.

The layers stay graph-safe with it: inside ``torch.compile`` / ``torch.export`` or a
``torch.jit.trace`` (the TorchScript-based ONNX exporter, which mmdeploy uses) no Python branch
may depend on a size or a value, since the graph would keep the traced one.
"""
import torch

__all__ = ['traced']

# torch >= 2.3: torch.compiler.is_compiling; torch 2.1-2.2: torch._dynamo's (dynamo folds
# either to True inside a graph).  torch._dynamo is imported only on the old torch.
if hasattr(torch.compiler, 'is_compiling'):
    _is_compiling = torch.compiler.is_compiling
else:  # torch < 2.3
    from torch._dynamo import is_compiling as _is_compiling


def traced() -> bool:
    """Inside a ``torch.compile`` / ``torch.export`` graph or a ``torch.jit.trace``."""
    return _is_compiling() or torch.jit.is_tracing()
