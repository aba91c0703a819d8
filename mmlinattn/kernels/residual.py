"""The residual seam: every block's residual step, and the fused forms behind it.

A block writes each residual step as ``x = residual_step(x, branch, grid, norm, gamma,
drop_path)``, which is ``x + drop_path(gamma * branch(norm(x), grid))``, and a block of
parallel branches (LDN) writes ``parallel_residual(x, steps, grid, extra, drop_path)``.
A branch is a :class:`~mmlinattn.models.layers.branch.Branch`: the interface the seam reads
(``hidden``, ``out_proj``, ``out_drop``, ``fused_residual``; for row stripes ``row_halo``,
``summary_passes``, ``summary_rows``, ``finish_summary``, ``row_align``, ``stripe_width``) is
declared there, once; this wing only runs it.  Behind the seam

* in inference the LayerScale and the residual sum go into that linear's GEMM, which
  accumulates into a copy of ``x`` (:func:`residual_linear`, :func:`accumulate_linears`);
* in training the LayerScale is folded into the linear's weight (:func:`layer_scaled_linear`)
  and DropPath, being linear, shares one ``addcmul`` with the sum (:func:`add_residual`);
  a branch may hand over a tail of ops that is recomputed in the backward together with the
  linear (activation checkpointing: only the tail's input is kept).

Each fused form equals its two-step form up to rounding, and is that form wherever its rule
rules it out.  A branch without ``fused_residual``, or with a forward hook, is called.
"""
from typing import Callable, NamedTuple, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .dispatch import fast_form, module_unrolled
from .onednn import apply_linear, fused_gelu, linear_act, linear_blocks, onednn_allowed
from .policy import (eager_unavailable, hooked, jit_unavailable, needs_grad, plain_precision,
                     plain_unavailable)
from .recompute import recompute_in_backward, recomputes
from .row_stripes import accumulate_striped, ffn_stripes, mixer_stripes, summarize


# -- the rules of the fused forms (:class:`.dispatch.FastForm`) -----------------------------
@fast_form('residual accumulated by the GEMM', jit_unavailable)
def gemm_accumulates(x: torch.Tensor, linear: torch.nn.Linear, y: torch.Tensor,
                     gamma=None) -> bool:
    """A residual step's ``linear(y)`` may be accumulated into ``x`` by its GEMM (``out=``):
    plain precision (:func:`plain_precision`) and no forward hook on ``linear``."""
    return plain_precision(x, y, linear.weight) and not hooked(linear)


