"""Bad input gets a ValueError or TypeError naming the argument and its value."""

import re

import pytest
import torch

import fraq
from fraq.synthetic import lora_clients


def _clients(K=3, m=12, n=10, r=2):
    return lora_clients(m, n, [r] * K, seed=0)


def _raises(exc, fn, *patterns):
    with pytest.raises(exc) as info:
        fn()
    msg = str(info.value)
    for pat in patterns:
        assert re.search(pat, msg), f"{pat!r} not in {msg!r}"


# ---- fraq.stack --------------------------------------------------------------------

def test_stack_empty_client_list():
    _raises(ValueError, lambda: fraq.stack([], []), "Bs is empty")


def test_stack_list_lengths_differ():
    Bs, As = _clients()
    _raises(ValueError, lambda: fraq.stack(Bs, As[:2]), r"len\(Bs\)=3", r"len\(As\)=2")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("which", ["B", "A"])
def test_stack_non_finite_factor(bad, which):
    Bs, As = _clients()
    target = Bs if which == "B" else As
    target[1] = target[1].clone()
    target[1][0, 1] = bad
    _raises(ValueError, lambda: fraq.stack(Bs, As), rf"{which}s\[1\]", "non-finite", r"\(0, 1\)")


def test_stack_rank_mismatch_within_client():
    Bs, As = _clients()
    As[2] = torch.randn(3, 10)
    _raises(ValueError, lambda: fraq.stack(Bs, As), r"Bs\[2\]", r"As\[2\]", r"\(3, 10\)")


def test_stack_m_mismatch_between_clients():
    Bs, As = _clients()
    Bs[1] = torch.randn(13, 2)
    _raises(ValueError, lambda: fraq.stack(Bs, As), r"Bs\[1\]\.shape=\(13, 2\)")


def test_stack_n_mismatch_between_clients():
    Bs, As = _clients()
    As[1] = torch.randn(2, 11)
    _raises(ValueError, lambda: fraq.stack(Bs, As), r"As\[1\]\.shape=\(2, 11\)")


def test_stack_batch_mismatch():
    Bs, As = lora_clients(8, 6, [2, 2], batch=(3,), seed=1)
    Bs[1], As[1] = Bs[1][:2], As[1][:2]
    _raises(ValueError, lambda: fraq.stack(Bs, As), r"Bs\[1\]")


@pytest.mark.parametrize("weights,pattern", [
    ([1.0, -1.0, 1.0], r"weights\[1\]\(=-1\.0\) must be non-negative"),
    ([0.0, 0.0, 0.0], r"must not all be zero"),
    ([1.0, float("nan"), 1.0], r"weights\[1\]\(=nan\) must be finite"),
    ([1.0, 2.0], r"weights has 2 entries but there are 3 clients"),
    ([1.0, "a", 1.0], r"weights\[1\]"),
])
def test_stack_bad_weights(weights, pattern):
    Bs, As = _clients()
    exc = TypeError if "a" in weights else ValueError
    _raises(exc, lambda: fraq.stack(Bs, As, weights=weights), pattern)


@pytest.mark.parametrize("scales,pattern", [
    ([1.0, float("nan"), 1.0], r"scales\[1\]\(=nan\) must be finite"),
    ([1.0, float("inf"), 1.0], r"scales\[1\]\(=inf\) must be finite"),
    ([2.0], r"scales has 1 entries but there are 3 clients"),
])
def test_stack_bad_scales(scales, pattern):
    Bs, As = _clients()
    _raises(ValueError, lambda: fraq.stack(Bs, As, scales=scales), pattern)


def test_stack_integer_dtype():
    Bs, As = _clients()
    Bs[0] = Bs[0].to(torch.int32)
    _raises(TypeError, lambda: fraq.stack(Bs, As), r"Bs\[0\]", "int32")


def test_stack_one_dimensional_factor():
    Bs, As = _clients()
    Bs[0] = torch.randn(12)
    _raises(ValueError, lambda: fraq.stack(Bs, As), r"Bs\[0\]", "at least 2 dimensions", r"\(12,\)")


