"""fraq.svd: the thin SVD of a stacked aggregate, checked against the float64 SVD of the dense
product (torch.linalg.svd of B @ A formed in float64: another algorithm on another matrix).

Bounds, with u the compute dtype's unit roundoff and c = sqrt(min(m, n)) (the probabilistic
growth of a normwise error, as :mod:`benchmarks.measure.fidelity` states them):

- singular values: Weyl, |S_i - sigma_i| <= c u sigma_1;
- subspaces of the leading p: Wedin, sin theta <= c u sigma_1 / (sigma_p - sigma_{p+1}), for
  U's and Vh's (:func:`benchmarks.measure.fidelity.first_order`, the fidelity suite's);
- one singular vector: the same with its own smallest gap;
- orthonormality: ||U^T U - I||_2, ||Vh Vh^T - I||_2 <= 16 sqrt(max(m, n)) u, the bound
  tests/test_recompress_range.py holds recompress's orthonormal side to (Householder's Q
  is orthonormal to O(m u) in the worst case, Higham, *Accuracy and Stability*, Thm. 19.4,
  about sqrt(m) u in practice; the float64 eigenvectors and the small SVD's rotation add
  a few u);
- reconstruction at the full stacked rank: ||U S Vh - M||_F <= c u N, N = sum_k ||b_k|| ||a_k||
  over the stack's columns b_k and rows a_k (:func:`fraq._gram.scale_sum`), the bound of the
  product's own rounding (N exceeds ||M||_F by about sqrt(r) when nothing cancels).

In float64 the reference's own error is of the size of the bounds (forming B A in float64
rounds at about u N, above u ||M|| by up to sqrt(r)), and the angle or sigma error to it is
at most the sum of both errors to the exact ones: there Weyl's and Wedin's bounds are held
at 4x (measured: up to 2.5x under the MKL_CBWR modes). In float32 the reference's error is
1e-9 of them.

Each holds under MKL_CBWR=AVX2, AVX512 and COMPATIBLE at one and two threads.
"""

from __future__ import annotations

import math

import pytest
import torch

import fraq
from benchmarks.cases import conditioned
from benchmarks.measure.fidelity import first_order
from fraq._gram import scale_sum
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64


def _u(dtype):
    return torch.finfo(dtype).eps


def _dense(B, A):
    return torch.linalg.svd(B.double() @ A.double(), full_matrices=False)


def _orth_bound(m, n, dtype=F32):
    return 16 * math.sqrt(max(m, n)) * _u(dtype)


def _orth(Q, rows=False):
    Q = Q.double()
    G = Q @ Q.mT if rows else Q.mT @ Q
    return float(torch.linalg.matrix_norm(G - torch.eye(G.shape[-1], dtype=F64), ord=2).max())


def _check_triplets(B, A, res, p, dtype=F32):
    """Weyl on every kept sigma, Wedin on the leading subspaces where a gap defines them,
    orthonormal factors; per matrix of a batch."""
    U, S, Vh = res
    m, n = B.shape[-2], A.shape[-1]
    c, u = math.sqrt(min(m, n)), _u(dtype)
    Ur, Sr, Vr = _dense(B, A)
    assert U.shape == (*B.shape[:-2], m, p) and S.shape == (*B.shape[:-2], p) and Vh.shape == (*B.shape[:-2], p, n)
    s1 = Sr[..., :1]
    slack = 4 if dtype == F64 else 1  # the float64 reference's own error (module docstring)
    assert ((S.double() - Sr[..., :p]).abs() <= slack * c * u * s1).all(), (S, Sr[..., :p])
    assert (S[..., :-1] >= S[..., 1:]).all() and (S >= 0).all()
    assert _orth(U) <= _orth_bound(m, n, dtype) and _orth(Vh, rows=True) <= _orth_bound(m, n, dtype)
    for q in range(1, p + 1):
        f = first_order((U[..., :q] * S[..., None, :q]).double(), Vh[..., :q, :].double(), q, Ur, Sr, Vr, eps=u)
        bound = slack * f.bound_first
        ok = torch.isnan(bound) | ((f.sin_left <= bound) & (f.sin_right <= bound))
        assert ok.all(), (q, f)


@pytest.mark.parametrize("m, n", [(48, 40), (40, 48), (36, 36), (64, 24)])
@pytest.mark.parametrize("kappa", [1.0, 1e3])
def test_triplets_within_first_order_bounds(m, n, kappa):
    """A rank-16 aggregate of 4 clients, singular values log-spaced down to 1/kappa (kappa = 1:
    all equal, no gap anywhere: only Weyl and orthonormality apply), cut at p = 6 and at the
    full stacked rank."""
    Bs, As, _ = conditioned(m, n, 16, kappa, clients=4, batch=2)
    B, A = fraq.stack(Bs, As)
    for p in (6, None):
        res = fraq.svd(B, A, rank=p)
        _check_triplets(B, A, res, p or 16)


