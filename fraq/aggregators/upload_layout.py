"""One client's whole adapter as one flat tensor, grouped by shape: :class:`Layout`.

A round buffer (:class:`fraq.aggregators.RoundBuffer`) groups a model's modules into
blocks that share (m, n) and every client's rank. Client k's upload is, block by block,
the L modules' ``B_l^T`` (L, r_k, m) row-major, then their ``A_l`` (L, r_k, n) row-major:

.. code-block:: text

    [ B_1^T ... B_L^T | A_1 ... A_L ]  block 1  |  [ ... ]  block 2  | ...

B is sent as its transpose because the server's B stack is column-major (an (L, r, m)
buffer seen as (L, m, r), as :func:`fraq.stack` lays it out): a client's B block is then
one strided copy into that buffer, as its A block is into the A stack. A single-matrix
(FLoRG) block carries only the A part, (L, r_k, min(m, n)).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from fraq.aggregators.payload import ClientUpdate

__all__ = ["Block", "Layout"]


@dataclass(frozen=True)
class Block:
    """One block of a client's flat upload: modules of one shape and rank.

    Attributes:
        names: the block's modules, in the buffer's order.
        m: rows of B, or None for single-matrix uploads (no B part).
        n: columns of A (min(m, n) for single-matrix uploads).
        rank: this client's rank r_k in every module of the block.
        b_offset: where the B part, (L, r_k, m) row-major, starts (None without B).
        a_offset: where the A part, (L, r_k, n) row-major, starts.
    """

    names: tuple[str, ...]
    m: int | None
    n: int
    rank: int
    b_offset: int | None
    a_offset: int

    @property
    def end(self) -> int:
        return self.a_offset + len(self.names) * self.rank * self.n

    def views(self, flat: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
        """The block's B^T part (L, r_k, m) (None without B) and A part (L, r_k, n): views of ``flat``."""
        L, r = len(self.names), self.rank
        Bt = None if self.m is None else flat[self.b_offset:self.a_offset].view(L, r, self.m)
        return Bt, flat[self.a_offset:self.end].view(L, r, self.n)


