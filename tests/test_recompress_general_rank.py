"""recompress at any number of clients: the path chosen by cost, and the general-rank regime.

With r = sum_k r_k >= d the stacked left factor X (d x r) spans all of R^d: the basis is
the identity, the coordinate space has s = min(d, r) = d dimensions (the paper's
Appendix, general rank), and the cost is linear in r. Checked here against float64
references (a dense SVD of the explicitly formed aggregate, and the analytic FLOP
model's counts): the path is the cheapest the model knows, its counted FLOPs are the
model's, the result is a best rank-p approximation for every exact backend, and the
energy rule, the noise floor, orientation, client order, batching, the range rescue and
cancelling clients behave as they do below d. Tolerances are eps of the dtype times a
stated factor.
"""

import math

import pytest
import torch
from conftest import dense_svd, eps, fro
from hypothesis import given, settings
from hypothesis import strategies as st

import fraq
from benchmarks.measure.flops import count_flops
from benchmarks.measure.methods import default_path
from fraq.backends import EXACT_BACKENDS
from fraq.aggregators import analytic_flops
from fraq.flops import Path, cheapest_path, fraq_flops
from fraq.reference import optimal_error, relative_error
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64
EXCESS_FACTOR = 64  # error above the optimum, in eps * sqrt(r), as in test_recompress
SV_FACTOR = 64  # squared singular values against float64, in eps * sqrt(r) * sigma_1^2

# (m, n, clients of rank 8): r = 8 K below d/2, near D/2, at d, past d, and four times d
REGIMES = [(96, 96, 4), (96, 96, 7), (96, 96, 12), (96, 96, 24), (96, 96, 48),
           (64, 160, 16), (160, 64, 32), (48, 200, 24)]


def _stacked(m, n, K, *, batch=(), seed=0, dtype=F32):
    Bs, As = lora_clients(m, n, [8] * K, batch=batch, seed=seed, dtype=dtype)
    return fraq.stack(Bs, As)


def _excess(B, A, res):
    return relative_error(B, A, res.B, res.A) - optimal_error(B, A, res.rank)


# ---------------------------------------------------------------- the path, by cost


@settings(max_examples=300, deadline=None)
@given(d=st.integers(1, 2048), extra=st.integers(0, 8192), r=st.integers(1, 16384), p=st.integers(0, 64))
def test_the_chosen_path_costs_least(d, extra, r, p):
    """Among every exact path (a basis or, with r >= d, the identity; factored or through
    H), the chosen one has the fewest FLOPs of the model, and it is the identity exactly
    when r >= d."""
    D, p = d + extra, min(p, d, r)
    path = cheapest_path(d, D, r, p)
    assert path.identity == (r >= d)
    cost = fraq_flops(d, D, r, p, factored=path.factored, identity=path.identity)
    for identity in ([False, True] if r >= d else [False]):
        for factored in (False, True):
            assert cost <= fraq_flops(d, D, r, p, factored=factored, identity=identity)


def test_the_paths_of_the_regimes():
    assert cheapest_path(768, 768, 64) == Path(identity=False, factored=True)  # LoRA stacks
    assert cheapest_path(768, 768, 500) == Path(identity=False, factored=False)  # r > D / 2
    assert cheapest_path(768, 3072, 768) == Path(identity=True, factored=True)  # r = d, D = 4 d: Y Y^T is cheaper
    assert cheapest_path(768, 3072, 1536) == Path(identity=True, factored=False)  # r = 2 d
    assert cheapest_path(768, 768, 3072) == Path(identity=True, factored=False)  # r = 4 d
    assert cheapest_path(768, 768, 3072, form="factored") == Path(identity=True, factored=True)
    assert cheapest_path(768, 768, 64, form="product") == Path(identity=False, factored=False)
    with pytest.raises(ValueError, match="form"):
        cheapest_path(768, 768, 64, form="gemm")
    with pytest.raises(ValueError, match=r"identity=True needs r >= d"):
        fraq_flops(768, 768, 64, 8, identity=True)