def test_each_isolated_singular_vector_within_its_own_gap_bound():
    """Distinct singular values (LoRA-like clients): the i-th left and right vectors match the
    float64 ones up to sign within c u sigma_1 / min(sigma_{i-1} - sigma_i, sigma_i - sigma_{i+1})."""
    Bs, As = lora_clients(60, 50, [4, 4, 4], seed=3)
    B, A = fraq.stack(Bs, As, weights=[2, 1, 1], scales=[2.0, 2.0, 0.5])
    U, S, Vh = fraq.svd(B, A)
    Ur, Sr, Vr = _dense(B, A)
    c, u = math.sqrt(50), _u(F32)
    s = Sr[:12]
    gaps = torch.minimum(torch.cat([s.new_tensor([math.inf]), s[:-1] - s[1:]]),
                         torch.cat([s[:-1] - s[1:], s[-1:] - Sr[12:13]]))
    for i in range(12):
        bound = c * u * float(Sr[0]) / float(gaps[i])
        x, y = U[:, i].double(), Vh[i].double()
        sin_u = float(torch.linalg.vector_norm(x - Ur[:, i] * (Ur[:, i] @ x)))  # the projection's residual: no
        sin_v = float(torch.linalg.vector_norm(y - Vr[i] * (Vr[i] @ y)))  # cancellation, unlike sqrt(1 - cos^2)
        assert sin_u <= bound and sin_v <= bound, (i, sin_u, sin_v, bound)


@pytest.mark.parametrize("m, n, ranks", [(40, 30, [4, 4]), (30, 40, [8, 8, 8, 8, 8]), (24, 24, [16, 16])])
def test_full_stacked_rank_reconstructs_the_aggregate(m, n, ranks):
    """rank=None keeps min(m, n, r) triplets (r > min(m, n) included): U S Vh is the aggregate
    to c u ||M||_F."""
    Bs, As = lora_clients(m, n, ranks, seed=1)
    B, A = fraq.stack(Bs, As)
    U, S, Vh = fraq.svd(B, A)
    p = min(m, n, sum(ranks))
    assert U.shape == (m, p) and S.shape == (p,) and Vh.shape == (p, n)
    M = B.double() @ A.double()
    err = torch.linalg.matrix_norm((U.double() * S.double()) @ Vh.double() - M)
    N = float(scale_sum(B.double(), A.double()))
    assert err <= math.sqrt(min(m, n)) * _u(F32) * N
    _check_triplets(B, A, (U, S, Vh), p)


@pytest.mark.parametrize("c", [1e-3, 7.5e4, 2.0**-60])
def test_rescaled_factors_give_the_same_triplets(c):
    """B c and A / c (the same aggregate): the same singular values to Weyl's bound, the same
    rank-q products for every q to 2 c u sigma_1 (both sides within it of the exact one), and
    both within the first-order bounds. c = 2^-60 puts B's entries far below float32's
    normal range unless the range rescue runs."""
    Bs, As = lora_clients(50, 40, [4, 4, 4], seed=5, dtype=F64)
    B, A = fraq.stack(Bs, As)
    one = fraq.svd(B.float(), A.float(), rank=8)
    two = fraq.svd((B * c).float(), (A / c).float(), rank=8)
    Bf, Af = B.float(), A.float()
    _check_triplets(Bf, Af, one, 8)
    _check_triplets((B * c).float(), (A / c).float(), two, 8)
    s1 = float(one.S[0])
    bound = 2 * math.sqrt(40) * _u(F32) * s1
    assert (one.S - two.S).abs().max() <= bound
    for q in range(1, 9):
        P1 = (one.U[:, :q].double() * one.S[:q].double()) @ one.Vh[:q].double()
        P2 = (two.U[:, :q].double() * two.S[:q].double()) @ two.Vh[:q].double()
        gap = float(one.S[q - 1] - (one.S[q] if q < 8 else 0.0))
        assert torch.linalg.matrix_norm(P1 - P2, ord=2) <= bound * (1 + s1 / gap), q


@pytest.mark.parametrize("batch", [(), (1,), (3,), (2, 3)])
def test_batched_equals_looped(batch):
    """A batch gives each matrix's own call's result to rounding (same bounds as one call)."""
    Bs, As = lora_clients(32, 28, [4, 4], seed=2, batch=batch)
    B, A = fraq.stack(Bs, As)
    U, S, Vh = fraq.svd(B, A, rank=5)
    assert U.shape == (*batch, 32, 5)
    flat = [(B.reshape(-1, 32, 8)[i], A.reshape(-1, 8, 28)[i]) for i in range(math.prod(batch))]
    for i, (b, a) in enumerate(flat):
        one = fraq.svd(b, a, rank=5)
        assert (S.reshape(-1, 5)[i] - one.S).abs().max() <= math.sqrt(28) * _u(F32) * float(one.S[0])
        _check_triplets(b, a, (U.reshape(-1, 32, 5)[i], S.reshape(-1, 5)[i], Vh.reshape(-1, 5, 28)[i]), 5)


