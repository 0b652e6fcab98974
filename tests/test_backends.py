"""Basis backends: the properties each one promises, on the awkward inputs too.

Tolerances are eps of the dtype times a stated factor. A Householder-quality basis has
||Q^T Q - I||_F and ||X - Q C||_F / ||X||_F of a few tenths of r * eps in practice
(measured 0.2 r eps for d up to 8192); the bound used is ORTH_FACTOR * r * eps, which
leaves a wide margin for the Gram-based backends' extra GEMMs and stays far below any
real loss of orthogonality (Muon's quintic sits at 0.1 to 1).
"""

from functools import partial

import pytest
import torch
from conftest import eps
from hypothesis import given, settings
from hypothesis import strategies as st

import fraq
from fraq.backends import BACKENDS, EXACT_BACKENDS, get_backend
from fraq.backends.cholesky_qr import cholesky_qr2
from fraq._gram import coordinates, rows
from fraq.backends.newton_schulz import SCHEDULES, default_tol, newton_schulz
from fraq.diagnostics import basis_matrix
from fraq.flops import basis_flops, coordinate_flops, fraq_flops
from fraq.reference import optimal_error, relative_error
from fraq.synthetic import lora_clients, spectrum_matrix

F32, F64 = torch.float32, torch.float64
ORTH_FACTOR = 8
# Product error above the Eckart-Young optimum, in units of eps * sqrt(r) (as in
# test_recompress: QR, two GEMMs and the application of Q each add a few eps).
EXCESS_FACTOR = 64


def _fro(t):
    return torch.linalg.matrix_norm(t.double())


def _orth(Q):
    Q = Q.double()
    return _fro(Q.mT @ Q - torch.eye(Q.shape[-1], dtype=F64))


def _rel(num, X):
    return _fro(num) / _fro(X)


