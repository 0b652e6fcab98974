"""Group.stacked: the whole-model path's one-pass stacking equals fraq.stack exactly."""

import math

import pytest
import torch

import fraq
from fraq.aggregators import get_aggregator
from fraq.aggregators.group import _make_groups
from fraq.aggregators.validation import validate_updates
from fraq.aggregators.payload import ClientUpdate
from fraq._stack import normalized_weights
from fraq.synthetic import lora_clients


def _updates(ranks=(4, 2, 3), scales=(2.0, 0.5, 1.0), weights=(10, 30, 20), dtype=torch.float32, modules=3):
    per_client = [dict() for _ in ranks]
    for j in range(modules):
        Bs, As = lora_clients(24, 16, list(ranks), seed=j, dtype=dtype)
        for k in range(len(ranks)):
            per_client[k][f"layer.{j}"] = (Bs[k].contiguous(), As[k].contiguous())
    return [ClientUpdate(f, scale=s, weight=w) for f, s, w in zip(per_client, scales, weights)]


def _groups(updates, batched):
    updates, specs = validate_updates(updates, single_matrix=False, check_values=False)
    w = normalized_weights([u.weight for u in updates], len(updates))
    return _make_groups(updates, specs, w, batched)


@pytest.mark.parametrize("batched", [True, False])
def test_stacked_equals_fraq_stack_bitwise(batched):
    for g in _groups(_updates(), batched):
        Bs, As = g.client_factors()
        B0, A0 = fraq.stack(Bs, As, g.weights, g.spec.scales)
        B, A = g.stacked()
        assert B.shape == B0.shape and A.shape == A0.shape
        assert torch.equal(B, B0) and torch.equal(A, A0)
        assert B.mT.is_contiguous() and A.is_contiguous()  # the layouts fraq.stack documents


def test_stacked_bf16_clients_in_float32():
    for g in _groups(_updates(dtype=torch.bfloat16), True):
        Bs, As = g.client_factors()
        B0, A0 = fraq.stack(Bs, As, g.weights, g.spec.scales, dtype=torch.float32)
        B, A = g.stacked(torch.float32)
        assert B.dtype == torch.float32 and torch.equal(B, B0) and torch.equal(A, A0)


@pytest.mark.parametrize("dtype,stack_dtype", [(torch.bfloat16, None), (torch.float16, None),
                                               (torch.float64, torch.float32), (torch.float32, torch.bfloat16)])
