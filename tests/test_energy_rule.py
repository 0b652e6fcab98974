"""The energy rule's contract (fraq._energy, docs/library.md), checked against the float64
SVD of the exact aggregate of the factors as given, on the inputs that break a floor:
factors rescaled against each other (which leaves the product unchanged), flat tails at
tau near 1, duplicates and cancelling clients at tau = 1; every exact backend, Gram form,
eigensolver dtype and input dtype.

Tolerance: the rule may stop short of ``tau`` only by the Gram's rounding, s * eps of the
energy (:func:`fraq._energy.gram_budget`); each kept energy it sums is a sum of computed
eigenvalues, each within about eps * tr G of the exact one (a backward-stable eigensolver on
a Gram formed with normwise error eps * tr G), so the test allows 2 s eps of the energy,
eps the unit roundoff of the computation (float32 for float32, bfloat16 and float16 inputs).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import fraq
from fraq._energy import energy_rule, gram_budget, noise_floor
from fraq.backends import EXACT_BACKENDS

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
GRAMS = ("product", "factored", "auto")
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def float64_spectrum(B: torch.Tensor, A: torch.Tensor) -> np.ndarray:
    """lambda_i = sigma_i^2 of the exact aggregate B @ A (float64 SVD of the float64 product),
    those at or below 1e-12 of sum_k ||b_k|| ||a_k|| set to 0: far below any float32 or float64
    computation's rounding of the product, far above the float64 SVD's own."""
    B64, A64 = B.double(), A.double()
    S = torch.linalg.svdvals(B64 @ A64).numpy()
    n_sum = float((B64.norm(dim=0) * A64.norm(dim=1)).sum())
    return np.where(S > 1e-12 * n_sum, S, 0.0) ** 2


def rule64(lam: np.ndarray, tau: float) -> int:
    """Eq. 11 on the float64 spectrum; tau >= 1 gives the numerical rank (count of nonzero)."""
    total = lam.sum()
    if total == 0:
        return 0
    if tau >= 1:
        return int((lam > 0).sum())
    return int((np.cumsum(lam) < tau * total).sum() + 1)


def tolerance(B: torch.Tensor, A: torch.Tensor, eig_dtype=F64) -> float:
    s = min(B.shape[-2], B.shape[-1], A.shape[-1])
    cdt = F64 if B.dtype == F64 else F32
    return 2 * s * max(torch.finfo(cdt).eps, torch.finfo(eig_dtype).eps)


def assert_contract(B, A, res, tau, eig_dtype=F64):
    """p holds >= tau - tol of the exact aggregate's energy and p <= the float64 rule's at tau + tol;
    result.info says when the computed energy is below tau."""
    lam = float64_spectrum(B, A)
    p, total = int(res.rank), lam.sum()
    tol = tolerance(B, A, eig_dtype)
    if total == 0:
        assert p == 0, f"zero aggregate, rank {p}"
        return
    kept = lam[:p].sum() / total
    assert kept >= tau - tol, f"rank {p} keeps {kept:.8f} < tau {tau} - {tol:.2e} (float64 rule: {rule64(lam, tau)})"
    assert p <= rule64(lam, min(tau + tol, 1.0)), f"rank {p} > float64 rule's {rule64(lam, min(tau + tol, 1.0))}"
    assert (float(res.energy) < tau) <= (res.info["below_tau"] == 1), "energy below tau without a word"


def two_clients(m, n, r, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    f = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    return (f(m, r), f(r, n) / n**0.5), (f(m, r), f(r, n) / n**0.5)


@settings(max_examples=40, **SETTINGS)
@given(c=st.floats(1.0, 1e6), m=st.integers(8, 64), n=st.integers(8, 64), r=st.integers(1, 8),
       tau=st.floats(0.5, 1.0), seed=st.integers(0, 2**16), dtype=st.sampled_from([F32, F64, BF16]),
       backend=st.sampled_from(EXACT_BACKENDS), gram=st.sampled_from(GRAMS))
@example(c=1e3, m=64, n=48, r=4, tau=0.95, seed=0, dtype=F32, backend="householder", gram="auto")
@example(c=1e6, m=64, n=48, r=4, tau=0.95, seed=0, dtype=F32, backend="householder", gram="product")
def test_opposite_imbalance_between_clients(c, m, n, r, tau, seed, dtype, backend, gram):
    """(B1 c, A1 / c) and (B2 / c, A2 c): the same aggregate for every c, the same rank."""
    (B1, A1), (B2, A2) = two_clients(m, n, r, seed, dtype)
    B, A = fraq.stack([(B1 * c).to(dtype), (B2 / c).to(dtype)], [(A1 / c).to(dtype), (A2 * c).to(dtype)])
    res = fraq.recompress(B, A, tau=tau, backend=backend, gram=gram)
    assert_contract(B, A, res, tau)


@settings(max_examples=25, **SETTINGS)
@given(decades=st.floats(0.0, 8.0), m=st.integers(8, 64), n=st.integers(8, 64), r=st.integers(2, 12),
       tau=st.floats(0.5, 1.0), seed=st.integers(0, 2**16), dtype=st.sampled_from([F32, F64, BF16]),
       gram=st.sampled_from(GRAMS))
@example(decades=8.0, m=64, n=48, r=8, tau=0.95, seed=0, dtype=F32, gram="auto")
def test_imbalance_inside_one_client(decades, m, n, r, tau, seed, dtype, gram):
    """One client whose B columns are scaled 10^(-decades/2) .. 10^(decades/2), A's rows inversely."""
    g = torch.Generator().manual_seed(seed)
    t = torch.logspace(-decades / 2, decades / 2, r, dtype=F64)
    B = (torch.randn(m, r, generator=g, dtype=F64) * t).to(dtype)
    A = (torch.randn(r, n, generator=g, dtype=F64) / t[:, None] / n**0.5).to(dtype)
    res = fraq.recompress(B, A, tau=tau, gram=gram)
    assert_contract(B, A, res, tau)