def _tall(batch, d, r, *, seed=0, dtype=F32, cond=None):
    """Random tall X; with ``cond`` its singular values are log-spaced from 1 to 1/cond."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(*batch, d, r, generator=g, dtype=F64)
    if cond is not None:
        U, _, Vh = torch.linalg.svd(X, full_matrices=False)
        s = torch.logspace(0, -torch.log10(torch.tensor(float(cond))).item(), r, dtype=F64)
        X = (U * s.unsqueeze(-2)) @ Vh
    return X.to(dtype)


def _check_exact_basis(X, basis, *, orthonormal=True):
    d, r = X.shape[-2:]
    s = min(d, r)
    assert basis.C.shape == (*X.shape[:-2], s, r)
    Q = basis_matrix(basis)
    assert Q.shape == (*X.shape[:-2], d, s)
    tol = ORTH_FACTOR * max(r, 1) * eps(X.dtype)
    if orthonormal:
        assert (_orth(Q) <= tol).all(), _orth(Q).max()
    Xd = X.double()
    assert (_rel(Xd - Q.double() @ basis.C.double(), Xd) <= tol).all()  # X = Q C
    Qd = Q.double()
    assert (_rel(Xd - Qd @ (Qd.mT @ Xd), Xd) <= tol).all()  # col(X) inside span(Q)


# ---------------------------------------------------------------- every exact backend


@pytest.mark.parametrize("name", EXACT_BACKENDS)
@pytest.mark.parametrize("batch", [(), (1,), (3,), (2, 3)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_exact_backend_properties(name, batch, dtype):
    X = _tall(batch, 96, 12, dtype=dtype)
    _check_exact_basis(X, get_backend(name)(X))


@pytest.mark.parametrize("name", EXACT_BACKENDS)
def test_batched_equals_looped(name):
    X = _tall((4,), 64, 10, seed=1)
    fn = get_backend(name)
    batched = basis_matrix(fn(X))
    looped = torch.stack([basis_matrix(fn(X[i])) for i in range(4)])
    # The same basis up to the sign/rotation freedom: compare projectors.
    P1 = batched.double() @ batched.double().mT
    P2 = looped.double() @ looped.double().mT
    assert (_fro(P1 - P2) <= ORTH_FACTOR * 10 * eps(F32)).all()


@pytest.mark.parametrize("name", EXACT_BACKENDS)
@pytest.mark.parametrize("scale", [1e-20, 1e20])
def test_badly_scaled_inputs(name, scale):
    """Gram-based backends would under/overflow float32 without their power-of-two scaling."""
    X = _tall((2,), 80, 8, seed=2) * scale
    assert torch.isfinite(X).all()
    _check_exact_basis(X, get_backend(name)(X))


@pytest.mark.parametrize("name", EXACT_BACKENDS)
def test_wide_and_square(name):
    """r >= d: the basis must span all of R^d."""
    for d, r in [(6, 10), (8, 8)]:
        X = _tall((2,), d, r, seed=3)
        _check_exact_basis(X, get_backend(name)(X))


@pytest.mark.parametrize("name", ["householder", "polar", "cholesky-qr2"])
def test_rank_deficient_orthonormal(name):
    """Duplicate clients: these backends still promise an orthonormal Q."""
    X = _tall((3,), 120, 6, seed=4)
    X = torch.cat([X, X, 2 * X[..., :2]], dim=-1)  # rank 6 of 14
    _check_exact_basis(X, get_backend(name)(X))


@pytest.mark.parametrize("name", ["newton-schulz", "newton-schulz-polar-express", "newton-schulz-lstsq"])
def test_rank_deficient_newton_schulz(name):
    """A polynomial iteration keeps zero singular values at zero: Q is a partial isometry.

    Exactness is what is promised: X = Q C, col(X) inside span(Q), and Q^T Q a projector
    (orthonormal on the directions that carry X).
    """
    X = _tall((3,), 120, 6, seed=4)
    X = torch.cat([X, X, 2 * X[..., :2]], dim=-1)
    basis = get_backend(name)(X)
    assert basis.info["converged"]
    _check_exact_basis(X, basis, orthonormal=False)
    Q = basis_matrix(basis).double()
    P = Q.mT @ Q
    assert (_fro(P @ P - P) <= ORTH_FACTOR * 14 * eps(F32)).all()


@pytest.mark.parametrize("batch, d, r", [((2, 3), 4, 6), ((), 5, 5), ((0,), 6, 3), ((2,), 6, 0)])
def test_newton_schulz_without_an_iteration_records_its_settings(batch, d, r):
    """A wide X (the identity basis) and an empty one (no matrix, or no column) run no step:
    the basis has the caller's batch shape and records the schedule and coordinates asked
    for, zero steps, a zero residual, converged and no fallback."""
    X = torch.randn(*batch, d, r, generator=torch.Generator().manual_seed(5))
    basis = newton_schulz(X, schedule="cubic", coords="lstsq")
    wide = {"basis": "identity"} if r >= d else {}
    assert basis.info == {"backend": "newton-schulz", "schedule": "cubic", "coords": "lstsq", "steps": 0,
                          "residual": 0.0, "converged": True, "fallback": None, "fallback_count": 0, **wide}
    assert basis.C.shape == (*batch, min(d, r), r)
    if wide:  # Q = I_d, C = X
        assert torch.equal(basis.C, X) and torch.equal(basis_matrix(basis), torch.eye(d).expand(*batch, d, d))


def test_zero_input():
    X = torch.zeros(2, 30, 4)
    for name in EXACT_BACKENDS:
        basis = get_backend(name)(X)
        assert (basis.C == 0).all(), name
        assert torch.isfinite(basis_matrix(basis)).all(), name


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_non_finite_propagates_and_recompress_names_it(name):
    X = _tall((2,), 40, 5)
    X[1, 3, 2] = float("nan")
    basis = get_backend(name)(X)  # no LAPACK error
    assert not torch.isfinite(basis.C[1]).all()
    B, A = _tall((), 40, 5), _tall((), 5, 60)
    B[7, 1] = float("inf")
    with pytest.raises(ValueError, match="B"):
        fraq.recompress(B, A, tau=0.9, backend=name)


@settings(max_examples=25, deadline=None)
@given(d=st.integers(1, 40), r=st.integers(1, 12), nb=st.integers(1, 3), seed=st.integers(0, 2**16),
       name=st.sampled_from(EXACT_BACKENDS))
def test_exact_backends_any_shape(d, r, nb, seed, name):
    X = _tall((nb,), d, r, seed=seed, dtype=F64)
    _check_exact_basis(X, get_backend(name)(X))


# ---------------------------------------------------------------- through recompress


def _stack(m, n, ranks, *, batch=(2,), seed=0, dtype=F32, duplicate=False):
    Bs, As = lora_clients(m, n, ranks, batch=batch, seed=seed, dtype=dtype)
    if duplicate:
        Bs, As = Bs + Bs, As + As
    return fraq.stack(Bs, As, scales=[2.0] * len(Bs))


@pytest.mark.parametrize("name", EXACT_BACKENDS)
@pytest.mark.parametrize("mn", [(96, 160), (160, 96)])
@pytest.mark.parametrize("duplicate", [False, True])
def test_recompress_is_optimal(name, mn, duplicate):
    """Every exact backend reaches the Eckart-Young optimum and Householder's rank."""
    B, A = _stack(*mn, (4, 4, 6), duplicate=duplicate)
    ref = fraq.recompress(B, A, tau=0.9)
    res = fraq.recompress(B, A, tau=0.9, backend=name)
    assert torch.equal(res.rank, ref.rank)
    r = B.shape[-1]
    tol = EXCESS_FACTOR * eps(F32) * r**0.5
    gap = relative_error(B, A, res.B, res.A) - optimal_error(B, A, res.rank)
    assert (gap <= tol).all(), gap
    assert (relative_error(ref.B, ref.A, res.B, res.A) <= tol).all()


