"""fraq.recompress against float64 SVDs of the explicitly formed aggregate.

Tolerances are eps of the compute dtype times a stated factor. Where a bound depends on
the size of the problem the factor says so: a product of inner dimension k carries
about k * eps relative error in the worst case, sqrt(k) * eps typically.
"""

import itertools

import pytest
import torch
from conftest import dense_svd, eps, fro, set_default, truncation_error
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import fraq
from fraq.synthetic import lora_clients, spectrum_matrix

F32, F64 = torch.float32, torch.float64


@pytest.fixture(autouse=True, params=["householder", "cholesky"])
def default_backend(request, monkeypatch):
    """Every test here runs with each exact default: the paper's Householder reference and
    the QR-free ``cholesky`` path that ``backend="auto"`` picks on CPU."""
    set_default(monkeypatch, "cpu", backend=request.param)
    return request.param

# Error of the computed product above the Eckart-Young optimum, in units of
# eps * ||M||_F * sqrt(r): QR, two GEMMs and the reflector application each add a few
# eps * ||M||, and the Gram eigenvectors are accurate to eps * lambda_1 / gap.
EXCESS_FACTOR = 64
# Eigenvalues of the computed Gram agree with sigma_i^2 to r * eps * sigma_1^2 (Weyl,
# with the Gram's rounding and the eigensolver's backward error).
SPECTRUM_FACTOR = 16


def _problem(m, n, ranks, *, batch=(), seed=0, dtype=F64, weights=None, scales=None):
    Bs, As = lora_clients(m, n, ranks, batch=batch, seed=seed, dtype=dtype)
    B, A = fraq.stack(Bs, As, weights, scales)
    return B, A


def _check_optimal(B, A, res, dtype):
    """Eckart-Young: ||M - B_g A_g|| equals the float64 optimum at the selected rank."""
    M = B.double() @ A.double()
    _, S, _ = dense_svd(M)
    err = fro(M - res.B.double() @ res.A.double())
    opt = truncation_error(S, res.rank)
    r = B.shape[-1]
    tol = EXCESS_FACTOR * eps(dtype) * r**0.5 * fro(M)
    assert (err >= opt - tol).all()  # no result beats the optimum
    assert (err <= opt + tol).all(), (err - opt, tol)
    return S


def _check_orientation(res, m, n, dtype):
    """The orthonormal factor is B (m <= n) or A (m > n), the LoRA orientation is kept."""
    assert res.B.shape[-2] == m and res.A.shape[-1] == n
    assert res.B.shape[-1] == res.A.shape[-2]
    Q = res.B if m <= n else res.A.mT
    p = res.rank if isinstance(res.rank, torch.Tensor) else torch.tensor(res.rank)
    gram = Q.double().mT @ Q.double()
    k = Q.shape[-1]
    live = (torch.arange(k) < p.unsqueeze(-1)).double()
    expect = torch.diag_embed(live)
    tol = 16 * eps(dtype) * max(m, n) ** 0.5
    assert (gram - expect).abs().max() <= tol


SHAPES = [  # (m, n, ranks): m < n, m > n, m = n, r > d, heterogeneous ranks
    (20, 35, [3, 4, 2]),
    (35, 20, [3, 4, 2]),
    (24, 24, [5, 5]),
    (6, 40, [4, 4, 3]),    # r = 11 > d = 6
    (40, 6, [4, 4, 3]),    # r > d, transposed
    (50, 30, [1, 8, 2, 16]),
]


@pytest.mark.parametrize("m,n,ranks", SHAPES)
@pytest.mark.parametrize("tau", [0.5, 0.9, 0.99])
def test_tau_gives_eckart_young_optimum_float64(m, n, ranks, tau):
    B, A = _problem(m, n, ranks, weights=[1.0 + k for k in range(len(ranks))], scales=[2.0] * len(ranks))
    res = fraq.recompress(B, A, tau=tau)
    _check_optimal(B, A, res, F64)
    _check_orientation(res, m, n, F64)


