"""Small helpers shared by the blocks, mixers and backbones."""
from typing import Any, List, Optional, Sequence

import torch

from ...kernels import memory
from ...ops.tracing import traced


def check_heads(dim: int, num_heads: int) -> int:
    """Channels per head, ``dim / num_heads``; ``ValueError`` when it is not a whole number."""
    if not isinstance(num_heads, int) or num_heads < 1 or dim % num_heads:
        raise ValueError(f'dim ({dim}) must be divisible by num_heads ({num_heads})')
    return dim // num_heads


def per_stage(value: Any, num_stages: int, name: str,
              choices: Optional[Sequence] = None) -> List[Any]:
    """One entry per stage: a scalar (or string) is repeated, a list / tuple must have
    ``num_stages`` entries; with ``choices`` every entry must be one of them.  ``name`` is
    the argument's name in the error message (e.g. ``"arch['mlp_ratios']"``)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value] * num_stages
    if len(values) != num_stages or (choices is not None
                                     and any(v not in choices for v in values)):
        allowed = '' if choices is None else f' from {tuple(choices)}'
        raise ValueError(f'{name} needs {num_stages} entries (one per stage){allowed} or one '
                         f'value for all, got {value!r}')
    return values


def maybe_checkpoint(module, *args, enabled: bool = False):
    """Run ``module(*args)``, through activation checkpointing when ``enabled`` and any
    input requires grad (``with_cp`` in mmdet backbones).  Non-tensor arguments (a
    :class:`.token_grid.TokenGrid`) reach the recomputation in the backward pass as they are
    (which runs in the forward's context: :func:`~mmlinattn.kernels.recompute.checkpoint`)."""
    if enabled and any(torch.is_tensor(a) and a.requires_grad for a in args):
        return memory.checkpoint(module, *args)
    return module(*args)


def split_heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, heads * d) -> (B, heads, N, d).  In a traced graph by channel slices, not a
    view: a view re-factors N, and the shape solver cannot prove the facts about a conv's
    token count (e.g. N != 1) that this asks, so the graph would be fixed to one size."""
    if traced():
        return torch.stack(t.chunk(num_heads, dim=-1), dim=1)
    b, n, c = t.shape
    return t.view(b, n, num_heads, c // num_heads).transpose(1, 2)


def adaptive_window_matrix(cell: torch.Tensor, size, cells, n, like: torch.Tensor
                           ) -> torch.Tensor:
    """(len(cell), n) matrix whose row ``k`` averages PyTorch's adaptive-pooling window of
    cell ``cell[k]`` of ``cells`` over a side of ``size`` (``floor(i size / cells) ..
    ceil((i + 1) size / cells) - 1``), in ``like``'s dtype; a row whose window is empty is 0.
    Sizes may be ints, symbolic ints or 0-d tensors: pooling as a matmul that a traced graph
    keeps for every input size (ONNX has only global average pooling)."""
    start = (cell * size) // cells
    end = ((cell + 1) * size + cells - 1) // cells
    pos = torch.arange(n, device=like.device)
    inside = (pos[None, :] >= start[:, None]) & (pos[None, :] < end[:, None])
    return inside.to(like.dtype) / (end - start).clamp(min=1)[:, None].to(like.dtype)