@pytest.mark.parametrize("name", EXACT_BACKENDS)
def test_recompress_ill_conditioned_float32(name):
    """The paper's Fig. 4 right, one point: rank-64 aggregate, cond 1e8, float32, full rank."""
    sv = torch.logspace(0, -8, 24, dtype=F64)
    B, A = spectrum_matrix(160, 200, sv)
    Om, _ = torch.linalg.qr(torch.randn(24, 24, generator=torch.Generator().manual_seed(5), dtype=F64))
    B, A = (B @ Om).float(), (Om.mT @ A).float()  # ill-conditioning not aligned with the columns
    res = fraq.recompress(B, A, rank=24, backend=name)
    assert (relative_error(B, A, res.B, res.A) <= EXCESS_FACTOR * eps(F32) * 24**0.5).all()


# ---------------------------------------------------------------- Cholesky-QR2 fallback


def test_cholesky_qr2_no_fallback_on_lora_stacks():
    B, _ = _stack(128, 200, (8, 8, 8, 8), batch=(3,))
    info = cholesky_qr2(B).info
    assert info["fallback"] is None and info["fallback_count"] == 0


def test_cholesky_qr2_falls_back_only_where_needed():
    X = _tall((4,), 100, 8, seed=6)
    X[1] = torch.cat([X[1, :, :4], X[1, :, :4]], dim=-1)  # rank-deficient
    X[3] = _tall((), 100, 8, seed=7, cond=1e6)  # kappa^2 eps >> 1 in float32
    basis = cholesky_qr2(X)
    assert basis.info["fallback"] == "householder"
    assert basis.info["fallback_count"] == 2
    _check_exact_basis(X, basis)  # the mixed apply is right for both kinds


def test_cholesky_qr2_column_scaling_needs_no_fallback():
    """Ill-conditioning that is only column scaling does not hurt Cholesky QR."""
    Q, _ = torch.linalg.qr(torch.randn(100, 8, dtype=F64))
    X = (Q * torch.logspace(0, -8, 8, dtype=F64)).float()
    basis = cholesky_qr2(X)
    assert basis.info["fallback"] is None
    _check_exact_basis(X, basis)


def test_recompress_records_fallback():
    B, A = _stack(96, 160, (4, 4), duplicate=True)
    res = fraq.recompress(B, A, tau=1.0, backend="cholesky-qr2")
    assert res.info["fallback"] == "householder"


# ---------------------------------------------------------------- Newton-Schulz


def test_muon_quintic_stays_away_from_orthonormality():
    """1 is not a fixed point of 3.4445 s - 4.7750 s^3 + 2.0315 s^5: no step count helps."""
    X = _tall((), 200, 16, seed=8)
    for steps in (5, 20, 60):
        Q = basis_matrix(newton_schulz(X, schedule="muon", steps=steps, coords="direct"))
        sv = torch.linalg.svdvals(Q.double())
        assert sv.min() > 0.6 and sv.max() < 1.2  # the documented band
        assert _orth(Q) > 0.1  # far from orthonormal, at every step count


