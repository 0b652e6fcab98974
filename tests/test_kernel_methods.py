"""FlexLoRA, FedSVD and FedMomentum on FRAQ's kernel (``kernel="fraq"``) against their public
code's formulas, implemented here in float64 on the dense m x n matrix, and against their own
dense path.

Bounds, with u the float32 unit roundoff, c = sqrt(min(m, n)) and sigma_i the float64
singular values of the matrix the method decomposes (first-order, as :func:`fraq.svd`
states them):

- a rank-q truncation P = U_q S_q V_q^T computed by a first-order method from a matrix
  within c u sigma_1 of M differs from the exact one by at most
  ||E|| + sigma_1 (sin theta_U + sin theta_V) <= c u sigma_1 (1 + 2 sigma_1 / g_q) in the
  2-norm, g_q = sigma_q - sigma_{q+1} (Wedin); two computed ones by twice that;
- one singular vector (up to sign): sin <= c u sigma_1 / g_i, g_i its own smallest gap;
  a column sigma_i u_i: ||.|| <= c u sigma_1 (1 + 2 sigma_1 / g_i);
- a product without truncation (all the triplets): ||B'A' - M||_F <= c u N, N the sum over
  the factors' columns and rows of ||b_i|| ||a_i|| (:func:`fraq._gram.scale_sum`);
- without a gap at q the truncation is not unique: each kernel's error above the
  Eckart-Young optimum, in quadrature, is at most 64 u sqrt(r) of ||M||_F (the bound
  tests/test_first_order.py holds the textbook baselines to).
"""

from __future__ import annotations

import math

import pytest
import torch

import fraq
from fraq._gram import scale_sum
from fraq.aggregators import AGGREGATORS, ClientUpdate, get_aggregator
from fraq.methods import MethodSpec
from fraq.reference import relative_error
from fraq.synthetic import lora_clients, spectrum_matrix

F32, F64 = torch.float32, torch.float64
U32 = torch.finfo(F32).eps
KERNEL_METHODS = ("flexlora", "fedsvd", "fedmomentum")


def _norm2(X):
    return float(torch.linalg.matrix_norm(X, ord=2))


def _trunc_bound(S, q, m, n, sides=1):
    """``sides`` x c u sigma_1 (1 + 2 sigma_1 / g_q) (module docstring); inf without a gap."""
    s1 = float(S[0])
    gap = float(S[q - 1] - (S[q] if q < S.shape[0] else 0.0))
    return math.inf if gap <= 0 else sides * math.sqrt(min(m, n)) * U32 * s1 * (1 + 2 * s1 / gap)


def _ups(Bs, As, scales, weights):
    return [ClientUpdate({"q": (b, a)}, scale=s, weight=w) for b, a, s, w in zip(Bs, As, scales, weights)]


def _weights(w):
    w = torch.tensor(w, dtype=F64)
    return (w / w.sum()).tolist()


# ----------------------------------------------------------------------------------------- the option


@pytest.mark.parametrize("name", KERNEL_METHODS)
def test_kernel_is_an_option_of_the_grammar_and_refused_by_name(name):
    spec = MethodSpec.parse(f"{name}:kernel=fraq")
    agg = get_aggregator(spec.name, **spec.kwargs)
    assert agg.kernel == "fraq" and agg.dense_factorization is False
    assert get_aggregator(name).kernel == "dense" and get_aggregator(name).dense_factorization is True
    assert AGGREGATORS[name].kernel_variants[0] == "fraq" and AGGREGATORS[name].dense_factorization is True
    with pytest.raises(ValueError, match=r"kernel\(='qr'\) must be one of \['dense', 'fraq'"):
        get_aggregator(name, kernel="qr")


