"""Sizes read off a tensor, the same in eager mode and in every tracer.

``torch.compile`` / ``torch.export`` hand out symbolic sizes (``torch.SymInt``) and
``torch.jit.trace`` (the TorchScript-based ONNX exporter, which mmdeploy uses) hands out 0-dim
tensors.  A size that follows the image (H, W, the number of tokens) must stay symbolic, or the
graph is fixed at the traced size; a size the model fixes (channels, heads, groups) must be a
Python int wherever an op takes an int (a conv's ``groups``, a repeat count, a weight's shape).
"""
import warnings

import torch

__all__ = ['image_size', 'model_size']


def image_size(n):
    """A size that follows the input image: an int in eager mode, symbolic in a graph."""
    return n if isinstance(n, (torch.SymInt, torch.Tensor)) else int(n)


def model_size(n) -> int:
    """A size the model fixes (channels, heads, groups) as a Python int, also under
    ``torch.jit.trace``, where the tracer's warning that the int is recorded as a constant is
    moot: no input can change it."""
    if isinstance(n, torch.Tensor):
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', torch.jit.TracerWarning)
            return int(n)
    return int(n)
