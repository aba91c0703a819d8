"""Fused forms of common block patterns: one pass fewer over the tokens in inference, one
token-sized tensor fewer kept for the backward in training."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...ops._grad import eager_training, needs_grad
from ...ops.precision import autocast_enabled
from .onednn import fused_linear, hooked


def _plain_precision(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """No autocast and one dtype: a fused form then rounds like the plain one (an ``out=``
    GEMM is not autocast, and a LayerScale folded into a half-precision weight underflows)."""
    return (not autocast_enabled(x.device.type)
            and all(p.dtype == x.dtype for p in params))


def residual_linear(x: torch.Tensor, linear: nn.Linear, y: torch.Tensor,
                    gamma: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x + gamma * linear(y)`` (LayerScale ``gamma``, or none) as one GEMM that accumulates
    into a copy of ``x``: ``(x + gamma b) + y (gamma W)^T``.

    The same sum as the two-step form up to rounding, without the separate pass that scales
    and adds the linear's output.  No autograd (``out=``): for inference only.  Under
    autocast, or with mixed dtypes, it is the two-step form (an ``out=`` GEMM is not autocast),
    as it is for a linear with a forward hook (which expects the module to be called).
    """
    if not _gemm_may_accumulate(x, linear, y):
        z = linear(y)
        return x + z if gamma is None else torch.addcmul(x, gamma, z)
    w, b = _scaled_weights(linear, gamma)
    out = x.clone(memory_format=torch.contiguous_format) if b is None else (x + b).contiguous()
    return _accumulate_product(out, y, w)


def accumulate_linears(out: torch.Tensor, terms) -> torch.Tensor:
    """``out += sum_i gamma_i * linear_i(y_i)`` in place, for ``terms`` of
    ``(linear_i, y_i, gamma_i)`` (``gamma_i`` a LayerScale or None) and a contiguous ``out``
    the caller owns: the biases in one pass over ``out``, then each product accumulated by its
    GEMM (:func:`residual_linear` for several branches).  No autograd: for inference only;
    under autocast, with mixed dtypes or a hooked linear each term is added as
    ``linear_i(y_i)``."""
    if not all(_gemm_may_accumulate(out, linear, y) for linear, y, _ in terms):
        for linear, y, gamma in terms:
            z = linear(y)
            out = out.add_(z) if gamma is None else out.addcmul_(gamma, z)
        return out
    scaled = [_scaled_weights(linear, gamma) for linear, _, gamma in terms]
    biases = [b for _, b in scaled if b is not None]
    if biases:
        out.add_(biases[0] if len(biases) == 1 else torch.stack(biases).sum(0))
    for (_, y, _), (w, _) in zip(terms, scaled):
        _accumulate_product(out, y, w)
    return out


def _gemm_may_accumulate(x: torch.Tensor, linear: nn.Linear, y: torch.Tensor) -> bool:
    """Plain precision (:func:`_plain_precision`) and no forward hook on ``linear``."""
    return _plain_precision(x, y, linear.weight) and not hooked(linear)


def _scaled_weights(linear: nn.Linear, gamma: Optional[torch.Tensor]):
    """``(gamma W, gamma b)``: a LayerScale folded into the linear (no copy without one)."""
    w, b = linear.weight, linear.bias
    if gamma is None:
        return w, b
    return w * gamma[:, None], None if b is None else b * gamma


