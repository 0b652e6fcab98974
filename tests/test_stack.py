"""fraq.stack: the product of the stacks is the exact weighted aggregate."""

import itertools

import pytest
import torch
from conftest import eps, fro

import fraq
from fraq.reference import dense_aggregate
from fraq.synthetic import lora_clients

# Rounding of one scaled product: a few eps per term, K terms, inner dimension r.
STACK_FACTOR = 16


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [(), (1,), (3,), (2, 3)])
def test_product_equals_weighted_aggregate(dtype, batch):
    ranks = [2, 5, 3]
    Bs, As = lora_clients(17, 11, ranks, batch=batch, seed=1, dtype=dtype)
    weights, scales = [5.0, 1.0, 2.5], [2.0, 0.5, 8.0]
    B, A = fraq.stack(Bs, As, weights, scales)
    assert B.shape == (*batch, 17, sum(ranks)) and A.shape == (*batch, sum(ranks), 11)
    assert B.dtype == dtype and A.dtype == dtype
    ref = dense_aggregate(Bs, As, weights, scales)
    bound = sum(abs(w / 8.5 * s) * fro(b) * fro(a) for b, a, w, s in zip(Bs, As, weights, scales))
    err = fro(B.double() @ A.double() - ref)
    assert (err <= STACK_FACTOR * eps(dtype) * sum(ranks) * bound).all()


def test_weights_are_split_as_square_roots():
    """Eq. 7: sqrt(a_k) on both factors, s_k on A only."""
    Bs, As = lora_clients(6, 4, [2, 3], seed=2, dtype=torch.float64)
    B, A = fraq.stack(Bs, As, weights=[1.0, 3.0], scales=[2.0, 5.0])
    torch.testing.assert_close(B[:, :2], Bs[0] * 0.5, rtol=0, atol=0)
    torch.testing.assert_close(B[:, 2:], Bs[1] * 0.75**0.5, rtol=eps(torch.float64), atol=0)
    torch.testing.assert_close(A[2:], As[1] * 0.75**0.5 * 5.0, rtol=2 * eps(torch.float64), atol=0)


def test_defaults_uniform_weights_unit_scales():
    Bs, As = lora_clients(9, 7, [3, 3, 3, 3], seed=3, dtype=torch.float64)
    B, A = fraq.stack(Bs, As)
    ref = sum(b @ a for b, a in zip(Bs, As)) / 4
    torch.testing.assert_close(B @ A, ref, rtol=0, atol=32 * eps(torch.float64) * float(fro(ref)))


def test_zero_weight_client_contributes_nothing():
    Bs, As = lora_clients(8, 8, [2, 2, 2], seed=4, dtype=torch.float64)
    B, A = fraq.stack(Bs, As, weights=[1.0, 0.0, 1.0])
    ref = (Bs[0] @ As[0] + Bs[2] @ As[2]) / 2
    torch.testing.assert_close(B @ A, ref, rtol=0, atol=32 * eps(torch.float64) * float(fro(ref)))


def test_client_order_does_not_change_the_product():
    Bs, As = lora_clients(10, 13, [1, 4, 2], seed=5, dtype=torch.float64)
    w, s = [1.0, 2.0, 3.0], [1.0, 4.0, 0.25]
    base = fraq.stack(Bs, As, w, s)
    M0 = base[0] @ base[1]
    for perm in itertools.permutations(range(3)):
        B, A = fraq.stack([Bs[i] for i in perm], [As[i] for i in perm], [w[i] for i in perm], [s[i] for i in perm])
        torch.testing.assert_close(B @ A, M0, rtol=0, atol=32 * eps(torch.float64) * float(fro(M0)))


def test_bf16_clients_are_rounded_once():
    """Scaling runs in float32; the only rounding to bf16 is the final cast."""
    Bs, As = lora_clients(12, 9, [3, 3], seed=6, dtype=torch.float32)
    Bh, Ah = [b.bfloat16() for b in Bs], [a.bfloat16() for a in As]
    B, A = fraq.stack(Bh, Ah, weights=[1.0, 3.0], scales=[2.0, 2.0])
    assert B.dtype == torch.bfloat16
    B32, A32 = fraq.stack([b.float() for b in Bh], [a.float() for a in Ah], weights=[1.0, 3.0], scales=[2.0, 2.0])
    torch.testing.assert_close(B, B32.bfloat16(), rtol=0, atol=0)
    torch.testing.assert_close(A, A32.bfloat16(), rtol=0, atol=0)
    Bf, Af = fraq.stack(Bh, Ah, weights=[1.0, 3.0], scales=[2.0, 2.0], dtype=torch.float32)
    assert Bf.dtype == torch.float32
    torch.testing.assert_close(Bf, B32, rtol=0, atol=0)


def test_b_stack_is_column_major():
    Bs, As = lora_clients(30, 20, [4, 4], batch=(2,), seed=7)
    B, _ = fraq.stack(Bs, As)
    assert B.mT.is_contiguous()


def test_huge_weights_normalize_without_overflow():
    """weights [1e308, 1e308] raised OverflowError in math.fsum."""
    Bs, As = lora_clients(8, 6, [2, 2], seed=8, dtype=torch.float64)
    B, A = fraq.stack(Bs, As, weights=[1e308, 1e308])
    ref = fraq.stack(Bs, As, weights=[1.0, 1.0])
    torch.testing.assert_close(B, ref[0], rtol=0, atol=0)
    torch.testing.assert_close(A, ref[1], rtol=0, atol=0)
    from fraq._stack import normalized_weights
    assert normalized_weights([1e308, 1e308, 5e-324], 3) == [0.5, 0.5, 0.0]
    assert normalized_weights([5e-324, 5e-324], 2) == [0.5, 0.5]


