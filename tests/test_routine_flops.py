"""fraq._routine_flops against counts derived without it, and against the machine.

**Independent counts.** LAWN 41's full polynomials (multiplications plus additions, as
MAGMA's ``testing/flops.h`` writes them) are transcribed here; the model must equal their
cubic part, so the difference is at most their quadratic and linear terms (bounded below
by hand: a few times n^2). The drivers (syevd, gesdd) are summed here from those
polynomials along the paths of LAPACK's ``dsyevd.f`` and ``dgesdd.f``, and the divide and
conquer's nominal count is checked against its recursion run to the leaves.

**Rates.** No routine can run faster than the GEMM of its own precision on the same core:
the reductions (``sytrd``, ``gebrd``) are half matrix-vector products. Each routine's
credited rate (model FLOPs over its best time) must stay below the best GEMM rate measured
in the same process.
"""

from __future__ import annotations

import time

import pytest
import torch

from fraq._routine_flops import (SVD_QR_FIRST, bdsdc_flops, cholesky_flops, eigh_flops, gebrd_flops, gemm_flops,
                                 gesdd_parts, gram_flops, orgqr_flops, qr_flops, reflector_flops, stedc_flops,
                                 svd_flops, syevd_parts, sytrd_flops, trsm_flops)

# ------------------------------------------------------------------ LAWN 41, transcribed (real types)


def lawn_geqrf(m, n):
    if m > n:
        muls = n * (n * (0.5 - n / 3 + m) + m + 23 / 6)
        adds = n * (n * (0.5 - n / 3 + m) + 5 / 6)
    else:
        muls = m * (m * (-0.5 - m / 3 + n) + 2 * n + 23 / 6)
        adds = m * (m * (-0.5 - m / 3 + n) + n + 5 / 6)
    return muls + adds


def lawn_orgqr(m, n, k):
    muls = k * (2 * m * n + 2 * n - 5 / 3 + k * (2 / 3 * k - (m + n) - 1))
    adds = k * (2 * m * n + n - m + 1 / 3 + k * (2 / 3 * k - (m + n)))
    return muls + adds


def lawn_ormqr_left(m, n, k):
    return n * k * (2 * m - k + 2) + n * k * (2 * m - k + 1)


def lawn_potrf(n):
    return n * ((n / 6 + 0.5) * n + 1 / 3) + n * ((n / 6) * n - 1 / 6)


def lawn_trsm_left(m, n):
    return 0.5 * n * m * (m + 1) + 0.5 * n * m * (m - 1)


def lawn_syrk(k, n):
    return 2 * 0.5 * k * n * (n + 1)


def lawn_sytrd(n):
    return (n * (n * (2 / 3 * n + 2.5) - 1 / 6) - 15) + (n * (n * (2 / 3 * n + 1) - 8 / 3) - 4)


def lawn_gebrd(m, n):
    assert m >= n
    return n * (n * (2 * m - 2 / 3 * n + 2) + 20 / 3) + n * (n * (2 * m - 2 / 3 * n + 1) - m + 5 / 3)


SIZES = [(40, 40), (120, 40), (300, 64), (64, 64), (500, 7)]


def _close(model, lawn, *dims, routines=1):
    """The cubic part agrees: the rest of each LAWN 41 polynomial here is at most 4ab + 50 for
    a >= b the largest and smallest dimension (``sytrd``'s 3.5 n^2, ``orgqr``'s 2km + 3kn, ...),
    bounded by that per routine summed."""
    a, b = max(dims), min(dims)
    assert abs(model - lawn) <= routines * (4 * a * b + 50), (model, lawn, dims)


@pytest.mark.parametrize("m,n", SIZES)
def test_lapack_routines_are_lawn41s_cubic_terms(m, n):
    k = min(m, n)
    _close(qr_flops(m, n), lawn_geqrf(m, n), m, n)
    _close(qr_flops(n, m), lawn_geqrf(n, m), m, n)
    _close(orgqr_flops(m, k, k), lawn_orgqr(m, k, k), m, n)
    _close(orgqr_flops(m, m, k), lawn_orgqr(m, m, k), m, n)
    _close(reflector_flops(m, n, k), lawn_ormqr_left(m, n, k), m, n)
    _close(cholesky_flops(n), lawn_potrf(n), n)
    _close(trsm_flops(n, m), lawn_trsm_left(n, m), m, n)
    _close(gram_flops(m, n, "syrk"), lawn_syrk(m, n), m, n)
    assert gram_flops(m, n, "gemm") == gemm_flops(n, m, n) == 2 * m * n * n
    _close(sytrd_flops(n), lawn_sytrd(n), n)
    _close(gebrd_flops(m, n), lawn_gebrd(max(m, n), min(m, n)), m, n)


