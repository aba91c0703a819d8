"""Whether a call runs inside a graph being traced: a fact about the call, not a choice of path.

The layers stay graph-safe with it: inside ``torch.compile`` / ``torch.export`` or a
``torch.jit.trace`` (the TorchScript-based ONNX exporter, which mmdeploy uses) no Python branch
may depend on a size or a value, since the graph would keep the traced one.
"""
import torch

__all__ = ['traced']


def traced() -> bool:
    """Inside a ``torch.compile`` / ``torch.export`` graph or a ``torch.jit.trace``."""
    return torch.compiler.is_compiling() or torch.jit.is_tracing()
