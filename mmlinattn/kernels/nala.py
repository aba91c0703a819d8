"""The fast forms of NaLaFormer's attention (Meng et al., "NaLaFormer: Norm-Aware Linear
Attention for Transformer Models", arXiv 2506.21137, Eqs. 8-17): feature maps with fewer
passes, in place or as compiled fused loops, and :func:`fast_nala_attention`, the entry the
mixer calls.  Every map here equals :func:`mmlinattn.ops.nala_feature_maps`' up to rounding.

* Without autograd the maps run as compiled fused loops (exact rewrites of Eq. 16,
  :func:`_fused_feature_maps`), else eagerly in place (:func:`_fast_feature_maps`).
* In eager training the plain maps, compiled with their backward, which the chunked core
  evaluates without autograd in its forward and again with autograd in its backward,
  keeping only ``q, k, v`` (:func:`.chunked.chunked_linear_attention`).
"""
from typing import Optional

import torch
import torch.nn.functional as F

from ..ops.nalaformer import (QUARTER_PI, check_attention_args, feature_kernel, inhibit_angle,
                              nala_attention, nala_query_power, norm_direction,
                              rope_linear_attention)
from ..ops.precision import Float32Island
from .chunked import chunked_linear_attention, maps_for
from .compiled import compile_each, compiled_allowed
from .dispatch import eager_only, fast_ops

__all__ = ['fast_nala_attention', 'nala_inference_maps']


def _magnitude_cos_sin(x: torch.Tensor, angle_scale, magnitude: torch.Tensor,
                       inplace: bool) -> torch.Tensor:
    """``[m cos(theta); m sin(theta)]`` (..., 2d) with ``theta = (pi/4) tanh(angle_scale x)``:
    the layout of Eq. 16.  ``inplace`` writes cos / sin straight into the output's halves and
    reuses buffers (no autograd); otherwise every op is out of place."""
    if not inplace:
        t = inhibit_angle(x, angle_scale)      # alpha d(x) = (alpha / ||x||) x
        return torch.cat([magnitude * torch.cos(t), magnitude * torch.sin(t)], dim=-1)
    out = x.new_empty(x.shape[:-1] + (2, x.shape[-1]))
    t = torch.mul(x, angle_scale).tanh_().mul_(QUARTER_PI[x.dtype])
    torch.cos(t, out=out[..., 0, :])
    torch.sin(t, out=out[..., 1, :])
    return out.mul_(magnitude.unsqueeze(-2)).flatten(-2)


def _fast_feature_maps(kernel: str, lam: float, alpha: float, eps: float, inplace: bool):
    """``(phi_q, phi_k)`` callables equal to :func:`nala_feature_maps`' maps, with fewer passes.

    ``cos_sin``: the key direction only enters the angle, so ``1 / ||k||`` is folded into
    its scale; with ``inplace`` (inference) each map is one output buffer plus one scratch
    tensor.  ``relu_split``: one power over the concatenated halves.
    """
    if kernel == 'relu_split':
        def phi_q(q):
            qn, dq = norm_direction(q, eps)
            return F.relu(torch.cat([dq, -dq], dim=-1)).pow(nala_query_power(qn, lam))

        def phi_k(k):
            return F.relu(torch.cat([k, -k], dim=-1)).pow(lam)
        return phi_q, phi_k

    def phi_q(q):
        qn, dq = norm_direction(q, eps)
        power = nala_query_power(qn, lam)
        mag = dq.abs_().pow_(power) if inplace else dq.abs().pow(power)
        # the angle uses the signed direction: recompute it from q (dq was overwritten)
        return _magnitude_cos_sin(q, alpha / qn, mag, inplace)

    def phi_k(k):
        k_scale = alpha / torch.linalg.vector_norm(k, dim=-1, keepdim=True).clamp_min(eps)
        mag = k.abs().pow_(lam) if inplace else k.abs().pow(lam)
        return _magnitude_cos_sin(k, k_scale, mag, inplace)
    return phi_q, phi_k