def test_float16_stack_within_range_is_rounded_once():
    """dtype=float16 is allowed when every weighted factor fits: one rounding from float32."""
    Bs, As = lora_clients(12, 9, [3, 3], seed=9, dtype=torch.float32)
    B, A = fraq.stack(Bs, As, weights=[1.0, 3.0], scales=[2.0, 2.0], dtype=torch.float16)
    B32, A32 = fraq.stack(Bs, As, weights=[1.0, 3.0], scales=[2.0, 2.0])
    torch.testing.assert_close(B, B32.half(), rtol=0, atol=0)
    torch.testing.assert_close(A, A32.half(), rtol=0, atol=0)


@pytest.mark.parametrize("lists", [False, True])
def test_stacks_filled_by_threads_equal_one_thread(monkeypatch, lists):
    """A batch shared by two threads, chunk by chunk of matrices, is the one-thread stack, bit for bit
    (the same copies and products, each on one thread), for tensor and per-module-list factors."""
    from fraq import _parallel
    from fraq._stack import fill_stacks

    Bs, As = lora_clients(20, 12, [3, 5, 2], batch=(7,), seed=5)
    a, sc = [0.5, 0.3, 0.2], [2.0, 1.0, 0.5]

    def filled():
        B = torch.empty(7, 10, 20).mT
        A = torch.empty(7, 10, 12)
        clients = [(list(b.unbind(0)), list(x.unbind(0))) if lists else (b, x) for b, x in zip(Bs, As)]
        fill_stacks(B, A, clients, a, sc)
        return B, A

    from benchmarks.measure import threads

    with threads(1):
        B1, A1 = filled()
    monkeypatch.setattr(_parallel, "FANOUT_BYTES", 1)
    with threads(2):
        assert len(_parallel.chunk_bounds(7, 10 * 32 * 4)) == 3  # the case is what it claims: two chunks
        B2, A2 = filled()
    assert torch.equal(B1, B2) and torch.equal(A1, A2)
    expected = sum(ak * sk * b @ x for ak, sk, b, x in zip(a, sc, Bs, As))
    torch.testing.assert_close(B2 @ A2, expected, rtol=0, atol=64 * torch.finfo(torch.float32).eps)


def _refuses(fn) -> bool:
    try:
        fn()
    except ValueError:
        return True
    return False


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_stacks_refused_exactly_where_the_factor_check_refuses(dtype):
    """The check read from the stacks (one pass for all clients) refuses exactly the inputs
    the per-client check of the factors refuses, on the inputs at its edges: a zero client,
    a zero weight or scale, factors scaled into the subnormal range or to the dtype's
    largest values, a NaN and an Inf, one client of several, batched and not."""
    from fraq._stack import _check_weighted_range, normalized_weights

    fi = torch.finfo(dtype)
    g = torch.Generator().manual_seed(5)
    cases = []
    for batch in ((), (3,)):
        base = lambda r: (torch.randn(*batch, 12, r, generator=g), torch.randn(*batch, r, 9, generator=g))  # noqa: E731
        for edit in ("none", "zero", "weight0", "scale0", "tiny", "subnormal", "huge", "over", "nan", "inf",
                     "one-matrix-tiny"):
            Bs, As = zip(*(base(r) for r in (2, 3, 4)))
            Bs, As = [b.clone() for b in Bs], [a.clone() for a in As]
            weights, scales = [1.0, 2.0, 3.0], [1.0, 1.0, 1.0]
            if edit == "zero":
                Bs[1].zero_()
            elif edit == "weight0":
                weights[2] = 0.0
            elif edit == "scale0":
                scales[0] = 0.0
            elif edit == "tiny":  # weighted, just above the smallest normal
                As[2] *= 4 * fi.tiny / As[2].abs().max()
            elif edit == "subnormal":
                As[2] *= fi.tiny / 8 / As[2].abs().max()
            elif edit == "huge":
                Bs[0] *= fi.max / 4 / Bs[0].abs().max()
            elif edit == "over":
                Bs[0] *= fi.max / Bs[0].abs().max()
                scales = [1.0, 1.0, 1.0]
                weights = [1e6, 1.0, 1.0]
            elif edit == "nan":
                As[1].view(-1)[3] = float("nan")
            elif edit == "inf":
                Bs[2].view(-1)[5] = float("inf")
            elif edit == "one-matrix-tiny" and batch:
                Bs[1][1] *= fi.tiny / 16 / Bs[1][1].abs().max()
            cases.append((edit, batch, Bs, As, weights, scales))
    outcomes = set()
    for edit, batch, Bs, As, weights, scales in cases:
        a = normalized_weights(weights, 3)
        Bs = [b.to(torch.float32) for b in Bs]
        As = [t.to(torch.float32) for t in As]
        expected = _refuses(lambda: _check_weighted_range(Bs, As, a, scales, dtype))
        got = _refuses(lambda: fraq.stack(Bs, As, weights, scales, dtype=dtype))
        assert got == expected, (edit, batch, expected)
        outcomes.add(expected)
    assert outcomes == {True, False}  # both sides of the rule were reached
