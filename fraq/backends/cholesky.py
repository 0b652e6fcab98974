r"""Cholesky basis from a wide-precision Gram: FRAQ's QR-free exact path.

For a tall X (d x r, d > r) whose entries are float32 (or bfloat16 / float16 upcast),

.. math::
    W = X^\top X \;(\text{float64}),\quad W = R^\top R,\quad Q = X R^{-1},\qquad X = Q R,

so the basis costs one GEMM-shaped pass over X and an r x r Cholesky factorization,
and applying it to r x p coordinates is one small triangular solve and one GEMM,
:math:`QU = X\,(R^{-1}U)`. Every heavy pass is a GEMM: no panel factorization
(``geqrf``) and no reflector application (``ormqr``), which on a GPU run as per-matrix
loops and on a CPU well below the GEMM rate.

**Why float64 for the Gram, and only there.** Forming W squares the condition number:
a working-precision Gram makes :math:`Q` lose orthogonality like
:math:`\kappa(X)^2\varepsilon` (one Cholesky-QR pass; Cholesky-QR2 needs a second pass
to repair it). The products of two float32 numbers are exact in float64, so a float64
W carries one rounding per sum, :math:`\varepsilon_{64}`, and Q keeps float32
orthogonality while :math:`\kappa(X)^2 \varepsilon_{64} \lesssim \varepsilon_{32}`,
i.e. :math:`\kappa(X) \lesssim 2\cdot10^4`, with no second pass. R itself and the
coordinates' Gram :math:`G = (RY)(RY)^\top` then need nothing wider than the data
(:func:`fraq.recompress` forms them as for Householder's R). Applying Q,
:math:`X (R^{-1}U)`, also runs in float64 (X is already there): in float32 that GEMM
would cost orthogonality like :math:`\kappa(X)\,\varepsilon_{32}`.

Float64 data have no wider dtype to form their Gram in, so they get the Householder
basis (recorded as a fallback with ``info["fallback_reason"] == "float64"``): a float64
Gram of float64 data is only as accurate as one Cholesky-QR pass.

**Fallback, detected per matrix from the data.** A matrix is handed to Householder QR
(:func:`fraq.backends.householder.householder`, exact whatever the rank) when

* the Cholesky factorization fails (``info > 0``: a numerically singular or non-finite
  Gram, e.g. duplicate clients), or
* :math:`\kappa_F(R)^2\,\varepsilon_{64} > \varepsilon/16`, with
  :math:`\kappa_F(R) = \lVert R\rVert_F \lVert R^{-1}\rVert_F \ge \kappa_2(X)` computed from
  the r x r inverse that ``apply`` needs anyway: past it the wide Gram no longer keeps
  Q orthonormal to the data's precision (rank-deficient stacks whose Cholesky survives
  on rounding land here too).

Only those matrices are recomputed; ``info`` records ``fallback`` (``"householder"`` or
None) and ``fallback_count``, as :mod:`~fraq.backends.cholesky_qr` does. When r >= d the
exact basis is Q = I_d, C = X (no arithmetic).

Flops, leading order per matrix: **2 d r^2** (the Gram, in float64) + r^3 / 3 (Cholesky)
+ r^3 / 3 (R^{-1}) against Householder's 2 d r^2 - 2 r^3 / 3; applying Q to r x p
coordinates is r^2 p + **2 d r p** (float64) against the reflectors' 4 d r p - 2 r^2 p.
On hardware where float64 GEMMs run at half the float32 rate (most CPUs), the Gram
costs as much as 4 d r^2 float32 flops.

Scaling: the Gram squares the magnitudes; a float64 Gram of float32 data can neither
overflow nor underflow (float32's range squared is inside float64's), so no rescaling
pass exists here. Non-finite input gives a failed Cholesky and the Householder
fallback, which propagates the NaN for :func:`fraq.recompress` to report by name.

References: Stathopoulos and Wu, "A block orthogonalization procedure with constant
synchronization requirements", SIAM J. Sci. Comput. 23 (2002),
doi:10.1137/S1064827500370883 (Cholesky QR); Yamamoto, Nakatsukasa, Yanagisawa,
Fukaya, "Roundoff error analysis of the CholeskyQR2 algorithm", ETNA 44 (2015) 306-326
(the :math:`\kappa^2\varepsilon` loss of one pass, which the wider Gram removes);
Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., SIAM 2002, Sec. 2.6
(products of p-bit numbers are exact in 2p bits).
"""

from __future__ import annotations

import torch

from fraq._layout import tall_product
from fraq._routine_flops import cholesky_flops, gemm_flops, gram_flops, trsm_flops
from fraq.backends.base import Basis
from fraq.backends.householder import householder
from fraq.backends.safeguards import check_basis_input, over_batch, with_householder_fallback