def test_rank_deficient_cancelling_and_zero_aggregates():
    """Duplicate clients (rank 8 of a stacked 16), a client and its negative (the zero
    aggregate) and all-zero factors: U and Vh orthonormal, S zero to c u sigma_1 (or u ||B||
    ||A|| for the zero aggregate) past the exact rank, the product the aggregate."""
    Bs, As = lora_clients(30, 26, [8], seed=4)
    B, A = fraq.stack(Bs * 2, As * 2)
    U, S, Vh = fraq.svd(B, A)
    c, u, o = math.sqrt(26), _u(F32), _orth_bound(30, 26)
    assert S.shape == (16,) and _orth(U) <= o and _orth(Vh, rows=True) <= o
    assert S[8:].max() <= c * u * float(S[0])
    _check_triplets(B, A, (U, S, Vh), 16)

    B, A = fraq.stack([Bs[0], Bs[0]], [As[0], -As[0]])  # the exact aggregate is zero
    U, S, Vh = fraq.svd(B, A, rank=4)
    scale = float(torch.linalg.matrix_norm(B) * torch.linalg.matrix_norm(A))
    assert S.max() <= c * u * scale and _orth(U) <= o and _orth(Vh, rows=True) <= o

    U, S, Vh = fraq.svd(torch.zeros(30, 6), torch.zeros(6, 26))
    assert (S == 0).all() and _orth(U) <= o and _orth(Vh, rows=True) <= o


def test_empty_problems():
    """r, m or n zero: the aggregate is zero and p is 0; an empty batch keeps the width."""
    U, S, Vh = fraq.svd(torch.zeros(5, 0), torch.zeros(0, 7))
    assert U.shape == (5, 0) and S.shape == (0,) and Vh.shape == (0, 7)
    U, S, Vh = fraq.svd(torch.zeros(0, 5, 4), torch.zeros(0, 4, 7), rank=3)
    assert U.shape == (0, 5, 3) and S.shape == (0, 3) and Vh.shape == (0, 3, 7)


@pytest.mark.parametrize("rank, error, match", [
    (0, ValueError, r"rank\(=0\) must be in \[1, min\(d, r\)=12\]"),
    (13, ValueError, r"rank\(=13\) must be in \[1, min\(d, r\)=12\]"),
    (-2, ValueError, r"rank\(=-2\)"),
    (2.5, TypeError, r"rank\(=2.5\) must be an int"),
    (True, TypeError, r"rank\(=True\) must be an int"),
])
def test_bad_rank_is_named(rank, error, match):
    Bs, As = lora_clients(20, 16, [4, 4, 4], seed=0)
    B, A = fraq.stack(Bs, As)
    with pytest.raises(error, match=match):
        fraq.svd(B, A, rank=rank)


def test_precision_float64_and_low_precision_inputs():
    """float64 in float64 (the same bounds at u = 2^-53); bfloat16 computes in float32 and
    returns U and Vh in bfloat16 (orthonormal to bfloat16's own rounding), S in float32."""
    Bs, As = lora_clients(40, 30, [4, 4], seed=6, dtype=F64)
    B, A = fraq.stack(Bs, As)
    _check_triplets(B, A, fraq.svd(B, A, rank=6), 6, F64)
    Bh, Ah = fraq.stack([b.bfloat16() for b in Bs], [a.bfloat16() for a in As])
    U, S, Vh = fraq.svd(Bh, Ah, rank=6)
    assert U.dtype == Vh.dtype == torch.bfloat16 and S.dtype == F32
    _check_triplets(Bh, Ah, (U.float(), S, Vh.float()), 6, torch.bfloat16)  # U, Vh rounded to bfloat16 once
    Sr = _dense(Bh, Ah)[1][:6]
    assert (S.double() - Sr).abs().max() <= math.sqrt(30) * _u(F32) * float(Sr[0])  # S: float32's Weyl bound


@pytest.mark.parametrize("backend", ["householder", "cholesky", "cholesky-qr2", "polar"])
def test_other_exact_backends_give_the_same_bounds(backend):
    Bs, As, _ = conditioned(40, 48, 16, 1e3, clients=4, batch=2)
    B, A = fraq.stack(Bs, As)
    _check_triplets(B, A, fraq.svd(B, A, rank=8, backend=backend), 8)


def test_inputs_not_modified_and_gradients_not_tracked():
    Bs, As = lora_clients(20, 16, [4, 4], seed=0)
    B, A = fraq.stack(Bs, As)
    B0, A0 = B.clone(), A.clone()
    U, S, Vh = fraq.svd(torch.nn.Parameter(B), A)
    assert torch.equal(B, B0) and torch.equal(A, A0) and not U.requires_grad
