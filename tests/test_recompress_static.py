"""The static pipeline (fraq._static) against the stepwise one: one host read and a bounded
number of non-view ops per call (a shape group of the whole-model aggregate), the same
ranks and products on the hostile inputs of the energy rule's tests, and every input whose
verdicts fail handed to the stepwise pipeline with the stepwise result.

Tolerances: ranks must be equal. Products agree to the rounding of either computation,
about s eps of the aggregate's norm (eps of float32, s = min(d, r)), times a factor 8 for
the two float32 GEMMs that form each side; where the spectrum has no gap at the cut the
comparison is to the Eckart-Young optimum instead, which neither may exceed by more.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fraq
from benchmarks.measure.host_reads import HostReadCounter
from benchmarks.measure.ops import OpCounter
from fraq._energy import energy_rule, energy_rule_device, gram_budget, noise_floor
from fraq._plan import check_options
from fraq._recompress import recompress_checked
from fraq.reference import optimal_error, relative_error
from fraq.synthetic import lora_clients

F32, F64 = torch.float32, torch.float64
EPS = torch.finfo(F32).eps

OPS_BUDGET = 54
"""Non-view aten ops of one static call at tau (the CUDA configuration: backend="cholesky",
factored Gram), counted on the CPU at one thread, whatever the batch: the shapes are static."""


def _group(m, n, ranks, nb, seed=0):
    Bs, As = lora_clients(m, n, ranks, batch=(nb,), seed=seed)
    return fraq.stack(Bs, As)


def _both(B, A, **kw):
    """(static, stepwise) results of the same call."""
    kw.setdefault("backend", "cholesky")
    return (fraq.recompress(B, A, pipeline="static", **kw), fraq.recompress(B, A, pipeline="stepwise", **kw))


def _assert_same(new, old, B, A, gap_check=True):
    """Equal ranks; products within the module's tolerance, or both near the optimum."""
    assert new.rank_list() == old.rank_list()
    s = min(B.shape[-2], B.shape[-1], A.shape[-1])
    tol = 8 * s * EPS
    Pn, Po = (new.B.double() @ new.A.double()), (old.B.double() @ old.A.double())
    ref = torch.linalg.matrix_norm(B.double() @ A.double()).clamp_min(1e-300)
    if gap_check:
        err = torch.linalg.matrix_norm(Pn - Po) / ref
        assert float(err.max()) <= tol, float(err.max())
    p = new.rank if isinstance(new.rank, torch.Tensor) else torch.tensor(new.rank)
    for res in (new, old):
        excess = relative_error(B, A, res.B, res.A) - optimal_error(B, A, p)
        assert float(excess.max()) <= tol


@pytest.fixture
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("mode", [dict(tau=0.95), dict(rank=8)])
@pytest.mark.parametrize("m,n,ranks,nb", [(768, 768, [8] * 10, 36), (64, 48, [4] * 4, 1), (48, 64, [4] * 4, 3)])
def test_one_host_read_and_the_ops_budget(one_thread, mode, m, n, ranks, nb):
    """A group's call and its ranks on the host: one read, at most OPS_BUDGET non-view ops."""
    B, A = _group(m, n, ranks, nb)
    options = check_options(backend="cholesky", pipeline="static", **mode)
    assert recompress_checked(options, B, A).info["pipeline"] == "static"
    with HostReadCounter() as reads, OpCounter() as counted:
        recompress_checked(options, B, A).rank_list()
    assert reads.total == 1, dict(reads.reads)
    assert counted.non_view_total <= OPS_BUDGET, counted.non_view.most_common()


def test_the_aggregator_reads_no_ranks_of_its_own():
    """Fraq's group step takes the ranks from the call's read (RecompressResult.rank_list)."""
    B, A = _group(64, 48, [4] * 3, 5)
    res = recompress_checked(check_options(tau=0.9, backend="cholesky", pipeline="static"), B, A)
    assert res.host_rank is not None and res.rank_list() == res.rank.tolist()


