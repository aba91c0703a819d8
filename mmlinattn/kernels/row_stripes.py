"""Row stripes of a residual branch in inference, for maps too large to hold its
intermediates whole.

An FFN's hidden tensor (tokens x 4-8 times the channels) is the widest tensor of a pyramid's
first stage: 8 GiB for InfViT-small's stage 1 on an 8192² image, two of them alive at once.
Every step of an FFN is per token except its depthwise convolution, which reads ``row_halo``
rows above and below; so in inference the branch can run a few rows of the token grid at a
time, each stripe with its halo rows, and add its output to the rows of the residual stream it
belongs to.

A global mixer (linear attention) reads every token, but only through a summary of fixed size
(the key sums ``phi(K)^T [V | 1]``): it runs in two passes over the stripes, the first adding
up each stripe's part of the summary, the second computing each stripe's output from its own
rows and the whole summary (more passes where the summary needs one of its own: Linear-InfSA's
q̄, SOFT++'s landmarks).  Its projections, feature maps and output never exist for more than a
stripe at a time.  Either way the result equals the whole-map branch up to rounding.

A branch takes part through the interface of
:class:`~mmlinattn.models.layers.branch.Branch`: a local branch by its ``row_halo``, a global
mixer by its ``summary_passes`` (with ``summary_rows`` / ``finish_summary``); the stripes are
:class:`.stripe.Stripes`.
"""
import math
from typing import Callable, Optional

import torch
import torch.nn as nn

from . import policy
from .dispatch import fast_form
from .stripe import Stripes


@fast_form('FFN row stripes', policy.eager_unavailable)
def ffn_stripes(branch: nn.Module, x: torch.Tensor, grid, *_) -> bool:
    """The local ``branch`` (its ``row_halo`` not None) runs in row stripes of ``grid`` on the
    tokens ``x``: eager inference, one token per grid cell, a hidden tensor above
    :data:`.policy.STRIPE_HIDDEN_BYTES`, and more than one stripe."""
    if branch.row_halo is None or branch.summary_passes or x.dim() != 3:
        return False
    return (x.shape[0] * x.shape[1] * branch.out_proj.in_features * x.element_size()
            > policy.STRIPE_HIDDEN_BYTES and _stripable(branch, x, grid))


@fast_form('global mixer in two passes over row stripes', policy.eager_unavailable)
def mixer_stripes(branch: nn.Module, x: torch.Tensor, grid, *_) -> bool:
    """The global mixer ``branch`` (``summary_passes``) runs in passes over row stripes of
    ``grid``: eager inference, one token per grid cell, a token map ``x`` above
    :data:`.policy.STRIPE_MAP_BYTES`, and more than one stripe."""
    return (branch.summary_passes > 0
            and x.numel() * x.element_size() > policy.STRIPE_MAP_BYTES
            and _stripable(branch, x, grid))


def _stripable(branch: nn.Module, x: torch.Tensor, grid) -> bool:
    # a hook on the branch or a layer in it expects that module to be called whole
    if branch.row_halo is None or grid is None or branch.training or \
            policy.hooked(*branch.modules()):
        return False
    return (x.dim() == 3 and x.shape[1] == grid.num_tokens
            and branch_stripes(branch, x, grid).split(grid.hw[0])
            and policy.eager_inference(x, *branch.parameters()))


def branch_stripes(branch: nn.Module, x: torch.Tensor, grid) -> Stripes:
    """The branch's stripes: its ``row_halo`` and ``row_align``, and rows of about
    :data:`.policy.STRIPE_TARGET_BYTES` of its widest per-token tensor (``stripe_width``
    channels) on the CPU, :data:`.policy.DEVICE_STRIPE_TARGET_BYTES` elsewhere."""
    target = policy.STRIPE_TARGET_BYTES if x.device.type == 'cpu' else \
        policy.DEVICE_STRIPE_TARGET_BYTES
    rows = target // (x.shape[0] * grid.hw[1] * branch.stripe_width * x.element_size())
    return Stripes(rows, branch.row_halo, branch.row_align)


def summarize(branch: nn.Module, x: torch.Tensor, grid, norm,
              cut: Optional[Stripes] = None):
    """The summary passes of a global mixer (``summary_passes`` of them): each adds the
    branch's summary parts over the stripes (no halo: a part is per token) and has the branch
    finish them into the state the next pass (or the output) reads."""
    cut = (cut or branch_stripes(branch, x, grid))._replace(halo=0)
    width, state = grid.hw[1], None
    for _ in range(branch.summary_passes):
        total = None
        for a, b, _, _ in cut.over(grid.hw[0]):
            part = branch.summary_rows(x[:, a * width:b * width], grid.rows(a, b), norm, state)
            # a tensor is added; a list of pieces (rows of a map) concatenated
            total = part if total is None else \
                total + part if isinstance(part, list) else total.add_(part)
        state = branch.finish_summary(total, x, grid, state)
    return state