@pytest.mark.parametrize("schedule", ["cubic", "polar-express"])
def test_convergent_schedules_reach_tolerance(schedule):
    X = _tall((2,), 200, 16, seed=8, cond=1e3)
    basis = newton_schulz(X, schedule=schedule, coords="direct")
    assert basis.info["converged"] and basis.info["residual"] <= default_tol(16, F32)
    assert (_orth(basis_matrix(basis)) <= ORTH_FACTOR * 16 * eps(F32)).all()


def test_polar_express_needs_fewer_steps_than_cubic():
    X = _tall((), 200, 16, seed=9, cond=1e3)
    pe = newton_schulz(X, schedule="polar-express").info["steps"]
    cubic = newton_schulz(X, schedule="cubic").info["steps"]
    assert pe < cubic


def test_coordinate_modes_after_few_steps():
    """Appendix D: with an unconverged iterate, direct coordinates are inexact, least
    squares reconstruct X but keep the wrong metric, the Cholesky correction is exact."""
    X = _tall((), 200, 12, seed=10, cond=10)
    tol = ORTH_FACTOR * 12 * eps(F32)
    direct = newton_schulz(X, schedule="cubic", steps=2, coords="direct")
    lstsq = newton_schulz(X, schedule="cubic", steps=2, coords="lstsq")
    chol = newton_schulz(X, schedule="cubic", steps=2, coords="cholesky")
    Xd = X.double()
    rec = {k: _rel(Xd - basis_matrix(b).double() @ b.C.double(), Xd)
           for k, b in (("direct", direct), ("lstsq", lstsq), ("chol", chol))}
    assert rec["direct"] > 1e-2
    assert rec["lstsq"] <= tol and rec["chol"] <= tol
    assert _orth(basis_matrix(lstsq)) > 1e-2
    assert _orth(basis_matrix(chol)) <= tol


@pytest.mark.parametrize("kwargs, err", [
    (dict(schedule="newton"), ValueError),
    (dict(coords="qr"), ValueError),
    (dict(steps=3, tol=1e-6), ValueError),
    (dict(steps=-1), ValueError),
    (dict(steps=2.5), TypeError),
    (dict(tol=0.0), ValueError),
    (dict(tol=float("nan")), ValueError),
    (dict(max_steps=0), ValueError),
])
def test_newton_schulz_validation(kwargs, err):
    with pytest.raises(err, match=next(iter(kwargs))):
        newton_schulz(torch.randn(10, 3), **kwargs)