@pytest.mark.parametrize("m,n,K", REGIMES)
@pytest.mark.parametrize("p", [1, 6])
def test_counted_flops_are_the_chosen_paths(m, n, K, p):
    """What recompress runs, counted op by op, is the model of the path it chose, and
    ``info`` says which path that was."""
    B, A = _stacked(m, n, K, seed=1)
    r, d, D = 8 * K, min(m, n), max(m, n)
    res = fraq.recompress(B, A, rank=p)
    assert (res.info.get("basis") == "identity") == (r >= d)
    assert (res.info["product_gram_count"] == 0) == cheapest_path(d, D, r, p).factored
    counted = count_flops(lambda: fraq.recompress(B, A, rank=p)).total
    assert counted == pytest.approx(analytic_flops("fraq", m, n, r, p, **default_path(m, n, r, p)), rel=1e-6)


@pytest.mark.parametrize("m,n", [(96, 96), (64, 160), (160, 64)])
def test_past_d_the_cost_is_linear_in_r_and_below_the_dense_route(m, n):
    """Past r = d (and the factored form's crossing) each added stacked direction costs
    2 d D FLOPs (one more column of H = X Y), and a call never costs more than forming
    B @ A, its Gram and a d x d eigenproblem: the dense route's work, with an
    eigenproblem in place of its SVD."""
    d, D, p = min(m, n), max(m, n), 5
    counted = {}
    for K in (d // 4, 3 * d // 8, d // 2):  # r = 2d, 3d, 4d: through H (past the factored form's crossing)
        B, A = _stacked(m, n, K, seed=2)
        counted[8 * K] = count_flops(lambda: fraq.recompress(B, A, rank=p)).total
    (r1, c1), (r2, c2), (r3, c3) = sorted(counted.items())
    assert c2 - c1 == pytest.approx(2 * d * D * (r2 - r1), rel=1e-9)
    assert c3 - c2 == pytest.approx(2 * d * D * (r3 - r2), rel=1e-9)
    for r, c in counted.items():
        dense = 2 * d * r * D + 2 * d * d * D + 14 * d**3 / 3 + 2 * p * d * D
        assert c <= dense * (1 + 1e-9) + 1  # counts are rounded to whole FLOPs per call


# ---------------------------------------------------------------- the result, past d


@pytest.mark.parametrize("backend", list(EXACT_BACKENDS))
@pytest.mark.parametrize("m,n,K", [(96, 96, 12), (96, 96, 48), (64, 160, 16), (160, 64, 32)])
@pytest.mark.parametrize("mode", [dict(tau=0.95), dict(tau=0.5), dict(rank=7)])
def test_general_rank_is_optimal_for_every_exact_backend(backend, m, n, K, mode):
    B, A = _stacked(m, n, K, seed=3)
    r, d = 8 * K, min(m, n)
    res = fraq.recompress(B, A, backend=backend, **mode)
    assert res.backend == backend and res.info["basis"] == "identity"
    assert float(_excess(B, A, res)) <= EXCESS_FACTOR * eps(F32) * math.sqrt(r)
    # the spectrum: min(d, r) values, against the float64 SVD of the formed aggregate; a
    # Gram's eigenvalues are accurate to eps * sigma_1^2 (those below its noise floor are 0)
    S = dense_svd(B.double() @ A.double()).S
    assert res.singular_values.shape == (d,)
    tol = SV_FACTOR * eps(F32) * math.sqrt(r) * float(S[0]) ** 2
    assert float((res.singular_values.double().square() - S[:d].square()).abs().max()) <= tol
    # the orthonormal factor: B's columns (m <= n) or A's rows (m > n)
    Q = res.B if m <= n else res.A.mT
    eye = torch.eye(Q.shape[-1], dtype=F64)
    assert float(fro(Q.double().mT @ Q.double() - eye)) <= 16 * eps(F32) * math.sqrt(d) * Q.shape[-1]
    if "tau" in mode:  # the energy rule on the float64 spectrum, unless tau sits within rounding of a step
        energy = (S.square().cumsum(0) / S.square().sum()).tolist()
        margin = 16 * eps(F32) * math.sqrt(r)
        if all(abs(e - mode["tau"]) > margin for e in energy):
            assert res.rank == sum(e < mode["tau"] for e in energy) + 1
        assert float(res.energy) >= mode["tau"] - margin


@pytest.mark.parametrize("dtype", [F32, F64])
def test_tau_one_keeps_the_numerical_rank_past_d(dtype):
    """Twenty copies of the same three clients: r = 480 > d = 96 stacked directions, of
    which 24 are distinct; the rest of the Gram's spectrum is rounding noise, below the
    floor, and tau = 1 keeps exactly the 24."""
    Bs, As = lora_clients(96, 128, [8, 8, 8], seed=4, dtype=dtype)
    B, A = fraq.stack(Bs * 20, As * 20)
    res = fraq.recompress(B, A, tau=1.0)
    assert res.info["basis"] == "identity" and res.rank == 24
    assert res.singular_values.shape == (96,) and bool((res.singular_values[24:] == 0).all())
    assert float(_excess(B, A, res)) <= EXCESS_FACTOR * eps(dtype) * math.sqrt(480)


def test_client_order_does_not_matter_past_d():
    Bs, As = lora_clients(80, 120, [8] * 14, seed=5)
    weights = torch.arange(1, 15, dtype=F64).tolist()
    perm = torch.randperm(14, generator=torch.Generator().manual_seed(0)).tolist()
    a = fraq.recompress(*fraq.stack(Bs, As, weights=weights), tau=0.9)
    b = fraq.recompress(*fraq.stack([Bs[i] for i in perm], [As[i] for i in perm], weights=[weights[i] for i in perm]),
                        tau=0.9)
    assert a.rank == b.rank and a.info["basis"] == b.info["basis"] == "identity"
    scale = float(a.singular_values[0])
    assert float(fro(a.B @ a.A - b.B @ b.A)) <= 64 * eps(F32) * math.sqrt(112) * scale


@pytest.mark.parametrize("batch", [(1,), (3,), (2, 3)])
def test_batched_equals_looped_past_d(batch):
    B, A = _stacked(64, 96, 12, batch=batch, seed=6)
    res = fraq.recompress(B, A, tau=0.9)
    Bf, Af = B.reshape(-1, 64, 96), A.reshape(-1, 96, 96)
    for k, (Bk, Ak) in enumerate(zip(Bf, Af)):
        one = fraq.recompress(Bk, Ak, tau=0.9)
        assert int(res.rank.reshape(-1)[k]) == one.rank
        p = one.rank
        got = res.B.reshape(-1, 64, res.max_rank)[k, :, :p] @ res.A.reshape(-1, res.max_rank, 96)[k, :p]
        assert float(fro(got - one.B @ one.A)) <= 64 * eps(F32) * math.sqrt(96) * float(one.singular_values[0])


@pytest.mark.parametrize("b_scale,a_scale", [(2.0**-50, 2.0**-30), (2.0**40, 2.0**30)])
def test_the_range_rescue_past_d(b_scale, a_scale):
    """Factors near the ends of float32's range take the rescaled path and come out as
    accurate as at unit scale (the promise of fraq._range), with the identity basis too."""
    B, A = _stacked(64, 96, 16, seed=7)
    Bs, As = B * b_scale, A * a_scale  # the Gram under- or overflows float32
    res = fraq.recompress(Bs, As, tau=0.9)
    assert res.info["basis"] == "identity" and res.info["rescaled"] == 1
    assert float(_excess(Bs, As, res)) <= EXCESS_FACTOR * eps(F32) * math.sqrt(128)


def test_cancelling_clients_past_d_stay_accurate():
    """Clients whose updates cancel to 1e-4 of their factors, r = 2 d: the path through H
    (the accurate form) is the cheap one here, so no redo is needed and none is made."""
    Bs, As = lora_clients(48, 72, [8] * 12, seed=8, dtype=F64)
    g = torch.Generator().manual_seed(9)
    B2 = Bs[0] + 1e-4 * torch.randn(Bs[0].shape, generator=g, dtype=F64)
    B, A = fraq.stack([Bs[0], B2, *Bs[1:]], [As[0], -As[0], *[1e-4 * a for a in As[1:]]])
    B, A = B.float(), A.float()
    res = fraq.recompress(B, A, tau=0.9)
    assert res.info["basis"] == "identity" and res.info["product_gram_count"] == 1
    assert float(_excess(B, A, res)) <= EXCESS_FACTOR * eps(F32) * math.sqrt(B.shape[-1])


def test_the_whole_model_aggregator_inherits_the_path():
    """get_aggregator("fraq") runs recompress on its stacks: 40 clients of rank 8 on a
    64 x 96 module (r = 320 > d) merge to a best rank-p approximation of their aggregate."""
    from fraq.aggregators import get_aggregator

    Bs, As = lora_clients(64, 96, [8] * 40, seed=10)
    weights = list(range(1, 41))
    Bg, Ag, p = get_aggregator("fraq", tau=0.9).aggregate_batch(Bs, As, weights=weights)
    B, A = fraq.stack(Bs, As, weights=weights)
    assert float(relative_error(B, A, Bg, Ag) - optimal_error(B, A, p)) <= EXCESS_FACTOR * eps(F32) * math.sqrt(320)


def test_the_guard_holds_on_the_factored_identity_path():
    """A tall 32 x 256 layer at r = d: the identity basis with the factored Gram is the
    cheap path; cancelling clients send it through H, as below d, and it stays accurate."""
    assert cheapest_path(32, 256, 32) == Path(identity=True, factored=True)
    Bs, As = lora_clients(32, 256, [8] * 4, seed=11, dtype=F64)
    g = torch.Generator().manual_seed(12)
    B2 = Bs[0] + 1e-4 * torch.randn(Bs[0].shape, generator=g, dtype=F64)
    B, A = fraq.stack([Bs[0], B2, *Bs[1:3]], [As[0], -As[0], *[1e-4 * a for a in As[1:3]]])
    B, A = B.float(), A.float()
    res = fraq.recompress(B, A, tau=0.9)
    assert res.info["basis"] == "identity" and res.info["product_gram_count"] == 1
    assert float(_excess(B, A, res)) <= EXCESS_FACTOR * eps(F32) * math.sqrt(32)
    plain = fraq.recompress(*_stacked(32, 256, 4, seed=13), tau=0.9)
    assert plain.info["basis"] == "identity" and plain.info["product_gram_count"] == 0


@pytest.mark.parametrize("m,n,K", [(256, 256, 30), (256, 256, 32), (256, 512, 32)])
def test_the_energy_rule_counts_the_energy_below_the_floor(m, n, K):
    """Near r = d a float32 Gram has hundreds of real eigenvalues below its noise floor
    s * eps * lambda_1, together about 0.1% of ||B A||_F^2: the rule's total is the Gram's
    trace, so the rank is the float64 spectrum's and keeps at least tau of the true energy."""
    tau = 0.95
    B, A = _stacked(m, n, K, seed=14)
    res = fraq.recompress(B, A, tau=tau)
    S = dense_svd(B.double() @ A.double()).S
    energy = S.square().cumsum(0) / S.square().sum()
    margin = 16 * eps(F32) * math.sqrt(8 * K)
    assert float(energy[res.rank - 1]) >= tau - margin
    if all(abs(float(e) - tau) > margin for e in energy):
        assert res.rank == int((energy < tau).sum()) + 1
    assert abs(float(res.energy) - float(energy[res.rank - 1])) <= margin