@dataclass(frozen=True)
class Layout:
    """How one client's adapter packs into one 1-D tensor (the module docstring's order).

    Attributes:
        names: every module, in the order :meth:`unpack` gives them (the buffer's).
        blocks: the :class:`Block` s, in the order of the flat tensor.
        numel: the flat tensor's length, sum over blocks of L r_k (m + n).
    """

    names: tuple[str, ...]
    blocks: tuple[Block, ...]
    numel: int
    _where: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_where", {name: (i, l) for i, b in enumerate(self.blocks)
                                            for l, name in enumerate(b.names)})

    @classmethod
    def build(cls, names, blocks: list[tuple[tuple[str, ...], int | None, int, int]]) -> Layout:
        """From the buffer's module order and its blocks as (names, m, n, rank), m None
        for single-matrix blocks."""
        out, at = [], 0
        for bnames, m, n, r in blocks:
            L = len(bnames)
            b_off = None if m is None else at
            a_off = at + (0 if m is None else L * r * m)
            block = Block(tuple(bnames), m, n, r, b_off, a_off)
            out.append(block)
            at = block.end
        return cls(tuple(names), tuple(out), at)

    def to_record(self) -> dict:
        """The layout as JSON-able data (module order and each block's names, m, n, rank),
        for a server to send a client; :meth:`from_record` rebuilds it."""
        return {"names": list(self.names), "blocks": [[list(b.names), b.m, b.n, b.rank] for b in self.blocks]}

    @classmethod
    def from_record(cls, record: object) -> Layout:
        """The layout :meth:`to_record` wrote, checked: every module once, in exactly one block,
        m None or an int >= 1, n and rank ints >= 1."""
        def count(x, none=False):
            return (none and x is None) or (isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 1)

        if not isinstance(record, Mapping) or set(record) != {"names", "blocks"}:
            raise ValueError(f"a layout record(={record!r}) must be a mapping with keys 'names' and 'blocks'")
        names, blocks = record["names"], record["blocks"]
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"a layout record's names(={names!r}) must be a list of module names")
        if not isinstance(blocks, (list, tuple)) or not all(
                isinstance(b, (list, tuple)) and len(b) == 4 and isinstance(b[0], (list, tuple))
                and count(b[1], none=True) and count(b[2]) and count(b[3]) for b in blocks):
            raise ValueError(f"a layout record's blocks(={blocks!r}) must be [names, m or None, n, rank] lists")
        in_blocks = [n for b in blocks for n in b[0]]
        if sorted(in_blocks) != sorted(names) or len(set(names)) != len(names) or not names:
            raise ValueError(f"a layout record's blocks hold modules {in_blocks}, not each of names {list(names)} "
                             "exactly once")
        return cls.build(names, [(tuple(b[0]), b[1], b[2], b[3]) for b in blocks])

    def shape_of(self, name: str) -> tuple[tuple[int, int] | None, tuple[int, int]]:
        """Module ``name``'s expected (B shape or None, A shape) for this client."""
        b = self.blocks[self._where[name][0]]
        return (None if b.m is None else (b.m, b.rank)), (b.rank, b.n)

    def check_factors(self, where: str, factors: object, dtype: torch.dtype | None = None,
                      devices: tuple[torch.device, ...] | None = None) -> list[torch.Tensor]:
        """Refuse ``factors`` (module -> (B, A)) unless it holds exactly this layout's
        modules with this client's shapes, dense, in ``dtype`` (default: the first
        factor's) on one of ``devices`` (default: the first factor's); the error names
        ``where`` and the module. Returns every factor tensor, B before A, module by module."""
        if not isinstance(factors, Mapping):
            raise TypeError(f"{where}.factors must be a mapping module -> (B, A), got {type(factors).__name__}")
        if set(factors) != set(self.names):
            missing = sorted(set(self.names) - set(factors))
            extra = sorted(set(factors) - set(self.names))
            raise ValueError(f"{where} has different modules from the round's: missing {missing}, extra {extra}")
        out: list[torch.Tensor] = []
        for name in self.names:
            at = f"{where}, module {name!r}"
            pair = factors[name]
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"{at}: must be a pair (B, A), got {type(pair).__name__}")
            want = self.shape_of(name)
            for label, t, shape in (("B", pair[0], want[0]), ("A", pair[1], want[1])):
                if shape is None:
                    if t is not None:
                        raise ValueError(f"{at}: single-matrix clients upload (None, A), got a B of type "
                                         f"{type(t).__name__}")
                    continue
                if not isinstance(t, torch.Tensor):
                    raise TypeError(f"{at}: {label} must be a torch.Tensor, got {type(t).__name__}")
                if tuple(t.shape) != shape:
                    raise ValueError(f"{at}: {label} has shape {tuple(t.shape)}, expected {shape} from the "
                                     "round's shapes and this client's rank")
                if t.layout is not torch.strided:
                    raise TypeError(f"{at}: {label} must be a dense tensor, got layout={t.layout}")
                dtype = dtype or t.dtype
                devices = devices or (t.device,)
                if t.dtype != dtype:
                    raise TypeError(f"{at}: {label} has dtype {t.dtype}, expected {dtype}")
                if t.device not in devices:
                    raise ValueError(f"{at}: {label} is on {t.device}, expected {' or '.join(map(str, devices))}")
                out.append(t)
        return out

    def check_flat(self, where: str, flat: object) -> torch.Tensor:
        """Refuse ``flat`` unless it is a dense 1-D tensor of :attr:`numel` entries."""
        if not isinstance(flat, torch.Tensor):
            raise TypeError(f"{where} must be a torch.Tensor, got {type(flat).__name__}")
        if flat.dim() != 1 or flat.numel() != self.numel or flat.layout is not torch.strided:
            raise ValueError(f"{where} must be a dense 1-D tensor of {self.numel} entries (this client's layout), "
                             f"got shape {tuple(flat.shape)}, layout={flat.layout}")
        if not flat.dtype.is_floating_point:
            raise TypeError(f"{where} must have a floating dtype, got {flat.dtype}")
        return flat

    def module_factors(self, flat: torch.Tensor, block: int) -> tuple[list | None, list[torch.Tensor]]:
        """Block ``block``'s modules' (B list or None, A list): views of ``flat``."""
        Bt, A = self.blocks[block].views(flat)
        return (None if Bt is None else [t.mT for t in Bt.unbind(0)]), list(A.unbind(0))

    def pack(self, update: ClientUpdate) -> torch.Tensor:
        """``update``'s factors as one new 1-D tensor in this layout, in their dtype on their
        device (checked as :meth:`check_factors` does); one copy per block and factor."""
        factors = update.factors if isinstance(update, ClientUpdate) else update
        first = self.check_factors("update", factors)[0]
        flat = torch.empty(self.numel, dtype=first.dtype, device=first.device)
        with torch.no_grad():
            for block in self.blocks:
                Bt, A = block.views(flat)
                if Bt is not None:
                    torch.stack([factors[name][0].mT for name in block.names], out=Bt)
                torch.stack([factors[name][1] for name in block.names], out=A)
        return flat

    def unpack(self, flat: torch.Tensor, *, scale: float | Mapping[str, float] = 1.0, weight: float = 1.0,
               upload_rank: int | None = None) -> ClientUpdate:
        """The :class:`ClientUpdate` whose factors are views of ``flat`` (no copy): B_l as
        the transpose of its B^T rows (column-major), A_l row-major, modules in
        :attr:`names` order; ``scale``, ``weight`` and ``upload_rank`` as given."""
        flat = self.check_flat("flat", flat)
        factors: dict[str, tuple[torch.Tensor | None, torch.Tensor]] = {}
        per_block = [self.module_factors(flat, i) for i in range(len(self.blocks))]
        for name in self.names:
            i, l = self._where[name]
            Bs, As = per_block[i]
            factors[name] = (None if Bs is None else Bs[l], As[l])
        return ClientUpdate(factors, scale=scale, weight=weight, upload_rank=upload_rank)


def check_weight(where: str, weight: object) -> float:
    """A client's data weight: a finite non-negative real number."""
    if isinstance(weight, torch.Tensor) and weight.numel() == 1:
        weight = weight.item()
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight) or weight < 0:
        raise ValueError(f"{where}(={weight!r}) must be a finite non-negative number")
    return float(weight)