__all__ = ["cholesky", "cholesky_deferred", "wide_dtype", "CONDITION_MARGIN", "cholesky_basis_flops"]

CONDITION_MARGIN = 16.0
r"""A matrix is accepted while :math:`\kappa_F^2\varepsilon_{wide} \le \varepsilon / \text{CONDITION\_MARGIN}`.

16 keeps the orthogonality lost to the Gram's rounding (about
:math:`\kappa^2\varepsilon_{64}`, of the order of float32's eps at
:math:`\kappa_2 = 10^4`, i.e. :math:`\kappa_F \approx 5\cdot10^4` for d = 768, r = 80) at or below float32's own
rounding; :math:`\kappa_F` bounds :math:`\kappa_2` from above, so the test errs on the
side of falling back."""


def wide_dtype(dtype: torch.dtype) -> torch.dtype | None:
    """The dtype the Gram of ``dtype`` data is formed in: float64 for float32 and narrower,
    None for float64 (nothing wider is available)."""
    return None if dtype == torch.float64 else torch.float64


def cholesky(X: torch.Tensor) -> Basis:
    """Cholesky basis of the tall factor X (*, d, r); see the module docstring.

    Returns a :class:`~fraq.backends.base.Basis` with C = R (*, r, r) upper triangular in
    X's dtype and ``apply(U) = X (R^{-1} U)``, Householder's basis for the matrices that
    fall back. :func:`cholesky_deferred` leaves the fallback verdict pending instead (see
    :data:`fraq.backends.base.Backend`).
    """
    X = check_basis_input(X)
    return _cholesky_impl(X).completed()


def cholesky_deferred(X: torch.Tensor) -> Basis:
    """The fast basis of every matrix of a flattened, trusted X (nb, d, r), verdict pending
    (the registry's ``deferred`` for :func:`fraq.recompress`)."""
    return _cholesky_impl(X)


@over_batch("cholesky")
def _cholesky_impl(Xb: torch.Tensor, info: dict) -> Basis:
    r = Xb.shape[-1]
    wide = wide_dtype(Xb.dtype)
    if wide is None or Xb.shape[0] == 0 or r == 0:
        hh = householder(Xb)
        count = Xb.shape[0] if wide is None else 0
        reason = {"fallback_reason": "float64"} if wide is None else {}
        extra = dict(fallback="householder" if count else None, fallback_count=count, **reason)
        return Basis(C=hh.C, apply=hh.apply, info=dict(info, **extra))

    Xw = Xb.to(wide)
    W = torch.matmul(Xw.mT, Xw)
    L, failed = torch.linalg.cholesky_ex(W)  # W = L L^T, R = L^T
    eye = torch.eye(r, dtype=wide, device=Xb.device)
    Rinv = torch.linalg.solve_triangular(L.mT, eye.expand_as(W), upper=True)
    kappa = torch.linalg.matrix_norm(L) * torch.linalg.matrix_norm(Rinv)  # NaN if W was
    limit = torch.finfo(Xb.dtype).eps / (CONDITION_MARGIN * torch.finfo(wide).eps)
    bad = (failed != 0) | ~(kappa.square() <= limit)
    # A failed factorization leaves NaN/garbage in L: keep the pending basis finite.
    L = torch.where(bad.view(-1, 1, 1), eye, L)
    Rinv = torch.where(bad.view(-1, 1, 1), eye, Rinv)
    C = L.mT.to(Xb.dtype)

    def apply(U: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
        Ri = Rinv if index is None else Rinv.index_select(0, index)
        Xi = Xw if index is None else Xw.index_select(0, index)
        return tall_product(Xi, torch.matmul(Ri, U.to(wide))).to(U.dtype)

    def complete() -> Basis:
        return with_householder_fallback(Xb, C, apply, bad, info)

    return Basis(C=C, apply=lambda U: apply(U, None), info=dict(info, fallback=None, fallback_count=0),
                 rejected=bad, complete=complete)


def cholesky_basis_flops(d: int, r: int, p: int, *, steps: int | None = None, gram: str = "gemm") -> float:
    """The ``cholesky`` backend without fallbacks (wide X: Q = I, free): the Gram of X (float64),
    its Cholesky factor, R^{-1} (a triangular solve with the r x r identity, r^3 as run);
    applying Q: R^{-1} U_p, then X times it (float64)."""
    if r >= d:
        return 0.0
    return gram_flops(d, r, gram) + cholesky_flops(r) + trsm_flops(r, r) + gemm_flops(r, r, p) + gemm_flops(d, r, p)
