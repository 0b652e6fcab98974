"""fraq.recompress at the ends of the dtype's range, on empty problems, and its host syncs.

The README promises: factors with any finite entries (subnormal numbers included) whose
aggregate's largest singular value sigma_1 lies in [tiny, max / 2] of the result's dtype
give a result as accurate as at unit scale; outside that range a ValueError. Inputs are
built as unit-scale factors times exact powers of two, and results are checked after
scaling back (exactly) against the float64 reference of :mod:`fraq.reference` (QR of
both factors and an SVD of the core: a different algorithm).
"""

import math

import pytest
import torch
from conftest import eps

import fraq
from fraq.backends import EXACT_BACKENDS
from fraq.reference import optimal_error, reference_svd, relative_error
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64
# Error above the Eckart-Young optimum, in units of eps * sqrt(r) (as in test_recompress).
EXCESS_FACTOR = 64
# Energy rule checked against the float64 spectrum: the computed energies are exact up to
# the Gram's rounding, a few r * eps of the total.
ENERGY_FACTOR = 64
METHODS = [(b, g) for b in EXACT_BACKENDS for g in ("product", "factored", "auto")]
TAU = 0.9


def _mul_pow2(t, k):
    """t * 2^k exactly in float64 (two steps, so |k| up to 2000 stays representable)."""
    k1 = k // 2
    return t.double() * math.ldexp(1.0, k1) * math.ldexp(1.0, k - k1)


def _unit_problem(m, n, seed=0):
    """float64 stacked factors with max|B| and max|A| in [0.5, 1), and log2 sigma_1."""
    Bs, As = lora_clients(m, n, [4, 4, 4], seed=seed, dtype=F64)
    B, A = fraq.stack(Bs, As)
    B = _mul_pow2(B, -int(torch.frexp(B.abs().max()).exponent))
    A = _mul_pow2(A, -int(torch.frexp(A.abs().max()).exponent))
    return B, A, math.log2(float(reference_svd(B, A)[1][0]))


def _scaled(B, A, kb, ka, dtype):
    """The factors times 2^kb, 2^ka, rounded to ``dtype`` (subnormal entries lose bits)."""
    return _mul_pow2(B, kb).to(dtype), _mul_pow2(A, ka).to(dtype)


def _check_accurate(Bd, Ad, res, k, dtype):
    """Unscaled by 2^-k, the result is near-optimal for the unscaled (exact) inputs."""
    kb = int(torch.frexp(Bd.double().abs().max()).exponent)
    B1, A1 = _mul_pow2(Bd, -kb), _mul_pow2(Ad, kb - k)  # B1 A1 = 2^-k B A, exactly
    assert torch.isfinite(res.B).all() and torch.isfinite(res.A).all()
    Bg, Ag = (res.B.double(), _mul_pow2(res.A, -k)) if not res.transposed else (_mul_pow2(res.B, -k), res.A.double())
    Q = Bg if not res.transposed else Ag.mT
    p = res.rank
    assert (Q.mT @ Q - torch.eye(p, dtype=F64)).abs().max() <= 16 * eps(dtype) * max(Q.shape) ** 0.5
    r = Bd.shape[-1]
    err, opt = relative_error(B1, A1, Bg, Ag), optimal_error(B1, A1, p)
    assert err <= opt + EXCESS_FACTOR * eps(dtype) * r**0.5, (float(err), float(opt))
    S = reference_svd(B1, A1)[1]
    e2 = S.square()
    kept, total = float(e2[:p].sum()), float(e2.sum())
    slack = ENERGY_FACTOR * r * eps(dtype) * total
    assert kept >= TAU * total - slack  # enough energy...
    assert float(e2[: p - 1].sum()) < TAU * total + slack  # ...and the smallest such rank
    sv = _mul_pow2(res.singular_values[:p], -k)
    assert (sv - S[:p]).abs().max() <= ENERGY_FACTOR * r * eps(dtype) * float(S[0])


def _targets(dtype, l2s):
    """Exponents k putting sigma_1 = 2^(l2s + k) two binades inside each end of the range."""
    fi = torch.finfo(dtype)
    low = math.ceil(math.log2(fi.tiny) - l2s) + 2
    high = math.floor(math.log2(fi.max) - 1 - l2s) - 2
    return {"low": low, "high": high}