def _sin_quarter(x: torch.Tensor) -> torch.Tensor:
    """``sin(x)`` for ``|x| <= pi/4``; below float64 as ``x - x^3/3! + ... + x^9/9!``.

    The omitted terms are below ``(pi/4)^11 / 11! < 2e-9`` of the result, under float32's
    rounding.  Why: OpenVINO's CPU plugin runs ``Sin`` as a scalar reference kernel, while
    multiplies and adds join its fused elementwise loops; ONNX Runtime and inductor are
    faster with the polynomial too (docs/benchmarks.md).  Float64 keeps ``torch.sin``, whose
    error the polynomial exceeds.
    """
    if x.dtype == torch.float64:
        return torch.sin(x)
    x2 = x * x
    return x * (1 + x2 * (-1 / 6 + x2 * (1 / 120 + x2 * (-1 / 5040 + x2 * (1 / 362880)))))


def _fused_feature_maps(kernel: str, lam: float, alpha: float, eps: float):
    """``(phi_q, phi_k)`` equal to :func:`nala_feature_maps`' maps, written for one fused loop
    each (:class:`.compiled.LazyCompiled`; no autograd: ``log |d|`` has an
    infinite derivative at 0, which :func:`_training_feature_maps` avoids).

    Exact rewrites of Eq. 16 that replace slow transcendental ops by fast ones:

    * ``tanh(u) = 2 sigmoid(2u) - 1``, so ``theta = 2c sigmoid(2 alpha d) - c`` with
      ``c = pi/4`` rounded down: still within ``[-c, c]`` after rounding;
    * ``cos(theta) = sqrt(1 - sin(theta)^2)``, exact since ``|theta| <= pi/4`` makes the
      cosine positive (and the square root well conditioned: ``sin^2 <= 1/2``);
    * ``sin(theta)`` in float32 as its Taylor polynomial to degree 9 (:func:`_sin_quarter`);
    * ``|d(q)|^p = exp(p log|d(q)|)`` (``log 0 = -inf`` gives ``0``, as ``0^p`` for ``p > 0``).
    """
    if kernel == 'relu_split':  # already a short chain: the eager maps fuse as they are
        return _fast_feature_maps(kernel, lam, alpha, eps, inplace=False)

    def cos_sin(magnitude, direction):
        c = QUARTER_PI[direction.dtype]
        s = _sin_quarter((2 * c) * torch.sigmoid((2 * alpha) * direction) - c)
        return torch.cat([magnitude * torch.sqrt(1 - s * s), magnitude * s], dim=-1)

    def phi_q(q):
        qn, dq = norm_direction(q, eps)
        return cos_sin(torch.exp(torch.log(dq.abs()) * nala_query_power(qn, lam)), dq)

    def phi_k(k):
        _, dk = norm_direction(k, eps)
        return cos_sin(k.abs().pow(lam), dk)
    return phi_q, phi_k


def _compiled_feature_maps(kernel: str, lam: float, alpha: float, eps: float):
    """The compiled :func:`_fused_feature_maps`, one pair per setting (and process)."""
    return compile_each(_fused_feature_maps, (kernel, float(lam), float(alpha), float(eps)),
                        (f'NaLa query features ({kernel})', f'NaLa key features ({kernel})'))


def _training_feature_maps(kernel: str, lam: float, alpha: float, eps: float):
    """The out-of-place :func:`_fast_feature_maps`, to be compiled with their backward."""
    return _fast_feature_maps(kernel, lam, alpha, eps, inplace=False)


def _compiled_training_maps(kernel: str, lam: float, alpha: float, eps: float):
    """The compiled :func:`_training_feature_maps`, one pair per setting (and process)."""
    return compile_each(_training_feature_maps, (kernel, float(lam), float(alpha), float(eps)),
                        (f'NaLa query features with backward ({kernel})',
                         f'NaLa key features with backward ({kernel})'))


