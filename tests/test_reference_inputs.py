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