@pytest.mark.parametrize("mode", [dict(tau=0.5), dict(tau=0.95), dict(tau=0.999), dict(tau=1.0), dict(rank=5)])
@pytest.mark.parametrize("m,n", [(96, 64), (64, 96)])
@pytest.mark.parametrize("batch", [(), (1,), (3,), (2, 3)])
def test_same_ranks_and_products_as_stepwise(mode, m, n, batch):
    Bs, As = lora_clients(m, n, [4, 8, 2], batch=batch, seed=1)
    B, A = fraq.stack(Bs, As)
    new, old = _both(B, A, **mode)
    assert new.info["pipeline"] == "static" and old.info["pipeline"] == "stepwise"
    assert new.B.shape == old.B.shape and new.A.shape == old.A.shape
    assert type(new.rank) is type(old.rank) and type(new.energy) is type(old.energy)
    _assert_same(new, old, B, A)
    torch.testing.assert_close(new.energy, old.energy, rtol=8 * 16 * EPS, atol=0)
    torch.testing.assert_close(new.singular_values, old.singular_values, rtol=0,
                               atol=float(new.singular_values.max()) * 8 * 16 * EPS)


def test_batched_equals_looped():
    B, A = _group(40, 56, [3, 5], 4, seed=2)
    whole = fraq.recompress(B, A, tau=0.9, backend="cholesky", pipeline="static")
    for i in range(4):
        one = fraq.recompress(B[i], A[i], tau=0.9, backend="cholesky", pipeline="static")
        assert one.rank == whole.rank_list()[i] and one.info["pipeline"] == "static"
        p = one.rank
        torch.testing.assert_close(one.B @ one.A, whole.B[i, :, :p] @ whole.A[i, :p], rtol=0,
                                   atol=64 * EPS * float(torch.linalg.matrix_norm(B[i] @ A[i])))


def _two_clients(m, n, r, seed):
    g = torch.Generator().manual_seed(seed)
    f = lambda *s: torch.randn(*s, generator=g, dtype=F64)  # noqa: E731
    return (f(m, r), f(r, n) / n**0.5), (f(m, r), f(r, n) / n**0.5)


@pytest.mark.parametrize("c", [1.0, 1e3, 1e6, 2.0**40, 1e23, 1e24])
@pytest.mark.parametrize("tau", [0.8, 0.99, 1.0])
def test_clients_rescaled_against_each_other(c, tau):
    """(B1 c, A1 / c) and (B2 / c, A2 c): the product does not move. Up to 1e6 the static
    pipeline runs; at 1e23 a Gram of Y's rows leaves float32's range, the verdict fails and
    the stepwise pipeline's result is returned; 2^40 lies at that verdict's edge (||y||^2
    near tiny / eps^2), either pipeline may run, the result must not change."""
    (B1, A1), (B2, A2) = _two_clients(64, 48, 4, 0)
    B, A = fraq.stack([(B1 * c).float(), (B2 / c).float()], [(A1 / c).float(), (A2 * c).float()])
    new, old = _both(B, A, tau=tau)
    if c != 2.0**40:
        assert new.info["pipeline"] == ("static" if c <= 1e6 else "stepwise")
    _assert_same(new, old, B, A)


@pytest.mark.parametrize("decades", [0.0, 4.0, 8.0])
def test_imbalance_inside_one_client(decades):
    g = torch.Generator().manual_seed(0)
    t = torch.logspace(-decades / 2, decades / 2, 8, dtype=F64)
    B = (torch.randn(64, 8, generator=g, dtype=F64) * t).float()
    A = (torch.randn(8, 48, generator=g, dtype=F64) / t[:, None] / 48**0.5).float()
    new, old = _both(B, A, tau=0.95)
    _assert_same(new, old, B, A)