def test_relative_gap_to_lawn41_shrinks_as_1_over_n():
    for n in (64, 256, 1024):
        assert abs(qr_flops(n, n) / lawn_geqrf(n, n) - 1) < 3 / n
        assert abs(qr_flops(8 * n, n) / lawn_geqrf(8 * n, n) - 1) < 3 / n
        assert abs(sytrd_flops(n) / lawn_sytrd(n) - 1) < 4 / n
        assert abs(gebrd_flops(2 * n, n) / lawn_gebrd(2 * n, n) - 1) < 3 / n


# ------------------------------------------------------------------ divide and conquer, nominal


def _dc_merges(n, leaf=1):
    """The merges' GEMM FLOPs of divide and conquer on n, run to leaves of size <= leaf,
    no deflation: each merge of n1 + n2 multiplies Q1 (n1 x n1) and Q2 (n2 x n2) by the
    n1 x n and n2 x n blocks of the merged eigenvector matrix."""
    if n <= leaf:
        return 0.0
    n1 = n // 2
    n2 = n - n1
    return _dc_merges(n1, leaf) + _dc_merges(n2, leaf) + 2 * n1 * n1 * n + 2 * n2 * n2 * n


@pytest.mark.parametrize("n", [64, 512, 1000])
def test_divide_and_conquer_is_its_recursion(n):
    # n = 2^k: the recursion is 4n^3/3 (1 - 4^-k), within 4^-6 relative from n = 64 on; uneven
    # halves (n = 1000) add 2 n^2 per level at most
    assert stedc_flops(n) == pytest.approx(_dc_merges(n), rel=1e-3)
    assert bdsdc_flops(n) == pytest.approx(2 * _dc_merges(n), rel=1e-3)  # U and V
    assert _dc_merges(n, leaf=25) < _dc_merges(n)  # LAPACK's 25 x 25 leaves only lower the merges' work
    assert [p.nominal for p in syevd_parts(n)] == [False, True, False]
    assert [p.routine for p in gesdd_parts(n, n) if p.nominal] == ["bdsdc"]


# ------------------------------------------------------------------ the drivers, along LAPACK's paths


@pytest.mark.parametrize("n", [10, 64, 301])
def test_syevd_is_sytrd_stedc_ormtr(n):
    lawn = lawn_sytrd(n) + lawn_ormqr_left(n, n, n - 1)  # ormtr applies the n - 1 reflectors
    _close(eigh_flops(n) - stedc_flops(n), lawn, n, routines=2)
    _close(eigh_flops(n, vectors=False), lawn_sytrd(n), n)
    assert eigh_flops(n) == pytest.approx(14 * n**3 / 3)


@pytest.mark.parametrize("a,b", [(64, 64), (100, 64), (117, 64), (118, 64), (400, 64), (2000, 8)])
def test_gesdd_follows_dgesdd_paths(a, b):
    qr_first = 6 * a >= 11 * b
    assert qr_first == (a >= SVD_QR_FIRST * b)
    if qr_first:  # paths 1, 3, 4 of dgesdd.f
        values = lawn_geqrf(a, b) + lawn_gebrd(b, b)
        common = lawn_geqrf(a, b) + lawn_gebrd(b, b) + 2 * lawn_ormqr_left(b, b, b) + 2 * a * b * b
        thin = common + lawn_orgqr(a, b, b)
        full = common + lawn_orgqr(a, a, b)
    else:  # path 5
        values = lawn_gebrd(a, b)
        thin = lawn_gebrd(a, b) + lawn_ormqr_left(a, b, b) + lawn_ormqr_left(b, b, b)
        full = lawn_gebrd(a, b) + lawn_ormqr_left(a, a, b) + lawn_ormqr_left(b, b, b)
    dc = bdsdc_flops(b)
    for m, n in ((a, b), (b, a)):  # a wide matrix takes the mirror (LQ) path
        _close(svd_flops(m, n, compute_uv=False), values, a, b, routines=2)
        _close(svd_flops(m, n) - dc, thin, a, b, routines=6)
        _close(svd_flops(m, n, full_matrices=True) - dc, full, a, b, routines=6)
    # the closed forms of the docstring
    if qr_first:
        assert svd_flops(a, b) == pytest.approx(6 * a * b * b + 8 * b**3)
        assert svd_flops(a, b, full_matrices=True) == pytest.approx(4 * a * a * b + 10 * b**3)
    else:
        assert svd_flops(a, b) == pytest.approx(8 * a * b * b + 4 * b**3 / 3)
        assert svd_flops(a, b, full_matrices=True) == pytest.approx(4 * a * a * b + 2 * a * b * b + 10 * b**3 / 3)


