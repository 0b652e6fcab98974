"""Float64 references for checking results, computed without forming the m x n aggregate.

These use a different algorithm from :func:`fraq.recompress` (QR of both factors and an
SVD of the small core, all in float64), so a result is never checked against itself.
Each function checks its factors first (dense real tensors, ``B`` (*, m, r) and ``A``
(*, r, n) that multiply, a reference and an approximation of the same (*, m, n)): a
mismatch is a ValueError naming the arguments and their shapes, never a matmul error.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import torch

from fraq._stack import normalized_weights
from fraq._validation import check_client_numbers, check_factor

__all__ = ["dense_aggregate", "reference_svd", "factored_error", "relative_error", "optimal_error"]


def _pair(bname: str, B: object, aname: str, A: object) -> tuple[int, ...]:
    """Check that ``B`` (*, m, r) and ``A`` (*, r, n) multiply; return (*, m, n)."""
    check_factor(bname, B)
    check_factor(aname, A)
    if B.shape[-1] != A.shape[-2] or B.shape[:-2] != A.shape[:-2]:
        raise ValueError(f"{bname} (*, m, r) and {aname} (*, r, n) must share r and the batch shape *: "
                         f"{bname}.shape={tuple(B.shape)}, {aname}.shape={tuple(A.shape)}")
    if B.device != A.device:
        raise ValueError(f"{bname} and {aname} must be on one device: {B.device} != {A.device}")
    return (*B.shape[:-1], A.shape[-1])


def _same_matrix(B, A, Bg, Ag) -> None:
    """The exact factors (B, A) and an approximation (Bg, Ag) of the same (*, m, n)."""
    shape, got = _pair("B", B, "A", A), _pair("Bg", Bg, "Ag", Ag)
    if shape != got:
        raise ValueError(f"Bg @ Ag must have the shape of B @ A: B @ A is {shape} (B.shape={tuple(B.shape)}, "
                         f"A.shape={tuple(A.shape)}), Bg @ Ag is {got} (Bg.shape={tuple(Bg.shape)}, "
                         f"Ag.shape={tuple(Ag.shape)})")
    if B.device != Bg.device:
        raise ValueError(f"B and Bg must be on one device: {B.device} != {Bg.device}")


def dense_aggregate(Bs: Sequence[torch.Tensor], As: Sequence[torch.Tensor], weights=None, scales=None) -> torch.Tensor:
    """sum_k a_k s_k B_k A_k formed densely in float64 (small problems and tests only)."""
    for name, seq in (("Bs", Bs), ("As", As)):
        if isinstance(seq, torch.Tensor) or not isinstance(seq, Sequence):
            raise TypeError(f"{name} must be a sequence of factors (one per client), got {type(seq).__name__}")
    if len(Bs) != len(As) or not Bs:
        raise ValueError(f"Bs and As must hold one factor per client, at least one: {len(Bs)} and {len(As)}")
    shape = _pair("Bs[0]", Bs[0], "As[0]", As[0])
    for k, (Bk, Ak) in enumerate(zip(Bs, As)):
        got = _pair(f"Bs[{k}]", Bk, f"As[{k}]", Ak)
        if got != shape:
            raise ValueError(f"client {k}'s product Bs[{k}] @ As[{k}] is {got}, client 0's is {shape}: the "
                             f"clients must update the same (*, m, n)")
    a = normalized_weights(weights, len(Bs))
    s = [1.0] * len(Bs) if scales is None else check_client_numbers("scales", scales, len(Bs), nonnegative=False)
    return sum(ak * sk * (Bk.double() @ Ak.double()) for Bk, Ak, ak, sk in zip(Bs, As, a, s))


def _core(B: torch.Tensor, A: torch.Tensor):
    Q1, R1 = torch.linalg.qr(B.double())
    Q2, R2 = torch.linalg.qr(A.double().mT)
    return Q1, R1 @ R2.mT, Q2


def reference_svd(B: torch.Tensor, A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Compact SVD (U, S, Vh) of B @ A in float64: B = Q1 R1, A^T = Q2 R2, SVD(R1 R2^T)."""
    _pair("B", B, "A", A)
    Q1, core, Q2 = _core(B, A)
    Uc, S, Vch = torch.linalg.svd(core)
    return Q1 @ Uc, S, Vch @ Q2.mT


def _core_norm(B: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """||B A||_F in float64 as ||R1 R2^T||_F: the triangular factors alone (``mode="r"``, the
    same R as :func:`_core`'s, without forming Q, half of a tall QR's work)."""
    R1 = torch.linalg.qr(B.double(), mode="r")[1]
    R2 = torch.linalg.qr(A.double().mT, mode="r")[1]
    return torch.linalg.matrix_norm(R1 @ R2.mT)


def factored_error(B: torch.Tensor, A: torch.Tensor, Bg: torch.Tensor, Ag: torch.Tensor) -> torch.Tensor:
    """||B A - Bg Ag||_F in float64 as ||R1 R2^T||_F of QRs of [B, -Bg] and [A; Ag]^T.

    No squaring of the residual, so it is accurate to float64 rounding of the inputs.
    """
    _same_matrix(B, A, Bg, Ag)
    left = torch.cat([B.double(), -Bg.double()], dim=-1)
    right = torch.cat([A.double(), Ag.double()], dim=-2)
    return _core_norm(left, right)


def relative_error(B: torch.Tensor, A: torch.Tensor, Bg: torch.Tensor, Ag: torch.Tensor) -> torch.Tensor:
    """||B A - Bg Ag||_F / ||B A||_F in float64 (1 where the aggregate is zero and Bg Ag is not)."""
    _same_matrix(B, A, Bg, Ag)
    num = factored_error(B, A, Bg, Ag)
    den = _core_norm(B, A)
    return torch.where(den > 0, num / torch.where(den > 0, den, 1), (num > 0).double())


def optimal_error(B: torch.Tensor, A: torch.Tensor, p: int | torch.Tensor) -> torch.Tensor:
    """Eckart-Young optimum sqrt(sum_{i>p} sigma_i^2) / ||BA||_F in float64, per matrix.

    ``p``: a rank >= 0, or an integer tensor of them of the batch shape * (or broadcast to it)."""
    shape = _pair("B", B, "A", A)
    if isinstance(p, torch.Tensor):
        if p.dtype == torch.bool or p.is_floating_point() or p.is_complex():
            raise TypeError(f"p must be an int or an integer tensor, got dtype={p.dtype}")
        try:
            fits = torch.broadcast_shapes(p.shape, shape[:-2]) == shape[:-2]
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"p.shape={tuple(p.shape)} does not broadcast to the batch shape {shape[:-2]} of "
                             f"B @ A {shape}")
        if bool((p < 0).any()):
            raise ValueError(f"p must be >= 0, got a minimum of {int(p.min())}")
    elif isinstance(p, bool) or not isinstance(p, numbers.Integral) or p < 0:
        raise ValueError(f"p(={p!r}) must be an int >= 0 or an integer tensor")
    _, S, _ = reference_svd(B, A)
    idx = torch.arange(S.shape[-1])
    p = torch.as_tensor(p).unsqueeze(-1)
    tail = torch.where(idx >= p, S, torch.zeros_like(S)).square().sum(-1).sqrt()
    total = S.square().sum(-1).sqrt()
    return torch.where(total > 0, tail / torch.where(total > 0, total, 1), torch.zeros_like(total))