def _flat_tail(d, t, level, seed):
    g = torch.Generator().manual_seed(seed)
    U = torch.linalg.qr(torch.randn(d, t + 1, generator=g, dtype=F64)).Q
    V = torch.linalg.qr(torch.randn(d, t + 1, generator=g, dtype=F64)).Q
    S = torch.full((t + 1,), level, dtype=F64)
    S[0] = 1.0
    return (U * S.sqrt()).float(), (S.sqrt()[:, None] * V.mT).float()


@pytest.mark.parametrize("t,f,tau", [(60, 1.5, 0.99), (90, 4.0, 0.995), (110, 10.0, 0.999), (110, 1.2, 0.9999)])
def test_flat_tail_near_one(t, f, tau):
    """A flat tail holding f (1 - tau) of the energy: the cut lies inside it, no gap, so the
    products are held to the optimum, the ranks to each other (r = t + 1 below D / 2: the
    factored Gram, which the static pipeline serves)."""
    B, A = _flat_tail(256, t, math.sqrt(f * (1 - tau) / t), 0)
    new, old = _both(B, A, tau=tau)
    assert new.info["pipeline"] == "static"
    _assert_same(new, old, B, A, gap_check=False)


@pytest.mark.parametrize("gram", ["auto", "factored"])
def test_cancelling_duplicate_and_rank_zero_clients(gram):
    """Exactly cancelling clients and duplicates (a singular W: the Cholesky verdict fails),
    clients cancelling to 1e-2 (``gram="auto"``: the guard sends them through H), a client
    of rank 0: ranks equal to the stepwise pipeline's, results too."""
    g = torch.Generator().manual_seed(3)
    B1, A1 = torch.randn(64, 8, generator=g), torch.randn(8, 48, generator=g) / 7
    D = 1e-2 * torch.randn(64, 8, generator=g)
    cases = {"cancel": ([B1, -B1], [A1, A1]), "duplicates": ([B1] * 4, [A1] * 4),
             "cancel 1e-2": ([B1, -B1 + D], [A1, A1]),
             "rank 0": ([B1, torch.zeros(64, 0)], [A1, torch.zeros(0, 48)])}
    for name, (Bs, As) in cases.items():
        B, A = fraq.stack(Bs, As)
        new, old = _both(B, A, tau=1.0, gram=gram)
        assert new.rank_list() == old.rank_list(), name
        if new.info["pipeline"] == "stepwise":
            assert torch.equal(new.B, old.B) and torch.equal(new.A, old.A), name
        else:
            _assert_same(new, old, B, A)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("where", ["B", "A"])
def test_non_finite_input_named_as_stepwise(bad, where):
    """A NaN or Inf fails the verdict; the stepwise pipeline names it, with the same message."""
    B, A = _group(40, 24, [3, 3], 3)
    (B if where == "B" else A)[1, 2, 1] = bad
    messages = []
    for pipeline in ("static", "stepwise"):
        with pytest.raises(ValueError) as err:
            fraq.recompress(B, A, tau=0.9, backend="cholesky", pipeline=pipeline)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and where in messages[0]


def test_failed_verdict_returns_the_stepwise_result_exactly():
    """A zero column of B (a client whose B is still zero): W is singular, the static
    pipeline hands the batch on, and the result is the stepwise one bit for bit."""
    B, A = _group(48, 40, [4, 4], 3)
    B = B.clone()
    B[1, :, 0] = 0
    new, old = _both(B, A, tau=0.95)
    assert new.info == old.info and new.info["pipeline"] == "stepwise"
    for a, b in ((new.B, old.B), (new.A, old.A), (new.rank, old.rank), (new.energy, old.energy)):
        assert torch.equal(a, b)


def test_options_where_it_does_not_apply_run_stepwise():
    """float64 data, the product Gram, another backend, r >= d, the host eigensolver."""
    B, A = _group(48, 40, [4, 4], 2)
    cases = [dict(B=B.double(), A=A.double()), dict(gram="product"), dict(backend="householder"),
             dict(B=B[..., :, :8], A=A[..., :8, :8]), dict(eigensolver="host")]
    for case in cases:
        Bc, Ac = case.pop("B", B), case.pop("A", A)
        kw = dict(tau=0.9, backend="cholesky") | case
        assert fraq.recompress(Bc, Ac, pipeline="static", **kw).info["pipeline"] == "stepwise", case


