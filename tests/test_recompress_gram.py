"""recompress(gram="auto"): the factored Gram unless clients cancel.

The factored Gram G = C (Y Y^T) C^T rounds like eps ||C||^2 ||Y||^2, the product form
like eps ||C|| ||Y|| ||C Y||. ``auto`` takes the factored form where the two agree and
redoes a batch through H when some matrix's clients cancel. Checked here: which form
ran (``info["product_gram_count"]``), that it is bit for bit the form it claims, and
that the result stays within rounding of the float64 Eckart-Young optimum either way.
"""

import pytest
import torch
from conftest import eps

import fraq
from fraq import _gram
from fraq.reference import optimal_error, relative_error
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64
EXCESS_FACTOR = 64  # error above the optimum, in eps * sqrt(r), as in test_recompress


def _cancelling(batch=(), seed=7):
    """Client 2 undoes client 1 up to 1e-4: ||B A|| is ~1e-4 ||B|| ||A||."""
    Bs, As = lora_clients(120, 90, [6, 6], batch=batch, seed=seed, dtype=F64)
    g = torch.Generator().manual_seed(seed + 1)
    B2 = Bs[0] + 1e-4 * torch.randn(Bs[0].shape, generator=g, dtype=F64)
    B, A = fraq.stack([Bs[0], B2, Bs[1]], [As[0], -As[0], 1e-4 * As[1]])
    return B.float(), A.float()


def _same(a, b):
    assert torch.equal(torch.as_tensor(a.rank), torch.as_tensor(b.rank))
    assert torch.equal(a.B, b.B) and torch.equal(a.A, b.A)


def _near_optimal(B, A, res):
    gap = relative_error(B, A, res.B, res.A) - optimal_error(B, A, res.rank)
    assert (gap <= EXCESS_FACTOR * eps(F32) * B.shape[-1] ** 0.5).all(), gap


@pytest.mark.parametrize("backend", ["householder", "cholesky"])
@pytest.mark.parametrize("mode", [dict(tau=0.9), dict(tau=1.0), dict(rank=4)])
def test_lora_stacks_take_the_factored_gram(backend, mode):
    Bs, As = lora_clients(96, 64, [4, 8, 2], batch=(3,), seed=4, dtype=F32)
    B, A = fraq.stack(Bs, As)
    res = fraq.recompress(B, A, backend=backend, gram="auto", **mode)
    assert res.info["gram"] == "auto" and res.info["product_gram_count"] == 0
    _same(res, fraq.recompress(B, A, backend=backend, gram="factored", **mode))
    _near_optimal(B, A, res)


@pytest.mark.parametrize("backend", ["householder", "cholesky"])
def test_cancelling_clients_go_through_h(backend):
    B, A = _cancelling()
    C = torch.linalg.qr(B.double()).R
    rho2 = C.square().sum() * A.double().square().sum() / (C @ A.double()).square().sum()
    assert rho2 > _gram.CANCEL_LIMIT * 18  # the case is what it claims: far past the limit
    res = fraq.recompress(B, A, tau=0.9, backend=backend, gram="auto")
    assert res.info["product_gram_count"] == 1
    _same(res, fraq.recompress(B, A, tau=0.9, backend=backend, gram="product"))
    _near_optimal(B, A, res)


def test_one_cancelling_matrix_sends_its_batch_through_h():
    Bc, Ac = _cancelling(batch=(1,), seed=3)
    Bs, As = lora_clients(120, 90, [6, 6, 6], batch=(2,), seed=5, dtype=F32)
    Bl, Al = fraq.stack(Bs, As)
    B, A = torch.cat([Bl, Bc]), torch.cat([Al, Ac])
    res = fraq.recompress(B, A, tau=0.9, gram="auto")
    assert res.info["product_gram_count"] == 3
    _same(res, fraq.recompress(B, A, tau=0.9, gram="product"))
    _near_optimal(B, A, res)


def test_rescaled_cancelling_matrix_is_judged_after_rescaling():
    """Out of range (its Gram underflows float32) and cancelling: the slow path scales it
    into range, then finds the cancellation and goes through H."""
    B, A = _cancelling(seed=9)
    B, A = B * 2.0**-60, A * 2.0**-40
    res = fraq.recompress(B, A, tau=0.9, gram="auto")
    assert res.info["rescaled"] == 1 and res.info["product_gram_count"] == 1
    _near_optimal(B, A, res)


def test_the_cancellation_rule():
    """rho^2 = N^2 / ||C Y||_F^2, N = sum_k ||c_k|| ||y_k||, against CANCEL_LIMIT * s, per
    matrix; unchanged when c_k is scaled by t and y_k by 1 / t."""
    s = 4
    C = torch.eye(s, dtype=torch.float64).expand(3, s, s).clone()
    Y = torch.zeros(3, s, 10, dtype=torch.float64)
    Y[0, :, :s] = torch.eye(s)  # rho^2 = 4^2 / 4 = 4 <= 2 s = 8: accepted
    Y[1, 0, 0] = 1.0  # rho^2 = 1 / 1: accepted
    Y[2, 0, 0], Y[2, 1, 0] = 1.0, -1.0
    C[2, 0, 1], C[2, 1, 1] = 1.0, 1e-3  # row 0 of C Y cancels to 0, row 1 is 1e-3: rho^2 ~ 4e6: refused

    def verdict(C, Y):
        coords = _gram.coordinates(C, Y, factored=True)
        g_trace = torch.linalg.eigvalsh(coords.G).sum(-1).numpy()  # recompress reads tr G as the eigenvalues' sum
        return _gram.cancels(_gram.scale_sum(C, Y).numpy().tolist(), g_trace.tolist(), s).tolist()

    assert verdict(C, Y) == [False, False, True]
    t = torch.tensor([2.0**30, 2.0**-30, 3.0, 1.0], dtype=torch.float64)  # the product C Y is unchanged
    assert verdict(C * t, Y / t[:, None]) == [False, False, True]
