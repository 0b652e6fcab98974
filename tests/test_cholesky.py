"""The QR-free ``cholesky`` backend: where it is fast, where it must hand over to Householder.

The properties every exact backend shares (orthonormality, X = Q C, optimality, shapes,
scaling) are checked for it in test_backends.py and test_recompress.py; this file checks
what is its own: the float64 Gram, the per-matrix fallback and what triggers it.
Tolerances are eps of the compute dtype times a stated factor.
"""

import pytest
import torch
from conftest import dense_svd, eps, fro, truncation_error

import fraq
from fraq.backends.cholesky import CONDITION_MARGIN, cholesky
from fraq.diagnostics import basis_matrix
from fraq.reference import optimal_error, relative_error
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64
# Orthogonality ||Q^T Q - I||_F in units of r * eps (as in test_backends).
ORTH_FACTOR = 8
# Product error above the Eckart-Young optimum, in units of eps * sqrt(r).
EXCESS_FACTOR = 64


def _orth(Q):
    Q = Q.double()
    return torch.linalg.matrix_norm(Q.mT @ Q - torch.eye(Q.shape[-1], dtype=F64))


def _with_condition(X, kappa):
    """X with the same singular vectors and singular values log-spaced from 1 to 1/kappa."""
    U, _, Vh = torch.linalg.svd(X.double(), full_matrices=False)
    s = torch.logspace(0, -torch.log10(torch.tensor(float(kappa))).item(), X.shape[-1], dtype=F64)
    return ((U * s) @ Vh).to(X.dtype)


def test_lora_stacks_take_the_fast_path():
    Bs, _ = lora_clients(256, 300, [8, 8, 8, 8], batch=(3,), seed=1)
    X = torch.cat(Bs, dim=-1)
    basis = cholesky(X)
    assert basis.info["fallback"] is None and basis.info["fallback_count"] == 0
    Q = basis_matrix(basis)
    assert (_orth(Q) <= ORTH_FACTOR * 32 * eps(F32)).all()


@pytest.mark.parametrize("kappa", [1e2, 1e3])
def test_moderate_conditioning_keeps_float32_orthogonality(kappa):
    """kappa^2 eps64 << eps32: the float64 Gram keeps Q orthonormal to float32 rounding,
    which a float32 Gram (one Cholesky-QR pass) would not: it loses kappa^2 eps32."""
    g = torch.Generator().manual_seed(2)
    X = _with_condition(torch.randn(400, 24, generator=g), kappa)
    basis = cholesky(X)
    assert basis.info["fallback_count"] == 0
    Q = basis_matrix(basis)
    assert _orth(Q) <= ORTH_FACTOR * 24 * eps(F32)
    assert fro(X.double() - Q.double() @ basis.C.double()) <= ORTH_FACTOR * 24 * eps(F32) * fro(X)
    # The same factorization with a float32 Gram is visibly worse: the float64 one matters.
    L = torch.linalg.cholesky(X.mT @ X)
    Q32 = torch.linalg.solve_triangular(L, X.mT, upper=False).mT
    assert _orth(Q32) > 4 * _orth(Q)


def test_falls_back_only_where_needed():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(5, 200, 12, generator=g)
    X[1] = torch.cat([X[1, :, :6], X[1, :, :6]], dim=-1)  # duplicate clients: rank 6
    X[3] = _with_condition(X[3], 1e6)  # kappa^2 eps64 >> eps32
    X[4, :, 5] = X[4, :, 2] * 3.0  # one column a multiple of another
    basis = cholesky(X)
    assert basis.info["fallback"] == "householder" and basis.info["fallback_count"] == 3
    Q = basis_matrix(basis)
    assert (_orth(Q) <= ORTH_FACTOR * 12 * eps(F32)).all()
    Xd = X.double()
    assert (fro(Xd - Q.double() @ basis.C.double()) <= ORTH_FACTOR * 12 * eps(F32) * fro(Xd)).all()


def test_threshold_is_the_documented_one():
    """Accepted up to kappa_F^2 eps64 <= eps32 / CONDITION_MARGIN, rejected past it."""
    g = torch.Generator().manual_seed(4)
    limit = (eps(F32) / (CONDITION_MARGIN * eps(F64))) ** 0.5
    X = torch.randn(300, 10, generator=g)
    below = _with_condition(X, limit / 40)  # kappa_F <= sqrt(10) * ... stays below the limit
    above = _with_condition(X, limit * 4)
    assert cholesky(below).info["fallback_count"] == 0
    assert cholesky(above).info["fallback_count"] == 1