# ------------------------------------------------------------------ credited rates below the GEMM rate


def _best(fn, repeats):
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _gemm_rate(dtype, sizes, repeats):
    g = torch.Generator().manual_seed(1)
    rate = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, generator=g, dtype=dtype), torch.randn(n, n, generator=g, dtype=dtype)
        rate = max(rate, gemm_flops(n, n, n) / _best(lambda: torch.matmul(a, b), repeats))
    return rate


def _routines(n, dtype):
    g = torch.Generator().manual_seed(0)
    A = torch.randn(n, n, generator=g, dtype=dtype)
    T = torch.randn(3 * n, n // 2, generator=g, dtype=dtype)
    S = A @ A.mT + n * torch.eye(n, dtype=dtype)
    L = torch.linalg.cholesky(S)
    refl, tau = torch.geqrf(T)
    C = torch.randn(3 * n, n // 2, generator=g, dtype=dtype)
    return {
        "geqrf": (lambda: torch.geqrf(T), qr_flops(3 * n, n // 2)),
        "ormqr": (lambda: torch.ormqr(refl, tau, C), reflector_flops(3 * n, n // 2, n // 2)),
        "orgqr": (lambda: torch.linalg.householder_product(refl, tau), orgqr_flops(3 * n, n // 2, n // 2)),
        "potrf": (lambda: torch.linalg.cholesky(S), cholesky_flops(n)),
        "trsm": (lambda: torch.linalg.solve_triangular(L, A, upper=False), trsm_flops(n, n)),
        "syevd": (lambda: torch.linalg.eigh(S), eigh_flops(n)),
        "syevd (values)": (lambda: torch.linalg.eigvalsh(S), eigh_flops(n, vectors=False)),
        "gesdd": (lambda: torch.linalg.svd(A, full_matrices=False), svd_flops(n, n)),
        "gesdd (tall)": (lambda: torch.linalg.svd(T, full_matrices=False), svd_flops(3 * n, n // 2)),
        "gesdd (values)": (lambda: torch.linalg.svdvals(A), svd_flops(n, n, compute_uv=False)),
    }


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_credited_rates_stay_below_the_gemm_rate(dtype):
    """At 1 thread, sizes 128 to 768: every routine's model FLOPs over its best of 3 times is
    below the best GEMM rate of the same dtype (best of 5, sizes 256 to 1024), measured before
    and after the routines in the same process, so a load that slows the GEMM once cannot
    lower the bound. Best-of-N times are what a loaded machine changes least, and load only
    slows the routines (lowers their credited rates), so the check errs toward passing
    under load: it fails when a count credits more work than the routine did."""
    from benchmarks.measure.timing import threads

    with threads(1):
        gemm = _gemm_rate(dtype, (256, 512, 768, 1024), 5)
        rates = {}
        for n in (128, 384, 768):
            for name, (fn, flops) in _routines(n, dtype).items():
                rates[f"{name} n={n}"] = flops / _best(fn, 3)
        gemm = max(gemm, _gemm_rate(dtype, (512, 768, 1024), 5))
    over = {k: round(v / gemm, 2) for k, v in rates.items() if v >= gemm}
    assert not over, f"credited rate at or above the GEMM rate ({gemm / 1e9:.1f} GFLOP/s): {over}"
