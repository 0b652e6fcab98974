"""Float64 references for checking results, computed without forming the m x n aggregate.

These use a different algorithm from :func:`fraq.recompress` (QR of both factors and an
SVD of the small core, all in float64), so a result is never checked against itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fraq._stack import normalized_weights

__all__ = ["dense_aggregate", "reference_svd", "factored_error", "relative_error", "optimal_error"]


def dense_aggregate(Bs: Sequence[torch.Tensor], As: Sequence[torch.Tensor], weights=None, scales=None) -> torch.Tensor:
    """sum_k a_k s_k B_k A_k formed densely in float64 (small problems and tests only)."""
    a = normalized_weights(weights, len(Bs))
    s = [1.0] * len(Bs) if scales is None else [float(x) for x in scales]
    return sum(ak * sk * (Bk.double() @ Ak.double()) for Bk, Ak, ak, sk in zip(Bs, As, a, s))


def _core(B: torch.Tensor, A: torch.Tensor):
    Q1, R1 = torch.linalg.qr(B.double())
    Q2, R2 = torch.linalg.qr(A.double().mT)
    return Q1, R1 @ R2.mT, Q2


def reference_svd(B: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compact SVD (U, S, Vh) of B @ A in float64: B = Q1 R1, A^T = Q2 R2, SVD(R1 R2^T)."""
    Q1, core, Q2 = _core(B, A)
    Uc, S, Vch = torch.linalg.svd(core)
    return Q1 @ Uc, S, Vch @ Q2.mT


def factored_error(B: torch.Tensor, A: torch.Tensor, Bg: torch.Tensor, Ag: torch.Tensor) -> torch.Tensor:
    """||B A - Bg Ag||_F in float64 as ||R1 R2^T||_F of QRs of [B, -Bg] and [A; Ag]^T.

    No squaring of the residual, so it is accurate to float64 rounding of the inputs.
    """
    left = torch.cat([B.double(), -Bg.double()], dim=-1)
    right = torch.cat([A.double(), Ag.double()], dim=-2)
    _, core, _ = _core(left, right)
    return torch.linalg.matrix_norm(core)


def relative_error(B: torch.Tensor, A: torch.Tensor, Bg: torch.Tensor, Ag: torch.Tensor) -> torch.Tensor:
    """||B A - Bg Ag||_F / ||B A||_F in float64 (1 where the aggregate is zero and Bg Ag is not)."""
    num = factored_error(B, A, Bg, Ag)
    _, core, _ = _core(B, A)
    den = torch.linalg.matrix_norm(core)
    return torch.where(den > 0, num / torch.where(den > 0, den, 1), (num > 0).double())


def optimal_error(B: torch.Tensor, A: torch.Tensor, p: int | torch.Tensor) -> torch.Tensor:
    """Eckart-Young optimum sqrt(sum_{i>p} sigma_i^2) / ||BA||_F in float64, per matrix."""
    _, S, _ = reference_svd(B, A)
    idx = torch.arange(S.shape[-1])
    p = torch.as_tensor(p).unsqueeze(-1)
    tail = torch.where(idx >= p, S, torch.zeros_like(S)).square().sum(-1).sqrt()
    total = S.square().sum(-1).sqrt()
    return torch.where(total > 0, tail / torch.where(total > 0, total, 1), torch.zeros_like(total))
