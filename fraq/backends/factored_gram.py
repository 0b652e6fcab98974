r"""The factored coordinate Gram: FRAQ's eigenproblem without ever forming H = C Y.

:func:`fraq.recompress` forms the coordinates H = C Y (s x D), their Gram
G = H H^T and the rows R_p = U_p^T H. The same two results come from the r x r Gram of
the right factor,

.. math::
    G = C\,(Y Y^\top)\,C^\top, \qquad R_p = (U_p^\top C)\,Y ,

so the large dimension D enters through one symmetric product :math:`YY^\top`
(D r^2 with SYRK, 2 D r^2 as a GEMM) and the final rows (2 D r p), instead of through
H (2 D r s), H H^T (D s^2 or 2 D s^2) and the rows. With the paper's SYRK convention
FRAQ drops from :math:`(2d + 3D) r^2` to :math:`(2d + D) r^2` leading-order FLOPs
(:func:`fraq.flops.fraq_flops` with ``factored=True``), and the s x D matrix H is
never stored.

**Accuracy.** Rounding in G is :math:`\varepsilon\lVert C\rVert^2\lVert Y\rVert^2`
instead of :math:`\varepsilon\lVert H\rVert^2`. The two agree when the aggregate
has no cancellation between clients (:math:`\lVert CY\rVert \approx \lVert C\rVert
\lVert Y\rVert`); when clients' updates cancel, the factored Gram loses relative
accuracy in the aggregate's spectrum by the factor
:math:`\lVert C\rVert^2\lVert Y\rVert^2 / \lVert CY\rVert^2`.

**Status.** :func:`fraq.recompress` uses them with ``gram="factored"``; when W_Y or G
is out of range it scales both factors (X, hence C, and Y) by powers of two first;
:mod:`benchmarks.experiments.backends` times the factored path stage by stage.
"""

from __future__ import annotations

import torch

__all__ = ["factored_gram", "factored_gram_parts", "factored_rows"]


def factored_gram(C: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """G = C (Y Y^T) C^T (*, s, s) for C (*, s, r) and Y (*, r, D); equals (CY)(CY)^T.

    Flops: 2 D r^2 (Y Y^T as a GEMM) + 2 s r^2 + 2 s^2 r.
    """
    return factored_gram_parts(C, Y)[0]


def factored_gram_parts(C: torch.Tensor, Y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(G, W_Y)``: :func:`factored_gram` and the right factor's Gram W_Y = Y Y^T (*, r, r).

    :func:`fraq.recompress` range-checks W_Y as well as G: with a large C, G can be in
    range while W_Y has underflowed.
    """
    WY = torch.matmul(Y, Y.mT)
    G = torch.matmul(torch.matmul(C, WY), C.mT)
    return 0.5 * (G + G.mT), WY  # G exactly symmetric, as (CY)(CY)^T is


def factored_rows(Up: torch.Tensor, C: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    """R_p = (U_p^T C) Y (*, p, D) for U_p (*, s, p); equals U_p^T (C Y).

    Flops: 2 s r p + 2 r p D.
    """
    return torch.matmul(torch.matmul(Up.mT, C), Y)