@settings(max_examples=20, **SETTINGS)
@given(c=st.floats(1.0, 1e6), d=st.integers(4, 24), extra=st.integers(0, 24), K=st.integers(2, 6),
       tau=st.floats(0.5, 1.0), seed=st.integers(0, 2**16), dtype=st.sampled_from([F32, F64]),
       gram=st.sampled_from(GRAMS))
def test_identity_path_with_imbalance(c, d, extra, K, tau, seed, dtype, gram):
    """r >= d (the basis is the identity): K clients of rank d / 2 + 1, alternately scaled by c and 1 / c."""
    g = torch.Generator().manual_seed(seed)
    n, rk = d + extra, d // 2 + 1
    Bs, As = [], []
    for k in range(K):
        ck = c if k % 2 else 1 / c
        Bs.append((torch.randn(d, rk, generator=g, dtype=F64) * ck).to(dtype))
        As.append((torch.randn(rk, n, generator=g, dtype=F64) / ck / n**0.5).to(dtype))
    B, A = fraq.stack(Bs, As)
    res = fraq.recompress(B, A, tau=tau, gram=gram)
    assert res.info.get("basis") == "identity" or B.shape[-1] < d
    assert_contract(B, A, res, tau)


def flat_tail(d: int, t: int, level: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A d x d aggregate with sigma_1 = 1 and t directions at ``level``, split as U S^(1/2), S^(1/2) V^T."""
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(d, t + 1, generator=g, dtype=F64)).Q
    V = torch.linalg.qr(torch.randn(d, t + 1, generator=g, dtype=F64)).Q
    S = torch.full((t + 1,), level, dtype=F64)
    S[0] = 1.0
    return U * S.sqrt(), S.sqrt()[:, None] * V.mT


@settings(max_examples=30, **SETTINGS)
@given(t=st.integers(100, 180), f=st.floats(1.5, 10.0), tau=st.floats(0.99, 0.999), seed=st.integers(0, 2**16),
       backend=st.sampled_from(EXACT_BACKENDS), gram=st.sampled_from(GRAMS), eig32=st.booleans(),
       dtype=st.sampled_from([F32, F64, BF16]))
@example(t=240, f=0.006 / 0.005, tau=0.995, seed=0, backend="householder", gram="auto", eig32=False, dtype=F32)
def test_flat_tail_near_one(t, f, tau, seed, backend, gram, eig32, dtype):
    """sigma_1 = 1 and t directions holding f (1 - tau) of the energy together: the rule must
    keep some of them (the float64 rule does), however small each is."""
    level = math.sqrt(f * (1 - tau) / t)
    B, A = flat_tail(256 if t > 180 else 192, t, level, seed)
    B, A = B.to(dtype), A.to(dtype)
    edt = F32 if eig32 else F64
    res = fraq.recompress(B, A, tau=tau, backend=backend, gram=gram, eig_dtype=edt)
    assert_contract(B, A, res, tau, edt)


@pytest.mark.parametrize("dtype", [F32, F64, BF16])
@pytest.mark.parametrize("gram", GRAMS)
def test_tau_one_numerical_rank(dtype, gram):
    """tau = 1: exactly cancelling clients give 0, 64 duplicates of a client its rank, clients
    cancelling up to 1e-2 keep their rank; ranks against the float64 spectrum."""
    g = torch.Generator().manual_seed(3)
    B1 = torch.randn(64, 8, generator=g).to(dtype)
    A1 = (torch.randn(8, 48, generator=g) / 7).to(dtype)
    D = (1e-2 * torch.randn(64, 8, generator=g)).to(dtype)
    cases = {"cancel": (stack2([B1, -B1], [A1, A1]), 0), "duplicates": (stack2([B1] * 64, [A1] * 64), 8),
             "cancel 1e-2": (stack2([B1, -B1 + D], [A1, A1]), 8)}
    for name, ((B, A), want) in cases.items():
        res = fraq.recompress(B, A, tau=1.0, gram=gram)
        assert int(res.rank) == want, f"{name}: rank {int(res.rank)}, want {want}"
        assert rule64(float64_spectrum(B, A), 1.0) == want
        assert_contract(B, A, res, 1.0)


def stack2(Bs, As):
    return fraq.stack(Bs, As)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_rank_and_product_do_not_move_with_opposite_rescaling(dtype):
    """Rescaling that leaves the product unchanged (powers of two: exactly) leaves the rank,
    the spectrum and the adapter's product unchanged, on every Gram form."""
    (B1, A1), (B2, A2) = two_clients(48, 40, 6, 5, dtype)
    base = fraq.stack([B1.to(dtype), B2.to(dtype)], [A1.to(dtype), A2.to(dtype)])
    for gram in GRAMS:
        ref = fraq.recompress(*base, tau=0.99, gram=gram)
        for c in (2.0**10, 2.0**20, 2.0**-15):
            B, A = fraq.stack([(B1 * c).to(dtype), (B2 / c).to(dtype)], [(A1 / c).to(dtype), (A2 * c).to(dtype)])
            res = fraq.recompress(B, A, tau=0.99, gram=gram)
            assert int(res.rank) == int(ref.rank)
            torch.testing.assert_close(res.singular_values, ref.singular_values,
                                       rtol=64 * torch.finfo(dtype).eps, atol=0)


def test_noise_floor_is_the_product_rounding_and_invariant():
    """(k eps N)^2 with k = max(min(d, r), sqrt(d + r)); N = sum_k ||x_k|| ||y_k|| does not move when
    x_k is scaled by c and y_k by 1 / c; an overflowed N gives no floor."""
    eps = torch.finfo(F32).eps
    n_sum = np.array([1.0, 3.0, np.inf])
    np.testing.assert_allclose(noise_floor(n_sum, 16, 8, eps), [(8 * eps) ** 2, (24 * eps) ** 2, 0.0])
    np.testing.assert_allclose(noise_floor(n_sum[:2], 2, 1, eps), [(3**0.5 * eps) ** 2, (3 * 3**0.5 * eps) ** 2])
    got = noise_floor(torch.tensor([2.0, float("nan")], dtype=F64), 16, 16, eps)
    assert got.tolist() == [(16 * eps * 2.0) ** 2, 0.0]


def test_energy_rule_on_a_given_spectrum():
    """Eq. 11 against a hand count; the trailing directions are cut only while they hold at most the
    budget together, and such a cut is marked short; an all-zero spectrum is rank 0, energy 1."""
    lam = np.array([[4.0, 2.0, 1.0, 0.5, 0.25, 0.25], [0.0] * 6, [1.0, 1e-9, 1e-9, 0, 0, 0]])
    p, energy, short, q = energy_rule(lam, 0.9, None, np.array([0.0, 0.0, 3e-9]))
    assert p.tolist() == [4, 0, 1] and q.tolist() == [6, 0, 1] and short.tolist() == [False, False, False]
    p, energy, short, q = energy_rule(lam, 1.0, None, np.array([0.5, 0.0, 3e-9]))
    assert p.tolist() == [4, 0, 1] and short.tolist() == [True, False, True]
    np.testing.assert_allclose(energy, [7.5 / 8, 1.0, 1 / (1 + 2e-9)])
    p, energy, short, q = energy_rule(lam, 1.0, None, np.array([0.49, 0.0, 1.5e-9]))
    assert p.tolist() == [5, 0, 2]
    p, energy, _, _ = energy_rule(lam, None, 2, 0.0)
    np.testing.assert_allclose(energy, [6 / 8, 1.0, (1 + 1e-9) / (1 + 2e-9)])
    assert gram_budget(2.0, 8, 0.5) == 8.0
