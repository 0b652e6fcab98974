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

**Accuracy, and the guard.** Rounding in the factored G is about
:math:`\varepsilon N^2`, with :math:`N = \sum_k \lVert c_k\rVert\lVert y_k\rVert`
(:func:`scale_sum`), in the product form about :math:`\varepsilon\lVert CY\rVert_F^2`:
they differ by :math:`\rho^2 = N^2 / \lVert CY\rVert_F^2`, about s/2 when nothing
cancels (rank-s products spread their mass over s directions), large when the clients'
updates cancel and the aggregate is small against its factors. ``gram="auto"`` forms the
Gram factored and, in the call's one host read, measures :math:`\rho^2` (N and
:math:`\mathrm{tr}\,G`); a matrix is judged to cancel above :data:`CANCEL_LIMIT` times s,
and the batch is then redone through H. N, unlike :math:`\lVert C\rVert_F\lVert Y\rVert_F`,
is unchanged when the clients' factors are scaled in opposite directions (c_k t, y_k / t),
which changes neither Gram nor its rounding.

Only the lower triangle of a Gram formed here is authoritative: the factored product
:math:`(CW)C^\top` is symmetric up to rounding and the eigensolver reads the lower
triangle alone, so no symmetrizing pass is spent on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["CANCEL_LIMIT", "GRAMS", "Coordinates", "cancels", "coordinates", "rows", "scale_sum"]

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


def scale_sum(C: torch.Tensor, Y: torch.Tensor, c_norm: torch.Tensor | None = None) -> torch.Tensor:
    r""":math:`N = \sum_k \lVert c_k\rVert \lVert y_k\rVert` per matrix (nb,), column k of C
    (nb, s, r) against row k of Y (nb, r, D): the bound :math:`\lVert |C||Y| \rVert_F \le N`
    of the product's rounding, unchanged when c_k is scaled by t and y_k by 1/t (which
    leaves C Y unchanged; :math:`\lVert C\rVert_F \lVert Y\rVert_F` is not). What
    :func:`cancels` and the product's noise floor (:func:`fraq._energy.noise_floor`) read.
    ``c_norm``: C's column norms where the caller has computed them (the pass's read uses
    them twice). Flops: 2 (s + D) r."""
    c_norm = torch.linalg.vector_norm(C, dim=-2) if c_norm is None else c_norm
    return (c_norm * torch.linalg.vector_norm(Y, dim=-1)).sum(-1)


def cancels(n_sum: list[float], g_trace: list[float], s: int) -> np.ndarray:
    r"""Per matrix, bool: :math:`\rho^2 = N^2 / \mathrm{tr}(G)` above :data:`CANCEL_LIMIT`
    times s, so the factored Gram could lose accuracy (N: :func:`scale_sum`).

    The factored Gram's rounding is about :math:`\varepsilon N^2` (each term
    :math:`c_j (y_j \cdot y_k) c_k^\top` errs relative to :math:`\lVert c_j\rVert\lVert y_j\rVert
    \lVert y_k\rVert\lVert c_k\rVert`), the product form's about
    :math:`\varepsilon\,\mathrm{tr}(G)`: their ratio is :math:`\rho^2`. For balanced factors
    N equals :math:`\lVert C\rVert_F\lVert Y\rVert_F`; unlike that product it does not grow
    when the clients' factors are scaled in opposite directions, which leaves both Grams'
    rounding unchanged.

    Host numbers (Python floats, one per matrix; an overflow is inf, not an error). The
    caller judges only matrices whose Gram is in range (the others are judged again once
    rescaled); a NaN is judged cancelling.
    """
    limit = CANCEL_LIMIT * max(s, 1)
    return np.array([not (n * n <= limit * g) for n, g in zip(n_sum, g_trace)], dtype=bool)
