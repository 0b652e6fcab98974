r"""Orientation (the paper's Eq. 9), in one place: every caller uses these two functions.

:math:`M = BA` with B (*, m, r), A (*, r, n) is written :math:`M = XY` with the left
factor X on the smaller side d = min(m, n): X = B, Y = A when m <= n, and X = A^T,
Y = B^T when m > n, so the QR (or any basis) is of a d x r matrix and the larger side
D enters only through products. A result (L, R) of :math:`XY` is turned back into the
LoRA orientation by :func:`unorient`. Both return views (no copies).
"""

from __future__ import annotations

import torch

__all__ = ["orient", "unorient"]


def orient(B: torch.Tensor, A: torch.Tensor, *, adaptive: bool = True) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """``(X, Y, transposed)`` with B @ A = X @ Y (transposed: = (X @ Y)^T), X on the smaller side.

    ``adaptive=False`` never transposes (X = B whatever m and n: Table 4's "fixed" row).
    """
    transposed = adaptive and B.shape[-2] > A.shape[-1]
    return (A.mT, B.mT, True) if transposed else (B, A, False)


def unorient(L: torch.Tensor, R: torch.Tensor, transposed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The LoRA-oriented ``(B, A)`` of a result ``L @ R`` of the oriented product."""
    return (R.mT, L.mT) if transposed else (L, R)