def test_pipeline_checked():
    with pytest.raises(ValueError, match="pipeline"):
        fraq.recompress(torch.ones(4, 2), torch.ones(2, 4), tau=0.9, pipeline="fast")


SPECTRA = np.array([
    [4.0, 2.0, 1.0, 0.5, 0.25, 0.25],
    [0.0] * 6,
    [1.0, 1e-9, 1e-9, 0, 0, 0],
    [1.0, 1e-30, 1e-30, 1e-30, 0, 0],  # below the floor
    [1.0] + [1e-3] * 5,  # a flat tail
    [1e-20] * 6,  # all rounding of a factored Gram
    [3.0, 3.0, 3.0, 3.0, 3.0, 3.0],
])


@pytest.mark.parametrize("tau,rank", [(0.5, None), (0.9, None), (0.99, None), (0.999999, None), (1.0, None),
                                      (None, 1), (None, 4)])
@pytest.mark.parametrize("factored", [False, True])
def test_device_rule_is_the_host_rule(tau, rank, factored):
    """energy_rule_device == noise_floor, gram_budget and energy_rule on the host, count for count."""
    n_sum = np.array([3.0, 1.0, 1.0, 1.0, 2.0, 1e-5, 5.0])
    d, r = 40, 6
    floor = noise_floor(n_sum, d, r, EPS)[:, None]
    lam = np.where(SPECTRA > floor, SPECTRA, 0.0)
    budget = gram_budget(lam.sum(-1), 6, EPS, n_sum if factored else None)
    p, energy, short, q = energy_rule(lam, tau, rank, budget)
    got = energy_rule_device(torch.from_numpy(SPECTRA), torch.from_numpy(n_sum), tau, rank, d=d, r=r, eps=EPS,
                             factored=factored)
    q_d, p_d, p_tau = got.counts.T.numpy()
    assert p_d.tolist() == p.tolist() and q_d.tolist() == q.tolist()
    assert ((p_d > 0) & (p_d < p_tau)).tolist() == short.tolist()
    np.testing.assert_allclose(got.energy.numpy(), energy, rtol=8 * np.finfo(np.float64).eps)
    assert got.keep.sum(-1).tolist() == p.tolist()
    np.testing.assert_array_equal(got.lam.numpy(), np.where(np.arange(6) < q[:, None], lam, 0.0))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(8, 96), n=st.integers(8, 96), ranks=st.lists(st.integers(0, 6), min_size=1, max_size=5),
       nb=st.integers(1, 4), tau=st.sampled_from([0.5, 0.8, 0.95, 0.99, 0.999, 1.0]),
       c=st.sampled_from([1.0, 1e-3, 1e3, 2.0**20]), seed=st.integers(0, 2**16))
def test_same_ranks_on_random_stacks(m, n, ranks, nb, tau, c, seed):
    """Random LoRA stacks, clients of rank 0 included, every other client's factors rescaled
    against each other by c: the static pipeline's ranks are the stepwise pipeline's
    wherever it runs, and both products within the module's tolerance of the optimum."""
    Bs, As = lora_clients(m, n, [max(k, 1) for k in ranks], batch=(nb,), seed=seed)
    Bs = [b[..., :k] * (c if i % 2 else 1.0) for i, (b, k) in enumerate(zip(Bs, ranks))]
    As = [a[..., :k, :] / (c if i % 2 else 1.0) for i, (a, k) in enumerate(zip(As, ranks))]
    B, A = fraq.stack(Bs, As)
    new, old = _both(B, A, tau=tau)
    _assert_same(new, old, B, A, gap_check=False)
