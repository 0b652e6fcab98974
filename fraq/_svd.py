r"""The thin SVD of a stacked aggregate, from its factors (FRAQ's kernel, Section 3.3).

Every method that forms the m x n aggregate :math:`M = \sum_k a_k s_k B_k A_k = BA` and
decomposes it densely (FlexLoRA, FedSVD, FedMomentum) needs only its leading singular
triplets, and those come from the stacked factors at FRAQ's cost: :func:`svd` runs
:func:`fraq.recompress` at a fixed rank p (basis, coordinates, Gram eigenproblem, map
back; its range rescue, cancellation guard and fallbacks included) and turns the rank-p
adapter it returns into singular factors with one small SVD.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import NamedTuple

import torch

from fraq._orient import orient, unorient
from fraq._parallel import batch_map
from fraq._plan import Plan, check_options
from fraq._recompress import _factors, _recompress_impl
from fraq.backends import AUTO

__all__ = ["ThinSVD", "svd"]


class ThinSVD(NamedTuple):
    """:func:`fraq.svd`'s factors, :math:`M_p = U\\,\\mathrm{diag}(S)\\,V_h`, unpacked as
    ``U, S, Vh = fraq.svd(B, A)`` (the order of ``torch.linalg.svd``).

    Attributes:
        U: (*, m, p) left singular vectors, orthonormal columns.
        S: (*, p) singular values, descending, non-negative, in the compute dtype.
        Vh: (*, p, n) right singular vectors, orthonormal rows.
    """

    U: torch.Tensor
    S: torch.Tensor
    Vh: torch.Tensor


def svd(
    B: torch.Tensor,
    A: torch.Tensor,
    *,
    rank: int | None = None,
    backend: str = AUTO,
    eig_dtype: torch.dtype | None = None,
    gram: str = "auto",
    eigensolver: str = "auto",
    pipeline: str = "auto",
) -> ThinSVD:
    r"""The leading p singular triplets of the aggregate ``B @ A``, never forming it.

    With the stacks of :func:`fraq.stack`, :math:`BA = \sum_k a_k s_k B_k A_k`. Oriented
    along the smaller side d = min(m, n) (:mod:`fraq._orient`), :math:`M = XY`, and

    .. math::
        L_p R_p = \mathrm{recompress}(X, Y;\ p),\qquad
        R_p^\top = P\,\Sigma\,Z^\top\ (\text{thin SVD, } D \times p),\qquad
        M_p = (L_p Z)\,\Sigma\,P^\top,

    so :math:`U = L_p Z` (d x p) and :math:`V = P` (D x p), swapped back when m > n.
    :func:`fraq.recompress` gives :math:`L_p = QU_p` with orthonormal columns and
    :math:`R_p = U_p^\top H`, whose rows are the singular directions of the long side
    scaled by :math:`\sigma_i` up to the Gram's rounding; the p x p rotation Z takes that
    rounding out, so U and V are orthonormal to working precision and
    :math:`U \mathrm{diag}(S) V_h` is the rank-p adapter :func:`fraq.recompress` returns
    up to the small SVD's rounding. Rows of ``R_p`` in the rounding (past the numerical
    rank, or p above it) come out as an orthonormal completion with singular values at
    the rounding level, as a dense SVD's do.

    Accuracy: that of :func:`fraq.recompress` at rank p, which the fidelity suite
    certifies first-order (``tests/test_first_order.py``): the subspaces of the leading
    p directions within Wedin's bound :math:`\sin\theta \le c\,u\,\sigma_1 /
    (\sigma_p - \sigma_{p+1})` of the float64 SVD of the dense product, and each
    :math:`\sigma_i` within Weyl's :math:`c\,u\,\sigma_1` (u the compute dtype's unit
    roundoff, c = sqrt(min(m, n))). An individual singular vector is as well defined as
    its own gaps allow (the same bound with :math:`\min(\sigma_{i-1} - \sigma_i,
    \sigma_i - \sigma_{i+1})`); a dense SVD is held to the same bound.

    Range and invariance: those of :func:`fraq.recompress` (any finite factors whose
    aggregate's largest singular value is in [tiny, max / 2] of the compute dtype;
    factors rescaled against each other, B c and A / c, give the same result to
    rounding). Exactly cancelling clients, or an all-zero aggregate, give S = 0 with
    orthonormal U and Vh.

    Args:
        B: (*, m, r) stacked B factor, e.g. from :func:`fraq.stack`.
        A: (*, r, n) stacked A factor.
        rank: p, 1 <= p <= min(m, n, r); default None: min(m, n, r), the full stacked
            rank (the whole aggregate, M_p = M). An int or a 0-dimensional integer
            tensor.
        backend, eig_dtype, gram, eigensolver, pipeline: as :func:`fraq.recompress`.

    Returns:
        :class:`ThinSVD` ``(U, S, Vh)``: U (*, m, p), S (*, p), Vh (*, p, n). U and Vh
        in the input dtype, S in the compute dtype (float32 for float16 and bfloat16
        input, whose products are computed in float32). With r, m or n zero the
        aggregate is zero and p is 0.

    Raises:
        ValueError: ``rank`` outside [1, min(m, n, r)], naming it and the limit; the
            factors or options :func:`fraq.recompress` refuses (NaN or Inf, out of range,
            an unknown backend), with its messages.
        TypeError: a ``rank`` that is not an int.

    Cost per matrix: :func:`fraq.recompress` at rank p (about (2d + D) r^2 for LoRA
    stacks, linear in r once r passes d) plus the thin SVD of a D x p matrix (about
    6 D p^2 + O(p^3)) and a d x p by p x p product: O((m + n) r^2), never m n.
    Choosing p: the largest rank a caller uses (FlexLoRA: max_k r_k); the leading p
    triplets of a rank-P call are those of a rank-p call up to rounding where
    sigma_p > sigma_{p+1}.

    References: Golub and Van Loan, *Matrix Computations*, 4th ed., Sec. 8.6 (thin SVD)
    and Thm. 8.6.5 (Wedin); the FRAQ paper, Section 3.3.

    Examples:
        >>> import torch, fraq
        >>> g = torch.Generator().manual_seed(0)
        >>> Bs = [torch.randn(48, 4, generator=g, dtype=torch.float64) for _ in range(3)]
        >>> As = [torch.randn(4, 40, generator=g, dtype=torch.float64) for _ in range(3)]
        >>> B, A = fraq.stack(Bs, As, weights=[3, 2, 1])
        >>> U, S, Vh = fraq.svd(B, A)
        >>> U.shape, S.shape, Vh.shape
        (torch.Size([48, 12]), torch.Size([12]), torch.Size([12, 40]))
        >>> dense = B @ A
        >>> bool(torch.linalg.norm(U * S @ Vh - dense) <= 1e-13 * torch.linalg.norm(dense))
        True
        >>> bool((S - torch.linalg.svdvals(dense)[:12]).abs().max() <= 1e-13 * S[0])
        True
    """
    B, A, s = _factors(B, A)
    p = s if rank is None else rank
    options = check_options(rank=p if s > 0 or rank is not None else 1, backend=backend, eig_dtype=eig_dtype,
                            gram=gram, eigensolver=eigensolver, pipeline=pipeline, limit=s if s > 0 else None)
    return _svd_impl(Plan.of(options, B, A), B, A)


def _svd_impl(plan: Plan, B: torch.Tensor, A: torch.Tensor) -> ThinSVD:
    """Checked arguments -> the factors: the rank-p adapter kept in the compute dtype
    (no rounding into a narrower input dtype before the small SVD), then :func:`_rotate`."""
    res = _recompress_impl(replace(plan, out_dtype=plan.cdt), B, A)
    U, S, Vh = _rotate(res.B, res.A)
    if U.dtype != plan.out_dtype:
        U, Vh = U.to(plan.out_dtype), Vh.to(plan.out_dtype)
    return ThinSVD(U, S, Vh)


def _rotate(Bp: torch.Tensor, Ap: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(U, S, Vh)`` of the rank-p adapter ``Bp @ Ap`` whose short side (B's columns when
    m <= n, A's rows otherwise) is orthonormal: the thin SVD of the long side, R^T = P S Z^T
    (D x p, LAPACK on its tall orientation, one matrix per thread), and the short side
    rotated by Z."""
    X, Y, transposed = orient(Bp, Ap)  # X (*, d, p) orthonormal, Y (*, p, D)
    batch, p = Y.shape[:-2], Y.shape[-2]
    D = Y.shape[-1]
    nb = math.prod(batch)
    if p == 0 or nb == 0:
        S = Y.new_zeros(*batch, p)
        return Bp, S, Ap  # no directions, or no matrices: the factors as they are
    P, S, Zh = batch_map(_thin_svd, Y.mT.reshape(nb, D, p))
    Lq = torch.bmm(X.reshape(nb, -1, p), Zh.mT)  # (nb, d, p)
    U, Vh = unorient(Lq.reshape(*batch, -1, p), P.mT.reshape(*batch, p, D), transposed)
    return U, S.reshape(*batch, p), Vh


def _thin_svd(W: torch.Tensor):
    return torch.linalg.svd(W, full_matrices=False)
