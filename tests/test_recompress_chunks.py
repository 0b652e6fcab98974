"""fraq.recompress on a CPU batch run chunk by chunk (fraq._parallel.CHUNK_BYTES).

Every chunk runs the same pipeline as a whole batch, so a chunked call must give what
the unchunked call gives: the same ranks, factors zero-padded to the batch's largest
rank, the product within rounding of the float64 aggregate, fallbacks and rescalings
counted over the whole batch, and errors that name the matrix by its index in the
caller's batch, not in its chunk. Tolerances are eps of the dtype times a stated factor.
"""

import pytest
import torch
from conftest import eps, fro

import fraq
import fraq._recompress as _rc
from fraq import _parallel
from fraq.backends.base import merge_info
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64

def _bounds(nb, d, D, r):
    """The chunk edges recompress uses for nb matrices of d x r and r x D (its working set per matrix)."""
    return _parallel.chunk_bounds(nb, 8 * d * r + 4 * D * min(d, r))

# Per matrix, a product of inner dimension r carries about sqrt(r) eps relative rounding.
EXCESS_FACTOR = 64


@pytest.fixture
def tiny_chunks(monkeypatch):
    """One matrix per chunk whatever its size."""
    monkeypatch.setattr(_parallel, "CHUNK_BYTES", 1)


def _stacks(batch, m, n, ranks, dtype=F32, seed=0):
    Bs, As = lora_clients(m, n, ranks, batch=batch, seed=seed, dtype=dtype)
    return fraq.stack(Bs, As)


def test_chunk_bounds_cover_the_batch_once():
    for nb, d, D, r in [(1, 8, 8, 2), (7, 3072, 8192, 64), (36, 768, 768, 80), (5, 10, 10_000_000, 4)]:
        b = _bounds(nb, d, D, r)
        assert b[0] == 0 and b[-1] == nb and all(lo < hi for lo, hi in zip(b[:-1], b[1:]))
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)  # by memory only: under CHUNK_BYTES one chunk, above it split
        assert _bounds(12, 768, 768, 80) == [0, 12]
        assert len(_bounds(28, 3072, 8192, 64)) > 2
        torch.set_num_threads(2)  # and one chunk per thread once the work reaches FANOUT_BYTES
        assert _bounds(12, 768, 768, 80) == [0, 6, 12]
        assert _bounds(12, 40, 30, 8) == [0, 12]
        assert _bounds(1, 3072, 3072, 64) == [0, 1]
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("backend", ["householder", "cholesky"])
@pytest.mark.parametrize("m,n", [(40, 24), (24, 40)])
@pytest.mark.parametrize("mode", [dict(tau=0.8), dict(tau=1.0), dict(rank=3)])
@pytest.mark.parametrize("threads", [1, 2])
def test_chunked_equals_whole(monkeypatch, backend, m, n, mode, threads):
    batch = (2, 3)
    B, A = _stacks(batch, m, n, [4, 2, 5], seed=3)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        whole = fraq.recompress(B, A, backend=backend, **mode)
        monkeypatch.setattr(_parallel, "CHUNK_BYTES", 1)
        assert len(_bounds(6, min(m, n), max(m, n), 11)) == 7
        parts = fraq.recompress(B, A, backend=backend, **mode)
    finally:
        torch.set_num_threads(old)
    assert torch.equal(parts.rank, whole.rank) and parts.rank.shape == batch
    assert parts.B.shape == whole.B.shape and parts.A.shape == whole.A.shape
    p = parts.rank.reshape(-1)
    Bf, Af = parts.B.reshape(6, m, -1), parts.A.reshape(6, -1, n)
    M = (B.double() @ A.double()).reshape(6, m, n)
    Mw = (whole.B.double() @ whole.A.double()).reshape(6, m, n)
    for i in range(6):
        assert (Bf[i][:, p[i]:] == 0).all() and (Af[i][p[i]:] == 0).all()  # padding is exact zeros
        Mi = Bf[i].double() @ Af[i].double()
        assert fro(Mi - Mw[i]) <= EXCESS_FACTOR * eps(F32) * 11**0.5 * fro(M[i])
    torch.testing.assert_close(parts.energy, whole.energy, rtol=0, atol=16 * eps(F32))
    assert parts.backend == whole.backend == backend
    assert parts.info.get("fallback_count", 0) == whole.info.get("fallback_count", 0) == 0


