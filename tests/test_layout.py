"""``fraq._layout.tall_product``: the product a basis applied to p kept directions is,
written column-major. Checked against the float64 product of the same numbers with the
dot products' rounding bound, for every operand layout, batched or not."""

from __future__ import annotations

import pytest
import torch

from fraq._layout import tall_product

F32, F64 = torch.float32, torch.float64


@pytest.mark.parametrize("dtype", [F32, F64])
def test_tall_product_is_the_product_written_column_major(dtype):
    """``tall_product(M, N)`` is M @ N entry by entry within the dot products' rounding
    bound |fl(x . y) - x . y| <= gamma_k |x| . |y|, gamma_k = k u / (1 - k u) (Higham,
    Eq. 3.5), against the float64 product of the same numbers, for every operand layout,
    batched or not; the result is column-major (its transpose contiguous)."""
    u = torch.finfo(dtype).eps / 2
    g = torch.Generator().manual_seed(7)
    for lead, m, k, p in [((), 96, 12, 3), ((2,), 200, 40, 8), ((2, 3), 64, 5, 64), ((1,), 33, 1, 1)]:
        for m_col in (False, True):
            for n_col in (False, True):
                M = torch.randn(*lead, m, k, generator=g, dtype=F64) * torch.logspace(-3, 3, k, dtype=F64)
                N = torch.randn(*lead, k, p, generator=g, dtype=F64)
                M, N = M.to(dtype), N.to(dtype)
                M = M.mT.contiguous().mT if m_col else M
                N = N.mT.contiguous().mT if n_col else N
                out = tall_product(M, N)
                assert out.shape == (*lead, m, p) and out.dtype == dtype and out.mT.is_contiguous()
                exact = M.double() @ N.double()
                bound = (k * u / (1 - k * u)) * (M.double().abs() @ N.double().abs())
                assert ((out.double() - exact).abs() <= bound).all(), (lead, m, k, p, m_col, n_col)


def test_tall_product_of_empty_and_broadcast_operands_is_matmuls():
    """Zero-size sides give matmul's shapes (zeros where k = 0); a batch broadcast against one
    matrix or a batch of one goes through matmul's broadcasting: matmul's numbers, each entry
    of the two within twice the dot product's rounding bound of the other."""
    g = torch.Generator().manual_seed(3)
    pairs = [((2, 0, 3), (2, 3, 4)), ((2, 5, 0), (2, 0, 3)), ((2, 5, 3), (2, 3, 0)), ((0, 5, 3), (0, 3, 4)),
             ((5, 3), (2, 3, 4)), ((1, 5, 3), (2, 3, 4)), ((2, 5, 3), (3, 4))]
    for ms, ns in pairs:
        M, N = torch.randn(ms, generator=g, dtype=F64), torch.randn(ns, generator=g, dtype=F64)
        out, want = tall_product(M, N), M @ N
        assert out.shape == want.shape, (ms, ns)
        k, u = M.shape[-1], torch.finfo(F64).eps / 2
        bound = 2 * (k * u / (1 - k * u)) * (M.abs() @ N.abs())  # each of the two within gamma_k of the exact
        assert ((out - want).abs() <= bound).all(), (ms, ns)
