r"""The Gram of the coordinates, in its two forms, and the guard that chooses between them.

:func:`fraq.recompress` needs, for X = Q C (the basis) and Y, the Gram of the
coordinates H = C Y (s x D) and, after the eigenproblem, the rows R_p = U_p^T H.
Two forms give the same two results:

* **product** (the paper's steps): :math:`H = CY`, :math:`G = HH^\top`,
  :math:`R_p = U_p^\top H`; H is held as its transpose, row-major (D x s), so the three
  products that touch it read their long dimension contiguously (on CPUs BLAS runs
  them faster than on a row-major H for the LoRA shapes: same flops, better kernels).
* **factored**: :math:`G = C\,(YY^\top)\,C^\top`, :math:`R_p = (U_p^\top C)\,Y`; H is
  never formed, so D enters through one r x r Gram :math:`YY^\top` and the final rows:
  :math:`(2d + D) r^2` leading-order flops with Householder against :math:`(2d + 3D) r^2`
  (SYRK convention; :func:`fraq.flops.fraq_flops` with ``factored=True``).

**Accuracy, and the guard.** Rounding in the factored G is
:math:`\varepsilon\lVert C\rVert^2\lVert Y\rVert^2`, in the product form
:math:`\varepsilon\lVert C\rVert\lVert Y\rVert\lVert CY\rVert`: they differ by
:math:`\rho = \lVert C\rVert\lVert Y\rVert / \lVert CY\rVert`, about 1 when nothing
cancels, large when the clients' updates cancel and the aggregate is small against its
factors. ``gram="auto"`` forms the Gram factored and, in the call's one host read,
measures :math:`\rho_F^2 = \lVert C\rVert_F^2\lVert Y\rVert_F^2 / \lVert CY\rVert_F^2`
(three traces: :math:`\lVert C\rVert_F^2`, :math:`\mathrm{tr}\,YY^\top`,
:math:`\mathrm{tr}\,G`); for generic factors :math:`\rho_F^2 \approx s/2` (rank-s
products spread their Frobenius mass over s directions), so a matrix is judged to
cancel above :data:`CANCEL_LIMIT` times s, and the batch is then redone through H.

Only the lower triangle of a Gram formed here is authoritative: the factored product
:math:`(CW)C^\top` is symmetric up to rounding and the eigensolver reads the lower
triangle alone, so no symmetrizing pass is spent on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CANCEL_LIMIT", "GRAMS", "Coordinates", "cancels", "coordinates", "frobenius", "rows"]

GRAMS = ("auto", "product", "factored")
"""Values of ``recompress(gram=...)``: ``"auto"`` (default) is the form of fewer FLOPs at the
call's shape (:func:`fraq.flops.cheapest_path`), a factored one redone through H where clients cancel."""

CANCEL_LIMIT = 2.0
"""``gram="auto"`` keeps the factored Gram while rho_F^2 <= CANCEL_LIMIT * s (see :func:`cancels`):
generic LoRA stacks sit at about s / 2, a factor 4 below."""


@dataclass(frozen=True)
class Coordinates:
    """The Gram of the coordinates in one of the two forms (see the module docstring).

    Attributes:
        G: (nb, s, s) Gram of H = C Y; its lower triangle is authoritative.
        Ht: (nb, D, s) H^T, row-major (product form), or None.
        WY: (nb, r, r) Y Y^T (factored form), or None.
    """

    G: torch.Tensor
    Ht: torch.Tensor | None = None
    WY: torch.Tensor | None = None


def coordinates(C: torch.Tensor, Y: torch.Tensor, factored: bool) -> Coordinates:
    """The coordinates' Gram of C (nb, s, r) and Y (nb, r, D), factored or through H.

    Flops: factored 2 D r^2 + 2 s r^2 + 2 s^2 r; product 2 s r D + 2 s^2 D (GEMMs).
    """
    if factored:
        WY = torch.bmm(Y, Y.mT)
        return Coordinates(G=torch.bmm(torch.bmm(C, WY), C.mT), WY=WY)
    Ht = torch.bmm(Y.mT, C.mT)
    return Coordinates(G=torch.bmm(Ht.mT, Ht), Ht=Ht)


def rows(coords: Coordinates, Up: torch.Tensor, C: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """R_p = U_p^T H (nb, p, D) for U_p (nb, s, p), in the form ``coords`` was built in."""
    if coords.Ht is None:
        return torch.bmm(torch.bmm(Up.mT, C), Y)
    return torch.bmm(coords.Ht, Up).mT


def frobenius(C: torch.Tensor) -> torch.Tensor:
    """||C||_F per matrix (nb,), what :func:`cancels` reads beside tr(Y Y^T) (the diagonal of
    W_Y, which the range verdict reads too) and tr(G) (the sum of its eigenvalues)."""
    return torch.linalg.vector_norm(C, dim=(-2, -1))


def cancels(c_norm: list[float], y_trace: list[float], g_trace: list[float], s: int) -> np.ndarray:
    r"""Per matrix, bool: :math:`\rho_F^2 = \lVert C\rVert_F^2 \mathrm{tr}(YY^\top) / \mathrm{tr}(G)`
    above :data:`CANCEL_LIMIT` times s, so the factored Gram could lose accuracy.

    Host numbers (Python floats, one per matrix; an overflow is inf, not an error). The
    caller judges only matrices whose Gram is in range (the others are judged again once
    rescaled); a NaN is judged cancelling.
    """
    limit = CANCEL_LIMIT * max(s, 1)
    return np.array([not (c * c * y <= limit * g) for c, y, g in zip(c_norm, y_trace, g_trace)], dtype=bool)
