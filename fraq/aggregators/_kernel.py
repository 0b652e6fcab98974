r"""Where a dense-SVD method gets the singular triplets of its aggregate: two kernels.

FlexLoRA, FedSVD and FedMomentum each decompose an m x n aggregate given as a product of
factors, :math:`M = BA` (B (*, m, r), A (*, r, n)), and use only its leading triplets
(or all of its at most r nonzero ones). ``kernel`` (an option of each method, written
``flexlora:kernel=fraq``) says how:

- ``"dense"`` (the default, and the reference: what the methods' public code does): form
  M by one GEMM on its tall orientation and take its reduced SVD (``gesdd``), chunk by
  chunk of a batch under a bound on the dense bytes held at once: O(m n min(m, n));
- ``"fraq"``: :func:`fraq.svd` on the factors, FRAQ's basis, r x r Gram and eigenproblem
  with its range and cancellation safeguards, then a p x p rotation: O((m + n) r^2),
  never m x n;
- ``"rsvd"`` (FlexLoRA only, :data:`RSVD_KERNELS`): what a user of the dense method reaches
  for first, :func:`torch.svd_lowrank` on the dense aggregate (Halko, Martinsson and
  Tropp, SIAM Rev. 53, 2011) with q = p + :data:`RSVD_OVERSAMPLE` columns and
  :data:`RSVD_POWER_ITERATIONS` power iterations, q capped at min(m, n, r) (where the
  range of M is captured exactly: rank M <= r), the batch split over threads as the
  dense SVD's: O(m n q) after the GEMM that forms M. Its rank-p truncation is
  near-optimal, not optimal: the excess shrinks with the gap at p (Halko et al.,
  Thm. 10.8); with q >= rank M it is exact to rounding.

Both give the leading triplets of the same M: the same products U_q S_q V_q^T for every
q where :math:`\sigma_q > \sigma_{q+1}`, to the rounding bounds of a first-order method
(Wedin, :func:`fraq.svd`); the singular vectors themselves are each determined up to
sign, and inside a cluster of equal singular values up to a rotation, by either kernel.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator

import torch

from fraq._svd import svd
from fraq.aggregators._linalg import batched, thin_svd

__all__ = ["DEFAULT_DENSE_BYTES", "KERNELS", "RSVD_KERNELS", "RSVD_OVERSAMPLE", "RSVD_POWER_ITERATIONS", "check_kernel",
           "check_dense_bytes", "dense_svd", "triplets", "use_kernel"]

KERNELS = ("dense", "fraq")
"""The values of a dense-SVD method's ``kernel`` option (module docstring); the first is the default."""

RSVD_KERNELS = KERNELS + ("rsvd",)
"""The kernels of a method that only ever uses the leading triplets (FlexLoRA), where a
randomized range finder applies; FedSVD and FedMomentum keep :data:`KERNELS`."""

RSVD_OVERSAMPLE = 10
"""The rsvd kernel's columns beyond p (q = p + 10: Halko et al. advise 5-10)."""

RSVD_POWER_ITERATIONS = 2
"""The rsvd kernel's power iterations (``torch.svd_lowrank``'s ``niter`` default)."""

DEFAULT_DENSE_BYTES = 2**30
"""The dense kernel's default bound on the dense matrices of a batch held at once (1 GiB)."""


def check_kernel(kernel: object, allowed: tuple[str, ...] = KERNELS) -> str:
    """``kernel`` if it is one of ``allowed``, else the ValueError naming it."""
    if not isinstance(kernel, str) or kernel not in allowed:
        raise ValueError(f"kernel(={kernel!r}) must be one of {list(allowed)}")
    return kernel


def check_dense_bytes(max_dense_bytes: object) -> int:
    """A positive int bound on the dense bytes held at once, else the error naming it."""
    if isinstance(max_dense_bytes, bool) or not isinstance(max_dense_bytes, numbers.Integral):
        raise TypeError(f"max_dense_bytes(={max_dense_bytes!r}) must be an int")
    if max_dense_bytes < 1:
        raise ValueError(f"max_dense_bytes(={max_dense_bytes}) must be positive")
    return int(max_dense_bytes)


def use_kernel(agg, kernel: object, max_dense_bytes: object, allowed: tuple[str, ...] = KERNELS) -> None:
    """Set ``agg``'s ``kernel`` (one of ``allowed``) and ``max_dense_bytes`` (checked, the
    error naming the argument) and its ``dense_factorization``: the instance says what it
    runs. FRAQ's kernel forms no m x n matrix; the rsvd kernel forms it and works on it,
    O(m n q) per module (seconds per LLaMA-3.2-3B module on a CPU), so a benchmark treats it
    as the dense path (:class:`fraq.aggregators.base.Aggregator`)."""
    agg.kernel = check_kernel(kernel, allowed)
    agg.max_dense_bytes = check_dense_bytes(max_dense_bytes)
    agg.dense_factorization = agg.kernel in ("dense", "rsvd")