@pytest.mark.parametrize("m,n,ranks", SHAPES)
def test_fixed_rank_gives_eckart_young_optimum(m, n, ranks):
    s = min(m, n, sum(ranks))
    for dtype in (F32, F64):
        B, A = _problem(m, n, ranks, dtype=dtype, seed=3)
        for p in sorted({1, s // 2 or 1, s}):
            res = fraq.recompress(B, A, rank=p)
            assert res.rank == p and res.B.shape[-1] == p
            _check_optimal(B, A, res, dtype)
            _check_orientation(res, m, n, dtype)


@pytest.mark.parametrize("m,n,ranks", SHAPES)
def test_singular_values_match_float64_svd(m, n, ranks):
    for dtype in (F32, F64):
        B, A = _problem(m, n, ranks, dtype=dtype, seed=4)
        res = fraq.recompress(B, A, tau=0.9)
        _, S, _ = dense_svd(B.double() @ A.double())
        s = min(m, n, sum(ranks))
        assert res.singular_values.shape == (s,)
        sv = res.singular_values.double()
        assert (sv[:-1] >= sv[1:]).all()
        tol = SPECTRUM_FACTOR * sum(ranks) * eps(dtype) * S[0] ** 2
        assert ((sv.square() - S[:s].square()).abs() <= tol).all()


def _reference_rank(S, tau):
    energy = S.square().cumsum(-1) / S.square().sum()
    return int((energy < tau).sum()) + 1, energy


@given(tau=st.floats(0.05, 1.0), seed=st.integers(0, 2**16))
@settings(max_examples=40, deadline=None)
def test_energy_rule_smallest_rank_reaching_tau(tau, seed):
    """Eq. 11 on the float64 spectrum; cases within rounding of the threshold are skipped."""
    B, A = _problem(30, 22, [3, 5, 4], seed=seed)
    _, S, _ = dense_svd(B @ A)
    p_ref, energy = _reference_rank(S, tau)
    margin = 1e3 * eps(F64)
    assume(tau == 1.0 or ((energy - tau).abs() > margin).all())
    res = fraq.recompress(B, A, tau=tau)
    assert res.rank == min(p_ref, 12)
    assert res.energy >= tau - margin
    if res.rank > 1:
        assert energy[res.rank - 2] < tau


def test_energy_rule_float32_within_rounding():
    B, A = _problem(64, 48, [8, 8, 8], dtype=F32, seed=11)
    _, S, _ = dense_svd(B.double() @ A.double())
    for tau in (0.3, 0.6, 0.8, 0.95):
        p_ref, energy = _reference_rank(S, tau)
        res = fraq.recompress(B, A, tau=tau)
        # A rank other than the reference one is allowed only if the reference energy at
        # the boundary is within float32 rounding of tau.
        if res.rank != p_ref:
            lo = min(res.rank, p_ref) - 1
            assert abs(float(energy[lo]) - tau) <= 64 * eps(F32)
        assert abs(res.energy - float(energy[res.rank - 1])) <= 64 * eps(F32)


@given(
    m=st.integers(1, 40), n=st.integers(1, 40),
    ranks=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    tau=st.floats(0.1, 1.0), dtype=st.sampled_from([F32, F64]), seed=st.integers(0, 999),
)
@settings(max_examples=60, deadline=None)
def test_any_shape_and_rank(m, n, ranks, tau, dtype, seed):
    B, A = _problem(m, n, ranks, dtype=dtype, seed=seed)
    res = fraq.recompress(B, A, tau=tau)
    s = min(m, n, sum(ranks))
    assert 0 <= res.rank <= s
    assert res.singular_values.shape == (s,)
    assert torch.isfinite(res.B).all() and torch.isfinite(res.A).all()
    _check_optimal(B, A, res, dtype)
    _check_orientation(res, m, n, dtype)


@pytest.mark.parametrize("batch", [(), (1,), (3,), (2, 3)])
@pytest.mark.parametrize("m,n", [(18, 30), (30, 18)])
def test_batched_equals_looped(batch, m, n):
    B, A = _problem(m, n, [2, 6, 3, 5], batch=batch, seed=8, dtype=F32)
    res = fraq.recompress(B, A, tau=0.8)
    if batch == ():
        assert isinstance(res.rank, int)
        return
    assert res.rank.shape == batch and res.rank.dtype == torch.int64
    assert res.singular_values.shape == (*batch, min(m, n, 16))
    pmax = int(res.rank.max())
    assert res.B.shape == (*batch, m, pmax) and res.A.shape == (*batch, pmax, n)
    for idx in itertools.product(*(range(b) for b in batch)):
        one = fraq.recompress(B[idx], A[idx], tau=0.8)
        p = one.rank
        assert int(res.rank[idx]) == p
        # Padding past each matrix's own rank is exactly zero.
        assert (res.B[idx][:, p:] == 0).all() and (res.A[idx][p:] == 0).all()
        Mb = res.B[idx].double() @ res.A[idx].double()
        Ml = one.B.double() @ one.A.double()
        tol = EXCESS_FACTOR * eps(F32) * fro(B[idx].double() @ A[idx].double())
        assert fro(Mb - Ml) <= tol
        # Squared: sigma_i = sqrt(lambda_i) magnifies the Gram's eps * lambda_1 for small sigma_i.
        torch.testing.assert_close(res.singular_values[idx].square(), one.singular_values.square(), rtol=0,
                                   atol=SPECTRUM_FACTOR * 16 * eps(F32) * float(one.singular_values[0]) ** 2)


def test_batch_ranks_differ_per_matrix():
    """Matrices of one batch with different spectra get different ranks."""
    sv1 = torch.tensor([1.0, 0.9, 0.8, 0.7, 0.6, 0.5])
    sv2 = torch.tensor([1.0, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3])
    B1, A1 = spectrum_matrix(20, 25, sv1, seed=1)
    B2, A2 = spectrum_matrix(20, 25, sv2, seed=2)
    res = fraq.recompress(torch.stack([B1, B2]), torch.stack([A1, A2]), tau=0.9)
    assert res.rank.tolist() == [5, 1]
    assert res.B.shape[-1] == 5


def test_client_order_invariance():
    Bs, As = lora_clients(40, 28, [3, 6, 2, 5], seed=9, dtype=F64)
    w, s = [4.0, 1.0, 2.0, 3.0], [2.0, 1.0, 0.5, 4.0]
    ref = fraq.recompress(*fraq.stack(Bs, As, w, s), tau=0.85)
    M = ref.B @ ref.A
    for perm in [(3, 2, 1, 0), (1, 0, 3, 2), (2, 3, 0, 1)]:
        B, A = fraq.stack([Bs[i] for i in perm], [As[i] for i in perm], [w[i] for i in perm], [s[i] for i in perm])
        res = fraq.recompress(B, A, tau=0.85)
        assert res.rank == ref.rank
        torch.testing.assert_close(res.B @ res.A, M, rtol=0, atol=EXCESS_FACTOR * eps(F64) * float(fro(M)))
        # Squared: a permutation changes the Gram's rounding, eps * lambda_1, which
        # sigma_i = sqrt(lambda_i) magnifies by sigma_1 / sigma_i for the small ones.
        torch.testing.assert_close(res.singular_values.square(), ref.singular_values.square(), rtol=0,
                                   atol=SPECTRUM_FACTOR * 16 * eps(F64) * float(ref.singular_values[0]) ** 2)


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("m,n", [(30, 50), (50, 30)])
def test_duplicate_clients_rank_deficient(dtype, m, n):
    """Two identical clients: the stack has rank r/2; tau = 1 finds it and reproduces M."""
    Bs, As = lora_clients(m, n, [4, 3], seed=10, dtype=dtype)
    B, A = fraq.stack(Bs + Bs, As + As)
    res = fraq.recompress(B, A, tau=1.0)
    assert res.rank == 7
    M = B.double() @ A.double()
    assert fro(M - res.B.double() @ res.A.double()) <= EXCESS_FACTOR * eps(dtype) * fro(M)
    assert (res.singular_values[7:] == 0).all()
    _check_orientation(res, m, n, dtype)
    _check_optimal(B, A, fraq.recompress(B, A, tau=0.7), dtype)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_tau_one_reproduces_aggregate(dtype):
    B, A = _problem(45, 33, [4, 4, 4, 4], dtype=dtype, seed=12)
    res = fraq.recompress(B, A, tau=1.0)
    assert res.rank == 16 and res.energy == 1.0
    M = B.double() @ A.double()
    assert fro(M - res.B.double() @ res.A.double()) <= EXCESS_FACTOR * eps(dtype) * fro(M)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_zero_aggregate_is_rank_zero(batch):
    """Every client's B still at LoRA's zero initialization."""
    Bs = [torch.zeros(*batch, 16, 4) for _ in range(3)]
    As = [torch.randn(*batch, 4, 12) for _ in range(3)]
    res = fraq.recompress(*fraq.stack(Bs, As), tau=0.9)
    if batch:
        assert (res.rank == 0).all() and (res.energy == 1).all()
    else:
        assert res.rank == 0 and res.energy == 1.0
    assert res.B.shape == (*batch, 16, 0) and res.A.shape == (*batch, 0, 12)
    assert (res.singular_values == 0).all()


def test_zero_matrix_inside_a_batch():
    B, A = _problem(16, 12, [4, 4], batch=(3,), dtype=F32, seed=13)
    B = B.clone()
    B[1] = 0
    res = fraq.recompress(B, A, tau=0.9)
    assert res.rank[1] == 0 and res.rank[0] > 0 and res.rank[2] > 0
    assert (res.B[1] == 0).all() and (res.A[1] == 0).all()
    assert torch.isfinite(res.B).all() and torch.isfinite(res.A).all()


@pytest.mark.parametrize("sb,sa", [(1e-20, 1.0), (1e18, 1.0), (1.0, 1e-20), (1.0, 1e18),
                                   (1e18, 1e-20), (1e-20, 1e-15), (1e-20, 1e18)])
@pytest.mark.parametrize("m,n", [(40, 24), (24, 40)])
def test_badly_scaled_float32(sb, sa, m, n):
    """The Gram squares the spectrum; it must neither underflow nor overflow."""
    B, A = _problem(m, n, [4, 4, 4], dtype=F64, seed=14)
    B32, A32 = (B * sb).float(), (A * sa).float()
    assert torch.isfinite(B32).all() and torch.isfinite(A32).all()
    res = fraq.recompress(B32, A32, tau=0.9)
    # Compare with the float64 problem at unit scale: ranks agree and the result is the
    # unit-scale optimum times sb * sa.
    ref = fraq.recompress(B, A, tau=0.9)
    assert res.rank == ref.rank
    assert torch.isfinite(res.B).all() and torch.isfinite(res.A).all()
    M = B @ A
    got = (res.B.double() @ res.A.double()) / (sb * sa)
    _, S, _ = dense_svd(M)
    err = fro(M - got)
    assert err <= truncation_error(S, res.rank) + EXCESS_FACTOR * eps(F32) * 12**0.5 * fro(M)
    torch.testing.assert_close(res.singular_values.double() / (sb * sa), S[:12], rtol=0,
                               atol=SPECTRUM_FACTOR * 12 * eps(F32) * float(S[0]) ** 2 / float(S[-1]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_computes_in_float32(dtype):
    B, A = _problem(36, 28, [4, 4, 4], dtype=F32, seed=15)
    Bh, Ah = B.to(dtype), A.to(dtype)
    res = fraq.recompress(Bh, Ah, tau=0.9)
    assert res.B.dtype == dtype and res.A.dtype == dtype
    assert res.singular_values.dtype == F32
    # Same as computing on the upcast inputs, up to the final rounding to the low dtype.
    ref = fraq.recompress(Bh.float(), Ah.float(), tau=0.9)
    assert res.rank == ref.rank
    torch.testing.assert_close(res.B, ref.B.to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(res.A, ref.A.to(dtype), rtol=0, atol=0)
    M = Bh.double() @ Ah.double()
    _, S, _ = dense_svd(M)
    err = fro(M - res.B.double() @ res.A.double())
    assert err <= truncation_error(S, res.rank) + 8 * eps(dtype) * fro(M)


def test_float32_eigensolver_option_agrees_on_well_conditioned_input():
    B, A = _problem(50, 40, [6, 6, 6], dtype=F32, seed=16)
    a = fraq.recompress(B, A, tau=0.9)
    b = fraq.recompress(B, A, tau=0.9, eig_dtype=F32)
    assert a.rank == b.rank
    M = B.double() @ A.double()
    tol = EXCESS_FACTOR * eps(F32) * fro(M)
    assert fro(a.B.double() @ a.A.double() - b.B.double() @ b.A.double()) <= tol


def test_inputs_are_not_modified():
    B, A = _problem(20, 30, [3, 3], dtype=F32, seed=17)
    B0, A0 = B.clone(), A.clone()
    fraq.recompress(B, A, tau=0.9)
    fraq.recompress(A.mT, B.mT, rank=2)
    assert torch.equal(B, B0) and torch.equal(A, A0)


def test_result_downlink_counts_live_ranks():
    B, A = _problem(16, 24, [4, 4], batch=(3,), dtype=F32, seed=18)
    res = fraq.recompress(B, A, tau=0.8)
    assert res.downlink_params() == int(res.rank.sum()) * (16 + 24)


@pytest.mark.parametrize("kappa", [1e6, 1e10])
def test_ill_conditioned_float32_near_optimum(kappa):
    """Rank-64 aggregate, condition number up to 1e10, cut at rank 32, in float32.

    The product must be within 1e-6 of the float64 optimum (relative to ||M||): this is
    what the float64 default for the eigensolver buys (see recompress's docstring).
    """
    sv = torch.logspace(0, -float(torch.log10(torch.tensor(kappa))), 64, dtype=F64)
    B, A = spectrum_matrix(300, 200, sv, seed=3)
    B32, A32 = B.float(), A.float()
    res = fraq.recompress(B32, A32, rank=32)
    M = B32.double() @ A32.double()
    _, S, _ = dense_svd(M)
    excess = (fro(M - res.B.double() @ res.A.double()) - truncation_error(S, 32)) / fro(M)
    assert excess <= 1e-6


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")
def test_cuda_matches_float64_reference():
    B, A = _problem(64, 48, [8, 8, 8], batch=(3,), dtype=F32, seed=19)
    res = fraq.recompress(B.cuda(), A.cuda(), tau=0.9)
    assert res.B.device.type == "cuda" and res.rank.device.type == "cuda"
    cpu = fraq.recompress(B, A, tau=0.9)
    assert torch.equal(res.rank.cpu(), cpu.rank)
    M = B.double() @ A.double()
    got = res.B.cpu().double() @ res.A.cpu().double()
    _, S, _ = dense_svd(M)
    err = fro(M - got)
    assert (err <= truncation_error(S, cpu.rank) + EXCESS_FACTOR * eps(F32) * 24**0.5 * fro(M)).all()


def _cuda_routes() -> list[str]:
    from fraq._eigen import check_eigensolver

    out = []
    for route in ("device", "host", "cupy"):
        try:
            check_eigensolver(route, torch.device("cuda"))
        except ValueError:
            continue
        out.append(route)
    return out


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none on this machine)")
@pytest.mark.parametrize("r", [24, 80, 232])
def test_every_cuda_eigensolver_route_matches_float64_reference(r):
    """Each route this device offers (torch on the device, LAPACK on the host, CuPy's batched
    solver): the ranks of the CPU run and the error within the float32 bound of the
    Eckart-Young optimum, at stacked ranks that take cuSOLVER's Jacobi and syevd paths."""
    B, A = _problem(256, 320, [r // 4] * 4, batch=(5,), dtype=F32, seed=23)
    cpu = fraq.recompress(B, A, tau=0.9)
    M = B.double() @ A.double()
    _, S, _ = dense_svd(M)
    bound = truncation_error(S, cpu.rank) + EXCESS_FACTOR * eps(F32) * r**0.5 * fro(M)
    for route in _cuda_routes():
        res = fraq.recompress(B.cuda(), A.cuda(), tau=0.9, eigensolver=route)
        assert torch.equal(res.rank.cpu(), cpu.rank), route
        got = res.B.cpu().double() @ res.A.cpu().double()
        assert (fro(M - got) <= bound).all(), route


@pytest.mark.parametrize("m,n,ranks", SHAPES)
def test_factored_gram_gives_the_optimum(m, n, ranks):
    """gram="factored" (H never formed) on inputs without cancellation between clients."""
    for dtype in (F32, F64):
        B, A = _problem(m, n, ranks, dtype=dtype, seed=20)
        res = fraq.recompress(B, A, tau=0.9, gram="factored")
        ref = fraq.recompress(B, A, tau=0.9)
        assert res.rank == ref.rank
        _check_optimal(B, A, res, dtype)
        _check_orientation(res, m, n, dtype)
        big = fraq.recompress(B * 1e18 if dtype == F32 else B, A, rank=1, gram="factored")
        assert torch.isfinite(big.B).all() and torch.isfinite(big.A).all()


def test_two_threads_give_the_one_thread_result():
    """At 2 threads the batch's LAPACK calls (and a large batch's chunks) are shared by
    the threads, each call on one thread: the same ranks, and the same factors to
    rounding (MKL's syevd may round differently once the process allows more threads)."""
    B, A = _problem(40, 30, [4, 4, 4], batch=(5,), dtype=F32, seed=21)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        serial = fraq.recompress(B, A, tau=0.9)
        torch.set_num_threads(2)
        fanned = fraq.recompress(B, A, tau=0.9)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(serial.rank, fanned.rank)
    M = B.double() @ A.double()
    diff = fro(fanned.B.double() @ fanned.A.double() - serial.B.double() @ serial.A.double())
    assert (diff <= EXCESS_FACTOR * eps(F32) * 12**0.5 * fro(M)).all()