@pytest.mark.parametrize("name", KERNEL_METHODS)
def test_the_kernel_forms_no_dense_matrix(name):
    """Counted FLOPs (LAPACK included) of ``kernel="fraq"`` grow linearly in d at a fixed stacked
    rank (x2 for twice the d), the dense path's as d^3 (x8): what ``dense_factorization`` says."""
    from benchmarks.measure import count_flops

    def ups(d):
        Bs, As = lora_clients(d, d, [2, 2, 2], seed=0)
        return _ups(Bs, [As[0]] * 3, [2.0] * 3, [1, 1, 1])

    for kernel, grows in (("fraq", 3.0), ("dense", 5.0)):
        agg = get_aggregator(name, kernel=kernel)
        small, big = (count_flops(lambda u=ups(d): agg.aggregate(u)).total for d in (64, 128))
        assert (big < grows * small) is (kernel == "fraq"), (kernel, small, big)


# ----------------------------------------------------------------------------------------- FlexLoRA


def flexlora_formula(Bs, As, scales, weights):
    """baselines.md's FlexLoRA (the public code's, with each client's own scale): the dense
    Delta = sum_k a_k s_k B_k A_k in float64, a full SVD, client k's truncation at r_k with
    every singular value on B, divided by s_k."""
    a = _weights(weights)
    D = sum(ak * sk * (b.double() @ x.double()) for b, x, sk, ak in zip(Bs, As, scales, a))
    U, S, Vh = torch.linalg.svd(D, full_matrices=True)
    return D, S, [(U[:, :r] * S[:r] / s, Vh[:r]) for r, s in zip([b.shape[-1] for b in Bs], scales)]


def test_flexlora_kernel_matches_the_public_formula_and_the_dense_path():
    """Mixed ranks 2, 4, 6, scales and weights: every client's adapter product s_k B'_k A'_k within
    the truncation bound at r_k of the formula's (one computed side) and of the dense path's (two)."""
    m, n, ranks, scales, weights = 40, 32, [2, 4, 6], [2.0, 1.0, 0.5], [3, 1, 2]
    Bs, As = lora_clients(m, n, ranks, seed=7)
    D, S, want = flexlora_formula(Bs, As, scales, weights)
    kern = get_aggregator("flexlora", kernel="fraq").aggregate(_ups(Bs, As, scales, weights))
    dense = get_aggregator("flexlora").aggregate(_ups(Bs, As, scales, weights))
    for k, (r, s) in enumerate(zip(ranks, scales)):
        got, ref = kern.downlinks[k]["q"].start, dense.downlinks[k]["q"].start
        assert got.B.shape == (m, r) and got.A.shape == (r, n) and got.scale == s
        exact = s * want[k][0] @ want[k][1]
        assert _norm2(got.dense() - exact) <= _trunc_bound(S, r, m, n), k
        assert _norm2(got.dense() - ref.dense()) <= _trunc_bound(S, r, m, n, sides=2), k
        assert kern.downlinks[k]["q"].sent[0].shape == dense.downlinks[k]["q"].sent[0].shape


def _tied(m, n, sv, clients, seed=0):
    """Clients whose uniform stack has exactly the spectrum ``sv`` (float64, then float32)."""
    B, A = spectrum_matrix(m, n, torch.tensor(sv, dtype=F64), seed=seed)
    mix = torch.linalg.qr(torch.randn(len(sv), len(sv), generator=torch.Generator().manual_seed(seed), dtype=F64)).Q
    B, A = B @ mix, mix.mT @ A
    w = len(sv) // clients
    return ([(clients * B[:, j * w:(j + 1) * w]).float() for j in range(clients)],
            [A[j * w:(j + 1) * w].contiguous().float() for j in range(clients)])


def test_flexlora_without_a_gap_both_kernels_are_optimal_to_rounding():
    """sigma_4 = sigma_5: the rank-4 truncation is not unique, the two kernels' products may differ
    by O(sigma_4), and each one's error above the optimum, in quadrature, is at rounding level."""
    sv = [5.0, 4.0, 3.0, 2.0, 2.0, 1.0, 0.5, 0.25]
    Bs, As = _tied(36, 30, sv, clients=2)
    Bst, Ast = fraq.stack(Bs, As)
    opt = math.sqrt(sum(x * x for x in sv[4:]) / sum(x * x for x in sv))
    for kernel in ("dense", "fraq"):
        res = get_aggregator("flexlora", kernel=kernel).aggregate(_ups(Bs, As, [1.0, 1.0], [1, 1]))
        f = res.downlinks[0]["q"].start
        err = float(relative_error(Bst, Ast, f.B * f.scale, f.A))
        assert math.sqrt(max(err**2 - opt**2, 0.0)) <= 64 * U32 * math.sqrt(8), kernel