def dense_svd(B: torch.Tensor, A: torch.Tensor, *, chunk: int
              ) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Reduced SVDs of the dense products B @ A, ``chunk`` matrices at a time.

    B (*, m, r), A (*, r, n) with at most one batch dimension. Yields ``(rows, left, S,
    right)`` with ``left`` (c, m, s), ``S`` (c, s), ``right`` (c, s, n), s = min(m, n), for
    the batch entries ``rows`` (unbatched input: one item with no batch dimension). The
    dense matrix is formed by one GEMM in its tall orientation (as (A^T B^T) when m < n)
    and freed as soon as it is decomposed.
    """
    for rows, dense, transposed in _dense_chunks(B, A, chunk):
        U, S, Vh = thin_svd(dense)
        del dense
        yield (rows, Vh.mT, S, U.mT) if transposed else (rows, U, S, Vh)


def _dense_chunks(B: torch.Tensor, A: torch.Tensor, chunk: int) -> Iterator[tuple[slice, torch.Tensor, bool]]:
    """``(rows, dense, transposed)``: the dense products B @ A of ``chunk`` batch entries at a
    time, each formed by one GEMM in its tall orientation (A^T B^T, ``transposed``, when
    m < n); an unbatched input is one item."""
    m, n = B.shape[-2], A.shape[-1]
    transposed = m < n
    batched_ = B.dim() == 3
    L = B.shape[0] if batched_ else 1
    for lo in range(0, L, chunk):
        rows = slice(lo, lo + chunk)
        Bc, Ac = (B[rows], A[rows]) if batched_ else (B, A)
        yield rows, (torch.matmul(Ac.mT, Bc.mT) if transposed else torch.matmul(Bc, Ac)), transposed


def triplets(B: torch.Tensor, A: torch.Tensor, *, kernel: str, rank: int | None, max_dense_bytes: int
             ) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The singular triplets of B @ A as :func:`dense_svd` yields them, by ``kernel``.

    ``"dense"``: every min(m, n) triplet, chunk by chunk under ``max_dense_bytes``.
    ``"fraq"``: the leading ``rank`` (None: all of the at most min(m, n, r) nonzero ones;
    capped there) from :func:`fraq.svd`, one item for the whole batch: a caller reads
    ``S.shape[-1]`` for the width it got, as it does of the dense kernel's.
    ``"rsvd"``: the leading ``rank`` (None: min(m, n, r)) of :func:`rsvd_dense`'s q
    triplets, chunk by chunk as the dense kernel's.
    """
    s = min(B.shape[-2], B.shape[-1], A.shape[-1])
    if kernel == "fraq":
        p = None if rank is None or s == 0 else min(rank, s)
        yield (slice(None), *svd(B, A, rank=p))
        return
    m, n = B.shape[-2], A.shape[-1]
    chunk = max(1, max_dense_bytes // max(1, m * n * B.dtype.itemsize))
    if kernel == "rsvd":
        p = s if rank is None else min(rank, s)
        yield from rsvd_dense(B, A, rank=p, chunk=chunk)
        return
    yield from dense_svd(B, A, chunk=chunk)


def rsvd_dense(B: torch.Tensor, A: torch.Tensor, *, rank: int, chunk: int
               ) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The leading ``rank`` triplets of each dense B @ A by :func:`torch.svd_lowrank`,
    ``chunk`` matrices at a time, yielded as :func:`dense_svd` yields them.

    q = min(rank + :data:`RSVD_OVERSAMPLE`, m, n, r) columns and
    :data:`RSVD_POWER_ITERATIONS` power iterations; the dense matrix is formed by one GEMM
    in its tall orientation and freed once decomposed. The Gaussian test matrix comes from
    torch's global generator (as ``svd_lowrank`` draws it), so two calls differ within the
    method's own error (none at q = rank M, where the range is captured exactly).
    Flops per matrix (d = min(m, n), D = max): 2 d D r to form it, then about
    (4 + 4 niter) d D q + O((d + D) q^2).
    """
    m, r, n = B.shape[-2], B.shape[-1], A.shape[-1]
    q = min(rank + RSVD_OVERSAMPLE, m, n, r)
    for rows, dense, transposed in _dense_chunks(B, A, chunk):
        if q == 0:
            U, S, V = dense[..., :0], dense.new_zeros(*dense.shape[:-2], 0), dense.mT[..., :0]
        else:
            U, S, V = batched(_lowrank(q), dense)
        del dense
        U, S, V = U[..., :rank], S[..., :rank], V[..., :rank]
        yield (rows, V, S, U.mT) if transposed else (rows, U, S, V.mT)


def _lowrank(q: int):
    def fn(X: torch.Tensor):
        return torch.svd_lowrank(X, q=q, niter=RSVD_POWER_ITERATIONS)
    return fn
