r"""Exact polar basis: X = Q_pol S with S = (X^T X)^{1/2} in place of R (the paper's Appendix D).

For a tall X (d x r, d >= r) with thin SVD :math:`X = W \Sigma V^\top`,

.. math::
    Q_{\mathrm{pol}} = W V^\top,\qquad S = V \Sigma V^\top = (X^\top X)^{1/2},\qquad
    X = Q_{\mathrm{pol}} S .

:math:`Q_{\mathrm{pol}}` is the orthonormal factor closest to X in every unitarily
invariant norm, S is symmetric positive semidefinite, and FRAQ uses S exactly where
Householder uses R: H = S Y. Nothing needs S to be triangular (Appendix D).

**How it is computed.** Not as :math:`X (X^\top X)^{-1/2}`: that squares the
condition number (float32 would resolve singular values only down to about
:math:`\sqrt{\varepsilon}\,\sigma_1 \approx 3\cdot10^{-4}\sigma_1`) and divides by zero on a
rank-deficient X. Nor by an SVD of X in the working precision: LAPACK's float32 SVD
returns singular vectors of a tall panel orthonormal only to tens of eps,
ten times worse than Householder QR, and FRAQ's error follows the basis'
orthogonality. Instead, the tall-matrix route of Higham (2008, Sec. 8.8): a Householder
QR :math:`X = Q_h R`, then the polar decomposition of the small triangle from its SVD
in float64, :math:`R = W_R \Sigma V^\top`:

.. math::
    Q_{\mathrm{pol}} = Q_h\,(W_R V^\top),\qquad S = V \Sigma V^\top .

The r x r rotation :math:`W_R V^\top` is orthogonal to float64 rounding, so
:math:`Q_{\mathrm{pol}}` is as orthonormal as :math:`Q_h` and X = Q S to working
precision for any condition number. :math:`Q_{\mathrm{pol}}` is never formed: ``apply``
rotates the coordinates and then applies the reflectors.

**Rank-deficient X** (duplicate clients) has no polar inverse, and none is used: R is
singular, :math:`\Sigma` has zeros, and the SVD still returns an orthogonal
:math:`W_R`, so :math:`Q_{\mathrm{pol}}` is orthonormal with col(X) inside its span (the
polar factor is unique only on col(X); this is one valid completion, the same choice as
``scipy.linalg.polar``). Nothing is divided.

**Wide X** (r > d, more stacked rank than the small dimension): the polar factor of X
has orthonormal rows, not columns, so the basis is :math:`Q_h W_R` (d x d, orthogonal)
with coordinates :math:`C = \Sigma V^\top` (d x r); again X = Q C exactly.

Non-finite input gives non-finite coordinates, which :func:`fraq.recompress` reports by
naming the factor (LAPACK's SVD would refuse it with a less helpful error).

Flops, leading order per matrix: Householder's 2 d r^2 - 2 r^3 / 3, then about
28 r^3 / 3 float64 flops for the r x r SVD with vectors (``gesdd``) and 4 r^3 for S and the rotation;
applying Q to r x p coordinates is 2 r^2 p plus the reflectors' 4 d r p - 2 r^2 p. It
costs more than Householder by its O(r^3) terms and is kept as the mathematically
canonical alternative basis (S symmetric instead of R triangular), not for speed.

References: Higham, *Functions of Matrices* (SIAM 2008), Ch. 8 (Sec. 8.8 for the
QR-first route), doi:10.1137/1.9780898717778;
the FRAQ paper, Appendix D.
"""

from __future__ import annotations

import torch

from fraq._routine_flops import gemm_flops, qr_flops, reflector_flops, svd_flops
from fraq.backends.base import Basis
from fraq.backends.householder import householder
from fraq.backends.safeguards import check_basis_input, over_batch

__all__ = ["polar", "polar_flops"]


def polar(X: torch.Tensor) -> Basis:
    """Polar basis of X (*, d, r): C = S (*, r, r) symmetric PSD, ``apply(U) = Q_h (W_R V^T U)``.

    See the module docstring for the math, rank-deficient and wide inputs.
    """
    X = check_basis_input(X)
    return _polar_impl(X)


@over_batch("polar", identity_when_wide=False)  # a wide X keeps its own basis Q_h W_R (see Wide X above)
def _polar_impl(Xb: torch.Tensor, info: dict) -> Basis:
    d, r = Xb.shape[-2], Xb.shape[-1]
    hh = householder(Xb)  # X = Q_h R, R (nb, s, r)
    R = hh.C.to(torch.float64)
    if not bool(torch.isfinite(R).all()):  # propagate, as the QR does, instead of raising from the SVD
        return Basis(C=torch.full_like(hh.C, float("nan")), apply=hh.apply, info=info)
    Wr, sig, Vh = torch.linalg.svd(R, full_matrices=False)  # Wr (nb, s, s), sig (nb, s), Vh (nb, s, r)
    if d >= r:
        S = torch.matmul(Vh.mT, sig.unsqueeze(-1) * Vh)  # V Sigma V^T
        C = (0.5 * (S + S.mT)).to(Xb.dtype)  # exactly symmetric, as S is
        rot = torch.matmul(Wr, Vh).to(Xb.dtype)  # Q_pol = Q_h (W_R V^T)
    else:
        C = (sig.unsqueeze(-1) * Vh).to(Xb.dtype)  # X = (Q_h W_R)(Sigma V^T)
        rot = Wr.to(Xb.dtype)

    def apply(U: torch.Tensor) -> torch.Tensor:
        return hh.apply(torch.matmul(rot, U))

    return Basis(C=C, apply=apply, info=info)


def polar_flops(d: int, r: int, p: int, *, steps: int | None = None, gram: str = "gemm") -> float:
    """Polar: Householder QR, the SVD of R, S and W_R V^T, then U_p through both."""
    s = min(d, r)
    small = svd_flops(s, s) + gemm_flops(s, s, r) * (2 if d >= r else 0)
    return qr_flops(d, r) + small + gemm_flops(s, s, p) + reflector_flops(d, p, s)
