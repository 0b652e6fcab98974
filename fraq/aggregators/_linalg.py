"""Small linear-algebra helpers shared by the SVD-based baselines."""

from __future__ import annotations

import torch

from fraq._parallel import batch_map

__all__ = ["batched", "thin_svd", "own_copy", "first_columns", "first_rows", "product_floor", "select"]


def batched(fn, X: torch.Tensor):
    """``fn(X)`` for X (*, a, b), a batch split across CPU threads as the core splits its own.

    torch runs a batch of LAPACK calls as a serial loop, each call with LAPACK's whole
    thread team; :func:`fraq._parallel.batch_map` runs every call on one thread and
    spreads the batch over the threads torch was given. The baselines get the same
    treatment as FRAQ, so a measured speed-up is the algorithm's, not the threading's.
    ``fn`` returns a tensor or a tuple of tensors with X's batch dimensions in front.
    """
    if X.dim() <= 2:
        return batch_map(fn, X)  # one matrix: on one thread, as the core's
    lead = X.shape[:-2]
    out = batch_map(fn, X.reshape(-1, *X.shape[-2:]))
    if isinstance(out, tuple):
        return tuple(t.reshape(*lead, *t.shape[1:]) for t in out)
    return out.reshape(*lead, *out.shape[1:])


def thin_svd(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reduced SVD ``X = U diag(S) Vh`` of X (*, a, b), computed on the tall orientation.

    LAPACK's divide-and-conquer SVD (``gesdd``, what ``torch.linalg.svd`` calls on the
    CPU) runs markedly faster (close to 2x when measured) on an a x b matrix with a >= b
    than on its transpose, so a wide X is decomposed as X^T = V S U^T. The factors are the same up to signs. A batch runs one matrix per
    thread (:func:`batched`).
    Flops: about 4 a b^2 for a >= b, with vectors.
    """
    if X.shape[-2] >= X.shape[-1]:
        return batched(_svd, X)
    U, S, Vh = batched(_svd, X.mT)
    return Vh.mT, S, U.mT


def _svd(X: torch.Tensor):
    return torch.linalg.svd(X, full_matrices=False)


def own_copy(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy, so a small slice does not keep a large decomposition alive."""
    return t.clone(memory_format=torch.contiguous_format)


def first_columns(t: torch.Tensor, p: int) -> torch.Tensor:
    """The first ``p`` columns of a (m, q) factor, zero-padded when q < p."""
    q = t.shape[-1]
    if q >= p:
        return t[..., :p]
    return torch.cat([t, t.new_zeros(*t.shape[:-1], p - q)], dim=-1)


def first_rows(t: torch.Tensor, p: int) -> torch.Tensor:
    """The first ``p`` rows of a (q, n) factor, zero-padded when q < p."""
    q = t.shape[-2]
    if q >= p:
        return t[..., :p, :]
    return torch.cat([t, t.new_zeros(*t.shape[:-2], p - q, t.shape[-1])], dim=-2)


def product_floor(B: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    r"""The product's rounding per squared singular value of B @ A, B (*, m, r), A (*, r, n):
    :func:`fraq._energy.noise_floor` of :func:`fraq._gram.scale_sum`'s
    :math:`N = \sum_i \lVert b_i\rVert \lVert a_i\rVert`
    in the stacks' dtype, one value per matrix. A singular value at or below its root
    cannot be told from zero by any computation from these factors in this dtype (a dense
    SVD of the product included), so the energy rule counts it as zero: the rule FRAQ
    applies, and what keeps two exactly cancelling clients at rank 0 instead of a rank of
    rounding noise."""
    from fraq._energy import noise_floor, rounding_eps
    from fraq._gram import scale_sum

    d = min(B.shape[-2], A.shape[-1])
    return noise_floor(scale_sum(B, A).double(), d, B.shape[-1], rounding_eps(B.dtype))


def select(S: torch.Tensor, *, tau: float | None, rank: int | None, floor: torch.Tensor | None = None
           ) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Rank per matrix from descending singular values S (*, s), and a keep mask.

    The energy rule of :func:`fraq.select_rank` on S^2 when ``tau`` is given, else the
    fixed ``rank`` (capped at s); under ``tau``, squared values at or below ``floor`` (per
    matrix, :func:`product_floor`; None: none) count as zero, in the rank and the total.
    Returns p (int64, batch shape), p_max, and the mask (*, p_max) that is 1 for the first
    p columns of each matrix and 0 past them.
    """
    from fraq._energy import select_rank

    if tau is not None:
        lam = S.square()
        if floor is not None:
            lam = torch.where(lam > floor.to(lam.device, lam.dtype).unsqueeze(-1), lam, 0.0)
        p = select_rank(lam, tau)
    else:
        p = torch.full(S.shape[:-1], min(rank, S.shape[-1]), dtype=torch.int64, device=S.device)
    pmax = int(p.max().item()) if p.numel() else 0
    keep = (torch.arange(pmax, device=S.device) < p.unsqueeze(-1)).to(S.dtype)
    return p, pmax, keep
