"""The value returned by :func:`fraq.recompress`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fraq._parallel import map_chunks, one_thread
from fraq.backends.base import merge_info

__all__ = ["RecompressResult", "empty_result", "join_results"]


@dataclass(frozen=True)
class RecompressResult:
    """A rank-p global adapter and the spectrum it was cut from.

    Attributes:
        B: (*, m, p_max) global LoRA B factor, scale 1 (``alpha = p``). When m <= n its
            columns are orthonormal; when m > n the rows of ``A`` are.
        A: (*, p_max, n) global LoRA A factor. ``B @ A`` is a best rank-p_i approximation
            of each matrix's exact aggregate (Eckart-Young). In a batch, columns of ``B``
            and rows of ``A`` past a matrix's own rank p_i are exact zeros.
        rank: selected rank; a Python int for an unbatched call, an int64 tensor of
            the batch shape otherwise.
        energy: retained fraction of the squared Frobenius norm, sum_{i<=p} sigma_i^2 /
            sum_i sigma_i^2, in the compute dtype (1 for an all-zero aggregate).
        singular_values: (*, min(d, r)) singular values of the aggregate, descending, in
            the compute dtype. Those past the numerical rank (below the product's rounding,
            or in the tail within the Gram's rounding: :mod:`fraq._energy`) are reported as 0.
        tau: the energy threshold used, or None in fixed-rank mode.
        backend: name of the basis backend.
        transposed: True when m > n, i.e. the computation ran on the transpose.
        info: backend diagnostics (fallbacks taken, iteration counts).
        host_rank: the ranks of the flattened batch as Python ints, where the call read them
            on the host anyway (None otherwise); see :meth:`rank_list`.
    """

    B: torch.Tensor
    A: torch.Tensor
    rank: int | torch.Tensor
    energy: float | torch.Tensor
    singular_values: torch.Tensor
    tau: float | None
    backend: str
    transposed: bool
    info: dict = field(default_factory=dict)
    host_rank: tuple[int, ...] | None = field(default=None, repr=False)

    def rank_list(self) -> list[int]:
        """The ranks of the flattened batch as Python ints: the call's own host read where it
        made one (:attr:`host_rank`), else read from :attr:`rank` now (a device synchronization
        on a GPU)."""
        if self.host_rank is not None:
            return list(self.host_rank)
        return self.rank.reshape(-1).tolist() if isinstance(self.rank, torch.Tensor) else [self.rank]

    @property
    def max_rank(self) -> int:
        """Width of the padded factors, the largest rank in the batch."""
        return self.B.shape[-1]

    def downlink_params(self) -> int:
        """Parameters broadcast for this adapter: sum over matrices of (m + n) p_i."""
        m, n = self.B.shape[-2], self.A.shape[-1]
        ranks = self.rank if isinstance(self.rank, torch.Tensor) else torch.tensor(self.rank)
        return int(ranks.sum().item()) * (m + n)


def join_results(parts: list[RecompressResult], bounds: list[int], batch: tuple[int, ...],
                 info_rules: dict[str, str]) -> RecompressResult:
    """The results of a batch computed chunk by chunk (``bounds``, over the flattened batch),
    as one result of the caller's ``batch`` shape: factors zero-padded to the largest rank,
    ``info`` merged by ``info_rules`` (see :func:`fraq.backends.base.merge_info`).

    The chunks' factors are copied by the threads that computed them (each chunk on one
    thread, :func:`fraq._parallel.map_chunks`): an OpenMP team woken here would keep
    spinning into the next call's fan-out. The small concatenations run on one thread too.
    """
    nb = bounds[-1]
    head = parts[0]
    m, n = head.B.shape[-2], head.A.shape[-1]
    pmax = max(res.B.shape[-1] for res in parts)
    Bg, Ag = _like(head.B, (nb, m, pmax)), _like(head.A, (nb, pmax, n))

    def place(Bo, Ao, offset):
        res = parts[bounds.index(offset)]
        p = res.B.shape[-1]
        Bo[..., :p] = res.B
        Ao[:, :p, :] = res.A
        if p < pmax:
            Bo[..., p:] = 0
            Ao[:, p:, :] = 0

    map_chunks(place, bounds, Bg, Ag, with_offset=True)
    with one_thread():
        rank = torch.cat([res.rank for res in parts]).reshape(batch)
        energy = torch.cat([res.energy for res in parts]).reshape(batch)
        sv = torch.cat([res.singular_values for res in parts]).reshape(*batch, -1)
    return RecompressResult(
        B=Bg.reshape(*batch, m, pmax), A=Ag.reshape(*batch, pmax, n), rank=rank, energy=energy,
        singular_values=sv, tau=head.tau, backend=head.backend, transposed=head.transposed,
        info=merge_info([res.info for res in parts], info_rules),
        host_rank=None if any(res.host_rank is None for res in parts) else sum((res.host_rank for res in parts), ()),
    )


def _like(t: torch.Tensor, shape: tuple[int, int, int]) -> torch.Tensor:
    """An empty (nb, rows, cols) tensor laid out as the chunk result ``t``: row-major, or
    column-major matrices when ``t`` is (so the chunks' copies run contiguous to contiguous)."""
    if t.dim() == 3 and not t.is_contiguous() and t.mT.is_contiguous():
        return t.new_empty(shape[0], shape[2], shape[1]).mT
    return t.new_empty(shape)


def empty_result(plan, batch: tuple, m: int, n: int, s: int, transposed: bool,
                 device: torch.device) -> RecompressResult:
    """No matrices (an empty batch) or no directions (r, m or n zero, s = 0), for a call's
    :class:`fraq._plan.Plan` (its rank or tau, dtypes and backend).

    With s = 0 the aggregate is the zero m x n matrix, and its best approximation of any
    rank is itself, of rank 0: zero-width factors in both modes (a fixed rank p cannot be
    reached, and p zero columns would not be orthonormal). An empty batch of s > 0
    problems keeps the requested width p.
    """
    p = 0 if plan.rank is None or s == 0 else plan.rank
    B = torch.zeros(*batch, m, p, dtype=plan.out_dtype, device=device)
    A = torch.zeros(*batch, p, n, dtype=plan.out_dtype, device=device)
    sv = torch.zeros(*batch, s, dtype=plan.cdt, device=device)
    if len(batch) == 0:
        rank_out, energy = p, 1.0
    else:
        rank_out = torch.full(batch, p, dtype=torch.int64, device=device)
        energy = torch.ones(batch, dtype=plan.cdt, device=device)
    return RecompressResult(B=B, A=A, rank=rank_out, energy=energy, singular_values=sv, tau=plan.tau,
                            backend=plan.backend, transposed=transposed)
