"""fraq.diagnostics: hand-derived values on a tiny basis, and the measures on real backends."""

import math

import pytest
import torch
from conftest import eps

import fraq
from fraq.backends import Basis
from fraq.diagnostics import (
    basis_matrix,
    diagnose,
    orthogonality_error,
    reconstruction_error,
    span_residual,
)
from fraq.synthetic import lora_clients

F64 = torch.float64


def _basis(Q, C):
    return Basis(C=C, apply=lambda U: Q @ U)


def test_hand_derived_values():
    """X = [e1, e2] in R^3, Q = [e1, e2 / 2] (not orthonormal), C = [[1, 0], [0, 2]].

    Q^T Q - I = diag(0, -3/4): 3/4. Q Q^T X = [e1, e2 / 4]: residual 3/4 over sqrt(2).
    Q C = [e1, e2] = X: reconstruction 0.
    """
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=F64)
    Q = torch.tensor([[1.0, 0.0], [0.0, 0.5], [0.0, 0.0]], dtype=F64)
    b = _basis(Q, torch.tensor([[1.0, 0.0], [0.0, 2.0]], dtype=F64))
    assert torch.equal(basis_matrix(b), Q)
    assert orthogonality_error(b).item() == pytest.approx(0.75)
    assert span_residual(X, b).item() == pytest.approx(0.75 / math.sqrt(2))
    assert reconstruction_error(X, b).item() == 0.0


def test_zero_factor_has_zero_residual():
    X = torch.zeros(4, 2, dtype=F64)
    b = _basis(torch.eye(4, 2, dtype=F64), torch.zeros(2, 2, dtype=F64))
    assert span_residual(X, b).item() == 0.0 and reconstruction_error(X, b).item() == 0.0


def _stack(m, n):
    Bs, As = lora_clients(m, n, (4, 6, 6), batch=(2,), seed=3)
    return fraq.stack(Bs, As)


@pytest.mark.parametrize("mn", [(80, 120), (120, 80)])
def test_householder_against_itself(mn):
    B, A = _stack(*mn)
    dg = diagnose(B, A, "householder", tau=0.9)
    r = B.shape[-1]
    # The same float32 result twice; the float64 error evaluation itself rounds at eps(F64).
    assert (dg.gap_to_householder <= 16 * r * eps(F64)).all()
    assert (dg.orthogonality <= 8 * r * eps(torch.float32)).all()
    assert (dg.span_residual <= 8 * r * eps(torch.float32)).all()
    assert (dg.gap_to_optimum.abs() <= 64 * eps(torch.float32) * r**0.5).all()
    assert dg.worst()["rank"] == int(dg.rank.max())


def test_muon_diagnosed_as_inexact():
    B, A = _stack(80, 120)
    ref = fraq.recompress(B, A, tau=0.9)
    dg = diagnose(B, A, "newton-schulz-muon", tau=0.9, reference=ref)
    assert (dg.orthogonality > 0.1).all()
    assert (dg.span_residual > 1e-2).all()
    assert (dg.gap_to_householder > 1e-2).all()
    assert dg.info["converged"] is False


def test_diagnose_validates():
    B, A = _stack(20, 30)
    with pytest.raises(ValueError, match="backend"):
        diagnose(B, A, "qr", tau=0.9)
    with pytest.raises(ValueError, match="tau"):
        diagnose(B, A, "polar", tau=1.5)
    B = B.clone()
    B[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="B"):
        diagnose(B, A, "polar", tau=0.9)
