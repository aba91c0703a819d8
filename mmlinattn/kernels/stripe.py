"""Row stripes: the one vocabulary of every striped computation (a backbone's branches and
stem, the segmentation heads, the detection head).

A map of ``height`` rows is computed a few rows at a time: a :class:`Stripe` is the rows
``[start, stop)`` it keeps and the rows ``[read_start, read_stop)`` it reads, its ``halo``
rows either side cut at the map's border.  :class:`Stripes` cuts a height into them: ``rows``
rows each, rounded up to a multiple of ``align`` so that every stripe starts at one (a
stride-``align`` sampler then sees the whole map's windows).
"""
from typing import Iterator, NamedTuple

__all__ = ['Stripe', 'Stripes']


class Stripe(NamedTuple):
    """Rows ``[start, stop)`` of a map, computed from its rows ``[read_start, read_stop)``."""
    start: int
    stop: int
    read_start: int
    read_stop: int

    @classmethod
    def of(cls, start: int, stop: int, halo: int, height: int) -> 'Stripe':
        """Rows ``[start, stop)`` with ``halo`` rows either side, cut at ``[0, height)``."""
        return cls(start, stop, max(0, start - halo), min(height, stop + halo))

    @property
    def keep(self) -> slice:
        """The kept rows within the rows read."""
        return slice(self.start - self.read_start, self.stop - self.read_start)


class Stripes(NamedTuple):
    """Stripes of ``rows`` rows (at least one, rounded up to a multiple of ``align``), each
    read with ``halo`` rows either side."""
    rows: int
    halo: int = 0
    align: int = 1

    @property
    def step(self) -> int:
        """Rows per stripe (the last may have fewer)."""
        return -(-max(1, self.rows) // self.align) * self.align

    def over(self, height: int) -> Iterator[Stripe]:
        """The stripes of a map of ``height`` rows, top to bottom."""
        for start in range(0, height, self.step):
            yield Stripe.of(start, min(height, start + self.step), self.halo, height)

    def split(self, height: int) -> bool:
        """More than one stripe, and each reads fewer rows than the map has: striping
        a map of ``height`` rows saves memory."""
        return self.step + 2 * self.halo < height