def test_fallbacks_are_counted_over_every_chunk(tiny_chunks):
    """Duplicate clients (a rank-deficient stack) in two matrices of five: cholesky falls
    back to Householder in exactly those two, whichever chunks they land in."""
    Bs, As = lora_clients(50, 30, [3, 3], batch=(5,), seed=2, dtype=F32)
    Bs[1][1], As[1][1] = Bs[0][1], As[0][1]
    Bs[1][4], As[1][4] = Bs[0][4], As[0][4]
    B, A = fraq.stack(Bs, As)
    res = fraq.recompress(B, A, tau=1.0, backend="cholesky")
    assert res.info["fallback"] == "householder" and res.info["fallback_count"] == 2
    assert res.rank.tolist() == [6, 3, 6, 6, 3]
    M = B.double() @ A.double()
    err = fro(res.B.double() @ res.A.double() - M) / fro(M)
    assert (err <= EXCESS_FACTOR * eps(F32) * 6**0.5).all()


def test_rescaled_matrices_are_counted_over_every_chunk(tiny_chunks):
    B, A = _stacks((4,), 30, 20, [3, 2], dtype=F32, seed=5)
    B, A = B.clone(), A.clone()
    B[2] *= 2.0**-50
    A[2] *= 2.0**-50  # sigma ~1e-30 is representable, its Gram (~1e-60) is not: rescaled
    res = fraq.recompress(B, A, tau=1.0)
    assert res.info["rescaled"] == 1
    M = B[2].double() @ A[2].double()
    assert fro(res.B[2].double() @ res.A[2].double() - M) <= EXCESS_FACTOR * eps(F32) * fro(M)


@pytest.mark.parametrize("batch,bad", [((5,), (3,)), ((2, 3), (1, 2))])
def test_non_finite_input_named_by_its_index_in_the_whole_batch(tiny_chunks, batch, bad):
    B, A = _stacks(batch, 12, 9, [2, 2], dtype=F32, seed=1)
    B = B.clone()
    B[bad][4, 1] = float("nan")
    with pytest.raises(ValueError, match=rf"B contains a non-finite value nan at index \({', '.join(map(str, (*bad, 4, 1)))}\)"):
        fraq.recompress(B, A, tau=0.9)


def test_out_of_range_matrix_named_by_its_index_in_the_whole_batch(tiny_chunks):
    B, A = _stacks((2, 3), 12, 9, [2, 2], dtype=F32, seed=1)
    B = B.clone()
    B[1, 1] *= 1e30
    A = A.clone()
    A[1, 1] *= 1e30  # sigma_1 ~ 1e60: no float32 result can hold it
    with pytest.raises(ValueError, match=r"matrix \(1, 1\) of the batch"):
        fraq.recompress(B, A, tau=0.9)


def test_merge_info_rules():
    """Each key combines by the rule the backend (or recompress) declares for it; the rest keep the first value."""
    rules = {**fraq.backends.REGISTRY["newton-schulz"].info_rules, **_rc.INFO_RULES}
    parts = [dict(backend="newton-schulz", steps=5, residual=1e-7, converged=True, fallback=None, fallback_count=0,
                  rescaled=0),
             dict(backend="newton-schulz", steps=7, residual=3e-7, converged=False, fallback="pinv", fallback_count=2,
                  rescaled=1)]
    got = merge_info(parts, rules)
    assert got == dict(backend="newton-schulz", steps=7, residual=3e-7, converged=False, fallback="pinv",
                       fallback_count=2, rescaled=1)


def test_every_info_key_a_chunked_call_sets_has_a_rule_or_is_constant():
    """A key without a rule keeps the first chunk's value: only keys that cannot differ
    between chunks (names, forms) may go without one."""
    constant = {"backend", "gram", "eigensolver", "schedule", "coords", "fallback", "fallback_reason", "basis",
                "pipeline"}
    for name, spec in fraq.backends.REGISTRY.items():
        B, A = _stacks((3,), 30, 20, [3, 2])
        info = fraq.recompress(B, A, tau=0.9, backend=name).info
        rules = {**spec.info_rules, **_rc.INFO_RULES}
        assert set(info) - set(rules) <= constant, (name, set(info) - set(rules) - constant)
