r"""Cholesky-QR2 basis: a GEMM-first exact QR with an automatic Householder fallback.

For a tall X (d x r, d > r),

.. math::
    X^\top X = R_1^\top R_1,\quad Q_1 = X R_1^{-1},\qquad
    Q_1^\top Q_1 = R_2^\top R_2,\quad Q = Q_1 R_2^{-1},\qquad X = Q\,(R_2 R_1).

One pass of Cholesky QR loses orthogonality like :math:`\kappa(X)^2\varepsilon`; the
second pass, applied to the already nearly orthonormal :math:`Q_1`, brings it to
:math:`O(\varepsilon)` (Yamamoto et al. 2015) as long as the first Cholesky
factorization succeeds, i.e. for :math:`\kappa(X) \lesssim \varepsilon^{-1/2}` (about
4e3 in float32, 7e7 in float64). LoRA stacks are far inside that range (the synthetic
ones in :mod:`fraq.synthetic` have :math:`\kappa(X) \approx 5`), and there the whole
basis is three GEMM-shaped products and two r x r Cholesky factorizations, which run
near the machine's GEMM rate, where Householder QR's panel factorization does not.

**Fallback, detected per matrix from the data.** The second Gram :math:`W_2 = Q_1^\top Q_1`
is computed anyway, and it measures what the first pass achieved. A matrix is handed
to Householder QR (:func:`fraq.backends.householder.householder`) when

* either Cholesky factorization fails (``info > 0``: a numerically singular or
  non-finite Gram, e.g. duplicate clients or a rank-deficient stack), or
* :math:`\lVert W_2 - I\rVert_F > 1/2`: the first pass was too inaccurate for the
  second to be trusted (:math:`\kappa(Q_1)^2 \le 3` is what the bound needs).

Only those matrices are recomputed; the result records ``info["fallback"]``
(``"householder"`` or None) and ``info["fallback_count"]``. So the basis is exact
whatever the conditioning or the rank: fast where the data allow it, Householder where
they do not.

Flops, leading order per matrix (GEMM Grams, as run): 2 d r^2 (W_1) + 2 d r^2 (Q_1 as
X times the r x r inverse of R_1, which on a CPU runs faster than the d r^2 triangular
solve, a GEMM being the better kernel) + 2 d r^2 (W_2) + O(r^3) = **6 d r^2** + O(r^3), against
Householder's 2 d r^2 - 2 r^3 / 3; applying Q to r x p coordinates is r^2 p +
**2 d r p** (a triangular solve and one GEMM) against the reflectors' 4 d r p - 2 r^2 p.
So it does *more* arithmetic than Householder for the basis and less for applying it;
whether that is faster depends on how much faster the machine runs a GEMM than a panel
QR and ``ormqr``. A fallback adds Householder's cost for that matrix. See
:func:`fraq.flops.basis_flops`.

References: Fukaya, Nakatsukasa, Yanagisawa, Yamamoto, "CholeskyQR2: a simple and
communication-avoiding algorithm for computing a tall-skinny QR factorization on a
large-scale parallel system", ScalA 2014, doi:10.1109/ScalA.2014.11; Yamamoto,
Nakatsukasa, Yanagisawa, Fukaya, "Roundoff error analysis of the CholeskyQR2
algorithm", ETNA 44 (2015) 306-326; Fukaya et al., "Shifted Cholesky QR for computing
the QR factorization of ill-conditioned matrices", SIAM J. Sci. Comput. 42 (2020),
doi:10.1137/18M1218212 (the shifted alternative to the Householder fallback).
"""

from __future__ import annotations

import torch

from fraq._layout import tall_product
from fraq._routine_flops import cholesky_flops, gemm_flops, gram_flops, trsm_flops
from fraq.backends.base import Basis
from fraq.backends.householder import householder
from fraq.backends.safeguards import (
    check_basis_input,
    over_batch,
    rescale,
    scaled_gram,
    with_householder_fallback,
)

__all__ = ["cholesky_qr2", "FIRST_PASS_LIMIT", "cholesky_qr2_flops"]

FIRST_PASS_LIMIT = 0.5
"""Largest accepted :math:`\\lVert Q_1^\\top Q_1 - I\\rVert_F` after the first pass."""


def cholesky_qr2(X: torch.Tensor) -> Basis:
    """Cholesky-QR2 basis of X (*, d, r); see the module docstring.

    Returns a :class:`~fraq.backends.base.Basis` with C = R_2 R_1 (*, r, r) upper
    triangular and ``apply(U) = Q_1 (R_2^{-1} U)``. When r >= d the exact basis Q = I_d,
    C = X is returned instead (no arithmetic). Non-finite input gives non-finite output
    (through the Householder fallback), which :func:`fraq.recompress` reports by name.
    """
    X = check_basis_input(X)
    return _cholesky_qr2_impl(X)


@over_batch("cholesky-qr2")
def _cholesky_qr2_impl(Xb: torch.Tensor, info: dict) -> Basis:
    r = Xb.shape[-1]
    if Xb.shape[0] == 0 or r == 0:  # nothing to factor: Householder handles empty shapes
        hh = householder(Xb)
        return Basis(C=hh.C, apply=hh.apply, info=dict(info, fallback=None, fallback_count=0))

    Xs, W1, e = scaled_gram(Xb)
    L1, info1 = torch.linalg.cholesky_ex(W1)  # W1 = L1 L1^T, R1 = L1^T
    eye = torch.eye(r, dtype=W1.dtype, device=W1.device)
    # Q1 = Xs R1^{-1} as one GEMM with the r x r inverse: on CPU a d x r triangular solve
    # runs at well under GEMM speed, and the second pass absorbs the inverse's rounding.
    Q1 = torch.matmul(Xs, torch.linalg.solve_triangular(L1.mT, eye.expand_as(W1), upper=True))
    W2 = torch.matmul(Q1.mT, Q1)
    L2, info2 = torch.linalg.cholesky_ex(W2)
    loss = torch.linalg.matrix_norm(W2 - eye)  # NaN where the first pass broke down
    bad = (info1 != 0) | (info2 != 0) | ~(loss <= FIRST_PASS_LIMIT)
    C = rescale(torch.matmul(L1, L2).mT, e)  # R2 R1 = (L1 L2)^T, X = Q (R2 R1)

    def apply(U: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        Q1i = Q1 if index is None else Q1.index_select(0, index)
        L2i = L2 if index is None else L2.index_select(0, index)
        return tall_product(Q1i, torch.linalg.solve_triangular(L2i.mT, U, upper=True))

    return with_householder_fallback(Xb, C, apply, bad, info)


def cholesky_qr2_flops(d: int, r: int, p: int, *, steps: int | None = None, gram: str = "gemm") -> float:
    """Cholesky-QR2 without fallbacks (wide X: Q = I, free)."""
    if r >= d:
        return 0.0
    # W1, R1^{-1} (r^3 / 3), Q1 = X R1^{-1} (a GEMM), W2, two Cholesky, R2 R1; apply: R2^{-1} U then Q1 (.)
    basis = (2 * gram_flops(d, r, gram) + r**3 / 3 + gemm_flops(d, r, r) + 2 * cholesky_flops(r)
             + gemm_flops(r, r, r))
    return basis + trsm_flops(r, p) + gemm_flops(d, r, p)
