"""fraq.reference refuses factors that do not fit, naming the argument and the shapes, before any matmul."""

from __future__ import annotations

import pytest
import torch

from fraq.reference import dense_aggregate, factored_error, optimal_error, reference_svd, relative_error

B, A = torch.randn(5, 3, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)


@pytest.mark.parametrize("call, match", [
    (lambda: reference_svd(B, torch.randn(2, 4)), r"B \(\*, m, r\) and A .*B.shape=\(5, 3\), A.shape=\(2, 4\)"),
    (lambda: reference_svd(B, torch.randn(4)), r"A must have at least 2 dimensions"),
    (lambda: reference_svd(torch.randn(2, 5, 3), torch.randn(3, 3, 4)), r"batch shape"),
    (lambda: relative_error(B, A, torch.randn(4, 2), torch.randn(2, 4)),
     r"Bg @ Ag must have the shape of B @ A: B @ A is \(5, 4\).*Bg @ Ag is \(4, 4\)"),
    (lambda: factored_error(B, A, torch.randn(5, 2), torch.randn(3, 4)), r"Bg \(\*, m, r\) and Ag"),
    (lambda: optimal_error(B, torch.randn(2, 4), 1), r"B.shape=\(5, 3\), A.shape=\(2, 4\)"),
    (lambda: optimal_error(B, A, -1), r"p\(=-1\) must be an int >= 0"),
    (lambda: optimal_error(B, A, torch.tensor([1, 2])), r"p.shape=\(2,\) does not broadcast"),
    (lambda: dense_aggregate([B, torch.randn(5, 2)], [A, torch.randn(3, 4)]), r"Bs\[1\] .*As\[1\]"),
    (lambda: dense_aggregate([B, torch.randn(6, 2)], [A, torch.randn(2, 4)]),
     r"client 1's product Bs\[1\] @ As\[1\] is \(6, 4\), client 0's is \(5, 4\)"),
    (lambda: dense_aggregate([B], [A, A]), r"one factor per client.*1 and 2"),
    (lambda: dense_aggregate([B], [A], scales=[1.0, 2.0]), r"scales has 2 entries"),
])
def test_mismatched_factors_are_a_value_error_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_matching_factors_still_agree_with_a_dense_svd():
    """The checks refuse nothing valid: the reference equals torch's dense SVD of B @ A."""
    _, S, _ = reference_svd(B, A)
    dense = torch.linalg.svdvals(B @ A)
    assert torch.allclose(S, dense[:S.shape[0]], rtol=0, atol=64 * torch.finfo(torch.float64).eps * float(dense[0]))
    assert float(optimal_error(B, A, 3)) <= 64 * torch.finfo(torch.float64).eps
    assert float(relative_error(B, A, B, A)) <= 16 * torch.finfo(torch.float64).eps


def test_the_factored_error_is_the_dense_float64_residual():
    """||B A - Bg Ag||_F from the two triangular factors alone against the residual formed
    densely in float64: the two agree to a few eps64 of ||B A||_F + ||Bg Ag||_F (both are
    float64 computations of the same number; the bound is the dense product's rounding,
    about sqrt(r) eps64 per entry, with a factor 16 of margin), on a batch holding a
    near-copy (the residual 1e-6 of the aggregate), a truncated rank-deficient stack and a
    zero adapter."""
    g = torch.Generator().manual_seed(7)
    B, A = torch.randn(3, 40, 6, generator=g, dtype=torch.float64), torch.randn(3, 6, 70, generator=g,
                                                                                dtype=torch.float64)
    B[1, :, 5] = B[1, :, 4]  # rank-deficient stack
    Bg, Ag = B * (1 + 1e-6), A.clone()  # matrix 0: a near-copy, the residual 1e-6 of the aggregate
    Bg[1, :, 4:] = 0  # matrix 1: a truncation of the rank-deficient stack
    Bg[2] = 0  # matrix 2: a zero adapter, the residual the whole aggregate
    dense = torch.linalg.matrix_norm(B @ A - Bg @ Ag)
    scale = torch.linalg.matrix_norm(B @ A) + torch.linalg.matrix_norm(Bg @ Ag)
    eps = torch.finfo(torch.float64).eps
    assert ((factored_error(B, A, Bg, Ag) - dense).abs() <= 16 * 6**0.5 * eps * scale).all()
    rel = relative_error(B, A, Bg, Ag)
    # relative to ||B A||_F the same bound (||Bg Ag|| <= 1.1 ||B A|| here): 16 sqrt(6) eps64 * 2.1 < 2e-14
    assert ((rel - dense / torch.linalg.matrix_norm(B @ A)).abs() <= 2e-14).all()
    assert rel[0] < 2e-6 and abs(rel[2] - 1) <= 2e-14  # the cases are what they say