@pytest.mark.parametrize("c", [1e-4, 3e3])
def test_flexlora_kernel_unchanged_by_rescaled_factors(c):
    """B_k c and A_k / c: the same aggregate, the same adapter products (twice the truncation bound)."""
    m, n, ranks = 30, 24, [4, 4]
    Bs, As = lora_clients(m, n, ranks, seed=2)
    _, S, _ = flexlora_formula(Bs, As, [1.0, 1.0], [1, 1])
    agg = get_aggregator("flexlora", kernel="fraq")
    one = agg.aggregate(_ups(Bs, As, [1.0, 1.0], [1, 1]))
    two = agg.aggregate(_ups([b * c for b in Bs], [a / c for a in As], [1.0, 1.0], [1, 1]))
    assert _norm2(one.downlinks[0]["q"].delta() - two.downlinks[0]["q"].delta()) <= _trunc_bound(S, 4, m, n, 2)


def test_flexlora_aggregate_batch_on_the_kernel():
    """The per-module entry the sweeps time: at a fixed rank and by the energy rule, the same rank
    and, where the gap at it is defined, the same product as the dense path's."""
    m, n = 40, 40
    Bs, As = lora_clients(m, n, [4, 4, 4], seed=4, batch=(2,))
    dense, kern = get_aggregator("flexlora"), get_aggregator("flexlora", kernel="fraq")
    for cut in (dict(rank=5), dict(tau=0.9)):
        Bd, Ad, pd = dense.aggregate_batch(Bs, As, **cut)
        Bk, Ak, pk = kern.aggregate_batch(Bs, As, **cut)
        assert torch.equal(torch.as_tensor(pd), torch.as_tensor(pk))
        for i in range(2):
            S = torch.linalg.svdvals(sum(b[i].double() @ a[i].double() for b, a in zip(Bs, As)) / 3)
            q = int(torch.as_tensor(pk).reshape(-1)[i])
            assert _norm2(Bk[i].double() @ Ak[i].double() - Bd[i].double() @ Ad[i].double()) <= \
                _trunc_bound(S, q, m, n, 2)


# ----------------------------------------------------------------------------------------- FedSVD


def reinit_lora(Bs, A, weights):
    """seanie12/fed-svd in float64: the server averages the clients' lora_B (``model="ffa"``, A the
    shared frozen lora_A), then ``misc/utils.py``'s reinit_lora: prod = lora_B @ lora_A,
    V, S, Uh = svd(prod, full_matrices=False), r = lora_A.size(0), lora_A = Uh[:r],
    lora_B = V[:, :r] @ diag(S[:r])."""
    lora_B = sum(w * b.double() for w, b in zip(_weights(weights), Bs))
    prod = lora_B @ A.double()
    V, S, Uh = torch.linalg.svd(prod, full_matrices=False)
    r = A.shape[0]
    return prod, S, Uh[:r], V[:, :r] @ torch.diag(S[:r])


