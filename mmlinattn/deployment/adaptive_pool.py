"""Adaptive average pooling that exports with a symbolic input size.

``nn.AdaptiveAvgPool2d(k)`` with ``k > 1`` (UperNet's pyramid pooling: 1, 2, 3, 6) pools
windows whose bounds depend on the input size; ONNX has only the global case, and the
exporter bakes the traced size's windows into index constants, wrong at any other size.
Here the same windows are built from the symbolic size: output cell ``i`` of ``k`` averages
rows ``floor(i H / k) .. ceil((i + 1) H / k) - 1`` (PyTorch's definition), as a ``(k, H)``
averaging matrix, so that ``pool(x) = P_h x P_w^T`` is two matmuls of standard ops.
"""
import torch
import torch.nn as nn

from ..models.layers.utils import adaptive_window_matrix


class ExportableAdaptiveAvgPool2d(nn.Module):
    """Same output as ``nn.AdaptiveAvgPool2d(output_size)`` (see the module docstring)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = (output_size, output_size) if isinstance(output_size, int) \
            else tuple(output_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        oh, ow = (s if s is not None else x.shape[-2 + i]
                  for i, s in enumerate(self.output_size))
        h, w = x.shape[-2:]
        ph = adaptive_window_matrix(torch.arange(oh, device=x.device), h, oh, h, x)
        pw = adaptive_window_matrix(torch.arange(ow, device=x.device), w, ow, w, x)
        return ph @ x @ pw.transpose(0, 1)


def make_pools_exportable(model: nn.Module) -> int:
    """Swap every non-global ``nn.AdaptiveAvgPool2d`` in ``model`` for
    :class:`ExportableAdaptiveAvgPool2d`, in place; returns how many were swapped."""
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.AdaptiveAvgPool2d:
                size = child.output_size
                sizes = (size, size) if isinstance(size, int) else tuple(size)
                if sizes != (1, 1):
                    setattr(parent, name, ExportableAdaptiveAvgPool2d(child.output_size))
                    swapped += 1
    return swapped