def test_float64_data_use_householder():
    Bs, _ = lora_clients(60, 80, [4, 4], seed=5, dtype=F64)
    X = torch.cat(Bs, dim=-1)
    basis = cholesky(X)
    assert basis.info["fallback"] == "householder" and basis.info["fallback_reason"] == "float64"
    assert _orth(basis_matrix(basis)) <= ORTH_FACTOR * 8 * eps(F64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_through_recompress(dtype):
    """bf16/fp16 compute in float32; the Gram still goes to float64, no fallback."""
    Bs, As = lora_clients(64, 48, [4, 4, 4], seed=6, dtype=dtype)
    B, A = fraq.stack(Bs, As)
    res = fraq.recompress(B, A, tau=0.9, backend="cholesky")
    assert res.info["fallback_count"] == 0
    ref = fraq.recompress(B, A, tau=0.9)
    assert res.rank == ref.rank
    M = B.double() @ A.double()
    _, S, _ = dense_svd(M)
    err = fro(M - res.B.double() @ res.A.double())
    assert err <= truncation_error(S, res.rank) + 8 * eps(dtype) * fro(M)


def test_cancelling_clients_fall_back_and_stay_optimal():
    """Client 2 undoes most of client 1: the aggregate is 1e-4 of ||B|| ||A||. The stack's
    left factor is then nearly rank-deficient, which the condition test catches."""
    Bs, As = lora_clients(120, 90, [6, 6], seed=7, dtype=F64)
    g = torch.Generator().manual_seed(8)
    B2 = Bs[0] + 1e-4 * torch.randn(Bs[0].shape, generator=g, dtype=F64)
    Bs = [Bs[0], B2, Bs[1]]
    As = [As[0], -As[0], 1e-4 * As[1]]
    B, A = fraq.stack([b.float() for b in Bs], [a.float() for a in As])
    res = fraq.recompress(B, A, tau=0.9, backend="cholesky")
    assert res.info["fallback_count"] == 1
    gap = relative_error(B, A, res.B, res.A) - optimal_error(B, A, res.rank)
    assert gap <= EXCESS_FACTOR * eps(F32) * B.shape[-1] ** 0.5


def test_ill_conditioned_aggregate_float32_near_optimum():
    """The fidelity bar on the fast path: the aggregate's condition number is 1e10
    while X stays well conditioned (the spectrum sits in Y), cut at rank 32, in float32:
    within 1e-6 of the float64 optimum, relative to ||M||."""
    g = torch.Generator().manual_seed(9)
    Q, _ = torch.linalg.qr(torch.randn(200, 64, generator=g, dtype=F64))  # m < n: X = B
    V, _ = torch.linalg.qr(torch.randn(300, 64, generator=g, dtype=F64))
    sv = torch.logspace(0, -10, 64, dtype=F64)
    B, A = Q.float(), (sv.unsqueeze(-1) * V.mT).float()
    res = fraq.recompress(B, A, rank=32, backend="cholesky")
    assert res.info["fallback_count"] == 0
    M = B.double() @ A.double()
    _, S, _ = dense_svd(M)
    excess = (fro(M - res.B.double() @ res.A.double()) - truncation_error(S, 32)) / fro(M)
    assert excess <= 1e-6


def test_batched_fallback_equals_looped():
    Bs, As = lora_clients(80, 100, [4, 4, 4], batch=(4,), seed=11)
    B, A = fraq.stack(Bs, As)
    B = B.clone()
    B[2, :, 4:8] = B[2, :, 0:4]  # a duplicate client in one matrix of the batch
    res = fraq.recompress(B, A, tau=0.95, backend="cholesky")
    assert res.info["fallback_count"] == 1
    for i in range(4):
        one = fraq.recompress(B[i], A[i], tau=0.95, backend="cholesky")
        assert one.rank == int(res.rank[i])
        M = B[i].double() @ A[i].double()
        tol = EXCESS_FACTOR * eps(F32) * 12**0.5 * fro(M)
        assert fro(res.B[i, :, : one.rank].double() @ res.A[i, : one.rank].double()
                   - one.B.double() @ one.A.double()) <= tol