@pytest.mark.parametrize("kernel", ["dense", "fraq"])
@pytest.mark.parametrize("m, n", [(40, 28), (28, 40)])
def test_fedsvd_matches_reinit_lora(kernel, m, n):
    """Clients on one frozen A (as FedSVD's train): the product B'A' is the averaged adapter to
    c u N; each row of A' and column of B' is the code's up to sign within its gap bound; A' has
    orthonormal rows; each client warm-starts from (B', A') at its scale and trains B only."""
    r = 6
    Bs, As = lora_clients(m, n, [r, r, r], seed=9)
    A0, weights = As[0], [5, 2, 3]
    prod, S, ref_A, ref_B = reinit_lora(Bs, A0, weights)
    res = get_aggregator("fedsvd", kernel=kernel).aggregate(_ups(Bs, [A0] * 3, [2.0] * 3, weights))
    f = res.downlinks[1]["q"].start
    assert f.scale == 2.0 and res.ranks["q"] == r and res.downlink_params(0) == (m + n) * r
    B, A = f.B.double(), f.A.double()
    c = math.sqrt(min(m, n))
    Bg = sum(w * b.double() for w, b in zip(_weights(weights), Bs))
    assert torch.linalg.matrix_norm(B @ A - prod) <= c * U32 * float(scale_sum(Bg, A0.double()))
    assert _norm2(A @ A.mT - torch.eye(r, dtype=F64)) <= 16 * math.sqrt(max(m, n)) * U32
    s1 = float(S[0])
    for i in range(r):
        gap = min(float(S[i - 1] - S[i]) if i else math.inf, float(S[i] - S[i + 1]))
        sign = 1.0 if float(A[i] @ ref_A[i]) >= 0 else -1.0
        assert torch.linalg.vector_norm(sign * A[i] - ref_A[i]) <= 2 * c * U32 * s1 / gap, i
        assert torch.linalg.vector_norm(sign * B[:, i] - ref_B[:, i]) <= c * U32 * s1 * (1 + 2 * s1 / gap), i
    assert [get_aggregator("fedsvd").trained_factors(t) for t in (1, 2, 3)] == ["B", "B", "B"]


def test_fedsvd_zero_b_gives_an_orthonormal_a_and_a_zero_b():
    """A first round whose clients' B are all zero: B' = 0 and A' still has orthonormal rows."""
    A0 = lora_clients(20, 16, [4], seed=1)[1][0]
    for kernel in ("dense", "fraq"):
        res = get_aggregator("fedsvd", kernel=kernel).aggregate(_ups([torch.zeros(20, 4)] * 2, [A0] * 2,
                                                                     [1.0, 1.0], [1, 1]))
        f = res.downlinks[0]["q"].start
        assert torch.count_nonzero(f.B) == 0
        assert _norm2(f.A.double() @ f.A.double().mT - torch.eye(4, dtype=F64)) <= 16 * math.sqrt(20) * U32


def test_fedsvd_refuses_mixed_ranks_by_name():
    Bs, As = lora_clients(12, 10, [2, 3], seed=0)
    with pytest.raises(ValueError, match="fedsvd averages factors"):
        get_aggregator("fedsvd").aggregate(_ups(Bs, As, [1.0, 1.0], [1, 1]))


# ----------------------------------------------------------------------------------------- FedMomentum


def fedmomentum_formula(Bs, As, weights, r, tau, seed=0):
    """FedLLM-Factory's alg/fedmomentum.py in float64: Delta W = sum_i w_i B_i A_i (unscaled), a
    randomized SVD with c = K r sketch columns (Y = Delta W Omega, Q = qr(Y), P = Q^T Delta W,
    U~, S, Vt = svd(P), U = Q U~), r_eff the smallest rank whose cumulative S^2 reaches
    tau of the total, r' = min(r, r_eff), new_B = U_r' diag(S^1/2), new_A = diag(S^1/2) Vt_r',
    the residual U_s S_s Vt_s over r'..r_eff."""
    w = _weights(weights)
    dW = sum(wi * (b.double() @ a.double()) for wi, b, a in zip(w, Bs, As))
    c = len(Bs) * r
    Omega = torch.randn(dW.shape[1], c, generator=torch.Generator().manual_seed(seed), dtype=F64)
    Q, _ = torch.linalg.qr(dW @ Omega)
    Ut, S, Vt = torch.linalg.svd(Q.mT @ dW, full_matrices=False)
    U = Q @ Ut
    cum = torch.cumsum(S**2, 0)
    r_eff = int((cum >= tau * cum[-1]).nonzero()[0]) + 1
    rr = min(r, r_eff, S.shape[0])
    root = S[:rr].sqrt()
    return dW, S, U[:, :rr] * root, root[:, None] * Vt[:rr], (U[:, rr:r_eff] * S[rr:r_eff]) @ Vt[rr:r_eff], r_eff


