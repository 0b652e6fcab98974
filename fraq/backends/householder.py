"""Reduced Householder QR basis, the paper's default (Section 3.3).

X (*, d, r) = Q R with Q kept as the r' = min(d, r) Householder reflectors LAPACK's
``geqrf`` leaves below the diagonal, and R (*, r', r) upper trapezoidal. The basis is
exactly orthonormal to working precision whatever the rank of X, so duplicate clients
(rank-deficient stacks) need no special case.

Flops, leading order: 2 d r^2 - 2/3 r^3 for the QR, and 4 d r p - 2 r^2 p to apply Q
to r x p coordinates through the reflectors (LAPACK's ``ormqr``).
"""

from __future__ import annotations

import torch

from fraq._routine_flops import qr_flops, reflector_flops
from fraq._parallel import batch_map
from fraq.backends.base import Basis

__all__ = ["householder", "householder_flops"]


def householder(X: torch.Tensor) -> Basis:
    """Householder basis of the tall factor X (*, d, r); see the module docstring."""
    d, r = X.shape[-2], X.shape[-1]
    s = min(d, r)
    # geqrf works in place on a column-major copy; a column-major X is copied without
    # a transpose (fraq.stack lays B out that way, and A^T is column-major already).
    reflectors, tau = batch_map(torch.geqrf, X)
    C = torch.triu(reflectors if d == s else reflectors[..., :s, :])
    V = reflectors if r == s else reflectors[..., :s]

    def apply(U: torch.Tensor) -> torch.Tensor:
        # U (*, s, p) zero-padded to d rows, column-major as LAPACK wants it (ormqr then
        # copies it without a transpose): one padding op on U^T.
        padded = U if d == s else torch.nn.functional.pad(U.mT, (0, d - s)).mT
        return batch_map(torch.ormqr, V, tau, padded)

    return Basis(C=C, apply=apply)


def householder_flops(d: int, r: int, p: int, *, steps: int | None = None, gram: str = "gemm") -> float:
    """Householder: QR of X, then the reflectors applied to the zero-padded U_p."""
    return qr_flops(d, r) + reflector_flops(d, p, min(d, r))
