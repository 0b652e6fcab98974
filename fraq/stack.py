"""Exact weighted stacking of client LoRA factors (the paper's Eq. 7)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from fraq._validation import check_client_numbers, check_finite, check_pair

__all__ = ["stack", "normalized_weights"]


def normalized_weights(weights: Sequence[float] | torch.Tensor | None, count: int) -> list[float]:
    """Aggregation weights :math:`a_k = n_k / \\sum_j n_j` (uniform when ``weights`` is None)."""
    if weights is None:
        return [1.0 / count] * count
    w = check_client_numbers("weights", weights, count, nonnegative=True)
    total = math.fsum(w)
    if total <= 0.0:
        raise ValueError(f"weights(={w}) must not all be zero")
    return [x / total for x in w]


def stack(
    Bs: Sequence[torch.Tensor],
    As: Sequence[torch.Tensor],
    weights: Sequence[float] | torch.Tensor | None = None,
    scales: Sequence[float] | torch.Tensor | None = None,
    *,
    dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Stack K clients' LoRA factors so that their product is the exact aggregate.

    .. math::
        B = [\sqrt{a_1} B_1, \dots, \sqrt{a_K} B_K], \qquad
        A = [\sqrt{a_1} s_1 A_1; \dots; \sqrt{a_K} s_K A_K], \qquad
        BA = \sum_k a_k s_k B_k A_k .

    The weight is split as :math:`\sqrt{a_k}` on both factors (the paper's Eq. 7, not
    FLoRA's public code, which puts all of it on A): the product is the same, but the
    two stacks stay equally well scaled, which is what a QR of either one sees.

    Args:
        Bs: K tensors of shape (*, m, r_k); ranks r_k may differ, batch shapes may not.
        As: K tensors of shape (*, r_k, n).
        weights: K non-negative numbers (data sizes, say), normalized inside to sum to
            one. Default: uniform 1/K.
        scales: K LoRA scales s_k = alpha_k / r_k (or alpha_k / sqrt(r_k) with rsLoRA).
            Default: 1.
        dtype: dtype of the stacks; default the clients' common dtype. Pass
            ``torch.float32`` to keep bf16 clients' stacks free of a second rounding.

    Returns:
        ``(B, A)`` of shapes (*, m, r) and (*, r, n), r = sum_k r_k. ``B`` is laid out
        column-major (``B.mT`` is contiguous) so the QR in :func:`fraq.recompress` reads
        it without a transposing copy; ``A`` is row-major.

    Cost: one pass over the factors, (m + n) r multiplications per matrix.
    """
    Bs, As = list(Bs), list(As)
    if len(Bs) == 0:
        raise ValueError("Bs is empty: stack needs at least one client")
    if len(Bs) != len(As):
        raise ValueError(f"Bs and As must have one entry per client: len(Bs)={len(Bs)}, len(As)={len(As)}")
    K = len(Bs)
    for k in range(K):
        check_pair(Bs[k], As[k], f"Bs[{k}]", f"As[{k}]")
    ref_b, ref_a = Bs[0], As[0]
    for k in range(1, K):
        if Bs[k].shape[:-1] != ref_b.shape[:-1]:
            raise ValueError(
                f"Bs[{k}].shape={tuple(Bs[k].shape)} does not match Bs[0].shape={tuple(ref_b.shape)} "
                "outside the rank dimension (*, m, r_k)"
            )
        if As[k].shape[:-2] + As[k].shape[-1:] != ref_a.shape[:-2] + ref_a.shape[-1:]:
            raise ValueError(
                f"As[{k}].shape={tuple(As[k].shape)} does not match As[0].shape={tuple(ref_a.shape)} "
                "outside the rank dimension (*, r_k, n)"
            )
        if Bs[k].dtype != ref_b.dtype:
            raise TypeError(f"Bs[{k}].dtype={Bs[k].dtype} differs from Bs[0].dtype={ref_b.dtype}")
        if Bs[k].device != ref_b.device:
            raise ValueError(f"Bs[{k}] is on {Bs[k].device}, Bs[0] on {ref_b.device}")
    for k in range(K):
        check_finite(f"Bs[{k}]", Bs[k])
        check_finite(f"As[{k}]", As[k])
    a = normalized_weights(weights, K)
    s = [1.0] * K if scales is None else check_client_numbers("scales", scales, K, nonnegative=False)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype(={dtype!r}) must be a floating torch.dtype")
    return _stack_impl(Bs, As, a, s, dtype or ref_b.dtype)


def _stack_impl(Bs, As, a, s, dtype):
    batch = Bs[0].shape[:-2]
    m, n = Bs[0].shape[-2], As[0].shape[-1]
    r = sum(b.shape[-1] for b in Bs)
    device = Bs[0].device
    # B is written into a (*, r, m) buffer and returned as its transpose: column-major.
    Bt = torch.empty(*batch, r, m, dtype=dtype, device=device)
    A = torch.empty(*batch, r, n, dtype=dtype, device=device)
    lo = 0
    for Bk, Ak, ak, sk in zip(Bs, As, a, s):
        hi = lo + Bk.shape[-1]
        root = math.sqrt(ak)
        # Scale in at least float32 so bf16 clients are rounded once, on the way out.
        work = torch.promote_types(Bk.dtype, torch.float32)
        Bt[..., lo:hi, :] = (Bk.to(work) * root).mT
        A[..., lo:hi, :] = Ak.to(work) * (root * sk)
        lo = hi
    return Bt.mT, A