def _traced_feature_maps(kernel: str, lam: float, alpha: float, eps: float, fuse: bool,
                         *tensors: torch.Tensor):
    """In a traced graph one pair, traced with its autograd or (fused) without."""
    plain = _fast_feature_maps(kernel, lam, alpha, eps, inplace=False)
    maps = maps_for(_fused_feature_maps(kernel, lam, alpha, eps), plain, *tensors) \
        if fuse else plain
    return maps, maps


@eager_only.dispatch(_traced_feature_maps)
def _eager_feature_maps(kernel: str, lam: float, alpha: float, eps: float, fuse: bool,
                        *tensors: torch.Tensor):
    """:func:`_feature_maps_for` without compiled loops: the eager maps (in place for the
    forward without autograd)."""
    return (_fast_feature_maps(kernel, lam, alpha, eps, inplace=True),
            _fast_feature_maps(kernel, lam, alpha, eps, inplace=False))


@compiled_allowed.dispatch(_eager_feature_maps, verify=lambda kernel, lam, alpha, eps, fuse,
                           *tensors: fuse and compiled_allowed.verify(*tensors, allow_grad=True))
def _feature_maps_for(kernel: str, lam: float, alpha: float, eps: float, fuse: bool,
                      *tensors: torch.Tensor):
    """``(maps, grad_maps)``, each a ``(phi_q, phi_k)`` pair for ``tensors``: the fastest maps
    for a forward without autograd (compiled fused loops, else the eager maps in place), and
    maps that support autograd (compiled with their backward, else the eager maps out of
    place).  Eager training evaluates ``maps`` in the core's forward and ``grad_maps`` in its
    backward, so each compiled pair only ever runs in one grad mode: one compilation per
    shape class, not two."""
    return (_compiled_feature_maps(kernel, lam, alpha, eps),
            _compiled_training_maps(kernel, lam, alpha, eps))


def nala_inference_maps(kernel: str, lam: float, alpha: float, eps: float, fuse: bool,
                        x: torch.Tensor):
    """``(phi_q, phi_k)``: the feature maps :func:`fast_nala_attention` runs without autograd
    on tensors like ``x`` (for the two passes of :func:`.chunked.key_sums` and
    :func:`.chunked.query_side_given_sums`); ``kernel`` without RoPE."""
    return _feature_maps_for(feature_kernel(kernel), lam, alpha, eps, fuse, x)[0]


@fast_ops.dispatch(lambda q, k, v, kernel='cos_sin', lam=3.0, alpha=20.0, eps=1e-6, valid=None,
                   fuse=True, rope_angles=None: nala_attention(q, k, v, kernel, lam, alpha, eps,
                                                               valid, rope_angles))
def fast_nala_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str = 'cos_sin',
                        lam: float = 3.0, alpha: float = 20.0, eps: float = 1e-6,
                        valid: Optional[torch.Tensor] = None,
                        fuse: bool = True,
                        rope_angles: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`mmlinattn.ops.nala_attention` (Eqs. 8-17; its arguments and result) with its
    fast forms, the same values up to rounding: the feature maps in place without autograd and
    the chunked core (:func:`.chunked.chunked_linear_attention`).

    ``fuse``: evaluate the feature maps as compiled fused loops (:mod:`.compiled`; under
    autograd the plain maps compiled with their backward), where a compiler is available and
    ``MMLINATTN_COMPILE`` is not ``0``."""
    check_attention_args(q, k, v, kernel, lam, alpha, eps, rope_angles)
    rope = kernel == 'relu_split_rope'
    maps, grad_maps = _feature_maps_for(feature_kernel(kernel), lam, alpha, eps, fuse,
                                        q, k, v)
    with Float32Island(q) as island:
        q, k, v = island.cast(q, k, v)
        if rope:
            phi_q, phi_k = maps_for(maps, grad_maps, q, k, v)
            out = rope_linear_attention(phi_q(q), phi_k(k), v, rope_angles, eps, valid)
        else:
            out = chunked_linear_attention(q, k, v, *maps, eps, valid,
                                           backward_features=grad_maps)
    return island.back(out)
