"""Memory layouts that a CPU's GEMM is fast on, for the products whose shape makes it matter."""

from __future__ import annotations

import torch

__all__ = ["tall_product"]


def tall_product(M: torch.Tensor, N: torch.Tensor) -> torch.Tensor:
    """``M @ N`` for M (*, m, k) and N (*, k, p), the result laid out column-major: computed
    as ``(N^T M^T)^T``, the same dot products.

    A basis applied to a few kept directions (m rows, p columns, p much smaller than m) is
    such a product. On a CPU, MKL's GEMM on its AVX2 and AVX-512 code paths takes a far
    slower kernel for that shape when it writes the result row-major (each row p numbers
    long) than for the same product written column-major (each column m long), whatever the
    operands' layouts: several times slower for p = 8 in float32 and float64
    (docs/performance.md, "Tall products"); written column-major it is no slower where the
    row-major product is at its best (p near k). MKL's generic ``MKL_CBWR=COMPATIBLE`` path
    has no such penalty and is up to 15% slower column-major on float64 there, a
    reproducibility mode no machine runs by default. On CUDA the transposes are only flags
    to cuBLAS. Every method that applies a basis this way calls it (FRAQ's explicit bases
    and static pipeline, and the baselines), so no method's time carries a layout's penalty. The entries are the same
    sums; the rounding order within each dot product is the library's, as for ``M @ N``.
    """
    if M.dim() == 3 and N.dim() == 3 and M.shape[0] == N.shape[0]:
        return torch.bmm(N.mT, M.mT).mT  # matmul would add a reshape op (a launch on CUDA)
    return torch.matmul(N.mT, M.mT).mT