def _accumulate_product(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``out += y W^T`` by the GEMM itself (``out`` contiguous)."""
    flat = out.view(-1, out.shape[-1])
    torch.addmm(flat, y.reshape(-1, y.shape[-1]), w.t(), out=flat)
    return out


def residual_branch(shortcut: torch.Tensor, linear: nn.Linear, y: torch.Tensor,
                    gamma: Optional[torch.Tensor] = None, drop_path: Optional[nn.Module] = None,
                    dropout: Optional[nn.Module] = None, training: bool = False) -> torch.Tensor:
    """``shortcut + drop_path(gamma * dropout(linear(y)))``: a residual branch that ends in
    ``linear`` (LayerScale ``gamma`` and the modules optional).

    In inference (``training`` False and no gradient needed) the LayerScale and the residual
    go into the linear's GEMM (:func:`residual_linear`); otherwise DropPath, being linear,
    lets one ``addcmul`` do both; in training the LayerScale goes into the linear's weight
    (:func:`layer_scaled_linear`)."""
    params = [t for t in (linear.weight, linear.bias, gamma) if t is not None]
    if not training and not needs_grad(shortcut, y, *params):
        return residual_linear(shortcut, linear, y, gamma)
    weight, bias, gamma = layer_scaled_linear(linear, gamma, y)
    y = F.linear(y, weight, bias)
    if dropout is not None:
        y = dropout(y)
    return add_residual(shortcut, y, gamma, drop_path)


def layer_scaled_linear(linear: nn.Linear, gamma: Optional[torch.Tensor], y: torch.Tensor
                        ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """``(weight, bias, rest)`` with ``gamma * linear(y) = rest * F.linear(y, weight, bias)``.

    LayerScale folded into the weight: ``gamma (W y + b) = (gamma W) y + gamma b``, with
    ``rest=None``.  Under autograd the product ``gamma * z`` keeps ``z`` (a token-sized
    tensor) for ``gamma``'s gradient; the folded form keeps only the linear's input, which it
    keeps anyway, and ``gamma``'s gradient comes from the weight's (``sum_j dW'_ij W_ij +
    db'_i b_i``).  The folded weight is kept instead (out x in against tokens x out), so
    nothing is folded where ``y`` has no more rows (tokens) than input channels, nor where
    the precision is not plain (:func:`_plain_precision`): ``(linear.weight, linear.bias,
    gamma)``.
    """
    w, b = linear.weight, linear.bias
    if (gamma is None or not _plain_precision(y, w, gamma)
            or y.numel() // y.shape[-1] <= w.shape[1]):
        return w, b, gamma
    return (*_scaled_weights(linear, gamma), None)


def normed_linears(norm: Optional[nn.Module], x: torch.Tensor, linear: nn.Linear,
                   parts: int = 1) -> Tuple[torch.Tensor, ...]:
    """``linear(norm(x))`` (``linear(x)`` for no ``norm``) split into ``parts`` equal blocks
    of output channels, each computed from its own rows of the weight (contiguous outputs,
    not strided column blocks).

    Under eager autograd with a plain-precision ``nn.LayerNorm`` the normalised input is not
    kept for the weights' gradient: :class:`_NormedLinears` keeps ``x`` (which the norm's own
    backward needs anyway) and normalises it again in the backward, one elementwise pass for
    one token-sized tensor fewer kept per call.
    """
    w, b = linear.weight, linear.bias
    if (isinstance(norm, nn.LayerNorm) and norm.elementwise_affine and norm.bias is not None
            and b is not None and len(norm.normalized_shape) == 1 and eager_training(x, w)
            and _plain_precision(x, w, b, norm.weight, norm.bias)):
        return _NormedLinears.apply(x, norm.weight, norm.bias, norm.eps, w, b, parts)
    return _split_linear(x if norm is None else norm(x), w, b, parts)


def _split_linear(y: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                  parts: int) -> Tuple[torch.Tensor, ...]:
    biases = (None, ) * parts if bias is None else bias.chunk(parts)
    return tuple(fused_linear(y, w, b) for w, b in zip(weight.chunk(parts), biases))


class _NormedLinears(torch.autograd.Function):
    """``[LN(x) W_i^T + b_i for each row block W_i]``, keeping ``x`` instead of ``LN(x)``.

    Backward: ``LN(x)`` again (with autograd, for the norm's closed-form gradient), then
    ``dW_i = g_i^T LN(x)``, ``db_i = sum g_i`` and ``dLN(x) = sum_i g_i W_i``.
    """

    @staticmethod
    def forward(ctx, x, norm_weight, norm_bias, eps, weight, bias, parts):
        normed = F.layer_norm(x, x.shape[-1:], norm_weight, norm_bias, eps)
        ctx.save_for_backward(x, norm_weight, norm_bias, weight)
        ctx.eps, ctx.parts = eps, parts
        return _split_linear(normed, weight, bias, parts)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads):
        x, norm_weight, norm_bias, weight = ctx.saved_tensors
        leaves = [t.detach().requires_grad_() for t in (x, norm_weight, norm_bias)]
        with torch.enable_grad():
            normed = F.layer_norm(leaves[0], x.shape[-1:], *leaves[1:], ctx.eps)
        flat = normed.detach().reshape(-1, x.shape[-1])
        grad_w, grad_b, grad_normed = [], [], None
        for g, w in zip(grads, weight.chunk(ctx.parts)):
            g = g.reshape(-1, g.shape[-1])
            grad_w.append(g.t() @ flat)
            grad_b.append(g.sum(0))
            grad_normed = g @ w if grad_normed is None else grad_normed.addmm_(g, w)
        grad_x, grad_nw, grad_nb = torch.autograd.grad(normed, leaves,
                                                       grad_normed.view_as(normed))
        return (grad_x, grad_nw, grad_nb, None, torch.cat(grad_w), torch.cat(grad_b), None)


def add_residual(shortcut: torch.Tensor, y: torch.Tensor, gamma: Optional[torch.Tensor] = None,
                 drop_path: Optional[nn.Module] = None) -> torch.Tensor:
    """``shortcut + drop_path(gamma * y)``; DropPath, being linear, lets one ``addcmul`` do
    the scaling and the sum."""
    if drop_path is not None:
        y = drop_path(y)
    return shortcut + y if gamma is None else torch.addcmul(shortcut, gamma, y)