@pytest.mark.parametrize("batched", [True, False])
def test_stacked_rounds_like_fraq_stack_in_every_dtype(dtype, stack_dtype, batched):
    """One implementation: the groups and fraq.stack round every weighted factor once, identically."""
    for g in _groups(_updates(dtype=dtype), batched):
        Bs, As = g.client_factors()
        B0, A0 = fraq.stack(Bs, As, g.weights, g.spec.scales, dtype=stack_dtype)
        B, A = g.stacked(stack_dtype)
        assert B.dtype == B0.dtype and torch.equal(B, B0) and torch.equal(A, A0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_stacks_round_once(dtype):
    """A half-precision weighted factor is its float32 product rounded once, whichever path wrote it."""
    for g in _groups(_updates(dtype=dtype), True):
        B, A = g.stacked()
        Bs, As = g.client_factors()
        lo = 0
        for Bk, Ak, ak, sk in zip(Bs, As, g.weights, g.spec.scales):
            hi = lo + Bk.shape[-1]
            assert torch.equal(B[..., lo:hi], (Bk.float() * math.sqrt(ak)).to(dtype))
            assert torch.equal(A[..., lo:hi, :], (Ak.float() * (math.sqrt(ak) * sk)).to(dtype))
            lo = hi


def test_fill_stacks_writes_into_the_given_tensors():
    """fill_stacks fills preallocated stacks in place (a strided view of B included) and returns nothing."""
    from fraq._stack import fill_stacks

    Bs, As = lora_clients(12, 9, [3, 1, 2], seed=4, batch=(2,))
    a, s = normalized_weights([1, 2, 3], 3), [0.5, 2.0, 1.0]
    Bt = torch.full((2, 6, 12), float("nan"))
    A = torch.full((2, 6, 9), float("nan"))
    ptrs = (Bt.data_ptr(), A.data_ptr())
    assert fill_stacks(Bt.mT, A, zip(Bs, As), a, s) is None
    assert (Bt.data_ptr(), A.data_ptr()) == ptrs
    B0, A0 = fraq.stack(Bs, As, [1, 2, 3], s)
    assert torch.equal(Bt.mT, B0) and torch.equal(A, A0)
    per_module = [([b[i] for i in range(2)], [x[i] for i in range(2)]) for b, x in zip(Bs, As)]
    Bt2, A2 = torch.empty_like(Bt), torch.empty_like(A)
    fill_stacks(Bt2.mT, A2, per_module, a, s)  # lists of module matrices: stacked into the slices
    assert torch.equal(Bt2, Bt) and torch.equal(A2, A)


def test_stacked_names_client_and_module_of_a_nan():
    ups = _updates()
    ups[2].factors["layer.1"][1][0, 3] = float("nan")
    with pytest.raises(ValueError, match=r"client 2, module 'layer.1', A"):
        get_aggregator("fraq", tau=0.9).aggregate(ups)


def test_whole_model_fraq_equals_stack_then_recompress():
    ups = _updates()
    res = get_aggregator("fraq", tau=0.9).aggregate(ups)
    for j in range(3):
        name = f"layer.{j}"
        Bs = [u.factors[name][0] for u in ups]
        As = [u.factors[name][1] for u in ups]
        ref = fraq.recompress(*fraq.stack(Bs, As, [u.weight for u in ups], [u.scale for u in ups]), tau=0.9)
        B, A = res.downlinks[0][name].sent
        assert res.ranks[name] == ref.rank
        torch.testing.assert_close(B @ A, ref.B @ ref.A, rtol=0, atol=64 * torch.finfo(torch.float32).eps
                                   * float(torch.linalg.matrix_norm(ref.B @ ref.A)))


@pytest.mark.parametrize("batched", [True, False])
def test_single_matrix_row_stack(batched):
    """Single-matrix uploads (B_k None): B is None and A the rows sqrt(a_k) A_k, the scales left out."""
    g = torch.Generator().manual_seed(0)
    ups = [ClientUpdate({f"layer.{j}": (None, torch.randn(3, 5, generator=g)) for j in range(2)}, scale=2.0,
                        weight=w) for w in (10, 30, 20)]
    for grp in _groups_single(ups, batched):
        B, S = grp.stacked(scaled=False)
        _, As = grp.client_factors()
        assert B is None
        assert torch.equal(S, torch.cat([A * math.sqrt(a) for A, a in zip(As, grp.weights)], dim=-2))


def _groups_single(updates, batched):
    updates, specs = validate_updates(updates, single_matrix=True)
    w = normalized_weights([u.weight for u in updates], len(updates))
    return _make_groups(updates, specs, w, batched)


def test_stacked_in_chunks_over_threads_equals_one_thread():
    """A group large enough to be filled chunk by chunk over two threads (fraq._parallel)
    gives the stacks that one copy per stack gives at one thread."""
    from benchmarks.measure import threads
    from fraq._parallel import FANOUT_BYTES

    ranks, modules = (8, 8, 16), 40
    per_client = [dict() for _ in ranks]
    Bs, As = lora_clients(256, 192, list(ranks), batch=(modules,), seed=3)
    for j in range(modules):
        for k in range(len(ranks)):
            per_client[k][f"layer.{j}"] = (Bs[k][j], As[k][j])
    ups = [ClientUpdate(f, scale=s, weight=w) for f, s, w in zip(per_client, (2.0, 0.5, 1.0), (10, 30, 20))]
    (g,) = _groups(ups, True)
    assert modules * (256 + 192) * sum(ranks) * 4 >= FANOUT_BYTES  # worth sharing at two threads
    with threads(1):
        B1, A1 = g.stacked()
    with threads(2):
        B2, A2 = g.stacked()
    assert torch.equal(B1, B2) and torch.equal(A1, A2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_each_block_is_the_clients_factor_times_its_own_scalar(dtype):
    """Every client's block of the one-copy stacks is sqrt(a_k) B_k and sqrt(a_k) s_k A_k as a
    per-client multiply by a Python float makes them, bit for bit (the broadcast multiply
    rounds each entry once, in the same opmath dtype); and the factors follow the weights
    when they change between rounds (no stale scaling from an earlier round's weights)."""
    for weights in ((10, 30, 20), (1, 1, 5)):
        updates = _updates(dtype=dtype, weights=weights)
        for g in _groups(updates, True):
            B, A = g.stacked()
            lo = 0
            for k, (ak, sk) in enumerate(zip(g.weights, g.spec.scales)):
                b, a = g.module_factors(k)
                hi = lo + a[0].shape[0]
                root = math.sqrt(ak)
                assert torch.equal(B[..., lo:hi], torch.stack(b) * root)
                assert torch.equal(A[..., lo:hi, :], torch.stack(a) * (root * sk))
                lo = hi
            assert lo == B.shape[-1]