def accumulate_striped(out: torch.Tensor, branch: nn.Module, x: torch.Tensor, grid, norm,
                       gamma, residual_linear: Callable) -> torch.Tensor:
    """``out += gamma * branch(norm(x), grid)`` stripe by stripe, each stripe's rows of
    ``out`` (contiguous, the caller's) through the seam's ``residual_linear(rows, linear, h,
    gamma)``.  A two-pass mixer first gets its summary over all stripes.

    ``out`` may be ``x`` itself (a stream the caller owns and reads no more): each stripe then
    reads the input rows it has not yet overwritten, and the rows of its halo above from a
    copy kept before the stripe above was written."""
    height, width = grid.hw
    halo, linear = branch.row_halo, branch.out_proj
    cut = branch_stripes(branch, x, grid)
    summary = summarize(branch, x, grid, norm, cut) if branch.summary_passes else None
    in_place, above = out.data_ptr() == x.data_ptr(), None
    for a, b, s, e in cut.over(height):
        if above is None:
            x_rows = x[:, s * width:e * width].contiguous()
        else:  # rows [s, a) were overwritten: their input from the copy
            x_rows = torch.cat([above, x[:, a * width:e * width]], dim=1)
        h, _ = branch.hidden(x_rows, grid.rows(s, e), norm, summary)
        h = h[:, (a - s) * width:(b - s) * width]
        if in_place and halo and b < height:  # the next stripe's halo above, still unwritten
            above = x_rows[:, (max(0, b - halo) - s) * width:(b - s) * width].clone()
        part = out[:, a * width:b * width]
        part.copy_(residual_linear(part, linear, h, gamma))
    return out


# -- a convolutional stem in row stripes -------------------------------------------------------
def _stem_margin(units) -> int:
    """Input rows either side of an output row that a chain of (kernel k, stride s,
    padding k // 2) convolutions reads: its receptive field's half height."""
    half = 0
    for unit in reversed(list(units)):
        half = half * unit.stride + unit.conv.kernel_size[0] // 2
    return half