@pytest.mark.parametrize("kernel", ["dense", "fraq"])
def test_fedmomentum_matches_the_formula_at_unit_scale(kernel):
    """s = 1 (where that code's unscaled residual is right): the adapter's factors column by column
    up to sign, its product and the residual within the truncation bounds at r and at r_eff, the
    residual's rank r_eff - r, and the downlink (m + n) r_eff."""
    m, n, r, tau = 36, 30, 4, 0.99
    Bs, As = lora_clients(m, n, [r, r, r], seed=11)
    weights = [1, 2, 3]
    dW, S, new_B, new_A, W_res, r_eff = fedmomentum_formula(Bs, As, weights, r, tau)
    assert r < r_eff < 12  # the test's premise: a residual, and not every triplet
    res = get_aggregator("fedmomentum", tau=tau, kernel=kernel).aggregate(_ups(Bs, As, [1.0] * 3, weights))
    d = res.downlinks[2]["q"]
    (R,) = d.merge
    assert R.rank == r_eff - r and R.scale == 1.0 and res.downlink_params(0) == (m + n) * r_eff
    c, s1 = math.sqrt(min(m, n)), float(S[0])
    assert _norm2(d.start.dense() - new_B @ new_A) <= _trunc_bound(S, r, m, n)
    assert _norm2(R.dense() - W_res) <= _trunc_bound(S, r, m, n) + _trunc_bound(S, r_eff, m, n)
    B = d.start.B.double()
    for i in range(r):
        gap = min(float(S[i - 1] - S[i]) if i else math.inf, float(S[i] - S[i + 1]))
        sign = 1.0 if float(B[:, i] @ new_B[:, i]) >= 0 else -1.0
        # a column sigma_i^(1/2) u_i: the bound of sigma_i u_i scaled by sigma_i^(-1/2)
        bound = c * U32 * s1 * (1 + 2 * s1 / gap) / math.sqrt(float(S[i]))
        assert torch.linalg.vector_norm(sign * B[:, i] - new_B[:, i]) <= bound, i


@pytest.mark.parametrize("kernel", ["dense", "fraq"])
def test_fedmomentum_at_any_scale_and_tau_one_is_the_aggregate(kernel):
    """s = 2.5 and tau = 1: s B'A' + R is the exact aggregate sum_k a_k s B_k A_k to c u N (every
    triplet kept), and s B'A' its best rank-r part within the truncation bound."""
    m, n, r, s = 30, 40, 3, 2.5
    Bs, As = lora_clients(m, n, [r, r, r], seed=13)
    Bst, Ast = fraq.stack([b.double() for b in Bs], [a.double() for a in As], [1, 1, 2], [s] * 3)
    M = Bst @ Ast
    S = torch.linalg.svdvals(M)
    res = get_aggregator("fedmomentum", tau=1.0, kernel=kernel).aggregate(_ups(Bs, As, [s] * 3, [1, 1, 2]))
    d = res.downlinks[0]["q"]
    assert torch.linalg.matrix_norm(d.delta() - M) <= math.sqrt(min(m, n)) * U32 * float(scale_sum(Bst, Ast))
    U, Sv, Vh = torch.linalg.svd(M)
    assert _norm2(d.start.dense() - (U[:, :r] * Sv[:r]) @ Vh[:r]) <= _trunc_bound(S, r, m, n)


@pytest.mark.parametrize("kernel", ["dense", "fraq"])
def test_fedmomentum_mixed_ranks_each_client_its_own_top_r(kernel):
    """Ranks 2, 4, 4 at scales 1, 2, 2, tau = 1: client k's warm start at its scale is the best
    rank-r_k part of the aggregate (truncation bound at r_k), its update the whole aggregate (c u N),
    its downlink (m + n) q with q = 10, the stack's rank."""
    m, n, ranks, scales = 28, 34, [2, 4, 4], [1.0, 2.0, 2.0]
    Bs, As = lora_clients(m, n, ranks, seed=17)
    Bst, Ast = fraq.stack([b.double() for b in Bs], [a.double() for a in As], [1, 1, 1], scales)
    M = Bst @ Ast
    U, S, Vh = torch.linalg.svd(M)
    res = get_aggregator("fedmomentum", tau=1.0, kernel=kernel).aggregate(_ups(Bs, As, scales, [1, 1, 1]))
    assert res.ranks["q"] == (2, 4, 4) and res.downlink_params() == [(m + n) * 10] * 3
    for k, (r, s) in enumerate(zip(ranks, scales)):
        d = res.downlinks[k]["q"]
        assert d.start.B.shape == (m, r) and d.start.scale == s
        assert _norm2(d.start.dense() - (U[:, :r] * S[:r]) @ Vh[:r]) <= _trunc_bound(S, r, m, n), k
        assert torch.linalg.matrix_norm(d.delta() - M) <= math.sqrt(min(m, n)) * U32 * float(scale_sum(Bst, Ast))