@fast_form('LayerScale folded into the weight', plain_unavailable)
def layer_scale_folded(linear: torch.nn.Linear, gamma, y: torch.Tensor) -> bool:
    """A LayerScale ``gamma`` goes into ``linear``'s weight for the training forward: plain
    precision, and more rows (tokens) in ``y`` than input channels (the folded weight is kept
    instead of a token-sized product)."""
    return (gamma is not None and plain_precision(y, linear.weight, gamma)
            and y.numel() // y.shape[-1] > linear.weight.shape[1])


@fast_form('norm recomputed in the backward', eager_unavailable)
def norm_recomputed(norm, x: torch.Tensor, linear: torch.nn.Linear, parts: int = 1) -> bool:
    """``linear(norm(x))`` keeps ``x`` instead of ``norm(x)`` for the backward: eager training
    (autograd records ``x`` or the linear) with a plain-precision affine ``nn.LayerNorm`` over
    the last axis and a biased linear."""
    w, b = linear.weight, linear.bias
    return (isinstance(norm, torch.nn.LayerNorm) and norm.elementwise_affine
            and norm.bias is not None and b is not None and len(norm.normalized_shape) == 1
            and needs_grad(x, w) and plain_precision(x, w, b, norm.weight, norm.bias))


@fast_form('parallel branches accumulated by their GEMMs', eager_unavailable)
def branches_accumulate(x: torch.Tensor, steps, grid, extra=None, extra_params=(),
                        drop_path=None) -> bool:
    """:func:`parallel_residual` accumulates every branch by its output linear's GEMM:
    eager inference, each branch's residual fused (``fused_residual``), in eval mode and
    without a forward hook."""
    tensors = [t for branch, norm, gamma in steps
               for t in (*branch.parameters(), *(norm.parameters() if norm else ()),
                         *((gamma, ) if gamma is not None else ()))]
    return (all(b.fused_residual and not b.training and not hooked(b) for b, _, _ in steps)
            and not needs_grad(x, *tensors, *extra_params))


class Step(NamedTuple):
    """A step of :func:`hidden_chain`: ``fn(h)``; with ``conv`` (the conv ``fn`` runs) also
    ``fn(h, act=act)``, the activation after it in the conv's epilogue."""
    fn: Callable
    conv: Optional[nn.Module] = None


def hidden_chain(x: torch.Tensor, norm: Optional[nn.Module], first: nn.Linear,
                 steps: Sequence[Step], drop: Optional[nn.Module] = None,
                 recompute: str = 'none', plain_first: bool = False
                 ) -> Tuple[torch.Tensor, Optional[Callable]]:
    """A branch's plain forward ``drop(steps(first(norm(x))))`` (``drop`` optional) up to its
    output linear, composed with the fast forms, as a branch's ``hidden`` answers (``(h,
    tail)``): ``first(norm(x))`` (:func:`_first_linear`; ``plain_first``: called as it is),
    then the steps (:func:`_steps_before_tail`), each GELU after a linear or a conv in its
    oneDNN epilogue (:func:`.onednn.fused_gelu`)."""
    h, steps = _first_linear(x, norm, first, list(steps), plain_first)
    keep, i = _steps_before_tail(h, steps, recompute), 0
    # each step rebinds h, here: a step's input is freed before the next step runs (in
    # inference at most two hidden-size tensors are alive)
    while i < keep:
        h, i = _step(steps, i, h)
    if keep == len(steps):
        return _drop(drop, h), None
    return h, lambda t: _drop(drop, _run_steps(steps[keep:], t))


def _linear_then_steps(x, norm, first, steps: list, plain_first: bool):
    if plain_first:
        return first(x if norm is None else norm(x)), steps
    return (apply_linear(x, first) if norm is None else normed_linears(norm, x, first)[0],
            steps)


@onednn_allowed.dispatch(_linear_then_steps, verify=lambda x, norm, first, steps, plain_first:
                         bool(steps) and fused_gelu(steps[0].fn, x, first) is not None)
def _first_linear(x: torch.Tensor, norm: Optional[nn.Module], first: nn.Linear, steps: list,
                  plain_first: bool):
    """``(first(norm(x)), steps)``; with a GELU as the first step, in ``first``'s oneDNN
    epilogue (:func:`.onednn.linear_act`): ``(gelu(first(norm(x))), steps[1:])``."""
    return linear_act(x if norm is None else norm(x), first, steps[0].fn), steps[1:]


@recomputes.dispatch(lambda h, steps, recompute: len(steps),
                     verify=lambda h, steps, recompute: recompute != 'none'
                     and recomputes.verify(h))
def _steps_before_tail(h: torch.Tensor, steps: list, recompute: str) -> int:
    """How many of ``steps`` run in the forward: all; in eager training with ``recompute``
    (``'last'``: the last step; ``'all'``: every step) those before the tail handed to the
    seam to recompute in the backward."""
    return len(steps) - 1 if recompute == 'last' else 0


@onednn_allowed.dispatch(lambda steps, i, h: (steps[i].fn(h), i + 1),
                         verify=lambda steps, i, h: steps[i].conv is not None
                         and i + 1 < len(steps)
                         and fused_gelu(steps[i + 1].fn, h, steps[i].conv) is not None)
def _step(steps: list, i: int, h: torch.Tensor):
    """``(steps[i](h), i + 1)``; with a GELU next after a conv step, the GELU in that
    conv's epilogue: ``(steps[i](h, act=gelu), i + 2)``."""
    return steps[i].fn(h, act=steps[i + 1].fn), i + 2


def _drop(drop: Optional[nn.Module], t: torch.Tensor) -> torch.Tensor:
    return t if drop is None else drop(t)


def _run_steps(steps: Sequence[Step], t: torch.Tensor) -> torch.Tensor:
    for step in steps:
        t = step.fn(t)
    return t


def branch_output(branch: nn.Module, x: torch.Tensor, grid) -> torch.Tensor:
    """``branch(x, grid)`` without a residual, through the fast forms of its ``hidden``:
    ``out_drop(out_proj(...))``."""
    h, tail = branch.hidden(x, grid, None)
    if tail is None:
        y = branch.out_proj(h)
    else:
        y = recompute_in_backward(lambda t: branch.out_proj(tail(t)), h)
    return y if branch.out_drop is None else branch.out_drop(y)


def residual_step(x: torch.Tensor, branch: nn.Module, grid, norm: Optional[nn.Module] = None,
                  gamma: Optional[torch.Tensor] = None, drop_path: Optional[nn.Module] = None,
                  shortcut: Optional[torch.Tensor] = None, owned: bool = False) -> torch.Tensor:
    """``x + drop_path(gamma * branch(norm(x), grid))`` (``norm``, the LayerScale ``gamma``
    and ``drop_path`` optional), through the fused forms of ``branch`` (a ``Branch``);
    ``shortcut``: the stream the branch is added to when it is not ``x`` itself.  ``owned``:
    the caller made ``x`` and reads it no more, so a branch in row stripes
    (:mod:`.row_stripes`) may write the sum into it (one token-sized tensor fewer)."""
    return _residual(x if shortcut is None else shortcut, branch, x, grid, norm, gamma,
                     drop_path, owned and shortcut is None)


def _each_residual(x, steps, grid, extra=None, extra_params=(), drop_path=None) -> torch.Tensor:
    out = x if extra is None else x + extra()
    for branch, norm, gamma in steps:
        out = _residual(out, branch, x, grid, norm, gamma, drop_path)
    return out


@branches_accumulate.dispatch(_each_residual)
def parallel_residual(x: torch.Tensor, steps: Sequence[Tuple[nn.Module, Optional[nn.Module],
                                                             Optional[torch.Tensor]]],
                      grid, extra: Optional[Callable[[], torch.Tensor]] = None,
                      extra_params: Sequence[torch.Tensor] = (),
                      drop_path: Optional[nn.Module] = None) -> torch.Tensor:
    """``x + extra() + sum_i drop_path(gamma_i * branch_i(norm_i(x), grid))`` for ``steps``
    of ``(branch_i, norm_i, gamma_i)`` that all read the same ``x``; ``extra`` optional: a
    term of its own (with the parameters ``extra_params``).  In eager inference, with every
    branch's residual fused (``fused_residual``), the branches' linears accumulate into one
    copy of ``x + extra()`` by their GEMMs (:func:`accumulate_linears`); ``extra`` then runs
    after the branches (none of its output is held while they run), elsewhere first."""
    terms, striped = [], []
    for branch, norm, gamma in steps:
        _parallel_term(branch, x, grid, norm, gamma, terms, striped)
    out = extra().add_(x) if extra is not None else x.clone(
        memory_format=torch.contiguous_format)
    out = accumulate_linears(out.contiguous(), terms)
    del terms
    for branch, norm, gamma in striped:
        accumulate_striped(out, branch, x, grid, norm, gamma, residual_linear)
    return out


def _hidden_term(branch, x, grid, norm, gamma, terms: list, striped: list) -> None:
    h, _ = branch.hidden(x, grid, norm)
    terms.append((branch.out_proj, h, gamma))


def _striped_term(branch, x, grid, norm, gamma, terms: list, striped: list) -> None:
    striped.append((branch, norm, gamma))


#: a branch of :func:`parallel_residual`: its hidden tensor into ``terms`` (for
#: :func:`accumulate_linears`), or where it runs in row stripes into ``striped`` (added stripe
#: by stripe after the others)
_parallel_term = ffn_stripes.dispatch(mixer_stripes.dispatch(_hidden_term)(_striped_term))(
    _striped_term)


def _called_residual(shortcut, branch, x, grid, norm, gamma, drop_path, owned=False):
    return add_residual(shortcut, _branch_call(branch, x, grid, norm), gamma, drop_path)


@module_unrolled.dispatch(_called_residual, verify=lambda shortcut, branch, *_:
                          branch.fused_residual and module_unrolled.verify(branch))
def _residual(shortcut: torch.Tensor, branch: nn.Module, x: torch.Tensor, grid,
              norm: Optional[nn.Module], gamma: Optional[torch.Tensor],
              drop_path: Optional[nn.Module], owned: bool = False) -> torch.Tensor:
    """``shortcut + drop_path(gamma * branch(norm(x), grid))``; ``owned``: ``shortcut`` is
    ``x`` and the caller's to overwrite.  A branch whose output is not its linear's token by
    token, or with a forward hook, is called (:func:`_called_residual`)."""
    return _fused_residual(branch, x, grid, norm, shortcut, gamma, drop_path, owned)


@mixer_stripes.dispatch(lambda branch, x, grid, norm: branch(x if norm is None else norm(x),
                                                              grid))
def _branch_call(branch: nn.Module, x: torch.Tensor, grid, norm) -> torch.Tensor:
    """``branch(norm(x), grid)``; a global mixer on a large map from its summary over row
    stripes (one vector per image: ``from_summary``)."""
    return branch.from_summary(summarize(branch, x, grid, norm), x)


def _whole_residual(branch, x, grid, norm, shortcut, gamma, drop_path, owned) -> torch.Tensor:
    h, tail = branch.hidden(x, grid, norm)
    linear, drop = branch.out_proj, branch.out_drop
    if tail is None:
        return residual_branch(shortcut, linear, h, gamma, drop_path, drop, branch.training)
    weight, bias, rest = layer_scaled_linear(linear, gamma, h)
    y = recompute_in_backward(lambda t: F.linear(tail(t), weight, bias), h)
    return add_residual(shortcut, y if drop is None else drop(y), rest, drop_path)


def _striped_residual(branch, x, grid, norm, shortcut, gamma, drop_path, owned) -> torch.Tensor:
    out = shortcut if owned and shortcut.is_contiguous() else \
        shortcut.clone(memory_format=torch.contiguous_format)
    return accumulate_striped(out, branch, x, grid, norm, gamma, residual_linear)


#: the fused residual step: stripe by stripe where the branch runs in row stripes
#: (:mod:`.row_stripes`), else its hidden tensor through the seam's linear forms
_fused_residual = ffn_stripes.dispatch(mixer_stripes.dispatch(_whole_residual)(
    _striped_residual))(_striped_residual)


def _two_step(x, linear, y, gamma=None) -> torch.Tensor:
    z = linear(y)
    return x + z if gamma is None else torch.addcmul(x, gamma, z)


@gemm_accumulates.dispatch(_two_step)
def residual_linear(x: torch.Tensor, linear: nn.Linear, y: torch.Tensor,
                    gamma: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x + gamma * linear(y)`` (LayerScale ``gamma``, or none) as one GEMM that accumulates
    into a copy of ``x``: ``(x + gamma b) + y (gamma W)^T``.

    The same sum as the two-step form up to rounding, without the separate pass that scales
    and adds the linear's output.  No autograd (``out=``): for inference only.  Under
    autocast, or with mixed dtypes, it is the two-step form (an ``out=`` GEMM is not autocast),
    as it is for a linear with a forward hook (which expects the module to be called).
    """
    w, b = _scaled_weights(linear, gamma)
    out = x.clone(memory_format=torch.contiguous_format) if b is None else (x + b).contiguous()
    return _accumulate_product(out, y, w)


def _each_added(out, terms) -> torch.Tensor:
    for linear, y, gamma in terms:
        z = linear(y)
        out = out.add_(z) if gamma is None else out.addcmul_(gamma, z)
    return out


@gemm_accumulates.dispatch(_each_added, verify=lambda out, terms: all(
    gemm_accumulates.verify(out, linear, y) for linear, y, _ in terms))
def accumulate_linears(out: torch.Tensor, terms) -> torch.Tensor:
    """``out += sum_i gamma_i * linear_i(y_i)`` in place, for ``terms`` of
    ``(linear_i, y_i, gamma_i)`` (``gamma_i`` a LayerScale or None) and a contiguous ``out``
    the caller owns: the biases in one pass over ``out``, then each product accumulated by its
    GEMM (:func:`residual_linear` for several branches).  No autograd: for inference only;
    under autocast, with mixed dtypes or a hooked linear each term is added as
    ``linear_i(y_i)``."""
    scaled = [_scaled_weights(linear, gamma) for linear, _, gamma in terms]
    biases = [b for _, b in scaled if b is not None]
    if biases:
        out.add_(biases[0] if len(biases) == 1 else torch.stack(biases).sum(0))
    for (_, y, _), (w, _) in zip(terms, scaled):
        _accumulate_product(out, y, w)
    return out


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


def _training_branch(shortcut, linear, y, gamma=None, drop_path=None, dropout=None,
                     training=False) -> torch.Tensor:
    weight, bias, gamma = layer_scaled_linear(linear, gamma, y)
    y = F.linear(y, weight, bias)
    if dropout is not None:
        y = dropout(y)
    return add_residual(shortcut, y, gamma, drop_path)


@fast_form('residual step of inference', plain_unavailable)
def inference_step(shortcut, linear, y, gamma=None, drop_path=None, dropout=None,
                   training=False) -> bool:
    """:func:`residual_branch` in inference: ``training`` False, no gradient needed."""
    params = [t for t in (linear.weight, linear.bias, gamma) if t is not None]
    return not training and not needs_grad(shortcut, y, *params)


@inference_step.dispatch(_training_branch)
def residual_branch(shortcut: torch.Tensor, linear: nn.Linear, y: torch.Tensor,
                    gamma: Optional[torch.Tensor] = None, drop_path: Optional[nn.Module] = None,
                    dropout: Optional[nn.Module] = None, training: bool = False) -> torch.Tensor:
    """``shortcut + drop_path(gamma * dropout(linear(y)))``: a residual branch that ends in
    ``linear`` (LayerScale ``gamma`` and the modules optional).

    In inference the LayerScale and the residual go into the linear's GEMM
    (:func:`residual_linear`); otherwise DropPath, being linear, lets one ``addcmul`` do
    both, and in training the LayerScale goes into the linear's weight
    (:func:`layer_scaled_linear`)."""
    return residual_linear(shortcut, linear, y, gamma)


@layer_scale_folded.dispatch(lambda linear, gamma, y: (linear.weight, linear.bias, gamma))
def layer_scaled_linear(linear: nn.Linear, gamma: Optional[torch.Tensor], y: torch.Tensor
                        ) -> Tuple[torch.Tensor, Optional[torch.Tensor], Optional[torch.Tensor]]:
    """``(weight, bias, rest)`` with ``gamma * linear(y) = rest * F.linear(y, weight, bias)``.

    LayerScale folded into the weight: ``gamma (W y + b) = (gamma W) y + gamma b``, with
    ``rest=None``.  Under autograd the product ``gamma * z`` keeps ``z`` (a token-sized
    tensor) for ``gamma``'s gradient; the folded form keeps only the linear's input, which it
    keeps anyway, and ``gamma``'s gradient comes from the weight's (``sum_j dW'_ij W_ij +
    db'_i b_i``).  The folded weight is kept instead (out x in against tokens x out), so
    nothing is folded where ``y`` has no more rows (tokens) than input channels, nor where
    the precision is not plain (:func:`.policy.plain_precision`): ``(linear.weight, linear.bias,
    gamma)``.
    """
    return (*_scaled_weights(linear, gamma), None)


def _norm_then_linears(norm: Optional[nn.Module], x: torch.Tensor, linear: nn.Linear,
                       parts: int = 1) -> Tuple[torch.Tensor, ...]:
    return linear_blocks(x if norm is None else norm(x), linear.weight, linear.bias, parts)


@norm_recomputed.dispatch(_norm_then_linears)
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
    return _NormedLinears.apply(x, norm.weight, norm.bias, norm.eps, linear.weight,
                                linear.bias, parts)


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
        return linear_blocks(normed, weight, bias, parts)

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