@fast_form('stem in row stripes', policy.eager_unavailable)
def stem_stripes(stem, x: torch.Tensor, grid, whole: Optional[Callable] = None) -> bool:
    """The chain of conv units ``stem`` (a :class:`~mmlinattn.models.layers.embed.ConvStem`,
    or a tuple of one :class:`~mmlinattn.models.layers.embed.PatchConv`) runs in row stripes
    of its output on the NCHW input ``x``: eager inference, its widest map (the first unit's
    output) above :data:`.policy.STRIPE_HIDDEN_BYTES`, norms that read each pixel alone, and
    more than one stripe."""
    first = next(iter(stem))
    height = -(-x.shape[-2] // first.stride)
    widest = (x.shape[0] * first.conv.out_channels * height * -(-x.shape[-1] // first.stride)
              * x.element_size())
    if widest <= policy.STRIPE_HIDDEN_BYTES:
        return False
    return (_stem_rows(stem, x) < _stem_height(stem, x.shape[-2])
            and _rows_alone(x, stem))


def _rows_alone(x: torch.Tensor, units) -> bool:
    """The modules ``units`` and their submodules may run on a few rows of ``x`` at a time:
    eager inference, no hook, no norm that reads the whole map."""
    modules = [m for unit in units for m in unit.modules()]
    return (not policy.hooked(*modules) and all(map(per_pixel, modules))
            and policy.eager_inference(x, *(p for m in modules for p in m.parameters(False))))


def per_pixel(module: nn.Module) -> bool:
    """Not a norm that reads more than a row of the map, so a stripe of rows computes it as the
    whole map does: a batch norm with running statistics in eval mode, or a layer norm over one
    (the last) dimension, are; batch statistics (training, or no running statistics), a group,
    an instance or a wider layer norm, and any other module named a norm (unknown, so assumed
    to read the whole map) are not.  Shared with the segmentors' and detectors' heads."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return not (module.training or module.running_mean is None)
    if isinstance(module, nn.LayerNorm):
        return len(module.normalized_shape) == 1
    return 'norm' not in type(module).__name__.lower()


@fast_form('per-pixel map in row stripes', policy.eager_unavailable)
def per_pixel_stripes(fn: Callable, x: torch.Tensor, grid, modules) -> bool:
    """:func:`per_pixel_rows` runs in stripes: eager inference, an NCHW map above
    :data:`.policy.STRIPE_MAP_BYTES`, norms (``modules``) that read each pixel alone."""
    return (x.dim() == 4 and x.numel() * x.element_size() > policy.STRIPE_MAP_BYTES
            and _rows_alone(x, modules))


@per_pixel_stripes.dispatch(lambda fn, x, grid, modules: fn(x, grid).contiguous())
def per_pixel_rows(fn: Callable, x: torch.Tensor, grid, modules) -> torch.Tensor:
    """``fn(x, grid).contiguous()`` for a per-pixel ``fn`` (a norm of ``modules``, the
    batch padding zeroed) on the NCHW map ``x``: on a map above
    :data:`.policy.STRIPE_MAP_BYTES` in eager inference, written into the contiguous output
    a few rows at a time, so that neither ``fn``'s output nor a layout copy of it is ever
    whole beside it."""
    rows = policy.STRIPE_TARGET_BYTES // (x[:, :, :1].numel() * x.element_size())
    out = None
    for a, b, _, _ in Stripes(rows).over(x.shape[-2]):
        part = fn(x[:, :, a:b], grid.rows(a, b))
        if out is None:
            out = part.new_empty(part.shape[:2] + x.shape[-2:])
        out[:, :, a:b] = part
    return out


def _total_stride(stem: nn.Module) -> int:
    return math.prod(unit.stride for unit in stem)


def _stem_height(stem: nn.Module, height: int) -> int:
    for unit in stem:
        height = -(-height // unit.stride)  # each unit maps H to ceil(H / s)
    return height


def _stem_rows(stem: nn.Module, x: torch.Tensor) -> int:
    """Output rows per stripe: about :data:`.policy.STRIPE_TARGET_BYTES` of the first unit's
    output (more off the CPU), and at least four times the margin."""
    first, total = next(iter(stem)), _total_stride(stem)
    target = policy.STRIPE_TARGET_BYTES if x.device.type == 'cpu' else \
        policy.DEVICE_STRIPE_TARGET_BYTES
    per_row = (x.shape[0] * first.conv.out_channels * -(-x.shape[-1] // first.stride)
               * (total // first.stride) * x.element_size())
    margin = -(-_stem_margin(stem) // total)
    return max(4 * margin, target // per_row)


@stem_stripes.dispatch(lambda stem, x, grid, whole: whole(x, grid))
def run_stem(stem, x: torch.Tensor, grid, whole: Callable):
    """``whole(x, grid)``, the stem's own forward on the whole map, or the same output in row
    stripes (:func:`striped_stem`) where :func:`stem_stripes` rules so."""
    return striped_stem(stem, x, grid)


def striped_stem(stem: nn.Module, x: torch.Tensor, grid):
    """``stem(x, grid)`` stripe by stripe: output rows ``[a, b)`` from the input rows
    ``[S (a - m), S (b + m))`` (``S`` the total stride, ``m`` output rows that cover the
    receptive field), so every stripe's convolutions are aligned with the whole map's and its
    kept rows never read the stripe's own border.  Returns ``(output map, its grid)`` as the
    stem does; the output is channels-last."""
    total = _total_stride(stem)
    height = x.shape[-2]
    out_h = _stem_height(stem, height)
    margin = -(-_stem_margin(stem) // total)
    rows = _stem_rows(stem, x)
    out = None
    for a, b, s, e in Stripes(rows, margin).over(out_h):
        part, part_grid = x[:, :, s * total:min(height, e * total)], \
            grid.rows(s * total, min(height, e * total))
        for unit in stem:  # each unit on the whole stripe (its forward could stripe again)
            part, part_grid = unit.whole(part, part_grid)
        if out is None:
            out = torch.empty(part.shape[:2] + (out_h, part.shape[-1]), dtype=part.dtype,
                              device=part.device, memory_format=torch.channels_last)
        out[:, :, a:b] = part[:, :, a - s:b - s]
        del part, part_grid
    for unit in stem:
        grid = grid.downsample(unit.stride, hw=(-(-grid.hw[0] // unit.stride),
                                                -(-grid.hw[1] // unit.stride)))
    return out, grid


# -- a stage's input, which its caller hands over -----------------------------------------------
@fast_form('position embedding added into an owned map', policy.eager_unavailable)
def embed_in_place(embed: nn.Module, x: torch.Tensor, grid, owned: bool) -> bool:
    """A stage adds its position embedding ``embed`` into its input ``x``, which the caller
    reads no more (``owned``): eager inference and no hook on ``embed``."""
    return owned and not policy.hooked(embed) and policy.eager_inference(x, *embed.parameters())


@embed_in_place.dispatch(lambda embed, x, grid, owned: embed(x, grid, inplace=False))
def add_position(embed: nn.Module, x: torch.Tensor, grid, owned: bool) -> torch.Tensor:
    """``embed(x, grid)``, added into ``x`` itself where the caller owns it (``owned``) and
    :func:`embed_in_place` rules so."""
    return embed(x, grid, inplace=True)


@fast_form("blocks' outputs into an owned stage input", policy.eager_unavailable)
def reuses_stage_input(stage: nn.Module, t: torch.Tensor, owned: bool) -> bool:
    """Each block's output is copied into the caller's map, which the tokens ``t`` view and
    which the caller reads no more (``owned``), so that map is not a third one beside the
    blocks' input and output: eager inference, a map above :data:`.policy.STRIPE_MAP_BYTES`,
    no hook on a block (which may keep a block's input)."""
    return (owned and t._base is not None and t.is_contiguous()
            and t.numel() * t.element_size() > policy.STRIPE_MAP_BYTES
            and not policy.hooked(*stage.blocks)
            and policy.eager_inference(t, *stage.parameters()))


@reuses_stage_input.dispatch(lambda stage, t, owned: None)
def stage_home(stage: nn.Module, t: torch.Tensor, owned: bool) -> Optional[torch.Tensor]:
    """Where a stage copies each block's output: the tokens ``t`` themselves where
    :func:`reuses_stage_input` rules so, else None (each block's output stays its own)."""
    return t