def test_fedmomentum_is_not_an_adapter_and_refuses_a_bad_tau():
    assert AGGREGATORS["fedmomentum"].not_an_adapter
    with pytest.raises(ValueError, match=r"tau\(=1.5\) must be in \(0, 1\]"):
        get_aggregator("fedmomentum", tau=1.5)


# ----------------------------------------------------------------------------------------- both kernels, whole models


@pytest.mark.parametrize("name", KERNEL_METHODS)
@pytest.mark.parametrize("batched", [True, False])
def test_kernel_and_dense_agree_on_a_whole_model(name, batched):
    """Four modules (wide, tall, square), three clients on one frozen A per module (FedSVD's
    clients'): every client's update (merged products and warm start) is as far from the exact
    aggregate under both kernels, to twice the rounding of the products, 2 c u N / ||M||_F
    (:func:`benchmarks.measure.kernel_agreement.agreement`, what the tables record)."""
    from benchmarks.measure.kernel_agreement import agreement

    modules = {"a": (20, 30), "b": (30, 20), "c": (24, 24), "d": (9, 33)}
    ups = []
    data = {k: lora_clients(m, n, [4, 4, 4], seed=i) for i, (k, (m, n)) in enumerate(modules.items())}
    for j in range(3):
        ups.append(ClientUpdate({k: (Bs[j], As[0]) for k, (Bs, As) in data.items()}, scale=2.0, weight=j + 1))
    dense = get_aggregator(name).aggregate(ups, batched=batched)
    kern = get_aggregator(name, kernel="fraq").aggregate(ups, batched=batched)
    assert dense.ranks == kern.ranks and dense.downlink_params() == kern.downlink_params()
    a = agreement(ups, dense, kern)
    parts = 2 if dense.downlinks[0]["a"].merge else 1  # the whole update, and the warm start where it differs
    assert a["compared"] == parts * len(modules) and a["modules"] == len(modules) and a["ratio_max"] <= 1.0, a


# ----------------------------------------------------------------------------------------- the federated harness


@pytest.mark.integration
@pytest.mark.parametrize("method", ["flexlora:kernel=fraq", "fedsvd:kernel=fraq", "fedmomentum:kernel=fraq"])
def test_the_harness_runs_the_kernel_variants(method):
    """Two rounds of the tiny task. FedSVD's clients train B alone: every client uploads the A it
    started from, the same for all, and the next round starts from an A with orthonormal rows."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from fraq.federated.round_loop import MethodSetup, run_method, run_round
    from fraq.federated.task import Task
    from test_new_method import tiny_config

    task = Task(tiny_config(), log=lambda *a: None)
    out = run_method(task, method, log=lambda *a: None)
    assert out["skipped"] is None and [r["round"] for r in out["rounds"]] == [1, 2]
    if method.startswith("fedsvd"):
        setup = MethodSetup.make(method, task.config)
        s0 = setup.initial_state(task)
        s1, _, updates = run_round(task, setup, s0, evaluate=False, keep_uploads=True)
        for name in task.backbone.targets:
            A0 = s0.starts[0][name].A
            assert all(torch.equal(u.factors[name][1].to(A0.dtype), A0) for u in updates)
            A1 = s1.starts[0][name].A.double()
            assert _norm2(A1 @ A1.mT - torch.eye(A1.shape[0], dtype=F64)) <= 16 * math.sqrt(A1.shape[1]) * U32