def test_stack_not_a_tensor():
    Bs, As = _clients()
    Bs[0] = Bs[0].numpy()
    _raises(TypeError, lambda: fraq.stack(Bs, As), r"Bs\[0\] must be a torch.Tensor", "ndarray")


def test_stack_mixed_dtypes():
    Bs, As = _clients()
    Bs[1], As[1] = Bs[1].double(), As[1].double()
    _raises(TypeError, lambda: fraq.stack(Bs, As), r"Bs\[1\]\.dtype=torch.float64")


def test_stack_bad_dtype_argument():
    Bs, As = _clients()
    _raises(TypeError, lambda: fraq.stack(Bs, As, dtype=torch.int64), r"dtype\(=torch.int64\)")


@pytest.mark.parametrize("case", ["overflow-A", "overflow-B", "underflow-B", "float32-scale-overflow"])
def test_stack_weighted_factor_leaves_the_dtype(case):
    """dtype=float16 (or a large scale in float32) silently gave inf or subnormal stacks."""
    Bs, As = _clients()
    dtype, scales = torch.float16, None
    if case == "overflow-A":
        As[2] = As[2] * 3e4 / As[2].abs().max()
        scales, pattern = [1.0, 1.0, 8.0], r"As\[2\] times sqrt\(a_2\)=0.577 \* scales\[2\]=8.*overflow"
    elif case == "overflow-B":
        Bs[0] = Bs[0] * 2e5 / Bs[0].abs().max()
        pattern = r"Bs\[0\] times sqrt\(a_0\)=0.577 has entries up to 1.15e\+05.*torch.float16.*overflow"
    elif case == "underflow-B":
        Bs[1] = Bs[1] * 5e-5 / Bs[1].abs().max()
        pattern = r"Bs\[1\] .* largest entry is 2.89e-05, below the smallest normal torch.float16.*underflow"
    else:
        dtype, scales = torch.float32, [1.0, 1.0, 1e10]
        As[2] = As[2] * 1e30
        pattern = r"As\[2\] .* scales\[2\]=1e\+10.*above the largest torch.float32"
    _raises(ValueError, lambda: fraq.stack(Bs, As, scales=scales, dtype=dtype), pattern)


# ---- fraq.recompress -------------------------------------------------------------------

def _stack():
    return fraq.stack(*_clients())


@pytest.mark.parametrize("tau", [0.0, -0.1, 1.0001, 2, float("nan"), float("inf")])
def test_recompress_tau_out_of_range(tau):
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A, tau=tau), rf"tau\(={tau}", r"\(0, 1\]")


def test_recompress_tau_wrong_type():
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B, A, tau="0.9"), r"tau\(='0.9'\)")


def test_recompress_both_tau_and_rank():
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A, tau=0.9, rank=2), "exactly one of tau and rank",
            "tau=0.9", "rank=2")


def test_recompress_neither_tau_nor_rank():
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A), "exactly one of tau and rank")


@pytest.mark.parametrize("rank", [0, -1, 7])
def test_recompress_rank_out_of_range(rank):
    B, A = _stack()  # d = 10, r = 6
    _raises(ValueError, lambda: fraq.recompress(B, A, rank=rank), rf"rank\(={rank}\)", r"min\(d, r\)=6")


def test_recompress_rank_not_integer():
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B, A, rank=2.5), r"rank\(=2.5\)")


def test_recompress_unknown_backend():
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A, tau=0.9, backend="lapack"), r"backend\(='lapack'\)",
            "householder")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("which", ["B", "A"])
def test_recompress_non_finite(bad, which):
    B, A = _stack()
    B, A = B.clone(), A.clone()
    (B if which == "B" else A)[2, 1] = bad
    _raises(ValueError, lambda: fraq.recompress(B, A, tau=0.9), rf"^{which} contains a non-finite value",
            r"\(2, 1\)")


