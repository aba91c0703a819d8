"""The residual branch: a block's mixer or FFN, and the one interface through which the
fast-path wing (:mod:`mmlinattn.kernels`) runs it fused into the residual sum or in row
stripes.

A branch's own ``forward(x, grid)`` is its plain maths.  A block adds it to the residual
stream through the seam (``kernels.residual_step``), which reads only what :class:`Branch`
declares here:

* ``hidden(x, grid, norm)``: the output linear's input from ``norm(x)``, with the fast forms
  composed in, as a :class:`Hidden`; the branch's output is ``out_drop(out_proj(...))`` of it,
  token by token, so the seam may accumulate the residual into ``out_proj``'s GEMM (a branch
  whose output is not, ``fused_residual = False``, is called whole);
* ``row_halo``: a local branch reads that many token rows either side, so inference may run it
  in row stripes; None for a global branch;
* ``summary_passes``: a global mixer that reads the other tokens only through a summary of
  fixed size runs in that many passes over row stripes (0: not at all).  Pass ``i`` adds up
  ``summary_rows(x_rows, grid_rows, norm, state)`` over the stripes and ``finish_summary``
  turns the total into the next ``state``; the output is then ``hidden(x_rows, grid_rows,
  norm, summary=state)`` stripe by stripe, or, for a branch whose output is one vector per
  image, ``from_summary(state, x)``.  Stripes start at multiples of ``row_align`` and hold
  about a fixed number of bytes of the ``stripe_width``-channel tensor.
"""
from typing import Callable, ClassVar, List, NamedTuple, Optional, Union

import torch
import torch.nn as nn

Summary = Union[torch.Tensor, List[torch.Tensor], tuple]


class Hidden(NamedTuple):
    """What a branch's output linear reads: ``h``, or ``tail(h)`` where ``tail`` is to be
    recomputed in the backward together with the linear (only ``h`` is kept)."""
    h: torch.Tensor
    tail: Optional[Callable[[torch.Tensor], torch.Tensor]] = None


class Branch(nn.Module):
    """A residual branch, as the seam runs it (see the module docstring).

    A subclass writes its plain ``forward(x, grid)`` and :meth:`hidden`, and names its output
    linear and the dropout after it (``out_proj_name``; ``out_drop_name``, None for none).
    """
    out_proj_name: ClassVar[str] = 'proj'
    out_drop_name: ClassVar[Optional[str]] = None
    #: the output is ``out_drop(out_proj(hidden))`` token by token: the seam may fuse the
    #: residual into the output linear
    fused_residual: ClassVar[bool] = True
    #: token rows either side of a token that the branch reads (None: every token)
    row_halo: Optional[int] = None
    #: passes of a global mixer's summary over row stripes (0: the branch has no summary)
    summary_passes: int = 0
    #: stripes start at multiples of this many rows
    row_align: int = 1

    @property
    def out_proj(self) -> nn.Linear:
        return getattr(self, self.out_proj_name)

    @property
    def out_drop(self) -> Optional[nn.Module]:
        return None if self.out_drop_name is None else getattr(self, self.out_drop_name)

    @property
    def stripe_width(self) -> int:
        """Channels of the widest per-token tensor a stripe holds (stripes are sized by it)."""
        return self.out_proj.in_features

    def hidden(self, x: torch.Tensor, grid, norm: Optional[nn.Module] = None,
               summary: Optional[Summary] = None) -> Hidden:
        """The output linear's input from ``norm(x)`` (``x`` for no norm); with ``summary``
        (a two-pass mixer's, :meth:`finish_summary`), that of these rows against the whole
        map."""
        raise NotImplementedError

    def summary_rows(self, x: torch.Tensor, grid, norm: Optional[nn.Module],
                     state: Optional[Summary]) -> Summary:
        """These rows' additive part of a summary pass (``state`` None in the first pass,
        then what :meth:`finish_summary` made of the pass before): a tensor, or a list of
        pieces that are concatenated."""
        raise NotImplementedError

    def finish_summary(self, total: Summary, x: torch.Tensor, grid,
                       state: Optional[Summary]) -> Summary:
        """A pass's summary from the total of its parts over all rows of ``x``; by default
        ``(total, count)``, ``count`` the token count or each image's valid-token count (a
        mean over the keys is the sum over the count)."""
        valid = grid.valid_tokens(x)
        return total, x.shape[1] if valid is None else valid.sum(-1)

    def from_summary(self, summary: Summary, x: torch.Tensor) -> torch.Tensor:
        """The output of a branch whose output is one vector per image
        (``fused_residual = False``), from its summary."""
        raise NotImplementedError