@pytest.mark.parametrize("name", sorted(set(BACKENDS) - {"householder"}))
def test_backends_validate_input(name):
    with pytest.raises(TypeError, match="X"):
        get_backend(name)(torch.ones(4, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match="X"):
        get_backend(name)(torch.ones(4))


def test_schedules_documented_constants():
    pe = SCHEDULES["polar-express"]
    assert pe.step(100) == (1.875, -1.25, 0.375)  # the quintic Pade step repeats
    a, b, c = SCHEDULES["muon"].step(0)
    assert abs(a + b + c - 0.701) < 1e-12  # p(1) != 1
    a, b, c = SCHEDULES["cubic"].step(0)
    assert a + b + c == 1.0


# ---------------------------------------------------------------- factored Gram


def test_both_gram_forms_match_the_float64_products():
    g = torch.Generator().manual_seed(11)
    C = torch.randn(3, 8, 8, generator=g, dtype=F64)
    Y = torch.randn(3, 8, 50, generator=g, dtype=F64)
    H = C @ Y
    U, _ = torch.linalg.qr(torch.randn(3, 8, 5, generator=g, dtype=F64))
    tol = 16 * eps(F64) * (_fro(C) * _fro(Y)).max() ** 2
    factored = coordinates(C, Y, factored=True)
    G = factored.G.tril() + factored.G.tril(-1).mT  # its lower triangle is authoritative
    assert (_fro(G - H @ H.mT) <= tol).all()
    assert (_fro(factored.WY - Y @ Y.mT) <= tol).all()
    assert (_fro(rows(factored, U, C, Y) - U.mT @ H) <= 16 * eps(F64) * (_fro(C) * _fro(Y)).max()).all()
    product = coordinates(C, Y, factored=False)
    assert (_fro(product.Ht.mT - H) <= 16 * eps(F64) * (_fro(C) * _fro(Y)).max()).all()
    assert (_fro(rows(product, U, C, Y) - U.mT @ H) <= 16 * eps(F64) * (_fro(C) * _fro(Y)).max()).all()


# ---------------------------------------------------------------- FLOP model


def test_flops_reproduce_the_paper():
    d, D, r, p = 768, 3072, 64, 20
    lower = -2 * r**3 / 3 + 14 * r**3 / 3 + 4 * d * r * p - 2 * r * r * p + 2 * D * r * p
    assert fraq_flops(d, D, r, p, gram="syrk") == pytest.approx((2 * d + 3 * D) * r * r + lower)
    assert fraq_flops(d, D, r, p) == pytest.approx((2 * d + 4 * D) * r * r + lower)  # GEMM Gram


def test_factored_flops_are_fewer():
    d, D, r, p = 3072, 8192, 64, 32
    paper = fraq_flops(d, D, r, p, gram="syrk")
    assert fraq_flops(d, D, r, p, gram="syrk", factored=True) < paper
    assert fraq_flops(d, D, r, p, "cholesky-qr2", gram="syrk", factored=True) < paper
    # leading D-coefficient drops from 3 r^2 to r^2
    delta = coordinate_flops(d, 2 * D, r, p, gram="syrk", factored=True) - coordinate_flops(d, D, r, p, gram="syrk",
                                                                                          factored=True)
    assert delta == pytest.approx(D * r * r + 2 * p * r * D)


def test_flops_validation():
    with pytest.raises(ValueError, match="steps"):
        basis_flops(100, 10, 5, "newton-schulz")
    assert basis_flops(100, 10, 5, "newton-schulz-muon") == basis_flops(100, 10, 5, "newton-schulz-direct", steps=5)
    with pytest.raises(ValueError, match="backend"):
        fraq_flops(10, 20, 4, 2, "qr")
    with pytest.raises(ValueError, match="d"):
        fraq_flops(30, 20, 4, 2)
    with pytest.raises(ValueError, match="p"):
        fraq_flops(10, 20, 4, 5)
    with pytest.raises(TypeError, match="r"):
        fraq_flops(10, 20, 4.0, 2)


def test_newton_schulz_flops_grow_with_steps():
    f = partial(basis_flops, 1024, 64, 32, "newton-schulz")
    assert f(steps=10) - f(steps=9) == pytest.approx(4 * 1024 * 64**2 + 2 * 64**3)


# ---------------------------------------------------------------- the benchmark command's pieces


def test_benchmark_case_rows():
    """benchmarks.experiments.backends on a tiny case: one row per backend, Householder the baseline."""
    from benchmarks.experiments.backends import Case, run_case, summary

    B, A = _stack(48, 64, (4, 4), batch=(2,))
    case = Case("lora", "tiny", [(B, A)], 0.9, None)
    cfg = dict(repeats=1, diag_matrices=1, threads=(1,))
    names = ["householder", "cholesky-qr2", "newton-schulz-muon"]
    threads = torch.get_num_threads()
    try:
        rows = run_case(case, names, cfg)
    finally:
        torch.set_num_threads(threads)
    by = {r["backend"]: r for r in rows}
    assert set(by) == set(names)
    assert by["householder"]["speedup_1t"] == 1.0 and by["householder"]["gap_to_householder"] <= 16 * eps(F64)
    assert by["cholesky-qr2"]["gap_to_optimum"] <= EXCESS_FACTOR * eps(F32) * 8**0.5
    assert by["newton-schulz-muon"]["gap_to_optimum"] > 1e-2 and not by["newton-schulz-muon"]["exact"]
    assert all(r["ms_1t"] > 0 and r["gflop"] > 0 for r in rows)
    lines = summary([dict(r, section="condition") for r in rows])
    assert lines[0].startswith("worst exact-backend error") and "met" in lines[0]


def test_auto_resolves_per_device_and_float64_data_to_householder():
    from fraq.backends import resolve_backend

    assert resolve_backend("auto", "cpu") == "householder"
    assert resolve_backend("auto", "cuda") == "cholesky"  # measured on an H100 (fraq._defaults)
    assert resolve_backend("auto", "cuda", torch.float32) == "cholesky"
    for device in ("cpu", "cuda"):  # cholesky has no wider dtype for a float64 Gram
        assert resolve_backend("auto", device, torch.float64) == "householder"
    assert resolve_backend("cholesky", "cpu", torch.float64) == "cholesky"  # a name is kept as given
    with pytest.raises(ValueError, match=r"backend\(='qr'\)"):
        resolve_backend("qr", "cpu")