@pytest.mark.parametrize("backend,gram", METHODS)
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("end", ["low", "high"])
@pytest.mark.parametrize("split", ["B", "A", "both"])
@pytest.mark.parametrize("m,n", [(40, 24), (24, 40)])
def test_both_ends_of_the_promised_range(backend, gram, dtype, end, split, m, n):
    """sigma_1 near tiny or near max / 2, the scale on B, on A or shared: as accurate as unit scale.

    At the low end with the scale on one factor, that factor's entries are mostly
    subnormal; at the high end, near the largest finite number.
    """
    B, A, l2s = _unit_problem(m, n, seed=3)
    k = _targets(dtype, l2s)[end]
    kb = {"B": k, "A": 0, "both": k // 2}[split]
    Bd, Ad = _scaled(B, A, kb, k - kb, dtype)
    assert torch.isfinite(Bd).all() and torch.isfinite(Ad).all()
    res = fraq.recompress(Bd, Ad, tau=TAU, backend=backend, gram=gram)
    _check_accurate(Bd, Ad, res, k, dtype)


@pytest.mark.parametrize("backend,gram", METHODS)
@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("end", ["low", "high"])
def test_just_outside_the_range_is_refused(backend, gram, dtype, end):
    """Never a silent rank 0, subnormal A or inf: a ValueError with sigma_1 and the factors."""
    B, A, l2s = _unit_problem(24, 40, seed=4)
    k = _targets(dtype, l2s)[end] + (-4 if end == "low" else 4)
    Bd, Ad = _scaled(B, A, k // 2, k - k // 2, dtype)
    assert torch.isfinite(Bd).all() and torch.isfinite(Ad).all()
    with pytest.raises(ValueError, match=r"B @ A has largest singular value .*max\|B\|=.*max\|A\|="):
        fraq.recompress(Bd, Ad, tau=TAU, backend=backend, gram=gram)


def test_named_case_float64_1e_160_refused_with_a_clear_error():
    """The aggregate, ~1e-321, is subnormal in float64: a ValueError with the value, never a LinAlgError from eigh."""
    B, A, _ = _unit_problem(30, 20, seed=5)
    with pytest.raises(ValueError, match=r"largest singular value \d\.\d\de-3\d\d.*underflow"):
        fraq.recompress(B * 1e-160, A * 1e-160, tau=TAU)


@pytest.mark.parametrize("backend,gram", METHODS)
def test_named_case_float32_both_about_1e_minus_20(backend, gram):
    """Both factors ~1e-20 in float32 with a representable (coherent) aggregate, sigma_1 ~ 2^-122:
    the scale 2^(-e) with e ~ -130 must not be computed in float32 (it is inf there, and eigh fails)."""
    g = torch.Generator().manual_seed(13)
    B = (1 + 0.1 * torch.randn(256, 16, generator=g, dtype=F64)) / 2
    A = (1 + 0.1 * torch.randn(16, 200, generator=g, dtype=F64)) / 2
    Bd, Ad = _scaled(B, A, -66, -66, F32)
    assert 1e-21 < Bd.abs().max() < 1e-20 and 1e-21 < Ad.abs().max() < 1e-20
    _check_accurate(Bd, Ad, fraq.recompress(Bd, Ad, tau=TAU, backend=backend, gram=gram), -132, F32)


@pytest.mark.parametrize("m,n", [(40, 24), (24, 40)])
def test_named_case_factored_gram_larger_factor_tiny(m, n):
    """gram="factored" with the larger factor ~1e-24 in float32 gave rank 0 and error 1."""
    B, A, _ = _unit_problem(m, n, seed=7)
    kb, ka = (-80, 0) if m > n else (0, -80)
    Bd, Ad = _scaled(B, A, kb, ka, F32)
    _check_accurate(Bd, Ad, fraq.recompress(Bd, Ad, tau=TAU, gram="factored"), -80, F32)


@pytest.mark.parametrize("backend", EXACT_BACKENDS)
@pytest.mark.parametrize("dtype", [F32, F64])
def test_named_case_fully_subnormal_factor(backend, dtype):
    """Every entry of B subnormal (max|B| < tiny), A large: the aggregate is well inside the range."""
    B, A, _ = _unit_problem(40, 24, seed=8)
    fi = torch.finfo(dtype)
    kb = math.floor(math.log2(fi.tiny)) - 6
    Bd, Ad = _scaled(B, A, kb, 60, dtype)
    assert Bd.abs().max() < fi.tiny and (Bd != 0).any()
    _check_accurate(Bd, Ad, fraq.recompress(Bd, Ad, tau=TAU, backend=backend), kb + 60, dtype)


@pytest.mark.parametrize("backend,gram", METHODS)
@pytest.mark.parametrize("m,n,kb,ka", [(24, 40, 127, -30), (40, 24, 124, -10)])
def test_named_case_float32_large_B_with_representable_aggregate(backend, gram, m, n, kb, ka):
    """B ~1e37..1e38 in float32, A small, sigma_1 ~ 2^100: the Gram overflows unless rescaled, and eigh fails on it."""
    B, A, _ = _unit_problem(m, n, seed=9)
    Bd, Ad = _scaled(B, A, kb, ka, F32)
    assert Bd.abs().max() > 1e37 and torch.isfinite(Bd).all()
    _check_accurate(Bd, Ad, fraq.recompress(Bd, Ad, tau=TAU, backend=backend, gram=gram), kb + ka, F32)


def test_badly_scaled_matrix_in_a_batch_leaves_the_others_unchanged():
    """Only the out-of-range matrix is rescaled: the others equal, bit for bit, their results
    in the same batch without it (the same batched calls; an unbatched call may round
    differently where the BLAS splits a batched product over threads, as MKL's COMPATIBLE
    path does at 2 threads)."""
    Bs, As = lora_clients(30, 20, [4, 4], batch=(3,), seed=10, dtype=F32)
    B, A = fraq.stack(Bs, As)
    clean = fraq.recompress(B, A, tau=TAU)
    assert clean.info["rescaled"] == 0
    B = B.clone()
    B[1] = B[1] * 2.0**-120
    res = fraq.recompress(B, A, tau=TAU)
    assert res.info["rescaled"] == 1
    for i in (0, 2):
        assert int(res.rank[i]) == int(clean.rank[i])
        p = int(clean.rank[i])
        torch.testing.assert_close(res.B[i, :, :p], clean.B[i, :, :p], rtol=0, atol=0)
        torch.testing.assert_close(res.A[i, :p], clean.A[i, :p], rtol=0, atol=0)
    one = fraq.recompress(B[1], A[1], tau=TAU)
    assert int(res.rank[1]) == one.rank and one.rank > 0
    _check_accurate(B[1], A[1], one, -120, F32)


def test_float16_result_out_of_range_is_refused():
    """fp16 factors whose aggregate exceeds fp16's range: the result's A would be inf."""
    B, A, _ = _unit_problem(24, 40, seed=11)
    Bh, Ah = _scaled(B, A, 9, 9, torch.float16)  # sigma_1 ~ 2^18 > 65504
    assert torch.isfinite(Bh).all() and torch.isfinite(Ah).all()
    with pytest.raises(ValueError, match=r"torch.float16.*overflow.*float32 factors"):
        fraq.recompress(Bh, Ah, tau=TAU)


# ---- empty problems ---------------------------------------------------------------

@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
@pytest.mark.parametrize("m,r,n", [(5, 0, 7), (0, 3, 7), (5, 3, 0), (7, 0, 5), (0, 0, 0)])
@pytest.mark.parametrize("mode", [{"tau": 0.9}, {"rank": 2}])
def test_no_directions_gives_rank_zero(batch, m, r, n, mode):
    """r, m or n zero: the aggregate is the zero (or empty) matrix; its best approximation
    of any rank is itself, of rank 0, in both modes."""
    B, A = torch.zeros(*batch, m, r), torch.zeros(*batch, r, n)
    res = fraq.recompress(B, A, **mode)
    assert res.B.shape == (*batch, m, 0) and res.A.shape == (*batch, 0, n)
    assert res.singular_values.shape == (*batch, 0)
    if batch:
        assert res.rank.shape == batch and (res.rank == 0).all() and (res.energy == 1).all()
    else:
        assert res.rank == 0 and res.energy == 1.0
    assert res.downlink_params() == 0


@pytest.mark.parametrize("mode,width", [({"tau": 0.9}, 0), ({"rank": 2}, 2)])
def test_empty_batch(mode, width):
    B, A = torch.zeros(0, 6, 3), torch.zeros(0, 3, 8)
    res = fraq.recompress(B, A, **mode)
    assert res.B.shape == (0, 6, width) and res.A.shape == (0, width, 8)
    assert res.rank.shape == (0,) and res.singular_values.shape == (0, 3)


# ---- host synchronizations ------------------------------------------------------------

@pytest.mark.parametrize("backend", ["householder", "cholesky"])
def test_fast_path_synchronizes_once(monkeypatch, backend):
    """One device-to-host read per call on well-scaled input (one ``.numpy()`` of one
    tensor; cholesky's fallback verdict is read in that same one)."""
    B, A, _ = _unit_problem(40, 24, seed=12)
    B, A = B.float(), A.float()
    calls = []
    for name in ("item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            calls.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    for mode in ({"tau": TAU}, {"rank": 3}):
        for gram in ("product", "factored", "auto"):
            calls.clear()
            res = fraq.recompress(B, A, gram=gram, backend=backend, **mode)
            assert calls == ["numpy"], (mode, gram, calls)
            assert res.info["rescaled"] == 0


def _against_each_other():
    for dtype, ks in ((F32, (40, 70, 76, 80, 100)), (F64, (300, 480, 500))):
        for backend, gram in (("householder", "auto"), ("householder", "factored"), ("cholesky", "auto"),
                              ("householder", "product")):
            for m, n in ((64, 48), (48, 64)):
                yield pytest.param(backend, gram, dtype, ks, m, n, id=f"{backend}-{gram}-{str(dtype)[6:]}-{m}x{n}")


@pytest.mark.parametrize("backend, gram, dtype, ks, m, n", list(_against_each_other()))
def test_clients_scaled_against_each_other_keep_the_optimum(backend, gram, dtype, ks, m, n):
    """One client's factors as (B_1 2^k, A_1 2^-k): the aggregate is unchanged, so the result
    must be the unscaled one's, whatever k, up to float rounding: the rank of the float64
    rule and the optimum at it (float32: 2^80 is about 1e24). Under an explicit
    gram="factored" a result may instead say that form cannot resolve the input
    (info["factored_unresolved"]); "auto" never takes it there. Each factor stays
    representable (|k| below the dtype's exponent range less the factors' own)."""
    Bs, As = lora_clients(m, n, [4, 4, 4], seed=3, dtype=F64)
    for k in ks:
        Bk = [_mul_pow2(Bs[0], k)] + list(Bs[1:])
        Ak = [_mul_pow2(As[0], -k)] + list(As[1:])
        B, A = fraq.stack([b.to(dtype) for b in Bk], [a.to(dtype) for a in Ak])
        res = fraq.recompress(B, A, tau=TAU, backend=backend, gram=gram)
        if gram == "factored" and res.info.get("factored_unresolved"):
            continue  # the form the caller chose cannot resolve this input, and the result says so
        Bd, Ad = fraq.stack(Bs, As)  # the exact aggregate, unscaled, float64
        S = reference_svd(Bd, Ad)[1]
        assert res.rank == int(fraq.select_rank(S.square(), TAU)), (k, res.rank, res.info)
        err, opt = relative_error(Bd, Ad, res.B.double(), res.A.double()), optimal_error(Bd, Ad, res.rank)
        assert err <= opt + EXCESS_FACTOR * eps(dtype) * B.shape[-1] ** 0.5, (k, float(err), float(opt))
        kept = float(S[:res.rank].square().sum() / S.square().sum())  # the energy the result holds, float64
        assert abs(float(res.energy) - kept) <= ENERGY_FACTOR * B.shape[-1] * eps(dtype), (k, float(res.energy), kept)


@pytest.mark.parametrize("m, n", [(64, 48), (48, 64)])
def test_a_cancelled_aggregate_is_kept_by_auto_and_reported_by_factored(m, n):
    """Two clients cancelling to 1e-4 of their size, (B1, B1 (1 + 1e-4)) and (A1, -A1): the
    aggregate 1e-4 B1 A1 is well above the noise floor. "auto" keeps the float64 rule's rank;
    an explicit "factored" Gram, which cannot resolve it, says so in ``info``."""
    Bs, As = lora_clients(m, n, [4], seed=0)
    B = torch.cat([Bs[0], Bs[0] * (1 + 1e-4)], -1)
    A = torch.cat([As[0], -As[0]], -2)
    S = reference_svd(B.double(), A.double())[1]
    want = int(fraq.select_rank(S.square(), TAU))
    assert fraq.recompress(B, A, tau=TAU, gram="auto").rank == want
    res = fraq.recompress(B, A, tau=TAU, gram="factored")
    assert res.rank == want or res.info.get("factored_unresolved") == 1, (res.rank, res.info)
