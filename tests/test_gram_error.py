"""The demo's Gram-based float64 error and optimum against a dense float64 SVD of B @ A."""

from __future__ import annotations

import pytest
import torch

import fraq
from benchmarks.measure.gram_error import gram_errors
from fraq.synthetic import lora_clients

F64 = torch.finfo(torch.float64).eps


def _dense(B, A, Bg, Ag, p):
    M = B.double() @ A.double()
    S = torch.linalg.svdvals(M)
    err = torch.linalg.matrix_norm(M - Bg.double() @ Ag.double()) / torch.linalg.matrix_norm(M)
    tail = torch.stack([S[i, int(q):].square().sum().sqrt() for i, q in enumerate(p.reshape(-1))]).reshape(err.shape)
    return err, tail / S.square().sum(-1).sqrt()


@pytest.mark.parametrize("m,n", [(96, 64), (48, 130)])  # tall and wide
@pytest.mark.parametrize("tau", [0.5, 0.8, 0.95])
def test_matches_a_dense_float64_svd(m, n, tau):
    draws = [lora_clients(m, n, [8, 8, 4], seed=s, dtype=torch.float32) for s in range(3)]  # a batch of 3
    Bs = [torch.stack(k) for k in zip(*(d[0] for d in draws))]
    As = [torch.stack(k) for k in zip(*(d[1] for d in draws))]
    B, A = fraq.stack(Bs, As, weights=[3, 2, 1])
    res = fraq.recompress(B, A, tau=tau)
    rel, opt = gram_errors(B, A, res.B, res.A, res.rank)
    want_rel, want_opt = _dense(B, A, res.B, res.A, res.rank)
    r = B.shape[-1] + res.B.shape[-1]
    # (r + p) eps64 / (2 rel^2) of itself (module docstring), a factor 10 above it
    assert torch.allclose(rel, want_rel, rtol=10 * r * F64 / (2 * want_rel.min() ** 2), atol=0)
    assert torch.allclose(opt, want_opt, rtol=10 * r * F64 / (2 * want_opt.min() ** 2), atol=0)
    assert (rel >= opt * (1 - 1e-6)).all()  # Eckart-Young


def test_full_rank_and_zero_and_shape_errors():
    g = torch.Generator().manual_seed(0)
    B, A = torch.randn(40, 6, generator=g, dtype=torch.float64), torch.randn(6, 30, generator=g, dtype=torch.float64)
    rel, opt = gram_errors(B, A, B, A)  # the aggregate itself: zero error, zero optimum at full width
    assert float(rel) <= 1e3 * F64 ** 0.5 and float(opt) <= 1e3 * F64 ** 0.5  # sqrt of a rounding-level sum
    rel, opt = gram_errors(torch.zeros(5, 2), torch.zeros(2, 4), torch.ones(5, 1), torch.ones(1, 4))
    assert (float(rel), float(opt)) == (1.0, 0.0)
    with pytest.raises(ValueError, match=r"Bg @ Ag must have the shape of B @ A"):
        gram_errors(B, A, B[:-1], A)