def test_recompress_non_finite_in_a_batch():
    Bs, As = lora_clients(12, 10, [2, 2], batch=(4,), seed=2)
    B, A = fraq.stack(Bs, As)
    A = A.clone()
    A[3, 0, 5] = float("nan")
    _raises(ValueError, lambda: fraq.recompress(B, A, rank=2), r"^A contains", r"\(3, 0, 5\)")


def test_recompress_inner_dimension_mismatch():
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A[:5], tau=0.9), "must share r", r"\(12, 6\)", r"\(5, 10\)")


def test_recompress_batch_mismatch():
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B.expand(2, -1, -1), A.expand(3, -1, -1), tau=0.9),
            "same batch shape")


def test_recompress_integer_dtype():
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B.long(), A.long(), tau=0.9), "floating dtype", "int64")


def test_recompress_one_dimensional():
    _raises(ValueError, lambda: fraq.recompress(torch.ones(3), torch.ones(3, 1), tau=0.9),
            "at least 2 dimensions", r"\(3,\)")


def test_recompress_dtype_mismatch():
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B, A.double(), tau=0.9), "share a dtype")


def test_recompress_bad_eig_dtype():
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B, A, tau=0.9, eig_dtype=torch.int32), r"eig_dtype")


def test_recompress_unknown_gram():
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A, tau=0.9, gram="syrk"), r"gram\(='syrk'\)")


def test_finite_entries_whose_sum_overflows_are_accepted():
    """The fast finiteness check (a sum) must not reject large finite factors."""
    Bs = [torch.full((4, 2), 3e38), torch.full((4, 2), 3e38)]
    As = [torch.ones(2, 5), torch.ones(2, 5)]
    B, A = fraq.stack(Bs, As)
    assert torch.isfinite(B).all()


@pytest.mark.parametrize("eig_dtype", [torch.float16, torch.bfloat16])
def test_recompress_low_precision_eig_dtype(eig_dtype):
    """Passed the check and failed inside eigh (NotImplementedError for 'Half')."""
    B, A = _stack()
    _raises(ValueError, lambda: fraq.recompress(B, A, tau=0.9, eig_dtype=eig_dtype), rf"eig_dtype\(={eig_dtype}\)",
            "torch.float32 or torch.float64")


@pytest.mark.parametrize("rank,pattern", [
    (torch.tensor(True), r"rank\(=tensor\(True\)\).*dtype=torch.bool"),  # was taken as rank 1
    (True, r"rank\(=True\)"),
    (torch.tensor(2.0), r"rank\(=tensor\(2\.\).*dtype=torch.float32"),
    (torch.tensor([2]), r"rank\(=tensor\(\[2\]\)\).*0-dimensional.*shape=\(1,\)"),
])
def test_recompress_rank_bool_or_non_scalar_tensor(rank, pattern):
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B, A, rank=rank), pattern)


@pytest.mark.parametrize("tau,pattern", [
    (torch.tensor(True), r"tau\(=tensor\(True\)\).*dtype=torch.bool"),
    (torch.tensor([0.9]), r"tau\(=tensor\(\[0.9000\]\)\).*0-dimensional.*shape=\(1,\)"),
])
def test_recompress_tau_bool_or_non_scalar_tensor(tau, pattern):
    B, A = _stack()
    _raises(TypeError, lambda: fraq.recompress(B, A, tau=tau), pattern)


def test_recompress_scalar_tensors_mean_their_numbers():
    B, A = _stack()
    by_tensor = fraq.recompress(B, A, rank=torch.tensor(2))
    assert by_tensor.rank == 2 and torch.equal(by_tensor.B, fraq.recompress(B, A, rank=2).B)
    by_tensor = fraq.recompress(B, A, tau=torch.tensor(0.9, dtype=torch.float64))
    assert by_tensor.rank == fraq.recompress(B, A, tau=0.9).rank


def test_recompress_rank_below_one_on_an_empty_problem():
    """r = 0 gives rank 0 in both modes, but a rank argument below 1 is still refused."""
    _raises(ValueError, lambda: fraq.recompress(torch.zeros(4, 0), torch.zeros(0, 5), rank=0), r"rank\(=0\) must be at least 1")
